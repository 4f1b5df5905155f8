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
``/chain/0`` → ``/chain/12``   a 12-hop redirect chain (followed: the cap is 20)
``/long/0`` → ``/long/25``     a 25-hop redirect chain (cut after 20 hops: ``/long/21`` never asked)
``/list?page=N``               a paginated list that never ends (each page links the next)
``/item/N.html``               a numeric-id family of near-identical pages linking ever-larger ids
``/robots.txt`` ``Sitemap:``   names ``/sitemap_index.xml``: an index of ``/sitemaps/pages.xml.gz``
                               (gzip file) and ``/sitemaps/more.xml``, listing ``/hidden/1-3.html``,
                               pages linked from nowhere, with ``<lastmod>``
``/meta-noindex.html``         ``<meta name="robots" content="noindex">``: not stored; its link to
                               ``/via-noindex.html`` is followed
``/header-noindex.html``       ``X-Robots-Tag: noindex``
``/meta-nofollow.html``        ``<meta name="gridcrawl" content="nofollow">``: stored, its link to
                               ``/nofollowed/1.html`` never followed
``/header-nofollow.html``      ``X-Robots-Tag: gridcrawl: nofollow`` (link to ``/nofollowed/2.html``)
``/other-bot.html``            noindex, nofollow for ``otherbot`` only (meta and header): stored,
                               its link to ``/via-other-bot.html`` followed
``rel="nofollow"``             the home page's link to ``/nofollowed/3.html``
``/article/5.html``            canonical to itself; ``/print/5.html`` names it in
                               ``<link rel="canonical">``, ``/amp/5.html`` in a ``Link`` header:
                               both duplicates of it
``/copy-a.html``, ``-b``       byte-identical bodies: one is stored, the other a duplicate of it
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

__all__ = ["adversarial_site", "polite_site", "GOOD", "NEVER", "FAILS", "TITLE_CP1251", "PDF_BYTES", "BOGUS_LINKS",
           "calendar_path", "gzip_bomb", "TRAP_DEPTHS", "TRAP_FAMILIES", "SITEMAP_ONLY", "LASTMOD", "DUPLICATES",
           "POLITE_GOOD", "POLITE_DELAY", "tiny_shop_site", "self_trap_site", "SELF_TRAPS", "session_shop_site",
           "SESSION_SHOP_PAGES"]

MiB = 1024 * 1024
TITLE_CP1251 = "Привет, мир — проверка"
PDF_BYTES = (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog >> endobj\n"
             b"<a href=\"/pdf-link.html\">not a link</a>\n" + bytes(range(256)) * 8 + b"\n%%EOF\n")
BOGUS_LINKS = [f"/bogus-{i}.html" for i in range(5)]
HUGE_BYTES = 50 * MiB
BOMB_BYTES = 64 * MiB

#: Pages linked from nowhere, listed only by the sitemaps (with :data:`LASTMOD`).
SITEMAP_ONLY = ["/hidden/1.html", "/hidden/2.html", "/hidden/3.html"]
#: The ``<lastmod>`` of each sitemap-only page as the sitemap gives it, and as stored (UTC).
LASTMOD = {"/hidden/1.html": ("2024-05-01", "2024-05-01 00:00:00"),
           "/hidden/2.html": ("2024-05-02T10:30:00+02:00", "2024-05-02 08:30:00"),
           "/hidden/3.html": ("2024-05-03T23:00:00Z", "2024-05-03 23:00:00")}
#: Paths fetched once each with status 200 and stored as documents, not duplicates (trap
#: families aside).
GOOD = ["/", *(f"/good/{i}.html" for i in range(1, 7)), "/rel/", "/rel/x/", "/rel/x/x/", "/cycle/a/",
        "/cycle/a/b/", "/cycle/a/b/a/", "/cycle/a/b/a/b/", "/doc.pdf", "/binary.html", "/cp1251.html",
        "/go-public", "/chain/0", "/via-noindex.html", "/meta-nofollow.html", "/header-nofollow.html",
        "/other-bot.html", "/via-other-bot.html", "/article/5.html", *SITEMAP_ONLY]
#: Paths that must never be requested.
NEVER = ["/private/secret.html", "/private/moved.html", "/rel/x/x/x/", "/cycle/a/b/a/b/a/", "/long/21",
         "/pdf-link.html", "/nofollowed/1.html", "/nofollowed/2.html", "/nofollowed/3.html", *BOGUS_LINKS]
#: Paths recorded in visited_url with this error kind (without the manager's retries).
FAILS = {"/private/secret.html": "robots", "/go-private": "robots", "/go-away": "out_of_scope",
         "/loop-a": "redirect_loop", "/long/0": "too_many_redirects", "/tarpit": "timeout",
         "/bomb.html": "too_large", "/huge.html": "too_large", "/missing.html": "http_status",
         "/meta-noindex.html": "noindex", "/header-noindex.html": "noindex",
         "/print/5.html": "duplicate", "/amp/5.html": "duplicate"}
#: Duplicate pages -> the page their document row names (``duplicate_of``).
DUPLICATES = {"/print/5.html": "/article/5.html", "/amp/5.html": "/article/5.html"}
#: The generated families that never end: path prefix -> first page. Each must be stopped by the
#: template-trap rule (URL shape + SimHash), long before the hop limit.
TRAP_FAMILIES = {"/calendar?month=": "/calendar?month=2024-01", "/list?page=": "/list?page=1",
                 "/item/": "/item/1.html"}
#: How deep the path-trap pages go before the trap rule stops them.
TRAP_DEPTHS = {"/rel/": 3, "/cycle/a/": 4}


def calendar_path(year: int, month: int) -> str:
    """The calendar page of ``year``-``month`` (month 1-12)."""
    return f"/calendar?month={year:04d}-{month:02d}"


def _html(title: str, links: list[str], body: str = "") -> bytes:
    items = "\n".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>"
            f"<body><h1>{title}</h1>{body}<ul>\n{items}\n</ul></body></html>\n").encode("utf-8")


_BOILERPLATE = ("<p>Welcome to the Riverside Community Centre. Opening hours: weekdays nine to six, weekends "
                "ten to four. Members get free entry to every event; guests pay a small fee at the door.</p>"
                "<nav>Home · Events · Courses · Rooms · Membership · Volunteers · News · Contact</nav>"
                "<footer>Riverside Community Centre, 12 Mill Lane. Registered charity. Privacy policy. "
                "Accessibility statement. Terms of use. Cookie settings.</footer>")


_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_COLOURS = ["red", "blue", "green", "yellow", "black", "white", "orange"]


def _calendar(h) -> None:
    """A month view linking to the next month, for ever (a real calendar's template)."""
    query = h.path.partition("?")[2]
    try:
        year, month = (int(x) for x in query.split("=", 1)[1].split("-"))
    except (IndexError, ValueError):
        year, month = 2024, 1
    nxt = (year + (month == 12), month % 12 + 1)
    days = "".join(f"<td>{d}</td>" for d in range(1, 29))
    name = _MONTHS[month - 1]
    grid = (f"<h2>{name} {year}</h2><table><tr><th>Mon</th><th>Tue</th><th>Wed</th><th>Thu</th><th>Fri</th>"
            f"<th>Sat</th><th>Sun</th></tr><tr>{days}</tr></table><p>No events in {name}.</p>{_BOILERPLATE}")
    h.respond(200, _html(f"Events calendar {year}-{month:02d}", [calendar_path(*nxt), "/"], grid))


def _listing(h) -> None:
    """Page N of a search result list that never ends: ten entries, a link to page N+1."""
    try:
        page = int(h.path.partition("page=")[2] or 1)
    except ValueError:
        page = 1
    entries = "".join(f"<li>Result {(page - 1) * 10 + i}: a community notice ({_MONTHS[(page + i) % 12]})</li>"
                      for i in range(1, 11))
    body = f"<p>Search results, page {page}.</p><ol>{entries}</ol>{_BOILERPLATE}"
    h.respond(200, _html(f"Notices, page {page}", [f"/list?page={page + 1}", "/"], body))


def _item(h) -> None:
    """Item N of a catalogue generated on demand: near-identical pages linking ever-larger ids."""
    try:
        n = int(h.path.rsplit("/", 1)[1].split(".")[0])
    except (IndexError, ValueError):
        n = 1
    body = (f"<p>Catalogue item {n}, colour {_COLOURS[n % len(_COLOURS)]}. Out of stock. No description "
            f"available.</p>{_BOILERPLATE}")
    h.respond(200, _html(f"Item {n}", [f"/item/{n + 1}.html", f"/item/{2 * n + 1}.html"], body))


def _sitemap_xml(h, entries: list[tuple[str, str]], index: bool = False) -> bytes:
    base = h.site_server.base_url
    tag, item = ("sitemapindex", "sitemap") if index else ("urlset", "url")
    rows = "".join(f"<{item}><loc>{base}{path}</loc>" + (f"<lastmod>{lastmod}</lastmod>" if lastmod else "")
                   + f"</{item}>" for path, lastmod in entries)
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<{tag} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"{rows}</{tag}>\n").encode()


def _sitemaps(site: Site) -> None:
    """robots.txt names an index; the index a gzipped sitemap and a plain one."""
    site.extra["/sitemap_index.xml"] = lambda h: h.respond(
        200, _sitemap_xml(h, [("/sitemaps/pages.xml.gz", "2024-05-04"), ("/sitemaps/more.xml", "")], index=True),
        content_type="application/xml")
    site.extra["/sitemaps/pages.xml.gz"] = lambda h: h.respond(
        200, zlib_gzip(_sitemap_xml(h, [(p, LASTMOD[p][0]) for p in SITEMAP_ONLY[:2]] + [("/", "")])),
        content_type="application/gzip")
    site.extra["/sitemaps/more.xml"] = lambda h: h.respond(
        200, _sitemap_xml(h, [(SITEMAP_ONLY[2], LASTMOD[SITEMAP_ONLY[2]][0])]), content_type="text/xml")
    for i, path in enumerate(SITEMAP_ONLY, 1):
        site.pages[path] = _html(f"Hidden {i}", [], f"<p>Only a sitemap knows page {i}.</p>")


def zlib_gzip(data: bytes) -> bytes:
    """``data`` as a gzip file (RFC 1952)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return comp.compress(data) + comp.flush()


def _robots_pages(site: Site) -> None:
    """Pages whose robots meta tags or X-Robots-Tag headers say noindex or nofollow."""
    def page(title: str, links: list[str], head: str = "") -> bytes:
        return _html(title, links).replace(b"</head>", head.encode() + b"</head>")
    site.pages["/meta-noindex.html"] = page("meta noindex", ["/via-noindex.html"],
                                            '<meta name="ROBOTS" content="NoIndex">')
    site.pages["/via-noindex.html"] = _html("reached through a noindex page", [])
    body = _html("header noindex", [])
    site.extra["/header-noindex.html"] = lambda h: h.respond(200, body, headers={"X-Robots-Tag": "noindex"})
    site.pages["/meta-nofollow.html"] = page("meta nofollow", ["/nofollowed/1.html"],
                                             '<meta name="gridcrawl" content="nofollow">')
    nofollow_body = _html("header nofollow", ["/nofollowed/2.html"])
    site.extra["/header-nofollow.html"] = lambda h: h.respond(
        200, nofollow_body, headers={"X-Robots-Tag": "gridcrawl: nofollow"})
    other = page("for another robot", ["/via-other-bot.html"], '<meta name="otherbot" content="noindex, nofollow">')
    site.extra["/other-bot.html"] = lambda h: h.respond(200, other, headers={"X-Robots-Tag": "otherbot: none"})
    site.pages["/via-other-bot.html"] = _html("reached through another robot's nofollow", [])
    for i in (1, 2, 3):
        site.pages[f"/nofollowed/{i}.html"] = _html("must not be fetched", [])


def _duplicates(site: Site) -> None:
    """Canonical duplicates (tag and Link header) and byte-identical bodies."""
    site.pages["/article/5.html"] = _html("Article 5", ["/print/5.html", "/amp/5.html"]).replace(
        b"</head>", b'<link rel="canonical" href="/article/5.html"></head>')
    site.pages["/print/5.html"] = _html("Article 5 (print)", []).replace(
        b"</head>", b'<link rel="canonical" href="{BASE}/article/5.html"></head>')
    amp = _html("Article 5 (amp)", [])
    site.extra["/amp/5.html"] = lambda h: h.respond(200, amp, headers={"Link": '</article/5.html>; rel="canonical"'})
    same = _html("Same body", [])
    site.pages["/copy-a.html"] = same
    site.pages["/copy-b.html"] = same


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
    robots += "Sitemap: {BASE}/sitemap_index.xml\n"
    site.pages["/robots.txt"] = robots.encode()
    site.types["/robots.txt"] = "text/plain"

    traps = ["/calendar?month=2024-01", "/rel/", "/cycle/a/", "/loop-a", "/chain/0", "/tarpit", "/bomb.html",
             "/huge.html", "/doc.pdf", "/binary.html", "/cp1251.html", "/busy.html", "/flaky.html",
             "/missing.html", "/go-private", "/go-away", "/go-public", "/private/secret.html",
             "/long/0", "/list?page=1", "/item/1.html", "/meta-noindex.html", "/header-noindex.html",
             "/meta-nofollow.html", "/header-nofollow.html", "/other-bot.html", "/article/5.html",
             "/copy-a.html", "/copy-b.html"]
    site.pages["/"] = _html("Home", ["/good/1.html", *traps]).replace(
        b"</ul>", b'<li><a rel="external NoFollow" href="/nofollowed/3.html">sponsored</a></li></ul>')
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
    for i in range(25):
        site.extra[f"/long/{i}"] = redirect(f"/long/{i + 1}", 302)
    site.pages["/long/25"] = _html("end of the long chain", [])
    site.extra["/list"] = _listing
    site.extra["/item/*"] = _item
    _sitemaps(site)
    _robots_pages(site)
    _duplicates(site)
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


#: Syllables of a tiny-shop product's brand (three of them: 17,576 brands), and its other words.
_SHOP_SYLLABLES = "ka ri to mu se na lo pe vi du go ha ze bo fi ru ne ta wo yu ki sa me po li da".split()
_SHOP_NOUNS = ("mug cup bowl plate lamp chair table shelf basket bag wallet belt scarf hat glove sock towel pillow "
               "candle clock").split()


def tiny_shop_site(lists: int = 10, per_list: int = 20, seed: int = 11, related: int = 0) -> tuple[Site, list[str]]:
    """A shop of tiny product pages, one template: ``/`` links ``/list?page=1``; each list page
    ``/list?page=N`` (N = 1 ... ``lists``) links its ``per_list`` products and the next list page;
    each product page ``/product/ID.html`` is about 35 words, of which only its name (a made-up
    brand and a kind of thing: ``Fitali glove``), its price and its id are its own. The
    distinct-word SimHashes of two products are a median 8 bits apart, and 2% of the pairs
    within 3: counted wherever they were found, the products looked like a generated family
    (a trap after 40 of them, docs/realweb.md). The list pages, twenty brands each, are 16 or
    more bits apart.
    ``related`` > 0: each product page also links that many other products of the shop at
    random (a "you may also like" box).

    Returns the site and the paths of its products (``lists * per_list``, all reachable)."""
    rng = random.Random(seed)
    site = Site()
    site.pages["/"] = _html("Acme Store", ["/list?page=1"], "<p>Welcome to the Acme Store.</p>")
    products = [f"/product/{1000 + i}.html" for i in range(lists * per_list)]
    names = [f"{''.join(rng.choice(_SHOP_SYLLABLES) for _ in range(3)).title()} {rng.choice(_SHOP_NOUNS)}"
             for _ in products]
    for n in range(1, lists + 1):
        first = (n - 1) * per_list
        entries = "".join(f'<li><a href="{products[i]}">{names[i]}</a></li>' for i in range(first, first + per_list))
        nxt = [f"/list?page={n + 1}"] if n < lists else []
        site.pages[f"/list?page={n}"] = _html(f"Products, page {n}", nxt + ["/"],
                                              f"<p>Acme Store. Home Shop Basket.</p><ol>{entries}</ol>")
    for i, path in enumerate(products):
        links = [f"/list?page={i // per_list + 1}", "/"] + rng.sample(products, related)
        body = (f"<p>{names[i]} - Acme Store. Home Shop Basket Account Help.</p><p>Price {rng.randint(3, 90)}.99 "
                f"EUR. Item {1000 + i}. In stock, ships in two days. Add to basket. Free delivery over 50 EUR. "
                "Returns within thirty days.</p><p>Back to the list.</p>")
        site.pages[path] = _html(names[i], links, body)
    return site, products


def _counter(h) -> None:
    """Page N of a counter: ``/a?i=N`` links ``/a?i=N+1``, for ever."""
    try:
        n = int(h.path.partition("i=")[2] or 1)
    except ValueError:
        n = 1
    h.respond(200, _html(f"Counter {n}", [f"/a?i={n + 1}", "/"], f"<p>You are visitor number {n}.</p>{_BOILERPLATE}"))


def _months(h) -> None:
    """A month of a year view that links the twelve months of its year and the same month of
    the next and the previous year: a family whose pages link many siblings of their shape."""
    query = dict(part.split("=", 1) for part in h.path.partition("?")[2].split("&") if "=" in part)
    try:
        year, month = int(query.get("y", 2024)), min(max(int(query.get("m", 1)), 1), 12)
    except ValueError:
        year, month = 2024, 1
    links = [f"/months?y={year}&m={m}" for m in range(1, 13)]
    links += [f"/months?y={year + 1}&m={month}", f"/months?y={year - 1}&m={month}", "/"]
    name = _MONTHS[month - 1]
    h.respond(200, _html(f"Room bookings, {name} {year}", links,
                         f"<h2>{name} {year}</h2><p>No rooms booked in {name}.</p>{_BOILERPLATE}"))


#: The families of :func:`self_trap_site`, each of pages that link the next of their own shape
#: for ever: path prefix -> first page.
SELF_TRAPS = {"/calendar?month=": "/calendar?month=2024-01", "/list?page=": "/list?page=1", "/a?i=": "/a?i=1",
              "/months?": "/months?y=2024&m=1"}


def self_trap_site() -> Site:
    """A site of the traps that generate themselves (:data:`SELF_TRAPS`): ``/`` links an endless
    calendar (each month the next), an endless "next page" list of near-identical pages, a
    counter ``/a?i=N`` linking ``/a?i=N+1``, and a year view whose month pages each link the
    twelve months of their year and the same month a year on and a year back."""
    site = Site()
    site.pages["/"] = _html("Riverside Community Centre", list(SELF_TRAPS.values()))
    site.extra["/calendar"] = _calendar
    site.extra["/list"] = _listing
    site.extra["/a"] = _counter
    site.extra["/months"] = _months
    return site


#: Crawl-delay of :func:`polite_site`'s robots.txt, seconds.
POLITE_DELAY = 0.2
#: Pages of :func:`polite_site` stored (final URLs: its links redirect to them).
POLITE_GOOD = ["/", "/a.html", "/b.html", "/c.html"]


def polite_site(delay: float = POLITE_DELAY) -> Site:
    """A small host with ``Crawl-delay: delay`` whose links redirect: ``/r/a`` → ``/a.html``,
    ``/r/b`` → ``/r/b2`` → ``/r/b3`` → ``/b.html``, ``/r/c`` → 5 hops → ``/c.html``. Every request
    it receives (robots.txt and each hop included) must arrive at least ``delay`` seconds after
    the previous one."""
    site = Site()
    site.pages["/robots.txt"] = f"User-agent: *\nCrawl-delay: {delay}\n".encode()
    site.types["/robots.txt"] = "text/plain"
    site.pages["/"] = _html("Polite home", ["/r/a", "/r/b", "/r/c"])
    site.extra["/r/a"] = redirect("/a.html", 301)
    site.extra["/r/b"] = redirect("/r/b2", 302)
    site.extra["/r/b2"] = redirect("/r/b3", 307)
    site.extra["/r/b3"] = redirect("/b.html", 308)
    for i in range(5):
        site.extra[f"/r/c{i}" if i else "/r/c"] = redirect(f"/r/c{i + 1}" if i < 4 else "/c.html", 302)
    for name in "abc":
        site.pages[f"/{name}.html"] = _html(f"Polite {name}", ["/"])
    return site


#: Words of :func:`maze_site`'s paths and babble (no digit: its URLs have no template shape).
MAZE_WORDS = ("amber basin cedar delta ember fjord glade heron inlet juniper kelp larch meadow nectar "
              "orchid pebble quartz reed sorrel thistle umber violet willow yarrow zephyr brook cliff "
              "dune fern grove hollow isle jetty knoll lagoon marsh notch oasis prairie ridge "
              "summit tundra vale wharf").split()
#: Words in a maze page's path: ``len(MAZE_WORDS) ** MAZE_DEPTH`` pages (3.7 million).
MAZE_DEPTH = 4


def maze_path(rng: random.Random) -> str:
    """A maze page's path: ``/maze/`` and :data:`MAZE_DEPTH` random words (``/maze/cedar-kelp-dune-reed``)."""
    return "/maze/" + "-".join(rng.choice(MAZE_WORDS) for _ in range(MAZE_DEPTH))


def _maze(h) -> None:
    """A page of the link maze: random prose and eight links to other random maze pages, all
    drawn from a generator seeded by the path, so a path always gets the same page."""
    path = h.path.partition("?")[0]
    rng = random.Random(path)
    prose = " ".join(rng.choice(MAZE_WORDS) for _ in range(300))
    h.respond(200, _html(path.rsplit("/", 1)[-1].replace("-", " "), [maze_path(rng) for _ in range(8)],
                         f"<p>{prose}</p>"))


def maze_site() -> Site:
    """A link maze, as the tar pits built against crawlers serve (Nepenthes, Iocaine): every
    path under ``/maze/`` is a page of random prose linking eight more random paths, so it
    never ends. Its 3.7 million pages are digit-free and unlike one another, so neither the
    template-trap rule (URL shape + SimHash) nor the path-repetition rule stops it, and from
    ``/`` at depth 20 the hop limit stops nothing either: only a per-host cap ends a crawl of it."""
    site = Site()
    site.pages["/"] = _html("Maze", [maze_path(random.Random(f"/{i}")) for i in range(8)])
    site.extra["/maze/*"] = _maze
    return site


#: The domain of :func:`subdomain_maze_site`: its hosts are reached through the test proxy only
#: (``tests/proxy.py``, ``*.maze.invalid``: RFC 6761 names no DNS server is asked about), as a wildcard DNS record would serve them.
MAZE_DOMAIN = "maze.invalid"


def _subdomain_maze(h) -> None:
    """A page of the subdomain maze: the host's own random prose and eight links to the home
    pages of other random subdomains, drawn from a generator seeded by the host name."""
    host, _, port = h.headers.get("Host", "").partition(":")
    rng = random.Random(host)
    prose = " ".join(rng.choice(MAZE_WORDS) for _ in range(300))
    links = [f"http://{maze_path(rng)[6:]}.{MAZE_DOMAIN}:{port}/" for _ in range(8)]
    h.respond(200, _html(host.split(".", 1)[0].replace("-", " "), links, f"<p>{prose}</p>"))


def subdomain_maze_site() -> Site:
    """A link maze spread over endless host names, as a tar pit behind a wildcard DNS record
    serves it: the home page ``/`` of every host under :data:`MAZE_DOMAIN` is random prose
    linking the home pages of eight more random subdomains (``http://cedar-kelp-dune-reed.maze.invalid:PORT/``).
    Each host has one page, so a cap counted per host name never stops it: only a cap that
    counts a seed's subdomains with it does."""
    return Site(extra={"/": _subdomain_maze})


#: Pages of :func:`session_shop_site` besides ``/``.
SESSION_SHOP_PAGES = 20
#: The session parameters :func:`session_shop_site` writes into its links, in turn.
_SESSION_SHOP_PARAMS = ["osCsid={t}", "zenid={t}", "CFID={n}&CFTOKEN={t}", "sessid={t}"]


def _session_shop_product(n: int) -> tuple[str, str]:
    """Page ``n``'s product name and description: words of :data:`MAZE_WORDS` run together,
    drawn by a generator seeded with ``n``, so each page reads the same on every visit and unlike
    the others (pages this alike to each other would be a template trap: client/traps.py)."""
    rng = random.Random(f"shop-{n}")
    word = lambda: rng.choice(MAZE_WORDS) + rng.choice(MAZE_WORDS)  # noqa: E731
    return (f"{word().title()} {word()}", " ".join(word() for _ in range(40)))


def _session_shop_page(h) -> None:
    """A page of the session shop: its product and three links to other pages, each carrying a
    session identifier made up for this very response (as osCommerce and Zen Cart write theirs)
    and named by the product it leads to."""
    path = h.path.partition("?")[0]
    try:
        n = 0 if path == "/" else int(path.rsplit("/", 1)[1].split(".")[0])
    except (IndexError, ValueError):
        n = 0
    rng = random.Random()
    links = []
    for k in range(1, 4):
        target = (n * 3 + k) % SESSION_SHOP_PAGES + 1
        session = _SESSION_SHOP_PARAMS[(n + k) % len(_SESSION_SHOP_PARAMS)].format(
            t=f"{rng.getrandbits(104):026x}", n=rng.randrange(10 ** 6))
        links.append(f'<li><a href="/p/{target}.html?{session}">{_session_shop_product(target)[0]}</a></li>')
    name, description = _session_shop_product(n)
    body = (f"<h1>{name}</h1><p>{description}</p><ul>{''.join(links)}</ul>{_BOILERPLATE}")
    h.respond(200, (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{name}</title></head>"
                    f"<body>{body}</body></html>\n").encode("utf-8"))


def session_shop_site() -> Site:
    """A shop of ``/`` and :data:`SESSION_SHOP_PAGES` pages ``/p/N.html`` whose every link
    carries a session identifier new on each response (``?osCsid=``, ``?zenid=``,
    ``?CFID=&CFTOKEN=``, ``?sessid=``): without dropping them each visit of a
    page finds its neighbours under URLs never seen before. Each page sells a product of its own
    words (SimHashes 14 bits apart or more): a shop of near-identical pages linking each other is
    a template trap by design (client/traps.py), and one of random anchor texts was one by chance."""
    return Site(extra={"/": _session_shop_page, "/p/*": _session_shop_page})
