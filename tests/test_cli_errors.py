"""Bad input gets a one-line error and exit status 2 within a bounded time — never a traceback
or a hang. Each program is run as a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from grid import free_port, run_at_once, with_test_hooks


def start(*args: str, cwd=None, env: dict | None = None) -> subprocess.Popen:
    """``python -m ARGS`` started with its output captured (``env`` added to this process's
    environment); :func:`finish` waits for it."""
    proc = subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd, env={**os.environ, **env} if env else None)
    proc.started = time.monotonic()
    return proc


def finish(proc: subprocess.Popen, timeout: float = 30) -> tuple[int, str, float]:
    """Wait up to ``timeout`` s for a program :func:`start` started (killed past it, raising
    ``subprocess.TimeoutExpired``): its exit status, its stderr then stdout, and the seconds
    since it started."""
    done = run_at_once(proc, timeout=timeout)[0]
    return done.returncode, done.stderr + done.stdout, time.monotonic() - proc.started


def run(*args: str, timeout: float = 30, cwd=None, env: dict | None = None) -> tuple[int, str, float]:
    """Run ``python -m ARGS`` to its end: as :func:`finish`."""
    return finish(start(*args, cwd=cwd, env=env), timeout)


def run_all(*commands, timeout: float = 30, cwd=None, env: dict | None = None) -> list[tuple[int, str, float]]:
    """Run each of ``commands`` (a sequence of ``python -m`` arguments, or a ``Popen`` from
    :func:`start`) side by side, and what each did, in that order (as :func:`run`'s): for
    programs that do not depend on each other, which together take the time of about one."""
    procs = [c if isinstance(c, subprocess.Popen) else start(*c, cwd=cwd, env=env) for c in commands]
    try:
        return [finish(proc, timeout) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def shortened(*constants: str) -> dict:
    """The environment of a program whose built-in waits ``constants`` (``module.NAME=value``)
    are made shorter (``GRIDCRAWL_TEST_CONSTANTS``, tests/crashhook/sitecustomize.py)."""
    return with_test_hooks({**os.environ, "GRIDCRAWL_TEST_CONSTANTS": ";".join(constants)})


def left_in(folder) -> list[str]:
    """The names in ``folder``, sorted, but for SQLite's ``-wal`` and ``-shm`` companions of a
    database: the last connection to close removes them, and none does when two processes close
    theirs at the same instant (seen once in a full suite on a loaded machine); they are
    SQLite's, not an output of the command."""
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(("-wal", "-shm")))


def assert_user_error(rc: int, output: str, *needles: str) -> None:
    assert rc == 2, output
    assert "Traceback" not in output, output
    for needle in needles:
        assert needle in output, output


@pytest.mark.parametrize("module", ["gridcrawl", "gridcrawl.manager", "gridcrawl.executor", "gridcrawl.client"])
def test_help(module):
    rc, out, _ = run(module, "--help")
    assert rc == 0 and "Usage" in out


@pytest.mark.parametrize("args", [["gridcrawl"], ["gridcrawl", "db"], ["gridcrawl", "keys"], ["gridcrawl", "config"],
                                  ["gridcrawl.manager", "users"]])
def test_a_command_group_without_a_command_shows_its_help(args):
    rc, out, _ = run(*args)
    assert rc == 2 and "Usage" in out and "Commands" in out and "Missing command" not in out, out


@pytest.mark.parametrize("seed", ["ht!tp://x", "ftp://example.test/", "http://", "javascript:alert(1)"])
def test_invalid_seed_url(tmp_path, seed):
    rc, out, _ = run("gridcrawl.client", "--manager", f"tcp://127.0.0.1:{free_port()}",
                     "--db", f"sqlite:///{tmp_path}/c.db", "--no-progress", seed)
    assert_user_error(rc, out, "invalid seed URL")


def test_run_with_invalid_seed(tmp_path):
    rc, out, _ = run("gridcrawl", "run", "not a url", "--workdir", str(tmp_path))
    assert_user_error(rc, out, "invalid seed URL")


def test_a_seed_without_a_scheme_gets_the_url_it_may_have_meant(tmp_path):
    rc, out, _ = run("gridcrawl", "run", "example.org/docs", "--workdir", str(tmp_path))
    assert_user_error(rc, out, "invalid seed URL", "did you mean http://example.org/docs?")
    assert not (tmp_path / "crawl.db").exists()


@pytest.mark.parametrize("args, needle", [
    (["--min-relevance", "0.3"], "--min-relevance works on a focused crawl's relevance scores"),
    (["--order", "priority"], "--order priority works on a focused crawl's relevance scores"),
    (["--focus", "kettle", "--focus-ontology", "o.ttl"], "--focus and --focus-ontology exclude each other"),
    (["--render-timeout", "5"], "--render-timeout goes with --render (or a page type or item spec with render = "
                                "true): no page is rendered"),
    (["--render-pages", "3"], "--render-pages goes with --render"),
    (["--keep-versions"], "--keep-versions keeps the bodies a recrawl replaces, and {w} holds no crawl yet: a first "
                          "crawl replaces nothing"),
    # it started a manager and executors, made WORKDIR's databases, then said "(crawl first)"
    (["--recrawl"], "nothing to recrawl: {w} holds no crawl yet; crawl first, then recrawl (gridcrawl run "
                    "http://127.0.0.1:9/ --workdir {w})"),
    (["--recrawl-all", "--watch"], "nothing to recrawl: {w} holds no crawl yet"),
])
def test_run_refuses_options_that_would_do_nothing_and_creates_nothing(tmp_path, args, needle):
    """A refused run left WORKDIR/crawl.db with crawl_meta (--min-relevance or --order priority
    without a focus: refused by the client, after the manager and executors had started);
    --render-timeout, --render-pages without --render and --keep-versions on a first crawl were
    taken and did nothing."""
    workdir = tmp_path / "w"
    rc, out, _ = run("gridcrawl", "run", "http://127.0.0.1:9/", "--workdir", str(workdir), "--no-progress", *args)
    assert_user_error(rc, out, needle.format(w=workdir))
    assert not workdir.exists(), "a refused run creates nothing"


@pytest.mark.parametrize("text, needle", [
    (None, "cannot read the ontology"),
    ("@prefix ex: <http://x/> .\nex:a ex:b ;; junk\n", "does not parse: invalid turtle"),
    ("@prefix ex: <http://x/> .\nex:a ex:b ex:c .\n", "names no class or property"),
])
def test_an_ontology_that_cannot_focus_a_crawl_is_refused_before_anything_starts(tmp_path, text, needle):
    """A missing, broken or termless --focus-ontology file was refused by the client, after
    gridcrawl run had started its manager and executors and made WORKDIR and its crawl database."""
    ontology = tmp_path / "o.ttl"
    if text is not None:
        ontology.write_text(text)
    workdir = tmp_path / "w"
    (rc, out, _), client = run_all(
        ("gridcrawl", "run", "http://127.0.0.1:9/", "--workdir", str(workdir), "--no-progress",
         "--focus-ontology", str(ontology)),
        ("gridcrawl.client", "--manager", "tcp://127.0.0.1:9", "--db", f"sqlite:///{workdir}.db",
         "--no-progress", "--focus-ontology", str(ontology), "http://127.0.0.1:9/"))
    assert_user_error(rc, out, needle)
    assert not workdir.exists(), "a refused run creates nothing"
    assert_user_error(*client[:2], needle)
    assert not (tmp_path / "w.db").exists()


def test_the_client_refuses_focus_options_without_a_focus_before_making_the_database(tmp_path):
    rc, out, _ = run("gridcrawl.client", "--manager", "tcp://127.0.0.1:9", "--db", f"sqlite:///{tmp_path}/c.db",
                     "--no-progress", "--order", "priority", "http://127.0.0.1:9/")
    assert_user_error(rc, out, "--order priority works on a focused crawl's relevance scores")
    assert list(tmp_path.iterdir()) == []


def test_fetch_and_retry_failed_name_what_a_mistyped_value_may_have_meant(tmp_path):
    """``gridcrawl fetch 127.0.0.1:8300/`` said "scheme '' not crawlable" without the "did you
    mean http://…" gridcrawl run gives a seed; ``--retry-failed 404`` listed the kinds without
    naming http_404."""
    (rc, out, _), *runs = run_all(("gridcrawl", "fetch", "127.0.0.1:8300/"), *(
        ("gridcrawl", "run", "http://127.0.0.1:9/", "--workdir", str(tmp_path / "w"), "--retry-failed", given)
        for given in ("404", "http404")))
    assert_user_error(rc, out, "invalid URL '127.0.0.1:8300/'", "(did you mean http://127.0.0.1:8300/?)")
    for given, (rc, out, _) in zip(("404", "http404"), runs):
        assert_user_error(rc, out, f"unknown error kind {given!r} (did you mean http_404, the failures of that "
                                   "HTTP status?)")
    assert not (tmp_path / "w").exists()


def test_counts_are_written_singular_and_plural():
    """"1 URLs visited", "1 errors", "1 pages" (the progress bar): one of a thing is singular."""
    from gridcrawl.words import counted
    from gridcrawl.client.cli import max_pages_note
    assert (counted(1, "page"), counted(0, "error"), counted(1_024, "URL"), counted(1, "miss", "misses"),
            counted(2, "miss", "misses")) == ("1 page", "0 errors", "1,024 URLs", "1 miss", "2 misses")
    assert "(1 URL visited in all)" in max_pages_note(1, {"visited": 1, "to_visit": 3, "pages": 1})


def test_a_recrawl_stopped_at_max_pages_names_the_sitemaps_it_read_only_when_it_read_some():
    """A recrawl stopped at --max-pages said "(10 visited, a sitemap read again counted among
    them)" when it had read none (a focused or rules crawl reads no sitemap)."""
    from gridcrawl.client.cli import max_pages_note
    none = max_pages_note(10, {"visited": 30, "to_visit": 3, "pages": 10, "sitemaps_read": 0}, "due")
    assert "a limit on the pages of this recrawl run (10 visited) with 3 URLs left" in none, none
    two = max_pages_note(10, {"visited": 30, "to_visit": 3, "pages": 8, "sitemaps_read": 2}, "due")
    assert "(10 visited, 2 sitemaps read again among them) with 3 URLs left" in two, two


def test_a_mistyped_control_action_is_named_not_taken_for_a_crawl_without_db():
    """``gridcrawl-client --manager M stop APPID`` answered "--db is required to crawl"."""
    stop, no_db = run_all(("gridcrawl.client", "--manager", "tcp://127.0.0.1:9", "stop", "3f2a91c0"),
                          ("gridcrawl.client", "--manager", "tcp://127.0.0.1:9", "http://127.0.0.1:9/"))
    assert_user_error(*stop[:2], "'stop' is no action: give pause, resume or cancel APPLICATION_ID")
    assert_user_error(*no_db[:2], "--db is required to crawl")


@pytest.mark.parametrize("seed, meant", [("http:/127.0.0.1:8300/", "http://127.0.0.1:8300/"),
                                         ("https//docs.test/a", "https://docs.test/a"),
                                         ("http:docs.test", "http://docs.test"),
                                         ("httpbin.test/x", "http://httpbin.test/x"),
                                         ("htp://127.0.0.1:8300/", "http://127.0.0.1:8300/"),
                                         ("htps://docs.test/a", "https://docs.test/a"),
                                         ("HHTP://docs.test/", "http://docs.test/")])
def test_a_scheme_written_wrong_gets_the_url_it_named(seed, meant):
    """``http:/host`` was answered "did you mean http://http:/host?"; a misspelt scheme
    (``htp://``) with "scheme 'htp' not crawlable" alone."""
    from gridcrawl.urls import address_hint
    assert address_hint(seed) == f" (did you mean {meant}?)"


def test_a_scheme_no_typo_of_http_gets_no_guess():
    from gridcrawl.urls import address_hint
    assert [address_hint(seed) for seed in ("ftp://x.test/", "mailto://a@x.test", "http://x.test/")] == ["", "", ""]


@pytest.mark.parametrize("form", ["path", "file-url", "name"])
def test_a_seed_that_is_a_file_gets_the_command_that_serves_it(tmp_path, form):
    site = tmp_path / "my docs"
    site.mkdir()
    (site / "index.html").write_text("<a href=a.html>a</a>")
    seed = {"path": str(site / "index.html"), "file-url": (site / "index.html").as_uri(), "name": "index.html"}[form]
    rc, out, _ = run("gridcrawl", "run", seed, "--workdir", str(tmp_path / "w"), cwd=site)
    assert_user_error(rc, out, "invalid seed URL", "a file, not a web address",
                      f"python3 -m http.server 8000 --bind 127.0.0.1 --directory "
                      f"{'.' if form == 'name' else repr(str(site))}",
                      "crawl http://127.0.0.1:8000/index.html")
    assert "did you mean" not in out and not (tmp_path / "w" / "crawl.db").exists()


@pytest.mark.parametrize("program", [("gridcrawl", "run"), ("gridcrawl", "spark", "--db", "sqlite:///x.db"),
                                     ("gridcrawl.client", "--manager", "tcp://127.0.0.1:9", "--db", "sqlite:///x.db")])
def test_a_seeds_file_with_bad_lines_names_each_with_its_line_number(tmp_path, program):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("# intranet sites\nhttp://wiki.corp.test/\n\nwww.corp.test\nftp://files.corp.test/\n"
                     + "".join(f"bad {n}\n" for n in range(6)))
    rc, out, _ = run(*program, "--seeds-file", str(seeds), cwd=tmp_path)
    assert_user_error(rc, out, "invalid seed URLs:", f"{seeds} line 4:", "did you mean http://www.corp.test?",
                      f"{seeds} line 5:", "and 3 more")
    assert "line 2" not in out and not (tmp_path / "x.db").exists()


def test_a_seeds_file_that_is_missing_or_empty_is_a_user_error(tmp_path):
    (tmp_path / "empty.txt").write_text("# nothing yet\n\n")
    missing, empty = run_all(*(("gridcrawl", "run", "--seeds-file", str(tmp_path / name), "--workdir", str(tmp_path))
                               for name in ("nope.txt", "empty.txt")))
    assert_user_error(*missing[:2], f"cannot read --seeds-file {tmp_path / 'nope.txt'}", "No such file")
    assert_user_error(*empty[:2], "holds no URL")


def test_client_fails_clearly_when_no_manager_answers(tmp_path):
    rc, out, elapsed = run("gridcrawl.client", "--manager", f"tcp://127.0.0.1:{free_port()}",
                           "--db", f"sqlite:///{tmp_path}/c.db", "--connect-timeout", "0.3", "--no-progress",
                           "http://127.0.0.1:9/")
    assert_user_error(rc, out, "no answer from the manager", "(connection refused): is the manager running there?")
    assert elapsed < 20


def test_executor_fails_clearly_when_no_manager_answers():
    port = free_port()
    rc, out, elapsed = run("gridcrawl.executor", "--manager", f"tcp://127.0.0.1:{port}",
                           "--connect-timeout", "0.3")
    assert_user_error(rc, out, "no answer from the manager", f"nothing listens at 127.0.0.1:{port} (connection refused)")
    assert len(out.strip().splitlines()) == 1, out  # the error alone (issue 21: two INFO lines came first)
    assert elapsed < 20


def test_a_program_logging_to_a_file_ends_its_log_with_why_it_stopped(tmp_path):
    """An executor run as a service (``--log-file``) that gives up: the reason is on stderr and
    is the last line of its log too (it was only on stderr, which a service manager may drop)."""
    port = free_port()
    log = tmp_path / "executor.log"
    rc, out, _ = run("gridcrawl.executor", "--manager", f"tcp://127.0.0.1:{port}", "--connect-timeout", "0.3",
                     "--log-file", str(log))
    assert_user_error(rc, out, "no answer from the manager")
    (error,) = [line for line in out.splitlines() if line.startswith("error: ")]
    last = log.read_text().splitlines()[-1]
    assert " ERROR gridcrawl: stopping: " in last and last.endswith(error[len("error: "):]), last


def test_a_manager_address_where_something_else_listens_is_named():
    """--manager pointed at a port where another kind of server listens (a web server): the
    error says that what answers there does not speak ZeroMQ, not that a handshake failed."""
    import socket
    with socket.create_server(("127.0.0.1", 0)) as server:  # accepts, then says nothing (as HTTP does)
        port = server.getsockname()[1]
        rc, out, _ = run("gridcrawl.executor", "--manager", f"tcp://127.0.0.1:{port}", "--connect-timeout", "0.3")
    assert_user_error(rc, out, f"what listens at 127.0.0.1:{port} does not speak ZeroMQ: not a gridcrawl manager")
    assert "handshake" not in out


@pytest.mark.parametrize("program", ["gridcrawl.executor", "gridcrawl.client"])
def test_a_silent_web_server_given_as_the_manager_is_named_before_the_connect_timeout(tmp_path, program):
    """The dashboard's port (or any HTTP server that waits for a request) given as --manager: the
    program names it after a couple of seconds, not at the end of a 300 s connect timeout
    (the walkthrough waited 12.5 s with the default 10 s; nginx, which answers, was named at once).
    Here it asks the network 0.1 s in (PROBE_AFTER, 2 s), then hears a second of silence."""
    import socket
    args = ["--db", f"sqlite:///{tmp_path}/c.db", "--no-progress", "http://127.0.0.1:9/"] \
        if program == "gridcrawl.client" else []
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        rc, out, _ = run(program, "--manager", f"tcp://127.0.0.1:{port}", "--connect-timeout", "300", *args,
                         timeout=60, env=shortened("gridcrawl.link.PROBE_AFTER=0.1"))
    assert_user_error(rc, out, f"no answer from the manager at tcp://127.0.0.1:{port}: what listens at "
                               f"127.0.0.1:{port} does not speak ZeroMQ")


#: nginx 1.22's whole answer to ZeroMQ's greeting (its body completes the frames libzmq reads)
NGINX_400 = (b"HTTP/1.1 400 Bad Request\r\nServer: nginx\r\nDate: Sat, 28 Nov 2026 16:33:24 GMT\r\n"
             b"Content-Type: text/html\r\nContent-Length: 150\r\nConnection: close\r\n\r\n"
             b"<html>\r\n<head><title>400 Bad Request</title></head>\r\n<body>\r\n"
             b"<center><h1>400 Bad Request</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")


@pytest.mark.parametrize("program", [("gridcrawl.executor",),
                                     ("gridcrawl.client", "--db", "sqlite:///c.db", "--no-progress", "http://127.0.0.1:9/")])
def test_a_manager_address_where_a_web_server_answers_fails_at_once_without_flooding_the_log(tmp_path, program):
    """--manager pointed at a web server that answers ZeroMQ's greeting with "400 Bad Request"
    and closes, as nginx does: libzmq reads that answer as ZeroMQ 1.0 frames, one malformed
    message per reconnect (about a hundred a second). The program says what listens there and
    exits at once, instead of logging each message until its connect timeout (before: a
    thousand warnings in ten seconds; here the timeout is 120 s, the run's limit 60 s)."""
    import socket
    import threading
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_like_a_web_server():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(64)
                    conn.sendall(NGINX_400)
                except OSError:
                    pass
    threading.Thread(target=answer_like_a_web_server, daemon=True).start()
    try:
        rc, out, _ = run(program[0], "--manager", f"tcp://127.0.0.1:{port}", "--connect-timeout", "120",
                         *program[1:], timeout=60, cwd=tmp_path)
    finally:
        server.close()
    assert_user_error(rc, out, f"what listens at 127.0.0.1:{port} does not speak ZeroMQ: not a gridcrawl manager")
    assert "malformed" not in out and len(out.strip().splitlines()) == 1, out


def test_a_manager_bound_where_another_program_listens_says_so(tmp_path):
    import socket
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        rc, out, _ = run("gridcrawl.manager", "--bind", f"tcp://127.0.0.1:{port}", "--db", f"sqlite:///{tmp_path}/m.db")
    assert_user_error(rc, out, f"cannot listen on tcp://127.0.0.1:{port}: another program listens there "
                               "(another gridcrawl-manager? a web server?): stop it, or give another --bind port")
    assert "addr=" not in out
    assert not (tmp_path / "m.db").exists(), "a manager that cannot listen must not create its database"


def test_a_manager_bound_to_an_address_this_machine_lacks_says_so(tmp_path):
    # binding is local: no packet leaves the machine for 192.0.2.1 (TEST-NET-1, RFC 5737)
    rc, out, _ = run("gridcrawl.manager", "--bind", "tcp://192.0.2.1:9000", "--db", f"sqlite:///{tmp_path}/m.db")
    assert_user_error(rc, out, "cannot listen on tcp://192.0.2.1:9000: '192.0.2.1' is not an address of this "
                               "machine (use * for all of them)")
    assert not (tmp_path / "m.db").exists()


def test_why_a_manager_is_unreachable_names_a_host_that_does_not_resolve(monkeypatch):
    import socket
    from gridcrawl.transport import why_unreachable

    def no_such_host(host, *args, **kwargs):  # no DNS query leaves this machine in a test
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    assert why_unreachable("tcp://manager.corp.test:9000") == \
        "the host 'manager.corp.test' does not resolve (Name or service not known)"
    assert why_unreachable("ipc:///tmp/gridcrawl.sock") is None


def test_why_a_manager_is_unreachable_names_the_likely_cause_of_each_failed_connection():
    """The reasons a probe gives for a connection the network failed, from the errors a real
    connect raises: off loopback, a refused connection names a manager bound to 127.0.0.1 (the
    manager runs, but only for its own host), and "no route" (ENETUNREACH, at once) is this
    machine's network, not a host that is down; a silent port is a firewall or a host down.
    A real refused connection on 127.0.0.1 keeps the short form."""
    import errno
    import socket

    from gridcrawl.transport import connect_failure, why_unreachable

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert why_unreachable(f"tcp://127.0.0.1:{port}") == \
        f"nothing listens at 127.0.0.1:{port} (connection refused): is the manager running there?"
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    assert connect_failure("manager-host", 9000, "10.0.0.5", refused, 2.0) == (
        "refused", "nothing listens at manager-host:9000 (connection refused): is the manager running there, bound "
        "to an address other hosts reach (--bind tcp://*:9000, not 127.0.0.1)?")
    no_route = OSError(errno.ENETUNREACH, "Network is unreachable")
    assert connect_failure("10.0.0.5", 9000, "10.0.0.5", no_route, 2.0) == (
        "unreachable", "10.0.0.5:9000 cannot be reached (Network is unreachable): this machine has no route to "
        "10.0.0.5; check the manager's address and this machine's network")
    assert connect_failure("10.0.0.5", 9000, "10.0.0.5", TimeoutError("timed out"), 2.0) == (
        "unreachable", "10.0.0.5:9000 cannot be reached (no answer within 2 s: the host is down or a firewall "
        "drops it)")
    rejected = OSError(errno.EHOSTUNREACH, "No route to host")
    assert connect_failure("10.0.0.5", 9000, "10.0.0.5", rejected, 2.0) == (
        "unreachable", "10.0.0.5:9000 cannot be reached (No route to host: the host is down, or a firewall "
        "rejects it)")


def test_a_manager_bound_to_loopback_says_other_hosts_cannot_connect(tmp_path):
    """``--bind tcp://127.0.0.1:PORT`` serves this machine only: the manager's listening line
    says so and names the ``--bind`` that lets other hosts in (executors elsewhere were told
    only "nothing listens there", beside a manager that was running)."""
    port = free_port()
    log_file = tmp_path / "manager.log"
    proc = subprocess.Popen([sys.executable, "-m", "gridcrawl.manager", "--bind", f"tcp://127.0.0.1:{port}",
                             "--db", f"sqlite:///{tmp_path}/m.db", "--log-file", str(log_file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while "manager listening on" not in (log_file.read_text() if log_file.exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, "the manager did not start"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    line = next(x for x in log_file.read_text().splitlines() if "manager listening on" in x)
    assert line.endswith(f"manager listening on tcp://127.0.0.1:{port} (this machine only: executors and clients "
                         f"on other hosts cannot connect; --bind tcp://*:{port} lets them)")


# ------------------------------------------------------------------ failed commands leave no files


def test_report_and_export_of_a_missing_database_create_nothing(tmp_path):
    missing = tmp_path / "nonexistent.db"
    for rc, out, _ in run_all(("gridcrawl", "report", "--db", f"sqlite:///{missing}"),
                              ("gridcrawl", "export", "--db", f"sqlite:///{missing}", str(tmp_path / "out.jsonl"))):
        assert_user_error(rc, out, "no database file")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_report_and_export_given_a_workdir_or_a_missing_path_say_so(tmp_path):
    """A newcomer gives the report its crawl's folder (``--db crawl-1``), or the path of a
    database not made yet: both were "not a database URL ... (expected e.g.
    sqlite:////home/me/crawl-1)", a URL of the same folder. The folder names the databases in
    it; the missing path is no database file."""
    import sqlite3
    workdir = tmp_path / "crawl-1"
    workdir.mkdir()
    for name in ("crawl.db", "manager.db"):
        sqlite3.connect(workdir / name).close()
    (workdir / "manager.log").write_text("")
    report, export, missing = run_all(("gridcrawl", "report", "--db", "crawl-1"),
                                      ("gridcrawl", "export", "--db", "crawl-1", "--format", "csv", "out.csv"),
                                      ("gridcrawl", "report", "--crawl-db", "crawl-2/crawl.db"), cwd=tmp_path)
    assert_user_error(*report[:2], "error: crawl-1 is a folder, not a database; the databases in it: "
                      "sqlite:///crawl-1/crawl.db (the crawl's pages), sqlite:///crawl-1/manager.db (the grid's records)")
    assert_user_error(*export[:2], "error: crawl-1 is a folder, not a database; the databases in it:")
    assert_user_error(*missing[:2], "error: no database file crawl-2/crawl.db (a database URL is e.g. "
                      f"sqlite:///{tmp_path}/crawl-2/crawl.db)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crawl-1"]


def test_failed_export_leaves_no_output_and_keeps_an_earlier_one(tmp_path):
    import sqlite3
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE unrelated (a)")
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text("kept\n")
    for rc, out, _ in run_all(*(("gridcrawl", "export", "--db", f"sqlite:///{other}", str(out_file))
                                for out_file in (tmp_path / "out.jsonl", earlier))):
        assert_user_error(rc, out, "not a gridcrawl crawl database")
    assert left_in(tmp_path) == ["earlier.jsonl", "other.db"]
    assert earlier.read_text() == "kept\n"


def test_the_other_kind_of_database_is_named_with_the_option_that_takes_it(tmp_path):
    manager_db, crawl_db = f"sqlite:///{tmp_path}/manager.db", f"sqlite:///{tmp_path}/crawl.db"
    for rc, out, _ in run_all(*(("gridcrawl", "db", "init", "--db", db, "--kind", kind)
                                for kind, db in (("manager", manager_db), ("crawl", crawl_db)))):
        assert rc == 0, out
    extras = ([], ["--items"], ["--format", "warc"], ["--triples"])  # --triples: "no such table: triple"
    (rc, out, _), (rc2, out2, _), *exports = run_all(
        ("gridcrawl", "report", "--db", crawl_db), ("gridcrawl", "report", "--crawl-db", manager_db),
        *(("gridcrawl", "export", "--db", manager_db, *extra, str(tmp_path / "out")) for extra in extras))
    assert_user_error(rc, out, f"{crawl_db} is a crawl database (WORKDIR/crawl.db), not a manager database "
                               "(WORKDIR/manager.db): give it with --crawl-db")
    assert_user_error(rc2, out2, f"{manager_db} is a manager database (WORKDIR/manager.db), not a crawl database "
                                 "(WORKDIR/crawl.db): give it with --db")
    for rc, out, _ in exports:
        assert_user_error(rc, out, f"{manager_db} is a manager database", "export takes the crawl database")
    assert left_in(tmp_path) == ["crawl.db", "manager.db"]


def test_an_export_to_a_folder_is_a_user_error_before_anything_is_written(tmp_path):
    db = f"sqlite:///{tmp_path}/c.db"
    rc, out, _ = run("gridcrawl", "db", "init", "--db", db, "--kind", "crawl")
    assert rc == 0, out
    folder = tmp_path / "exports"
    folder.mkdir()
    given = ([str(folder)], ["--format", "csv", str(folder)], ["--items", str(folder)], ["--format", "csv", "."])
    for args, (rc, out, _) in zip(given, run_all(*(("gridcrawl", "export", "--db", db, *args) for args in given),
                                                 cwd=folder)):
        assert_user_error(rc, out, f"cannot write {args[-1]}: it is a folder")
    assert list(folder.iterdir()) == [], "nothing may be left in the folder or beside it"
    assert left_in(tmp_path) == ["c.db", "exports"]


def test_a_failed_item_export_keeps_an_earlier_file(tmp_path):
    import sqlite3
    db = tmp_path / "c.db"
    rc, out, _ = run("gridcrawl", "db", "init", "--db", f"sqlite:///{db}", "--kind", "crawl")
    assert rc == 0, out
    with sqlite3.connect(db) as conn:  # an item whose fields are not JSON: the export fails midway
        conn.execute("INSERT INTO item (fingerprint, url, type, position, fields, extracted_at) "
                     "VALUES ('f', 'http://x/', 't', 0, '{', '2026-11-29 00:00:00')")
    earlier = tmp_path / "items.jsonl"
    earlier.write_text("kept\n")
    rc, out, _ = run("gridcrawl", "export", "--db", f"sqlite:///{db}", "--items", str(earlier))
    assert rc != 0
    assert earlier.read_text() == "kept\n" and not list(tmp_path.glob("items.jsonl*.part"))


def test_a_workdir_that_cannot_be_a_directory_is_a_user_error(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    (rc, out, _), (rc2, out2, _) = run_all(("gridcrawl", "run", "http://127.0.0.1:9/", "--workdir", str(a_file)),
                                           ("gridcrawl", "run", "http://127.0.0.1:9/", "--workdir", str(a_file / "crawl-1")))
    assert_user_error(rc, out, f"--workdir {a_file} is a file, not a directory")
    assert_user_error(rc2, out2, f"cannot use --workdir {a_file / 'crawl-1'}: Not a directory")
    assert a_file.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_run_and_client_without_seeds_create_nothing(tmp_path):
    for rc, out, _ in run_all(("gridcrawl", "run", "--workdir", str(tmp_path / "crawl-1")),
                              ("gridcrawl.client", "--manager", f"tcp://127.0.0.1:{free_port()}",
                               "--db", f"sqlite:///{tmp_path / 'crawl.db'}", "--no-progress")):
        assert_user_error(rc, out, "no seed URLs given")
    assert list(tmp_path.iterdir()) == []


def test_manager_warns_once_when_listening_without_curve(tmp_path):
    """Bound to every interface without CURVE, the manager warns once on stderr (issue 21: twice)."""
    proc = subprocess.Popen([sys.executable, "-m", "gridcrawl.manager", "--bind", f"tcp://0.0.0.0:{free_port()}",
                             "--db", f"sqlite:///{tmp_path / 'm.db'}"], stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while not any("CURVE" in line for line in lines) and proc.poll() is None:
            lines.append(proc.stderr.readline())
        time.sleep(1.0)  # anything printed after it, while the manager runs, comes too
    finally:
        proc.terminate()
        _, rest = proc.communicate(timeout=20)
    text = "".join(lines) + rest
    assert sum("CURVE" in line for line in text.splitlines()) == 1, text


@pytest.mark.parametrize("db, needle", [
    ("not-a-database-url", "not a database URL"),
    ("nosuchdb://x/y", "unknown database kind"),
    # libpq's and Heroku's scheme, and SQLite's module's name, get the URL they may have meant
    ("postgres://crawler@127.0.0.1/crawl", "unknown database kind in 'postgres' (did you mean "
                                           "postgresql+psycopg://crawler@127.0.0.1/crawl?)"),
    ("sqlite3:///c.db", "unknown database kind in 'sqlite3' (did you mean sqlite:///c.db?)"),
    # no database: SQLAlchemy's MariaDB dialect asserted (a traceback) on the first table it sought
    ("mysql+pymysql://root:S3cret@127.0.0.1:1/", "mysql+pymysql://root:***@127.0.0.1:1/ names no database: add "
                                               "one after the host, e.g. mysql+pymysql://root:***@127.0.0.1:1/gridcrawl"),
    # the server's own: gridcrawl's tables were created among MariaDB's system tables
    ("mysql+pymysql://root@127.0.0.1:1/mysql", "names the server's own mysql database, not one for gridcrawl's tables"),
    ("postgresql+psycopg://nobody@127.0.0.1:1/none", "cannot reach database"),
    ("sqlite:///no-such-folder-here/c.db", "no-such-folder-here does not exist)"),
    # a port that is no number (a traceback), a scheme forgotten (the password shown)
    ("postgresql+psycopg://grid:S3cret@127.0.0.1:notaport/x", "not a database URL: "
     "'postgresql+psycopg://grid:***@127.0.0.1:notaport/x' (its port is no number"),
    ("grid:S3cret@db-host/gridcrawl", "not a database URL: 'grid:***@db-host/gridcrawl' (expected e.g. "
                                      "dialect+driver://user:password@host:PORT/database)"),
    # in memory: a manager's lease, renewed by another thread, found no table, every second
    ("sqlite://", "'sqlite://' is an SQLite database in memory, gone when the program ends and not shared by its "
                  "threads: name a file, e.g. sqlite:///crawl.db"),
    ("sqlite:///:memory:", "is an SQLite database in memory"),
    # two slashes, not three: SQLAlchemy read crawl.db as a host, and its SQLite dialect raised (a traceback)
    ("sqlite://crawl.db", "not a SQLite URL: 'sqlite://crawl.db' names a host; a file is sqlite:///crawl.db"),
])
def test_invalid_database_url(db, needle):
    client, manager, (rc, out, _) = run_all(
        ("gridcrawl.client", "--manager", "tcp://127.0.0.1:1", "--db", db, "--no-progress", "http://127.0.0.1:9/"),
        ("gridcrawl.manager", "--bind", f"tcp://127.0.0.1:{free_port()}", "--db", db), ("gridcrawl", "report", "--db", db))
    assert_user_error(*client[:2], needle)
    assert_user_error(*manager[:2], needle)
    assert rc == 2 and "Traceback" not in out and "S3cret" not in out, out


def test_a_new_sqlite_file_in_a_read_only_folder_is_not_told_to_open_read_only(read_only_dir):
    """A database to be created in a folder no one may write to: the error advised copying "the
    file" elsewhere or opening it read-only (mode=ro), of a file that does not exist."""
    db = f"sqlite:///{read_only_dir}/crawl.db"
    for rc, out, _ in run_all(*((*program, "--db", db) for program in (
            ("gridcrawl.client", "--manager", "tcp://127.0.0.1:1", "--no-progress", "http://127.0.0.1:9/"),
            ("gridcrawl.manager", "--bind", f"tcp://127.0.0.1:{free_port()}"), ("gridcrawl", "db", "init")))):
        assert_user_error(rc, out, f"its folder {read_only_dir} is read-only: SQLite cannot create the file there; "
                                   "name a file in a folder you may write to")
        assert "mode=ro" not in out, out


def test_a_database_server_that_accepts_and_never_answers_is_an_error_not_a_hang():
    """A port that accepts connections and says nothing (a hung server, a wrong service): the
    connection gives up after CONNECT_TIMEOUT (10 s; 0.3 s here). PyMySQL waited for MySQL's
    greeting for ever (psycopg's connect_timeout already covered it)."""
    kind = "mysql+pymysql"
    import socket
    import threading
    with socket.create_server(("127.0.0.1", 0)) as server:
        held = []
        threading.Thread(target=lambda: [held.append(server.accept()) for _ in range(8)], daemon=True).start()
        url = f"{kind}://root@127.0.0.1:{server.getsockname()[1]}/walk"
        rc, out, seconds = run("gridcrawl", "db", "init", "--db", url, timeout=60,
                               env=shortened("gridcrawl.db.CONNECT_TIMEOUT=0.3"))
    assert_user_error(rc, out, "cannot reach database", url)
    print(f"\n[{kind}, a server that never answers] error after {seconds:.1f} s")


@pytest.mark.parametrize("given, says", [
    ("192.0.2.7:9080", "--http 192.0.2.7:9080: gridcrawl run's dashboard serves on loopback only"),
    ("vm", "--http 'vm': the port must be a number"),
])
def test_run_refuses_a_dashboard_address_it_cannot_serve_before_anything_starts(tmp_path, given, says):
    """Off loopback a dashboard needs users, which gridcrawl run's manager has none of: the run
    used to start its manager and executors, fail, and advise adding a user, which then made
    every later run of the workdir refused (gridcrawl run cannot log in)."""
    rc, out, _ = run("gridcrawl", "run", "http://127.0.0.1:9/", "--http", given, "--workdir", str(tmp_path / "w"))
    assert_user_error(rc, out, says)
    assert not (tmp_path / "w").exists(), "nothing may start"


def test_invalid_endpoints():
    """Each says what is wrong: a HOST:PORT without tcp:// (or with http://) is given the endpoint
    it may have meant, a port out of range or missing is named (all were "not a ZeroMQ endpoint
    (expected tcp://HOST:PORT)")."""
    bind, pause, notaport, too_high, no_port = run_all(
        ("gridcrawl.manager", "--bind", "localhost:9000"),
        ("gridcrawl.client", "--manager", "http://127.0.0.1:9000/", "pause", "abcd"),
        ("gridcrawl.executor", "--manager", "tcp://127.0.0.1:notaport"),
        ("gridcrawl.executor", "--manager", "tcp://127.0.0.1:99999"),
        ("gridcrawl.executor", "--manager", "tcp://127.0.0.1"))
    assert_user_error(*bind[:2], "'localhost:9000' is not a ZeroMQ endpoint (expected tcp://HOST:PORT) (did you mean "
                                 "tcp://localhost:9000?)")
    assert_user_error(*pause[:2], "(did you mean tcp://127.0.0.1:9000?)")
    assert_user_error(*notaport[:2], "'tcp://127.0.0.1:notaport' is not a ZeroMQ endpoint: its port 'notaport' is no "
                                     "number from 1 to 65535")
    assert_user_error(*too_high[:2], "its port '99999' is no number from 1 to 65535")
    assert_user_error(*no_port[:2], "'tcp://127.0.0.1' is not a ZeroMQ endpoint: it names no port")


def test_a_manager_endpoint_with_the_host_star_is_one_line_for_a_program_that_connects(tmp_path):
    """``tcp://*:PORT`` (what the manager binds) given to --manager: ZeroMQ's "Invalid argument"
    came out of the client and the executor as a traceback, exit status 1."""
    for rc, out, _ in run_all(*((program[0], "--manager", "tcp://*:8310", "--connect-timeout", "1", *program[1:])
                                for program in (["gridcrawl.client", "--db", f"sqlite:///{tmp_path}/c.db", "--no-progress",
                                                 "http://127.0.0.1:9/"],
                                                ["gridcrawl.executor"], ["gridcrawl.client", "pause", "3f2a91c0"]))):
        assert_user_error(rc, out, "'tcp://*:8310': `*` is for --bind; connect to tcp://HOST:PORT")
        assert len(out.strip().splitlines()) == 1, out
    from gridcrawl.transport import check_endpoint
    assert check_endpoint("tcp://*:8310", bind=True) == "tcp://*:8310"  # what the manager binds


def test_invalid_settings(tmp_path):
    config = tmp_path / "nan.toml"
    config.write_text("[executor]\ndownload_timeout = nan\n")  # (download_delay is the manager's: refused there)
    infinite = {"GRIDCRAWL_DOWNLOAD_TIMEOUT": "inf", "GRIDCRAWL_HEARTBEAT_INTERVAL": "nan"}
    threads, dispatch, delay, *infinites, config_nan, depth = run_all(
        ("gridcrawl.executor", "--manager", "tcp://127.0.0.1:9000", "--threads", "0"),
        ("gridcrawl", "run", "http://127.0.0.1:9/", "--dispatch", "fastest", "--workdir", str(tmp_path / "w")),
        # NaN passed every "must be > 0" check and hung a crawl (a NaN delay), an infinite one failed every page
        ("gridcrawl", "run", "http://127.0.0.1:9/", "--download-delay", "nan", "--workdir", str(tmp_path / "w")),
        *(start(program, *extra, env=infinite) for program, extra in (
            ("gridcrawl.executor", ["--manager", "tcp://127.0.0.1:9000"]),
            ("gridcrawl.manager", ["--db", f"sqlite:///{tmp_path}/m.db"]),
            ("gridcrawl.client", ["--manager", "tcp://127.0.0.1:9000", "--db", f"sqlite:///{tmp_path}/c.db",
                                  "http://127.0.0.1:9/"]))),
        ("gridcrawl.executor", "--config", str(config), "--manager", "tcp://127.0.0.1:9000"),
        ("gridcrawl", "run", "http://127.0.0.1:9/", "--max-depth", "-2", "--workdir", str(tmp_path / "w")))
    assert_user_error(*threads[:2], "setting threads (--threads) must be >= 1, not 0")
    assert_user_error(*dispatch[:2], "setting dispatch (--dispatch) must be least-loaded or host-hash, not 'fastest'")
    assert_user_error(*delay[:2], "setting download_delay (--download-delay) must be a finite number, not nan")
    for rc, out, _ in infinites:
        assert_user_error(rc, out, "must be a finite number")
    assert_user_error(*config_nan[:2], "download_timeout", "must be a finite number, not nan")
    assert_user_error(*depth[:2], "setting max_depth (--max-depth) must be -1 (no limit) or >= 0, not -2")
    assert not (tmp_path / "w").exists() and not (tmp_path / "m.db").exists() and not (tmp_path / "c.db").exists()


def test_report_on_a_database_without_gridcrawl_tables(tmp_path):
    import sqlite3
    sqlite3.connect(tmp_path / "empty.db").close()  # an empty database file (a missing one: see above)
    rc, out, _ = run("gridcrawl", "report", "--db", f"sqlite:///{tmp_path}/empty.db")
    assert_user_error(rc, out, "not a gridcrawl manager database")


def test_resume_without_seeds_and_without_a_crawl(tmp_path):
    rc, out, _ = run("gridcrawl.client", "--manager", "tcp://127.0.0.1:1", "--db", f"sqlite:///{tmp_path}/c.db",
                     "--no-progress")
    assert_user_error(rc, out, "no seed URLs")


BAD_SPEC = '[[item]]\ntype = "product"\n[item.fields]\nprice = { css = "span[", type = "float" }\n'


def test_a_bad_item_spec_is_refused_before_the_crawl_starts(tmp_path):
    spec = tmp_path / "shop.toml"
    spec.write_text(BAD_SPEC)
    (rc, out, _), client, missing = run_all(
        ("gridcrawl", "run", "http://127.0.0.1:1/", "--workdir", str(tmp_path / "w"), "--extract", str(spec)),
        ("gridcrawl.client", "--manager", f"tcp://127.0.0.1:{free_port()}", "--db", f"sqlite:///{tmp_path}/c.db",
         "--no-progress", "--extract", str(spec), "http://127.0.0.1:1/"),
        ("gridcrawl", "run", "http://127.0.0.1:1/", "--workdir", str(tmp_path / "w"),
         "--extract", str(tmp_path / "missing.toml")))
    assert_user_error(rc, out, "invalid item spec", str(spec), "item 1 (product)", "field 'price'", "invalid css")
    assert not (tmp_path / "w" / "manager.log").exists(), "no process may start"
    assert_user_error(*client[:2], "invalid item spec", "item 1 (product)", "field 'price'")
    assert not (tmp_path / "c.db").exists(), "a refused spec leaves no crawl database behind"
    assert_user_error(*missing[:2], "cannot read the item spec")


def test_an_item_spec_for_a_page_type_the_rules_never_give_is_refused(tmp_path):
    rules = tmp_path / "rules.csv"
    rules.write_text("baseURL,ruleType,fromType,toType,pattern,id,class,tag\n"
                     "http://127.0.0.1:1/,follow,base,topLevel,/c/,all,all,all\n")
    spec = tmp_path / "items.toml"
    spec.write_text('[[item]]\ntype = "doc"\npage_type = "toplevel"\n[item.fields]\ntitle = { css = "title::text" }\n')
    (rc, out, _), client, without_rules = run_all(
        ("gridcrawl", "run", "--workdir", str(tmp_path / "w"), "--rules", str(rules), "--extract", str(spec)),
        ("gridcrawl.client", "--manager", f"tcp://127.0.0.1:{free_port()}", "--db", f"sqlite:///{tmp_path}/c.db",
         "--no-progress", "--rules", str(rules), "--extract", str(spec)),
        ("gridcrawl", "run", "http://127.0.0.1:1/", "--workdir", str(tmp_path / "w"), "--extract", str(spec)))
    assert_user_error(rc, out, "invalid item spec", str(spec), "item 1 (doc): page_type 'toplevel' is no page type "
                      "of the rules (base, topLevel): did you mean 'topLevel'?")
    assert not (tmp_path / "w" / "manager.log").exists(), "no process may start"
    from gridcrawl.client.store import Strategy
    from gridcrawl.items import load_spec
    from gridcrawl.rules import load_rules
    with pytest.raises(ValueError, match="did you mean 'topLevel'"):  # gridcrawl-client, a resumed crawl
        Strategy(rules=load_rules(rules), items=load_spec(spec))
    assert_user_error(*client[:2], "invalid item spec", "did you mean 'topLevel'?")
    assert not (tmp_path / "c.db").exists(), "a refused spec leaves no crawl database behind"
    # without rules only the seeds have a page type, 'base': a spec for another never applies
    assert_user_error(*without_rules[:2], "item 1 (doc): page_type 'toplevel' is no page type of this crawl: page types come "
                      "from keep/follow rules (--rules), and without them only the seeds have one, 'base'")
    assert not (tmp_path / "w" / "manager.log").exists(), "no process may start"
    with pytest.raises(ValueError, match="without them only the seeds have one"):  # gridcrawl-client
        Strategy(items=load_spec(spec))
    spec.write_text(spec.read_text().replace("toplevel", "topLevel"))
    assert Strategy(rules=load_rules(rules), items=load_spec(spec)).items


def test_wait_for_without_rendering_is_refused(tmp_path):
    for rc, out, _ in run_all(
            ("gridcrawl", "run", "http://127.0.0.1:1/", "--workdir", str(tmp_path / "w"), "--wait-for", "li"),
            ("gridcrawl", "fetch", "http://127.0.0.1:1/", "--wait-for", "li"),
            ("gridcrawl.client", "--manager", f"tcp://127.0.0.1:{free_port()}", "--db", f"sqlite:///{tmp_path}/c.db",
             "--no-progress", "--wait-for", "li", "http://127.0.0.1:1/")):
        assert_user_error(rc, out, "--wait-for goes with --render")
    assert not (tmp_path / "w" / "manager.log").exists(), "no process may start"


def test_a_wait_for_that_is_no_css_selector_is_refused_at_start(tmp_path):
    """``li[`` used to fail every page in the browser; Playwright's own selector forms pass."""
    from gridcrawl.rules import wait_for_error
    rules = tmp_path / "rules.toml"
    rules.write_text('base_url = "http://127.0.0.1:1/"\n[[rule]]\nrule_type = "follow"\nfrom_type = "base"\n'
                     'to_type = "list"\npattern = "/list/"\n[page_type.base]\nrender = true\nwait_for = "ul >"\n')
    *refused, (rc, out, _) = run_all(
        *((*given, "--render", "--wait-for", "li[") for given in (
            ["gridcrawl", "run", "http://127.0.0.1:1/", "--workdir", str(tmp_path / "w")],
            ["gridcrawl", "fetch", "http://127.0.0.1:1/"],
            ["gridcrawl.client", "--manager", f"tcp://127.0.0.1:{free_port()}", "--db", f"sqlite:///{tmp_path}/c.db",
             "--no-progress", "http://127.0.0.1:1/"])),
        ("gridcrawl", "run", "--workdir", str(tmp_path / "w"), "--rules", str(rules)))
    for rc_given, out_given, _ in refused:
        assert_user_error(rc_given, out_given, "--wait-for 'li[' is not a CSS selector: Expected ident or '*'")
    assert not (tmp_path / "w" / "manager.log").exists(), "no process may start"
    assert_user_error(rc, out, "invalid rules", "[page_type.base]: wait_for 'ul >' is not a CSS selector")
    assert [s for s in ("li.item", "li:has-text('Item')", "li:visible", "#list >> li", "text=Loaded", "//li",
                        "xpath=//li", "a[href*=item]") if wait_for_error(s)] == []


def test_run_refuses_a_plugin_its_own_executors_do_not_have(tmp_path):
    # gridcrawl run's executors are its own children: a thread needing a plugin none has would wait for ever
    spec = tmp_path / "plug.toml"
    spec.write_text('[[item]]\ntype = "product"\nplugin = "gridcrawl-no-such-plugin@2.0"\n')
    # installed, but its module does not import: refused the same way, saying why (the package is on the
    # PYTHONPATH of that run only)
    info = tmp_path / "packages" / "broken-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[gridcrawl.extractors]\nbroken = gridcrawl_no_such_module:extract\n")
    broken = tmp_path / "broken.toml"
    broken.write_text('[[item]]\ntype = "product"\nplugin = "broken"\n')
    (rc, out, _), installed = run_all(
        ("gridcrawl", "run", "http://127.0.0.1:1/", "--workdir", str(tmp_path / "w"), "--extract", str(spec)),
        start("gridcrawl", "run", "http://127.0.0.1:1/", "--workdir", str(tmp_path / "w"), "--extract", str(broken),
              env={"PYTHONPATH": os.pathsep.join(filter(None, [str(info.parent), os.environ.get("PYTHONPATH")]))}))
    assert_user_error(rc, out, "plugin 'gridcrawl-no-such-plugin@2.0' is not installed in this Python environment",
                      "install the plugin's package here")
    assert not (tmp_path / "w" / "manager.log").exists(), "no process may start"
    rc, out, _ = installed
    assert_user_error(rc, out, "plugin broken cannot load: ModuleNotFoundError: No module named "
                      "'gridcrawl_no_such_module'", "its package is installed here, but the plugin does not load: "
                      "fix the package")
    assert "install the plugin's package here" not in out  # (it said so: it is installed)
    assert not (tmp_path / "w" / "manager.log").exists(), "no process may start"


def test_item_commands_refuse_what_they_cannot_do(tmp_path):
    db = f"sqlite:///{tmp_path}/c.db"
    rc, out, _ = run("gridcrawl", "db", "init", "--db", db, "--kind", "crawl")
    assert rc == 0, out
    spec = tmp_path / "ok.toml"
    spec.write_text('[[item]]\ntype = "t"\n[item.fields]\nt = { css = "title::text" }\n')
    import sqlite3
    sqlite3.connect(tmp_path / "empty.db").close()
    named = (([], "pages.ttl", "the pages are exported as JSON lines or WARC or CSV, none of "
              "them a .ttl file: give a name ending in .warc, .warc.gz, .csv, .jsonl, .ndjson"),
             (["--triples"], "t.ttl", "the triples are exported as N-Triples or JSON lines, none "
              "of them a .ttl file: give a name ending in .nt, .jsonl, .ndjson, or --format nt or jsonl"),
             (["--items"], "items.json", "none of them a .json file"))
    items_warc, type_alone, *by_name, no_db, missing, empty = run_all(
        ("gridcrawl", "export", "--db", db, "--items", "--format", "warc", str(tmp_path / "x")),
        ("gridcrawl", "export", "--db", db, "--type", "t", str(tmp_path / "x")),
        *(("gridcrawl", "export", "--db", db, *args, str(tmp_path / name)) for args, name, _ in named),
        ("gridcrawl", "report"), ("gridcrawl", "report", "--crawl-db", f"sqlite:///{tmp_path}/missing.db"),
        ("gridcrawl", "report", "--crawl-db", f"sqlite:///{tmp_path}/empty.db"))
    assert_user_error(*items_warc[:2], "--format must be jsonl or csv for items")
    assert_user_error(*type_alone[:2], "--type goes with --items")
    for (_, name, needle), (rc, out, _) in zip(named, by_name):
        assert_user_error(rc, out, needle)
        assert not (tmp_path / name).exists()
    assert_user_error(*no_db[:2], "give --db")
    assert_user_error(*missing[:2], "no database file")
    assert not (tmp_path / "missing.db").exists()
    assert_user_error(*empty[:2], "is not a gridcrawl crawl database")
    with sqlite3.connect(tmp_path / "c.db") as conn:   # a page stored without its body (--no-content)
        conn.execute("INSERT INTO document (url, fingerprint, final_url, size, depth, fetched_at, fetch_seconds, "
                     "parse_seconds, extract_seconds) VALUES ('http://a.test/', 'f', 'http://a.test/', 0, 0, "
                     "'2026-01-01 00:00:00', 0, 0, 0)")
    no_bodies, no_crawl = run_all(
        ("gridcrawl", "extract", "--db", db, "--extract", str(spec), "--no-progress"),
        # a database that holds no crawl: refused and left as it was (the crawl tables were added to it)
        ("gridcrawl", "extract", "--db", f"sqlite:///{tmp_path}/empty.db", "--extract", str(spec), "--no-progress"))
    assert_user_error(*no_bodies[:2], "no page bodies are stored")
    assert_user_error(*no_crawl[:2], "holds no crawl: gridcrawl extract takes a crawl database")
    with sqlite3.connect(tmp_path / "empty.db") as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


@pytest.mark.parametrize("args, needle", [
    (["not a url"], "invalid seed URL"),
    (["http://127.0.0.1:9/", "--master", "spark://127.0.0.1:7077"], "not SQLite"),
    (["http://127.0.0.1:9/", "--partitions", "-1"], "setting spark_partitions (--partitions) must be >= 0"),
    # a master Spark cannot parse: a Java stack trace and "Java gateway process exited" (or "An error
    # occurred while calling None.org.apache.spark.api.java.JavaSparkContext"), or "not SQLite"
    (["http://127.0.0.1:9/", "--master", "bogus"], "--master 'bogus' is not a Spark master: local[*], local[N]"),
    (["http://127.0.0.1:9/", "--master", "local[x]"], "--master 'local[x]' is not a Spark master"),
])
def test_spark_bad_input(tmp_path, args, needle):
    """``gridcrawl spark`` refuses bad input before it starts Spark (so also without pyspark)."""
    rc, out, _ = run("gridcrawl", "spark", *args, "--db", f"sqlite:///{tmp_path}/c.db")
    assert_user_error(rc, out, needle)


@pytest.mark.parametrize("program", ["gridcrawl", "manager", "executor", "client"])
def test_ctrl_c_while_a_program_loads_ends_it_by_sigint_without_a_traceback(program):
    """A real SIGINT delivered while the program's modules are imported (the first third of a
    second of every command, before typer and the programs' own handlers take it) ends it by
    SIGINT (the shell's status 130), as a Ctrl-C later ends a crawl, and no traceback."""
    code = ("import importlib, os, signal\n"
            "from gridcrawl import entry\n"
            "real = importlib.import_module\n"
            "def interrupted(name):\n"
            "    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C at the terminal, while importing\n"
            "    return real(name)\n"
            "entry.import_module = interrupted\n"
            f"entry.{program}()\n")
    proc = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGINT and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""  # stopped before it printed its help


def _closed_pipe_start(*args: str) -> subprocess.Popen:
    """Start ``python -m ARGS`` with its standard output a pipe whose reader is gone (``| head -1``
    once head has read its line), its stderr captured."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.Popen([sys.executable, "-m", *args], stdout=write_end, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)


def test_a_closed_output_pipe_ends_a_program_by_sigpipe_not_status_1(tmp_path):
    """``gridcrawl run … | head -3`` and ``gridcrawl fetch URL --links 100 | head -1`` exited with
    status 1 (the README's "every page failed") and said nothing: typer (click) and rich turn a
    BrokenPipeError into exit status 1. They end by SIGPIPE now, as a Unix tool does (the
    shell's status 141), whichever printed: rich (help, tables) or typer (JSON lines)."""
    from sites import Site, SiteServer
    site = Site()
    site.pages["/"] = b"<html><body>" + b"".join(b'<a href="/p%d.html">p</a>' % i for i in range(300)) + b"</body></html>"
    with SiteServer(site) as server:
        given = (["gridcrawl", "--help"], ["gridcrawl", "fetch", server.url("/"), "--links", "-1"],
                 ["gridcrawl", "fetch", server.url("/"), "--json"])
        procs = [_closed_pipe_start(*args) for args in given]
        failed = subprocess.Popen([sys.executable, "-m", "gridcrawl", "fetch", server.url("/none.html")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        export = start("gridcrawl", "export", "--db", f"sqlite:///{tmp_path}/none.db", "--format", "jsonl", "-")
        try:
            for args, proc in zip(given, procs):
                _, err = proc.communicate(timeout=60)
                assert proc.returncode == -signal.SIGPIPE and err == "", (args, proc.returncode, err)
            failed.communicate(timeout=60)
            assert failed.returncode == 1, "a page that failed is status 1 still (output to /dev/null)"
        finally:
            for proc in (*procs, failed):
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
    rc, out, _ = finish(export)
    assert rc == 2, "a user error is status 2 still"


def test_ctrl_c_in_a_command_without_a_crawl_ends_it_by_sigint():
    """``gridcrawl fetch`` of a host that accepts and never answers, interrupted by a real SIGINT
    once it waits: typer turned the KeyboardInterrupt into exit status 130, a normal exit to a
    shell, whose ``for`` loop then went on to its next command. It ends by SIGINT now."""
    import socket
    with socket.create_server(("127.0.0.1", 0)) as server:
        proc = subprocess.Popen([sys.executable, "-m", "gridcrawl", "fetch",
                                 f"http://127.0.0.1:{server.getsockname()[1]}/", "--allow-private", "127.0.0.0/8"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        server.settimeout(60)
        conn, _ = server.accept()  # it asks for robots.txt: it waits for the answer now
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        conn.close()
    assert proc.returncode == -signal.SIGINT and "Traceback" not in err, err


@pytest.mark.parametrize("args, says", [
    (["--page-type", "list"], "--page-type goes with --rules or --extract: without them a page's type changes nothing"),
    (["--render-timeout", "5"], "--render-timeout goes with --render (or a page type or item spec with render = true)"),
    (["--browser-path", "/usr/bin/chromium", "--render-timeout", "5"],
     "--render-timeout and --browser-path go with --render"),
    (["--body", "--json"], "--body and --json exclude each other"),
])
def test_fetch_refuses_options_that_would_change_nothing(args, says):
    """gridcrawl fetch took them and printed what it would have printed without them (the
    --body of --body --json), as if they had been tried: gridcrawl run refuses such options."""
    rc, out, seconds = run("gridcrawl", "fetch", "http://127.0.0.1:9/", *args)
    assert_user_error(rc, out, says)
    assert "127.0.0.1:9" not in out, "refused before any fetch"


def test_allow_private_takes_a_comma_separated_list_on_the_command_line(site_server, small_site):
    """As the configuration file and GRIDCRAWL_ALLOW_PRIVATE do, and --no-proxy: on the command
    line it was refused ("'10.0.0.0/8,192.168.0.0/16' is not an IP network")."""
    server = site_server(small_site)
    (rc, out, _), refused = run_all(
        ("gridcrawl", "fetch", server.url("/"), "--allow-private", "10.0.0.0/8,192.168.0.0/16", "--links", "0"),
        ("gridcrawl", "fetch", server.url("/"), "--allow-private", "10.0.0.0/8,10.0.0.0/33"))
    assert rc == 0 and "200" in out, out
    rc, out, _ = refused
    assert_user_error(rc, out, "'10.0.0.0/33' is not an IP network")


@pytest.mark.parametrize("given, says", [
    ("https://www.python.org/", "'https://www.python.org/' is a URL: --allow-domain takes a domain, all of whose pages "
                                "and subdomains are in scope (--allow-domain www.python.org)"),
    ("python.org,sphinx-doc.org", "'python.org,sphinx-doc.org' is several domains: give each its own --allow-domain "
                                  "(--allow-domain python.org --allow-domain sphinx-doc.org)"),
])
@pytest.mark.parametrize("program", [("gridcrawl", "run", "--workdir", "w"), ("gridcrawl", "fetch"),
                                     ("gridcrawl.client", "--manager", "tcp://127.0.0.1:9", "--db", "sqlite:///c.db")])
def test_allow_domain_refuses_a_url_and_a_list_it_would_keep_as_a_domain_no_host_is(tmp_path, program, given, says):
    """Both were kept in the crawl's scope as they were written ("https://www.python.org/"), which
    no host name matches: the crawl left the domain out, silently, and stored that scope."""
    rc, out, _ = run(*program, "http://127.0.0.1:9/", "--allow-domain", given, cwd=tmp_path, env={"COLUMNS": "300"})
    assert_user_error(rc, out, f"Invalid value for '--allow-domain': {says}")
    assert list(tmp_path.iterdir()) == [], "refused before anything is made"


def test_a_seeds_file_that_is_a_table_names_its_url_column_and_the_cut_that_takes_it(tmp_path):
    """``--seeds-file visited.csv`` (gridcrawl export's CSV, a spreadsheet's export) refused each
    row as an invalid URL "(did you mean http://id,url,fingerprint,...?)". A URL holding a comma
    is still one seed."""
    table = tmp_path / "visited.csv"
    table.write_text("id,url,fingerprint,depth,status\n1,http://127.0.0.1:9/a.html,a7d2,0,200\n")
    rc, out, _ = run("gridcrawl", "run", "--seeds-file", str(table), "--workdir", str(tmp_path / "w"))
    assert_user_error(rc, out, f"--seeds-file {table} is a table (comma-separated columns), not one URL per line: its "
                               f"column 2 holds the URLs (cut -d, -f2 {table} | tail -n +2 > seeds.txt takes them out)")
    assert "did you mean" not in out and not (tmp_path / "w").exists(), out
    from gridcrawl.client.cli import seed_list
    listed = tmp_path / "seeds.txt"
    listed.write_text("http://127.0.0.1:9/Washington,_D.C.\n")
    assert seed_list([], str(listed)) == ["http://127.0.0.1:9/Washington,_D.C."]


def test_a_tilde_no_shell_expanded_is_the_home_folder_of_a_workdir_and_named_in_a_database_url(tmp_path):
    """``--workdir=~/crawl-1`` (no shell expands a ~ after "=") made a folder named "~" in the
    current one; ``sqlite:///~/crawl.db`` said only that the folder "./~" does not exist."""
    home = tmp_path / "home"
    home.mkdir()
    (rc, out, _), export = run_all(("gridcrawl", "run", "http://127.0.0.1:9/", "--workdir=~/crawl-1", "--recrawl"),
                                   ("gridcrawl", "export", "--db", "sqlite:///~/crawl.db", "out.jsonl"),
                                   cwd=tmp_path, env={"HOME": str(home)})
    assert_user_error(rc, out, f"nothing to recrawl: {home}/crawl-1 holds no crawl yet")
    assert not (tmp_path / "~").exists()
    rc, out, _ = export
    assert_user_error(rc, out, f"no database file ~/crawl.db (from sqlite:///~/crawl.db; ~ is not expanded in a URL: "
                               f"sqlite:///{home}/crawl.db)")


def test_seeds_from_a_terminal_are_asked_for_not_waited_for_in_silence(tmp_path):
    """``--seeds-file -`` typed on a terminal, with no pipe: the command waited for the keyboard
    and said nothing, a hang to a newcomer."""
    import pty
    main, child = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "gridcrawl", "run", "--seeds-file", "-", "--workdir",
                                 str(tmp_path / "w"), "--recrawl"], stdin=child, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        import select
        said = proc.stderr.readline() if select.select([proc.stderr], [], [], 20)[0] else "(nothing in 20 s)"
        os.write(main, b"http://127.0.0.1:9/\n\x04")  # a URL, then Ctrl-D
        _, err = proc.communicate(timeout=30)
    finally:
        os.close(main)
        os.close(child)
    assert said == "reading seed URLs from standard input, one per line (Ctrl-D to end)\n", said + err
    assert proc.returncode == 2 and "nothing to recrawl" in err, err  # the URL was read: then --recrawl is refused


def test_a_control_action_without_an_application_id_says_where_the_id_is_shown():
    """``gridcrawl-client --manager M pause`` named "crawl_meta" and the dashboard, not the
    crawl summary's application row or gridcrawl report, where a newcomer has seen it."""
    rc, out, seconds = run("gridcrawl.client", "--manager", "tcp://127.0.0.1:9", "pause")
    assert_user_error(rc, out, "pause needs the application id, or 4 or more of its first characters: the crawl "
                               "summary's application row, gridcrawl report --db MANAGER_DB (its applications)")
    assert seconds < 10, "refused before any connection"


def test_a_key_named_by_a_path_is_told_the_dir_option(tmp_path):
    """``gridcrawl keys new keys/desk-17`` (a folder and a name, as docs/security.md keeps them)
    was refused as an invalid name, listing the characters a name may have."""
    rc, out, _ = run("gridcrawl", "keys", "new", "keys/desk-17", cwd=tmp_path)
    assert_user_error(rc, out, "invalid key name 'keys/desk-17': a name is no path; give the folder apart: "
                               "gridcrawl keys new desk-17 --dir keys")
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_of_a_client_waiting_for_its_manager_says_so_in_one_line(tmp_path):
    """A client started before its manager (or given a wrong --manager) and stopped by Ctrl-C
    while it waits: it printed the whole crawl summary (an empty application, "the pages:
    gridcrawl export ..." of none) and "stopped before the end", not that no manager answered.
    Its line saying it waits (WAITING_SAID_AFTER, 10 s; 0.2 s here) tells it waits."""
    import select
    port = free_port()
    db = tmp_path / "c.db"
    proc = subprocess.Popen([sys.executable, "-m", "gridcrawl.client", "--manager", f"tcp://127.0.0.1:{port}",
                             "--db", f"sqlite:///{db}", "--connect-timeout", "60", "--no-progress",
                             "http://127.0.0.1:9/"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=shortened("gridcrawl.link.WAITING_SAID_AFTER=0.2"))
    said, deadline = b"", time.monotonic() + 30
    while b"waiting for it" not in said and select.select([proc.stderr], [], [], max(0, deadline - time.monotonic()))[0]:
        chunk = os.read(proc.stderr.fileno(), 65536)  # (not through the file's buffer: communicate reads the rest)
        if not chunk:
            break
        said += chunk
    assert db.exists() and b"no answer from the manager" in said, said  # the seeds are queued: it waits
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    err = said.decode() + err
    assert proc.returncode == -signal.SIGINT, err
    assert (f"stopped (Ctrl-C) before the manager at tcp://127.0.0.1:{port} answered: nothing was crawled this run, "
            "1 URL left to visit; the same command goes on (gridcrawl-client --manager") in err, err
    assert "crawl summary" not in out + err and "gridcrawl export" not in out + err and "Traceback" not in err, err


@pytest.mark.parametrize("claimed, says", [
    ("plugin:shop", "--capability plugin:shop: an executor declares the plugin:NAME capabilities of the extractor "
                    "plugins installed in its Python environment by itself: install the plugin's package here instead"),
    ("a b", "--capability 'a b': a capability is 1 to 128 printable characters without spaces")])
def test_an_executor_refuses_a_capability_it_cannot_honour(claimed, says):
    """--capability plugin:shop on an executor without the plugin took the threads that need it and
    failed their items ("not installed on this executor"); --capability 'a b' started, then the
    manager refused the executor. Both are refused at start now, before any connection."""
    rc, out, _ = run("gridcrawl.executor", "--manager", "tcp://127.0.0.1:9", "--capability", claimed)
    assert_user_error(rc, out, f"error: {says}")


def test_a_read_only_database_at_start_is_one_line_for_the_manager_the_client_and_extract(tmp_path):
    """A database that takes no writes (a read-only file or mount, a PostgreSQL replica or
    ``default_transaction_read_only``) gave the manager, the client and ``gridcrawl extract`` a
    100-line traceback; now one line naming the database and the driver's reason, exit status 2."""
    from gridcrawl import models
    from gridcrawl.db import init_schema, open_database
    for name, kind in (("manager", models.manager_metadata), ("crawl", models.crawl_metadata)):
        engine = open_database(f"sqlite:///{tmp_path / (name + '.db')}")
        init_schema(engine, kind, models.manager_meta if name == "manager" else models.crawl_meta)
        engine.dispose()
    read_only = lambda name: f"sqlite:///file:{tmp_path / (name + '.db')}?mode=ro&uri=true"  # noqa: E731
    port = free_port()
    rc, out, took = run("gridcrawl.manager", "--bind", f"tcp://127.0.0.1:{port}", "--db", read_only("manager"))
    assert_user_error(rc, out, "error: the manager database failed: attempt to write a readonly database")
    rc, out, took = run("gridcrawl.client", "--manager", f"tcp://127.0.0.1:{port}", "--connect-timeout", "2",
                        "--db", read_only("crawl"), "http://127.0.0.1:9/")
    assert_user_error(rc, out, "error: the crawl database failed: attempt to write a readonly database",
                      "run the same command again")
    assert len(out.strip().splitlines()) == 1, out
    import datetime as dt
    with open_database(f"sqlite:///{tmp_path / 'crawl.db'}").begin() as conn:  # a page for extract to read
        conn.execute(models.document.insert().values(url="http://127.0.0.1:9/", fingerprint="0" * 32,
                                                     final_url="http://127.0.0.1:9/", status=200, size=20,
                                                     content_type="text/html", content="<title>t</title>",
                                                     depth=0, fetched_at=dt.datetime(2026, 1, 1)))
    spec = tmp_path / "spec.toml"
    spec.write_text('[[item]]\ntype = "page"\n[item.fields]\ntitle = { css = "title::text" }\n')
    rc, out, took = run("gridcrawl", "extract", "--db", read_only("crawl"), "--extract", str(spec), "--no-progress")
    assert_user_error(rc, out, "error: the crawl database failed: attempt to write a readonly database",
                      "items and item spec are as they were")
