"""Start-up and shut-down of ``gridcrawl run`` (issue 23): the children forked from the command's
own process (Linux), and a stop that wakes a polling loop at once.

Real parts: real ZeroMQ sockets, real forked processes, a real ``gridcrawl run`` against a
generated site on 127.0.0.1. No timing is asserted (the figures are in ``benchmarks/run.py``'s
``startup`` scenario).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading

import psutil
import pytest
import zmq

from gridcrawl.cli_common import FORK, ChildWatch, ForkedChild, StopEvent
from sites import generate_site
from grid import wait_for

needs_fork = pytest.mark.skipif(not FORK, reason="gridcrawl run forks its children on Linux only")


def test_stop_event_wakes_a_zmq_poller():
    """Before: the manager and executors noticed a stop at their next poll timeout."""
    context = zmq.Context()
    sock = context.socket(zmq.PULL)
    try:
        sock.bind("tcp://127.0.0.1:*")
        stop = StopEvent()
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(stop, zmq.POLLIN)
        assert poller.poll(0) == []
        threading.Timer(0.05, stop.set).start()
        events = dict(poller.poll(60_000))  # returns when the stop is set, not after a minute
        assert stop.is_set() and stop.fileno() in events and sock not in events
    finally:
        sock.close(linger=0)
        context.term()


@needs_fork
def test_forked_program_reports_its_exit_status():
    """A forked program's user error is its exit status, as with a fresh interpreter."""
    child = ChildWatch().start("gridcrawl.executor", ["--manager", "tcp://127.0.0.1:notaport"])
    assert isinstance(child, ForkedChild)
    assert child.wait(60) == 2
    assert child.poll() == 2 and child.returncode == 2


@needs_fork
def test_gridcrawl_run_forks_named_children(tmp_path, site_server):
    """``gridcrawl run``'s manager and executors are its own forked children, named by role
    (what ps, top and the benchmark's sampler see), and it crawls with them."""
    site = generate_site(40, links_per_page=3, seed=5)
    server = site_server(site, latency=0.2)
    proc = subprocess.Popen([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "2",
                             "--workdir", str(tmp_path), "--no-progress", "--no-sitemaps"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def named_children() -> list[str]:
            return sorted(child.name() for child in psutil.Process(proc.pid).children())

        # A child is listed from its fork on, under the parent's name until its first steps name it:
        # wait until the three are named (a child never named fails here, by the timeout).
        wait_for(lambda: [n[:3] for n in named_children()] == ["gc-"] * 3, 60, 0.05, "manager and 2 executors named")
        names = named_children()
        server.latency = 0.0  # the children are seen: the rest of the crawl need not be slow
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert names == ["gc-executor-1", "gc-executor-2", "gc-manager"]
    assert proc.returncode == 0, err
    with sqlite3.connect(tmp_path / "crawl.db") as conn:
        assert conn.execute("SELECT count(*) FROM visited_url").fetchone()[0] == 40


# Optional parts a plain crawl never uses: importing them at start-up is CPU every command pays
# (issue 23; expat alone cost 15 ms of a one-page crawl's 0.5 CPU-s).
NOT_AT_STARTUP = ("pyexpat", "rdflib", "extruct", "flask", "waitress", "matplotlib", "pyspark", "playwright",
                  "warcio", "alembic", "jinja2", "pyodbc", "psycopg", "pymysql")


def test_a_plain_crawl_imports_no_optional_part(tmp_path, site_server):
    """A real one-page ``gridcrawl run`` (``-X importtime`` lists every module its processes
    import) imports none of the parts only some crawls need (RDF, the dashboard, plots, Spark,
    rendering, WARC, migrations, server drivers): they are imported where used; nor, with
    ``--no-progress``, the progress bar (``rich.progress``)."""
    server = site_server(generate_site(5, links_per_page=2, seed=3))
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "gridcrawl", "run", server.url("/"),
                           "--max-pages", "1", "--executors", "1", "--workdir", str(tmp_path), "--no-progress",
                           "--no-sitemaps"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
               if line.startswith("import time:") and line.count("|") == 2}
    imported = {name.split(".")[0] for name in modules}
    assert "sqlalchemy" in imported and "lxml" in imported and "rich.console" in modules  # read right
    assert sorted(imported & set(NOT_AT_STARTUP)) == []
    assert "rich.progress" not in modules


#: What a command that neither crawls nor opens a database has no use for.
NOT_WITHOUT_A_CRAWL = ("zmq", "msgspec", "w3lib", "sqlalchemy", "requests", "lxml")


@pytest.mark.parametrize("program, args", [
    ("gridcrawl", ["--help"]), ("gridcrawl", ["run", "--help"]), ("gridcrawl", ["config", "show"]),
    ("gridcrawl.manager", ["--help"]), ("gridcrawl.executor", ["--help"]), ("gridcrawl.client", ["--help"]),
])
def test_help_and_config_load_no_grid_library(program, args):
    """``--help`` of each program and ``gridcrawl config show`` (``-X importtime`` lists what
    they import) load neither ZeroMQ and the wire protocol nor the database layer, HTTP or HTML
    libraries: those are imported when a command runs, so help and mistakes answer at once."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", program, *args], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
               if line.startswith("import time:") and line.count("|") == 2}
    imported = {name.split(".")[0] for name in modules}
    assert "typer" in imported and "gridcrawl" in imported  # read right
    assert sorted(imported & set(NOT_WITHOUT_A_CRAWL)) == []


def test_gridcrawl_fetch_imports_no_database_layer(site_server):
    """``gridcrawl fetch`` stores nothing: a real fetch of one page (``-X importtime``) imports
    neither SQLAlchemy nor the crawl's tables (``gridcrawl.models``). The crawl's scope and
    strategy it checks the page with live apart from the crawl database's code
    (:mod:`gridcrawl.client.frontier`); through the store they cost it 0.25 s and more."""
    server = site_server(generate_site(3, links_per_page=2, seed=3))
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "gridcrawl", "fetch", server.url("/"),
                           "--allow-private", "127.0.0.0/8"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
               if line.startswith("import time:") and line.count("|") == 2}
    assert "lxml" in {name.split(".")[0] for name in modules} and "gridcrawl.checker" in modules  # read right
    assert sorted(m for m in modules if m.split(".")[0] == "sqlalchemy" or m == "gridcrawl.models")[:3] == []
