"""The benchmark suite of issue 8: gridcrawl against single-process baselines, side by side.

This module owns the benchmark runner: one command, ``python benchmarks/run.py [--quick]
[--only NAME]``, that serves a site on 127.0.0.1 from a process of its own
(:mod:`servers`), crawls it with the two baselines (:mod:`baselines`, each run as a process of
its own) and with ``gridcrawl run`` at several executor counts, samples the memory of every
process, and prints and writes the results.

Scenarios (``--only`` picks some, comma-separated):

* ``cpu``: a generated documentation-like site (default 2,000 pages of 80 KB with 300 links
  each) served by nginx with no added latency: serial baseline, 16-thread baseline, gridcrawl
  ``--executors 1,2,3 --threads 8``. Issue 8 target 1: gridcrawl ≥ 1.3× the 16-thread baseline.
* ``latency``: the paper's Table 1. The same generated site served by ``SiteServer`` with
  50 ms per request; gridcrawl with 1..5 executors of one thread each crawls 50..300 pages
  (``--max-pages``); printed as a time table with the speedup at 5 executors (target ≥ 4.5×,
  paper 4.99×). Then a whole-site crawl: 4 executors × 16 threads against the 16-thread
  baseline (target ≥ 1.3×).
* ``docs``: the Python documentation (Debian's python3-doc) served by nginx: serial and
  16-thread baselines against ``gridcrawl --executors 2`` and ``4`` (skipped when python3-doc
  or nginx is missing).

Measures, per run: pages visited (gridcrawl: rows of ``visited_url`` in ``crawl.db``; baselines:
URLs fetched), documents (``document`` rows / successful fetches), crawl seconds (baselines:
first request to last page, in-process; gridcrawl: first grid thread submitted to last grid
thread finished, from the manager database's ``thread`` table), wall seconds (the whole command,
process start-up and shut-down included), pages/s on both, peak RSS and CPU seconds of every
process of the run's process tree (sampled with psutil every 0.2 s) by role: ``client`` (the
``gridcrawl run`` process, which runs the client), ``manager``, ``executor-N``, ``baseline``.

Output: rich tables on the terminal and the same as Markdown in
``benchmarks/results/<date>-<name>.md`` with the machine's description (CPU model, cores, RAM,
Python and package versions, load average). Nothing outside 127.0.0.0/8 is contacted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import functools
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable

import psutil
from rich.console import Console
from rich.table import Table as RichTable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from servers import SiteSpec, docs_available, serve_docs, serve_site  # noqa: E402

#: Terminal output; 240 columns when not a terminal (the tables are wide), else the terminal's width.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 240)

SCENARIOS = ("cpu", "latency", "docs", "startup", "ratio")
#: Seconds between two samples of the process tree's memory.
SAMPLE_INTERVAL = 0.2
MB = 1024 * 1024


# --------------------------------------------------------------------------------------------
# configuration


@dataclass
class Config:
    """Sizes of one benchmark run (the defaults are the full run; :meth:`quick` shrinks them).

    Attributes:
      site: the generated site of the ``cpu`` and ``latency`` scenarios (latency is set per
        scenario); cpu_executors: executor counts of ``cpu``; cpu_threads: threads per executor
        there; latency: seconds per request in ``latency``; table1_pages / table1_executors: the
        grid of the paper's Table 1; big_executors / big_threads: the grid of the whole-site
        latency crawl; light_site: the site of the same whole-site comparison on lighter pages
        (with the ``latency`` of the scenario); docs_executors / docs_threads: gridcrawl settings of ``docs``;
        baseline_threads: threads of the threaded baseline; timeout: seconds one run may take
        before it is stopped and reported as timed out; retries: times a failed gridcrawl run
        is tried again (reported under Problems); startup_* and ratio_*: the ``startup`` and
        ``ratio`` scenarios (comments below).
    """

    site: SiteSpec = field(default_factory=SiteSpec)
    cpu_executors: tuple[int, ...] = (1, 2, 3)
    cpu_threads: int = 8
    cpu_extra: tuple[tuple[int, int], ...] = ((2, 4), (3, 4), (2, 2))  # more (executors, threads) settings of ``cpu``
    latency: float = 0.05
    table1_pages: tuple[int, ...] = (50, 100, 150, 200, 250, 300)
    table1_executors: tuple[int, ...] = (1, 2, 3, 4, 5)
    big_executors: int = 4
    big_threads: int = 16
    #: the whole-site latency crawl again on lighter pages, where 50 ms of waiting, not the parse,
    #: bounds the 16-thread baseline (latency-bound, as the paper's experiment is)
    light_site: SiteSpec = field(default_factory=lambda: SiteSpec(pages=2000, links=40, page_bytes=20_000))
    docs_executors: tuple[int, ...] = (2, 4)
    docs_threads: int = 8
    docs_serial: bool = True
    baseline_threads: int = 16
    timeout: float = 900.0
    retries: int = 1
    #: ``startup``: runs of the one-page command (the median is reported), and its executors
    startup_runs: int = 5
    startup_executors: int = 4
    #: ``ratio``: side-by-side pairs per setting (the median ratio is reported), gridcrawl's
    #: executors × threads (chosen before the run: 2 × 8 = 16 fetch slots, as many as the
    #: baseline's threads) and per-host concurrency (the baseline's 16), added latencies (s)
    ratio_pairs: int = 3
    ratio_executors: int = 2
    ratio_threads: int = 8
    ratio_host_concurrency: int = 16
    ratio_latencies: tuple[float, ...] = (0.0, 0.05)

    @classmethod
    def quick(cls) -> "Config":
        """The ``--quick`` sizes: the whole suite in about two minutes (a smoke test)."""
        return cls(site=SiteSpec(pages=300, links=100, page_bytes=30_000),
                   light_site=SiteSpec(pages=300, links=20, page_bytes=10_000), cpu_executors=(1, 2),
                   cpu_extra=(), table1_pages=(50, 100), docs_executors=(4,), docs_serial=False, timeout=300.0,
                   startup_runs=3)


# --------------------------------------------------------------------------------------------
# measuring one process tree


def _role(proc: psutil.Process, root_pid: int, root_role: str) -> str:
    """Name the role of a process of a run: root_role for the root, else from its command line."""
    if proc.pid == root_pid:
        return root_role
    try:
        cmd = proc.cmdline()
        name = proc.name()
    except (psutil.Error, OSError):
        return "other"
    if name.startswith("gc-"):  # forked by gridcrawl run (gridcrawl.cli_common.ChildWatch.start)
        return name[3:]
    if "gridcrawl.manager" in cmd:
        return "manager"
    if "gridcrawl.executor" in cmd:
        if "--name" in cmd and cmd.index("--name") + 1 < len(cmd):
            return cmd[cmd.index("--name") + 1]
        return f"executor-pid{proc.pid}"
    if "gridcrawl.client" in cmd:
        return "client"
    if cmd and os.path.basename(cmd[0]) == "java":  # gridcrawl spark: Spark's JVM (driver and local executor)
        return "spark JVM"
    if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:  # gridcrawl spark: the tasks' Python workers
        return "spark Python worker"
    return "other"


class TreeSampler:
    """Samples the RSS and CPU time of a process and all its descendants every ``interval`` seconds.

    ``peak_rss[role]`` is the largest RSS (bytes) seen of the process(es) of that role;
    ``cpu[role]`` the user+system CPU seconds last seen (summed over processes of the role).
    Roles: ``root_role`` for the root, ``manager``, ``executor-N`` (its ``--name``), ``client``
    (a separate ``gridcrawl.client``); other descendants, and a child seen between fork and
    exec, are not recorded. Use as a context manager around the life of the root process.
    """

    def __init__(self, root_pid: int, root_role: str, interval: float = SAMPLE_INTERVAL) -> None:
        self.root_pid = root_pid
        self.root_role = root_role
        self.interval = interval
        self.peak_rss: dict[str, int] = {}
        self._cpu_by_pid: dict[int, tuple[str, float]] = {}
        self._roles: dict[int, str] = {}
        self._procs: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tree-sampler", daemon=True)
        self.samples = 0

    def __enter__(self) -> "TreeSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def cpu(self) -> dict[str, float]:
        """Role -> CPU seconds (user + system) at the last sample."""
        out: dict[str, float] = {}
        for role, seconds in self._cpu_by_pid.values():
            out[role] = out.get(role, 0.0) + seconds
        return out

    def _processes(self) -> list[psutil.Process]:
        try:
            root = self._procs.get(self.root_pid) or psutil.Process(self.root_pid)
            self._procs[self.root_pid] = root
            procs = [root]
            for child in root.children(recursive=True):
                procs.append(self._procs.setdefault(child.pid, child))
            return procs
        except psutil.Error:
            return []

    def sample(self) -> None:
        """Take one sample now (the sampler thread calls this every ``interval`` seconds)."""
        for proc in self._processes():
            try:
                with proc.oneshot():
                    rss = proc.memory_info().rss
                    times = proc.cpu_times()
            except psutil.Error:
                continue
            role = self._roles.get(proc.pid)
            if role is None:
                role = _role(proc, self.root_pid, self.root_role)
                if role == "other":  # e.g. forked but not yet exec'd: look again next time, record nothing
                    continue
                self._roles[proc.pid] = role
            self.peak_rss[role] = max(self.peak_rss.get(role, 0), rss)
            self._cpu_by_pid[proc.pid] = (role, times.user + times.system)
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)


@dataclass
class RunResult:
    """One crawl of the benchmark.

    Attributes:
      label: row name (``serial``, ``threads×16``, ``gridcrawl 2×8``); kind: ``serial``,
        ``threads`` or ``gridcrawl``; executors / threads / max_pages: its settings.
      pages, documents, errors: see the module docstring; expected: pages a correct crawl
        visits (None: unknown).
      crawl_seconds, wall_seconds: see the module docstring.
      startup_seconds, shutdown_seconds: gridcrawl only: from starting the command to the
        first grid thread submitted, and from the last grid thread finished to the command's
        exit (None when unknown).
      peak_rss: role -> bytes; cpu: role -> CPU seconds (sampled); cpu_total: user + system CPU
        seconds of the whole process tree, every process counted to its exit (the kernel's
        figures for the reaped command and its reaped descendants, ``RUSAGE_CHILDREN``);
        per_executor: executor name -> grid threads it ran (gridcrawl only).
      command: the command line; returncode: its exit status; error: why the run failed
        (timeout, exit status, unreadable database), or ""; failed_attempts: errors of earlier
        attempts that were retried (gridcrawl only).
    """

    label: str
    kind: str
    executors: int = 0
    threads: int = 0
    max_pages: int = 0
    pages: int = 0
    documents: int = 0
    errors: int = 0
    expected: int | None = None
    crawl_seconds: float = 0.0
    wall_seconds: float = 0.0
    startup_seconds: float | None = None
    shutdown_seconds: float | None = None
    peak_rss: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    cpu_total: float | None = None
    per_executor: dict[str, int] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    returncode: int | None = None
    error: str = ""
    failed_attempts: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """``label``, marked "(retried)" when earlier attempts failed."""
        return self.label + (" (retried)" if self.failed_attempts else "")

    @property
    def pages_per_second(self) -> float:
        """Pages per crawl second (0 when unknown)."""
        return self.pages / self.crawl_seconds if self.crawl_seconds > 0 else 0.0

    @property
    def wall_pages_per_second(self) -> float:
        """Pages per wall second (0 when unknown)."""
        return self.pages / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def count_ok(self) -> bool | None:
        """True when ``pages`` equals ``expected`` (None when nothing is expected)."""
        return None if self.expected is None else self.pages == self.expected


def _run_tree(cmd: list[str], root_role: str, timeout: float,
              out_path: Path) -> tuple[int | None, float, TreeSampler, str, float, float, float]:
    """Run ``cmd`` in a new session, sampling its process tree.

    Returns ``(status, wall seconds, sampler, error, start, end, cpu)``; ``start`` and ``end``
    are POSIX times (``time.time()``) just before starting and just after the exit; ``cpu`` the
    user + system CPU seconds of the command and every descendant it reaped (``getrusage``'s
    ``RUSAGE_CHILDREN`` before and after: nothing else of this process is reaped meanwhile).

    stdout and stderr go to ``out_path``. After ``timeout`` seconds the process group is sent
    SIGTERM, then SIGKILL 15 s later, and the error says so.
    """
    error = ""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out_path, "wb") as out:
        start_epoch = time.time()
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=str(REPO))
        with TreeSampler(proc.pid, root_role) as sampler:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                error = f"timed out after {timeout:.0f} s"
                stop_group(proc, signal.SIGTERM, grace=15)
            wall = time.perf_counter() - started
            end_epoch = time.time()
    # children that outlived the root (should not happen): stop them, they belong to this run
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, wall, sampler, error, start_epoch, end_epoch, cpu


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = 15.0) -> None:
    """Send ``sig`` to ``proc``'s process group (started with ``start_new_session``), wait up
    to ``grace`` seconds for ``proc``, then SIGKILL the group and reap ``proc``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


_EXCEPTION_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)|error)\b.*", re.IGNORECASE)


def _tail(path: Path, lines: int = 3) -> str:
    """The gist of a failed command's output: its last exception or ``error:`` line, else its
    last ``lines`` non-blank lines, joined with " / " (rich's boxes stripped)."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    clean = [line.strip(" │╭╮╰╯─━┃").strip() for line in text]
    clean = [line for line in clean if line]
    hits = [line for line in clean if _EXCEPTION_LINE.match(line)]
    return " / ".join(hits[-2:] if hits else clean[-lines:])[-600:]


def run_baseline(mode: str, seed: str, threads: int, max_pages: int, expected: int | None,
                 timeout: float, scratch: Path, store: bool = False) -> RunResult:
    """Run ``benchmarks/baselines.py MODE SEED --json`` as a process of its own; return its result.
    ``store``: the baseline stores its pages in a new SQLite file in ``scratch`` (``--store``)."""
    label = ("serial" if mode == "serial" else f"threads×{threads}") + (" storing" if store else "")
    cmd = [sys.executable, str(HERE / "baselines.py"), mode, seed, "--json"]
    if mode == "threads":
        cmd += ["--threads", str(threads)]
    if max_pages:
        cmd += ["--max-pages", str(max_pages)]
    if store:
        cmd += ["--store", str(scratch / f"baseline-{time.monotonic_ns()}.db")]
    res = RunResult(label, mode, threads=1 if mode == "serial" else threads, max_pages=max_pages,
                    expected=expected, command=cmd)
    out = scratch / f"baseline-{mode}-{threads}-{max_pages}-{time.monotonic_ns()}.out"
    _status(f"{label}{f' --max-pages {max_pages}' if max_pages else ''} ...")
    res.returncode, res.wall_seconds, sampler, res.error, _, _, res.cpu_total = _run_tree(cmd, "baseline", timeout,
                                                                                        out)
    res.peak_rss, res.cpu = sampler.peak_rss, sampler.cpu
    data = None
    for line in reversed(out.read_text(errors="replace").splitlines()):
        if line.startswith("{"):
            data = json.loads(line)
            break
    if data is None:
        res.error = res.error or f"exit status {res.returncode}: {_tail(out)}"
    else:
        res.pages, res.documents, res.errors = data["pages"], data["documents"], data["errors"]
        res.crawl_seconds = data["seconds"]
    _done(res)
    return res


def _parse_time(value) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value))


def read_gridcrawl_dbs(workdir: Path) -> dict:
    """Read a finished ``gridcrawl run``'s figures from WORKDIR/crawl.db and WORKDIR/manager.db.

    Returns a dict: ``pages`` (visited_url rows), ``documents`` (document rows), ``errors``
    (visited_url rows with an error kind), ``crawl_seconds`` (first thread submitted to last
    thread finished; 0.0 when the thread table is empty), ``first_submitted`` and
    ``last_finished`` (POSIX seconds, or None), ``per_executor`` (executor name -> finished grid
    threads). Raises sqlite3.Error when a database is missing or unreadable.
    """
    out: dict = {}
    crawl_db = workdir / "crawl.db"
    if not crawl_db.exists():
        raise sqlite3.OperationalError(f"{crawl_db} does not exist")
    with contextlib.closing(sqlite3.connect(f"file:{crawl_db}?mode=ro", uri=True)) as conn:
        out["pages"] = conn.execute("SELECT count(*) FROM visited_url").fetchone()[0]
        out["documents"] = conn.execute("SELECT count(*) FROM document").fetchone()[0]
        out["errors"] = conn.execute("SELECT count(*) FROM visited_url WHERE error_kind IS NOT NULL").fetchone()[0]
    out["crawl_seconds"] = 0.0
    out["per_executor"] = {}
    out["first_submitted"] = out["last_finished"] = None
    manager_db = workdir / "manager.db"
    if manager_db.exists():
        with contextlib.closing(sqlite3.connect(f"file:{manager_db}?mode=ro", uri=True)) as conn:
            first, last = conn.execute("SELECT min(time_submitted), max(time_finished) FROM thread").fetchone()
            first, last = _parse_time(first), _parse_time(last)
            if first and last:
                out["crawl_seconds"] = (last - first).total_seconds()
                utc = dt.timezone.utc
                out["first_submitted"] = first.replace(tzinfo=utc).timestamp()
                out["last_finished"] = last.replace(tzinfo=utc).timestamp()
            rows = conn.execute(
                "SELECT e.name, count(*) FROM thread t JOIN executor e ON e.executor_id = t.executor_id "
                "WHERE t.time_finished IS NOT NULL GROUP BY e.name ORDER BY e.name").fetchall()
            out["per_executor"] = {name: n for name, n in rows}
    return out


BENCH_HOST_CONCURRENCY = 256


def run_gridcrawl(seed: str, executors: int, threads: int, max_pages: int, expected: int | None,
                  timeout: float, scratch: Path, retries: int = 0, *,
                  host_concurrency: int | None = None, content: bool = False,
                  extra: tuple[str, ...] = ()) -> RunResult:
    """Run ``gridcrawl run SEED --executors E --threads T [--max-pages N] --no-progress --no-content
    --concurrent-requests-per-host 256``
    in a fresh workdir as a process tree of its own; return its result (figures read from the
    databases afterwards). ``host_concurrency``: ``--concurrent-requests-per-host`` (default
    :data:`BENCH_HOST_CONCURRENCY`; 0: not given, gridcrawl's default); ``content``: store page
    bodies (no ``--no-content``); ``extra``: more options.
    A failed run is tried again, in a fresh workdir, up to ``retries``
    times; the errors of failed attempts are kept in ``RunResult.failed_attempts``."""
    failures: list[str] = []
    while True:
        res = _gridcrawl_once(seed, executors, threads, max_pages, expected, timeout, scratch,
                              BENCH_HOST_CONCURRENCY if host_concurrency is None else host_concurrency, content,
                              extra)
        if not res.error or len(failures) >= retries:
            break
        failures.append(res.error)
        console.print("  [yellow]retrying once more[/yellow]")
    res.failed_attempts = failures
    return res


def _gridcrawl_once(seed: str, executors: int, threads: int, max_pages: int, expected: int | None,
                    timeout: float, scratch: Path, host_concurrency: int = BENCH_HOST_CONCURRENCY,
                    content: bool = False, extra: tuple[str, ...] = ()) -> RunResult:
    """One attempt of :func:`run_gridcrawl`."""
    workdir = Path(tempfile.mkdtemp(prefix=f"gc-e{executors}t{threads}-", dir=scratch))
    # The baselines put 16 requests at once on the one benchmark host; gridcrawl's default per-host
    # politeness (8 in flight, buffered threads included) would cap it below its executors' slots,
    # so the benchmark lifts it: the server is ours.
    cmd = [sys.executable, "-m", "gridcrawl", "run", seed, "--executors", str(executors),
           "--threads", str(threads), "--workdir", str(workdir), "--no-progress",
           *([] if content else ["--no-content"]),
           *(["--concurrent-requests-per-host", str(host_concurrency)] if host_concurrency else []), *extra]
    if max_pages:
        cmd += ["--max-pages", str(max_pages)]
    res = RunResult(f"gridcrawl {executors}×{threads}", "gridcrawl", executors, threads, max_pages,
                    expected=expected, command=cmd)
    _status(f"{res.label}{f' --max-pages {max_pages}' if max_pages else ''} ...")
    out = workdir / "run.out"
    res.returncode, res.wall_seconds, sampler, res.error, start, end, res.cpu_total = _run_tree(cmd, "client",
                                                                                              timeout, out)
    res.peak_rss, res.cpu = sampler.peak_rss, sampler.cpu
    try:
        figures = read_gridcrawl_dbs(workdir)
        res.pages, res.documents, res.errors = figures["pages"], figures["documents"], figures["errors"]
        res.crawl_seconds, res.per_executor = figures["crawl_seconds"], figures["per_executor"]
        if figures["first_submitted"] is not None:
            res.startup_seconds = figures["first_submitted"] - start
            res.shutdown_seconds = end - figures["last_finished"]
    except sqlite3.Error as exc:
        res.error = res.error or f"cannot read the databases: {exc}"
    if res.returncode not in (0, None) and not res.error:
        res.error = f"exit status {res.returncode}: {_tail(out)}"
    if res.crawl_seconds <= 0 and not res.error:
        res.error = "no finished grid threads in manager.db"
    if res.error:
        res.error += f" (logs in {workdir})"
    _done(res)
    return res


def _status(text: str) -> None:
    console.print(f"  [dim]{time.strftime('%H:%M:%S')}[/dim] {text}", end="")


def _done(res: RunResult) -> None:
    check = "" if res.count_ok in (None, True) else f" [red](expected {res.expected})[/red]"
    phases = ""
    if res.startup_seconds is not None:
        phases = f" (start-up {res.startup_seconds:.2f} s, shut-down {res.shutdown_seconds:.2f} s)"
    console.print(f" {res.pages} pages{check} in {res.crawl_seconds:.2f} s crawl / {res.wall_seconds:.2f} s wall"
                  f"{phases} = {res.pages_per_second:.1f} pages/s"
                  + (f" [red]ERROR: {res.error}[/red]" if res.error else ""))


# --------------------------------------------------------------------------------------------
# tables


@dataclass
class Table:
    """A table printed with rich and written as Markdown (all cells are strings)."""

    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    note: str = ""

    def rich(self) -> RichTable:
        """The table as a ``rich.table.Table``."""
        table = RichTable(title=self.title, title_justify="left")
        for i, h in enumerate(self.headers):
            table.add_column(h, justify="left" if i == 0 else "right")
        for row in self.rows:
            table.add_row(*row)
        return table

    def markdown(self) -> str:
        """The table as GitHub Markdown (title as bold line, note as a paragraph after it)."""
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.headers) + " |",
                 "|" + "|".join(":--" if i == 0 else "--:" for i in range(len(self.headers))) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in self.rows]
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines)


def _secs(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _mb(value: int | None) -> str:
    return "–" if not value else f"{value / MB:.0f}"


def _fmt_peaks(res: RunResult) -> tuple[str, str, str]:
    """(client or baseline MB, manager MB, executors MB each) of a run."""
    if res.kind != "gridcrawl":
        return _mb(res.peak_rss.get("baseline")), "–", "–"
    execs = sorted((k for k in res.peak_rss if k.startswith("executor")), key=lambda k: (len(k), k))
    return (_mb(res.peak_rss.get("client")), _mb(res.peak_rss.get("manager")),
            " / ".join(_mb(res.peak_rss[k]) for k in execs) or "–")


def _fmt_cpu(res: RunResult) -> str:
    """CPU seconds by role, e.g. ``client 3.1 · manager 1.2 · executors 9.8``."""
    if res.kind != "gridcrawl":
        return f"{res.cpu.get('baseline', 0.0):.1f}"
    execs = sum(v for k, v in res.cpu.items() if k.startswith("executor"))
    return f"client {res.cpu.get('client', 0.0):.1f} · manager {res.cpu.get('manager', 0.0):.1f} · executors {execs:.1f}"


def results_table(title: str, results: list[RunResult], reference: RunResult | None, note: str = "") -> Table:
    """The main table of a scenario: one row per run, with ratios to ``reference`` (a baseline)."""
    ref_name = reference.label if reference else "baseline"
    headers = ["crawler", "pages", "docs", "ok", "crawl s", "pages/s", "wall s", "pages/s (wall)",
               f"× {ref_name}", f"× {ref_name} (wall)", "start-up s", "shut-down s", "client/baseline MB",
               "manager MB", "executor MB each", "CPU s", "threads per executor"]
    table = Table(title, headers, note=note)
    for r in results:
        ok = "–" if r.count_ok is None else ("yes" if r.count_ok else f"NO (want {r.expected})")
        if r.error:
            ok = "FAILED"
        ratio = ratio_wall = "–"
        if reference and reference.pages_per_second > 0 and r.pages_per_second > 0:
            ratio = f"{r.pages_per_second / reference.pages_per_second:.2f}"
        if reference and reference.wall_pages_per_second > 0 and r.wall_pages_per_second > 0:
            ratio_wall = f"{r.wall_pages_per_second / reference.wall_pages_per_second:.2f}"
        client, manager, execs = _fmt_peaks(r)
        per_exec = " / ".join(str(n) for n in r.per_executor.values()) if r.per_executor else "–"
        table.rows.append([r.name, str(r.pages), str(r.documents), ok, f"{r.crawl_seconds:.2f}",
                           f"{r.pages_per_second:.1f}", f"{r.wall_seconds:.2f}", f"{r.wall_pages_per_second:.1f}",
                           ratio, ratio_wall, _secs(r.startup_seconds), _secs(r.shutdown_seconds), client,
                           manager, execs, _fmt_cpu(r), per_exec])
    return table


@dataclass
class Section:
    """The output of one scenario: a heading, a description, tables, failures and commands."""

    name: str
    heading: str
    description: str
    tables: list[Table] = field(default_factory=list)
    runs: list[RunResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    summary: dict = field(default_factory=dict)  # figures of the README table (:func:`readme_table`)

    def show(self, table: Table) -> None:
        """Add ``table`` and print it now."""
        self.tables.append(table)
        console.print()
        console.print(table.rich())
        if table.note:
            console.print(f"[dim]{table.note}[/dim]")

    def markdown(self) -> str:
        """The section as Markdown."""
        parts = [f"## {self.heading}", "", self.description, ""]
        for t in self.tables:
            parts += [t.markdown(), ""]
        problems = []
        for r in self.runs:
            where = f"`{r.label}`{f' --max-pages {r.max_pages}' if r.max_pages else ''}"
            for i, err in enumerate(r.failed_attempts, 1):
                problems.append(f"- {where}, attempt {i} (retried): {err}")
            if r.error or r.count_ok is False:
                problems.append(f"- {where}: {r.error or f'{r.pages} pages visited, {r.expected} expected'}")
        if problems:
            parts += ["Problems:", "", *problems, ""]
        for n in self.notes:
            parts += [n, ""]
        parts += ["<details><summary>commands run</summary>", "", "```"]
        parts += [shlex.join(_display_cmd(r.command)) for r in self.runs]
        parts += ["```", "</details>", ""]
        return "\n".join(parts)


def _display_cmd(cmd: list[str]) -> list[str]:
    """A command line with the interpreter shown as ``python`` and repo paths made relative."""
    out = []
    for i, part in enumerate(cmd):
        if i == 0 and part == sys.executable:
            out.append("python")
        elif part.startswith(str(REPO) + os.sep):
            out.append(os.path.relpath(part, REPO))
        else:
            out.append(part)
    return out


# --------------------------------------------------------------------------------------------
# scenarios


def scenario_cpu(cfg: Config, scratch: Path) -> Section:
    """``cpu``: the generated docs-like site via nginx, no added latency; whole-site crawls."""
    spec = SiteSpec(cfg.site.pages, cfg.site.links, cfg.site.page_bytes, cfg.site.seed, 0.0)
    section = Section("cpu", "cpu: documentation-like site, no added latency",
                      f"Generated site: {spec.describe()}. Whole-site crawls. Issue 8 target 1: gridcrawl "
                      f"≥ 1.3× the pages/s of the {cfg.baseline_threads}-thread baseline.")
    console.rule(f"[bold]cpu[/bold]: {spec.describe()}")
    with serve_site(spec) as served:
        section.description += f" Served by {served.server} at {served.base_url}."
        console.print(f"  served by {served.server} at {served.base_url}; {served.expected_pages} reachable pages")
        serial = run_baseline("serial", served.seed_url, 1, 0, served.expected_pages, cfg.timeout, scratch)
        threaded = run_baseline("threads", served.seed_url, cfg.baseline_threads, 0, served.expected_pages,
                                cfg.timeout, scratch)
        grid = [run_gridcrawl(served.seed_url, e, t, 0, served.expected_pages, cfg.timeout, scratch, cfg.retries)
                for e, t in [(e, cfg.cpu_threads) for e in cfg.cpu_executors] + list(cfg.cpu_extra)]
    section.runs = [serial, threaded, *grid]
    section.show(results_table(f"cpu — {spec.describe()}", section.runs, threaded,
                               note=_TABLE_NOTE))
    best = max(grid, key=lambda r: r.pages_per_second, default=None)
    if best:
        _ratio_note(section, f"Target 1: best gridcrawl setting {best.label}", best, threaded)
    return section


def _ratio_note(section: Section, what: str, grid: RunResult, baseline: RunResult) -> None:
    """Note (and print) ``what`` = the pages/s of ``grid`` over ``baseline``'s, on crawl and on
    wall seconds, against issue 8's 1.3×; nothing when either run has no rate."""
    if grid.pages_per_second <= 0 or baseline.pages_per_second <= 0:
        return
    section.notes.append(f"{what}: {grid.pages_per_second / baseline.pages_per_second:.2f}× the {baseline.label} "
                         f"baseline on crawl seconds, "
                         f"{grid.wall_pages_per_second / max(baseline.wall_pages_per_second, 1e-9):.2f}× on wall "
                         f"seconds (target ≥ 1.3×).")
    console.print(section.notes[-1])


def _table1(title: str, runs: dict[tuple[int, int], RunResult], pages: tuple[int, ...],
            executors: tuple[int, ...], attr: str, serial: RunResult | None) -> Table:
    headers = ["pages"] + [f"{e} executor{'s' if e > 1 else ''}" for e in executors]
    if len(executors) > 1:
        headers.append(f"speedup {executors[0]}→{executors[-1]}")
    table = Table(title, headers)
    for p in pages:
        row = [str(p)]
        for e in executors:
            r = runs[(p, e)]
            value = getattr(r, attr)
            row.append("FAILED" if r.error else f"{value:.2f}" + ("" if r.count_ok in (None, True) else "*")
                       + ("†" if r.failed_attempts else ""))
        if len(executors) > 1:
            first, last = runs[(p, executors[0])], runs[(p, executors[-1])]
            a, b = getattr(first, attr), getattr(last, attr)
            row.append(f"{a / b:.2f}×" if a > 0 and b > 0 and not (first.error or last.error) else "–")
        table.rows.append(row)
    if serial is not None:
        table.note = (f"Serial baseline, {serial.max_pages or serial.pages} pages: "
                      f"{getattr(serial, attr):.2f} s. * = page count differs from --max-pages. † = the first attempt "
                      f"failed and was retried (see Problems).")
    return table


def scenario_latency(cfg: Config, scratch: Path) -> Section:
    """``latency``: the paper's Table 1 (1..5 executors × 1 thread, 50..300 pages, 50 ms per
    request), then a whole-site crawl with 4 executors × 16 threads against the threaded baseline."""
    spec = SiteSpec(cfg.site.pages, cfg.site.links, cfg.site.page_bytes, cfg.site.seed, cfg.latency)
    section = Section("latency", f"latency: {cfg.latency * 1000:g} ms per request (the paper's Table 1)",
                      f"Generated site: {spec.describe()}, served by SiteServer (tests/sites.py) in a process of "
                      f"its own. Table 1: gridcrawl `--threads 1`, `--max-pages` N, executors "
                      f"{', '.join(map(str, cfg.table1_executors))}. Issue 8 target 2: speedup at 5 executors "
                      f"≥ 4.5× (paper: 300 pages, 36.1 s → 7.2 s, 4.99×); {cfg.big_executors} executors × "
                      f"{cfg.big_threads} threads ≥ 1.3× the {cfg.baseline_threads}-thread baseline.")
    console.rule(f"[bold]latency[/bold]: {spec.describe()}")
    if max(cfg.table1_pages) > spec.pages:
        section.notes.append(f"warning: the site has {spec.pages} pages, fewer than the largest --max-pages")
    runs: dict[tuple[int, int], RunResult] = {}
    with serve_site(spec) as served:
        console.print(f"  served by {served.server} at {served.base_url}; {served.expected_pages} reachable pages")
        top = max(cfg.table1_pages)
        serial = run_baseline("serial", served.seed_url, 1, top, min(top, served.expected_pages), cfg.timeout, scratch)
        for p in cfg.table1_pages:
            for e in cfg.table1_executors:
                runs[(p, e)] = run_gridcrawl(served.seed_url, e, 1, p, min(p, served.expected_pages),
                                             cfg.timeout, scratch, cfg.retries)
        threaded = run_baseline("threads", served.seed_url, cfg.baseline_threads, 0, served.expected_pages,
                                cfg.timeout, scratch)
        big = run_gridcrawl(served.seed_url, cfg.big_executors, cfg.big_threads, 0, served.expected_pages,
                            cfg.timeout, scratch, cfg.retries)
    light = dataclasses.replace(cfg.light_site, latency=cfg.latency)
    with serve_site(light) as served:
        console.print(f"  light pages: {light.describe()}, served by {served.server} at {served.base_url}")
        light_threaded = run_baseline("threads", served.seed_url, cfg.baseline_threads, 0, served.expected_pages,
                                      cfg.timeout, scratch)
        light_big = run_gridcrawl(served.seed_url, cfg.big_executors, cfg.big_threads, 0, served.expected_pages,
                                  cfg.timeout, scratch, cfg.retries)
    section.runs = [serial, *runs.values(), threaded, big, light_threaded, light_big]
    section.show(_table1("Table 1 — crawl seconds (first grid thread submitted → last finished), 1 thread per "
                         "executor", runs, cfg.table1_pages, cfg.table1_executors, "crawl_seconds", serial))
    section.show(_table1("Table 1 — wall seconds of `gridcrawl run` (process start-up and shut-down included)",
                         runs, cfg.table1_pages, cfg.table1_executors, "wall_seconds", serial))
    section.show(results_table("Table 1 runs in detail", [serial, *runs.values()], serial, note=_TABLE_NOTE))
    e1, e5 = cfg.table1_executors[0], cfg.table1_executors[-1]
    a, b = runs[(top, e1)], runs[(top, e5)]
    if a.crawl_seconds > 0 and b.crawl_seconds > 0:
        section.notes.append(f"Target 2a: {top} pages, {e1} → {e5} executors: {a.crawl_seconds:.2f} s → "
                             f"{b.crawl_seconds:.2f} s crawl = {a.crawl_seconds / b.crawl_seconds:.2f}× "
                             f"({a.wall_seconds:.2f} s → {b.wall_seconds:.2f} s wall = "
                             f"{a.wall_seconds / b.wall_seconds:.2f}×); target ≥ 4.5×, paper 4.99×.")
        console.print(section.notes[-1])
    section.show(results_table(f"whole site, {cfg.latency * 1000:g} ms per request", [threaded, big], threaded,
                               note=_TABLE_NOTE))
    _ratio_note(section, f"Target 2b: {big.label}", big, threaded)
    section.show(results_table(f"whole site, {light.describe()}", [light_threaded, light_big], light_threaded,
                               note=_TABLE_NOTE))
    _ratio_note(section, f"Target 2b on light pages ({light.describe()}): {light_big.label}", light_big,
                light_threaded)
    return section


def scenario_docs(cfg: Config, scratch: Path) -> Section | None:
    """``docs``: the Python documentation via nginx; baselines against gridcrawl. None when the
    docs or nginx are missing."""
    why = docs_available()
    if why:
        console.print(f"[yellow]docs scenario skipped: {why}[/yellow]")
        return Section("docs", "docs: skipped", f"Skipped: {why}.")
    section = Section("docs", "docs: the Python documentation (python3-doc) via nginx",
                      "Debian's python3-doc HTML (/usr/share/doc/python3-doc/html) served by nginx, crawled from "
                      "/index.html. Non-HTML links (_sources/*.txt, archives, images linked with <a>) are visited "
                      "but not parsed. The expected page count is the threaded baseline's.")
    console.rule("[bold]docs[/bold]: python3-doc via nginx")
    with serve_docs() as served:
        console.print(f"  served by {served.server} at {served.base_url}")
        runs = []
        threaded = run_baseline("threads", served.seed_url, cfg.baseline_threads, 0, None, cfg.timeout, scratch)
        expected = threaded.pages if not threaded.error else None
        if cfg.docs_serial:
            runs.append(run_baseline("serial", served.seed_url, 1, 0, expected, cfg.timeout, scratch))
        runs.append(threaded)
        for e in cfg.docs_executors:
            runs.append(run_gridcrawl(served.seed_url, e, cfg.docs_threads, 0, expected, cfg.timeout, scratch,
                                      cfg.retries))
    section.runs = runs
    section.show(results_table("docs — python3-doc via nginx", runs, threaded, note=_TABLE_NOTE))
    return section


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def scenario_startup(cfg: Config, scratch: Path) -> Section | None:
    """``startup``: what one page costs: ``gridcrawl run DOCS/glossary.html --max-pages 1
    --executors 4`` (gridcrawl's defaults otherwise), ``cfg.startup_runs`` times, wall and CPU
    seconds of every process (median reported); then ``--help`` of the four programs (the cost
    of starting each, median of 3). Issue 23 target 1: ≤ 1.0 s wall and ≤ 1.5 CPU-s."""
    why = docs_available()
    if why:
        console.print(f"[yellow]startup scenario skipped: {why}[/yellow]")
        return Section("startup", "startup: skipped", f"Skipped: {why}.")
    e = cfg.startup_executors
    section = Section("startup", "startup: one page, the whole command",
                      f"`gridcrawl run DOCS/glossary.html --max-pages 1 --executors {e} --no-progress` (gridcrawl's "
                      f"defaults otherwise: page bodies stored), the Python docs served by nginx, "
                      f"{cfg.startup_runs} runs after one uncounted warm-up run, each in a fresh work folder. CPU s: user + system seconds of the "
                      "command and all its processes to their exit (RUSAGE_CHILDREN). Issue 23 target 1: "
                      "≤ 1.0 s wall and ≤ 1.5 CPU-s.")
    console.rule("[bold]startup[/bold]: one page")
    runs: list[RunResult] = []
    with serve_docs() as served:
        seed = served.base_url + "/glossary.html"
        run_gridcrawl(seed, e, 8, 1, 1, cfg.timeout, scratch, cfg.retries, host_concurrency=0,
                      content=True)  # not counted: writes the bytecode caches, warms the file cache
        for _ in range(cfg.startup_runs):
            runs.append(run_gridcrawl(seed, e, 8, 1, 1, cfg.timeout, scratch, cfg.retries, host_concurrency=0,
                                      content=True))
    table = Table(f"one page, {e} executors", ["run", "wall s", "CPU s (all processes)", "start-up s", "crawl s",
                                               "shut-down s", "pages"])
    for i, r in enumerate(runs, 1):
        table.rows.append([str(i), f"{r.wall_seconds:.2f}", f"{r.cpu_total or 0:.2f}", _secs(r.startup_seconds),
                           f"{r.crawl_seconds:.2f}", _secs(r.shutdown_seconds), str(r.pages)])
    good = [r for r in runs if not r.error]
    wall, cpu = _median([r.wall_seconds for r in good]), _median([r.cpu_total or 0.0 for r in good])
    table.rows.append(["median", f"{wall:.2f}", f"{cpu:.2f}",
                       _secs(_median([r.startup_seconds for r in good if r.startup_seconds is not None])),
                       f"{_median([r.crawl_seconds for r in good]):.2f}",
                       _secs(_median([r.shutdown_seconds for r in good if r.shutdown_seconds is not None])), "–"])
    section.runs = runs
    section.show(table)
    section.summary = {"startup_wall": wall, "startup_cpu": cpu, "startup_runs": len(good), "startup_executors": e}
    section.notes.append(f"Target 1: one page in {wall:.2f} s wall and {cpu:.2f} CPU-s (median of {len(good)}; "
                         "target ≤ 1.0 s and ≤ 1.5 CPU-s).")
    console.print(section.notes[-1])
    helps = Table("`--help` of each program (median of 3)", ["command", "wall s", "CPU s"])
    for module, shown in (("gridcrawl", "gridcrawl"), ("gridcrawl.manager", "gridcrawl-manager"),
                          ("gridcrawl.executor", "gridcrawl-executor"), ("gridcrawl.client", "gridcrawl-client")):
        walls, cpus = [], []
        for _ in range(3):
            cmd = [sys.executable, "-m", module, "--help"]
            status, w, _, error, _, _, c = _run_tree(cmd, "help", 60, scratch / "help.out")
            if status == 0 and not error:
                walls.append(w)
                cpus.append(c)
        helps.rows.append([f"{shown} --help", f"{_median(walls):.2f}", f"{_median(cpus):.2f}"])
        section.summary.setdefault("helps", {})[shown] = (_median(walls), _median(cpus))
    section.show(helps)
    return section


def _per_page_beyond_first(run: RunResult, one_page: RunResult) -> float | None:
    """CPU seconds per page beyond the first of ``run``: (its CPU − ``one_page``'s) ÷ (pages − 1);
    None when either failed, has no CPU figure, or ``run`` visited fewer than 2 pages."""
    if run.error or one_page.error or not run.cpu_total or not one_page.cpu_total or run.pages < 2:
        return None
    return (run.cpu_total - one_page.cpu_total) / (run.pages - 1)


def net_cpu_ratio(base: RunResult, grid: RunResult, base1: RunResult, grid1: RunResult) -> float | None:
    """Target 2 net of start-up: gridcrawl's CPU seconds per page beyond the first (``grid`` less
    its one-page run ``grid1``) ÷ the baseline's (``base`` less ``base1``); None if not measurable."""
    base_net, grid_net = _per_page_beyond_first(base, base1), _per_page_beyond_first(grid, grid1)
    if base_net is None or grid_net is None or base_net <= 0:
        return None
    return grid_net / base_net


def floor_cpu_ratio(base: RunResult, grid: RunResult, base1: RunResult, grid1: RunResult) -> float | None:
    """The fixed cost's floor of target 2: the CPU-per-page ratio (start-up included) gridcrawl
    would have if each page beyond the first cost it exactly what it costs the baseline — its
    one-page CPU (``grid1``) plus the baseline's CPU per page beyond the first times its pages
    beyond the first, ÷ its pages, ÷ the baseline's CPU per page (``base``). gridcrawl's ratio
    goes below it only by spending less per page than the baseline. None if not measurable."""
    base_net = _per_page_beyond_first(base, base1)
    if base_net is None or grid.error or grid1.error or not grid1.cpu_total or grid.pages < 2:
        return None
    grid_equal = grid1.cpu_total + base_net * (grid.pages - 1)
    return (grid_equal / grid.pages) / (base.cpu_total / base.pages)


def scenario_ratio(cfg: Config, scratch: Path) -> Section | None:
    """``ratio``: the whole command against the 16-thread crawler, side by side: the Python docs
    served by nginx (no added latency) and by SiteServer with each of ``cfg.ratio_latencies``;
    per setting ``cfg.ratio_pairs`` rounds, each running gridcrawl, the 16-thread crawler storing
    the pages it fetches (``--store``: issue 23's baseline, "same pages stored") and the same
    crawler storing nothing, in a rotating order. Each round's ratio = gridcrawl's pages per wall
    second ÷ the baseline's; the median is reported. Issue 23 target 3: ≥ 1.5×. The same rounds
    give target 2 (≤ 1.1×): gridcrawl's CPU seconds per page (every process of the command) ÷
    the baseline's. Ratios to the storing baseline are the targets'; those to the one that
    stores nothing follow. Each round also runs gridcrawl and the storing baseline with
    ``--max-pages 1``: their CPU is each command's fixed cost (start-up, shut-down), and the
    "net of start-up" CPU ratio compares (CPU − that) per page beyond the first, the per-page
    cost alone (target 1 measures the fixed cost); the "fixed cost's floor" is the CPU ratio
    gridcrawl would have with the baseline's CPU per page beyond the first: target 2 is out of
    reach while it exceeds 1.1×, unless a page costs gridcrawl less than it costs the baseline."""
    why = docs_available()
    if why:
        console.print(f"[yellow]ratio scenario skipped: {why}[/yellow]")
        return Section("ratio", "ratio: skipped", f"Skipped: {why}.")
    e, t, h = cfg.ratio_executors, cfg.ratio_threads, cfg.ratio_host_concurrency
    section = Section("ratio", "ratio: the whole command, gridcrawl run vs the 16-thread crawler",
                      f"The Python docs from /index.html. gridcrawl: `gridcrawl run SEED --executors {e} --threads {t} "
                      f"--concurrent-requests-per-host {h} --no-sitemaps --no-progress` (page bodies stored; the "
                      f"setting chosen before the run; no sitemap request, so that both visit the same URLs); "
                      f"baseline: `benchmarks/baselines.py threads --threads {cfg.baseline_threads} --store FILE` "
                      "(one process, requests + lxml, storing each page's URL, status, type, title and text in "
                      "SQLite: issue 23's \"same pages stored\"), and the same without `--store` (stores "
                      f"nothing). {cfg.ratio_pairs} side-by-side rounds per setting, the order rotating; ratio = "
                      "pages per wall second of the whole command (start-up and shut-down included) ÷ the "
                      "baseline's; crawl-only ratio: the same on crawl seconds. Issue 23 target 3: ≥ 1.5×; "
                      "target 2: CPU per page ≤ 1.1×. Each round also runs gridcrawl and the storing baseline "
                      "with `--max-pages 1` (each command's fixed CPU); \"net of start-up\": (CPU − that) per "
                      "page beyond the first, gridcrawl's ÷ the storing baseline's; \"fixed cost's floor\": the "
                      "CPU-per-page ratio gridcrawl would have if each page beyond the first cost it what it costs "
                      "the baseline (its one-page CPU + the baseline's per-page CPU).")
    console.rule(f"[bold]ratio[/bold]: gridcrawl {e}×{t} vs threads×{cfg.baseline_threads}, {cfg.ratio_pairs} rounds")
    section.summary = {"ratio_setting": f"--executors {e} --threads {t} --concurrent-requests-per-host {h} "
                                        "--no-sitemaps",
                       "ratio_pairs": cfg.ratio_pairs, "ratios": {}}
    for latency in cfg.ratio_latencies:
        what = f"{latency * 1000:g} ms per request" if latency else "no added latency"
        rounds: list[tuple[RunResult, RunResult, RunResult]] = []
        fixed: dict[int, tuple[RunResult, RunResult]] = {}  # round -> (storing baseline, gridcrawl), one page
        with serve_docs(latency) as served:
            console.print(f"  {what}: served by {served.server} at {served.base_url}")
            for i in range(cfg.ratio_pairs):
                def base(store: bool) -> RunResult:
                    return run_baseline("threads", served.seed_url, cfg.baseline_threads, 0, None, cfg.timeout,
                                        scratch, store=store)

                def grid() -> RunResult:
                    return run_gridcrawl(served.seed_url, e, t, 0, None, cfg.timeout, scratch, cfg.retries,
                                         host_concurrency=h, content=True, extra=("--no-sitemaps",))
                runs: dict[str, RunResult] = {}
                for name in ("grid", "store", "count")[i % 3:] + ("grid", "store", "count")[:i % 3]:
                    runs[name] = grid() if name == "grid" else base(name == "store")
                runs["grid"].expected = runs["store"].pages if not runs["store"].error else None
                # each command's fixed cost: one page
                fixed[i] = (run_baseline("threads", served.seed_url, cfg.baseline_threads, 1, 1, cfg.timeout, scratch,
                                         store=True),
                            run_gridcrawl(served.seed_url, e, t, 1, 1, cfg.timeout, scratch, cfg.retries,
                                          host_concurrency=h, content=True, extra=("--no-sitemaps",)))
                rounds.append((runs["store"], runs["count"], runs["grid"]))
        table = Table(f"{what} ({served.server})", ["round", "gridcrawl pages", "gridcrawl wall s", "gridcrawl CPU s",
                                                    "start-up s", "shut-down s", "storing baseline wall s",
                                                    "storing baseline CPU s", "count-only baseline wall s",
                                                    "count-only baseline CPU s", "ratio (wall)",
                                                    "ratio (crawl s only)", "CPU per page ÷ baseline's",
                                                    "ratio (wall), count-only", "CPU per page ÷, count-only",
                                                    "one page: gridcrawl / baseline CPU s",
                                                    "CPU per page ÷ baseline's, net of start-up",
                                                    "fixed cost's floor"])
        walls, crawls, cpus, walls0, cpus0, nets, floors = [], [], [], [], [], [], []

        def ratios(base: RunResult, grid: RunResult) -> tuple[float | None, float | None, float | None]:
            ok = not base.error and not grid.error and base.wall_pages_per_second > 0
            wall = grid.wall_pages_per_second / base.wall_pages_per_second if ok else None
            crawl = grid.pages_per_second / base.pages_per_second if ok and base.pages_per_second else None
            cpu = ((grid.cpu_total / grid.pages) / (base.cpu_total / base.pages)
                   if ok and grid.cpu_total and base.cpu_total and grid.pages and base.pages else None)
            return wall, crawl, cpu

        def fmt(value: float | None) -> str:
            return "–" if value is None else f"{value:.2f}"
        for i, (store, count, grid) in enumerate(rounds):
            wall, crawl, cpu = ratios(store, grid)
            wall0, _, cpu0 = ratios(count, grid)
            store1, grid1 = fixed[i]
            cpu_net = net_cpu_ratio(store, grid, store1, grid1)
            cpu_floor = floor_cpu_ratio(store, grid, store1, grid1)
            for values, value in ((walls, wall), (crawls, crawl), (cpus, cpu), (walls0, wall0), (cpus0, cpu0),
                                  (nets, cpu_net), (floors, cpu_floor)):
                if value is not None:
                    values.append(value)
            order = ("gridcrawl, storing, count-only", "storing, count-only, gridcrawl",
                     "count-only, gridcrawl, storing")[i % 3]
            table.rows.append([f"{i + 1} ({order})", str(grid.pages), f"{grid.wall_seconds:.2f}",
                               f"{grid.cpu_total or 0:.2f}", _secs(grid.startup_seconds), _secs(grid.shutdown_seconds),
                               f"{store.wall_seconds:.2f}", f"{store.cpu_total or 0:.2f}",
                               f"{count.wall_seconds:.2f}", f"{count.cpu_total or 0:.2f}", fmt(wall), fmt(crawl),
                               fmt(cpu), fmt(wall0), fmt(cpu0),
                               f"{grid1.cpu_total or 0:.2f} / {store1.cpu_total or 0:.2f}", fmt(cpu_net),
                               fmt(cpu_floor)])
            section.runs += [store, count, grid, store1, grid1]

        def med(values: list[float]) -> str:
            return f"{_median(values):.2f}" if values else "–"
        table.rows.append(["median", "", med([g.wall_seconds for _, _, g in rounds]),
                           med([g.cpu_total or 0 for _, _, g in rounds]), "", "",
                           med([s.wall_seconds for s, _, _ in rounds]), med([s.cpu_total or 0 for s, _, _ in rounds]),
                           med([c.wall_seconds for _, c, _ in rounds]), med([c.cpu_total or 0 for _, c, _ in rounds]),
                           med(walls), med(crawls), med(cpus), med(walls0), med(cpus0),
                           f"{med([g.cpu_total or 0 for _, g in fixed.values()])} / "
                           f"{med([b.cpu_total or 0 for b, _ in fixed.values()])}", med(nets), med(floors)])
        section.show(table)
        section.summary["ratios"][what] = (_median(walls) if walls else None, _median(crawls) if crawls else None,
                                           len(walls), _median(walls0) if walls0 else None)
        section.summary.setdefault("cpu_ratios", {})[what] = (_median(cpus) if cpus else None, len(cpus),
                                                              _median(cpus0) if cpus0 else None,
                                                              _median(nets) if nets else None,
                                                              _median(floors) if floors else None)
        # the rounds' lowest and highest headline ratios: how far one round may stray from the median
        section.summary.setdefault("ranges", {})[what] = ((min(walls), max(walls)) if walls else None,
                                                          (min(cpus), max(cpus)) if cpus else None)
        section.notes.append(f"Target 3, {what}: gridcrawl {e}×{t} = "
                             + (f"{_median(walls):.2f}× the storing {cfg.baseline_threads}-thread crawler on wall clock"
                                if walls else "no complete round")
                             + (f" ({_median(crawls):.2f}× on crawl seconds only)" if crawls else "")
                             + (f"; {_median(walls0):.2f}× the one storing nothing" if walls0 else "")
                             + f", median of {len(walls)} rounds; target ≥ 1.5×.")
        console.print(section.notes[-1])
        section.notes.append(f"Target 2, {what}: gridcrawl's CPU per page (all its processes, start-up included) "
                             + (f"= {_median(cpus):.2f}× the storing {cfg.baseline_threads}-thread crawler's"
                                if cpus else "not measured (no complete round)")
                             + (f" ({_median(cpus0):.2f}× the one storing nothing)" if cpus0 else "")
                             + (f"; net of each command's one-page CPU, {_median(nets):.2f}×" if nets else "")
                             + (f"; at the baseline's CPU per page beyond the first it would be {_median(floors):.2f}×"
                                " (the fixed cost's floor)" if floors else "")
                             + f", median of {len(cpus)} rounds; target ≤ 1.1×.")
        console.print(section.notes[-1])
    return section


def readme_table(sections: list[Section], results: str, measured: str = "") -> str:
    """The README's performance table (Markdown) from the ``startup`` and ``ratio`` sections of
    one run whose results file is ``results`` (a path relative to the repository), under a line
    saying when and at what load it was ``measured``; "" when neither ran. Each headline ratio
    is the median of the rounds, followed by the lowest and highest round."""
    summary: dict = {}
    for section in sections:
        summary.update(section.summary)
    ranges = summary.get("ranges", {})

    def spread(what: str, which: int) -> str:
        low_high = (ranges.get(what) or (None, None))[which]
        return f"rounds {low_high[0]:.2f}–{low_high[1]:.2f}×; " if low_high else ""
    rows = []
    if "ratios" in summary:
        for what, (wall, crawl, n, wall0) in summary["ratios"].items():
            rows.append(f"| whole command, Python docs, {what}: `gridcrawl run` ({summary['ratio_setting']}) "
                        f"vs the 16-thread requests+lxml crawler storing the same pages, pages per wall second | "
                        + (f"**{wall:.2f}×** ({spread(what, 0)}crawl seconds only: {crawl:.2f}×; vs the crawler "
                           f"storing nothing: {wall0:.2f}×)" if wall is not None and crawl is not None and wall0 is not None
                           else "no complete round")
                        + f" | median of {n} rounds | ≥ 1.5× | `{results}` |")
    for what, (cpu, n, cpu0, cpu_net, cpu_floor) in summary.get("cpu_ratios", {}).items():
        rows.append(f"| CPU per page, Python docs, {what}: `gridcrawl run` ({summary['ratio_setting']}), all its "
                    f"processes, start-up included, vs the 16-thread crawler storing the same pages | "
                    + (f"**{cpu:.2f}×** ({spread(what, 1)}vs the crawler storing nothing: {cpu0:.2f}×"
                       + (f"; net of each command's one-page CPU: {cpu_net:.2f}×" if cpu_net is not None else "")
                       + (f"; floor set by the one-page CPU, at the baseline's CPU per page beyond the first: "
                          f"{cpu_floor:.2f}×" if cpu_floor is not None else "")
                       + ")" if cpu is not None and cpu0 is not None else "no complete round")
                    + f" | median of {n} rounds | ≤ 1.1× | `{results}` |")
    if "startup_wall" in summary:
        rows.append(f"| one page: `gridcrawl run …/glossary.html --max-pages 1 --executors "
                    f"{summary['startup_executors']}`, whole command | **{summary['startup_wall']:.2f} s** wall, "
                    f"**{summary['startup_cpu']:.2f}** CPU-s (all processes) | median of {summary['startup_runs']} "
                    f"| ≤ 1.0 s, ≤ 1.5 CPU-s | `{results}` |")
        helps = [f"{k} {w:.2f} s / {c:.2f} CPU-s" for k, (w, c) in summary.get("helps", {}).items()]
        if helps:
            rows.append(f"| starting each program (`--help`) | {'; '.join(helps)} | median of 3 | – | `{results}` |")
    if not rows:
        return ""
    head = [f"Measured {measured}.", ""] if measured else []
    return "\n".join([*head, "| measurement | result | runs | target | results file |", "|---|---|---|---|---|",
                      *rows])


_TABLE_NOTE = ("crawl s: baselines from first request to last page (in-process); gridcrawl from first grid thread "
               "submitted to last finished (manager.db). wall s: the whole command, interpreter start-up "
               "included. ×: pages/s ratio to the reference baseline. start-up s: command start to first grid "
               "thread submitted; shut-down s: last grid thread finished to command exit (gridcrawl only). "
               "MB: peak RSS sampled every 0.2 s. "
               "CPU s: user+system seconds per role. ok: page count equals the reachable set (or --max-pages).")


# --------------------------------------------------------------------------------------------
# machine description and output


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_description() -> list[tuple[str, str]]:
    """(name, value) pairs describing this machine and software for the results file."""
    cpu_model = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    nginx = "not installed"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        p = subprocess.run(["/usr/sbin/nginx", "-v"], capture_output=True, text=True, timeout=5)
        nginx = (p.stderr or p.stdout).strip().replace("nginx version: ", "")
    commit = "unknown"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        commit = head + (" (with uncommitted changes)" if dirty else "")
    packages = ", ".join(f"{d} {_version(d)}" for d in ("gridcrawl", "requests", "urllib3", "lxml", "w3lib",
                                                          "pyzmq", "SQLAlchemy", "psutil", "rich"))
    return [
        ("CPU", f"{cpu_model}, {psutil.cpu_count(logical=False)} cores, {psutil.cpu_count()} logical CPUs"),
        ("RAM", f"{psutil.virtual_memory().total / 1024 ** 3:.1f} GiB"),
        ("OS", platform.platform()),
        ("Python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("packages", packages),
        ("nginx", nginx),
        ("gridcrawl commit", commit),
    ]


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def _measured(started: dt.datetime, load_start: str, load_end: str) -> str:
    return (f"{started:%Y-%m-%d %H:%M} on {psutil.cpu_count()} CPUs, load average (1/5/15 min) {load_start} at "
            f"the start, {load_end} at the end")


def write_markdown(path: Path, title: str, args_line: str, sections: list[Section], started: dt.datetime,
                   seconds: float, load_start: str, load_end: str) -> None:
    """Write a results file: ``title`` and the date, the command, the load average, the machine,
    then every section."""
    lines = [f"# {title}, {started:%Y-%m-%d %H:%M}", "",
             f"Command: `{args_line}` ({seconds / 60:.1f} min). Load average (1/5/15 min) at start {load_start}, "
             f"at end {load_end}.", "", "| machine | |", "|:--|:--|"]
    lines += [f"| {k} | {v} |" for k, v in machine_description()]
    lines += ["", "Numbers from one run each unless a table says median; other programs on the machine add noise "
              "(see the load average).", ""]
    lines += [s.markdown() for s in sections]
    table = readme_table(sections, os.path.relpath(path, REPO), _measured(started, load_start, load_end))
    if table:
        lines += ["## README performance table", "", "(`--readme` writes it into README.md.)", "", table, ""]
    path.write_text("\n".join(lines))


README_START, README_END = "<!-- performance table: benchmarks/run.py --readme -->", "<!-- end of performance table -->"


def write_readme_table(table: str, readme: Path = REPO / "README.md") -> bool:
    """Put ``table`` between the :data:`README_START` and :data:`README_END` lines of
    ``readme``; False (nothing written) when the markers are missing."""
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return False
    readme.write_text(text[:start] + README_START + "\n" + table + "\n" + text[end:])
    return True


def run_sections(title: str, name: str, args_line: str, out_dir: Path, keep: bool, scratch_prefix: str,
                 parts: list[Callable[[Path], Section | None]], readme: bool = False) -> int:
    """Run benchmark ``parts`` (each given a shared scratch folder; None: skipped) and report.

    Prints the machine, runs the parts (Ctrl-C writes what was measured so far), writes the
    results as ``out_dir/<date>-<name>.md`` under ``title``, deletes generated sites
    (``*-site`` folders) and, unless ``keep`` or a run failed, the scratch folder, then lists
    retried and failed runs. ``readme``: also write the README's performance table
    (:func:`readme_table`) into README.md. Returns 1 when a run failed or counted wrong, else 0.
    """
    started, t0, load_start = dt.datetime.now(), time.perf_counter(), _load()
    console.print(f"[bold]{title}[/bold] ({name}); load average {load_start}")
    for k, v in machine_description():
        console.print(f"  {k}: {v}")
    scratch = Path(tempfile.mkdtemp(prefix=scratch_prefix))
    sections: list[Section] = []
    try:
        for part in parts:
            section = part(scratch)
            if section is not None:
                sections.append(section)
    except KeyboardInterrupt:
        console.print("[red]interrupted; writing what was measured[/red]")
    finally:
        seconds = time.perf_counter() - t0
        out_dir.mkdir(parents=True, exist_ok=True)
        path = _results_path(out_dir, name, started)
        load_end = _load()
        write_markdown(path, title, args_line, sections, started, seconds, load_start, load_end)
        failed = any(r.error or r.failed_attempts for s in sections for r in s.runs)
        for site in scratch.glob("*-site"):  # generated sites can be GBs: never kept
            shutil.rmtree(site, ignore_errors=True)
        if keep or failed:
            console.print(f"work folders (databases, logs) kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    console.print(f"\nresults written to {os.path.relpath(path)} ({seconds / 60:.1f} min)")
    table = readme_table(sections, os.path.relpath(path, REPO), _measured(started, load_start, load_end))
    if table:
        console.print("\nREADME performance table:\n" + table)
        if readme:
            console.print("README.md updated" if write_readme_table(table)
                          else f"[red]README.md has no {README_START} … {README_END} lines: not updated[/red]")
    for r in (r for s in sections for r in s.runs if r.failed_attempts):
        for err in r.failed_attempts:
            console.print(f"[yellow]retried: {r.label}{f' --max-pages {r.max_pages}' if r.max_pages else ''}: "
                          f"{err}[/yellow]")
    bad = [r for s in sections for r in s.runs if r.error or r.count_ok is False]
    for r in bad:
        console.print(f"[red]problem: {r.label}: {r.error or f'{r.pages} pages, {r.expected} expected'}[/red]")
    return 1 if bad else 0


def _results_path(out_dir: Path, name: str, when: dt.datetime) -> Path:
    path = out_dir / f"{when:%Y-%m-%d}-{name}.md"
    n = 2
    while path.exists():
        path = out_dir / f"{when:%Y-%m-%d}-{name}-{n}.md"
        n += 1
    return path


def main(argv: list[str] | None = None) -> int:
    """Command line of the suite; returns 0, or 1 when a run failed or counted wrong."""
    ap = argparse.ArgumentParser(description="gridcrawl benchmark suite (issue 8).")
    ap.add_argument("--quick", action="store_true", help="small sizes: the whole suite in about two minutes")
    ap.add_argument("--only", default="", help=f"comma-separated scenarios to run: {', '.join(SCENARIOS)}")
    ap.add_argument("--name", default="", help="results file name part (default: full or quick, plus --only)")
    ap.add_argument("--out-dir", type=Path, default=HERE / "results", help="where the Markdown goes")
    ap.add_argument("--pages", type=int, help="pages of the generated site")
    ap.add_argument("--links", type=int, help="links per generated page")
    ap.add_argument("--page-bytes", type=int, help="bytes per generated page")
    ap.add_argument("--latency", type=float, help="seconds per request in the latency scenario")
    ap.add_argument("--timeout", type=float, help="seconds one crawl may take before it is stopped")
    ap.add_argument("--retries", type=int, help="times a failed gridcrawl run is tried again (default 1)")
    ap.add_argument("--rounds", type=int, help="side-by-side rounds per setting of the ratio scenario (default 3)")
    ap.add_argument("--keep", action="store_true", help="keep gridcrawl's workdirs (databases and logs)")
    ap.add_argument("--readme", action="store_true", help="write the performance table (startup and ratio "
                    "scenarios) into README.md")
    args = ap.parse_args(argv)
    # what a user pays: an installed program runs from its bytecode cache (pip writes it; an
    # editable install writes it at the first run). A shell with PYTHONDONTWRITEBYTECODE set would
    # make every measured command compile gridcrawl's modules from source at every start.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    only = [s.strip() for s in args.only.split(",") if s.strip()] or list(SCENARIOS)
    unknown = [s for s in only if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    cfg = Config.quick() if args.quick else Config()
    site = cfg.site
    cfg.site = SiteSpec(args.pages or site.pages, args.links or site.links, args.page_bytes or site.page_bytes,
                        site.seed, 0.0)
    if args.latency is not None:
        cfg.latency = args.latency
    if args.timeout:
        cfg.timeout = args.timeout
    if args.retries is not None:
        cfg.retries = max(0, args.retries)
    if args.rounds is not None:
        cfg.ratio_pairs = max(1, args.rounds)
    name = args.name or ("quick" if args.quick else "full") + ("" if len(only) == len(SCENARIOS) else "-" + "-".join(only))
    args_line = shlex.join(["python", "benchmarks/run.py", *(argv if argv is not None else sys.argv[1:])])

    scenarios = {"cpu": scenario_cpu, "latency": scenario_latency, "docs": scenario_docs,
                 "startup": scenario_startup, "ratio": scenario_ratio}
    return run_sections("gridcrawl benchmark", name, args_line, args.out_dir, args.keep, "gridcrawl-bench-",
                        [functools.partial(scenarios[scenario], cfg) for scenario in only], readme=args.readme)


if __name__ == "__main__":
    sys.exit(main())
