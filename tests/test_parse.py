"""Tests for gridcrawl.executor.parse: content types, charsets, decoding, link extraction."""

from __future__ import annotations

import codecs
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import lxml.html
import pytest
import requests

from gridcrawl.executor.parse import (
    Link,
    ParsedPage,
    decode_html,
    detect_charset,
    extract_links,
    is_html,
    limit_tag_attributes,
    limit_tags,
    parse_page,
    refresh_target,
)
from gridcrawl.executor.parse import MAX_PARSED_TAGS, MAX_TAG_ATTRIBUTES, MAX_TITLE

PAGE = "http://example.com/docs/guide/index.html"


def links_of(html: str | bytes, page_url: str = PAGE, content_type: str | None = "text/html") -> list[tuple[str, str]]:
    """(url, text) pairs of parse_page's links."""
    body = html.encode("utf-8") if isinstance(html, str) else html
    return [(link.url, link.text) for link in parse_page(body, page_url, content_type).links]


# --------------------------------------------------------------------------
# is_html
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("text/html", True),
        ("text/html; charset=utf-8", True),
        ("TEXT/HTML;charset=ISO-8859-1", True),
        ("  text/html ", True),
        ("application/xhtml+xml", True),
        ("application/xhtml+xml; charset=utf-8", True),
        ("text/plain", False),
        ("application/json", False),
        ("application/xml", False),
        ("image/png", False),
        ("text/htmlx", False),
        ("", False),
        (None, False),
    ],
)
def test_is_html(content_type: str | None, expected: bool) -> None:
    assert is_html(content_type) is expected


# --------------------------------------------------------------------------
# detect_charset
# --------------------------------------------------------------------------


def _meta(declaration: str) -> bytes:
    return f"<!doctype html><html><head>{declaration}<title>t</title></head><body>x</body></html>".encode("ascii")


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        # byte order marks come first, even against the header
        (codecs.BOM_UTF8 + b"<html>", "text/html; charset=iso-8859-1", "utf-8"),
        (codecs.BOM_UTF16_LE + "<html>".encode("utf-16-le"), "text/html", "utf-16-le"),
        (codecs.BOM_UTF16_BE + "<html>".encode("utf-16-be"), "text/html; charset=utf-8", "utf-16-be"),
        (codecs.BOM_UTF8 + _meta('<meta charset="windows-1251">'), None, "utf-8"),
        # HTTP header charset
        (b"<html>", "text/html; charset=windows-1251", "cp1251"),
        (b"<html>", 'text/html; charset="UTF-8"', "utf-8"),
        (b"<html>", "text/html;charset='koi8-r'", "koi8-r"),
        (b"<html>", "text/html; CHARSET=Shift_JIS", "cp932"),
        # header wins over meta
        (_meta('<meta charset="windows-1251">'), "text/html; charset=utf-8", "utf-8"),
        # <meta charset>
        (_meta('<meta charset="windows-1251">'), "text/html", "cp1251"),
        (_meta("<meta charset=koi8-r>"), None, "koi8-r"),
        (_meta("<META CHARSET='EUC-JP'>"), "text/html", "euc_jp"),
        # <meta http-equiv="Content-Type" content="...; charset=...">, either attribute order
        (_meta('<meta http-equiv="Content-Type" content="text/html; charset=windows-1252">'), None, "cp1252"),
        (_meta('<meta content="text/html; charset=gb2312" http-equiv="content-type">'), None, "gbk"),
        # browser supersets (WHATWG Encoding Standard): latin-1 and ascii labels mean windows-1252
        (b"<html>", "text/html; charset=iso-8859-1", "cp1252"),
        (b"<html>", "text/html; charset=us-ascii", "cp1252"),
        (_meta('<meta charset="windows-874">'), None, "cp874"),
        # a <meta> naming UTF-16 means UTF-8 (the page was readable as ASCII)
        (_meta('<meta charset="utf-16">'), None, "utf-8"),
        # unknown or unusable labels are ignored: the next source, else UTF-8
        (b"<html>", "text/html; charset=no-such-charset", "utf-8"),
        (_meta('<meta charset="windows-1251">'), "text/html; charset=no-such-charset", "cp1251"),
        (_meta('<meta charset="bogus-9">'), "text/html", "utf-8"),
        (b"<html>", "text/html; charset=utf-7", "utf-8"),
        (b"<html>", "text/html; charset=base64", "utf-8"),
        (b"<html>", "text/html; charset=rot13", "utf-8"),
        (b"<html>", "text/html; charset=", "utf-8"),
        # nothing declared
        (b"<html><body>plain</body></html>", "text/html", "utf-8"),
        (b"", None, "utf-8"),
        # a declaration past the first 4096 bytes is not seen
        (b"<!--" + b"x" * 4100 + b"-->" + b'<meta charset="windows-1251">', None, "utf-8"),
        (b"<!--" + b"x" * 4000 + b"-->" + b'<meta charset="windows-1251">', None, "cp1251"),
    ],
)
def test_detect_charset(body: bytes, content_type: str | None, expected: str) -> None:
    name = detect_charset(body, content_type)
    assert name == expected
    assert b"<html>".decode(name, "replace")  # a text codec Python can decode with


# --------------------------------------------------------------------------
# decode_html
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "content_type", "text", "encoding"),
    [
        # invalid UTF-8 bytes become U+FFFD instead of raising
        (b"caf\xe9 \xff ok", "text/html; charset=utf-8", "caf\ufffd \ufffd ok", "utf-8"),
        (b"caf\xc3\xa9", None, "caf\u00e9", "utf-8"),
        # windows-1252 for a latin-1 label: 0x93/0x94 are curly quotes, not C1 controls
        (b"\x93hi\x94", "text/html; charset=ISO-8859-1", "\u201chi\u201d", "cp1252"),
        # the byte order mark is removed from the text
        (codecs.BOM_UTF8 + b"<p>x", None, "<p>x", "utf-8"),
        (codecs.BOM_UTF16_LE + "<p>é".encode("utf-16-le"), None, "<p>é", "utf-16-le"),
        ("Привет".encode("cp1251"), "text/html; charset=windows-1251", "Привет", "cp1251"),
        # truncated multi-byte sequence at the end of a UTF-8 page
        ("é ok é".encode("utf-8")[:-1], None, "é ok \ufffd", "utf-8"),
        # no declaration and not UTF-8: windows-1252, as browsers read legacy pages (was "Smart \ufffdquotes\ufffd")
        (b"Smart \x93quotes\x94 \x96 dash", "text/html", "Smart \u201cquotes\u201d \u2013 dash", "cp1252"),
        # declared UTF-8 stays UTF-8 whatever the bytes
        (b"Smart \x93quotes\x94", "text/html; charset=utf-8", "Smart \ufffdquotes\ufffd", "utf-8"),
    ],
)
def test_decode_html(body: bytes, content_type: str | None, text: str, encoding: str) -> None:
    assert decode_html(body, content_type) == (text, encoding)


# --------------------------------------------------------------------------
# parse_page: links
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        # relative paths, ../, absolute paths, other hosts
        ('<a href="intro.html">Intro</a>', [("http://example.com/docs/guide/intro.html", "Intro")]),
        ('<a href="../api/index.html">API</a>', [("http://example.com/docs/api/index.html", "API")]),
        ('<a href="../../../../up.html">Up</a>', [("http://example.com/up.html", "Up")]),
        ('<a href="/about">About</a>', [("http://example.com/about", "About")]),
        ('<a href="//cdn.example.org/x">CDN</a>', [("http://cdn.example.org/x", "CDN")]),
        ('<a href="HTTPS://Other.Example:443/b?z=1&a=2#f">O</a>', [("https://other.example/b?a=2&z=1", "O")]),
        # fragment-only and empty hrefs resolve to the page itself (one link)
        (
            '<a href="#install">Install</a><a href="#usage">Usage</a><a href="">Self</a>',
            [("http://example.com/docs/guide/index.html", "Install")],
        ),
        # non-http schemes skipped
        (
            '<a href="javascript:void(0)">js</a><a href="mailto:a@example.com">m</a>'
            '<a href="tel:+15551234">t</a><a href="data:text/html,x">d</a><a href="ftp://example.com/f">f</a>'
            '<a href=" JavaScript:alert(1)">js2</a><a href="ok.html">ok</a>',
            [("http://example.com/docs/guide/ok.html", "ok")],
        ),
        # invalid URLs skipped
        (
            '<a href="http://[::1">bad</a><a href="http://example.com:99999/">port</a>'
            '<a href="https:///nohost">nohost</a><a href="good.html">good</a>',
            [("http://example.com/docs/guide/good.html", "good")],
        ),
        # <a> without href ignored; <link>, <img src>, <script src> are not links to follow
        (
            '<a name="top">anchor</a><a>no href</a><link href="/style.css" rel="stylesheet">'
            '<img src="/i.png"><script src="/s.js"></script><a href="x.html">x</a>',
            [("http://example.com/docs/guide/x.html", "x")],
        ),
        # area tags, with alt as text
        (
            '<img usemap="#m"><map name="m"><area href="/north" alt="North">'
            '<area href="/south"><area alt="no href"></map>',
            [("http://example.com/north", "North"), ("http://example.com/south", "")],
        ),
        # duplicates: same canonical URL kept once, first occurrence's text wins
        (
            '<a href="a.html">First</a><a href="a.html#frag">Second</a>'
            '<a href="./a.html">Third</a><a href="http://EXAMPLE.com:80/docs/guide/a.html">Fourth</a>',
            [("http://example.com/docs/guide/a.html", "First")],
        ),
        # document order, including links nested in markup
        (
            '<ul><li><a href="c">C</a></li><li><a href="a">A</a></li></ul><p><a href="b">B</a></p>',
            [
                ("http://example.com/docs/guide/c", "C"),
                ("http://example.com/docs/guide/a", "A"),
                ("http://example.com/docs/guide/b", "B"),
            ],
        ),
        # anchor text: nested markup flattened, whitespace collapsed
        (
            '<a href="t">  The <b>bold</b>\n\n   <i>move</i>\t </a>',
            [("http://example.com/docs/guide/t", "The bold move")],
        ),
        # anchor text: image-only anchors use the image alt
        ('<a href="logo"><img src="l.png" alt="Home page"></a>', [("http://example.com/docs/guide/logo", "Home page")]),
        # anchor text: entities decoded
        ('<a href="q">Q&amp;A &eacute;t&eacute;</a>', [("http://example.com/docs/guide/q", "Q&A été")]),
        # session ids and whitespace in href cleaned by canonical_url
        (
            '<a href="  cart;jsessionid=AB12?PHPSESSID=9&amp;item=3  ">Cart</a>',
            [("http://example.com/docs/guide/cart?item=3", "Cart")],
        ),
        # non-ASCII hrefs percent-encoded as UTF-8
        ('<a href="/résumé">CV</a>', [("http://example.com/r%C3%A9sum%C3%A9", "CV")]),
    ],
)
def test_parse_page_links(html: str, expected: list[tuple[str, str]]) -> None:
    assert links_of(f"<!doctype html><html><head><title>T</title></head><body>{html}</body></html>") == expected


def test_anchor_text_truncated_to_200_characters() -> None:
    words = " ".join(f"word{i}" for i in range(100))  # about 600 characters
    (link,) = parse_page(f'<a href="long">{words}</a>'.encode(), PAGE, "text/html").links
    assert len(link.text) == 200
    assert link.text == words[:200]


@pytest.mark.parametrize(
    ("head", "expected_url"),
    [
        # relative <base href> resolved against the page URL
        ('<base href="/v2/">', "http://example.com/v2/page.html"),
        ('<base href="../other/">', "http://example.com/docs/other/page.html"),
        # absolute <base href> on another host
        ('<base href="https://mirror.example.org/root/x.html">', "https://mirror.example.org/root/page.html"),
        # <base> without href (only target) is ignored, the next one counts
        ('<base target="_blank"><base href="/b/">', "http://example.com/b/page.html"),
        # only the first <base href> counts
        ('<base href="/first/"><base href="/second/">', "http://example.com/first/page.html"),
        # a <base href> that is not http(s) falls back to the page URL
        ('<base href="javascript:alert(1)">', "http://example.com/docs/guide/page.html"),
        ('<base href="http://[::1">', "http://example.com/docs/guide/page.html"),
        # no <base>
        ("", "http://example.com/docs/guide/page.html"),
    ],
)
def test_base_href(head: str, expected_url: str) -> None:
    html = f"<html><head>{head}<title>T</title></head><body><a href='page.html'>P</a></body></html>"
    assert links_of(html) == [(expected_url, "P")]


def test_fragment_link_resolves_against_base_href() -> None:
    html = '<html><head><base href="/elsewhere/doc.html"></head><body><a href="#sec">S</a></body></html>'
    assert links_of(html) == [("http://example.com/elsewhere/doc.html", "S")]


@pytest.mark.parametrize(
    "html",
    [
        # unclosed tags, stray end tags, attributes without quotes, misnested markup
        '<html><body><div><p><a href=one.html>One<p><a href="two.html">Two</div></div></span><a href=three.html>Three',
        # no <html>/<body> at all
        '<a href="one.html">One</a><a href="two.html">Two</a><a href="three.html">Three</a>',
        # garbage around the links
        '<<<>>>&&&<a href="one.html">One</a><!-- <a href="not-a-link.html"> -->\x01\x02'
        '<a href="two.html">Two</a></a></a><a href="three.html">Three</a><',
        # XHTML with an XML declaration (lxml refuses such str input unless handled)
        '<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml"><body>'
        '<a href="one.html">One</a><a href="two.html">Two</a><a href="three.html">Three</a></body></html>',
        # NUL bytes inside the document
        '<body>\x00<a href="one.html">One</a>\x00<a href="two.html">Two</a><a href="three.html">Three</a>',
        # 300 unclosed <font> tags (libxml2 stopped at 256 open elements and dropped the rest)
        '<body><a href="one.html">One</a>' + '<font size=2>' * 300 + '<a href="two.html">Two</a>'
        '<a href="three.html">Three</a>',
    ],
)
def test_bad_markup_still_yields_links(html: str) -> None:
    assert [url for url, _ in links_of(html)] == [
        "http://example.com/docs/guide/one.html",
        "http://example.com/docs/guide/two.html",
        "http://example.com/docs/guide/three.html",
    ]


@pytest.mark.parametrize(
    "body",
    [b"", b"   \n\t ", b"<!-- only a comment -->", b"\x00\x00\x00", bytes(range(256)), b"\x89PNG\r\n\x1a\n\x00\x00"],
)
def test_empty_or_unparsable_body_gives_no_links(body: bytes) -> None:
    page = parse_page(body, PAGE, "text/html")
    assert page.links == []
    assert page.title == ""
    assert isinstance(page.document, lxml.html.HtmlElement)


# --------------------------------------------------------------------------
def test_a_page_gives_at_most_max_links_and_its_later_metas_still_count() -> None:
    """``max_links``: the first links in document order; the walk goes on past them for the
    ``<meta>`` elements (a robots meta tag after a flood of links is still read)."""
    anchors = "".join(f'<a href="/p{i}">{i}</a>' for i in range(50))
    body = f'<html><body>{anchors}<meta name="robots" content="noindex"></body></html>'.encode()
    page = parse_page(body, PAGE, "text/html", max_links=7)
    assert [link.url for link in page.links] == [f"http://example.com/p{i}" for i in range(7)]
    assert [m.get("content") for m in page.metas] == ["noindex"]
    assert len(parse_page(body, PAGE, "text/html").links) == 50


# parse_page: title, encoding, document, repr
# --------------------------------------------------------------------------


def test_title_and_document() -> None:
    body = b"<html><head><title>\n  The   Guide \n</title></head><body><p id='x'>hello</p></body></html>"
    page = parse_page(body, PAGE, "text/html; charset=utf-8")
    assert page.title == "The Guide"
    assert page.encoding == "utf-8"
    assert page.document.get_element_by_id("x").text_content() == "hello"
    assert page.document.tag == "html"


@pytest.mark.parametrize("body, content_type", [
    (codecs.BOM_UTF8 + "<title>Ünï</title>".encode(), "text/html"),
    ("<title>Привет</title>".encode("cp1251"), "text/html; charset=windows-1251"),
    (codecs.BOM_UTF16_LE + "<title>T</title>".encode("utf-16-le"), None),
    (b"<title>bad \xff bytes</title>", "text/html; charset=utf-8"),
])
def test_parsed_page_keeps_the_body_as_decoded(body: bytes, content_type: str | None) -> None:
    """The executor stores ``decoded`` as the page's content: exactly the body decoded with the
    page's encoding (a byte order mark kept), while the title is read without it."""
    page = parse_page(body, PAGE, content_type)
    assert page.decoded == body.decode(page.encoding, errors="replace")
    assert not page.title.startswith("\ufeff")
    assert "decoded" not in repr(page)


@pytest.mark.parametrize("body, content_type, keeps", [
    ("<title>Ünï ✓</title>".encode(), "text/html; charset=utf-8", True),
    (codecs.BOM_UTF8 + "<title>Ünï</title>".encode(), "text/html", True),
    (b"<title>plain</title>", None, True),
    (b"<title>bad \xff bytes</title>", "text/html; charset=utf-8", False),   # replaced: not the body any more
    ("<title>Привет</title>".encode("cp1251"), "text/html; charset=windows-1251", False),
])
def test_decoded_text_keeps_the_body_only_when_it_is_exactly_its_utf8(body, content_type, keeps) -> None:
    """The executor sends a page's text without encoding it again only when the body is that
    text's UTF-8 (:class:`gridcrawl.protocol.Utf8Text`); text with replacement characters or
    from another encoding is a plain str."""
    from gridcrawl.protocol import Utf8Text
    page = parse_page(body, PAGE, content_type)
    assert isinstance(page.decoded, Utf8Text) is keeps
    if keeps:
        assert page.decoded.utf8 == body == page.decoded.encode()
    assert page.decoded == body.decode(page.encoding, errors="replace")


def test_repr_leaves_out_the_document() -> None:
    page = parse_page(b"<title>T</title><a href='a'>A</a>", PAGE, "text/html")
    text = repr(page)
    assert "ParsedPage(" in text and "title='T'" in text and "Link(url=" in text
    assert "document" not in text and "HtmlElement" not in text


def test_link_and_parsed_page_are_dataclasses() -> None:
    link = Link(url="http://example.com/", text="home")
    assert link == Link("http://example.com/", "home")
    assert not hasattr(link, "__dict__")  # slots=True
    page = ParsedPage(title="t", links=[link], encoding="utf-8", document=lxml.html.fromstring("<p>x</p>"))
    assert page.links[0].url == "http://example.com/"


CP1251_PAGE = (
    "<!DOCTYPE html><html><head>"
    '<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">'
    "<title>Привет, мир</title></head><body>"
    '<a href="/новости">Последние   новости</a>'
    '<a href="/about">О нас</a>'
    "</body></html>"
).encode("cp1251")


@pytest.mark.parametrize("content_type", ["text/html", None, "text/html; charset=bogus"])
def test_cp1251_page_declared_only_in_meta(content_type: str | None) -> None:
    page = parse_page(CP1251_PAGE, "http://example.ru/", content_type)
    assert page.encoding == "cp1251"
    assert page.title == "Привет, мир"
    assert [(link.url, link.text) for link in page.links] == [
        ("http://example.ru/%D0%BD%D0%BE%D0%B2%D0%BE%D1%81%D1%82%D0%B8", "Последние новости"),
        ("http://example.ru/about", "О нас"),
    ]


def test_header_charset_overrides_wrong_meta() -> None:
    body = '<meta charset="windows-1251"><title>Grüße</title><a href="/">Zurück</a>'.encode("utf-8")
    page = parse_page(body, "http://example.de/", "text/html; charset=utf-8")
    assert page.encoding == "utf-8"
    assert page.title == "Grüße"
    assert page.links == [Link("http://example.de/", "Zurück")]


def test_invalid_bytes_replaced_not_raised() -> None:
    body = b'<title>caf\xe9</title><a href="/m\xe9nu">men\xff</a>'
    page = parse_page(body, "http://example.com/", "text/html; charset=utf-8")
    assert page.title == "caf\ufffd"
    assert page.links == [Link("http://example.com/m%EF%BF%BDnu", "men\ufffd")]


# --------------------------------------------------------------------------
# extract_links with DOM scope
# --------------------------------------------------------------------------

SCOPED = b"""<html><body>
<div id="nav"><a href="/home">Home</a><a href="/docs">Docs</a></div>
<div class="content main"><a href="/docs">Docs again</a><a href="/article">Article</a>
  <div class="content"><a href="/nested">Nested</a></div></div>
<footer><a href="/legal">Legal</a></footer>
</body></html>"""


def test_extract_links_whole_document() -> None:
    root = parse_page(SCOPED, "http://example.com/", "text/html").document
    assert [link.url for link in extract_links(root, "http://example.com/")] == [
        "http://example.com/home",
        "http://example.com/docs",
        "http://example.com/article",
        "http://example.com/nested",
        "http://example.com/legal",
    ]


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        (lambda root: [root.get_element_by_id("nav")], [("/home", "Home"), ("/docs", "Docs")]),
        (
            lambda root: root.find_class("content"),  # outer and nested div: overlap kept once
            [("/docs", "Docs again"), ("/article", "Article"), ("/nested", "Nested")],
        ),
        (lambda root: list(root.iter("footer")), [("/legal", "Legal")]),
        (
            lambda root: [root.get_element_by_id("nav"), *root.iter("footer")],
            [("/home", "Home"), ("/docs", "Docs"), ("/legal", "Legal")],
        ),
        (lambda root: [], []),
        # an <a> element itself as the scope
        (lambda root: [next(root.iter("footer"))[0]], [("/legal", "Legal")]),
    ],
)
def test_extract_links_within(select, expected: list[tuple[str, str]]) -> None:  # type: ignore[no-untyped-def]
    root = parse_page(SCOPED, "http://example.com/", "text/html").document
    links = extract_links(root, "http://example.com/", within=select(root))
    assert [(link.url, link.text) for link in links] == [("http://example.com" + p, t) for p, t in expected]


def test_a_repeated_href_keeps_its_first_followed_occurrence() -> None:
    """An href met before on the page is not read again, but one skipped as nofollow still is:
    the link comes with the text of its first occurrence that counts."""
    html = (b'<a href="a.html#x" rel="nofollow">skipped</a><a href="a.html#x">first</a>'
            b'<a href="a.html#x">again</a><a href="a.html#y">other anchor</a>'
            b'<a href="mailto:x@y">m</a><a href="mailto:x@y">m</a><a href="b.html">b</a>')
    root = parse_page(html, "http://example.com/d/", "text/html").document
    links = extract_links(root, "http://example.com/d/", skip_nofollow=True)
    assert [(link.url, link.text) for link in links] == [("http://example.com/d/a.html", "first"),
                                                         ("http://example.com/d/b.html", "b")]
    assert extract_links(root, "http://example.com/d/")[0].text == "skipped"


def test_frames_iframes_and_meta_refresh_are_links() -> None:
    """A frameset's pages, an iframe's page and a refresh's target are the page's links (as
    Nutch and Heritrix take them): an intranet of framesets or of pages that moved is crawled
    past its first page. A frame's text is its title; a refresh without a URL (the page reloading
    itself) is none; the DOM scope of a rule applies to them as to anchors."""
    html = (b'<html><head><meta http-equiv="Refresh" content="0; URL=\'/moved.html\'">'
            b'<meta http-equiv="refresh" content="30"><meta name="robots" content="index"></head>'
            b'<frameset><frame src="nav.html" title=" Navigation  bar "><frame src="main.html">'
            b'<frame src="javascript:void(0)"><frame></frameset>'
            b'<body><div id="ads"><iframe src="https://ads.example.net/x"></iframe></div>'
            b'<div id="main"><iframe src="/embed.html"></iframe><a href="/embed.html">again</a></div></body></html>')
    root = parse_page(html, "http://example.com/d/index.html", "text/html").document
    metas: list = []
    links = extract_links(root, "http://example.com/d/index.html", metas=metas)
    assert [(link.url, link.text) for link in links] == [
        ("http://example.com/moved.html", ""),
        ("http://example.com/d/nav.html", "Navigation bar"),
        ("http://example.com/d/main.html", ""),
        ("https://ads.example.net/x", ""),
        ("http://example.com/embed.html", ""),
    ]
    assert [m.get("name") or m.get("http-equiv") for m in metas] == ["Refresh", "refresh", "robots"]
    scoped = extract_links(root, "http://example.com/", within=[root.get_element_by_id("main")])
    assert [link.url for link in scoped] == ["http://example.com/embed.html"]


@pytest.mark.parametrize(("content", "target"), [
    ("0; url=/new.html", "/new.html"), ("5;URL='/q.html'", "/q.html"), ("3, http://h/abs", "http://h/abs"),
    (' 2 ; URL = "/s x.html" ', "/s x.html"), ("0; /plain.html", "/plain.html"),
    ("10", None), ("0;url=", None), ("", None),
])
def test_refresh_target(content: str, target: str | None) -> None:
    root = lxml.html.fromstring('<html><head><meta http-equiv="refresh"><meta name="x"></head><body>x</body></html>')
    refresh, other = root.iter("meta")
    refresh.set("content", content)
    other.set("content", content)
    assert refresh_target(refresh) == target
    assert refresh_target(other) is None  # not a refresh


def test_extract_links_within_accepts_a_generator() -> None:
    root = parse_page(SCOPED, "http://example.com/", "text/html").document
    links = extract_links(root, "http://example.com/base/", within=(e for e in root.iter("footer")))
    assert links == [Link("http://example.com/legal", "Legal")]


# --------------------------------------------------------------------------
# a page fetched from a real HTTP server on 127.0.0.1
# --------------------------------------------------------------------------


class _PageHandler(BaseHTTPRequestHandler):
    pages: dict[str, tuple[str, bytes]] = {
        "/ru/index.html": ("text/html; charset=windows-1251", CP1251_PAGE),
        "/guide/index.html": (
            "text/html",
            b'<html><head><base href="../api/"><title>Guide</title></head>'
            b'<body><a href="ref.html#x">Ref</a><a href="/guide/index.html">Self</a></body></html>',
        ),
        # one tag of 80,000 attributes (640 KB), some quoted values holding ">" and "<" (the tag goes on)
        "/attributes.html": (
            "text/html",
            b"<html><head><title>Flood</title></head><body><p "
            + b" ".join(b"a%d" % i if i % 3 else b"q%d='<a >'" % i for i in range(80000))
            + b">text</p><a href='/after'>After</a></body></html>",
        ),
        # a long ordinary page: tags of a few attributes
        "/long.html": (
            "text/html",
            b"<html><head><title>Long</title></head><body>"
            + b"<p class='c' id='x' data-a='1' title='t &gt; u'>para <a href='/p'>P</a></p>\n" * 8000
            + b"</body></html>",
        ),
    }

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        content_type, body = self.pages[self.path]
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def http_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _PageHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize(
    ("path", "encoding", "title", "links"),
    [
        (
            "/ru/index.html",
            "cp1251",
            "Привет, мир",
            [("/%D0%BD%D0%BE%D0%B2%D0%BE%D1%81%D1%82%D0%B8", "Последние новости"), ("/about", "О нас")],
        ),
        ("/guide/index.html", "utf-8", "Guide", [("/api/ref.html", "Ref"), ("/guide/index.html", "Self")]),
    ],
)
def test_parse_page_fetched_over_http(
    http_server: str, path: str, encoding: str, title: str, links: list[tuple[str, str]]
) -> None:
    with requests.Session() as session:
        session.trust_env = False  # no proxies: the server is on 127.0.0.1
        response = session.get(http_server + path, timeout=10)
    response.raise_for_status()
    content_type = response.headers["Content-Type"]
    assert is_html(content_type)
    page = parse_page(response.content, response.url, content_type)
    assert page.encoding == encoding
    assert page.title == title
    assert [(link.url, link.text) for link in page.links] == [(http_server + p, t) for p, t in links]


def test_a_tag_of_thousands_of_attributes_keeps_the_first_and_the_page_its_links(http_server: str) -> None:
    """libxml2 compares each attribute of a tag with the tag's earlier ones: a tag of 200,000
    attributes held an executor's parse for over 10 minutes. The parser gets the first
    MAX_TAG_ATTRIBUTES of a tag (quoted values holding ">" do not end it early), the rest of the
    page as it is; a long page of ordinary tags is parsed as it came."""
    with requests.Session() as session:
        session.trust_env = False  # no proxies: the server is on 127.0.0.1
        flood = session.get(http_server + "/attributes.html", timeout=10)
        long = session.get(http_server + "/long.html", timeout=10)
    page = parse_page(flood.content, flood.url, flood.headers["Content-Type"])
    (paragraph,) = page.document.iter("p")
    assert len(paragraph.attrib) == MAX_TAG_ATTRIBUTES
    assert paragraph.text == "text"
    assert page.title == "Flood"
    assert [(link.url, link.text) for link in page.links] == [(http_server + "/after", "After")]
    text = long.content.decode()
    assert len(text) > 512 * 1024 and limit_tag_attributes(text) is text
    assert len(parse_page(long.content, long.url, "text/html").links) == 1


def test_a_page_of_more_tags_than_are_parsed_keeps_those_before_the_limit() -> None:
    """A 9 MiB page of 858,000 unclosed ``<a href>`` tags became 858,000 elements: 401 MiB of
    a ``gridcrawl fetch`` and 1.4 s of parse. The parser reads the page up to its
    MAX_PARSED_TAGS-th start tag: the links and title before it are found, the link after it is
    not; a page of fewer start tags is parsed whole."""
    head = "<html><head><title>Flood</title></head><body><a href='/first'>First</a>"
    flood = (head + "<br>" * MAX_PARSED_TAGS + "<a href='/after'>After</a>").encode()
    page = parse_page(flood, PAGE, "text/html")
    assert page.title == "Flood"
    assert [link.url for link in page.links] == ["http://example.com/first"]
    assert sum(1 for _ in page.document.iter("br")) < MAX_PARSED_TAGS
    fewer = (head + "<br>" * (MAX_PARSED_TAGS // 2) + "<a href='/after'>After</a>").encode()
    assert [link.url for link in parse_page(fewer, PAGE, "text/html").links] == [
        "http://example.com/first", "http://example.com/after"]
    text = "<p>" * 10 + "x < y"
    assert limit_tags(text) is text and limit_tags(text, 10) == "<p>" * 10 + "x "
    closed = "<a href=/l>l</a>" * 10  # end tags make no element: ten links are ten tags, not twenty
    assert limit_tags(closed, 10) is closed and limit_tags(closed, 9) == "<a href=/l>l</a>" * 9


def test_an_anchor_nested_deeper_than_pythons_recursion_and_a_huge_title() -> None:
    """The parser keeps 2,048 levels: an anchor holding 1,500 nested spans failed the whole page
    as a crash (RecursionError in the anchor text's walk), its other links lost; a 6 MB
    ``<title>`` was carried to the client and stored whole. Now the anchor keeps its text and
    the title its first MAX_TITLE characters."""
    deep = (b"<html><head><title>Deep</title></head><body><a href='/x'>" + b"<span>" * 1500 + b"deep text"
            + b"</span>" * 1500 + b"</a><a href='/y'>why</a></body></html>")
    page = parse_page(deep, "http://h.test/", "text/html")
    assert [(link.url, link.text) for link in page.links] == [("http://h.test/x", "deep text"),
                                                               ("http://h.test/y", "why")]
    huge = b"<html><head><title>" + b"ab " * 2_000_000 + b"</title></head><body>x</body></html>"
    title = parse_page(huge, "http://h.test/", "text/html").title
    assert len(title) == MAX_TITLE and title.startswith("ab ab")


@pytest.mark.parametrize("head", [
    '<meta charset="windows-1252">',
    '<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1">',
])
def test_a_page_decoded_as_utf8_is_parsed_as_utf8_whatever_its_markup_declares(head) -> None:
    """A body read as UTF-8 (the HTTP header says so, and it is valid UTF-8) is given to the parser
    as its bytes with the encoding named: a <meta charset> or an XML declaration that says
    otherwise must not make libxml2 read "café" as "cafÃ©"."""
    for prefix in ("", '<?xml version="1.0" encoding="iso-8859-1"?>\n'):
        body = f"{prefix}<html><head>{head}<title>café ¶</title></head><body><a href='/é'>é</a></body></html>"
        page = parse_page(body.encode("utf-8"), "http://h.test/", "text/html; charset=utf-8")
        assert page.encoding == "utf-8" and page.title == "café ¶"
        assert [(link.url, link.text) for link in page.links] == [("http://h.test/%C3%A9", "é")]
