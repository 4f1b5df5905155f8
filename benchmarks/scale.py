"""Scale and memory of gridcrawl: issue 8's targets 5 and 6, measured on this machine.

``python benchmarks/scale.py [--quick] [--only memory,scale]`` runs real ``gridcrawl run``
process trees against sites served by nginx on 127.0.0.1 (static files written under /tmp and
deleted afterwards), samples the RSS of every process of each tree (run.py's ``TreeSampler``,
every 0.2 s) and checks the crawl databases. Nothing here asserts a time: it is a measurement.

**memory** (target 5: "an executor with 16 threads stays under 120 MB RSS; the client's memory
does not grow with the frontier (a synthetic site with 1,000,000 discovered URLs: client under
300 MB, manager under 300 MB with 100,000 queued threads)"). Two runs:

* *frontier*: a site whose seed ``/index.html`` links to H hub pages, each of which links to
  ``--fanout`` (default 1,000) distinct leaf URLs that do not exist, H × fanout = ``--frontier``
  (default 1,000,000). ``gridcrawl run --executors 2 --threads 16 --max-pages 1+H`` visits the
  seed and the hubs (breadth-first, so every hub before any leaf) and stops with every leaf
  waiting in ``to_visit_url``. Reported: peak RSS of the client (the ``gridcrawl run``
  process), the manager and each executor; the ``to_visit_url`` rows at the end, counted in
  ``crawl.db`` (fewer than ``--frontier`` fails the run); and the client's RSS when 25/50/75/100 %
  of the URLs had been discovered (``max(id)`` of ``to_visit_url``, polled every second), which
  shows whether the client grows with the frontier.
* *queue*: the frontier run's ``crawl.db`` resumed with a fresh ``manager.db`` and
  ``GRIDCRAWL_MAX_IN_FLIGHT`` = ``--queued`` + 1,000 (the client's ``max_in_flight`` setting,
  settable by file or environment; ``gridcrawl run`` has no option for it), one executor of 16
  threads, and per-host politeness of one request every 5 s (``--concurrent-requests-per-host 1
  --download-delay 5``), so the client submits that many grid threads at once and the manager
  must hold them in its queue. The READY threads are counted in ``manager.db``'s ``thread``
  table (state 0) every second; once at least ``--queued`` are there, the run goes on for
  ``--hold`` seconds and is then stopped with SIGTERM (a graceful stop, as a user would).
  Reported: the peak RSS of every process, the manager's RSS and CPU use while it holds the
  queue, the time the client took to submit them, and the queued count itself.

**scale** (target 6: "MCMTCrawler's task size — 600,000 pages of a synthetic site (small
pages, no latency) in one crawl on this machine; report the time and the peak memory of each
process (target: under 45 minutes)"). ``--pages`` (default 600,000) pages of about 1.2 KB,
page ``i`` linking to pages ``2i+1 … 2i+8`` (mod N) and two random pages, so that every page is
reachable from ``/index.html`` (page ``j`` is linked from page ``(j-1)//2``); pages are written
one at a time (never all in memory) under ``/p/<i//1000>/<i>.html``. Crawled with
``gridcrawl run --executors 2 --threads 4 --no-content --concurrent-requests-per-host 256``
(the host is ours; the default politeness of 8 would cap it). Reported: wall seconds, crawl
seconds (first grid thread submitted to last finished, manager.db), pages/s, peak RSS and CPU
seconds per process, the visited count (must be exactly ``--pages``), and the progress by tenth
of the pages (elapsed time, pages/s within that tenth, frontier size, client and manager RSS),
which shows whether the crawl slows down or grows as it goes.

Every run uses gridcrawl's default settings, but for the template-trap rule (off:
``trap_near_duplicates=0``, as the synthetic pages are alike by design), the per-host cap
(``--max-pages-per-host 0``: each site is one host larger than the default cap) and sitemaps
(``--no-sitemaps``: the sites have none), unless ``--setting NAME=VALUE`` (repeatable) gives
one to every run as a ``GRIDCRAWL_NAME`` environment variable; the WARNING and ERROR lines of
the manager's log and of the ``gridcrawl run`` output are counted and quoted in the results (a
client detached by the manager, a blocked peer ...).

Output: rich tables on the terminal and the same in Markdown in
``benchmarks/results/<date>-scale-<full|quick>[-only].md``, headed by run.py's machine
description and the load average (the machine is shared, so figures are noisy). Exit status 1
if a crawl failed or a count is wrong, 2 for a usage error (nginx missing, bad option).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import random
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from run import (BENCH_HOST_CONCURRENCY, MB, RunResult, Section, Table, TreeSampler, _load, _role,  # noqa: E402
                 _tail, console, read_gridcrawl_dbs, run_sections, stop_group)
from servers import docsite, nginx_available  # noqa: E402

PARTS = ("memory", "scale")
#: Issue 8's figures (MB) quoted next to the measurements (never asserted).
TARGET_EXECUTOR_MB, TARGET_CLIENT_MB, TARGET_MANAGER_MB, TARGET_SCALE_MINUTES = 120, 300, 300, 45


# --------------------------------------------------------------------------------------------
# configuration


@dataclass
class Config:
    """Sizes of one run (defaults: the issue's sizes; :meth:`quick` shrinks them).

    Attributes:
      frontier: leaf URLs the frontier site makes the crawl discover; fanout: leaf links per hub
        page; memory_threads: threads of each executor in the memory runs (2 executors in the
        frontier run, 1 in the queue run); queued: grid threads the queue run must have waiting
        at the manager at once; hold: seconds the queue run goes on once they are there;
        queue_delay: download delay (s) of the queue run's one host.
      pages: pages of the scale site; executors, threads: the scale crawl's grid.
      timeout: seconds one crawl may take before it is stopped and reported as failed.
      settings: gridcrawl Settings given to every run as ``GRIDCRAWL_<NAME>`` environment
        variables (name -> value; empty: gridcrawl's defaults), e.g. ``heartbeat_liveness``.
    """

    frontier: int = 1_000_000
    fanout: int = 1000
    memory_threads: int = 16
    queued: int = 100_000
    hold: float = 15.0
    queue_delay: float = 5.0
    pages: int = 600_000
    executors: int = 2
    threads: int = 4
    timeout: float = 3 * 3600.0
    settings: dict[str, str] = field(default_factory=dict)

    @classmethod
    def quick(cls) -> "Config":
        """The ``--quick`` sizes: 100,000 discovered URLs, 20,000 queued threads, 20,000 pages."""
        return cls(frontier=100_000, queued=20_000, hold=5.0, pages=20_000, timeout=1200.0)

    @property
    def hubs(self) -> int:
        """Hub pages of the frontier site (ceil(frontier / fanout))."""
        return -(-self.frontier // self.fanout)

    def env(self, **more: str) -> tuple[dict[str, str] | None, list[str]]:
        """The environment of a run with :attr:`settings` and ``more`` (``GRIDCRAWL_<NAME>``
        values) set, and those assignments as ``NAME=value`` words to show before the command.
        The template-trap rule is off (``trap_near_duplicates=0``) unless a setting turns it on:
        the synthetic sites' pages are alike by design, and the rule would stop the frontier
        site's hubs."""
        values = {f"GRIDCRAWL_{k.upper()}": str(v)
                  for k, v in {"trap_near_duplicates": "0", **self.settings, **more}.items()}
        return {**os.environ, **values}, [f"{k}={v}" for k, v in values.items()]


# --------------------------------------------------------------------------------------------
# sites: static files for nginx, written one page at a time


_FILLER = ("Grid computing lends the idle time of desktop computers to one application; a manager "
           "hands each executor a thread, and the crawler's application applies the results. ") * 8


def scale_page_path(i: int) -> str:
    """URL path of page ``i`` of the scale site: ``/index.html`` for 0, else ``/p/<i//1000>/<i>.html``."""
    return "/index.html" if i == 0 else f"/p/{i // 1000}/{i}.html"


def scale_page(i: int, pages: int, rng: random.Random, page_bytes: int = 1200) -> bytes:
    """The HTML of page ``i`` of a ``pages``-page scale site (about ``page_bytes`` bytes).

    Links: pages ``2i+1 … 2i+8`` modulo ``pages`` (so page ``j`` ≥ 1 is linked from page
    ``(j-1)//2`` and every page is reachable from page 0), plus two pages drawn from ``rng``.
    """
    targets = [(2 * i + k) % pages for k in range(1, 9)] + [rng.randrange(pages) for _ in range(2)]
    links = "".join(f'<li><a href="{scale_page_path(t)}">page {t}</a></li>' for t in targets)
    head = (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>Page {i}</title></head>'
            f"<body><h1>Page {i}</h1><ul>{links}</ul><p>")
    tail = "</p></body></html>\n"
    room = max(0, page_bytes - len(head) - len(tail))
    return (head + _FILLER[:room] + tail).encode("utf-8")


def write_scale_site(root: Path, pages: int, seed: int = 0) -> int:
    """Write the ``pages``-page scale site under ``root`` (see :func:`scale_page`), one file at
    a time; return the bytes written. Raises OSError when the disk is full or unwritable."""
    rng = random.Random(seed)
    total = 0
    for d in range(0, (pages - 1) // 1000 + 1):
        (root / "p" / str(d)).mkdir(parents=True, exist_ok=True)
    for i in range(pages):
        body = scale_page(i, pages, rng)
        with open(root / scale_page_path(i).lstrip("/"), "wb") as f:
            f.write(body)
        total += len(body)
    return total


def write_frontier_site(root: Path, frontier: int, fanout: int) -> int:
    """Write the frontier site under ``root``: ``/index.html`` linking to ceil(frontier / fanout)
    hubs ``/h/<k>.html``, hub ``k`` linking to leaves ``/l/<k>/<j>.html`` (never written, so
    404), ``frontier`` distinct leaves in all. Returns the bytes written."""
    hubs = -(-frontier // fanout)
    (root / "h").mkdir(parents=True, exist_ok=True)
    total = 0
    index = ("<!DOCTYPE html><html><head><title>hubs</title></head><body><ul>"
             + "".join(f'<li><a href="/h/{k}.html">hub {k}</a></li>' for k in range(hubs)) + "</ul></body></html>\n")
    (root / "index.html").write_text(index)
    total += len(index)
    for k in range(hubs):
        n = min(fanout, frontier - k * fanout)
        body = (f"<!DOCTYPE html><html><head><title>hub {k}</title></head><body><ul>"
                + "".join(f'<li><a href="/l/{k}/{j}.html">{j}</a></li>' for j in range(n)) + "</ul></body></html>\n")
        (root / "h" / f"{k}.html").write_text(body)
        total += len(body)
    return total


@contextlib.contextmanager
def served(root: Path):
    """Serve folder ``root`` with nginx on 127.0.0.1 (tests/docsite.py's configuration); yield
    the base URL (no trailing slash). Raises RuntimeError if nginx does not start."""
    with docsite.serve_python_docs(None, root=str(root)) as url:
        yield url


# --------------------------------------------------------------------------------------------
# running a gridcrawl process tree with a monitor


@dataclass
class Launch:
    """What :func:`run_monitored` saw: exit ``status``, ``wall`` seconds, the ``sampler``
    (peaks), ``error`` ("" if none), ``start``/``end`` POSIX times, and ``stopped``: True when
    the monitor asked to stop the run (a planned SIGTERM, not a failure)."""

    status: int | None
    wall: float
    sampler: TreeSampler
    error: str
    start: float
    end: float
    stopped: bool = False


def run_monitored(cmd: list[str], out_path: Path, timeout: float, env: dict | None = None,
                  monitor: Callable[[psutil.Process, TreeSampler, float], bool] | None = None,
                  every: float = 1.0) -> Launch:
    """Run ``cmd`` (a ``gridcrawl run``) in a new session from the repository folder, output to
    ``out_path``, sampling its process tree with run.py's :class:`TreeSampler` (root role
    ``client``).

    Every ``every`` seconds ``monitor(root process, sampler, elapsed seconds)`` is called; when
    it returns True the root gets SIGTERM (graceful stop; SIGKILL to the group after 120 s) and
    the launch is marked ``stopped``. After ``timeout`` seconds the group gets SIGTERM, then
    SIGKILL 30 s later, and ``error`` says so.
    """
    error, stopped = "", False
    with open(out_path, "wb") as out:
        start = time.time()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=str(REPO), env=env)
        root = psutil.Process(proc.pid)
        with TreeSampler(proc.pid, "client") as sampler:
            while True:
                try:
                    proc.wait(every)
                    break
                except subprocess.TimeoutExpired:
                    pass
                elapsed = time.perf_counter() - t0
                if monitor is not None and monitor(root, sampler, elapsed):
                    stopped = True
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(120)
                    except subprocess.TimeoutExpired:
                        error = "did not stop within 120 s of SIGTERM"
                        stop_group(proc, signal.SIGKILL, grace=0)
                    break
                if elapsed > timeout:
                    error = f"timed out after {timeout:.0f} s"
                    stop_group(proc, signal.SIGTERM, grace=30)
                    break
            sampler.sample()
            wall = time.perf_counter() - t0
            end = time.time()
    with contextlib.suppress(ProcessLookupError, PermissionError):  # leftovers of this run only
        os.killpg(proc.pid, signal.SIGKILL)
    return Launch(proc.returncode, wall, sampler, error, start, end, stopped)


def current_rss(root: psutil.Process) -> dict[str, int]:
    """RSS now (bytes) by role (run.py's roles: ``client`` for the root, ``manager``,
    ``executor-N``) of ``root`` and its descendants; processes that vanish are skipped."""
    out: dict[str, int] = {}
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return out
    for proc in procs:
        try:
            role = _role(proc, root.pid, "client")
            if role != "other":
                out[role] = proc.memory_info().rss
        except psutil.Error:
            continue
    return out


def query(db: Path, sql: str) -> int | None:
    """One integer from SQLite file ``db`` opened read-only, or None while it cannot be read
    (not created yet, busy)."""
    if not db.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2)) as conn:
            value = conn.execute(sql).fetchone()[0]
            return int(value) if value is not None else 0
    except sqlite3.Error:
        return None


def gridcrawl_cmd(seed: str, workdir: Path, executors: int, threads: int, *extra: str) -> list[str]:
    """``python -m gridcrawl run SEED --executors E --threads T --workdir W --no-progress
    --no-content --max-pages-per-host 0 --no-sitemaps`` plus ``extra`` options (the sites are
    one host of ours, larger than the default cap of 100,000 URLs per host, with no sitemap: a
    look for ``/sitemap.xml`` would take one of ``--max-pages``)."""
    return [sys.executable, "-m", "gridcrawl", "run", seed, "--executors", str(executors), "--threads",
            str(threads), "--workdir", str(workdir), "--no-progress", "--no-content", "--max-pages-per-host", "0",
            "--no-sitemaps", *extra]


def log_warnings(workdir: Path, names: tuple[str, ...] = ("manager.log", "run.out")) -> list[str]:
    """WARNING and ERROR lines of the files ``names`` in ``workdir`` (the manager's log and the
    ``gridcrawl run`` output, where the client logs), each prefixed by its file name."""
    lines = []
    for name in names:
        with contextlib.suppress(OSError):
            for line in (workdir / name).read_text(errors="replace").splitlines():
                if " WARNING " in line or " ERROR " in line or " CRITICAL " in line:
                    lines.append(f"{name}: {line.strip()}")
    return lines


def _note_warnings(section: Section, label: str, lines: list[str], shown: int = 6) -> None:
    """Add a note to ``section`` with the count and the first ``shown`` of ``lines``."""
    if not lines:
        return
    section.notes.append(f"{label}: {len(lines)} warning/error lines in the logs, the first {min(shown, len(lines))}:\n\n"
                         + "\n".join(f"    {line}" for line in lines[:shown]))
    console.print(f"[yellow]{label}: {len(lines)} warning/error lines in the logs[/yellow]")


def _fill(res: RunResult, launch: Launch) -> None:
    """Copy a launch's status, times and samples into ``res``."""
    res.returncode, res.wall_seconds = launch.status, launch.wall
    res.peak_rss, res.cpu = launch.sampler.peak_rss, launch.sampler.cpu
    res.error = launch.error


def _mb(value: int | None) -> str:
    return "–" if not value else f"{value / MB:.0f}"


def _executors_mb(peaks: dict[str, int]) -> str:
    names = sorted((k for k in peaks if k.startswith("executor")), key=lambda k: (len(k), k))
    return " / ".join(_mb(peaks[k]) for k in names) or "–"


def _max_executor(peaks: dict[str, int]) -> int:
    return max((v for k, v in peaks.items() if k.startswith("executor")), default=0)


def _status(text: str) -> None:
    console.print(f"  [dim]{time.strftime('%H:%M:%S')}[/dim] {text}")


def _verdict(value_mb: float, target_mb: float) -> str:
    return f"{'under' if value_mb < target_mb else 'OVER'} {target_mb} MB"


# --------------------------------------------------------------------------------------------
# memory: the frontier run and the queue run


@dataclass
class Sample:
    """One timeline point: ``seconds`` since the start, a ``count`` (discovered URLs or pages
    visited), ``frontier`` (to-visit rows, or None), RSS bytes by role."""

    seconds: float
    count: int
    frontier: int | None
    rss: dict[str, int] = field(default_factory=dict)


def part_memory(cfg: Config, scratch: Path) -> Section:
    """Target 5: the frontier run (client and executors with ``cfg.frontier`` discovered URLs),
    then the queue run (the manager with ``cfg.queued`` queued grid threads) on its crawl.db."""
    section = Section("memory", "Target 5: memory (frontier of discovered URLs, queued grid threads)",
                      "Issue 8 target 5: an executor with 16 threads stays under 120 MB RSS; the client's memory "
                      "does not grow with the frontier (1,000,000 discovered URLs: client under 300 MB, manager "
                      "under 300 MB with 100,000 queued threads). Peak RSS sampled every 0.2 s with psutil; "
                      "`client` is the `gridcrawl run` process (it runs the crawl client).")
    console.rule(f"[bold]memory[/bold]: {cfg.frontier:,} discovered URLs, {cfg.queued:,} queued threads")
    site = scratch / "frontier-site"
    workdir = scratch / "frontier-run"
    workdir.mkdir()
    t0 = time.perf_counter()
    size = write_frontier_site(site, cfg.frontier, cfg.fanout)
    _status(f"frontier site written: 1 + {cfg.hubs} pages, {size / MB:.0f} MB, {cfg.frontier:,} leaf URLs "
            f"({time.perf_counter() - t0:.1f} s)")
    try:
        with served(site) as base:
            frontier = run_frontier(cfg, base, workdir, section)
            if frontier is not None:
                run_queue(cfg, base, workdir, section)
    finally:
        shutil.rmtree(site, ignore_errors=True)
    return section


def run_frontier(cfg: Config, base: str, workdir: Path, section: Section) -> RunResult | None:
    """The frontier run (see the module docstring); adds its tables to ``section`` and returns
    its result, or None when it failed (then the queue run cannot use its crawl.db)."""
    max_pages = 1 + cfg.hubs
    cmd = gridcrawl_cmd(base + "/index.html", workdir, 2, cfg.memory_threads, "--max-pages", str(max_pages),
                        "--concurrent-requests-per-host", str(BENCH_HOST_CONCURRENCY))
    env, words = cfg.env()
    shown = [*words, "python", *cmd[1:]] if words else cmd
    res = RunResult(f"frontier: gridcrawl 2×{cfg.memory_threads}", "gridcrawl", 2, cfg.memory_threads, max_pages,
                    expected=max_pages, command=shown)
    crawl_db = workdir / "crawl.db"
    timeline: list[Sample] = []

    def monitor(root: psutil.Process, sampler: TreeSampler, elapsed: float) -> bool:
        discovered = query(crawl_db, "SELECT max(id) FROM to_visit_url")
        if discovered is not None:
            timeline.append(Sample(elapsed, discovered, None, current_rss(root)))
        return False

    load0 = _load()
    _status(f"{res.label} --max-pages {max_pages} ...")
    launch = run_monitored(cmd, workdir / "run.out", cfg.timeout, env=env, monitor=monitor)
    _fill(res, launch)
    to_visit = query(crawl_db, "SELECT count(*) FROM to_visit_url") or 0
    discovered = query(crawl_db, "SELECT max(id) FROM to_visit_url") or 0
    try:
        figures = read_gridcrawl_dbs(workdir)
        res.pages, res.documents, res.errors = figures["pages"], figures["documents"], figures["errors"]
        res.crawl_seconds, res.per_executor = figures["crawl_seconds"], figures["per_executor"]
    except sqlite3.Error as exc:
        res.error = res.error or f"cannot read the databases: {exc}"
    if res.returncode not in (0, None) and not res.error:
        res.error = f"exit status {res.returncode}: {_tail(workdir / 'run.out')}"
    if not res.error and to_visit < cfg.frontier:
        res.error = f"only {to_visit:,} rows in to_visit_url, {cfg.frontier:,} wanted"
    if res.error:
        res.error += f" (logs in {workdir})"
    section.runs.append(res)
    _status(f"{res.pages} pages visited, {to_visit:,} URLs waiting in to_visit_url, {res.wall_seconds:.1f} s wall"
            + (f" [red]ERROR: {res.error}[/red]" if res.error else ""))
    peaks = res.peak_rss
    table = Table(f"frontier — {to_visit:,} URLs waiting in to_visit_url", [
        "run", "pages visited", "to_visit_url rows", "discovered (max id)", "crawl s", "wall s", "client MB",
        "manager MB", "executor MB each", "CPU s", "load avg start → end"], note=(
        f"The site: /index.html links to {cfg.hubs:,} hubs, each hub to {cfg.fanout:,} distinct leaf URLs; "
        f"`--max-pages {max_pages}` visits the seed and the hubs, so every leaf waits in to_visit_url. "
        f"Settings changed: {_settings_text(cfg)}. "
        f"to_visit_url rows counted in crawl.db after the run (≥ {cfg.frontier:,} required)."))
    table.rows.append([res.name, str(res.pages), f"{to_visit:,}", f"{discovered:,}", f"{res.crawl_seconds:.1f}",
                       f"{res.wall_seconds:.1f}", _mb(peaks.get("client")), _mb(peaks.get("manager")),
                       _executors_mb(peaks), _cpu(res), f"{load0} → {_load()}"])
    section.show(table)
    if timeline:
        section.show(_quartiles(timeline, discovered))
    _note_warnings(section, "Frontier run", log_warnings(workdir))
    section.notes.append(
        f"Frontier: client peak {_mb(peaks.get('client'))} MB ({_verdict((peaks.get('client') or 0) / MB, TARGET_CLIENT_MB)}) "
        f"with {to_visit:,} URLs waiting; executors with {cfg.memory_threads} threads peak "
        f"{_mb(_max_executor(peaks))} MB ({_verdict(_max_executor(peaks) / MB, TARGET_EXECUTOR_MB)}).")
    console.print(section.notes[-1])
    return None if res.error else res


def _settings_text(cfg: Config) -> str:
    return ", ".join(f"{k}={v}" for k, v in cfg.settings.items()) or "none (gridcrawl's defaults)"


def _cpu(res: RunResult) -> str:
    execs = sum(v for k, v in res.cpu.items() if k.startswith("executor"))
    return (f"client {res.cpu.get('client', 0.0):.0f} · manager {res.cpu.get('manager', 0.0):.0f} · "
            f"executors {execs:.0f}")


def _quartiles(timeline: list[Sample], final: int) -> Table:
    """RSS of each process when 25/50/75/100 % of ``final`` URLs had been discovered."""
    table = Table("client RSS as the frontier grows (sampled every second)",
                  ["discovered", "at s", "client MB", "manager MB", "executor MB each"],
                  note="discovered: max(id) of to_visit_url (every URL queued so far, visited or not). "
                       "The last row is the last sample before the client exited.")
    shown: set[int] = set()
    for share in (0.25, 0.5, 0.75, 1.0):
        mark = final * share
        sample = next((s for s in timeline if s.count >= mark), None)
        if sample is None or id(sample) in shown:  # one sample may pass several marks
            continue
        shown.add(id(sample))
        table.rows.append([f"{sample.count:,} ({share:.0%})", f"{sample.seconds:.1f}", _mb(sample.rss.get("client")),
                           _mb(sample.rss.get("manager")), _executors_mb(sample.rss)])
    last = timeline[-1]
    if id(last) in shown:
        return table
    table.rows.append([f"{last.count:,} (last sample)", f"{last.seconds:.1f}", _mb(last.rss.get("client")),
                       _mb(last.rss.get("manager")), _executors_mb(last.rss)])
    return table


def run_queue(cfg: Config, base: str, workdir: Path, section: Section) -> RunResult:
    """The queue run (see the module docstring) on the frontier run's ``workdir``: a fresh
    manager.db, ``GRIDCRAWL_MAX_IN_FLIGHT`` (and the manager's ``MAX_THREADS_PER_APPLICATION``)
    = queued + 1,000, one polite host; stopped with
    SIGTERM ``cfg.hold`` seconds after ``cfg.queued`` READY threads are counted in manager.db."""
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            (workdir / f"manager.db{suffix}").unlink()
    for log_file in workdir.glob("*.log"):  # the frontier run's logs, kept apart
        log_file.rename(workdir / f"frontier-{log_file.name}")
    in_flight = cfg.queued + 1000
    cmd = gridcrawl_cmd(base + "/index.html", workdir, 1, cfg.memory_threads, "--concurrent-requests-per-host", "1",
                        "--download-delay", f"{cfg.queue_delay:g}")
    env, words = cfg.env(max_in_flight=str(in_flight), max_threads_per_application=str(in_flight))
    res = RunResult(f"queue: gridcrawl 1×{cfg.memory_threads}", "gridcrawl", 1, cfg.memory_threads,
                    command=[*words, "python", *cmd[1:]])
    manager_db = workdir / "manager.db"
    state = {"reached": None, "queued_max": 0, "rss_at": {}, "cpu_at": None, "cpu_end": None, "rss_end": {}}

    def monitor(root: psutil.Process, sampler: TreeSampler, elapsed: float) -> bool:
        queued = query(manager_db, "SELECT count(*) FROM thread WHERE state = 0")
        if queued is None:
            return False
        state["queued_max"] = max(state["queued_max"], queued)
        if state["reached"] is None and queued >= cfg.queued:
            state["reached"], state["rss_at"] = elapsed, current_rss(root)
            state["cpu_at"] = sampler.cpu.get("manager", 0.0)
            _status(f"{queued:,} grid threads queued at the manager after {elapsed:.1f} s; holding {cfg.hold:g} s")
        if state["reached"] is not None and elapsed - state["reached"] >= cfg.hold:
            state["cpu_end"], state["rss_end"] = sampler.cpu.get("manager", 0.0), current_rss(root)
            state["queued_end"] = queued
            return True
        return False

    load0 = _load()
    _status(f"{res.label}, max_in_flight {in_flight:,}, 1 request per {cfg.queue_delay:g} s ...")
    launch = run_monitored(cmd, workdir / "queue.out", min(cfg.timeout, 1800.0), env=env, monitor=monitor)
    _fill(res, launch)
    if not launch.stopped and not res.error:
        res.error = (f"exited (status {res.returncode}) before {cfg.queued:,} threads were queued "
                     f"(at most {state['queued_max']:,}): {_tail(workdir / 'queue.out')}")
    elif state["reached"] is None and not res.error:
        res.error = f"only {state['queued_max']:,} threads queued, {cfg.queued:,} wanted"
    if res.error:
        res.error += f" (logs in {workdir})"
    section.runs.append(res)
    peaks = res.peak_rss
    hold_cpu = "–"
    if state["cpu_at"] is not None and state["cpu_end"] is not None:
        hold_cpu = f"{(state['cpu_end'] - state['cpu_at']) / cfg.hold:.2f}"
    table = Table(f"manager with {state['queued_max']:,} queued grid threads", [
        "run", "queued (thread state 0)", "queued after s", "wall s", "client MB", "manager MB",
        "manager MB when queued", "manager MB at stop", "manager CPU s/s while holding", "executor MB each",
        "load avg start → end"], note=(
        f"The frontier run's crawl.db resumed with a fresh manager.db, GRIDCRAWL_MAX_IN_FLIGHT={in_flight}, one "
        f"executor, `--concurrent-requests-per-host 1 --download-delay {cfg.queue_delay:g}`, other settings "
        f"changed: {_settings_text(cfg)}; queued = the largest "
        f"count of READY rows in manager.db's thread table, polled every second; stopped with SIGTERM "
        f"{cfg.hold:g} s after {cfg.queued:,} were queued."))
    table.rows.append([res.name, f"{state['queued_max']:,}",
                       "–" if state["reached"] is None else f"{state['reached']:.1f}", f"{res.wall_seconds:.1f}",
                       _mb(peaks.get("client")), _mb(peaks.get("manager")), _mb(state["rss_at"].get("manager")),
                       _mb(state["rss_end"].get("manager")), hold_cpu, _executors_mb(peaks), f"{load0} → {_load()}"])
    section.show(table)
    _note_warnings(section, "Queue run", log_warnings(workdir, ("manager.log", "queue.out")))
    if not res.error:
        mgr = (peaks.get("manager") or 0) / MB
        section.notes.append(f"Queue: manager peak {mgr:.0f} MB with {state['queued_max']:,} queued grid threads "
                             f"({_verdict(mgr, TARGET_MANAGER_MB)}); client peak {_mb(peaks.get('client'))} MB "
                             f"holding {in_flight:,} submitted threads.")
        console.print(section.notes[-1])
    return res


# --------------------------------------------------------------------------------------------
# scale: the 600,000-page crawl


def part_scale(cfg: Config, scratch: Path) -> Section:
    """Target 6: one crawl of a ``cfg.pages``-page static site (see the module docstring)."""
    section = Section("scale", f"Target 6: scale ({cfg.pages:,} small pages, one crawl)",
                      "Issue 8 target 6: MCMTCrawler's task size — 600,000 pages of a synthetic site (small pages, "
                      "no latency) in one crawl on this machine; report the time and the peak memory of each "
                      "process (target: under 45 minutes).")
    console.rule(f"[bold]scale[/bold]: {cfg.pages:,} pages")
    site = scratch / "scale-site"
    workdir = scratch / "scale-run"
    workdir.mkdir()
    t0 = time.perf_counter()
    try:
        size = write_scale_site(site, cfg.pages)
        written = time.perf_counter() - t0
        _status(f"site written: {cfg.pages:,} pages, {size / MB:.0f} MB ({written:.1f} s)")
        section.description += (f" Site: {cfg.pages:,} pages of {size / cfg.pages / 1000:.1f} KB, 10 links each "
                                f"(2i+1 … 2i+8 mod N and 2 random), static files served by nginx; written in "
                                f"{written:.0f} s.")
        with served(site) as base:
            run_scale(cfg, base, workdir, section)
    finally:
        t1 = time.perf_counter()
        shutil.rmtree(site, ignore_errors=True)
        _status(f"site removed ({time.perf_counter() - t1:.1f} s)")
    return section


def run_scale(cfg: Config, base: str, workdir: Path, section: Section) -> RunResult:
    """The scale crawl: ``gridcrawl run`` over the whole site; adds its tables to ``section``."""
    cmd = gridcrawl_cmd(base + "/index.html", workdir, cfg.executors, cfg.threads,
                        "--concurrent-requests-per-host", str(BENCH_HOST_CONCURRENCY))
    env, words = cfg.env()
    res = RunResult(f"gridcrawl {cfg.executors}×{cfg.threads}", "gridcrawl", cfg.executors, cfg.threads,
                    expected=cfg.pages, command=[*words, "python", *cmd[1:]] if words else cmd)
    crawl_db = workdir / "crawl.db"
    timeline: list[Sample] = []
    last = {"t": -1e9}

    def monitor(root: psutil.Process, sampler: TreeSampler, elapsed: float) -> bool:
        if elapsed - last["t"] >= 5.0:
            visited = query(crawl_db, "SELECT count(*) FROM visited_url")
            if visited is not None:
                last["t"] = elapsed
                timeline.append(Sample(elapsed, visited, query(crawl_db, "SELECT count(*) FROM to_visit_url"),
                                       current_rss(root)))
        return False

    load0 = _load()
    _status(f"{res.label}, whole site ...")
    launch = run_monitored(cmd, workdir / "run.out", cfg.timeout, env=env, monitor=monitor)
    _fill(res, launch)
    try:
        figures = read_gridcrawl_dbs(workdir)
        res.pages, res.documents, res.errors = figures["pages"], figures["documents"], figures["errors"]
        res.crawl_seconds, res.per_executor = figures["crawl_seconds"], figures["per_executor"]
        if figures["first_submitted"] is not None:
            res.startup_seconds = figures["first_submitted"] - launch.start
            res.shutdown_seconds = launch.end - figures["last_finished"]
    except sqlite3.Error as exc:
        res.error = res.error or f"cannot read the databases: {exc}"
    if res.returncode not in (0, None) and not res.error:
        res.error = f"exit status {res.returncode}: {_tail(workdir / 'run.out')}"
    if res.error:
        res.error += f" (logs in {workdir})"
    section.runs.append(res)
    _status(f"{res.pages:,} pages ({res.errors} errors) in {res.crawl_seconds:.1f} s crawl / "
            f"{res.wall_seconds:.1f} s wall = {res.pages_per_second:.1f} pages/s"
            + ("" if res.count_ok else f" [red](expected {cfg.pages:,})[/red]")
            + (f" [red]ERROR: {res.error}[/red]" if res.error else ""))
    peaks = res.peak_rss
    ok = "FAILED" if res.error else ("yes" if res.count_ok else f"NO (want {cfg.pages:,})")
    per_exec = " / ".join(str(n) for n in res.per_executor.values()) or "–"
    table = Table(f"scale — {cfg.pages:,} pages, one crawl", [
        "crawler", "visited", "docs", "errors", "ok", "crawl s", "crawl min", "pages/s", "wall s", "start-up s",
        "shut-down s", "client MB", "manager MB", "executor MB each", "CPU s", "threads per executor",
        "load avg start → end"], note=(
        "visited: visited_url rows in crawl.db (must equal the site's pages); crawl s: first grid thread submitted "
        "to last finished (manager.db); wall s: the whole `gridcrawl run`; MB: peak RSS sampled every 0.2 s. "
        f"Settings changed: {_settings_text(cfg)}."))
    table.rows.append([res.name, f"{res.pages:,}", f"{res.documents:,}", str(res.errors), ok,
                       f"{res.crawl_seconds:.1f}", f"{res.crawl_seconds / 60:.1f}", f"{res.pages_per_second:.1f}",
                       f"{res.wall_seconds:.1f}", _secs(res.startup_seconds), _secs(res.shutdown_seconds),
                       _mb(peaks.get("client")), _mb(peaks.get("manager")), _executors_mb(peaks), _cpu(res),
                       per_exec, f"{load0} → {_load()}"])
    section.show(table)
    if timeline:
        section.show(_tenths(timeline, cfg.pages))
    _note_warnings(section, "Scale run", log_warnings(workdir))
    minutes = res.wall_seconds / 60
    section.notes.append(f"Scale: {res.pages:,} pages in {res.crawl_seconds / 60:.1f} min crawl, {minutes:.1f} min wall "
                         f"({'under' if minutes < TARGET_SCALE_MINUTES else 'OVER'} the {TARGET_SCALE_MINUTES}-minute "
                         f"target); peaks: client {_mb(peaks.get('client'))} MB, manager {_mb(peaks.get('manager'))} MB, "
                         f"executors {_executors_mb(peaks)} MB.")
    console.print(section.notes[-1])
    return res


def _secs(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _tenths(timeline: list[Sample], pages: int) -> Table:
    """Progress by tenth of ``pages``: when each was reached, pages/s within it, frontier, RSS."""
    table = Table("progress by tenth of the pages (polled every 5 s)",
                  ["visited", "at s", "pages/s in this tenth", "to_visit_url rows", "client MB", "manager MB",
                   "executor MB each"],
                  note="Read from crawl.db while the crawl runs (the first poll at or past each tenth; a poll past "
                       "several tenths is shown once); RSS of each process at that moment.")
    prev_t, prev_n = 0.0, 0
    shown: set[int] = set()
    for k in range(1, 11):
        sample = next((s for s in timeline if s.count >= pages * k / 10), None)
        if sample is None:
            break
        if id(sample) in shown:  # one poll passed several tenths
            continue
        shown.add(id(sample))
        rate = (sample.count - prev_n) / (sample.seconds - prev_t) if sample.seconds > prev_t else 0.0
        table.rows.append([f"{sample.count:,} ({k * 10}%)", f"{sample.seconds:.0f}", f"{rate:.1f}",
                           "–" if sample.frontier is None else f"{sample.frontier:,}", _mb(sample.rss.get("client")),
                           _mb(sample.rss.get("manager")), _executors_mb(sample.rss)])
        prev_t, prev_n = sample.seconds, sample.count
    last = timeline[-1]
    if id(last) not in shown:
        rate = (last.count - prev_n) / (last.seconds - prev_t) if last.seconds > prev_t else 0.0
        table.rows.append([f"{last.count:,} (last poll)", f"{last.seconds:.0f}", f"{rate:.1f}",
                           "–" if last.frontier is None else f"{last.frontier:,}", _mb(last.rss.get("client")),
                           _mb(last.rss.get("manager")), _executors_mb(last.rss)])
    return table


# --------------------------------------------------------------------------------------------
# output and command line


def main(argv: list[str] | None = None) -> int:
    """Command line; returns 0, 1 when a crawl failed or a count was wrong, 2 on a usage error."""
    ap = argparse.ArgumentParser(description="gridcrawl scale and memory (issue 8, targets 5 and 6).")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes: 100,000 discovered URLs, 20,000 queued threads, 20,000 pages")
    ap.add_argument("--only", default="", help=f"comma-separated parts to run: {', '.join(PARTS)}")
    ap.add_argument("--frontier", type=int, help="URLs the frontier run discovers (default 1,000,000)")
    ap.add_argument("--fanout", type=int, help="leaf links per hub page of the frontier site (default 1,000)")
    ap.add_argument("--queued", type=int, help="grid threads queued at the manager at once (default 100,000)")
    ap.add_argument("--hold", type=float, help="seconds the queue run goes on once they are queued (default 15)")
    ap.add_argument("--pages", type=int, help="pages of the scale site (default 600,000)")
    ap.add_argument("--executors", type=int, help="executors of the scale crawl (default 2)")
    ap.add_argument("--threads", type=int, help="threads per executor of the scale crawl (default 4)")
    ap.add_argument("--memory-threads", type=int, help="threads per executor of the memory runs (default 16)")
    ap.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                    help="a gridcrawl setting for every run, passed as GRIDCRAWL_NAME=VALUE (repeatable), "
                         "e.g. heartbeat_liveness=30")
    ap.add_argument("--timeout", type=float, help="seconds one crawl may take before it is stopped (default 3 h)")
    ap.add_argument("--name", default="", help="results file name part (default: scale-full or scale-quick)")
    ap.add_argument("--out-dir", type=Path, default=HERE / "results", help="where the Markdown goes")
    ap.add_argument("--keep", action="store_true", help="keep the work folders (databases, logs); sites are removed")
    args = ap.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()] or list(PARTS)
    unknown = [s for s in only if s not in PARTS]
    if unknown:
        ap.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    cfg = Config.quick() if args.quick else Config()
    for name in ("frontier", "fanout", "queued", "hold", "pages", "executors", "threads", "memory_threads", "timeout"):
        value = getattr(args, name)
        if value is not None:
            if value <= 0:
                ap.error(f"--{name.replace('_', '-')} must be positive")
            setattr(cfg, name, value)
    from gridcrawl.settings import Settings
    known = {name for name, _, _ in Settings.documented()}
    for item in args.setting:
        key, sep, value = item.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not sep or key not in known:
            ap.error(f"--setting {item!r}: want NAME=VALUE with NAME a gridcrawl setting ({', '.join(sorted(known))})")
        cfg.settings[key] = value.strip()
    if "memory" in only and cfg.queued + 1000 > cfg.frontier:
        ap.error("--queued + 1000 must not exceed --frontier (the queue run submits frontier URLs)")
    if not nginx_available():
        print(f"error: nginx not found at {docsite.NGINX} (apt-get install nginx-light)", file=sys.stderr)
        return 2
    name = args.name or "scale-" + ("quick" if args.quick else "full") + ("" if len(only) == len(PARTS) else
                                                                          "-" + "-".join(only))
    args_line = shlex.join(["python", "benchmarks/scale.py", *(argv if argv is not None else sys.argv[1:])])
    parts = {"memory": part_memory, "scale": part_scale}
    return run_sections("gridcrawl scale and memory", name, args_line, args.out_dir, args.keep, "gridcrawl-scale-",
                        [functools.partial(parts[part], cfg) for part in only])


if __name__ == "__main__":
    sys.exit(main())
