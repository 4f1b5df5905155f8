"""The standards real sites publish and the traps they set (issue 14), piece by piece:

SimHash and the template-trap detector, the sitemap reader, robots meta tags and
``X-Robots-Tag``, canonical links, ``rel="nofollow"``, an executor's visit of such pages (real
HTTP server on 127.0.0.1), the pacing of redirect hops and robots.txt at the server's clock, and
the application's decisions on a real SQLite crawl database (noindex, duplicates, traps,
sitemaps and their lastmod). The whole crawl with default settings is
``test_adversarial_e2e.py``.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import subprocess
import sys
import time

import lxml.etree
import lxml.html
import pytest

from gridcrawl.client.store import CrawlStore, Outcome, Scope
from gridcrawl.client.traps import TrapDetector
from gridcrawl.db import open_database
from gridcrawl.executor.fetch import ErrorKind, Fetcher
from gridcrawl.executor.pacing import HostPacer
from gridcrawl.executor.page import visit
from gridcrawl.executor.parse import (INVISIBLE_TAGS, canonical_link, extract_links, header_robots, meta_robots,
                                      parse_page, visible_text)
from gridcrawl.executor.robots import RobotsCache
from gridcrawl.executor.sitemap import MAX_SITEMAP_ENTRIES, SitemapError, parse_lastmod, parse_sitemap
from gridcrawl.protocol import PageResult
from gridcrawl.simhash import hamming, simhash
from gridcrawl.urls import canonical_url, url_shape
from grid import Grid
from sites import Site, generate_site, redirect

UA = "gridcrawl/0.1 (+http://127.0.0.1/)"
NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
TEXT = ("The crawler fetches each page it is given, parses it, extracts and canonicalises its links and "
        "sends the result back to the manager, which records every grid thread with its timings in SQL. ")


# --------------------------------------------------------------------------- SimHash


def test_simhash_is_64_bits_and_stable():
    h = simhash(TEXT)
    assert 0 < h < 2 ** 64 and h == simhash(TEXT.upper())
    assert simhash("") == 0 and simhash("12 345 -- 2024-01-05") == 0  # numbers alone are no features


def test_simhash_near_for_small_changes_far_for_other_texts():
    other = ("Politeness is per host: at most eight requests in flight, a robots.txt crawl delay between "
             "fetches, a pause on 429 with Retry-After and exponential back-off without it.")
    vocabulary = " ".join(f"term{i}x" for i in range(300))  # a page of 300 distinct words
    assert hamming(simhash(vocabulary), simhash(vocabulary + " indeed")) <= 3
    assert hamming(simhash(TEXT), simhash(TEXT.replace("2024", "2025") + " 17 99")) == 0
    assert hamming(simhash(TEXT), simhash(other)) > 10


def _simhash_by_definition(text: str) -> int:
    """SimHash word by word, as gridcrawl.simhash documents it (its code before issue 23)."""
    words = re.findall(r"\w+", text.lower())[:10_000]
    features = {word for word in words if not word.isdigit() and any(char.isalpha() for char in word)}
    counts = [0] * 64
    for word in features:
        h = int.from_bytes(hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")
        for i in range(64):
            counts[i] += h >> i & 1
    return sum(1 << i for i in range(64) if counts[i] > len(features) / 2)


TRICKY_TEXTS = [
    "", "¶", "word—word ¶ “quoted” café naïve\u00a0nbsp\u2003em", "ΟΔΟΣ. ΑΣ'Α Σ'Α", "ΑΘΗΝΑ ΚΑΙ ΠΕΙΡΑΙΑ CAFÉ Ǆ",
    "İstanbul \u212aelvin ǅungla",
    "x_1 _ __ 1_ ² ½ ٣٤ word٣ 2024-01-05 a\u0307b", "日本語、テキスト。句読点", "\ud800lone surrogate\udfff x",
    "\x00nul\x1fctl\x7fdel\x85nel", " ".join(f"w{i}" for i in range(10_500)),  # ASCII, past the 10,000 words
    "é " * 9_997 + "z—y—w end", "é " * 9_999 + "z—y—w end",  # a piece of several words at the cap
    " ".join(f"w{i}—v{i}" for i in range(6_000)),  # many pieces of several words, past the cap
    "".join(f"a{i}¶" for i in range(12_000)),
]


def test_simhash_is_its_definition_and_pinned():
    for text in TRICKY_TEXTS:
        assert simhash(text) == _simhash_by_definition(text), text[:40]
    # values of the code before issue 23: fingerprints stored by a crawl stay comparable
    assert simhash(TEXT) == 409550242566378194
    assert simhash("Café — “naïve” ¶ ΟΔΟΣ. word—word İstanbul 日本語、テキスト。") == 12976533215744780100


# --------------------------------------------------------------------------- URL shapes and traps


@pytest.mark.parametrize("url,shape", [
    ("http://h.example/calendar?month=2024-05", "h.example/calendar?month=#-#"),
    ("http://H.example:8080/item/1234.html", "H.example:8080/item/#.html".replace("H", "h")),
    ("http://h.example/list?page=7&sort=date", "h.example/list?page=#&sort=date"),
    ("http://h.example/docs/library/os.html", None),
    ("http://h.example/", None),
    # tokens with a digit: hex runs, a UUID, 12+ letters and digits; words and hex words without one stay
    ("http://h.example/sess?token=a3f9c2e1b7d04f6a&r=17", "h.example/sess?token=#&r=#"),
    ("http://h.example/o/550e8400-e29b-41d4-a716-446655440000", "h.example/o/#-#-#-#-#"),
    ("http://h.example/s?sid=xK9mQ2pLr7Zt&utm_source=beef", "h.example/s?sid=#&utm_source=beef"),
    ("http://h.example/index2024.html", "h.example/index#.html"),
    ("http://h.example/cafe/page", None),
])
def test_url_shape(url, shape):
    assert url_shape(url) == shape


def test_a_shape_of_near_identical_pages_becomes_a_trap():
    detector = TrapDetector(near_duplicates=3, distance=3)
    page = lambda n: f"http://h.example/calendar?month=2024-{n:02d}"  # noqa: E731
    assert detector.observe(page(1), simhash(TEXT), "http://h.example/") is None
    assert detector.observe(page(2), simhash(TEXT + " 2"), page(1)) is None  # each month linked by the one before
    assert detector.trapped(page(9)) is None
    assert detector.observe(page(3), simhash(TEXT + " 3"), page(2)) is None
    assert detector.observe(page(4), simhash(TEXT + " 4"), page(3)) == "h.example/calendar?month=#-#"
    assert detector.trapped(page(9)) == "h.example/calendar?month=#-#"
    assert detector.trapped("http://h.example/calendar?year=2024") is None  # another shape
    assert detector.trapped("http://other.example/calendar?month=2024-09") is None  # another host


def test_near_identical_pages_linked_from_another_shape_are_no_trap():
    """A walkthrough's shop of tiny product pages (one template, ~30 words) became a trap and lost
    its products: near-identical, but each linked from a list page, not from another product. A
    trap is a shape that generates itself: only pages found on a page of their own shape count."""
    detector = TrapDetector(near_duplicates=3, distance=3)
    product = lambda n: f"http://h.example/product/{n}.html"  # noqa: E731
    for n in range(1, 40):  # from the list pages, a sitemap, or nowhere known (a seed, a revisit)
        found_on = [f"http://h.example/list?page={n // 20 + 1}", "http://h.example/sitemap.xml", None][n % 3]
        assert detector.observe(product(n), simhash(TEXT + f" {n}"), found_on) is None
    assert detector.trapped(product(99)) is None
    assert detector.figures()["h.example/product/#.html"] == {"pages": 39, "near": 0, "elsewhere": 38,
                                                              "trapped": False}
    # the same pages, each found on the one before: the family generates itself
    for n in range(40, 43):
        assert detector.trapped(product(n)) is None
        newly = detector.observe(product(n), simhash(TEXT + f" {n}"), product(n - 1))
    assert newly == "h.example/product/#.html" and detector.trapped(product(99))


def test_one_page_revisited_many_times_is_no_trap():
    """A recrawl (``--watch``) visits one page again and again, with small changes: one page,
    not a repeat of its shape. It made /news/# a trap after 8 visits, and /news/2, new, was set
    aside as a trap. Distinct near-identical pages still are one."""
    detector = TrapDetector(near_duplicates=3, distance=3)
    for n in range(10):
        assert detector.observe("http://h.example/news/1", simhash(TEXT + f" {n}"), "http://h.example/news/0") is None
    assert detector.trapped("http://h.example/news/2") is None
    assert detector.observe("http://h.example/news/2", simhash(TEXT + " 2"), "http://h.example/news/1") is None
    assert detector.observe("http://h.example/news/3", simhash(TEXT + " 3"), "http://h.example/news/2") is None
    assert detector.observe("http://h.example/news/4", simhash(TEXT + " 4"), "http://h.example/news/3") == \
        "h.example/news/#"


def test_distinct_pages_of_one_shape_are_no_trap():
    detector = TrapDetector(near_duplicates=2, distance=3)
    texts = [TEXT, "Politeness is per host with a crawl delay.", "Sitemaps list pages with lastmod dates.",
             "Canonical links name the preferred URL of a page.", "Robots meta tags say noindex or nofollow."]
    for i, text in enumerate(texts):
        assert detector.observe(f"http://h.example/release-15-{i}.html", simhash(text),
                                f"http://h.example/release-15-{i - 1}.html") is None
    assert detector.trapped("http://h.example/release-15-9.html") is None
    assert TrapDetector(near_duplicates=0).observe("http://h.example/a1", 5, "http://h.example/a0") is None  # 0: off


# --------------------------------------------------------------------------- sitemaps


def _urlset(entries, ns=NS) -> bytes:
    rows = "".join(f"<url><loc>{loc}</loc>" + (f"<lastmod>{lm}</lastmod>" if lm else "") + "</url>"
                   for loc, lm in entries)
    return f'<?xml version="1.0"?><urlset xmlns="{ns}">{rows}</urlset>'.encode()


def test_sitemap_urlset_index_and_gzip():
    body = _urlset([("http://h.example/a", "2024-05-01"), ("HTTP://H.example:80/b#x", "2024-05-02T10:30:00+02:00"),
                    ("mailto:x@h.example", None), ("http://h.example/c", "not a date")])
    for data in (body, gzip.compress(body)):
        sm = parse_sitemap(data)
        assert not sm.index and sm.ignored == 1
        assert sm.entries == [("http://h.example/a", "2024-05-01T00:00:00"), ("http://h.example/b", "2024-05-02T08:30:00"),
                              ("http://h.example/c", "")]
    index = (f'<sitemapindex xmlns="{NS}"><sitemap><loc>http://h.example/s1.xml.gz</loc>'
             f"<lastmod>2024</lastmod></sitemap></sitemapindex>").encode()
    assert parse_sitemap(index).index and parse_sitemap(index).entries == [("http://h.example/s1.xml.gz", "2024-01-01T00:00:00")]
    assert parse_sitemap(_urlset([("http://h.example/a", None)], ns="")).entries == [("http://h.example/a", "")]


def test_sitemap_refuses_what_is_no_sitemap_and_expands_no_entity():
    with pytest.raises(SitemapError, match="root element <html>"):
        parse_sitemap(b"<html><body>hello</body></html>")
    with pytest.raises(SitemapError, match="not XML"):
        parse_sitemap(b"just text")
    xxe = (b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY e SYSTEM "file:///etc/hostname">]>'
           b'<urlset><url><loc>&e;</loc></url><url><loc>http://h.example/ok</loc></url></urlset>')
    sm = parse_sitemap(xxe)
    assert sm.entries == [("http://h.example/ok", "")] and sm.ignored == 1
    # a truncated tail keeps the entries read before it, and says so
    cut = _urlset([("http://h.example/a", None), ("http://h.example/b", None)])[:-20]
    assert parse_sitemap(cut).entries == [("http://h.example/a", "")]
    assert parse_sitemap(cut).broken.startswith("the XML breaks off after 1 entry: ")


def test_a_text_sitemap_of_one_url_a_line_is_read():
    """sitemaps.org's text format (``Sitemap: https://h.example/sitemap.txt``): one URL a line,
    UTF-8. It was refused as "not XML" (``bad_sitemap``) and none of its URLs was crawled."""
    body = "\ufeffhttp://h.example/a\r\n\n  https://H.example/b#top  \nnot a url\nftp://h.example/c\nhttp://h.example/é\n"
    for data in (body.encode(), gzip.compress(body.encode())):
        sm = parse_sitemap(data)
        assert not sm.index and sm.ignored == 2
        assert sm.entries == [("http://h.example/a", ""), ("https://h.example/b", ""), ("http://h.example/%C3%A9", "")]
    with pytest.raises(SitemapError, match="not XML, and not a text sitemap either"):
        parse_sitemap(b"User-agent: *\nDisallow: /\n")
    # an XML sitemap saved as UTF-16 (its byte order mark first) is still XML
    utf16 = _urlset([("http://h.example/a?x=1&amp;y=2", None)]).decode().replace('<?xml version="1.0"?>', "")
    assert parse_sitemap(utf16.encode("utf-16")).entries == [("http://h.example/a?x=1&y=2", "")]


def test_a_sitemap_url_with_an_unescaped_ampersand_loses_no_entry():
    """``<loc>http://h.example/p?a=1&b=2</loc>``, the most common sitemap mistake: the XML
    parser stopped there, and every later entry (of up to 50,000) was lost without a word. The
    bare ``&`` is read as ``&amp;`` now; real references are kept, an entity bomb still refused
    (libxml2's amplification limit), the entries before it kept and the break named."""
    body = _urlset([("http://h.example/1", None), ("http://h.example/p?a=1&b=2", None), ("http://h.example/3", None),
                    ("http://h.example/q?x=1&amp;y=2&#38;z=3", None)])
    sm = parse_sitemap(body)
    assert sm.entries == [("http://h.example/1", ""), ("http://h.example/p?a=1&b=2", ""), ("http://h.example/3", ""),
                          ("http://h.example/q?x=1&y=2&z=3", "")]
    assert sm.broken == "" and sm.ignored == 0
    lol = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))
    bomb = (f'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY l0 "lol">{lol}]><urlset xmlns="{NS}">'
            f"<url><loc>http://h.example/a</loc></url><url><loc>http://h.example/&l9;</loc></url>"
            f"<url><loc>http://h.example/b</loc></url></urlset>").encode()
    sm = parse_sitemap(bomb)
    assert sm.entries == [("http://h.example/a", "")] and "breaks off after 1 entry: " in sm.broken, sm


def test_sitemap_limits_of_sitemaps_org():
    many = _urlset([(f"http://h.example/{i}", None) for i in range(MAX_SITEMAP_ENTRIES + 3)])
    sm = parse_sitemap(many)
    assert len(sm.entries) == MAX_SITEMAP_ENTRIES and sm.ignored == 3
    bomb = gzip.compress(b"<urlset>" + b" " * (60 * 1024 * 1024) + b"</urlset>", 9)  # 60 MiB, 60 KiB gzipped
    with pytest.raises(SitemapError, match="sitemap larger than 52428800 bytes uncompressed"):
        parse_sitemap(bomb)


@pytest.mark.parametrize("text,iso", [("2024-05", "2024-05-01T00:00:00"), ("2024-05-01T12:00Z", "2024-05-01T12:00:00"),
                                      ("2024-05-01T12:00:00.5-01:00", "2024-05-01T13:00:00"), ("", ""), ("yesterday", "")])
def test_lastmod_w3c_datetimes(text, iso):
    assert parse_lastmod(text) == iso


# --------------------------------------------------------------------------- robots directives, canonical, nofollow


def _doc(head: str = "", body: str = "") -> lxml.html.HtmlElement:
    return lxml.html.document_fromstring(f"<html><head>{head}</head><body>{body}</body></html>")


def test_meta_robots_for_all_robots_and_for_our_product_token():
    assert meta_robots(_doc('<meta name="Robots" content="NOINDEX, follow">'), "gridcrawl") == {"noindex"}
    assert meta_robots(_doc('<meta name="gridcrawl" content="none">'), "gridcrawl") == {"noindex", "nofollow"}
    assert meta_robots(_doc('<meta name="otherbot" content="noindex, nofollow">'), "gridcrawl") == set()
    assert meta_robots(_doc('<meta name="description" content="noindex">'), "gridcrawl") == set()


def test_the_link_walk_gathers_the_meta_tags_meta_robots_reads():
    """parse_page's one walk for links also gathers every ``<meta>``, in document order, a meta
    the parser left in the body included; meta_robots reads them as it reads the tree."""
    from gridcrawl.executor.parse import parse_page
    html = (b'<html><head><meta charset="utf-8"><meta name="robots" content="noindex"></head><body>'
            b'<a href="/a">a</a><p><meta name="gridcrawl" content="nofollow"></p><area href="/b"></body></html>')
    page = parse_page(html, "http://h.example/", "text/html")
    assert page.metas == list(page.document.iter("meta")) and len(page.metas) == 3
    assert [m.get("name") for m in page.metas] == [None, "robots", "gridcrawl"]
    assert [link.url for link in page.links] == ["http://h.example/a", "http://h.example/b"]
    assert meta_robots(page.document, "gridcrawl", page.metas) == meta_robots(page.document, "gridcrawl") \
        == {"noindex", "nofollow"}
    assert meta_robots(page.document, "gridcrawl", []) == set()  # only the metas it is given


@pytest.mark.parametrize("value,found", [
    ("noindex", {"noindex"}), ("NoIndex, NoFollow", {"noindex", "nofollow"}), ("none", {"noindex", "nofollow"}),
    ("gridcrawl: nofollow", {"nofollow"}), ("otherbot: noindex", set()),
    ("otherbot: noindex, nofollow, gridcrawl: noindex", {"noindex"}),
    ("unavailable_after: 25 Jun 2010 15:00:00 PST, noarchive", set()), (None, set()),
])
def test_x_robots_tag(value, found):
    assert header_robots(value, "gridcrawl") == found


def test_canonical_link_from_header_first_then_tag():
    doc = _doc('<link rel="canonical" href="/a?b=2&a=1">')
    assert canonical_link(doc, "http://h.example/x/y") == "http://h.example/a?a=1&b=2"
    assert canonical_link(doc, "http://h.example/", '<http://h.example/z>; rel="canonical"') == "http://h.example/z"
    assert canonical_link(doc, "http://h.example/", '<http://h.example/n>; rel="next"') == "http://h.example/a?a=1&b=2"
    assert canonical_link(_doc('<link rel="canonical" href="javascript:x()">'), "http://h.example/") is None
    assert canonical_link(_doc(), "http://h.example/") is None


def test_rel_nofollow_links_are_skipped_on_request_and_visible_text():
    doc = _doc(body='<a href="/a">a</a><a rel="noopener NOFOLLOW" href="/b">b</a><script>var x="<a>";</script>'
                    '<style>p{}</style><p>seen <b>words</b></p>')
    assert [link.url for link in extract_links(doc, "http://h.example/")] == ["http://h.example/a", "http://h.example/b"]
    assert [link.url for link in extract_links(doc, "http://h.example/", skip_nofollow=True)] == ["http://h.example/a"]
    text = visible_text(doc)
    assert "seen" in text and "words" in text and "var" not in text and "p{}" not in text


def _visible_text_by_definition(root) -> str:
    """lxml's text pieces of the body after removing the invisible elements (before issue 23)."""
    lxml.etree.strip_elements(root, *INVISIBLE_TAGS, with_tail=False)
    body = root.find("body")
    return " ".join((body if body is not None else root).itertext())


@pytest.mark.parametrize("html", [
    b"<p>foo<script>x</script>bar <b>b</b>c</p>", b"<p>a<script>1</script><script>2</script>b<style>s</style>c</p>",
    b"<body>x<!--c--><script></script>y<?pi z?>w</body>", b"<div><noscript>n<script>s</script>m</noscript>t</div>tail",
    b"<html><head><title>T</title><script>h</script></head>no body <b>bold</b>s</html>", b"<template>t</template>after",
    b"<table><tr><td>1</td><td>2</td></tr></table>", b"<p>a&amp;b &#65;&nbsp;d<br>e</p>", b"<script>only</script>",
    b"<body><script>a</script>b</body>", "<p>é — ¶ 日本</p>".encode(), b"", b"<p>" + b"x<b>y</b>" * 3000 + b"</p>",
])
def test_visible_text_is_its_definition(html):
    expected = _visible_text_by_definition(parse_page(html, "http://h.example/", "text/html").document)
    assert visible_text(parse_page(html, "http://h.example/", "text/html").document) == expected
    if html.startswith(b"<p>foo"):
        assert expected == "foobar  b c"  # the text on both sides of a script is one piece


# --------------------------------------------------------------------------- an executor's visit


def _page(title: str, links=(), head: str = "") -> bytes:
    items = "".join(f'<a href="{href}">{href}</a>' for href in links)
    return f"<html><head><title>{title}</title>{head}</head><body><p>{title}</p>{items}</body></html>".encode()


def _robots_site() -> Site:
    site = Site()
    site.pages["/robots.txt"] = b"User-agent: *\nAllow: /\nSitemap: {BASE}/maps/index.xml\n"
    site.types["/robots.txt"] = "text/plain"
    site.pages["/"] = _page("home", ["/a"])
    site.pages["/noindex"] = _page("n", ["/a"], '<meta name="robots" content="noindex">')
    site.pages["/nofollow"] = _page("f", ["/a"], '<meta name="gridcrawl" content="nofollow">')
    site.pages["/canonical"] = _page("c", [], '<link rel="canonical" href="/">')
    body = _page("h", ["/a"])
    site.extra["/header"] = lambda h: h.respond(200, body, headers={"X-Robots-Tag": "gridcrawl: noindex, nofollow"})
    site.extra["/maps/index.xml"] = lambda h: h.respond(200, (
        f'<sitemapindex xmlns="{NS}"><sitemap><loc>{h.site_server.base_url}/maps/a.xml.gz</loc></sitemap>'
        f"</sitemapindex>").encode(), content_type="application/xml")
    site.extra["/maps/a.xml.gz"] = lambda h: h.respond(
        200, gzip.compress(_urlset([(h.site_server.base_url + "/only", "2024-02-29")])), content_type="application/x-gzip")
    return site


def test_visit_reports_what_a_page_says_about_itself(site_server):
    server = site_server(_robots_site())
    fetcher = Fetcher(user_agent=UA)
    robots = RobotsCache.for_fetcher(fetcher)
    try:
        home = visit(fetcher, server.url("/"), robots=robots, instruction={"sitemaps": True})
        assert home.sitemaps == [server.url("/maps/index.xml")] and not home.noindex
        assert len(home.digest) == 64 and home.simhash is None and home.links  # no digit in its URL: no shape
        assert isinstance(visit(fetcher, server.url("/"), robots=robots,
                                instruction={"simhash_every_page": True}).simhash, int)
        noindex = visit(fetcher, server.url("/noindex"), robots=robots)
        assert noindex.noindex and not noindex.nofollow and noindex.links  # its links are still followed
        nofollow = visit(fetcher, server.url("/nofollow"), robots=robots)
        assert nofollow.nofollow and nofollow.links == [] and not nofollow.noindex
        header = visit(fetcher, server.url("/header"), robots=robots)
        assert header.noindex and header.nofollow and header.links == []
        assert visit(fetcher, server.url("/canonical"), robots=robots).canonical == server.url("/")
        index = visit(fetcher, server.url("/maps/index.xml"), robots=robots, instruction={"sitemap": True})
        assert index.ok if hasattr(index, "ok") else index.error_kind is None
        assert index.sitemaps == [server.url("/maps/a.xml.gz")] and index.sitemap_pages == []
        pages = visit(fetcher, server.url("/maps/a.xml.gz"), robots=robots, instruction={"sitemap": True})
        assert pages.error_kind is None and pages.sitemap_pages == [[server.url("/only"), "2024-02-29T00:00:00"]]
        bad = visit(fetcher, server.url("/"), robots=robots, instruction={"sitemap": True})
        # the site's HTML page answering for a sitemap (a soft 404): no sitemap, and no failure
        assert (bad.error_kind, bad.error) == (None, "no sitemap here (an HTML page, HTTP 200)")
    finally:
        fetcher.close()
        robots.fetcher.close()


def test_a_host_without_sitemap_lines_gets_its_sitemap_xml(site_server):
    site = Site()
    site.pages["/"] = _page("home")
    server = site_server(site)
    fetcher = Fetcher(user_agent=UA)
    try:
        assert visit(fetcher, server.url("/"), instruction={"sitemaps": True}).sitemaps == [server.url("/sitemap.xml")]
        assert visit(fetcher, server.url("/")).sitemaps == []  # only seeds ask
    finally:
        fetcher.close()


# --------------------------------------------------------------------------- politeness inside a thread


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_host_pacer_counts_the_delay_from_the_end_of_the_last_request():
    clock = FakeClock()
    pacer = HostPacer(clock=clock, sleep=clock.sleep, max_hosts=2)
    pacer.set_delay("http://a.example/x", 2.0)
    assert pacer.wait("http://a.example/1") == 0.0  # nothing asked yet
    pacer.done("http://a.example/1")
    clock.now += 0.5
    assert pacer.wait("http://b.example/1") == 0.0  # another host has no delay
    assert pacer.wait("http://a.example/2") == pytest.approx(1.5) and clock.slept == [pytest.approx(1.5)]
    pacer.done("http://a.example/2")
    pacer.set_delay("http://c.example/", 1.0)
    pacer.set_delay("http://d.example/", 1.0)  # a.example forgotten: at most 2 hosts kept
    assert pacer.delay("http://a.example/") == 0.0 and pacer.delay("http://d.example/") == 1.0


def test_host_pacer_lets_one_request_at_a_time_go_to_a_host_with_a_delay():
    clock = FakeClock()
    pacer = HostPacer(clock=clock, sleep=clock.sleep)
    pacer.set_delay("http://a.example/", 1.0)
    assert pacer.wait("http://a.example/1") == 0.0  # in flight until done()
    assert pacer.pending("http://a.example/2") == 1.0  # at least the delay, however long the other takes
    with pytest.raises(TimeoutError):
        pacer.wait("http://a.example/2", limit=0.5)  # it stays in flight: given up, nothing reserved
    pacer.done("http://a.example/1")
    assert pacer.wait("http://a.example/2") == pytest.approx(1.0)
    assert pacer.wait("http://b.example/1") == 0.0 and pacer.wait("http://b.example/2") == 0.0  # no delay: no limit


def test_a_redirect_hop_into_a_host_waits_for_that_hosts_own_request(site_server):
    """One executor (one fetcher, pacer and robots.txt cache; two worker threads): a page of
    host B and, at the same moment, a page of host A that redirects to B. The hop held none of
    B's slots at the manager and waited only for B's last request to have *ended*: it went out
    while B's own page was in flight (0.002 s apart for a Crawl-delay of 1 s). Now every
    request to B starts at least its delay after the previous one ended."""
    import threading
    delay = 0.4
    b_site = Site(pages={"/robots.txt": f"User-agent: *\nCrawl-delay: {delay}\n".encode()},
                  types={"/robots.txt": "text/plain"})
    b_site.extra["/own.html"] = lambda h: (time.sleep(0.3), h.respond(200, _page("own")))
    b_site.pages["/landing.html"] = _page("landing")
    b = site_server(b_site, host="127.0.0.2")
    a = site_server(Site(extra={"/go": redirect(b.url("/landing.html"), 302)}))
    fetcher = Fetcher(user_agent=UA, pacer=HostPacer())
    robots = RobotsCache.for_fetcher(fetcher)
    visit(fetcher, b.url("/robots.txt"), robots=robots)  # B's Crawl-delay known, as after its first page
    results = []
    try:
        threads = [threading.Thread(target=lambda u=u: results.append(visit(fetcher, u, robots=robots)))
                   for u in (b.url("/own.html"), a.url("/go"))]
        for t in threads:
            t.start()
            time.sleep(0.05)
        for t in threads:
            t.join(10)
    finally:
        fetcher.close()
        robots.fetcher.close()
    assert sorted(r.final_url for r in results if r.error_kind is None) == [b.url("/landing.html"), b.url("/own.html")]
    with b.lock:
        records = sorted(b.requests, key=lambda r: r.started)
    assert [r.path for r in records][-2:] in (["/own.html", "/landing.html"], ["/landing.html", "/own.html"])
    gaps = [y.started - x.finished for x, y in zip(records, records[1:])]
    assert min(gaps) >= delay * 0.95, [(r.path, r.started, r.finished) for r in records]


def _chain_site(hops: int, delay: float | None) -> Site:
    site = Site()
    if delay is not None:
        site.pages["/robots.txt"] = f"User-agent: *\nCrawl-delay: {delay}\n".encode()
        site.types["/robots.txt"] = "text/plain"
    for i in range(hops):
        site.extra[f"/hop/{i}"] = redirect(f"/hop/{i + 1}", 302)
    site.pages[f"/hop/{hops}"] = _page("end")
    return site


def _paced_visit(url: str, deadline: float):
    """``url`` visited as an executor does: its pacer, robots.txt (whose Crawl-delay it obeys)."""
    fetcher = Fetcher(user_agent=UA, deadline=deadline, pacer=HostPacer())
    robots = RobotsCache.for_fetcher(fetcher)
    try:
        return visit(fetcher, url, robots=robots)
    finally:
        fetcher.close()
        robots.fetcher.close()


def test_redirect_hops_and_robots_txt_wait_out_the_crawl_delay(site_server):
    """Server-side arrival times: robots.txt, then 4 hops and the page, each at least the host's
    Crawl-delay after the previous response ended; the waits do not count against the 1 s
    deadline of the fetch (5 × 0.25 s of waiting)."""
    server = site_server(_chain_site(4, 0.25))
    page = _paced_visit(server.url("/hop/0"), deadline=1.0)
    assert page.error_kind is None and page.final_url == server.url("/hop/4") and len(page.redirects) == 4
    with server.lock:
        records = sorted(server.requests, key=lambda r: r.started)
    assert [r.path for r in records] == ["/robots.txt", *(f"/hop/{i}" for i in range(5))]
    gaps = [b.started - a.finished for a, b in zip(records, records[1:])]
    assert min(gaps) >= 0.25, gaps


def test_a_crawl_delay_as_long_as_the_deadline_does_not_fail_the_redirect(site_server):
    """A Crawl-delay of at least the fetch's deadline (30 s and 30 s by default): the deadline
    fired during the politeness sleep before each hop, and every redirect of such a host failed
    as a timeout. Here: 0.6 s of delay, a 0.5 s deadline."""
    server = site_server(_chain_site(2, 0.6))
    page = _paced_visit(server.url("/hop/0"), deadline=0.5)
    assert page.error_kind is None, page.error
    assert page.final_url == server.url("/hop/2") and len(page.redirects) == 2


def test_the_manager_delay_spaces_hops_too_and_waits_are_bounded(site_server):
    server = site_server(_chain_site(3, None))
    fetcher = Fetcher(user_agent=UA, pacer=HostPacer(), max_wait=0.7)
    try:
        page = visit(fetcher, server.url("/hop/0"), delay=0.2)  # no robots.txt: the job's delay
        assert page.error_kind is None
        with server.lock:
            records = sorted(server.requests, key=lambda r: r.started)
        assert min(b.started - a.finished for a, b in zip(records, records[1:])) >= 0.2
        server.reset()
        # 3 hops at 0.3 s need 0.9 s of waiting: more than max_wait (0.7 s), refused before sleeping it
        slow = visit(fetcher, server.url("/hop/0"), delay=0.3)
        assert slow.error_kind == ErrorKind.TIMEOUT.value and "politeness waits" in slow.error
        assert server.count("/hop/3") == 0
    finally:
        fetcher.close()


def test_redirect_limit_is_20_hops(site_server):
    server = site_server(_chain_site(25, None))
    fetcher = Fetcher(user_agent=UA)
    try:
        assert fetcher.fetch(server.url("/hop/5")).ok  # 20 hops
        far = fetcher.fetch(server.url("/hop/4"))  # 21 hops
        assert far.error_kind == ErrorKind.TOO_MANY_REDIRECTS and server.count("/hop/25") == 1
    finally:
        fetcher.close()


# --------------------------------------------------------------------------- the application's decisions


@pytest.fixture
def store(tmp_path) -> CrawlStore:
    return CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))


def _claim_all(store: CrawlStore) -> dict:
    return {p.url: p for p in store.claim(1000)}


def _outcome(pend, **page) -> Outcome:
    page.setdefault("status", 200)
    page.setdefault("content_type", "text/html")
    return Outcome(pend, PageResult(url=pend.url, final_url=pend.url, **page), "ex", 1, False)


def _rows(store: CrawlStore, sql: str) -> list[tuple]:
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(sql)]


H = "http://h.example"


def test_noindex_canonical_and_digest_duplicates(store):
    scope = Scope(["h.example"])
    store.add_seeds([f"{H}/"])
    (seed,) = _claim_all(store).values()
    links = [[f"{H}/{name}", ""] for name in ("a", "print-a", "copy1", "copy2", "hidden", "own")]
    store.apply([_outcome(seed, digest="d0", links=links)], scope)
    p = _claim_all(store)
    store.apply([_outcome(p[f"{H}/a"], digest="da", canonical=f"{H}/a", content="<p>a</p>"),
                 # names a page stored in this same batch
                 _outcome(p[f"{H}/print-a"], digest="dp", canonical=f"{H}/a", content="<p>print</p>"),
                 _outcome(p[f"{H}/copy1"], digest="same", content="<p>same</p>"),
                 _outcome(p[f"{H}/copy2"], digest="same", content="<p>same</p>"),
                 _outcome(p[f"{H}/hidden"], digest="dh", noindex=True, links=[[f"{H}/via-hidden", ""]]),
                 # its canonical names a URL not stored: stored itself
                 _outcome(p[f"{H}/own"], digest="do", canonical=f"{H}/elsewhere", content="<p>own</p>")], scope)
    docs = {r[0]: r[1:] for r in _rows(store, "SELECT url, duplicate_of, content, content_digest, canonical_url FROM document")}
    assert docs[f"{H}/print-a"][:2] == (f"{H}/a", None)
    assert docs[f"{H}/copy2"][:2] == (f"{H}/copy1", None) and docs[f"{H}/copy1"][:2] == (None, "<p>same</p>")
    assert docs[f"{H}/own"][0] is None and docs[f"{H}/own"][3] == f"{H}/elsewhere"
    assert f"{H}/hidden" not in docs
    kinds = dict(_rows(store, "SELECT url, error_kind FROM visited_url"))
    assert kinds[f"{H}/hidden"] == "noindex" and kinds[f"{H}/print-a"] == kinds[f"{H}/copy2"] == "duplicate"
    assert f"{H}/via-hidden" in _claim_all(store)  # a noindex page's links are followed
    # a later batch: the stored original is found in the database
    store.add_seeds([f"{H}/late"])
    late = _claim_all(store)[f"{H}/late"]
    store.apply([_outcome(late, digest="same", content="<p>same</p>")], scope, store_duplicates=True)
    dup, content = _rows(store, f"SELECT duplicate_of, content FROM document WHERE url = '{H}/late'")[0]
    assert (dup, content) == (f"{H}/copy1", "<p>same</p>")  # store_duplicates keeps the body


def test_trapped_shapes_are_recorded_not_followed(store):
    scope = Scope(["h.example"], trap_near_duplicates=3)
    store.add_seeds([f"{H}/cal?m=1"])
    for month in range(1, 8):
        (pend,) = _claim_all(store).values()
        counts = store.apply([_outcome(pend, simhash=simhash(TEXT), links=[[f"{H}/cal?m={month + 1}", ""]])], scope)
        if counts["traps"]:
            break
    assert month == 4  # pages 2, 3 and 4 were near-duplicates of page 1
    assert _rows(store, "SELECT url, error_kind, error FROM visited_url WHERE error_kind = 'trap'") == [
        (f"{H}/cal?m=5", "trap", "URL shape h.example/cal?m=# repeats near-identical pages")]
    assert _rows(store, "SELECT COUNT(*) FROM to_visit_url") == [(0,)]


def test_near_identical_pages_queued_from_a_page_of_another_shape_are_stored(store):
    """The store hands the detector each page's referrer (``to_visit_url.discovered_from``):
    products linked from list pages are stored however alike; a calendar linked month by month
    from a product (its own shape) still becomes a trap."""
    scope = Scope(["h.example"], trap_near_duplicates=3)
    store.add_seeds([f"{H}/list?page=1"])
    (listing,) = _claim_all(store).values()
    products = [[f"{H}/product/{n}.html", ""] for n in range(1, 21)]
    store.apply([_outcome(listing, simhash=simhash(TEXT + " list"), links=[*products, [f"{H}/cal?m=1", ""]])], scope)
    pending = _claim_all(store)
    assert {p.discovered_from for p in pending.values()} == {f"{H}/list?page=1"}
    counts = store.apply([_outcome(pend, simhash=simhash(TEXT),
                                   links=[[f"{H}/cal?m={int(pend.url.rsplit('=', 1)[1]) + 1}", ""]]
                                   if "cal?m=" in pend.url else [[f"{H}/list?page=1", ""]])
                          for pend in pending.values()], scope)
    assert counts["documents"] == 21 and counts["traps"] == 0
    assert _rows(store, "SELECT COUNT(*) FROM document WHERE url LIKE '%/product/%'") == [(20,)]
    for month in range(2, 9):  # each month found on the one before
        (pend,) = _claim_all(store).values()
        assert pend.discovered_from == f"{H}/cal?m={month - 1}"
        counts = store.apply([_outcome(pend, simhash=simhash(TEXT), links=[[f"{H}/cal?m={month + 1}", ""]])], scope)
        if counts["traps"]:
            break
    assert month == 4  # months 2, 3 and 4 were near-duplicates of month 1 found on their own shape
    assert _rows(store, "SELECT url FROM visited_url WHERE error_kind = 'trap'") == [(f"{H}/cal?m=5",)]


def test_one_page_under_random_session_tokens_becomes_a_trap(store):
    """A walkthrough's site linked its one page as ``/sess?token=<16 hex>``, a new token on every
    page: the shapes replaced digits only, so every URL had its own and the crawl fetched the page
    100,000 times (the per-host cap). Hex tokens are shaped now: the family is a trap."""
    import random
    rng = random.Random(5)
    scope = Scope(["h.example"], trap_near_duplicates=3)
    store.add_seeds([f"{H}/sess?token={rng.getrandbits(64):016x}"])
    for visit in range(1, 10):
        (pend,) = _claim_all(store).values()
        counts = store.apply([_outcome(pend, simhash=simhash(TEXT),
                                       links=[[f"{H}/sess?token={rng.getrandbits(64):016x}", ""]])], scope)
        if counts["traps"]:
            break
    assert visit == 4
    assert _rows(store, "SELECT error FROM visited_url WHERE error_kind = 'trap'") == [
        ("URL shape h.example/sess?token=# repeats near-identical pages",)]


def test_sitemaps_are_queued_with_their_lastmod(store):
    scope = Scope(["h.example"])
    store.add_seeds([f"{H}/"])
    (seed,) = _claim_all(store).values()
    store.apply([_outcome(seed, sitemaps=[f"{H}/index.xml", "http://other.example/s.xml"])], scope)
    (index,) = _claim_all(store).values()
    assert (index.url, index.kind, index.depth) == (f"{H}/index.xml", "sitemap", 0)
    done = store.apply([_outcome(index, sitemaps=[f"{H}/s1.xml.gz"])], scope)
    assert (done["pages"], done["sitemaps"], done["documents"], done["sitemap_errors"]) == (1, 1, 0, 0)
    (child,) = _claim_all(store).values()
    assert child.kind == "sitemap-child"
    store.apply([_outcome(child, sitemaps=[f"{H}/nested.xml"],  # an index inside an index: ignored
                          sitemap_pages=[[f"{H}/p1", "2024-05-02T08:30:00"], [f"{H}/p2", ""],
                                         ["http://other.example/x", ""]])], scope)
    pending = _claim_all(store)
    assert set(pending) == {f"{H}/p1", f"{H}/p2"}
    assert str(pending[f"{H}/p1"].lastmod) == "2024-05-02 08:30:00" and pending[f"{H}/p2"].lastmod is None
    done = store.apply([_outcome(pending[f"{H}/p1"], digest="x1"), _outcome(pending[f"{H}/p2"], digest="x2")], scope)
    assert (done["pages"], done["sitemaps"], done["documents"]) == (2, 0, 2)
    assert dict(_rows(store, "SELECT url, lastmod FROM document"))[f"{H}/p1"].startswith("2024-05-02 08:30:00")
    assert _rows(store, "SELECT COUNT(*) FROM document WHERE url LIKE '%.xml%'") == [(0,)]  # sitemaps: visited only
    assert len(_rows(store, "SELECT url FROM visited_url WHERE url LIKE '%.xml%'")) == 2


def test_a_sitemap_flood_is_read_a_few_at_a_time(store):
    """A sitemap index of 50,000 sitemaps of 30,000 URLs each (within sitemaps.org's limits): its
    sitemaps, one hop above every page, filled the client's window, 3 GB of decoded results,
    and no page was fetched in 4 minutes. A claim now takes at most ``sitemaps`` of them and
    pages for the rest (the client keeps SITEMAPS_IN_FLIGHT)."""
    scope = Scope(["h.example"])
    store.add_seeds([f"{H}/"])
    (seed,) = _claim_all(store).values()
    store.apply([_outcome(seed, links=[[f"{H}/page{i}", ""] for i in range(5)], sitemaps=[f"{H}/index.xml"])], scope)
    (index,) = store.claim(1)  # depth 0, above the pages
    assert index.kind == "sitemap"
    store.apply([_outcome(index, sitemaps=[f"{H}/s{i}.xml" for i in range(20)])], scope)
    claimed = store.claim(10, sitemaps=3)
    assert sorted(p.kind or "page" for p in claimed) == ["page"] * 5 + ["sitemap-child"] * 3  # 5 pages were left
    assert store.claim(10, sitemaps=0) == []  # only sitemaps are left, and none may go
    assert len(store.claim(10)) == 10  # without a limit (a Spark layer): sitemaps too


def test_a_robots_txt_of_many_sitemap_indexes_is_read_within_a_bound(store):
    """A walkthrough's robots.txt named 3,000 sitemap indexes of 100 sitemaps of 1,000 URLs each
    (within sitemaps.org's limits): every index entry was queued, the sitemap files filled the
    per-host cap, and after 171 s the crawl had read 1,783 sitemaps, stored 2 documents, and had
    98,215 sitemaps left (hours more). A site now has at most SITEMAP_FILES_PER_SITE sitemap
    files, HOST_SITEMAPS of its own among them, so that its indexes leave room to the sitemaps
    they name; the rest are counted for the summary."""
    from gridcrawl.client.store import HOST_SITEMAPS, SITEMAP_FILES_PER_SITE
    scope = Scope(["h.example"])
    store.add_seeds([f"{H}/"])
    (seed,) = _claim_all(store).values()
    store.apply([_outcome(seed, sitemaps=[f"{H}/sm{i}.xml" for i in range(3000)])], scope)
    indexes = store.claim(5000)
    assert len(indexes) == HOST_SITEMAPS and {p.kind for p in indexes} == {"sitemap"}
    assert [p.url for p in indexes[:2]] == [f"{H}/sm0.xml", f"{H}/sm1.xml"]  # the first ones named
    assert store.sitemaps_skipped == {"h.example": 3000 - HOST_SITEMAPS}
    for index in indexes[:12]:  # 12 x 100 children: the budget is full after 9
        n = index.url.split("sm")[1][:-4]
        store.apply([_outcome(index, sitemaps=[f"{H}/sm{n}-{j}.xml" for j in range(100)])], scope)
    children = store.claim(5000)
    assert len(children) == SITEMAP_FILES_PER_SITE - HOST_SITEMAPS and {p.kind for p in children} == {"sitemap-child"}
    assert store.sitemaps_skipped == {"h.example": 3000 - HOST_SITEMAPS + 1200 - len(children)}
    # a new client on the same database counts the sitemap files there (read, and queued)
    again = CrawlStore(store.engine)
    again.apply([_outcome(indexes[50], sitemaps=[f"{H}/sm50-{j}.xml" for j in range(100)])], scope)
    assert again.sitemaps_skipped == {"h.example": 100}


def test_sitemap_files_do_not_count_against_the_page_cap_and_stop_at_it(store):
    """Sitemap files counted against ``max_pages_per_host`` like pages: a site's sitemaps filled
    its cap and no page it lists was queued. They are counted apart now; once the site's pages
    reach the cap, the sitemap files still waiting are taken out of the queue (every page they
    list would be left out) and no more are queued."""
    scope = Scope(["h.example"], max_pages_per_host=5)
    store.add_seeds([f"{H}/"])
    (seed,) = _claim_all(store).values()
    store.apply([_outcome(seed, sitemaps=[f"{H}/index.xml"])], scope)
    (index,) = _claim_all(store).values()
    store.apply([_outcome(index, sitemaps=[f"{H}/s{i}.xml" for i in range(6)])], scope)
    maps = store.claim(2)  # two read now, four waiting
    assert len(_rows(store, "SELECT id FROM to_visit_url WHERE kind = 'sitemap-child'")) == 6
    store.apply([_outcome(maps[0], sitemap_pages=[[f"{H}/p{k}", ""] for k in range(3)])], scope)
    pages = {p.url: p for p in store.claim(10, sitemaps=0)}
    assert sorted(pages) == [f"{H}/p0", f"{H}/p1", f"{H}/p2"]
    assert not store.capped and not store.sitemaps_skipped  # the seed and 3 pages: 4 of 5
    store.apply([_outcome(maps[1], sitemap_pages=[[f"{H}/q{k}", ""] for k in range(3)])], scope)
    assert store.capped == {"h.example": 2}  # the cap is full: q1 and q2 left out ...
    assert _rows(store, "SELECT url FROM to_visit_url WHERE kind IS NOT NULL") == []  # ... and the sitemaps
    assert store.sitemaps_skipped == {"h.example": 4}
    # a resumed crawl counts pages, not sitemap files, against the cap (the seed, p0-p2, q0: 5)
    again = CrawlStore(store.engine)
    again.apply([_outcome(pages[f"{H}/p0"], links=[[f"{H}/new", ""]])], scope)
    assert again.capped == {"h.example": 1}
    # a site below its cap after all the sitemaps were read
    wide = Scope(["h.example"], max_pages_per_host=10)
    third = CrawlStore(store.engine)
    third.apply([_outcome(pages[f"{H}/p1"], links=[[f"{H}/new", ""]])], wide)
    assert f"{H}/new" in {p.url for p in third.claim(10)}


def test_a_recrawl_reads_the_sitemaps_of_a_site_at_its_page_cap(store):
    """A recrawl reads its sitemaps again for their lastmods (which stored pages are due): a
    site at ``max_pages_per_host`` keeps them, where a plain crawl would take them out."""
    from gridcrawl.db import utcnow
    scope = Scope(["h.example"], max_pages_per_host=3)
    store.add_seeds([f"{H}/"])
    (seed,) = _claim_all(store).values()
    store.apply([_outcome(seed, sitemaps=[f"{H}/a.xml", f"{H}/b.xml"])], scope)
    maps = {p.url: p for p in _claim_all(store).values()}
    store.apply([_outcome(maps[f"{H}/a.xml"], sitemap_pages=[[f"{H}/p{k}", ""] for k in range(2)]),
                 _outcome(maps[f"{H}/b.xml"], sitemap_pages=[[f"{H}/q{k}", ""] for k in range(2)])], scope)
    pages = _claim_all(store)
    assert len(pages) == 2 and store.capped == {"h.example": 2}  # the seed and 2 pages: the cap
    store.apply([_outcome(pend, digest=url) for url, pend in pages.items()], scope)
    recrawl = CrawlStore(store.engine)
    recrawl.recrawl_since = utcnow()
    assert recrawl.queue_sitemaps(every=True) == 2
    again = recrawl.claim(1)  # one sitemap read again; the other waits
    recrawl.apply([_outcome(again[0], digest="changed", sitemap_pages=[[f"{H}/new{k}", ""] for k in range(2)])], scope)
    assert recrawl.capped == {"h.example": 2} and not recrawl.sitemaps_skipped
    assert len(_rows(store, "SELECT id FROM to_visit_url WHERE kind = 'sitemap'")) == 1


def test_a_sitemaps_lastmod_reaches_pages_queued_or_in_flight_before_it(store):
    """The seed's links queue ``/q`` and ``/f`` before its sitemap is read; ``/f`` is even in
    flight when the sitemap's result is applied. The sitemap's lastmod of each still reaches its
    document (before, only pages stored before the sitemap, or queued by it, kept theirs: which
    one depended on the order results came back in)."""
    scope = Scope(["h.example"])
    store.add_seeds([f"{H}/"])
    (seed,) = _claim_all(store).values()
    store.apply([_outcome(seed, sitemaps=[f"{H}/s.xml"], links=[[f"{H}/f", ""], [f"{H}/q", ""]])], scope)
    pending = _claim_all(store)
    assert set(pending) == {f"{H}/s.xml", f"{H}/f", f"{H}/q"}
    store.release([pending[f"{H}/q"].thread_id])  # /q back in the frontier: queued, not in flight
    store.apply([_outcome(pending[f"{H}/s.xml"], sitemap_pages=[[f"{H}/f", "2024-05-02T08:30:00"],
                                                                 [f"{H}/q", "2024-06-01T00:00:00"]])], scope)
    store.apply([_outcome(pending[f"{H}/f"], digest="f")], scope)  # in flight while the sitemap was applied
    (queued,) = _claim_all(store).values()
    assert queued.url == f"{H}/q" and str(queued.lastmod) == "2024-06-01 00:00:00"
    store.apply([_outcome(queued, digest="q")], scope)
    lastmods = {url: str(lastmod)[:19] for url, lastmod in _rows(store, "SELECT url, lastmod FROM document")}
    assert lastmods == {f"{H}/": "None", f"{H}/f": "2024-05-02 08:30:00", f"{H}/q": "2024-06-01 00:00:00"}


def test_a_missing_sitemap_is_no_failure_a_broken_one_is(site_server):
    site = Site()
    site.extra["/gone.xml"] = lambda h: h.respond(410, b"gone", content_type="text/plain")
    site.extra["/down.xml"] = lambda h: h.respond(500, b"oops", content_type="text/plain")
    site.extra["/soft.xml"] = lambda h: h.respond(200, b"<!DOCTYPE html><html><body>Not found</body></html>",
                                                  content_type="text/html")
    site.extra["/broken.xml"] = lambda h: h.respond(200, b"<rss><channel/></rss>", content_type="application/xml")
    cut = _urlset([("http://h.example/a", None), ("http://h.example/b", None)])[:-20]
    site.extra["/cut.xml"] = lambda h: h.respond(200, cut, content_type="application/xml")
    server = site_server(site)
    fetcher = Fetcher(user_agent=UA)
    try:
        missing = visit(fetcher, server.url("/sitemap.xml"), instruction={"sitemap": True})
        gone = visit(fetcher, server.url("/gone.xml"), instruction={"sitemap": True})
        down = visit(fetcher, server.url("/down.xml"), instruction={"sitemap": True})
        soft = visit(fetcher, server.url("/soft.xml"), instruction={"sitemap": True})
        broken = visit(fetcher, server.url("/broken.xml"), instruction={"sitemap": True})
        truncated = visit(fetcher, server.url("/cut.xml"), instruction={"sitemap": True})
    finally:
        fetcher.close()
    assert (missing.status, missing.error_kind, missing.error) == (404, None, "no sitemap here (HTTP 404)")
    assert (gone.status, gone.error_kind, gone.sitemap_pages) == (410, None, [])
    assert (down.status, down.error_kind) == (500, "http_status")  # retried by the manager like any 5xx
    # a "soft 404" (the site's HTML page answering 200 for a sitemap) is no failure; a broken sitemap is
    assert (soft.status, soft.error_kind, soft.error, soft.sitemap_pages) == (
        200, None, "no sitemap here (an HTML page, HTTP 200)", [])
    assert (broken.status, broken.error_kind) == (200, "bad_sitemap")
    # a sitemap cut short keeps the entries read and says where it broke (it said nothing)
    assert (truncated.error_kind, truncated.sitemap_pages) == (None, [["http://h.example/a", ""]])
    assert truncated.error.startswith("the XML breaks off after 1 entry: "), truncated.error


def test_an_oversized_sitemap_is_a_bad_sitemap_however_it_came_compressed(site_server):
    """The same sitemap of 60 MiB (over sitemaps.org's 52,428,800 bytes uncompressed) came back
    as two kinds: ``bad_sitemap`` as a ``.xml.gz`` file ("gzip sitemap: more than 52428800 bytes
    once decompressed"), ``too_large`` with ``Content-Encoding: gzip`` ("body exceeds the cap of
    52428800 bytes"), which points at max_body_bytes, a setting sitemaps do not use. One kind and
    one reason now, plain and uncompressed too."""
    from gridcrawl.executor.sitemap import TOO_LARGE
    big = b"<urlset><url><loc>http://h.example/a</loc></url>" + b" " * (60 * 1024 * 1024) + b"</urlset>"
    packed = gzip.compress(big, 9)
    site = Site()
    site.extra["/file.xml.gz"] = lambda h: h.respond(200, packed, content_type="application/gzip")
    site.extra["/encoded.xml"] = lambda h: h.respond(200, packed, content_type="application/xml",
                                                     headers={"Content-Encoding": "gzip"})
    site.extra["/plain.xml"] = lambda h: h.respond(200, big, content_type="application/xml")
    server = site_server(site)
    fetcher = Fetcher(user_agent=UA)
    try:
        found = {path: visit(fetcher, server.url(path), instruction={"sitemap": True})
                 for path in ("/file.xml.gz", "/encoded.xml", "/plain.xml")}
    finally:
        fetcher.close()
    assert {path: (r.error_kind, r.error) for path, r in found.items()} == dict.fromkeys(
        found, ("bad_sitemap", TOO_LARGE))
    assert TOO_LARGE == "sitemap larger than 52428800 bytes uncompressed (the sitemaps.org limit)"
    assert not any(r.sitemap_pages for r in found.values())


def test_retry_failed_leaves_the_crawls_decisions_alone(store):
    scope = Scope(["h.example"])
    store.add_seeds([f"{H}/"])
    (seed,) = _claim_all(store).values()
    store.apply([_outcome(seed, digest="d0", links=[[f"{H}/gone", ""], [f"{H}/hidden", ""]])], scope)
    p = _claim_all(store)
    store.apply([_outcome(p[f"{H}/gone"], status=404, error_kind="http_status", error="HTTP 404"),
                 _outcome(p[f"{H}/hidden"], digest="dh", noindex=True)], scope)
    assert store.retry_failed() == 1  # the 404, not the noindex page
    assert set(_claim_all(store)) == {f"{H}/gone"}
    assert store.retry_failed(["noindex"]) == 1  # named: retried


def test_retry_failed_queues_a_sitemap_again_as_a_sitemap(store):
    """A host's /sitemap.xml whose visit failed (blocked, say) went back to the frontier as a
    page: fetched again, its 404 counted as an error of the crawl, where a sitemap's is none."""
    scope = Scope(["h.example"])
    store.add_seeds([f"{H}/"])
    (seed,) = _claim_all(store).values()
    store.apply([_outcome(seed, digest="d0", sitemaps=[f"{H}/sitemap.xml"])], scope)
    (probe,) = _claim_all(store).values()
    assert probe.kind == "sitemap"
    done = store.apply([_outcome(probe, status=None, error_kind="blocked", error="a private address")], scope)
    assert (done["pages"], done["errors"], done["sitemaps"], done["sitemap_errors"]) == (1, 1, 1, 1)
    assert store.retry_failed(["blocked"]) == 1
    (again,) = _claim_all(store).values()
    assert (again.url, again.kind) == (f"{H}/sitemap.xml", "sitemap")


def test_retry_failed_takes_one_http_status(store):
    """``http_503`` retries the 503s and leaves the 404s (``http_status`` retries both), as the
    summary's next command names them."""
    scope = Scope(["h.example"])
    store.add_seeds([f"{H}/"])
    (seed,) = _claim_all(store).values()
    store.apply([_outcome(seed, digest="d0", links=[[f"{H}/gone", ""], [f"{H}/busy", ""], [f"{H}/slow", ""]])],
                scope)
    p = _claim_all(store)
    store.apply([_outcome(p[f"{H}/gone"], status=404, error_kind="http_status", error="HTTP 404"),
                 _outcome(p[f"{H}/busy"], status=503, error_kind="http_status", error="HTTP 503"),
                 _outcome(p[f"{H}/slow"], error_kind="timeout", error="no data for 30 s")], scope)
    assert sorted(g.retry_kind for g in store.error_summary()) == ["http_404", "http_503", "timeout"]
    assert store.retry_failed(["http_503"]) == 1
    assert set(_claim_all(store)) == {f"{H}/busy"}
    assert store.retry_failed(["http_500", "timeout"]) == 1  # no 500 here; the timeout
    assert store.retry_failed(["http_status"]) == 1  # the 404 left


def test_retry_failed_reads_the_failed_urls_a_batch_at_a_time(store):
    """All the failed URLs of a crawl were read into memory at once: 680 MB for the 1,000,000 of a
    host that was down. A batch at a time (by id), every one of them goes back."""
    import sqlalchemy as sa

    scope = Scope(["h.example"])
    store.add_seeds([f"{H}/"])
    (seed,) = _claim_all(store).values()
    links = [[f"{H}/p{i}", ""] for i in range(23)]
    store.apply([_outcome(seed, digest="d0", links=links)], scope)
    store.apply([_outcome(p, error_kind="connection", error="connection refused") for p in _claim_all(store).values()],
                scope)
    reads: list[str] = []
    sa.event.listen(store.engine, "before_cursor_execute",
                    lambda conn, cur, sql, *rest: reads.append(sql) if sql.startswith("SELECT visited_url.id") else None)
    assert store.retry_failed(["connection"], batch=5) == 23
    assert len(reads) == 6  # 5 batches of at most 5, then an empty one
    assert sorted(_claim_all(store)) == sorted(url for url, _ in links)
    assert store.retry_failed(["connection"], batch=5) == 0


@pytest.mark.parametrize("focused", [False, True], ids=["plain", "focused"])
def test_retry_failed_is_set_based_and_the_same_on_every_back_end(db_url, focused):
    """--retry-failed moved each failed URL through Python, a row at a time: minutes a million
    URLs on SQLite. Now one INSERT ... SELECT and one DELETE per batch, on every back end, with
    what each URL goes back as: its depth and page type (a seed: base), a sitemap as a sitemap,
    a focused crawl's pages at the seeds' priority; a stored document's visit stays (a revisit),
    a URL already queued is not queued twice, a crawl's own decision (noindex) is left alone."""
    import datetime as dt
    import sqlalchemy as sa
    from gridcrawl import models
    from gridcrawl.client.store import Strategy
    from gridcrawl.focus import Focus
    from gridcrawl.urls import fingerprint

    store = CrawlStore(open_database(db_url), Strategy(order="priority", focus=Focus(("crawler",)))
                       if focused else None)
    when = dt.datetime(2026, 1, 1)
    rows = {"seed": (0, None, "timeout"), "typed": (2, "article", "connection"), "sitemap": (1, None, "blocked"),
            "gone": (1, None, "gone"), "queued": (1, None, "timeout"), "noindex": (1, None, "noindex")}
    url = {name: f"{H}/{name}" for name in rows}
    with store.engine.begin() as conn:
        conn.execute(models.visited_url.insert(), [
            {"url": url[n], "fingerprint": fingerprint(url[n]), "depth": depth, "page_type": page_type,
             "error_kind": kind, "error": "x", "attempts": 1, "visited_at": when}
            for n, (depth, page_type, kind) in rows.items()])
        conn.execute(models.sitemap.insert(), [{"url": url["sitemap"], "fingerprint": fingerprint(url["sitemap"]),
                                                "kind": "sitemap", "depth": 1, "visited_at": when}])
        conn.execute(models.document.insert(), [{"url": url["gone"], "fingerprint": fingerprint(url["gone"]),
                                                 "final_url": url["gone"], "size": 0, "depth": 1,
                                                 "fetched_at": when, "page_type": "article"}])
        conn.execute(models.to_visit_url.insert(), [{"url": url["queued"], "fingerprint": fingerprint(url["queued"]),
                                                     "depth": 1, "priority": 7, "in_flight": False}])
    statements: list[tuple[str, bool]] = []
    sa.event.listen(store.engine, "before_cursor_execute",
                    lambda conn, cursor, sql, params, context, many: statements.append((sql, many)))
    assert store.retry_failed(batch=2) == 5
    # no row through Python: no URL read, nothing inserted or deleted a row at a time
    assert not [sql for sql, many in statements if many or (sql.startswith("SELECT") and "url," in sql)]
    with store.engine.connect() as conn:
        t = models.to_visit_url.c
        queued = {r.url: r for r in conn.execute(sa.select(t.url, t.depth, t.page_type, t.kind, t.priority,
                                                           t.relevance, t.in_flight))}
        still = {r[0] for r in conn.execute(sa.select(models.visited_url.c.url))}
    assert set(queued) == {url[n] for n in ("seed", "typed", "sitemap", "gone", "queued")}
    page = (1000, 1.0) if focused else (5, None)
    assert tuple(queued[url["seed"]][1:]) == (0, "base", None, *page, False)
    assert tuple(queued[url["typed"]][1:]) == (2, "article", None, *page, False)
    assert tuple(queued[url["gone"]][1:]) == (1, "article", None, *page, False)  # the document's page type
    assert tuple(queued[url["sitemap"]][1:]) == (1, None, "sitemap", 5, None, False)
    assert queued[url["queued"]].priority == 7  # already there: left as it was
    assert still == {url["gone"], url["noindex"]}
    assert store.retry_failed() == 1  # the gone page's visit, already queued
    if store.engine.dialect.name == "sqlite":  # its larger page cache was for the retry only
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -2000


def test_retry_failed_says_how_many_it_queues_before_and_as_it_goes(store, capsys):
    """--retry-failed on a crawl of a million failed URLs was silent for four minutes, then said
    "1000000 failed URLs queued again". It now says how many it will queue and which kinds first,
    how far it got at every tenth (past one batch), and how many it queued at the end."""
    from gridcrawl.client.cli import _retry_failed

    scope = Scope(["h.example"])
    store.add_seeds([f"{H}/"])
    (seed,) = _claim_all(store).values()
    store.apply([_outcome(seed, digest="d0", links=[[f"{H}/p{i}", ""] for i in range(23)])], scope)
    store.apply([_outcome(p, error_kind="connection", error="connection refused") for p in _claim_all(store).values()],
                scope)
    retried, _ = _retry_failed(store, ["connection"], batch=5)
    lines = capsys.readouterr().err.splitlines()
    assert retried == 23 and lines[0] == "queueing 23 failed URLs again (connection) ..."
    assert [line.split(" queued")[0].strip() for line in lines[1:]] == [
        "5 of 23", "10 of 23", "15 of 23", "20 of 23"]
    assert _retry_failed(store, [], batch=5)[0] == 0 and capsys.readouterr().err == ""  # nothing to say


def test_a_crawl_computes_the_simhash_only_where_it_is_read(tmp_path, site_server):
    """The SimHash's readers are the trap detector (URLs with a shape: digits in path or query)
    and a recrawl comparing SimHashes: a crawl stores it for the generated site's ``/p/N.html``
    pages and leaves it NULL for ``/`` and ``/about.html``; with ``recrawl_simhash_distance``
    set, every page has one."""
    site = generate_site(8, links_per_page=3, seed=5)
    site.pages["/"] = site.pages["/"].replace(b"</body>", b'<a href="/about.html">about</a></body>')
    site.pages["/about.html"] = b"<html><head><title>about</title></head><body><p>about us</p></body></html>"
    server = site_server(site)
    grid = Grid(tmp_path)
    shaped = {canonical_url(server.url(path)) for path in site.pages if path.startswith("/p/")}
    plain = {canonical_url(server.url(path)) for path in ("/", "/about.html")}

    def simhashes() -> dict[str, str | None]:
        return dict(grid.query("crawl", "SELECT url, simhash FROM document"))

    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        assert grid.start_client(server.url("/")).wait(timeout=60) == 0, grid.log("client.log")
        found = simhashes()
        assert set(found) == shaped | plain and len(shaped) == 7
        assert {url for url, h in found.items() if h is None} == plain
        assert all(len(found[url]) == 16 for url in shaped)

        grid.crawl_db = f"sqlite:///{tmp_path / 'every.db'}"
        env = {"GRIDCRAWL_RECRAWL_SIMHASH_DISTANCE": "3"}
        assert grid.start_client(server.url("/"), env=env).wait(timeout=60) == 0, grid.log("client.log")
        every = simhashes()
        assert set(every) == shaped | plain and all(len(h) == 16 for h in every.values())
        assert {url: every[url] for url in shaped} == {url: found[url] for url in shaped}  # same text, same value
    finally:
        grid.stop()


@pytest.mark.e2e
def test_a_crawl_goes_through_framesets_iframes_and_pages_that_moved(tmp_path, site_server):
    """An old intranet: its home page is a frameset, its menu moved (a meta refresh) and its
    news page embeds an iframe; ``gridcrawl run`` reaches every page behind them."""
    site = Site(pages={
        "/": b'<html><frameset cols="20%,80%"><frame src="/menu.html"><frame src="/news.html"></frameset></html>',
        "/menu.html": b'<html><head><meta http-equiv="refresh" content="0; url=/menu/v2.html"></head>'
                      b'<body>The menu moved.</body></html>',
        "/menu/v2.html": b'<html><body><a href="/staff.html">staff</a></body></html>',
        "/news.html": b'<html><body><iframe src="/news/latest.html"></iframe></body></html>',
        "/news/latest.html": b"<html><body>latest news</body></html>",
        "/staff.html": b"<html><body>staff</body></html>",
    })
    server = site_server(site)
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "1",
                           "--threads", "2", "--no-sitemaps", "--no-progress", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    stored = {url for (url,) in Grid(tmp_path).query("crawl", "SELECT url FROM document")}
    assert stored == {server.url(path) for path in site.pages}, stored


def test_retry_failed_queues_a_page_again_as_the_page_type_it_was_visited_as(tmp_path):
    """A rules crawl's page of a type with ``render = true`` that failed (its render timed out)
    goes back to the frontier as that type, rendered again and under that type's follow rules
    (before, ``visited_url`` did not keep the type: the page came back with none, was fetched
    without rendering in 0.07 s and stored as its empty shell, without an error)."""
    from gridcrawl.client.store import Strategy
    from gridcrawl.rules import PageType, parse_toml
    rules = parse_toml(f'base_url = "{H}/"\n[[rule]]\nrule_type = "follow"\nfrom_type = "base"\n'
                       'to_type = "list"\npattern = "/list"\n')
    strategy = Strategy(rules=rules, page_types={"list": PageType(render=True, wait_for="li")})
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"), strategy=strategy)
    scope = Scope(["h.example"])
    store.add_seeds([f"{H}/"])
    (seed,) = _claim_all(store).values()
    store.apply([_outcome(seed, digest="d0", links=[[f"{H}/list", "", "list"]])], scope)
    (page,) = _claim_all(store).values()
    assert page.page_type == "list"
    store.apply([_outcome(page, status=200, error_kind="timeout", error="render deadline of 30 s passed")], scope)
    assert store.retry_failed(["timeout"]) == 1
    (again,) = _claim_all(store).values()
    assert (again.url, again.page_type) == (f"{H}/list", "list")
    assert strategy.render_instruction(again.page_type) == {"render": True, "waitFor": "li"}
    # the visit keeps the type it was made as
    store.apply([_outcome(again, error_kind="timeout", error="render deadline of 30 s passed")], scope)
    assert _rows(store, "SELECT page_type FROM visited_url WHERE error_kind = 'timeout'") == [("list",)]
