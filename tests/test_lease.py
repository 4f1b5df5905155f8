"""The manager's lease on its database (issue 22, item 5): the pure decision, the conditional
UPDATE on SQLite and PostgreSQL, and real manager processes — a second manager on the same
database refuses to start with one line naming the holder; a manager killed with ``kill -9`` is
taken over by the next one at once (its holder process is gone)."""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
import threading
import time

import psutil
import pytest
import sqlalchemy as sa

from gridcrawl.db import init_schema, open_database
from gridcrawl import models
from gridcrawl.report import active_manager
from gridcrawl.manager.lease import (Lease, LeaseHeld, LeaseLost, LeaseRow, decide, describe_holder, holder_name,
                                     local_holder_alive, process_space)
from grid import Grid, wait_for


def test_decide_takes_a_free_or_expired_lease_renews_its_own_and_refuses_a_live_one():
    assert decide(None, "me", 100.0).action == "take" and decide(None, "me", 100.0).epoch == 1
    live = LeaseRow("other", 4, 110.0)
    refused = decide(live, "me", 100.0)
    assert refused.action == "refuse" and "other" in refused.reason and "epoch 4" in refused.reason
    assert decide(live, "me", 110.0) == decide(LeaseRow("other", 4, 50.0), "me", 100.0)
    assert decide(live, "me", 110.0).action == "take" and decide(live, "me", 110.0).epoch == 5
    assert decide(live, "me", 100.0, holder_alive=False).action == "take"   # its process is gone
    assert decide(live, "me", 100.0, holder_alive=None).action == "refuse"  # another host's: wait
    assert decide(LeaseRow("me", 4, 90.0), "me", 100.0).action == "renew"


def test_local_holder_alive_knows_this_process_and_a_dead_one():
    assert local_holder_alive(holder_name("tcp://x")) is True
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    name = holder_name(pid=proc.pid)
    proc.wait()
    assert local_holder_alive(name) is False
    assert local_holder_alive("elsewhere pid 1 started 0.00") is None
    # this host's name, but another process space (a cloned VM of the same name, a container with
    # the host's name and its own process ids): its pid says nothing here. An earlier release's
    # holder, without a space, is judged by the host name alone.
    host, rest = name.split(" ", 1)
    space = process_space()
    assert name.endswith(f" in {space}") and re.fullmatch(r"[0-9a-f]{8}", space)
    assert local_holder_alive(name.replace(f" in {space}", " in 0badc0de")) is None
    assert local_holder_alive(name.replace(f" in {space}", "")) is False
    assert describe_holder(name).startswith(f"pid {proc.pid} on {host} (started ")
    # a child that has exited but is not reaped yet (a zombie: what a manager forked by a
    # `gridcrawl run` killed with -9 is for a moment) does not run either
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    name = holder_name(pid=proc.pid)
    deadline = time.monotonic() + 30
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.01)
    assert local_holder_alive(name) is False
    proc.wait()


def test_a_refusal_names_the_holder_in_words():
    started = datetime.datetime(2026, 11, 28, 14, 36, 57, tzinfo=datetime.timezone.utc).timestamp()
    row = LeaseRow(f"vm pid 17611 started {started:.2f} tcp://127.0.0.1:47175", 1, 103.0)
    assert decide(row, "me", 100.0).reason == (
        "held by the manager pid 17611 on vm (started 2026-11-28 14:36:57 UTC), at tcp://127.0.0.1:47175 "
        "(lease epoch 1, expires in 3 s unless renewed)")
    assert describe_holder("a name of another form") == "a name of another form"
    assert describe_holder(None) == describe_holder("") == "none"  # a released lease
    assert describe_holder("vm pid 1 started 1e300 tcp://x") == "vm pid 1 started 1e300 tcp://x"


@pytest.fixture(params=["sqlite", "postgresql"])
def lease_db(request):
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")
    engine = open_database(url)
    init_schema(engine, models.manager_metadata, models.manager_meta)
    yield engine
    engine.dispose()


def test_one_holder_at_a_time_take_over_after_expiry_and_the_old_holder_is_fenced(lease_db):
    alive = lambda holder: True  # noqa: E731  (both "processes" run: only expiry frees the lease)
    first = Lease(lease_db, "manager-1", seconds=10.0, alive=alive)
    second = Lease(lease_db, "manager-2", seconds=10.0, alive=alive)
    assert first.acquire(now=1000.0) == 1
    with pytest.raises(LeaseHeld, match="manager-1"):
        second.acquire(now=1005.0)
    first.renew(now=1008.0)                       # expires at 1018 now
    with pytest.raises(LeaseHeld):
        second.acquire(now=1015.0)
    assert second.acquire(now=1019.0) == 2        # expired: taken over, epoch incremented
    row = second.read()
    assert row.holder == "manager-2" and row.epoch == 2 and row.expires_at == pytest.approx(1029.0)
    with pytest.raises(LeaseLost):                # the old holder wakes up: fenced by the epoch
        first.renew(now=1020.0)
    assert first.lost.is_set()
    expired = active_manager(lease_db)            # as `gridcrawl report --db` tells it
    assert not expired.live and "not running (lease expired at 1970-01-01 00:17:09 UTC" in expired.describe()
    second.release()                              # a clean stop lets the next one in at once
    assert "manager-2: stopped (lease released), lease epoch 2" in active_manager(lease_db).describe()
    third = Lease(lease_db, "manager-3", alive=alive)
    assert third.acquire() == 3
    assert "manager-3: active, lease epoch 3" in active_manager(lease_db).describe()
    third.release()


def test_a_lease_read_for_a_report_is_judged_once_by_the_clock_when_it_was_read(lease_db):
    """``gridcrawl report`` asked twice whether the lease was live (whether executors can be up,
    then for the manager's line): on SQLite each look read this host's clock anew, and a lease
    expiring between them printed "not running" over executors "up: waiting" (a full suite on a
    loaded machine caught it). A lease read is judged by the clock of its reading."""
    lease = Lease(lease_db, "manager-1", seconds=0.5, alive=lambda holder: True)
    lease.acquire()
    read = active_manager(lease_db)
    time.sleep(0.7)  # the lease has expired since it was read
    assert read.live and "manager-1: active" in read.describe()
    assert not active_manager(lease_db).live  # read again: expired
    lease.release()


@pytest.mark.parametrize("backend", ["postgresql", "mariadb"])  # SQLite: one machine, one clock
def test_the_lease_is_judged_by_the_database_servers_clock_not_the_hosts(backend, request, monkeypatch, caplog):
    """A standby on a host whose clock runs 30 s ahead does not take the lease of a manager that
    renews it (judged by its own clock, it took it at once: a walkthrough with two hosts), is
    told of its clock once, and takes the lease once it is released."""
    engine = open_database(request.getfixturevalue("postgres_url" if backend == "postgresql" else "mariadb_url"))
    init_schema(engine, models.manager_metadata, models.manager_meta)
    alive = lambda holder: None  # noqa: E731  (another host's process: unknowable)
    active = Lease(engine, "manager-1", seconds=10.0, alive=alive)
    assert active.acquire() == 1
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 30.0)  # this host's clock, 30 s ahead
    standby = Lease(engine, "manager-2", seconds=10.0, alive=alive)
    with caplog.at_level("WARNING", logger="gridcrawl.manager.lease"):
        decision = standby.try_acquire()
        assert decision.action == "refuse" and "manager-1" in decision.reason
        assert standby.try_acquire().action == "refuse"
    assert standby.skew == pytest.approx(-30.0, abs=2.0)
    assert [r.getMessage()[:60] for r in caplog.records] == [
        "this host's clock is 30.0 s ahead of the database server's: "]
    active.renew()  # (on the shifted clock too: the server's clock decides)
    assert standby.read().expires_at == pytest.approx(real() + 10.0, abs=2.0)
    active.release()
    assert standby.try_acquire().action == "take" and standby.epoch == 2
    standby.release()
    engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql", "mariadb"])  # SQLite: docs/reliability.md, "Failover …"
def test_a_holder_stuck_inside_a_transaction_neither_blocks_the_standby_nor_keeps_the_lease(backend, request,
                                                                                            caplog):
    # The holder "pauses" (SIGSTOP, a hung thread) inside a fenced transaction: its renewal has
    # locked the lease row and it says nothing more. A standby's take-over must not wait on that
    # lock for as long as the pause lasts (it answers "refuse" after its lock wait), and the server
    # must end the paused transaction after about the lease, so the standby takes over and the
    # holder, when it goes on, finds its transaction gone and itself fenced.
    url = request.getfixturevalue("postgres_url" if backend == "postgresql" else "mariadb_url")
    holder_engine, standby_engine = open_database(url), open_database(url)
    init_schema(holder_engine, models.manager_metadata, models.manager_meta)
    alive = lambda holder: True  # noqa: E731  (the paused holder's process still exists)
    holder = Lease(holder_engine, "m1.example pid 4242 started 1796000000.00 tcp://m1.example:9000", seconds=2.0,
                   alive=alive)
    standby = Lease(standby_engine, "manager-2", seconds=2.0, alive=alive)
    holder.acquire()
    conn = holder_engine.connect()
    transaction = conn.begin()
    holder.renew(conn)  # the recorder's fence: the row is locked until this transaction ends
    # ... and the recorder's writes: an executemany (pipelined by psycopg, after which PostgreSQL
    # does not arm its idle-in-transaction timer)
    t = models.manager_lease
    conn.execute(t.update().where(t.c.name == sa.bindparam("n")).values(address=sa.bindparam("a")),
                 [{"n": "manager", "a": "tcp://holder:1"}, {"n": "no such lease", "a": "-"}])
    decisions: list = []

    def take_over() -> None:  # the lease seen as expired, as it is once the pause outlasts it
        try:
            decisions.append(standby.try_acquire(now=time.time() + 100))
        except Exception as exc:  # pragma: no cover (reported below)
            decisions.append(exc)

    try:
        started = time.monotonic()
        attempt = threading.Thread(target=take_over, daemon=True)
        attempt.start()
        attempt.join(10)
        assert not attempt.is_alive(), "the standby's take-over waits on the paused holder's row lock"
        assert decisions and getattr(decisions[0], "action", None) == "refuse", decisions
        assert "locked" in decisions[0].reason and time.monotonic() - started < 5
        # the server ends the idle transaction after about the lease (2 s): the standby gets in
        wait_for(lambda: standby.try_acquire(now=time.time() + 100).action == "take", 20, 0.2,
                 "the standby taking the lease once the server ended the paused transaction")
        assert standby.read().holder == "manager-2" and standby.epoch == 2
        if backend == "postgresql":  # the standby ended the holder's session, and names it in words (it
            # wrote "the lease of m1.example pid 4242 started 1796000000.00 tcp://..." as stored)
            (ended,) = [r.getMessage() for r in caplog.records if "ended its database session" in r.getMessage()]
            assert ended.startswith("the lease of the manager pid 4242 on m1.example (started 2026-11-30 00:53:20 "
                                   "UTC), at tcp://m1.example:9000 expired inside its open transaction"), ended
        with pytest.raises(sa.exc.DBAPIError):  # the holder goes on: its transaction is gone
            conn.execute(sa.text("SELECT 1"))
            transaction.commit()
        with pytest.raises(LeaseLost):
            holder.renew()
    finally:
        if transaction.is_active:
            try:
                transaction.rollback()
            except sa.exc.DBAPIError:
                pass
        conn.close()
        attempt.join(60)
        holder_engine.dispose()
        standby_engine.dispose()


def _second_manager(grid: Grid) -> subprocess.CompletedProcess:
    from grid import free_port
    return subprocess.run([sys.executable, "-m", "gridcrawl.manager", "--bind", f"tcp://127.0.0.1:{free_port()}",
                           "--db", grid.manager_db], capture_output=True, text=True, timeout=60)


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_second_manager_on_the_same_database_refuses_and_a_killed_one_is_taken_over(tmp_path, backend, request):
    url = None if backend == "sqlite" else request.getfixturevalue("postgres_url")
    grid = Grid(tmp_path, manager_db=url)
    try:
        first = grid.start_manager()
        wait_for(lambda: "manager listening" in grid.log("manager.log"), 30, 0.05, "the first manager")
        second = _second_manager(grid)
        lines = second.stderr.strip().splitlines()
        print(f"\n[two managers, {backend}] second exit={second.returncode}: {lines}")
        assert second.returncode == 2 and len(lines) == 1, second.stderr
        assert "another manager runs on the database" in lines[0] and f"pid {first.pid}" in lines[0]
        assert lines[0].endswith("; --standby waits as its hot standby and takes over when it stops")  # what to do
        first.kill()
        first.wait()
        killed = time.monotonic()
        grid.start_manager()  # kill -9: its process is gone, so the lease is taken over at once
        wait_for(lambda: grid.log("manager.log").count("manager listening") == 2, 30, 0.05, "the restarted manager")
        took = time.monotonic() - killed
        print(f"[two managers, {backend}] lease of a kill -9'd manager taken over after {took:.2f} s")
        # the previous holder in words (its start as a UTC time, not POSIX seconds)
        assert f"manager lease taken (epoch 2); previous holder: pid {first.pid} on " in grid.log("manager.log")
        assert re.search(r"previous holder: pid \d+ on \S+ \(started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\), at tcp://",
                         grid.log("manager.log"))
    finally:
        grid.stop()


def test_a_database_down_is_one_warning_then_one_when_it_answers_again(sqlite_url, caplog, monkeypatch):
    """While the manager's database is down, the lease thread retries every seconds / 3 (1 s by
    default) and said so each time: a WARNING a second for the whole outage. Now one, then one
    a minute, and one line when the database answers again."""
    import logging
    engine = open_database(sqlite_url)
    init_schema(engine, models.manager_metadata, models.manager_meta)
    lease = Lease(engine, "manager-1", seconds=0.06, alive=lambda holder: True)
    assert lease.acquire() == 1
    down = threading.Event()
    down.set()
    renew = lease.renew

    def flaky(*args, **kwargs):
        if down.is_set():
            raise sa.exc.OperationalError("UPDATE manager_lease", {}, Exception("server closed the connection"))
        return renew(*args, **kwargs)
    monkeypatch.setattr(lease, "renew", flaky)
    with caplog.at_level(logging.WARNING, logger="gridcrawl.manager.lease"):
        lease.start()
        time.sleep(0.5)  # about 25 failed renewals
        down.clear()
        wait_for(lambda: "answers again" in caplog.text, 10, message="the line when it answers again")
        lease.release()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said
    assert said[0].startswith("renewing the manager lease failed for 0 s (")
    assert said[1].startswith("the manager database answers again: lease renewed after ")
    engine.dispose()


def test_a_renewal_that_hangs_is_said_once_the_lease_has_run_out(sqlite_url, caplog, monkeypatch):
    """A database that hangs (no error) blocked the renewal, and the manager said nothing while its
    lease ran out and a standby could take over. The manager's loop asks :meth:`Lease.overdue`:
    nothing while the lease is renewed, one WARNING once it has gone unrenewed for its length."""
    import logging
    engine = open_database(sqlite_url)
    init_schema(engine, models.manager_metadata, models.manager_meta)
    lease = Lease(engine, "manager-1", seconds=0.6, alive=lambda holder: True)
    assert lease.acquire() == 1
    hang = threading.Event()
    renew = lease.renew

    def hanging(*args, **kwargs):
        hang.wait()
        return renew(*args, **kwargs)
    with caplog.at_level(logging.WARNING, logger="gridcrawl.manager.lease"):
        lease.start()
        time.sleep(0.45)
        lease.overdue()  # renewed every 0.2 s so far: nothing to say
        assert caplog.records == []
        monkeypatch.setattr(lease, "renew", hanging)
        for _ in range(20):  # the loop asks often (every tick, a fraction of the lease): said once
            time.sleep(0.05)
            lease.overdue()
        hang.set()
        lease.release()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("the manager lease has not been renewed for "), said
    assert "(its database does not answer)" in said[0]


def test_a_manager_that_was_itself_paused_does_not_blame_its_database(sqlite_url, caplog):
    """A manager woken by SIGCONT after its lease ran out logged "the manager lease has not been
    renewed for 8 s (its database does not answer)" before it learnt it had been taken over: the
    database had answered all along. Its loop's previous look at the lease was as long ago as
    the lease lasts: the manager itself did not run."""
    import logging
    engine = open_database(sqlite_url)
    init_schema(engine, models.manager_metadata, models.manager_meta)
    lease = Lease(engine, "manager-1", seconds=0.3, alive=lambda holder: True)
    assert lease.acquire() == 1
    with caplog.at_level(logging.WARNING, logger="gridcrawl.manager.lease"):
        lease.overdue()  # the loop's look before the pause
        time.sleep(0.4)  # no loop, no renewal thread: this process "stopped"
        lease.overdue()
    (said,) = [r.getMessage() for r in caplog.records]
    assert "(this manager did not run: it was paused or starved of CPU)" in said, said
    assert "database does not answer" not in said and said.endswith("this one learns it at its next renewal")
    lease.release()
    engine.dispose()
