"""The grid's own cost, without the web: how many grid threads per second a real manager process
dispatches and records (SQLite), the time it adds to one thread at light load, and how many
results per second the client applies to its tables.

    python benchmarks/grid_overhead.py [--threads 20000] [--executors 4]

Executors here are in-process stand-ins on real ZeroMQ sockets that answer every ``assign`` at
once with a tiny page (no fetch, no parse), so what is measured is the manager: decoding,
scheduling, encoding, and the batched SQL records. The manager's records are checked at the end
(every thread Dead in SQL), so a fast but lossy run cannot pass for a good one.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from gridcrawl import protocol as p  # noqa: E402
from many_executors import cpu_seconds  # noqa: E402  (benchmarks/many_executors.py)


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_executor(endpoint: str, name: str, stop: threading.Event, links: int) -> None:
    """Register, then answer every assign at once with a tiny result per job (one ``results``)."""
    sock = zmq.Context().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sock.send_multipart(p.encode(p.Register(name=name, host="bench", user="bench", threads=64)))
    page_links = [[f"http://bench.test/{i}", "x"] for i in range(links)]
    last_beat = time.monotonic()
    while not stop.is_set():
        if not sock.poll(100):
            continue
        jobs = []
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            m = p.decode(frames)
            if isinstance(m, p.Assign):
                jobs += m.jobs
        if jobs:  # as the real executor: the results seen in one pass in one message; each started and
            # finished within the pass, so no ``started``: its result's ``ran`` says when
            sock.send_multipart(p.encode(p.Results([
                p.AttemptResult(job.attempt_id, p.encode_page(p.PageResult(
                    url=job.url, final_url=job.url, status=200, content_type="text/html", size=64,
                    content="<html>tiny</html>", links=page_links)), 0.0) for job in jobs])))
        if time.monotonic() - last_beat > 0.5:
            sock.send_multipart(p.encode(p.Heartbeat()))
            last_beat = time.monotonic()
    sock.close()


class Client:
    def __init__(self, endpoint: str) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.duplicates = 0
        self.sock.send_multipart(p.encode(p.OpenApplication("bench", "bench")))
        while True:
            m = p.decode(self.sock.recv_multipart())
            if isinstance(m, p.ApplicationOpened):
                self.app = m.application_id
                break

    def submit(self, ids) -> None:
        self.sock.send_multipart(p.encode(p.Submit(self.app, [p.ThreadSpec(i, f"http://bench.test/{i}") for i in ids])))

    def receive(self, timeout_ms: int = 5000) -> list[int]:
        done = []
        if self.sock.poll(timeout_ms):
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


def throughput(endpoint: str, total: int, window: int) -> float:
    """Threads per second with ``window`` threads kept in flight."""
    client = Client(endpoint)
    next_id, finished = 0, set()  # distinct thread ids: a result delivered twice counts once
    started = time.perf_counter()
    while len(finished) < total:
        room = min(window - (next_id - len(finished)), total - next_id)
        if room > 0:
            client.submit(range(next_id, next_id + room))
            next_id += room
        deadline = time.monotonic() + 10
        while not (got := client.receive()):  # heartbeats alone bring nothing
            if time.monotonic() > deadline:
                raise RuntimeError(f"no results for 10 s after {len(finished)} threads")
        finished.update(got)
        client.duplicates += len(got) - len(set(got))
    if client.duplicates:
        print(f"  ({client.duplicates} results delivered twice)")
    client.sock.close(linger=2000)  # the last ack must reach the manager:
    # term() waits for it (up to the linger); without it this process (a multiprocessing child,
    # which ends in os._exit) could end before ZeroMQ's I/O thread sent it, and the manager kept
    # that batch Finished, unacknowledged: 1 run in 16 waited out its 120 s for them
    zmq.Context.instance().term()
    return total / (time.perf_counter() - started)


def _throughput_worker(endpoint: str, total: int, window: int, out) -> None:
    out.put(throughput(endpoint, total, window))


def parallel_throughput(endpoint: str, total: int, window: int, clients: int) -> float:
    """Threads per second of ``clients`` applications (each its own process) sharing the grid."""
    out = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_throughput_worker, args=(endpoint, total // clients, window, out))
             for _ in range(clients)]
    started = time.perf_counter()
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    elapsed = time.perf_counter() - started
    for _ in procs:
        out.get(timeout=1)
    return (total // clients) * clients / elapsed


def latency(endpoint: str, samples: int) -> list[float]:
    """Seconds from submit to result of one thread at a time (light load)."""
    client = Client(endpoint)
    out = []
    for i in range(samples):
        t0 = time.perf_counter()
        client.submit([i])
        while not client.receive():
            pass
        out.append(time.perf_counter() - t0)
    return out


def apply_rate(results: int, links: int) -> float:
    """Results per second the client's CrawlStore.apply commits to SQLite, in batches of 256."""
    from gridcrawl.db import open_database
    from gridcrawl.client.store import CrawlStore, Outcome, Scope
    with tempfile.TemporaryDirectory() as tmp:
        store = CrawlStore(open_database(f"sqlite:///{tmp}/crawl.db"))
        store.add_seeds([f"http://bench.test/p/{i}" for i in range(results)])
        scope = Scope(["bench.test"])
        pendings = store.claim(results)
        outcomes = [Outcome(pend, p.PageResult(url=pend.url, final_url=pend.url, status=200, content_type="text/html",
                                               size=2000, content="<html>" + "x" * 2000 + "</html>",
                                               links=[[f"http://bench.test/p/{(pend.thread_id * 7 + k) % (results * 2)}", ""]
                                                      for k in range(links)]), "ex", 1, False)
                    for pend in pendings]
        started = time.perf_counter()
        for i in range(0, len(outcomes), 256):
            store.apply(outcomes[i:i + 256], scope)
        return len(outcomes) / (time.perf_counter() - started)


def queued_memory(threads: int) -> float:
    """Peak RSS (MB) of a real manager process holding ``threads`` queued grid threads (no executor
    connected), after they are recorded in SQL."""
    import psutil
    with tempfile.TemporaryDirectory() as tmp:
        endpoint = f"tcp://127.0.0.1:{free_port()}"
        manager = subprocess.Popen([sys.executable, "-m", "gridcrawl.manager", "--bind", endpoint, "--db",
                                    f"sqlite:///{tmp}/manager.db", "--log-level", "WARNING"])
        try:
            time.sleep(1.0)
            client = Client(endpoint)
            for start in range(0, threads, 1000):
                client.submit(range(start, start + 1000))
                client.sock.send_multipart(p.encode(p.Heartbeat()))
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                time.sleep(1.0)
                client.sock.send_multipart(p.encode(p.Heartbeat()))
                with sqlite3.connect(f"{tmp}/manager.db") as db:
                    if db.execute("SELECT COUNT(*) FROM thread").fetchone()[0] >= threads:
                        break
            return psutil.Process(manager.pid).memory_info().rss / 2**20
        finally:
            manager.terminate()
            manager.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=20000, help="grid threads for the throughput run")
    parser.add_argument("--executors", type=int, default=4)
    parser.add_argument("--links", type=int, default=0, help="links in each fake result")
    parser.add_argument("--window", type=int, default=2000, help="threads in flight per application")
    parser.add_argument("--clients", type=int, default=2, help="applications submitting at once")
    parser.add_argument("--queued", type=int, default=100_000, help="queued threads for the memory figure")
    parser.add_argument("--profile", metavar="FILE", help="run the manager under cProfile, its statistics to FILE")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        endpoint = f"tcp://127.0.0.1:{free_port()}"
        profile = ["-m", "cProfile", "-o", args.profile] if args.profile else []
        manager = subprocess.Popen([sys.executable, *profile, "-m", "gridcrawl.manager", "--bind", endpoint, "--db",
                                    f"sqlite:///{tmp}/manager.db", "--log-level", os.environ.get("BENCH_LOG", "WARNING"),
                                    "--concurrent-requests-per-host", "100000"])
        stop = multiprocessing.Event()  # executors in their own processes: the client's GIL is not theirs
        workers = [multiprocessing.Process(target=fake_executor, args=(endpoint, f"fake{i}", stop, args.links),
                                           daemon=True) for i in range(args.executors)]
        for w in workers:
            w.start()
        time.sleep(1.0)
        try:
            lat = latency(endpoint, 300)
            cpu_before = cpu_seconds(manager.pid)  # the manager's and its record writer's
            started = time.perf_counter()
            rate = parallel_throughput(endpoint, args.threads, args.window, args.clients)
            # recorded, not only dispatched: wait until SQL holds every thread as Dead (state 4)
            wanted = args.threads // args.clients * args.clients + len(lat)
            deadline = time.monotonic() + 120
            while True:
                with sqlite3.connect(f"{tmp}/manager.db", timeout=10) as db:
                    states = dict(db.execute("SELECT state, COUNT(*) FROM thread GROUP BY state").fetchall())
                if states.get(4, 0) >= wanted or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            recorded_rate = (wanted - len(lat)) / (time.perf_counter() - started)
            cpu = cpu_seconds(manager.pid) - cpu_before
        finally:
            stop.set()
            manager.terminate()
            manager.wait(10)
    print(f"manager throughput: {rate:,.0f} grid threads/s ({args.threads} threads, {args.executors} executors, "
          f"{args.clients} applications with {args.window} in flight each, {args.links} links per result)")
    print(f"dispatched and recorded: {recorded_rate:,.0f} grid threads/s (until every thread is Dead in SQL)")
    print(f"manager CPU (with its record writer): {cpu / args.threads * 1e6:.0f} µs per grid thread ({cpu:.1f} s of CPU; "
          f"{args.threads / cpu:,.0f} grid threads per CPU-second of the manager)")
    print(f"added time per thread at light load: median {statistics.median(lat) * 1000:.2f} ms, "
          f"p90 {sorted(lat)[int(len(lat) * 0.9)] * 1000:.2f} ms (submit to result, no fetch)")
    print(f"threads recorded in SQL by state: {states}")
    print(f"client apply: {apply_rate(5000, 10):,.0f} results/s (10 links each, SQLite, batches of 256)")
    print(f"manager RSS with {args.queued:,} queued threads: {queued_memory(args.queued):.0f} MB")


if __name__ == "__main__":
    main()
