"""The executor's fetcher: download one URL so that no response can hang it or exhaust its memory.

This module owns the network side of an executor's work on one URL: following redirects by
hand (so every hop passes the caller's hop check: scope, robots.txt, private addresses), the
wall-clock deadline of a whole fetch, the cap on body bytes *after* decompression (a gzip bomb
is cut off with memory bounded), the choice of which bodies to download (HTML only unless told
otherwise), and turning every failure into a :class:`FetchResult` with an :class:`ErrorKind`
instead of an exception. Parsing the body is not done here (see the parse module).

How a fetch stays bounded:

* Time: connect and read timeouts are shrunk to what is left of the deadline before every
  request and between body chunks, and a watchdog timer shuts the socket down when the deadline
  passes. The watchdog is what stops a server that trickles its headers or body a byte at a
  time: such a server never trips a per-``recv`` read timeout. (DNS resolution is not covered:
  ``getaddrinfo`` cannot be interrupted; the system resolver's own timeouts bound it.)
* Memory: the body is read with ``read1`` (whatever the socket has, up to 64 KiB) and gzip /
  deflate are decoded here with ``zlib`` and ``max_length``, so no step ever produces more than
  64 KiB of output, whatever the compression ratio, and reading stops at ``max_body_bytes``.

Sources: RFC 9110 (HTTP Semantics) §15.4 redirection status codes, §10.2.2 Location (resolved
against the current URL, RFC 3986 §5), §10.2.3 Retry-After, §8.4 Content-Encoding, §8.3
Content-Type; RFC 6585 §4 (429 Too Many Requests); RFC 1950/1951/1952 (zlib, deflate, gzip).
"""

from __future__ import annotations

import email.utils
import heapq
import http.client
import logging
import math
import os
import re
import socket
import threading
import time
import zlib
from datetime import datetime, timezone
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, NamedTuple, Union
from urllib.parse import quote, urldefrag, urljoin, urlsplit

import requests
import urllib3
import urllib3.connection
import urllib3.connectionpool
import urllib3.exceptions
import urllib3.response
from requests.adapters import HTTPAdapter

from gridcrawl.executor.credentials import read_netrc
from gridcrawl.executor.proxy import ProxyRoute, proxy_error
from gridcrawl.executor.ssrf import SSRFGuard
# the protocol's one list of error kinds (re-exported here); the longest Retry-After the grid waits
# for, and the longest wait a page reports (a site's Retry-After past it is cut to it)
from gridcrawl.protocol import INT64, MAX_RETRY_AFTER, MAX_SECONDS, ErrorKind
from gridcrawl.semantic import SNIFF
from gridcrawl.urls import MAX_URL_LENGTH

__all__ = ["ErrorKind", "FetchCancel", "FetchResult", "Fetcher", "HopCheck", "HopRefusal", "chain_hop_checks", "tls_verify", "gunzip",
           "parse_retry_after", "HTML_TYPES", "REDIRECT_CODES", "media_type"]

#: Media types treated as HTML (compared on the type/subtype, parameters ignored).
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
#: Request headers sent to the fetch's own URL only, never to a redirect's target: the conditional
#: ones, and the credentials of its host (a rendered page's script requests carry its cookies).
_OWN_HOP_ONLY = frozenset({"if-none-match", "if-modified-since", "cookie", "authorization"})
#: Status codes followed as redirects (RFC 9110 §15.4.2-15.4.9).
REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})

_CHUNK = 64 * 1024  # bytes per socket read and per decompression step
#: Header fields of one response read at most. http.client stops at 100: Microsoft 365's and
#: Akamai-served pages send more (cookies, telemetry), browsers read them, and such a page failed
#: as ``connection`` ("more than 100 header fields"), three times with the manager's retries.
#: The Internet Archive's warcprox reads 7,000; 256 keeps a hostile header small: with lines of
#: at most 65,536 bytes (http.client's ``_MAXLINE``) one response's holds at most 16 MiB while it
#: is read (1,000 lines of 65,000 bytes took a fetch 62 MiB).
MAX_HEADER_FIELDS = 256
http.client._MAXHEADERS = max(http.client._MAXHEADERS, MAX_HEADER_FIELDS)  # one limit for the process
#: Appended to the message of a fetch whose HTTPS certificate failed the check.
_TLS_HINT = ("to trust an intranet's own certificate authority start executors with --ca-bundle FILE, "
             "to accept any certificate with --no-tls-verify")
#: OpenSSL's verify codes of a certificate outside its dates (X509_V_ERR_CERT_NOT_YET_VALID,
#: X509_V_ERR_CERT_HAS_EXPIRED): judged by the executor's clock, which may be the one that is wrong.
_CERT_DATE_CODES = (9, 10)
_CLOCK_HINT = "if it is wrong, set it right (NTP) and fetch the page again"
_TLS_DATE_HINT = "to accept it anyway start executors with --no-tls-verify"
_PROXY_HINT = "give the proxy's user and password in --proxy http://user:password@host:port"
_ACCEPT = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.1"
_ACCEPT_ENCODING = "gzip, deflate"  # the codings decoded here with a bounded inflater


class HopRefusal(NamedTuple):
    """A hop check's refusal with its own error kind (a plain ``str`` refusal is BLOCKED).

    ``kind``: the :class:`ErrorKind` the fetch ends with; ``reason``: the message kept in
    ``FetchResult.error``; ``retry_after``: seconds after which the refusal may lift (robots.txt
    unreachable), copied to ``FetchResult.retry_after``, else ``None``.
    """

    kind: ErrorKind
    reason: str
    retry_after: float | None = None


#: A hop check: called with each URL before it is requested; ``None`` allows the hop, a string
#: (BLOCKED) or a :class:`HopRefusal` refuses it.
HopCheck = Callable[[str], Union[str, HopRefusal, None]]


def chain_hop_checks(*checks: HopCheck | None) -> HopCheck | None:
    """Compose hop checks into one that runs them in order; the first refusal wins.

    ``None`` entries are skipped; with no checks left it returns ``None`` (no check at all), with
    one it returns that check itself. Put cheap checks that need no network first (private
    addresses, scope), the robots.txt check (which may fetch robots.txt) last.
    """
    live = [c for c in checks if c is not None]
    if not live:
        return None
    if len(live) == 1:
        return live[0]

    def chained(url: str) -> str | HopRefusal | None:
        for check in live:
            refusal = check(url)
            if refusal is not None:
                return refusal
        return None

    return chained


def tls_verify(check: bool, ca_bundle: str = "") -> bool | str:
    """The ``verify`` of a :class:`Fetcher` (requests' meaning) for the settings ``tls_verify``
    (``check``) and ``ca_bundle``: ``False`` when ``check`` is off, else ``ca_bundle``'s
    absolute path when given, else ``True`` (certifi's certificate authorities).

    Raises ``ValueError`` (one line) when ``ca_bundle`` is given with ``check`` on and is not a
    readable file, so that a program refuses to start rather than fail every HTTPS page."""
    if not check:
        return False
    if not ca_bundle:
        return True
    path = os.path.abspath(os.path.expanduser(ca_bundle))
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise ValueError(f"--ca-bundle {ca_bundle}: no readable file (a PEM file of certificate authorities)")
    return path


@dataclass
class FetchResult:
    """The outcome of one :meth:`Fetcher.fetch`; never an exception.

    Attributes:
        url: the URL asked for.
        final_url: the URL of the last request made (or attempted) after redirects.
        status: HTTP status of the last response, ``None`` if no response arrived.
        content_type: the full ``Content-Type`` header value of the last response, or ``None``.
        headers: headers of the last response, keys lower-cased (repeated headers joined by ", ").
            On TIMEOUT, status and headers are whatever had arrived, possibly partial (a server
            trickling its headers is cut mid-way and http.client ends the header block there).
        body: the decoded body bytes, or ``None`` when not kept (non-HTML without
            ``keep_non_html``, statuses >= 400, redirects, and every failure).
        size: body size in bytes. When the body was read: bytes after decompression, as read
            (on TOO_LARGE, what was read before stopping). When the body was not read at all:
            ``Content-Length`` if given, else 0.
        seconds: wall-clock seconds of the whole fetch, redirects included.
        redirects: the hop URLs after the first, in order (the last one is ``final_url``).
        error_kind: why it failed, ``None`` on success.
        error: a human-readable message for the failure, ``None`` on success.
        retry_after: seconds to wait from ``Retry-After`` on a 429 or 503 response, or from a
            hop check's :class:`HopRefusal` (robots.txt unreachable), else ``None``.
    """

    url: str
    final_url: str
    status: int | None = None
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    size: int = 0
    seconds: float = 0.0
    redirects: list[str] = field(default_factory=list)
    error_kind: ErrorKind | None = None
    error: str | None = None
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        """True when the fetch succeeded (``error_kind is None``)."""
        return self.error_kind is None


def _http_date(text: str) -> float | None:
    """An HTTP-date (``"Wed, 21 Oct 2015 07:28:00 GMT"``; a date without a zone is taken as
    UTC) as POSIX seconds, or ``None`` when it does not parse. Never raises."""
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; treat a naive date as UTC
        when = when.replace(tzinfo=timezone.utc)
    try:
        return when.timestamp()
    except (ValueError, OverflowError):
        return None


def parse_retry_after(value: str | None, now: float | None = None, date: str | None = None) -> float | None:
    """Parse a ``Retry-After`` header value into seconds to wait (RFC 9110 §10.2.3).

    Args:
        value: the header value: delay-seconds (``"120"``; a decimal such as ``"1.5"`` is also
            accepted) or an HTTP-date (``"Wed, 21 Oct 2015 07:28:00 GMT"``).
        now: the current time in seconds since the epoch for HTTP-dates; ``time.time()`` if None.
        date: the same response's ``Date`` header, if any. An HTTP-date is read against it when
            it parses (the server wrote both by its own clock, so the wait it asks is their
            difference), so that an executor whose clock is off waits what the server asked:
            an hour slow, a 2-minute wait was read as 62 minutes and failed the page as "longer
            than a crawl waits"; ahead, as none. Without a usable ``Date``, ``now`` is used.

    Returns:
        Seconds (float, >= 0; a date in the past gives 0.0; at most :data:`MAX_SECONDS`), or
        ``None`` when the value is missing, negative, not finite or unparseable. Never raises.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds) and seconds >= 0:
            return min(seconds, MAX_SECONDS)
        return None
    when = _http_date(text)
    if when is None:
        return None
    reference = _http_date(date.strip()) if date else None
    if reference is None:
        reference = time.time() if now is None else now
    return min(max(0.0, when - reference), MAX_SECONDS)


# ---------------------------------------------------------------------------------------------
# Deadline watchdog: a per-fetch timer that shuts the socket of the connection in use down.
# The connection classes below tell the watch of the fetch running on their thread which
# connection it is using (at connect and at every request), so the timer can reach the socket
# even while http.client is blocked reading a trickled status line or header.
# ---------------------------------------------------------------------------------------------

_active = threading.local()  # .watch: the _Watch of the fetch running on this thread, if any


def _shutdown_socket(conn: object) -> None:
    """Shut down (not close: no fd reuse race) the socket of a urllib3 connection, if any."""
    sock = getattr(conn, "sock", None)
    if sock is None:
        return
    try:
        # The base method on the raw socket also works for an SSLSocket without touching its
        # SSL object, which the blocked reader thread is still using.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _Watchdog:
    """One daemon thread firing the deadlines of every fetch of the process (a thread per
    fetch would cost a thread start on every page): a heap of (deadline, seq, watch)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list = []
        self._seq = 0
        self._thread: threading.Thread | None = None

    def add(self, deadline: float, watch: "_Watch") -> None:
        with self._cond:
            self._seq += 1
            heapq.heappush(self._heap, (deadline, self._seq, watch))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="fetch-deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is watch:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait(60.0)
                    continue
                wait = self._heap[0][0] - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                _, _, watch = heapq.heappop(self._heap)
            watch._fire()


_WATCHDOG = _Watchdog()


class _Watch:
    """Deadline state of one fetch: which connection it uses, and whether the deadline fired."""

    def __init__(self, seconds: float) -> None:
        self._lock = threading.Lock()
        self._conn: object | None = None
        self._done = False
        self.fired = False
        self.cut_short = False  # fired by FetchCancel, not by the deadline
        self._seconds = max(0.0, seconds)
        self._deadline = float("inf")
        self.peer_check: Callable[[str], str | None] | None = None  # the fetcher's, for this fetch

    @property
    def done(self) -> bool:
        """True once the fetch has finished (its deadline no longer matters)."""
        return self._done

    def start(self) -> None:
        self._deadline = time.monotonic() + self._seconds
        _WATCHDOG.add(self._deadline, self)

    def used_up(self, margin: float = 0.25) -> bool:
        """Whether the deadline has passed, or will within ``margin`` seconds (a socket timeout
        set to the time left fires just before the watchdog does)."""
        return self.fired or time.monotonic() >= self._deadline - margin

    def postpone(self, seconds: float) -> None:
        """Move the deadline ``seconds`` later (a politeness wait does not count against it)."""
        with self._lock:
            if self._done or self.fired or seconds <= 0:
                return
            self._deadline += seconds
            deadline = self._deadline
        _WATCHDOG.add(deadline, self)

    def attach(self, conn: object) -> None:
        with self._lock:
            if self._done:
                return
            self._conn = conn
            fired = self.fired
        if fired:
            _shutdown_socket(conn)

    def _fire(self, cut: bool = False) -> None:
        with self._lock:
            if self._done or (not cut and time.monotonic() < self._deadline):  # postponed: a later entry fires
                return
            self.fired = True
            self.cut_short = self.cut_short or cut
            conn = self._conn
        if conn is not None:
            _shutdown_socket(conn)

    def cut(self) -> None:
        """End the fetch now, as if its deadline had passed (:class:`FetchCancel`)."""
        self._fire(cut=True)

    def set_read_timeout(self, seconds: float) -> None:
        sock = getattr(self._conn, "sock", None)
        if sock is not None:
            try:
                sock.settimeout(max(0.001, seconds))
            except OSError:
                pass

    def stop(self) -> None:
        with self._lock:
            self._done = True
            self._conn = None


def _attach_current(conn: object) -> None:
    watch = getattr(_active, "watch", None)
    if watch is not None:
        watch.attach(conn)


class FetchCancel:
    """Ends the fetches made with it (``Fetcher.fetch(url, cancel=...)``) when :meth:`cancel` is
    called: their sockets are shut at once, and they return as ``TIMEOUT`` ("cancelled"); one
    started after that returns so without a request. A rendered page cancels its requests when
    it closes: a request that hung held its worker thread until its own deadline, and the next
    pages' requests queued behind it. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: set[_Watch] = set()
        self.cancelled = False

    def cancel(self) -> None:
        """End every fetch made with this handle, now and later."""
        with self._lock:
            self.cancelled = True
            watches, self._watches = self._watches, set()
        for watch in watches:
            watch.cut()

    def _add(self, watch: _Watch) -> bool:
        with self._lock:
            if not self.cancelled:
                self._watches.add(watch)
            return not self.cancelled

    def _discard(self, watch: _Watch) -> None:
        with self._lock:
            self._watches.discard(watch)


class _WatchedConnectionMixin:
    """Reports the connection to the current fetch's watch at connect and at each request, and
    checks the address each new socket is connected to with the fetch's ``peer_check``.

    The hop check (the SSRF guard) resolves a host name and checks its addresses *before* the
    request, but the connection resolves the name again: a name that answers a public address to
    the first lookup and 127.0.0.1 to the second (DNS rebinding) would get through. So the
    address actually connected to is checked too, before a byte is sent (TLS included). A
    connection to the configured proxy (``--proxy``) is not checked: the user chose that address,
    and the guard checked the page's host by name before the request."""

    def _new_conn(self):  # type: ignore[override]
        sock = super()._new_conn()  # type: ignore[misc]
        check = getattr(getattr(_active, "watch", None), "peer_check", None)
        if check is not None and getattr(self, "proxy", None) is None:  # a proxy is chosen, not linked to
            try:
                address = sock.getpeername()[0]
            except OSError:
                address = None
            reason = check(address) if address is not None else None
            if reason is not None:
                sock.close()
                raise _Failure(ErrorKind.BLOCKED, reason)
        return sock

    def connect(self) -> None:  # type: ignore[override]
        _attach_current(self)
        super().connect()  # type: ignore[misc]
        _attach_current(self)  # now with a socket: shut at once if the deadline already fired

    def putrequest(self, *args, **kwargs):  # type: ignore[override]
        _attach_current(self)
        _active.reused = getattr(self, "sock", None) is not None  # a kept-alive connection (_StaleRetry)
        return super().putrequest(*args, **kwargs)  # type: ignore[misc]


class _WatchedHTTPConnection(_WatchedConnectionMixin, urllib3.connection.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_WatchedConnectionMixin, urllib3.connection.HTTPSConnection):
    pass


class _WatchedHTTPConnectionPool(urllib3.connectionpool.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSConnectionPool(urllib3.connectionpool.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_WATCHED_POOLS = {"http": _WatchedHTTPConnectionPool, "https": _WatchedHTTPSConnectionPool}


class _StaleRetry(urllib3.util.Retry):
    """Send a request again, once, on a new connection when the kept-alive connection it went out
    on was closed by the server before any answer (RFC 9112 §9.3.1: a client may retry an
    idempotent request then; browsers and curl do). A server may close an idle connection at any
    moment, and one that closes after each answer without saying ``Connection: close`` loses the
    race with the next request now and then (5-13 % of requests on 127.0.0.1): the page failed
    as ``connection`` ("connection reset by the server", "... closed the connection without a
    response") and cost the host one of its retries, and a redirect chain failed at any hop.
    Every other error (timeouts, a new connection's failure, any error after a response) is
    not retried here, as with ``max_retries=0``."""

    def increment(self, method=None, url=None, response=None, error=None, _pool=None,
                  _stacktrace=None):  # type: ignore[override]
        stale = (response is None and isinstance(error, urllib3.exceptions.ProtocolError)
                 and getattr(_active, "reused", False))
        retry = self if stale else self.new(total=0, read=False)  # as HTTPAdapter(max_retries=0)
        return urllib3.util.Retry.increment(retry, method, url, response, error, _pool, _stacktrace)


def _not_a_stale_retry(record: logging.LogRecord) -> bool:
    """urllib3 logs each retry as a WARNING ("Retrying (...) after connection broken by ..."):
    a replaced stale connection is routine (:class:`_StaleRetry`), not worth a line per page."""
    return not str(record.msg).startswith("Retrying (")


logging.getLogger("urllib3.connectionpool").addFilter(_not_a_stale_retry)


def redirect_target(resp: requests.Response) -> str | None:
    """The ``Location`` of ``resp`` as a URL string, or None. Header values arrive as bytes
    (http.client decodes them as Latin-1): UTF-8 is read as such; any other bytes over 0x7F
    (a legacy site's Latin-1 file name) are percent-encoded byte by byte, as browsers send
    them, where requests raised UnicodeDecodeError and the page failed as ``invalid_url``."""
    location = resp.headers.get("Location")
    if not location:
        return None
    raw = location.encode("latin-1", "replace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return quote(raw, safe=bytes(range(0x21, 0x7F)))


class _Session(requests.Session):
    """A requests session that reads a redirect's ``Location`` as :func:`redirect_target` does
    (requests resolves it even when it does not follow redirects)."""

    def get_redirect_target(self, resp):  # type: ignore[override]
        return redirect_target(resp) if resp.is_redirect else None


class _WatchedAdapter(HTTPAdapter):
    """A requests transport adapter whose pools, direct or through a proxy, use the watched
    connection classes."""

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _WATCHED_POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs):
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = _WATCHED_POOLS
        return manager


# ---------------------------------------------------------------------------------------------
# Bounded content decoding (RFC 9110 §8.4; gzip RFC 1952, deflate = zlib RFC 1950 or raw 1951).
# ---------------------------------------------------------------------------------------------


class _DecodeError(Exception):
    """The body could not be decoded with its Content-Encoding; ``str()`` says so in plain words:
    ``"not valid gzip data (incorrect header check)"``."""

    def __init__(self, coding: str, error: zlib.error) -> None:
        detail = str(error).split(": ", 1)[-1]  # zlib's "Error -3 while decompressing data: " prefix dropped
        super().__init__(f"not valid {coding} data ({detail})")


def _inflate(chunks: Iterable[bytes], coding: str) -> Iterator[bytes]:
    """Decode a gzip or deflate stream, yielding pieces of at most ``_CHUNK`` bytes each."""
    gzip = coding in ("gzip", "x-gzip")
    wbits = 16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS
    obj = zlib.decompressobj(wbits)
    # "deflate" is meant to be zlib-wrapped but some servers send raw deflate: retry raw on an
    # error before any output (the bytes seen so far are kept in ``head`` for the retry).
    head: bytearray | None = bytearray() if not gzip else None
    for chunk in chunks:
        data = chunk
        if head is not None:
            head += chunk
            if len(head) > _CHUNK:  # long past any zlib header: no raw-deflate retry any more
                head = None
        while data:
            try:
                out = obj.decompress(data, _CHUNK)
            except zlib.error as exc:
                if head is None:
                    raise _DecodeError(coding, exc) from exc
                obj = zlib.decompressobj(-zlib.MAX_WBITS)
                data, head = bytes(head), None
                continue
            data = obj.unconsumed_tail
            if obj.eof:
                rest = obj.unused_data
                if gzip and rest[:2] in (b"\x1f\x8b", b"\x1f"):  # another gzip member (RFC 1952 §2.2)
                    obj = zlib.decompressobj(wbits)
                    data = rest
                elif gzip and not rest:
                    data = b""  # another member may begin in the next chunk
                else:
                    # the stream has ended: what follows is neither decoded nor read. Fed to the
                    # ended decoder, it piled up in its unused_data, copied whole at each chunk
                    # (20 MB after a deflate stream: 2 s; 40 MB: 9.8 s; 800 MB: over 10 min and
                    # 416 MB, past the deadline); after a gzip member it failed the page as
                    # connection (browsers and curl ignore such trailing bytes)
                    if out:
                        yield out
                    return
            if out:
                head = None
                yield out
    try:
        tail = obj.flush()
    except zlib.error as exc:
        raise _DecodeError(coding, exc) from exc
    for start in range(0, len(tail), _CHUNK):
        yield tail[start : start + _CHUNK]


class DecompressedTooLarge(ValueError):
    """:func:`gunzip`'s output would pass its ``max_bytes``."""


def gunzip(data: bytes, max_bytes: int) -> bytes:
    """Decompress gzip ``data`` (RFC 1952; a ``.gz`` file, not a Content-Encoding), keeping
    memory bounded: raises :class:`DecompressedTooLarge` (a ``ValueError``) when the output would
    pass ``max_bytes`` bytes, ``ValueError`` when the data is not valid gzip."""
    out = bytearray()
    try:
        for piece in _inflate([data], "gzip"):
            if len(out) + len(piece) > max_bytes:
                raise DecompressedTooLarge(f"more than {max_bytes} bytes once decompressed")
            out += piece
    except _DecodeError as exc:
        raise ValueError(str(exc)) from None
    return bytes(out)


def _codings(header: str | None) -> list[str]:
    """Content-Encoding header -> list of codings in the order applied, identity dropped."""
    if not header:
        return []
    return [c.strip().lower() for c in header.split(",") if c.strip() and c.strip().lower() != "identity"]


def _raw_chunks(resp: requests.Response) -> Iterator[bytes]:
    """Yield the undecoded body as it arrives: whatever the socket has, up to ``_CHUNK`` bytes."""
    raw = resp.raw
    read1 = getattr(raw, "read1", None)  # urllib3 >= 2.3
    while True:
        if read1 is not None:
            data = read1(_CHUNK, decode_content=False)
        else:
            data = raw.read(_CHUNK, decode_content=False)
        if not data:
            return
        yield data


#: Content codings one response may list, at most (urllib3 and curl stop at 5 too): a decoder each,
#: nested; a header listing 2,000 of them ended the fetch in a RecursionError.
MAX_CODINGS = 5


def _decoded_chunks(resp: requests.Response) -> Iterator[bytes]:
    """Yield the body decoded per its Content-Encoding, in bounded pieces. Raises
    :class:`_Failure` (``bad_response``, as for any body that does not decode) when the header
    lists more than :data:`MAX_CODINGS` codings, or one this executor cannot decode."""
    codings = _codings(resp.headers.get("Content-Encoding"))
    if len(codings) > MAX_CODINGS:
        raise _Failure(ErrorKind.BAD_RESPONSE, f"the response lists {len(codings)} content codings "
                                               f"(at most {MAX_CODINGS} are decoded)")
    if all(c in ("gzip", "x-gzip", "deflate") for c in codings):
        stream: Iterable[bytes] = _raw_chunks(resp)
        for coding in reversed(codings):  # codings are listed in the order they were applied
            stream = _inflate(stream, coding)
        yield from stream
    else:
        # A coding we did not ask for (br, zstd, ...): let urllib3 decode it if it can (its
        # decoders are bounded from urllib3 2.6: br with brotli installed, zstd with zstandard).
        # One it cannot decode came through as it was sent and was kept as the page's body.
        unknown = [c for c in codings if c not in urllib3.response.HTTPResponse.CONTENT_DECODERS]
        if unknown:
            raise _Failure(ErrorKind.BAD_RESPONSE, f"the body is in content coding {unknown[0][:40]!r}, which "
                                                   f"this executor cannot decode (it asks for {_ACCEPT_ENCODING})")
        yield from resp.raw.stream(_CHUNK, decode_content=True)


# ---------------------------------------------------------------------------------------------
# The fetcher.
# ---------------------------------------------------------------------------------------------


class _Failure(Exception):
    """Internal: ends a fetch with an error kind and message."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


_TUNNEL_RE = re.compile(r"Tunnel connection failed: ([^'\")]+)")
_ERRNO_RE = re.compile(r"\[Errno -?\d+\] [^'\")]+")


def _proxy_failure(shown: str, message: str) -> str:
    """A requests ``ProxyError``'s ``message`` said for a user: the proxy (``shown``) refused the
    tunnel (its status), could not be connected to (the socket error), or else the whole text."""
    tunnel = _TUNNEL_RE.search(message)
    if tunnel:
        return f"the proxy {shown} could not open a tunnel to the site: {tunnel.group(1).strip()}"
    if "Unable to connect to proxy" in message:
        error = _ERRNO_RE.search(message)
        return f"cannot connect to the proxy {shown}" + (f": {error.group(0).strip()}" if error else f" ({message})")
    return f"through the proxy {shown}: {message}"


_POOL_PREFIX_RE = re.compile(r"^\w*HTTPS?Connection(?:Pool)?\(host=[^)]*\): ")


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it wraps, outermost first: requests keeps urllib3's error in
    ``args[0]``, urllib3's ``MaxRetryError`` its cause in ``reason``, ``ProtocolError`` the
    socket's or http.client's error in ``args[1]``; then ``__cause__`` / ``__context__``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        inner = getattr(current, "reason", None)
        if not isinstance(inner, BaseException):
            inner = next((a for a in reversed(current.args) if isinstance(a, BaseException)), None)
        current = inner or current.__cause__ or current.__context__


#: OpenSSL's reasons for a handshake answered in plain HTTP (an ``https://`` URL of an ``http://`` site).
_PLAIN_HTTP_REASONS = ("WRONG_VERSION_NUMBER", "HTTP_REQUEST")


def failure_reason(exc: BaseException) -> str:
    """A failed fetch's exception (requests, urllib3, http.client, ssl or socket) said in a few
    words for a user, from the innermost error it wraps: e.g. ``"connection refused"``,
    ``"connection reset by the server"``, ``"the server closed the connection without a
    response"``, ``"the response ended early (9 bytes read, 991 more expected)"``, ``"not an HTTP
    response: it began 'HELLO THERE'"``, ``"TLS certificate not trusted: self-signed
    certificate"``, ``"Network is unreachable [errno 101]"``. An error it does not know keeps its
    class name and text, without urllib3's connection-pool prefix."""
    import http.client
    import ssl

    causes = list(_causes(exc))
    for error in reversed(causes):  # innermost first
        if isinstance(error, ConnectionRefusedError):
            return "connection refused"
        if isinstance(error, http.client.RemoteDisconnected):  # (a ConnectionResetError: test it first)
            return "the server closed the connection without a response"
        if isinstance(error, ConnectionResetError):
            return "connection reset by the server"
        if isinstance(error, _DecodeError):  # before zlib's own "error: Error -3 while decompressing data"
            return f"the body does not decode as its Content-Encoding says: {error}"
        if isinstance(error, (http.client.IncompleteRead, urllib3.exceptions.IncompleteRead)):
            detail = str(error)
            detail = detail[len("IncompleteRead("):-1] if detail.startswith("IncompleteRead(") else detail
            return f"the response ended early ({detail})"
        if isinstance(error, http.client.LineTooLong):  # "got more than 65536 bytes when reading header line"
            what = str(error).rpartition("when reading ")[2] or "line"
            return f"the response's {what} is longer than {http.client._MAXLINE:,} bytes (the most read)"
        if type(error) is http.client.HTTPException and str(error).startswith("got more than"):  # 100 headers
            return f"the response has more than {http.client._MAXHEADERS} header fields (the most read)"
        if isinstance(error, http.client.BadStatusLine):
            line = str(getattr(error, "line", "") or error).strip()
            return f"not an HTTP response: it began {line[:60]!r}"
        if isinstance(error, http.client.UnknownProtocol):  # "HTTP/2.0 200 OK" in answer to HTTP/1.1
            return f"not an HTTP/1.x response: its status line names {str(error)[:60]!r}"
        if isinstance(error, ssl.SSLCertVerificationError):
            reason = f"TLS certificate not trusted: {error.verify_message or error.reason}"
            if error.verify_code in _CERT_DATE_CODES:  # judged by this machine's clock, which may be off
                shown = datetime.fromtimestamp(time.time(), timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
                reason += f" (by this machine's clock, which reads {shown}: {_CLOCK_HINT})"
            return reason
        if isinstance(error, ssl.SSLError):
            hint = (" (the server answered in plain HTTP, not TLS: an https:// URL for an http:// site?)"
                    if error.reason in _PLAIN_HTTP_REASONS else "")
            return f"TLS error: {error.reason or error}{hint}"
        if isinstance(error, OSError) and error.errno is not None and error.strerror and not isinstance(
                error, (socket.gaierror, TimeoutError)):
            return f"{error.strerror} [errno {error.errno}]"
    innermost = causes[-1]
    if isinstance(innermost, urllib3.exceptions.ProtocolError) and "ended prematurely" in str(innermost):
        return "the response ended early (its chunked body stopped)"
    text = _POOL_PREFIX_RE.sub("", str(innermost)) or type(innermost).__name__
    return f"{type(innermost).__name__}: {text}"


def unusable_response(exc: BaseException) -> bool:
    """Whether a failed fetch's exception (as :func:`failure_reason` takes it) says the server
    answered, but not with a usable HTTP response: bytes that are no status line (an SSH or SMTP
    banner, a TLS alert to a plain ``http://`` request), an HTTP version other than 1.x, a header
    line over 65,536 bytes or more than :data:`MAX_HEADER_FIELDS` fields, a body that does not
    decode as its ``Content-Encoding`` says, or a plain-HTTP answer to an ``https://`` URL. A
    retry gets the same answer: such a page fails as ``bad_response``, which the manager does not
    retry. False for what a retry may mend: a refused or reset connection, a server that closed
    without a word, a body cut short, a timeout, DNS, a certificate."""
    import http.client
    import ssl

    for error in reversed(list(_causes(exc))):  # innermost first, as failure_reason
        if isinstance(error, ConnectionError):  # reset, refused; RemoteDisconnected (closed without
            return False  # a word) too, which is also a BadStatusLine
        if isinstance(error, (_DecodeError, urllib3.exceptions.DecodeError, http.client.BadStatusLine,
                              http.client.LineTooLong, http.client.UnknownProtocol)):
            return True
        if type(error) is http.client.HTTPException and str(error).startswith("got more than"):  # headers
            return True
        if isinstance(error, ssl.SSLError):
            return error.reason in _PLAIN_HTTP_REASONS
    return False


def _host(url: str) -> str:
    """The lower-case host name of an absolute URL ('' when it has none)."""
    return (urlsplit(url).hostname or "").rstrip(".")


#: A MIME type's essence, ``type/subtype``, each an HTTP token (RFC 9110 §8.3.1).
_ESSENCE_RE = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+/[!#$%&'*+.^_`|~0-9a-z-]+")
#: Types that say nothing of the body (WHATWG MIME Sniffing §7.1: the body is sniffed instead).
_UNKNOWN_TYPES = frozenset({"unknown/unknown", "application/unknown", "*/*"})


def media_type(content_type: str | None) -> str | None:
    """The media type a ``Content-Type`` value names, lower case without parameters
    (``"text/html"`` of ``"Text/HTML; charset=utf-8"``), or ``None`` when it names none: no
    header, a value that is no ``type/subtype`` (``"html"``, ``""``, ``";;=="``), or one that says
    nothing (``unknown/unknown``, ``application/unknown``, ``*/*``). A body without a media
    type is sniffed (WHATWG MIME Sniffing §7.1), as browsers do."""
    if content_type is None:
        return None
    essence = content_type.split(";", 1)[0].strip().lower()
    if not _ESSENCE_RE.fullmatch(essence) or essence in _UNKNOWN_TYPES:
        return None
    return essence


def _check_url(url: str) -> str | None:
    """Return why ``url`` cannot be fetched, or None when it is an http(s) URL with a host of at
    most :data:`~gridcrawl.urls.MAX_URL_LENGTH` (2,083) characters, the longest a crawl keeps."""
    if not isinstance(url, str) or not url:
        return "empty URL"
    if len(url) > MAX_URL_LENGTH:
        return f"URL longer than {MAX_URL_LENGTH} characters"
    if any(ch in url for ch in "\r\n\x00"):
        return "URL contains control characters"
    try:
        parts = urlsplit(url)
        parts.port  # raises ValueError on a bad port
    except ValueError as exc:
        return f"unparseable URL: {exc}"
    if parts.scheme.lower() not in ("http", "https"):
        return f"unsupported scheme {parts.scheme!r}" if parts.scheme else "URL has no scheme"
    if not parts.hostname:
        return "URL has no host"
    return None


def _content_length(resp: requests.Response) -> int | None:
    """The response's ``Content-Length`` in bytes, or ``None`` when it has none that is a number
    of bytes (missing, not a number, negative). A value beyond what a result's ``size`` holds
    (signed 64 bits, :data:`~gridcrawl.protocol.INT64`) counts as that much (RFC 9110 §8.6 asks a
    recipient to guard against overflow): ``Content-Length: 99999999999999999999`` on a page is
    ``too_large``, not a result no one can encode (it was ``crash``)."""
    value = resp.headers.get("Content-Length")
    if value is None:
        return None
    try:
        length = int(value.split(",")[0].strip())
    except ValueError:
        return None
    return min(length, INT64) if length >= 0 else None


class Fetcher:
    """Downloads single URLs with bounded time and memory; safe to share between threads.

    Each thread gets its own ``requests.Session`` (created lazily, kept in a
    ``threading.local``) so connections are reused per thread and never shared. Sessions do not
    read proxies, ``.netrc`` or CA bundles from the environment (``trust_env=False``) so a fetch
    goes where its URL and its ``proxy`` say.

    Args:
        user_agent: the User-Agent header sent with every request.
        connect_timeout: seconds allowed to open a TCP (and TLS) connection.
        read_timeout: seconds allowed between bytes received.
        deadline: seconds for the whole fetch, redirects and body included.
        max_body_bytes: cap on the body in bytes after decompression; more is TOO_LARGE.
        max_redirects: redirects followed at most; one more is TOO_MANY_REDIRECTS.
        keep_non_html: also download bodies that are not text/html or application/xhtml+xml
            (responses without a Content-Type are always downloaded: parse decides).
        hop_check: called with each URL before it is requested (the first included); a
            returned string is the reason the hop is refused (BLOCKED), a :class:`HopRefusal`
            refuses it with its own kind, ``None`` allows it (compose several with
            :func:`chain_hop_checks`). It may itself call :meth:`fetch` on this or another
            fetcher (e.g. for robots.txt): no response is open while it runs. An exception it
            raises ends the fetch as CRASH.
        truncate_body: stop reading at ``max_body_bytes`` and keep what was read, instead of
            failing TOO_LARGE (robots.txt: RFC 9309 §2.5 lets a crawler ignore what follows
            the first 500 KiB).
        pacer: a :class:`gridcrawl.executor.pacing.HostPacer` shared by the executor's fetchers:
            before every request (each redirect hop, and robots.txt) the fetch waits until the
            host's delay has passed since the previous request to it ended. Waiting does not
            count against ``deadline``. ``None``: no waiting.
        max_wait: seconds one fetch may spend waiting for its hosts' delays at most; a chain
            that would wait longer fails as TIMEOUT (keeps a worker from sleeping for ever
            through a long chain on a host with a large Crawl-delay).
        peer_check: called with the IP address (text) each new connection is connected to,
            before anything is sent; a returned string refuses it (BLOCKED). The executor
            passes :meth:`gridcrawl.executor.ssrf.SSRFGuard.check_peer` (DNS rebinding).
        verify: how HTTPS certificates are checked, as requests takes it (:func:`tls_verify`):
            ``True`` against certifi's CAs, a PEM file's path against its CAs, ``False`` not at
            all. A certificate that fails the check ends the fetch as CONNECTION, its message
            naming the options that change the check.
        proxy: the HTTP proxy requests go through (:class:`~gridcrawl.executor.proxy.ProxyRoute`:
            every hop whose host its ``no_proxy`` list does not name), or ``None`` for direct
            connections. A proxy that cannot be reached, refuses a tunnel or asks for credentials
            (407) ends the fetch as CONNECTION, its message naming the proxy (password masked).
        credentials: ``{host: (login, password)}`` (lower-case host names, as
            :func:`~gridcrawl.executor.credentials.read_netrc` gives them) sent as HTTP Basic
            authentication on every request to that host and to no other; None: none. A 401
            answer names the option (``--netrc``) or says the credentials were refused.
    """

    def __init__(
        self,
        *,
        user_agent: str,
        connect_timeout: float = 10,
        read_timeout: float = 30,
        deadline: float = 30,
        max_body_bytes: int = 10 * 1024 * 1024,
        max_redirects: int = 20,
        keep_non_html: bool = False,
        hop_check: HopCheck | None = None,
        truncate_body: bool = False,
        pacer=None,
        max_wait: float = 150.0,
        peer_check: Callable[[str], str | None] | None = None,
        verify: bool | str = True,
        proxy: ProxyRoute | None = None,
        credentials: Mapping[str, tuple[str, str]] | None = None,
    ) -> None:
        self.user_agent = user_agent
        self.connect_timeout = float(connect_timeout)
        self.read_timeout = float(read_timeout)
        self.deadline = float(deadline)
        self.max_body_bytes = int(max_body_bytes)
        self.max_redirects = int(max_redirects)
        self.keep_non_html = bool(keep_non_html)
        self.hop_check = hop_check
        self.peer_check = peer_check
        self.truncate_body = bool(truncate_body)
        self.pacer = pacer
        self.max_wait = float(max_wait)
        self.verify = verify
        self.proxy = proxy
        self.credentials = dict(credentials or {})
        if verify is False:  # chosen (--no-tls-verify): said once at start, not on every request
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._sessions: list[requests.Session] = []
        self._generation = 0

    @classmethod
    def from_settings(cls, settings, allow_private: Iterable[str] = (), **extra) -> "Fetcher":
        """An executor's fetcher as the settings say (a :class:`gridcrawl.settings.Settings`:
        user agent, fetch timeouts, download deadline, body cap, redirects, non-HTML bodies, the
        HTTPS check of ``tls_verify`` and ``ca_bundle``, the ``proxy`` and its ``no_proxy``
        hosts, the ``netrc`` file's credentials), behind the SSRF guard
        (:class:`~gridcrawl.executor.ssrf.SSRFGuard`: every hop and every new connection,
        ``allow_private`` CIDRs let through, names left to the proxy as it says), with
        ``extra`` keyword arguments of the constructor (``pacer``, ``max_wait``). The executors,
        the Spark tasks and ``gridcrawl fetch`` build theirs here. Raises ``ValueError`` for a
        ``ca_bundle`` that is no readable file (:func:`tls_verify`), a bad proxy setting
        (:meth:`ProxyRoute.parse <gridcrawl.executor.proxy.ProxyRoute.parse>`), an unusable
        netrc file (:func:`~gridcrawl.executor.credentials.read_netrc`) or a bad CIDR."""
        proxy = ProxyRoute.parse(settings.proxy, settings.no_proxy)
        guard = SSRFGuard(allow_private, proxy=proxy)
        return cls(user_agent=settings.user_agent, connect_timeout=settings.fetch_connect_timeout,
                   read_timeout=settings.fetch_read_timeout, deadline=settings.download_timeout,
                   max_body_bytes=settings.max_body_bytes, max_redirects=settings.max_redirects,
                   keep_non_html=settings.keep_non_html,
                   verify=tls_verify(settings.tls_verify, settings.ca_bundle),
                   credentials=read_netrc(settings.netrc) if settings.netrc else None,
                   proxy=proxy, hop_check=guard.check, peer_check=guard.check_peer, **extra)

    def derive(self, **changes) -> "Fetcher":
        """A new fetcher with this one's settings (user agent, timeouts, deadline, caps,
        ``hop_check``, ``peer_check``, ``verify``, ``proxy``, ``credentials``) except
        ``changes``, e.g. ``derive(keep_non_html=True)`` for robots.txt. It has its own
        sessions. Unknown names raise ``TypeError``."""
        params = dict(user_agent=self.user_agent, connect_timeout=self.connect_timeout,
                      read_timeout=self.read_timeout, deadline=self.deadline,
                      max_body_bytes=self.max_body_bytes, max_redirects=self.max_redirects,
                      keep_non_html=self.keep_non_html, hop_check=self.hop_check,
                      truncate_body=self.truncate_body, pacer=self.pacer, max_wait=self.max_wait,
                      peer_check=self.peer_check, verify=self.verify, proxy=self.proxy,
                      credentials=self.credentials)
        params.update(changes)
        return Fetcher(**params)

    # -- sessions --------------------------------------------------------------------------

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is not None and getattr(self._local, "generation", None) == self._generation:
            return session
        session = _Session()
        session.trust_env = False
        session.verify = self.verify
        adapter = _WatchedAdapter(max_retries=_StaleRetry(total=1, connect=0, read=1, redirect=0, status=0,
                                                          other=0, raise_on_redirect=False, raise_on_status=False))
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.headers.update(
            {"User-Agent": self.user_agent, "Accept": _ACCEPT, "Accept-Encoding": _ACCEPT_ENCODING}
        )
        with self._lock:
            self._sessions.append(session)
            self._local.generation = self._generation
        self._local.session = session
        return session

    def close(self) -> None:
        """Close every thread's session and its pooled connections.

        Call it when no fetch is in flight; a later :meth:`fetch` opens new sessions.
        """
        with self._lock:
            sessions, self._sessions = self._sessions, []
            self._generation += 1
        for session in sessions:
            try:
                session.close()
            except Exception:  # pragma: no cover - closing is best effort
                pass

    # -- fetching --------------------------------------------------------------------------

    def fetch(self, url: str, *, hop_check: HopCheck | None = None, scope_check: HopCheck | None = None,
              headers: dict[str, str] | None = None,
              body_wanted: Callable[[str, str | None], bool | str] | None = None,
              cancel: FetchCancel | None = None) -> FetchResult:
        """Fetch ``url`` (GET), following redirects by hand; never raises.

        Args:
            url: the absolute http(s) URL.
            hop_check: a check for this fetch only (e.g. the thread's scope and robots.txt),
                run on every hop after the fetcher's own ``hop_check``.
            scope_check: a check for this fetch only that needs no network (the thread's
                scope), run on every hop *before* the fetcher's own ``hop_check`` (the SSRF
                guard, which resolves the host): a hop out of the scope is refused as
                ``out_of_scope`` without its host being looked up, not as a DNS failure
                (``connection``, retried) or a private address (``blocked``).
            headers: extra request headers sent on every hop (a semantic crawl's ``Accept``),
                but for a recrawl's conditional ones, ``If-None-Match`` and
                ``If-Modified-Since`` (RFC 9110 §13.1): the validators of this URL's stored
                copy go to its own hop only; so do ``Cookie`` and ``Authorization`` (a rendered
                page's request: its host's credentials, never a redirect target's).
            body_wanted: for this fetch only, ``(final_url, content_type) -> bool | str`` telling
                whether a non-HTML body is downloaded too (a semantic crawl: RDF documents);
                :data:`gridcrawl.semantic.SNIFF`: only if it fits in ``max_body_bytes`` (else the
                response is kept without its body, not failed as ``too_large``).
            cancel: a :class:`FetchCancel` that ends this fetch when cancelled.

        Returns:
            A :class:`FetchResult`; ``result.ok`` tells success, ``error_kind`` and ``error``
            why not. Cookies the site sets are sent on the later hops of this fetch's redirect
            chain only, never on another fetch. The body is kept only for HTML (or any type
            with ``keep_non_html``) with
            a status below 400. A ``304 Not Modified`` is a success with no body read
            (``body`` None, ``size`` 0): the client keeps the copy it has (RFC 9110 §15.4.5).
        """
        start = time.monotonic()
        result = FetchResult(url=url, final_url=url)
        waited_before = self._waited()  # a nested fetch (robots.txt inside a hop check) keeps its own
        self._local.waited = 0.0
        watch = _Watch(self.deadline)
        watch.peer_check = self.peer_check
        previous = getattr(_active, "watch", None)
        if previous is None:  # cookies live for one fetch's redirect chain (a nested robots.txt fetch shares it):
            self._session().cookies.clear()  # kept, they grew without end and went to other applications' pages
        _active.watch = watch
        watch.start()
        try:
            if cancel is not None and not cancel._add(watch):
                watch.cut()
                raise _Failure(ErrorKind.TIMEOUT, "cancelled")
            self._fetch(url, result, start, watch, chain_hop_checks(scope_check, self.hop_check, hop_check), headers,
                        body_wanted)
        except _Failure as failure:
            result.error_kind, result.error = failure.kind, failure.message
            if watch.cut_short:
                result.error_kind, result.error = ErrorKind.TIMEOUT, "cancelled"
        except Exception as exc:  # every failure becomes a result
            if watch.fired:
                result.error_kind = ErrorKind.TIMEOUT
                result.error = "cancelled" if watch.cut_short else f"deadline of {self.deadline:g} s exceeded"
            else:
                result.error_kind = ErrorKind.CRASH
                result.error = f"{type(exc).__name__}: {exc}"
        finally:
            if cancel is not None:
                cancel._discard(watch)
            watch.stop()
            _active.watch = previous
            self._local.waited = waited_before
            result.seconds = time.monotonic() - start
        if result.error_kind is not None:
            result.body = None
        if (result.error_kind is ErrorKind.TIMEOUT and result.status is None
                and result.error == self._timeout_failure().message):
            # with the defaults (read timeout = deadline) a server that accepts and never answers
            # ran into the deadline: say that nothing came, not only that the time ran out
            result.error = f"no response from the server within the deadline of {self.deadline:g} s"
        return result

    def _remaining(self, start: float) -> float:
        return self.deadline - (time.monotonic() - start) + self._waited()

    def _waited(self) -> float:
        """Seconds the current fetch on this thread has slept for politeness (not deadline time)."""
        return getattr(self._local, "waited", 0.0)

    def _pace(self, url: str, watch: _Watch) -> None:
        """Wait for ``url``'s host's delay (the pacer's), postponing the deadline by as much."""
        if self.pacer is None:
            return
        delay = self.pacer.delay(url)
        if delay > 0 and self._waited() + delay > self.max_wait + 1e-9:
            # the next wait could pass the budget: refuse before sleeping through it
            raise _Failure(ErrorKind.TIMEOUT, f"politeness waits of this redirect chain would pass "
                                              f"{self.max_wait:g} s (host delay {delay:g} s)")
        # the deadline moves before the sleep: a wait as long as the time left (a Crawl-delay of
        # download_timeout or more) once let the deadline fire during it, failing every redirect
        ahead = self.pacer.pending(url)
        watch.postpone(ahead)
        try:
            slept = self.pacer.wait(url, self.max_wait - self._waited())
        except TimeoutError:  # other requests of this executor to the host kept it busy
            raise _Failure(ErrorKind.TIMEOUT, f"politeness waits of this redirect chain would pass "
                                              f"{self.max_wait:g} s (host delay {delay:g} s)") from None
        if slept > 0:
            self._local.waited = self._waited() + slept
            watch.postpone(slept - ahead)

    def _timeout_failure(self) -> _Failure:
        return _Failure(ErrorKind.TIMEOUT, f"deadline of {self.deadline:g} s exceeded")

    def _fetch(self, url: str, result: FetchResult, start: float, watch: _Watch,
               hop_check: HopCheck | None, headers: dict[str, str] | None = None, body_wanted=None) -> None:
        session = self._session()
        current = url
        seen = {urldefrag(url)[0]}
        hops = 0
        while True:
            result.final_url = current
            problem = _check_url(current)
            if problem is not None:
                where = "" if current == url else f" (redirect target {current!r})"
                raise _Failure(ErrorKind.INVALID_URL, problem + where)
            if hop_check is not None:
                refusal = hop_check(current)
                where = "" if current == url else f"redirected to {current}: "
                if isinstance(refusal, HopRefusal):
                    result.retry_after = refusal.retry_after
                    raise _Failure(ErrorKind(refusal.kind), where + refusal.reason)
                if refusal is not None:
                    raise _Failure(ErrorKind.BLOCKED, where + str(refusal))
            self._pace(current, watch)
            asked = current  # in flight at the pacer until done(): a redirect moves ``current`` on
            try:
                remaining = self._remaining(start)
                if remaining <= 0:
                    raise self._timeout_failure()
                # a stored copy's validators belong to its URL, not to a redirect's target: sent on,
                # a page that had begun to redirect got 304 from the target and looked unchanged
                resp = self._send(session, current, remaining, watch,
                                  headers if hops == 0 or not headers else
                                  {k: v for k, v in headers.items() if k.lower() not in _OWN_HOP_ONLY})
            except BaseException:
                if self.pacer is not None:
                    self.pacer.done(asked)
                raise
            try:
                if resp.status_code == 407 and self.proxy is not None and self.proxy.applies_to(current):
                    raise _Failure(ErrorKind.CONNECTION, f"the proxy {self.proxy.shown} asks for credentials "
                                   f"(407 Proxy Authentication Required): {_PROXY_HINT}")
                result.status = resp.status_code
                result.headers = {k.lower(): v for k, v in resp.headers.items()}
                cookies = resp.raw.headers.getlist("set-cookie") if hasattr(resp.raw, "headers") else []
                if len(cookies) > 1:  # one line each (RFC 6265 §3 forbids folding them into one)
                    result.headers["set-cookie"] = "\n".join(cookies)
                result.content_type = resp.headers.get("Content-Type")
                location = redirect_target(resp)
                if resp.status_code in REDIRECT_CODES and location:
                    if hops >= self.max_redirects:
                        raise _Failure(
                            ErrorKind.TOO_MANY_REDIRECTS,
                            f"more than {self.max_redirects} redirects",
                        )
                    target = urldefrag(urljoin(current, location.strip()))[0]  # parsed by requests already
                    if target in seen:
                        raise _Failure(ErrorKind.REDIRECT_LOOP, f"redirect loop back to {target}")
                    seen.add(target)
                    result.redirects.append(target)
                    hops += 1
                    current = target
                    continue
                self._finish(resp, result, start, watch, body_wanted)
                return
            finally:
                resp.close()
                if self.pacer is not None:
                    self.pacer.done(asked)

    def _send(self, session: requests.Session, url: str, remaining: float, watch: _Watch,
              headers: dict[str, str] | None = None) -> requests.Response:
        timeout = (min(self.connect_timeout, remaining), min(self.read_timeout, remaining))
        proxies = self.proxy.proxies_for(url) if self.proxy is not None else None
        auth = self.credentials.get(_host(url)) if self.credentials else None  # this hop's host only
        try:
            return session.get(url, stream=True, allow_redirects=False, timeout=timeout, headers=headers,
                               proxies=proxies, auth=auth)
        except Exception as exc:
            raise self._classify(exc, watch, proxied=proxies is not None) from exc

    def _classify(self, exc: BaseException, watch: _Watch, proxied: bool = False) -> _Failure:
        """Map a requests/urllib3/socket exception to a failure: ``timeout``, ``invalid_url``,
        ``bad_response`` (the server answered, unusably: :func:`unusable_response`),
        ``connection`` (a network or server failure a retry may mend) or ``crash``. ``proxied``:
        the request went through ``--proxy``, so an unusable status line or header may be the
        proxy's, this executor's setting, which another executor may not share: ``connection``,
        its message naming the proxy."""
        if watch.fired:
            return self._timeout_failure()
        if isinstance(exc, _Failure):  # the connected address was refused (peer_check)
            return exc
        raw = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, requests.exceptions.ProxyError) and self.proxy is not None:
            message = self.proxy.mask(_proxy_failure(self.proxy.shown, raw))
            if "407" in message:
                message += f"; {_PROXY_HINT}"
        else:
            message = failure_reason(exc)
        if isinstance(
            exc,
            (
                requests.exceptions.Timeout,
                urllib3.exceptions.TimeoutError,
                socket.timeout,
            ),
        ):
            if isinstance(exc, (requests.exceptions.ConnectTimeout, urllib3.exceptions.ConnectTimeoutError)):
                return _Failure(ErrorKind.TIMEOUT, f"no connection within {self.connect_timeout:g} s")
            if watch.used_up():  # the read timeout was the time left: a server trickling bytes, not a silent one
                return self._timeout_failure()
            return _Failure(ErrorKind.TIMEOUT, f"no data from the server for {self.read_timeout:g} s")
        if isinstance(
            exc,
            (
                requests.exceptions.InvalidURL,
                requests.exceptions.MissingSchema,
                requests.exceptions.InvalidSchema,
                requests.exceptions.URLRequired,
                urllib3.exceptions.LocationParseError,
                UnicodeError,
            ),
        ):
            return _Failure(ErrorKind.INVALID_URL, message)
        if isinstance(exc, ValueError) and not isinstance(exc, requests.exceptions.RequestException):
            # requests resolves a redirect's Location even when it does not follow it
            # (Session.send's ``r._next``): one urlsplit cannot parse ("http://[::1") raises there
            return _Failure(ErrorKind.INVALID_URL, f"the redirect target (Location) is no URL: {exc}")
        if "CERTIFICATE_VERIFY_FAILED" in raw:  # a certificate out of its dates: no authority to add
            message += f"; {_TLS_DATE_HINT if _CLOCK_HINT in message else _TLS_HINT}"
        if isinstance(
            exc,
            (
                requests.exceptions.ConnectionError,
                requests.exceptions.ChunkedEncodingError,
                requests.exceptions.ContentDecodingError,
                urllib3.exceptions.HTTPError,
                _DecodeError,
                OSError,
            ),
        ):
            if unusable_response(exc):
                if not proxied:
                    return _Failure(ErrorKind.BAD_RESPONSE, message)
                if not isinstance(exc, requests.exceptions.ProxyError):  # (whose message names it)
                    message = f"through the proxy {self.proxy.shown}: {message}"
            return _Failure(ErrorKind.CONNECTION, message)
        return _Failure(ErrorKind.CRASH, message)

    def _login_hint(self, url: str, challenge: str | None) -> str:
        """What to add to a 401's message: the credentials given for the host were refused, or
        the login the site asks for and the option that gives it."""
        host = _host(url)
        if host in self.credentials:
            return f": the credentials --netrc gives for {host} were refused"
        asked = f" ({challenge[:100]})" if challenge else ""
        return f": the site asks for a login{asked}; give credentials for {host} in --netrc FILE (HTTP Basic)"

    def _finish(self, resp: requests.Response, result: FetchResult, start: float, watch: _Watch,
                body_wanted=None) -> None:
        """Handle the final (non-redirect) response: status, type, body within the limits."""
        status = resp.status_code
        length = _content_length(resp)
        if status in (429, 503):
            result.retry_after = parse_retry_after(resp.headers.get("Retry-After"), date=resp.headers.get("Date"))
        if status >= 500 and self.proxy is not None and self.proxy.applies_to(result.final_url):
            error = proxy_error(result.headers)
            if error is not None:  # the proxy's own answer: the site was not reached
                raise _Failure(ErrorKind.CONNECTION, f"the proxy {self.proxy.shown} could not reach the site: "
                                                     f"HTTP {status} {error}")
        if status >= 400:
            result.size = length or 0
            message = f"HTTP {status} {resp.reason or ''}".rstrip()
            if status == 401:
                message += self._login_hint(result.final_url, resp.headers.get("WWW-Authenticate"))
            if (result.retry_after or 0.0) > MAX_RETRY_AFTER:  # the grid's rule (manager.core.retry_wait)
                message += (f"; the site asks to come back in {result.retry_after:.0f} s, longer than a crawl "
                            f"waits ({MAX_RETRY_AFTER:.0f} s): not retried in this run")
            raise _Failure(ErrorKind.HTTP_STATUS, message)
        if status == 304:  # Not Modified: no content (RFC 9110 §15.4.5); nothing to read
            asked = resp.request.headers if resp.request is not None else {}
            if "If-None-Match" not in asked and "If-Modified-Since" not in asked:  # §15.4.5: only to those
                raise _Failure(ErrorKind.HTTP_STATUS, "HTTP 304 Not Modified to a request that asked for no "
                                                      "validation (no If-None-Match, no If-Modified-Since)")
            return
        media = media_type(result.content_type)
        wanted = media is None or media in HTML_TYPES or self.keep_non_html
        if not wanted and body_wanted is not None:
            wanted = body_wanted(result.final_url, result.content_type)
        if not wanted:
            result.size = length or 0
            return
        if_it_fits = wanted == SNIFF  # read only to be sniffed: past max_body_bytes, kept without it
        if if_it_fits and length is not None and length > self.max_body_bytes:
            result.size = length
            return
        if (length is not None and length > self.max_body_bytes and not self.truncate_body
                and not _codings(resp.headers.get("Content-Encoding"))):
            result.size = length
            raise _Failure(
                ErrorKind.TOO_LARGE,
                f"Content-Length {length} exceeds the cap of {self.max_body_bytes} bytes",
            )
        body = bytearray()
        try:
            for piece in _decoded_chunks(resp):
                if len(body) + len(piece) > self.max_body_bytes:
                    if if_it_fits:  # (a length the headers did not give)
                        result.size = len(body) + len(piece)
                        return
                    if self.truncate_body:
                        body += piece[: self.max_body_bytes - len(body)]
                        break
                    result.size = len(body) + len(piece)
                    raise _Failure(
                        ErrorKind.TOO_LARGE,
                        f"body exceeds the cap of {self.max_body_bytes} bytes (after decompression)",
                    )
                body += piece
                result.size = len(body)
                remaining = self._remaining(start)
                if remaining <= 0:
                    raise self._timeout_failure()
                watch.set_read_timeout(min(self.read_timeout, remaining))
        except _Failure:
            raise
        except Exception as exc:
            raise self._classify(exc, watch) from exc
        if watch.fired:  # the watchdog cut the stream short: what we have is truncated
            raise self._timeout_failure()
        result.size = len(body)
        result.body = bytes(body)
