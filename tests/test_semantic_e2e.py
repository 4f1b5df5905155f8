"""The semantic crawl end to end: the real manager, executor and client processes crawl local
sites whose right answer is known.

* A site mixing HTML pages (JSON-LD, microdata, RDFa, Open Graph) with Turtle, RDF/XML,
  N-Triples and OWL documents that link to each other through RDF only, plus hostile RDF
  (billion laughs, a huge Turtle file, invalid syntax): every triple of every RDF document is
  stored once and equals what rdflib reads from the file; RDF-only links are followed; the
  hostile documents are recorded as ``rdf_parse`` / ``rdf_limit`` errors and the crawl goes on;
  ``gridcrawl export --triples`` and ``gridcrawl report --crawl-db`` read the result.
* The ontology-focused crawl (``--focus-ontology``) reaches >= 90 % of a bird-watching region's
  pages with fewer than half the fetches breadth-first needs for the same coverage (computed
  over the known link graph, as the keyword focused crawl's test does), pages naming the
  ontology only by IRI (JSON-LD) scoring as on topic.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from rdflib import Graph
from rdflib.compare import isomorphic

from grid import Grid
from sites import Site
from test_semantic import ONTOLOGY, billion_laughs, graph_of
from test_strategies_e2e import bfs_fetches_for, fetched, html, tree

pytestmark = pytest.mark.e2e

TURTLE, RDFXML, NTRIPLES, OWL = "text/turtle", "application/rdf+xml", "application/n-triples", "application/octet-stream"
SDO = "http://schema.org/"
XSD = "http://www.w3.org/2001/XMLSchema#"


def semantic_site() -> tuple[Site, dict[str, str]]:
    """The mixed site; returns it and its RDF documents (path -> rdflib format)."""
    site = Site()
    site.pages["/"] = html("Bird observatory", """
        <script type="application/ld+json">{"@context": "https://schema.org", "@type": "WebSite",
          "name": "Bird observatory", "url": "{BASE}/", "sameAs": "{BASE}/data/catalog.ttl"}</script>
        <div itemscope itemtype="https://schema.org/Person" itemid="{BASE}/#warden">
          <span itemprop="name">Ann Warden</span> <a itemprop="url" href="/about.html">About the warden</a></div>
        <div vocab="http://schema.org/" typeof="Place" resource="{BASE}/#hide"><span property="name">North hide</span></div>
        """).replace(b"<head>", b'<head><meta property="og:title" content="Bird observatory">')
    site.pages["/about.html"] = html("About", '<p>The warden.</p><a href="/odd.html">Rings</a>')
    # numbers neither msgpack nor strict JSON holds (they once killed an executor's worker thread)
    site.pages["/odd.html"] = html("Rings", """<script type="application/ld+json">{"@context": "https://schema.org",
        "@type": "Product", "name": "Ring", "sku": 123456789012345678901234567890, "weight": 1e400}</script>
        <script type="application/ld+json">{"@type": "Offer", "price": </script>""")  # a block cut short
    site.pages["/data/catalog.ttl"] = b"""@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
@prefix ex: <http://example.org/birds#> .
<> rdfs:seeAlso <people.rdf>, <hostile/laughs.rdf>, <hostile/huge.ttl>, <hostile/broken.ttl> ;
   rdfs:label "Catalogue"@en ; ex:count 3 ; ex:curator [ rdfs:label "a volunteer" ] .
"""
    site.types["/data/catalog.ttl"] = TURTLE
    site.pages["/data/people.rdf"] = b"""<?xml version="1.0"?>
<!DOCTYPE rdf:RDF [<!ENTITY owl "http://www.w3.org/2002/07/owl#">]>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:owl="&owl;"
         xmlns:rdfs="http://www.w3.org/2000/01/rdf-schema#" xmlns:foaf="http://xmlns.com/foaf/0.1/">
  <foaf:Person rdf:about="#ann"><foaf:name xml:lang="en">Ann Warden</foaf:name>
    <rdfs:seeAlso rdf:resource="more.nt"/></foaf:Person>
  <owl:Ontology rdf:about=""><owl:imports rdf:resource="onto.owl"/></owl:Ontology>
</rdf:RDF>"""
    site.types["/data/people.rdf"] = RDFXML
    site.pages["/data/more.nt"] = (b"<{BASE}/data/more.nt> <http://www.w3.org/2000/01/rdf-schema#seeAlso> "
                                   b"<{BASE}/rdf-only.html> .\n"
                                   b'<{BASE}/rdf-only.html> <http://purl.org/dc/terms/title> "Only RDF links here" .\n')
    site.types["/data/more.nt"] = NTRIPLES
    site.pages["/data/onto.owl"] = ONTOLOGY  # Turtle in an .owl file served as octets: sniffed
    site.types["/data/onto.owl"] = OWL
    site.pages["/rdf-only.html"] = html("Reached through RDF", "<p>No HTML page links here.</p>")
    site.pages["/data/hostile/laughs.rdf"] = billion_laughs()
    site.types["/data/hostile/laughs.rdf"] = RDFXML
    site.pages["/data/hostile/huge.ttl"] = b"".join(
        b"<#s%d> <http://example.org/p> <#o%d> .\n" % (i, i) for i in range(20_000))
    site.types["/data/hostile/huge.ttl"] = TURTLE
    site.pages["/data/hostile/broken.ttl"] = b"@prefix ex: <http://example.org/> . ex:s ex:p"
    site.types["/data/hostile/broken.ttl"] = TURTLE
    return site, {"/data/catalog.ttl": "turtle", "/data/people.rdf": "xml", "/data/more.nt": "nt",
                  "/data/onto.owl": "turtle"}


def test_semantic_crawl_stores_every_triple_once_and_follows_rdf_links(tmp_path, site_server):
    site, documents = semantic_site()
    server = site_server(site)
    base = server.url("/")[:-1]
    spec = tmp_path / "items.toml"  # item fields read the structured data the executor parsed
    spec.write_text('[[item]]\ntype = "site"\nurl = "/$"\n[item.fields]\n'
                    'name = { jsonld = "$.name", required = true }\nsame = { jsonld = "sameAs", type = "url" }\n')
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "4", env={"GRIDCRAWL_MAX_TRIPLES": "5000"})
        client = grid.start_client(server.url("/"), "--structured-data", "--extract", str(spec))
        assert client.wait(timeout=90) == 0, grid.log("client.log")
    finally:
        grid.stop()
    got = fetched(server)
    assert set(got) == set(site.pages) and set(got.values()) == {1}, got   # RDF-only links followed, once each
    by_url = {}
    for fp, url in grid.query("crawl", "SELECT fingerprint, url FROM document"):
        rows = grid.query("crawl", "SELECT subject, predicate, object, object_kind, datatype, language FROM triple "
                          "WHERE fingerprint = ?", fp)
        by_url[url[len(base):]] = [list(r) for r in rows]
    for path, fmt in documents.items():
        body = site.pages[path].replace(b"{BASE}", base.encode())
        expected = Graph().parse(data=body, format=fmt, publicID=base + path)
        assert len(by_url[path]) == len(expected) and isomorphic(graph_of(by_url[path]), expected), path
    home = by_url["/"]
    for triple in ([base + "/#warden", SDO + "name", "Ann Warden", "literal", None, "en"],     # microdata: lang="en"
                   [base + "/#warden", SDO + "url", base + "/about.html", "uri", None, None],
                   [base + "/#hide", SDO + "name", "North hide", "literal", None, "en"],       # HTML+RDFa: lang="en"
                   [base + "/", "http://ogp.me/ns#title", "Bird observatory", "literal", None, "en"],  # Open Graph
                   ["_:b0", SDO + "sameAs", base + "/data/catalog.ttl", "uri", None, None]):   # JSON-LD
        assert triple in home, triple
    assert len({tuple(t) for t in home}) == len(home)
    assert len([t for t in home if t[1] == "http://ogp.me/ns#title"]) == 1   # read by Open Graph and RDFa: once
    structured = json.loads(grid.query("crawl", "SELECT structured_data FROM document WHERE url = ?", base + "/")[0][0])
    assert structured["json-ld"][0]["@type"] == "WebSite" and structured["errors"] == []
    odd = json.loads(grid.query("crawl", "SELECT structured_data FROM document WHERE url = ?", base + "/odd.html")[0][0])
    assert (odd["json-ld"][0]["sku"], odd["json-ld"][0]["weight"]) == ("123456789012345678901234567890", "1e400")
    assert {SDO + "sku", SDO + "weight"} <= {t[1] for t in by_url["/odd.html"]}  # its triples too
    assert [t[2:5] for t in by_url["/odd.html"] if t[1] == SDO + "weight"] == [["1e400", "literal", XSD + "double"]]
    errors = dict(grid.query("crawl", "SELECT url, error_kind FROM visited_url WHERE error_kind IS NOT NULL"))
    assert errors == {base + "/data/hostile/laughs.rdf": "rdf_parse", base + "/data/hostile/broken.ttl": "rdf_parse",
                      base + "/data/hostile/huge.ttl": "rdf_limit"}
    assert "Traceback" not in grid.log("ex1.log")
    (item,) = grid.query("crawl", "SELECT type, fields FROM item")
    assert item[0] == "site" and json.loads(item[1]) == {"name": "Bird observatory",
                                                         "same": base + "/data/catalog.ttl"}

    out = tmp_path / "triples.nt"
    proc = subprocess.run([sys.executable, "-m", "gridcrawl", "export", "--db", grid.crawl_db, "--triples",
                           "--format", "nt", str(out)], capture_output=True, text=True, timeout=60)
    total = grid.query("crawl", "SELECT COUNT(*) FROM triple")[0][0]
    assert proc.returncode == 0 and f"exported {total} triples" in proc.stderr
    assert len(Graph().parse(out, format="nt")) == total
    proc = subprocess.run([sys.executable, "-m", "gridcrawl", "report", "--crawl-db", grid.crawl_db],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "300"})
    assert proc.returncode == 0, proc.stderr
    lines = {" ".join(line.replace("│", " ").split()) for line in proc.stdout.splitlines()}
    assert f"triples stored {total}" in lines
    assert "RDF documents 4" in lines and "HTML pages with structured data 2" in lines  # "/" and "/odd.html"
    assert "RDF errors: rdf_parse / rdf_limit 2 / 1" in lines
    # the block that does not parse: the page is kept, and the report counts it (it said nothing)
    assert odd["errors"] and odd["errors"][0].startswith("json-ld: invalid JSON")
    assert f"HTML pages with structured-data errors 1, e.g. {base}/odd.html: {odd['errors'][0]}" in lines
    print("\n" + proc.stdout)


# ------------------------------------------------------------------------------------ ontology focus

OFF_TOPIC = {"food": "Recipe", "sport": "Match report", "news": "City news"}
BIRDS = "http://example.org/birds#"


OBSERVERS = ["Anna Berg", "Tomas Lind", "Maja Holm", "Erik Sand", "Ines Vik", "Olle Dahl", "Sara Ek", "Jon Falk",
             "Lena Strand", "Per Ask", "Kim Moberg"]
PLACES = ["the reed bed", "the old quarry", "the harbour wall", "the birch grove", "the north meadow", "the mill pond",
          "the churchyard", "the ferry landing", "the pine ridge", "the salt marsh", "the orchard", "the dune path",
          "the sewage works", "the railway cutting"]
SIGHTINGS = ["two adults feeding, one ringed", "a pair circling low over the water", "three juveniles, calls recorded",
             "one female carrying moss", "a flock of eleven resting", "a lone male singing from the fence",
             "four perched on the wires at dusk", "a pair chasing off a crow", "one bathing in the shallows",
             "six feeding on seed heads", "a ringed adult, code read at twenty metres", "two young begging loudly",
             "one seen briefly before the rain", "a pair inspecting the old wall"]


def bird_site() -> tuple[Site, set[str], set[str]]:
    """A portal with a bird-watching region (/birds/) and a large off-topic region; returns the
    site, the topical paths, and the topical pages that name the ontology only by IRI."""
    site = Site()

    def page(path: str, title: str, body: str, out: list[tuple[str, str]]) -> None:
        site.pages[path] = html(title, body + "<ul>" + "".join(
            f'<li><a href="{href}">{anchor}</a></li>' for href, anchor in out) + "</ul>")
        site.links[path] = list(dict.fromkeys(href for href, _ in out))

    off_kids = tree(5, 3)
    off_path = lambda region, n: f"/{region}/index.html" if n == 0 else f"/{region}/{n}.html"
    for region, noun in OFF_TOPIC.items():
        for n, kids in off_kids.items():
            out = [(off_path(region, k), f"{noun} {k}") for k in kids]
            if region == "news" and n == 0:  # two topical pages only the news knows about
                out += [("/birds/press.html", "Songbird migration route in the press"),
                        ("/birds/press-2.html", "More on the nest box")]
            page(off_path(region, n), f"{noun} {n}", f"<p>Everything about {region}, part {n}.</p>", out)
    topical = {"/birds/press.html", "/birds/press-2.html"}
    for path in topical:
        page(path, "In the press", "<p>A songbird and its nest box, reported.</p>", [])
    iri_only = set()

    def topic_path(n: int) -> str:
        if n == 0:
            return "/birds/index.html"
        return f"/birds/songbird-appendix-{n}.html" if n % 4 == 0 else f"/birds/{n}.html"

    for n, kids in tree(3, 3).items():
        out = [(topic_path(k), f"Appendix {k}" if k % 4 == 0 else f"Nest box notes, part {k}") for k in kids]
        out += [(off_path("food", 1 + n % 5), "Lunch break"), (off_path("sport", 1 + n % 5), "Results")]
        # each entry's own record, as real field notes have: pages of one template that differ only
        # in a number are what the trap detector stops (client/traps.py), and these are not a trap
        record = (f"<p>Logged by {OBSERVERS[n % len(OBSERVERS)]} at {PLACES[n * 7 % len(PLACES)]}, "
                  f"{5 + n % 12}:{n * 13 % 60:02d}; {SIGHTINGS[n * 5 % len(SIGHTINGS)]}.</p>")
        if n % 2:
            body = "<p>A songbird at the nest box, on its migration route.</p>" + record
        else:  # no ontology word in the text: only the IRIs of its JSON-LD say what it is about
            body = ('<p>Field notes, entry %d.</p>%s<script type="application/ld+json">{"@context": '
                    '{"b": "%s"}, "@type": ["b:Bird", "b:Nest"], "b:migrates": {"@id": "http://example.org/routes/%d"}}'
                    "</script>" % (n, record, BIRDS, n))
            iri_only.add(topic_path(n))
        page(topic_path(n), f"Field notes {n}", body, out)
        topical.add(topic_path(n))
    page("/", "City portal", "<p>Welcome to the city portal.</p>", [
        ("/food/index.html", "Cooking"), ("/sport/index.html", "Sports"),
        ("/birds/index.html", "Bird observatory"), ("/news/index.html", "News")])
    return site, topical, iri_only


def test_ontology_focused_crawl_reaches_the_topic_with_far_fewer_fetches(tmp_path, site_server):
    site, topical, iri_only = bird_site()
    ontology = tmp_path / "birds.ttl"
    ontology.write_bytes(ONTOLOGY)
    server = site_server(site)
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "4")
        client = grid.start_client(server.url("/"), "--focus-ontology", str(ontology), "--min-relevance", "0.26")
        assert client.wait(timeout=90) == 0, grid.log("client.log")
    finally:
        grid.stop()
    got = fetched(server)
    found = {path for path in got if path in topical}
    coverage = len(found) / len(topical)
    bfs_needed = bfs_fetches_for(site, topical, coverage)
    print(f"\nontology-focused crawl: {len(found)}/{len(topical)} topical pages ({coverage:.0%}) with "
          f"{sum(got.values())} fetches; breadth-first needs {bfs_needed} fetches for the same coverage "
          f"(site: {len(site.pages)} pages)")
    assert coverage >= 0.9, sorted(topical - found)
    assert sum(got.values()) < bfs_needed / 2
    assert set(got.values()) == {1}
    # the topical pages differ as real ones do: none of them is taken for a template trap
    assert grid.query("crawl", "SELECT COUNT(*) FROM visited_url WHERE error_kind = 'trap'") == [(0,)]
    rows = dict(grid.query("crawl", "SELECT url, relevance FROM document"))
    base = server.url("/")[:-1]
    # a page naming the ontology only by IRI (three terms: Bird, Nest, migrates) is fully on topic
    assert {rows[base + path] for path in iri_only if base + path in rows} == {1.0}
    assert grid.query("crawl", "SELECT value FROM crawl_meta WHERE name = 'structured_data'") == [("1",)]
    assert grid.query("crawl", "SELECT COUNT(*) FROM triple WHERE object = ?", BIRDS + "Nest")[0][0] >= len(iri_only) - 2


def test_bad_semantic_options_are_one_line_errors(tmp_path):
    db = f"sqlite:///{tmp_path / 'c.db'}"
    bad = tmp_path / "bad.ttl"
    bad.write_text("@prefix : <http://a/> . :x :y")
    for args, message in (([str(bad)], "does not parse"), ([str(tmp_path / "none.owl")], "cannot read the ontology")):
        proc = subprocess.run([sys.executable, "-m", "gridcrawl.client", "--manager", "tcp://127.0.0.1:9", "--db", db,
                               "http://127.0.0.1:9/", "--focus-ontology", *args], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "gridcrawl.client", "--manager", "tcp://127.0.0.1:9", "--db", db,
                           "http://127.0.0.1:9/", "--focus", "bird", "--focus-ontology", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--focus and --focus-ontology exclude each other" in proc.stderr
    assert not (tmp_path / "c.db").exists(), "a refused client creates no crawl database"
    subprocess.run([sys.executable, "-m", "gridcrawl", "db", "init", "--db", db, "--kind", "crawl"], check=True,
                   capture_output=True, timeout=60)
    proc = subprocess.run([sys.executable, "-m", "gridcrawl", "export", "--db", db, "--triples", "--format", "warc",
                           "-"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown triple format 'warc' (use nt or jsonl)" in proc.stderr


# ----------------------------------------------------------------------- RDF with a generic type

def test_rdf_served_with_a_generic_type_is_read_and_its_links_followed(tmp_path, site_server):
    """Turtle as text/plain (a ``.ttl`` file and one without a suffix), RDF/XML as
    application/xml and JSON-LD as application/json: each document's triples are stored and the
    page only it links to is crawled; a text/plain file that is no RDF stays a plain page."""
    site = Site()
    site.pages["/"] = html("Bird data", '<a href="/data/birds.ttl">Turtle</a> <a href="/data/birds">Dump</a> '
                                        '<a href="/data/people">People</a> <a href="/data/notes.json">Notes</a> '
                                        '<a href="/readme">Read me</a> <a href="/data/old.rdf">Moved</a>')
    documents = {
        "/data/birds.ttl": (b"@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .\n"
                            b'<> rdfs:seeAlso <../from-ttl.html> ; rdfs:label "Birds"@en .\n', "text/plain", "turtle"),
        "/data/birds": (b"# a dump\n<{BASE}/data/birds> <http://www.w3.org/2000/01/rdf-schema#seeAlso> "
                        b"<{BASE}/from-dump.html> .\n", "text/plain; charset=utf-8", "nt"),
        "/data/people": (b'<?xml version="1.0"?>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
                         b'xmlns:foaf="http://xmlns.com/foaf/0.1/"><foaf:Person rdf:about="#ann">'
                         b'<foaf:homepage rdf:resource="/from-xml.html"/></foaf:Person></rdf:RDF>',
                         "application/xml", "xml"),
        "/data/notes.json": (b'{"@context": {"@vocab": "http://example.org/birds#", "see": {"@type": "@id"}}, '
                             b'"@id": "", "see": "/from-json.html", "count": 3}', "application/json", "json-ld"),
    }
    for path, (body, media, _) in documents.items():
        site.pages[path], site.types[path] = body, media
    for name in ("ttl", "dump", "xml", "json"):
        site.pages[f"/from-{name}.html"] = html(f"Reached from {name}", "<p>Only RDF links here.</p>")
    site.pages["/readme"] = b"Bird data\n<See> the files in /data.\n"
    site.types["/readme"] = "text/plain"
    site.pages["/data/old.rdf"] = html("Moved", "<p>The data moved to /data/people.</p>")  # HTML at an RDF suffix
    server = site_server(site)
    base = server.url("/")[:-1]
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        client = grid.start_client(server.url("/"), "--structured-data")
        assert client.wait(timeout=60) == 0, grid.log("client.log")
    finally:
        grid.stop()
    got = fetched(server)
    assert set(got) == set(site.pages) and set(got.values()) == {1}, got  # every RDF-only page reached, once
    assert grid.query("crawl", "SELECT url, error_kind FROM visited_url WHERE error_kind IS NOT NULL") == []
    for path, (body, _, fmt) in documents.items():
        (fp,) = grid.query("crawl", "SELECT fingerprint FROM document WHERE url = ?", base + path)[0]
        rows = [list(r) for r in grid.query("crawl", "SELECT subject, predicate, object, object_kind, datatype, "
                                                     "language FROM triple WHERE fingerprint = ?", fp)]
        expected = Graph().parse(data=body.replace(b"{BASE}", base.encode()), format=fmt, publicID=base + path)
        assert len(rows) == len(expected) > 0 and isomorphic(graph_of(rows), expected), path
    (fp,) = grid.query("crawl", "SELECT fingerprint FROM document WHERE url = ?", base + "/readme")[0]
    assert grid.query("crawl", "SELECT COUNT(*) FROM triple WHERE fingerprint = ?", fp) == [(0,)]
    assert "Traceback" not in grid.log("ex1.log")

    # gridcrawl report counts the four documents read as RDF, sniffed or by suffix, and not the
    # HTML page at /data/old.rdf (by type or suffix alone: 2, birds.ttl and old.rdf)
    proc = subprocess.run([sys.executable, "-m", "gridcrawl", "report", "--crawl-db", grid.crawl_db],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "300"})
    assert proc.returncode == 0, proc.stderr
    lines = {" ".join(line.replace("│", " ").split()) for line in proc.stdout.splitlines()}
    assert "RDF documents 4" in lines, proc.stdout


def test_the_rdf_documents_count_is_what_was_read_as_rdf_on_every_back_end(db_url):
    """``semantic_summary``'s ``rdf_documents`` on SQLite, PostgreSQL and MariaDB (servers that
    do not answer are skipped), of documents stored by :meth:`CrawlStore.apply`: a Turtle
    document served as text/turtle with no triples (counted: read as RDF), N-Triples sniffed
    from text/plain and RDF/XML sniffed from application/xml (counted: their triples), an HTML
    page with RDFa triples, an HTML page at ``/old.rdf`` and a text/plain page with none (not
    counted). By type or suffix alone it was 2: the empty Turtle file and the HTML page."""
    from gridcrawl.client.store import CrawlStore, Outcome
    from gridcrawl.db import open_database
    from gridcrawl.protocol import PageResult
    from gridcrawl.report import semantic_summary
    from gridcrawl.urls import canonical_url
    store = CrawlStore(open_database(db_url))
    store.strategy.structured_data = True
    base = "http://127.0.0.1:1"
    triple = lambda s: [[f"{base}{s}", "http://purl.org/dc/terms/title", "t", "literal", None, None]]
    pages = {"/empty.ttl": dict(content_type="text/turtle"),
             "/dump": dict(content_type="text/plain; charset=utf-8", triples=triple("/dump")),
             "/people": dict(content_type="application/xml", triples=triple("/people")),
             "/page.html": dict(content_type="text/html", encoding="utf-8", title="p", triples=triple("/page.html")),
             "/old.rdf": dict(content_type="text/html; charset=utf-8", encoding="utf-8", title="moved"),
             "/readme": dict(content_type="text/plain")}
    urls = {canonical_url(base + path): path for path in pages}
    store.add_seeds(list(urls))
    pendings = store.claim(10)
    outcomes = [Outcome(x, PageResult(url=x.url, final_url=x.url, status=200, size=10, digest=f"{i:064x}",
                                      **pages[urls[x.url]]), "ex", 1, False) for i, x in enumerate(pendings)]
    done = store.apply(outcomes, store.scope(list(urls), [], -1))
    assert (done["documents"], done["triples"]) == (6, 3)
    summary = semantic_summary(store.engine)
    assert (summary.rdf_documents, summary.pages_with_triples) == (3, 3)
    store.engine.dispose()
