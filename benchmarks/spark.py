"""``gridcrawl spark`` (local mode) against ``gridcrawl run --executors 2`` on a real site.

This module owns the Spark benchmark of issue 18: it serves the PostgreSQL 15 documentation
(Debian's ``postgresql-doc-15``, about 1,170 pages) with nginx on 127.0.0.1 (``tests/docsite.py``),
crawls it once with ``gridcrawl spark --master local[*]`` and once with ``gridcrawl run
--executors 2`` in the same run, each as a process tree of its own sampled with psutil
(:class:`run.TreeSampler`), and prints, and writes to ``benchmarks/results/spark-<date>.md``:
pages, documents, seconds (the command's wall time, and the crawl's own: the Spark driver's
summary line from the first layer to the last; the grid's first thread submitted to the last
finished), pages/s, the per-stage times of every Spark layer (the driver's layer lines), and the
peak RSS of each role: Spark's ``driver`` (the Python process), the ``spark JVM`` (driver and
local executor in one JVM), the ``spark Python worker``s (largest one); the grid's client,
manager and executors. Measurements, not tests: nothing here asserts a time.

Usage: ``python benchmarks/spark.py [--root /usr/share/doc/postgresql-doc-15/html] [--master local[*]]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from docsite import docs_available, serve_python_docs  # noqa: E402
from run import MB, _run_tree, read_gridcrawl_dbs  # noqa: E402

PG_DOCS = "/usr/share/doc/postgresql-doc-15/html"
LAYER = re.compile(r"^layer .*$", re.M)
SUMMARY = re.compile(r"^(\d+) pages in ([\d.]+) s \(([\d.]+) pages/s\), (\d+) layers", re.M)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=PG_DOCS, help="folder of HTML docs to serve")
    ap.add_argument("--master", default="local[*]", help="Spark master of the Spark crawl")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds one crawl may take")
    args = ap.parse_args(argv)
    if why := docs_available(args.root):
        print(f"cannot run: {why} (apt-get install postgresql-doc-15 nginx-light)", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="gc-spark-bench-"))
    rows, layers = [], ""
    with serve_python_docs(root=args.root) as base:
        seed = f"{base}/index.html"
        spark_db = scratch / "spark.db"
        cmd = [sys.executable, "-m", "gridcrawl", "spark", seed, "--db", f"sqlite:///{spark_db}",
               "--master", args.master]
        status, wall, sampler, error, _, _, _ = _run_tree(cmd, "driver", args.timeout, scratch / "spark.out")
        out = (scratch / "spark.out").read_text(errors="replace")
        summary = SUMMARY.search(out)
        if status != 0 or summary is None:
            print(f"gridcrawl spark failed ({error or status}):\n{out[-3000:]}", file=sys.stderr)
            return 1
        pages, seconds = int(summary.group(1)), float(summary.group(2))
        layers = "\n".join(LAYER.findall(out))
        import sqlite3
        with sqlite3.connect(spark_db) as conn:
            docs = conn.execute("SELECT count(*) FROM document").fetchone()[0]
        rows.append(("gridcrawl spark " + args.master, pages, docs, wall, seconds, sampler.peak_rss))

        workdir = scratch / "grid"
        cmd = [sys.executable, "-m", "gridcrawl", "run", seed, "--executors", "2", "--workdir", str(workdir),
               "--no-progress"]
        status, wall, sampler, error, _, _, _ = _run_tree(cmd, "client", args.timeout, scratch / "grid.out")
        if status != 0:
            print(f"gridcrawl run failed ({error or status})", file=sys.stderr)
            return 1
        figures = read_gridcrawl_dbs(workdir)
        rows.append(("gridcrawl run --executors 2", figures["pages"], figures["documents"], wall,
                     figures["crawl_seconds"], sampler.peak_rss))

    lines = [f"# gridcrawl spark vs gridcrawl run — {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"Site: {args.root} served by nginx on 127.0.0.1; seed `index.html`; page bodies stored; SQLite.", "",
             "| crawl | pages | documents | wall s | crawl s | pages/s (crawl) | peak RSS MB by process role |",
             "|---|---|---|---|---|---|---|"]
    for name, pages, docs, wall, seconds, peaks in rows:
        rss = ", ".join(f"{role} {peak / MB:.0f}" for role, peak in sorted(peaks.items()))
        lines.append(f"| {name} | {pages} | {docs} | {wall:.1f} | {seconds:.1f} | {pages / max(seconds, 1e-9):.1f} | {rss} |")
    lines += ["", "Spark layers (the driver's lines):", "", "```", layers, "```", ""]
    text = "\n".join(lines)
    print(text)
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    path = results / f"spark-{dt.datetime.now(dt.timezone.utc):%Y%m%d-%H%M}.md"
    path.write_text(text)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
