"""Retention of the manager's records: ``gridcrawl db prune`` deletes those of crawls long over.

A manager records every grid thread and attempt (400 to 600 bytes a thread with its attempt on
SQLite, by the length of its URL), and keeps them for ever: a grid that runs for months, or a ``--recrawl --watch`` that
visits a site every hour, grows its manager database without bound. :func:`prune_records`
deletes the applications that stopped (completed or cancelled) before a time, with their grid
threads and attempts, and the executors gone since before it that no record left names.

Safe while a manager runs on the database: it writes nothing more of an application that
stopped, except when that application's client comes back and the manager, which remembers
recently stopped applications (``keep_departed``), reopens it; the reopen then writes the
application's row whole (:class:`gridcrawl.manager.events.ApplicationChanged`), so its new
threads have a row to belong to. Connected executors are never deleted (their heartbeats keep
``ping_time`` fresh). Rows are deleted in transactions of :data:`BATCH` grid threads, so the
manager's record writer waits for at most one of them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gridcrawl import models
from gridcrawl.states import ApplicationState

#: Grid threads (with their attempts) deleted per transaction; also the most ids bound in one
#: statement (SQL Server takes at most 2,100 parameters).
BATCH = 1000


@dataclass
class Pruned:
    """What :func:`prune_records` deleted (or, in a dry run, would delete): counts of rows."""

    applications: int = 0
    threads: int = 0
    attempts: int = 0
    executors: int = 0


def _chunks(items: list, size: int = BATCH):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def prune_records(engine: Engine, before: dt.datetime, *, dry_run: bool = False) -> Pruned:
    """Delete from the manager database ``engine`` the applications that stopped before
    ``before`` (a naive UTC datetime), their grid threads and attempts, and the executors not
    connected, last heard from before ``before`` and named by no thread or attempt left.
    ``dry_run``: count them, delete nothing. Returns the counts.

    Raises :class:`sqlalchemy.exc.SQLAlchemyError` when the database fails (what was deleted
    before stays deleted: each batch is a transaction of its own, and a second run goes on).
    """
    app, thread, attempt, executor = models.application, models.thread, models.attempt, models.executor
    pruned = Pruned()
    ended = sa.select(app.c.application_id).where(app.c.state == int(ApplicationState.STOPPED),
                                                  app.c.time_completed < before)
    with engine.connect() as conn:
        app_ids = list(conn.execute(ended).scalars())
    pruned.applications = len(app_ids)
    for ids in _chunks(app_ids):
        while True:
            with engine.begin() as conn:
                query = sa.select(thread.c.internal_thread_id).where(thread.c.application_id.in_(ids))
                if dry_run:
                    pruned.threads += conn.execute(sa.select(sa.func.count()).select_from(query.subquery())).scalar()
                    pruned.attempts += conn.execute(sa.select(sa.func.count()).select_from(attempt).where(
                        attempt.c.internal_thread_id.in_(query))).scalar()
                    break
                threads = list(conn.execute(query.limit(BATCH)).scalars())
                if not threads:
                    break
                pruned.attempts += conn.execute(attempt.delete().where(
                    attempt.c.internal_thread_id.in_(threads))).rowcount
                pruned.threads += conn.execute(thread.delete().where(
                    thread.c.internal_thread_id.in_(threads))).rowcount
        if not dry_run:
            with engine.begin() as conn:
                conn.execute(app.delete().where(app.c.application_id.in_(ids)))
    kept = thread.c.application_id.not_in(ended)  # (none are left after a real run's deletes)
    gone = sa.and_(
        executor.c.is_connected == sa.false(),
        sa.func.coalesce(executor.c.ping_time, executor.c.time_registered) < before,
        ~sa.exists().where(thread.c.executor_id == executor.c.executor_id, kept),
        ~sa.exists().where(attempt.c.executor_id == executor.c.executor_id,
                           attempt.c.internal_thread_id == thread.c.internal_thread_id, kept))
    with engine.begin() as conn:
        if dry_run:
            pruned.executors = conn.execute(sa.select(sa.func.count()).select_from(executor).where(gone)).scalar()
        else:
            pruned.executors = conn.execute(executor.delete().where(gone)).rowcount
    return pruned


__all__ = ["BATCH", "Pruned", "prune_records"]
