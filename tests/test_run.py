"""``gridcrawl run``: the one command that starts a manager and executors and crawls."""

from __future__ import annotations

import contextlib

import os
import re
import shlex
import subprocess
import sys
import time

import pytest

from gridcrawl.words import counted
from grid import Grid, free_port, wait_for
from sites import generate_site, reachable


def test_run_starts_crawling_once_every_executor_has_registered(tmp_path, site_server):
    site = generate_site(60, links_per_page=4, seed=23)
    server = site_server(site)
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "3",
                           "--threads", "2", "--workdir", str(tmp_path), "--no-progress"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    grid = Grid(tmp_path)  # only to read the databases the run left
    # every page, and the host's /sitemap.xml (a 404: its robots.txt names no sitemap)
    assert grid.query("crawl", "SELECT count(*) FROM visited_url") == [(len(reachable(site)) + 1,)]
    assert grid.query("manager", "SELECT count(*) FROM executor") == [(3,)]
    # the first grid thread was submitted after the last executor registered: the crawl starts on
    # the whole grid, not on whichever executor finished starting first
    ((registered, submitted),) = grid.query(
        "manager", "SELECT (SELECT max(julianday(time_registered)) FROM executor), "
                   "(SELECT min(julianday(time_submitted)) FROM thread)")
    assert submitted >= registered
    # one definition of crawl seconds (README "Figures"): the client's summary and the manager's
    # records measure the same span (issue 21: 5.20 s against 3.4 s, the summary counted the
    # executors' start-up); the client sees the last result a message later than the manager
    shown = float(re.search(r"crawl seconds\s*│\s*([\d.]+)", done.stderr).group(1))
    ((recorded,),) = grid.query("manager", "SELECT elapsed_seconds FROM application_summary")
    assert abs(shown - recorded) <= max(0.3, 0.25 * recorded), (shown, recorded)

    # run again (resume: nothing left): the same executors register again under their names
    again = subprocess.run([sys.executable, "-m", "gridcrawl", "run", "--executors", "3", "--threads", "2",
                            "--workdir", str(tmp_path), "--no-progress"], capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, again.stderr[-2000:]
    assert grid.query("manager", "SELECT count(*), count(DISTINCT name) FROM executor") == [(3, 3)]
    # and it says there was nothing left, without an empty table of threads per executor
    assert "nothing was left to visit: every URL of this crawl was visited by an earlier run" in again.stderr
    assert "threads per executor" not in again.stdout + again.stderr
    assert "threads per executor" in done.stdout  # the first run's table


def _visited(workdir) -> int:
    """URLs the crawl in ``workdir`` has visited so far (0 before its database has the table)."""
    import sqlite3
    if not (workdir / "crawl.db").exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{workdir / 'crawl.db'}?mode=ro", uri=True, timeout=1)) as db:
            return db.execute("SELECT count(*) FROM visited_url").fetchone()[0]
    except sqlite3.Error:
        return 0


def _kill_children_named(parent_pid: int, prefix: str, deadline: float) -> int:
    """kill -9 the children of ``parent_pid`` whose process name starts with ``prefix`` (the names
    ``gridcrawl run`` gives the programs it forks: gc-manager, gc-executor-N) once they exist;
    returns how many were killed."""
    import psutil
    while time.monotonic() < deadline:
        try:
            found = [c for c in psutil.Process(parent_pid).children() if c.name().startswith(prefix)]
        except psutil.NoSuchProcess:
            return 0
        if found:
            for child in found:
                child.kill()
            return len(found)
        time.sleep(0.05)
    return 0


@pytest.mark.parametrize("victim, says", [("gc-manager", "the manager was killed by signal 9 (SIGKILL) during the crawl"),
                                          ("gc-executor-", "every executor exited during the crawl")])
def test_run_stops_with_an_error_when_its_manager_or_every_executor_dies(tmp_path, site_server, victim, says):
    # 0.2 s per request: the crawl of 60 pages by 2 × 2 threads lasts several seconds, and the
    # programs are killed while it runs. A standalone client would wait for its manager to come
    # back; gridcrawl run's own manager will not, so the command must end, not wait forever.
    server = site_server(generate_site(60, links_per_page=4, seed=29), latency=0.2)
    proc = subprocess.Popen([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "2",
                             "--threads", "2", "--workdir", str(tmp_path), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _visited(tmp_path):
            time.sleep(0.05)  # until the crawl is under way: a page visited (a loaded machine takes longer)
        assert _kill_children_named(proc.pid, victim, deadline) >= 1
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 2, stderr[-2000:]
    assert f"error: {says}" in stderr
    assert "crawl summary" in stderr  # what was crawled until then is reported (and resumable)
    grid = Grid(tmp_path)
    ((visited,),) = grid.query("crawl", "SELECT count(*) FROM visited_url")
    assert 0 < visited < 61


@pytest.mark.parametrize("given", ["127.0.0.1:{port}", "{port}"])
def test_run_with_a_dashboard_says_where_it_is(tmp_path, site_server, given):
    """``--http HOST:PORT``, or a bare port (loopback), is named as the address it is served
    at (a bare port printed "http://8363/")."""
    server = site_server(generate_site(3, links_per_page=2, seed=5))
    port = free_port()
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "1",
                           "--http", given.format(port=port), "--workdir", str(tmp_path), "--no-progress"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"dashboard: http://127.0.0.1:{port}/ (while the crawl runs)" in done.stderr
    assert f"dashboard on http://127.0.0.1:{port}/" in (tmp_path / "manager.log").read_text()  # it was served
    # a port another program holds: no line pointing at that program's server, one error, status 2
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "1",
                               "--http", f"127.0.0.1:{busy}", "--workdir", str(tmp_path / "busy"), "--no-progress"],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert (f"error: cannot serve the dashboard on 127.0.0.1:{busy}: another program listens there; give another "
            "--http port\n") in done.stderr  # not "[Errno 98] Address already in use"
    assert "dashboard: http://" not in done.stderr and "Traceback" not in done.stderr


def test_a_second_run_on_a_busy_workdir_is_refused_and_one_after_a_kill_resumes(tmp_path, site_server):
    """WORKDIR/run.lock: a second `gridcrawl run` on the WORKDIR of one that runs exits 2 at once,
    naming it, before it opens the crawl or writes a log line (it used to meet the manager's
    database lease only after its client had opened the crawl database, and its executors wrote
    "signal 15: stopping" into the running crawl's logs). Once the first is killed with -9, a run
    started at once waits for its children to end and resumes the crawl to the end.

    The children of the killed run are held stopped (SIGSTOP) until the resumed run has opened
    run.lock, so the lock is still theirs when it comes (the test checks it can take no lock on
    the file then): they used to be reaped before the resumed run started (the test read the
    first run's output to its end, which the children held open), so a run that did not wait
    for a killed run's children passed as well. One page is held back until the kill, so the
    first run cannot end before the second is refused (a 0.2 s latency made it likely)."""
    import fcntl
    import signal
    import threading

    import psutil
    site = generate_site(60, links_per_page=4, seed=31)
    gate = threading.Event()  # the first run cannot end while it is shut: one page waits for it
    asked = threading.Event()

    def gated(h) -> None:
        asked.set()
        gate.wait(60)
        h.respond(200, site.pages["/p/1.html"])
    site.extra["/p/1.html"] = gated
    server = site_server(site)
    workdir = tmp_path / "work"
    workdir.mkdir()
    command = [sys.executable, "-m", "gridcrawl", "run", "--executors", "2", "--threads", "2",
               "--workdir", str(workdir), "--no-progress"]
    held: list[psutil.Process] = []
    resumed = None
    with open(tmp_path / "first.out", "w") as out:
        first = subprocess.Popen([*command, server.url("/")], stdout=out, stderr=out)
    try:
        # crawling (every executor has registered: a run crawls once all have), and some pages stored
        wait_for(lambda: asked.is_set() and len(server.requests) >= 10, 60, 0.05,
                 "the first run's pages, one of them held")
        assert f"pid {first.pid}, since " in (workdir / "run.lock").read_text()
        logs = {path.name: path.read_text() for path in workdir.glob("*.log")}
        assert {"manager.log", "executor-1.log", "executor-2.log"} <= set(logs), sorted(logs)
        second = subprocess.run([*command, server.url("/")], capture_output=True, text=True, timeout=60)
        assert second.returncode == 2, second.stderr[-2000:]
        assert second.stderr.startswith(f"error: another gridcrawl run is crawling in {workdir} "
                                        f"(pid {first.pid}, since "), second.stderr
        assert "manager" not in second.stderr
        # the first run's logs hold only its own lines: what they held, and maybe more of the same
        for name, text in logs.items():
            assert (workdir / name).read_text().startswith(text)
        assert "signal 15" not in (workdir / "executor-1.log").read_text()
        assert first.poll() is None  # the first run goes on
        held = psutil.Process(first.pid).children(recursive=True)
        assert len(held) >= 3, held  # its manager and two executors
        for child in held:
            child.send_signal(signal.SIGSTOP)
        first.kill()
        first.wait()
        gate.set()
        with open(workdir / "run.lock") as probe, pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # still held, by the stopped children
        grid = Grid(workdir)
        ((before,),) = grid.query("crawl", "SELECT count(*) FROM visited_url")
        with open(tmp_path / "resumed.out", "w") as out:
            resumed = subprocess.Popen(command, stdout=out, stderr=out)

        def waits_for_the_lock() -> bool:  # (or has ended: refused)
            if resumed.poll() is not None:
                return True
            with contextlib.suppress(psutil.Error):
                return any(f.path == str(workdir / "run.lock") for f in psutil.Process(resumed.pid).open_files())
            return False
        wait_for(waits_for_the_lock, 60, 0.02, "the resumed run to open run.lock")
        for child in held:
            with contextlib.suppress(psutil.Error):
                child.send_signal(signal.SIGCONT)  # they see their parent gone, and end
        assert resumed.wait(timeout=180) == 0, (tmp_path / "resumed.out").read_text()[-2000:]
    finally:
        gate.set()
        for child in held:
            with contextlib.suppress(psutil.Error):
                child.send_signal(signal.SIGCONT)
        first.kill()
        first.wait()
        if resumed is not None and resumed.poll() is None:
            resumed.kill()
            resumed.wait()
    ((after,),) = grid.query("crawl", "SELECT count(*) FROM visited_url")
    assert 0 < before < after == len(reachable(site)) + 1  # every page and /sitemap.xml


def test_a_resumed_run_tables_its_own_threads_per_executor(tmp_path, site_server):
    """The table of threads per executor that ends a run counts the threads finished in that run,
    as the summary's "pages this run" counts its pages. A crawl stopped by a signal keeps its
    application, and its threads left running are run again by the next run under their first
    submission time: before, the next run's table showed the first run's threads too (70 threads
    for 26 pages)."""
    import signal
    site = generate_site(120, links_per_page=4, seed=17)
    server = site_server(site, latency=0.1)
    command = [sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "2", "--threads", "2",
               "--workdir", str(tmp_path), "--no-progress", "--no-sitemaps"]

    def figures(done) -> tuple[int, int]:
        this_run = int(re.search(r"pages this run\s*│\s*(\d+)", done.stderr).group(1))
        table = done.stdout[done.stdout.index("threads per executor"):]
        return this_run, sum(int(n) for n in re.findall(r"│ executor-\d+\s*│\s*(\d+) │", table))
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "COLUMNS": "120"})
    grid = Grid(tmp_path)

    def finished() -> int:
        try:
            return grid.query("manager", "SELECT count(*) FROM thread WHERE time_finished IS NOT NULL")[0][0]
        except Exception:  # not created yet
            return 0
    try:
        wait_for(lambda: finished() >= 8, 60, 0.05, "8 pages crawled")
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=60)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == -signal.SIGTERM, err[-2000:]
    pages, tabled = figures(subprocess.CompletedProcess(first.args, first.returncode, out, err))
    assert tabled >= pages >= 8  # (results finished at the manager but not yet applied are the next run's)
    server.latency = 0.0  # slow only while the first run had to be stopped half-way
    again = subprocess.run(command, capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "120"})
    assert again.returncode == 0, again.stderr[-2000:]
    assert grid.query("manager", "SELECT count(DISTINCT application_id) FROM thread") == [(1,)]  # resumed
    pages_again, tabled_again = figures(again)
    assert pages + pages_again == len(reachable(site))
    # each run tables the threads finished in it (before: the second run's table held the first's too);
    # a thread whose result the stopped run never took runs again in the next, and counts in both
    assert tabled_again <= pages_again and tabled + tabled_again >= finished()


def test_a_new_site_in_the_default_workdir_of_another_crawl_is_refused_not_mixed_in(tmp_path, site_server):
    """Without --workdir every `gridcrawl run` in a folder uses ./gridcrawl-run. A run whose seeds
    are none of the URLs of the crawl there (another site) exits 2 and changes nothing, naming
    that crawl and both ways on (before: its seed joined the other crawl, whose --max-pages,
    reached already, then visited nothing); the same seed again resumes; an explicit --workdir
    adds the other site to the crawl."""
    first, second = generate_site(12, links_per_page=3, seed=5), generate_site(6, links_per_page=2, seed=6)
    one, two = site_server(first), site_server(second, host="127.0.0.2")
    command = [sys.executable, "-m", "gridcrawl", "run", "--executors", "1", "--no-progress", "--no-sitemaps"]

    def run(*args):
        return subprocess.run([*command, *args], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert run(one.url("/"), "--max-pages", "4").returncode == 0
    grid = Grid(tmp_path / "gridcrawl-run")
    count = "SELECT (SELECT count(*) FROM visited_url), (SELECT count(*) FROM to_visit_url)"
    before = grid.query("crawl", count)
    other = run(two.url("/"))
    assert other.returncode == 2, other.stderr[-2000:]
    assert other.stderr.strip() == (
        f"error: gridcrawl-run (the default --workdir) holds another crawl (of 127.0.0.1, first {one.url('/')}: "
        f"{before[0][0]} URLs "
        f"visited, {before[0][1]} left to visit), which none of the seeds is part of: give --workdir DIR for a "
        "crawl of their own, or --workdir gridcrawl-run to add them to that one")
    assert grid.query("crawl", count) == before
    assert run(one.url("/")).returncode == 0  # the same seed: resumed to the end
    added = run(two.url("/"), "--workdir", "gridcrawl-run")
    assert added.returncode == 0, added.stderr[-2000:]
    stored = {url for (url,) in grid.query("crawl", "SELECT url FROM document")}
    assert stored == {one.url(p) for p in reachable(first)} | {two.url(p) for p in reachable(second)}


def test_a_failed_first_try_in_the_default_workdir_is_named_with_the_way_to_start_over(tmp_path, site_server):
    """A newcomer's first `gridcrawl run` with a mistyped port fails every page; the corrected
    command is then refused as another crawl. The refusal now says that crawl stored nothing and
    that removing the folder starts over."""
    from grid import free_port
    server = site_server(generate_site(3, links_per_page=1, seed=8))
    command = [sys.executable, "-m", "gridcrawl", "run", "--executors", "1", "--no-progress", "--no-sitemaps"]
    typo = subprocess.run([*command, f"http://127.0.0.2:{free_port()}/"], capture_output=True, text=True,
                          timeout=180, cwd=tmp_path)
    assert typo.returncode == 1, typo.stderr[-2000:]  # every page failed
    right = subprocess.run([*command, server.url("/")], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert right.returncode == 2 and right.stderr.strip().endswith(
        "or --workdir gridcrawl-run to add them to that one, or remove gridcrawl-run (it stored no page) to "
        "start over"), right.stderr[-2000:]


def test_the_progress_bar_shows_the_frontier_and_ends_at_zero_to_visit(tmp_path, site_server):
    """On a terminal the bar shows the URLs left to visit (the frontier, counted now and then),
    and its last frame, drawn after a final count, says none is left when the crawl is done."""
    from grid import on_a_terminal
    site = generate_site(80, links_per_page=4, seed=37)
    server = site_server(site, latency=0.05)
    rc, output = on_a_terminal([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "1",
                                "--threads", "2", "--workdir", str(tmp_path)],
                               env={**os.environ, "TERM": "xterm", "COLUMNS": "140"}, timeout=180)
    assert rc == 0, output[-3000:]
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output)
    frames = [tuple(int(n or 0) for n in m) for m in re.findall(
        r"(\d+) pages(?:, (\d+) sitemaps?)? \d+ errors (\d+) to visit (\d+) in flight", text)]
    assert frames, text[-3000:]
    assert any(to_visit > 0 for _, _, to_visit, _ in frames), frames
    assert all(to_visit >= in_flight for _, _, to_visit, in_flight in frames), frames
    assert frames[-1] == (len(reachable(site)), 1, 0, 0), frames[-5:]  # and /sitemap.xml, apart


def _signal_the_group_mid_crawl(tmp_path, site_server, signum: int) -> tuple[list[str], int, str]:
    """Start ``gridcrawl run`` (2 executors of 8 threads) on a 400-page site answering in 50 ms, and
    send ``signum`` to its whole process group once its first pages are stored. Returns
    (the command's arguments, its exit status, its standard error)."""
    import signal
    server = site_server(generate_site(400, links_per_page=6, seed=43), latency=0.05)
    args = ["run", server.url("/"), "--executors", "2", "--threads", "8", "--workdir", str(tmp_path), "--no-progress",
            "--download-delay", "0.01"]
    proc = subprocess.Popen([sys.executable, "-m", "gridcrawl", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # pages fetched and stored, more on their way (a signal before the client has logged in to
        # its manager stops the run with another line: nothing was crawled)
        wait_for(lambda: _visited(tmp_path) > 0, 60, message="the crawl's first pages")
        os.killpg(proc.pid, signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return args, proc.returncode, stderr


def test_ctrl_c_stops_the_run_cleanly_and_says_how_to_resume(tmp_path, site_server):
    """Ctrl-C on a terminal signals the whole process group: the run, its manager and its
    executors. The run alone takes it (its children ignore SIGINT): it applies what it holds,
    prints its summary and the note that the same command resumes, stops its manager and
    executors, and ends by SIGINT (the shell's status 130) — without a warning that its manager
    left (before: "manager left (manager shutting down); reconnecting in 1.0 s", each time, as
    the manager stopped first)."""
    import signal
    args, returncode, stderr = _signal_the_group_mid_crawl(tmp_path, site_server, signal.SIGINT)
    assert returncode == -signal.SIGINT, stderr[-2000:]
    assert "error:" not in stderr, stderr[-2000:]
    assert "WARNING" not in stderr, stderr[-2000:]  # e.g. "manager left (manager shutting down); reconnecting"
    left = Grid(tmp_path).query("crawl", "SELECT COUNT(*) FROM to_visit_url")[0][0]
    assert left > 0
    # the command as given: the crawl's fetch settings (--download-delay) are not stored with it
    assert (f"stopped before the end (Ctrl-C) with {counted(left, 'URL')} left to visit: the same command resumes the crawl "
            f"({shlex.join(['gridcrawl', *args])})") in " ".join(stderr.split())


def test_sigterm_to_the_whole_group_stops_the_run_without_a_warning(tmp_path, site_server):
    """systemd's stop (KillMode=control-group), ``timeout`` and ``kill -- -PGID`` send SIGTERM to
    the run, its manager and its executors at once: the manager said bye while the client was
    storing what it held, and the run printed "WARNING gridcrawl.client: manager left (manager
    shutting down); reconnecting in 1.0 s" above its summary. A client that is stopping itself
    only notes the bye (no WARNING, no reconnect); the run still ends by SIGTERM (status 143)."""
    import signal
    _, returncode, stderr = _signal_the_group_mid_crawl(tmp_path, site_server, signal.SIGTERM)
    assert returncode == -signal.SIGTERM, stderr[-2000:]
    assert "WARNING" not in stderr and "error:" not in stderr, stderr[-2000:]
    assert "stopped before the end" in stderr, stderr[-2000:]


def test_ctrl_c_of_a_run_in_a_shell_loop_stops_the_loop(tmp_path, site_server):
    """A script that crawls site after site (``for ...; do gridcrawl run ...; done``) stops at
    Ctrl-C: the run stops gracefully (its summary printed, what it fetched stored) and then ends
    by SIGINT, so bash ends the loop. Before, the run exited 0 after its graceful stop, and bash
    (which takes a command that handled SIGINT and exited normally to have used it for itself)
    went on to the next crawl."""
    import signal
    server = site_server(generate_site(400, links_per_page=6, seed=47), latency=0.05)
    runs = [tmp_path / f"crawl-{i}" for i in (1, 2)]
    script = ("for w in " + " ".join(str(w) for w in runs) + "; do "
              f"{sys.executable} -m gridcrawl run {server.url('/')} --executors 1 --threads 4 --workdir $w "
              "--no-progress 2>$w.err; done; echo finished > " + str(tmp_path / "loop-end"))
    # a process group of its own, as a terminal's foreground job: Ctrl-C reaches bash and the run
    loop = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    try:
        # pages fetched and stored (a Ctrl-C before the client has logged in to its manager stops
        # the run with another line: nothing was crawled)
        wait_for(lambda: _visited(runs[0]) > 0, 60, message="the first run's first pages")
        os.killpg(loop.pid, signal.SIGINT)  # Ctrl-C at the terminal: the whole foreground group
        loop.wait(timeout=60)
    finally:
        if loop.poll() is None:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait()
    assert "stopped before the end (Ctrl-C)" in " ".join((tmp_path / "crawl-1.err").read_text().split())
    assert not runs[1].exists(), "the loop went on to the second crawl"
    assert not (tmp_path / "loop-end").exists()
    assert loop.returncode != 0


def test_a_crawl_of_another_host_with_the_default_user_agent_is_warned_of_and_user_agent_reaches_every_fetch(
        tmp_path, site_server):
    """The default User-Agent names no one: a crawl that would fetch a host other than this
    machine with it says so on stderr, naming ``--user-agent``; the crawl of this machine's own
    site does not, and the User-Agent given to ``gridcrawl run`` is the one its executors send,
    robots.txt and pages alike. (``site.invalid`` never resolves, RFC 6761: nothing leaves the
    machine.)"""
    from sites import Site
    env = {**os.environ, "GRIDCRAWL_RETRY_TIMES": "0"}
    command = [sys.executable, "-m", "gridcrawl", "run", "--no-progress", "--no-sitemaps"]
    anonymous = subprocess.run([*command, "http://site.invalid/", "--workdir", str(tmp_path / "a")],
                               capture_output=True, text=True, timeout=120, env=env)
    assert "site.invalid is fetched with the default User-Agent" in anonymous.stderr, anonymous.stderr[-2000:]
    assert "--user-agent 'NAME/1.0" in anonymous.stderr
    agents = []

    def recorded(body: bytes, content_type: str):
        def answer(h) -> None:  # notes the request's User-Agent, then answers
            agents.append((h.path, h.headers.get("User-Agent")))
            h.respond(200, body, content_type=content_type)
        return answer
    site = Site()
    site.extra["/"] = recorded(b"<html><head><title>home</title></head><body>home</body></html>", "text/html")
    site.extra["/robots.txt"] = recorded(b"User-agent: *\nDisallow: /private/\n", "text/plain")
    server = site_server(site)
    named = subprocess.run([*command, server.url("/"), "--workdir", str(tmp_path / "b"),
                            "--user-agent", "testbot/1.0 (+mailto:ops@example.org)"],
                           capture_output=True, text=True, timeout=120, env=env)
    assert named.returncode == 0, named.stderr[-2000:]
    assert "default User-Agent" not in named.stderr
    assert agents == [("/robots.txt", "testbot/1.0 (+mailto:ops@example.org)"),
                      ("/", "testbot/1.0 (+mailto:ops@example.org)")]
    local = subprocess.run([*command, server.url("/"), "--workdir", str(tmp_path / "c")],
                           capture_output=True, text=True, timeout=120, env=env)
    assert local.returncode == 0 and "default User-Agent" not in local.stderr, local.stderr[-2000:]
