"""Opening databases, creating schemas, and the few statements that differ between back ends.

Every program reaches SQL through :func:`open_database`, which turns the usual failures (a URL
that is not a database URL, a driver that is not installed, a server that does not answer) into
one :class:`DatabaseUnavailable` with a one-line message saying what to install or check.

Back ends: SQLite (the default), PostgreSQL (``postgresql+psycopg``), SQL Server
(``mssql+pyodbc``) and MariaDB/MySQL (``mysql+pymysql`` or ``mysql+pyodbc``). What differs
between them lives here: the schema lock of :func:`init_schema`, insert-if-absent
(:func:`insert_ignore`), and which errors mean "run the transaction again"
(:func:`run_transaction`). The row-claiming query is in :mod:`gridcrawl.client.store`.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import logging
import math
import os
import random
import re
import sqlite3
import threading
import time
import zlib
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError

from gridcrawl.redact import hide_passwords, shown_url  # noqa: F401 (shown_url: re-exported)
from gridcrawl.errors import DatabaseUnavailable  # noqa: F401 (re-exported)


log = logging.getLogger("gridcrawl.db")
T = TypeVar("T")

_SCHEMA_LOCK_NAME = "gridcrawl_schema"
_SCHEMA_LOCK_KEY = zlib.crc32(_SCHEMA_LOCK_NAME.encode())  # a PostgreSQL advisory lock key (bigint)


_DRIVER_HINTS = {
    "pyodbc": "pip install 'gridcrawl[mssql]' and an ODBC driver (e.g. Microsoft ODBC Driver 18 for SQL Server)",
    "psycopg": "pip install 'gridcrawl[postgresql]'",
    "psycopg2": "pip install psycopg2-binary, or use postgresql+psycopg:// with 'gridcrawl[postgresql]'",
    "pymysql": "pip install 'gridcrawl[mariadb]'",
    "MySQLdb": "pip install mysqlclient, or use mysql+pymysql:// (pip install pymysql)",
}


def utcnow() -> _dt.datetime:
    """The current UTC time as a naive ``datetime`` (how every gridcrawl time is stored)."""
    return _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)


@functools.lru_cache(maxsize=4096)
def from_timestamp(seconds: float) -> _dt.datetime:
    """A POSIX timestamp (seconds) as a naive UTC ``datetime``. Cached: the manager's records of
    one event share its time, and the recorder converts thousands of them a second."""
    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).replace(tzinfo=None)


def to_timestamp(value: "_dt.datetime | str | None") -> float | None:
    """A naive UTC ``datetime`` read back from a table (or SQLite's text of one) as POSIX
    seconds; None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        value = _dt.datetime.fromisoformat(value)
    return value.replace(tzinfo=_dt.timezone.utc).timestamp()


SQLITE_BUSY_MS = 30000  # how long a SQLite connection waits for another's write lock
#: Seconds a new SQLite connection tries to open the file in WAL mode while another program holds it
SQLITE_WAL_SECONDS = 10.0
# Page size, bytes, of a new SQLite file (an existing one keeps its own). A crawl stores page
# bodies of tens of KB: with SQLite's default 4 KB each takes a chain of overflow pages, each
# written to the WAL and again at the checkpoint; 16 KB pages make a quarter of the writes
# (gridcrawl run on the Python docs: 39,500 → 11,300 pwrite calls, 2 % less CPU; issue 23).
SQLITE_PAGE_SIZE = 16384


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    # Our own transactions: BEGIN IMMEDIATE takes the write lock up front, so two writers wait
    # (busy_timeout) instead of failing half-way with "database is locked" (SQLAlchemy docs,
    # "Serializable isolation / Savepoints / Transactional DDL" for pysqlite).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
    cursor.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")  # before WAL: only a new, empty file takes it
    # Turning a new database file to WAL needs a lock SQLite does not wait for (no busy handler
    # on that path): programs opening one new file at the same moment got "database is locked"
    # (5 of 240 opens, 4 at once). Try again for up to 10 s, each try without the busy wait: a
    # program holding the file in exclusive mode made each of 200 tries wait 30 s, and an export
    # waited silently as long as that program held it (199 s measured, 100 minutes at most).
    cursor.execute("PRAGMA busy_timeout=0")
    give_up = time.monotonic() + SQLITE_WAL_SECONDS
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() >= give_up:
                raise sqlite3.OperationalError(f"database is locked: another program has held it for "
                                               f"{SQLITE_WAL_SECONDS:g} s") from None
            time.sleep(0.05)
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=OFF")
    cursor.close()


def _sqlite_begin(conn) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _sqlite_begin_read(conn) -> None:
    # a reader's transaction (open_database(read_only=True)): deferred, so that it takes no write
    # lock; in WAL mode it reads one snapshot from its first read while writers go on
    conn.exec_driver_sql("BEGIN")


# Seconds to wait for a server to accept a connection, per driver, unless the URL says otherwise.
CONNECT_TIMEOUT = 10
#: The form of a database server's URL, as messages show it.
SERVER_URL_FORM = "dialect+driver://user:password@host:PORT/database"
_TIMEOUT_ARGS = {"psycopg": "connect_timeout", "psycopg2": "connect_timeout", "pymysql": "connect_timeout",
                 "mysqldb": "connect_timeout", "pyodbc": "timeout"}
_ODBC_DRIVER_MISSING = ("Can't open lib", "Data source name not found", "IM002", "file not found")


def _reason(exc: BaseException) -> str:
    """The first line of a driver's error message."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _no_read_timeout(dbapi_connection, _record) -> None:
    """A PyMySQL connection, once connected, reads without a time limit (``read_timeout`` was
    for the server's greeting only)."""
    if hasattr(dbapi_connection, "_read_timeout"):
        dbapi_connection._read_timeout = None


def database_kind(engine: Engine) -> str | None:
    """Which gridcrawl database ``engine`` holds, by its tables: ``"manager"`` (a ``thread``
    table: the manager's records), ``"crawl"`` (a ``to_visit_url`` table: a crawl's frontier
    and documents), ``"both"``, or None (neither, or the database cannot be read). Never raises; for the
    error a command gives when handed the other kind (``--db`` for ``--crawl-db``)."""
    try:
        tables = set(sa.inspect(engine).get_table_names())
    except Exception:  # unreachable, or not a database at all: the caller's own error stands
        return None
    if "thread" in tables and "to_visit_url" in tables:
        return "both"  # one database for both (gridcrawl db init --kind both)
    return "manager" if "thread" in tables else "crawl" if "to_visit_url" in tables else None


def older_schema(engine: Engine, kind: str) -> str:
    """The sentence for a ``kind`` (``"manager"`` or ``"crawl"``) database at an older schema
    revision than this gridcrawl's, which a reading command (``report``, ``export``) does not
    upgrade: ``"... is a crawl database at schema revision 0002, older than this gridcrawl's
    0008: gridcrawl db upgrade --db URL upgrades it"``; empty when it is not one, or is current."""
    revisions = _revisions(engine, kind)
    if revisions is None:
        return ""
    now, newest = revisions
    if now is not None and now >= newest:
        return ""
    shown = shown_url(engine.url)
    return (f"{shown} is a {kind} database at schema revision {now or '(none: an early release)'}, older than this "
            f"gridcrawl's {newest}: gridcrawl db upgrade --db {shown} upgrades it ("
            + ("the manager does so when it starts)" if kind == "manager" else
               "the crawl's programs do so when they open it)"))


def newer_schema(engine: Engine, kind: str) -> str:
    """The sentence for a ``kind`` (``"manager"`` or ``"crawl"``) database at a newer schema
    revision than this gridcrawl's (a newer gridcrawl wrote it): ``"... is a manager database at
    schema revision 0006, newer than this gridcrawl's 0005: upgrade gridcrawl to read it"``; empty
    when it is not one, or is not newer. The writing programs refuse such a database
    (:class:`SchemaTooNew`); a reading command (``report``) warns with it and reads on, and fails
    with it when the reading breaks."""
    revisions = _revisions(engine, kind)
    if revisions is None or revisions[0] is None or revisions[0] <= revisions[1]:
        return ""
    return (f"{shown_url(engine.url)} is a {kind} database at schema revision {revisions[0]}, newer than this "
            f"gridcrawl's {revisions[1]}: upgrade gridcrawl to read it")


def _revisions(engine: Engine, kind: str) -> tuple[str | None, str] | None:
    """``(the revision of engine's kind tables or None, this gridcrawl's newest)``; None when
    ``engine`` holds no ``kind`` tables or cannot be read."""
    from gridcrawl import migrations
    if database_kind(engine) not in (kind, "both"):
        return None
    try:
        with engine.connect() as conn:
            return migrations.current(conn, kind), migrations.head(kind)
    except Exception:
        return None


def wrong_kind(engine: Engine, wanted: str) -> str:
    """The sentence for a command given the other kind of gridcrawl database than ``wanted``
    (``"manager"`` or ``"crawl"``), e.g. ``"... is a crawl database (WORKDIR/crawl.db), not a
    manager database (WORKDIR/manager.db)"``; empty when ``engine`` holds neither kind or the
    one wanted (:func:`database_kind`)."""
    found = database_kind(engine)
    if found in (None, wanted, "both"):
        return ""
    return (f"{shown_url(engine.url)} is a {found} database (WORKDIR/{found}.db), "
            f"not a {wanted} database (WORKDIR/{wanted}.db)")


#: MariaDB's and MySQL's own databases: gridcrawl's tables do not go there.
_MYSQL_SYSTEM_DATABASES = frozenset({"mysql", "information_schema", "performance_schema", "sys"})

#: The database kind an unknown URL scheme most likely meant (Heroku's and libpq's ``postgres://``).
_SCHEME_MEANT = {"postgres": "postgresql+psycopg", "pg": "postgresql+psycopg", "psql": "postgresql+psycopg",
                 "pgsql": "postgresql+psycopg", "sqlite3": "sqlite", "sqlit": "sqlite", "sqllite": "sqlite",
                 "maria": "mysql+pymysql", "sqlserver": "mssql+pyodbc"}


def _tilde_hint(path: str) -> str:
    """For a SQLite URL's path that starts with ``~`` (``sqlite:///~/crawl.db``), which no shell
    expands inside a URL: the clause naming the URL of the home folder's file; else ""."""
    if not path.startswith("~") or (home := os.path.expanduser(path)) == path:
        return ""
    return f"; ~ is not expanded in a URL: sqlite:///{home}"


def _with_database(parsed: sa.engine.URL, database: str) -> str:
    """``parsed`` (a server's URL) naming ``database``, its password masked."""
    return shown_url(parsed.set(database=database))


def _url_example(url: str) -> str:
    """The database URL that ``url``, which SQLAlchemy cannot read, may have meant: a server's
    form for one with a user (``grid:pw@host/db``) or another scheme written wrong
    (``postgresql:host/db``); for a SQLite one with too few slashes (``sqlite:/crawl.db``) the
    relative and the absolute file URL of its path; for a path, its ``sqlite:///`` URL."""
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]+):/*(.*)$", url.strip())  # two letters at least: no Windows drive
    if "@" in url or (scheme and not scheme.group(1).lower().startswith("sqlite")):
        return SERVER_URL_FORM
    if scheme:
        path = scheme.group(2) or "crawl.db"
        return f"sqlite:///{path} for {path} in the current folder, sqlite:////{path} for /{path}"
    return f"sqlite:///{os.path.abspath(url)}" if url.strip() else "sqlite:///crawl.db"


def open_database(url: str, *, check: bool = True, existing: bool = False, read_only: bool = False) -> Engine:
    """Create an engine for SQLAlchemy ``url`` and, with ``check``, prove it answers.
    ``existing``: the database must exist already (a SQLite file is not created: commands that
    only read, such as ``gridcrawl report`` and ``export``, leave no file behind). ``read_only``:
    the engine's transactions only read (an export, a report); on SQLite they begin deferred
    instead of ``BEGIN IMMEDIATE``, so that they take no write lock and a crawl writing the same
    file goes on meanwhile (an export of a large crawl held its applier for the export's length).

    Any SQLAlchemy URL works: ``sqlite:///crawl.db``, ``postgresql+psycopg://user@host/db``,
    ``mssql+pyodbc://user:pass@host/db?driver=ODBC+Driver+18+for+SQL+Server``,
    ``mysql+pymysql://user@host/db``; so does the path of an existing SQLite file
    (``crawl-1/crawl.db``). A folder (a crawl's ``--workdir``) is refused naming the databases
    in it; with ``existing``, a path that names no file is refused as such. SQLite files get WAL journaling, a 30 s busy timeout,
    ``BEGIN IMMEDIATE`` transactions and, when new, 16 KB pages (:data:`SQLITE_PAGE_SIZE`);
    servers a :data:`CONNECT_TIMEOUT` (seconds) and a liveness check of pooled connections.

    Raises :class:`DatabaseUnavailable` with a one-line reason: not a URL, unknown database
    kind (with the URL a near miss such as ``postgres://`` meant), an SQLite database in memory
    (``sqlite://``: each thread would see its own, and all is gone at exit), a MariaDB/MySQL URL that
    names no database or one of the server's own (``mysql`` ...), Python driver not installed
    (naming the pip extra), ODBC driver not installed (naming Microsoft's ODBC Driver 18 for SQL
    Server), server not answering, or a SQLite file that cannot be opened (its folder missing or
    read-only).
    """
    if "://" not in url and os.path.isfile(url):  # a SQLite file's path, as a crawl's --workdir holds them
        url = f"sqlite:///{os.path.abspath(url)}"
    elif "://" not in url and os.path.isdir(url):  # a crawl's --workdir itself
        what = {"crawl.db": " (the crawl's pages)", "manager.db": " (the grid's records)"}
        inside = ", ".join(f"sqlite:///{os.path.join(url, name)}{what.get(name, '')}"
                           for name in sorted(os.listdir(url)) if name.endswith(".db"))
        raise DatabaseUnavailable(f"{url} is a folder, not a database" + (f"; the databases in it: {inside}"
                                                                          if inside else ""))
    elif existing and url.strip() and not re.match(r"[A-Za-z][A-Za-z0-9+.-]+:", url.strip()):
        raise DatabaseUnavailable(f"no database file {url} (a database URL is e.g. {_url_example(url)})")
    try:
        parsed = sa.engine.make_url(url)
    except ArgumentError:
        raise DatabaseUnavailable(f"not a database URL: {hide_passwords(repr(url))} "
                                  f"(expected e.g. {_url_example(url)})") from None
    except ValueError:  # a port that is no number
        raise DatabaseUnavailable(f"not a database URL: {hide_passwords(repr(url))} (its port is no number: "
                                  f"{SERVER_URL_FORM})") from None
    shown = shown_url(parsed)
    if parsed.get_backend_name() == "sqlite" and parsed.host:  # sqlite://crawl.db: two slashes, not three
        path = f"{parsed.host}/{parsed.database}" if parsed.database else parsed.host
        raise DatabaseUnavailable(f"not a SQLite URL: {hide_passwords(repr(url))} names a host; a file is "
                                  f"sqlite:///{path} (three slashes; four for an absolute path)")
    if parsed.get_backend_name() == "sqlite" and (parsed.database in (None, "", ":memory:")
                                                  or parsed.query.get("mode") == "memory"):
        # each thread of a program had its own empty database (a manager's lease, renewed by
        # another thread, failed every second: no such table), and all was gone at its end
        raise DatabaseUnavailable(f"{url!r} is an SQLite database in memory, gone when the program ends and "
                                  f"not shared by its threads: name a file, e.g. sqlite:///crawl.db")
    if parsed.get_backend_name() in ("mysql", "mariadb") and parsed.get_driver_name() != "pyodbc":
        # (pyodbc's database is named in its DSN or its odbc_connect string, not in the URL's path)
        if not parsed.database:
            # SQLAlchemy's MariaDB dialect asserted (a traceback) on the first table it looked for
            raise DatabaseUnavailable(f"{shown} names no database: add one after the host, e.g. "
                                      f"{_with_database(parsed, 'gridcrawl')} (create it first: CREATE DATABASE "
                                      "gridcrawl CHARACTER SET utf8mb4)")
        if parsed.database.lower() in _MYSQL_SYSTEM_DATABASES:
            raise DatabaseUnavailable(f"{shown} names the server's own {parsed.database} database, not one for "
                                      f"gridcrawl's tables: create one (CREATE DATABASE gridcrawl CHARACTER SET "
                                      f"utf8mb4) and name it, e.g. {_with_database(parsed, 'gridcrawl')}")
    if parsed.drivername in ("mssql", "mssql+pyodbc", "mysql+pyodbc", "postgresql+pyodbc") and parsed.host \
            and parsed.database \
            and not {"driver", "dsn", "odbc_connect"} & {k.lower() for k in parsed.query}:
        # SQLAlchemy would warn (a SAWarning and its source line) and the driver manager say "Data
        # source name not found": the URL names a server and a database but no ODBC driver
        raise DatabaseUnavailable(
            f"{shown} names no ODBC driver: add driver= and the driver's name as `odbcinst -q -d` lists it, "
            "spaces as + (SQL Server: ?driver=ODBC+Driver+18+for+SQL+Server)")
    if existing and parsed.get_backend_name() == "sqlite" and not parsed.database.startswith("file:") \
            and not os.path.isfile(parsed.database):
        raise DatabaseUnavailable(f"no database file {parsed.database} (from {shown}{_tilde_hint(parsed.database)})")
    try:
        if parsed.get_backend_name() == "sqlite":
            engine = sa.create_engine(parsed, connect_args={"check_same_thread": False, "timeout": 30})
            event.listen(engine, "connect", _sqlite_pragmas)
            event.listen(engine, "begin", _sqlite_begin_read if read_only else _sqlite_begin)
        else:
            connect_args = {}
            timeout_arg = _TIMEOUT_ARGS.get(parsed.get_driver_name())
            if timeout_arg and timeout_arg not in parsed.query and "odbc_connect" not in parsed.query:
                connect_args[timeout_arg] = CONNECT_TIMEOUT
            greeting_timeout = parsed.get_driver_name() == "pymysql" and "read_timeout" not in parsed.query
            if greeting_timeout:
                # PyMySQL's connect_timeout bounds the TCP connect only: a server that accepts and
                # never sends its greeting hung every program. Reads get CONNECT_TIMEOUT while
                # connecting, and no limit once connected (a long report, a lock wait)
                connect_args["read_timeout"] = CONNECT_TIMEOUT
            engine = sa.create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
            if greeting_timeout:
                event.listen(engine, "connect", _no_read_timeout)
    except NoSuchModuleError:
        meant = _SCHEME_MEANT.get(parsed.get_backend_name().lower())
        raise DatabaseUnavailable(f"unknown database kind in {parsed.drivername!r} " + (
            f"(did you mean {shown_url(parsed.set(drivername=meant))}?)" if meant else
            "(use sqlite:///FILE, postgresql+psycopg://, mysql+pymysql:// or mssql+pyodbc://)")) from None
    except ArgumentError as exc:  # a URL SQLAlchemy parses but its dialect refuses
        raise DatabaseUnavailable(f"not a database URL: {hide_passwords(repr(url))} ({_reason(exc)})") from None
    except ModuleNotFoundError as exc:
        hint = _DRIVER_HINTS.get(exc.name or "", f"pip install {exc.name}")
        raise DatabaseUnavailable(f"the driver for {parsed.drivername} is not installed: {hint}") from None
    except ImportError as exc:  # the module is there but a C library it needs is not (libodbc)
        hint = " (install unixODBC: apt-get install unixodbc)" if "odbc" in str(exc).lower() else ""
        raise DatabaseUnavailable(f"the driver for {parsed.drivername} cannot load: {_reason(exc)}{hint}") from None
    if check:
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        except sa.exc.DBAPIError as exc:
            engine.dispose()
            reason = _reason(exc)
            if parsed.get_driver_name() == "pyodbc" and any(s in reason for s in _ODBC_DRIVER_MISSING):
                mssql = parsed.get_backend_name() == "mssql"
                raise DatabaseUnavailable(
                    f"the ODBC driver for {shown} is not installed ({reason}); `odbcinst -q -d` lists the "
                    "installed ones" + ("; for SQL Server install Microsoft ODBC Driver 18 for SQL Server "
                                        "(package msodbcsql18) and name it in the URL: "
                                        "?driver=ODBC+Driver+18+for+SQL+Server" if mssql else
                                        ": name one of them, spelt as it lists it")) from None
            if parsed.get_backend_name() == "sqlite" and parsed.database and not parsed.database.startswith("file:"):
                folder = os.path.dirname(os.path.abspath(parsed.database))
                if not os.path.isdir(folder):
                    reason += f" (its folder {folder} does not exist{_tilde_hint(parsed.database)})"
                elif not os.access(folder, os.W_OK) and not os.path.exists(parsed.database):
                    reason += (f" (its folder {folder} is read-only: SQLite cannot create the file there; "
                               "name a file in a folder you may write to)")
                elif not os.access(folder, os.W_OK):
                    reason += (f" (its folder {folder} is read-only, and SQLite writes its -wal and -shm files "
                               f"beside it: copy the file elsewhere, or read it as sqlite:///file:"
                               f"{os.path.abspath(parsed.database)}?mode=ro&immutable=1&uri=true)")
                raise DatabaseUnavailable(f"cannot open the SQLite database {shown}: {reason}") from None
            raise DatabaseUnavailable(f"{_connect_failure(exc)} {shown}: {reason}") from None
    return engine


def _connect_failure(exc: sa.exc.DBAPIError) -> str:
    """What went wrong connecting, for the start of the one line: a server that answered and
    refused the login, or has no such database, is no server out of reach (PostgreSQL SQLSTATE
    28P01/28000 and 3D000, MariaDB/MySQL errors 1045 and 1049)."""
    state, code, text = _codes(exc)  # psycopg gives no SQLSTATE for a failed connection: its message says it
    if (state in ("28P01", "28000") or code == 1045 or "password authentication failed" in text
            or re.search(r'role "[^"]*" does not exist', text)):
        return "the database server refused the login of"
    if state == "3D000" or code == 1049 or re.search(r'database "[^"]*" does not exist', text):
        return "no such database on its server:"
    return "cannot reach database"


@contextmanager
def _schema_lock(engine: Engine) -> Iterator[Connection]:
    """A connection holding the back end's lock on gridcrawl's schema, so that two programs
    creating the schema at once (two clients on one PostgreSQL database) take turns instead of
    failing on each other's half-made tables.

    SQLite: ``BEGIN IMMEDIATE`` (the write lock); PostgreSQL: a transaction-scoped advisory
    lock; SQL Server: ``sp_getapplock`` owned by the transaction; MariaDB/MySQL (whose DDL
    commits on its own): ``GET_LOCK`` held by the session. Transactional back ends commit at the
    end. Raises :class:`DatabaseUnavailable` if the lock is not had within a minute.
    """
    name = engine.dialect.name
    if name in ("mysql", "mariadb"):
        with engine.connect() as conn:
            if conn.execute(sa.text("SELECT GET_LOCK(:n, 60)"), {"n": _SCHEMA_LOCK_NAME}).scalar() != 1:
                raise DatabaseUnavailable("timed out waiting for another program creating the gridcrawl schema")
            try:
                yield conn
                conn.commit()
            finally:
                conn.rollback()
                conn.execute(sa.text("SELECT RELEASE_LOCK(:n)"), {"n": _SCHEMA_LOCK_NAME})
                conn.commit()
        return
    with engine.begin() as conn:
        if name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK_KEY})
        elif name == "mssql":
            status = conn.execute(sa.text(
                "SET NOCOUNT ON; DECLARE @status int; EXEC @status = sp_getapplock @Resource = :n, "
                "@LockMode = 'Exclusive', @LockOwner = 'Transaction', @LockTimeout = 60000; SELECT @status"),
                {"n": _SCHEMA_LOCK_NAME}).scalar()
            if status is not None and status < 0:
                raise DatabaseUnavailable("timed out waiting for another program creating the gridcrawl schema")
        yield conn


def init_schema(engine: Engine, metadata: sa.MetaData, meta_table: sa.Table) -> None:
    """Bring the database's tables of ``metadata`` to this release's schema and create its views
    (see :mod:`gridcrawl.views`).

    A new database gets the current tables and is stamped at the newest migration; an older one
    (made by an earlier release, or before migrations existed) is upgraded by
    :mod:`gridcrawl.migrations` (Alembic); one at the newest revision is only given its views.
    The integer revision is kept in ``meta_table``'s ``schema_version`` row.

    Idempotent, and safe when several programs do it at once (they take turns, see
    :func:`_schema_lock`). On a back end gridcrawl has no view SQL for, the tables are made and
    the views skipped (logged). Raises :class:`DatabaseUnavailable` if the database's schema is
    newer than this release knows, if the database user may not create tables, and, with one
    line naming the database, for an error waiting will not cure (:func:`transient_error`: a
    full disk, a read-only or unreadable file); a transient error is raised as it is.
    """
    try:
        _init_schema(engine, metadata, meta_table)
    except sa.exc.DBAPIError as exc:
        if _is_permission_error(exc):
            raise DatabaseUnavailable(
                f"the database user may not create or change gridcrawl's tables ({_reason(exc)}); run "
                f"gridcrawl db init --db URL as a user who may, then this user needs only to read and write "
                f"rows (docs/databases.md)") from None
        if transient_error(exc):
            raise
        # a full disk when a new database's tables are written: one line, not the traceback of
        # the manager (or of gridcrawl run's manager process, above its own error line)
        raise DatabaseUnavailable(f"cannot create gridcrawl's tables in {shown_url(engine.url)}: "
                                  f"{_reason(exc)}") from None


def _is_permission_error(exc: sa.exc.DBAPIError) -> bool:
    """Whether ``exc`` is the server refusing the user a right (PostgreSQL SQLSTATE 42501,
    MariaDB/MySQL errors 1044 and 1142, SQL Server 262 and 1088)."""
    state, code, text = _codes(exc)
    return (state == "42501" or code in (1044, 1142) or "(262)" in text or "(1088)" in text
            or "permission denied" in text.lower())


def _init_schema(engine: Engine, metadata: sa.MetaData, meta_table: sa.Table) -> None:
    from gridcrawl import migrations
    from gridcrawl.views import UnsupportedDialect, create_views, views_for
    kind = "manager" if meta_table.name == "manager_meta" else "crawl"
    head = migrations.head(kind)
    with _schema_lock(engine) as conn:
        if conn.dialect.name in ("mysql", "mariadb"):
            charset = conn.execute(sa.text("SELECT @@character_set_database")).scalar() or ""
            if not charset.startswith("utf8mb4"):
                log.warning("the database %s has the character set %s: characters outside it (emoji, and in %s "
                            "most scripts) are stored as '?'; create it with CHARACTER SET utf8mb4 "
                            "(docs/databases.md)", shown_url(engine.url), charset, charset)
        revision = migrations.current(conn, kind)
        changed = revision != head
        if revision is None:
            inspector = sa.inspect(conn)
            stored = (conn.execute(sa.select(meta_table.c.value).where(meta_table.c.name == "schema_version")).scalar()
                      if inspector.has_table(meta_table.name) else None)
            if stored is not None and int(stored) > int(head):
                raise DatabaseUnavailable(f"database schema version {stored} is newer than this gridcrawl's "
                                          f"({int(head)}); upgrade gridcrawl")
            if not any(inspector.has_table(t.name) for t in metadata.sorted_tables):
                metadata.create_all(conn, checkfirst=False)  # a new database (none of its tables): the current ones
                migrations.stamp(conn, kind)
                revision = head
        if revision != head:
            try:
                before = migrations.upgrade(conn, kind)
            except migrations.SchemaTooNew as exc:
                raise DatabaseUnavailable(str(exc)) from None
            log.info("upgraded the %s database schema from revision %s to %s", kind, before or "(none)", head)
        views = views_for(metadata)
        # at the newest revision with every view there, nothing is created: a user who may only
        # read and write rows can run the programs on a database `gridcrawl db init` prepared
        # (a release that changes a view changes the revision too)
        if changed or not {v.name for v in views} <= set(sa.inspect(conn).get_view_names()):
            try:
                create_views(conn, views)
            except UnsupportedDialect as exc:
                log.warning("%s: the timing views are not created", exc)
        version = {"name": "schema_version", "value": str(int(head))}
        if changed and conn.execute(meta_table.update().where(meta_table.c.name == "schema_version")
                        .values(value=version["value"])).rowcount == 0:
            insert_ignore(conn, meta_table, [version])


def schema_version(engine: Engine, meta_table: sa.Table) -> int | None:
    """The schema version stored in ``meta_table`` (``manager_meta`` or ``crawl_meta``): the
    integer of its newest applied migration revision, or None if the schema was never created
    there."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(meta_table.name):
            return None
        value = conn.execute(sa.select(meta_table.c.value).where(meta_table.c.name == "schema_version")).scalar()
    return None if value is None else int(value)


def _conflict_columns(table: sa.Table) -> list[sa.Column]:
    for index in sorted(table.indexes, key=lambda i: i.name or ""):
        if index.unique:
            return list(index.columns)
    return list(table.primary_key.columns)


def _sort_key(columns: list[sa.Column]):
    names = [c.name for c in columns]
    return lambda row: tuple((row.get(n) is not None, row.get(n) if row.get(n) is not None else 0) for n in names)


def _codes(exc: BaseException) -> tuple[str | None, object, str]:
    """What identifies database error ``exc`` (a SQLAlchemy ``DBAPIError``, or the driver's own):
    ``(SQLSTATE, first driver argument, driver arguments as text)``: PostgreSQL's SQLSTATE
    (psycopg's ``sqlstate``, psycopg2's ``pgcode``), MariaDB/MySQL's error number, and the
    message SQLite's and SQL Server's errors are told by."""
    orig = getattr(exc, "orig", exc)
    args = getattr(orig, "args", ())
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return state, args[0] if args else None, " ".join(str(a) for a in args) or str(orig)


def is_unique_violation(exc: BaseException) -> bool:
    """True if ``exc`` (a SQLAlchemy ``IntegrityError``) is a duplicate key, as opposed to
    another integrity failure (a foreign key, a NULL) that must not be hidden.

    Recognises PostgreSQL SQLSTATE 23505, SQL Server errors 2627/2601, MariaDB/MySQL 1062 and
    SQLite's ``UNIQUE constraint failed``.
    """
    state, code, text = _codes(exc)
    return (state == "23505" or code == 1062 or "UNIQUE constraint failed" in text or "(2627)" in text or "(2601)" in text
            or "Duplicate entry" in text or "duplicate key" in text)


INSERT_SLICE = 5000  # rows per executemany of insert_ignore


def insert_ignore(conn: Connection, table: sa.Table, rows: Sequence[dict]) -> None:
    """Insert ``rows`` into ``table``, silently skipping rows whose unique keys already exist
    (also rows another transaction is inserting at the same moment: one of them is stored).

    SQLite and PostgreSQL use ``INSERT … ON CONFLICT DO NOTHING``; MariaDB/MySQL
    ``INSERT IGNORE``; other back ends (SQL Server) :func:`insert_ignore_savepoints`. Rows are
    inserted in the order of the table's unique key (except on SQLite, whose writers take the
    whole database), so two writers of overlapping batches take their key locks in one order and
    do not deadlock. Raises SQLAlchemy errors other than a
    duplicate key.
    """
    if not rows:
        return
    dialect = conn.dialect.name
    if dialect != "sqlite":  # SQLite writers take the whole database at BEGIN IMMEDIATE: no key-lock order
        rows = sorted(rows, key=_sort_key(_conflict_columns(table)))
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
        stmt = insert(table).on_conflict_do_nothing()
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
        stmt = insert(table).on_conflict_do_nothing()
    elif dialect in ("mysql", "mariadb"):
        stmt = table.insert().prefix_with("IGNORE")
    else:
        insert_ignore_savepoints(conn, table, rows)
        return
    # in slices (still in key order, in the same transaction): a driver's executemany of 200,000
    # rows is one C call that lets other threads of the program (the client's I/O loop and its
    # heartbeats) have Python's GIL only by chance; between slices they get it
    for part in chunks(rows, INSERT_SLICE):
        conn.execute(stmt, part)


def insert_ignore_savepoints(conn: Connection, table: sa.Table, rows: Sequence[dict]) -> None:
    """Insert-if-absent for back ends without ``ON CONFLICT`` (SQL Server): the whole batch in
    one savepoint; if a key is already there, row by row, each in its own savepoint, taking a
    unique violation as "already there". On SQL Server a second writer's insert of an
    uncommitted key waits for the first writer and then fails with 2627, so the race leaves one
    row. Raises SQLAlchemy errors other than a duplicate key.
    """
    try:
        with conn.begin_nested():
            conn.execute(table.insert(), list(rows))
        return
    except IntegrityError as exc:
        if not is_unique_violation(exc):
            raise
    for row in rows:
        try:
            with conn.begin_nested():
                conn.execute(table.insert(), row)
        except IntegrityError as exc:
            if not is_unique_violation(exc):
                raise


def limit_idle_transaction(conn: Connection, seconds: float) -> None:
    """Have the server end ``conn``'s transaction (and close its session) if ``conn`` sits idle
    inside it for more than ``seconds``, releasing every lock it holds: a process paused or hung
    in the middle of a transaction (SIGSTOP, a debugger, a stuck thread) cannot keep its row locks
    for longer than that. Call it at the start of the transaction.

    PostgreSQL: ``idle_in_transaction_session_timeout`` for this transaction (``SET LOCAL``, as
    ``set_config(..., true)``; milliseconds). MariaDB: the session's ``idle_transaction_timeout``
    (whole seconds, at least 1; set once per connection). MySQL, SQL Server and SQLite have no
    such limit: nothing is done (a paused holder keeps its locks until it resumes or dies).
    """
    dialect = conn.dialect.name
    if dialect == "postgresql":
        conn.execute(sa.text("SELECT set_config('idle_in_transaction_session_timeout', :ms, true)"),
                     {"ms": str(max(1, int(seconds * 1000)))})
    elif dialect in ("mysql", "mariadb") and getattr(conn.dialect, "is_mariadb", False):
        value = max(1, math.ceil(seconds))
        info = conn.connection.info
        if info.get("gridcrawl_idle_transaction_timeout") != value:
            conn.exec_driver_sql(f"SET SESSION idle_transaction_timeout = {value}")
            info["gridcrawl_idle_transaction_timeout"] = value


@contextmanager
def lock_wait(conn: Connection, seconds: float) -> Iterator[None]:
    """Within this block, a statement of ``conn`` waits at most ``seconds`` for a lock another
    transaction holds, then fails with a lock timeout (:func:`is_lock_timeout`), instead of
    waiting as long as that transaction lasts. Enter it before ``conn.begin()``; the previous
    limit is back after the block.

    PostgreSQL ``lock_timeout`` (ms), MariaDB/MySQL ``innodb_lock_wait_timeout`` (whole seconds,
    at least 1), SQL Server ``SET LOCK_TIMEOUT`` (ms). SQLite keeps its busy timeout
    (``SQLITE_BUSY_MS`` at ``BEGIN IMMEDIATE``): every SQLite transaction of a program that
    writes, its reads included, takes the write lock, so a short wait there would make a manager
    starting next to one refuse to start (an export's and a report's, ``read_only``, take none).
    """
    dialect = conn.dialect.name
    ms = max(1, int(seconds * 1000))
    settings = {"postgresql": (f"SET lock_timeout = {ms}", "RESET lock_timeout"),
                "mysql": (f"SET SESSION innodb_lock_wait_timeout = {max(1, math.ceil(seconds))}",
                          "SET SESSION innodb_lock_wait_timeout = DEFAULT"),
                "mssql": (f"SET LOCK_TIMEOUT {ms}", "SET LOCK_TIMEOUT -1")}
    if dialect == "mariadb":
        dialect = "mysql"
    if dialect not in settings:
        yield
        return
    limit, unlimit = settings[dialect]
    conn.exec_driver_sql(limit)
    conn.commit()  # session-wide from here (a SET in a transaction rolled back would be undone)
    try:
        yield
    finally:
        try:
            if conn.in_transaction():
                conn.rollback()
            conn.exec_driver_sql(unlimit)
            conn.commit()
        except sa.exc.DBAPIError:
            conn.invalidate()  # never hand a connection with the short limit back to the pool


def server_time(conn: Connection) -> float | None:
    """The database server's clock: POSIX seconds (UTC, to the microsecond) as the server tells
    them now, or None for SQLite (a file: every program that opens it runs on this machine's
    clock). PostgreSQL ``clock_timestamp()`` (not ``now()``, the transaction's start), MariaDB and
    MySQL ``UNIX_TIMESTAMP(NOW(6))``, SQL Server ``SYSUTCDATETIME()``.

    The managers' lease (:mod:`gridcrawl.manager.lease`) is judged by this one clock, so that
    managers on hosts whose clocks disagree agree on when it expires."""
    dialect = conn.dialect.name
    if dialect == "postgresql":
        sql = "SELECT EXTRACT(EPOCH FROM clock_timestamp())"
    elif dialect in ("mysql", "mariadb"):
        sql = "SELECT UNIX_TIMESTAMP(NOW(6))"
    elif dialect == "mssql":
        sql = "SELECT DATEDIFF_BIG(MICROSECOND, '19700101', SYSUTCDATETIME()) / 1000000.0"
    else:
        return None
    return float(conn.exec_driver_sql(sql).scalar())


def end_row_lock_holders(conn: Connection, table: sa.Table) -> list[int]:
    """End the sessions whose open transaction holds a row lock on ``table`` (PostgreSQL: the
    backends whose transaction id is a row's ``xmax``, terminated with ``pg_terminate_backend``;
    their transactions roll back and their locks go). Returns their process ids; nothing and
    ``[]`` on other back ends. Needs the holders' role or ``pg_signal_backend``.

    :func:`limit_idle_transaction` does not cover every pause on PostgreSQL: a session whose
    client stopped right after a pipelined ``executemany`` (psycopg ends it with a Flush message)
    is "idle in transaction" without the idle timer armed, measured on PostgreSQL 15.
    """
    if conn.dialect.name != "postgresql":
        return []
    name = conn.dialect.identifier_preparer.quote(table.name)
    pids = conn.execute(sa.text(
        f"SELECT DISTINCT l.pid FROM pg_locks l JOIN (SELECT xmax FROM {name}) r "
        "ON l.locktype = 'transactionid' AND l.transactionid = r.xmax "
        "WHERE l.granted AND l.pid <> pg_backend_pid()")).scalars().all()
    for pid in pids:
        conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    return list(pids)


def is_lock_timeout(exc: BaseException) -> bool:
    """True if ``exc`` is a lock wait that ran out (see :func:`lock_wait`): PostgreSQL SQLSTATE
    55P03, MariaDB/MySQL 1205, SQL Server 1222, SQLite ``database is locked``."""
    state, code, text = _codes(exc)
    return (state == "55P03" or code == 1205 or "database is locked" in text or "(1222)" in text
            or "Lock request time out" in text)


def is_retryable(exc: BaseException) -> bool:
    """True if ``exc`` is a deadlock, a serialization failure or a lock timeout: the transaction
    was rolled back and running it again may succeed.

    PostgreSQL SQLSTATE 40P01/40001/55P03, SQL Server 1205 (SQLSTATE 40001), MariaDB/MySQL
    1213/1205, SQLite ``database is locked``.
    """
    state, code, text = _codes(exc)
    return (state in ("40P01", "40001", "55P03") or code in (1213, 1205, "40001") or "database is locked" in text
            or "(1205)" in text or "deadlock" in text.lower())


# Driver messages of errors that waiting will not cure (matched lower-case): disk full, no
# permission, read-only file, a schema that does not match.
_PERMANENT = ("disk is full", "disk full", "no space left", "permission denied", "readonly database",
              "read-only", "access denied", "no such table", "no such column", "undefinedtable",
              "undefinedcolumn", "does not exist", "unknown column", "doesn't exist", "disk i/o error")
# ... and of errors that go away: the connection or the server went (restart, network), a lock.
_TRANSIENT = ("connection", "server closed", "terminating", "shutting down", "shutdown", "gone away",
              "lost connection", "could not connect", "database is locked", "deadlock", "timeout",
              "timed out", "the database system is starting up", "in recovery", "not accepting connections")


def transient_error(exc: BaseException) -> bool:
    """True if database error ``exc`` may go away by itself (connection lost, server shutting
    down or restarting, deadlock, lock timeout, ``database is locked``): wait and try again.
    False for errors that need an operator (disk full, permission denied, read-only file, a
    schema that does not match) and for errors this module does not recognise."""
    text = _reason(exc).lower()
    if any(marker in text for marker in _PERMANENT):
        return False
    if is_retryable(exc) or getattr(exc, "connection_invalidated", False):
        return True
    if isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
        return any(marker in text for marker in _TRANSIENT)
    return False


def describe_error(exc: BaseException, engine: Engine | None = None) -> str:
    """One line about database error ``exc``: the driver's first line, and the database (its
    URL without password). Never the SQL statement or its parameters (they may hold page bodies)."""
    where = f" (database {shown_url(engine.url)})" if engine is not None else ""
    return f"{_reason(exc)}{where}"


def run_transaction(engine: Engine, work: Callable[[Connection], T], attempts: int = 5) -> T:
    """Run ``work(conn)`` in a transaction of ``engine`` and commit; if the back end rolled it
    back as a deadlock victim or for a lock timeout (:func:`is_retryable`), run it again, up to
    ``attempts`` times with a short random back-off (0.05–0.4 s, doubling). ``work`` must be
    safe to repeat. Returns what ``work`` returns; raises the last error."""
    for attempt in range(1, attempts + 1):
        try:
            with engine.begin() as conn:
                return work(conn)
        except sa.exc.DBAPIError as exc:
            if attempt == attempts or not is_retryable(exc):
                raise
            log.info("transaction rolled back (%s); retrying", str(exc.orig).splitlines()[0] if exc.orig else exc)
            time.sleep(random.uniform(0.05, 0.1) * 2 ** min(attempt - 1, 2))
    raise AssertionError("unreachable")


def chunks(items: Sequence, size: int) -> Iterable[Sequence]:
    """``items`` in consecutive slices of at most ``size`` (bounded SQL ``IN`` lists)."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


class CrawlerLock:
    """The database server's lock that one crawler holds on a crawl database for as long as it
    crawls into it: the server's own lock, held by one connection of ``engine`` and let go when
    that connection closes (the crawler ending, ``kill -9`` and a lost host included), as the
    ``flock`` beside an SQLite crawl database is by the kernel.

    PostgreSQL: a session advisory lock (``pg_try_advisory_lock``) keyed by the database and
    the schema the crawl tables are in; MariaDB/MySQL: ``GET_LOCK`` named after the database
    (its locks are server-wide); SQL Server: ``sp_getapplock`` owned by the session, named after
    the schema. :meth:`take` does not wait. While held, a daemon thread runs ``SELECT 1`` on
    the connection every ``KEEP_SECONDS`` (MariaDB closes a connection idle for
    ``wait_timeout``, 8 hours by default, and its lock with it) and takes the lock again on a
    new connection if the old one was lost; if another crawler has it by then, that is logged
    as an ERROR and :attr:`lost` is set (the client then stops its crawl: two would fetch the
    same URLs).

    ``holder``, when given, is the line that names this crawler (``"gridcrawl run, pid 26256 on
    HOST, since 2026-11-30 05:15:48"``): each time the lock is taken (again) it is written, on the
    lock's own connection, to the crawl database's ``crawl_meta`` row ``crawler``, and the
    connection's session to the row ``crawler_session``, so that :func:`running_crawler` names
    a holder only while that session holds the lock (a crawler that let go or was killed leaves
    its rows behind, and one that has just taken the lock has not written its own yet)."""

    #: Seconds between two checks of the lock's connection. A lost connection (a network cut, a
    #: server restart) let go of the lock until the next check: at 300 s, a second crawler
    #: started 8 s after a 2 s outage got in and both crawled one frontier (202 URLs twice).
    KEEP_SECONDS = 5.0

    def __init__(self, engine: Engine, holder: str | None = None) -> None:
        self.engine = engine
        self.holder = holder
        self._conn: Connection | None = None
        self._stop: threading.Event | None = None
        self._guard = threading.Lock()  # the connection: taken by the keeping thread and close()
        #: set when the lock was lost with its connection and another crawler holds it now
        self.lost = threading.Event()

    #: Back ends whose lock's holder can be asked without taking the lock (:meth:`held`).
    ASKED = ("postgresql", "mysql", "mariadb")

    @staticmethod
    def supported(engine: Engine) -> bool:
        """Whether ``engine``'s back end has such a lock (not SQLite, which uses a file's)."""
        return engine.dialect.name in (*CrawlerLock.ASKED, "mssql")

    @staticmethod
    def _key(conn: Connection) -> int | str:
        """The lock's key on ``conn``'s server: PostgreSQL's advisory lock number (signed 64
        bits, from the database and schema), MariaDB's lock name (its names are server-wide)."""
        if conn.dialect.name == "postgresql":
            where = conn.execute(sa.text("SELECT current_database() || '.' || current_schema()")).scalar()
            return int.from_bytes(hashlib.blake2b(f"gridcrawl crawl {where}".encode(), digest_size=8).digest(),
                                  "big", signed=True)
        where = conn.execute(sa.text("SELECT DATABASE()")).scalar() or ""
        # names are server-wide and at most 64 characters
        return f"gridcrawl crawl {hashlib.blake2b(where.encode(), digest_size=8).hexdigest()}"

    @classmethod
    def held(cls, engine: Engine) -> bool | None:
        """Whether a crawler holds the lock on ``engine``'s crawl database now, asked without
        taking it (PostgreSQL's ``pg_locks``, MariaDB's ``IS_USED_LOCK``); None where that
        cannot be asked (SQL Server, SQLite: :func:`running_crawler`)."""
        if engine.dialect.name not in cls.ASKED:
            return None
        with engine.connect() as conn:
            return cls.holding_session(conn) is not None

    @classmethod
    def holding_session(cls, conn: Connection) -> int | None:
        """The server session (PostgreSQL's backend pid, MariaDB's connection id) that holds the
        lock on ``conn``'s crawl database now, or None when none does. PostgreSQL and MariaDB
        only (:meth:`held`)."""
        key = cls._key(conn)
        if conn.dialect.name != "postgresql":
            return conn.execute(sa.text("SELECT IS_USED_LOCK(:n)"), {"n": key}).scalar()
        # a bigint key shows as its high half in classid, its low half in objid, objsubid 1
        unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
        return conn.execute(sa.text(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND classid = CAST(:hi AS oid) AND objid = CAST(:lo AS oid)"),
            {"hi": unsigned >> 32, "lo": unsigned & 0xFFFF_FFFF}).scalar()

    @staticmethod
    def _session(conn: Connection) -> int:
        """``conn``'s server session, as :meth:`holding_session` names it (SQL Server: its SPID)."""
        name = conn.dialect.name
        return conn.execute(sa.text("SELECT pg_backend_pid()" if name == "postgresql" else "SELECT @@SPID"
                                    if name == "mssql" else "SELECT CONNECTION_ID()")).scalar()

    def _name(self, conn: Connection) -> None:
        """Write :attr:`holder` and ``conn``'s session to the ``crawl_meta`` rows ``crawler`` and
        ``crawler_session`` (the lock is ``conn``'s: see the class)."""
        from gridcrawl.models import crawl_meta as meta
        for name, value in (("crawler", self.holder), ("crawler_session", str(self._session(conn)))):
            # rowcount 0 may also mean "same value" (drivers that count changed rows): insert-if-absent
            if conn.execute(meta.update().where(meta.c.name == name).values(value=value)).rowcount == 0:
                insert_ignore(conn, meta, [{"name": name, "value": value}])
        conn.commit()

    def _try(self, conn: Connection) -> bool:
        name = conn.dialect.name
        if name == "postgresql":
            taken = conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": self._key(conn)}).scalar()
        elif name in ("mysql", "mariadb"):
            taken = conn.execute(sa.text("SELECT GET_LOCK(:n, 0)"), {"n": self._key(conn)}).scalar() == 1
        else:
            status = conn.execute(sa.text(
                "SET NOCOUNT ON; DECLARE @status int; DECLARE @name nvarchar(255) = 'gridcrawl crawl ' + "
                "SCHEMA_NAME(); EXEC @status = sp_getapplock @Resource = @name, @LockMode = 'Exclusive', "
                "@LockOwner = 'Session', @LockTimeout = 0; SELECT @status")).scalar()
            taken = status is not None and status >= 0
        conn.commit()  # the lock is the session's: it outlives the transaction
        return bool(taken)

    def take(self) -> bool:
        """Take the lock without waiting: True, and it is kept until :meth:`close`; False when
        another connection holds it. Raises what SQLAlchemy raises when the server fails."""
        with self._guard:
            if not self._take():
                return False
        if self._stop is None:
            self._stop = threading.Event()
            threading.Thread(target=self._keep, name="gridcrawl-crawler-lock", daemon=True).start()
        return True

    def _take(self) -> bool:
        conn = self.engine.connect()
        try:
            taken = self._try(conn)
            if taken and self.holder is not None:
                self._name(conn)
        except BaseException:
            conn.close()
            raise
        if not taken:
            conn.close()
            return False
        self._conn = conn
        return True

    def _keep(self) -> None:
        while not self._stop.wait(self.KEEP_SECONDS):
            with self._guard:
                if self._stop.is_set():
                    return
                if self._conn is not None:
                    try:
                        self._conn.execute(sa.text("SELECT 1"))
                        self._conn.commit()
                        continue
                    except sa.exc.DBAPIError:
                        self._conn.invalidate()
                        self._conn.close()
                        self._conn = None
                try:
                    if not self._take():
                        log.error("the crawl database's connection holding this crawler's lock was lost, and "
                                  "another crawler holds the lock now: this one stops (both would fetch the same "
                                  "URLs)")
                        self.lost.set()
                        return
                    log.warning("the crawl database's connection holding this crawler's lock was lost; "
                                "the lock is taken again")
                except sa.exc.DBAPIError as exc:
                    log.warning("the crawl database's lock could not be taken again (%s); trying again in %.0f s",
                                _reason(exc), self.KEEP_SECONDS)

    def _release(self, conn: Connection) -> None:
        """Let go of the lock on ``conn``'s session (the counterpart of :meth:`_try`)."""
        name = conn.dialect.name
        if name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": self._key(conn)})
        elif name in ("mysql", "mariadb"):
            conn.execute(sa.text("SELECT RELEASE_LOCK(:n)"), {"n": self._key(conn)})
        else:
            conn.execute(sa.text(
                "SET NOCOUNT ON; DECLARE @name nvarchar(255) = 'gridcrawl crawl ' + SCHEMA_NAME(); "
                "EXEC sp_releaseapplock @Resource = @name, @LockOwner = 'Session'"))
        conn.commit()

    def close(self) -> None:
        """Let the lock go at once: released on its session, whose connection is then closed for
        good (invalidated, not handed back to the engine's pool, where the session, and so the
        lock, lived on until the engine was disposed). A connection that fails here is closed
        all the same, and the server lets go of the lock with its session."""
        if self._stop is not None:
            self._stop.set()
        with self._guard:
            if self._conn is not None:
                try:
                    self._release(self._conn)
                except sa.exc.DBAPIError:
                    pass  # (the session ends with the connection below: the server lets go then)
                self._conn.invalidate()
                self._conn.close()
                self._conn = None


#: What the holder line of a crawl database's crawler lock names when ``gridcrawl extract``
#: holds it (``gridcrawl extract, pid N, since ...``), not a crawl (:func:`holder_is_extract`).
EXTRACT_HOLDER = "gridcrawl extract"


def holder_is_extract(holder: str) -> bool:
    """Whether a crawler lock's holder line (:func:`running_crawler`, ``FILE.lock``'s text,
    the ``crawler`` meta row) is ``gridcrawl extract``'s rather than a crawl's (``gridcrawl
    run``, ``gridcrawl-client``, ``gridcrawl spark``, or an older gridcrawl's ``pid N, since
    ...``, which names no command)."""
    return holder.startswith(EXTRACT_HOLDER + ",")


def running_crawler(engine: Engine) -> str | None:
    """Who holds the crawler lock of the crawl database ``engine`` now (a crawl, or ``gridcrawl
    extract``), asked without taking it (``gridcrawl export`` warns that it exports a
    snapshot): the holder as it wrote itself down (``"gridcrawl run, pid 26256, since
    2026-11-30 05:15:48"``; PostgreSQL and MariaDB: its ``crawler`` meta row, with ``on HOST``
    after the pid, read only if the ``crawler_session`` row names the session holding the lock,
    else ``"a crawler starting"``: :class:`CrawlerLock`), or None when no one holds the lock or
    this cannot be known (SQL Server, an SQLite database in memory or where ``fcntl`` is
    missing). SQLite: :func:`sqlite_lock_holder`."""
    if engine.dialect.name != "sqlite":
        if engine.dialect.name not in CrawlerLock.ASKED:
            return None
        from gridcrawl.models import crawl_meta as meta
        with engine.connect() as conn:
            session = CrawlerLock.holding_session(conn)
            if session is None:
                return None
            rows = dict(conn.execute(sa.select(meta.c.name, meta.c.value)
                                     .where(meta.c.name.in_(("crawler", "crawler_session")))).all())
        return rows.get("crawler") if rows.get("crawler_session") == str(session) else "a crawler starting"
    path = engine.url.database
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    return sqlite_lock_holder(path)


def sqlite_lock_holder(path: str) -> str | None:
    """Who holds the crawler lock of the SQLite crawl database file ``path``: the ``flock`` on
    ``FILE.lock`` (``client.cli._lock_crawl``), tried shared and let go at once, so that no
    database transaction is needed (one waits while ``gridcrawl extract`` writes). Returns
    the lock file's text (``"gridcrawl extract, pid N, since ..."``; ``"a crawler starting"``
    when it wrote none yet), or None when no one holds it, there is no lock file, or ``fcntl``
    is missing (Windows)."""
    try:
        import fcntl
    except ImportError:
        return None
    try:
        with open(os.path.abspath(path) + ".lock", encoding="utf-8") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return lock.read().strip() or "a crawler starting"
            fcntl.flock(lock, fcntl.LOCK_UN)
    except OSError:  # no lock file: no crawler ever ran on it here
        return None
    return None
