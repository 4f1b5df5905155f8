"""The adversarial web site: every trap and hostile response a polite, robust crawler must survive.

This module owns :func:`adversarial_site`, a :class:`sites.Site` served by :class:`sites.SiteServer`
on 127.0.0.1, and the paths' expected fates (:data:`GOOD`, :data:`NEVER`, :data:`FAILS`), so the
end-to-end test (``test_adversarial_e2e.py``) and the unit tests share one answer key.

Paths (all linked, directly or not, from ``/``):

=============================  ===============================================================
``/robots.txt``                ``Disallow: /private/``; ``Crawl-delay`` when asked for
``/good/1.html`` ... ``6``     ordinary pages (linked also with ``;jsessionid=``, ``?sid=``,
                               ``?PHPSESSID=`` and ``?sessionid=`` variants: one page each)
``/private/*.html``            disallowed by robots.txt: must never be requested
``/go-private``                302 to ``/private/moved.html`` (a disallowed hop)
``/go-away``                   302 to ``http://127.0.0.3:PORT/`` (a hop out of scope)
``/calendar?month=YYYY-MM``    a calendar linking to the next month forever
``/rel/``, ``/cycle/a/``       relative links that grow the path: ``/rel/x/x/x/`` and
                               ``/cycle/a/b/a/b/a/`` are path-repetition traps
``/loop-a`` ↔ ``/loop-b``      a redirect loop
``/chain/0`` → ``/chain/12``   a 12-hop redirect chain (the cap is 10)
``/tarpit``                    sends its headers, then one byte every 0.2 s
``/bomb.html``                 gzip bomb: 64 KiB on the wire, 64 MiB of zeros decoded
``/huge.html``                 a 50 MiB HTML page without Content-Length
``/doc.pdf``                   a PDF served as application/pdf (with ``/pdf-link.html`` in it)
``/binary.html``               random bytes served as text/html, with ``<a href>``s inside
``/cp1251.html``               windows-1251 declared only in ``<meta>``
``/busy.html``                 429 with ``Retry-After: 1`` the first time, then 200
``/flaky.html``                503 twice, then 200
``/missing.html``              404
=============================  ===============================================================

Everything stays on 127.0.0.0/8.
"""

from __future__ import annotations

import random
import threading
import time
import zlib
from typing import Callable

from sites import Site, redirect, status_page

__all__ = ["adversarial_site", "GOOD", "NEVER", "FAILS", "TITLE_CP1251", "PDF_BYTES", "BOGUS_LINKS",
           "calendar_path", "gzip_bomb", "TRAP_DEPTHS"]

MiB = 1024 * 1024
TITLE_CP1251 = "Привет, мир — проверка"
PDF_BYTES = (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog >> endobj\n"
             b"<a href=\"/pdf-link.html\">not a link</a>\n" + bytes(range(256)) * 8 + b"\n%%EOF\n")
BOGUS_LINKS = [f"/bogus-{i}.html" for i in range(5)]
HUGE_BYTES = 50 * MiB
BOMB_BYTES = 64 * MiB

#: Paths fetched once each with status 200 and stored as documents (calendar pages aside).
GOOD = ["/", *(f"/good/{i}.html" for i in range(1, 7)), "/rel/", "/rel/x/", "/rel/x/x/", "/cycle/a/",
        "/cycle/a/b/", "/cycle/a/b/a/", "/cycle/a/b/a/b/", "/doc.pdf", "/binary.html", "/cp1251.html",
        "/go-public"]
#: Paths that must never be requested.
NEVER = ["/private/secret.html", "/private/moved.html", "/rel/x/x/x/", "/cycle/a/b/a/b/a/", "/chain/11",
         "/chain/12", "/pdf-link.html", *BOGUS_LINKS]
#: Paths recorded in visited_url with this error kind (without the manager's retries).
FAILS = {"/private/secret.html": "robots", "/go-private": "robots", "/go-away": "out_of_scope",
         "/loop-a": "redirect_loop", "/chain/0": "too_many_redirects", "/tarpit": "timeout",
         "/bomb.html": "too_large", "/huge.html": "too_large", "/missing.html": "http_status"}
#: How deep the path-trap pages go before the trap rule stops them.
TRAP_DEPTHS = {"/rel/": 3, "/cycle/a/": 4}


def calendar_path(year: int, month: int) -> str:
    """The calendar page of ``year``-``month`` (month 1-12)."""
    return f"/calendar?month={year:04d}-{month:02d}"


def _html(title: str, links: list[str], body: str = "") -> bytes:
    items = "\n".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>"
            f"<body><h1>{title}</h1>{body}<ul>\n{items}\n</ul></body></html>\n").encode("utf-8")


def _calendar(h) -> None:
    query = h.path.partition("?")[2]
    try:
        year, month = (int(x) for x in query.split("=", 1)[1].split("-"))
    except (IndexError, ValueError):
        year, month = 2024, 1
    nxt = (year + (month == 12), month % 12 + 1)
    h.respond(200, _html(f"Calendar {year}-{month:02d}", [calendar_path(*nxt), "/"]))


def _tarpit(h) -> None:
    """Headers at once, then one byte every 0.2 s for at most 60 s (a slowloris server)."""
    h.send_response(200)
    h.send_header("Content-Type", "text/html")
    h.send_header("Content-Length", "100000")
    h.end_headers()
    h.wfile.flush()
    deadline = time.monotonic() + 60
    try:
        h.wfile.write(b"<html><title>tarpit</title>")
        h.wfile.flush()
        while time.monotonic() < deadline:
            time.sleep(0.2)
            h.wfile.write(b"a")
            h.wfile.flush()
    except OSError:
        pass
    h.close_connection = True


_bomb_lock = threading.Lock()
_bomb: list[bytes] = []


def gzip_bomb() -> bytes:
    """gzip of :data:`BOMB_BYTES` zero bytes (about 64 KiB), built once in 1 MiB steps."""
    with _bomb_lock:
        if not _bomb:
            comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            zeros = bytes(MiB)
            parts = [comp.compress(zeros) for _ in range(BOMB_BYTES // MiB)]
            parts.append(comp.flush())
            _bomb.append(b"".join(parts))
        return _bomb[0]


def _bomb_page(h) -> None:
    h.respond(200, gzip_bomb(), content_type="text/html", headers={"Content-Encoding": "gzip"})


def _huge(h) -> None:
    """50 MiB of HTML without Content-Length (read to close), written in 64 KiB pieces."""
    h.send_response(200)
    h.send_header("Content-Type", "text/html; charset=utf-8")
    h.send_header("Connection", "close")
    h.end_headers()
    h.close_connection = True
    piece = b"<p>" + b"a" * (64 * 1024 - 7) + b"</p>\n"
    sent = 0
    try:
        h.wfile.write(b"<html><title>huge</title>")
        while sent < HUGE_BYTES:
            h.wfile.write(piece)
            sent += len(piece)
        h.wfile.flush()
    except OSError:
        pass


def _binary_body() -> bytes:
    rng = random.Random(20240611)
    noise = bytes(rng.randrange(256) for _ in range(16 * 1024))
    links = b"".join(f'<a href="{p}">x</a>'.encode() for p in BOGUS_LINKS)
    return b"<html><title>bin</title>" + noise[:4000] + links + noise[4000:]


def _counting(responses: list, final: Callable) -> Callable:
    """A handler answering ``responses`` (handlers) in turn, then ``final`` for ever."""
    lock = threading.Lock()
    state = {"n": 0}

    def handle(h) -> None:
        with lock:
            n = state["n"]
            state["n"] += 1
        (responses[n] if n < len(responses) else final)(h)

    return handle


def adversarial_site(crawl_delay: float | None = None, out_of_scope_port: int = 9) -> Site:
    """Build the adversarial site (see the module docstring).

    Args:
        crawl_delay: seconds written as ``Crawl-delay`` into robots.txt, or None for none.
        out_of_scope_port: port of the ``http://127.0.0.3`` URL ``/go-away`` redirects to (never
            requested: it is out of scope).
    """
    gzip_bomb()  # build it now: under load, building it inside the request ate the fetch's deadline
    site = Site()
    robots = "User-agent: *\nDisallow: /private/\n"
    if crawl_delay is not None:
        robots += f"Crawl-delay: {crawl_delay}\n"
    site.pages["/robots.txt"] = robots.encode()
    site.types["/robots.txt"] = "text/plain"

    traps = ["/calendar?month=2024-01", "/rel/", "/cycle/a/", "/loop-a", "/chain/0", "/tarpit", "/bomb.html",
             "/huge.html", "/doc.pdf", "/binary.html", "/cp1251.html", "/busy.html", "/flaky.html",
             "/missing.html", "/go-private", "/go-away", "/go-public", "/private/secret.html"]
    site.pages["/"] = _html("Home", ["/good/1.html", *traps])
    site.links["/"] = ["/good/1.html", *traps]
    for i in range(1, 7):
        nxt = f"/good/{i % 6 + 1}.html"
        variants = [f"/good/{i}.html;jsessionid=A{i}B", f"/good/{i}.html?sid={i}", f"/good/{i}.html?PHPSESSID=z{i}",
                    f"/good/{i}.html?SessionID=q", "/private/secret.html"]
        site.pages[f"/good/{i}.html"] = _html(f"Good {i}", [nxt, *variants])
        site.links[f"/good/{i}.html"] = [nxt]
    site.pages["/go-public"] = _html("moved here", [])  # served 200 directly: the "public" page
    for path in ("/private/secret.html", "/private/moved.html", "/pdf-link.html", *BOGUS_LINKS):
        site.pages[path] = _html("must not be fetched", [])
    site.extra["/calendar"] = _calendar
    # path-repetition traps: each page links one level deeper with a relative href
    for depth in range(1, 7):
        site.pages["/rel/" + "x/" * (depth - 1)] = _html(f"rel {depth}", ["x/"])
    cycle = ["a", "b"]
    for depth in range(1, 8):
        path = "/cycle/" + "".join(f"{cycle[i % 2]}/" for i in range(depth))
        site.pages[path] = _html(f"cycle {depth}", [f"{cycle[depth % 2]}/"])
    site.extra["/loop-a"] = redirect("/loop-b", 302)
    site.extra["/loop-b"] = redirect("/loop-a", 302)
    for i in range(12):
        site.extra[f"/chain/{i}"] = redirect(f"/chain/{i + 1}", 302)
    site.pages["/chain/12"] = _html("end of chain", [])
    site.extra["/tarpit"] = _tarpit
    site.extra["/bomb.html"] = _bomb_page
    site.extra["/huge.html"] = _huge
    site.pages["/doc.pdf"] = PDF_BYTES
    site.types["/doc.pdf"] = "application/pdf"
    site.pages["/binary.html"] = _binary_body()
    site.types["/binary.html"] = "text/html"
    site.pages["/cp1251.html"] = (
        '<!DOCTYPE html><html><head><meta http-equiv="Content-Type" content="text/html; charset=windows-1251">'
        f"<title>{TITLE_CP1251}</title></head><body><p>{TITLE_CP1251}</p>"
        '<a href="/good/2.html">ещё</a></body></html>').encode("cp1251")
    site.types["/cp1251.html"] = "text/html"
    ok = lambda title: (lambda h: h.respond(200, _html(title, [])))  # noqa: E731
    site.extra["/busy.html"] = _counting(
        [lambda h: h.respond(429, b"slow down", content_type="text/plain", headers={"Retry-After": "1"})],
        ok("busy, now served"))
    site.extra["/flaky.html"] = _counting([status_page(503), status_page(503)], ok("flaky, now served"))
    site.extra["/go-private"] = redirect("/private/moved.html", 302)
    site.extra["/go-away"] = redirect(f"http://127.0.0.3:{out_of_scope_port}/elsewhere.html", 302)
    return site
