"""Pytest fixtures for real database servers: a fresh, empty database per test, dropped after.

* ``postgres_url`` — ``postgresql+psycopg://postgres@127.0.0.1:5432/gridcrawl_test_<random>?options=…``
  (a fresh schema first on the search path, in one database made for the test session)
* ``mariadb_url`` — ``mysql+pymysql://root@127.0.0.1:3306/gridcrawl_test_<random>?charset=utf8mb4``
* ``sqlite_url`` — ``sqlite:///<tmp_path>/gridcrawl.db``
* ``db_url`` — parametrised over the three (``sqlite``, ``postgresql``, ``mariadb``)
* ``small_disk`` — a 2 MiB tmpfs to put an SQLite file on and fill (:func:`fill_disk`)
* ``read_only_dir`` — a folder no one may write to (a read-only tmpfs for root)

and :func:`insert_known_timings`, manager rows with known durations (for the views' tests).

The servers are the ones this machine and CI run (PostgreSQL: user postgres, trust; MariaDB:
root, no password). Other servers: set ``GRIDCRAWL_TEST_POSTGRES`` / ``GRIDCRAWL_TEST_MARIADB``
to an administrator's SQLAlchemy URL. A test that needs a server that does not answer (or whose
Python driver is missing) is skipped, saying why; with ``GRIDCRAWL_REQUIRE_DATABASES=1`` (CI) it
fails instead, so a broken server cannot pass as a skip.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from grid import wait_for

POSTGRES_ADMIN = os.environ.get("GRIDCRAWL_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
MARIADB_ADMIN = os.environ.get("GRIDCRAWL_TEST_MARIADB", "mysql+pymysql://root@127.0.0.1:3306/")

__all__ = ["postgres_url", "mariadb_url", "sqlite_url", "db_url", "_postgres_database", "small_disk", "read_only_dir"]


def import_pyodbc(module_level: bool = False):
    """pyodbc, or a skip with one reason: the module is missing (``pip install -e '.[test]'``), or
    it is installed but cannot load unixODBC's ``libodbc.so.2`` (``apt-get install unixodbc``).
    ``pytest.importorskip`` skips only the first: it re-raises any other ImportError, which would
    stop the whole run at collection. ``module_level``: skip the calling test module."""
    try:
        import pyodbc
    except ModuleNotFoundError:
        pytest.skip("pyodbc is not installed (pip install -e '.[test]')", allow_module_level=module_level)
    except ImportError as exc:
        pytest.skip(f"pyodbc cannot load unixODBC ({str(exc).splitlines()[0]}): apt-get install unixodbc",
                    allow_module_level=module_level)
    return pyodbc

_unavailable: dict[str, str | None] = {}


def _no_server(kind: str, reason: str) -> None:
    variable = "GRIDCRAWL_TEST_POSTGRES" if kind == "PostgreSQL" else "GRIDCRAWL_TEST_MARIADB"
    message = f"no {kind} server for this test: {reason} (start one, or set {variable}; docs/databases.md)"
    if os.environ.get("GRIDCRAWL_REQUIRE_DATABASES"):
        pytest.fail(message + " (GRIDCRAWL_REQUIRE_DATABASES is set)")
    pytest.skip(message)


def _admin_engine(kind: str, url: str) -> sa.engine.Engine:
    """An AUTOCOMMIT engine on the server's administrative database (CREATE/DROP DATABASE cannot
    run in a transaction); skips (or fails, see module doc) when the server does not answer.
    The outcome of the first try is remembered for the session, so a missing server costs one
    connection timeout, not one per test."""
    if _unavailable.get(url):
        _no_server(kind, _unavailable[url])
    try:
        engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool,
                                  connect_args={"connect_timeout": 5})
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except ModuleNotFoundError as exc:
        _unavailable[url] = f"its Python driver {exc.name} is not installed (pip install -e '.[test]')"
        _no_server(kind, _unavailable[url])
    except sa.exc.DBAPIError as exc:
        _unavailable[url] = f"{sa.engine.make_url(url).render_as_string(hide_password=True)} does not answer " \
                            f"({str(exc.orig).strip().splitlines()[0]})"
        _no_server(kind, _unavailable[url])
    return engine


def _fresh_name() -> str:
    return f"gridcrawl_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def _postgres_database() -> Iterator[tuple[sa.engine.Engine, str]]:
    """One new PostgreSQL database for the test session (``gridcrawl_test_<pid>_<random>``),
    dropped at the end with its leftover connections; yields an AUTOCOMMIT engine on it and its
    URL. Skips if no PostgreSQL server answers."""
    admin = _admin_engine("PostgreSQL", POSTGRES_ADMIN)
    name = _fresh_name()
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(POSTGRES_ADMIN).set(database=name)
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    try:
        yield engine, url.render_as_string(hide_password=False)
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def postgres_schema(url: str) -> str:
    """The schema a :func:`postgres_url` puts first on the search path (for raw connections)."""
    options = sa.engine.make_url(url).query["options"]
    return options.split("search_path=", 1)[1]


@pytest.fixture
def postgres_url(_postgres_database) -> Iterator[str]:
    """SQLAlchemy URL (psycopg 3) of a fresh, empty PostgreSQL database for one test: a new
    schema (``t_<random>``) first on the search path of the session's test database — to
    gridcrawl an empty database, at a fraction of the cost of CREATE DATABASE. Dropped after the
    test, once the connections made with the URL (tagged by ``application_name``) are closed.
    Skips if no PostgreSQL server answers."""
    engine, database_url = _postgres_database
    schema = "t_" + uuid.uuid4().hex[:12]
    with engine.connect() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    url = sa.engine.make_url(database_url).update_query_dict(
        {"options": f"-csearch_path={schema}", "application_name": f"gridcrawl_test_{schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 f"WHERE application_name = 'gridcrawl_test_{schema}'")
            conn.exec_driver_sql("SET lock_timeout = '20s'")
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def mariadb_url() -> Iterator[str]:
    """SQLAlchemy URL (PyMySQL, utf8mb4) of a new, empty MariaDB database, dropped after the
    test. Skips if no MariaDB/MySQL server answers."""
    admin = _admin_engine("MariaDB", MARIADB_ADMIN)
    name = _fresh_name()
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    try:
        url = sa.engine.make_url(MARIADB_ADMIN).set(database=name)
        yield url.update_query_dict({"charset": "utf8mb4"}).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """SQLAlchemy URL of a new SQLite file in the test's temporary folder."""
    return f"sqlite:///{tmp_path / 'gridcrawl.db'}"


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (needs root and mount permission; skips otherwise), unmounted after."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder no one may write to: mode 0555, or, for root (whom modes do not stop), a
    read-only tmpfs (skips when it cannot be mounted), unmounted after."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs (root ignores file modes): {done.stderr.decode().strip()}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill_disk(mount, room: int) -> None:
    """Fill the file system of folder ``mount`` with a file of zeros until ``room`` bytes are
    left (about: a file system counts in blocks)."""
    stat = os.statvfs(mount)
    free = stat.f_bavail * stat.f_frsize
    with open(os.path.join(mount, "filler"), "wb") as out:
        out.write(b"\0" * max(0, free - room))


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def db_url(request) -> str:
    """The URL of a fresh database on each back end in turn (skipping servers that do not
    answer); ``request.param`` names the back end."""
    fixture = {"sqlite": "sqlite_url", "postgresql": "postgres_url", "mariadb": "mariadb_url"}[request.param]
    return request.getfixturevalue(fixture)


# ---------------------------------------------------------------------------------------------
# Known timings: manager rows whose durations the views must report exactly

T0 = dt.datetime(2024, 5, 1, 12, 0, 0)


def at(seconds: float) -> dt.datetime:
    """``T0`` plus ``seconds`` (a naive UTC datetime)."""
    return T0 + dt.timedelta(seconds=seconds)


#: thread_id -> (executor_id, submitted, started, finished, failed), seconds after T0
KNOWN_THREADS = {
    1: ("e1", 0.0, 1.25, 3.75, False),        # wait 1.25, run 2.5
    2: ("e1", 0.0, 2.0, 2.5, False),          # wait 2.0,  run 0.5
    3: ("e2", 0.5, 1.0, 5.000123, False),     # wait 0.5,  run 4.000123 (µs on servers)
    4: ("e2", 0.5, 1.0, 2.0, True),           # failed: not a page
    5: (None, 0.5, None, None, False),        # still queued
}


def insert_known_timings(engine) -> None:
    """Create the manager schema in ``engine`` and insert three executors (``e3`` ran nothing),
    one application (created at T0, completed at T0 + 10 s) and :data:`KNOWN_THREADS`."""
    from gridcrawl import models
    from gridcrawl.db import init_schema
    init_schema(engine, models.manager_metadata, models.manager_meta)
    executors = [{"executor_id": f"e{i}", "name": f"ex-{i}", "is_dedicated": True, "is_connected": i != 3,
                  "accepting": True, "host": f"host{i}", "usr_name": "u", "threads": 2, "cpu_max": 2400.0 * i,
                  "cpu_usage": 10.0 * i, "cpu_avail": 100 - 10.0 * i, "cpu_totalusage": 1.5 * i,
                  "mem_max": 1 << 30, "mem_usage": 1 << 20, "num_cpus": 2, "pages_per_second": 0.0,
                  "arch": "x86_64", "os": "linux"} for i in (1, 2, 3)]
    threads = [{"internal_thread_id": 100 + tid, "application_id": "a1", "thread_id": tid, "executor_id": ex,
                "state": 0 if start is None else 3, "url": f"http://127.0.0.1:9/p/{tid}", "host": "127.0.0.1",
                "depth": 0, "priority": 5, "failed": failed, "attempts": 0 if start is None else 1,
                "error_kind": "poison" if failed else None, "time_submitted": at(sub),
                "time_started": None if start is None else at(start),
                "time_finished": None if end is None else at(end)}
               for tid, (ex, sub, start, end, failed) in KNOWN_THREADS.items()]
    with engine.begin() as conn:
        conn.execute(models.executor.insert(), executors)
        conn.execute(models.application.insert(), [{"application_id": "a1", "state": 2, "time_created": T0,
                                                   "time_completed": at(10), "usr_name": "u",
                                                   "application_name": "known timings"}])
        conn.execute(models.thread.insert(), threads)


def stored_crawl(db: str, pages: int):
    """A crawl database at SQLAlchemy URL ``db`` holding ``pages`` stored pages of about 2.3 KB
    (``http://127.0.0.1:1/N.html``, each titled with its URL), as a crawl stores them; returns
    its :class:`~gridcrawl.client.store.CrawlStore`."""
    from gridcrawl.client.store import CrawlStore, Outcome
    from gridcrawl.db import open_database
    from gridcrawl.protocol import PageResult
    from gridcrawl.urls import canonical_url
    store = CrawlStore(open_database(db))
    urls = [canonical_url(f"http://127.0.0.1:1/{i}.html") for i in range(pages)]
    store.add_seeds(urls)
    scope, outcomes = store.scope(urls, [], -1), []
    for pending in store.claim(len(urls)):
        page = PageResult(url=pending.url, final_url=pending.url, status=200, content_type="text/html",
                          title="t", content=f"<html><head><title>{pending.url}</title></head><body>"
                                          + "<p>text</p>" * 200 + "</body></html>")
        outcomes.append(Outcome(pending, page, "ex", 1, False))
    for start in range(0, len(outcomes), 50):  # 50 a transaction: one each took 10 s for 400 on PostgreSQL
        store.apply(outcomes[start:start + 50], scope)
    return store


def paused_extract(db: str, spec, ready) -> subprocess.Popen:
    """``gridcrawl extract`` of ``db`` with ``spec`` (its stderr piped), paused (SIGSTOP) where
    ``ready(its pid)`` holds, before and after the stop; the caller sends it SIGCONT."""
    extract = subprocess.Popen([sys.executable, "-m", "gridcrawl", "extract", "--db", db, "--extract", str(spec),
                                "--no-progress"], stderr=subprocess.PIPE, text=True)

    def paused() -> bool:  # ready() still true once stopped: not a short transaction of its start caught
        if not ready(extract.pid):
            return False
        os.kill(extract.pid, signal.SIGSTOP)
        if ready(extract.pid):
            return True
        os.kill(extract.pid, signal.SIGCONT)
        return False
    wait_for(lambda: extract.poll() is not None or paused(), 60, 0.005, "the extract holding the lock")
    assert extract.poll() is None, "the extract ended before it was paused"
    return extract
