"""Semantic crawling on the executor: RDF documents and the structured data of HTML pages as
triples, parsed with no network access and within bounds.

This module owns the parsing half of the *semantic distributed crawler* of
``semantic-non-semantic-crawlers.txt`` section 3.4 (its "page analyser" and the model building
of its "ontology analyser"): every subject, predicate and object found is returned as a triple,
and the http(s) URI objects become links of the page (a semantic-web crawl follows
``rdfs:seeAlso``, ``owl:sameAs``, ``owl:imports`` and the like).

* **RDF documents** (:func:`rdf_format` decides): ``application/rdf+xml``, ``text/turtle``,
  ``application/n-triples``, ``application/ld+json``, ``text/n3``, ``application/trig``,
  ``application/n-quads``, and a document served with a generic type (``text/plain``, XML,
  JSON, octets) whose URL's suffix (``.rdf``, ``.owl``, ``.ttl``, ``.nt``, ...) or first bytes
  (:func:`sniff_rdf`) say it is RDF, parsed with rdflib (:func:`parse_rdf`). The triples of TriG's and N-Quads' named graphs are read as the page's
  triples, without their graph names (the triple table has no graph column).
* **Structured data in HTML** (:func:`extract_structured`): JSON-LD scripts, microdata and Open
  Graph read with extruct (Zyte's library, the one Scrapy users use), RDFa with pyRdfa (extruct's
  own RDFa back end), all turned into triples with rdflib.

**No parser touches the network.** Libraries fetch what documents name by URL: JSON-LD contexts
(``"@context": "https://schema.org"``), ``@import``, XML external entities and DTDs, RDFa
vocabularies, and reasoners follow ``owl:imports``. Here:

* a remote JSON-LD context is replaced before rdflib sees it: by a bundled copy for schema.org and
  the ActivityStreams vocabulary (``gridcrawl/contexts/*.jsonld``, written for gridcrawl: the
  vocabulary, its prefixes and its IRI-valued terms), any other by ``{"@vocab": URL}`` (``URL``
  ending in ``/`` or ``#``, else with ``#`` added); ``@import`` is dropped;
* RDF/XML is checked before rdflib's expat-based parser runs (:func:`check_xml_entities`): an
  external entity (``SYSTEM``/``PUBLIC``) or an entity whose text refers to another entity (the
  "billion laughs" construction) is refused, and the text all entity references expand to is
  capped at ``max_bytes``. Plain internal entities (``<!ENTITY owl "http://...#">``, as OWL
  editors write) are allowed. Expat never loads an external DTD subset;
* pyRdfa runs with vocabulary expansion and its vocabulary cache off;
* ``owl:imports`` is never fetched by a parser: its object is a link like any other, fetched (or
  not) by the crawl under its scope, robots.txt and politeness.

**Bounds** (:class:`Limits`): a document larger than ``max_bytes`` is not parsed; parsing stops
with :class:`RDFLimit` at the ``max_triples``-th distinct triple, past :attr:`Limits.max_text`
characters of triples, or once ``deadline`` seconds have passed: the deadline is checked at
every triple, and where a parser can work long without making one, at every JSON-LD object,
list and value, RDF/XML element, element pyRdfa walks, and microdata item and property extruct
reads (its work grows with the cube of the nesting: a 60 KB page of 2,000 nested ``itemprop``
elements: 38 s; 800 nested items: 9 minutes).

A triple travels as ``[subject, predicate, object, kind, datatype, language]`` (strings or
``None``): ``kind`` is ``"uri"``, ``"literal"`` or ``"bnode"``; a blank node is written ``_:bN``,
numbered per page in the order the parser produced them; a language is a lower-case
:func:`language_tag`. Triples with an IRI longer than :data:`MAX_IRI` characters, or a relative
one, are dropped.
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import time
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any
from urllib.parse import urljoin

from gridcrawl.errors import RDFError, RDFLimit  # noqa: F401 (re-exported)
from gridcrawl.protocol import json_safe
from gridcrawl.urls import MAX_URL_LENGTH

__all__ = ["Limits", "RDFError", "RDFLimit", "Structured", "check_xml_entities", "extract_structured",
           "language_tag", "local_context", "localise_contexts", "parse_rdf", "rdf_format", "sniff_rdf", "triple_key", "triple_links",
           "valid_triple", "wants_body", "SNIFF", "RDF_ACCEPT", "MAX_IRI", "rdf_alternates"]

#: Longest IRI (subject, predicate, URI object, datatype) kept, in characters (the URL columns' size).
MAX_IRI = MAX_URL_LENGTH

#: Media types parsed as RDF, with rdflib's format name.
RDF_TYPES = {
    "application/rdf+xml": "xml",
    "text/turtle": "turtle",
    "application/x-turtle": "turtle",
    "application/n-triples": "nt",
    "text/n3": "n3",
    "text/rdf+n3": "n3",
    "application/ld+json": "json-ld",
    "application/trig": "trig",
    "application/n-quads": "nquads",
}
#: The formats that carry named graphs: their quads are read as triples (the graph name dropped).
QUAD_FORMATS = frozenset({"trig", "nquads"})
#: File suffixes parsed as RDF when the server sends a generic type (text/plain, XML, octets):
#: the RDF entries of ``rdflib.util.guess_format``'s table (not ``.xml``, ``.json`` nor ``.html``,
#: which it also maps, to RDF/XML, JSON-LD and RDFa: a sitemap, a JSON API or a page would be
#: taken for RDF and fail as ``rdf_parse``; such files are sniffed, :func:`sniff_rdf`).
RDF_SUFFIXES = {".rdf": "xml", ".owl": "xml", ".ttl": "turtle", ".nt": "nt", ".n3": "n3", ".jsonld": "json-ld",
                ".json-ld": "json-ld", ".trig": "trig", ".nq": "nquads", ".nquads": "nquads"}
#: An XML document's start: a declaration, a comment or doctype, or a start tag (``<rdf:RDF ``),
#: not an IRI (``<http://a.example/s>``, ``<>``, ``<#me>``), which begins a Turtle or N-Triples line.
_XML_START = re.compile(rb"<(?:\?xml|!|[A-Za-z_][\w.-]*(?::[A-Za-z_][\w.-]*)?[\s/>])")
#: Generic types whose body a semantic crawl downloads and sniffs whatever the URL (text, usually
#: small): RDF is often served so. ``None``: no type (the fetcher downloads such bodies anyway).
_SNIFFED_TYPES = frozenset({None, "text/plain", "application/xml", "text/xml", "application/json",
                            "application/owl+xml"})
#: Octets: downloaded by a semantic crawl only with an RDF suffix (an archive or an installer is
#: no RDF, and would be read up to ``max_body_bytes``), sniffed when a body is there anyway.
_GENERIC_TYPES = _SNIFFED_TYPES | {"application/octet-stream", "binary/octet-stream"}
#: Bytes of a body's head :func:`sniff_rdf` looks at.
SNIFF_BYTES = 4096
RDF_NAMESPACE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
#: A Turtle (or TriG, N3) directive opening a document: ``@prefix``, ``@base``, or SPARQL's
#: ``PREFIX``/``BASE`` (any case), after comments.
_TURTLE_DIRECTIVE = re.compile(r"(?:@prefix|@base)\s|(?i:prefix\s+[\w.-]*:\s*<|base\s+<)")
#: An IRI or a blank node label, as N-Triples writes a term.
_IRI = r'<[^<>"{}|^`\\\s]*>'
_NODE = rf"(?:{_IRI}|_:[\w.-]+)"
#: One N-Triples line (``nt``: three terms) or N-Quads line (with a fourth, the graph), a
#: comment after it allowed.
_NT_LINE = re.compile(rf'{_NODE}[ \t]*{_IRI}[ \t]*(?:{_NODE}|"(?:[^"\\\n]|\\.)*"(?:@[A-Za-z0-9-]+|\^\^{_IRI})?)'
                      rf'[ \t]*({_NODE}[ \t]*)?\.[ \t]*(?:#.*)?\Z')
#: A Turtle statement's start without directives: a subject (an IRI with a ``:``, ``/`` or
#: ``#``, ``<>``, a blank node, ``[``) and a predicate (an absolute IRI or ``a``); not markup
#: (``<html>\n<head>`` has the shape of two relative IRIs).
_TURTLE_START = re.compile(r'(?:<>|<[^<>"{}|^`\\\s]*[:/#][^<>"{}|^`\\\s]*>|_:[\w.-]+|\[)\s*'
                           r'(?:<[^<>"{}|^`\\\s]*:[^<>"{}|^`\\\s]*>|a\s)')
#: The first element of an XML document, past its declaration, comments and doctype.
_XML_ELEMENT = re.compile(r"<([A-Za-z_][\w.-]*(?::[A-Za-z_][\w.-]*)?)[\s/>]")
#: An HTML page's doctype, and the elements one may start with (HTML lets ``<html>`` and
#: ``<head>`` be left out).
_HTML_DOCTYPE = re.compile(r"<!doctype\s+html[\s>]", re.IGNORECASE)
_HTML_FIRST = frozenset({"html", "head", "body", "title", "meta"})
#: A JSON-LD keyword as a key: a JSON document using one is JSON-LD.
_JSONLD_KEY = re.compile(r'"@(?:context|graph|id)"\s*:')
_COMMENT_LINES = re.compile(r"(?:[ \t\r\n]*#[^\n]*(?:\n|\Z))*[ \t\r\n]*")
#: The ``Accept`` header of a semantic crawl: HTML first, the RDF syntaxes next.
RDF_ACCEPT = ("text/html,application/xhtml+xml;q=0.9,application/rdf+xml;q=0.8,text/turtle;q=0.8,"
              "application/ld+json;q=0.8,application/n-triples;q=0.7,application/trig;q=0.6,"
              "application/n-quads;q=0.6,*/*;q=0.1")

RDF_TYPE_IRI = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"


@dataclass(frozen=True)
class Limits:
    """Bounds of one document's parse: ``max_bytes`` of body (and of XML entity expansion),
    ``max_triples`` distinct triples, ``deadline`` seconds of parsing, and :attr:`max_text`."""

    max_bytes: int = 5 * 1024 * 1024
    max_triples: int = 50_000
    deadline: float = 10.0

    @property
    def max_text(self) -> int:
        """Characters of all the triples of one document or page together (their subjects,
        predicates, objects and datatypes), at most: :data:`TEXT_PER_BYTE` × ``max_bytes``. A
        prefix or context term names a long IRI in a few bytes: a 1.4 MB Turtle document of
        50,000 triples of 2,000-character IRIs made 300 MB of triples (730 MB of memory in the
        executor, a result over ``max_message_bytes``, so the page failed as ``too_large``)."""
        return TEXT_PER_BYTE * self.max_bytes


#: The text of a document's triples per byte of ``rdf_max_bytes`` at most (:attr:`Limits.max_text`:
#: 40 MiB by default, within the 64 MiB of ``max_message_bytes``). N-Triples is about its own size
#: and a Turtle or JSON-LD document of short prefixed names a few times its size.
TEXT_PER_BYTE = 8


def _media_type(content_type: str | None) -> str | None:
    if not content_type:
        return None
    return content_type.split(";", 1)[0].strip().lower() or None


def _url_suffix(url: str) -> str:
    """The lower-case file suffix of ``url``'s path's last segment (``".ttl"``), or ``""``."""
    path = url.split("?", 1)[0].split("#", 1)[0].lower()
    name = path.rsplit("/", 1)[-1]
    return name[name.rfind("."):] if "." in name else ""


def rdf_format(content_type: str | None, url: str, body: bytes | None = None) -> str | None:
    """rdflib's format name for a response, or ``None`` when it is not RDF.

    The media type decides (:data:`RDF_TYPES`); a type that is neither RDF nor generic (HTML,
    images, ...) is never RDF. A generic type (none, ``text/plain``, XML, JSON, octets) is RDF
    when the URL's suffix is one of :data:`RDF_SUFFIXES` (given a ``body``, its start refines the
    syntax: an XML declaration or start tag is RDF/XML, ``{``/``[`` JSON-LD, anything else, an IRI
    such as ``<http://a.example/s>`` included, the suffix's own text syntax, Turtle for
    ``.owl``/``.rdf``/``.jsonld``: an ``.owl`` file may be either; markup with an HTML doctype or
    whose first element is ``html``, ``head``, ``body``, ``title`` or ``meta`` is none: rdflib's RDF/XML reader made triples of an HTML
    page's elements), else when ``body``'s head sniffs as RDF (:func:`sniff_rdf`).
    Without a body and without a suffix: ``None``.
    """
    media = _media_type(content_type)
    if media in RDF_TYPES:
        return RDF_TYPES[media]
    if media not in _GENERIC_TYPES:
        return None
    fmt = RDF_SUFFIXES.get(_url_suffix(url))
    if fmt is None:
        return sniff_rdf(body) if body else None
    if not body:
        return fmt
    start = body[:256].lstrip(b"\xef\xbb\xbf \t\r\n")
    if _XML_START.match(start):
        head = body[:SNIFF_BYTES].decode("utf-8", errors="ignore")
        element = _XML_ELEMENT.search(head)
        if _HTML_DOCTYPE.search(head) or (element and element.group(1).lower() in _HTML_FIRST):
            return None  # an HTML page (an error or login page) is no RDF, whatever its URL
        return "xml"
    if start[:1] in (b"{", b"["):
        return "json-ld"
    return "turtle" if fmt in ("xml", "json-ld") else fmt


def sniff_rdf(body: bytes) -> str | None:
    """The RDF syntax the head of ``body`` (its first :data:`SNIFF_BYTES` bytes, no parse) shows,
    as rdflib's format name, or ``None`` when it shows none: for a response of a generic type
    whose URL has no RDF suffix.

    * ``"xml"``: an XML document (declaration, comments and doctype allowed) whose first element
      is ``rdf:RDF`` (any prefix, or none) and whose head names the RDF namespace;
    * ``"turtle"``: after ``#`` comments, a directive (``@prefix``, ``@base``, ``PREFIX``,
      ``BASE``), or a statement starting with a subject IRI or blank node and a predicate IRI or
      ``a`` whose lines are not all N-Triples;
    * ``"nt"``: every whole line of the head (comments and blank lines aside) an N-Triples
      line; ``"nquads"`` when one of them has a fourth term (a graph);
    * ``"json-ld"``: a JSON object or array whose head has an ``"@context"``, ``"@graph"`` or
      ``"@id"`` key.

    An HTML page is none of these. The head is read as UTF-8 (UTF-16 by its byte order mark),
    undecodable bytes ignored.
    """
    head = body[:SNIFF_BYTES]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = head.decode("utf-16", errors="ignore")
    else:
        text = head.decode("utf-8", errors="ignore").lstrip("\ufeff")
    start = text[_COMMENT_LINES.match(text).end():]
    if _TURTLE_DIRECTIVE.match(start):
        return "turtle"
    if not _TURTLE_START.match(start):
        if start.startswith("<"):
            element = _XML_ELEMENT.search(text)
            name = element.group(1) if element else ""
            return "xml" if name.rpartition(":")[2] == "RDF" and RDF_NAMESPACE in text else None
        if start[:1] in ("{", "["):
            return "json-ld" if _JSONLD_KEY.search(text) else None
        return None
    lines = start.split("\n")
    if len(head) == SNIFF_BYTES and len(lines) > 1:
        del lines[-1]  # cut by the head's end
    quads = False
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _NT_LINE.match(line)
        if match is None:
            return "turtle"
        quads = quads or match.group(1) is not None
    return "nquads" if quads else "nt"


#: What :func:`wants_body` says of a body read only to be sniffed: the fetcher keeps it when it
#: fits in ``max_body_bytes``, else keeps the response without its body, as a crawl that does not
#: sniff would (a large ``text/plain`` file is no ``too_large`` failure of a semantic crawl).
SNIFF = "sniff"


def wants_body(url: str, content_type: str | None) -> bool | str:
    """Whether a semantic crawl downloads this response's body: True for an RDF type or a
    generic type with an RDF file suffix (:func:`rdf_format`; past ``max_body_bytes`` it fails
    as ``too_large``), :data:`SNIFF` for a generic text type (``text/plain``, XML, JSON) whose
    body :func:`rdf_format` sniffs (kept only when it fits), False otherwise (octets without an
    RDF suffix, every other type). The fetcher's ``body_wanted`` check."""
    if rdf_format(content_type, url) is not None:
        return True
    return SNIFF if _media_type(content_type) in _SNIFFED_TYPES else False


#: A well-formed language tag as rdflib checks it (BCP 47's shape: letters, then ``-`` and
#: letters or digits), lower case.
_LANGUAGE_TAG = re.compile(r"[a-z]+(?:-[a-z0-9]+)*\Z")


def language_tag(value: str | None) -> str | None:
    """The language tag a page's ``value`` (an HTML ``lang``, a JSON-LD ``@language``) stands
    for: trimmed, lower case (RDF 1.1's value space of language tags; pyRdfa writes them so),
    a locale's ``_`` made ``-`` (``en_US``, as many sites write it, is ``en-us``); ``None`` when
    it is empty or still no language tag (``"en US"``, ``"English"`` is ``english``), as HTML
    reads an invalid ``lang``: the language is unknown. rdflib refuses such a tag with a
    ``ValueError``, which cost a page with ``<html lang="en_US">`` all its Open Graph,
    microdata and RDFa triples."""
    if not isinstance(value, str):
        return None
    tag = value.strip().replace("_", "-").lower()
    return tag if _LANGUAGE_TAG.match(tag) else None


# ------------------------------------------------------------------------------------------ triples


class _Bounded:
    """Counts the distinct triples an rdflib parser adds and enforces :class:`Limits`; keeps
    them in the order they came (for the stable blank node numbering)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.ends = time.monotonic() + limits.deadline
        self.order: dict = {}
        self.text = 0  # characters of the triples in ``order`` (Limits.max_text)

    def check(self, triple) -> None:
        if triple in self.order:
            return
        if len(self.order) >= self.limits.max_triples:
            raise RDFLimit(f"more than {self.limits.max_triples} triples (max_triples)")
        self.tick()
        s, p, o = triple  # rdflib terms, each a str (BoundedMemory.add lets no other through)
        datatype = getattr(o, "datatype", None)
        self.text += len(s) + len(p) + len(o) + (len(datatype) if datatype is not None else 0)
        if self.text > self.limits.max_text:
            raise RDFLimit(f"triples of more than {self.limits.max_text} characters in all "
                           f"({TEXT_PER_BYTE} x rdf_max_bytes)")
        self.order[triple] = None

    def tick(self) -> None:
        """Raise :class:`RDFLimit` once the deadline has passed."""
        if time.monotonic() > self.ends:
            raise RDFLimit(f"parse deadline of {self.limits.deadline:g} s passed (rdf_parse_deadline)")


def _graph(bound: _Bounded, quads: bool = False):
    """An rdflib graph whose every ``add`` passes ``bound`` first; a ``Dataset`` for ``quads``
    (TriG, N-Quads: ``bound`` keeps each triple once, whatever its graph)."""
    from rdflib import BNode, Dataset, Graph, Literal, URIRef
    from rdflib.plugins.stores.memory import Memory

    class BoundedMemory(Memory):
        def add(self, triple, context, quoted=False):  # noqa: D102 - rdflib's Store.add
            # only RDF: N3's formulas are no statement of the document (``{ :a :b :c } => {...}``
            # asserts no ``:a :b :c``), and a formula, a variable (``?x``) or a literal subject
            # is no RDF term there (they were stored as IRIs: "%7Bthis%20rdflib.identifier...",
            # "x", "lit", lines no N-Triples reader takes)
            s, p, o = triple
            if quoted or not (isinstance(s, (URIRef, BNode)) and isinstance(p, URIRef)
                              and isinstance(o, (URIRef, BNode, Literal))):
                bound.tick()
                return None
            bound.check(triple)
            return super().add(triple, context, quoted)

        def remove(self, triple, context=None):  # noqa: D102 - (RDFa's rdfa:Pattern copies)
            for found, _ in list(self.triples(triple, context)):
                bound.order.pop(found, None)
            return super().remove(triple, context)

    graph = (Dataset if quads else Graph)(store=BoundedMemory())
    # the prefixes a document binds serve to write qnames, which no parse here does; rdflib
    # keeps them in a trie whose every insertion walks the others: 20,000 Turtle @prefix lines
    # (700 KB) took 85 s, between two triples, where alone the deadline is checked. Its contexts
    # (TriG, N-Quads) share this namespace manager.
    graph.namespace_manager.bind = lambda *args, **kwargs: None
    return graph


class _Writer:
    """Turns rdflib terms into wire triples; numbers blank nodes per page (``_:b0``, ``_:b1``...)."""

    def __init__(self) -> None:
        self.bnodes: dict = {}
        self.seen: set = set()
        self.triples: list[list] = []
        self.dropped = 0

    def _node(self, term) -> str:
        from rdflib import BNode
        if isinstance(term, BNode):
            label = self.bnodes.get(term)
            if label is None:
                label = self.bnodes[term] = f"_:b{len(self.bnodes)}"
            return label
        return _iri_text(str(term))

    def add_all(self, triples) -> None:
        """Add rdflib ``(s, p, o)`` triples (a triple seen before on this page is skipped)."""
        from rdflib import BNode, Literal
        for s, p, o in triples:
            subject, predicate = self._node(s), _iri_text(str(p))
            if isinstance(o, Literal):
                text, datatype = str(o), _iri_text(str(o.datatype)) if o.datatype is not None else None
                if datatype == _NUMBER_TEXT:  # a JSON number no float holds: the page's text
                    datatype = XSD_DOUBLE
                elif datatype in (XSD_DOUBLE, XSD_FLOAT) and text in _NON_FINITE:
                    text = _NON_FINITE[text]  # rdflib writes "inf", which no xsd:double is
                if _SURROGATE.search(text):  # a Turtle "\uD800": no wire, file nor database takes it
                    text = _SURROGATE.sub("\ufffd", text)
                row = [subject, predicate, text, "literal", datatype, o.language.lower() if o.language else None]
            else:
                row = [subject, predicate, self._node(o), "bnode" if isinstance(o, BNode) else "uri", None, None]
            if max(len(subject), len(predicate), len(row[4] or "")) > MAX_IRI or (row[3] == "uri" and len(row[2]) > MAX_IRI):
                self.dropped += 1
                continue
            if not (_SCHEME.match(predicate) and (_SCHEME.match(subject) or subject.startswith("_:"))
                    and (row[3] != "uri" or _SCHEME.match(row[2]))
                    and (row[4] is None or _SCHEME.match(row[4]))):
                self.dropped += 1  # a relative IRI (no N-Triples reader takes it): no RDF term
                continue
            key = tuple(row)
            if key not in self.seen:
                self.seen.add(key)
                self.triples.append(row)


def triple_links(triples: list[list], limit: int = 10_000) -> list[list[str]]:
    """The links of a page's triples: each http(s) URI object (not an ``rdf:type`` class) as a
    canonical URL with an anchor text (the object's ``rdfs:label`` on the page, else ``""``),
    distinct, in order, at most ``limit``. Invalid URLs are skipped."""
    from gridcrawl.urls import InvalidURL, canonical_url
    labels = {t[0]: t[2] for t in triples if t[1] == RDFS_LABEL and t[3] == "literal"}
    links, seen = [], set()
    for s, p, o, kind, _, _ in triples:
        if kind != "uri" or p == RDF_TYPE_IRI or not o.lower().startswith(("http://", "https://")):
            continue
        try:
            url = canonical_url(o)
        except InvalidURL:
            continue
        if url not in seen:
            seen.add(url)
            links.append([url, (labels.get(o) or "")[:200]])
            if len(links) >= limit:
                break
    return links


def rdf_alternates(document, base_url: str) -> list[list[str]]:
    """The RDF versions an HTML page names: each ``<link rel="alternate" type="T" href>`` whose
    type ``T`` is an RDF syntax (:data:`RDF_TYPES`), as Linked Data pages point to their data
    (`<link rel="alternate" type="text/turtle" href="/data/x.ttl">`). Each href is resolved
    against ``base_url`` and made canonical; returns ``[url, ""]`` links, distinct, in document
    order (invalid or non-http(s) URLs skipped)."""
    from gridcrawl.urls import InvalidURL, canonical_url
    links, seen = [], set()
    for element in document.iter("link"):
        rel = (element.get("rel") or "").lower().split()
        media = (element.get("type") or "").split(";")[0].strip().lower()
        href = (element.get("href") or "").strip()
        if "alternate" not in rel or media not in RDF_TYPES or not href:
            continue
        try:
            url = canonical_url(href, base_url)
        except InvalidURL:
            continue
        if url.lower().startswith(("http://", "https://")) and url not in seen:
            seen.add(url)
            links.append([url, ""])
    return links


# ------------------------------------------------------------------------------------------ XML


_ENTITY_REF = re.compile(rb"&([A-Za-z_:][\w.:-]*);")


#: XML namespace declarations in scope at once, at most, in an RDF/XML document; and the sum, over
#: every declaration, of those in scope when it comes. rdflib's RDF/XML reader copies the whole
#: prefix map at each declaration and keeps the copies until the element ends: 20,000
#: declarations on one element (600 KB) made 200 million dictionary entries, about 6 GB.
MAX_XML_NAMESPACES = 1_000
MAX_XML_NAMESPACE_COPIES = 20_000_000


class _StopAtDoctypeEnd(Exception):
    pass


def check_xml_entities(body: bytes, max_bytes: int) -> None:
    """Refuse an XML document whose DTD could make a parser fetch or blow up; return ``None``
    when it is safe for expat.

    Reads the internal DTD subset with expat (parsing stops at its end). Raises
    :class:`RDFError` for an external entity (``SYSTEM`` or ``PUBLIC``, general or parameter:
    XXE) and for an entity whose replacement text refers to another entity (the nesting behind
    "billion laughs", OWASP XXE Prevention Cheat Sheet); raises :class:`RDFLimit` when the text
    all references to the declared entities expand to exceeds ``max_bytes``, and when the
    document's namespace declarations pass :data:`MAX_XML_NAMESPACES` in scope at once or
    :data:`MAX_XML_NAMESPACE_COPIES` (a second expat pass, over the whole document, that
    handles nothing else).
    """
    import xml.parsers.expat  # here: loading expat costs 15 ms, and most crawls never read RDF/XML

    entities: dict[bytes, int] = {}
    problem: list[str] = []

    def declared(name, is_parameter, value, base, system_id, public_id, notation):
        if system_id is not None or public_id is not None:
            problem.append(f"external entity {name!r} refused (XXE)")
        elif value is not None and ("&" in value or "%" in value):
            problem.append(f"entity {name!r} refers to other entities (entity expansion refused)")
        elif not is_parameter:
            entities[name.encode()] = len(value.encode()) if value else 0

    def doctype_end():
        raise _StopAtDoctypeEnd

    def element_start(name, attrs):
        raise _StopAtDoctypeEnd  # no DOCTYPE before the first element

    parser = xml.parsers.expat.ParserCreate()
    parser.SetParamEntityParsing(xml.parsers.expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.EntityDeclHandler = declared
    parser.EndDoctypeDeclHandler = doctype_end
    parser.StartElementHandler = element_start
    try:
        parser.Parse(body, True)
    except _StopAtDoctypeEnd:
        pass
    except xml.parsers.expat.ExpatError as exc:
        if problem:
            raise RDFError(problem[0]) from None
        raise RDFError(f"invalid XML: {exc}") from None
    if problem:
        raise RDFError(problem[0])
    if entities:
        expanded = sum(entities.get(m.group(1), 0) for m in _ENTITY_REF.finditer(body))
        if expanded > max_bytes:
            raise RDFLimit(f"XML entities expand to {expanded} bytes, more than {max_bytes} (rdf_max_bytes)")
    if b"xmlns" not in body:
        return
    in_scope, copies = 0, 0

    def namespace_start(prefix, uri):
        nonlocal in_scope, copies
        copies += in_scope
        in_scope += 1
        if in_scope > MAX_XML_NAMESPACES or copies > MAX_XML_NAMESPACE_COPIES:
            raise RDFLimit(f"more than {MAX_XML_NAMESPACES} XML namespace declarations in scope at once"
                           if in_scope > MAX_XML_NAMESPACES else
                           f"XML namespace declarations too many for the RDF/XML reader "
                           f"(it copies those in scope at each one: more than {MAX_XML_NAMESPACE_COPIES})")

    def namespace_end(prefix):
        nonlocal in_scope
        in_scope -= 1

    counter = xml.parsers.expat.ParserCreate(namespace_separator=" ")
    counter.SetParamEntityParsing(xml.parsers.expat.XML_PARAM_ENTITY_PARSING_NEVER)
    counter.StartNamespaceDeclHandler = namespace_start
    counter.EndNamespaceDeclHandler = namespace_end
    try:
        counter.Parse(body, True)
    except xml.parsers.expat.ExpatError:
        pass  # rdflib's own parse says what is wrong with the document


# ------------------------------------------------------------------------------------------ JSON-LD


@lru_cache(maxsize=None)
def _bundled_contexts() -> dict[str, dict]:
    """The bundled JSON-LD contexts by URL (``gridcrawl/contexts/index.json``)."""
    folder = resources.files("gridcrawl") / "contexts"
    index = json.loads((folder / "index.json").read_text(encoding="utf-8"))
    contexts = {}
    for name, urls in index.items():
        context = json.loads((folder / name).read_text(encoding="utf-8"))["@context"]
        for url in urls:
            contexts[url] = context
    return contexts


def local_context(url: str, base: str = "") -> dict:
    """The context used for a remote JSON-LD context ``url`` (resolved against the document's
    ``base`` URL when relative): a copy of the bundled context, else ``{"@vocab": URL}`` (``#``
    appended unless it ends in ``/`` or ``#``). Never fetches."""
    bundled = _bundled_contexts()
    key = urljoin(base, url.strip()) if base else url.strip()
    for candidate in (key, key.rstrip("/"), key.rstrip("/") + "/"):
        if candidate in bundled:
            return copy.deepcopy(bundled[candidate])  # a processor must not change the bundled one
    return {"@vocab": key if key.endswith(("/", "#")) else key + "#"}


def localise_contexts(data: Any, base: str = "", _depth: int = 0, bound: "_Bounded | None" = None) -> Any:
    """``data`` (parsed JSON-LD of a document at ``base``) with every remote context replaced by
    :func:`local_context` and every ``@import`` dropped, so that no JSON-LD processor fetches
    anything, every ``@language`` made a :func:`language_tag`, and each :class:`NumberText` a
    value object of its ``xsd:double`` lexical form typed :data:`_NUMBER_TEXT` (written as
    ``xsd:double``). With ``bound``, its deadline is checked at every object and list (a 5 MB
    document of 1.7 million ``{}`` took 3 s to copy before the parser saw a node). Raises
    :class:`RDFError` past 100 levels of nesting, :class:`RDFLimit` past the deadline."""
    if _depth > 100:
        raise RDFError("JSON-LD nested more than 100 levels deep")
    if isinstance(data, NumberText):
        return {"@value": data.lexical, "@type": _NUMBER_TEXT}
    if isinstance(data, list):
        if bound is not None:
            bound.tick()
        return [localise_contexts(item, base, _depth + 1, bound) for item in data]
    if not isinstance(data, dict):
        return data
    if bound is not None:
        bound.tick()
    out = {}
    for key, value in data.items():
        if key == "@context":
            out[key] = _localise_context(value, base, _depth + 1)
        elif key == "@import":
            continue
        elif key == "@language" and isinstance(value, str):
            out[key] = language_tag(value)  # None: no language, as JSON-LD's null
        else:
            out[key] = localise_contexts(value, base, _depth + 1, bound)
    return out


def _localise_context(value: Any, base: str, depth: int) -> Any:
    if isinstance(value, str):
        return local_context(value, base)
    if isinstance(value, list):
        return [_localise_context(v, base, depth + 1) for v in value]
    return localise_contexts(value, base, depth)


class NumberText(str):
    """A JSON number no float holds (``1e400``: infinite as a float) or a constant JSON does not
    have (``NaN``, ``Infinity``), kept as the text the page wrote; ``lexical`` is its
    ``xsd:double`` lexical form (XML Schema 1.1 Part 2, 3.3.5: ``1e400``, ``NaN``, ``INF``), the
    RDF literal it gives. rdflib wrote ``"inf"^^xsd:double``, which no ``xsd:double`` is and
    strict N-Triples readers refuse."""

    lexical: str


def _number_text(text: str, lexical: str | None = None) -> NumberText:
    number = NumberText(text)
    number.lexical = lexical or text
    return number


def _parse_float(text: str) -> float | NumberText:
    value = float(text)
    return value if value - value == 0.0 else _number_text(text)  # inf - inf is NaN


#: JSON's non-standard constants Python reads, and their ``xsd:double`` lexical forms.
_CONSTANTS = {"NaN": "NaN", "Infinity": "INF", "-Infinity": "-INF"}


#: A lone surrogate (U+D800-U+DFFF), which no UTF-8 text holds: an escape such as ``\ud83d``
#: (half an emoji, cut by a page's truncation) or a Turtle ``\uD800`` gives one.
_SURROGATE = re.compile("[\ud800-\udfff]")
#: A JSON escape of a surrogate (paired or not): only then can the parsed data hold a lone one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _whole_characters(data: Any) -> Any:
    """``data`` (parsed JSON) with each lone surrogate of its strings, keys included, made
    U+FFFD: msgpack, UTF-8 files and the databases refuse them (a JSON-LD ``"name": "Kettle
    \\ud83d"`` failed the whole page as a crash and ``gridcrawl fetch`` with a traceback).
    Raises ``RecursionError`` on data nested deeper than the interpreter's recursion limit."""
    if isinstance(data, str):
        return _SURROGATE.sub("\ufffd", data) if _SURROGATE.search(data) else data
    if isinstance(data, list):
        return [_whole_characters(item) for item in data]
    if isinstance(data, dict):
        return {_whole_characters(key): _whole_characters(value) for key, value in data.items()}
    return data


def load_json(text: str) -> Any:
    """JSON ``text`` parsed as extruct parses a JSON-LD script (control characters in strings
    allowed), but a number no float holds, or ``NaN``/``Infinity``, is a :class:`NumberText`
    (the page's text), not ``inf`` or ``nan``, and a lone surrogate escape (``\\ud83d``) is
    U+FFFD. Raises ``ValueError`` when it does not parse."""
    data = json.loads(text, strict=False, parse_float=_parse_float, parse_constant=lambda name: _number_text(
        name, _CONSTANTS[name]))
    return _whole_characters(data) if _SURROGATE_ESCAPE.search(text) else data


def jsonld_script_items(node) -> list:
    """The JSON-LD objects of the ``<script type="application/ld+json">`` element ``node``:
    extruct's reading (a top-level list gives its entries; HTML or JavaScript comment lines
    skipped when the script does not parse otherwise) with the numbers of :func:`load_json`.
    Raises ``ValueError`` when the script is no JSON."""
    import jstyleson
    from extruct.jsonld import HTML_OR_JS_COMMENTLINE
    script = node.xpath("string()")
    try:
        data = load_json(script)
    except ValueError:
        data = jstyleson.loads(HTML_OR_JS_COMMENTLINE.sub("", script), strict=False, parse_float=_parse_float,
                               parse_constant=lambda name: _number_text(name, _CONSTANTS[name]))
        data = _whole_characters(data) if _SURROGATE_ESCAPE.search(script) else data
    items = data if isinstance(data, list) else [data] if isinstance(data, dict) else []
    return [item for item in items if item]


XSD_DOUBLE = "http://www.w3.org/2001/XMLSchema#double"
XSD_FLOAT = "http://www.w3.org/2001/XMLSchema#float"
#: The datatype a :class:`NumberText` travels through rdflib with (rdflib normalises an
#: ``xsd:double`` literal's text: ``"1e400"`` became ``"inf"``); :class:`_Writer` writes it as
#: ``xsd:double``. Random per process, so that no page can name it.
_NUMBER_TEXT = f"urn:gridcrawl:number-text:{secrets.token_hex(8)}"
#: rdflib's lexical forms of the non-finite ``xsd:double``/``xsd:float`` values, and XML Schema's.
_NON_FINITE = {"inf": "INF", "-inf": "-INF", "nan": "NaN"}


#: A JSON number's text (RFC 8259, section 6).
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")


def _json_number(lexical: str) -> str:
    """``lexical`` (a :class:`NumberText`'s ``xsd:double`` form) as JSON text: the number itself
    when JSON has it (``1e400``), else a JSON string (``"NaN"``, ``"INF"``)."""
    return lexical if _JSON_NUMBER.match(lexical) else json.dumps(lexical)


def _jsonld_into(graph, data: Any, base: str, bound: _Bounded) -> list[str]:
    """Add the triples of JSON-LD ``data`` (a dict or list, contexts localised here) to ``graph``
    (a :class:`NumberText` as its ``xsd:double`` lexical form), checking ``bound``'s deadline at
    every node and value read (:class:`RDFLimit`); return the IRIs that held characters no IRI
    holds, which were read percent-encoded (:func:`_iri_context`)."""
    context = _iri_context()(base=base)
    context.repaired = []
    parser = _jsonld_parser()(generalized_rdf=False)
    parser.bound = bound
    parser.parse(localise_contexts(data, base, bound=bound), context, graph)
    return context.repaired


@lru_cache(maxsize=1)
def _jsonld_parser():
    """rdflib's JSON-LD ``Parser`` class, but the keys of a language map (``"@container":
    "@language"``: ``{"en_US": "Kettle"}``) are read by :func:`language_tag`, as
    :func:`localise_contexts` makes every ``@language`` (rdflib's ``ValueError`` for ``en_US``
    cost the whole JSON-LD block), and a blank node label (``"@id": "_:b0"``) names a node of
    this parser's document only (JSON-LD 1.1, "blank node identifier": scoped to the document),
    as one parser reads one script: rdflib kept the label, so two scripts of a page that both
    wrote ``_:b0`` (or a script and the page's RDFa) made one node of two."""
    from rdflib import BNode
    from rdflib.plugins.parsers.jsonld import Parser

    class PageParser(Parser):
        bound: _Bounded  # its deadline is checked at every node and value: nodes that give no
        # triple ({} or null, 1.7 million of them in a 5 MB document) took 31 s with a 2 s deadline

        def _add_to_graph(self, *args, **kwargs):
            self.bound.tick()
            return super()._add_to_graph(*args, **kwargs)

        def _to_object(self, dataset, graph, context, term, node, inlist=False):
            self.bound.tick()
            if (isinstance(node, dict) and isinstance(context.get_value(node), (dict, list))
                    and context.get_type(node) not in context.get_keys("@json")):
                return None  # {"@value": {...}} is no value (JSON-LD 1.1): rdflib wrote Python's "{'x': 1}"
            return super()._to_object(dataset, graph, context, term, node, inlist)

        def _parse_container(self, context, term, obj):
            nodes = super()._parse_container(context, term, obj)
            if "@language" not in term.container:
                return nodes
            return [(node[0], language_tag(node[1])) if isinstance(node, tuple) else node for node in nodes]

        @staticmethod
        def _to_typed_json_value(value: Any) -> dict:
            # an "@type": "@json" value is a JSON literal of the page's JSON: a NumberText in it
            # (made a value object typed _NUMBER_TEXT by localise_contexts) is written back as the
            # number the page wrote, not as that object with this process's random type IRI
            numbers: list[str] = []

            def marked(v: Any) -> Any:
                if isinstance(v, dict):
                    if v.get("@type") == _NUMBER_TEXT and len(v) == 2 and isinstance(v.get("@value"), str):
                        numbers.append(v["@value"])
                        return f"{_NUMBER_TEXT}#{len(numbers) - 1}"
                    return {key: marked(item) for key, item in v.items()}
                return [marked(item) for item in v] if isinstance(v, list) else v

            typed = Parser._to_typed_json_value(marked(value))
            if numbers:
                typed["@value"] = re.sub(re.escape(f'"{_NUMBER_TEXT}#') + r'(\d+)"', lambda m: _json_number(
                    numbers[int(m.group(1))]), typed["@value"])
            return typed

        def _get_bnodeid(self, ref: str):
            label = super()._get_bnodeid(ref)
            if label is None:
                return None
            labels = self.__dict__.setdefault("_labels", {})
            if label not in labels:
                labels[label] = str(BNode())  # a fresh identifier, kept for this document
            return labels[label]

    return PageParser


#: Characters no IRI holds (RFC 3987: controls, space, ``<>"{}|\^` ``), and lone surrogates.
_NOT_IN_IRI = re.compile(r'[\x00-\x20<>"{}|\\^`\x7f\ud800-\udfff]')


def _iri_text(iri: str) -> str:
    """``iri`` with the characters no IRI holds percent-encoded (after trimming the whitespace
    around it), as a browser reads such a URL: every stored triple is one N-Triples can write
    (a JSON-LD property named with a space, ``"product name"``, gave the predicate
    ``<http://schema.org/product name>``, and the export a line no N-Triples reader takes). A
    lone surrogate (a Turtle ``<http://a.example/\\uD800>``) is U+FFFD, as in literals."""
    if not _NOT_IN_IRI.search(iri):
        return iri
    return _NOT_IN_IRI.sub(lambda m: "\ufffd" if m.group() >= "\ud800" else f"%{ord(m.group()):02X}",
                           iri.strip())


@lru_cache(maxsize=1)
def _iri_context():
    """rdflib's JSON-LD ``Context`` class, but an IRI holding characters no IRI holds (a space,
    ``<``, ``"``) is read percent-encoded, as a browser reads such a URL, and listed in the
    context's ``repaired`` (shared with its sub-contexts). rdflib left out the whole node of an
    ``@id`` with a space (``"https://shop.example/p/Blue Kettle"``: the product's triples were
    gone, with no error), made such a value of an IRI-valued term (schema.org's ``url``,
    ``image``) the page's own URL, and kept a ``<`` that N-Triples cannot write."""
    from rdflib.plugins.shared.jsonld.context import Context

    class IriContext(Context):
        repaired: list

        def resolve(self, curie_or_iri: str) -> str:
            iri = self.expand(curie_or_iri, False)
            if isinstance(iri, str) and not self.isblank(iri) and _NOT_IN_IRI.search(iri):
                if len(self.repaired) < 1000:
                    self.repaired.append(iri)
                return self.resolve_iri(_iri_text(iri))
            return super().resolve(curie_or_iri)

        def _subcontext(self, source: Any, propagate: bool):
            ctx = super()._subcontext(source, propagate)
            ctx.__class__ = IriContext
            ctx.repaired = self.repaired
            return ctx

    return IriContext


# ------------------------------------------------------------------------------------------ parsing


def _parse_rdfxml(graph, body: bytes, url: str, bound: _Bounded) -> None:
    """Add the triples of RDF/XML document ``body`` (at ``url``) to ``graph`` with rdflib's
    RDF/XML reader, checking ``bound``'s deadline at every element (:class:`RDFLimit`): 280,000
    empty ``<rdf:Description/>`` (5 MB) give no triple and took 16 s with a deadline of 2 s.
    An ``xml:lang`` that is no language tag is read by :func:`language_tag` (``en_US`` is
    ``en-us``, ``"en US"`` no language), as in HTML: rdflib's ``ValueError`` failed the whole
    document.

    The reader is given the bytes alone, so that expat decodes the document as it declares
    (``<?xml version="1.0" encoding="ISO-8859-1"?>``, a UTF-16 byte order mark): rdflib's
    source for ``data=`` bytes also has a UTF-8 character stream, which its SAX reader
    prefers, and a Latin-1 document failed with "UnicodeDecodeError: 'utf-8' codec can't
    decode byte 0xe9"."""
    import io

    from xml.sax.xmlreader import AttributesNSImpl

    from rdflib.parser import InputSource
    from rdflib.plugins.parsers.rdfxml import create_parser
    source = InputSource()
    source.setByteStream(io.BytesIO(body))
    source.setPublicId(url)
    parser = create_parser(source, graph)
    handler = parser.getContentHandler()
    start = handler.startElementNS

    def checked(name, qname, attrs):
        bound.tick()
        language = attrs.get(_XML_LANG)
        if language and language_tag(language) != language.lower():  # en_US: rdflib's ValueError lost the document
            attrs = AttributesNSImpl({**dict(attrs.items()), _XML_LANG: language_tag(language) or ""},
                                     {key: attrs.getQNameByName(key) for key in attrs.getNames()})
        return start(name, qname, attrs)
    handler.startElementNS = checked
    parser.parse(source)


#: ``xml:lang`` as expat's namespace-aware reader names it.
_XML_LANG = ("http://www.w3.org/XML/1998/namespace", "lang")


def parse_rdf(body: bytes, url: str, fmt: str, limits: Limits = Limits()) -> list[list]:
    """Parse an RDF document into wire triples (see the module docstring for the shape).

    Args:
        body: the document's bytes.
        url: its URL (the base IRI of relative IRIs).
        fmt: rdflib's format name (:func:`rdf_format`): ``xml``, ``turtle``, ``nt``, ``n3``,
            ``json-ld``, ``trig``, ``nquads`` (their named graphs' triples, without the graph).
        limits: the bounds of this parse.

    Raises :class:`RDFLimit` past a bound and :class:`RDFError` for anything that does not parse
    (with the parser's message). Makes no network request.
    """
    if len(body) > limits.max_bytes:
        raise RDFLimit(f"document of {len(body)} bytes is larger than {limits.max_bytes} (rdf_max_bytes)")
    bound = _Bounded(limits)
    graph = _graph(bound, quads=fmt in QUAD_FORMATS)
    try:
        if fmt == "xml":
            check_xml_entities(body, limits.max_bytes)
            _parse_rdfxml(graph, body, url, bound)
        elif fmt == "json-ld":
            data = load_json(body.decode("utf-8-sig", errors="replace"))
            if not isinstance(data, (dict, list)):  # rdflib: "UnboundLocalError: ... 'resources'"
                raise RDFError(f"invalid json-ld: a JSON-LD document is an object or a list, not {data!r:.50}")
            _jsonld_into(graph, data, url, bound)
        else:
            graph.parse(data=body.decode("utf-8-sig", errors="replace"), format=fmt, publicID=url)
    except RDFError:
        raise
    except RecursionError:
        raise RDFError("document nested too deeply") from None
    except Exception as exc:  # every rdflib / expat / json syntax error
        message = " ".join(str(exc).split())[:300]
        raise RDFError(f"invalid {fmt}: {type(exc).__name__}: {message}") from None
    writer = _Writer()
    writer.add_all(bound.order)
    return writer.triples


# ------------------------------------------------------------------------------------------ HTML


def _schema_type(value: str) -> str:
    """schema.org's canonical IRI form (``http://schema.org/``) for an ``https://`` spelling."""
    return "http://schema.org/" + value[len("https://schema.org/"):] if value.startswith("https://schema.org/") else value


class _Text(str):
    """A microdata value read from an element's text or ``content``/``value`` attribute, with
    ``language``: the ``lang`` HTML gives that element (:func:`_element_language`)."""

    language: str | None = None


def _microdata_extractor(bound: "_Bounded | None" = None):
    """extruct's microdata extractor, its literal values made :class:`_Text` carrying their
    element's language (URLs, ``<time datetime>`` and nested items as extruct gives them), and,
    with ``bound``, checking its deadline at every item and property it reads
    (:meth:`_Bounded.tick`): extruct's own work is not bounded by the size of the page (a
    property's value is the text of its whole subtree, read again for every ``itemprop`` around
    it), so the deadline between two triples did not stop it."""
    from extruct.w3cmicrodata import MicrodataExtractor

    class Extractor(MicrodataExtractor):
        def _extract_item(self, *args, **kwargs):
            if bound is not None:
                bound.tick()
            return super()._extract_item(*args, **kwargs)

        def _extract_property_value(self, node, *args, **kwargs):
            if bound is not None:
                bound.tick()
            value = super()._extract_property_value(node, *args, **kwargs)
            if (isinstance(value, str) and node.get("itemscope") is None
                    and node.tag not in _MICRODATA_IRI_TAGS and node.tag != "time"):
                value = _Text(value)
                value.language = _element_language(node)
            return value
    return Extractor()


#: Elements whose microdata value is a URL (W3C Microdata, "Values"): no language.
_MICRODATA_IRI_TAGS = frozenset({"audio", "embed", "iframe", "img", "source", "track", "video", "a", "area", "link",
                                 "object"})


def _microdata_node(item: dict, depth: int = 0, context: Any = None) -> dict:
    """A microdata item (extruct's ``{"type", "id", "properties"}``) as a JSON-LD node, names
    resolved against its type's vocabulary (W3C "Microdata to RDF", section 3: the type IRI up
    to its last ``/`` or ``#``); schema.org items use the bundled schema.org context. A
    :class:`_Text` value with a language becomes a language-tagged literal, as HTML+RDFa reads
    the same element, unless ``context`` (the item's JSON-LD context) types its property (an
    ``@id`` or a datatype: a language would undo that)."""
    if depth > 50:
        raise RDFError("microdata nested more than 50 levels deep")
    types = _item_types(item)
    node: dict = {}
    if types:
        node["@type"] = types
    if isinstance(item.get("id"), str):
        node["@id"] = item["id"]
    terms = context if isinstance(context, dict) else {}
    for name, values in (item.get("properties") or {}).items():
        values = values if isinstance(values, list) else [values]
        typed = isinstance(terms.get(name), dict) and "@type" in terms[name]

        def value(v):
            if isinstance(v, dict):
                return _microdata_node(v, depth + 1, context)
            if getattr(v, "language", None) and not typed:
                return {"@value": str(v), "@language": v.language}
            return str(v)
        node[name] = [value(v) for v in values if isinstance(v, (dict, str))]
    return node


#: An absolute IRI's start: its scheme (RFC 3987).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def _item_types(item: dict) -> list[str]:
    """A microdata item's types that are absolute URLs, schema.org's in its ``http://`` form.
    HTML requires ``itemtype``'s tokens to be absolute: a relative one (``"schema.org/Product"``,
    ``"Product"``) is no type, and the item's names are read as an untyped item's (schema.org).
    As a vocabulary it made relative predicates (``<schema.org/name>``: no N-Triples reader takes
    it) and the type ``<http://shop.example/schema.org/schema.org/Product>``."""
    types = item.get("type") or []
    types = [types] if isinstance(types, str) else list(types)
    return [_schema_type(t) for t in types if isinstance(t, str) and _SCHEME.match(t)]


def _microdata_context(item: dict) -> Any:
    """The JSON-LD context of microdata ``item``'s names: the vocabulary of its first type (the
    IRI up to its last ``/`` or ``#``), schema.org's bundled context for schema.org or no type."""
    types = _item_types(item)
    first = types[0] if types else ""
    if first.startswith("http://schema.org/") or not first:
        return local_context("https://schema.org")
    cut = max(first.rfind("/"), first.rfind("#"))
    return {"@vocab": first[:cut + 1]}


def _element_language(element) -> str | None:
    """The language HTML gives ``element``'s text: the ``lang`` (or ``xml:lang``) of the element
    or of its nearest ancestor that has one, as a :func:`language_tag`; None when there is none
    or it is empty or invalid."""
    while element is not None:
        for name in ("lang", "xml:lang", "{http://www.w3.org/XML/1998/namespace}lang"):
            value = element.get(name)
            if value is not None:
                return language_tag(value)
        element = element.getparent()
    return None


def _meta_languages(document) -> dict[tuple[str, str], str]:
    """(property, content) of each ``<meta property content>`` of the page -> its language
    (:func:`_element_language`), for those that have one."""
    languages: dict[tuple[str, str], str] = {}
    for meta in document.iter("meta"):
        prop, content = meta.get("property"), meta.get("content")
        if prop and content is not None and (language := _element_language(meta)):
            languages.setdefault((prop.strip(), content), language)
    return languages


def _open_graph_triples(items: list[dict], url: str, languages: dict | None = None) -> list[tuple]:
    """Open Graph ``<meta property="og:..." content>`` pairs as (page, property IRI, literal).

    Args:
        items: extruct's Open Graph items (``namespace`` and ``properties``).
        url: the page's URL, the triples' subject.
        languages: (property, content) -> the meta element's language
            (:func:`_meta_languages`): the literal carries it, as the HTML+RDFa rules read the
            same element (else a page with RDFa attributes, read by both, had each Open Graph
            value twice: ``"Title"`` and ``"Title"@fr``).

    Returns a list of rdflib triples.
    """
    from rdflib import Literal, URIRef
    languages = languages or {}
    triples = []
    for item in items:
        namespaces = item.get("namespace") or {}
        for prop, value in item.get("properties") or []:
            prefix, _, local = prop.partition(":")
            ns = namespaces.get(prefix)
            if ns and local:
                triples.append((URIRef(url), URIRef(ns + local), Literal(value, lang=languages.get((prop, value)))))
    return triples


@dataclass
class Structured:
    """What :func:`extract_structured` found on an HTML page.

    ``data``: extruct's view of the page, ``{"json-ld": [...], "microdata": [...],
    "opengraph": [...], "rdfa": bool}`` (JSON-LD objects as written, for item fields);
    ``triples``: the page's triples (wire shape); ``errors``: one message per syntax that could
    not be read (the page itself is not failed for them).
    """

    data: dict
    triples: list[list]
    errors: list[str]


def extract_structured(document, text: str, url: str, limits: Limits = Limits()) -> Structured:
    """Read the structured data of an HTML page: JSON-LD, microdata, Open Graph and RDFa.

    Args:
        document: the page's lxml root (:func:`gridcrawl.executor.parse.parse_page`).
        text: the decoded page (RDFa is read from extruct's XML DOM of it).
        url: the page's URL (the base of relative IRIs; Open Graph's subject).
        limits: one budget of triples and seconds for the whole page.

    Returns a :class:`Structured`. A syntax that fails (invalid JSON) is recorded in
    ``errors`` and the others are still read; a bound reached is recorded once, and nothing more
    is read (the bounds are the page's). Makes no network request.
    """
    from extruct.opengraph import OpenGraphExtractor

    bound = _Bounded(limits)
    graph = _graph(bound)
    data: dict = {"json-ld": [], "microdata": [], "opengraph": [], "rdfa": False}
    errors: list[str] = []
    reached: list[RDFLimit] = []

    def attempt(name: str, work) -> None:
        if reached:  # the page's budget is spent: one error says so, not one per block after it
            return
        try:
            work()
        except RDFLimit as exc:
            reached.append(exc)
            errors.append(f"{name}: {exc}")
        except RecursionError:
            errors.append(f"{name}: nested too deeply")
        except Exception as exc:  # one bad block must not cost the page's other data
            errors.append(f"{name}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}")

    def jsonld() -> None:
        for node in document.iterfind(".//script[@type='application/ld+json']"):
            try:
                items = jsonld_script_items(node)
            except ValueError as exc:
                errors.append(f"json-ld: invalid JSON: {' '.join(str(exc).split())[:200]}")
                continue
            except RecursionError:  # this script only: the page's other scripts are still read
                errors.append("json-ld: nested too deeply")
                continue
            data["json-ld"].extend(items)
            for item in items:
                context = item.get("@context") if isinstance(item, dict) else None
                if context is not None and not isinstance(context, (str, dict, list)):
                    errors.append(f"json-ld: @context must be an IRI, an object or a list, not {context!r:.50}")
                    continue
                attempt("json-ld", lambda item=item: repaired["json-ld"].extend(_jsonld_into(graph, item, url, bound)))

    def microdata() -> None:
        items = _microdata_extractor(bound).extract_items(document, url)
        data["microdata"] = items
        for item in items:
            context = _microdata_context(item)
            node = _microdata_node(item, context=context)
            node["@context"] = context
            attempt("microdata", lambda node=node: repaired["microdata"].extend(_jsonld_into(graph, node, url, bound)))

    def opengraph() -> None:
        items = list(OpenGraphExtractor().extract_items(document))
        data["opengraph"] = [{"namespace": i["namespace"], "properties": [list(p) for p in i["properties"]]}
                             for i in items]
        for triple in _open_graph_triples(items, url, _meta_languages(document) if items else None):
            graph.add(triple)

    def rdfa() -> None:
        if not _RDFA_HINT.search(text):
            return  # no RDFa attribute: skip the second (XML DOM) parse of the page
        from extruct.utils import parse_xmldom_html
        from pyRdfa import Options, builtInTransformers
        from pyRdfa.host import HostLanguage
        from pyRdfa.parse import parse_one_node
        from pyRdfa.state import ExecutionContext
        from pyRdfa.transform.prototype import handle_prototypes
        options = _bounded_rdfa_options(Options, bound)(
            output_processor_graph=False, embedded_rdf=False, space_preserve=True, vocab_expansion=False,
            vocab_cache=False, vocab_cache_report=False, refresh_vocab_cache=False, check_lite=False)
        # HTML+RDFa 1.1 (W3C, 2015), not RDFa Core: <time datetime> gives a typed literal, as
        # the HTML+RDFa rules say ("2026-03-03"^^xsd:date, not the element's text)
        options.host_language = HostLanguage.html5
        dom = parse_xmldom_html(text.encode("utf-8"), encoding="utf-8")
        before = len(bound.order)
        # pyRdfa.graph_from_DOM's steps, on ``graph``: it builds the triples in a graph of its
        # own and copies them at the end, so no bound applied before (a 3.4 MB page of 100,000
        # properties: 13 s and 290 MB with a deadline of 3 s and 50,000 triples at most)
        top = dom.documentElement
        if any(value and language_tag(value) != value.lower()
               for value in (next(v for v in m.groups() if v is not None) for m in _LANG_ATTRIBUTE.finditer(text))):
            _repair_languages(top)
        state = ExecutionContext(top, graph, base=url, options=options, rdfa_version=None)
        for transform in options.transformers + builtInTransformers:
            transform(top, options, state)
        parse_one_node(top, graph, None, state, [])
        handle_prototypes(graph)
        data["rdfa"] = len(bound.order) > before

    repaired: dict[str, list[str]] = {"json-ld": [], "microdata": []}  # IRIs read percent-encoded (_iri_context)
    for name, work in (("json-ld", jsonld), ("microdata", microdata), ("opengraph", opengraph), ("rdfa", rdfa)):
        attempt(name, work)
    for name, iris in repaired.items():
        if iris:
            errors.append(f"{name}: {len(iris)} IRI{' was' if len(iris) == 1 else 's were'} read percent-encoded "
                          f"(a space or another character no IRI holds), e.g. {iris[0][:200]!r}")
    writer = _Writer()
    writer.add_all(bound.order)
    # what msgpack and strict JSON cannot carry (an integer past 64 bits) made strings; 1e400 is
    # one already (NumberText: the page's text), made a plain str
    return Structured(json_safe(data), writer.triples, errors)


def _bounded_rdfa_options(options_class, bound: _Bounded):
    """A subclass of pyRdfa's ``Options`` whose ``embedded_rdf`` is always false and checks
    ``bound``'s deadline each time it is read: pyRdfa reads it once per element it walks
    (``pyRdfa.parse._parse_1_1``), elements that give no triple included, so the deadline bounds
    the walk: a 4 MB page of 300,000 plain ``<span>`` under one ``typeof`` took 19 s."""

    class BoundedOptions(options_class):
        @property
        def embedded_rdf(self) -> bool:
            bound.tick()
            return False

        @embedded_rdf.setter
        def embedded_rdf(self, value: bool) -> None:
            pass  # Options.__init__ sets it; it stays false

    return BoundedOptions


# RDFa attributes (RDFa Core 1.1 section 5): a page without any of them has no RDFa triples
# (Open Graph's <meta property> is read by the Open Graph extractor).
_RDFA_HINT = re.compile(r"<[^>]+\s(?:vocab|typeof|resource|about|prefix)\s*=|<(?!meta\b)[^>]+\sproperty\s*=",
                        re.IGNORECASE)



#: An HTML ``lang`` or ``xml:lang`` attribute and its value (in one of the three groups).
_LANG_ATTRIBUTE = re.compile(r"""[\s:]lang\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>"']*))""", re.IGNORECASE)


def _repair_languages(top) -> None:
    """Set each ``lang``/``xml:lang`` of the XML DOM element ``top`` (pyRdfa's input) and of its
    descendants that is no language tag to its :func:`language_tag` (``""``, no language, when
    there is none): pyRdfa makes literals of the value as written, and rdflib's ``ValueError``
    for ``en_us`` cost the page all its RDFa triples."""
    for element in [top, *top.getElementsByTagName("*")]:
        for name in ("lang", "xml:lang"):
            value = element.getAttribute(name) if element.hasAttribute(name) else ""
            if value and language_tag(value) != value.lower():
                element.setAttribute(name, language_tag(value) or "")


def triple_key(row: list | tuple) -> str:
    """The SHA-256 (hex) of a wire triple's six fields: the ``triple.triple_key`` column, which
    makes a triple unique per page on every back end."""
    import hashlib
    text = "\x1f".join("\x00" if v is None else str(v) for v in row[:6])
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


def valid_triple(row: Any) -> bool:
    """True when ``row`` (from the wire) has the shape of a triple: six fields, the first three
    non-empty strings, ``kind`` one of uri/literal/bnode, datatype and language strings or None."""
    return (isinstance(row, list) and len(row) == 6 and all(isinstance(v, str) and v for v in row[:2])
            and isinstance(row[2], str) and row[3] in ("uri", "literal", "bnode")
            and all(v is None or isinstance(v, str) for v in row[4:]))
