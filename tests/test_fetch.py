"""Tests of the executor's fetcher (gridcrawl.executor.fetch) against a real local HTTP server.

The server is a threaded ``http.server`` on 127.0.0.1 started once for this module; each path
plays one kind of site: plain pages, errors, redirect chains and loops, a server that trickles
its body or its headers, a gzip bomb, oversized pages, a PDF, binary bytes labelled text/html,
and a 429 with Retry-After. The server records every request path it receives, so a test can
check that a request refused by the hop check was never sent.
"""

from __future__ import annotations

import gzip
import socket
import sys
import threading
import time
import zlib
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
import pytest

from gridcrawl.executor.fetch import ErrorKind, Fetcher, FetchResult, parse_retry_after
from sites import RawServer

UA = "gridcrawl-test/0.1 (+http://127.0.0.1/)"
MiB = 1024 * 1024
PAGE = b"<!doctype html><html><head><title>t</title></head><body><a href='/x'>x</a></body></html>"
PDF = b"%PDF-1.4\n" + bytes(range(256)) * 20
BINARY = bytes((i * 131 + 7) % 256 for i in range(4096))
BIG = b"<html>" + b"a" * (20 * MiB)


def _make_bomb(size: int = 200 * MiB) -> bytes:
    """gzip of ``size`` zero bytes, built in 1 MiB steps so the test never holds the plain text."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MiB)
    parts = [comp.compress(zeros) for _ in range(size // MiB)]
    parts.append(comp.flush())
    return b"".join(parts)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def _send(self, status: int, body: bytes, ctype: str = "text/html; charset=utf-8", extra=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str, status: int = 302) -> None:
        self._send(status, b"", extra={"Location": location})

    def do_GET(self) -> None:  # noqa: C901 - one branch per kind of site
        srv = self.server
        path = self.path
        with srv.lock:
            srv.seen.append(path)
        try:
            if path == "/page":
                self._send(200, PAGE)
            elif path == "/page-nolength":  # HTTP/1.1 chunked would need framing; close instead
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(PAGE)
                self.close_connection = True
            elif path == "/missing":
                self._send(404, b"<html>not found</html>")
            elif path.startswith("/chain/"):
                n = int(path.rsplit("/", 1)[1])
                if n == 0:
                    self._send(200, PAGE)
                else:  # relative Location, resolved against the current URL
                    self._redirect(str(n - 1), status=(301, 302, 303, 307, 308)[n % 5])
            elif path == "/loop/a":
                self._redirect("/loop/b")
            elif path == "/loop/b":
                self._redirect(f"http://127.0.0.1:{srv.server_port}/loop/a")
            elif path == "/to-latin1":  # a legacy file name in Latin-1 bytes, not UTF-8
                self._redirect("/files/r\xe9sum\xe9.html")  # (send_header writes Latin-1: the byte E9)
            elif path == "/to-utf8":  # UTF-8 bytes
                self._redirect("/files/caf\xc3\xa9.html")
            elif path.startswith("/files/"):
                self._send(200, path.encode())
            elif path == "/to-bad-ipv6":  # a Location urljoin cannot parse
                self._redirect("http://[::1")
            elif path == "/to-long":  # a Location longer than any URL a crawl keeps
                self._redirect("/" + "a" * 3000)
            elif path == "/trickle":
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.flush()
                for _ in range(50):  # at most 10 s, then give up on a client that never left
                    self.wfile.write(b"a")
                    self.wfile.flush()
                    time.sleep(0.2)
                self.close_connection = True
            elif path == "/slow-headers":
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                self.wfile.flush()
                for i in range(50):
                    self.wfile.write(f"X-Slow-{i}: 1\r\n".encode())
                    self.wfile.flush()
                    time.sleep(0.2)
                self.close_connection = True
            elif path == "/bomb":
                self._send(200, srv.bomb, extra={"Content-Encoding": "gzip"})
            elif path == "/gzip-page":
                self._send(200, gzip.compress(PAGE), extra={"Content-Encoding": "gzip"})
            elif path == "/deflate-page":
                self._send(200, zlib.compress(PAGE), extra={"Content-Encoding": "deflate"})
            elif path in ("/gzip-trailing", "/deflate-trailing"):  # the stream, then 32 MiB of other bytes
                coding = path[1:].split("-")[0]
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Encoding", coding)
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(gzip.compress(PAGE) if coding == "gzip" else zlib.compress(PAGE))
                self.close_connection = True
                sent = 0
                try:
                    for _ in range(512):
                        self.wfile.write(b"J" * 65536)
                        sent += 65536
                except OSError:
                    pass
                with srv.lock:
                    srv.trailing_sent = sent
            elif path == "/raw-deflate-page":
                c = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
                self._send(200, c.compress(PAGE) + c.flush(), extra={"Content-Encoding": "deflate"})
            elif path == "/big":
                self._send(200, BIG)
            elif path == "/big-nolength":
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Connection", "close")
                self.end_headers()
                for start in range(0, len(BIG), MiB):
                    self.wfile.write(BIG[start : start + MiB])
                self.close_connection = True
            elif path == "/doc.pdf":
                self._send(200, PDF, ctype="application/pdf")
            elif path == "/binary.html":
                self._send(200, BINARY, ctype="text/html")
            elif path == "/busy":
                self._send(429, b"slow down", ctype="text/plain", extra={"Retry-After": "3"})
            elif path == "/busy-for-a-day":
                self._send(429, b"come back tomorrow", ctype="text/plain", extra={"Retry-After": "86400"})
            elif path == "/unavailable-date":
                when = formatdate(time.time() + 120, usegmt=True)
                self._send(503, b"", ctype="text/plain", extra={"Retry-After": when})
            elif path.startswith("/unavailable-date-skewed/"):  # a server whose clock is this one's + N s
                server_now = time.time() + float(path.rsplit("/", 1)[1])
                self.wfile.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                 b"Date: %s\r\nRetry-After: %s\r\n\r\n"
                                 % (formatdate(server_now, usegmt=True).encode(),
                                    formatdate(server_now + 120, usegmt=True).encode()))
                self.close_connection = True
            elif path == "/hang-up":  # closes the connection without a word
                self.close_connection = True
            elif path == "/many-headers":  # a header of 1,500 fields
                self.wfile.write(b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(1500))
                                 + b"Content-Length: 0\r\n\r\n")
                self.close_connection = True
            elif path == "/cookie-jar":  # 150 fields, as Microsoft 365's and Akamai-served pages send
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                                 + b"".join(b"Set-Cookie: c%d=%s; Path=/\r\n" % (i, b"v" * 40) for i in range(150))
                                 + b"Content-Length: 14\r\n\r\n<p>cookies</p>")
                self.close_connection = True
            elif path == "/long-header":  # one field of 70,000 bytes
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Long: " + b"v" * 70000 + b"\r\nContent-Length: 0\r\n\r\n")
                self.close_connection = True
            elif path == "/not-http":
                self.wfile.write(b"HELLO THERE\r\n\r\n")
                self.close_connection = True
            elif path == "/short-body":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 1000\r\n\r\n<html>abc")
                self.close_connection = True
            elif path in ("/huge-length.html", "/huge-length.pdf"):  # a length no 64-bit integer holds
                ctype = b"text/html" if path.endswith(".html") else b"application/pdf"
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: " + ctype
                                 + b"\r\nContent-Length: 99999999999999999999\r\n\r\n<html>abc")
                self.close_connection = True
            elif path == "/silent":  # headers never come
                time.sleep(3)
                self.close_connection = True
            elif path == "/hop/start":
                self._redirect("/hop/secret")
            elif path == "/hop/secret":
                self._send(200, PAGE)
            else:
                self._send(404, b"no such test path", ctype="text/plain")
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True  # the fetcher hung up on us, as it should


class _QuietServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that keeps a client hanging up (what the fetcher does to a page
    over its limits) off stderr, and reports any other error as usual."""

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def server():
    """A threaded HTTP server on 127.0.0.1 with a free port; yields (base URL, server)."""
    srv = _QuietServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.lock = threading.Lock()
    srv.seen = []
    srv.bomb = _make_bomb()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_port}", srv
    srv.shutdown()
    srv.server_close()


def _fetcher(**kwargs) -> Fetcher:
    kwargs.setdefault("user_agent", UA)
    kwargs.setdefault("connect_timeout", 3)
    kwargs.setdefault("read_timeout", 5)
    kwargs.setdefault("deadline", 10)
    return Fetcher(**kwargs)


def test_normal_page(server):
    base, _ = server
    r = _fetcher().fetch(base + "/page")
    assert isinstance(r, FetchResult)
    assert r.ok and r.error_kind is None and r.error is None
    assert r.status == 200
    assert r.body == PAGE and r.size == len(PAGE)
    assert r.content_type == "text/html; charset=utf-8"
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert all(k == k.lower() for k in r.headers)
    assert r.final_url == base + "/page" and r.redirects == []
    assert r.seconds > 0


def test_page_without_content_length_read_to_close(server):
    base, _ = server
    r = _fetcher().fetch(base + "/page-nolength")
    assert r.ok and r.body == PAGE


@pytest.mark.parametrize("path", ["/gzip-page", "/deflate-page", "/raw-deflate-page"])
def test_compressed_pages_are_decoded(server, path):
    base, _ = server
    r = _fetcher().fetch(base + path)
    assert r.ok, r.error
    assert r.body == PAGE and r.size == len(PAGE)


@pytest.mark.parametrize("path", ["/gzip-trailing", "/deflate-trailing"])
def test_bytes_after_the_compressed_stream_are_neither_decoded_nor_read(server, path):
    """A gzip member or zlib stream followed by 32 MiB of other bytes: the page is the stream's
    content, and the fetch stops reading where the stream ends (after a gzip member the bytes
    failed the page as connection; after a deflate stream they piled up in the decoder, copied
    whole at each chunk: 40 MB took 9.8 s, 800 MB over 10 minutes and 416 MB)."""
    base, srv = server
    fetcher = _fetcher()
    try:
        r = fetcher.fetch(base + path)
    finally:
        fetcher.close()
    assert r.ok, (r.error_kind, r.error)
    assert r.body == PAGE
    for _ in range(100):  # the handler notes what it sent once its writes fail (or all went out)
        with srv.lock:
            sent = getattr(srv, "trailing_sent", None)
        if sent is not None:
            break
        time.sleep(0.1)
    with srv.lock:
        srv.trailing_sent = None
    assert sent is not None and sent < 16 * 1024 * 1024, sent  # socket buffers take a few MiB at most


def test_user_agent_is_sent(server):
    base, srv = server
    seen = {}

    class Probe(_Handler):
        def do_GET(self):
            seen["ua"] = self.headers.get("User-Agent")
            seen["ae"] = self.headers.get("Accept-Encoding")
            self._send(200, PAGE)

    probe = ThreadingHTTPServer(("127.0.0.1", 0), Probe)
    t = threading.Thread(target=probe.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        r = _fetcher().fetch(f"http://127.0.0.1:{probe.server_port}/")
    finally:
        probe.shutdown()
        probe.server_close()
    assert r.ok
    assert seen["ua"] == UA
    assert seen["ae"] == "gzip, deflate"


def test_404_is_http_status(server):
    base, _ = server
    r = _fetcher().fetch(base + "/missing")
    assert not r.ok
    assert r.error_kind is ErrorKind.HTTP_STATUS
    assert r.status == 404
    assert "404" in r.error
    assert r.body is None


def test_redirect_chain_of_three_is_followed(server):
    base, srv = server
    r = _fetcher().fetch(base + "/chain/3")
    assert r.ok, r.error
    assert r.status == 200 and r.body == PAGE
    assert r.redirects == [base + "/chain/2", base + "/chain/1", base + "/chain/0"]
    assert r.final_url == base + "/chain/0"


def test_twelve_hops_is_too_many_redirects(server):
    base, _ = server
    r = _fetcher(max_redirects=10).fetch(base + "/chain/12")
    assert r.error_kind is ErrorKind.TOO_MANY_REDIRECTS
    assert len(r.redirects) == 10
    assert r.body is None


def test_exactly_max_redirects_is_allowed(server):
    base, _ = server
    r = _fetcher(max_redirects=4).fetch(base + "/chain/4")
    assert r.ok and len(r.redirects) == 4


def test_redirect_loop(server):
    base, _ = server
    r = _fetcher().fetch(base + "/loop/a")
    assert r.error_kind is ErrorKind.REDIRECT_LOOP
    assert r.redirects == [base + "/loop/b"]
    assert "/loop/a" in r.error


@pytest.mark.parametrize("path, requested", [
    ("/to-latin1", "/files/r%E9sum%E9.html"),
    ("/to-utf8", "/files/caf%C3%A9.html"),
])
def test_a_location_of_bytes_over_0x7f_is_followed_as_browsers_do(server, path, requested):
    """A Location in Latin-1 bytes failed the page as invalid_url with requests' raw
    "UnicodeDecodeError: 'utf-8' codec ..."; one in UTF-8 was followed as mojibake (the Latin-1
    reading of its bytes, "cafÃ©"). UTF-8 is read as such; other bytes are percent-encoded."""
    base, srv = server
    r = _fetcher().fetch(base + path)
    assert r.ok and r.status == 200, (r.error_kind, r.error)
    assert r.body == requested.encode() and len(r.redirects) == 1  # what the server was asked for


@pytest.mark.parametrize("path, reason", [
    ("/to-bad-ipv6", "the redirect target (Location) is no URL: Invalid IPv6 URL"),
    ("/to-long", "URL longer than 2083 characters (redirect target"),
])
def test_a_redirect_to_an_invalid_url_fails_as_invalid_url(server, path, reason):
    """Before: a Location urljoin could not parse escaped as a crash (``ValueError``), and one
    of 3,000 characters was followed, its URL then cut to the crawl tables' 2,083."""
    base, srv = server
    r = _fetcher().fetch(base + path)
    assert r.error_kind is ErrorKind.INVALID_URL and reason in r.error, (r.error_kind, r.error)
    with srv.lock:
        assert not any(seen.startswith("/aaa") for seen in srv.seen)  # never requested


def test_trickling_body_is_cut_at_the_deadline(server):
    base, _ = server
    deadline = 1.5
    began = time.monotonic()
    r = _fetcher(deadline=deadline, read_timeout=5).fetch(base + "/trickle")
    elapsed = time.monotonic() - began
    assert r.error_kind is ErrorKind.TIMEOUT, (r.error_kind, r.error)
    assert r.status == 200
    assert r.body is None
    assert elapsed < deadline + 2


def test_trickling_headers_are_cut_at_the_deadline(server):
    base, _ = server
    deadline = 1.5
    began = time.monotonic()
    r = _fetcher(deadline=deadline, read_timeout=5).fetch(base + "/slow-headers")
    elapsed = time.monotonic() - began
    assert r.error_kind is ErrorKind.TIMEOUT, (r.error_kind, r.error)
    assert r.body is None
    assert elapsed < deadline + 2


def test_gzip_bomb_is_stopped_with_bounded_memory(server):
    base, srv = server
    assert len(srv.bomb) < 1 * MiB  # ~200 KB on the wire, 200 MiB once inflated
    proc = psutil.Process()
    before = proc.memory_info().rss
    peak = [before]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            stop.wait(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        r = _fetcher(max_body_bytes=1 * MiB).fetch(base + "/bomb")
    finally:
        stop.set()
        sampler.join()
    peak[0] = max(peak[0], proc.memory_info().rss)
    assert r.error_kind is ErrorKind.TOO_LARGE, (r.error_kind, r.error)
    assert r.body is None
    assert MiB < r.size <= MiB + 64 * 1024
    assert peak[0] - before < 50 * MiB


@pytest.mark.parametrize("path", ["/big", "/big-nolength"])
def test_large_page_is_too_large(server, path):
    base, _ = server
    r = _fetcher(max_body_bytes=10 * MiB).fetch(base + path)
    assert r.error_kind is ErrorKind.TOO_LARGE, (r.error_kind, r.error)
    assert r.body is None
    assert r.size > 10 * MiB


def test_body_exactly_at_the_cap_is_kept(server):
    base, _ = server
    r = _fetcher(max_body_bytes=len(PAGE)).fetch(base + "/page")
    assert r.ok and r.body == PAGE
    r = _fetcher(max_body_bytes=len(PAGE) - 1).fetch(base + "/page")
    assert r.error_kind is ErrorKind.TOO_LARGE


def test_pdf_is_not_downloaded(server):
    base, _ = server
    r = _fetcher().fetch(base + "/doc.pdf")
    assert r.ok
    assert r.status == 200
    assert r.content_type == "application/pdf"
    assert r.body is None
    assert r.size == len(PDF)


def test_pdf_kept_with_keep_non_html(server):
    base, _ = server
    r = _fetcher(keep_non_html=True).fetch(base + "/doc.pdf")
    assert r.ok and r.body == PDF and r.size == len(PDF)


def test_binary_served_as_html_is_fetched(server):
    base, _ = server
    r = _fetcher().fetch(base + "/binary.html")
    assert r.ok
    assert r.body == BINARY


def test_connection_refused(server):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens on this port now
    r = _fetcher().fetch(f"http://127.0.0.1:{port}/")
    assert r.error_kind is ErrorKind.CONNECTION, (r.error_kind, r.error)
    assert r.status is None
    assert r.error == "connection refused"


@pytest.mark.parametrize("path, kind, expected", [
    # (http.client's RemoteDisconnected is a ConnectionResetError: it read "connection reset by the
    # server", which it was not, and the README's "closed the connection without a response" never came)
    ("/hang-up", ErrorKind.CONNECTION, ("the server closed the connection without a response",)),
    # (these three were ``connection`` too, retried twice for the same answer)
    ("/not-http", ErrorKind.BAD_RESPONSE, ("not an HTTP response: it began 'HELLO THERE'",)),
    # (they read "HTTPException: got more than 100 headers", "LineTooLong: got more than 65536 ...")
    ("/many-headers", ErrorKind.BAD_RESPONSE, ("the response has more than 256 header fields (the most read)",)),
    ("/long-header", ErrorKind.BAD_RESPONSE, ("the response's header line is longer than 65,536 bytes (the most read)",)),
    ("/short-body", ErrorKind.CONNECTION, ("the response ended early (9 bytes read, 991 more expected)",)),
    ("/silent", ErrorKind.TIMEOUT, ("no data from the server for 1 s",)),
])
def test_a_broken_server_is_named_in_plain_words(server, path, kind, expected):
    """A server that breaks the exchange gets a few plain words as the page's error, not the
    wrapped requests/urllib3 exception text (which named internal classes and pools)."""
    base, _ = server
    r = _fetcher(read_timeout=1).fetch(base + path)
    assert r.error_kind is kind, (r.error_kind, r.error)
    assert r.error in expected, r.error


def test_a_response_of_150_header_fields_is_read(server):
    """http.client's limit of 100 header fields failed such a page as ``connection`` ("more than
    100 header fields"), retried twice; browsers read it, and so does the fetcher now (up to
    MAX_HEADER_FIELDS, 256)."""
    base, _ = server
    r = _fetcher().fetch(base + "/cookie-jar")
    assert (r.error_kind, r.status, r.body) == (None, 200, b"<p>cookies</p>"), r.error
    assert len(r.headers["set-cookie"].split("\n")) == 150


def _keep_alive_then_close_server() -> tuple[socket.socket, list[str]]:
    """A raw server that answers the first request of each connection, keeping it open without
    ``Connection: close``, and closes the connection without an answer when a second request
    comes on it (a keep-alive timeout that expired as the request arrived). ``/r/N`` redirects
    to ``/r/N-1``, ``/r/0`` is a page. Returns the listening socket and the request lines seen."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[str] = []

    def serve(conn: socket.socket) -> None:
        with conn:
            answered = False
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, data = data.split(b"\r\n\r\n", 1)
                line = head.split(b"\r\n", 1)[0].decode()
                seen.append(line + (" (closed)" if answered else ""))
                if answered:
                    return  # closed without an answer
                answered = True
                n = int(line.split()[1].rsplit("/", 1)[1])
                if n:
                    conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: /r/%d\r\nContent-Length: 0\r\n\r\n" % (n - 1))
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 16\r\n\r\n"
                                 b"<title>t</title>")

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener, seen


def test_a_kept_alive_connection_the_server_closed_is_replaced_once_not_failed():
    """Each hop of a redirect chain goes out on the connection the previous answer left open,
    which the server closes without answering: the request is sent again on a new connection,
    and the chain ends at its page (it failed as connection, 'the server closed the connection
    without a response'). A fresh connection's failure is not repeated."""
    listener, seen = _keep_alive_then_close_server()
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    fetcher = _fetcher()
    try:
        r = fetcher.fetch(base + "/r/3")
        assert r.ok and r.status == 200 and len(r.redirects) == 3, (r.error_kind, r.error, r.redirects)
        assert seen == ["GET /r/3 HTTP/1.1", "GET /r/2 HTTP/1.1 (closed)", "GET /r/2 HTTP/1.1",
                        "GET /r/1 HTTP/1.1 (closed)", "GET /r/1 HTTP/1.1", "GET /r/0 HTTP/1.1 (closed)",
                        "GET /r/0 HTTP/1.1"]
    finally:
        fetcher.close()
        listener.close()


@pytest.mark.parametrize("path, kind", [("/huge-length.html", ErrorKind.TOO_LARGE), ("/huge-length.pdf", None)])
def test_a_content_length_beyond_64_bits_gives_a_result_that_encodes(server, path, kind):
    """``Content-Length: 99999999999999999999`` (over 2**64): the page is too_large (a PDF is
    stored as metadata) and its size is the largest a result holds, so the result encodes
    (the size was the header's, and the executor reported the page as a crash)."""
    from gridcrawl.protocol import INT64, PageResult, encode_page
    base, _ = server
    r = _fetcher().fetch(base + path)
    assert r.error_kind is kind, (r.error_kind, r.error)
    assert r.size == INT64
    encode_page(PageResult(url=base + path, status=r.status, size=r.size))


def test_a_cancelled_fetch_ends_at_once_and_a_later_one_is_not_made(server):
    """FetchCancel (a rendered page's requests when the page closes): a fetch waiting on a server
    that never answers ends when cancelled, not at its 60 s timeouts; one made after the cancel
    ends without a request."""
    from gridcrawl.executor.fetch import FetchCancel
    base, _ = server
    fetcher, cancel = _fetcher(read_timeout=60, deadline=60), FetchCancel()
    timer = threading.Timer(0.5, cancel.cancel)
    timer.start()
    try:
        r = fetcher.fetch(base + "/silent", cancel=cancel)
        assert (r.error_kind, r.error) == (ErrorKind.TIMEOUT, "cancelled")
        assert r.seconds < 30
        later = fetcher.fetch(base + "/page", cancel=cancel)
        assert (later.error_kind, later.error, later.status) == (ErrorKind.TIMEOUT, "cancelled", None)
        assert fetcher.fetch(base + "/page").ok  # the fetcher itself goes on
    finally:
        fetcher.close()  # its pooled connection would count in test_no_connections_leak's sockets


def test_hop_check_blocks_second_hop_before_sending(server):
    base, srv = server
    checked = []

    def hop_check(url: str) -> str | None:
        checked.append(url)
        return "disallowed by robots.txt" if url.endswith("/hop/secret") else None

    with srv.lock:
        srv.seen.clear()
    r = _fetcher(hop_check=hop_check).fetch(base + "/hop/start")
    assert r.error_kind is ErrorKind.BLOCKED
    assert r.error == f"redirected to {base}/hop/secret: disallowed by robots.txt"  # the hop is named
    assert checked == [base + "/hop/start", base + "/hop/secret"]
    assert r.final_url == base + "/hop/secret"
    with srv.lock:
        assert "/hop/start" in srv.seen
        assert "/hop/secret" not in srv.seen


def test_hop_check_blocks_first_request(server):
    base, srv = server
    with srv.lock:
        srv.seen.clear()
    r = _fetcher(hop_check=lambda url: "out of scope").fetch(base + "/page")
    assert r.error_kind is ErrorKind.BLOCKED and r.error == "out of scope"
    assert r.status is None
    with srv.lock:
        assert srv.seen == []


def test_hop_check_exception_is_a_crash_not_a_raise(server):
    base, _ = server

    def broken(url):
        raise RuntimeError("boom in hop check")

    r = _fetcher(hop_check=broken).fetch(base + "/page")
    assert r.error_kind is ErrorKind.CRASH
    assert "boom in hop check" in r.error


def test_429_with_retry_after(server):
    base, _ = server
    r = _fetcher().fetch(base + "/busy")
    assert r.error_kind is ErrorKind.HTTP_STATUS
    assert r.status == 429
    assert r.retry_after == 3.0


def test_a_retry_after_longer_than_a_crawl_waits_is_said_in_the_error(server):
    """The grid does not retry a URL whose Retry-After is past MAX_RETRY_AFTER (600 s): the
    executor's error says why, as the URL's stored error (the manager relays the page as sent)."""
    base, _ = server
    busy = _fetcher().fetch(base + "/busy")
    assert busy.error == "HTTP 429 Too Many Requests"
    r = _fetcher().fetch(base + "/busy-for-a-day")
    assert r.status == 429 and r.retry_after == 86400.0
    assert r.error == ("HTTP 429 Too Many Requests; the site asks to come back in 86400 s, longer than a crawl "
                       "waits (600 s): not retried in this run")


def test_an_https_url_of_a_plain_http_server_says_so(server):
    """``https://`` to a port that speaks plain HTTP: "TLS error: WRONG_VERSION_NUMBER" (or
    HTTP_REQUEST) alone did not say what was wrong."""
    base, _ = server
    r = _fetcher().fetch(base.replace("http://", "https://") + "/")
    assert r.error_kind is ErrorKind.BAD_RESPONSE  # (connection, retried twice for the same answer)
    assert r.error.startswith("TLS error: ") and r.error.endswith(
        "(the server answered in plain HTTP, not TLS: an https:// URL for an http:// site?)"), r.error


def test_503_with_http_date_retry_after(server):
    base, _ = server
    r = _fetcher().fetch(base + "/unavailable-date")
    assert r.error_kind is ErrorKind.HTTP_STATUS and r.status == 503
    assert r.retry_after is not None and 100 < r.retry_after <= 120


@pytest.mark.parametrize("skew", [3600, -3600])
def test_http_date_retry_after_is_read_by_the_servers_clock(server, skew):
    """An executor whose clock is off by an hour (here: a server whose clock is off by as much)
    waits the 2 minutes the server asks: its ``Retry-After`` date is read against its own
    ``Date``. By this machine's clock it was 62 minutes (the page failed, "longer than a crawl
    waits") or nothing (the host asked again at once)."""
    base, _ = server
    r = _fetcher().fetch(f"{base}/unavailable-date-skewed/{skew}")
    assert r.error_kind is ErrorKind.HTTP_STATUS and r.status == 503
    assert r.retry_after is not None and 115 <= r.retry_after <= 125, r.retry_after
    assert r.error == "HTTP 503 Service Unavailable"


@pytest.mark.parametrize(
    "url", ["", "not a url", "ftp://127.0.0.1/file", "http://", "http://127.0.0.1:99999/", "http://[::1/"]
)
def test_invalid_url(url):
    r = _fetcher().fetch(url)
    assert r.error_kind is ErrorKind.INVALID_URL, (url, r.error_kind, r.error)
    assert r.url == url


def test_parse_retry_after():
    now = 1_700_000_000.0
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 120 ") == 120.0
    assert parse_retry_after("1.5") == 1.5
    assert parse_retry_after(formatdate(now + 60, usegmt=True), now=now) == pytest.approx(60.0)
    assert parse_retry_after(formatdate(now - 60, usegmt=True), now=now) == 0.0
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now=784111777.0) == 0.0
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now=784111777.0 - 10) == pytest.approx(10.0)
    for bad in (None, "", "soon", "-5", "nan", "inf"):
        assert parse_retry_after(bad) is None
    # a date is read against the response's Date, when it has a usable one
    assert parse_retry_after(formatdate(now + 60, usegmt=True), now=now - 3600,
                             date=formatdate(now, usegmt=True)) == pytest.approx(60.0)
    assert parse_retry_after(formatdate(now + 60, usegmt=True), now=now, date="not a date") == pytest.approx(60.0)
    assert parse_retry_after("30", now=now, date=formatdate(now - 3600, usegmt=True)) == 30.0


def test_threads_share_one_fetcher(server):
    base, _ = server
    fetcher = _fetcher()
    results: list[FetchResult] = []
    lock = threading.Lock()

    def work():
        for path in ("/page", "/chain/2", "/doc.pdf", "/missing"):
            r = fetcher.fetch(base + path)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fetcher.close()
    assert len(results) == 24
    by_url: dict[str, set] = {}
    for r in results:
        by_url.setdefault(r.url, set()).add((r.status, r.error_kind, r.body))
    assert by_url[base + "/page"] == {(200, None, PAGE)}
    assert by_url[base + "/chain/2"] == {(200, None, PAGE)}
    assert by_url[base + "/doc.pdf"] == {(200, None, None)}
    assert by_url[base + "/missing"] == {(404, ErrorKind.HTTP_STATUS, None)}
    assert len(fetcher._sessions) == 0  # close() dropped them all
    assert fetcher.fetch(base + "/page").ok  # and a new one is made on demand


def test_no_connections_leak(server):
    base, srv = server
    port = srv.server_port
    fetcher = _fetcher(max_body_bytes=1000)

    def client_sockets() -> int:
        conns = psutil.Process().net_connections(kind="tcp")
        return sum(
            1
            for c in conns
            if c.raddr and c.raddr.port == port and c.laddr.port != port and c.status == psutil.CONN_ESTABLISHED
        )

    for _ in range(10):
        for path in ("/doc.pdf", "/big", "/missing", "/page", "/chain/1"):
            fetcher.fetch(base + path)
    import gc
    gc.collect()  # the pooled connections of other tests' fetchers nobody closed, still uncollected, count too
    # Unread bodies are closed with their connections; only the pooled keep-alive one remains.
    assert client_sockets() <= 1
    fetcher.close()
    assert client_sockets() == 0


def test_hop_check_may_fetch_with_the_same_fetcher(server):
    """A hop check that fetches (as a robots.txt check would) on the same thread and fetcher."""
    base, _ = server
    fetcher = _fetcher()
    inner: list[FetchResult] = []

    def hop_check(url: str) -> str | None:
        if url.endswith("/doc.pdf"):  # the check's own fetch passes the check too
            return None
        r = fetcher.fetch(base + "/doc.pdf")
        inner.append(r)
        return None if r.ok else f"check failed: {r.error_kind} {r.error}"

    fetcher.hop_check = hop_check
    r = fetcher.fetch(base + "/chain/2")
    assert r.ok and r.body == PAGE and len(r.redirects) == 2
    assert len(inner) == 3 and all(i.ok and i.size == len(PDF) for i in inner)
    fetcher.close()


def test_cookies_live_for_one_fetchs_redirect_chain_only(site_server):
    """Each worker's session kept every cookie for the executor's life: a site setting new ones
    on every page made each request carry megabytes of them, and one application's login cookie
    went out on another application's crawl. A redirect chain still gets its own cookies (a
    cookie check that redirects)."""
    from sites import Site

    seen = []

    def login(handler):
        handler.respond(200, b"<p>in</p>", headers={"Set-Cookie": "session=ALICE; Path=/"})

    def page(handler):
        seen.append(handler.headers.get("Cookie"))
        handler.respond(200, b"<p>page</p>")

    def check(handler):  # sets a cookie and sends the browser on to where it is asked for
        handler.respond(302, b"", headers={"Set-Cookie": "probe=1; Path=/", "Location": "/needs-cookie"})

    def needs_cookie(handler):
        ok = "probe=1" in (handler.headers.get("Cookie") or "")
        handler.respond(200 if ok else 403, b"<p>checked</p>")

    server = site_server(Site(extra={"/login": login, "/page": page, "/check": check, "/needs-cookie": needs_cookie}))
    fetcher = _fetcher()
    assert fetcher.fetch(server.url("/login")).status == 200
    assert fetcher.fetch(server.url("/page")).status == 200
    assert seen == [None]  # the next page, whoever asked for it, carries no cookie of another
    assert fetcher.fetch(server.url("/check")).status == 200


def test_a_response_listing_too_many_content_codings_fails_saying_so(site_server):
    """``Content-Encoding: gzip, gzip, ...`` 2,000 times ended the fetch (and a host's robots.txt)
    in a RecursionError; two real layers still decode."""
    from sites import Site

    def many(handler):
        handler.respond(200, b"junk", headers={"Content-Encoding": ", ".join(["gzip"] * 2000)})

    def two(handler):
        handler.respond(200, gzip.compress(gzip.compress(b"<p>twice</p>")), headers={"Content-Encoding": "gzip, gzip"})

    server = site_server(Site(extra={"/many": many, "/two": two}))
    fetcher = _fetcher()
    failed = fetcher.fetch(server.url("/many"))
    assert (failed.error_kind, failed.error) == (ErrorKind.BAD_RESPONSE,
                                                 "the response lists 2000 content codings (at most 5 are decoded)")
    assert fetcher.fetch(server.url("/two")).body == b"<p>twice</p>"


def test_a_body_in_a_content_coding_the_executor_cannot_decode_fails_saying_which(site_server):
    """A server that compresses with a coding we did not ask for and cannot decode (``zstd``
    without the zstandard module, ``compress``) had its page kept with the compressed bytes as
    its body: a 200 with no title, no links and no error. It fails as ``bad_response`` now (not
    retried), naming the coding; a coding urllib3 decodes, and ``identity``, still come through."""
    import random
    from sites import Site
    import urllib3.response
    noise = random.Random(5).randbytes(4000)
    page = b"<html><title>plain</title><body>plain</body></html>"
    codings = {"/zstd": "zstd", "/compress": "compress", "/mixed": "gzip, x-made-up"}
    extra = {path: (lambda coding: lambda h: h.respond(200, noise, headers={"Content-Encoding": coding}))(coding)
             for path, coding in codings.items()}
    extra["/identity"] = lambda h: h.respond(200, page, headers={"Content-Encoding": "identity"})
    server = site_server(Site(extra=extra))
    fetcher = _fetcher()
    for path, coding in codings.items():
        if coding in urllib3.response.HTTPResponse.CONTENT_DECODERS:
            continue  # zstd where zstandard is installed
        failed = fetcher.fetch(server.url(path))
        unknown = coding.split(", ")[-1]
        assert (failed.error_kind, failed.error, failed.body) == (
            ErrorKind.BAD_RESPONSE, f"the body is in content coding '{unknown}', which this executor cannot decode "
                                  "(it asks for gzip, deflate)", None), path
    assert fetcher.fetch(server.url("/identity")).body == page


def test_a_body_that_is_not_its_content_encoding_fails_in_plain_words(site_server):
    """A page sent as ``Content-Encoding: gzip`` that is plain text failed as ``connection`` with
    zlib's own words, "error: Error -3 while decompressing data: incorrect header check", and was
    retried twice; it fails once as ``bad_response`` in plain words."""
    from sites import Site

    def lie(handler):
        handler.respond(200, b"<p>not gzip at all</p>", headers={"Content-Encoding": "gzip"})

    result = _fetcher().fetch(site_server(Site(extra={"/lie": lie})).url("/lie"))
    assert (result.error_kind, result.error) == (
        ErrorKind.BAD_RESPONSE, "the body does not decode as its Content-Encoding says: not valid gzip data "
                              "(incorrect header check)")


def test_a_server_that_never_answers_within_the_deadline_is_said_to_have_sent_nothing(server):
    """With the defaults (read timeout = deadline = 30 s) a server that accepts the connection
    and never answers read "deadline of 30 s exceeded", as a page still arriving does; it says
    that no response came now (a page whose body trickles keeps the deadline's words, below)."""
    base, _ = server
    r = _fetcher(read_timeout=5, deadline=1).fetch(base + "/silent")
    assert (r.error_kind, r.error, r.status) == (
        ErrorKind.TIMEOUT, "no response from the server within the deadline of 1 s", None)


def test_a_server_trickling_bytes_past_the_deadline_is_named_by_the_deadline(site_server):
    """One byte a second: the socket timeout, shrunk to the time left, fired just before the
    watchdog, and the page failed as "no data from the server for 30 s", which it never was."""
    from sites import Site

    def drip(handler):
        handler.send_response(200)
        handler.send_header("Content-Type", "text/html")
        handler.send_header("Content-Length", "1000")
        handler.end_headers()
        try:
            for _ in range(1000):
                handler.wfile.write(b"x")
                handler.wfile.flush()
                time.sleep(1.0)
        except OSError:
            pass

    server = site_server(Site(extra={"/drip": drip}))
    result = _fetcher(read_timeout=5, deadline=2.5).fetch(server.url("/drip"))
    assert (result.error_kind, result.error) == (ErrorKind.TIMEOUT, "deadline of 2.5 s exceeded")
    # the race the watchdog lost on a loaded machine: the socket's timeout (the time left) fired
    # first, the watchdog not yet; the deadline is what ran out all the same
    from gridcrawl.executor.fetch import _Watch
    fetcher = _fetcher(read_timeout=30, deadline=30)
    watch = _Watch(30)
    watch._deadline = time.monotonic() + 0.01  # as started 30 s ago, not fired yet
    failure = fetcher._classify(socket.timeout("timed out"), watch)
    assert (failure.kind, failure.message) == (ErrorKind.TIMEOUT, "deadline of 30 s exceeded")
    watch._deadline = time.monotonic() + 20  # a server silent for the read timeout, with time left
    assert fetcher._classify(socket.timeout("timed out"), watch).message == "no data from the server for 30 s"


def test_cookie_and_authorization_go_to_the_urls_own_hop_only_not_to_a_redirects_target(site_server):
    """A rendered page's request carries the page's cookies (its script's ``headers``): they are
    its host's, never sent on to where a redirect points; other headers go on."""
    from sites import Site, redirect
    seen = []
    site = Site()
    site.extra["/go"] = lambda h: (seen.append(("/go", h.headers.get("Cookie"), h.headers.get("Authorization"),
                                                h.headers.get("Accept"))),
                                   redirect("{BASE}/there")(h))
    site.extra["/there"] = lambda h: (seen.append(("/there", h.headers.get("Cookie"), h.headers.get("Authorization"),
                                                   h.headers.get("Accept"))),
                                      h.respond(200, b"{}", content_type="application/json"))
    server = site_server(site)
    fetcher = Fetcher(user_agent=UA, keep_non_html=True)
    try:
        got = fetcher.fetch(server.url("/go"), headers={"cookie": "session=s1", "authorization": "Bearer t",
                                                        "accept": "application/json"})
    finally:
        fetcher.close()
    assert got.ok and got.body == b"{}"
    assert seen == [("/go", "session=s1", "Bearer t", "application/json"), ("/there", None, None, "application/json")]


# ---------------------------------------------------------------------------------------------
# An answer no retry mends (bad_response) and a failure a retry may mend (connection).
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("server_kwargs, kind, error", [
    # a port of another protocol: SSH says who it is first; a TLS server may answer a plain
    # request with an alert record; an HTTP/2-only server's status line
    ({"first": b"SSH-2.0-OpenSSH_9.6\r\n"}, ErrorKind.BAD_RESPONSE, "not an HTTP response: it began 'SSH-2.0-OpenSSH_9.6'"),
    ({"reply": b"\x15\x03\x03\x00\x02\x02\x28"}, ErrorKind.BAD_RESPONSE,
     "not an HTTP response: it began '\\x15\\x03\\x03\\x00\\x02\\x02('"),
    ({"reply": b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n"}, ErrorKind.BAD_RESPONSE,
     "not an HTTP/1.x response: its status line names 'HTTP/2.0'"),
    # transient: a reset, a server that closes without a word, a body cut short
    ({"reset": True}, ErrorKind.CONNECTION, "connection reset by the server"),
    ({}, ErrorKind.CONNECTION, "the server closed the connection without a response"),
    ({"reply": b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100\r\n\r\n<html>"},
     ErrorKind.CONNECTION, "the response ended early (6 bytes read, 94 more expected)"),
])
def test_an_answer_no_retry_mends_is_a_bad_response_a_broken_connection_is_not(server_kwargs, kind, error):
    """A server that answers, but not in HTTP/1.x, failed as ``connection``, which the manager
    retries twice (``retry_times``) for the same answer: it is ``bad_response`` now, which it
    does not retry (as headers past the limits and a body that does not decode, above). What a
    retry may mend stays ``connection``: a reset, a close without a word, a body cut short."""
    raw = RawServer(**server_kwargs)
    try:
        r = _fetcher().fetch(raw.url())
    finally:
        raw.close()
    assert (r.error_kind, r.error) == (kind, error)
    assert raw.connections == 1  # the fetcher's own stale-connection retry did not send it again


@pytest.mark.parametrize("scheme", ["http", "https"])  # a request to the proxy; a CONNECT tunnel
def test_a_proxy_that_is_no_http_proxy_is_a_connection_error_retried_elsewhere(scheme):
    """The executor's ``--proxy`` pointing at a port of another protocol is this executor's
    fault, not the page's: the page stays ``connection`` (retried, perhaps on an executor with
    a working proxy), its error naming the proxy, not ``bad_response``, which would end it."""
    from gridcrawl.executor.proxy import ProxyRoute
    ssh = RawServer(first=b"SSH-2.0-OpenSSH_9.6\r\n")
    shown = ssh.url().rstrip("/")
    try:
        r = _fetcher(proxy=ProxyRoute.parse(shown)).fetch(f"{scheme}://site.example/")
    finally:
        ssh.close()
    assert r.error_kind is ErrorKind.CONNECTION, (r.error_kind, r.error)
    assert f"proxy {shown}" in r.error and "SSH-2.0-OpenSSH_9.6" in r.error, r.error
    assert ssh.connections == 1
