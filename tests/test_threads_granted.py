"""The worker threads a manager grants an executor (its ``max_threads_per_executor``, 64 by
default): the manager's welcome says how many, and the executor runs that many and says so.

A desktop started with ``gridcrawl-executor --threads 100`` saw nothing of the cap in its own
log (only manager.log said "believed 64"), ran 100 worker threads, and so ran at once the jobs
the manager sent beyond 64 to wait in its local buffer (``prefetch``); the manager's executor
record showed 100.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import pytest
import zmq

from gridcrawl import protocol as p
from gridcrawl.executor.agent import ExecutorAgent
from gridcrawl.settings import Settings
from grid import Grid, wait_for
from sites import generate_site

pytestmark = pytest.mark.e2e

WARNING = re.compile(r"WARNING gridcrawl\.executor: running (\d+) worker threads?, not the (\d+) asked "
                     r"\(threads, --threads\): the manager grants at most \d+ per executor "
                     r"\(its max_threads_per_executor; raise it there for more\)")


def test_an_executor_asking_more_threads_than_the_cap_says_it_runs_the_64_granted(tmp_path):
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("desk", "--threads", "100")
        wait_for(lambda: "registered as executor" in grid.log("desk.log"), 30, message="the executor registering")
        wait_for(lambda: grid.query("manager", "SELECT name, threads FROM executor") == [("desk", 64)], 30,
                 message="the executor's record to show the 64 threads granted")
        log = grid.log("desk.log")
        assert [m.groups() for m in WARNING.finditer(log)] == [("64", "100")], log
        assert log.count("WARNING") == 1, log
        assert re.search(r"registered: \S+, 64 threads", grid.log("manager.log")), grid.log("manager.log")
    finally:
        grid.stop()


def test_an_executor_runs_no_more_pages_at_once_than_the_threads_granted(tmp_path, site_server):
    """The manager grants 3 of the 10 asked and sends 3 + prefetch (6) jobs: 9 pages of a slow
    host ran at once on 10 workers, 3 now (its politeness would let 20 run)."""
    server = site_server(generate_site(30, links_per_page=6, seed=7), latency=0.2)
    grid = Grid(tmp_path)
    try:
        grid.start_manager("--concurrent-requests-per-host", "20", "--prefetch", "6",
                           env={"GRIDCRAWL_MAX_THREADS_PER_EXECUTOR": "3", "GRIDCRAWL_START_WINDOW": "9"})
        grid.start_executor("desk", "--threads", "10")
        wait_for(lambda: "registered as executor" in grid.log("desk.log"), 30, message="the executor registering")
        client = grid.start_client(server.url("/"))
        assert client.wait(120) == 0, grid.log("client.log")[-2000:]
        assert [m.groups() for m in WARNING.finditer(grid.log("desk.log"))] == [("3", "10")], grid.log("desk.log")
        assert server.count("/p/29.html") == 1 and server.max_concurrency() == 3, server.max_concurrency()
    finally:
        grid.stop()


def test_gridcrawl_runs_own_executors_are_granted_all_their_threads(tmp_path, site_server, small_site):
    """``gridcrawl run --threads 70``: its manager grants its own executors all 70 (the cap
    guards against other executors), so none of them warns, and the records show 70."""
    server = site_server(small_site)
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--threads", "70",
                           "--executors", "1", "--workdir", str(tmp_path), "--no-progress", "--max-pages", "3"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    log = (tmp_path / "executor-1.log").read_text()
    assert "registered as executor" in log and "WARNING" not in log, log
    grid = Grid(tmp_path, manager_db=f"sqlite:///{tmp_path / 'manager.db'}")
    assert grid.query("manager", "SELECT name, threads FROM executor") == [("executor-1", 70)]


def test_an_executor_asking_more_threads_than_a_registration_may_declare_stops_with_one_line(tmp_path):
    """``--threads 200000``: the manager dropped its registration as malformed, and the executor
    said "no answer from the manager at ... within 10 s", blaming the network; ``gridcrawl run``
    printed that line once per executor, then "executor-1 exited with status 2 before the crawl
    started". Both refuse it in one line now."""
    for command in (["gridcrawl.executor", "--manager", "tcp://127.0.0.1:9"],
                    ["gridcrawl", "run", "http://127.0.0.1:9/", "--workdir", str(tmp_path / "crawl")]):
        done = subprocess.run([sys.executable, "-m", *command, "--threads", str(p.MAX_THREADS + 1)],
                              capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout) == (2, ""), done
        assert done.stderr == (f"error: setting threads (--threads) must be at most {p.MAX_THREADS:,} (a manager "
                               f"grants at most its max_threads_per_executor, 64 by default), not "
                               f"{p.MAX_THREADS + 1}\n"), done


def _workers() -> int:
    return sum(t.name.startswith("worker-") and t.is_alive() for t in threading.enumerate())


def test_a_later_welcome_resizes_the_executors_workers(caplog):
    """Another welcome (a reconnection, a standby of another ``max_threads_per_executor``)
    grants another count: the workers are stopped or started to it, within the threads asked;
    a welcome that says nothing of threads runs them all."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    agent = ExecutorAgent(Settings(threads=5, heartbeat_interval=0.25), f"tcp://127.0.0.1:{port}", name="ex")
    stop = threading.Event()
    runner = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    caplog.set_level("INFO", logger="gridcrawl.executor")
    before = _workers()
    runner.start()
    try:
        assert router.poll(20_000), "no registration"
        peer, *frames = router.recv_multipart()
        assert isinstance(p.decode(frames), p.Register) and p.decode(frames).threads == 5
        for granted, running in ((2, 2), (9, 5), (1, 1), (2, 2), (None, 5)):
            router.send_multipart([peer, *p.encode(p.Welcome("e1", 0.25, 3, granted))])
            wait_for(lambda: _workers() - before == running and agent.pool == running, 10, 0.02,
                     message=f"{running} workers after a welcome granting {granted}")
            time.sleep(0.1)
            assert _workers() - before == running
        said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert [WARNING.search(f"WARNING gridcrawl.executor: {m}").groups() for m in said] == \
            [("2", "5"), ("1", "5"), ("2", "5")], said
    finally:
        stop.set()
        runner.join(20)
        router.close()
        context.term()
    wait_for(lambda: _workers() == before, 10, 0.02, message="the workers to stop with the executor")
