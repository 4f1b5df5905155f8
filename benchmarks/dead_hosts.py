"""Live sites and hosts that never answer, crawled by ``gridcrawl run`` with default settings.

``python benchmarks/dead_hosts.py [--live N] [--dead D] [--urls K] [--out FILE] [gridcrawl run options]``
serves ``N`` generated sites (30 pages each, ``tests/sites.py``), each on its own loopback
address (127.0.1.1, 127.0.1.2, ...: distinct hosts), and ``D`` *dead* hosts (127.0.2.1, ...)
that accept TCP connections and never send a byte, as a firewall that lets the SYN through or
a server stuck before its first byte. Every live site's home page and ``K`` URLs of every dead
host are seeds. It runs ``gridcrawl run SEEDS... --no-progress --workdir DIR OPTIONS`` once and
reports what the user pays and what the dead hosts cost:

* the whole command's wall-clock seconds and the pages stored;
* the connections the dead hosts accepted (each a robots.txt fetch that waited out the
  executor's deadline, 30 s by default);
* the *worker-seconds* the grid spent on dead hosts and on live ones: the sum over the
  manager's ``attempt`` rows of (finished − assigned), by the thread's host — the time an
  executor's worker slot was held.

Each figure is one run; run it on each side of a change, alternating, and compare medians.
Issue 23's notes and ``docs/politeness.md`` ("First contact") cite its results files.
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

from sites import Blackhole, SiteServer, generate_site  # noqa: E402


def worker_seconds(manager_db: Path, dead_hosts: set[str]) -> tuple[float, float]:
    """Seconds of executor worker slots held by attempts of threads of ``dead_hosts`` and of
    the other hosts: the sum of (time_finished or time_assigned) − time_assigned."""
    with sqlite3.connect(manager_db) as db:
        rows = db.execute("SELECT t.host, (julianday(a.time_finished) - julianday(a.time_assigned)) * 86400 "
                          "FROM attempt a JOIN thread t ON t.internal_thread_id = a.internal_thread_id "
                          "WHERE a.time_finished IS NOT NULL").fetchall()
    dead = sum(seconds for host, seconds in rows if host in dead_hosts)
    return dead, sum(seconds for _, seconds in rows) - dead


def main(argv: list[str]) -> int:
    """Run the crawl once; print its figures (and write them to ``--out``); return its exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--live", type=int, default=20)
    parser.add_argument("--dead", type=int, default=4)
    parser.add_argument("--urls", type=int, default=50, help="seed URLs per dead host")
    parser.add_argument("--out", help="append the figures to this file")
    args, options = parser.parse_known_args(argv)
    servers = [SiteServer(generate_site(30, links_per_page=4, seed=i), host=f"127.0.1.{i + 1}").start()
               for i in range(args.live)]
    holes = [Blackhole(f"127.0.2.{i + 1}") for i in range(args.dead)]
    seeds = [server.url("/") for server in servers]
    seeds += [f"http://{hole.host}:{hole.port}/page{k}.html" for hole in holes for k in range(args.urls)]
    try:
        with tempfile.TemporaryDirectory(prefix="gridcrawl-bench-dead-") as work:
            command = [sys.executable, "-m", "gridcrawl", "run", *seeds, "--no-progress", "--workdir", work, *options]
            started = time.monotonic()
            run = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            wall = time.monotonic() - started
            with sqlite3.connect(Path(work) / "crawl.db") as db:
                (stored,), = db.execute("SELECT count(*) FROM document").fetchall()
            dead_s, live_s = worker_seconds(Path(work) / "manager.db", {hole.host for hole in holes})
    finally:
        for server in servers:
            server.stop()
        connections = sum(len(hole.accepted) for hole in holes)
        for hole in holes:
            hole.close()
    line = (f"exit {run.returncode}; wall {wall:.1f} s; {stored} pages stored (of {30 * args.live}); "
            f"{connections} connections to the {args.dead} dead hosts ({args.urls} seeds each); "
            f"worker-seconds: dead hosts {dead_s:.0f}, live hosts {live_s:.0f}; options: {' '.join(options) or '(none)'}")
    print(line)
    if run.returncode != 0:
        print(run.stderr[-3000:])
    if args.out:
        with open(args.out, "a") as out:
            out.write(line + "\n")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
