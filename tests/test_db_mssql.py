"""Every statement gridcrawl issues, compiled for SQL Server (which cannot run on these machines).

The real code paths — schema creation, the crawl store (seeds, claim, apply, meta, counts), the
manager's recorder (upserts, inserts, batched updates, the insert-if-absent retry), the
manager's restore at start, and the reports — run against SQLite while every SQLAlchemy
statement they execute is recorded; each is then compiled with SQLAlchemy's mssql dialect and
parsed back as T-SQL by sqlglot. SQLite-only constructs (``INSERT … ON CONFLICT``) are replaced
by what :func:`gridcrawl.db.insert_ignore` runs on SQL Server. The claim query is checked for
the lock hints that SQLAlchemy's mssql dialect would otherwise silently drop.
"""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import mssql, sqlite as sqlite_dialect
from sqlalchemy.schema import CreateIndex, CreateTable

from gridcrawl import models, report
from gridcrawl.client.store import CrawlStore, Outcome
from gridcrawl.db import init_schema, open_database
from gridcrawl.protocol import PageResult

sqlglot = pytest.importorskip("sqlglot", reason="sqlglot is in the test extra: pip install -e '.[test]'")
from sqlglot import exp  # noqa: E402

MSSQL = mssql.dialect()
ALL_TABLES = [t for md in (models.manager_metadata, models.crawl_metadata) for t in md.sorted_tables]


def to_tsql(element, column_keys: list[str] | None = None) -> str:
    """``element`` compiled for SQL Server, with IN lists and TOP values written out;
    ``column_keys``: the parameter names it was executed with (the columns an INSERT names)."""
    if isinstance(element, sqlite_dialect.Insert):  # what insert_ignore runs on SQL Server
        element = element.table.insert()
    if isinstance(element, sa.schema.ExecutableDDLElement):
        return str(element.compile(dialect=MSSQL))
    return str(element.compile(dialect=MSSQL, column_keys=column_keys,
                               compile_kwargs={"render_postcompile": True}))


def assert_tsql(sql: str) -> None:
    for statement in sqlglot.parse(sql, read="tsql"):
        assert not isinstance(statement, exp.Command), f"not valid T-SQL for sqlglot: {sql}"


@pytest.mark.parametrize("table", ALL_TABLES, ids=lambda t: t.name)
def test_create_table_and_indexes_compile_for_sql_server(table):
    ddl = str(CreateTable(table).compile(dialect=MSSQL))
    assert_tsql(ddl)
    assert " DATETIME " not in ddl and " NTEXT" not in ddl and " IMAGE" not in ddl, \
        "legacy SQL Server types: DATETIME2(6), NVARCHAR(max), VARBINARY(max) expected"
    for index in table.indexes:
        assert_tsql(str(CreateIndex(index).compile(dialect=MSSQL)))


def test_sqlalchemy_mssql_drops_with_for_update_so_claim_writes_hints():
    t = models.to_visit_url
    dropped = str(sa.select(t.c.id).with_for_update(skip_locked=True).compile(dialect=MSSQL))
    assert "UPDLOCK" not in dropped and "FOR UPDATE" not in dropped  # why the hint is needed
    claim = to_tsql(CrawlStore.claim_statement(MSSQL, 25))
    assert "FROM to_visit_url WITH (UPDLOCK, READPAST, ROWLOCK)" in claim
    assert "TOP 25" in claim and "FOR UPDATE" not in claim
    assert_tsql(claim)


def page(url: str, links: list[str]) -> PageResult:
    return PageResult(url=url, final_url=url, status=200, content_type="text/html", size=100, fetch_seconds=0.01,
                      parse_seconds=0.001, title="t", encoding="utf-8", content="<html></html>",
                      links=[[link, ""] for link in links])


def run_crawl_store(url: str) -> None:
    store = CrawlStore(open_database(url))
    store.set_meta("application_id", "a1")
    store.get_meta("application_id")
    seeds = ["http://127.0.0.1:9/", "http://127.0.0.1:9/a"]
    scope = store.scope(seeds, [], max_depth=-1)
    store.add_seeds(seeds)
    store.release_all()
    claimed = store.claim(10)
    assert len(claimed) == 2
    outcomes = [Outcome(p, page(p.url, ["http://127.0.0.1:9/b", "http://127.0.0.1:9/c"]), "e1", 1, False)
                for p in claimed]
    store.apply(outcomes, scope)
    store.apply(outcomes, scope)  # idempotent: every insert-if-absent finds its rows
    store.counts()
    with store.engine.begin() as conn:  # --retry-failed: one INSERT ... SELECT and one DELETE a batch
        conn.execute(models.visited_url.update().values(error_kind="timeout"))
    assert store.retry_failed(progress=lambda done, total: None) == 2


def run_recorder(url: str) -> None:
    from gridcrawl.manager import events as ev
    from gridcrawl.manager.recorder import Recorder
    engine = open_database(url)
    init_schema(engine, models.manager_metadata, models.manager_meta)
    recorder = Recorder(engine)
    now = time.time()
    executor = ev.ExecutorRegistered("e1", "ex-1", "h", "u", True, 2, 2400.0, 2, 1 << 30, "linux", "x86_64", (), now)
    thread = ev.ThreadSubmitted(1, "a1", 1, "http://127.0.0.1:9/", "127.0.0.1", 0, 5, (), now)
    for event in [executor, ev.ApplicationCreated("a1", "crawl", "u", 1, now), thread,
                  ev.ThreadAssigned(1, 1, "e1", 1, now), ev.ThreadStarted(1, 1, now),
                  ev.ThreadFinished(1, 1, now, now, None)]:
        recorder.add(event)
    assert recorder.flush() > 0
    recorder.add(executor)  # the update path of an upsert
    recorder.add(thread)    # already there: the careful retry
    recorder.flush()
    others = [f"e{i}" for i in range(2, 6)]  # rows given the same values: set together where ROW_AT_A_TIME says
    for executor_id in others:
        recorder.add(ev.ExecutorRegistered(executor_id, executor_id, "h", "u", True, 2, 2400.0, 2, 1 << 30, "linux",
                                           "x86_64", (), now))
    recorder.flush()
    for executor_id in others:
        recorder.add(ev.ExecutorDisconnected(executor_id))
    recorder.flush()


def run_restore_and_reports(url: str) -> None:
    from gridcrawl.manager.server import ManagerServer
    from gridcrawl.settings import Settings
    engine = open_database(url)
    server = ManagerServer(Settings(), "tcp://127.0.0.1:0", engine)
    server.socket.close(linger=0)
    server.context.term()
    report.executor_timings(engine)
    report.executor_timings(engine, "a1")
    report.executor_summary(engine)
    report.application_summary(engine, "a1")
    report.thread_timings(engine, "a1")


@pytest.mark.parametrize("path", [run_crawl_store, run_recorder, run_restore_and_reports],
                         ids=["crawl store", "recorder", "restore and reports"])
def test_every_statement_of_a_code_path_compiles_for_sql_server(tmp_path, path, monkeypatch):
    from gridcrawl.manager import recorder
    monkeypatch.setattr(recorder, "ROW_AT_A_TIME", recorder.ROW_AT_A_TIME | {"sqlite"})  # SQL Server's path
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    seen: list = []

    def keep(conn, element, multiparams, params, execution_options):
        first = multiparams[0] if multiparams else params
        first = first[0] if isinstance(first, (list, tuple)) and first else first
        seen.append((element, list(first) if isinstance(first, dict) and first else None))
    event.listen(sa.engine.Engine, "before_execute", keep)  # every engine, for this test only
    try:
        path(url)
    finally:
        event.remove(sa.engine.Engine, "before_execute", keep)
    statements = [(s, keys) for s, keys in seen if not isinstance(s, str)]  # driver SQL: the views, tested apart
    assert len(statements) > 5
    for element, keys in statements:
        sql = to_tsql(element, keys)
        assert_tsql(sql)
        assert "ON CONFLICT" not in sql and "LIMIT" not in sql, sql
        if isinstance(element, sa.sql.dml.Insert) and element.table.autoincrement_column is not None:
            # SQL Server refuses a value for an IDENTITY column (without IDENTITY_INSERT)
            identity = element.table.autoincrement_column.name
            assert f"({identity}," not in sql and f" {identity}," not in sql.split("VALUES")[0], sql
