"""Opening databases, creating schemas, and the few statements that differ between back ends.

Every program reaches SQL through :func:`open_database`, which turns the usual failures (a URL
that is not a database URL, a driver that is not installed, a server that does not answer) into
one :class:`DatabaseUnavailable` with a one-line message saying what to install or check.
"""

from __future__ import annotations

import datetime as _dt
from typing import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, OperationalError

from gridcrawl.models import SCHEMA_VERSION


class DatabaseUnavailable(RuntimeError):
    """The database URL is invalid, its driver is missing, or its server does not answer."""


_DRIVER_HINTS = {
    "pyodbc": "pip install 'gridcrawl[mssql]' and an ODBC driver (e.g. Microsoft ODBC Driver 18 for SQL Server)",
    "psycopg": "pip install 'gridcrawl[postgresql]'",
    "psycopg2": "pip install psycopg2-binary, or use postgresql+psycopg:// with 'gridcrawl[postgresql]'",
}


def utcnow() -> _dt.datetime:
    """The current UTC time as a naive ``datetime`` (how every gridcrawl time is stored)."""
    return _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)


def from_timestamp(seconds: float) -> _dt.datetime:
    """A POSIX timestamp (seconds) as a naive UTC ``datetime``."""
    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).replace(tzinfo=None)


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    # Our own transactions: BEGIN IMMEDIATE takes the write lock up front, so two writers wait
    # (busy_timeout) instead of failing half-way with "database is locked" (SQLAlchemy docs,
    # "Serializable isolation / Savepoints / Transactional DDL" for pysqlite).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=OFF")
    cursor.close()


def _sqlite_begin(conn) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def open_database(url: str, *, check: bool = True) -> Engine:
    """Create an engine for SQLAlchemy ``url`` and, with ``check``, prove it answers.

    SQLite files get WAL journaling, a 30 s busy timeout and ``BEGIN IMMEDIATE`` transactions.
    Raises :class:`DatabaseUnavailable` with a one-line reason.
    """
    try:
        parsed = sa.engine.make_url(url)
    except ArgumentError:
        raise DatabaseUnavailable(f"not a database URL: {url!r} (expected e.g. sqlite:///crawl.db)") from None
    try:
        if parsed.get_backend_name() == "sqlite":
            engine = sa.create_engine(parsed, connect_args={"check_same_thread": False, "timeout": 30})
            event.listen(engine, "connect", _sqlite_pragmas)
            event.listen(engine, "begin", _sqlite_begin)
        else:
            engine = sa.create_engine(parsed, pool_pre_ping=True)
    except NoSuchModuleError:
        raise DatabaseUnavailable(f"unknown database kind in {parsed.drivername!r}") from None
    except ModuleNotFoundError as exc:
        hint = _DRIVER_HINTS.get(exc.name or "", f"pip install {exc.name}")
        raise DatabaseUnavailable(f"the driver for {parsed.drivername} is not installed: {hint}") from None
    if check:
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        except (OperationalError, sa.exc.InterfaceError, sa.exc.DBAPIError) as exc:
            engine.dispose()
            reason = str(exc.orig if getattr(exc, "orig", None) else exc).strip().splitlines()[0]
            raise DatabaseUnavailable(
                f"cannot reach database {parsed.render_as_string(hide_password=True)}: {reason}") from None
    return engine


def init_schema(engine: Engine, metadata: sa.MetaData, meta_table: sa.Table) -> None:
    """Create the tables of ``metadata`` that are missing (idempotent) and record the schema
    version in ``meta_table``. Raises :class:`DatabaseUnavailable` if the stored schema version
    is newer than this release knows."""
    metadata.create_all(engine)
    with engine.begin() as conn:
        row = conn.execute(sa.select(meta_table.c.value).where(meta_table.c.name == "schema_version")).first()
        if row is None:
            insert_ignore(conn, meta_table, [{"name": "schema_version", "value": str(SCHEMA_VERSION)}])
        elif int(row[0]) > SCHEMA_VERSION:
            raise DatabaseUnavailable(
                f"database schema version {row[0]} is newer than this gridcrawl's ({SCHEMA_VERSION}); upgrade gridcrawl")


def insert_ignore(conn: Connection, table: sa.Table, rows: Sequence[dict]) -> None:
    """Insert ``rows`` into ``table``, silently skipping rows whose unique keys already exist.

    SQLite and PostgreSQL use ``ON CONFLICT DO NOTHING``; MySQL/MariaDB ``INSERT IGNORE``; other
    back ends (SQL Server) insert row by row inside savepoints and treat a unique violation as
    "already there".
    """
    if not rows:
        return
    dialect = conn.dialect.name
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
        conn.execute(insert(table).on_conflict_do_nothing(), list(rows))
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
        conn.execute(insert(table).on_conflict_do_nothing(), list(rows))
    elif dialect in ("mysql", "mariadb"):
        conn.execute(table.insert().prefix_with("IGNORE"), list(rows))
    else:
        for row in rows:
            try:
                with conn.begin_nested():
                    conn.execute(table.insert(), row)
            except IntegrityError:
                pass


def chunks(items: Sequence, size: int) -> Iterable[Sequence]:
    """``items`` in consecutive slices of at most ``size`` (bounded SQL ``IN`` lists)."""
    for start in range(0, len(items), size):
        yield items[start:start + size]
