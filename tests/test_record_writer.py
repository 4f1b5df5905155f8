"""The manager's record writer process (:class:`gridcrawl.manager.recorder.WriterProcess`): the
records' SQL writes forked out of the manager, so its server loop has the interpreter to itself.

Real SQLite files, real forked processes; the end-to-end test runs the real manager program.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import msgpack
import psutil
import pytest
import sqlalchemy as sa

from gridcrawl import models
from gridcrawl.db import init_schema, open_database
from gridcrawl.manager import events as ev
from gridcrawl.manager.lease import Lease, LeaseLost, holder_name
from gridcrawl.manager.recorder import Recorder, RecordWriteError, WriterGone, WriterProcess, journal_passes
from gridcrawl.urls import canonical_url
from grid import Grid, wait_for
from sites import generate_site, reachable
from test_manager_records import check_manager_tables, scalar

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the record writer process is Linux-only")


def _engine(tmp_path, name: str = "manager.db", schema: bool = True):
    engine = open_database(f"sqlite:///{tmp_path / name}")
    if schema:
        init_schema(engine, models.manager_metadata, models.manager_meta)
    return engine


def _thread_events(first: int, count: int, now: float = 1.7e9) -> list:
    """An executor, an application and ``count`` threads from submission to Dead."""
    events = [ev.ExecutorRegistered("e1", "e1", "h", "u", True, 1, 0.0, 1, 0, "", "", (), now),
              ev.ApplicationCreated("a1", "x", "u", 1, now)]
    for i in range(first, first + count):
        events += [ev.ThreadSubmitted(i, "a1", i, f"http://a.test/{i}", "a.test", 0, 0, (), now),
                   ev.ThreadAssigned(i, 1000 + i, "e1", 1, now + 1),
                   ev.ThreadFinished(i, 1000 + i, now + 1.5, now + 2, None),
                   ev.ThreadDead(i)]
    return events


def _states(engine) -> dict[int, int]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(models.thread.c.internal_thread_id, models.thread.c.state)).all())


def test_the_writer_process_writes_events_and_journal_segments_in_another_process(tmp_path):
    engine = _engine(tmp_path)
    writer = WriterProcess(engine)
    try:
        child = psutil.Process(writer.pid)
        assert writer.pid != os.getpid() and child.ppid() == os.getpid()
        rows = writer.write(_thread_events(1, 3), None, careful=False, lease=None, epoch=None)
        assert child.name() == "gc-recorder"  # what ps and top show
        assert rows == 2 + 3 * 2  # executor, application, a thread and an attempt row each (merged)
        segment = tmp_path / "manager.journal.flushing"  # as the journal's flusher leaves it: passes
        events = _thread_events(4, 2)
        segment.write_bytes(msgpack.packb([ev.to_list(e) for e in events[:5]], use_bin_type=True)
                            + msgpack.packb([ev.to_list(e) for e in events[5:]], use_bin_type=True))
        # the executor and application again (upserts), two new threads with their attempts
        assert writer.write(None, segment, careful=False, lease=None, epoch=7) == rows - 2
        # a replay, careful: each row inserted if absent, then its changes as updates (4 more)
        assert writer.write(None, segment, careful=True, lease=None, epoch=7) == rows - 2 + 4
    finally:
        writer.close()
    assert writer.exit_status == 0 and not psutil.pid_exists(writer.pid)
    assert _states(engine) == {i: 4 for i in range(1, 6)}
    with engine.connect() as conn:
        epochs = dict(conn.execute(sa.select(models.attempt.c.internal_thread_id, models.attempt.c.epoch)).all())
    assert epochs == {1: None, 2: None, 3: None, 4: 7, 5: 7}


def test_the_writer_stops_in_a_manager_with_more_than_1024_descriptors_open(tmp_path):
    """A manager with a thousand executors holds more than 1,024 descriptors (one TCP connection
    each): a writer process started then (a standby taking over a big grid) is waited for, at the
    manager's stop, on a descriptor numbered above 1,023, which ``select()`` refuses (it raised
    ``ValueError``)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if max(soft, hard) != resource.RLIM_INFINITY and max(soft, hard) < 1200:
        pytest.skip(f"this process may open only {max(soft, hard)} descriptors")
    if soft != resource.RLIM_INFINITY and soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    engine = _engine(tmp_path)
    held = []
    try:
        while not held or held[-1] < 1100:  # the connections of a big grid
            held.append(os.open(os.devnull, os.O_RDONLY))
        writer = WriterProcess(engine)
        assert writer.write(_thread_events(1, 1), None, careful=False, lease=None, epoch=None) == 2 + 2
        os.kill(writer.pid, signal.SIGSTOP)  # still there when the stop begins to wait for it
        threading.Timer(0.3, os.kill, (writer.pid, signal.SIGCONT)).start()
        writer.close()
    finally:
        for fd in held:
            os.close(fd)
        if soft != resource.RLIM_INFINITY and soft < 1200:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert writer.exit_status == 0 and not psutil.pid_exists(writer.pid)
    assert _states(engine) == {1: 4}


def test_a_batch_fenced_by_a_lost_lease_writes_nothing_and_a_database_error_comes_back(tmp_path):
    engine = _engine(tmp_path)
    lease = Lease(engine, holder_name("tcp://127.0.0.1:1"), 15.0)
    lease.acquire()
    writer = WriterProcess(engine)
    try:
        assert writer.write(_thread_events(1, 1), None, False, lease, lease.epoch) == 4
        with engine.begin() as conn:  # another manager took the lease over: the epoch moved on
            conn.execute(models.manager_lease.update().values(epoch=lease.epoch + 1))
        with pytest.raises(LeaseLost, match="taken over"):
            writer.write(_thread_events(2, 1), None, False, lease, lease.epoch)
        assert _states(engine) == {1: 4}  # nothing of the fenced batch landed

        with engine.begin() as conn:  # a database the writes cannot go to: its table is gone
            conn.exec_driver_sql("DROP TABLE attempt")
        with pytest.raises(RecordWriteError, match="no such table: attempt"):
            writer.write(_thread_events(3, 1), None, False, None, None)
        assert _states(engine) == {1: 4}  # rolled back: no thread row without its attempt
        models.attempt.create(engine)  # the table is back
        assert writer.write(_thread_events(3, 1), None, False, None, None) == 4  # the same process goes on
    finally:
        writer.close()
    assert _states(engine) == {1: 4, 3: 4}


def test_a_killed_writer_is_reported_and_the_recorder_writes_its_records_itself(tmp_path, caplog):
    engine = _engine(tmp_path)
    journal = tmp_path / "manager.journal"
    writer = WriterProcess(engine)
    recorder = Recorder(engine, 60.0, journal, writer)
    recorder._open_journal()  # start() without the flusher thread: flush() is called here
    recorder.add_all(_thread_events(1, 2))
    assert recorder.flush() == 6 and recorder.writer is writer
    os.kill(writer.pid, signal.SIGKILL)
    recorder.add_all(_thread_events(3, 2)[2:])
    with caplog.at_level(logging.ERROR, logger="gridcrawl.manager.recorder"):
        assert recorder.flush() == 4
    assert recorder.writer is None
    assert f"the record writer process {writer.pid} ended (killed by signal 9)" in caplog.text
    assert "writes its records itself" in caplog.text
    recorder.close()
    writer.close()  # already gone: returns at once
    assert _states(engine) == {i: 4 for i in range(1, 5)} and not journal.exists()
    with pytest.raises(WriterGone):
        writer.write(_thread_events(5, 1), None, False, None, None)


def test_the_writer_ends_when_the_manager_dies(tmp_path):
    """kill -9 of the process that made the writer: the writer sees its pipe close and ends."""
    script = textwrap.dedent(f"""
        import time
        from gridcrawl.db import open_database
        from gridcrawl.manager.recorder import WriterProcess
        writer = WriterProcess(open_database("sqlite:///{tmp_path / 'manager.db'}"))
        print(writer.pid, flush=True)
        time.sleep(60)
    """)
    manager = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        writer = psutil.Process(int(manager.stdout.readline()))
        assert writer.is_running() and writer.ppid() == manager.pid
        manager.kill()
        manager.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if not writer.is_running() or writer.status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.02)
        assert not writer.is_running() or writer.status() == psutil.STATUS_ZOMBIE
    finally:
        if manager.poll() is None:
            manager.kill()
            manager.wait()
        manager.stdout.close()


def test_an_in_memory_database_gets_no_writer_process(tmp_path):
    assert not WriterProcess.possible(sa.create_engine("sqlite://"))  # (open_database refuses one)
    assert WriterProcess.possible(open_database(f"sqlite:///{tmp_path / 'x.db'}")) == sys.platform.startswith("linux")


@pytest.mark.e2e
def test_kill_9_of_the_record_writer_mid_crawl_loses_no_record(tmp_path, site_server):
    """The manager program runs its writer process; killed mid-crawl, the manager says so once and
    writes the records itself: every thread ends Dead in SQL with its executor and attempt."""
    site = generate_site(120, links_per_page=5, seed=61)
    server = site_server(site, latency=0.05)
    expected = {canonical_url(server.url(path)) for path in reachable(site)}
    grid = Grid(tmp_path)

    def writers() -> list[psutil.Process]:
        return [p for p in psutil.Process(grid.manager.pid).children() if p.name() == "gc-recorder"]

    try:
        grid.start_manager()
        wait_for(lambda: len(writers()) == 1, 30, 0.05, "the manager's record writer process")
        grid.start_executor("ex1", "--threads", "4")
        client = grid.start_client(server.url("/"))
        wait_for(lambda: scalar(grid, "SELECT COUNT(*) FROM thread WHERE state = 4") >= 10, 60, 0.05, "10 threads dead")
        killed = writers()[0]
        killed.kill()
        assert client.wait(timeout=120) == 0, grid.log("client.log")[-3000:]
        assert writers() == [] and grid.manager.poll() is None
    finally:
        grid.stop()
    figures = check_manager_tables(grid, expected)
    log = grid.log("manager.log")
    assert f"the record writer process {killed.pid} ended (killed by signal 9)" in log, log[-3000:]
    assert log.count("the record writer process") == 1
    print(f"\n[record writer killed mid-crawl] {figures}")


def test_with_a_writer_process_a_full_batch_is_written_before_its_interval(tmp_path):
    """EAGER_BATCH waiting events wake the flusher at once; fewer wait for the interval (60 s
    here), and without a writer process so does a full batch."""
    from gridcrawl.manager.recorder import EAGER_BATCH

    per_thread = 4
    threads = EAGER_BATCH // per_thread + 1
    for with_writer in (True, False):
        engine = _engine(tmp_path, f"manager-{with_writer}.db")
        writer = WriterProcess(engine) if with_writer else None
        recorder = Recorder(engine, 60.0, tmp_path / f"manager-{with_writer}.journal", writer).start()
        try:
            events = _thread_events(1, threads)
            recorder.add_all(events[:2])  # the executor and the application: written at once
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and recorder.flushed_rows < 2:
                time.sleep(0.02)
            recorder.add_all(events[2:102])  # well below a batch: waits for the interval
            time.sleep(1.0)
            assert recorder.flushed_rows == 2
            recorder.add_all(events[102:])
            deadline = time.monotonic() + (20 if with_writer else 1.0)
            while time.monotonic() < deadline and recorder.flushed_rows < 2 + 2 * threads:
                time.sleep(0.02)
            assert (recorder.flushed_rows == 2 + 2 * threads) == with_writer, recorder.flushed_rows
        finally:
            recorder.close()
            if writer is not None:
                writer.close()
        assert len(_states(engine)) == threads  # the rest at close


def test_a_hung_writer_does_not_hang_the_managers_stop_and_its_records_wait_in_the_journal(tmp_path, caplog):
    """The writer stopped (SIGSTOP) in the middle of a flush: close() gives up after its timeout
    with one line, the records stay in the journal, and the next manager replays them all."""
    engine = _engine(tmp_path)
    journal = tmp_path / "manager.journal"
    writer = WriterProcess(engine)
    recorder = Recorder(engine, 60.0, journal, writer).start()
    events = _thread_events(1, 3)
    try:
        recorder.add_all(events[:2])  # the executor and the application: flushed at once
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and recorder.flushed_rows < 2:
            time.sleep(0.02)
        os.kill(writer.pid, signal.SIGSTOP)
        recorder.add_all(events[2:6])
        recorder._wake.set()  # a flush now: it waits on the stopped writer
        time.sleep(0.3)
        recorder.add_all(events[6:])
        started = time.monotonic()
        with caplog.at_level(logging.ERROR, logger="gridcrawl.manager.recorder"):
            recorder.close(timeout=1.0)
        assert time.monotonic() - started < 5
        assert f"waits in the journal {journal} for the next start" in caplog.text
        assert _states(engine) == {}  # nothing of the threads written
        segment = tmp_path / "manager.journal.flushing"  # the flush under way, and what came after
        waiting = [sum(map(len, journal_passes(path))) for path in (segment, journal)]
        assert waiting == [4, len(events) - 6]
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.close()
    recorder._thread.join(10)  # the stuck flush finds its writer gone and writes the segment itself
    assert not recorder._thread.is_alive() and not segment.exists()
    assert Recorder(_engine(tmp_path), 60.0, journal).replay() == waiting[1]  # the next manager: the rest
    assert _states(engine) == {1: 4, 2: 4, 3: 4}
