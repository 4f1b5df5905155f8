"""Sitemaps (sitemaps.org protocol 0.9): reading a sitemap or sitemap index an executor fetched.

This module owns :func:`parse_sitemap`. A sitemap is XML: a ``<urlset>`` of ``<url>`` entries
(``<loc>`` and an optional ``<lastmod>``), or a ``<sitemapindex>`` of ``<sitemap>`` entries
naming other sitemaps. It may come gzip-compressed as a file (``sitemap.xml.gz``, magic bytes
``1f 8b``), which is decompressed here with memory bounded.

A sitemap may also be a text file, one URL per line (sitemaps.org, "Other formats":
``sitemap.txt``); it was refused as "not XML" and its URLs never crawled.

The parser is lxml's (libxml2) incremental ``iterparse``: entries are read and freed one by one,
so a 50 MB sitemap never becomes a 50 MB tree. It never touches the network and expands no
entity (``resolve_entities=False``, ``no_network=True``, DTDs not loaded: an XML bomb or an
external entity stays text). Elements are matched by local name, so sitemaps without the
namespace, or with Google's old one, are read too (as Scrapy's ``scrapy.utils.sitemap`` does).

Limits of sitemaps.org ("Sitemap file location" and "Using Sitemap index files"): a sitemap or
index holds at most 50,000 entries and 52,428,800 bytes uncompressed. A bigger file is refused
(:class:`SitemapError`, :data:`TOO_LARGE`), however it came compressed: a ``.gz`` file here, or a
``Content-Encoding`` the fetcher removed (``gridcrawl.executor.page`` gives its ``too_large`` the
same kind and message); entries past 50,000 are ignored and counted in ``Sitemap.ignored``.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

import lxml.etree

from gridcrawl.executor.fetch import DecompressedTooLarge, gunzip
from gridcrawl.urls import InvalidURL, canonical_url
from gridcrawl.errors import SitemapError  # noqa: F401 (re-exported)

__all__ = ["MAX_SITEMAP_BYTES", "MAX_SITEMAP_ENTRIES", "TOO_LARGE", "Sitemap", "SitemapError", "parse_lastmod",
           "parse_sitemap"]

#: Largest sitemap accepted, bytes after decompression (sitemaps.org: 50 MiB).
MAX_SITEMAP_BYTES = 52_428_800
#: Entries of one sitemap or index read at most (sitemaps.org: 50,000).
MAX_SITEMAP_ENTRIES = 50_000
#: Why a sitemap over :data:`MAX_SITEMAP_BYTES` is refused (``bad_sitemap``), whichever way it
#: came compressed.
TOO_LARGE = f"sitemap larger than {MAX_SITEMAP_BYTES} bytes uncompressed (the sitemaps.org limit)"


@dataclass
class Sitemap:
    """A parsed sitemap.

    Attributes:
        index: True for a ``<sitemapindex>`` (``entries`` are sitemaps), False for a ``<urlset>``.
        entries: ``(canonical_url, lastmod)`` in document order, at most
            :data:`MAX_SITEMAP_ENTRIES`; ``lastmod`` is an ISO 8601 UTC time without offset
            (``"2024-05-01T00:00:00"``) or ``""`` when absent or unreadable.
        ignored: entries past the limit or whose ``<loc>`` is not an http(s) URL.
        broken: why the XML stopped being readable after the entries read (a truncated file,
            an entity bomb libxml2 refuses), in plain words; ``""`` when it was read to its end.
    """

    index: bool
    entries: list[tuple[str, str]] = field(default_factory=list)
    ignored: int = 0
    broken: str = ""


#: An ``&`` that starts no character or entity reference: a URL's query written unescaped
#: (``?a=1&b=2``), the most common sitemap mistake. It stopped the XML parser, and every entry
#: after the first such URL was lost without a word (Google reads the rest).
_BARE_AMPERSAND_RE = re.compile(rb"&(?!(?:[A-Za-z][A-Za-z0-9._-]*|#[0-9]+|#[xX][0-9A-Fa-f]+);)")


def parse_lastmod(text: str | None) -> str:
    """A W3C datetime (``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``, or with time and zone, as
    sitemaps.org's ``<lastmod>``) as an ISO 8601 UTC time without offset; ``""`` when empty or
    unreadable. A time without a zone is taken as UTC."""
    value = (text or "").strip()
    if not value:
        return ""
    if len(value) == 4 and value.isdigit():
        value += "-01-01"
    elif len(value) == 7 and value[4] == "-":
        value += "-01"
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return ""
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc).replace(tzinfo=None)
    return when.isoformat(timespec="seconds")


def _local(tag) -> str:
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


def _text_sitemap(body: bytes) -> Sitemap:
    """A sitemaps.org "text file" sitemap: one URL per line, UTF-8, nothing else (Google reads
    them too). Lines that are not http(s) URLs, and those past :data:`MAX_SITEMAP_ENTRIES`, are
    counted in ``ignored``. Raises :class:`SitemapError` when no line is one (a body that is
    neither XML nor such a list)."""
    result = Sitemap(index=False)
    for line in body.decode("utf-8", errors="replace").lstrip("\ufeff").splitlines():
        line = line.strip()
        if not line:
            continue
        if len(result.entries) >= MAX_SITEMAP_ENTRIES or not line[:8].lower().startswith(("http://", "https://")):
            result.ignored += 1
            continue
        try:
            result.entries.append((canonical_url(line), ""))
        except InvalidURL:
            result.ignored += 1
    if not result.entries:
        raise SitemapError("not XML, and not a text sitemap either (no line of it is an http(s) URL)")
    return result


def parse_sitemap(body: bytes) -> Sitemap:
    """Read a sitemap or sitemap index (gzip-compressed or not): XML, or a text file of one
    URL per line (sitemaps.org, "Other formats": the body does not start with ``<``).

    Args:
        body: the response body (after any Content-Encoding was removed by the fetcher).

    Returns:
        A :class:`Sitemap`.

    Raises:
        SitemapError: not XML, the root is neither ``urlset`` nor ``sitemapindex``, or more than
            :data:`MAX_SITEMAP_BYTES` bytes once decompressed.
    """
    if body[:2] == b"\x1f\x8b":
        try:
            body = gunzip(body, MAX_SITEMAP_BYTES)
        except DecompressedTooLarge:
            raise SitemapError(TOO_LARGE) from None
        except ValueError as exc:
            raise SitemapError(f"gzip sitemap: {exc}") from None
    if len(body) > MAX_SITEMAP_BYTES:
        raise SitemapError(TOO_LARGE)
    utf16 = body.startswith((b"\xff\xfe", b"\xfe\xff"))  # a byte order mark: XML for lxml to read as such
    if not utf16 and not body.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
        return _text_sitemap(body)
    if b"&" in body and not utf16:  # (bytes of UTF-16 are not matched one by one)
        body = _BARE_AMPERSAND_RE.sub(b"&amp;", body)
    result: Sitemap | None = None
    loc = lastmod = None
    try:
        for event, element in lxml.etree.iterparse(
                io.BytesIO(body), events=("start", "end"), resolve_entities=False, no_network=True,
                load_dtd=False, huge_tree=False, remove_comments=True, remove_pis=True):
            name = _local(element.tag)
            if result is None:  # the root element decides what this is
                if name not in ("urlset", "sitemapindex"):
                    raise SitemapError(f"not a sitemap: root element <{name or element.tag}>")
                result = Sitemap(index=name == "sitemapindex")
                continue
            if event == "start":
                continue
            if name == "loc":
                loc = element.text
            elif name == "lastmod":
                lastmod = element.text
            elif name in ("url", "sitemap"):
                if len(result.entries) >= MAX_SITEMAP_ENTRIES:
                    result.ignored += 1
                else:
                    try:
                        result.entries.append((canonical_url((loc or "").strip()), parse_lastmod(lastmod)))
                    except InvalidURL:
                        result.ignored += 1
                loc = lastmod = None
                element.clear()  # free what was read: memory stays flat on a 50 MB sitemap
                parent = element.getparent()
                if parent is not None:
                    while element.getprevious() is not None:
                        del parent[0]
    except lxml.etree.XMLSyntaxError as exc:
        if result is None:
            raise SitemapError(f"not XML: {exc}") from None
        # a truncated or broken tail: keep the entries read before it, and say where it broke
        read = len(result.entries) + result.ignored
        result.broken = f"the XML breaks off after {read:,} entr{'y' if read == 1 else 'ies'}: {exc}"
    if result is None:
        raise SitemapError("empty sitemap")
    return result
