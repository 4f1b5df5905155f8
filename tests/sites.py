"""The local test web site that gridcrawl's tests and benchmarks crawl.

This module owns three things:

* ``Site`` and ``generate_site()``: a deterministic, seeded web site made of
  HTML5 pages ``/``, ``/p/1.html``, ``/p/2.html`` ... with a random link graph
  whose answer is known in advance (``Site.links``). Links are written the
  many ways real pages write them (relative, ``../``, root-relative, absolute
  with the host, with fragments, duplicated) and pages carry links a crawler
  must not follow or must keep out of scope (``mailto:``, ``javascript:``,
  ``http://external.invalid/...``).
* ``reachable()``: the set of paths a correct crawl from ``/`` fetches.
* ``SiteServer``: a real threaded HTTP/1.1 server on 127.0.0.1 that serves a
  ``Site`` with keep-alive, ``Content-Length``, ``HEAD`` and 404s, an optional
  per-request latency, and a record of every request (for politeness and
  concurrency checks). ``redirect()``, ``status_page()`` and ``slow_page()``
  build handlers for ``Site.extra`` (redirects, errors, slow pages). Pages
  given an ``ETag`` (``Site.etags``) or a modification time
  (``Site.modified``) are served with those validators and answer conditional
  requests with ``304 Not Modified`` (RFC 9110 §13.2.2: ``If-None-Match``
  first, ``If-Modified-Since`` only without it); every request records the
  body bytes sent and the conditional headers received (recrawl tests).

Absolute links are stored with the placeholder ``{BASE}`` (``BASE_TOKEN``)
because pages are generated before the server's port is known; the server
replaces it with its own base URL (e.g. ``http://127.0.0.1:41234``) when it
answers.

Everything stays on 127.0.0.0/8: ``external.invalid`` uses the ``.invalid``
top-level domain reserved by RFC 2606 section 2, which never resolves.
"""

from __future__ import annotations

import base64
import collections
import email.utils
import http.server
import random
import socket
import ssl
import socketserver
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

__all__ = [
    "BASE_TOKEN",
    "EXTERNAL_HOST",
    "HTML_TYPE",
    "RequestRecord",
    "Site",
    "SiteServer",
    "generate_site",
    "page_path",
    "reachable",
    "redirect",
    "slow_page",
    "status_page",
]

#: Placeholder in stored bodies (and extra-handler bodies and headers) that the
#: server replaces with its base URL, e.g. ``http://127.0.0.1:41234``.
BASE_TOKEN = b"{BASE}"

#: An out-of-scope host that can never resolve (RFC 2606 reserves ``.invalid``).
EXTERNAL_HOST = "external.invalid"

#: Content type of every generated page.
HTML_TYPE = "text/html; charset=utf-8"

_WORDS = (
    "crawler frontier politeness fetch parse canonical fingerprint robots delay depth "
    "grid manager executor client scheduler queue host page link anchor sitemap "
    "document archive index harvest seed scope revisit freshness duplicate shingle"
).split()


#: Words of its own on every generated page (made of three of :data:`_SYLLABLES`: 64,000 words).
TOPIC_WORDS = 6
_SYLLABLES = ("ka ri to mu se na lo pe vi du go ha ze bo fi ru ne ta wo yu ki sa me po li da "
              "gu hi jo ku la mo ni pa re so tu vo wa xi yo zu be ce di fo ga he ju ke lu ma nu "
              "pi ro si te").split()


def page_path(i: int) -> str:
    """Return the path of generated page number ``i``: ``"/"`` for 0, else ``"/p/{i}.html"``."""
    return "/" if i == 0 else f"/p/{i}.html"


@dataclass
class Site:
    """A web site held in memory, served by ``SiteServer``.

    Fields:
      pages: path (e.g. ``"/p/3.html"``) -> body bytes; may contain ``{BASE}``.
      types: path -> ``Content-Type`` header value; a page missing here is
        served as ``text/html; charset=utf-8``.
      links: path -> internal paths the page links to, each once, in first
        appearance order (the known link graph; mailto:, javascript: and
        external links are not in it).
      extra: path (or full request target with query) -> handler function
        called as ``fn(handler)`` with the live ``BaseHTTPRequestHandler``; it
        must write a whole response, usually via ``handler.respond(...)``.
        ``extra`` wins over ``pages``; a key ending in ``/*`` (``"/item/*"``)
        handles every path directly in that folder. See ``redirect()``,
        ``status_page()``, ``slow_page()``.
    """

    pages: dict[str, bytes] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    links: dict[str, list[str]] = field(default_factory=dict)
    extra: dict[str, Callable] = field(default_factory=dict)
    etags: dict[str, str] = field(default_factory=dict)
    modified: dict[str, float] = field(default_factory=dict)

    def validators(self, path: str) -> dict[str, str]:
        """The validator headers page ``path`` is served with: ``ETag`` (an entity tag from
        ``etags``, quoted) and ``Last-Modified`` (an HTTP-date of ``modified``'s POSIX seconds)."""
        headers = {}
        if path in self.etags:
            headers["ETag"] = self.etags[path]
        if path in self.modified:
            headers["Last-Modified"] = email.utils.formatdate(self.modified[path], usegmt=True)
        return headers


# --------------------------------------------------------------------------- generator


def _href(rng: random.Random, src: str, dst: str) -> str:
    """Return one of the equivalent ways page ``src`` can write a link to ``dst``."""
    if src == "/":
        if dst == "/":
            forms = ["/", "./", "{BASE}/"]
        else:
            name = dst[len("/p/"):]
            forms = [f"p/{name}", dst, f"./p/{name}", "{BASE}" + dst]
    else:  # src is /p/N.html, its directory is /p/
        if dst == "/":
            forms = ["/", "../", "{BASE}/", "../#top"]
        else:
            name = dst[len("/p/"):]
            forms = [name, f"../p/{name}", dst, f"./{name}", "{BASE}" + dst]
    return rng.choice(forms)


def _padding(pool: str, rng: random.Random, n: int) -> str:
    """Return ``n`` characters of filler text cut from ``pool`` at a seeded offset."""
    if n <= 0:
        return ""
    start = rng.randrange(len(pool))
    out = pool[start:start + n]
    while len(out) < n:
        out += " " + pool[: n - len(out) - 1]
    return out[:n]


def _render(
    rng: random.Random,
    i: int,
    path: str,
    targets: list[str],
    page_bytes: int,
    pool: str,
    special: bool,
    topic: str = "",
) -> bytes:
    """Render page ``i`` at ``path`` linking to ``targets`` as HTML5 bytes.

    ``special`` forces every kind of awkward link (fragment, duplicate,
    absolute ``{BASE}`` link, mailto:, javascript:, external host) onto the page;
    other pages get each kind at random.
    """
    title = "Home" if i == 0 else f"Page {i}"
    items: list[str] = []
    for dst in targets:
        href = _href(rng, path, dst)
        if rng.random() < 0.25 and "#" not in href:
            href += f"#s{rng.randrange(1, 4)}"
        items.append(f'<li><a href="{href}">link to {dst}</a></li>')
        if rng.random() < 0.2:  # duplicate link, possibly written another way
            items.append(f'<li><a href="{_href(rng, path, dst)}">again {dst}</a></li>')
    if special and targets:
        dst = targets[0]
        items.append(f'<li><a href="{{BASE}}{dst}">absolute {dst}</a></li>')
        items.append(f'<li><a href="{_href(rng, path, dst)}#frag">fragment {dst}</a></li>')
    extras: list[str] = []
    if special or rng.random() < 0.2:
        extras.append(f'<a href="mailto:webmaster{i}@example.invalid">mail</a>')
    if special or rng.random() < 0.2:
        extras.append('<a href="javascript:void(0)">script</a>')
    if special or rng.random() < 0.3:
        extras.append(f'<a href="http://{EXTERNAL_HOST}/page{i}.html">external</a>')
    head = (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{title}</title>\n</head>\n<body>\n<h1 id=\"top\">{title}</h1>\n"
        + (f'<p id="s0">{topic}</p>\n' if topic else "") +
        '<h2 id="s1">Links</h2>\n<ul>\n' + "\n".join(items) + "\n</ul>\n"
        f'<p id="s2">{" ".join(extras)}</p>\n'
    )
    tail = '</body>\n</html>\n'
    pad_n = page_bytes - len(head) - len(tail) - len('<p id="s3"></p>\n')
    pad = f'<p id="s3">{_padding(pool, rng, pad_n)}</p>\n' if pad_n > 0 else '<p id="s3"></p>\n'
    return (head + pad + tail).encode("utf-8")


def generate_site(
    n_pages: int,
    links_per_page: int = 5,
    seed: int = 0,
    page_bytes: int = 0,
    unreachable: int = 0,
) -> Site:
    """Generate a deterministic site of ``n_pages`` reachable pages.

    Pages are ``/`` and ``/p/1.html`` ... ``/p/{n_pages-1}.html``; every one of
    them is reachable from ``/`` (a random spanning tree: page i is linked from a
    random earlier page, then more random links are added until each page links
    to about ``links_per_page`` distinct pages). ``unreachable`` more pages,
    ``/p/{n_pages}.html`` onward, link into the site but nothing links to them.

    Each page is HTML5 with a ``<title>`` and :data:`TOPIC_WORDS` made-up words of its own
    (pages differing only in numbers would be a template trap); links are written relative
    (``4.html``, ``../p/3.html``, ``./p/2.html``), root-relative, or absolute
    with the ``{BASE}`` host placeholder, sometimes with ``#fragment``s and
    duplicates. Some pages, and always ``/``, also carry a ``mailto:``, a
    ``javascript:`` and an ``http://external.invalid/...`` link.

    Args:
      n_pages: reachable pages including ``/``; at least 1.
      links_per_page: distinct internal links per page (about; tree links may add a few).
      seed: random seed; the same arguments always give an equal ``Site``.
      page_bytes: pad each page with text to about this many bytes (0: no padding).
      unreachable: extra pages nothing links to.

    Returns: a ``Site`` whose ``links`` is the known graph.
    Raises: ValueError if ``n_pages < 1`` or another count is negative.
    """
    if n_pages < 1:
        raise ValueError("n_pages must be at least 1")
    if links_per_page < 0 or page_bytes < 0 or unreachable < 0:
        raise ValueError("links_per_page, page_bytes and unreachable must be >= 0")
    rng = random.Random(seed)
    total = n_pages + unreachable
    paths = [page_path(i) for i in range(total)]
    targets: list[list[int]] = [[] for _ in range(total)]
    # Spanning tree: page i (1 <= i < n_pages) is linked from a random earlier page.
    for i in range(1, n_pages):
        targets[rng.randrange(i)].append(i)
    # More random links among reachable pages (never to the unreachable ones).
    for i in range(total):
        want = min(links_per_page, n_pages - (1 if i < n_pages else 0))
        chosen = set(targets[i])
        tries = 0
        while len(chosen) < want and tries < 20 * (want + 1):
            tries += 1
            j = rng.randrange(n_pages)
            if j != i and j not in chosen:
                chosen.add(j)
                targets[i].append(j)
        rng.shuffle(targets[i])
    pool_rng = random.Random(seed ^ 0x5EED)
    pool = " ".join(pool_rng.choice(_WORDS) for _ in range(4000))
    # Each page has a few words of its own, as real pages do: pages that differ only in their
    # numbers would be a template trap to the crawler (gridcrawl.client.traps).
    topic_rng = random.Random(seed ^ 0x70F1C)
    site = Site()
    for i in range(total):
        dsts = [paths[j] for j in targets[i]]
        topic = " ".join("".join(topic_rng.choice(_SYLLABLES) for _ in range(3)) for _ in range(TOPIC_WORDS))
        site.pages[paths[i]] = _render(rng, i, paths[i], dsts, page_bytes, pool, special=(i == 0), topic=topic)
        site.types[paths[i]] = HTML_TYPE
        site.links[paths[i]] = list(dict.fromkeys(dsts))
    return site


def reachable(site: Site, start: str = "/") -> set[str]:
    """Return the paths reachable from ``start`` by following ``site.links``.

    This is the set of paths a correct crawl from ``start`` fetches (``start``
    included). A linked path with no entry in ``site.links`` is included but not
    expanded.
    """
    seen = {start}
    todo = collections.deque([start])
    while todo:
        for dst in site.links.get(todo.popleft(), ()):
            if dst not in seen:
                seen.add(dst)
                todo.append(dst)
    return seen


# --------------------------------------------------------------------------- extra handlers


def redirect(location: str, status: int = 301) -> Callable:
    """Return a ``Site.extra`` handler answering ``status`` with ``Location: location``.

    ``location`` may contain ``{BASE}``. Status is usually 301, 302, 303, 307 or 308.
    """

    def handle(h: "_Handler") -> None:
        h.respond(status, b"", headers={"Location": location})

    return handle


def status_page(status: int, body: bytes = b"", content_type: str = HTML_TYPE) -> Callable:
    """Return a ``Site.extra`` handler answering ``status`` (e.g. 500, 503, 410) with ``body``."""

    def handle(h: "_Handler") -> None:
        h.respond(status, body, content_type=content_type)

    return handle


def slow_page(seconds: float, body: bytes, content_type: str = HTML_TYPE) -> Callable:
    """Return a ``Site.extra`` handler that sleeps ``seconds`` (on top of the server latency), then answers 200."""

    def handle(h: "_Handler") -> None:
        time.sleep(seconds)
        h.respond(200, body, content_type=content_type)

    return handle


def login_page(body: bytes, login: str, password: str, seen: list) -> Callable:
    """Return a ``Site.extra`` handler serving ``body`` only to a request carrying HTTP Basic
    ``login:password`` (RFC 7617), else ``401`` with ``WWW-Authenticate: Basic
    realm="Intranet"``; it appends ``(path, Authorization header or None)`` to ``seen``."""
    expected = "Basic " + base64.b64encode(f"{login}:{password}".encode()).decode()

    def handle(h: "_Handler") -> None:
        given = h.headers.get("Authorization")
        seen.append((h.path, given))
        if given == expected:
            h.respond(200, body)
        else:
            h.respond(401, b"<html>log in</html>", headers={"WWW-Authenticate": 'Basic realm="Intranet"'})

    return handle


# --------------------------------------------------------------------------- server


@dataclass(frozen=True)
class RequestRecord:
    """One request answered by a ``SiteServer``.

    path: the request target as sent (path plus any query); started/finished:
    ``time.monotonic()`` seconds when the handler began and ended; thread: name
    of the handler thread (one thread per TCP connection, so equal names mean
    a reused keep-alive connection); method: ``GET`` or ``HEAD``; status: the
    status code sent (0 if the handler failed before sending one); body_bytes:
    body bytes written; conditional: the conditional request headers received,
    ``{"if-none-match": ..., "if-modified-since": ...}`` (only those sent).
    """

    path: str
    started: float
    finished: float
    thread: str
    method: str = "GET"
    status: int = 0
    body_bytes: int = 0
    conditional: dict = field(default_factory=dict)


_NOT_FOUND = (
    b"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    b"<title>404 Not Found</title></head><body><h1>Not Found</h1></body></html>\n"
)


class _Handler(http.server.BaseHTTPRequestHandler):
    """Request handler for ``SiteServer``: HTTP/1.1, keep-alive, one write per response."""

    protocol_version = "HTTP/1.1"
    server_version = "gridcrawl-testsite/1"
    sys_version = ""
    wbufsize = 64 * 1024  # buffer the response; handle_one_request flushes once
    disable_nagle_algorithm = True
    timeout = 120  # idle keep-alive connections close after this many seconds

    site_server: "SiteServer"
    _status = 0
    _body_bytes = 0

    def setup(self) -> None:
        super().setup()
        self.site_server = self.server.site_server  # type: ignore[attr-defined]
        self.site_server._opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.site_server._closed(self.connection)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        """Log nothing (the stdlib logs every request to stderr)."""

    def send_response(self, code: int, message: str | None = None) -> None:
        self._status = code
        super().send_response(code, message)

    def do_GET(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def respond(
        self,
        status: int,
        body: bytes = b"",
        content_type: str = HTML_TYPE,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Send a whole response: status, Content-Type, Content-Length, ``headers``, then body.

        ``{BASE}`` in the body and in header values becomes the server's base
        URL. For HEAD the body is left out (Content-Length still counts it).
        """
        base = self.site_server.base_url
        if BASE_TOKEN in body:
            body = body.replace(BASE_TOKEN, base.encode("ascii"))
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value.replace("{BASE}", base))
        self.end_headers()
        if self.command != "HEAD" and body and status != 304:
            self.wfile.write(body)
            self._body_bytes += len(body)

    def _serve(self) -> None:
        srv = self.site_server
        self._status = 0
        self._body_bytes = 0
        started = srv._begin()
        try:
            if srv.latency > 0:
                time.sleep(srv.latency)
            site = srv.site
            target = self.path
            bare = target.split("?", 1)[0].split("#", 1)[0]
            fn = site.extra.get(target) or site.extra.get(bare) or site.extra.get(bare.rsplit("/", 1)[0] + "/*")
            if fn is not None:
                fn(self)
                return
            key = target if target in site.pages else bare
            body = site.pages.get(key)
            if body is None:
                self.respond(404, _NOT_FOUND)
            elif self._not_modified(site, key):
                self.send_response(304)
                for name, value in site.validators(key).items():
                    self.send_header(name, value)
                self.end_headers()
            else:
                self.respond(200, body, content_type=site.types.get(key, HTML_TYPE), headers=site.validators(key))
        finally:
            conditional = {name: self.headers[name] for name in ("if-none-match", "if-modified-since")
                           if self.headers.get(name) is not None}
            srv._end(
                RequestRecord(
                    self.path, started, time.monotonic(), threading.current_thread().name,
                    self.command, self._status, self._body_bytes, conditional,
                )
            )

    def _not_modified(self, site: Site, key: str) -> bool:
        """True if the request's preconditions say the client's copy of page ``key`` is
        current (RFC 9110 §13.2.2): If-None-Match, when sent, decides alone (weak comparison,
        §8.8.3.2); else If-Modified-Since against the page's modification time (whole seconds)."""
        inm = self.headers.get("If-None-Match")
        if inm is not None:
            tag = site.etags.get(key)
            if tag is None:
                return False
            weak = lambda t: t.strip().removeprefix("W/")
            return inm.strip() == "*" or weak(tag) in {weak(t) for t in inm.split(",")}
        ims = self.headers.get("If-Modified-Since")
        if ims is None or key not in site.modified:
            return False
        try:
            since = email.utils.parsedate_to_datetime(ims).timestamp()
        except (TypeError, ValueError):
            return False  # an invalid date is ignored (§13.1.3)
        return int(site.modified[key]) <= since


class _Server(http.server.ThreadingHTTPServer):
    """ThreadingHTTPServer with daemon threads, a long listen queue and quiet errors."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024
    site_server: "SiteServer"

    def server_bind(self) -> None:
        """Bind without http.server's ``socket.getfqdn`` of the address: for any loopback
        address but 127.0.0.1 (which /etc/hosts names) that is a reverse DNS query to the
        machine's DNS server, off this host."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request, client_address) -> None:
        """Keep errors (usually a client hanging up) off stderr; count them instead."""
        self.site_server.errors += 1


class SiteServer:
    """A real threaded HTTP/1.1 server (RFC 9110, RFC 9112) serving a ``Site`` on ``host`` (127.0.0.1).

    Answers GET and HEAD with ``Content-Length`` and keep-alive; unknown paths
    get 404; ``site.extra`` handlers take precedence over ``site.pages``; a query
    string is ignored when the full target is not a page. ``{BASE}`` in bodies is
    replaced with ``base_url`` when served. ``latency`` seconds (may be changed
    while running) are slept before answering each request. Every request is
    recorded in ``requests`` (a list of ``RequestRecord``, guarded by ``lock``).

    Use as ``with SiteServer(site) as srv: ...`` or ``start()``/``stop()``.
    ``stop()`` also closes open keep-alive connections, so later requests fail.

    Args:
      site: the ``Site`` to serve (read live; tests may add pages or extras).
      latency: seconds to sleep before each answer.
      host: address to bind and to name in ``base_url``; keep it in 127.0.0.0/8.
      port: TCP port; 0 (default) picks a free one.
      tls: a server-side ``ssl.SSLContext`` holding a certificate: serve HTTPS (``base_url``
        is ``https://``); None (default): plain HTTP.
    """

    def __init__(self, site: Site, latency: float = 0.0, host: str = "127.0.0.1", port: int = 0,
                 tls: ssl.SSLContext | None = None) -> None:
        self.site = site
        self.tls = tls
        self.latency = latency
        self.host = host
        self.port = port
        self.lock = threading.Lock()
        self.requests: list[RequestRecord] = []
        self.errors = 0
        self._in_flight = 0
        self._peak = 0
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self._base_url: str | None = None

    # -- lifecycle
    def start(self) -> "SiteServer":
        """Bind, start serving in a daemon thread, and return self.

        Raises: RuntimeError if already started; OSError if the port cannot be bound.
        """
        if self._httpd is not None:
            raise RuntimeError("SiteServer already started")
        httpd = _Server((self.host, self.port), _Handler)
        httpd.site_server = self
        if self.tls is not None:  # the handshake runs in accept(): a failed one drops that connection only
            httpd.socket = self.tls.wrap_socket(httpd.socket, server_side=True)
        self.port = httpd.server_address[1]
        self._base_url = f"{'https' if self.tls is not None else 'http'}://{self.host}:{self.port}"
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
            name=f"SiteServer:{self.port}", daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close the listening socket and every open connection. Idempotent."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        with self.lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "SiteServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- addresses
    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` without a trailing slash. Raises RuntimeError before ``start()``."""
        if self._base_url is None:
            raise RuntimeError("SiteServer not started: base_url is unknown")
        return self._base_url

    def url(self, path: str = "/") -> str:
        """Return the absolute URL of ``path`` (which starts with ``/``) on this server."""
        return self.base_url + path

    # -- records
    def count(self, path: str) -> int:
        """Return how many requests had exactly this target (path plus query as sent)."""
        with self.lock:
            return sum(1 for r in self.requests if r.path == path)

    def per_path_counts(self) -> dict[str, int]:
        """Return request target -> number of requests for it."""
        with self.lock:
            return dict(collections.Counter(r.path for r in self.requests))

    def body_bytes(self) -> int:
        """Return the body bytes sent in every recorded response."""
        with self.lock:
            return sum(r.body_bytes for r in self.requests)

    def max_concurrency(self) -> int:
        """Return the peak number of requests in flight at once since start (or ``reset()``)."""
        with self.lock:
            return self._peak

    def reset(self) -> None:
        """Forget recorded requests and the concurrency peak (requests in flight still count)."""
        with self.lock:
            self.requests.clear()
            self._peak = self._in_flight

    # -- internals used by _Handler
    def _begin(self) -> float:
        with self.lock:
            self._in_flight += 1
            if self._in_flight > self._peak:
                self._peak = self._in_flight
        return time.monotonic()

    def _end(self, record: RequestRecord) -> None:
        with self.lock:
            self._in_flight -= 1
            self.requests.append(record)

    def _opened(self, conn: socket.socket) -> None:
        with self.lock:
            self._conns.add(conn)

    def _closed(self, conn: socket.socket) -> None:
        with self.lock:
            self._conns.discard(conn)


class RawServer:
    """A TCP server on 127.0.0.1 that is no HTTP server: to each connection it sends ``first``
    (before reading, as an SSH server speaks first), reads the request, sends ``reply``, and
    closes, with an RST when ``reset`` (as a crashing or overloaded server may). ``connections``
    counts what it accepted; ``close()`` stops it."""

    def __init__(self, first: bytes = b"", reply: bytes = b"", reset: bool = False) -> None:
        self.first, self.reply, self.reset = first, reply, reset
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def url(self, path: str = "/") -> str:
        """The URL of ``path`` on this server."""
        return f"http://127.0.0.1:{self.port}{path}"

    def _serve(self) -> None:
        import struct
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.settimeout(5)
                try:
                    conn.sendall(self.first)
                    conn.recv(65536)  # the request (an SSH server answers it "Invalid SSH identification string")
                    conn.sendall(self.reply)
                    if self.reset:
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
                    else:
                        conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        """Stop listening."""
        self.listener.close()


class Blackhole:
    """A host on ``host`` (an address of 127.0.0.0/8) that accepts TCP connections and never
    answers — a firewall that lets the SYN in, a server stuck before its first byte — keeping
    each connection open and counting them (``accepted``). ``close()`` stops it."""

    def __init__(self, host: str = "127.0.0.3") -> None:
        self.listener = socket.create_server((host, 0))
        self.host, self.port = host, self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(conn)  # held open, never read nor written

    def close(self) -> None:
        """Stop listening and drop every connection held."""
        self.listener.close()
        for conn in self.accepted:
            conn.close()
