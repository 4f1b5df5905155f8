"""Parsing a fetched page: character encoding, the lxml document, title and links.

The executor hands every HTML response body to :func:`parse_page`, which

1. finds the character encoding (:func:`detect_charset`: byte order mark,
   then the HTTP ``Content-Type`` charset, then ``<meta>`` in the first 4096
   bytes, else UTF-8; the order of the HTML Standard's encoding sniffing
   algorithm, section 13.2.3.2) and decodes the body (:func:`decode_html`);
2. parses it once with ``lxml.html`` (libxml2's forgiving HTML parser, so bad
   markup never raises);
3. extracts the links (:func:`extract_links`): ``href`` of ``<a>`` and
   ``<area>``, resolved against ``<base href>`` or the page URL and turned
   into canonical URLs by :func:`gridcrawl.urls.canonical_url`, the one place
   URLs are normalised.

The parsed document is kept on the result so that keep/follow rules can look
at DOM scopes (by id, class or tag) without parsing again; they call
:func:`extract_links` with ``within=`` those elements.
"""

from __future__ import annotations

import codecs
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urljoin, urlsplit

import lxml.etree
import lxml.html

from gridcrawl.charsets import errors_for
from gridcrawl.executor.fetch import HTML_TYPES
from gridcrawl.protocol import Utf8Text
from gridcrawl.urls import InvalidURL, canonical_url

__all__ = [
    "Link",
    "ParsedPage",
    "decode_html",
    "detect_charset",
    "canonical_link",
    "document_base",
    "extract_links",
    "header_robots",
    "meta_robots",
    "visible_text",
    "is_html",
    "looks_binary",
    "parse_page",
    "sniff_html",
]

#: Longest anchor text kept on a :class:`Link`, in characters.
MAX_ANCHOR_TEXT = 200
#: Longest page title kept, in characters (a hostile page's 5,000,000-character ``<title>`` was
#: carried to the client and stored whole; search engines show about 60).
MAX_TITLE = 2048

#: How many leading bytes are searched for a ``<meta>`` charset declaration
#: (the HTML Standard's prescan looks at the first 1024; pages in the wild
#: often put the declaration later, after long comments or scripts).
META_PRESCAN_BYTES = 4096

# Byte order marks, checked before anything else (HTML Standard 13.2.3.2 step 1,
# Encoding Standard "BOM sniff"): UTF-8, UTF-16BE, UTF-16LE.
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
)

_HEADER_CHARSET_RE = re.compile(r"""charset\s*=\s*["']?\s*([^"';,\s]+)""", re.IGNORECASE)
# Both <meta charset="x"> and <meta http-equiv="Content-Type" content="...; charset=x">.
_META_CHARSET_RE = re.compile(
    rb"""<meta[\s/][^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:+\-]+)""", re.IGNORECASE
)
_XML_DECLARATION_RE = re.compile(r"\A\s*<\?xml[^>]*>")

# WHATWG labels that Python's codec registry does not know (Encoding Standard 4.2).
_LABEL_ALIASES = {
    "windows-874": "cp874",
    "dos-874": "cp874",
    "x-sjis": "cp932",
    "ms932": "cp932",
    "x-gbk": "gbk",
    "x-euc-jp": "euc_jp",
    "iso-8859-8-i": "iso8859-8",
    "x-mac-cyrillic": "mac-cyrillic",
    "x-mac-roman": "mac-roman",
}
# Encodings that browsers decode with a superset (Encoding Standard 4.2: e.g.
# the "iso-8859-1" and "ascii" labels mean windows-1252), keyed by Python's
# canonical codec name.
_SUPERSETS = {
    "ascii": "cp1252",
    "iso8859-1": "cp1252",
    "iso8859-9": "cp1254",
    "iso8859-11": "cp874",
    "tis-620": "cp874",
    "gb2312": "gbk",
    "shift_jis": "cp932",
    "euc_kr": "cp949",
    "big5": "big5hkscs",
    "utf-8-sig": "utf-8",
}
# Text codecs that are not page encodings (UTF-7 is excluded by the Encoding
# Standard because of script injection; the others are Python internals).
_REFUSED_CODECS = frozenset(
    {"utf-7", "undefined", "idna", "punycode", "unicode-escape", "raw-unicode-escape", "mbcs", "oem"}
)


def is_html(content_type: str | None) -> bool:
    """Tell whether a ``Content-Type`` header value names an HTML document.

    True for ``text/html`` and ``application/xhtml+xml`` (parameters such as
    ``charset`` and letter case ignored); False for other types and for None
    (no header).
    """
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() in HTML_TYPES


#: Leading bytes examined by :func:`looks_binary` and :func:`sniff_html`.
SNIFF_BYTES = 8192

#: Share of binary data bytes in the first :data:`SNIFF_BYTES` above which a body is binary.
BINARY_SHARE = 0.01

# The WHATWG MIME Sniffing Standard's "binary data bytes" (section 3): control bytes that never
# occur in text. Tab, LF, FF, CR and ESC (ISO-2022-JP) are not among them.
_BINARY_BYTES = bytes([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20)])
_DELETE_TEXT_BYTES = bytes(b for b in range(256) if b not in _BINARY_BYTES)

# Tags that start an HTML document (WHATWG MIME Sniffing section 7.1, "identifying a resource
# with an unknown MIME type"), matched after leading whitespace, case-insensitively, followed by
# a space or ">".
_HTML_START_RE = re.compile(
    rb"\A[\t\n\x0c\r ]*<(?:!doctype\s+html|html|head|script|iframe|h1|div|font|table|a|style|title|b|body|br|p|!--)[\s>]",
    re.IGNORECASE,
)


def looks_binary(body: bytes, content_type: str | None = None) -> bool:
    """Tell whether a body declared as HTML is in fact binary (an image, an archive, random bytes).

    True when more than :data:`BINARY_SHARE` (1 %) of the first :data:`SNIFF_BYTES` bytes are
    binary data bytes of the WHATWG MIME Sniffing Standard (``0x00-0x08``, ``0x0B``,
    ``0x0E-0x1A``, ``0x1C-0x1F``). Text never has that many; a stray NUL in a real page does not
    reach the share. A body in UTF-16 or UTF-32 (byte order mark or declared charset), whose
    NUL bytes are text, is never binary. Such a body must not be parsed as HTML: lxml would
    make garbage links of whatever ``href=`` the bytes happen to spell.
    """
    sample = body[:SNIFF_BYTES]
    if not sample:
        return False
    if detect_charset(sample, content_type).startswith(("utf-16", "utf-32")):
        return False
    binary = len(sample.translate(None, _DELETE_TEXT_BYTES))
    return binary > BINARY_SHARE * len(sample)


def sniff_html(body: bytes) -> bool:
    """Tell whether a body served without ``Content-Type`` is HTML (WHATWG MIME Sniffing §7.1).

    True when, after optional leading whitespace (and a UTF-8 byte order mark), it starts with
    one of the HTML tags the standard lists (``<!DOCTYPE html``, ``<html``, ``<head``,
    ``<body``, ``<title``, ``<p``, ``<!--`` ...) and is not binary (:func:`looks_binary`).
    """
    sample = body[:SNIFF_BYTES]
    if sample.startswith(codecs.BOM_UTF8):
        sample = sample[len(codecs.BOM_UTF8):]
    return bool(_HTML_START_RE.match(sample)) and not looks_binary(sample)


def html_document(content_type: str | None, body: bytes | None) -> bool:
    """Tell whether a response is an HTML document: by its ``Content-Type`` when it names a media
    type (:func:`is_html`), else by sniffing ``body`` (:func:`sniff_html`; no body: not HTML)."""
    from gridcrawl.executor.fetch import media_type
    if media_type(content_type):
        return is_html(content_type)
    return sniff_html(body or b"")


@lru_cache(maxsize=256)
def _codec_for_label(label: str) -> str | None:
    """Python codec name for an encoding label, or None when unknown or unusable."""
    label = label.strip().strip("\"'").strip().lower()
    if not label:
        return None
    label = _LABEL_ALIASES.get(label, label)
    try:
        name = codecs.lookup(label).name
        b"<".decode(name, "replace")  # LookupError for bytes-to-bytes codecs such as base64
    except (LookupError, ValueError, TypeError):
        return None
    if name in _REFUSED_CODECS:
        return None
    return _SUPERSETS.get(name, name)


#: A character that is neither ASCII nor U+FFFD: a body decoded as UTF-8 with replacement that
#: holds one had at least one valid multi-byte sequence.
_NOT_ASCII_RE = re.compile("[^\x00-\x7f\ufffd]")


def detect_charset(body: bytes, content_type: str | None) -> str:
    """Find the character encoding of an HTML body; return a Python codec name.

    Order (HTML Standard 13.2.3.2, simplified): a byte order mark (UTF-8,
    UTF-16BE, UTF-16LE); the ``charset`` parameter of the HTTP
    ``Content-Type`` header; a ``<meta charset>`` or ``<meta http-equiv=
    "Content-Type" content="...; charset=...">`` in the first
    :data:`META_PRESCAN_BYTES` bytes; else ``"utf-8"``. Labels are mapped with
    ``codecs.lookup`` (plus a few WHATWG labels Python lacks), to the
    superset browsers use (``iso-8859-1`` and ``ascii`` decode as
    ``cp1252``, ``shift_jis`` as ``cp932``, ...). An unknown or unusable
    label (``utf-7``, ``base64``, typos) is ignored and the next source is
    tried; a ``<meta>`` naming UTF-16 means UTF-8, since the page was
    readable as ASCII.

    Args:
        body: the response body, bytes as received (after content decoding).
        content_type: the ``Content-Type`` header value, or None.

    Returns:
        A codec name that ``bytes.decode`` accepts, e.g. ``"utf-8"``,
        ``"cp1251"``, ``"utf-16-le"``.
    """
    return _declared_charset(body, content_type) or "utf-8"


def _declared_charset(body: bytes, content_type: str | None) -> str | None:
    """:func:`detect_charset`'s codec when a byte order mark, the header or a ``<meta>`` names
    one, else None (the page declares nothing)."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return name
    if content_type:
        match = _HEADER_CHARSET_RE.search(content_type)
        if match:
            name = _codec_for_label(match.group(1))
            if name is not None:
                return name
    for match in _META_CHARSET_RE.finditer(body, 0, META_PRESCAN_BYTES):
        name = _codec_for_label(match.group(1).decode("ascii"))
        if name is not None:
            return "utf-8" if name.startswith("utf-16") else name
    return None


def decode_html(body: bytes, content_type: str | None) -> tuple[str, str]:
    """Decode an HTML body to text.

    Uses :func:`detect_charset`; undecodable bytes become U+FFFD
    (``errors="replace"``) and a leading byte order mark is removed. A page that declares no
    encoding and is not UTF-8 — not one valid multi-byte sequence — is decoded as windows-1252,
    the HTML Standard's default for legacy pages (section 13.2.3.3, "the user's locale": the
    Western one), as browsers and Scrapy (w3lib's fallback) do; a UTF-8 page with a few bad
    bytes stays UTF-8.

    Returns:
        ``(text, encoding)``: the decoded text and the codec name used.
    """
    text, encoding = _decoded(body, content_type)
    return text.removeprefix("\ufeff"), encoding


def _decoded(body: bytes, content_type: str | None) -> tuple[str, str]:
    """``(text, encoding)``: ``body`` decoded with :func:`detect_charset`'s codec (an undeclared
    body that is no UTF-8 as windows-1252: :func:`decode_html`), undecodable bytes as U+FFFD, a
    leading byte order mark kept. A body that is valid UTF-8 gives a
    :class:`~gridcrawl.protocol.Utf8Text` (a ``str`` that keeps ``body`` for the wire)."""
    declared = _declared_charset(body, content_type)
    encoding = declared or "utf-8"
    if encoding == "utf-8":
        try:  # valid UTF-8, as most pages are: the text keeps its bytes for the wire (Utf8Text)
            return Utf8Text.decode(body), encoding
        except UnicodeDecodeError:
            pass
        text = body.decode(encoding, errors="replace")
        if declared is not None or _NOT_ASCII_RE.search(text):  # declared, or UTF-8 with a few bad bytes
            return text, encoding
        encoding = "cp1252"  # undeclared, and not one UTF-8 sequence: a legacy page (WHATWG's default)
    return body.decode(encoding, errors=errors_for(encoding)), encoding  # (cp1252: WHATWG's, all 256 bytes)


@dataclass(slots=True)
class Link:
    """A link found on a page.

    Attributes:
        url: the canonical URL it points to (:func:`gridcrawl.urls.canonical_url`).
        text: anchor text, whitespace collapsed, at most :data:`MAX_ANCHOR_TEXT`
            characters (for ``<area>`` and image-only anchors, the ``alt`` text).
    """

    url: str
    text: str


@dataclass
class ParsedPage:
    """The result of parsing one page.

    Attributes:
        title: text of the first ``<title>``, whitespace collapsed, at most :data:`MAX_TITLE`
            characters ("" if none).
        links: distinct links in document order (:func:`extract_links`).
        encoding: the codec name the body was decoded with.
        document: the lxml root element (``lxml.html.HtmlElement``) of the
            parsed page, for DOM-scoped keep/follow rules; an empty ``<html>``
            element when the body was empty or unparsable. Left out of
            ``repr`` and comparisons.
        base_url: the document base URL links were resolved against
            (``<base href>`` resolved, else the page URL).
        decoded: the body decoded with ``encoding`` (``body.decode(encoding, errors="replace")``,
            a byte order mark kept), so that the caller does not decode it again. Left out of
            ``repr`` and comparisons.
        metas: the document's ``<meta>`` elements in document order, gathered by the walk that
            finds the links (:func:`meta_robots` reads them instead of walking the tree again).
            Left out of ``repr`` and comparisons.
    """

    title: str
    links: list[Link]
    encoding: str
    document: lxml.html.HtmlElement = field(repr=False, compare=False)
    base_url: str = ""
    decoded: str = field(default="", repr=False, compare=False)
    metas: list = field(default_factory=list, repr=False, compare=False)


def _collapse(text: str, limit: int | None = None) -> str:
    """Collapse runs of whitespace to one space, strip, and cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text[:limit] if limit is not None else text


def _text(element) -> str:
    """The text inside ``element`` (not its tail), comments and processing instructions left
    out, as text_content() gives it. Nested deeper than Python's recursion allows (the parser
    keeps 2,048 levels: an anchor holding 1,500 nested spans failed its whole page as a crash
    with RecursionError), lxml's ``itertext`` (in C; slower than :func:`_text_of` on the usual
    anchor of a few children)."""
    try:
        return "".join(_text_of(element))
    except RecursionError:
        return "".join(element.itertext())


def _text_of(element):
    """The text pieces inside ``element`` (not its tail), comments excluded, as text_content()."""
    if isinstance(element.text, str):
        yield element.text
    for child in element:
        if isinstance(child.tag, str):
            yield from _text_of(child)
        if child.tail:
            yield child.tail


def _anchor_text(element: lxml.html.HtmlElement) -> str:
    """Anchor text of an ``<a>`` (its text, else its images' alt) or an ``<area>`` (alt)."""
    if element.tag == "area":
        return _collapse(element.get("alt") or "", MAX_ANCHOR_TEXT)
    if len(element) == 0:  # the common anchor: text only (text_content() costs an XPath call)
        text = _collapse(element.text or "", MAX_ANCHOR_TEXT)
    else:
        text = _collapse(_text(element), MAX_ANCHOR_TEXT)
    if not text:
        alts = [img.get("alt") or "" for img in element.iter("img")]
        text = _collapse(" ".join(alts), MAX_ANCHOR_TEXT)
    return text


# <meta http-equiv="refresh" content="5; url=/new.html">: the delay, then an optional ";" or ",",
# an optional "url=", the URL, optionally quoted (HTML Standard, "shared declarative refresh steps")
_REFRESH_RE = re.compile(r"""\s*[\d.]*\s*[;,]?\s*(?:url\s*=\s*)?(["']?)(.*?)\1\s*\Z""", re.IGNORECASE | re.DOTALL)


def refresh_target(meta: lxml.html.HtmlElement) -> str | None:
    """The URL of a ``<meta http-equiv="refresh" content="N; url=URL">`` element as written
    (``None`` for another ``<meta>``, or a refresh of the page itself: no URL)."""
    if (meta.get("http-equiv") or "").strip().lower() != "refresh":
        return None
    match = _REFRESH_RE.match(meta.get("content") or "")
    return (match.group(2).strip() or None) if match else None


def extract_links(
    root: lxml.html.HtmlElement,
    base_url: str,
    within: Iterable[lxml.html.HtmlElement] | None = None,
    skip_nofollow: bool = False,
    metas: list | None = None,
    limit: int | None = None,
) -> list[Link]:
    """Extract the links of a page: ``<a href>`` and ``<area href>`` elements, the ``src`` of
    ``<frame>`` and ``<iframe>`` elements (a frameset's pages: old intranets, Javadoc), and the
    target of a ``<meta http-equiv="refresh">`` (a page that moved), as Nutch and Heritrix do.

    Each ``href`` is resolved against ``base_url`` and canonicalised with
    :func:`gridcrawl.urls.canonical_url`; hrefs that are invalid or not
    http/https (``javascript:``, ``mailto:``, ``tel:``, ...) are skipped
    silently. A fragment-only href (``#top``) resolves to ``base_url`` itself.
    A URL found more than once is kept once, with the text of its first
    occurrence; an ``href`` met before on the page is not canonicalised again
    (on the Python docs 40 % of the hrefs repeat one of their page's).

    Args:
        root: the document root (or any element) to search.
        base_url: absolute URL to resolve relative hrefs against: the
            document base URL (``<base href>`` resolved, else the page URL).
        within: optional elements limiting the search to their subtrees
            (DOM scope of a keep/follow rule); when given, ``root`` is not
            searched. Links come in the order of ``within``, then document
            order inside each subtree.
        skip_nofollow: leave out links whose ``rel`` attribute holds the ``nofollow`` keyword
            (HTML Standard 4.6.7.14; case-insensitive, among space-separated keywords).
        metas: a list to which the ``<meta>`` elements of the searched subtrees are appended,
            in document order, by the same walk (a second walk of a Python docs page for its
            ``<meta name="robots">`` cost about 250 µs, a fifth of parsing it).
        limit: at most this many links (the first); past it the walk only gathers ``metas``.
            ``None``: every link.

    Returns:
        The distinct links, in order of first occurrence (a frame's text: its ``title``; a
        refresh's: none).
    """
    scopes: Iterable[lxml.html.HtmlElement] = (root,) if within is None else within
    links: list[Link] = []
    seen: set[str] = set()
    hrefs: set[str] = set()  # hrefs met on the page: the same href is the same URL (kept or invalid)
    for scope in scopes:
        for element in scope.iter("a", "area", "meta", "frame", "iframe"):
            tag = element.tag
            if tag == "meta":
                if metas is not None:
                    metas.append(element)
                href = refresh_target(element)
            elif tag == "a" or tag == "area":
                href = element.get("href")
            else:
                href = element.get("src")
            if href is None or href in hrefs or (limit is not None and len(links) >= limit):
                continue
            if skip_nofollow:
                rel = element.get("rel")
                if rel and "nofollow" in rel.lower().split():
                    continue
            hrefs.add(href)
            try:
                url = canonical_url(href, base_url)
            except InvalidURL:
                continue
            if url in seen:
                continue
            seen.add(url)
            if tag == "meta":
                text = ""
            elif tag == "a" or tag == "area":
                text = _anchor_text(element)
            else:  # a frame: its title
                text = _collapse(element.get("title") or "", MAX_ANCHOR_TEXT)
            links.append(Link(url, text))
    return links


def document_base(root: lxml.html.HtmlElement, page_url: str) -> str:
    """The document base URL: the first ``<base href>`` resolved against the page URL.

    Falls back to ``page_url`` when there is no such element or it does not
    resolve to an http/https URL with a host (HTML Standard 2.4.1).
    """
    for base in root.iter("base"):
        href = base.get("href")
        if href is None:
            continue
        try:
            resolved = urljoin(page_url, href.strip())
            parts = urlsplit(resolved)
        except ValueError:
            return page_url
        if parts.scheme in ("http", "https") and parts.hostname:
            return resolved
        return page_url
    return page_url


_thread_state = threading.local()


def _html_parser(utf8: bool = False) -> lxml.etree.HTMLParser:
    """This thread's HTML parser (lxml parsers must not be used by two threads at once): of
    decoded text, or with ``utf8`` of UTF-8 bytes (the encoding given: a ``<meta charset>`` or an
    XML declaration that says otherwise does not change it).

    Every element is an ``lxml.html.HtmlElement`` (text_content, cssselect,
    find_class, ...) chosen by lxml's C-level default class lookup, which is
    markedly faster than ``lxml.html``'s per-tag Python lookup (form and
    input elements therefore lack ``lxml.html``'s form helpers).

    ``huge_tree``: libxml2 stops a document at 256 open elements by default, and drops the rest
    without an error a crawl would see (an old page of 300 unclosed ``<font>`` tags lost its
    later links and text); with it, 2,048 levels. The body is bounded anyway (``max_body_bytes``).
    """
    parser = getattr(_thread_state, "utf8_parser" if utf8 else "parser", None)
    if parser is None:
        parser = lxml.etree.HTMLParser(huge_tree=True, encoding="utf-8" if utf8 else None)
        parser.set_element_class_lookup(
            lxml.etree.ElementDefaultClassLookup(
                element=lxml.html.HtmlElement,
                comment=lxml.html.HtmlComment,
                pi=lxml.html.HtmlProcessingInstruction,
                entity=lxml.html.HtmlEntity,
            )
        )
        setattr(_thread_state, "utf8_parser" if utf8 else "parser", parser)
    return parser


#: Attributes of one start tag the parser is given at most; the rest of the tag's attributes are
#: left out. libxml2's HTML parser checks each attribute of a tag against all of the tag's earlier
#: ones (a duplicate is dropped), so a tag costs the square of its attributes: one tag of 200,000
#: distinct attributes (a 2.6 MB page) held an executor's parse, and with it every other page of
#: the executor, for over 10 minutes, and the manager handed the page to the next executor, and
#: the next (20,000 attributes: 1.3 s; 40,000: 18 s). Browsers have no limit; real pages stay
#: far below it.
MAX_TAG_ATTRIBUTES = 256
#: Pages of up to this many characters are parsed as they come: their worst tag costs about 20 s
#: (one tag of ~76,000 attributes; 43,000 in 290 KB took 5.9 s), within a grid thread's deadline.
#: Checking costs about 19 ns a character, a tenth of the parse's 24: from 64 KiB, 0.48 CPU-s of a
#: crawl of Python's documentation (226 of its 530 pages; 12 % of the whole grid's CPU), from
#: 512 KiB 0.06 (4 pages).
_ATTRIBUTE_CHECK_FROM = 512 * 1024
#: Start tags shorter than this many characters hold too few attributes to be counted.
_LONG_TAG = 1024
# one attribute as the HTML tokenizer reads it (WHATWG HTML §13.2.5.32-39): a name up to
# whitespace, "/", ">" or "=", then an optional "=" and a quoted or unquoted value. Possessive:
# every character of a page is read once at most, whatever it holds.
_ATTRIBUTE = r"""[^\s/>][^\s/>=]*+(?:\s*+=\s*+(?:"[^"]*+"|'[^']*+'|[^\s>]*+))?"""
_ATTRIBUTE_RE = re.compile(_ATTRIBUTE)
_TAG_NAME_RE = re.compile(r"<[A-Za-z][^\s/>]*+")
_START_TAG_RE = re.compile(rf"<[A-Za-z][^\s/>]*+(?:[\s/]++|{_ATTRIBUTE})*+")


def limit_tag_attributes(text: str, limit: int = MAX_TAG_ATTRIBUTES) -> str:
    """``text`` with every start tag of more than ``limit`` attributes cut after its
    ``limit``-th (the tag itself, its first attributes and everything after it kept), so that
    parsing it costs time in proportion to its length (see :data:`MAX_TAG_ATTRIBUTES`).

    Args:
        text: decoded HTML.
        limit: attributes kept per start tag.

    Returns:
        ``text`` itself when no tag has more (always for texts up to 524,288 characters), else
        a shorter copy.
    """
    if len(text) <= _ATTRIBUTE_CHECK_FROM:
        return text
    pieces: list[str] = []
    done = 0
    for tag in _START_TAG_RE.finditer(text):
        start, end = tag.span()
        if end - start < _LONG_TAG:
            continue
        cut = _TAG_NAME_RE.match(text, start).end()  # type: ignore[union-attr]  # the tag's own start
        for count, attribute in enumerate(_ATTRIBUTE_RE.finditer(text, cut, end), 1):
            if count > limit:
                break
            cut = attribute.end()
        else:
            continue  # no more than the limit
        pieces.append(text[done:cut])
        done = end
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


#: Start tags (``<`` characters not followed by ``/``) of a page parsed at most; the page's text
#: from the next one on is left out of its document (links, text, robots meta tags), not of its
#: stored body. libxml2 takes ~400 bytes an element: a 9 MiB page of 858,000 unclosed ``<a href>``
#: tags held 563 MiB of an executor for 4 s (each worker thread of it could hold as much); the
#: largest page of Python's documentation (contents.html, 2.5 MB) has 97,689 ``<``. End tags are
#: not counted: they make no element (a page of 200,000 ``<a href>…</a>`` links keeps them all).
MAX_PARSED_TAGS = 250_000

_START_TAG = re.compile(r"<(?!/)")


def limit_tags(text: str, limit: int = MAX_PARSED_TAGS) -> str:
    """``text`` itself when it holds at most ``limit`` start tags, else its start up to the
    next one (see :data:`MAX_PARSED_TAGS`)."""
    if len(text) <= limit or text.count("<") - text.count("</") <= limit:
        return text
    for number, match in enumerate(_START_TAG.finditer(text)):
        if number == limit:
            return text[:match.start()]
    return text


def _parse_document(text: str) -> lxml.html.HtmlElement:
    """Parse decoded HTML with lxml; an empty ``<html>`` element when nothing parses. Start tags
    keep at most :data:`MAX_TAG_ATTRIBUTES` attributes (:func:`limit_tag_attributes`), and a
    page at most :data:`MAX_PARSED_TAGS` tags (:func:`limit_tags`).

    Text decoded from UTF-8 (:class:`~gridcrawl.protocol.Utf8Text`) is parsed from its bytes:
    lxml turns a ``str`` with characters beyond ASCII back into UTF-8 before libxml2 reads it,
    8 % of the parse of Python's documentation (1.24 s against 1.15 for its 530 pages)."""
    limited = limit_tag_attributes(limit_tags(text))
    utf8 = getattr(text, "utf8", None) if limited is text else None
    try:
        if utf8 is not None:
            return lxml.html.document_fromstring(utf8, parser=_html_parser(utf8=True))
        if _XML_DECLARATION_RE.match(limited):  # lxml refuses str input that carries an XML encoding declaration
            limited = _XML_DECLARATION_RE.sub("", limited, count=1)
        return lxml.html.document_fromstring(limited, parser=_html_parser())
    except (ValueError, lxml.etree.LxmlError):
        return lxml.html.Element("html")


def parse_page(body: bytes, page_url: str, content_type: str | None, *, skip_nofollow: bool = False,
               max_links: int | None = None) -> ParsedPage:
    """Parse a fetched HTML page: decode it, build the lxml document, find title and links.

    Never raises on bad markup: an empty or unparsable body gives a page
    with no title and no links.

    Args:
        body: the response body (bytes).
        page_url: the URL the page was fetched from (after redirects); the
            fallback base URL for relative links.
        content_type: the ``Content-Type`` header value, or None.
        skip_nofollow: leave out ``rel="nofollow"`` links (:func:`extract_links`).
        max_links: keep at most this many links, the first in document order (``None``: all).

    Returns:
        A :class:`ParsedPage`; links are resolved against ``<base href>``
        (itself resolved against ``page_url``) or ``page_url``, canonical,
        distinct, in document order.
    """
    decoded, encoding = _decoded(body, content_type)
    # the text decode_html gives (sliced only when there is a mark: removeprefix copies a str subclass)
    root = _parse_document(decoded[1:] if decoded.startswith("\ufeff") else decoded)
    title_element = next(root.iter("title"), None)
    title = _collapse(_text(title_element), MAX_TITLE) if title_element is not None else ""
    base_url = document_base(root, page_url)
    metas: list = []
    links = extract_links(root, base_url, skip_nofollow=skip_nofollow, metas=metas, limit=max_links)
    return ParsedPage(title=title, links=links, encoding=encoding, document=root, base_url=base_url,
                      decoded=decoded, metas=metas)


# ---------------------------------------------------------------------------------------------
# Standards a page publishes about itself: robots directives, its canonical URL, its text.
# ---------------------------------------------------------------------------------------------

#: Robots directives gridcrawl acts on; ``none`` means both (Google's robots meta specification).
ROBOTS_DIRECTIVES = frozenset({"noindex", "nofollow"})
# Words a robots rule may carry that are not user-agent names (``unavailable_after: DATE`` ...).
_KNOWN_RULES = frozenset({"all", "none", "noindex", "nofollow", "noarchive", "nosnippet", "notranslate",
                          "noimageindex", "unavailable_after", "max-snippet", "max-image-preview",
                          "max-video-preview", "indexifembedded", "nocache", "noodp", "noydir"})


def _directives(content: str) -> set[str]:
    found: set[str] = set()
    for word in content.lower().replace(";", ",").split(","):
        word = word.strip()
        if word == "none":
            found.update(ROBOTS_DIRECTIVES)
        elif word in ROBOTS_DIRECTIVES:
            found.add(word)
    return found


def meta_robots(root: lxml.html.HtmlElement, token: str, metas: list | None = None) -> set[str]:
    """The robots directives of a page's ``<meta name="robots">`` tags and of the tags named
    after our user agent's product token (``<meta name="gridcrawl" content="nofollow">``),
    as in the robots meta tag convention (Google Search Central, "Robots meta tag
    specifications"; names and values case-insensitive, ``none`` = ``noindex, nofollow``).
    ``metas``: the document's ``<meta>`` elements when already gathered
    (:attr:`ParsedPage.metas`), else ``root`` is searched.

    Returns a subset of ``{"noindex", "nofollow"}``.
    """
    names = {"robots", token.lower()}
    found: set[str] = set()
    for meta in root.iter("meta") if metas is None else metas:
        name = (meta.get("name") or "").strip().lower()
        if name in names:
            found |= _directives(meta.get("content") or "")
    return found


def header_robots(value: str | None, token: str) -> set[str]:
    """The robots directives of an ``X-Robots-Tag`` header value that apply to user agent
    ``token`` (repeated headers arrive joined by ", "). A rule may name a user agent first
    (``X-Robots-Tag: gridcrawl: noindex``; it then holds until another agent is named); rules
    without one apply to every crawler. Returns a subset of ``{"noindex", "nofollow"}``."""
    if not value:
        return set()
    token = token.lower()
    found: set[str] = set()
    agent: str | None = None
    for part in value.split(","):
        part = part.strip()
        head, colon, rest = part.partition(":")
        if colon and head.strip().lower() not in _KNOWN_RULES:
            agent = head.strip().lower()
            part = rest
        if agent is None or agent == token:
            found |= _directives(part)
    return found


def canonical_link(root: lxml.html.HtmlElement, base_url: str, link_header: str | None = None) -> str | None:
    """The canonical URL a page names (RFC 6596): a ``Link: <URL>; rel="canonical"`` HTTP header
    first (it cannot be forged by content injected into the page), else the first
    ``<link rel="canonical" href>`` of the document. Resolved against ``base_url`` and made
    canonical (:func:`gridcrawl.urls.canonical_url`); ``None`` when there is none or it is not an
    http(s) URL.
    """
    if link_header:
        import requests.utils  # parse_header_links: requests' reader of RFC 8288 Link headers
        try:
            links = requests.utils.parse_header_links(link_header)
        except Exception:  # a malformed header is no canonical link
            links = []
        for link in links:
            if "canonical" in (link.get("rel") or "").lower().split() and link.get("url"):
                try:
                    return canonical_url(link["url"].strip(), base_url)
                except InvalidURL:
                    break
    for element in root.iter("link"):
        rel = (element.get("rel") or "").lower().split()
        href = element.get("href")
        if "canonical" in rel and href:
            try:
                return canonical_url(href.strip(), base_url)
            except InvalidURL:
                return None
    return None


#: Elements whose text no reader sees: removed by :func:`visible_text`.
INVISIBLE_TAGS = ("script", "style", "noscript", "template")


def visible_text(root: lxml.html.HtmlElement) -> str:
    """The text a reader sees in the page's ``<body>`` (the whole document when it has none):
    its text without ``script``, ``style``, ``noscript`` and ``template`` elements or comments.

    The text pieces (lxml's ``text`` and ``tail``: the text between two tags) are joined with
    spaces (``<td>1</td><td>2</td>`` is two words, not ``12``), in document order; the text
    on both sides of a removed element is one piece (``a<script>x</script>b`` reads ``ab``).
    It **removes those elements from** ``root``, so call it after everything else that reads
    the tree. Cost: about 0.5 ms for a Python docs page (1.2-1.8 ms with ``itertext()``, whose
    iterator costs a Python step per node; here one XPath gathers the text nodes in C).
    """
    try:
        for element in list(root.iter(*INVISIBLE_TAGS)):
            parent = element.getparent()
            if parent is None or element is root:
                continue
            tail = element.tail
            if tail:  # the text after it joins the text before it: one text node, as lxml reads it
                previous = element.getprevious()
                if previous is not None:
                    previous.tail = (previous.tail or "") + tail
                else:
                    parent.text = (parent.text or "") + tail
            parent.remove(element)  # with its tail, copied above
        body = root.find("body")
        return " ".join(_text_nodes()(body if body is not None else root))
    except (lxml.etree.LxmlError, ValueError, TypeError):
        return ""


def _text_nodes() -> lxml.etree.XPath:
    """This thread's compiled XPath giving the text nodes under an element, as plain ``str``."""
    finder = getattr(_thread_state, "text_nodes", None)
    if finder is None:
        finder = _thread_state.text_nodes = lxml.etree.XPath("descendant::text()", smart_strings=False)
    return finder
