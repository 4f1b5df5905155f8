"""The manager's record writer alone: what writing grid threads' lives costs each back end.

    python benchmarks/record_writer.py [--threads 20000] [--executors 1000] [--rounds 3]
                                       [--db sqlite] [--db postgresql+psycopg://...] [--out FILE]

:class:`gridcrawl.manager.recorder.BatchWriter` (what the manager's writer process runs) writes
``--threads`` grid threads' events in the batches a busy grid of ``--executors`` desktops cuts
them into, each batch one transaction: the threads submitted; then assigned; then finished (the
results of one desktop's refill share one time, as the manager stamps a message's results); then
collected by the application (DEAD). With many desktops holding thousands of threads between
their assign and their result, a thread's life spans several batches, so most of its changes are
separate row updates (issue 23, target 5: the writer's CPU grew by a third from 4 to 1,000
desktops). Each round writes into a new database (created and dropped on a server). The report gives, per back end and batch, the
median wall and CPU seconds of ``--rounds`` rounds (this process: SQLite works in it; a server's
own CPU is not counted) and checks the rows at the end (every thread DEAD).

Compare two versions by running this file under each one's Python, alternating.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from gridcrawl import models
from gridcrawl.db import DatabaseUnavailable, init_schema, open_database
from gridcrawl.manager import events as ev
from gridcrawl.manager.recorder import BatchWriter

REFILL = 6  # threads an assign / results message carries to a 2-worker desktop (prefetch 6)


def batches(threads: int, executors: int, t0: float) -> list[tuple[str, list]]:
    """The events of ``threads`` grid threads run on ``executors`` desktops, in four batches."""
    ids = range(1, threads + 1)
    setup = [ev.ExecutorRegistered(f"sim-{i}", f"sim-{i}", "sim", "bench", True, 2, 2400.0, 2, 8 << 30,
                                   "Linux", "x86_64", (), t0) for i in range(executors)]
    setup.append(ev.ApplicationCreated("bench-app", "bench", "bench", 1, t0))
    submitted = setup + [ev.ThreadSubmitted(i, "bench-app", i, f"http://h{i % 997}.test/{i}", f"h{i % 997}.test",
                                            0, 0, (), t0) for i in ids]
    assigned = [ev.ThreadAssigned(i, i, f"sim-{(i // REFILL) % executors}", 1, t0 + 1 + i * 1e-5) for i in ids]
    finished = [ev.ThreadFinished(i, i, t0 + 1 + i * 1e-5, t0 + 2 + (i // REFILL) * 6e-5, None) for i in ids]
    dead = [ev.ThreadDead(i) for i in ids]
    return [("submitted", submitted), ("assigned", assigned), ("finished", finished), ("dead", dead)]


@contextlib.contextmanager
def fresh_database(url: str, tmp: Path):
    """The URL of a new, empty database: a new SQLite file in ``tmp`` for ``sqlite``, else a
    database created on the server of ``url`` (PostgreSQL, MariaDB) and dropped afterwards."""
    name = f"gridcrawl_bench_{os.getpid()}_{time.monotonic_ns()}"
    if url == "sqlite":
        yield f"sqlite:///{tmp / f'{name}.db'}"
        return
    admin = open_database(url).execution_options(isolation_level="AUTOCOMMIT")
    quote = '"' if admin.dialect.name == "postgresql" else "`"
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {quote}{name}{quote}")
        yield sa.engine.make_url(url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quote}{name}{quote}")
        admin.dispose()


def one_round(url: str, threads: int, executors: int) -> dict[str, tuple[float, float]]:
    """Write every batch into the empty database at ``url``; (wall s, CPU s) per batch."""
    engine = open_database(url)
    try:
        init_schema(engine, models.manager_metadata, models.manager_meta)
        writer = BatchWriter(engine)
        figures = {}
        for name, events in batches(threads, executors, 1.7e9):
            wall, cpu = time.perf_counter(), time.process_time()
            writer.write(events)
            figures[name] = (time.perf_counter() - wall, time.process_time() - cpu)
        with engine.connect() as conn:
            dead = conn.execute(sa.text("SELECT COUNT(*) FROM thread WHERE state = 4")).scalar()
        if dead != threads:
            raise SystemExit(f"{url}: {dead} of {threads} threads DEAD after the last batch")
        return figures
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=20_000, help="grid threads written")
    parser.add_argument("--executors", type=int, default=1000, help="desktops the threads are spread over")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per back end (median reported)")
    parser.add_argument("--db", action="append", help="a server's database URL, where a database of its own "
                        "is created and dropped each round (repeatable; 'sqlite': a new file; default: SQLite, "
                        "and PostgreSQL and MariaDB on 127.0.0.1 when they answer)")
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args()
    if min(args.threads, args.executors, args.rounds) < 1:
        parser.error("every count must be at least 1")
    urls = args.db or ["sqlite", "postgresql+psycopg://postgres@127.0.0.1/test", "mysql+pymysql://root@127.0.0.1/test"]
    lines = [f"# Record writer, {args.threads:,} threads on {args.executors:,} desktops "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"`python benchmarks/record_writer.py --threads {args.threads} --executors {args.executors} "
             f"--rounds {args.rounds}`, {sys.executable}", "",
             "| back end | batch | wall s (median) | CPU s of this process (median) | rounds |", "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for url in urls:
            runs = []
            for i in range(args.rounds):
                try:
                    with fresh_database(url, Path(tmp)) as target:
                        runs.append(one_round(target, args.threads, args.executors))
                except DatabaseUnavailable as exc:
                    print(f"skipped {url}: {exc}", file=sys.stderr)
                    break
            for name in (runs[0] if runs else {}):
                wall = statistics.median(r[name][0] for r in runs)
                cpu = statistics.median(r[name][1] for r in runs)
                lines.append(f"| {url.split(':')[0]} | {name} | {wall:.3f} | {cpu:.3f} | {len(runs)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
