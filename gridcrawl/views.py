"""The SQL views over the manager's tables that answer "which executor ran which URL, and how long
did it take" with one ``SELECT``, written once and rendered for each back end.

* ``thread_timing`` — one row per grid thread: its application, URL, executor (id, name, host),
  state, failed flag, attempts, the three UTC times, ``queue_wait_seconds`` (started − submitted)
  and ``run_seconds`` (finished − started).
* ``executor_summary`` — one row per executor: threads and pages it ran, mean/min/max run
  seconds and mean queue wait of its pages, its pages per second of the grid's crawl seconds
  (so the executors' rates add up to the grid's), and the CPU and memory figures of its last
  heartbeat (Alchemi's ``cpu_max`` MHz × cores, ``cpu_usage`` %, ``cpu_avail`` %,
  ``cpu_totalusage`` CPU-seconds).
* ``application_summary`` — one row per application: threads, pages, executors used, its
  crawl seconds (``elapsed_seconds``) and pages per second.

The figures are defined once (README, "Figures"): a **page** is a grid thread that finished and
did not fail (a fetch error such as a 404 is a page; a poison thread is not); **crawl seconds**
run from the first grid thread submitted to the last one finished; **pages/s** is pages divided
by crawl seconds. Seconds between two ``DATETIME`` columns
need a different function on each back end (:func:`seconds_between`); durations are exact to
1 µs on every back end. Counts are
``COUNT``s, integers on every back end (a ``SUM`` is a ``DECIMAL`` on MariaDB/MySQL).

The SQL Server rendering is also in ``schema.sql`` (a test keeps the two equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import sqlalchemy as sa

from gridcrawl.errors import UnsupportedDialect  # noqa: F401 (re-exported)

#: back ends whose views gridcrawl can write (SQLAlchemy dialect names)
DIALECTS = ("sqlite", "postgresql", "mssql", "mysql", "mariadb")


def seconds_between(dialect: str, start: str, end: str) -> str:
    """SQL for the seconds (a float) from ``start`` to ``end``, two SQL ``DATETIME`` expressions,
    on back end ``dialect``; NULL if either is NULL. Raises :class:`UnsupportedDialect`.

    SQLite: ``julianday`` difference × 86400 of the whole seconds plus the difference of the
    fractions, as the text holds them; PostgreSQL: ``EXTRACT(EPOCH FROM interval)``;
    SQL Server: ``DATEDIFF_BIG(microsecond, …)`` (``DATEDIFF`` overflows an ``int`` after 35
    minutes of microseconds); MariaDB/MySQL: ``TIMESTAMPDIFF(MICROSECOND, …)``.
    """
    if dialect == "sqlite":
        # times are text, 'YYYY-MM-DD HH:MM:SS.ffffff': julianday() reads only milliseconds (and its
        # double of days carries ~50 µs of noise), so it gives the whole seconds, rounded, and the
        # fractions are subtracted as written (a time without one reads as .0)
        return (f"ROUND(ROUND((julianday(substr({end}, 1, 19)) - julianday(substr({start}, 1, 19))) * 86400.0)"
                f" + CAST(substr({end}, 20) AS REAL) - CAST(substr({start}, 20) AS REAL), 6)")
    if dialect == "postgresql":
        return f"CAST(EXTRACT(EPOCH FROM ({end} - {start})) AS DOUBLE PRECISION)"
    if dialect == "mssql":
        return f"(CAST(DATEDIFF_BIG(microsecond, {start}, {end}) AS FLOAT) / 1000000.0)"
    if dialect in ("mysql", "mariadb"):
        return f"(TIMESTAMPDIFF(MICROSECOND, {start}, {end}) / 1e6)"
    raise UnsupportedDialect(f"no view SQL for the {dialect!r} back end (supported: {', '.join(DIALECTS)})")


def _false(dialect: str) -> str:
    # PostgreSQL has a real boolean; SQL Server's BIT has no FALSE literal; the others take 0.
    return "FALSE" if dialect == "postgresql" else "0"


def _thread_timing(d: str) -> str:
    return f"""SELECT t.application_id, a.application_name, t.thread_id, t.internal_thread_id,
    t.url, t.host, t.depth,
    t.executor_id, e.name AS executor_name, e.host AS executor_host,
    t.state, t.failed, t.attempts, t.error_kind,
    t.time_submitted, t.time_started, t.time_finished,
    {seconds_between(d, "t.time_submitted", "t.time_started")} AS queue_wait_seconds,
    {seconds_between(d, "t.time_started", "t.time_finished")} AS run_seconds
FROM thread AS t
JOIN application AS a ON a.application_id = t.application_id
LEFT JOIN executor AS e ON e.executor_id = t.executor_id"""


def _executor_summary(d: str) -> str:
    page = f"tt.time_finished IS NOT NULL AND tt.failed = {_false(d)}"
    span = seconds_between(d, "g.first_submitted", "g.last_finished")
    return f"""SELECT e.executor_id, e.name AS executor_name, e.host, e.is_connected,
    e.threads AS worker_threads, e.num_cpus, e.cpu_max, e.cpu_usage, e.cpu_avail, e.cpu_totalusage,
    e.mem_max, e.mem_usage, e.pages_per_second AS reported_pages_per_second,
    COALESCE(s.threads, 0) AS threads, COALESCE(s.pages, 0) AS pages, COALESCE(s.failed, 0) AS failed,
    s.mean_run_seconds, s.min_run_seconds, s.max_run_seconds, s.mean_queue_wait_seconds,
    s.first_started, s.last_finished,
    s.pages / NULLIF({span}, 0) AS pages_per_second,
    e.accepting
FROM executor AS e
LEFT JOIN (
    SELECT tt.executor_id, COUNT(*) AS threads,
        COUNT(CASE WHEN {page} THEN 1 END) AS pages,
        COUNT(CASE WHEN tt.failed = {_false(d)} THEN NULL ELSE 1 END) AS failed,
        AVG(CASE WHEN {page} THEN tt.run_seconds END) AS mean_run_seconds,
        MIN(CASE WHEN {page} THEN tt.run_seconds END) AS min_run_seconds,
        MAX(CASE WHEN {page} THEN tt.run_seconds END) AS max_run_seconds,
        AVG(CASE WHEN {page} THEN tt.queue_wait_seconds END) AS mean_queue_wait_seconds,
        MIN(tt.time_started) AS first_started, MAX(tt.time_finished) AS last_finished
    FROM thread_timing AS tt
    WHERE tt.executor_id IS NOT NULL
    GROUP BY tt.executor_id
) AS s ON s.executor_id = e.executor_id
CROSS JOIN (
    SELECT MIN(t.time_submitted) AS first_submitted, MAX(t.time_finished) AS last_finished FROM thread AS t
) AS g"""


def _application_summary(d: str) -> str:
    elapsed = seconds_between(d, "s.first_submitted", "s.last_finished")
    return f"""SELECT a.application_id, a.application_name, a.usr_name, a.state,
    a.time_created, a.time_completed,
    COALESCE(s.threads, 0) AS threads, COALESCE(s.pages, 0) AS pages, COALESCE(s.failed, 0) AS failed,
    COALESCE(s.executors, 0) AS executors, s.first_started, s.last_finished,
    {elapsed} AS elapsed_seconds,
    COALESCE(s.pages, 0) / NULLIF({elapsed}, 0) AS pages_per_second
FROM application AS a
LEFT JOIN (
    SELECT t.application_id, COUNT(*) AS threads,
        COUNT(CASE WHEN t.time_finished IS NOT NULL AND t.failed = {_false(d)} THEN 1 END) AS pages,
        COUNT(CASE WHEN t.failed = {_false(d)} THEN NULL ELSE 1 END) AS failed,
        COUNT(DISTINCT t.executor_id) AS executors, MIN(t.time_submitted) AS first_submitted,
        MIN(t.time_started) AS first_started, MAX(t.time_finished) AS last_finished
    FROM thread AS t
    GROUP BY t.application_id
) AS s ON s.application_id = a.application_id"""


@dataclass(frozen=True)
class View:
    """A view: its ``name``, and ``select(dialect)`` giving its ``SELECT`` for that back end."""

    name: str
    select: Callable[[str], str]

    def create_sql(self, dialect: str) -> list[str]:
        """The statements that create or replace this view on ``dialect`` (idempotent).

        PostgreSQL and MariaDB/MySQL: ``CREATE OR REPLACE VIEW``; SQL Server (2016 SP1 and
        later): ``CREATE OR ALTER VIEW``; SQLite, which has neither: ``DROP VIEW IF EXISTS`` and
        ``CREATE VIEW`` in the caller's transaction (so the definition is always this release's).
        Raises :class:`UnsupportedDialect`.
        """
        body = self.select(dialect)
        if dialect == "sqlite":
            return [f"DROP VIEW IF EXISTS {self.name}", f"CREATE VIEW {self.name} AS\n{body}"]
        if dialect == "mssql":
            return [f"CREATE OR ALTER VIEW {self.name} AS\n{body}"]
        return [f"CREATE OR REPLACE VIEW {self.name} AS\n{body}"]


#: the manager database's views, in creation order (executor_summary reads thread_timing)
MANAGER_VIEWS = (
    View("thread_timing", _thread_timing),
    View("executor_summary", _executor_summary),
    View("application_summary", _application_summary),
)


def views_for(metadata: sa.MetaData) -> tuple[View, ...]:
    """The views that belong with the tables of ``metadata`` (the manager's; the crawl tables
    have none)."""
    from gridcrawl import models
    return MANAGER_VIEWS if metadata is models.manager_metadata else ()


def create_views(conn: sa.engine.Connection, views: tuple[View, ...]) -> None:
    """Create or replace ``views`` through ``conn`` (inside the caller's transaction where the
    back end has transactional DDL). Raises :class:`UnsupportedDialect` on other back ends."""
    for view in views:
        for statement in view.create_sql(conn.dialect.name):
            conn.exec_driver_sql(statement)
