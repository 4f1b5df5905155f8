"""Many sites, some with a crawl delay, crawled by ``gridcrawl run`` with default settings.

``python benchmarks/host_share.py [--slow S] [--fast F] [--pages P] [--delay D] [--out FILE]
[gridcrawl run options]`` serves ``S`` generated sites whose robots.txt asks ``Crawl-delay: D``
and names a sitemap that lists every page (as most sites' do), and ``F`` sites without either (``P`` pages each, ``tests/sites.py``), each on its own loopback
address (127.0.3.1, 127.0.3.2, ...: distinct hosts). Every site's home page is a seed. It runs
``gridcrawl run SEEDS... --no-progress --workdir DIR OPTIONS`` once and reports what the user
pays: the whole command's wall-clock seconds, the pages stored, and the second at which the
last page of the sites without a delay was fetched (from the servers' request logs: how long the
slow sites held the fast ones back).

The floor of the wall clock is the slow sites' own: ``P`` pages one ``D`` apart each. An
application's window of grid threads (``max_in_flight``) that one site's thousands of URLs fill
holds every other site back for as long as that site takes to crawl them.
Each figure is one run; run it on each side of a change, alternating, and compare medians.
"""

from __future__ import annotations

import argparse
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from sites import SiteServer, generate_site  # noqa: E402


def main(argv: list[str]) -> int:
    """Run the crawl once; print its figures (and append them to ``--out``); return its exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow", type=int, default=4)
    parser.add_argument("--fast", type=int, default=8)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--delay", type=float, default=0.5, help="the slow sites' Crawl-delay, seconds")
    parser.add_argument("--out", help="append the figures to this file")
    args, options = parser.parse_known_args(argv)
    servers = []
    for i in range(args.slow + args.fast):
        site = generate_site(args.pages, links_per_page=20, seed=i)
        if i < args.slow:
            site.pages["/robots.txt"] = f"User-agent: *\nCrawl-delay: {args.delay}\nSitemap: {{BASE}}/sitemap.xml\n".encode()
            site.pages["/sitemap.xml"] = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                                          '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
                                          + "".join(f"<url><loc>{{BASE}}{path}</loc></url>\n" for path in site.links)
                                          + "</urlset>\n").encode()
            site.types["/sitemap.xml"] = "application/xml"
            site.types["/robots.txt"] = "text/plain"
        servers.append(SiteServer(site, host=f"127.0.3.{i + 1}").start())
    seeds = [server.url("/") for server in servers]
    try:
        with tempfile.TemporaryDirectory(prefix="gridcrawl-bench-share-") as work:
            command = [sys.executable, "-m", "gridcrawl", "run", *seeds, "--no-progress", "--workdir", work, *options]
            started = time.monotonic()
            run = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            wall = time.monotonic() - started
            with sqlite3.connect(Path(work) / "crawl.db") as db:
                (stored,), = db.execute("SELECT count(*) FROM document").fetchall()
    finally:
        for server in servers:
            server.stop()
    done = [max((r.finished for r in server.requests), default=started) - started for server in servers]
    fast_done = max(done[args.slow:], default=0.0)
    line = (f"exit {run.returncode}; wall {wall:.1f} s; {stored} pages stored (of {args.pages * len(servers)}); "
            f"sites without a delay done at {fast_done:.1f} s (each site's last request at "
            f"{', '.join(f'{d:.0f}' for d in done)} s); {args.slow} sites with Crawl-delay {args.delay:g}, "
            f"{args.fast} without, {args.pages} pages each; options: {' '.join(options) or '(none)'}")
    print(line)
    if run.returncode != 0:
        print(run.stderr[-3000:])
    if args.out:
        with open(args.out, "a") as out:
            out.write(line + "\n")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
