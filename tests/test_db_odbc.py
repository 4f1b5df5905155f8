"""The pyodbc path end to end, over real ODBC drivers (unixODBC with Debian's odbc-mariadb and
odbc-postgresql), since SQL Server itself cannot run here:

* SQLAlchemy's ``mysql+pyodbc`` dialect through the MariaDB ODBC driver runs the crawl store
  (schema, seeds, claim, apply, counts) and the manager's schema, views and reports;
* a raw pyodbc connection through the PostgreSQL ODBC driver reads the ``thread_timing`` view —
  what a SQL Server user does from Excel or a script.

Skipped, saying why, when pyodbc, the ODBC driver or the server is missing.
"""

from __future__ import annotations

import urllib.parse

import pytest
import sqlalchemy as sa

from dbfixtures import KNOWN_THREADS, import_pyodbc, insert_known_timings, postgres_schema
from gridcrawl import migrations, models, report
from gridcrawl.client.store import CrawlStore, Outcome
from gridcrawl.db import init_schema, open_database, schema_version
from gridcrawl.protocol import PageResult

pyodbc = import_pyodbc(module_level=True)

MARIADB_ODBC = "MariaDB Unicode"      # Debian's odbc-mariadb
POSTGRES_ODBC = "PostgreSQL Unicode"  # Debian's odbc-postgresql


def need_driver(name: str) -> None:
    if name not in pyodbc.drivers():
        pytest.skip(f"ODBC driver {name!r} is not installed (apt-get install "
                    f"{'odbc-mariadb' if 'MariaDB' in name else 'odbc-postgresql'}); installed: {pyodbc.drivers()}")


def odbc_string(driver: str, url: str, port: int, **extra: str) -> str:
    parsed = sa.engine.make_url(url)
    fields = {"DRIVER": "{" + driver + "}", "SERVER": parsed.host, "PORT": str(parsed.port or port),
              "UID": parsed.username, "PWD": parsed.password or "", "DATABASE": parsed.database, **extra}
    return ";".join(f"{k}={v}" for k, v in fields.items())


@pytest.fixture
def mariadb_odbc_url(mariadb_url) -> str:
    """A ``mysql+pyodbc`` URL of the fresh MariaDB database, through the MariaDB ODBC driver
    (OPTION=2: report matched rows, as the other MySQL drivers do)."""
    need_driver(MARIADB_ODBC)
    dsn = odbc_string(MARIADB_ODBC, mariadb_url, 3306, CHARSET="utf8mb4", OPTION="2")
    return "mysql+pyodbc:///?odbc_connect=" + urllib.parse.quote_plus(dsn)


def test_crawl_store_through_pyodbc(mariadb_odbc_url):
    engine = open_database(mariadb_odbc_url)
    assert engine.dialect.driver == "pyodbc"
    store = CrawlStore(engine)
    CrawlStore(engine)  # the schema again: idempotent
    assert schema_version(engine, models.crawl_meta) == int(migrations.head("crawl"))
    seeds = ["http://127.0.0.1:9/", "http://127.0.0.1:9/b"]
    scope = store.scope(seeds, [], max_depth=-1)
    store.scope(seeds, [], max_depth=-1)  # same value again (a driver counting changed rows says 0)
    assert store.add_seeds(seeds) == 2 and store.add_seeds(seeds) == 0
    claimed = store.claim(10)
    assert sorted(p.url for p in claimed) == sorted(seeds) and store.claim(10) == []
    text_page = PageResult(url=claimed[0].url, final_url=claimed[0].url, status=200, content_type="text/html",
                           size=5, title="Grüße ☃", encoding="utf-8", content="<p>Grüße ☃</p>" * 10_000,
                           links=[["http://127.0.0.1:9/c", ""], ["http://127.0.0.1:9/", ""]])
    binary_page = PageResult(url=claimed[1].url, final_url=claimed[1].url, status=200, content_type="image/png",
                             size=200_000, content=bytes(range(256)) * 800)
    outcomes = [Outcome(claimed[0], text_page, "e1", 1, False), Outcome(claimed[1], binary_page, "e2", 1, False)]
    store.apply(outcomes, scope)
    store.apply(outcomes, scope)  # idempotent
    assert store.counts() == {**store.counts(), "documents": 2, "visited": 2, "to_visit": 1}
    with engine.connect() as conn:
        d = models.document
        title, content = conn.execute(sa.select(d.c.title, d.c.content).where(d.c.url == claimed[0].url)).one()
        body = conn.execute(sa.select(d.c.body).where(d.c.url == claimed[1].url)).scalar()
    assert title == "Grüße ☃" and content == text_page.content   # > 64 KiB of text
    assert body == binary_page.content                           # > 64 KiB of bytes
    assert [p.url for p in store.claim(10)] == ["http://127.0.0.1:9/c"]
    engine.dispose()


def test_manager_views_and_report_through_pyodbc(mariadb_odbc_url):
    engine = open_database(mariadb_odbc_url)
    insert_known_timings(engine)
    init_schema(engine, models.manager_metadata, models.manager_meta)
    summary = {e.executor_id: e for e in report.executor_summary(engine)}
    assert summary["e1"].mean_run_seconds == pytest.approx(1.5) and summary["e2"].pages == 1
    runs = {t.thread_id: t.run_seconds for t in report.thread_timings(engine)}
    assert runs[3] == pytest.approx(4.000123, abs=1e-6) and runs[5] is None
    engine.dispose()


def test_raw_pyodbc_reads_thread_timing_on_postgresql(postgres_url):
    need_driver(POSTGRES_ODBC)
    engine = open_database(postgres_url)
    insert_known_timings(engine)
    engine.dispose()
    connection = pyodbc.connect(odbc_string(POSTGRES_ODBC, postgres_url, 5432), timeout=10)
    try:
        connection.cursor().execute(f"SET search_path TO {postgres_schema(postgres_url)}")
        rows = connection.cursor().execute(
            "SELECT thread_id, executor_name, url, queue_wait_seconds, run_seconds "
            "FROM thread_timing WHERE application_id = ? ORDER BY thread_id", "a1").fetchall()
    finally:
        connection.close()
    assert [r.thread_id for r in rows] == sorted(KNOWN_THREADS)
    for r in rows:
        ex, sub, start, end, _failed = KNOWN_THREADS[r.thread_id]
        assert r.url == f"http://127.0.0.1:9/p/{r.thread_id}"
        if start is None:
            assert r.executor_name is None and r.run_seconds is None
        else:
            assert r.executor_name == f"ex-{ex[1]}"
            assert float(r.queue_wait_seconds) == pytest.approx(start - sub, abs=1e-6)
            assert float(r.run_seconds) == pytest.approx(end - start, abs=1e-6)
