"""One manager, many executors: an organisation's worth of desktops (issue 23, item 5).

    python benchmarks/many_executors.py [--executors 1000] [--baseline 4] [--threads 100000]

A real manager process (SQLite records, its dashboard on) gets ``--executors`` simulated
executors — ``--processes`` processes each holding its share of ZeroMQ DEALER sockets, speaking
the real protocol of :mod:`gridcrawl.protocol`: they register, heartbeat every second with the
figures a real executor sends (skipped while they sent results within the second, but at least
every five seconds, as the real link does), and answer every ``assign`` at once (one ``results`` message with a
tiny page per job, no ``started``, as a real executor whose jobs start and finish within one pass of
its loop; no fetch). One client application submits ``--threads`` grid threads at
once and acknowledges their results. The same run is then made with ``--baseline`` executors
(same processes, same worker count per executor), and the report gives:

* the dispatch rate (grid threads finished per second, first submit to last result) of both,
  and their ratio (target: at least 80 %), with the manager's CPU-seconds per 1,000 threads up
  to the last result and up to the last record written (every thread Dead in SQL);
* executors falsely declared dead, read from the manager's database at the end (attempts
  recorded ``lost``, executors recorded disconnected) and its log: a heartbeat not handled
  within the liveness would show there (target: none);
* the manager's memory per connected executor (RSS after every executor registered, minus
  RSS before the first one connected, divided by their number);
* the CPU-seconds the simulated executors' processes took meanwhile: on this machine they share
  its cores with the manager (real desktops would not), so a run whose simulated executors take
  more leaves the manager less;
* the seconds from starting the simulated executors until every one was welcomed (a building
  of desktops registering at once, as after a manager restart);
* the dashboard snapshot: the time to build it in the manager's loop with every executor
  connected and every thread queued (:func:`gridcrawl.manager.dashboard.snapshot` on a core fed
  the same messages, in this process), and the wall time of ``GET /api/snapshot`` from the live
  manager during the run (target: under 100 ms).

``--rounds N`` (default 3) makes N side-by-side pairs, the order alternating (few then many,
many then few, ...): the rate of a run wanders by tens of percent on a shared 2-core machine,
the ratio of a pair less. The report gives every pair's ratio and their median, and the table
of the pair whose ratio is the median. Output: a Markdown report on stdout (and to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import select
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
import zmq

from gridcrawl import protocol as p
from gridcrawl.link import LinkState

SUBMIT_CHUNK = 10_000  # grid threads per submit message (the manager's limit)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def executors_process(endpoint: str, first: int, count: int, workers: int, stop, ready, counts, welcomes) -> None:
    """Hold ``count`` simulated executors (DEALER sockets) named ``sim-<first+i>`` until ``stop``
    is set: register each, heartbeat each every second, answer every assign at once, register
    again when refused (declared dead). Counts each welcome in ``welcomes`` (an integer shared by
    every such process) as it comes, and puts ``(results sent, refusals)`` on ``counts`` at the end.

    The process waits on the sockets' ``ZMQ_FD`` descriptors with epoll, which costs what is
    ready, not what is open: ``zmq.Poller`` over 250 sockets costs about 180 us of CPU a call on
    this machine, a cost a real executor (one socket) never pays, taken from the cores the
    manager runs on. ``ZMQ_FD`` only signals that the socket's state may have changed, so a
    socket is read until ``ZMQ_EVENTS`` says nothing is waiting, after every wake-up and after
    every send on it: the descriptor signals again only once ``ZMQ_EVENTS`` has been read since
    the socket's last operation (libzmq's ``zmq_getsockopt`` documentation, ZMQ_FD; seen here: a
    reply to a socket whose events were not read after its send woke nothing)."""
    context = zmq.Context()
    sockets = []
    waiting = set()  # executors registering: not again until welcomed (the real executor backs off)
    results, refusals = 0, 0
    pages = [0] * count
    last_sent = [float("-inf")] * count  # as the real link (gridcrawl.link.LinkState's heartbeat rule)
    last_beat = [time.monotonic()] * count

    def register(i: int) -> None:
        waiting.add(i)
        sockets[i].send_multipart(p.encode(p.Register(name=f"sim-{first + i}", host="sim", user="bench",
                                                      threads=workers, num_cpus=2, mem_max=8 << 30, cpu_max=2400.0)))

    def serve(i: int) -> None:
        """Read everything waiting on executor ``i``'s socket and answer it (the results of one
        pass in one message, as the real executor: each job started and finished within the pass,
        so no ``started``; its result's ``ran`` says when)."""
        nonlocal results, refusals
        sock = sockets[i]
        while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            jobs = []
            while True:
                try:
                    m = p.decode(sock.recv_multipart(zmq.NOBLOCK))
                except zmq.Again:
                    break
                if isinstance(m, p.Assign):
                    jobs += m.jobs
                elif isinstance(m, p.Welcome):
                    waiting.discard(i)
                    with welcomes.get_lock():
                        welcomes.value += 1
                elif isinstance(m, p.Refuse):  # declared dead meanwhile: register again, as an executor does
                    refusals += 1
                    if i not in waiting:
                        register(i)
            if jobs:
                sock.send_multipart(p.encode(p.Results([
                    p.AttemptResult(job.attempt_id, p.encode_page(p.PageResult(
                        url=job.url, final_url=job.url, status=200, content_type="text/html", size=64,
                        content="<html>tiny</html>", links=[])), 0.0) for job in jobs])))
                results += len(jobs)
                pages[i] += len(jobs)
                last_sent[i] = time.monotonic()

    def heartbeat() -> float:
        """Every executor heartbeats once a second, with a real executor's figures, unless it sent
        results within the last second (then at least every LinkState.FIGURES_EVERY seconds), as
        the real executor's link does; then every socket is read (the sends may have consumed
        signals); returns when the next round is due."""
        now = time.monotonic()
        for i, sock in enumerate(sockets):
            if now - last_sent[i] < 1.0 and now - last_beat[i] < LinkState.FIGURES_EVERY - 0.5:
                continue
            last_beat[i] = now
            sock.send_multipart(p.encode(p.Heartbeat({
                "cpu_usage": 1.0, "cpu_avail": 90.0, "cpu_totalusage": 1.0, "mem_usage": 50 << 20,
                "running": 0, "pages_per_second": float(pages[i]), "worker_idle_seconds": 0.0,
                "worker_waits": 0})))
        for i in range(count):
            serve(i)
        return time.monotonic() + 1.0

    epoll = select.epoll()
    by_fd = {}
    for i in range(count):
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.connect(endpoint)
        sockets.append(sock)
        register(i)
        by_fd[sock.getsockopt(zmq.FD)] = i
        epoll.register(sock.getsockopt(zmq.FD), select.EPOLLIN)
    for i in range(count):  # ZMQ_FD signals only once ZMQ_EVENTS has been read since the last send
        serve(i)
    next_beat = time.monotonic() + 1.0
    ready.release()
    while not stop.is_set():
        for fd, _ in epoll.poll(max(0.0, min(0.1, next_beat - time.monotonic()))):
            serve(by_fd[fd])
            if time.monotonic() >= next_beat:  # heartbeats first, even in the middle of a burst
                next_beat = heartbeat()
        if time.monotonic() >= next_beat:
            next_beat = heartbeat()
    epoll.close()
    for sock in sockets:
        sock.send_multipart(p.encode(p.Bye("benchmark over")))
        sock.close()
    context.term()
    counts.put((results, refusals))


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` in MB."""
    return psutil.Process(pid).memory_info().rss / 2**20


def cpu_seconds(pid: int) -> float:
    """User + system CPU-seconds so far of process ``pid`` and its live descendants (the
    manager's record writer process)."""
    process = psutil.Process(pid)
    return sum(sum(p.cpu_times()[:2]) for p in [process, *process.children(recursive=True)])


def wait_for(predicate, timeout: float, what: str) -> None:
    """Poll ``predicate`` every 0.1 s; raise RuntimeError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def query(db: Path, sql: str):
    """One row of ``sql`` on the manager database (read while the manager writes: WAL)."""
    with sqlite3.connect(db, timeout=30) as conn:
        return conn.execute(sql).fetchone()


def get_snapshot_ms(url: str) -> float:
    """Wall milliseconds of one ``GET /api/snapshot`` of the dashboard at ``url``."""
    started = time.perf_counter()
    with urllib.request.urlopen(url + "api/snapshot", timeout=30) as response:
        json.loads(response.read())
    return (time.perf_counter() - started) * 1000


def run(executors: int, processes: int, workers: int, threads: int, tmp: Path) -> dict:
    """One run: a manager, ``executors`` simulated executors in ``processes`` processes,
    ``threads`` grid threads submitted at once. Returns the run's figures (see the module)."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    http = free_port()
    db = tmp / f"manager-{executors}.db"
    log = tmp / f"manager-{executors}.log"
    manager = subprocess.Popen([sys.executable, "-m", "gridcrawl.manager", "--bind", endpoint, "--db", f"sqlite:///{db}",
                                "--log-level", "WARNING", "--log-file", str(log), "--http", f"127.0.0.1:{http}",
                                "--concurrent-requests-per-host", "100000"],
                               env={**os.environ, "GRIDCRAWL_MAX_THREADS_PER_APPLICATION": str(max(threads, 100_000))})
    procs, stop = [], multiprocessing.Event()
    counts = multiprocessing.Queue()
    welcomes = multiprocessing.Value("i", 0)
    figures: dict = {"executors": executors}
    try:
        wait_for(lambda: _listening(http), 60, "the manager's dashboard")
        figures["rss_idle_mb"] = rss_mb(manager.pid)
        ready = multiprocessing.Semaphore(0)
        registering = time.perf_counter()
        share = [executors // processes + (1 if i < executors % processes else 0) for i in range(processes)]
        first = 0
        for n in share:
            if n:
                procs.append(multiprocessing.Process(target=executors_process,
                                                     args=(endpoint, first, n, workers, stop, ready, counts, welcomes)))
                procs[-1].start()
            first += n
        for _ in procs:
            ready.acquire(timeout=120)
        deadline = time.monotonic() + 120
        while welcomes.value < executors:
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after 120 s: {welcomes.value} of {executors} executors welcomed")
            time.sleep(0.01)
        figures["register_s"] = time.perf_counter() - registering
        wait_for(lambda: query(db, "SELECT COUNT(*) FROM executor WHERE is_connected = 1")[0] >= executors, 120,
                 f"{executors} executors registered")
        time.sleep(3.0)  # a few heartbeat rounds: the memory of connected, heartbeating executors
        figures["rss_connected_mb"] = rss_mb(manager.pid)
        figures["rss_per_executor_kb"] = (figures["rss_connected_mb"] - figures["rss_idle_mb"]) * 1024 / executors

        client = _Client(endpoint)
        cpu0 = cpu_seconds(manager.pid)
        simulated0 = sum(cpu_seconds(proc.pid) for proc in procs)
        started = time.perf_counter()
        for i in range(0, threads, SUBMIT_CHUNK):
            client.submit(range(i, min(threads, i + SUBMIT_CHUNK)))
        snapshots, next_snapshot = [], started + 1.0
        done = set()
        while len(done) < threads:
            got = client.receive(60_000)
            if not got:
                raise RuntimeError(f"no results for 60 s after {len(done)} of {threads} threads; the manager's log "
                                   f"ends: {log.read_text()[-2000:] if log.exists() else '(none)'}")
            done.update(got)
            if time.perf_counter() >= next_snapshot and len(snapshots) < 5:  # the dashboard, under load
                snapshots.append(get_snapshot_ms(f"http://127.0.0.1:{http}/"))
                next_snapshot = time.perf_counter() + 1.0
        elapsed = time.perf_counter() - started
        figures["manager_cpu_s"] = cpu_seconds(manager.pid) - cpu0
        figures["executors_cpu_s"] = sum(cpu_seconds(proc.pid) for proc in procs) - simulated0
        figures["seconds"] = elapsed
        figures["rate"] = threads / elapsed
        figures["http_snapshot_ms"] = statistics.median(snapshots) if snapshots else None
        client.close()
        wait_for(lambda: query(db, "SELECT COUNT(*) FROM thread WHERE state = 4")[0] >= threads, 120,
                 "every thread recorded Dead")
        # until every record is written: the recorder writes a fast run's rows after its last
        # result, so the CPU up to the last result alone flatters the faster run
        figures["manager_cpu_recorded_s"] = cpu_seconds(manager.pid) - cpu0
        figures["threads_dead"] = query(db, "SELECT COUNT(*) FROM thread WHERE state = 4")[0]
        figures["attempts"] = query(db, "SELECT COUNT(*) FROM attempt")[0]
        figures["attempts_not_finished"] = query(db, "SELECT COUNT(*) FROM attempt WHERE outcome <> 'finished'")[0]
        figures["executors_recorded"] = query(db, "SELECT COUNT(*) FROM executor")[0]
        figures["executors_disconnected"] = query(db, "SELECT COUNT(*) FROM executor WHERE is_connected = 0")[0]
        text = log.read_text()
        figures["declared_dead"] = len(re.findall(r"declared dead", text))
    finally:
        stop.set()
        results = refusals = 0
        for _ in procs:
            try:
                r, f = counts.get(timeout=30)
                results, refusals = results + r, refusals + f
            except Exception:
                pass
        for proc in procs:
            proc.join(30)
        manager.terminate()
        manager.wait(30)
    figures.update(welcomed=welcomes.value, results=results, refusals=refusals)
    return figures


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class _Client:
    """A client application on a DEALER socket (the real protocol): open, submit, ack."""

    def __init__(self, endpoint: str) -> None:
        self.context = zmq.Context()
        self.sock = self.context.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 2000)
        self.sock.connect(endpoint)
        self.sock.send_multipart(p.encode(p.OpenApplication("many-executors", "bench")))
        self.last_beat = time.monotonic()
        while True:
            m = p.decode(self.sock.recv_multipart())
            if isinstance(m, p.ApplicationOpened):
                self.app = m.application_id
                break

    def submit(self, ids) -> None:
        self.sock.send_multipart(p.encode(p.Submit(self.app, [p.ThreadSpec(i, f"http://h{i % 997}.test/{i}")
                                                              for i in ids])))

    def receive(self, timeout_ms: int) -> list[int]:
        """Thread ids of the results that arrived within ``timeout_ms`` (acknowledged)."""
        done = []
        deadline = time.monotonic() + timeout_ms / 1000
        while not done and time.monotonic() < deadline:
            if time.monotonic() - self.last_beat >= 1.0:
                self.sock.send_multipart(p.encode(p.Heartbeat()))
                self.last_beat = time.monotonic()
            if not self.sock.poll(200):
                continue
            while True:
                try:
                    m = p.decode(self.sock.recv_multipart(zmq.NOBLOCK))
                except zmq.Again:
                    break
                if isinstance(m, p.ThreadDone):
                    done += [t.thread_id for t in m.threads]
        if done:
            self.sock.send_multipart(p.encode(p.Ack(self.app, done)))
        return done

    def close(self) -> None:
        self.sock.send_multipart(p.encode(p.CloseApplication(self.app)))
        self.sock.close()
        self.context.term()


def snapshot_build_ms(executors: int, threads: int, workers: int, repeats: int = 5) -> list[float]:
    """Milliseconds to build the dashboard snapshot of a core (no sockets) that has ``executors``
    registered executors, each holding its window of attempts, and ``threads`` grid threads."""
    from gridcrawl.manager.core import ManagerCore
    from gridcrawl.manager.dashboard import snapshot
    from gridcrawl.settings import Settings
    core = ManagerCore(Settings(concurrent_requests_per_host=100_000))
    for i in range(executors):
        core.handle(f"e{i}".encode(), p.Register(name=f"sim-{i}", host="sim", user="bench", threads=workers), 0.0)
    core.handle(b"client", p.OpenApplication("many-executors", "bench"), 0.0)
    app = next(iter(core.applications))
    for i in range(0, threads, SUBMIT_CHUNK):
        core.handle(b"client", p.Submit(app, [p.ThreadSpec(j, f"http://h{j % 997}.test/{j}")
                                               for j in range(i, min(threads, i + SUBMIT_CHUNK))]), 0.0)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        snapshot(core, 1.0)
        times.append((time.perf_counter() - started) * 1000)
    return times


def report(pairs: list[tuple[dict, dict]], build_ms: list[float], args) -> str:
    """The Markdown report of ``pairs`` of runs, each (many executors, few): every pair's ratio,
    their median, and the table of the pair with the median ratio (the lower middle one of an
    even number)."""
    ratios = [many["rate"] / few["rate"] for many, few in pairs]
    middle = sorted(range(len(pairs)), key=ratios.__getitem__)[(len(pairs) - 1) // 2]
    many, few = pairs[middle]
    load = os.getloadavg()
    lines = [f"# One manager, {args.executors} executors ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"`python benchmarks/many_executors.py --executors {args.executors} --baseline {args.baseline} "
             f"--threads {args.threads} --processes {args.processes} --workers {args.workers} "
             f"--baseline-workers {args.baseline_workers} --rounds {args.rounds}`", "",
             f"Machine: {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
             "(1/5/15 min) at the end. Simulated executors answer at once (no fetch).", "",
             f"Round {middle + 1} of {len(pairs)} (the median ratio):", "",
             "| executors | threads/s | manager CPU s per 1,000 threads | … until every thread is recorded "
             "| threads Dead in SQL | attempts not finished "
             "| executors recorded disconnected | 'declared dead' log lines | RSS idle → connected MB | "
             "RSS per executor KB | every executor welcomed s | GET /api/snapshot ms (median) | "
             "simulated executors' CPU s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in (few, many):
        lines.append(f"| {f['executors']} | {f['rate']:,.0f} | {f['manager_cpu_s'] / args.threads * 1000:.3f} | "
                     f"{f['manager_cpu_recorded_s'] / args.threads * 1000:.3f} | "
                     f"{f['threads_dead']:,} | {f['attempts_not_finished']} | {f['executors_disconnected']} | "
                     f"{f['declared_dead']} | {f['rss_idle_mb']:.0f} → {f['rss_connected_mb']:.0f} | "
                     f"{f['rss_per_executor_kb']:.1f} | {f['register_s']:.2f} | "
                     f"{'-' if f['http_snapshot_ms'] is None else format(f['http_snapshot_ms'], '.0f')} | "
                     f"{f['executors_cpu_s']:.2f} |")
    cpu_ratios = [few["manager_cpu_s"] / max(many["manager_cpu_s"], 1e-9) for many, few in pairs]
    each = ", ".join(f"{r:.0%} ({m['rate']:,.0f} / {f['rate']:,.0f})" for r, (m, f) in zip(ratios, pairs))
    lines += ["",
              f"- dispatch rate with {args.executors} executors: **{statistics.median(ratios):.0%}** of the rate "
              f"with {args.baseline}, median of {len(pairs)} pairs: {each} threads/s; manager CPU per thread "
              f"{statistics.median(cpu_ratios):.0%} as efficient (median; "
              f"{', '.join(f'{r:.0%}' for r in cpu_ratios)})",
              f"- dashboard snapshot built in the loop's code with {args.executors} executors and "
              f"{args.threads:,} queued threads: median **{statistics.median(build_ms):.0f} ms** "
              f"(of {len(build_ms)}: {', '.join(f'{t:.0f}' for t in build_ms)})",
              f"- simulated executors welcomed: {many['welcomed']} of {args.executors} (refusals {many['refusals']}); "
              f"results sent {many['results']:,}, attempts recorded {many['attempts']:,}; every executor "
              f"welcomed (from the simulated executors' start) in {', '.join(format(m['register_s'], '.2f') for m, _ in pairs)} s"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--executors", type=int, default=1000, help="simulated executors of the big run")
    parser.add_argument("--baseline", type=int, default=4, help="simulated executors of the comparison run")
    parser.add_argument("--threads", type=int, default=100_000, help="grid threads submitted at once")
    parser.add_argument("--processes", type=int, default=4, help="processes holding the simulated executors")
    parser.add_argument("--workers", type=int, default=2, help="worker threads each executor of the big run declares")
    parser.add_argument("--baseline-workers", type=int, default=64,
                        help="worker threads each executor of the comparison run declares (64, the manager's cap: "
                             "few executors with many slots keep the manager, not the executors, the limit)")
    parser.add_argument("--rounds", type=int, default=3, help="side-by-side pairs of runs, the order alternating")
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args()
    if min(args.executors, args.baseline, args.threads, args.processes, args.workers, args.baseline_workers,
           args.rounds) < 1:
        parser.error("every count must be at least 1")
    setups = {"few": (args.baseline, min(args.processes, args.baseline), args.baseline_workers),
              "many": (args.executors, args.processes, args.workers)}  # executors, processes, workers
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            runs, folder = {}, Path(tmp) / f"round-{i + 1}"  # each run its own manager database
            folder.mkdir()
            for which in (("few", "many") if i % 2 == 0 else ("many", "few")):
                runs[which] = run(*setups[which], args.threads, folder)
            pairs.append((runs["many"], runs["few"]))
    build_ms = snapshot_build_ms(args.executors, args.threads, args.workers)
    text = report(pairs, build_ms, args)
    print(text)
    print("FIGURES " + json.dumps({"pairs": [{"many": m, "few": f} for m, f in pairs], "snapshot_build_ms": build_ms}))
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
