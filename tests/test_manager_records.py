"""The manager's own tables through its failures (issue 22, items 4 and 8), with real processes:

* the manager stops while its PostgreSQL database is down: its unwritten records go to the
  journal and are replayed at the next start, so every thread keeps its attempt, executor and
  start time (before: "could not write the last 865 records", 98 threads without an attempt);
* ``kill -9`` of the manager at a moment chosen so that threads are held there — assigned to
  executors, and finished but not yet acknowledged (the client is stopped with SIGSTOP) — then
  a restart on the same database: every thread ends Dead once, and every attempt is accounted
  for, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import logging
import signal
import time

import pytest
import sqlalchemy as sa

from gridcrawl.manager.recorder import journal_passes
from gridcrawl.urls import canonical_url
from grid import Grid, wait_for
from sites import generate_site, reachable

pytestmark = pytest.mark.e2e


#: The executors and the client try the restarted manager every 0.25-0.5 s, not after the default
#: back-off (1 s, doubling): they wait for the manager, not for their back-off, to come back.
QUICK_RECONNECT = {"GRIDCRAWL_RECONNECT_INITIAL": "0.25", "GRIDCRAWL_RECONNECT_MAX": "0.5"}


def scalar(grid: Grid, sql: str) -> int:
    try:
        return grid.query("manager", sql)[0][0]
    except Exception:  # tables not made yet, or the database is down
        return -1


def check_manager_tables(grid: Grid, expected: set[str]) -> dict:
    """Every visited URL has exactly one thread, Dead, with an executor and a start time; every
    thread has a finished attempt and no attempt is left running; the crawl stored each page once."""
    urls = [row[0] for row in grid.query("crawl", "SELECT url FROM document")]
    visited = grid.query("crawl", "SELECT COUNT(*) FROM visited_url")[0][0]
    figures = {
        "pages": len(expected), "stored": len(urls), "duplicates": len(urls) - len(set(urls)),
        "threads": scalar(grid, "SELECT COUNT(*) FROM thread"),
        "not_dead": scalar(grid, "SELECT COUNT(*) FROM thread WHERE state <> 4"),
        "without_attempt": scalar(grid, "SELECT COUNT(*) FROM thread t WHERE NOT EXISTS "
                                        "(SELECT 1 FROM attempt a WHERE a.internal_thread_id = t.internal_thread_id)"),
        "without_finished_attempt": scalar(grid, "SELECT COUNT(*) FROM thread t WHERE NOT EXISTS (SELECT 1 FROM "
                                                 "attempt a WHERE a.internal_thread_id = t.internal_thread_id "
                                                 "AND a.outcome = 'finished')"),
        "finished_without_executor_or_start": scalar(grid, "SELECT COUNT(*) FROM thread WHERE state = 4 AND "
                                                           "(executor_id IS NULL OR time_started IS NULL)"),
        "attempts_running": scalar(grid, "SELECT COUNT(*) FROM attempt WHERE outcome = 'running'"),
    }
    assert figures["duplicates"] == 0 and set(urls) == expected
    assert figures["threads"] == visited  # one thread per URL: none twice
    assert figures["not_dead"] == figures["without_attempt"] == figures["without_finished_attempt"] == 0
    assert figures["finished_without_executor_or_start"] == figures["attempts_running"] == 0
    return figures


def _show(label: str, figures: dict) -> None:
    print(f"\n[{label}] " + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                                      for k, v in figures.items()))


def test_records_unwritten_while_postgresql_is_down_are_journaled_and_replayed(tmp_path, site_server, postgres_url):
    site = generate_site(150, links_per_page=5, seed=47)
    server = site_server(site, latency=0.2)
    expected = {canonical_url(server.url(path)) for path in reachable(site)}
    url = sa.engine.make_url(postgres_url)
    admin = sa.create_engine(url.set(database="postgres", query={}), isolation_level="AUTOCOMMIT",
                             poolclass=sa.pool.NullPool)
    database = url.database
    journal = tmp_path / "manager.journal"
    grid = Grid(tmp_path, manager_db=postgres_url)
    try:
        # records written every 0.2 s, so that a failed write is tried again every 1 s, not 2.5 s:
        # the stop below waits for the retry's pause to end
        grid.start_manager("--journal", str(journal), env={"GRIDCRAWL_RECORD_INTERVAL": "0.2"})
        grid.start_executor("ex1", "--threads", "4", env=QUICK_RECONNECT)
        grid.start_executor("ex2", "--threads", "2", env=QUICK_RECONNECT)
        client = grid.start_client(server.url("/"), env=QUICK_RECONNECT)
        wait_for(lambda: scalar(grid, "SELECT COUNT(*) FROM thread WHERE state = 4") >= 20, 60, 0.05, "20 threads dead")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
            conn.exec_driver_sql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 f"WHERE datname = '{database}' AND pid <> pg_backend_pid()")
        # the grid goes on; the manager's records pile up, unwritten
        wait_for(lambda: "writing records failed" in grid.log("manager.log"), 30, 0.05, "a write of records failing")
        grid.manager.send_signal(signal.SIGTERM)
        assert grid.manager.wait(timeout=30) is not None
        journaled = sum(len(events) for path in (journal.with_name("manager.journal.flushing"), journal)
                        for events in journal_passes(path))
        with admin.connect() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        assert client.poll() is None, "the crawl ended before the database went down"
        grid.start_manager("--journal", str(journal))
        wait_for(lambda: "replayed" in grid.log("manager.log"), 30, 0.05, "the journal replayed")
        server.latency = 0.02  # the disruption is over: the rest of the crawl need not be slow
        assert client.wait(timeout=120) == 0, grid.log("client.log")[-3000:]
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        admin.dispose()
        grid.stop()
    log = grid.log("manager.log")
    figures = check_manager_tables(grid, expected)
    figures.update(journaled=journaled, journal_left=journal.stat().st_size if journal.exists() else 0)
    _show("manager stopped while PostgreSQL was down", figures)
    assert journaled > 0 and f"replayed {journaled} records" in log and figures["journal_left"] == 0


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_kill_9_manager_while_it_holds_assigned_and_unacknowledged_threads(tmp_path, site_server, backend, request):
    site = generate_site(150, links_per_page=5, seed=53)
    server = site_server(site, latency=0.3)
    expected = {canonical_url(server.url(path)) for path in reachable(site)}
    manager_db = None if backend == "sqlite" else request.getfixturevalue("postgres_url")
    grid = Grid(tmp_path, manager_db=manager_db)
    client = None
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "4", env=QUICK_RECONNECT)
        grid.start_executor("ex2", "--threads", "4", env=QUICK_RECONNECT)
        client = grid.start_client(server.url("/"), env=QUICK_RECONNECT)
        wait_for(lambda: scalar(grid, "SELECT COUNT(*) FROM thread WHERE state = 4") >= 10, 60, 0.05, "10 threads dead")
        client.send_signal(signal.SIGSTOP)  # results now wait at the manager, unacknowledged
        wait_for(lambda: scalar(grid, "SELECT COUNT(*) FROM thread WHERE state = 3") >= 5
                 and scalar(grid, "SELECT COUNT(*) FROM thread WHERE state IN (1, 2)") >= 1,
                 30, 0.02, "threads held at the manager: finished unacknowledged, and assigned")
        held_finished = scalar(grid, "SELECT COUNT(*) FROM thread WHERE state = 3")
        held_assigned = scalar(grid, "SELECT COUNT(*) FROM thread WHERE state IN (1, 2)")
        grid.manager.kill()
        grid.manager.wait()
        killed = time.monotonic()
        client.send_signal(signal.SIGCONT)
        grid.start_manager()
        wait_for(lambda: grid.log("manager.log").count("registered:") >= 4, 30, 0.05, "executors registered again")
        rejoined = time.monotonic() - killed
        server.latency = 0.02  # the disruption is over: the rest of the crawl need not be slow
        assert client.wait(timeout=120) == 0, grid.log("client.log")[-3000:]
        finished = time.monotonic() - killed
    finally:
        if client is not None and client.poll() is None:
            client.send_signal(signal.SIGCONT)
        grid.stop()
    figures = check_manager_tables(grid, expected)
    # the attempts running when it was killed (those its records had reached) are lost, with the
    # time the new manager knew it
    assert scalar(grid, "SELECT COUNT(*) FROM attempt WHERE outcome = 'lost' AND time_finished IS NULL") == 0
    figures = dict(held_finished_unacked=held_finished, held_assigned=held_assigned, executors_back_s=rejoined,
                   finish_after_kill_s=finished, **figures)
    _show(f"kill -9 manager holding threads, {backend}", figures)


def test_the_journal_survives_a_dead_recorder_and_replays_idempotently(tmp_path):
    """No sockets: records written ahead to the journal by a recorder that never flushed (its
    manager died) are replayed by the next one; replaying again (a crash between the commit and
    the deletion of the segment) changes nothing, and updates win over the insert-if-absent."""
    from gridcrawl import models
    from gridcrawl.db import init_schema, open_database
    from gridcrawl.manager import events as ev
    from gridcrawl.manager.recorder import Recorder, journal_passes

    engine = open_database(f"sqlite:///{tmp_path / 'manager.db'}")
    init_schema(engine, models.manager_metadata, models.manager_meta)
    journal = tmp_path / "manager.journal"
    dead = Recorder(engine, 60.0, journal)
    dead._open_journal()  # what start() does, without the flusher thread: it never writes
    dead.set_journal_epoch(5)  # it held lease epoch 5
    dead.add(ev.ExecutorRegistered("e1", "e1", "h", "u", True, 1, 0.0, 1, 0, "", "", (), 1.0))
    dead.add(ev.ApplicationCreated("a1", "x", "u", 1, 1.0))
    dead.add(ev.ThreadSubmitted(1, "a1", 1, "http://a.test/", "a.test", 0, 0, (), 1.0))
    dead.add(ev.ThreadAssigned(1, 2 ** 62, "e1", 1, 2.0))
    dead.sync_journal()  # the loop does this before it sends the messages
    lines = journal.read_bytes()
    dead.add(ev.ThreadStarted(1, 2 ** 62, 2.5))
    dead.add(ev.ThreadFinished(1, 2 ** 62, 2.5, 3.0, None))
    dead.add(ev.ThreadDead(1))
    dead.sync_journal()
    assert [len(events) for events in journal_passes(journal)] == [4, 3] and journal.read_bytes().startswith(lines)

    everything = journal.read_bytes()
    journal.write_bytes(lines)  # as if the first four were committed before the manager died ...
    assert Recorder(engine, 60.0, journal).replay() == 4 and not journal.exists()
    journal.write_bytes(everything)  # ... and the whole journal is replayed: inserts ignored, updates applied
    assert Recorder(engine, 60.0, journal).replay() == 7
    journal.write_bytes(everything)  # a third time: nothing changes
    assert Recorder(engine, 60.0, journal).replay() == 7
    with engine.connect() as conn:
        thread = conn.execute(models.thread.select()).mappings().one()
        attempt = conn.execute(models.attempt.select()).mappings().one()
    assert thread["state"] == 4 and thread["executor_id"] == "e1" and thread["time_started"] is not None
    assert attempt["outcome"] == "finished" and attempt["attempt_id"] == 2 ** 62
    assert attempt["epoch"] == 5  # the epoch of the manager that assigned it (replayed rows had none)


def test_a_record_the_database_refuses_is_left_out_not_retried_for_ever(postgres_url, caplog):
    """No sockets: a batch holding a record that breaks a foreign key even when written
    insert-if-absent (an attempt of a thread that has no row: a cancelled application's thread
    submitted again under its old id did that) is written event by event, the refused one left
    out with one ERROR. Before, the writer retried the batch for ever, writing nothing more, and
    the journal's replay raised at every start of the manager."""
    from gridcrawl import models
    from gridcrawl.db import init_schema, open_database
    from gridcrawl.manager import events as ev
    from gridcrawl.manager.recorder import BatchWriter

    engine = open_database(postgres_url)
    init_schema(engine, models.manager_metadata, models.manager_meta)
    batch = [ev.ExecutorRegistered("e1", "e1", "h", "u", True, 1, 0.0, 1, 0, "", "", (), 1.0),
             ev.ApplicationCreated("a1", "x", "u", 1, 1.0),
             ev.ThreadSubmitted(1, "a1", 1, "http://a.test/", "a.test", 0, 0, (), 1.0),
             ev.ThreadAssigned(1, 7, "e1", 1, 2.0),
             ev.ThreadAssigned(99, 8, "e1", 1, 2.0),  # no thread 99: the attempt's foreign key breaks
             ev.ThreadSubmitted(2, "a1", 2, "http://a.test/2", "a.test", 0, 0, (), 3.0)]
    with caplog.at_level(logging.ERROR, logger="gridcrawl.manager.recorder"):
        BatchWriter(engine).write(batch)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT internal_thread_id FROM thread ORDER BY 1")).scalars().all() == [1, 2]
        assert conn.execute(sa.text("SELECT attempt_id FROM attempt")).scalars().all() == [7]
    (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert error.startswith("1 of 6 records refused by the database, left out") and "ThreadAssigned" in error
    engine.dispose()


def test_a_journal_deleted_under_the_manager_is_started_afresh_and_its_records_written(tmp_path, caplog):
    """No sockets: ``rm manager.journal`` under a running recorder (an operator, another program)
    once left its file closed, and the manager's loop died on its next write ("write to closed
    file"). Now the flush warns, writes the batch it holds, and a new journal takes what comes."""
    from gridcrawl import models
    from gridcrawl.db import init_schema, open_database
    from gridcrawl.manager import events as ev
    from gridcrawl.manager.recorder import Recorder, journal_passes

    engine = open_database(f"sqlite:///{tmp_path / 'manager.db'}")
    init_schema(engine, models.manager_metadata, models.manager_meta)
    journal = tmp_path / "manager.journal"
    recorder = Recorder(engine, 60.0, journal)
    recorder._open_journal()  # what start() does, without the flusher thread: flush() is called here
    recorder.add(ev.ApplicationCreated("a1", "x", "u", 1, 1.0))
    recorder.sync_journal()
    journal.unlink()
    with caplog.at_level("WARNING", logger="gridcrawl.manager.recorder"):
        assert recorder.flush() == 1
    assert "vanished" in caplog.text and journal.exists()
    recorder.add(ev.ApplicationCreated("a2", "y", "u", 1, 2.0))
    recorder.sync_journal()  # the loop's next write: into the new journal
    assert [len(events) for events in journal_passes(journal)] == [1]
    assert recorder.flush() == 1
    with engine.connect() as conn:
        assert sorted(conn.execute(sa.select(models.application.c.application_id)).scalars()) == ["a1", "a2"]
    recorder.close()


def test_times_written_as_sqlite_text_read_back_as_the_datetimes_they_were(tmp_path):
    """The recorder hands SQLite its times as text itself (sqlite_time, not sqlite3's adapter):
    SQLAlchemy reads back, to the microsecond, the datetime each POSIX time is, on the fast
    path (executemany), the careful one (insert-if-absent) and the upsert alike."""
    import random

    from gridcrawl import models
    from gridcrawl.db import from_timestamp, init_schema, open_database
    from gridcrawl.manager import events as ev
    from gridcrawl.manager.recorder import BatchWriter, sqlite_time

    rng = random.Random(7)
    for x in [rng.uniform(0, 4e9) for _ in range(20_000)] + [1.0, 1.9999995, 1.5e9 + 0.0000005, 2 ** 31 + 0.25]:
        assert sqlite_time(x) == from_timestamp(x).isoformat(" ", timespec="microseconds"), x
    engine = open_database(f"sqlite:///{tmp_path / 'manager.db'}")
    init_schema(engine, models.manager_metadata, models.manager_meta)
    times = [1.7e9 + 0.123456, 1.7e9 + 1.9999996, 1.7e9 + 2.5, 1.7e9 + 3.000001]
    writer = BatchWriter(engine)
    for careful in (False, True):
        internal = 2 if careful else 1
        writer.write([ev.ExecutorRegistered("e1", "e1", "h", "u", True, 1, 0.0, 1, 0, "", "", (), times[0]),
                         ev.ApplicationCreated("a1", "x", "u", 1, times[0]),
                         ev.ThreadSubmitted(internal, "a1", internal, "http://a.test/", "a.test", 0, 0, (), times[0]),
                         ev.ThreadAssigned(internal, internal, "e1", 1, times[1])], careful=careful)
        writer.write([ev.ThreadFinished(internal, internal, times[2], times[3], None)], careful=careful)
    with engine.connect() as conn:
        threads = conn.execute(models.thread.select().order_by(models.thread.c.internal_thread_id)).mappings().all()
        attempts = conn.execute(models.attempt.select().order_by(models.attempt.c.attempt_id)).mappings().all()
        executor = conn.execute(models.executor.select()).mappings().one()
    want = [from_timestamp(t) for t in times]
    assert executor["ping_time"] == want[0]
    for thread, attempt in zip(threads, attempts, strict=True):
        assert (thread["time_submitted"], thread["time_started"], thread["time_finished"]) == (want[0], want[2], want[3])
        assert (attempt["time_assigned"], attempt["time_started"], attempt["time_finished"]) == (want[1], want[2], want[3])


def test_managers_of_two_server_databases_get_journals_of_their_own(tmp_path):
    """Without --journal and --log-file, managers of two server databases started in one folder
    shared ./gridcrawl-manager.journal: one database's records went into the other, or were
    dropped as another manager's. Each database URL now names its own (the password aside)."""
    import sqlalchemy as sa
    from gridcrawl.manager.cli import default_journal
    engine = lambda url: sa.create_engine(url)  # noqa: E731 - no connection is made
    pg = default_journal(None, engine("postgresql+psycopg://crawler:one@db.example/records"))
    assert pg.name.startswith("gridcrawl-manager-") and pg.suffix == ".journal"
    assert pg == default_journal(None, engine("postgresql+psycopg://crawler:two@db.example/records"))
    assert pg != default_journal(None, engine("mysql+pymysql://crawler:one@db.example/records"))
    assert pg != default_journal(None, engine("postgresql+psycopg://crawler:one@db.example/other"))
    assert default_journal(None, engine(f"sqlite:///{tmp_path}/m.db")) == tmp_path / "m.journal"
    assert default_journal(str(tmp_path / "m.log"), engine("postgresql+psycopg://db.example/r")) == tmp_path / "m.journal"


def test_an_earlier_releases_journal_in_the_folder_is_named_at_start(tmp_path, postgres_url):
    """A manager of a server database upgraded from a release that journaled to
    ./gridcrawl-manager.journal: records left in that file would not be replayed by the new
    default name, so the start says where they are and how to write them."""
    import socket
    import subprocess
    import sys
    (tmp_path / "gridcrawl-manager.journal").write_bytes(b"\x91\x00")  # not empty
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager = subprocess.Popen([sys.executable, "-m", "gridcrawl.manager", "--bind", f"tcp://127.0.0.1:{port}",
                                "--db", postgres_url], cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in manager.stderr:
            lines.append(line)
            if "WARNING" in line or "listening" in line or len(lines) > 40:
                break
    finally:
        manager.terminate()
        manager.wait(30)
    said = "".join(lines)
    assert "gridcrawl-manager.journal holds records an earlier gridcrawl's manager journaled" in said, said
    assert "start it once with --journal gridcrawl-manager.journal" in said


def test_a_failing_database_is_one_error_then_one_a_minute_and_a_line_when_it_works_again(tmp_path, caplog):
    """The recorder retried a database that did not answer every 2.5 s and logged an ERROR each
    time (28 lines in a 69 s outage of an idle grid). Now one ERROR, then one a minute, and one
    WARNING when the records are written again."""
    import logging
    import time
    from gridcrawl import models
    from gridcrawl.db import init_schema, open_database
    from gridcrawl.manager import events as ev
    from gridcrawl.manager.recorder import Recorder

    engine = open_database(f"sqlite:///{tmp_path / 'manager.db'}")  # no tables yet: every write fails
    caplog.set_level(logging.WARNING, logger="gridcrawl.manager")
    recorder = Recorder(engine, 0.01).start()
    try:
        recorder.add(ev.ApplicationCreated("a1", "x", "u", 1, 1.0))
        deadline = time.monotonic() + 30
        while recorder.failures < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert recorder.failures >= 5
        errors = [r for r in caplog.records if "writing records failed" in r.getMessage()]
        assert len(errors) == 1 and errors[0].levelname == "ERROR"
        init_schema(engine, models.manager_metadata, models.manager_meta)  # the database answers again
        while "writing records works again" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "writing records works again after" in caplog.text
    finally:
        recorder.close()
    with engine.connect() as conn:
        assert conn.execute(models.application.select()).mappings().one()["application_id"] == "a1"


def test_a_manager_whose_new_database_fills_the_disk_stops_with_one_line(tmp_path, small_disk):
    """A manager whose new SQLite database is on a disk with too little room for its tables (a
    newcomer's ``gridcrawl run`` on a full disk) printed SQLAlchemy's traceback and exited 1;
    it says so in one line, naming the database, and exits 2."""
    from dbfixtures import fill_disk
    fill_disk(small_disk, 128 * 1024)
    grid = Grid(tmp_path, manager_db=f"sqlite:///{small_disk / 'manager.db'}")
    try:
        status = grid.start_manager().wait(timeout=60)
    finally:
        grid.stop()
    log = grid.log("manager.log")
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert status == 2, log
    assert errors == [f"error: cannot create gridcrawl's tables in sqlite:///{small_disk / 'manager.db'}: "
                      "database or disk is full"], log
    assert "Traceback" not in log


def test_the_report_of_a_killed_managers_database_calls_no_executor_up(tmp_path, site_server):
    """``kill -9`` of a manager leaves its executors' rows saying connected: `gridcrawl report`
    printed "manager ...: not running" over a table of executors "up: yes" (and blamed them for
    a thread that waited: "the connected executors take no work now"). Now they are "no", with a
    line saying how many the last records call connected, and a waiting thread waits for a manager."""
    import datetime
    import subprocess
    import sys
    server = site_server(generate_site(3, links_per_page=1, seed=3))
    later = datetime.datetime.now() + datetime.timedelta(hours=2)  # an idle-only desk outside its hours
    hours = f"{later:%H:00}-{later + datetime.timedelta(hours=1):%H:00}"
    grid = Grid(tmp_path)
    try:
        manager = grid.start_manager()
        grid.start_executor("desk1", "--threads", "2", "--idle-only", "--hours", hours)
        grid.start_client(server.url("/"), "--no-sitemaps")
        wait_for(lambda: scalar(grid, "SELECT COUNT(*) FROM executor WHERE is_connected") == 1
                 and scalar(grid, "SELECT COUNT(*) FROM thread WHERE state = 0") == 1, 60,
                 message="desk1 connected and the seed's thread waiting, recorded")
        manager.kill()
        manager.wait(timeout=30)

        def report() -> str:
            return subprocess.run([sys.executable, "-m", "gridcrawl", "report", "--db", grid.manager_db],
                                  capture_output=True, text=True, timeout=60).stdout
        said = {}

        def expired() -> bool:
            said["text"] = report()
            return "not running (lease expired at" in said["text"]
        wait_for(expired, 30, message="the lease expired")
        text = said["text"]
        row = next(line for line in text.splitlines() if "desk1" in line)
        assert row.split("\u2502")[2].strip() == "no", text
        text = " ".join(text.split())
        assert ("up: no, as no manager is running on this database; the manager's last records call 1 executor "
                "connected") in text, text
        assert "1 thread waits: no manager is running on this database (above)" in text, text
    finally:
        grid.stop()
