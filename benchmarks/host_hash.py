"""Host-hash dispatch in the manager's core: what a pass costs with many hosts.

    python benchmarks/host_hash.py [--threads 20000] [--hosts 2000] [--executors 4] [--gone 0]
                                   [--dispatch host-hash] [--rounds 5]

In this process, no sockets: a :class:`~gridcrawl.manager.core.ManagerCore` with ``--executors``
connected executors of 16 worker threads (after ``--gone`` executors registered and left, as on
a grid whose desktops come and go) gets one application's ``--threads`` grid threads spread
round-robin over ``--hosts`` hosts (16 per host in flight at most), submitted 1,000 at a time,
and every executor answers every job at once (one ``results`` message per executor per round).
It prints the seconds from the first submit to the last result, median of ``--rounds`` (the
manager's own CPU: nothing else runs). ``--dispatch least-loaded`` gives the same run under the
default dispatch, for comparison.
"""

from __future__ import annotations

import argparse
import statistics
import time

from gridcrawl import protocol as p
from gridcrawl.manager.core import ManagerCore, Send
from gridcrawl.settings import Settings


def run(threads: int, hosts: int, executors: int, gone: int, dispatch: str) -> float:
    """One run; seconds from the first submit until every thread's result was handled."""
    core = ManagerCore(Settings(dispatch=dispatch, prefetch=0, concurrent_requests_per_host=16))
    for i in range(gone):
        core.handle(b"g%d" % i, p.Register(name=f"pod-{i}", host="h", user="u", threads=8), 0.0)
        core.handle(b"g%d" % i, p.Bye(), 0.0)
    for i in range(executors):
        core.handle(b"e%d" % i, p.Register(name=f"e{i}", host="h", user="u", threads=16), 0.0)
    app = core.handle(b"c", p.OpenApplication("crawl", "u"), 0.0)[-1].message.application_id
    pending: list[tuple[bytes, int, str]] = []

    def collect(actions) -> None:
        for a in actions:
            if isinstance(a, Send) and isinstance(a.message, p.Assign):
                pending.extend((a.peer, job.attempt_id, job.url) for job in a.message.jobs)

    t0 = time.perf_counter()
    for start in range(0, threads, 1000):
        specs = [p.ThreadSpec(i, f"http://h{i % hosts}.test/{i}") for i in range(start, min(threads, start + 1000))]
        collect(core.handle(b"c", p.Submit(app, specs), 0.0))
    done = 0
    while pending:
        batch, pending[:] = pending[:], []
        by_peer: dict[bytes, list] = {}
        for peer, attempt_id, url in batch:
            by_peer.setdefault(peer, []).append(p.AttemptResult(attempt_id, p.PageResult(url=url, status=200), 0.01))
        for peer, results in by_peer.items():
            collect(core.handle(peer, p.Results(results), 0.0))
            done += len(results)
    assert done == threads, f"{done} results for {threads} threads"
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=20_000)
    parser.add_argument("--hosts", type=int, default=2_000)
    parser.add_argument("--executors", type=int, default=4)
    parser.add_argument("--gone", type=int, default=0, help="executors that registered and left first")
    parser.add_argument("--dispatch", default="host-hash", choices=["host-hash", "least-loaded"])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    times = [run(args.threads, args.hosts, args.executors, args.gone, args.dispatch) for _ in range(args.rounds)]
    print(f"{args.dispatch}: {args.threads} threads over {args.hosts} hosts to {args.executors} executors "
          f"({args.gone} gone): {statistics.median(times):.2f} s (median of {args.rounds}; "
          f"{min(times):.2f}-{max(times):.2f})")


if __name__ == "__main__":
    main()
