"""Fault tolerance with real processes: whatever dies, every reachable page is stored exactly once.

Each test crawls a generated site (real HTTP server with per-request latency, so a crawl is
still going when the failure happens), breaks something for real (``kill -9``, SIGSTOP, a cut
network link, SIGTERM), and then checks the crawl tables: pages lost must be 0 and duplicates 0.
Each prints its figures (time to detect, time to finish, lost, duplicates): ``pytest -s`` shows
them.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

from gridcrawl.states import ApplicationState, ThreadState
from gridcrawl.urls import canonical_url
from grid import Grid, wait_for
from netcut import CuttableLink
from sites import generate_site, reachable

pytestmark = pytest.mark.e2e


def visited(grid: Grid) -> int:
    try:
        return grid.query("crawl", "SELECT COUNT(*) FROM visited_url")[0][0]
    except Exception:  # the client has not created its tables yet
        return 0


def executor_connected(grid: Grid, name: str) -> bool | None:
    try:
        rows = grid.query("manager", "SELECT is_connected FROM executor WHERE name = ?", name)
    except Exception:
        return None
    return bool(rows[0][0]) if rows else None


def check_complete(grid: Grid, server, site, label: str, **figures) -> dict:
    """Assert no page lost, none stored twice, nothing left to visit; print the figures."""
    expected = {canonical_url(server.url(path)) for path in reachable(site)}
    urls = [row[0] for row in grid.query("crawl", "SELECT url FROM document")]
    lost = expected - set(urls)
    duplicates = len(urls) - len(set(urls))
    figures.update(pages=len(expected), lost=len(lost), duplicates=duplicates)
    print(f"\n[{label}] " + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                                      for k, v in figures.items()))
    assert duplicates == 0
    assert not lost, sorted(lost)[:5]
    assert set(urls) == expected
    assert grid.query("crawl", "SELECT COUNT(*) FROM to_visit_url") == [(0,)]
    return figures


def slow_from_now(server, latency: float = 0.5) -> None:
    """Make ``server`` answer in ``latency`` s from now on, and wait until a request it began
    since has been answered: every request begun after it is then in flight (work in flight for
    a signal). The crawl before ran at the quick latency it was started with."""
    server.latency = latency
    switched = time.monotonic()
    wait_for(lambda: any(r.started >= switched for r in list(server.requests)), 30, 0.02,
             f"a request answered in {latency} s")


def start_crawl(tmp_path, site_server, *, pages=150, latency=0.05, seed=11, manager_args=(), executors=None,
                manager_env=None, peer_env=None):
    """A generated site served with ``latency``, a manager, executors (name -> threads; default a
    victim of 4 and a survivor of 2) and a client crawling the site; ``peer_env``: more environment
    of the executors and the client."""
    site = generate_site(pages, links_per_page=5, seed=seed)
    server = site_server(site, latency=latency)
    grid = Grid(tmp_path)
    grid.start_manager(*manager_args, env=manager_env)
    procs = {}
    for name, threads in (executors or {"victim": 4, "survivor": 2}).items():
        procs[name] = grid.start_executor(name, "--threads", str(threads), env=peer_env)
    started = time.monotonic()
    client = grid.start_client(server.url("/"), env=peer_env)
    return site, server, grid, procs, client, started


def test_kill_9_executor_mid_crawl(tmp_path, site_server):
    site, server, grid, procs, client, started = start_crawl(tmp_path, site_server)
    try:
        wait_for(lambda: visited(grid) >= 20, 60, message="20 pages")
        wait_for(lambda: grid.query("manager", "SELECT COUNT(*) FROM attempt a JOIN executor e ON "
                                    "e.executor_id = a.executor_id WHERE e.name = 'victim' AND "
                                    "a.outcome = 'running'")[0][0] > 0, 30, 0.02, "victim holding work")
        procs["victim"].kill()
        killed = time.monotonic()
        wait_for(lambda: executor_connected(grid, "victim") is False, 15, 0.02, "victim disconnected")
        detected = time.monotonic() - killed
        server.latency = 0.01  # the disruption is over: the survivor's 2 threads need not crawl the rest slowly
        assert client.wait(timeout=120) == 0, grid.log("client.log")
        finished = time.monotonic() - killed
    finally:
        grid.stop()
    check_complete(grid, server, site, "kill -9 executor", detect_s=detected, finish_after_kill_s=finished)
    assert grid.query("manager", "SELECT is_connected FROM executor WHERE name = 'victim'") == [(0,)]
    # every thread the victim lost was run again, to the end, by the survivor
    retried = grid.query("manager", """
        SELECT a.internal_thread_id,
               (SELECT COUNT(*) FROM attempt b JOIN executor s ON s.executor_id = b.executor_id
                 WHERE b.internal_thread_id = a.internal_thread_id AND s.name = 'survivor'
                   AND b.outcome = 'finished' AND b.time_assigned >= a.time_assigned)
        FROM attempt a JOIN executor e ON e.executor_id = a.executor_id
        WHERE e.name = 'victim' AND a.outcome = 'lost'""")
    assert retried and all(n == 1 for _, n in retried), retried


def test_sigstop_beyond_liveness_then_sigcont_fences_late_results(tmp_path, site_server):
    site, server, grid, procs, client, started = start_crawl(tmp_path, site_server, latency=0.2, pages=100)
    victim = procs["victim"]
    try:
        wait_for(lambda: visited(grid) >= 10, 60, message="10 pages")
        victim.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        wait_for(lambda: executor_connected(grid, "victim") is False, 15, 0.02, "victim declared dead")
        detected = time.monotonic() - stopped
        victim.send_signal(signal.SIGCONT)
        wait_for(lambda: executor_connected(grid, "victim") is True, 20, 0.05, "victim registered again")
        server.latency = 0.02  # the disruption is over: the rest of the crawl need not be slow
        assert client.wait(timeout=120) == 0, grid.log("client.log")
        finished = time.monotonic() - stopped
    finally:
        victim.send_signal(signal.SIGCONT)
        grid.stop()
    fenced = grid.query("manager", "SELECT COUNT(*) FROM attempt WHERE outcome = 'fenced'")[0][0]
    # the victim's late results are fenced at the manager (sent before it noticed its manager's
    # silence, or after it registered again: it no longer drops them), never applied
    check_complete(grid, server, site, "SIGSTOP executor", detect_s=detected, finish_after_stop_s=finished,
                   fenced=fenced)
    assert fenced >= 1, grid.log("manager.log")[-3000:]


def test_kill_9_manager_and_restart_on_the_same_database(tmp_path, site_server):
    # the executors and the client try the new manager every 0.25-0.5 s, not after a 1-2 s back-off
    site, server, grid, procs, client, started = start_crawl(
        tmp_path, site_server, pages=200,
        peer_env={"GRIDCRAWL_RECONNECT_INITIAL": "0.25", "GRIDCRAWL_RECONNECT_MAX": "0.5"})
    try:
        wait_for(lambda: visited(grid) >= 30, 60, message="30 pages")
        grid.manager.kill()
        grid.manager.wait()
        killed = time.monotonic()
        time.sleep(0.5)
        grid.start_manager()
        wait_for(lambda: grid.log("manager.log").count("registered:") >= 4, 30, 0.05, "executors re-registered")
        rejoined = time.monotonic() - killed
        server.latency = 0.01  # the disruption is over: the rest of the crawl need not be slow
        assert client.wait(timeout=120) == 0, grid.log("client.log")
        finished = time.monotonic() - killed
    finally:
        grid.stop()
    check_complete(grid, server, site, "kill -9 manager", executors_back_after_s=rejoined,
                   finish_after_kill_s=finished)
    assert "reattached" in grid.log("client.log")


def test_a_manager_restarted_while_requests_are_under_way_keeps_their_hosts_slots(tmp_path, site_server):
    """The manager is killed (kill -9) while executor ex1 has two requests of a host whose limit
    is 2 under way at the server (5 s each), and started again on the same database; ex2 joins
    while ex1 is stopped (SIGSTOP: it has not come back yet). ex1's requests go on at the server,
    so the new manager keeps their slots (restored from the attempts recorded as running) until
    their late results come or they can no longer be running (thread_timeout 8 s): ex2 starts
    nothing of the host meanwhile. Before, the new manager knew nothing of them and sent ex2
    more at once: 3 requests at once at the host."""
    site = generate_site(40, links_per_page=5, seed=29)
    server = site_server(site, latency=0.3)
    grid = Grid(tmp_path)
    env = {"GRIDCRAWL_RECONNECT_INITIAL": "0.25", "GRIDCRAWL_RECONNECT_MAX": "0.5"}
    ex1 = None
    try:
        grid.start_manager("--concurrent-requests-per-host", "2", "--thread-timeout", "8")
        ex1 = grid.start_executor("ex1", "--threads", "2", env=env)
        client = grid.start_client(server.url("/"), env=env)
        wait_for(lambda: visited(grid) >= 3, 60, message="3 pages")
        server.latency = 5.0
        time.sleep(1.0)  # the quick requests ended, two of 5 s are under way (ex1's)
        wait_for(lambda: grid.query("manager", "SELECT COUNT(*) FROM attempt WHERE outcome = 'running' "
                                               "AND time_started IS NOT NULL")[0][0] >= 2, 30, 0.05,
                 "two attempts recorded as running")
        ex1.send_signal(signal.SIGSTOP)
        grid.manager.kill()
        grid.manager.wait()
        killed = time.monotonic()
        server.reset()  # the peak from now on: the two under way count
        grid.start_manager("--concurrent-requests-per-host", "2", "--thread-timeout", "8")
        grid.start_executor("ex2", "--threads", "2", env=env)
        wait_for(lambda: grid.log("manager.log").count("registered:") >= 2, 30, 0.05, "ex2 registered")
        wait_for(lambda: "reattached" in grid.log("client.log"), 30, 0.05, "the client reattached")
        time.sleep(max(0.0, killed + 4.5 - time.monotonic()))  # until ex1's two requests end
        peak = server.max_concurrency()
        ex1.send_signal(signal.SIGCONT)
        server.latency = 0.02
        assert client.wait(timeout=120) == 0, grid.log("client.log")
    finally:
        if ex1 is not None:
            ex1.send_signal(signal.SIGCONT)
        grid.stop()
    check_complete(grid, server, site, "kill -9 manager mid-fetch", peak_in_flight=peak)
    assert peak <= 2, f"{peak} requests at once at a host whose limit is 2"


def test_kill_9_client_and_start_a_new_one(tmp_path, site_server):
    site, server, grid, procs, client, started = start_crawl(tmp_path, site_server, pages=200)
    try:
        wait_for(lambda: visited(grid) >= 30, 60, message="30 pages")
        client.kill()
        client.wait()
        killed = time.monotonic()
        time.sleep(1.0)  # results keep arriving at the manager while no client listens
        second = grid.start_client()
        server.latency = 0.01  # the disruption is over: the rest of the crawl need not be slow
        assert second.wait(timeout=120) == 0, grid.log("client.log")
        finished = time.monotonic() - killed
    finally:
        grid.stop()
    check_complete(grid, server, site, "kill -9 client", finish_after_kill_s=finished)
    apps = grid.query("manager", "SELECT COUNT(*) FROM application")
    assert apps == [(1,)], "the new client must reattach to the same application"


def test_kill_9_client_past_the_detached_timeout_and_start_a_new_one(tmp_path, site_server):
    """The client stays away longer than the manager's detached_timeout: the manager cancels its
    application and drops what it held; the new client goes on as a new application, submits
    again what it had in flight, and loses nothing — in the crawl database, and in the manager's
    records (it reopened the cancelled application once: its threads submitted again had the ids
    of the cancelled ones' rows, whose records were then dropped)."""
    site, server, grid, procs, client, started = start_crawl(
        tmp_path, site_server, pages=200, manager_env={"GRIDCRAWL_DETACHED_TIMEOUT": "2"})
    try:
        wait_for(lambda: visited(grid) >= 30, 60, message="30 pages")
        client.kill()
        client.wait()
        killed = time.monotonic()
        wait_for(lambda: "(detached_timeout): cancelled" in grid.log("manager.log"), 20,
                 message="the manager cancelling the application")
        wait_for(lambda: grid.query("manager", "SELECT state FROM application") == [(int(ApplicationState.STOPPED),)],
                 10, message="the application recorded stopped")
        assert grid.query("manager", "SELECT COUNT(*) FROM thread WHERE state != ?", int(ThreadState.DEAD)) == [(0,)]
        second = grid.start_client()
        server.latency = 0.01  # the disruption is over: the rest of the crawl need not be slow
        assert second.wait(timeout=120) == 0, grid.log("client.log")
        finished = time.monotonic() - killed
    finally:
        grid.stop()
    check_complete(grid, server, site, "kill -9 client past detached_timeout", finish_after_kill_s=finished)
    assert grid.query("manager", "SELECT COUNT(*) FROM application") == [(2,)], "a new application"
    assert "stopped with grid threads not done (cancelled" in grid.log("manager.log")
    # every page the crawl visited has its thread row, each attempt its thread
    (visits,), = grid.query("crawl", "SELECT COUNT(*) FROM visited_url")
    (threads,), = grid.query("manager", "SELECT COUNT(DISTINCT url) FROM thread WHERE time_finished IS NOT NULL")
    assert threads >= visits, (threads, visits)
    assert grid.query("manager", "SELECT COUNT(*) FROM attempt a LEFT JOIN thread t "
                      "ON t.internal_thread_id = a.internal_thread_id WHERE t.internal_thread_id IS NULL") == [(0,)]


def test_url_that_crashes_executors_is_failed_as_poison(tmp_path, site_server):
    site = generate_site(60, links_per_page=4, seed=5)
    site.pages["/p/crash.html"] = b"<html><body>boom</body></html>"
    site.types["/p/crash.html"] = "text/html"
    site.pages["/"] = site.pages["/"].replace(b"</body>", b'<a href="/p/crash.html">crash</a></body>')
    server = site_server(site, latency=0.02)
    grid = Grid(tmp_path)
    crash_env = {"GRIDCRAWL_TEST_CRASH_ON": "/p/crash.html"}
    restarts = 0
    try:
        grid.start_manager("--prefetch", "0", "--max-attempts", "3")
        live = [grid.start_executor(f"ex{i}", "--threads", "1", env=crash_env) for i in range(2)]
        client = grid.start_client(server.url("/"))
        deadline = time.monotonic() + 120
        while client.poll() is None and time.monotonic() < deadline:
            for i, proc in enumerate(live):  # a service manager restarting crashed executors
                if proc.poll() is not None:
                    restarts += 1
                    live[i] = grid.start_executor(f"ex{i}-r{restarts}", "--threads", "1", env=crash_env)
            time.sleep(0.05)
        assert client.wait(timeout=5) == 0, grid.log("client.log")
    finally:
        grid.stop()
    crash_url = canonical_url(server.url("/p/crash.html"))
    row = grid.query("crawl", "SELECT error_kind, attempts FROM visited_url WHERE url = ?", crash_url)
    assert row == [("poison", 3)], row
    assert restarts == 3 and server.count("/p/crash.html") == 0  # it died before fetching, each time
    expected = {canonical_url(server.url(p)) for p in reachable(site)} - {crash_url}
    urls = [r[0] for r in grid.query("crawl", "SELECT url FROM document")]
    assert len(urls) == len(set(urls)) and set(urls) == expected
    print(f"\n[poison URL] executors crashed={restarts}, pages={len(expected)}, lost=0, duplicates=0")


def test_executor_cut_off_the_network_then_healed(tmp_path, site_server):
    site = generate_site(150, links_per_page=5, seed=13)
    server = site_server(site, latency=0.05)
    grid = Grid(tmp_path)
    link = CuttableLink(("127.0.0.1", grid.port))
    try:
        grid.start_manager()
        grid.start_executor("cut", "--threads", "4", manager=link.endpoint)
        grid.start_executor("steady", "--threads", "2")
        client = grid.start_client(server.url("/"))
        wait_for(lambda: visited(grid) >= 20, 60, message="20 pages")
        link.cut()
        cut_at = time.monotonic()
        wait_for(lambda: executor_connected(grid, "cut") is False, 15, 0.02, "cut executor declared dead")
        detected = time.monotonic() - cut_at
        time.sleep(1.0)
        link.heal()
        wait_for(lambda: grid.log("cut.log").count("registered as executor") >= 2, 30, 0.05, "re-registration")
        back = time.monotonic() - cut_at
        server.latency = 0.01  # the disruption is over: the rest of the crawl need not be slow
        assert client.wait(timeout=120) == 0, grid.log("client.log")
    finally:
        link.close()
        grid.stop()
    check_complete(grid, server, site, "network cut", detect_s=detected, registered_again_after_s=back)


def test_every_program_exits_within_5_s_of_sigterm_with_work_in_flight(tmp_path, site_server):
    site = generate_site(100, links_per_page=5, seed=17)
    server = site_server(site, latency=0.05)  # 0.5 s once the crawl is under way (slow_from_now)
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "4")
        grid.start_executor("ex2", "--threads", "4")
        grid.start_client(server.url("/"))
        wait_for(lambda: visited(grid) >= 5, 60, message="5 pages")
        slow_from_now(server)
        timings = {}
        for proc in grid.processes:
            proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        for proc in grid.processes:
            proc.wait(timeout=10)
            timings[proc.args[2]] = max(timings.get(proc.args[2], 0.0), time.monotonic() - sent)
    finally:
        grid.stop()
    print(f"\n[SIGTERM] exit seconds: {timings}")
    assert all(seconds < 5 for seconds in timings.values()), timings
    assert all(proc.returncode is not None for proc in grid.processes)


def test_gridcrawl_run_exits_on_sigterm_without_orphans(tmp_path, site_server):
    site = generate_site(100, links_per_page=5, seed=19)
    server = site_server(site, latency=0.05)  # 0.5 s once the crawl is under way (slow_from_now)
    proc = subprocess.Popen([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "2",
                             "--workdir", str(tmp_path), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: len(psutil.Process(proc.pid).children()) == 3, 30, 0.05, "manager and 2 executors")
        wait_for(lambda: server.requests and len(server.requests) >= 5, 30, 0.05, "the crawl under way")
        slow_from_now(server)  # work in flight
        children = psutil.Process(proc.pid).children(recursive=True)  # the manager's record writer too
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        proc.wait(timeout=15)
        elapsed = time.monotonic() - sent
        gone, alive = psutil.wait_procs(children, timeout=1)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"\n[SIGTERM gridcrawl run] exited after {elapsed:.2f} s, orphans={len(alive)}")
    assert not alive, [p.pid for p in alive]
    assert elapsed < 5


def test_a_ctrl_c_while_gridcrawl_run_forks_its_executors_stops_the_run(tmp_path, site_server):
    """A SIGINT that landed in os.fork's after-fork hook was swallowed as an "Exception ignored"
    KeyboardInterrupt: the crawl went on to its end, and once the logging lock it left held hung
    the run after its summary. Held during the forks, it stops the run once they are done."""
    site = generate_site(200, links_per_page=5, seed=23)
    server = site_server(site, latency=0.2)
    proc = subprocess.Popen([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "24",
                             "--workdir", str(tmp_path), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # the moment the forks are under way: the manager is up, executors are being forked
        wait_for(lambda: len(psutil.Process(proc.pid).children()) >= 4, 30, 0.005, "the forks under way")
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (130, -signal.SIGINT), stderr[-3000:]  # ended by the Ctrl-C
    assert "Exception ignored" not in stderr and "Traceback" not in stderr, stderr[-3000:]
    assert len(server.requests or []) < len(site.pages), "the crawl ran to its end"
    gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, [p.pid for p in alive]


def test_kill_9_of_gridcrawl_run_takes_its_manager_and_executors_with_it(tmp_path, site_server):
    """Before: the manager and executors of a ``kill -9``'d ``gridcrawl run`` ran for ever (and
    the next run started a second manager on the same manager.db)."""
    site = generate_site(100, links_per_page=5, seed=23)
    server = site_server(site, latency=0.05)  # 0.5 s once the crawl is under way (slow_from_now)
    proc = subprocess.Popen([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "2",
                             "--workdir", str(tmp_path), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children = []
    try:
        wait_for(lambda: len(psutil.Process(proc.pid).children()) == 3, 30, 0.05, "manager and 2 executors")
        wait_for(lambda: server.requests and len(server.requests) >= 5, 30, 0.05, "the crawl under way")
        slow_from_now(server)  # work in flight
        children = psutil.Process(proc.pid).children(recursive=True)  # the manager's record writer too
        names = sorted(child.name() for child in children)
        proc.kill()
        proc.wait()
        killed = time.monotonic()
        gone, alive = psutil.wait_procs(children, timeout=15)
        elapsed = time.monotonic() - killed
    finally:
        for child in children:
            if child.is_running():
                child.kill()
    print(f"\n[kill -9 gridcrawl run] children={len(children)}, gone after {elapsed:.2f} s, orphans={len(alive)}")
    assert names == ["gc-executor-1", "gc-executor-2", "gc-manager", "gc-recorder"] and not alive, [p.pid for p in alive]


def test_a_manager_out_of_reach_is_not_blamed_on_the_hosts_after_the_client_reattaches(tmp_path, site_server):
    """After the manager was out of reach (stopped here past every peer's liveness), the client
    reattached and at once warned "no result for N s … they wait for their hosts": the silence
    it measured was the manager's, not the hosts'. It counts from the reattach now. (Pages take
    3 s from a second before the outage on: the quick pages' results are acknowledged before it,
    the slow ones under way finish after the executor reconnected (0.1 s after it missed the
    manager) and are dropped, so the manager holds no result to send at the reattach, and none
    comes in the first seconds after it.)"""
    # the client blames the hosts after 2 × 2.5 s without results (its download_timeout: the
    # executor's stays the default 30 s, so that no 3 s page runs into it)
    site = generate_site(60, links_per_page=5, seed=5)
    server = site_server(site, latency=0.2)
    grid = Grid(tmp_path)
    manager = grid.start_manager()
    grid.start_executor("ex", "--threads", "4", env={"GRIDCRAWL_RECONNECT_INITIAL": "0.1"})
    client = grid.start_client(server.url("/"), env={"GRIDCRAWL_DOWNLOAD_TIMEOUT": "2.5"})
    try:
        wait_for(lambda: visited(grid) >= 10, 60, message="10 pages")
        server.latency = 3.0
        time.sleep(1.0)  # the quick pages' results applied and acknowledged
        manager.send_signal(signal.SIGSTOP)
        time.sleep(5)  # 6 s without a result by the reattach: past the 5 s after which the hosts are blamed
        manager.send_signal(signal.SIGCONT)
        wait_for(lambda: "reattached" in grid.log("client.log"), 30, 0.1, "the client reattached")
        time.sleep(1)
        server.latency = 0.02
        assert client.wait(timeout=120) == 0, grid.log("client.log")
    finally:
        manager.send_signal(signal.SIGCONT)
        grid.stop()
    check_complete(grid, server, site, "SIGSTOP manager 5 s")
    log = grid.log("client.log")
    assert "no answer from the manager at" in log, log[-3000:]
    assert "they wait for their hosts" not in log, log[-3000:]


def test_an_executor_declared_dead_mid_fetch_keeps_the_hosts_slots_until_its_fetches_can_have_ended(tmp_path, site_server):
    """Executor ex1 is stopped (SIGSTOP: a loaded machine, late heartbeats) with two requests of
    a host whose limit is 2 under way at the server (4 s each); the manager declares it dead and
    queues its threads again, and ex2 joins. ex1's requests go on at the server, so the manager
    keeps their slots: ex2 starts nothing of the host until they can have ended (the manager's
    thread_timeout, 6 s from their start, bounds ex1's request window). Before, their slots were
    free at the take-back and ex2 sent more at once: 3 requests at once at the host (3 runs of 3)."""
    site = generate_site(40, links_per_page=5, seed=23)
    server = site_server(site, latency=0.3)
    grid = Grid(tmp_path)
    try:
        grid.start_manager("--concurrent-requests-per-host", "2", "--thread-timeout", "6")
        ex1 = grid.start_executor("ex1", "--threads", "2")
        client = grid.start_client(server.url("/"))
        wait_for(lambda: visited(grid) >= 3, 60, message="3 pages")
        server.latency = 4.0
        time.sleep(1.0)  # the quick requests ended, two of 4 s are under way (ex1's)
        ex1.send_signal(signal.SIGSTOP)
        server.reset()  # the peak from now on: the two under way count
        grid.start_executor("ex2", "--threads", "2")
        wait_for(lambda: executor_connected(grid, "ex1") is False, 15, 0.05, "ex1 declared dead")
        wait_for(lambda: executor_connected(grid, "ex2"), 15, 0.05, "ex2 registered")
        time.sleep(6.0)  # ex1's slots held, then free: ex2 fetches the host's pages
        peak = server.max_concurrency()
        ex1.send_signal(signal.SIGCONT)
        server.latency = 0.02
        assert client.wait(timeout=120) == 0, grid.log("client.log")
    finally:
        ex1.send_signal(signal.SIGCONT)
        grid.stop()
    check_complete(grid, server, site, "SIGSTOP executor mid-fetch", peak_in_flight=peak)
    assert peak <= 2, f"{peak} requests at once at a host whose limit is 2"
