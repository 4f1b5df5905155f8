"""Idle-desktop executors: the pure idle decision (hours, CPU of other processes, hysteresis),
the manager's hand-back of unstarted work, and a real manager + executor pair in which the
"owner" comes back mid-crawl and the executor hands its queued threads back.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
import sqlalchemy as sa
from hypothesis import given, strategies as st

from gridcrawl import models, protocol as p
from gridcrawl.db import open_database
from gridcrawl.executor.idle import (CpuSampler, HoursWindow, IdleMonitor, IdlePolicy, busy_percent,
                                     minute_of_day, other_cpu_percent, parse_hours, within_hours)
from gridcrawl.manager.core import ManagerCore, Send
from gridcrawl.settings import Settings
from gridcrawl.states import ThreadState
from grid import Grid, wait_for
from sites import Site, SiteServer

# ---------------------------------------------------------------------------------- hours


def test_parse_hours_reads_windows_and_refuses_nonsense():
    assert parse_hours("18:00-08:00") == HoursWindow(18 * 60, 8 * 60)
    assert parse_hours(" 9:30 - 17:45 ") == HoursWindow(9 * 60 + 30, 17 * 60 + 45)
    assert parse_hours("00:00-24:00") == HoursWindow(0, 1440)
    for bad in ("18-08", "25:00-08:00", "18:60-08:00", "24:30-01:00", "", "18:00"):
        with pytest.raises(ValueError, match="hours"):
            parse_hours(bad)


def test_a_window_that_ends_before_it_starts_wraps_past_midnight():
    night = parse_hours("18:00-08:00")
    assert within_hours(night, 18 * 60)              # start is included
    assert within_hours(night, 23 * 60 + 59)
    assert within_hours(night, 0)
    assert within_hours(night, 7 * 60 + 59)
    assert not within_hours(night, 8 * 60)           # end is excluded
    assert not within_hours(night, 12 * 60)
    assert not within_hours(night, 17 * 60 + 59)
    day = parse_hours("09:00-17:00")
    assert within_hours(day, 9 * 60) and within_hours(day, 16 * 60 + 59)
    assert not within_hours(day, 17 * 60) and not within_hours(day, 3 * 60)
    assert all(within_hours(parse_hours("00:00-24:00"), m) for m in range(0, 1440, 7))
    assert all(within_hours(None, m) for m in range(0, 1440, 7))


@given(st.integers(0, 1439), st.integers(0, 1439), st.integers(0, 1439))
def test_a_window_and_its_complement_split_the_day(start, end, minute):
    if start == end:
        return
    inside = within_hours(HoursWindow(start, end), minute)
    outside = within_hours(HoursWindow(end, start), minute)
    assert inside != outside


def test_minute_of_day_reads_the_local_clock():
    assert minute_of_day(dt.datetime(2026, 1, 1, 18, 5)) == 18 * 60 + 5
    assert minute_of_day(dt.time(0, 0)) == 0


# ---------------------------------------------------------------------------------- CPU


def test_busy_percent_from_two_readings_of_cpu_times():
    assert busy_percent((10.0, 100.0), (40.0, 200.0)) == pytest.approx(30.0)
    assert busy_percent((10.0, 100.0), (10.0, 100.0)) == 0.0       # no time passed
    assert busy_percent((0.0, 0.0), (500.0, 100.0)) == 100.0       # clamped


def test_the_executors_own_cpu_is_not_the_owner_coming_back():
    # 4 CPUs, 2 s: the machine was 60% busy; this process used 4 CPU-seconds = 50% of the machine
    assert other_cpu_percent(60.0, 4.0, 2.0, 4) == pytest.approx(10.0)
    # the executor alone keeps the machine busy: others use nothing
    assert other_cpu_percent(50.0, 4.0, 2.0, 4) == 0.0
    assert other_cpu_percent(80.0, 0.0, 2.0, 4) == pytest.approx(80.0)
    assert other_cpu_percent(30.0, 1.0, 0.0, 4) == pytest.approx(30.0)   # no interval: the raw figure


def test_the_executors_own_cpu_includes_its_children_running_and_ended():
    """A browser an --idle-only --render executor starts is its own load, not the desktop's
    owner coming back (psutil's process times leave live children out)."""
    import subprocess
    import sys
    import psutil
    from gridcrawl.executor.idle import own_cpu_seconds
    me = psutil.Process()
    before = own_cpu_seconds(me)
    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile time.process_time() < 0.3: pass\n"
                              "print('spun', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "spun"
        assert own_cpu_seconds(me) - before >= 0.25  # running (/proc counts in ticks: a little behind)
    finally:
        child.kill()
        child.wait()
    assert own_cpu_seconds(me) - before >= 0.25  # ended and waited for: in this process's children_* times


def test_cpu_sampler_reads_this_machine():
    sampler = CpuSampler()
    time.sleep(0.05)
    assert 0.0 <= sampler.other_percent() <= 100.0


# ---------------------------------------------------------------------------------- policy


def feed(policy, loads, minute=12 * 60, step=1.0, start=0.0):
    """Feed one load per second; return the accepting decisions."""
    return [policy.update(start + i * step, minute, load) for i, load in enumerate(loads)]


def test_policy_waits_for_idle_seconds_of_quiet_before_taking_work():
    policy = IdlePolicy(25.0, idle_seconds=3.0, busy_seconds=2.0)
    assert feed(policy, [5, 5, 5, 5, 5]) == [False, False, False, True, True]
    assert "idle" in policy.reason


def test_policy_stops_when_the_owner_comes_back_and_resumes_only_after_quiet():
    policy = IdlePolicy(25.0, idle_seconds=2.0, busy_seconds=1.0)
    decisions = feed(policy, [0, 0, 0, 90, 90, 0, 0, 0, 0])
    #                         t=0 1  2  3   4   5  6  7  8
    assert decisions == [False, False, True, False, False, False, False, True, True]


def test_one_spike_within_the_busy_window_does_not_stop_work():
    policy = IdlePolicy(25.0, idle_seconds=0.0, busy_seconds=3.0)
    decisions = feed(policy, [0, 0, 60, 0, 0, 0])
    # mean over the last 3 s: 0, 0, 20, 20, 20, 0: never above 25
    assert decisions == [True] * 6


def test_policy_obeys_the_hours_whatever_the_load():
    policy = IdlePolicy(25.0, parse_hours("18:00-08:00"), idle_seconds=0.0, busy_seconds=0.0)
    assert policy.update(0.0, 12 * 60, 0.0) is False      # noon: outside the hours
    assert policy.update(1.0, 19 * 60, 0.0) is True       # evening, idle
    assert policy.update(2.0, 8 * 60, 0.0) is False       # 08:00 the next morning: stop
    assert policy.reason == "outside the allowed hours"


def test_a_policy_that_keeps_waiting_says_why_every_ten_minutes():
    """A desktop that stayed busy logged "not taking grid threads yet" once, at start, and then
    nothing for hours: the policy now says why it still waits, with the load it measured, once
    every WAITING_REPEAT seconds, and nothing while it takes work."""
    from gridcrawl.executor.idle import WAITING_REPEAT
    policy = IdlePolicy(25.0, parse_hours("08:00-18:00"), idle_seconds=60.0, busy_seconds=3.0)
    said = []
    for t in range(0, int(2.5 * WAITING_REPEAT) + 1, 10):  # ten-second samples of a busy desktop at noon
        policy.update(float(t), 12 * 60, 87.0)
        said += [(t, why) for why in [policy.still_waiting(float(t))] if why]
    assert said == [(600, "other processes use 87% of the CPU (--cpu-threshold 25%)"),
                    (1200, "other processes use 87% of the CPU (--cpu-threshold 25%)")]
    for t in (1600.0, 1630.0):  # the owner leaves: quiet, not yet for idle_seconds
        policy.update(t, 12 * 60, 3.0)
        assert policy.still_waiting(t) is None
    assert policy.update(1660.0, 12 * 60, 3.0) and policy.still_waiting(1660.0) is None  # takes work
    for t in (1700.0, 1700.0 + WAITING_REPEAT):  # 19:00: outside the hours
        policy.update(t, 19 * 60, 0.0)
    assert policy.still_waiting(1700.0 + WAITING_REPEAT) == "outside the allowed hours (--hours)"
    patient = IdlePolicy(25.0, idle_seconds=3600.0)
    patient.update(0.0, 0, 3.0)
    patient.still_waiting(0.0)
    patient.update(WAITING_REPEAT, 0, 3.0)
    assert patient.still_waiting(WAITING_REPEAT) == "quiet for 600 s of the 3600 s needed (--idle-seconds)"


def test_policy_refuses_impossible_thresholds():
    for bad in (0, -5, 101):
        with pytest.raises(ValueError, match="threshold"):
            IdlePolicy(bad)


def test_idle_monitor_feeds_the_policy_from_injected_clock_and_load():
    loads = iter([0.0, 0.0, 95.0])
    ticks = itertools.count()
    monitor = IdleMonitor(IdlePolicy(25.0, parse_hours("18:00-08:00"), idle_seconds=1.0, busy_seconds=0.0),
                          sample=lambda: next(loads), clock=lambda: dt.datetime(2026, 1, 1, 22, 0),
                          monotonic=lambda: float(next(ticks)))
    assert [monitor.check(), monitor.check(), monitor.check()] == [False, True, False]
    assert monitor.last_load == 95.0 and "owner back" in monitor.reason


# ---------------------------------------------------------------------------------- the manager


def test_manager_takes_handed_back_threads_without_counting_them_lost():
    ids = (f"id{i}" for i in itertools.count(1))
    core = ManagerCore(Settings(prefetch=2, max_attempts=1), new_id=lambda: next(ids))
    core.handle(b"desk", p.Register(name="desk", host="h", user="u", threads=1, dedicated=False), 0.0)
    (opened,) = [a for a in core.handle(b"cl", p.OpenApplication("c", "u"), 0.0)
                 if isinstance(a, Send) and isinstance(a.message, p.ApplicationOpened)]
    app = opened.message.application_id
    actions = core.handle(b"cl", p.Submit(app, [p.ThreadSpec(i, f"http://h{i}.test/") for i in range(5)]), 0.0)
    attempts = [job.attempt_id for a in actions if isinstance(a, Send) and isinstance(a.message, p.Assign)
                for job in a.message.jobs]
    assert len(attempts) == 3                                  # 1 thread + prefetch 2
    core.handle(b"desk", p.Started([attempts[0]]), 1.0)
    # the owner is back: the two unstarted attempts are handed back; the started one finishes
    actions = core.handle(b"desk", p.Availability(False, attempts[1:]), 2.0)
    assert not [a for a in actions if isinstance(a, Send) and isinstance(a.message, p.Assign)]
    ex = next(iter(core.executors.values()))
    assert ex.connected and not ex.accepting and list(ex.running) == [attempts[0]]
    threads = core.applications[app].threads
    assert sorted(t.state for t in threads.values()).count(ThreadState.READY) == 4
    assert all(t.lost == 0 for t in threads.values())       # max_attempts=1: one lost would be poison
    # a dedicated executor joins and gets the handed-back threads
    actions = core.handle(b"dedicated", p.Register(name="d", host="h2", user="u", threads=4), 3.0)
    assert len([job for a in actions if isinstance(a, Send) and isinstance(a.message, p.Assign)
                for job in a.message.jobs]) == 4
    # a hand-back naming a started or unknown attempt changes nothing
    core.handle(b"desk", p.Availability(False, [attempts[0], 999]), 4.0)
    assert list(ex.running) == [attempts[0]]


# ---------------------------------------------------------------------------------- a real grid


class Gate:
    """A site whose pages answer only once :attr:`open` is set (so work piles up)."""

    def __init__(self, pages: int) -> None:
        self.open = threading.Event()
        links = "".join(f'<a href="/g/{i}.html">{i}</a>' for i in range(pages))
        self.site = Site(pages={"/": f"<html><body>{links}</body></html>".encode()})
        for i in range(pages):
            self.site.extra[f"/g/{i}.html"] = self._handler(i)
        self.paths = {"/", *(f"/g/{i}.html" for i in range(pages))}

    def _handler(self, i: int):
        def handle(h) -> None:
            self.open.wait(30)
            h.respond(200, f"<html><title>g{i}</title><body>page {i}</body></html>".encode())
        return handle


def test_idle_executor_hands_back_its_queued_threads_when_the_owner_returns(tmp_path):
    """Real sockets: a manager, an idle-only executor whose "other processes" load the test sets,
    and a client crawl. The desktop takes threads (1 running, 2 buffered: prefetch 2) while the
    site holds its answers; the owner comes back; the 2 buffered threads are handed back and the
    executor stays connected; a dedicated executor finishes the crawl; every page is stored once."""
    from gridcrawl.client.app import CrawlApplication
    from gridcrawl.client.store import CrawlStore
    from gridcrawl.executor.agent import ExecutorAgent
    from gridcrawl.manager.server import ManagerServer

    gate = Gate(8)
    server = SiteServer(gate.site).start()
    settings = Settings(heartbeat_interval=0.2, heartbeat_liveness=10, prefetch=2, threads=1, record_interval=0.1,
                        obey_robots=False, sitemaps=False)  # the desk's threads: "/" and pages only
    manager_engine = open_database(f"sqlite:///{tmp_path / 'manager.db'}")
    manager = ManagerServer(settings, "tcp://127.0.0.1:0", manager_engine)
    stop = threading.Event()
    load = [0.0]
    desk = ExecutorAgent(settings, manager.endpoint, name="desk", dedicated=False, allow_private=["127.0.0.0/8"],
                         idle=IdleMonitor(IdlePolicy(25.0, idle_seconds=0.0, busy_seconds=0.0),
                                          sample=lambda: load[0]))
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    store.add_seeds([server.url("/")])
    crawl = CrawlApplication(settings, manager.endpoint, store, store.scope([server.url("/")], [], -1))
    threads = [threading.Thread(target=manager.serve, args=(stop,), daemon=True),
               threading.Thread(target=desk.run, args=(stop,), daemon=True)]
    dedicated = None
    result: dict = {}
    try:
        for t in threads:
            t.start()
        client = threading.Thread(target=lambda: result.update(progress=crawl.run(stop)), daemon=True)
        client.start()

        def desk_row():
            snap = manager.latest_snapshot() or {"executors": []}
            return next((e for e in snap["executors"] if e["name"] == "desk"), None)

        # "/" has been fetched (the gate holds only /g/...): the desk runs one page, buffers two
        wait_for(lambda: (r := desk_row()) is not None and r["running"] == 1 and r["assigned"] == 3, 30,
                 message="the desk holding 1 running + 2 buffered threads")
        load[0] = 90.0                                           # the owner is back
        wait_for(lambda: (r := desk_row()) is not None and not r["accepting"] and r["assigned"] == 1, 30,
                 message="the desk handing back its 2 buffered threads")
        assert desk_row()["connected"] and not desk_row()["dedicated"]
        dedicated = ExecutorAgent(settings.replace(threads=4), manager.endpoint, name="dedicated",
                                  allow_private=["127.0.0.0/8"])
        threads.append(threading.Thread(target=dedicated.run, args=(stop,), daemon=True))
        threads[-1].start()
        gate.open.set()
        client.join(60)
        assert not client.is_alive(), "the crawl did not finish"
    finally:
        gate.open.set()
        stop.set()
        for t in threads:
            t.join(10)
        server.stop()

    assert set(server.per_path_counts()) == gate.paths and set(server.per_path_counts().values()) == {1}
    assert store.counts()["documents"] == len(gate.paths)
    with manager_engine.connect() as conn:
        x, e = models.attempt, models.executor
        outcomes = conn.execute(sa.select(e.c.name, x.c.outcome, sa.func.count()).join(e, e.c.executor_id == x.c.executor_id)
                                .group_by(e.c.name, x.c.outcome)).all()
        desk_db = conn.execute(sa.select(e.c.is_dedicated, e.c.accepting).where(e.c.name == "desk")).one()
    counts = {(name, outcome): n for name, outcome, n in outcomes}
    assert counts[("desk", "handed_back")] == 2, counts
    assert counts[("desk", "finished")] == 2, counts            # "/" and the page it was running
    assert not any(outcome == "lost" for _, outcome in counts), counts
    assert tuple(desk_db) == (False, False)


def test_a_stopping_executor_flushes_its_goodbye_without_waiting_for_a_busy_worker(tmp_path):
    """Real sockets, a scripted manager (a pyzmq ROUTER): an executor with one worker holds a
    page the site does not answer and two queued threads, and is stopped. ``run`` returns with
    its network context terminated (so the goodbye has left before the process may exit, which
    an unterminated context does not promise) while the worker is still fetching; the manager
    gets the goodbye."""
    import zmq

    from gridcrawl.executor.agent import ExecutorAgent

    gate = Gate(3)
    server = SiteServer(gate.site).start()
    context = zmq.Context()
    manager = context.socket(zmq.ROUTER)
    manager.setsockopt(zmq.LINGER, 0)
    port = manager.bind_to_random_port("tcp://127.0.0.1")
    settings = Settings(heartbeat_interval=0.2, heartbeat_liveness=10, threads=1, obey_robots=False, sitemaps=False)
    desk = ExecutorAgent(settings, f"tcp://127.0.0.1:{port}", name="desk", allow_private=["127.0.0.0/8"])
    stop = threading.Event()
    runner = threading.Thread(target=desk.run, args=(stop,), daemon=True)
    received: list[p.Message] = []

    def receive(kind: type) -> tuple[bytes, p.Message]:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if manager.poll(100):
                peer, *frames = manager.recv_multipart()
                received.append(p.decode(frames))
                if isinstance(received[-1], kind):
                    return peer, received[-1]
        raise AssertionError(f"no {kind.__name__} from the executor within 20 s: {received}")

    try:
        runner.start()
        peer, _ = receive(p.Register)
        manager.send_multipart([peer, *p.encode(p.Welcome("ex-1", 0.2, 10))])
        jobs = [p.Job(i + 1, "app-1", i, server.url(f"/g/{i}.html")) for i in range(3)]
        manager.send_multipart([peer, *p.encode(p.Assign(jobs))])
        wait_for(lambda: server.max_concurrency() == 1, 20, 0.02, "the worker fetching page 0")
        stop.set()
        runner.join(10)
        assert not runner.is_alive(), "run() did not return"
        worker = desk.workers[0]
        assert worker.is_alive(), "the worker was not fetching any more: the test proves nothing"
        assert desk.context.closed  # terminated: what the link queued has left
        receive(p.Bye)
        assert desk.jobs.qsize() == 1  # the two queued threads were taken off (one stop sentinel stays)
    finally:
        gate.open.set()
        stop.set()
        manager.close()
        context.term()
        server.stop()
    worker.join(10)
    assert not worker.is_alive() and set(server.per_path_counts()) == {"/g/0.html"}  # 1 and 2 never run


def test_an_idle_only_executor_says_it_waits_and_the_report_shows_it_waiting(tmp_path):
    """Real programs: an --idle-only executor that has registered but not yet seen its quiet
    time logs why it takes no work and what would change that; `gridcrawl report` lists it as
    "waiting" (connected, not accepting) rather than "yes", and explains the word."""
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("desk", "--idle-only", "--idle-seconds", "3600", "--hours", "00:00-24:00")
        grid.start_executor("server")
        def executors():
            try:
                return grid.query("manager", "SELECT name, accepting FROM executor ORDER BY name")
            except sqlite3.OperationalError:  # the manager has not created its tables yet
                return None
        wait_for(lambda: executors() == [("desk", 0), ("server", 1)], 60, message="the desk registered, not accepting")
        assert grid.query("manager", "SELECT executor_name, accepting FROM executor_summary ORDER BY 1") \
            == [("desk", 0), ("server", 1)]
        assert ("not taking grid threads yet (waiting for an idle desktop: other processes under 25% of the CPU "
                "for 3600 s, between 00:00 and 24:00 (--cpu-threshold, --idle-seconds, --hours))") in grid.log("desk.log")
        report = subprocess.run([sys.executable, "-m", "gridcrawl", "report", "--db", grid.manager_db],
                                capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "100"})
    finally:
        grid.stop()
    assert report.returncode == 0, report.stderr
    rows = {line.split()[1]: line.split()[3] for line in report.stdout.splitlines()
            if line.startswith("│") and line.split()[1] in ("desk", "server")}
    assert rows == {"desk": "waiting", "server": "yes"}, report.stdout
    assert "waiting: an --idle-only executor, connected, that takes no grid thread until its desktop is idle" \
        in " ".join(report.stdout.split())


def test_the_workers_idle_line_at_stop_is_left_out_without_waits_and_counts_one_wait_as_one():
    """An executor stopped before it ran two pages on one worker logged "worker idle between
    pages: 0.000 s over 0 waits (mean 0.0000 s); per worker: none" at every stop, and one wait
    as "1 waits"; now no line for no wait, and "1 wait"."""
    from gridcrawl.executor.agent import Figures
    figures = Figures()
    assert figures.idle_summary() is None
    figures.add_idle("worker-0", 0.25)
    assert figures.idle_summary() == ("worker idle between pages: 0.250 s over 1 wait (mean 0.2500 s); "
                                      "per worker: worker-0 0.250 s/1")
