"""CPU per page of the whole grid against the 16-thread single-process crawler (issue 23, item 2).

    python benchmarks/cpu_per_page.py [--pairs 3] [--port 8500] [--executors 4] [--out FILE]

Serves the Python documentation with nginx (``tests/docsite.py``), then runs, side by side and
alternating, ``gridcrawl run SEED --executors N --concurrent-requests-per-host 16 --no-sitemaps``
(a fresh work folder each time) and ``python benchmarks/baselines.py threads SEED`` (16 threads,
requests + lxml). Each command's CPU is the user + system seconds of the process and every
descendant it waited for (``os.wait4``'s resource usage: the manager, the executors and the
client of ``gridcrawl run``), divided by the pages it visited (the grid's ``visited_url`` rows,
the baseline's own count). Prints and writes (``--out``, Markdown) every pair and the median of
the ratios grid CPU per page / baseline CPU per page; the target is ≤ 1.1. Each pair also
runs the grid with ``--max-pages 1``: its CPU is the grid's fixed cost (start-up, shut-down), and
"net of start-up" is the ratio of (grid CPU − that) per page beyond the first.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def measured(argv: list[str], **kw) -> tuple[float, float, str]:
    """Run ``argv``; return (wall seconds, CPU seconds of it and its waited-for descendants, stdout)."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, **kw)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited with {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, out


def grid(seed: str, executors: int, max_pages: int = 0) -> tuple[float, float, int]:
    """(wall s, CPU s, pages) of one ``gridcrawl run`` of ``seed`` in a fresh work folder."""
    with tempfile.TemporaryDirectory() as tmp:
        wall, cpu, _ = measured([sys.executable, "-m", "gridcrawl", "run", seed, "--executors", str(executors),
                                 "--concurrent-requests-per-host", "16", "--no-sitemaps", "--workdir", tmp,
                                 "--max-pages", str(max_pages)])
        with sqlite3.connect(f"{tmp}/crawl.db") as db:
            pages = db.execute("SELECT COUNT(*) FROM visited_url").fetchone()[0]
    return wall, cpu, pages


def baseline(seed: str) -> tuple[float, float, int]:
    """(wall s, CPU s, pages) of the 16-thread single-process crawler on ``seed``."""
    wall, cpu, out = measured([sys.executable, str(ROOT / "benchmarks" / "baselines.py"), "threads", seed,
                               "--threads", "16", "--json"])
    return wall, cpu, json.loads(out)["pages"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--port", type=int, default=8500)
    parser.add_argument("--executors", type=int, default=4)
    parser.add_argument("--label", default="", help="what code was measured (goes in the results file)")
    parser.add_argument("--out", type=Path, help="Markdown results file")
    args = parser.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user runs it: from the bytecode cache
    from docsite import serve_python_docs
    rows, ratios, nets = [], [], []
    with serve_python_docs(port=args.port):
        seed = f"http://127.0.0.1:{args.port}/index.html"
        for i in range(args.pairs):
            g = grid(seed, args.executors)
            b = baseline(seed)
            one = grid(seed, args.executors, max_pages=1)  # the fixed cost: start-up and shut-down
            ratio = (g[1] / g[2]) / (b[1] / b[2])
            net = ((g[1] - one[1]) / (g[2] - one[2])) / (b[1] / b[2])
            ratios.append(ratio)
            nets.append(net)
            row = (f"| {i + 1} | {g[2]} | {g[0]:.2f} | {g[1]:.2f} | {g[1] / g[2] * 1000:.2f} | {one[1]:.2f} | {b[2]} | "
                   f"{b[0]:.2f} | {b[1]:.2f} | {b[1] / b[2] * 1000:.2f} | {ratio:.2f} | {net:.2f} |")
            rows.append(row)
            print(row, flush=True)
    text = "\n".join([
        f"# CPU per page: gridcrawl run vs the 16-thread crawler{(' — ' + args.label) if args.label else ''}",
        "",
        f"`python benchmarks/cpu_per_page.py --pairs {args.pairs} --executors {args.executors}`; "
        f"grid: `gridcrawl run SEED --executors {args.executors} --concurrent-requests-per-host 16 "
        f"--no-sitemaps`; baseline: `benchmarks/baselines.py threads SEED --threads 16`; Python docs via nginx; "
        f"CPU = user + system of every process; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| pair | grid pages | grid wall s | grid CPU s | grid CPU ms/page | grid 1-page CPU s | base pages "
        "| base wall s | base CPU s | base CPU ms/page | ratio | ratio net of start-up |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"**median ratio (grid CPU per page / baseline CPU per page): {statistics.median(ratios):.2f}**; "
        f"net of start-up (grid CPU minus a one-page run's, per page beyond it): "
        f"**{statistics.median(nets):.2f}**",
        ""])
    print(text.splitlines()[-2])
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
