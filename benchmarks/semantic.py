"""Benchmark of the semantic crawl's parsers: triples per second (gridcrawl.semantic).

This module owns two figures:

* **in process**: :func:`gridcrawl.semantic.parse_rdf` on generated Turtle, RDF/XML,
  N-Triples and JSON-LD documents (``--triples`` each), and
  :func:`gridcrawl.semantic.extract_structured` on HTML pages carrying JSON-LD, microdata and
  RDFa; the median of ``--rounds`` runs, in triples per wall-clock second and per CPU second
  of the process (the stable figure on a shared machine);
* **on an executor** (``--grid``): the real manager, one executor and the client crawl a local
  site of ``--documents`` Turtle documents (linked through ``rdfs:seeAlso``) plus as many HTML
  pages with structured data, with ``--structured-data``; the figure is the triples stored over
  the parse seconds the executor reported for the documents that gave them (what
  ``gridcrawl report --crawl-db`` prints as "triples per parse second").

Run ``python benchmarks/semantic.py [--grid]``. Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

import lxml.html  # noqa: E402
from rdflib import Graph  # noqa: E402

from gridcrawl.semantic import Limits, extract_structured, parse_rdf  # noqa: E402

BASE = "http://127.0.0.1:8000"


def turtle_document(n: int, index: int = 0, links: int = 1) -> bytes:
    """A Turtle document of about ``n`` triples (labels, numbers, language tags, IRIs), with
    ``rdfs:seeAlso`` links to the next ``links`` documents."""
    lines = ["@prefix ex: <http://example.org/v#> .", "@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> ."]
    lines += [f"<> rdfs:seeAlso <{index + k}.ttl> ." for k in range(1, links + 1)]
    for i in range(n // 4):
        lines.append(f'ex:item{i} a ex:Thing ; rdfs:label "item {i}"@en ; ex:size {i} ; ex:next ex:item{i + 1} .')
    return "\n".join(lines).encode()


def html_page(i: int) -> bytes:
    """An HTML page with a JSON-LD product, a microdata person and an RDFa event (about 20 triples)."""
    return f"""<html><head><title>Page {i}</title><meta property="og:title" content="Page {i}">
<script type="application/ld+json">{{"@context": "https://schema.org", "@type": "Product", "name": "Box {i}",
 "sku": "{i}", "url": "{BASE}/p/{i}.html", "offers": {{"@type": "Offer", "price": "{i}.50", "priceCurrency": "EUR"}}}}</script>
</head><body><div itemscope itemtype="https://schema.org/Person"><span itemprop="name">Ann {i}</span>
<span itemprop="jobTitle">Warden</span><a itemprop="url" href="/ann/{i}">Ann</a></div>
<div vocab="http://schema.org/" typeof="Event"><span property="name">Walk {i}</span>
<span property="startDate">2026-01-0{1 + i % 9}</span></div><p>{"text " * 200}</p></body></html>""".encode()


def _rate(work, rounds: int) -> tuple[int, float, float]:
    """(triples per run, median triples per wall-clock second, median triples per CPU second of
    this process) of ``work() -> triples``. On a loaded machine the CPU figure is the stable one."""
    times, cpu, count = [], [], 0
    for _ in range(rounds):
        started, cpu_started = time.perf_counter(), time.process_time()
        count = work()
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    return count, count / statistics.median(times), count / max(statistics.median(cpu), 1e-9)


def in_process(triples: int = 20_000, pages: int = 50, rounds: int = 3) -> list[tuple[str, int, float, float]]:
    """Rows ``(what, triples per run, triples per second, triples per CPU second)`` of the
    in-process parsers."""
    limits = Limits(max_bytes=1 << 30, max_triples=10 * triples, deadline=600)
    ttl = turtle_document(triples)
    graph = Graph().parse(data=ttl, format="turtle", publicID=BASE + "/0.ttl")
    docs = {"turtle": ttl, "xml": graph.serialize(format="xml").encode(),
            "nt": graph.serialize(format="nt").encode(), "json-ld": graph.serialize(format="json-ld").encode()}
    rows = []
    for fmt, body in docs.items():
        rows.append((f"parse_rdf {fmt} ({len(body) // 1024} KiB)",
                     *_rate(lambda: len(parse_rdf(body, BASE + "/0", fmt, limits)), rounds)))
    bodies = [html_page(i) for i in range(pages)]

    def html_work() -> int:
        total = 0
        for i, body in enumerate(bodies):
            text = body.decode()
            total += len(extract_structured(lxml.html.document_fromstring(text), text, f"{BASE}/p/{i}.html").triples)
        return total
    rows.append((f"extract_structured, {pages} HTML pages", *_rate(html_work, rounds)))
    return rows


def on_executor(documents: int = 40, triples: int = 2_000) -> dict:
    """Crawl a local site of ``documents`` Turtle documents and HTML pages through the real grid
    with ``--structured-data``; return the crawl's :func:`gridcrawl.report.semantic_summary`
    figures and the wall-clock seconds."""
    from grid import Grid
    from sites import Site, SiteServer
    from gridcrawl.db import open_database
    from gridcrawl.report import semantic_summary

    site = Site()
    for i in range(documents):
        site.pages[f"/{i}.ttl"] = turtle_document(triples, i, links=1 if i + 1 < documents else 0)
        site.types[f"/{i}.ttl"] = "text/turtle"
        site.pages[f"/p/{i}.html"] = html_page(i)
    site.pages["/"] = b"<html><body>" + b"".join(b'<a href="/p/%d.html">p</a>' % i for i in range(documents)) + \
        b'<a href="/0.ttl">data</a></body></html>'
    server = SiteServer(site).start()
    with tempfile.TemporaryDirectory() as tmp:
        grid = Grid(Path(tmp))
        try:
            grid.start_manager()
            grid.start_executor("ex1", "--threads", "4")
            started = time.monotonic()
            client = grid.start_client(server.url("/"), "--structured-data")
            client.wait(timeout=600)
            seconds = time.monotonic() - started
            summary = semantic_summary(open_database(grid.crawl_db))
        finally:
            grid.stop()
            server.stop()
    return {"triples": summary.triples, "pages_with_triples": summary.pages_with_triples,
            "triples_per_parse_second": round(summary.triples_per_second or 0), "crawl_seconds": round(seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    """Print the in-process table and, with ``--grid``, the executor figure (JSON)."""
    ap = argparse.ArgumentParser(description="Triples per second of the semantic crawl's parsers.")
    ap.add_argument("--triples", type=int, default=20_000, help="triples per RDF document (in process)")
    ap.add_argument("--pages", type=int, default=50, help="HTML pages with structured data (in process)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--grid", action="store_true", help="also crawl through the real grid")
    ap.add_argument("--documents", type=int, default=40, help="Turtle documents of the grid crawl")
    args = ap.parse_args(argv)
    import os
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'what':48} {'triples':>9} {'triples/s':>11} {'per CPU s':>11}")
    for what, n, rate, cpu_rate in in_process(args.triples, args.pages, args.rounds):
        print(f"{what:48} {n:9d} {rate:11.0f} {cpu_rate:11.0f}")
    if args.grid:
        print(json.dumps(on_executor(args.documents)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
