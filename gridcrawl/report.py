"""Thread timings from the manager database: per-executor figures, as the paper's thread table.

Durations are derived from the stored UTC times: run = finished − started, queue wait =
started − submitted (seconds).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gridcrawl import models


@dataclass
class ExecutorTimings:
    """Timings of the threads one executor ran: ``threads`` finished, run seconds (mean, min,
    max), mean queue wait seconds, and ``pages_per_second`` over the executor's busy span."""

    executor_id: str
    name: str
    host: str
    threads: int
    mean_seconds: float
    min_seconds: float
    max_seconds: float
    mean_wait_seconds: float
    pages_per_second: float


def executor_timings(engine: Engine, application_id: str | None = None) -> list[ExecutorTimings]:
    """One :class:`ExecutorTimings` per executor that finished threads (of ``application_id``
    only, if given), by executor name."""
    t, e = models.thread, models.executor
    query = (sa.select(t.c.executor_id, e.c.name, e.c.host, t.c.time_submitted, t.c.time_started, t.c.time_finished)
             .join(e, e.c.executor_id == t.c.executor_id)
             .where(t.c.time_finished.is_not(None), t.c.time_started.is_not(None), t.c.failed == sa.false()))
    if application_id:
        query = query.where(t.c.application_id == application_id)
    groups: dict[str, list] = defaultdict(list)
    names: dict[str, tuple[str, str]] = {}
    with engine.connect() as conn:
        for row in conn.execute(query):
            groups[row.executor_id].append(row)
            names[row.executor_id] = (row.name, row.host)
    out = []
    for executor_id, rows in groups.items():
        runs = [(r.time_finished - r.time_started).total_seconds() for r in rows]
        waits = [(r.time_started - r.time_submitted).total_seconds() for r in rows]
        span = (max(r.time_finished for r in rows) - min(r.time_started for r in rows)).total_seconds()
        out.append(ExecutorTimings(executor_id, *names[executor_id], len(rows), sum(runs) / len(runs), min(runs),
                                   max(runs), sum(waits) / len(waits), len(rows) / span if span > 0 else 0.0))
    return sorted(out, key=lambda x: x.name)
