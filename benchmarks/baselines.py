"""The two single-process crawlers gridcrawl is measured against (issue 8): serial and 16 threads.

This module owns the baselines of the benchmark suite:

* :func:`crawl_serial`: one loop, one ``requests.Session``: fetch, parse with lxml, queue the
  new links, next;
* :func:`crawl_threaded`: ``threads`` worker threads (16 by default) in one process sharing a
  FIFO frontier (``queue.Queue``) and a seen set (under a lock), each with its own
  ``requests.Session`` (one keep-alive connection per thread).

Both crawl with gridcrawl's own semantics, so that their page counts equal gridcrawl's on the
same site:

* links are extracted with :func:`gridcrawl.executor.parse.parse_page` (``<a href>`` and
  ``<area href>`` resolved against ``<base href>`` or the page URL after redirects, canonical
  URLs from :func:`gridcrawl.urls.canonical_url`, fragments dropped);
* the scope is the seed's host (:func:`gridcrawl.urls.in_scope` on :func:`url_host`, the
  client's default scope, any port, no depth limit);
* a URL is visited once, keyed by its canonical URL (gridcrawl keys by its MD5 fingerprint);
  a redirect's target is not marked visited (gridcrawl records the URL asked for);
* redirects are followed (at most 10); a body is downloaded and parsed only for a status below
  400 and an HTML ``Content-Type`` (``text/html``, ``application/xhtml+xml``), as gridcrawl's
  executor does; other responses count as visited pages without links (bodies not read);
* ``max_pages`` caps the URLs visited (the first ``max_pages`` admitted to the frontier).

By default nothing is stored: the baselines only count. With ``store`` (``--store FILE``) they
store every page fetched as a crawler must, as issue 23's baseline does ("same pages stored"):
one row per page with status below 400 (URL, final URL, status, Content-Type, title, the decoded
text of an HTML page) in a SQLite file (the standard library's :mod:`sqlite3`), written by one
writer thread in transactions of up to :data:`STORE_BATCH` rows. ``python
benchmarks/baselines.py serial|threads SEED [--threads N] [--max-pages N] [--store FILE]
[--json]`` runs one from the command line (the benchmark runner starts them this way, as
processes of their own, to measure their memory).
"""

from __future__ import annotations

import argparse
import collections
import json
import queue
import sqlite3
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

import requests

from gridcrawl.config import tune_gc
from gridcrawl.executor.parse import is_html, parse_page
from gridcrawl.urls import InvalidURL, canonical_url, in_scope, url_host

__all__ = ["CrawlResult", "crawl_serial", "crawl_threaded", "main"]

#: User-Agent of the baselines' requests.
USER_AGENT = "gridcrawl-benchmark-baseline/1"
#: (connect, read) timeouts of one request, seconds.
TIMEOUT = (10.0, 30.0)
#: Redirect hops followed before a fetch fails (gridcrawl's default).
MAX_REDIRECTS = 10
#: Pages written in one transaction at most by the ``--store`` writer.
STORE_BATCH = 100


@dataclass
class CrawlResult:
    """What a baseline crawl did.

    Attributes:
      pages: URLs visited (fetched or attempted), errors and non-HTML included; gridcrawl's
        ``visited_url`` rows.
      documents: URLs fetched successfully (status below 400, no network error); gridcrawl's
        ``document`` rows.
      errors: ``pages - documents``.
      links: links extracted from all pages (before scope and duplicate filtering).
      seconds: wall-clock seconds from the first request to the last page done.
      visited: the canonical URLs visited (left out of the JSON output).
    """

    pages: int = 0
    documents: int = 0
    errors: int = 0
    links: int = 0
    seconds: float = 0.0
    visited: set[str] = field(default_factory=set)

    @property
    def pages_per_second(self) -> float:
        """``pages / seconds`` (0 when no time passed)."""
        return self.pages / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict:
        """The counts as a JSON-ready dict (without ``visited``), plus ``pages_per_second``."""
        out = asdict(self)
        out.pop("visited")
        out["pages_per_second"] = self.pages_per_second
        return out


def _session() -> requests.Session:
    """A new ``requests.Session`` that ignores proxy environment variables."""
    session = requests.Session()
    session.trust_env = False
    session.max_redirects = MAX_REDIRECTS
    session.headers["User-Agent"] = USER_AGENT
    return session


def _visit(session: requests.Session, url: str) -> tuple[bool, list[str], tuple | None]:
    """Fetch ``url`` and, for an HTML page with status below 400, return its canonical links.

    Returns ``(ok, links, page)``: ``ok`` is False on a network error or a status of 400 or
    more; ``page`` is ``(url, final_url, status, content_type, title, text)`` when ``ok``
    (``title`` and ``text`` None for a page that is not HTML), else None. Never raises for
    anything the server sends.
    """
    try:
        with session.get(url, timeout=TIMEOUT, stream=True) as resp:
            if resp.status_code >= 400:
                return False, [], None
            content_type = resp.headers.get("Content-Type")
            if not is_html(content_type):  # gridcrawl parses only HTML (no Content-Type: not parsed)
                return True, [], (url, resp.url, resp.status_code, content_type, None, None)
            body = resp.content
            final_url, status = resp.url, resp.status_code
    except (requests.RequestException, OSError):
        return False, [], None
    page = parse_page(body, final_url, content_type)
    return True, [link.url for link in page.links], (url, final_url, status, content_type, page.title, page.decoded)


class _Store:
    """The pages of a crawl written to a SQLite file by one writer thread (``--store``).

    :meth:`put` queues a page (as :func:`_visit` returns it; None is ignored); the writer
    inserts what is queued in transactions of up to :data:`STORE_BATCH` rows; :meth:`close`
    writes the rest and returns. The table: ``document(url PRIMARY KEY, final_url, status,
    content_type, title, content)``.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.pages: queue.Queue = queue.Queue()
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE IF NOT EXISTS document (url TEXT PRIMARY KEY, final_url TEXT, status INTEGER, "
                       "content_type TEXT, title TEXT, content TEXT)")
        self.writer = threading.Thread(target=self._write, name="baseline-store", daemon=True)
        self.writer.start()

    def put(self, page: tuple | None) -> None:
        """Queue ``page`` for writing (None: nothing to store)."""
        if page is not None:
            self.pages.put(page)

    def close(self) -> None:
        """Write every queued page, then stop the writer."""
        self.pages.put(None)
        self.writer.join()

    def _write(self) -> None:
        db = sqlite3.connect(self.path)
        try:
            done = False
            while not done:
                batch = [self.pages.get()]
                while len(batch) < STORE_BATCH and not self.pages.empty():
                    batch.append(self.pages.get())
                if None in batch:
                    done = True
                    batch = [page for page in batch if page is not None]
                with db:
                    db.executemany("INSERT OR IGNORE INTO document VALUES (?, ?, ?, ?, ?, ?)", batch)
        finally:
            db.close()


class _Frontier:
    """Seen set, scope and the ``max_pages`` cap shared by the workers of one crawl."""

    def __init__(self, seed: str, max_pages: int) -> None:
        self.seed = canonical_url(seed)
        self.hosts = [url_host(self.seed)]
        self.max_pages = max_pages
        self.seen: set[str] = {self.seed}
        self.lock = threading.Lock()

    def admit(self, links: list[str]) -> list[str]:
        """Return the links to queue: in scope, never seen, within ``max_pages``; mark them seen."""
        fresh = []
        with self.lock:
            for url in links:
                if url in self.seen:
                    continue
                if self.max_pages and len(self.seen) >= self.max_pages:
                    break
                if not in_scope(url_host(url), self.hosts):
                    continue
                self.seen.add(url)
                fresh.append(url)
        return fresh


def crawl_serial(seed: str, max_pages: int = 0, store: str | None = None) -> CrawlResult:
    """Crawl from ``seed`` with one loop and one ``requests.Session`` (breadth-first).

    Args:
      seed: an absolute http(s) URL; its host is the scope.
      max_pages: stop after visiting this many URLs (0: no limit).
      store: a SQLite file to store the pages fetched in (:class:`_Store`); None: store nothing.
    Returns: a :class:`CrawlResult`.
    Raises: :class:`gridcrawl.urls.InvalidURL` if ``seed`` cannot be crawled.
    """
    frontier = _Frontier(seed, max_pages)
    result = CrawlResult()
    todo = collections.deque([frontier.seed])
    session = _session()
    started = time.perf_counter()
    pages = _Store(store) if store else None
    try:
        while todo:
            url = todo.popleft()
            ok, links, page = _visit(session, url)
            if pages is not None:
                pages.put(page)
            result.pages += 1
            result.documents += ok
            result.links += len(links)
            result.visited.add(url)
            todo.extend(frontier.admit(links))
    finally:
        session.close()
        if pages is not None:
            pages.close()
    result.seconds = time.perf_counter() - started
    result.errors = result.pages - result.documents
    return result


def crawl_threaded(seed: str, threads: int = 16, max_pages: int = 0, store: str | None = None) -> CrawlResult:
    """Crawl from ``seed`` with ``threads`` worker threads in this process.

    The workers share a FIFO frontier (``queue.Queue``) and the seen set (under a lock); each
    has its own ``requests.Session``. The crawl ends when the frontier is empty and no worker
    is busy (``Queue.join``).

    Args:
      seed: an absolute http(s) URL; its host is the scope.
      threads: worker threads (at least 1).
      max_pages: stop after visiting this many URLs (0: no limit).
      store: a SQLite file to store the pages fetched in (:class:`_Store`); None: store nothing.
    Returns: a :class:`CrawlResult`.
    Raises: ValueError if ``threads < 1``; :class:`gridcrawl.urls.InvalidURL` for a bad seed.
    """
    if threads < 1:
        raise ValueError("threads must be at least 1")
    frontier = _Frontier(seed, max_pages)
    result = CrawlResult()
    todo: queue.Queue = queue.Queue()
    count_lock = threading.Lock()
    pages = _Store(store) if store else None

    def worker() -> None:
        session = _session()
        try:
            while True:
                url = todo.get()
                if url is None:
                    todo.task_done()
                    return
                try:
                    ok, links, page = _visit(session, url)
                    if pages is not None:
                        pages.put(page)
                    for new in frontier.admit(links):
                        todo.put(new)
                    with count_lock:
                        result.pages += 1
                        result.documents += ok
                        result.links += len(links)
                        result.visited.add(url)
                finally:
                    todo.task_done()
        finally:
            session.close()

    workers = [threading.Thread(target=worker, name=f"baseline-{i + 1}", daemon=True) for i in range(threads)]
    started = time.perf_counter()
    todo.put(frontier.seed)
    for w in workers:
        w.start()
    todo.join()
    if pages is not None:
        pages.close()
    result.seconds = time.perf_counter() - started
    for _ in workers:
        todo.put(None)
    for w in workers:
        w.join()
    result.errors = result.pages - result.documents
    return result


def main(argv: list[str] | None = None) -> int:
    """Command line: run one baseline and print its counts (a JSON line with ``--json``)."""
    ap = argparse.ArgumentParser(description="Single-process baseline crawlers (serial, threads).")
    ap.add_argument("mode", choices=["serial", "threads"])
    ap.add_argument("seed")
    ap.add_argument("--threads", type=int, default=16, help="worker threads of 'threads' (default 16)")
    ap.add_argument("--max-pages", type=int, default=0, help="stop after this many pages (0: no limit)")
    ap.add_argument("--store", metavar="FILE", help="store the pages fetched in this SQLite file (default: count only)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    tune_gc()  # the same garbage-collector settings as gridcrawl's programs: a fair comparison
    try:
        if args.mode == "serial":
            res = crawl_serial(args.seed, args.max_pages, args.store)
        else:
            res = crawl_threaded(args.seed, args.threads, args.max_pages, args.store)
    except (InvalidURL, ValueError, sqlite3.Error) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(res.to_json()))
    else:
        print(f"{args.mode}: {res.pages} pages ({res.documents} documents, {res.errors} errors) in "
              f"{res.seconds:.2f} s = {res.pages_per_second:.1f} pages/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
