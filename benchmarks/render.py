"""What rendering costs: pages per second, CPU and memory of a rendered crawl against a fetched
one, on the same generated site (issue 16).

This module owns the rendering benchmark. Two measurements, both on a site of
``tests/sites.py``'s ``generate_site`` served by nginx (or ``SiteServer``) from a process of its
own on 127.0.0.1 (:mod:`servers`):

* ``executor``: an executor's own work path, in this process: ``T`` worker threads call
  :func:`gridcrawl.executor.page.visit` (fetch, robots.txt, parse, links) on every page of the
  site, once fetched and once rendered by a :class:`gridcrawl.executor.render.Renderer` with
  ``--render-pages`` 1, 2 and 4. Per run: pages/s; CPU seconds per page of this process (the
  executor: fetches, parsing, the browser's request handler) and of the browser's process
  tree (Playwright's driver and every Chromium process); peak memory of the executor (RSS) and
  of the browser tree (the sum of PSS of its processes, so shared pages count once; RSS where
  PSS is not available), sampled every 0.1 s (the sampler thread's own CPU is left out of the
  executor's). The browser is not restarted during a run.
* ``grid`` (``--grid``): ``gridcrawl run SEED --executors 1 --threads T`` with and without
  ``--render``: crawl seconds (first grid thread submitted to last finished, from the manager
  database) and pages/s through the whole grid.

Usage: ``python benchmarks/render.py [--pages 200] [--links 20] [--page-bytes 20000]
[--threads 4] [--grid]``. Prints a Markdown table and writes it to
``benchmarks/results/<date>-render.md``. Needs Playwright (``pip install 'gridcrawl[render]'``)
and Chromium (``/usr/bin/chromium`` or ``--browser-path``). Timing only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from servers import SiteSpec, serve_site  # noqa: E402

from gridcrawl.executor.fetch import Fetcher  # noqa: E402
from gridcrawl.executor.page import visit  # noqa: E402
from gridcrawl.executor.robots import RobotsCache  # noqa: E402
from gridcrawl.executor.ssrf import SSRFGuard  # noqa: E402

MB = 1024 * 1024


def _tree_memory(procs: list[psutil.Process]) -> tuple[int, int]:
    """Bytes of memory of ``procs``: ``(sum of PSS, sum of USS)`` (Linux; RSS where there is no
    PSS, 0 where there is no USS). PSS shares a library's pages among every process mapping
    it (so other Chromium instances on the machine lower it); USS is what exiting frees."""
    pss = uss = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
            pss += getattr(info, "pss", info.rss)
            uss += getattr(info, "uss", 0)
        except psutil.Error:
            continue
    return pss, uss


class Sampler:
    """Peak RSS of this process and peak memory of its child process tree (the browser), every
    ``interval`` seconds, on a thread of its own."""

    def __init__(self, interval: float = 0.1) -> None:
        self.me = psutil.Process()
        self.interval = interval
        self.peak_self = self.peak_children = self.peak_children_uss = 0
        self._stop = threading.Event()
        self._native_id = -1
        self._thread = threading.Thread(target=self._run, daemon=True)

    def cpu_seconds(self) -> float:
        """CPU seconds this sampler's own thread has used (to leave out of the executor's)."""
        for t in self.me.threads():
            if t.id == self._native_id:
                return t.user_time + t.system_time
        return 0.0

    def _run(self) -> None:
        self._native_id = threading.get_native_id()
        while not self._stop.is_set():
            self.peak_self = max(self.peak_self, self.me.memory_info().rss)
            pss, uss = _tree_memory(self.me.children(recursive=True))
            self.peak_children = max(self.peak_children, pss)
            self.peak_children_uss = max(self.peak_children_uss, uss)
            self._stop.wait(self.interval)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.cpu = self.cpu_seconds()
        self._stop.set()
        self._thread.join()


def _cpu(procs: list[psutil.Process]) -> dict[int, float]:
    out = {}
    for proc in procs:
        try:
            t = proc.cpu_times()
            out[proc.pid] = t.user + t.system
        except psutil.Error:
            continue
    return out


def run_executor(urls: list[str], threads: int, render_pages: int | None, browser: str | None) -> dict:
    """Visit every URL of ``urls`` with ``threads`` worker threads, fetched (``render_pages``
    None) or rendered; return the figures (see the module docstring)."""
    from gridcrawl.executor.render import Renderer
    fetcher = Fetcher(user_agent="gridcrawl-bench/1.0", hop_check=SSRFGuard(["127.0.0.0/8"]).check)
    robots = RobotsCache.for_fetcher(fetcher)
    renderer = None
    if render_pages:
        renderer = Renderer(fetcher, browser_path=browser, max_pages=render_pages, restart_after=10**9).start()
    instruction = {"render": True} if renderer else None
    me = psutil.Process()
    try:
        visit(fetcher, urls[0], instruction=instruction, robots=robots, renderer=renderer)  # warm up
        children = me.children(recursive=True)
        cpu_children = _cpu(children)
        cpu_self = sum(me.cpu_times()[:2])
        errors = 0
        with Sampler() as sampler:
            start = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(threads) as pool:
                for page in pool.map(lambda u: visit(fetcher, u, instruction=instruction, robots=robots,
                                                     renderer=renderer, store_content=False), urls):
                    errors += page.error_kind is not None
            seconds = time.monotonic() - start
        children_now = me.children(recursive=True)
        browser_cpu = sum(_cpu(children_now).values()) - sum(cpu_children.get(p.pid, 0.0) for p in children_now)
        executor_cpu = sum(me.cpu_times()[:2]) - cpu_self - sampler.cpu  # the sampler is not the executor
        return {"mode": f"rendered, {render_pages} pages open" if renderer else "fetched",
                "pages": len(urls), "errors": errors, "seconds": seconds, "pages_per_second": len(urls) / seconds,
                "executor_cpu_ms": 1000 * executor_cpu / len(urls),
                "browser_cpu_ms": 1000 * browser_cpu / len(urls) if renderer else 0.0,
                "executor_peak_mb": sampler.peak_self / MB,
                "browser_peak_mb": sampler.peak_children / MB if renderer else 0.0,
                "browser_peak_uss_mb": sampler.peak_children_uss / MB if renderer else 0.0,
                "browser_processes": len(children_now) if renderer else 0}
    finally:
        if renderer is not None:
            renderer.close()
        fetcher.close()
        robots.fetcher.close()


def run_grid(seed: str, threads: int, render: bool, scratch: Path) -> dict:
    """``gridcrawl run SEED --executors 1 --threads T [--render]``; figures from its databases."""
    workdir = Path(tempfile.mkdtemp(prefix="render-" if render else "fetch-", dir=scratch))
    cmd = [sys.executable, "-m", "gridcrawl", "run", seed, "--executors", "1", "--threads", str(threads),
           "--workdir", str(workdir), "--no-progress", "--no-content", "--concurrent-requests-per-host", "64",
           *(["--render"] if render else [])]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - start
    with sqlite3.connect(workdir / "crawl.db") as conn:
        pages = conn.execute("SELECT count(*) FROM visited_url").fetchone()[0]
        errors = conn.execute("SELECT count(*) FROM visited_url WHERE error_kind IS NOT NULL").fetchone()[0]
    with sqlite3.connect(workdir / "manager.db") as conn:
        first, last = conn.execute("SELECT min(time_submitted), max(time_finished) FROM thread").fetchone()
    crawl = (dt.datetime.fromisoformat(str(last)) - dt.datetime.fromisoformat(str(first))).total_seconds()
    return {"mode": "gridcrawl run --render" if render else "gridcrawl run", "pages": pages, "errors": errors,
            "crawl_seconds": crawl, "wall_seconds": wall, "pages_per_second": pages / crawl if crawl else 0.0,
            "returncode": done.returncode}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print and write the Markdown results."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=200)
    ap.add_argument("--links", type=int, default=20)
    ap.add_argument("--page-bytes", type=int, default=20_000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--render-pages", default="1,2,4", help="comma-separated --render-pages values")
    ap.add_argument("--browser-path", default=os.environ.get("GRIDCRAWL_CHROMIUM"))
    ap.add_argument("--grid", action="store_true", help="also crawl through gridcrawl run, with and without --render")
    ap.add_argument("--out-dir", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)
    load_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    spec = SiteSpec(pages=args.pages, links=args.links, page_bytes=args.page_bytes, seed=16)
    rows, grid_rows = [], []
    with serve_site(spec) as served:
        from sites import page_path
        urls = [served.base_url + page_path(i) for i in range(args.pages)]
        for pages_open in [None, *(int(n) for n in args.render_pages.split(","))]:
            print(f"executor path: {'fetched' if pages_open is None else f'rendered, {pages_open} pages open'} ...",
                  flush=True)
            rows.append(run_executor(urls, args.threads, pages_open, args.browser_path))
            print("  ", rows[-1], flush=True)
        if args.grid:
            with tempfile.TemporaryDirectory(prefix="gridcrawl-render-bench-") as scratch:
                for render in (False, True):
                    print(f"grid: {'--render' if render else 'fetch'} ...", flush=True)
                    grid_rows.append(run_grid(served.seed_url, args.threads, render, Path(scratch)))
                    print("  ", grid_rows[-1], flush=True)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0,)
    lines = [f"# Rendering benchmark, {dt.date.today()}", "",
             f"Site: {spec.describe()} ({served.server}); {args.threads} worker threads; "
             f"{platform.processor() or platform.machine()}, {psutil.cpu_count()} cores, "
             f"{psutil.virtual_memory().total / 2**30:.1f} GiB; load average {load_start:.2f} at the start, "
             f"{load[0]:.2f} at the end.", "",
             "Executor path (`visit()` on every page, in one process):", "",
             "| mode | pages | errors | seconds | pages/s | executor CPU ms/page | browser CPU ms/page "
             "| executor peak RSS MB | browser peak MB, PSS (USS) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['pages']} | {r['errors']} | {r['seconds']:.2f} | {r['pages_per_second']:.1f} "
                     f"| {r['executor_cpu_ms']:.1f} | {r['browser_cpu_ms']:.1f} | {r['executor_peak_mb']:.0f} "
                     f"| {r['browser_peak_mb']:.0f} ({r['browser_peak_uss_mb']:.0f}) |")
    if grid_rows:
        lines += ["", "Through the grid (`gridcrawl run --executors 1`):", "",
                  "| mode | pages | errors | crawl s | wall s | pages/s |", "|---|---|---|---|---|---|"]
        for r in grid_rows:
            lines.append(f"| {r['mode']} | {r['pages']} | {r['errors']} | {r['crawl_seconds']:.2f} "
                         f"| {r['wall_seconds']:.2f} | {r['pages_per_second']:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"{dt.date.today()}-render.md"
    out.write_text(text)
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
