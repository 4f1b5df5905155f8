"""Capability-based dispatch with real processes: a manager, an executor without the test
plugin and (later) one with it, and the test itself as the application on a real DEALER socket.
Threads that need the plugin wait, visibly, while only the plain executor is connected, without
holding up the plain threads; once the plugin's executor joins they run there and nowhere else."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
import zmq

from gridcrawl import protocol as p
from gridcrawl.settings import Settings
from gridcrawl.transport import make_socket, send
from grid import Grid, wait_for
from plugins import PLUGIN_NAME, PLUGIN_VERSION, plugin_env
from sites import generate_site

pytestmark = pytest.mark.e2e


def receive_done(sock, want: int, timeout: float, app: str | None = None) -> dict[int, p.FinishedThread]:
    """Outcomes of ``done`` messages until ``want`` threads are in (acknowledging each). With
    ``app``, first reattach to that application, as a client does after being away (the manager
    detaches a client silent for its liveness, e.g. while this test ran ``gridcrawl report``)."""
    done: dict[int, p.FinishedThread] = {}
    if app is not None:
        send(sock, p.OpenApplication("capabilities", "tester", app))
    deadline = time.monotonic() + timeout
    while len(done) < want and time.monotonic() < deadline:
        send(sock, p.Heartbeat())  # the manager detaches a silent application
        if not sock.poll(100):
            continue
        message = p.decode(sock.recv_multipart())
        if isinstance(message, p.ThreadDone):
            for outcome in message.threads:
                done[outcome.thread_id] = outcome
            send(sock, p.Ack(message.application_id, [o.thread_id for o in message.threads]))
    return done


def report(grid: Grid) -> str:
    out = subprocess.run([sys.executable, "-m", "gridcrawl", "report", "--db", grid.manager_db],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_plugin_threads_run_only_on_the_executor_that_has_the_plugin(tmp_path, site_server):
    server = site_server(generate_site(30, links_per_page=2, seed=5))
    grid = Grid(tmp_path)
    context = zmq.Context()
    sock = make_socket(context, zmq.DEALER, Settings())
    try:
        grid.start_manager()
        grid.start_executor("plain", "--threads", "2")
        sock.connect(grid.endpoint)
        send(sock, p.OpenApplication("capabilities", "tester"))
        assert sock.poll(30_000), "the manager did not answer"
        opened = p.decode(sock.recv_multipart())
        assert isinstance(opened, p.ApplicationOpened), opened
        app = opened.application_id
        need = f"plugin:{PLUGIN_NAME}"
        specs = [p.ThreadSpec(i, server.url(f"/p/{i}.html"), priority=9, needs=[need]) for i in range(1, 7)]
        specs += [p.ThreadSpec(i, server.url(f"/p/{i}.html")) for i in range(7, 13)]
        send(sock, p.Submit(app, specs))
        # the plain threads are not stuck behind the (higher-priority, same-host) plugin threads
        first = receive_done(sock, 6, 60)
        assert sorted(first) == list(range(7, 13)), sorted(first)
        wait_for(lambda: receive_done(sock, 1, 0.3, app) == {} and
                 "6 threads wait: no connected executor has plugin:testshop" in report(grid), 60,
                 interval=0.1, message="gridcrawl report to show the waiting threads")
        grid.start_executor("withplugin", "--threads", "2", env=plugin_env(tmp_path / "meta"))
        rest = receive_done(sock, 6, 60, app)
        assert sorted(rest) == list(range(1, 7)), sorted(rest)
        assert all(o.page.status == 200 for o in [*first.values(), *rest.values()])
        send(sock, p.CloseApplication(app))
        names = dict(grid.query("manager", "SELECT executor_id, name FROM executor"))
        assert {names[o.executor_id] for o in rest.values()} == {"withplugin"}
        assert {names[o.executor_id] for o in first.values()} == {"plain"}
        caps = dict(grid.query("manager", "SELECT name, capabilities FROM executor"))
        assert caps == {"plain": None, "withplugin": f"{need} {need}@{PLUGIN_VERSION}"}
        wait_for(lambda: re.search(r"\d+ threads? waits?:", report(grid)) is None, 60, interval=0.5,
                 message="no waiting threads")
    finally:
        sock.close(linger=0)
        context.term()
        grid.stop()
