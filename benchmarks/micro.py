"""Micro-benchmark of the parse hot path: link extraction and canonicalisation per page.

This module owns the per-page cost figures that the profiling step of issue 8 needs: how many
microseconds :func:`gridcrawl.executor.parse.parse_page` spends on one documentation-like page
(about 80 KB, about 300 links) and how that splits into decoding, the lxml parse, and link
extraction (``<a href>`` lookup, anchor text, :func:`gridcrawl.urls.canonical_url`).

Two cache states of ``canonical_url`` are measured, because its LRU caches dominate the cost:

* warm: the same pages parsed again and again, as in a long crawl of one site where navigation
  links repeat on every page (the steady state of an executor);
* cold: the URL caches cleared before every page (each link canonicalised from scratch, the cost
  on a page whose links were never seen before).

Pages come from ``tests/sites.py`` (``generate_site``, the same generator the benchmark's
``cpu`` scenario serves) and, when Debian's python3-doc is installed, from the real Python
documentation (``/usr/share/doc/python3-doc/html``).

Run ``python benchmarks/micro.py`` (``--pages``, ``--links``, ``--page-bytes``, ``--rounds``);
it prints a table of microseconds per page and per link. Nothing is written to disk and no
network traffic is made.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

from gridcrawl import urls as gurls  # noqa: E402
from gridcrawl.executor import parse as gparse  # noqa: E402

#: Base URL written into the generated pages' absolute links (never contacted).
BASE = "http://127.0.0.1:8000"
#: Where the Python documentation lives when python3-doc is installed.
DOCS_ROOT = "/usr/share/doc/python3-doc/html"

__all__ = ["MicroResult", "clear_url_caches", "docs_pages", "generated_pages", "measure", "main"]


@dataclass
class MicroResult:
    """Costs measured on one set of pages, in microseconds (median over rounds).

    Attributes:
      name: what was measured, e.g. ``"generated, warm"``.
      pages: pages in the set; links: mean links per page (distinct canonical links returned).
      hrefs: mean ``<a>``/``<area>`` elements with ``href`` per page (what canonical_url sees).
      kb: mean page size in kilobytes (1000 bytes).
      parse_page_us: whole :func:`parse_page` per page.
      decode_us: :func:`decode_html` per page; lxml_us: building the lxml document per page.
      extract_us: :func:`extract_links` per page (href lookup, anchor text, canonical_url, dedup).
      canonical_us: ``canonical_url(href, base)`` alone for every href of a page, per page.
      anchor_us: anchor text alone (``text_content`` and whitespace collapsing) of every link
        element of a page, per page.
      per_link_us: ``canonical_us / hrefs``.
    """

    name: str
    pages: int
    links: float
    hrefs: float
    kb: float
    parse_page_us: float
    decode_us: float
    lxml_us: float
    extract_us: float
    canonical_us: float
    anchor_us: float
    per_link_us: float


def clear_url_caches() -> None:
    """Empty every LRU cache of :mod:`gridcrawl.urls` (the cold state)."""
    for name in dir(gurls):
        fn = getattr(gurls, name)
        if callable(fn) and hasattr(fn, "cache_clear"):
            fn.cache_clear()


def generated_pages(n: int = 40, links: int = 300, page_bytes: int = 80_000, site_pages: int = 2000,
                    seed: int = 0) -> list[tuple[str, bytes, str]]:
    """Return ``n`` pages of a generated docs-like site as ``(url, body, content_type)``.

    The site is ``generate_site(site_pages, links, seed, page_bytes)`` from tests/sites.py with
    ``{BASE}`` replaced by :data:`BASE`; pages ``/p/1.html`` .. ``/p/n.html`` are returned.
    """
    from sites import generate_site

    site = generate_site(max(site_pages, n + 1), links_per_page=links, seed=seed, page_bytes=page_bytes)
    out = []
    for i in range(1, n + 1):
        path = f"/p/{i}.html"
        out.append((BASE + path, site.pages[path].replace(b"{BASE}", BASE.encode()), "text/html; charset=utf-8"))
    return out


def docs_pages(n: int = 40, root: str = DOCS_ROOT) -> list[tuple[str, bytes, str]]:
    """Return ``n`` pages of the Python docs, evenly spaced in path order, as ``(url, body, content_type)``.

    URLs are made up under :data:`BASE` from the file paths. Empty when the docs are missing.
    """
    if not os.path.isdir(root):
        return []
    every = sorted(glob.glob(os.path.join(root, "**", "*.html"), recursive=True))
    if not every:
        return []
    step = max(1, len(every) // n)
    files = every[::step][:n]
    out = []
    for f in files:
        rel = os.path.relpath(f, root).replace(os.sep, "/")
        with open(f, "rb") as fh:
            out.append((f"{BASE}/{rel}", fh.read(), "text/html"))
    return out


def _median_us(fn, pages, rounds: int, before=None) -> float:
    """Median over ``rounds`` of the mean microseconds ``fn(page)`` takes per page."""
    samples = []
    for _ in range(rounds):
        total = 0.0
        for page in pages:
            if before is not None:
                before()
            t0 = time.perf_counter()
            fn(page)
            total += time.perf_counter() - t0
        samples.append(total / len(pages) * 1e6)
    return statistics.median(samples)


def measure(name: str, pages: list[tuple[str, bytes, str]], rounds: int = 5, cold: bool = False) -> MicroResult:
    """Measure :func:`parse_page` and its parts on ``pages`` (see :class:`MicroResult`).

    Args:
      name: label of the row.
      pages: ``(url, body, content_type)`` triples.
      rounds: repetitions; the median round is reported.
      cold: clear the URL caches before every page (else they are warmed first).
    Returns: a :class:`MicroResult`.
    Raises: ValueError if ``pages`` is empty.
    """
    if not pages:
        raise ValueError("no pages to measure")
    before = clear_url_caches if cold else None
    decoded = [(u, gparse.decode_html(b, ct)[0]) for u, b, ct in pages]
    roots = [(u, gparse._parse_document(t)) for u, t in decoded]
    hrefs = [(u, [e.get("href") for e in r.iter("a", "area") if e.get("href") is not None]) for u, r in roots]
    # warm the caches (and lxml) once
    for u, b, ct in pages:
        gparse.parse_page(b, u, ct)

    def canon(item):
        base, refs = item
        for h in refs:
            try:
                gurls.canonical_url(h, base)
            except gurls.InvalidURL:
                pass

    parse_us = _median_us(lambda p: gparse.parse_page(p[1], p[0], p[2]), pages, rounds, before)
    decode_us = _median_us(lambda p: gparse.decode_html(p[1], p[2]), pages, rounds)
    lxml_us = _median_us(lambda p: gparse._parse_document(p[1]), decoded, rounds)
    extract_us = _median_us(lambda p: gparse.extract_links(p[1], p[0]), roots, rounds, before)
    canonical_us = _median_us(canon, hrefs, rounds, before)
    elements = [[e for e in r.iter("a", "area") if e.get("href") is not None] for _, r in roots]
    anchor_us = _median_us(lambda els: [gparse._anchor_text(e) for e in els], elements, rounds)
    n_links = statistics.mean(len(gparse.parse_page(b, u, ct).links) for u, b, ct in pages)
    n_hrefs = statistics.mean(len(h) for _, h in hrefs)
    kb = statistics.mean(len(b) for _, b, _ in pages) / 1000
    return MicroResult(name, len(pages), n_links, n_hrefs, kb, parse_us, decode_us, lxml_us, extract_us,
                       canonical_us, anchor_us, canonical_us / max(n_hrefs, 1))


def render(results: list[MicroResult]) -> str:
    """Return the results as a Markdown table."""
    head = ("| pages | n | KB/page | hrefs/page | links/page | parse_page µs | decode µs | lxml µs | "
            "extract_links µs | canonical_url µs | anchor text µs | µs/href |")
    lines = [head, "|" + "---|" * 12]
    for r in results:
        lines.append(f"| {r.name} | {r.pages} | {r.kb:.0f} | {r.hrefs:.0f} | {r.links:.0f} | {r.parse_page_us:,.0f} | "
                     f"{r.decode_us:,.0f} | {r.lxml_us:,.0f} | {r.extract_us:,.0f} | {r.canonical_us:,.0f} | {r.anchor_us:,.0f} | "
                     f"{r.per_link_us:.2f} |")
    return "\n".join(lines)


def run(n: int = 40, links: int = 300, page_bytes: int = 80_000, rounds: int = 5) -> list[MicroResult]:
    """Measure generated pages (warm and cold caches) and, when installed, the Python docs."""
    results = []
    gen = generated_pages(n, links, page_bytes)
    results.append(measure("generated, warm", gen, rounds))
    results.append(measure("generated, cold", gen, rounds, cold=True))
    docs = docs_pages(n)
    if docs:
        results.append(measure("python docs, warm", docs, rounds))
        results.append(measure("python docs, cold", docs, rounds, cold=True))
    return results


def main(argv: list[str] | None = None) -> int:
    """Command line: print the micro-benchmark table. Returns the exit status."""
    ap = argparse.ArgumentParser(description="Per-page cost of parse_page: link extraction and canonicalisation.")
    ap.add_argument("--pages", type=int, default=40, help="pages per set (default 40)")
    ap.add_argument("--links", type=int, default=300, help="links per generated page (default 300)")
    ap.add_argument("--page-bytes", type=int, default=80_000, help="bytes per generated page (default 80000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported (default 5)")
    args = ap.parse_args(argv)
    results = run(args.pages, args.links, args.page_bytes, args.rounds)
    print(f"Python {sys.version.split()[0]}; median of {args.rounds} rounds; µs = microseconds per page")
    print(render(results))
    print("warm: URL caches filled (steady state of a crawl); cold: caches cleared before every page.")
    print("hrefs: <a>/<area> elements with href; links: distinct canonical http(s) links returned.")
    print("extract_links = canonical_url + anchor text + element walk and dedup; µs/href = canonical_url / hrefs.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
