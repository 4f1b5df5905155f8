"""The benchmark's web sites, each served on 127.0.0.1 by a process of its own.

This module owns how the benchmark serves the sites it crawls, so that the server never shares
a Python interpreter (and its GIL) with a crawler being measured:

* :class:`SiteSpec`: a generated site (``tests/sites.py``'s ``generate_site``: pages, bytes
  per page, links per page, seed) plus a per-request latency in seconds;
* :func:`serve_site`: serves a :class:`SiteSpec`. Without latency the pages are written to a
  temporary directory (``{BASE}`` replaced by the final base URL) and served by nginx
  (``tests/docsite.py``'s ``serve_python_docs`` with that directory as root): fast, written in
  C, no Python in the serving path. With latency (or when nginx is missing) ``SiteServer``
  (tests/sites.py, a threaded HTTP/1.1 server that sleeps ``latency`` seconds before every
  answer) runs in a child Python process started from this file;
* :func:`serve_docs`: the Python documentation (Debian's python3-doc) via nginx, or with a
  latency via ``SiteServer`` (the files read into memory).

Everything listens on 127.0.0.1 only. ``python benchmarks/servers.py --pages N --latency S``
serves a generated site with ``SiteServer`` until its standard input closes (this is the
child process :func:`serve_site` starts); it prints the base URL on its first output line.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

import docsite  # noqa: E402  (tests/docsite.py)
from sites import Site, SiteServer, generate_site, reachable  # noqa: E402  (tests/sites.py)

__all__ = ["Served", "SiteSpec", "serve_docs", "serve_site", "main"]


@dataclass(frozen=True)
class SiteSpec:
    """A generated benchmark site.

    Attributes:
      pages: reachable pages including ``/`` (all of them are reachable).
      links: distinct internal links per page (about; plus duplicates written other ways,
        fragments, and a few mailto:/javascript:/external links).
      page_bytes: bytes per page (padding text added up to this size).
      seed: random seed of the generator (same spec, same site).
      latency: seconds the server sleeps before answering each request (0: none).
    """

    pages: int = 2000
    links: int = 300
    page_bytes: int = 80_000
    seed: int = 0
    latency: float = 0.0

    def generate(self) -> Site:
        """Build the site in memory (``generate_site``); takes about 1 s per 1,000 docs-like pages."""
        return generate_site(self.pages, links_per_page=self.links, seed=self.seed, page_bytes=self.page_bytes)

    def describe(self) -> str:
        """One line for tables, e.g. ``2000 pages × 80 KB, 300 links/page, 50 ms latency``."""
        latency = f"{self.latency * 1000:g} ms latency" if self.latency else "no added latency"
        return f"{self.pages} pages × {self.page_bytes / 1000:g} KB, {self.links} links/page, {latency}"


@dataclass
class Served:
    """A running site: ``base_url`` (``http://127.0.0.1:PORT``, no trailing slash), ``seed_url``
    (the page to start crawling from), ``server`` (what serves it: ``nginx`` or ``SiteServer``),
    ``expected_pages`` (the reachable URL count a whole-site crawl must visit, or None when not
    known in advance), ``pid`` of the server process."""

    base_url: str
    seed_url: str
    server: str
    expected_pages: int | None
    pid: int | None = None


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nginx_available() -> bool:
    """True when tests/docsite.py's nginx binary exists and is executable."""
    return os.path.isfile(docsite.NGINX) and os.access(docsite.NGINX, os.X_OK)


def write_site(site: Site, root: Path, base_url: str) -> None:
    """Write every page of ``site`` under ``root`` (``/`` as ``index.html``), ``{BASE}`` → ``base_url``.

    Raises: ValueError if the site has ``extra`` handlers (they cannot be served statically).
    """
    if site.extra:
        raise ValueError("a site with extra handlers cannot be served by nginx")
    base = base_url.encode("ascii")
    for path, body in site.pages.items():
        rel = "index.html" if path.endswith("/") else path.lstrip("/")
        if path.endswith("/") and path != "/":
            rel = path.lstrip("/") + "index.html"
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body.replace(b"{BASE}", base))


@contextlib.contextmanager
def _serve_static(site: Site) -> Iterator[tuple[str, int | None]]:
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    root = Path(tempfile.mkdtemp(prefix="gridcrawl-bench-site-"))
    try:
        write_site(site, root, base_url)
        with docsite.serve_python_docs(port, root=str(root)) as url:
            yield url, None
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def _serve_threaded(spec: SiteSpec, timeout: float = 120.0) -> Iterator[tuple[str, int]]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--pages", str(spec.pages), "--links", str(spec.links),
           "--page-bytes", str(spec.page_bytes), "--seed", str(spec.seed), "--latency", str(spec.latency)]
    with _serve_child(cmd, timeout) as served:
        yield served


@contextlib.contextmanager
def _serve_child(cmd: list[str], timeout: float = 120.0) -> Iterator[tuple[str, int]]:
    """Run ``cmd`` (this file's :func:`main`) until the context ends; yield (base URL, pid)."""
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout
        line = proc.stdout.readline().strip()
        if not line.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"site server did not start (exit status {proc.poll()}, said {line!r})")
        if time.monotonic() > deadline:  # pragma: no cover - readline has no timeout; informative only
            raise RuntimeError("site server took too long to start")
        yield line, proc.pid
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def serve_site(spec: SiteSpec, prefer_nginx: bool = True) -> Iterator[Served]:
    """Serve a generated site on 127.0.0.1 from another process; yield a :class:`Served`.

    nginx serves it when ``spec.latency == 0``, ``prefer_nginx`` and nginx is installed;
    otherwise ``SiteServer`` in a child Python process (``latency`` slept before each answer).
    The site is generated here too, to know the reachable page count
    (``Served.expected_pages``). Everything is stopped and removed on exit.

    Raises: RuntimeError if the server does not start.
    """
    site = spec.generate()
    expected = len(reachable(site))
    if spec.latency == 0 and prefer_nginx and nginx_available():
        with _serve_static(site) as (url, pid):
            del site
            yield Served(url, url + "/", "nginx", expected, pid)
    else:
        del site
        with _serve_threaded(spec) as (url, pid):
            yield Served(url, url + "/", "SiteServer", expected, pid)


def docs_available() -> str | None:
    """Why the Python docs cannot be served (nginx or python3-doc missing), or None if they can."""
    return docsite.docs_available()


@contextlib.contextmanager
def serve_docs(latency: float = 0.0) -> Iterator[Served]:
    """Serve the Python HTML docs (``/usr/share/doc/python3-doc/html``); yield a :class:`Served`
    whose seed is ``/index.html`` (expected page count unknown: None). Without ``latency``
    nginx serves them; with it (seconds slept before each answer) ``SiteServer`` in a child
    Python process, the files read into memory (:func:`docs_site`).

    Raises: RuntimeError if nginx or the docs are missing or the server does not start.
    """
    if latency <= 0:
        with docsite.serve_python_docs() as url:
            yield Served(url, url + "/index.html", "nginx", None)
        return
    cmd = [sys.executable, str(Path(__file__).resolve()), "--docs", docsite.DOCS_ROOT, "--latency", str(latency)]
    with _serve_child(cmd) as (url, pid):
        yield Served(url, url + "/index.html", "SiteServer", None, pid)


def docs_site(root: str) -> Site:
    """Every file under ``root`` as a :class:`Site` (path -> bytes, ``Content-Type`` from the
    file name; a folder's ``index.html`` also under the folder's path), as nginx serves them."""
    import mimetypes
    site = Site()
    base = Path(root)
    for path in sorted(base.rglob("*")):
        if not path.is_file():
            continue
        rel = "/" + path.relative_to(base).as_posix()
        site.pages[rel] = path.read_bytes()
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        site.types[rel] = kind + ("; charset=utf-8" if kind.startswith("text/") else "")
        if path.name == "index.html":
            folder = rel[: -len("index.html")]
            site.pages[folder], site.types[folder] = site.pages[rel], site.types[rel]
    return site


def main(argv: list[str] | None = None) -> int:
    """Serve a generated site with ``SiteServer`` until standard input closes; print its URL first."""
    ap = argparse.ArgumentParser(description="Serve a generated benchmark site with SiteServer on 127.0.0.1.")
    ap.add_argument("--pages", type=int, default=SiteSpec.pages)
    ap.add_argument("--links", type=int, default=SiteSpec.links)
    ap.add_argument("--page-bytes", type=int, default=SiteSpec.page_bytes)
    ap.add_argument("--seed", type=int, default=SiteSpec.seed)
    ap.add_argument("--latency", type=float, default=0.0, help="seconds slept before each answer")
    ap.add_argument("--port", type=int, default=0, help="TCP port (0: a free one)")
    ap.add_argument("--docs", metavar="ROOT", help="serve the files under ROOT (docs_site) instead of a generated site")
    args = ap.parse_args(argv)
    spec = SiteSpec(args.pages, args.links, args.page_bytes, args.seed, args.latency)
    site = docs_site(args.docs) if args.docs else spec.generate()
    server = SiteServer(site, latency=spec.latency, port=args.port).start()
    print(server.base_url, flush=True)
    try:
        while sys.stdin.read(4096):  # returns "" when the parent closes the pipe (or dies)
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
