"""A newcomer's first hour (issue 21): every failure of a crawl says why, and what to do next.

Real programs as processes on a generated site: a grid whose executor refuses the loopback site
(no ``--allow-private``, as on a private network), the client's summary of errors by kind, its
exit status, and ``--retry-failed`` once the cause is fixed.
"""

from __future__ import annotations

import os
import re
import shlex
from urllib.parse import quote_plus
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grid import Grid, on_a_terminal, wait_for
from sites import generate_site, reachable, status_page


PROGRESS_AND_LOG = """
import logging, time
from gridcrawl.cli_common import setup_logging
from gridcrawl.client.app import Progress
from gridcrawl.client.progress import ProgressView
setup_logging("INFO")
with ProgressView(total=10) as view:
    progress = Progress()
    progress.pages = 3
    view.update(progress)
    time.sleep(0.3)
    logging.getLogger("gridcrawl.client").info("crawl complete")
    time.sleep(0.3)
"""


def test_log_lines_are_not_glued_onto_the_progress_bar():
    """On a terminal (a pseudo-terminal here), a log line written while the bar is shown starts
    a line of its own (issue 21: it was appended to the bar's line)."""
    rc, output = on_a_terminal([sys.executable, "-c", PROGRESS_AND_LOG],
                               env={**os.environ, "TERM": "xterm", "COLUMNS": "100"}, timeout=30)
    assert rc == 0, output
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output)  # drop terminal controls
    lines = [line for line in re.split(r"[\r\n]", text) if "crawl complete" in line]
    assert lines and all(re.match(r"\d{4}-\d\d-\d\d ", line) for line in lines), lines
    assert "3 pages" in text  # the bar was drawn


def test_the_progress_bar_and_line_say_1_page_and_1_error():
    """The bar said "1 pages", "1 errors"."""
    script = PROGRESS_AND_LOG.replace("progress.pages = 3", "progress.pages = progress.errors = 1")
    rc, output = on_a_terminal([sys.executable, "-c", script], env={**os.environ, "TERM": "xterm", "COLUMNS": "120"},
                               timeout=30)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output)
    assert rc == 0 and "1 page " in text and "1 error " in text, text
    assert "1 pages" not in text and "1 errors" not in text, text
    plain = subprocess.run([sys.executable, "-c", script.replace("import logging, time", "import logging, time\n"
                                                                 "import gridcrawl.client.progress as gp\n"
                                                                 "gp.PLAIN_EVERY = 0")],
                           capture_output=True, text=True, timeout=60)
    assert "crawl: 1 page, 1 error, ? to visit" in plain.stderr, plain.stderr


def test_without_a_terminal_the_progress_is_a_plain_line_now_and_then():
    """``gridcrawl run`` under nohup or into a log file printed nothing for the whole crawl (22
    minutes on a site with no end): the same figures come as one plain line every PLAIN_EVERY
    seconds (0.2 s here); --no-progress still prints none."""
    script = PROGRESS_AND_LOG.replace("import logging, time", "import logging, time\nimport gridcrawl.client.progress as "
                                      "gp\ngp.PLAIN_EVERY = 0.2").replace("    view.update(progress)\n    time.sleep(0.3)",
                                      "    time.sleep(0.3)\n    view.update(progress)")
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    (line,) = [line for line in shown.stderr.splitlines() if line.startswith("crawl: ")]
    assert line == "crawl: 3 pages, 0 errors, ? to visit, 0 in flight, 0.0 pages/s" and "\x1b" not in shown.stderr
    off = subprocess.run([sys.executable, "-c", script.replace("ProgressView(total=10)",
                                                               "ProgressView(enabled=False, total=10)")],
                         capture_output=True, text=True, timeout=60)
    assert off.returncode == 0 and "crawl: " not in off.stderr, off.stderr


@pytest.mark.e2e

def test_all_blocked_crawl_says_why_exits_nonzero_and_retry_failed_fetches_them(tmp_path, site_server):
    site = generate_site(8, links_per_page=3, seed=21)
    server = site_server(site)
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        blocked = grid.start_executor("private", allow_private=None)  # refuses 127.0.0.1
        client = grid.start_client(server.url("/"))
        assert client.wait(timeout=90) == 1, grid.log("client.log")
        out = grid.log("client.log")
        # the summary: errors by kind with a count and one example that says what to do
        assert "errors by kind" in out and "blocked" in out
        assert "--allow-private 127.0.0.0/8 (gridcrawl run, gridcrawl-executor)" in " ".join(
            out.replace("│", " ").split()) and server.url("/") in out  # the programs that take it
        assert "every page of this run failed (1 page; the crawl's errors by kind: blocked 1)" in out
        # where to find all of them, and the command that retries them
        assert "--format csv" in out and "--retry-failed blocked" in out
        assert f"{grid.client_command()} --retry-failed blocked" in out
        # not gridcrawl fetch, which lets a URL reach its own private address: it would not show the block
        assert "gridcrawl fetch" not in out
        assert f"crawl database: {grid.crawl_db}" in out and "gridcrawl report --db" in out
        # the executor said so once, as a WARNING, with the option to use
        warnings = [line for line in grid.log("private.log").splitlines() if "SSRF guard" in line]
        assert len(warnings) == 1 and "WARNING" in warnings[0] and "--allow-private 127.0.0.0/8" in warnings[0]

        blocked.terminate()
        blocked.wait(10)
        grid.start_executor("allowed")
        again = grid.start_client("--retry-failed", "blocked")
        assert again.wait(timeout=90) == 0, grid.log("client.log")
        time.sleep(2 * 0.75)  # past the client's liveness at the manager (0.25 s x 3), twice over
        assert "client silent" not in grid.log("manager.log")  # a finished crawl's client just left
    finally:
        grid.stop()
    documents = grid.query("crawl", "SELECT count(*) FROM document")[0][0]
    failed = grid.query("crawl", "SELECT count(*) FROM visited_url WHERE error_kind IS NOT NULL")[0][0]
    assert documents == 8 and failed == 0
    assert "1 failed URL queued again" in grid.log("client.log")


def test_the_summary_names_failed_statuses_one_by_one_and_retry_failed_takes_them(tmp_path, site_server):
    """A 404 and a 503 are both ``http_status`` failures; the summary's retry command names
    them one by one (``http_404,http_503``) and ``--retry-failed "http 503"`` (the summary's
    label) fetches the 503 again and not the 404."""
    site = generate_site(6, links_per_page=2, seed=29)
    site.pages["/"] = site.pages["/"].replace(b"</body>", b'<a href="/gone.html">g</a><a href="/down.html">d</a></body>')
    site.extra["/down.html"] = status_page(503)
    server = site_server(site)
    run = [sys.executable, "-m", "gridcrawl", "run", "--workdir", str(tmp_path), "--no-progress",
           "--executors", "1", "--threads", "2"]
    first = subprocess.run([*run, server.url("/")], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "GRIDCRAWL_RETRY_TIMES": "0"})
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"--threads 2 {server.url('/')} --retry-failed http_404,http_503\n" in first.stderr
    again = subprocess.run([*run, "--retry-failed", "http 503"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "GRIDCRAWL_RETRY_TIMES": "0"})
    assert again.returncode == 1, again.stderr[-3000:]  # the one page of this run failed again
    assert "1 failed URL queued again" in again.stderr
    # of this run, not "of this crawl" (which stored 6 documents): the README's exit status 1
    assert "error: every page of this run failed (1 page; the crawl's errors by kind: http 404 1, http 503 1)" \
        in again.stderr, again.stderr[-3000:]
    with server.lock:
        asked = [r.path for r in server.requests]
    assert asked.count("/down.html") == 2 and asked.count("/gone.html") == 1
    bad = subprocess.run([*run, "--retry-failed", "http_5xx"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "or http_NNN for one HTTP status" in bad.stderr


# ------------------------------------------------------------------ 80 columns


def _commands():
    """(words, click command) of every command of the four programs, subcommands included."""
    import typer
    from gridcrawl import cli
    from gridcrawl.client import cli as client_cli
    from gridcrawl.executor import cli as executor_cli
    from gridcrawl.manager import cli as manager_cli

    def walk(words, command):
        yield words, command
        for name, sub in getattr(command, "commands", {}).items():  # a group's subcommands
            yield from walk(words + [name], sub)
    for program, module in (("gridcrawl", cli), ("gridcrawl-manager", manager_cli),
                            ("gridcrawl-executor", executor_cli), ("gridcrawl-client", client_cli)):
        yield from walk([program], typer.main.get_command(module.app))


def _help(words: list[str], columns: int = 80) -> str:
    from typer.testing import CliRunner
    from gridcrawl import cli
    from gridcrawl.client import cli as client_cli
    from gridcrawl.executor import cli as executor_cli
    from gridcrawl.manager import cli as manager_cli
    app = {"gridcrawl": cli, "gridcrawl-manager": manager_cli, "gridcrawl-executor": executor_cli,
           "gridcrawl-client": client_cli}[words[0]].app
    result = CliRunner().invoke(app, [*words[1:], "--help"], env={"COLUMNS": str(columns)}, prog_name=words[0])
    assert result.exit_code == 0, result.output
    return result.output


def test_every_help_screen_fits_80_columns_with_whole_option_names():
    """Issue 21: help screens cut option names (--heartbeat-inte…), labelled every flag <bool>,
    showed raw ``reST``, and rich ate "[report]"."""
    checked = 0
    for words, command in _commands():
        text = _help(words)
        where = " ".join(words)
        assert all(len(line) <= 80 for line in text.splitlines()), where
        assert "…" not in text and "<bool>" not in text and "``" not in text, (where, text)
        for param in command.params:
            for name in param.opts + param.secondary_opts:
                if name.startswith("--"):
                    assert name in text, (where, name, text)
        checked += 1
    assert checked >= 12
    assert "gridcrawl[report]" in _help(["gridcrawl", "report"])
    top = _help(["gridcrawl"])
    assert "--config" in top
    for command in ("run", "fetch", "spark"):  # it works after the command too: say so there
        assert "--config FILE, before or after the command" in " ".join(_help(["gridcrawl", command]).split())
    client = _help(["gridcrawl-client"])  # the common options first, the rest in groups
    assert client.index("--manager") < client.index("Connection and login") < client.index("--heartbeat-interval")


def test_report_fits_80_columns_and_wide_shows_every_column(tmp_path):
    from typer.testing import CliRunner
    from dbfixtures import insert_known_timings
    from gridcrawl.cli import app
    from gridcrawl.db import open_database
    url = f"sqlite:///{tmp_path / 'manager.db'}"
    engine = open_database(url)
    insert_known_timings(engine)
    engine.dispose()
    narrow = CliRunner().invoke(app, ["report", "--db", url], env={"COLUMNS": "80"})
    assert narrow.exit_code == 0, narrow.output
    assert all(len(line) <= 80 for line in narrow.output.splitlines())
    assert "…" not in narrow.output
    for text in ("ex-1", "ex-2", "ex-3", "known timings", "pages/s", "crawl s", "failed: grid threads given up"):
        assert text in narrow.output
    wide = CliRunner().invoke(app, ["report", "--db", url, "--wide"], env={"COLUMNS": "160"})
    assert wide.exit_code == 0 and "…" not in wide.output
    for text in ("host1", "CPU MHz", "mean wait s"):
        assert text in wide.output and text not in narrow.output
    # whose crawl each application is (a grid of several users): its user, "u"
    assert re.search(r"│ a1\s+│ known timings\s+│ u\s+│ stopped", wide.output), wide.output


# ------------------------------------------------------------------ CI as the docs say


def test_ci_script_installs_the_readmes_packages_starts_both_servers_and_requires_them():
    """``.ci/run`` installs the system packages the README lists (one list), starts PostgreSQL
    and MariaDB, sets GRIDCRAWL_REQUIRE_DATABASES=1 as docs/databases.md says, and runs the
    README's test command (issue 21: it started PostgreSQL only, ``|| true``, and never set it)."""
    root = Path(__file__).resolve().parent.parent
    script = (root / ".ci" / "run").read_text()
    assert subprocess.run(["bash", "-n", str(root / ".ci" / "run")]).returncode == 0
    packages = set(re.search(r'^packages="([^"]+)"', script, re.M).group(1).split())
    readme = (root / "README.md").read_text()
    tests_section = readme[readme.index("## Tests"):]
    listed = set(re.findall(r"`([a-z0-9][a-z0-9.+-]+)`", tests_section.split("| package | used by |")[1].split("\n\n")[0]))
    assert packages <= listed and packages, (packages, listed)
    assert "pg_ctlcluster --skip-systemctl-redirect" in script and "/usr/sbin/mariadbd" in script
    assert "main start || true" not in script  # a server that does not start is a failure, not a skip
    assert "export GRIDCRAWL_REQUIRE_DATABASES=1" in script
    command = tests_section.split("```sh\n", 1)[1].split("```", 1)[0].strip().splitlines()[-1]
    assert command.startswith("python -m pytest -q"), command
    assert script.rstrip().endswith("\n" + command)


@pytest.mark.e2e
def test_summary_keeps_duplicates_apart_from_errors(tmp_path, site_server):
    """A duplicate page is the crawl's decision, not a failure: the summary counts it apart
    ("set aside", a table of its own), and the next commands name only the failures (a
    duplicate fetched again would be a duplicate again)."""
    from sites import Site, status_page
    same = b"<html><head><title>Twin</title></head><body><p>the same words on two pages</p></body></html>"
    site = Site(pages={"/": b'<html><body><a href="/a.html">a</a> <a href="/b.html">b</a> '
                            b'<a href="/gone.html">gone</a></body></html>',
                       "/a.html": same, "/b.html": same})
    site.extra["/gone.html"] = status_page(404)
    server = site_server(site)
    proc = subprocess.run([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "1",
                           "--workdir", str(tmp_path), "--no-progress", "--no-sitemaps"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stderr
    assert re.search(r"│ errors\s+│ 1\s+│", out) and re.search(r"│ set aside\s+│ 1 \(duplicates", out), out
    failures, _, set_aside = out.partition("set aside by the crawl's rules")
    failures = failures[failures.index("errors by kind"):]
    assert "http 404" in failures and "duplicate" not in failures, out
    assert "duplicate" in set_aside and "same body" in set_aside and "http 404" not in set_aside, out
    assert f"gridcrawl fetch {server.url('/gone.html')}" in out
    assert re.search(r"--retry-failed http_404\s*$", out, re.MULTILINE), out
    with sqlite3.connect(tmp_path / "crawl.db") as conn:
        kinds = sorted(k for (k,) in conn.execute("SELECT error_kind FROM visited_url WHERE error_kind IS NOT NULL"))
    assert kinds == ["duplicate", "http_status"]


@pytest.mark.e2e
def test_gridcrawl_run_takes_its_seeds_from_a_file(tmp_path, site_server):
    """An organisation's list of sites: ``--seeds-file`` (comments, blank lines, a seed given
    twice) beside a seed argument; every seed's host is in scope and, being loopback here,
    allowed by the executors' SSRF guard."""
    from sites import reachable
    first, second = generate_site(5, links_per_page=2, seed=1), generate_site(4, links_per_page=2, seed=2)
    one, two = site_server(first), site_server(second, host="127.0.0.2")
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(f"# the two intranet sites\n{two.url('/')}\n\n  {one.url('/')}  \n{two.url('/')}\n")
    proc = subprocess.run([sys.executable, "-m", "gridcrawl", "run", one.url("/"), "--seeds-file", str(seeds),
                           "--executors", "1", "--workdir", str(tmp_path / "w"), "--no-progress", "--no-sitemaps"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with sqlite3.connect(tmp_path / "w" / "crawl.db") as conn:
        stored = {url for (url,) in conn.execute("SELECT url FROM document")}
        failed = conn.execute("SELECT count(*) FROM visited_url WHERE error_kind IS NOT NULL").fetchone()[0]
    assert stored == {one.url(p) for p in reachable(first)} | {two.url(p) for p in reachable(second)}
    assert failed == 0


def _depth(site, start: str = "/") -> dict[str, int]:
    """Hops from ``start`` to each page of ``site`` (breadth-first)."""
    depth, frontier = {start: 0}, [start]
    while frontier:
        nxt = []
        for page in frontier:
            for link in site.links.get(page, []):
                if link not in depth:
                    depth[link] = depth[page] + 1
                    nxt.append(link)
        frontier = nxt
    return depth


def test_links_left_at_the_depth_limit_are_counted_and_a_deeper_rerun_is_told_why_it_finds_none(tmp_path,
                                                                                                 site_server):
    """``--max-depth 1`` said nothing of the links it did not follow, and a second run with
    ``--max-depth 3`` said "every URL of this crawl was visited by an earlier run", though most
    of the site never was: the summary now counts the links not followed, and the deeper rerun
    warns that they were not recorded (a new --workdir reaches them)."""
    site = generate_site(40, links_per_page=2, seed=9)
    depth = _depth(site)
    server = site_server(site)
    run = [sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "1",
           "--workdir", str(tmp_path / "w"), "--no-progress", "--no-sitemaps"]
    # in two runs (the first stopped by --max-pages): the count is of both (it was the last run's)
    part = subprocess.run([*run, "--max-depth", "1", "--max-pages", "2"], capture_output=True, text=True, timeout=300)
    assert part.returncode == 0, part.stderr[-3000:]
    first = subprocess.run([*run, "--max-depth", "1"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    beyond = {page for page, hops in depth.items() if hops == 2}
    shown = re.search(r"not followed +│ (\d+) links of pages at --max-depth 1", first.stderr)
    assert shown and int(shown.group(1)) == len(beyond), first.stderr
    again = subprocess.run([*run, "--max-depth", "3"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (f"warning: an earlier run left out {len(beyond)} links deeper than its --max-depth 1; links left out "
            "are not recorded") in again.stderr
    assert "the warning above says why a larger --max-depth found nothing" in " ".join(again.stderr.split())
    same = subprocess.run([*run, "--max-depth", "1"], capture_output=True, text=True, timeout=300)
    assert same.returncode == 0 and "warning: an earlier run left out" not in same.stderr


def test_a_host_that_never_answers_is_named_while_the_crawl_waits_then_fails(tmp_path):
    """A seed whose server accepts connections and never answers: each attempt's robots.txt runs
    into the deadline, and the host stays disallowed for ``robots_retry`` before each retry
    (about 3.5 minutes with the defaults). Meanwhile the crawl says what it waits for instead of
    printing nothing; then it ends with the error. Deadline 1 s, robots_retry 1 s and
    retry_backoff 0.25 s here (each retry 1 s later: robots_retry), and heartbeats 0.5 s apart,
    so the crawl says what it waits for after 2.5 s (five heartbeats) of its 5 s."""
    import socket
    import threading
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    held = []

    def accept_and_never_answer():
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return
    threading.Thread(target=accept_and_never_answer, daemon=True).start()
    env = {**os.environ, "GRIDCRAWL_DOWNLOAD_TIMEOUT": "1", "GRIDCRAWL_ROBOTS_RETRY": "1",
           "GRIDCRAWL_RETRY_BACKOFF": "0.25", "GRIDCRAWL_HEARTBEAT_INTERVAL": "0.5"}
    try:
        proc = subprocess.run([sys.executable, "-m", "gridcrawl", "run", f"http://127.0.0.1:{port}/",
                               "--executors", "1", "--workdir", str(tmp_path / "w"), "--no-progress"],
                              capture_output=True, text=True, timeout=120, env=env)
    finally:
        server.close()
        for conn in held:
            conn.close()
    assert proc.returncode == 1, proc.stderr[-3000:]
    waited = [line for line in proc.stderr.splitlines() if "no result for" in line]
    assert waited, proc.stderr[-3000:]
    assert "WARNING" in waited[0] and "from 1 grid thread in flight, on 127.0.0.1 (1):" in waited[0]
    assert "never answers" in waited[0] and "tried again 2 times, 1 s apart" in waited[0]
    assert "robots_unreachable" in proc.stderr and "every page of this run failed" in proc.stderr
    assert len(held) == 3  # robots.txt asked once per attempt: the first and retry_times (2) retries


@pytest.mark.e2e
def test_a_client_whose_manager_has_no_executor_says_so_then_crawls_when_one_comes(tmp_path, site_server):
    """The README's grid of several machines, started in the order a newcomer might: the
    manager, then the client, and no executor yet. The client says within a few heartbeats that
    no executor takes grid threads, naming the command that starts one (before: nothing, for as
    long as none came), and so does `gridcrawl report`; once one registers the crawl runs to
    the end."""
    from grid import wait_for
    site = generate_site(6, links_per_page=2, seed=8)
    server = site_server(site)
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        client = grid.start_client(server.url("/"), "--no-sitemaps")
        wait_for(lambda: "no executor takes grid threads now" in grid.log("client.log"), 60,
                 message="the client saying that no executor takes work")
        line = next(x for x in grid.log("client.log").splitlines() if "no executor takes" in x)
        assert "WARNING" in line and f"(gridcrawl-executor --manager {grid.endpoint})" in line, line
        assert "1 grid thread in flight waits at the manager" in line, line
        report = subprocess.run([sys.executable, "-m", "gridcrawl", "report", "--db", grid.manager_db],
                                capture_output=True, text=True, timeout=60)
        assert "1 thread waits: no executor is connected" in report.stdout, report.stdout + report.stderr
        grid.start_executor("late")
        assert client.wait(timeout=90) == 0, grid.log("client.log")
    finally:
        grid.stop()
    stored = {url for (url,) in grid.query("crawl", "SELECT url FROM document")}
    assert stored == {server.url(p) for p in reachable(site)}


def test_the_next_commands_are_the_command_as_given_without_passwords():
    """The summary's "the same command resumes" and "fetch the failed URLs again" commands are
    the command as it was given — every option: a crawl's fetch settings are not stored with
    it — without its own --retry-failed, and no password shows."""
    from gridcrawl.client.cli import rerun_command
    from gridcrawl.db import shown_url
    argv = ["--manager", "tcp://m1:9000,tcp://m2:9000", "--db", "postgresql+psycopg://crawler:s3cret@db.corp/crawl",
            "--user", "alice", "--curve-secret", "keys/alice.key_secret", "--config", "my config.toml",
            "--retry-failed", "blocked", "--download-delay", "2", "--proxy=http://me:pr0xy@proxy.corp:3128",
            "--retry-failed=timeout", "http://site.test/search?q=a&page=2",
            "--db", "mssql+pyodbc://sql/crawl?driver=ODBC+Driver+18&PWD=x"]
    # the URL-encoded ODBC connection string the docs give (its PWD= once showed in clear)
    odbc = "mysql+pyodbc:///?odbc_connect=" + quote_plus("DRIVER={MariaDB Unicode};SERVER=db;UID=w;PWD=s3cret;")
    command = rerun_command("gridcrawl-client", [*argv, "--db", odbc])
    assert "s3cret" not in command and "pr0xy" not in command and "PWD=x" not in command
    assert shlex.split(command) == [
        "gridcrawl-client", "--manager", "tcp://m1:9000,tcp://m2:9000", "--db", "postgresql+psycopg://crawler:***@db.corp/crawl",
        "--user", "alice", "--curve-secret", "keys/alice.key_secret", "--config", "my config.toml",
        "--download-delay", "2", "--proxy=http://me:***@proxy.corp:3128", "http://site.test/search?q=a&page=2",
        "--db", "mssql+pyodbc://sql/crawl?PWD=%2A%2A%2A&driver=ODBC+Driver+18",  # (SQLAlchemy sorts the query)
        "--db", "mysql+pyodbc:///?odbc_connect=" + quote_plus("DRIVER={MariaDB Unicode};SERVER=db;UID=w;PWD=***;")]
    assert rerun_command("gridcrawl", ["run", "http://127.0.0.1:8000/", "--workdir", "crawl 1"]) == \
        "gridcrawl run http://127.0.0.1:8000/ --workdir 'crawl 1'"
    # the query stays (the ODBC driver, a schema): a command printed with it works once its password is filled in
    assert shown_url("mssql+pyodbc://sa:pw@sql/crawl?driver=ODBC+Driver+18+for+SQL+Server") == \
        "mssql+pyodbc://sa:***@sql/crawl?driver=ODBC+Driver+18+for+SQL+Server"
    assert shown_url("postgresql+psycopg://u@h/db?options=-csearch_path%3Dold") == \
        "postgresql+psycopg://u@h/db?options=-csearch_path%3Dold"
    assert shown_url("not a database url?PWD=x") == "not a database url"


def test_the_fetch_command_of_a_failed_page_renders_it_as_the_crawl_did():
    """The summary's "one of them fetched as an executor does" renders the page when the crawl
    renders every page (with its --wait-for) or the failure is the browser's, else fetches it
    plainly; a URL the shell would split is quoted."""
    from gridcrawl.client.cli import fetch_command
    from gridcrawl.client.store import ErrorGroup, Strategy
    render = ErrorGroup("render", None, 3, "http://127.0.0.1:8000/list?a=1&b=2", "selector not found")
    timeout = ErrorGroup("timeout", None, 1, "http://127.0.0.1:8000/slow.html", "read timed out")
    rendering = Strategy(render=True, wait_for="li.item > a")
    assert shlex.split(fetch_command(render, rendering)) == [
        "gridcrawl", "fetch", "http://127.0.0.1:8000/list?a=1&b=2", "--render", "--wait-for", "li.item > a"]
    assert fetch_command(timeout, rendering) == "gridcrawl fetch http://127.0.0.1:8000/slow.html --render --wait-for 'li.item > a'"
    assert fetch_command(timeout, Strategy()) == "gridcrawl fetch http://127.0.0.1:8000/slow.html"
    assert fetch_command(render, Strategy()) == "gridcrawl fetch 'http://127.0.0.1:8000/list?a=1&b=2' --render"
    # a rules crawl that renders only the pages of one type: its page rendered, with the type's
    # selector (before: a plain fetch, which showed the shell fetched well and no error)
    from gridcrawl.rules import PageType
    typed = Strategy(page_types={"list": PageType(render=True, wait_for="li.item")}, wait_for="main")
    listed = ErrorGroup("timeout", None, 1, "http://127.0.0.1:8000/list/1.html", "render deadline", "list")
    assert fetch_command(listed, typed) == "gridcrawl fetch http://127.0.0.1:8000/list/1.html --render --wait-for li.item"
    plain = ErrorGroup("timeout", None, 1, "http://127.0.0.1:8000/item/1.html", "read timed out", "item")
    assert fetch_command(plain, typed) == "gridcrawl fetch http://127.0.0.1:8000/item/1.html"


def test_the_progress_bar_shows_the_threads_in_flight_as_soon_as_they_are_submitted(tmp_path):
    """The bar read "? to visit 0 in flight" for the first minute of a crawl whose seed took that
    long (it was redrawn only by a result or by the "no result" warning): the client now calls
    its progress callback once it has submitted threads, before any result or warning."""
    import logging
    import threading
    from gridcrawl.client.app import CrawlApplication
    from gridcrawl.client.store import CrawlStore
    from gridcrawl.db import open_database
    from gridcrawl.manager.server import ManagerServer
    from gridcrawl.settings import Settings

    settings = Settings(heartbeat_interval=0.2, record_interval=0.1)
    manager = ManagerServer(settings, "tcp://127.0.0.1:0", open_database(f"sqlite:///{tmp_path / 'manager.db'}"))
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    seed = "http://127.0.0.1:9/"  # no executor connects: the thread stays in flight
    store.add_seeds([seed])
    warned = threading.Event()

    class Warnings(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                warned.set()

    seen: list[tuple[int, object, bool]] = []
    stop = threading.Event()
    crawl = CrawlApplication(settings, manager.endpoint, store, store.scope([seed], [], -1),
                             on_progress=lambda pr: seen.append((pr.in_flight, pr.to_visit, warned.is_set())))
    handler = Warnings()
    logging.getLogger("gridcrawl.client").addHandler(handler)
    loops = [threading.Thread(target=manager.serve, args=(stop,), daemon=True),
             threading.Thread(target=crawl.run, args=(stop,), daemon=True)]
    try:
        for loop in loops:
            loop.start()
        wait_for(lambda: seen, 30, 0.02, "the first progress callback")
    finally:
        stop.set()
        for loop in loops:
            loop.join(10)
        logging.getLogger("gridcrawl.client").removeHandler(handler)
    assert seen[0] == (1, 1, False), seen[:3]


def test_the_items_summary_blames_the_required_field_that_missed_not_the_selectors_that_matched(capsys,
                                                                                                monkeypatch):
    """No ``product`` stored because ``sku`` (required) missed on every candidate: the summary
    said "never matched" of ``name`` and ``price`` too, whose selectors matched, sending the user
    to fix the wrong fields. A type with stored items still flags a field that never matched."""
    from gridcrawl.client.items import FieldFigures, TypeFigures
    from gridcrawl.client.progress import ProgressView

    product = TypeFigures("product", fields={"name": FieldFigures("name"), "price": FieldFigures("price"),
                                             "sku": FieldFigures("sku", missed=3)})
    post = TypeFigures("post", items=2, fields={"title": FieldFigures("title", filled=2),
                                                "author": FieldFigures("author")})
    monkeypatch.setenv("COLUMNS", "200")  # one line a row, to read them back
    ProgressView(enabled=False).item_summary([product, post])
    rows = {tuple(cell.strip() for cell in line.split("│")[1:-1]) for line in capsys.readouterr().err.splitlines()
            if line.startswith("│")}
    assert ("product", "", "0", "", "", "none stored: a required field missed") in rows
    assert ("", "name", "", "0", "0", "") in rows and ("", "price", "", "0", "0", "") in rows
    assert ("", "sku", "", "0", "3", "required, missed: no item without it") in rows
    assert ("", "author", "", "0", "0", "never matched") in rows and ("", "title", "", "2", "0", "") in rows


def test_the_items_summary_says_why_a_type_found_nothing_and_shows_a_failure(capsys, monkeypatch):
    """A type that found nothing (no page it applies to, or an ``each`` that matched nothing)
    showed ``0`` with an empty note, and a plugin's failures only "3 pages failed": their
    messages sat in item_issue, which nothing named. The note says why now, and one failure is
    shown with where the rest are."""
    from gridcrawl.client.items import FieldFigures, TypeFigures
    from gridcrawl.client.progress import ProgressView

    offer = TypeFigures("offer", fields={"price": FieldFigures("price")})
    shout = TypeFigures("shout", items=5, pages=5, errors=3, fields={"x": FieldFigures("x", filled=5)},
                        error_example=("http://shop.test/p/5", "plugin walkshop: ValueError: cannot parse SKU-005"))
    monkeypatch.setenv("COLUMNS", "250")
    ProgressView(enabled=False).item_summary([offer, shout])
    err = capsys.readouterr().err
    rows = {tuple(cell.strip() for cell in line.split("│")[1:-1]) for line in err.splitlines() if line.startswith("│")}
    assert ("offer", "", "0", "", "", "none found: no page it applies to (its url, page_type), or its each "
            "matched nothing") in rows
    assert ("shout", "", "5", "", "", "3 pages failed (below)") in rows
    assert ("shout: 3 pages' items failed, e.g. http://shop.test/p/5: plugin walkshop: ValueError: cannot parse "
            "SKU-005 (all of them: table item_issue, kind 'error')") in " ".join(err.split())
    # one page: "1 page's", not "1 page'", and no "e.g." nor "all of them" (it was
    # "1 page' items failed, e.g. ...: plugin hang: TimeoutError: ... (all of them: ...)")
    one = TypeFigures("hung", items=4, pages=5, errors=1, fields={"x": FieldFigures("x", filled=4)},
                      error_example=("http://shop.test/p/1", "plugin hang: TimeoutError: ran past its deadline of 10 s"))
    ProgressView(enabled=False).item_summary([one])
    assert ("hung: 1 page's items failed, http://shop.test/p/1: plugin hang: TimeoutError: ran past its deadline "
            "of 10 s (table item_issue, kind 'error')") in " ".join(capsys.readouterr().err.split())


def test_the_summarys_counts_all_have_thousands_separators(capsys):
    """``URLs visited 32,207`` stood beside ``pages this run 32207`` and ``left to visit 67793``."""
    from gridcrawl.client.progress import ProgressView
    counts = {"application_id": "abcdef12", "pages": 32207, "documents": 32000, "visited": 32207, "errors": 1207,
              "set_aside": 1500, "to_visit": 67793, "capped": {"maze.test": 6341202}, "max_pages_per_host": 100000,
              "beyond_depth": 2500, "max_depth": 20, "seconds": 1.0, "pages_per_second": 1.0}
    ProgressView(enabled=False).summary(counts)
    text = " ".join(capsys.readouterr().err.replace("│", " ").split())
    for shown in ("pages this run 32,207", "documents stored 32,000", "URLs visited 32,207", "errors 1,207",
                  "set aside 1,500 (", "left to visit 67,793", "not queued 6,341,202 links of hosts at the per-host "
                  "cap of 100,000 URLs", "maze.test (6,341,202)", "not followed 2,500 links"):
        assert shown in text, (shown, text)


def test_the_headline_figures_leave_the_sitemap_files_out(capsys):
    """A crawl that had read 1,783 sitemap files and 2 pages said "pages this run 1,785" and
    "pages/s 10.7" beside 2 documents stored. The sitemap files are named apart now, in the
    summary and on the progress line, and pages/s counts pages."""
    from gridcrawl.client.app import Progress
    from gridcrawl.client.progress import ProgressView, pages_label
    progress = Progress(pages=1785, documents=2, errors=4, sitemaps=1783, sitemap_errors=3)
    progress.first_submitted, progress.last_result = 100.0, 200.0
    assert (progress.page_count, progress.page_errors, progress.pages_per_second) == (2, 1, 0.02)
    assert pages_label(progress) == "2 pages, 1,783 sitemaps"
    assert pages_label(Progress(pages=5)) == "5 pages"
    counts = {"application_id": "abcdef12", "pages": progress.page_count, "sitemaps_read": progress.sitemaps,
              "documents": 2, "visited": 1785, "sitemaps": 1783, "errors": 4, "to_visit": 98215,
              "seconds": progress.seconds, "pages_per_second": progress.pages_per_second}
    ProgressView(enabled=False).summary(counts)
    text = " ".join(capsys.readouterr().err.replace("│", " ").split())
    for shown in ("pages this run 2 (and 1,783 sitemap files read: no document)", "documents stored 2",
                  "URLs visited 1,785 (1,783 sitemap URLs: no document)", "pages/s 0.0"):
        assert shown in text, (shown, text)


LOG_ON_A_FULL_DISK = """
import logging, os, sys
from gridcrawl.cli_common import setup_logging
log_file, filler = sys.argv[1], sys.argv[2]
setup_logging("INFO", log_file)
for n in range(3):
    logging.getLogger("gridcrawl.manager").info("line %d " + "x" * 4000, n)
os.remove(filler)
logging.getLogger("gridcrawl.manager").info("room again")
"""


def test_a_log_file_on_a_full_disk_is_one_line_on_stderr_not_a_traceback_per_record(tmp_path, small_disk):
    """``gridcrawl run`` on a full disk: each program logging to its file there printed Python's
    "--- Logging error ---" and a traceback per record, around the one error line that said why.
    The first failed write is one line naming the log and the cause; a write once there is room
    again goes to the file."""
    from dbfixtures import fill_disk
    log_file = small_disk / "manager.log"
    log_file.touch()
    fill_disk(small_disk, 0)
    done = subprocess.run([sys.executable, "-c", LOG_ON_A_FULL_DISK, str(log_file), str(small_disk / "filler")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Logging error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and f"cannot write the log {log_file}: No space left on device" in lines[0], lines
    assert "room again" in log_file.read_text()


def test_the_documents_stored_figure_names_the_duplicates_among_them(tmp_path):
    """``gridcrawl report --crawl-db`` said "documents stored 2" and "set aside 1" of a crawl of
    one page and its duplicate, and the WARC export "1 page": the duplicate's row (no content,
    ``duplicate_of``) was counted in both. The figure now names it."""
    import hashlib
    from typer.testing import CliRunner
    from gridcrawl.cli import app
    from gridcrawl.client.store import CrawlStore, Outcome, crawl_counts
    from gridcrawl.db import open_database
    from gridcrawl.protocol import PageResult
    from gridcrawl.urls import canonical_url
    db = f"sqlite:///{tmp_path / 'c.db'}"
    store = CrawlStore(open_database(db))
    urls = [canonical_url(f"http://127.0.0.1:1/{name}.html") for name in ("a", "b")]
    store.add_seeds(urls)
    for pending in sorted(store.claim(2), key=lambda p: p.url):  # a first: the original
        page = PageResult(url=pending.url, final_url=pending.url, status=200, content_type="text/html", size=8,
                          title="a", content="<p>a</p>", digest=hashlib.sha256(b"<p>a</p>").hexdigest())
        store.apply([Outcome(pending, page, "ex", 1, False)], store.scope(urls, [], -1), store_content=True)
    counts = crawl_counts(store.engine)
    assert (counts["documents"], counts["duplicates"], counts["set_aside"]) == (2, 1, 1)
    result = CliRunner().invoke(app, ["report", "--crawl-db", db], env={"COLUMNS": "200"})
    text = " ".join(result.output.replace("│", " ").split())
    assert result.exit_code == 0 and "documents stored 2 (1 a duplicate of another page)" in text, result.output


def test_gridcrawl_run_threads_above_the_managers_cap_all_take_work(tmp_path, site_server, small_site):
    """``gridcrawl run --threads 70``: its own manager believed 64 of each executor's threads
    (``max_threads_per_executor``, a guard against hostile executors), so 6 stayed idle, said only
    in manager.log. Its executors are its own: its manager believes them all now."""
    server = site_server(small_site)
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--threads", "70",
                           "--executors", "1", "--workdir", str(tmp_path), "--no-progress", "--max-pages", "3"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    log = (tmp_path / "manager.log").read_text()
    assert "registered: " in log and ", 70 threads" in log, log
    assert "believed" not in log, log
