"""Executors and crawls that come and go without end: the manager's memory and dashboard snapshot.

    python benchmarks/departed_peers.py [--count 40000] [--step 5000] [--keep N] [--out FILE]

Executors on autoscaled machines get a new name each time they start, and a long-running manager
sees crawl after crawl open and close; a hostile peer can do either in a loop. Each executor that
left and each application that stopped used to stay in the manager's memory for ever. This
measures what a user pays, on a real manager process (SQLite records; ``GRIDCRAWL_KEEP_DEPARTED``
set to ``--keep`` if given, else the manager's default, so that the same script runs against a
release without the setting):

* **applications**: one connection opens and closes ``--count`` applications one after another;
  the manager's resident memory (its process and its record writer, RSS, MiB) every ``--step``;
* **executors**: ``--count`` executors, each on a connection of its own under a name of its own,
  register and say bye; the same figure every ``--step``;
* **snapshot**: the time to build the dashboard's snapshot
  (:func:`gridcrawl.manager.dashboard.snapshot`) on a core, in this process, with 1,000
  connected executors after 10,000 executors and 10,000 applications left (the default
  ``keep_departed``: the most the manager now keeps), median of 21 builds, in milliseconds.

Output: a Markdown report on stdout (and to ``--out``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil
import zmq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from grid import Grid  # noqa: E402  (tests/grid.py: the real programs as processes)

from gridcrawl import protocol as p  # noqa: E402


def _rss(proc: psutil.Process) -> float:
    """Resident memory of ``proc`` and its children, MiB."""
    return sum(c.memory_info().rss for c in [proc, *proc.children(recursive=True)]) / 2 ** 20


def _answer(sock: zmq.Socket, *kinds) -> p.Message:
    while True:
        if not sock.poll(10_000):
            raise SystemExit(f"no {kinds} from the manager within 10 s")
        message = p.decode(sock.recv_multipart())
        if isinstance(message, kinds):
            return message


def churn(count: int, step: int, keep: int | None) -> tuple[list[tuple[int, float]], list[tuple[int, float]], float]:
    """Run a manager and churn ``count`` applications, then ``count`` executors, through it.
    Returns the (count, RSS MiB) points of both, and the RSS before the first."""
    with tempfile.TemporaryDirectory() as tmp:
        grid = Grid(Path(tmp))
        context = zmq.Context()
        try:
            env = {} if keep is None else {"GRIDCRAWL_KEEP_DEPARTED": str(keep)}
            proc = psutil.Process(grid.start_manager(env=env).pid)
            client = context.socket(zmq.DEALER)
            client.setsockopt(zmq.LINGER, 0)
            client.connect(grid.endpoint)
            client.send_multipart(p.encode(p.Heartbeat()))
            time.sleep(2.0)  # the manager up, its writer forked
            start = _rss(proc)
            apps, executors = [], []
            paced = time.monotonic()
            for i in range(1, count + 1):
                client.send_multipart(p.encode(p.OpenApplication(f"crawl-{i}", "bench", client="c")))
                opened = _answer(client, p.ApplicationOpened)
                client.send_multipart(p.encode(p.CloseApplication(opened.application_id)))
                if i % 1000 == 0:  # 2,000 messages a second at most: under the manager's flood limit (peer_rate)
                    paced += 0.5
                    time.sleep(max(0.0, paced - time.monotonic()))
                if i % step == 0:
                    apps.append((i, _rss(proc)))
            for i in range(1, count + 1):
                sock = context.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 1000)
                sock.connect(grid.endpoint)
                sock.send_multipart(p.encode(p.Register(name=f"pod-{i}", host=f"pod-{i}", user="bench", threads=4)))
                _answer(sock, p.Welcome)
                sock.send_multipart(p.encode(p.Bye("scaled down")))
                sock.close()
                if i % 100 == 0:  # the client's connection stays alive meanwhile
                    client.send_multipart(p.encode(p.Heartbeat()))
                if i % step == 0:
                    executors.append((i, _rss(proc)))
            client.close()
        finally:
            context.destroy(linger=0)
            grid.stop()
    return apps, executors, start


def snapshot_ms(gone: int = 10_000) -> float:
    """Median time to build the dashboard snapshot with 1,000 connected executors after ``gone``
    executors and ``gone`` applications left, milliseconds (default settings)."""
    from gridcrawl.manager.core import ManagerCore
    from gridcrawl.manager.dashboard import snapshot
    from gridcrawl.settings import Settings

    core = ManagerCore(Settings())
    for i in range(gone + 1000):
        core.handle(f"e{i}".encode(), p.Register(name=f"pod-{i}", host="h", user="u", threads=8), 0.0)
    for i in range(gone):
        core.handle(f"e{i}".encode(), p.Bye(), 1.0)
    for i in range(gone):
        peer = f"c{i}".encode()
        opened = core.handle(peer, p.OpenApplication(f"crawl-{i}", "u"), 2.0)[-1].message
        core.handle(peer, p.CloseApplication(opened.application_id), 2.0)
    times = []
    for _ in range(21):
        t0 = time.perf_counter()
        snapshot(core, 3.0)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=40_000, help="applications, then executors, that come and go")
    parser.add_argument("--step", type=int, default=5_000, help="report the memory every this many")
    parser.add_argument("--keep", type=int, help="GRIDCRAWL_KEEP_DEPARTED of the manager (default: its own)")
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args()
    t0 = time.time()
    apps, executors, start = churn(args.count, args.step, args.keep)
    churn_seconds = time.time() - t0
    ms = snapshot_ms()
    lines = [f"# Executors and crawls that come and go ({time.strftime('%Y-%m-%d %H:%M')})", "",
             f"`python benchmarks/departed_peers.py --count {args.count} --step {args.step}"
             f"{'' if args.keep is None else f' --keep {args.keep}'}` "
             f"({churn_seconds:.0f} s). The manager's RSS (its process and its record writer) before the first "
             f"peer: {start:.1f} MiB.", "",
             "| applications opened and closed | manager RSS MiB | executors registered and gone | manager RSS MiB |",
             "|---|---|---|---|"]
    for (n, a), (m, e) in zip(apps, executors):
        lines.append(f"| {n:,} | {a:.1f} | {m:,} | {e:.1f} |")
    lines += ["", "Dashboard snapshot with 1,000 connected executors after 10,000 executors and 10,000 "
              f"applications left: **{ms:.1f} ms** (median of 21 builds, in process)."]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
