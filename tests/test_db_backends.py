"""The back ends for real: opening (and failing to open) databases, creating the schema (twice,
and from several programs at once), the timing views' seconds, and ``gridcrawl report`` / ``db
init`` — on SQLite, PostgreSQL and MariaDB (servers on 127.0.0.1; skipped when none answers).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from dbfixtures import KNOWN_THREADS, import_pyodbc, insert_known_timings
from gridcrawl import migrations, models, report, views
from gridcrawl.cli import app
from gridcrawl.db import DatabaseUnavailable, init_schema, open_database, schema_version


def one_line_error(url: str) -> str:
    with pytest.raises(DatabaseUnavailable) as info:
        open_database(url)
    message = str(info.value)
    assert "\n" not in message
    return message


# ------------------------------------------------------------------------------------------
# Opening databases


def test_not_a_url_and_unknown_kind(tmp_path, monkeypatch):
    """A path that is no file is not a URL (the error gives the URL it would be); the path of an
    existing SQLite file opens it (``gridcrawl report --crawl-db crawl-1/crawl.db`` was refused)."""
    monkeypatch.chdir(tmp_path)
    assert one_line_error("crawl.db") == (f"not a database URL: 'crawl.db' (expected e.g. "
                                          f"sqlite:///{tmp_path / 'crawl.db'})")
    assert "unknown database kind" in one_line_error("nosuchdb://x/y")
    # a scheme with too few slashes: its path's URLs, not sqlite:////HERE/sqlite:/crawl.db
    for url in ("sqlite:/crawl.db", "sqlite:crawl.db"):
        assert one_line_error(url) == (f"not a database URL: {url!r} (expected e.g. sqlite:///crawl.db for crawl.db "
                                       f"in the current folder, sqlite:////crawl.db for /crawl.db)")
    assert one_line_error("postgresql:db-host/crawl") == ("not a database URL: 'postgresql:db-host/crawl' (expected "
                                                          "e.g. dialect+driver://user:password@host:PORT/database)")
    (tmp_path / "crawl-1").mkdir()
    init_schema(open_database(f"sqlite:///{tmp_path / 'crawl-1' / 'crawl.db'}"), models.crawl_metadata,
                models.crawl_meta)
    engine = open_database("crawl-1/crawl.db", existing=True)
    assert engine.url.database == str(tmp_path / "crawl-1" / "crawl.db")
    result = CliRunner().invoke(app, ["report", "--crawl-db", "crawl-1/crawl.db"], env={"COLUMNS": "250"})
    assert result.exit_code == 0 and "documents" in result.output, result.output


@pytest.mark.parametrize("url", ["postgresql+psycopg://postgres@127.0.0.1:1/none",
                                 "mysql+pymysql://root@127.0.0.1:1/none"])
def test_unreachable_server(url):
    driver = sa.engine.make_url(url).get_driver_name()
    if importlib.util.find_spec(driver) is None:
        pytest.skip(f"{driver} is not installed")
    message = one_line_error(url)
    assert message.startswith("cannot reach database") and "127.0.0.1:1" in message


def test_missing_python_driver():
    if importlib.util.find_spec("pg8000") is not None:
        pytest.skip("pg8000 is installed here: no missing driver to show")
    message = one_line_error("postgresql+pg8000://postgres@127.0.0.1:1/none")
    assert "driver for postgresql+pg8000 is not installed" in message and "pg8000" in message


def test_missing_odbc_driver_names_what_to_install():
    pyodbc = import_pyodbc()
    if "ODBC Driver 18 for SQL Server" in pyodbc.drivers():
        pytest.skip("Microsoft's ODBC driver is installed here")
    message = one_line_error("mssql+pyodbc://sa:secret@127.0.0.1:1/crawl?driver=ODBC+Driver+18+for+SQL+Server")
    assert "ODBC driver" in message and "not installed" in message and "msodbcsql18" in message
    assert "secret" not in message


def test_an_odbc_url_without_a_driver_says_to_name_one():
    """``mssql+pyodbc://user:pw@host/db`` (no ``driver=``) printed SQLAlchemy's SAWarning with its
    source line, then "the ODBC driver ... is not installed (... Data source name not found ...)",
    though nothing was missing but the driver's name in the URL."""
    import_pyodbc()
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "report", "--db", "mssql+pyodbc://sa:secret@127.0.0.1:1/crawl"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: mssql+pyodbc://sa:***@127.0.0.1:1/crawl names no ODBC driver: add driver= and "
                                   "the driver's name as `odbcinst -q -d` lists it, spaces as + "
                                   "(SQL Server: ?driver=ODBC+Driver+18+for+SQL+Server)")


# ------------------------------------------------------------------------------------------
# Creating the schema


def view_columns(engine, name: str) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(f"SELECT * FROM {name} WHERE 1 = 0")).keys())


def test_init_twice_keeps_data_and_stores_the_version(db_url):
    engine = open_database(db_url)
    assert schema_version(engine, models.manager_meta) is None
    for metadata, meta in ((models.manager_metadata, models.manager_meta), (models.crawl_metadata, models.crawl_meta)):
        init_schema(engine, metadata, meta)
    with engine.begin() as conn:
        conn.execute(models.crawl_meta.insert().values(name="kept", value="yes"))
    for metadata, meta in ((models.manager_metadata, models.manager_meta), (models.crawl_metadata, models.crawl_meta)):
        init_schema(engine, metadata, meta)
    assert schema_version(engine, models.manager_meta) == int(migrations.head("manager"))
    assert schema_version(engine, models.crawl_meta) == int(migrations.head("crawl"))
    with engine.connect() as conn:
        meta = models.crawl_meta
        assert conn.execute(sa.select(meta.c.value).where(meta.c.name == "kept")).scalar() == "yes"
        assert conn.execute(sa.select(sa.func.count()).select_from(models.manager_meta)).scalar() == 1
    tables = set(sa.inspect(engine).get_table_names())
    assert {t.name for md in (models.manager_metadata, models.crawl_metadata) for t in md.tables.values()} <= tables
    for view in views.MANAGER_VIEWS:
        assert view_columns(engine, view.name)
    engine.dispose()


def test_a_newer_schema_is_refused(sqlite_url):
    engine = open_database(sqlite_url)
    init_schema(engine, models.crawl_metadata, models.crawl_meta)
    with engine.begin() as conn:
        conn.execute(models.crawl_meta.update().values(value=str(int(migrations.head("crawl")) + 1)))
        conn.execute(migrations.version_table("crawl").update().values(version_num="9999"))
    with pytest.raises(DatabaseUnavailable, match="newer than this gridcrawl"):
        init_schema(engine, models.crawl_metadata, models.crawl_meta)


def test_several_programs_create_the_schema_at_once(db_url):
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def create() -> None:
        engine = None
        try:
            start.wait(10)
            engine = open_database(db_url)  # the first open of a new SQLite file races too
            init_schema(engine, models.manager_metadata, models.manager_meta)
            init_schema(engine, models.crawl_metadata, models.crawl_meta)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            if engine is not None:
                engine.dispose()
    workers = [threading.Thread(target=create) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert errors == []
    engine = open_database(db_url)
    assert schema_version(engine, models.manager_meta) == int(migrations.head("manager"))
    engine.dispose()


def test_views_have_the_same_columns_on_every_back_end(db_url):
    """...and the same as schema.sql's T-SQL views (parsed by sqlglot)."""
    sqlglot = pytest.importorskip("sqlglot")
    engine = open_database(db_url)
    init_schema(engine, models.manager_metadata, models.manager_meta)
    for view in views.MANAGER_VIEWS:
        (tsql,) = view.create_sql("mssql")
        expected = sqlglot.parse_one(tsql, read="tsql").expression.named_selects
        assert view_columns(engine, view.name) == expected, view.name
    engine.dispose()


# ------------------------------------------------------------------------------------------
# The views' seconds


def test_views_report_known_seconds(db_url, request):
    engine = open_database(db_url)
    insert_known_timings(engine)
    exact = 1e-6  # SQLite too (its julianday() reads milliseconds: the views gave 0.395 for 0.394889 s)
    approx = lambda x: pytest.approx(x, abs=exact)  # noqa: E731

    threads = {t.thread_id: t for t in report.thread_timings(engine, "a1")}
    assert sorted(threads) == sorted(KNOWN_THREADS)
    for tid, (ex, sub, start, end, failed) in KNOWN_THREADS.items():
        t = threads[tid]
        assert t.executor_id == ex and t.failed == failed
        if start is None:
            assert t.queue_wait_seconds is None and t.run_seconds is None and t.executor_name is None
        else:
            assert t.queue_wait_seconds == approx(start - sub)
            assert t.run_seconds == approx(end - start)
            assert t.executor_name == f"ex-{ex[1]}"

    summary = {e.executor_id: e for e in report.executor_summary(engine)}
    e1, e2, e3 = summary["e1"], summary["e2"], summary["e3"]
    assert (e1.threads, e1.pages, e1.failed) == (2, 2, 0)
    assert e1.mean_run_seconds == approx(1.5) and e1.min_run_seconds == approx(0.5)
    assert e1.max_run_seconds == approx(2.5) and e1.mean_queue_wait_seconds == approx(1.625)
    # pages per crawl second of the grid (first submitted 0 s, last finished 5.000123 s): the
    # executors' rates add up to the grid's (issue 21: each over its own busy span, more in sum)
    assert e1.pages_per_second == pytest.approx(2 / 5.000123, rel=1e-3)
    assert (e2.threads, e2.pages, e2.failed) == (2, 1, 1)
    assert e2.mean_run_seconds == approx(4.000123) == e2.max_run_seconds
    assert e2.pages_per_second == pytest.approx(1 / 5.000123, rel=1e-3)
    assert (e3.threads, e3.pages, e3.mean_run_seconds, e3.pages_per_second) == (0, 0, None, None)
    assert (e2.cpu_max, e2.cpu_usage, e2.cpu_totalusage, e2.num_cpus, e3.is_connected) == (4800.0, 20.0, 3.0, 2, False)

    (app_row,) = report.application_summary(engine)
    assert (app_row.threads, app_row.pages, app_row.failed, app_row.executors) == (5, 3, 1, 2)
    assert app_row.elapsed_seconds == approx(5.000123)  # crawl seconds: first submitted -> last finished
    assert app_row.pages_per_second == pytest.approx(3 / 5.000123, rel=1e-3)
    assert e1.pages_per_second + e2.pages_per_second == pytest.approx(app_row.pages_per_second, rel=1e-3)

    timings = {t.executor_id: t for t in report.executor_timings(engine, "a1")}
    assert timings["e1"].threads == 2 and timings["e1"].mean_wait_seconds == approx(1.625)
    assert sum(t.pages_per_second for t in timings.values()) == pytest.approx(app_row.pages_per_second, rel=1e-3)
    assert timings["e2"].max_seconds == approx(4.000123) and "e3" not in timings
    engine.dispose()


def test_the_views_counts_are_integers_on_every_back_end(db_url):
    """``pages`` and ``failed`` of executor_summary and application_summary were SUMs, which
    MariaDB returns as DECIMAL: a user's script read ``Decimal('2')`` and ``json.dumps`` of a
    row failed. Now COUNTs: Python ints on every back end, as ``threads`` was."""
    import json
    engine = open_database(db_url)
    insert_known_timings(engine)
    with engine.connect() as conn:
        rows = [dict(r._mapping) for view in ("executor_summary", "application_summary") for r in
                conn.exec_driver_sql(f"SELECT threads, pages, failed FROM {view}")]
    assert rows and all(type(value) is int for row in rows for value in row.values()), rows
    assert {(r["threads"], r["pages"], r["failed"]) for r in rows} == {(2, 2, 0), (2, 1, 1), (0, 0, 0), (5, 3, 1)}
    json.dumps(rows)
    engine.dispose()


def test_one_select_answers_which_executor_ran_which_url(db_url):
    engine = open_database(db_url)
    insert_known_timings(engine)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT executor_name, url, run_seconds FROM thread_timing "
            "WHERE run_seconds IS NOT NULL ORDER BY run_seconds DESC")).all()
    assert [(r[0], r[1]) for r in rows][:2] == [("ex-2", "http://127.0.0.1:9/p/3"), ("ex-1", "http://127.0.0.1:9/p/1")]
    engine.dispose()


# ------------------------------------------------------------------------------------------
# The command line


def test_db_init_twice(db_url):
    runner = CliRunner()
    for _ in range(2):
        result = runner.invoke(app, ["db", "init", "--db", db_url])
        assert result.exit_code == 0, result.output
        assert "schema ready" in result.output
    engine = open_database(db_url)
    assert schema_version(engine, models.manager_meta) == int(migrations.head("manager"))
    assert schema_version(engine, models.crawl_meta) == int(migrations.head("crawl"))
    engine.dispose()


def test_report_prints_the_summaries_and_draws_the_timeline(db_url, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in the test extra")
    engine = open_database(db_url)
    insert_known_timings(engine)
    engine.dispose()
    plot = tmp_path / "threads.png"
    result = CliRunner().invoke(app, ["report", "--db", db_url, "--plot", str(plot)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    for text in ("executor_summary", "application_summary", "ex-1", "ex-2", "ex-3", "known timings",
                 "timeline of 4 threads drawn"):
        assert text in result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = CliRunner().invoke(app, ["report", "--db", db_url, "--application", "a1"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "threads per executor" in result.output and "ex-3" not in result.output


def test_report_says_why_queued_threads_wait(sqlite_url):
    """``gridcrawl report``'s "N threads wait" lines: no executor connected, none with the needs,
    or those able to run them take no work (idle-only desktops in use; they said nothing of it
    and the report listed no waiting thread while a busy desktop's executor was connected)."""
    engine = open_database(sqlite_url)
    insert_known_timings(engine)  # thread 5 is READY; executors e1 and e2 connected and accepting
    e, t = models.executor, models.thread
    with engine.begin() as conn:
        conn.execute(models.application.update().values(state=1, time_completed=None))
    assert report.waiting_for_capabilities(engine) == []
    with engine.begin() as conn:
        conn.execute(e.update().values(accepting=False))
    assert report.waiting_for_capabilities(engine) == [
        ("", 1, "the connected executors take no work now (idle-only ones whose desktop is in use or outside "
                "their hours)")]
    result = CliRunner().invoke(app, ["report", "--db", sqlite_url], env={"COLUMNS": "250"})
    assert result.exit_code == 0 and "1 thread waits: the connected executors take no work now" in result.output
    with engine.begin() as conn:
        conn.execute(t.update().where(t.c.thread_id == 5).values(needs="render"))
        conn.execute(e.update().where(e.c.executor_id == "e1").values(capabilities="render"))
    assert report.waiting_for_capabilities(engine)[0][2] == (
        "the connected executors that have render take no work now (idle-only ones whose desktop is in use or "
        "outside their hours)")
    with engine.begin() as conn:
        conn.execute(e.update().values(accepting=True, capabilities=None))
    assert report.waiting_for_capabilities(engine) == [("render", 1, "no connected executor has render")]
    with engine.begin() as conn:
        conn.execute(e.update().values(is_connected=False))
    assert report.waiting_for_capabilities(engine) == [("render", 1, "no executor is connected")]


def test_report_accepts_a_unique_application_id_prefix_and_refuses_others(sqlite_url):
    """The client's summary shows 8 characters of the application id: ``report --application``
    takes that prefix (issue 21: it printed empty tables, exit 0); ambiguous, too short or unknown
    ids are one line, exit 2."""
    from gridcrawl import models
    engine = open_database(sqlite_url)
    insert_known_timings(engine)
    full = "3f9c2a17-0000-4000-8000-000000000001"
    with engine.begin() as conn:
        conn.execute(models.application.update().where(models.application.c.application_id == "a1")
                     .values(application_id=full))
        conn.execute(models.thread.update().values(application_id=full))
        conn.execute(models.application.insert(), [
            {"application_id": f"77aa{i}000-0000-4000-8000-000000000000", "state": 2, "usr_name": "u",
             "application_name": f"other {i}", "time_created": dt.datetime(2024, 5, 2)} for i in (1, 2)])
    engine.dispose()
    result = CliRunner().invoke(app, ["report", "--db", sqlite_url, "--application", full[:8]],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "ex-1" in result.output and "ex-2" in result.output and "known timings" in result.output
    assert "other 1" not in result.output
    for given, says in (("77aa", "ambiguous"), ("3f9", "at least 4"), ("deadbeef", "no application")):
        result = CliRunner().invoke(app, ["report", "--db", sqlite_url, "--application", given])
        assert result.exit_code == 2 and says in result.output, (given, result.output)
        assert len(result.output.strip().splitlines()) == 1


def test_report_without_matplotlib_says_what_to_install(sqlite_url, tmp_path, monkeypatch):
    """``--plot`` without matplotlib: one line naming what to install, before the report (it
    printed the whole report first, which takes seconds on a large grid, then the error)."""
    engine = open_database(sqlite_url)
    insert_known_timings(engine)
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.patches", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    result = CliRunner().invoke(app, ["report", "--db", sqlite_url, "--plot", str(tmp_path / "x.png")])
    assert result.exit_code == 2
    assert result.output == "error: drawing a timeline needs matplotlib: pip install 'gridcrawl[report]'\n"
    assert not (tmp_path / "x.png").exists()


def test_report_names_a_timeline_it_cannot_write_before_printing_anything(sqlite_url, tmp_path):
    """``--plot`` into a folder that does not exist printed the whole report, then
    ``error: [Errno 2] No such file or directory: '...'``; into a folder it may not write, the same."""
    engine = open_database(sqlite_url)
    insert_known_timings(engine)
    engine.dispose()
    missing = tmp_path / "no-such-folder" / "x.png"
    result = CliRunner().invoke(app, ["report", "--db", sqlite_url, "--plot", str(missing)])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: cannot draw the timeline to {missing}: no folder {missing.parent}"
    pytest.importorskip("matplotlib", reason="matplotlib is in the test extra")
    taken = tmp_path / "taken.png"
    taken.mkdir()  # a folder where the file should go: writing it fails as a full disk or a read-only one would
    result = CliRunner().invoke(app, ["report", "--db", sqlite_url, "--plot", str(taken)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == f"error: cannot draw the timeline to {taken}: Is a directory"


def test_report_draws_the_timeline_in_the_format_its_file_name_ends_in(sqlite_url, tmp_path):
    """``--plot timeline.svg`` (or ``.pdf``, ``.jpg``) wrote a PNG under that name, which an SVG
    or PDF viewer cannot open; ``--plot timeline.txt`` a PNG too. Now the ending chooses the
    format (none: PNG), and one that is no image format is refused before the report, exit 2."""
    pytest.importorskip("matplotlib", reason="matplotlib is in the test extra")
    engine = open_database(sqlite_url)
    insert_known_timings(engine)
    engine.dispose()
    for name, starts in (("t.svg", b"<?xml"), ("t.pdf", b"%PDF"), ("t.jpg", b"\xff\xd8\xff"),
                         ("t", b"\x89PNG\r\n\x1a\n")):
        result = CliRunner().invoke(app, ["report", "--db", sqlite_url, "--plot", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        assert (tmp_path / name).read_bytes().startswith(starts), name
    text = tmp_path / "t.txt"
    result = CliRunner().invoke(app, ["report", "--db", sqlite_url, "--plot", str(text)])
    assert result.exit_code == 2 and not text.exists()
    assert result.output.startswith(f"error: cannot draw the timeline to {text}: .txt is no image format it is "
                                    "drawn in (name a file ending in .png, .svg, .pdf,")
    assert len(result.output.strip().splitlines()) == 1  # before the report


def test_timeline_lanes_do_not_overlap():
    from gridcrawl.report import _lanes
    spans = [(0, 2), (1, 3), (2, 4), (2.5, 3), (5, 6)]
    lanes = _lanes(spans)
    assert lanes == [0, 1, 0, 2, 0]
    for i, (s1, e1) in enumerate(spans):
        for j, (s2, e2) in enumerate(spans):
            if i < j and lanes[i] == lanes[j]:
                assert e1 <= s2 or e2 <= s1
    import itertools
    import random
    rng = random.Random(7)  # many spans, touching and nested ones among them
    spans = [(a, a + rng.choice([0.25, 1, 2.5, 0.1 + rng.random() * 4]))
             for a in (rng.randint(0, 40) / 4 for _ in range(300))]
    lanes = _lanes(spans)
    by_lane: dict[int, list] = {}
    for lane, span in zip(lanes, spans):
        by_lane.setdefault(lane, []).append(span)
    for runs in by_lane.values():
        runs.sort()
        assert all(a[1] <= b[0] for a, b in zip(runs, runs[1:])), runs  # no two overlap in a lane
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])  # an end before a start
    assert len(by_lane) == max(itertools.accumulate(step for _, step in edges))  # as few lanes as the most at once


# ------------------------------------------------------------------------------------------
# docs/databases.md's example queries

DOCS = Path(__file__).resolve().parent.parent / "docs" / "databases.md"


def doc_queries(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.DOTALL)


#: the known timings' pages (finished, not failed) by run seconds, slowest first: thread 4 ran 1 s
#: but failed (poison), so it is no page (the slowest-pages queries listed it before)
SLOWEST_PAGES = ["http://127.0.0.1:9/p/3", "http://127.0.0.1:9/p/1", "http://127.0.0.1:9/p/2"]


def _run_documented(engine, queries: list[str]) -> list[list[tuple]]:
    """Every query of ``queries`` run on ``engine`` (the application id placeholder replaced by
    the known timings' ``a1``), each giving rows. Each runs as printed through the driver's own
    cursor, without parameters, as a user's script or ``psql`` runs it (a ``%`` is no placeholder
    there)."""
    results = []
    connection = engine.raw_connection()
    try:
        for query in queries:
            cursor = connection.cursor()
            cursor.execute(query.replace("PUT-THE-APPLICATION-ID-HERE", "a1"))
            rows = [tuple(r) for r in cursor.fetchall()]
            assert rows, query
            results.append(rows)
    finally:
        connection.close()
    return results


def test_documented_postgresql_queries_run(postgres_url):
    engine = open_database(postgres_url)
    insert_known_timings(engine)
    queries = doc_queries("postgresql")
    assert len(queries) >= 5
    results = _run_documented(engine, queries)
    assert [row[1] for row in results[0]] == SLOWEST_PAGES
    (one_crawl,) = [rows for query, rows in zip(queries, results) if "LIKE 'PUT-THE-APPLICATION-ID-HERE%'" in query]
    started = [row[2] for row in one_crawl if row[2] is not None]  # by the id's prefix, in the order they started
    assert len(one_crawl) == 5 and started == sorted(started)
    engine.dispose()


def test_documented_queries_run_on_sqlite(sqlite_url):
    """The SQLite queries, and the PostgreSQL ones the SQLite section says run there unchanged
    (all but ``date_trunc`` and ``percentile_cont``), run on SQLite with the right answers."""
    engine = open_database(sqlite_url)
    insert_known_timings(engine)
    postgresql = [q for q in doc_queries("postgresql") if "date_trunc" not in q and "percentile_cont" not in q]
    sqlite = doc_queries("sqlite")
    assert len(postgresql) >= 4 and len(sqlite) >= 2
    results = _run_documented(engine, postgresql + sqlite)
    assert [row[1] for row in results[0]] == SLOWEST_PAGES
    per_minute = results[len(postgresql)]
    assert per_minute == [("ex-1", "2024-05-01 12:00:00", 2), ("ex-2", "2024-05-01 12:00:00", 1)]
    started = [(row[2], row[1]) for row in results[len(postgresql) + 1] if row[2] is not None]
    assert [time for time, _url in started] == sorted(time for time, _url in started)
    assert {url for _time, url in started} == {f"http://127.0.0.1:9/p/{i}" for i in (1, 2, 3, 4)}
    engine.dispose()


def test_documented_queries_run_on_mariadb(mariadb_url):
    """The MariaDB queries, and the PostgreSQL ones the MariaDB section says run there unchanged
    (all but ``date_trunc``, ``percentile_cont`` and ``NULLS LAST``), run on MariaDB with the right
    answers (the docs gave no MariaDB query: three of the PostgreSQL ones failed there)."""
    engine = open_database(mariadb_url)
    insert_known_timings(engine)
    postgresql = [q for q in doc_queries("postgresql")
                  if "date_trunc" not in q and "percentile_cont" not in q and "NULLS LAST" not in q]
    mariadb = doc_queries("mariadb")
    assert len(postgresql) >= 3 and len(mariadb) >= 4
    results = _run_documented(engine, postgresql + mariadb)
    assert [row[1] for row in results[0]] == SLOWEST_PAGES
    per_minute, percentiles, fastest, started = results[len(postgresql):]
    assert per_minute == [("ex-1", "2024-05-01 12:00:00", 2), ("ex-2", "2024-05-01 12:00:00", 1)]
    assert {row[0] for row in percentiles} == {"ex-1", "ex-2"}
    assert dict((row[0], float(row[1])) for row in percentiles)["ex-1"] == pytest.approx(1.5)  # 0.5 s and 2.5 s
    assert [row[0] for row in fastest] == ["known timings"]
    times = [row[2] for row in started if row[2] is not None]
    assert times == sorted(times) and {row[1] for row in started} >= set(SLOWEST_PAGES)
    engine.dispose()


def test_documented_sql_server_queries_parse_as_tsql():
    sqlglot = pytest.importorskip("sqlglot")
    queries = doc_queries("tsql")
    assert len(queries) >= 5
    for query in queries:
        for statement in sqlglot.parse(query, read="tsql"):
            assert not isinstance(statement, sqlglot.exp.Command), query


# ------------------------------------------------------------------------------------------
# The manager's writes and restore, the crawl store: the code paths compiled for SQL Server in
# test_db_mssql.py, run for real on every back end


def test_the_report_fits_80_columns_header_line_included(sqlite_url):
    """``gridcrawl report`` with COLUMNS=80: its manager line (a lease never renewed: the longest
    form, over 120 characters) was printed unwrapped, 101 columns for a stopped manager."""
    from gridcrawl.manager.lease import Lease
    engine = open_database(sqlite_url)
    insert_known_timings(engine)
    with engine.begin() as conn:  # thread 5 waits: no connected executor takes work
        conn.execute(models.application.update().values(state=1, time_completed=None))
        conn.execute(models.executor.update().values(accepting=False))
    Lease(engine, "manager-on-a-host-with-a-long-name:4242", alive=lambda holder: False,
          address="tcp://manager-on-a-host-with-a-long-name.example:9000").acquire(now=1000.0)
    result = CliRunner().invoke(app, ["report", "--db", sqlite_url], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= 80, "\n".join(line for line in lines if len(line) > 80)
    text = " ".join(result.output.split())
    assert "manager tcp://manager-on-a-host-with-a-long-name.example:9000: not running (lease expired at" in text
    assert "1 thread waits: no manager is running on this database (above)" in text


def test_manager_and_crawl_store_code_paths_run_on_every_back_end(db_url):
    from test_db_mssql import run_crawl_store, run_recorder, run_restore_and_reports
    run_crawl_store(db_url)
    run_recorder(db_url)
    run_restore_and_reports(db_url)
    engine = open_database(db_url)
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT executor_name, run_seconds, queue_wait_seconds FROM thread_timing")).one()
        outcome = conn.execute(sa.select(models.attempt.c.outcome)).scalar()
        connected = conn.execute(sa.select(models.executor.c.is_connected)).scalar()
    assert row[0] == "ex-1" and outcome == "finished"
    assert not connected  # a restarted manager knows no executor until it registers again
    engine.dispose()


@pytest.mark.parametrize("path", ["row by row", "same values together"])
def test_rows_of_a_batch_are_set_exactly_on_every_path(db_url, path, monkeypatch):
    """Where a back end's driver takes a round trip per row (MariaDB, SQL Server) the record
    writer sets the rows of one batch that share their new values with one ``UPDATE ... WHERE
    key IN (...)`` per 500 keys; here that path is forced on every back end, and off. Each row
    gets exactly its values, times to the microsecond; the rows not named keep theirs."""
    check_batch_paths(db_url, path, monkeypatch)


def test_sqlite_sets_the_collected_threads_of_a_batch_with_in_lists(tmp_path, monkeypatch):
    """On SQLite the writer sets the threads of a batch that only go DEAD (64 or more) with one
    ``UPDATE ... WHERE key IN (...)`` per 500 keys sent straight to sqlite3, and every other
    change row by row: exactly, as on the other paths."""
    check_batch_paths(f"sqlite:///{tmp_path / 'manager.db'}", "sqlite in process", monkeypatch)


def test_rows_of_a_batch_are_set_exactly_through_a_temporary_table(mariadb_url, monkeypatch):
    """On MariaDB the rows of a batch that change the same columns, 64 or more, go to a temporary
    table and are set from it by one multi-table ``UPDATE``, inside the batch's transaction:
    exactly, as above, and
    nothing of it stays when the transaction rolls back (the table's DDL commits nothing)."""
    from gridcrawl.manager.recorder import _update_through_table
    check_batch_paths(mariadb_url, "through a table", monkeypatch)
    engine = open_database(mariadb_url)
    thread = models.thread
    with engine.connect() as conn:
        with conn.begin() as transaction:
            _update_through_table(conn, thread, thread.c.internal_thread_id, ("state",), [(1, {"state": 0}), (2, {"state": 1})])
            assert conn.execute(sa.select(thread.c.state).where(thread.c.internal_thread_id.in_([1, 2]))).scalars().all() == [0, 1]
            transaction.rollback()
        assert conn.execute(sa.select(thread.c.state).where(thread.c.internal_thread_id.in_([1, 2]))).scalars().all() == [4, 4]


def check_batch_paths(url: str, path: str, monkeypatch) -> None:
    """Write one batch of DEAD, failed and otherwise changed threads to a new manager database
    at ``url`` with ``path`` forced, and check every row and the UPDATE statements sent."""
    from gridcrawl.db import from_timestamp
    from gridcrawl.manager import events as ev
    from gridcrawl.manager import recorder
    from gridcrawl.manager.recorder import SAME_VALUES_CHUNK, SAME_VALUES_MIN, THROUGH_TABLE_MIN, BatchWriter

    engine = open_database(url)
    dialect = engine.dialect.name
    monkeypatch.setattr(recorder, "ROW_AT_A_TIME", frozenset() if path == "row by row" else {dialect})
    monkeypatch.setattr(recorder, "THROUGH_TABLE", {dialect} if path == "through a table" else frozenset())
    if path == "sqlite in process":  # SQLite's own path, as it is
        assert dialect == "sqlite"
        monkeypatch.setattr(recorder, "ROW_AT_A_TIME", frozenset())
    elif path == "row by row":
        monkeypatch.setattr(recorder, "SAME_VALUES_IN_PROCESS", frozenset())
    statements: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    init_schema(engine, models.manager_metadata, models.manager_meta)
    writer = BatchWriter(engine)
    t0 = 1.7e9 + 0.123457
    dead = range(1, SAME_VALUES_CHUNK + 2)  # collected threads, more than one statement takes
    failed = range(dead.stop, dead.stop + SAME_VALUES_MIN)  # the same values, one shared time
    alone = range(failed.stop, failed.stop + THROUGH_TABLE_MIN)  # values of their own
    n = alone.stop  # thread n is left as it was
    writer.write([ev.ExecutorRegistered("e1", "e1", "h", "u", True, 1, 0.0, 1, 0, "", "", (), t0),
                  ev.ApplicationCreated("a1", "x", "u", 1, t0)]
                 + [ev.ThreadSubmitted(i, "a1", i, f"http://a.test/{i}", "a.test", 0, 0, (), t0) for i in range(1, n + 1)]
                 + [ev.ThreadAssigned(i, i, "e1", 1, t0) for i in range(1, n + 1)])
    statements.clear()
    rows = writer.write([ev.ThreadDead(i) for i in dead] + [ev.ThreadFailed(i, t0 + 5.000001) for i in failed]
                        + [ev.ThreadFailed(i, t0 + i + 0.000001) for i in alone])
    assert rows == len(dead) + len(failed) + len(alone)
    updates = [sql for sql in statements if sql.startswith("UPDATE thread")]
    # row by row: one executemany per set of columns; same values together: DEAD in two
    # statements (more keys than one takes), the failed in one, the others one executemany;
    # SQLite in process: DEAD in two statements, the failed with the others one executemany;
    # through a table: one join per set of columns
    assert len(updates) == {"row by row": 2, "same values together": 4, "sqlite in process": 3,
                            "through a table": 2}[path]
    in_lists = [sql for sql in updates if " IN (" in sql]
    assert len(in_lists) == {"row by row": 0, "same values together": 3, "sqlite in process": 2,
                             "through a table": 0}[path]
    joins = [sql for sql in updates if sql.startswith("UPDATE thread, gc_rows_thread")]
    assert len(joins) == (2 if path == "through a table" else 0)
    with engine.connect() as conn:
        got = {r.internal_thread_id: r for r in conn.execute(
            sa.select(models.thread.c.internal_thread_id, models.thread.c.state, models.thread.c.failed,
                      models.thread.c.time_finished, models.thread.c.error_kind))}
    assert len(got) == n
    assert all(got[i].state == 4 and not got[i].failed and got[i].time_finished is None for i in dead)
    assert all(got[i].state == 3 and got[i].failed and got[i].error_kind == "poison"
               and got[i].time_finished == from_timestamp(t0 + 5.000001) for i in failed)
    assert all(got[i].state == 3 and got[i].failed and got[i].time_finished == from_timestamp(t0 + i + 0.000001)
               for i in alone)
    assert got[n].state == 1 and not got[n].failed and got[n].time_finished is None  # SCHEDULED, untouched


def test_a_database_user_without_temporary_tables_gets_its_records_row_by_row(mariadb_url, caplog):
    """A MariaDB user the DBA granted no ``CREATE TEMPORARY TABLES`` still gets every record
    written: the writer says once what is missing and sets the rows one by one."""
    from gridcrawl.db import from_timestamp
    from gridcrawl.manager import events as ev
    from gridcrawl.manager.recorder import THROUGH_TABLE_MIN, BatchWriter

    url = sa.engine.make_url(mariadb_url)
    user = f"gc_no_temp_{url.database[-8:]}"
    admin = open_database(mariadb_url)
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'"))
        conn.execute(sa.text(f"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER, CREATE VIEW "
                             f"ON `{url.database}`.* TO '{user}'@'%'"))
        conn.commit()
    try:
        engine = open_database(url.set(username=user, password="pw").render_as_string(hide_password=False))
        init_schema(engine, models.manager_metadata, models.manager_meta)
        writer = BatchWriter(engine)
        t0 = 1.7e9 + 0.25
        ids = range(1, THROUGH_TABLE_MIN + 1)
        writer.write([ev.ExecutorRegistered("e1", "e1", "h", "u", True, 1, 0.0, 1, 0, "", "", (), t0),
                      ev.ApplicationCreated("a1", "x", "u", 1, t0)]
                     + [ev.ThreadSubmitted(i, "a1", i, f"http://a.test/{i}", "a.test", 0, 0, (), t0) for i in ids])
        with caplog.at_level("WARNING", logger="gridcrawl.manager.recorder"):
            assert writer.write([ev.ThreadFailed(i, t0 + i) for i in ids]) == len(ids)
        assert not writer.through_table
        assert "GRANT CREATE TEMPORARY TABLES" in caplog.text
        with engine.connect() as conn:
            got = dict(conn.execute(sa.select(models.thread.c.internal_thread_id, models.thread.c.time_finished)).all())
        assert got == {i: from_timestamp(t0 + i) for i in ids}
        engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP USER IF EXISTS '{user}'@'%'"))
            conn.commit()
        admin.dispose()


@pytest.mark.parametrize("server", ["postgresql", "mariadb"])
def test_a_user_who_may_only_read_and_write_rows(request, server):
    """A database user without the right to create tables gets one line saying so and what to
    run (it was a 300-line traceback). Once `gridcrawl db init` has made the schema as its owner,
    that user runs the manager and the client: the views are not created again (CREATE OR
    REPLACE VIEW, on every start, refused it)."""
    import uuid
    url = sa.engine.make_url(request.getfixturevalue({"postgresql": "postgres_url", "mariadb": "mariadb_url"}[server]))
    role = f"gc_rows_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        if server == "postgresql":
            schema = conn.exec_driver_sql("SELECT current_schema()").scalar()
            conn.exec_driver_sql(f"CREATE ROLE {role} LOGIN")
            conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
            conn.exec_driver_sql(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT, INSERT, UPDATE, DELETE "
                                 f"ON TABLES TO {role}")
            conn.exec_driver_sql(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT USAGE ON SEQUENCES TO {role}")
        else:
            conn.exec_driver_sql(f"CREATE USER '{role}'@'%%' IDENTIFIED BY ''")
            conn.exec_driver_sql(f"CREATE USER '{role}'@'localhost' IDENTIFIED BY ''")
            for host in ("%%", "localhost"):
                conn.exec_driver_sql(f"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE TEMPORARY TABLES ON "
                                     f"`{url.database}`.* TO '{role}'@'{host}'")
    rows_only = url.set(username=role, password=None).render_as_string(hide_password=False)
    try:
        with pytest.raises(DatabaseUnavailable, match=r"^the database user may not create or change gridcrawl's "
                           r"tables \(.+\); run gridcrawl db init --db URL as a user who may"):
            init_schema(open_database(rows_only, check=False), models.manager_metadata, models.manager_meta)
        owner = url.render_as_string(hide_password=False)
        for metadata, meta in ((models.manager_metadata, models.manager_meta), (models.crawl_metadata, models.crawl_meta)):
            init_schema(open_database(owner), metadata, meta)
            engine = open_database(rows_only)
            init_schema(engine, metadata, meta)  # nothing to create: no error
            engine.dispose()
    finally:
        with admin.connect() as conn:
            if server == "postgresql":
                conn.exec_driver_sql(f"DROP OWNED BY {role}")
                conn.exec_driver_sql(f"DROP ROLE {role}")
            else:
                conn.exec_driver_sql(f"DROP USER '{role}'@'%%'")
                conn.exec_driver_sql(f"DROP USER '{role}'@'localhost'")
        admin.dispose()


def test_a_mariadb_database_not_made_for_utf8mb4_is_named_in_a_warning(caplog):
    """A MariaDB database created with another character set (latin1, a server's default) stored
    emoji and most scripts as '?', silently, even with ?charset=utf8mb4 in the URL."""
    import logging
    import uuid
    from dbfixtures import MARIADB_ADMIN, _admin_engine
    admin = _admin_engine("MariaDB", MARIADB_ADMIN)
    name = f"gridcrawl_test_latin1_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE `{name}` CHARACTER SET latin1")
    try:
        url = sa.engine.make_url(MARIADB_ADMIN).set(database=name).update_query_dict({"charset": "utf8mb4"})
        engine = open_database(url.render_as_string(hide_password=False))
        with caplog.at_level(logging.WARNING, logger="gridcrawl.db"):
            init_schema(engine, models.crawl_metadata, models.crawl_meta)
        engine.dispose()
        assert any("has the character set latin1" in r.getMessage() and "CHARACTER SET utf8mb4" in r.getMessage()
                   for r in caplog.records), caplog.text
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        admin.dispose()


@pytest.mark.parametrize("server", ["postgresql", "mariadb"])
def test_a_server_that_answers_and_refuses_is_not_called_out_of_reach(request, server):
    """A wrong password or user, or a database name the server does not have: the server was
    reached, and the one line says what it refused ("cannot reach database" sent users to check
    a server that was running)."""
    url = sa.engine.make_url(request.getfixturevalue({"postgresql": "postgres_url", "mariadb": "mariadb_url"}[server]))
    for changed, expected in ((url.set(username="gc_nobody", password="wrong"), "the database server refused the login of"),
                              (url.set(database="gc_no_such_database"), "no such database on its server:")):
        with pytest.raises(DatabaseUnavailable) as caught:
            open_database(changed.render_as_string(hide_password=False))
        assert str(caught.value).startswith(expected), str(caught.value)
        assert "wrong" not in str(caught.value)  # the password stays hidden
