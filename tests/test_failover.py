"""Hot-standby managers (issue: a manager that fails over): two real managers on one database,
three executors and a client that know both; the active manager is killed, paused past its lease
or replaced, and the crawl still stores every page exactly once.

Run with ``pytest -s`` to see the take-over times.
"""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from grid import FAST, Grid, free_port, wait_for
from sites import generate_site, reachable

pytestmark = pytest.mark.e2e

LIVENESS = 0.25 * 3  # FAST heartbeats: interval 0.25 s x liveness 3 = the lease


class Managers:
    """Two (or more) managers sharing :attr:`grid`'s manager database, each with its own endpoint,
    journal and log (``manager-A.log`` ...)."""

    def __init__(self, grid: Grid, shared_journal: bool = False) -> None:
        self.grid = grid
        self.shared_journal = shared_journal  # one journal path for all, as two standbys beside one SQLite file
        self.endpoints = {name: f"tcp://127.0.0.1:{free_port()}" for name in "AB"}
        self.procs: dict[str, object] = {}

    def start(self, name: str, standby: bool = True, db: str | None = None):
        # a lease of 1.5 s (not 0.75 s, interval x liveness) so that a manager starved of CPU on a
        # loaded test machine is not taken over while it runs; a dead holder on this host is seen
        # at once anyway
        args = ["--bind", self.endpoints[name], "--db", db or self.grid.manager_db, *FAST, "--lease-seconds", "1.5",
                "--journal", str(self.grid.workdir / f"manager-{'' if self.shared_journal else name}.journal")]
        proc = self.grid._spawn("gridcrawl.manager", args + (["--standby"] if standby else []), f"manager-{name}.log",
                                {"GRIDCRAWL_TEST_PAUSE": str(self.pause_flag(name))})
        self.procs[name] = proc
        return proc

    def start_pair(self, b_db: str | None = None) -> None:
        """Start manager A and wait until it is active, then B (on ``b_db``, default the grid's
        manager database) and wait until it is a standby."""
        self.start("A")
        wait_for(lambda: "manager active" in self.grid.log("manager-A.log"), 30, 0.05, "manager A active")
        self.start("B", db=b_db)
        wait_for(lambda: "standby manager" in self.grid.log("manager-B.log"), 30, 0.05, "manager B standby")

    def pause_flag(self, name: str) -> Path:
        """The file that makes manager ``name`` stop itself (SIGSTOP) at a chosen point: write
        ``in-flush`` or ``between-transactions`` into it (tests/crashhook/sitecustomize.py)."""
        return self.grid.workdir / f"pause-{name}"

    def pause(self, name: str, where: str) -> None:
        """Have manager ``name`` stop itself at ``where`` and wait until it has."""
        self.pause_flag(name).write_text(where)
        process = psutil.Process(self.procs[name].pid)
        wait_for(lambda: process.status() == psutil.STATUS_STOPPED, 30, 0.02, f"manager {name} paused {where}")

    @property
    def all(self) -> list[str]:
        return ["--manager", ",".join(self.endpoints.values())]

    def active(self) -> str | None:
        """The name of the manager holding the lease, from the database."""
        rows = self.grid.query("manager", "SELECT address FROM manager_lease")
        for name, endpoint in self.endpoints.items():
            if rows and rows[0][0] == endpoint:
                return name
        return None

    def epoch(self) -> int:
        rows = self.grid.query("manager", "SELECT epoch FROM manager_lease")
        return int(rows[0][0]) if rows else 0


def _relayed(url: str):
    """A :class:`netcut.CuttableLink` to the database server of ``url`` and ``url`` through it:
    ``(link, relayed URL)``."""
    import sqlalchemy as sa
    from netcut import CuttableLink
    parsed = sa.engine.make_url(url)
    link = CuttableLink((parsed.host or "127.0.0.1", parsed.port or 5432))
    return link, parsed.set(host="127.0.0.1", port=link.port).render_as_string(hide_password=False)


def _visited(grid: Grid) -> int:
    """Rows of visited_url so far (0 while the client has not made its tables yet)."""
    try:
        return grid.query("crawl", "SELECT COUNT(*) FROM visited_url")[0][0]
    except Exception:
        return 0


def _utc_seconds(value) -> float:
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value.replace(tzinfo=dt.timezone.utc).timestamp()


def _start(tmp_path, site_server, manager_db=None, pages=160, latency=0.04, shared_journal=False):
    site = generate_site(pages, links_per_page=4, seed=31)
    # the site answers in 0.5 s until B is a standby, so that the crawl, started meanwhile, is
    # barely under way then (as Managers.start_pair leaves them), however long B takes to start
    server = site_server(site, latency=max(latency, 0.5))
    grid = Grid(tmp_path, manager_db=manager_db)
    managers = Managers(grid, shared_journal)
    managers.start("A")
    wait_for(lambda: "manager active" in grid.log("manager-A.log"), 30, 0.05, "manager A active")
    managers.start("B")  # the executors and the client start meanwhile: they go to A, the first they are given
    for i in range(3):
        # both managers, and no other (manager=None meant the grid's own endpoint, where no manager
        # listens: each executor waited a second there before it tried A)
        grid.start_executor(f"x{i}", "--threads", "4", manager=",".join(managers.endpoints.values()))
    client = grid._spawn("gridcrawl.client", [*managers.all, "--db", grid.crawl_db, "--no-progress", *FAST,
                                              "--no-sitemaps",  # pages only: the counts below are of pages
                                              server.url("/")], "client.log")
    wait_for(lambda: "standby manager" in grid.log("manager-B.log"), 30, 0.05, "manager B standby")
    server.latency = latency
    return site, server, grid, managers, client


def _check_complete(grid: Grid, site, client, label: str) -> None:
    assert client.wait(120) == 0, grid.log("client.log")[-3000:]
    expected = len(reachable(site))
    visited = grid.query("crawl", "SELECT COUNT(*), COUNT(DISTINCT fingerprint) FROM visited_url")[0]
    documents = grid.query("crawl", "SELECT COUNT(*) FROM document")[0][0]
    print(f"\n[{label}] pages expected {expected}, visited {visited[0]}, documents {documents}, "
          f"duplicates {visited[0] - visited[1]}")
    assert visited == (expected, expected)
    assert documents == expected


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def manager_db(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'manager.db'}"
    return request.getfixturevalue("postgres_url" if request.param == "postgresql" else "mariadb_url")


def test_kill_9_of_the_active_manager_fails_over_to_the_standby(tmp_path, site_server, manager_db):
    site, _server, grid, managers, client = _start(tmp_path, site_server, manager_db)
    try:
        wait_for(lambda: _visited(grid) >= 30, 60, 0.05,
                 "a third of the crawl")
        victim, epoch = managers.active(), managers.epoch()
        killed_at = time.time()
        managers.procs[victim].kill()
        managers.procs[victim].wait()
        wait_for(lambda: grid.query("manager", f"SELECT COUNT(*) FROM attempt WHERE epoch > {epoch}")[0][0] > 0,
                 30, 0.02, "a thread assigned by the new active manager")
        first = grid.query("manager", f"SELECT MIN(time_assigned) FROM attempt WHERE epoch > {epoch}")[0][0]
        takeover = _utc_seconds(first) - killed_at
        print(f"\n[kill -9 active manager, {manager_db.split(':')[0]}] kill to first thread assigned by the "
              f"standby: {takeover:.2f} s (goal {(3 + 1) * 0.25:.2f} s)")
        assert managers.active() not in (None, victim) and managers.epoch() == epoch + 1
        survivor = managers.active()
        _check_complete(grid, site, client, "kill -9 active manager")
        assert "taking over as the active manager" in grid.log(f"manager-{survivor}.log")
    finally:
        grid.stop()


def test_a_paused_active_manager_is_fenced_and_becomes_a_standby(tmp_path, site_server, manager_db):
    site, _server, grid, managers, client = _start(tmp_path, site_server, manager_db, pages=200)
    try:
        wait_for(lambda: _visited(grid) >= 20, 60, 0.05,
                 "the crawl under way")
        victim, epoch = managers.active(), managers.epoch()
        # its records of them written: 20 pages can come within one record_interval (0.5 s), and
        # a pause before the first write left no attempt of epoch 1 to check below
        wait_for(lambda: grid.query("manager", f"SELECT COUNT(*) FROM attempt WHERE epoch = {epoch}")[0][0] > 0,
                 30, 0.05, "attempts recorded under the first epoch")
        a = managers.procs[victim]
        # PostgreSQL and MariaDB: paused inside the recorder's fenced transaction, holding the lease
        # row's lock (that transaction is ended: docs/reliability.md, "Failover when the active
        # manager hangs inside a transaction"); SQLite has nothing to end it (its write lock stays
        # with the paused process), so there the pause falls between transactions
        where = "between-transactions" if manager_db.startswith("sqlite") else "in-flush"
        managers.pause(victim, where)
        try:
            wait_for(lambda: managers.epoch() == epoch + 1, 30, 0.05, "the standby taking the lease")
            taken = time.time()
            wait_for(lambda: _visited(grid) >= 60, 60, 0.05,
                     "the crawl going on under manager B")
        finally:  # the manager and its record writer process
            for process in [psutil.Process(a.pid), *psutil.Process(a.pid).children()]:
                process.send_signal(signal.SIGCONT)
        log = f"manager-{victim}.log"
        # (not "fenced out a late result of attempt ...", which a loaded machine's executors,
        # declared dead and back, may have made it log before the pause)
        fenced = "fenced out: another manager took the lease over"
        wait_for(lambda: fenced in grid.log(log), 30, 0.05, "the paused manager fenced")
        wait_for(lambda: "standby manager" in grid.log(log).split(fenced)[-1], 30, 0.05,
                 "the paused manager a standby again")
        # one account of what was dropped, and no word of stopping (its log said "this manager
        # stops", "20 records ... dropped" and "0 unwritten records dropped" in turn)
        dropped = [line for line in grid.log(log).splitlines() if "dropped" in line]
        assert len(dropped) == 1 and "unwritten records dropped; now a standby" in dropped[0], dropped
        # its database was never down: the batch it was writing when paused failed because the
        # standby ended its session, and that is the take-over, not "writing records failed ...;
        # retrying every 2.5 s", an ERROR that blamed the database
        assert "writing records failed" not in grid.log(log), grid.log(log)[-3000:]
        assert "stops" not in grid.log(log).split("manager active")[-1]
        _check_complete(grid, site, client, "SIGSTOP active manager past its lease")
        # nothing manager A tried to write after the take-over landed: every attempt of epoch 1 was
        # assigned before B took over, and A holds no lease
        last_old = grid.query("manager", f"SELECT MAX(time_assigned) FROM attempt WHERE epoch <= {epoch}")[0][0]
        assert _utc_seconds(last_old) < taken
        assert managers.active() not in (None, victim) and a.poll() is None
    finally:
        grid.stop()


def test_a_paused_manager_that_shares_the_journal_path_leaves_the_new_one_alone(tmp_path, site_server):
    """Two standbys beside one SQLite file share its journal by default: the paused old manager,
    woken, must not move or delete the journal of the manager that took over (it once renamed
    it, and the new active manager died on its next flush)."""
    site, _server, grid, managers, client = _start(tmp_path, site_server, pages=200, shared_journal=True)
    try:
        wait_for(lambda: _visited(grid) >= 20, 60, 0.05, "the crawl under way")
        victim, epoch = managers.active(), managers.epoch()
        other = "B" if victim == "A" else "A"
        a = managers.procs[victim]
        managers.pause(victim, "between-transactions")
        try:
            wait_for(lambda: managers.epoch() == epoch + 1, 30, 0.05, "the standby taking the lease")
            wait_for(lambda: _visited(grid) >= 60, 60, 0.05, "the crawl going on under the other manager")
        finally:
            for process in [psutil.Process(a.pid), *psutil.Process(a.pid).children()]:
                process.send_signal(signal.SIGCONT)
        wait_for(lambda: "fenced out: another manager took the lease over" in grid.log(f"manager-{victim}.log"), 30,
                 0.05, "the paused manager fenced")
        _check_complete(grid, site, client, "SIGSTOP active manager, one journal path")
        assert managers.procs[other].poll() is None, grid.log(f"manager-{other}.log")[-3000:]
        assert managers.active() == other
        for name in (victim, other):
            assert "Traceback" not in grid.log(f"manager-{name}.log"), grid.log(f"manager-{name}.log")[-3000:]
    finally:
        grid.stop()


def test_the_crawl_survives_two_take_overs(tmp_path, site_server):
    # slow pages once the crawl is under way (0.25 s each, at most 8 at a time per host: >= 12 s of
    # crawl), so that the crawl is still under way when the first manager is a standby again,
    # however loaded the machine
    site, server, grid, managers, client = _start(tmp_path, site_server, pages=400, latency=0.04)
    try:
        wait_for(lambda: _visited(grid) >= 20, 60, 0.05, "under way")
        server.latency = 0.25
        first, epoch = managers.active(), managers.epoch()
        wait_for(lambda: grid.query("manager", f"SELECT COUNT(*) FROM attempt WHERE epoch = {epoch}")[0][0] > 0,
                 30, 0.05, "attempts recorded under the first epoch")
        managers.procs[first].kill()
        wait_for(lambda: managers.epoch() == epoch + 1, 30, 0.05, "the standby taking over")
        second = managers.active()
        assert second not in (None, first)
        managers.start(first)  # the first manager comes back, as a standby
        wait_for(lambda: grid.log(f"manager-{first}.log").count("standby manager") >= 1, 30, 0.05, "a standby again")
        # it names the manager it waits for (it said only "waiting for the lease")
        assert (f"standby manager at {managers.endpoints[first]}: waiting for the lease, held by the manager pid "
                f"{managers.procs[second].pid} on ") in grid.log(f"manager-{first}.log")
        assert f"at {managers.endpoints[second]} (lease epoch {epoch + 1})" in grid.log(f"manager-{first}.log")
        wait_for(lambda: _visited(grid) >= 80, 60, 0.05, "more")
        managers.procs[second].kill()
        wait_for(lambda: managers.epoch() == epoch + 2, 30, 0.05, "the first manager taking over again")
        assert managers.active() == first
        server.latency = 0.02  # the disruption is over: the rest of the crawl need not be slow
        _check_complete(grid, site, client, "two take-overs")
        report = subprocess.run([sys.executable, "-m", "gridcrawl", "report", "--db", grid.manager_db],
                                capture_output=True, text=True, timeout=60)
        assert f"manager {managers.endpoints[first]}: active, lease epoch {epoch + 2}, since" in report.stdout, \
            report.stdout
        epochs = dict(grid.query("manager", "SELECT epoch, COUNT(*) FROM attempt GROUP BY epoch"))
        assert {epoch, epoch + 1, epoch + 2} <= set(epochs), epochs  # which manager assigned each attempt
    finally:
        grid.stop()


def test_two_managers_started_at_once_on_an_empty_database_make_one_active(tmp_path):
    grid = Grid(tmp_path)
    managers = Managers(grid)
    try:
        managers.start("A")
        managers.start("B")
        wait_for(lambda: all("standby manager" in grid.log(f"manager-{n}.log") or "manager active" in
                             grid.log(f"manager-{n}.log") for n in "AB"), 30, 0.05, "both managers up")
        time.sleep(LIVENESS * 2)  # a second manager must not take a live lease
        active = [n for n in "AB" if "manager active" in grid.log(f"manager-{n}.log")]
        assert len(active) == 1, (grid.log("manager-A.log")[-2000:], grid.log("manager-B.log")[-2000:])
        assert managers.active() == active[0] and managers.epoch() == 1
    finally:
        grid.stop()


def test_a_database_outage_longer_than_the_lease_moves_no_active_role(tmp_path, postgres_url):
    """Two real managers on PostgreSQL, each through a relay of its own whose link is cut for two
    lease lengths (a database that hangs, then answers): neither could renew nor read meanwhile,
    so the expiry says nothing of the active one. The standby used to take over at the first
    moment the database answered, and the active manager, fenced, dropped the work it held (on
    the Python docs a third of the pages were fetched twice); now it gives the holder one lease
    length to renew, and the active manager stays. The standby's link heals first, the active
    one's once the standby has read the expired lease: the order in which the old take-over
    happened (with both healed at once, the holder's renewal often came first, and hid it)."""
    link, relayed = _relayed(postgres_url)
    link_b, relayed_b = _relayed(postgres_url)
    grid = Grid(tmp_path, manager_db=relayed)
    managers = Managers(grid)
    try:
        managers.start_pair(b_db=relayed_b)
        epoch = managers.epoch()
        time.sleep(1.0)
        link.cut()
        link_b.cut()
        time.sleep(2 * 1.5)  # two lease lengths (Managers.start: --lease-seconds 1.5): the lease expired
        link_b.heal()
        wait_for(lambda: any(said in grid.log("manager-B.log") for said in ("answers again", "taking over")),
                 30, 0.02, "the standby reading the database again")
        link.heal()
        time.sleep(1.5 + 0.5)  # past the lease length the holder has to renew: a take-over, were there one
        assert "taking over" not in grid.log("manager-B.log"), grid.log("manager-B.log")[-2000:]
        assert managers.epoch() == epoch and managers.active() == "A"
        assert "fenced" not in grid.log("manager-A.log")
        assert "the database answers again" in grid.log("manager-B.log")
        assert managers.procs["A"].poll() is None and managers.procs["B"].poll() is None
    finally:
        grid.stop()
        link.close()
        link_b.close()


def test_a_client_sent_to_a_manager_that_opens_a_new_application_says_so(tmp_path):
    """A walkthrough listed another grid's manager in --manager by mistake: after a failover the
    client went there, that manager (its database does not hold the application) opened a new
    one, and the crawl went on as it with nothing but an INFO "application … opened" — its
    records split over two databases, the first grid's application left waiting. Two scripted
    managers: A opens app-1 and falls silent after the first submit, B opens app-2."""
    import zmq
    from gridcrawl import protocol as p
    context = zmq.Context()
    routers, endpoints = {}, {}
    for name in "AB":
        routers[name] = context.socket(zmq.ROUTER)
        routers[name].setsockopt(zmq.LINGER, 0)
        port = routers[name].bind_to_random_port("tcp://127.0.0.1")
        endpoints[name] = f"tcp://127.0.0.1:{port}"
    client = subprocess.Popen([sys.executable, "-m", "gridcrawl.client", "http://127.0.0.1:9/", "--manager",
                               f"{endpoints['A']},{endpoints['B']}", "--db", f"sqlite:///{tmp_path / 'crawl.db'}",
                               "--no-progress", "--no-sitemaps", *FAST],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    poller = zmq.Poller()
    for router in routers.values():
        poller.register(router, zmq.POLLIN)
    try:
        deadline, closed, a_silent = time.monotonic() + 60, False, False
        while not closed and time.monotonic() < deadline:
            for router, _ in poller.poll(100):
                name = "A" if router is routers["A"] else "B"
                peer, *frames = router.recv_multipart()
                message = p.decode(frames)
                if name == "A" and a_silent:
                    continue
                reply: list[p.Message] = []
                if isinstance(message, p.OpenApplication):
                    reply = [p.ApplicationOpened(f"app-{'1' if name == 'A' else '2'}", False, 0.25, 3)]
                elif isinstance(message, p.Submit) and name == "A":
                    a_silent = True  # A dies with the seed in flight
                elif isinstance(message, p.Submit):
                    (spec,) = message.threads
                    page = p.PageResult(url=spec.url, final_url=spec.url, status=200, content_type="text/html",
                                        title="seed", content="<html>seed</html>", size=17)
                    reply = [p.ThreadDone("app-2", [p.FinishedThread(spec.thread_id, "ex-1", 1, False, page)])]
                elif isinstance(message, p.CloseApplication):
                    closed = True
                elif isinstance(message, p.Heartbeat):
                    reply = [p.Heartbeat()]
                for m in reply:
                    router.send_multipart([peer, *p.encode(m)])
        output, _ = client.communicate(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
        for router in routers.values():
            router.close()
        context.term()
    assert client.returncode == 0 and closed, output[-2000:]
    warning = next(line for line in output.splitlines() if "was not reattached" in line)
    print(f"\n[a manager that opens a new application] {warning}")
    assert "WARNING" in warning and (f"application app-1 was not reattached: the manager at {endpoints['B']} opened "
                                     f"a new one, app-2") in warning
    assert f"is {endpoints['B']} a manager of this grid?); the crawl goes on as app-2" in warning


def test_a_take_over_with_an_empty_journal_of_an_old_epoch_warns_of_nothing(tmp_path, caplog):
    """A manager active before (its journal's epoch file says 1), a standby since, takes the lease
    over at epoch 3: its journal, empty, is stale. It logged "WARNING … 0 of its records dropped"
    at every such take-over; records dropped are still a WARNING (the journal then is not empty)."""
    import logging
    from gridcrawl import models
    from gridcrawl.db import init_schema, open_database
    from gridcrawl.manager.lease import Lease
    from gridcrawl.manager.server import ManagerServer
    from gridcrawl.settings import Settings

    engine = open_database(f"sqlite:///{tmp_path / 'manager.db'}")
    init_schema(engine, models.manager_metadata, models.manager_meta)
    Lease(engine, "elsewhere pid 1 started 1.00 tcp://m1:9000").acquire()  # epoch 1, this journal's
    other = Lease(engine, "elsewhere pid 2 started 1.00 tcp://m2:9000")
    assert other.try_acquire(now=time.time() + 100).epoch == 2  # taken over, then stopped cleanly
    other.release()
    journal = tmp_path / "manager.journal"
    journal.write_bytes(b"")
    Path(f"{journal}.epoch").write_text("1")
    with caplog.at_level(logging.INFO, logger="gridcrawl.manager"):
        server = ManagerServer(Settings(), "tcp://127.0.0.1:0", engine, journal=journal)
    try:
        assert server.lease.epoch == 3
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    finally:
        server.recorder.close()
        server.lease.release()
        server._close_sockets()
        engine.dispose()


def test_a_restored_application_keeps_the_time_it_was_created(tmp_path):
    """A manager taking over (or restarted) restored every application as created at that
    moment: after a failover the dashboard's applications all had the take-over time as
    ``time_created`` (its list is ordered by it, newest first, so the order was lost too), and a
    user refused one more application read "opened 0 s ago" of crawls started hours before."""
    from gridcrawl import models
    from gridcrawl.db import from_timestamp, init_schema, open_database
    from gridcrawl.manager.dashboard import snapshot
    from gridcrawl.manager.server import ManagerServer
    from gridcrawl.settings import Settings

    engine = open_database(f"sqlite:///{tmp_path / 'manager.db'}")
    init_schema(engine, models.manager_metadata, models.manager_meta)
    created = {"a" * 32: time.time() - 7200, "b" * 32: time.time() - 3600}  # two hours and one hour ago
    with engine.begin() as conn:
        conn.execute(models.application.insert(), [
            {"application_id": application_id, "state": 1, "time_created": from_timestamp(when),
             "usr_name": "alice", "application_name": "crawl"} for application_id, when in created.items()])
    server = ManagerServer(Settings(), "tcp://127.0.0.1:0", engine, journal=tmp_path / "manager.journal")
    try:
        shown = snapshot(server.core, time.time())["applications"]
    finally:
        server.recorder.close()
        server.lease.release()
        server._close_sockets()
        engine.dispose()
    assert [app["application_id"] for app in shown] == ["b" * 32, "a" * 32]  # newest first
    for app in shown:
        assert app["time_created"] == pytest.approx(created[app["application_id"]], abs=0.01)


def _unshare_works() -> bool:
    """Whether this machine lets a test start a program in a PID namespace of its own (root, or
    unprivileged user namespaces)."""
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _unshare_works(), reason="unshare --pid is not allowed here")
def test_a_standby_that_shares_the_host_name_but_not_the_process_ids_waits_for_the_lease(tmp_path):
    """A live holder on "this host" whose pid did not run here was taken for a dead one: two
    managers of one host name that do not see each other's processes (containers with the host's
    network and name, cloned VMs of one name) took the lease from each other at once, in turn,
    for ever (epoch 14 to 31 in 12 s, each take-over a failover). A holder names where its pid
    means it; a standby elsewhere waits for the lease to expire, as for another host's."""
    grid = Grid(tmp_path)
    managers = Managers(grid)
    unshare = None
    try:
        managers.start("A", standby=False)
        wait_for(lambda: "manager active" in grid.log("manager-A.log"), 30, 0.05, "manager A active")
        # B in a PID namespace of its own: the same host name, its own process ids
        args = ["--bind", managers.endpoints["B"], "--db", grid.manager_db, *FAST, "--lease-seconds", "1.5",
                "--journal", str(grid.workdir / "manager-B.journal"), "--standby"]
        with open(grid.workdir / "manager-B.log", "ab") as out:
            unshare = subprocess.Popen(
                ["unshare", "--pid", "--kill-child=SIGTERM", "--mount-proc", sys.executable, "-m", "gridcrawl.manager",
                 *args], stdout=out, stderr=subprocess.STDOUT)
            grid.processes.append(unshare)
        wait_for(lambda: any(said in grid.log("manager-B.log") for said in ("standby manager", "manager active")),
                 30, 0.05, "manager B started")
        time.sleep(2 * 1.5)  # two leases: A renews, B must wait
        assert managers.epoch() == 1 and "taking over" not in grid.log("manager-B.log"), grid.log("manager-B.log")
        managers.procs["A"].kill()  # a dead holder B cannot see: taken over once its lease expires
        wait_for(lambda: managers.epoch() == 2, 30, 0.05, "B taking over the expired lease")
        assert managers.active() == "B"
    finally:
        # unshare ignores SIGTERM while it waits for its child (grid.stop's SIGKILL came 5 s
        # later): B itself is stopped, and unshare ends with it
        if unshare is not None:
            try:
                for child in psutil.Process(unshare.pid).children(recursive=True):
                    child.terminate()
            except psutil.NoSuchProcess:
                pass
        grid.stop()


def test_a_standby_whose_database_refuses_it_sends_peers_to_the_active_manager(tmp_path, postgres_url):
    """The standby's own path to the database broken (its relay gone: connections refused), the
    active manager's intact: the lease as the standby last read it expired in its eyes, and it
    named itself the active manager ("it is taking over"), so an executor that asked it first
    waited there (with the service recipe's --connect-timeout of a day, for ever) while the
    active manager served; now it names the holder it last read, and the executor registers
    there."""
    link, relayed = _relayed(postgres_url)
    grid = Grid(tmp_path, manager_db=postgres_url)
    managers = Managers(grid)
    try:
        managers.start_pair(b_db=relayed)  # B reaches the database through the relay alone
        link.close()  # B's database refuses it from now on; A's answers
        wait_for(lambda: "the database does not answer" in grid.log("manager-B.log"), 30, 0.05,
                 "manager B noticing its database is gone")
        # the lease as B last read it, before that, has expired (Managers.start: --lease-seconds 1.5)
        time.sleep(1.5 + 0.5)
        grid.start_executor("x", "--manager", managers.endpoints["B"], "--manager", managers.endpoints["A"],
                            "--connect-timeout", "86400", manager=managers.endpoints["B"])
        wait_for(lambda: "registered as executor" in grid.log("x.log"), 30, 0.05,
                 f"the executor registering with A:\n{grid.log('x.log')}")
        assert f"with {managers.endpoints['A']}" in grid.log("x.log")
        assert managers.active() == "A" and managers.epoch() == 1
    finally:
        grid.stop()
        link.close()
