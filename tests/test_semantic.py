"""The semantic crawl's parsers (gridcrawl/semantic.py) without the grid: RDF documents and HTML
structured data into triples, equal to what rdflib reads from the same text; no network access
by any parser (a socket guard records every attempt, and a real server on 127.0.0.1 counts
requests); hostile RDF bounded; the ontology focus's score computed by hand; the triple table
(one row per page and triple, on SQLite, PostgreSQL and MariaDB) and its N-Triples / JSON lines
export."""

from __future__ import annotations

import json
import socket
import time

import lxml.html
import pytest
import sqlalchemy as sa
from rdflib import BNode, Dataset, Graph, Literal, URIRef
from rdflib.compare import isomorphic

from gridcrawl.client.store import CrawlStore, Outcome, Scope, Strategy
from gridcrawl.db import open_database
from gridcrawl.export import export
from gridcrawl.focus import OntologyError, OntologyFocus
from gridcrawl.protocol import PageResult
from gridcrawl.semantic import (SNIFF_BYTES, Limits, RDFError, RDFLimit, extract_structured, local_context,
                                parse_rdf, rdf_format, sniff_rdf, triple_links, wants_body)
from sites import Site

BASE = "http://127.0.0.1:8200/"
SDO = "http://schema.org/"
XSD = "http://www.w3.org/2001/XMLSchema#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"


def graph_of(triples: list[list]) -> Graph:
    """An rdflib graph of wire triples (blank nodes by their page labels)."""
    g = Graph()
    node = lambda v: BNode(v[2:]) if v.startswith("_:") else URIRef(v)
    for s, p, o, kind, datatype, lang in triples:
        obj = Literal(o, lang=lang, datatype=URIRef(datatype) if datatype else None) if kind == "literal" else node(o)
        g.add((node(s), URIRef(p), obj))
    return g


TURTLE = b"""@prefix ex: <http://127.0.0.1:8200/onto#> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
@prefix owl: <http://www.w3.org/2002/07/owl#> .
<> owl:imports <http://127.0.0.1:8200/onto/base.ttl> ; rdfs:seeAlso <people.rdf#me> .
ex:bird a ex:Bird ; rdfs:label "Blackbird"@en ; ex:weight 95 ; ex:nest [ ex:height "2.5"^^<http://www.w3.org/2001/XMLSchema#decimal> ] .
"""

RDFXML = b"""<?xml version="1.0"?>
<!DOCTYPE rdf:RDF [<!ENTITY ex "http://127.0.0.1:8200/onto#">]>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="&ex;"
         xmlns:rdfs="http://www.w3.org/2000/01/rdf-schema#">
  <rdf:Description rdf:about="&ex;robin"><ex:sings>yes</ex:sings>
    <rdfs:seeAlso rdf:resource="catalog.ttl"/></rdf:Description>
</rdf:RDF>"""


@pytest.mark.parametrize("fmt,body", [("turtle", TURTLE), ("xml", RDFXML),
                                      ("nt", b'<http://a/s> <http://a/p> "o\\u00e9"@fr .\n<http://a/s> <http://a/q> _:x .\n'),
                                      ("json-ld", b'{"@context": {"@vocab": "http://a/"}, "@id": "http://a/s", "p": [1, "x"]}')])
def test_rdf_documents_give_the_triples_rdflib_reads(fmt, body):
    url = BASE + "data/doc"
    triples = parse_rdf(body, url, fmt)
    expected = Graph().parse(data=body, format=fmt, publicID=url)
    assert len(triples) == len(expected) > 0
    assert isomorphic(graph_of(triples), expected)


def test_blank_nodes_are_numbered_per_page_in_parse_order():
    first = parse_rdf(TURTLE, BASE + "a.ttl", "turtle")
    again = parse_rdf(TURTLE, BASE + "a.ttl", "turtle")
    assert first == again  # stable: the same document gives the same rows (so the unique key holds)
    assert sorted({t[0] for t in first if t[0].startswith("_:")} | {t[2] for t in first if t[3] == "bnode"}) == ["_:b0"]


def test_uri_objects_are_the_links_of_an_rdf_document():
    triples = parse_rdf(TURTLE, BASE + "data/catalog.ttl", "turtle")
    assert triple_links(triples) == [[BASE + "onto/base.ttl", ""], [BASE + "data/people.rdf", ""]]
    # rdf:type classes are not links; a label on the page is the anchor text
    rows = [["http://a/x", RDF_TYPE, "http://a/C", "uri", None, None],
            ["http://a/x", "http://www.w3.org/2000/01/rdf-schema#seeAlso", "http://a/y", "uri", None, None],
            ["http://a/y", "http://www.w3.org/2000/01/rdf-schema#label", "Why", "literal", None, None],
            ["http://a/x", "http://a/p", "mailto:a@b", "uri", None, None]]
    assert triple_links(rows) == [["http://a/y", "Why"]]


def test_rdf_format_by_type_then_suffix_and_sniffing():
    assert rdf_format("text/turtle; charset=utf-8", BASE + "x") == "turtle"
    assert rdf_format("application/rdf+xml", BASE + "x.html") == "xml"
    assert rdf_format("text/plain", BASE + "onto.owl", b"  <?xml version='1.0'?><rdf:RDF/>") == "xml"
    assert rdf_format("application/octet-stream", BASE + "onto.owl", b"@prefix : <#> .") == "turtle"
    assert rdf_format(None, BASE + "data.jsonld?v=1", b"{}") == "json-ld"
    assert rdf_format("text/html", BASE + "x.ttl") is None
    assert rdf_format("image/png", BASE + "x.ttl") is None
    assert rdf_format("text/plain", BASE + "readme.txt") is None
    # N-Triples and Turtle that start with an IRI are not RDF/XML (they were sniffed as XML and failed)
    triple = b"<http://a.example/s> <http://a.example/p> <http://a.example/o> .\n"
    assert rdf_format("text/plain", BASE + "dump.nt", triple) == "nt"
    assert rdf_format("application/octet-stream", BASE + "data.ttl", b"<> a <#Doc> .") == "turtle"
    assert rdf_format(None, BASE + "onto.owl", b"<http://a.example/s> a <http://a.example/C> .") == "turtle"
    assert rdf_format("text/plain", BASE + "onto.rdf", b"<!-- made by hand -->\n<rdf:RDF/>") == "xml"
    assert rdf_format("application/xml", BASE + "onto.owl", b"<Ontology xmlns='http://www.w3.org/2002/07/owl#'/>") == "xml"
    assert rdf_format("application/trig", BASE + "x") == "trig"
    assert rdf_format("application/n-quads", BASE + "x") == "nquads"
    assert rdf_format("text/plain", BASE + "dump.nq", triple) == "nquads"
    assert rdf_format("text/plain", BASE + "data.trig", b"<http://a.example/g> { }") == "trig"


# ------------------------------------------------------------------ RDF served with a generic type

NTRIPLES = (b"<http://a.example/s> <http://www.w3.org/2000/01/rdf-schema#seeAlso> <http://a.example/o> .\n"
            b'_:b1 <http://a.example/p> "v\\u00e9"@fr . # a comment\n'
            b'<http://a.example/s> <http://a.example/q> "2"^^<http://www.w3.org/2001/XMLSchema#integer> .\n')
NQUADS = b"<http://a.example/s> <http://a.example/p> <http://a.example/o> <http://a.example/g> .\n" + NTRIPLES
JSONLD = (b'{\n  "@context": {"seeAlso": {"@id": "http://www.w3.org/2000/01/rdf-schema#seeAlso", "@type": "@id"}},\n'
          b'  "@id": "http://a.example/s", "seeAlso": "http://a.example/o"}')
#: body, the syntax it is, the syntax sniff_rdf names (a syntax whose parser reads it)
SNIFFED = [
    ("turtle", TURTLE, "turtle"),
    ("turtle after comments", b"# birds\n\n# v2\n" + TURTLE, "turtle"),
    ("turtle with SPARQL PREFIX", b"PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>\nBASE <http://a.example/>\n"
                                  b"<s> rdfs:label 'x' .", "turtle"),
    ("turtle of IRIs only", b"<> a <http://a.example/Doc> ;\n  <http://a.example/p> \"x\" .\n", "turtle"),
    ("turtle from a blank node", b"[ a <http://a.example/Doc> ] <http://a.example/p> 1 .", "turtle"),
    ("n-triples", NTRIPLES, "nt"),
    ("n-quads", NQUADS, "nquads"),
    ("rdf/xml", RDFXML, "xml"),
    ("rdf/xml, utf-16", RDFXML.decode().replace('version="1.0"', 'version="1.0" encoding="UTF-16"').encode("utf-16"), "xml"),
    ("rdf/xml, no prolog", b"<RDF xmlns='http://www.w3.org/1999/02/22-rdf-syntax-ns#' "
                           b"xmlns:ex='http://a.example/'><Description about='http://a.example/s'><ex:p>v</ex:p>"
                           b"</Description></RDF>", "xml"),
    ("json-ld", JSONLD, "json-ld"),
    ("expanded json-ld", b'[{"@id": "http://a.example/s", "http://a.example/p": [{"@value": "v"}]}]', "json-ld"),
]
NOT_RDF = [
    ("html", b"<!DOCTYPE html>\n<html><head><title>x</title></head><body><a href='/a.ttl'>@prefix</a></body></html>"),
    ("html of bare tags", b"<html>\n<head>\n<title>x</title></head>\n<body><p>x</p></body>\n</html>"),
    ("xml", b'<?xml version="1.0"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            b"<url><loc>http://a.example/</loc></url></urlset>"),
    ("xml naming rdf", b'<?xml version="1.0"?><feed xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"/>'),
    ("json", b'{"name": "x", "see": "http://a.example/o", "items": [1, 2]}'),
    ("json list", b'[{"id": 1}, {"id": 2}]'),
    ("text", b"Release notes\n\nPrefixes are now <optional>.\n"),
    ("text quoting a mail", b"<ann@a.example> wrote:\n> hello\n"),
    ("text of bracketed words", b"<NOTICE> <https://a.example/notes> has moved.\n"),
    ("html fragment", b"<br/>\n<p>Notes</p>\n"),
    ("csv", b"subject,predicate,object\nhttp://a.example/s,http://a.example/p,1\n"),
    ("png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))),
    ("empty", b""),
]


@pytest.mark.parametrize("name,body,fmt", SNIFFED, ids=[c[0] for c in SNIFFED])
def test_sniff_rdf_names_a_syntax_that_reads_the_document(name, body, fmt):
    assert sniff_rdf(body) == fmt
    url = BASE + "data/doc"
    triples = parse_rdf(body, url, fmt)
    if body.startswith(b"\xff\xfe"):  # rdflib reads its data as UTF-8
        body = body.decode("utf-16").replace("UTF-16", "UTF-8").encode()
    expected = Graph()
    for s, p, o, _ in Dataset().parse(data=body, format=fmt, publicID=url).quads():  # every graph's triples
        expected.add((s, p, o))
    assert len(triples) == len(expected) > 0 and isomorphic(graph_of(triples), expected)


@pytest.mark.parametrize("name,body", NOT_RDF, ids=[c[0] for c in NOT_RDF])
def test_sniff_rdf_names_nothing_for_documents_that_are_not_rdf(name, body):
    assert sniff_rdf(body) is None


def test_sniff_rdf_looks_at_the_head_only():
    # the head's last line, cut short, is not taken for a line that is no N-Triples
    dump = b"".join(b"<http://a.example/s%d> <http://a.example/p> \"a rather long literal %d\" .\n" % (i, i)
                    for i in range(200))
    assert len(dump) > SNIFF_BYTES and dump[:SNIFF_BYTES].count(b"\n") < 200
    assert sniff_rdf(dump) == "nt"
    # a JSON-LD keyword past the head is not looked for
    late = b'{"padding": "' + b"x" * SNIFF_BYTES + b'", "@context": {}, "@id": "http://a.example/s"}'
    assert sniff_rdf(late) is None


def test_rdf_format_sniffs_generic_types_only_and_the_suffix_comes_first():
    for media in ("text/plain", "text/plain; charset=utf-8", "application/octet-stream", "application/xml",
                  "text/xml", "application/json", None):
        assert rdf_format(media, BASE + "data/birds", TURTLE) == "turtle", media
        assert rdf_format(media, BASE + "data/birds", b"Just a text.") is None, media
    assert rdf_format("application/xml", BASE + "data/birds.xml", RDFXML) == "xml"       # .xml, .json: sniffed
    assert rdf_format("application/json", BASE + "data/birds.json?v=2", JSONLD) == "json-ld"
    assert rdf_format("application/xml", BASE + "sitemap.xml", NOT_RDF[2][1]) is None
    assert rdf_format("text/plain", BASE + "dump.nt", NQUADS) == "nt"   # the suffix, not the content, decides
    for media in ("text/html", "application/xhtml+xml", "text/csv", "image/png"):      # never sniffed
        assert rdf_format(media, BASE + "data/birds", TURTLE) is None
    # the fetcher downloads generic text to sniff it; octets only with an RDF suffix
    assert wants_body(BASE + "data/birds", "text/plain") and wants_body(BASE + "data/b", "application/json")
    assert wants_body(BASE + "data/birds.ttl", "application/octet-stream")
    assert not wants_body(BASE + "setup.exe", "application/octet-stream")
    assert not wants_body(BASE + "data/birds", "image/png") and not wants_body(BASE + "data/b.ttl", "text/css")


def generic_site() -> Site:
    """RDF of each syntax served with a generic type, with and without an RDF suffix; each
    document links to /seen.html. And documents of those types that are not RDF."""
    seen = "<{BASE}/seen.html>"
    turtle = b"@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .\n<> rdfs:seeAlso %s ; rdfs:label 'Birds' .\n"
    ntriples = b"<{BASE}/s> <http://www.w3.org/2000/01/rdf-schema#seeAlso> %s .\n"
    rdfxml = (b'<?xml version="1.0"?>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
              b'xmlns:rdfs="http://www.w3.org/2000/01/rdf-schema#"><rdf:Description rdf:about="">'
              b'<rdfs:seeAlso rdf:resource="{BASE}/seen.html"/></rdf:Description></rdf:RDF>')
    jsonld = (b'{"@context": {"seeAlso": {"@id": "http://www.w3.org/2000/01/rdf-schema#seeAlso", "@type": "@id"}}, '
              b'"@id": "", "seeAlso": "{BASE}/seen.html"}')
    site = Site()
    for path, body, media in [
            ("/birds.ttl", turtle, "text/plain"),
            ("/birds", turtle, "text/plain; charset=utf-8"), ("/birds-nt", ntriples, "text/plain"),
            ("/birds.nt", ntriples, "text/plain"), ("/birds.owl", rdfxml, "application/xml"),
            ("/birds-xml", rdfxml, "application/xml"), ("/birds-txml", rdfxml, "text/xml"),
            ("/birds.jsonld", jsonld, "application/json"), ("/birds.json", jsonld, "application/json")]:
        site.pages[path] = body.replace(b"%s", seen.encode())
        site.types[path] = media
    site.pages["/readme"] = b"Birds of the reed bed.\n<notes> are in /notes.\n"
    site.types["/readme"] = "text/plain"
    site.pages["/config.json"] = b'{"see": "{BASE}/seen.html"}'
    site.types["/config.json"] = "application/json"
    site.pages["/page.txt"] = b'<!DOCTYPE html><html><body><a href="/seen.html">x</a></body></html>'
    site.types["/page.txt"] = "text/plain"
    site.pages["/turtle-as-html"] = site.pages["/birds"]
    site.types["/turtle-as-html"] = "text/html"
    site.pages["/page.rdf"], site.types["/page.rdf"] = site.pages["/page.txt"], "text/plain"
    site.pages["/title.owl"], site.types["/title.owl"] = b"<!doctype html>\n<div>Moved</div>", "application/xml"
    site.pages["/untyped"], site.types["/untyped"] = site.pages["/birds"], ""  # no Content-Type
    site.pages["/untyped.ttl"] = b'<!-- moved -->\n<p>See <a href="/seen.html">x</a></p>'  # HTML (sniffed so)
    site.types["/untyped.ttl"] = ""
    site.pages["/broken"] = b"@prefix ex: <http://a.example/> .\nex:s ex:p"
    site.types["/broken"] = "text/plain"
    return site


def test_rdf_served_with_a_generic_type_is_sniffed_and_read_as_a_typed_document(site_server):
    from gridcrawl.executor.fetch import Fetcher
    from gridcrawl.executor.page import visit
    server = site_server(generic_site())
    seen = server.url("/seen.html")
    fetcher = Fetcher(user_agent="gridcrawl-test")
    semantic = lambda path, **kw: visit(fetcher, server.url(path), instruction={"semantic": True}, **kw)
    for path in ("/birds.ttl", "/birds", "/untyped", "/birds-nt", "/birds.nt", "/birds.owl", "/birds-xml", "/birds-txml",
                 "/birds.jsonld", "/birds.json"):
        result = semantic(path)
        assert result.error_kind is None and result.triples, (path, result.error)
        assert [link[0] for link in result.links] == [seen], path
    html_page = semantic("/untyped.ttl")  # an HTML page is never read as RDF, whatever its URL
    assert (html_page.error_kind, html_page.triples, html_page.links) == (None, [], [[seen, "x"]])
    # octets: read with an RDF suffix; without one the body is not downloaded (an archive, an installer)
    fetcher_keep = Fetcher(user_agent="gridcrawl-test", keep_non_html=True)
    site = server.site
    site.pages["/octets"], site.types["/octets"] = site.pages["/birds.ttl"], "application/octet-stream"
    site.pages["/octets.ttl"], site.types["/octets.ttl"] = site.pages["/birds.ttl"], "application/octet-stream"
    assert semantic("/octets.ttl").triples
    octets = semantic("/octets")
    assert (octets.error_kind, octets.triples, octets.links, octets.digest) == (None, [], [], None)
    assert visit(fetcher_keep, server.url("/octets"), instruction={"semantic": True}).triples  # downloaded: sniffed
    # not RDF: a plain page as before, no error, no triple, no link
    for path in ("/readme", "/config.json", "/page.txt", "/page.rdf", "/title.owl", "/turtle-as-html"):
        result = semantic(path)
        assert (result.error_kind, result.triples, result.links) == (None, [], []), path
    # sniffed as RDF but does not parse: rdf_parse, saying how it was read
    broken = semantic("/broken")
    assert broken.error_kind == "rdf_parse" and broken.error.startswith("invalid turtle: ")
    assert broken.error.endswith("(served as text/plain: read as turtle by its URL's suffix or its first bytes)")
    # the bounds of a typed document
    assert semantic("/birds", semantic_limits=Limits(max_bytes=50)).error_kind == "rdf_limit"
    assert semantic("/birds", semantic_limits=Limits(max_triples=1)).error_kind == "rdf_limit"
    # a crawl that is not semantic neither downloads nor reads it
    plain = visit(fetcher, server.url("/birds"))
    assert (plain.error_kind, plain.triples, plain.links, plain.digest) == (None, [], [], None)
    plain = visit(fetcher_keep, server.url("/birds"))  # nor reads it when its body is kept
    assert (plain.error_kind, plain.triples, plain.links, plain.content) == (None, [], [], site.pages["/birds"].replace(
        b"{BASE}", server.url("/")[:-1].encode()))


def test_a_generic_body_larger_than_max_body_bytes_is_kept_without_it_not_failed(site_server):
    """A semantic crawl downloads ``text/plain``, XML and JSON to sniff them; one larger than
    ``max_body_bytes`` failed as ``too_large`` where a plain crawl records it without its body
    (a log file, a JSON dump). Only to be sniffed, it is kept without its body now, with its
    Content-Length or without one; an RDF document (typed, or by its suffix) past the bound still
    fails as ``too_large``."""
    from gridcrawl.executor.fetch import Fetcher
    from gridcrawl.executor.page import visit

    def unsized(h):  # no Content-Length: read to the connection's end
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(b"log line\n" * 1000)
        h.close_connection = True

    site = generic_site()
    site.pages["/big.log"], site.types["/big.log"] = b"log line\n" * 1000, "text/plain"
    site.pages["/big.json"], site.types["/big.json"] = b'{"rows": [%s]}' % b",".join([b"1"] * 3000), "application/json"
    site.pages["/big.ttl"], site.types["/big.ttl"] = site.pages["/birds"] * 100, "text/plain"
    site.extra["/unsized"] = unsized
    server = site_server(site)
    fetcher = Fetcher(user_agent="gridcrawl-test", max_body_bytes=2000)
    for path in ("/big.log", "/big.json", "/unsized"):
        result = visit(fetcher, server.url(path), instruction={"semantic": True})
        assert (result.error_kind, result.triples, result.digest) == (None, [], None), (path, result.error)
        assert result.size > 2000, path
    typed = visit(fetcher, server.url("/big.ttl"), instruction={"semantic": True})
    assert typed.error_kind == "too_large", typed.error


def test_an_n_triples_dump_served_as_text_plain_is_parsed():
    body = b"<http://a.example/s> <http://a.example/p> <http://a.example/o> .\n<http://a.example/s> <http://a.example/q> \"v\"@en .\n"
    url = BASE + "dump.nt"
    assert parse_rdf(body, url, rdf_format("text/plain", url, body)) == [
        ["http://a.example/s", "http://a.example/p", "http://a.example/o", "uri", None, None],
        ["http://a.example/s", "http://a.example/q", "v", "literal", None, "en"]]


def test_rdf_xml_is_decoded_as_it_declares():
    """An RDF/XML document declaring ISO-8859-1 (as older OWL and FOAF files do) failed as
    rdf_parse "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9": rdflib read the bytes
    as UTF-8 text. expat decodes it as it declares, and a UTF-16 document by its byte order mark."""
    doc = ('<?xml version="1.0" encoding="ISO-8859-1"?>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"'
           ' xmlns:rdfs="http://www.w3.org/2000/01/rdf-schema#"><rdf:Description rdf:about="http://a/caf">'
           '<rdfs:label xml:lang="fr">Café crème</rdfs:label></rdf:Description></rdf:RDF>')
    expected = [["http://a/caf", "http://www.w3.org/2000/01/rdf-schema#label", "Café crème", "literal", None, "fr"]]
    assert parse_rdf(doc.encode("iso-8859-1"), BASE + "caf.rdf", "xml") == expected
    utf16 = doc.replace("ISO-8859-1", "UTF-16").encode("utf-16")
    assert parse_rdf(utf16, BASE + "caf.rdf", "xml") == expected
    assert parse_rdf(doc.replace("ISO-8859-1", "UTF-8").encode(), BASE + "caf.rdf", "xml") == expected


def test_n3_formulas_variables_and_literal_subjects_are_no_triples():
    """An N3 rule ``{ ?x a :Bird } => { ?x :flies true }`` gave the triple ``?x a :Bird`` (not
    stated by the document) as ``<x> a :Bird``, and the rule itself as a triple between two
    IRIs "%7Bthis%20rdflib.identifier%20_:_:Formula2;rdflib:storage...", a literal subject
    ``"lit" :p :o`` the IRI ``<lit>``: relative IRIs, lines no N-Triples reader takes. Only the
    document's RDF statements are its triples."""
    n3 = b"""@prefix : <http://a/> .
    :robin a :Bird ; :sings "yes"@en ; :nest [ :height 2 ] .
    { ?x a :Bird } => { ?x :flies true } .
    { :a :b :c } a :Formula .
    "lit" :p :o .
    ?v :p :o .
    :s :p ?v .
    """
    triples = parse_rdf(n3, BASE + "rules.n3", "n3")
    assert sorted(t[:3] for t in triples) == [
        ["_:b0", "http://a/height", "2"], ["http://a/robin", "http://a/nest", "_:b0"],
        ["http://a/robin", "http://a/sings", "yes"], ["http://a/robin", RDF_TYPE, "http://a/Bird"]], triples


def test_named_graphs_of_trig_and_n_quads_are_read_as_triples_once():
    trig = (b"@prefix ex: <http://a.example/> .\n"
            b"ex:g1 { ex:s ex:p ex:o . }\n"
            b"{ ex:s ex:label \"default\" . }\n"
            b"ex:g2 { ex:s ex:p ex:o . ex:o ex:seeAlso <other.ttl> . }\n")
    rows = parse_rdf(trig, BASE + "data.trig", "trig")
    assert sorted(rows) == sorted([
        ["http://a.example/s", "http://a.example/p", "http://a.example/o", "uri", None, None],
        ["http://a.example/s", "http://a.example/label", "default", "literal", None, None],
        ["http://a.example/o", "http://a.example/seeAlso", BASE + "other.ttl", "uri", None, None]])
    quads = (b"<http://a.example/s> <http://a.example/p> <http://a.example/o> <http://a.example/g1> .\n"
             b"<http://a.example/s> <http://a.example/p> <http://a.example/o> .\n"
             b"_:x <http://a.example/p> \"1\"^^<http://www.w3.org/2001/XMLSchema#integer> <http://a.example/g2> .\n")
    rows = parse_rdf(quads, BASE + "dump.nq", "nquads")
    assert rows == [["http://a.example/s", "http://a.example/p", "http://a.example/o", "uri", None, None],
                    ["_:b0", "http://a.example/p", "1", "literal", "http://www.w3.org/2001/XMLSchema#integer", None]]
    with pytest.raises(RDFError, match="invalid trig"):
        parse_rdf(b"ex:g { unclosed", BASE + "bad.trig", "trig")


# ------------------------------------------------------------------------------------------ no network


@pytest.fixture
def no_network(monkeypatch):
    """Every attempt to resolve a name or open a connection is recorded and refused."""
    attempts: list = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network access in a parser (test socket guard)")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


def test_no_parser_touches_the_network(no_network, site_server):
    # a real server on 127.0.0.1 that would serve every remote thing these documents name
    site = Site(pages={"/ctx.jsonld": b'{"@context": {"@vocab": "http://evil/"}}', "/x.dtd": b"", "/secret": b"s",
                      "/onto/base.ttl": b"", "/vocab": b""})
    server = site_server(site)
    remote = server.url("/")
    jsonld = json.dumps([
        {"@context": "https://schema.org", "@type": "Product", "name": "Wren", "url": remote + "wren"},
        {"@context": [remote + "ctx.jsonld", {"@import": remote + "ctx.jsonld", "n": "http://a/n"}],
         "@id": "http://a/s", "n": "1", "other": "2"},
    ]).encode()
    triples = parse_rdf(jsonld, BASE + "p.jsonld", "json-ld")
    assert ["_:b0", RDF_TYPE, SDO + "Product", "uri", None, None] in triples            # bundled schema.org context
    assert ["_:b0", SDO + "url", remote + "wren", "uri", None, None] in triples          # url is an IRI there
    assert ["http://a/s", remote + "ctx.jsonld#other", "2", "literal", None, None] in triples  # unknown: @vocab
    assert ["http://a/s", "http://a/n", "1", "literal", None, None] in triples
    # an owl:imports is a triple (a link for the crawl), never fetched by the parser
    assert ["http://127.0.0.1:8200/data/a.ttl", "http://www.w3.org/2002/07/owl#imports",
            BASE + "onto/base.ttl", "uri", None, None] in parse_rdf(TURTLE, BASE + "data/a.ttl", "turtle")
    # XML: an external DTD subset is not loaded; external entities are refused
    dtd = (f'<?xml version="1.0"?><!DOCTYPE rdf:RDF SYSTEM "{remote}x.dtd">'
           '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="http://a/">'
           '<rdf:Description rdf:about="http://a/s"><ex:p>v</ex:p></rdf:Description></rdf:RDF>').encode()
    assert parse_rdf(dtd, BASE + "d.rdf", "xml") == [["http://a/s", "http://a/p", "v", "literal", None, None]]
    xxe = dtd.replace(f'SYSTEM "{remote}x.dtd">'.encode(), f'[<!ENTITY x SYSTEM "{remote}secret">]>'.encode()) \
             .replace(b">v<", b">&x;<")
    with pytest.raises(RDFError, match="external entity 'x' refused"):
        parse_rdf(xxe, BASE + "x.rdf", "xml")
    # HTML: JSON-LD with a remote context, RDFa with a vocabulary, Open Graph
    html = (f'<html prefix="og: http://ogp.me/ns#"><head><meta property="og:title" content="Wren">'
            f'<script type="application/ld+json">{{"@context": "{remote}ctx.jsonld", "@id": "http://a/w", "k": "v"}}'
            f'</script></head><body><div vocab="{remote}vocab" typeof="Bird"><span property="name">Wren</span>'
            f'</div></body></html>')
    found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "w.html")
    assert found.errors == []
    assert ["http://a/w", remote + "ctx.jsonld#k", "v", "literal", None, None] in found.triples
    assert [BASE + "w.html", "http://ogp.me/ns#title", "Wren", "literal", None, None] in found.triples
    assert ["_:b0", RDF_TYPE, remote + "vocabBird", "uri", None, None] in found.triples
    assert no_network == []
    assert server.per_path_counts() == {}


def test_local_context_is_bundled_for_schema_org_else_a_vocabulary():
    for url in ("https://schema.org", "http://schema.org/", "https://schema.org/docs/jsonldcontext.json"):
        assert local_context(url)["@vocab"] == SDO
    assert local_context("https://www.w3.org/ns/activitystreams")["@vocab"] == "https://www.w3.org/ns/activitystreams#"
    assert local_context("http://example.invalid/terms/") == {"@vocab": "http://example.invalid/terms/"}
    assert local_context("http://example.invalid/ctx.json") == {"@vocab": "http://example.invalid/ctx.json#"}
    assert local_context("../ctx.json", BASE + "d/p.jsonld") == {"@vocab": BASE + "ctx.json#"}  # relative: resolved
    local_context("https://schema.org")["@vocab"] = "changed"   # each caller gets its own copy
    assert local_context("https://schema.org")["@vocab"] == SDO


def test_html_structured_data_json_ld_microdata_rdfa_open_graph():
    html = """<html><head><title>Shop</title><meta property="og:type" content="product">
    <script type="application/ld+json">{"@context": "https://schema.org", "@type": "Product", "name": "Nest box",
      "offers": {"@type": "Offer", "price": "12.50", "priceCurrency": "EUR"}}</script>
    <script type="application/ld+json">{"broken": </script></head>
    <body><div itemscope itemtype="https://schema.org/Person" itemid="http://a/ann"><span itemprop="name">Ann</span>
      <a itemprop="url" href="/ann.html">Ann</a></div>
    <p vocab="http://schema.org/" typeof="Event" resource="http://a/party"><span property="name">Party</span></p>
    </body></html>"""
    found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "shop.html")
    jsonld = graph_of([t for t in found.triples if t[0].startswith("_:")])
    expected = Graph().parse(data=json.dumps({"@context": {"@vocab": SDO}, "@type": "Product", "name": "Nest box",
                                              "offers": {"@type": "Offer", "price": "12.50", "priceCurrency": "EUR"}}),
                             format="json-ld")
    assert isomorphic(jsonld, expected)
    assert ["http://a/ann", RDF_TYPE, SDO + "Person", "uri", None, None] in found.triples
    assert ["http://a/ann", SDO + "url", BASE + "ann.html", "uri", None, None] in found.triples
    assert ["http://a/ann", SDO + "name", "Ann", "literal", None, None] in found.triples
    assert ["http://a/party", SDO + "name", "Party", "literal", None, None] in found.triples
    assert [BASE + "shop.html", "http://ogp.me/ns#type", "product", "literal", None, None] in found.triples
    assert found.data["json-ld"][0]["offers"]["price"] == "12.50"   # as written, for item fields
    assert found.data["rdfa"] is True and found.data["microdata"][0]["properties"]["name"] == "Ann"
    assert len(found.errors) == 1 and found.errors[0].startswith("json-ld: invalid JSON")
    assert len({tuple(t) for t in found.triples}) == len(found.triples)


def test_a_relative_itemtype_is_no_type_and_no_triple_has_a_relative_iri():
    """``itemtype="schema.org/Product"`` (no scheme: HTML requires an absolute URL) was used as
    the vocabulary: the predicates ``<schema.org/name>``, relative IRIs no N-Triples reader takes,
    and the type ``<http://a/schema.org/schema.org/Product>``. It is no type now, the item's names
    schema.org's as for an untyped item; and no triple with a relative IRI is kept."""
    html = """<html><body><div itemscope itemtype="schema.org/Product"><span itemprop="name">Kettle</span>
      <a itemprop="url" href="/k">k</a></div></body></html>"""
    found = extract_structured(lxml.html.document_fromstring(html), html, "http://a/p.html")
    assert found.triples == [["_:b0", SDO + "name", "Kettle", "literal", None, None],
                             ["_:b0", SDO + "url", "http://a/k", "uri", None, None]], found.triples
    nt = "\n".join(f"<{t[0]}> <{t[1]}> <{t[2]}> ." for t in found.triples if t[3] == "uri" and t[0][:2] != "_:")
    Graph().parse(data=nt, format="nt")  # every IRI absolute


def test_a_blank_node_label_names_one_node_per_json_ld_script():
    """Two JSON-LD scripts of a page, each its own document, both writing "_:org" (and RDFa
    writing it too) made one organisation of the shop and the courier: a label is scoped to
    its script, and inside one script it still joins the nodes that share it."""
    html = """<html><body>
      <script type="application/ld+json">{"@context": "https://schema.org", "@graph": [
        {"@id": "_:org", "name": "Shop"}, {"@id": "http://a/k", "seller": {"@id": "_:org"}}]}</script>
      <script type="application/ld+json">{"@context": "https://schema.org", "@id": "_:org", "name": "Courier"}</script>
      <div vocab="http://schema.org/" resource="_:org"><span property="name">Bank</span></div></body></html>"""
    found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "b.html")
    names = {t[2]: t[0] for t in found.triples if t[1] == SDO + "name"}
    assert sorted(names) == ["Bank", "Courier", "Shop"] and len(set(names.values())) == 3, found.triples
    assert ["http://a/k", SDO + "seller", names["Shop"], "bnode", None, None] in found.triples


def test_an_open_graph_value_is_one_triple_in_the_pages_language_whether_rdfa_reads_it_or_not():
    """HTML+RDFa reads ``<meta property="og:title">`` too, with the language HTML's ``lang``
    gives it; the Open Graph reading gives the same literal, so a page with RDFa attributes
    has each Open Graph value once (before: ``"Titre"`` and ``"Titre"@fr``), and a page without
    them the same triple. No ``lang``: a plain literal, as before."""
    head = '<head><meta property="og:title" content="Titre"><meta property="og:type" content="article"></head>'
    rdfa = '<div vocab="https://schema.org/" typeof="Thing"><span property="name">x</span></div>'
    for lang, body, expected in (('lang="fr"', rdfa, "fr"), ('lang="fr"', "<p>x</p>", "fr"),
                                 ("", rdfa, None), ('lang=""', "<p>x</p>", None)):
        html = f"<html {lang}>{head}<body>{body}</body></html>"
        found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "a.html")
        og = [t for t in found.triples if t[1].startswith("http://ogp.me/ns#")]
        assert sorted(og, key=str) == [[BASE + "a.html", "http://ogp.me/ns#title", "Titre", "literal", None, expected],
                              [BASE + "a.html", "http://ogp.me/ns#type", "article", "literal", None, expected]], html


def test_a_microdata_literal_carries_the_language_of_its_element_as_rdfa_does():
    """Microdata ignored ``lang``: ``"Bouilloire"`` from microdata beside ``"Bouilloire"@fr``
    from RDFa on the same ``<html lang="fr">`` page. A microdata literal now takes the language
    of its element's nearest ``lang``/``xml:lang``; URLs, ``<time datetime>``, properties the
    context types (schema.org's ``url``) and ``lang=""`` take none."""
    html = """<html lang="fr"><body><div itemscope itemtype="https://schema.org/Product">
      <span itemprop="name">Bouilloire</span><p itemprop="description" lang="en">A kettle</p>
      <a itemprop="url" href="/k">k</a><meta itemprop="sku" content="K1">
      <time itemprop="releaseDate" datetime="2026-01-02">2 janv.</time>
      <div itemprop="offers" itemscope itemtype="https://schema.org/Offer"><span itemprop="price" lang="">12</span>
      <span itemprop="seller" xml:lang="de">Kessel GmbH</span></div></div>
      <div vocab="https://schema.org/" typeof="Product"><span property="name">Bouilloire</span></div></body></html>"""
    found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "k.html")
    literals = {(t[1].rsplit("/", 1)[1], t[2]): t[5] for t in found.triples if t[3] == "literal"}
    urls = {(t[1].rsplit("/", 1)[1], t[2]) for t in found.triples if t[3] == "uri"}
    assert literals == {("name", "Bouilloire"): "fr", ("description", "A kettle"): "en", ("sku", "K1"): "fr",
                        ("releaseDate", "2026-01-02"): None, ("price", "12"): None,
                        ("seller", "Kessel GmbH"): "de"}, found.triples
    assert ("url", BASE + "k") in urls and not found.errors
    assert found.data["microdata"][0]["properties"]["name"] == "Bouilloire"  # as written, for item fields


def test_a_locale_or_an_invalid_lang_costs_no_triples():
    """``<html lang="en_US">`` (a locale, as many sites write it) made rdflib raise ValueError
    ("'en_US' is not a valid language tag"): the page lost every Open Graph, microdata and RDFa
    triple, and a JSON-LD block with ``"@language": "en_US"`` or a language map keyed ``en_US``
    all of its own. ``_`` is read as ``-``; a value that is still no language tag gives no
    language (HTML: the language is unknown); tags are lower case in every syntax, as pyRdfa
    writes them."""
    html = """<html lang="en_US"><head><meta property="og:title" content="Kettle"></head><body>
      <div itemscope itemtype="https://schema.org/Product"><span itemprop="name">Kettle</span>
        <span itemprop="description" lang="English (US)">Blue</span></div>
      <div vocab="http://schema.org/" typeof="Offer" resource="http://a/o"><span property="name">Offer</span></div>
      <script type="application/ld+json">{"@context": ["https://schema.org", {"@language": "de_AT",
        "label": {"@id": "http://a/label", "@container": "@language"}}], "@id": "http://a/k",
        "name": "Kessel", "alternateName": {"@value": "Pot", "@language": "EN_gb"},
        "label": {"fr_CA": "Bouilloire", "en US": "Kettle"}}</script></body></html>"""
    found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "k.html")
    assert found.errors == []
    objects = {(t[1], t[2]): t[5] for t in found.triples if t[3] == "literal"}
    assert objects == {("http://ogp.me/ns#title", "Kettle"): "en-us", (SDO + "name", "Kettle"): "en-us",
                       (SDO + "description", "Blue"): None, (SDO + "name", "Offer"): "en-us",
                       (SDO + "name", "Kessel"): "de-at", (SDO + "alternateName", "Pot"): "en-gb",
                       ("http://a/label", "Bouilloire"): "fr-ca", ("http://a/label", "Kettle"): None}, objects
    graph_of(found.triples)  # every language one rdflib takes
    assert parse_rdf(b'<http://a/s> <http://a/p> "x"@en-US .', BASE + "s.nt", "nt")[0][5] == "en-us"
    # RDF/XML: rdflib's ValueError failed the whole document
    rdfxml = (b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:a="http://a/" xml:lang="en_US">'
              b'<rdf:Description rdf:about="http://a/s"><a:p>x</a:p><a:q xml:lang="en US">y</a:q></rdf:Description></rdf:RDF>')
    assert [t[5] for t in parse_rdf(rdfxml, BASE + "s.rdf", "xml")] == ["en-us", None]


def test_structured_data_json_cannot_hold_is_made_strings_and_a_bad_context_is_named():
    from gridcrawl import protocol
    html = """<html><head>
    <script type="application/ld+json">{"@context": "https://schema.org", "@type": "Product", "name": "x",
      "sku": 123456789012345678901234567890, "weight": 1e400, "count": 3}</script>
    <script type="application/ld+json">{"@context": 5, "@type": "Thing", "name": "y"}</script></head>
    <body><div vocab="http://schema.org/" typeof="Event" resource="http://a/ev">
      <time property="startDate" datetime="2026-03-03">3 March</time></div></body></html>"""
    found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "odd.html")
    product = found.data["json-ld"][0]
    # the text the page wrote, not "inf" (rdflib's triple was "inf"^^xsd:double: no xsd:double)
    assert (product["sku"], product["weight"], product["count"]) == ("123456789012345678901234567890", "1e400", 3)
    assert type(product["weight"]) is str
    protocol.encode_page(PageResult(url=BASE + "odd.html", structured=found.data))  # the wire carries it
    json.dumps(found.data, allow_nan=False)  # and strict JSON
    weights = [t for t in found.triples if t[1] == SDO + "weight"]
    assert weights == [[weights[0][0], SDO + "weight", "1e400", "literal", XSD + "double", None]], weights
    assert ["123456789012345678901234567890", "literal", XSD + "integer"] in [t[2:5] for t in found.triples]
    assert found.errors == ["json-ld: @context must be an IRI, an object or a list, not 5"]
    # HTML+RDFa 1.1: <time datetime> is the value, typed by its form
    assert ["http://a/ev", SDO + "startDate", "2026-03-03", "literal", XSD + "date", None] in found.triples


def test_lone_surrogate_escapes_are_replacement_characters_the_wire_and_a_utf8_file_carry(tmp_path):
    """A JSON-LD "Kettle \\ud83d" (half an emoji, cut by the page's truncation) or a Turtle
    "\\uD800" made a string with a lone surrogate, which msgpack refuses: the executor failed
    the whole page (links included) as a crash, and ``gridcrawl fetch --structured-data`` ended
    with a traceback. Each is U+FFFD now, in the triples, IRIs and the JSON-LD kept as written."""
    from gridcrawl import protocol
    html = r"""<html><head><script type="application/ld+json">{"@context": "https://schema.org",
      "@id": "http://a/k\udfff", "@type": "Product", "name": "Kettle \ud83d", "\ud800sku": "1",
      "brand": "\ud83d\ude00"}</script></head><body></body></html>"""
    found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "k.html")
    assert ["http://a/k\ufffd", SDO + "name", "Kettle \ufffd", "literal", None, None] in found.triples
    assert ["http://a/k\ufffd", SDO + "brand", "\U0001f600", "literal", None, None] in found.triples  # a pair: whole
    assert found.data["json-ld"][0]["name"] == "Kettle \ufffd" and "\ufffdsku" in found.data["json-ld"][0]
    turtle = parse_rdf(rb'<http://a/s\uD800> <http://a/p> "x\uDC00y" .', BASE + "s.ttl", "turtle")
    assert turtle == [["http://a/s\ufffd", "http://a/p", "x\ufffdy", "literal", None, None]]
    protocol.encode_page(PageResult(url=BASE + "k.html", triples=found.triples + turtle, structured=found.data))
    (tmp_path / "t.txt").write_text(json.dumps([found.triples, found.data], ensure_ascii=False), encoding="utf-8")


def test_json_ld_iris_with_a_space_are_read_percent_encoded_and_said_so():
    """A node whose @id holds a space lost all its triples (rdflib leaves such a node out) with
    no error; a url or image with a space became the page's own URL; a "<" was kept, and the
    N-Triples export could not be read back. Now each is read percent-encoded, as a browser
    reads such a URL, and the page's errors say so once per syntax."""
    product = {"@context": "https://schema.org", "@type": "Product", "@id": "https://shop.example/p/Blue Kettle",
               "name": "Blue Kettle", "url": "https://shop.example/p/Blue Kettle",
               "image": "https://shop.example/img/blue kettle.png", "sameAs": "https://shop.example/p/a<b>"}
    html = (f"<html><head><script type='application/ld+json'>{json.dumps(product)}</script></head><body>"
            "<div itemscope itemtype='https://schema.org/Product' itemid='https://shop.example/p/Red Mug'>"
            "<span itemprop='name'>Red Mug</span></div></body></html>")
    found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "p/1.html")
    kettle, mug = "https://shop.example/p/Blue%20Kettle", "https://shop.example/p/Red%20Mug"
    assert [kettle, SDO + "name", "Blue Kettle", "literal", None, None] in found.triples
    assert [kettle, SDO + "url", kettle, "uri", None, None] in found.triples
    assert [kettle, SDO + "image", "https://shop.example/img/blue%20kettle.png", "uri", None, None] in found.triples
    assert [kettle, SDO + "sameAs", "https://shop.example/p/a%3Cb%3E", "uri", None, None] in found.triples
    assert [mug, SDO + "name", "Red Mug", "literal", None, None] in found.triples
    assert not [t for t in found.triples if BASE + "p/1.html" in t[:3]]  # never the page's own URL
    assert found.errors == [
        "json-ld: 4 IRIs were read percent-encoded (a space or another character no IRI holds), "
        "e.g. 'https://shop.example/p/Blue Kettle'",
        "microdata: 1 IRI was read percent-encoded (a space or another character no IRI holds), "
        "e.g. 'https://shop.example/p/Red Mug'"]
    lines = "".join(f"<{s}> <{p}> <{o}> .\n" for s, p, o, kind, _d, _l in found.triples if kind == "uri")
    assert len(Graph().parse(data=lines, format="nt")) == len([t for t in found.triples if t[3] == "uri"])
    # a property named with a space, an RDF/XML rdf:about with one: every stored IRI is one N-Triples
    # can write (they were kept as they were, and the export gave lines no N-Triples reader takes)
    named = {"@context": "https://schema.org", "@id": "https://shop.example/p/1", "product name": "Kettle"}
    html = f"<html><head><script type='application/ld+json'>{json.dumps(named)}</script></head></html>"
    found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "p/1.html")
    assert ["https://shop.example/p/1", SDO + "product%20name", "Kettle", "literal", None, None] in found.triples
    rdfxml = (b'<?xml version="1.0"?><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
              b'xmlns:s="http://schema.org/"><rdf:Description rdf:about="http://shop.example/a b">'
              b'<s:name>A</s:name></rdf:Description></rdf:RDF>')
    assert parse_rdf(rdfxml, BASE + "a.rdf", "xml") == [["http://shop.example/a%20b", SDO + "name", "A", "literal",
                                                          None, None]]


def test_json_ld_numbers_no_float_holds_keep_the_pages_text_in_valid_xsd_double_triples():
    """JSON-LD 1e400 became the triple "inf"^^xsd:double (no xsd:double lexical form: strict
    N-Triples readers refuse it) and "inf" in document.structured_data; NaN and Infinity (which
    Python's JSON reader takes) "nan" and "inf". The page's text is kept, the triple typed by the
    XML Schema lexical form (NaN, INF, -INF), in pages, RDF documents and item fields alike."""
    import rdflib
    from gridcrawl.items import extract, page_for, parse_spec
    html = """<html><head><script type="application/ld+json">{"@context": "https://schema.org",
      "@id": "http://a/p", "@type": "Product", "weight": 1e400, "depth": -1E+999, "width": NaN,
      "height": Infinity, "price": 2.5}</script></head><body></body></html>"""
    root = lxml.html.document_fromstring(html)
    found = extract_structured(root, html, BASE + "big.html")
    objects = {t[1][len(SDO):]: (t[2], t[4]) for t in found.triples if t[1].startswith(SDO) and t[3] == "literal"}
    assert objects == {"weight": ("1e400", XSD + "double"), "depth": ("-1E+999", XSD + "double"),
                       "width": ("NaN", XSD + "double"), "height": ("INF", XSD + "double"),
                       "price": ("2.5", XSD + "double")}, objects
    product = found.data["json-ld"][0]
    assert (product["weight"], product["depth"], product["width"], product["height"], product["price"]) == \
        ("1e400", "-1E+999", "NaN", "Infinity", 2.5)
    lines = "".join(f'<{s}> <{p}> "{o}"^^<{d}> .\n' for s, p, o, kind, d, _ in found.triples if kind == "literal")
    graph = rdflib.Graph().parse(data=lines, format="nt")  # every literal well-formed for its datatype
    assert all(not getattr(o, "ill_typed", False) for o in graph.objects()), lines
    document = parse_rdf(b'{"@id": "http://a/s", "http://a/p": 1e400}', BASE + "s.jsonld", "json-ld")
    assert document == [["http://a/s", "http://a/p", "1e400", "literal", XSD + "double", None]]
    turtle = parse_rdf(b'<http://a/s> <http://a/p> "-INF"^^<http://www.w3.org/2001/XMLSchema#float> .',
                       BASE + "s.ttl", "turtle")
    assert turtle == [["http://a/s", "http://a/p", "-INF", "literal", XSD + "float", None]], "rdflib wrote -inf"
    spec = parse_spec('[[item]]\ntype = "p"\n[item.fields]\nweight = { jsonld = "$.weight" }\n')
    page = page_for(BASE + "big.html", BASE + "big.html", 200, {}, root, html, [])
    assert extract(spec, page).items[0]["fields"] == {"weight": "1e400"}


def test_a_json_literal_keeps_the_numbers_the_page_wrote():
    """An ``"@type": "@json"`` value is an rdf:JSON literal of the page's JSON; a 1e400 in it
    was written as ``{"@type":"urn:gridcrawl:number-text:<random>","@value":"1e400"}``: an
    internal marker, random per executor process, so the same page gave two executors two
    different triples. The number is written as the page wrote it (a constant JSON lacks, as
    a string). An object as ``@value`` without ``@json`` gave Python's text of it, ``"{'x': 1}"``:
    it gives no triple."""
    doc = (b'{"@context": {"@version": 1.1, "@vocab": "http://a/", "data": {"@type": "@json"}}, "@id": "http://a/s",'
           b' "data": {"x": 1e400, "y": [1, 2.5, NaN], "z": "text"}}')
    triples = parse_rdf(doc, BASE + "j.jsonld", "json-ld")
    assert triples == [["http://a/s", "http://a/data", '{"x":1e400,"y":[1,2.5,"NaN"],"z":"text"}', "literal",
                        "http://www.w3.org/1999/02/22-rdf-syntax-ns#JSON", None]], triples

    # an object as @value is no value (JSON-LD 1.1) unless typed @json: rdflib wrote "{'x': 1}", Python's text
    odd = parse_rdf(b'{"@id": "http://a/s", "http://a/p": [{"@value": {"x": 1}}, {"@value": [1]}, "ok"],'
                    b' "http://a/q": {"@value": {"x": 1}, "@type": "@json"}}', BASE + "o.jsonld", "json-ld")
    assert [t[2] for t in odd] == ["ok", '{"x":1}'], odd


# ------------------------------------------------------------------------------------------ hostile RDF


def billion_laughs(levels: int = 10) -> bytes:
    entities = '<!ENTITY lol0 "lol">' + "".join(
        f'<!ENTITY lol{i} "{("&lol%d;" % (i - 1)) * 10}">' for i in range(1, levels))
    return (f'<?xml version="1.0"?><!DOCTYPE rdf:RDF [{entities}]>'
            '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="http://a/">'
            f'<rdf:Description rdf:about="http://a/s"><ex:p>&lol{levels - 1};</ex:p></rdf:Description></rdf:RDF>').encode()


def test_hostile_rdf_is_refused_quickly_and_bounded():
    started = time.monotonic()
    with pytest.raises(RDFError, match="refers to other entities"):
        parse_rdf(billion_laughs(), BASE + "lol.rdf", "xml")
    # no nesting, but 200,000 references to a 1 KiB entity: 200 MB of text
    wide = (b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY k "' + b"k" * 1024 + b'">]>'
            b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="http://a/">'
            b'<rdf:Description rdf:about="http://a/s"><ex:p>' + b"&k;" * 200_000 + b"</ex:p></rdf:Description></rdf:RDF>")
    with pytest.raises(RDFLimit, match="XML entities expand to 204800000 bytes"):
        parse_rdf(wide, BASE + "wide.rdf", "xml")
    huge = b"".join(b"<http://a/s%d> <http://a/p> <http://a/o> .\n" % i for i in range(2_000))
    with pytest.raises(RDFLimit, match="more than 1000 triples"):
        parse_rdf(huge, BASE + "huge.nt", "nt", Limits(max_triples=1000))
    with pytest.raises(RDFLimit, match="larger than 1000"):
        parse_rdf(huge, BASE + "huge.nt", "nt", Limits(max_bytes=1000))
    with pytest.raises(RDFLimit, match="parse deadline of 0 s passed"):
        parse_rdf(huge, BASE + "huge.nt", "nt", Limits(deadline=0))
    with pytest.raises(RDFError, match="^invalid json-ld: a JSON-LD document is an object or a list, not 'x'$"):
        parse_rdf(b'"x"', BASE + "x.jsonld", "json-ld")  # was rdflib's "UnboundLocalError: ... 'resources'"
    for fmt, bad in (("turtle", b"@prefix ex: <http://a/> . ex:s ex:p"), ("xml", b"<rdf:RDF><unclosed>"),
                     ("json-ld", b'{"@id": '), ("json-ld", b"[" * 100_000 + b"]" * 100_000), ("nt", b"<a> <b> .")):
        with pytest.raises(RDFError, match="invalid|nested"):
            parse_rdf(bad, BASE + "bad", fmt)
    assert time.monotonic() - started < 60  # bounded: seconds, not the minutes expat needs for the laughs


def test_short_names_of_long_iris_cannot_make_the_triples_huge():
    """A prefix (or a JSON-LD context term) names a 2,000-character IRI in a few bytes: a 1.4 MB
    Turtle document of 50,000 triples made 300 MB of triples, 730 MB of executor memory and a
    result over max_message_bytes. The triples' text is bounded by 8 x rdf_max_bytes."""
    long = "http://a.example/" + "x" * 2000
    limits = Limits(max_bytes=20_000)
    turtle = (f"@prefix a: <{long}> .\n" + "".join(f"a:s{i} a:p a:o{i} .\n" for i in range(400))).encode()
    assert len(turtle) < limits.max_bytes
    with pytest.raises(RDFLimit, match=r"triples of more than 160000 characters in all \(8 x rdf_max_bytes\)"):
        parse_rdf(turtle, BASE + "long.ttl", "turtle", limits)
    html = ('<html><body><script type="application/ld+json">{"@context": {"t": "%s"}, "@graph": [%s]}</script>'
            '</body></html>' % (long, ", ".join('{"@id": "t%d", "t": "t"}' % i for i in range(400))))
    found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "long.html", limits)
    assert found.errors == ["json-ld: triples of more than 160000 characters in all (8 x rdf_max_bytes)"]
    assert 0 < sum(len(t[0]) + len(t[1]) + len(t[2]) for t in found.triples) <= 160_000
    # the same number of triples of ordinary IRIs is read whole
    plain = "".join(f"<http://a.example/s{i}> <http://a.example/p> <http://a.example/o{i}> .\n" for i in range(250))
    assert len(parse_rdf(plain.encode(), BASE + "plain.nt", "nt", limits)) == 250


def test_documents_that_give_no_triple_are_still_bounded_by_the_deadline():
    """The deadline was checked at each triple only: a 5 MB JSON-LD document of 1.7 million
    ``{}`` (or nulls) gives none, and took 31 s and 390 MB with a deadline of 2 s; 280,000 empty
    ``<rdf:Description/>`` 16 s. It is checked at every JSON-LD object, list and value and at
    every RDF/XML element too."""
    descriptions = (b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
                    + b"<rdf:Description/>" * 1000 + b"</rdf:RDF>")
    with pytest.raises(RDFLimit, match="parse deadline of 0 s passed"):
        parse_rdf(descriptions, BASE + "e.rdf", "xml", Limits(deadline=0))
    assert parse_rdf(descriptions, BASE + "e.rdf", "xml") == []
    empties = b"[" + b",".join([b"{}"] * 1000) + b"]"
    with pytest.raises(RDFLimit, match="parse deadline of 0 s passed"):
        parse_rdf(empties, BASE + "e.jsonld", "json-ld", Limits(deadline=0))
    assert parse_rdf(empties, BASE + "e.jsonld", "json-ld") == []
    nulls = '{"@id": "http://a/s", "http://a/p": [' + ", ".join(["null"] * 1000) + "]}"
    html = f'<html><body><script type="application/ld+json">{nulls}</script></body></html>'
    found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "e.html", Limits(deadline=0))
    assert found.errors == ["json-ld: parse deadline of 0 s passed (rdf_parse_deadline)"]


def test_the_rdfa_walk_is_bounded_by_the_deadline_where_it_finds_no_triple():
    """pyRdfa walks every element of a page with an RDFa attribute; the deadline was checked at
    triples only, so a 4 MB page of 300,000 plain spans took 19 s. It is checked at every
    element: with no time left, a page whose RDFa gives no triple says so."""
    html = '<html><body><div about="http://a/x">' + "<span>x</span>" * 100 + "</div></body></html>"
    assert extract_structured(lxml.html.document_fromstring(html), html, BASE + "r.html").errors == []
    found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "r.html", Limits(deadline=0))
    assert found.errors == ["rdfa: parse deadline of 0 s passed (rdf_parse_deadline)"]


def test_a_json_ld_script_nested_too_deeply_costs_only_itself():
    """A script of 50,000 nested objects made the JSON reader raise RecursionError, which ended
    the reading of all the page's JSON-LD: the next script's product was lost."""
    deep = '{"@context": {"@vocab": "http://a/"}, ' + '"p": {' * 50_000 + '"q": 1' + "}" * 50_000 + "}"
    html = (f'<html><body><script type="application/ld+json">{deep}</script><script type="application/ld+json">'
            '{"@context": "https://schema.org", "@id": "http://a/k", "name": "Kettle"}</script></body></html>')
    found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "deep.html")
    assert found.errors == ["json-ld: nested too deeply"]
    assert found.triples == [["http://a/k", SDO + "name", "Kettle", "literal", None, None]]


def test_microdata_reading_stops_at_the_parse_deadline_and_a_bound_is_one_error(monkeypatch):
    """extruct reads a microdata property as the text of its whole subtree, again for every
    ``itemprop`` around it: 2,000 nested ``itemprop`` spans (a 60 KB page) took 38 s, 800 nested
    items 9 minutes, all before the first triple, where alone the deadline was checked, and
    inside the executor's parse slot. It is now checked at every item and property read; and a
    bound reached is one error for the page, not one per item after it (400 lines before)."""
    from extruct.w3cmicrodata import LxmlMicrodataExtractor
    read = []
    original = LxmlMicrodataExtractor._extract_textContent
    monkeypatch.setattr(LxmlMicrodataExtractor, "_extract_textContent",
                        lambda self, node: (read.append(1), original(self, node))[1])
    nested = ('<html><body><div itemscope itemtype="https://schema.org/Thing">' + '<span itemprop="name">a' * 200
              + "</span>" * 200 + "</div>" + '<div itemscope itemtype="https://schema.org/Thing">'
              '<span itemprop="name">b</span></div>' * 3 + "</body></html>")
    found = extract_structured(lxml.html.document_fromstring(nested), nested, BASE + "n.html", Limits(deadline=0))
    assert found.errors == ["microdata: parse deadline of 0 s passed (rdf_parse_deadline)"]
    assert read == [] and found.triples == []
    found = extract_structured(lxml.html.document_fromstring(nested), nested, BASE + "n.html")  # in time: read
    assert found.errors == [] and len(found.data["microdata"]) == 4 and len(read) == 203


def test_many_prefixes_cost_neither_time_nor_memory(monkeypatch):
    """rdflib files every prefix a document binds in a trie that each insertion walks: 20,000
    Turtle ``@prefix`` lines (700 KB) took 85 s with no triple, and so no deadline check,
    between them. No parse here writes qnames: the bindings are dropped. And
    its RDF/XML reader copies the prefix map at each namespace declaration: 20,000 on one
    element (600 KB) were about 6 GB, so past 1,000 in scope the document is an rdf_limit."""
    import rdflib.namespace
    inserted = []
    original = rdflib.namespace.insert_trie
    monkeypatch.setattr(rdflib.namespace, "insert_trie", lambda *args: (inserted.append(1), original(*args))[1])
    n = 3000
    turtle = ("".join(f"@prefix p{i}: <http://x/{i}#> .\n" for i in range(n)) + "p1:a p2:b p3:c .\n").encode()
    assert parse_rdf(turtle, BASE + "p.ttl", "turtle") == [["http://x/1#a", "http://x/2#b", "http://x/3#c", "uri", None, None]]
    assert len(inserted) < 200, "every prefix went into rdflib's trie"
    xml_ns = ('<?xml version="1.0"?><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
              + " ".join(f'xmlns:p{i}="http://x/{i}#"' for i in range(1_500))
              + '><rdf:Description rdf:about="http://x/s"><p1:b>v</p1:b></rdf:Description></rdf:RDF>').encode()
    with pytest.raises(RDFLimit, match="more than 1000 XML namespace declarations in scope at once"):
        parse_rdf(xml_ns, BASE + "p.rdf", "xml")
    # one declaration on each of many elements is no problem
    spread = ('<?xml version="1.0"?><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">' + "".join(
        f'<rdf:Description rdf:about="http://x/s{i}" xmlns:ns0="http://y/"><ns0:b>v</ns0:b></rdf:Description>'
        for i in range(2_000)) + "</rdf:RDF>").encode()
    assert len(parse_rdf(spread, BASE + "s.rdf", "xml")) == 2_000


def test_rdfa_is_read_into_the_pages_bounded_graph(monkeypatch):
    """pyRdfa's graph_from_DOM built a page's RDFa triples in a graph of its own and copied
    them into the bounded one at the end: a 3.4 MB page of 100,000 properties took 13 s and
    290 MB with a deadline of 3 s and a cap of 50,000 triples. The triples now go to the bounded
    graph as they are made; rdfa:copy of an rdfa:Pattern still gives the copied triples only."""
    from rdflib.plugins.stores.memory import Memory
    added = []
    original = Memory.add
    monkeypatch.setattr(Memory, "add", lambda self, *args, **kwargs: (added.append(1), original(self, *args, **kwargs))[1])
    html = ('<html><body vocab="http://schema.org/" resource="http://x/s" typeof="Thing">'
            + "".join(f'<span property="n{i}">a</span>' for i in range(2_000)) + "</body></html>")
    found = extract_structured(lxml.html.document_fromstring(html), html, BASE + "r.html", Limits(max_triples=10))
    assert found.errors == ["rdfa: more than 10 triples (max_triples)"] and len(found.triples) == 10
    assert len(added) < 100, f"{len(added)} triples made for a page of at most 10"
    pattern = ('<html><body vocab="http://schema.org/"><div resource="http://x/me" typeof="Person">'
               '<link property="rdfa:copy" href="http://x/pat"/></div>'
               '<div resource="http://x/pat" typeof="rdfa:Pattern"><span property="name">Ann</span></div></body></html>')
    found = extract_structured(lxml.html.document_fromstring(pattern), pattern, BASE + "p.html")
    assert sorted(t[:3] for t in found.triples if not t[1].startswith("http://www.w3.org/ns/rdfa#usesVocabulary")) == sorted([
        ["http://x/me", RDF_TYPE, SDO + "Person"], ["http://x/me", SDO + "name", "Ann"]]), found.triples


def test_the_crawl_summarys_semantic_table_has_its_title_on_one_line():
    """It read "gridcrawl: semantic" above "crawl": the title wrapped to the width of the table."""
    import io
    from rich.console import Console
    from gridcrawl.client.progress import ProgressView
    view = ProgressView(enabled=False)
    view.console = Console(file=io.StringIO(), width=100)
    view.semantic_summary({"triples": 91}, "gridcrawl report --crawl-db sqlite:///c.db")
    assert "gridcrawl: semantic crawl" in view.console.file.getvalue(), view.console.file.getvalue()


def test_plain_internal_entities_of_owl_files_are_allowed():
    triples = parse_rdf(RDFXML, BASE + "data/people.rdf", "xml")
    assert ["http://127.0.0.1:8200/onto#robin", "http://127.0.0.1:8200/onto#sings", "yes", "literal", None, None] in triples


# ------------------------------------------------------------------------------------------ ontology focus

ONTOLOGY = b"""@prefix : <http://example.org/birds#> .
@prefix owl: <http://www.w3.org/2002/07/owl#> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
@prefix skos: <http://www.w3.org/2004/02/skos/core#> .
:Bird a owl:Class ; rdfs:label "bird"@en ; skos:altLabel "songbird" .
:Nest a owl:Class ; skos:prefLabel "nest box" .
:migrates a owl:ObjectProperty ; rdfs:label "migration route" .
:Mammal a rdfs:Class .
:notATerm rdfs:label "weather" .
"""


def test_ontology_focus_counts_terms_by_iri_and_label(tmp_path):
    path = tmp_path / "birds.ttl"
    path.write_bytes(ONTOLOGY)
    focus = OntologyFocus.load(path)
    ns = "http://example.org/birds#"
    assert set(focus.terms) == {ns + "Bird", ns + "Nest", ns + "migrates", ns + "Mammal"}
    assert focus.terms[ns + "Nest"] == (("nest", "box"),) and focus.saturation == 3
    assert focus.sim("Birds and weather") == pytest.approx(1 / 3)          # "bird" begins "birds"
    assert focus.sim("a box for a nest; the songbirds' migration routes") == 1.0
    assert focus.sim("nest") == 0.0                                          # a label needs all its words
    assert focus.page_sim("Zoo", "", iris={ns + "Mammal", "http://other/x"}) == pytest.approx(1 / 3)
    assert focus.page_sim("Bird", "", iris={ns + "Bird", ns + "Mammal"}) == pytest.approx(2 / 3)  # Bird once
    # shark-search as for keywords: anchor 1/3, context 1, neighbourhood .8/3 + .2; inherited .5 * .6
    assert focus.link_score("Bird songs", BASE + "x.html", 0.6) == pytest.approx(.5 * .3 + .5 * (.8 / 3 + .2))
    assert focus.page_score("Soup", "recipes", 0.4) == pytest.approx(0.2)
    bad = tmp_path / "empty.ttl"
    bad.write_bytes(b"@prefix : <http://a/> . :x :y :z .")
    with pytest.raises(OntologyError, match="names no class or property"):
        OntologyFocus.load(bad)
    bad.write_bytes(b"@prefix : <http://a/> . :x :y")
    with pytest.raises(OntologyError, match="does not parse"):
        OntologyFocus.load(bad)
    with pytest.raises(OntologyError, match="cannot read"):
        OntologyFocus.load(tmp_path / "missing.owl")


# ------------------------------------------------------------------------------------------ triple table


def test_triples_are_stored_once_per_page_and_exported(tmp_path, db_url):
    store = CrawlStore(open_database(db_url), Strategy(structured_data=True))
    store.add_seeds([BASE + "data/catalog.ttl", BASE + "data/people.rdf"])
    catalog, people = store.claim(5)
    rows = parse_rdf(TURTLE, catalog.url, "turtle")
    pages = [PageResult(url=catalog.url, final_url=catalog.url, status=200, content_type="text/turtle",
                        triples=rows + [rows[0], ["bad"], [1, 2, 3, 4, 5, 6]], links=triple_links(rows)),
             PageResult(url=people.url, final_url=people.url, status=200, content_type="application/rdf+xml",
                        triples=parse_rdf(RDFXML, people.url, "xml"))]
    outcomes = [Outcome(catalog, pages[0], "ex", 1, False), Outcome(people, pages[1], "ex", 1, False)]
    assert store.apply(outcomes, Scope(["127.0.0.1"]))["triples"] == len(rows) + 2
    store.apply(outcomes, Scope(["127.0.0.1"]))  # a result delivered twice changes nothing
    assert store.counts()["triples"] == len(rows) + 2
    with store.engine.connect() as conn:
        queued = set(conn.execute(sa.text("SELECT url FROM to_visit_url")).scalars())
    assert queued == {BASE + "onto/base.ttl"}  # people.rdf was visited in the same batch
    nt, jsonl = tmp_path / "t.nt", tmp_path / "t.jsonl"
    assert export(store.engine, "nt", str(nt), triples=True).records == len(rows) + 2
    exported = Graph().parse(nt, format="nt")
    expected = Graph().parse(data=TURTLE, format="turtle", publicID=catalog.url)
    expected += Graph().parse(data=RDFXML, format="xml", publicID=people.url)
    assert isomorphic(exported, expected)
    export(store.engine, "jsonl", str(jsonl), triples=True)
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert {line["url"] for line in lines} == {catalog.url, people.url}
    assert {"subject", "predicate", "object", "object_kind", "datatype", "language", "fingerprint"} <= set(lines[0])


@pytest.mark.parametrize("structured", [{b"bytes key": 1}, {"nan": float("nan")}], ids=["bytes-key", "nan"])
def test_a_hostile_executors_structured_data_and_triples_cannot_fail_the_batch(tmp_path, structured):
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"), Strategy(structured_data=True))
    store.add_seeds([BASE])
    (seed,) = store.claim(1)
    page = PageResult(url=BASE, final_url=BASE, status=200, content_type="text/html", title="x",
                      structured=structured, triples=[["s", "p", "o", "weird", None, None], "x",
                                                             ["http://a/s", "http://a/p", "\x00o", "literal", None, "en"]])
    done = store.apply([Outcome(seed, page, "ex", 1, False)], Scope(["127.0.0.1"]))
    assert done["documents"] == 1 and done["triples"] == 1
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT structured_data FROM document")).scalar() is None
        assert conn.execute(sa.text("SELECT object, language FROM triple")).one() == ("o", "en")


# ------------------------------------------------------------------------------------------ item fields

PRODUCT_PAGE = """<html><head><title>Nest box</title>
<script type="application/ld+json">{"@context": "https://schema.org", "@type": "Product", "name": "Nest box",
  "offers": {"@type": "Offer", "price": "12.50", "priceCurrency": "EUR"}, "color": ["green", "brown"]}</script>
<script type="application/ld+json">// a comment extruct tolerates
{"@context": "https://schema.org", "@graph": [{"@type": "Offer", "price": 9}, {"@type": "Brand", "name": "Wren & Co"}]}
</script></head><body><h1>Nest box</h1></body></html>"""


def test_item_fields_read_the_pages_json_ld():
    from gridcrawl.executor.parse import parse_page
    from gridcrawl.items import ItemSpecError, extract, page_for, parse_spec, spec_to_wire, specs_from_wire
    spec = parse_spec("""[[item]]
type = "product"
[item.fields]
name = { css = "h1::text" }
price = { jsonld = "$.offers.price", type = "float", required = true }
prices = { jsonld = "price", type = "float", many = true }
currency = { jsonld = "offers.priceCurrency" }
colors = { jsonld = "$.color", many = true }
brand = { jsonld = "name", re = "^(Wren)" }
""")
    (wired,) = specs_from_wire([spec_to_wire(s) for s in spec])   # travels to the executor unchanged
    assert set(wired.fields) == set(spec[0].fields) and any(f.jsonld == "$.offers.price" for f in wired.fields)
    parsed = parse_page(PRODUCT_PAGE.encode(), BASE + "nest.html", "text/html")
    view = page_for(BASE + "nest.html", BASE + "nest.html", 200, {}, parsed.document, PRODUCT_PAGE, [])
    (item,) = extract(spec, view).items
    assert item["fields"] == {"name": "Nest box", "price": 12.5, "prices": [9.0], "currency": "EUR",
                              "colors": ["green", "brown"], "brand": "Wren"}
    # the JSON-LD a semantic crawl read already is used as it is (no second read)
    view = page_for(BASE + "nest.html", BASE + "nest.html", 200, {}, parsed.document, PRODUCT_PAGE, [],
                    jsonld=[{"offers": {"price": "1"}}])
    assert extract(spec, view).items[0]["fields"]["price"] == 1.0
    with pytest.raises(ItemSpecError, match="field 'p': invalid jsonld expression"):
        parse_spec('[[item]]\ntype = "x"\n[item.fields]\np = { jsonld = "$.offers[" }')
    with pytest.raises(ItemSpecError, match="give exactly one of css, xpath or jsonld"):
        parse_spec('[[item]]\ntype = "x"\n[item.fields]\np = { jsonld = "a", css = "h1" }')


def test_a_recrawled_page_keeps_only_its_new_triples(tmp_path):
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"), Strategy(structured_data=True))
    url = BASE + "data/catalog.ttl"
    store.add_seeds([url])

    def visit(body: bytes, status: int = 200) -> None:
        (pend,) = store.claim(1)
        triples = parse_rdf(body, url, "turtle") if status == 200 else []
        store.apply([Outcome(pend, PageResult(url=url, final_url=url, status=status, content_type="text/turtle",
                                              digest=str(hash(body)) if status == 200 else None, triples=triples),
                             "ex", 1, False)], Scope(["127.0.0.1"]))

    def stored() -> set:
        with store.engine.connect() as conn:
            return set(conn.execute(sa.text("SELECT predicate, object FROM triple")).all())

    visit(b'<> <http://a/p> "old" .')
    assert stored() == {("http://a/p", "old")}
    assert store.queue_due(every=True) == 1
    visit(b"", status=304)  # not modified: the stored triples stay
    assert stored() == {("http://a/p", "old")}
    store.queue_due(every=True)
    visit(b'<> <http://a/p> "new" .')
    assert stored() == {("http://a/p", "new")}
