"""Rendering with the real programs as processes: a manager, one executor with ``--render`` and
one without, clients crawling the JavaScript-only site of ``jssite``.

* With page types that ask for rendering (``[page_type.NAME] render = true`` in the rules file),
  every page is reached and its items kept; the rendering threads ran only on the executor with
  a browser, the plain ones on both. While no executor with a browser is connected, those
  threads wait visibly (``gridcrawl report``, the client's log) and the crawl ends once one
  joins.
* Without rendering, the crawl sees the static shell only.
* ``gridcrawl run --render`` starts its executors with ``--render``.
* ``gridcrawl-executor --render`` without a usable browser fails at start with one line.
* An executor whose browser dies and does not start again stops (status 2, one line), and its
  threads go to an executor that renders.
"""

from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from grid import Grid, wait_for
from jssite import PRIVATE_URL, browser_or_skip, js_reached, js_site

pytestmark = pytest.mark.e2e

LISTS, ITEMS = 2, 8

RULES = """
base_url = "{seed}"

[[rule]]
rule_type = "follow"
from_type = "base"
to_type = "list"
pattern = "/list/"

[[rule]]
rule_type = "follow"
from_type = "base"
to_type = "hop"
pattern = "/hop"

[[rule]]
rule_type = "follow"
from_type = "list"
to_type = "item"
pattern = "/item/"

[[rule]]
rule_type = "follow"
from_type = "hop"
to_type = "item"
pattern = "/deep"

[[rule]]
rule_type = "keep"
from_type = "list"
pattern = "/item/"
class = "item"

[page_type.base]
render = true

[page_type.hop]
render = true  # no selector: the DOM is taken once the network is idle, after the client-side redirect

[page_type.list]
render = true
wait_for = "li.item"  # the list arrives by fetch() after load: "body" would race it
"""


def visited_paths(grid: Grid) -> set[str]:
    """Paths of the visited pages (not the seed host's /sitemap.xml a plain crawl asks for)."""
    return {urlsplit(url).path for (url,) in grid.query("crawl", "SELECT url FROM visited_url")} - {"/sitemap.xml"}


def test_rendering_threads_run_only_on_the_executor_with_a_browser(tmp_path, site_server):
    browser_or_skip()
    server = site_server(js_site(LISTS, ITEMS))
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES.format(seed=server.url("/")))
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("plain", "--threads", "2")
        # (the client says what its threads wait for after 2 heartbeats without a result, not 5)
        client = grid.start_client("--rules", str(rules),
                                   env={"GRIDCRAWL_TEST_CONSTANTS": "gridcrawl.client.app.WAIT_BEATS=2"})
        # no executor can render yet: the seed waits, visibly, instead of the crawl hanging
        wait_for(lambda: "need 'render'" in grid.log("client.log"), 60, message="the client saying threads wait")
        assert "render: start gridcrawl-executor --render" in grid.log("client.log")  # and what gives it
        report = subprocess.run([sys.executable, "-m", "gridcrawl", "report", "--db", grid.manager_db],
                                capture_output=True, text=True, timeout=60)
        assert "1 thread waits: no connected executor has render" in report.stdout, report.stdout + report.stderr
        assert visited_paths(grid) == set()
        grid.start_executor("render", "--threads", "2", "--render", "--render-timeout", "20")
        assert client.wait(120) == 0, grid.log("client.log") + grid.log("render.log")
    finally:
        grid.stop()
    assert visited_paths(grid) == js_reached(LISTS, ITEMS)
    errors = grid.query("crawl", "SELECT url, error_kind, error FROM visited_url WHERE error_kind IS NOT NULL")
    assert errors == []
    kept = {urlsplit(url).path for (url,) in grid.query("crawl", "SELECT url FROM kept_link")}
    assert kept == {f"/item/{n}.html" for n in range(1, LISTS * ITEMS + 1)}
    # where each grid thread ran
    rows = grid.query("manager", "SELECT t.url, t.needs, e.name FROM thread t JOIN executor e "
                      "ON e.executor_id = t.executor_id")
    ran = {urlsplit(url).path: (needs or "", name) for url, needs, name in rows}
    rendered = {path for path, (needs, _name) in ran.items() if needs == "render"}
    assert rendered == {"/", "/hop.html"} | {f"/list/{k}.html" for k in range(1, LISTS + 1)}
    assert {ran[path][1] for path in rendered} == {"render"}
    plain = {path for path, (needs, _name) in ran.items() if needs == ""}
    assert {ran[path][1] for path in plain} == {"render", "plain"}  # plain threads on both
    # the rendered documents: seconds apart from fetch seconds, the private request refused and recorded
    docs = {urlsplit(url).path: (render_seconds, refused, urlsplit(final).path) for url, final, render_seconds, refused
            in grid.query("crawl", "SELECT url, final_url, render_seconds, refused_requests FROM document")}
    assert all(docs[path][0] is not None and docs[path][0] > 0 for path in rendered)
    assert all(docs[path][0] is None for path in plain)
    assert PRIVATE_URL in (docs["/list/1.html"][1] or "") and '"blocked"' in docs["/list/1.html"][1]
    assert docs["/hop.html"][2] == "/landing.html"


def test_without_rendering_only_the_static_shell_is_crawled(tmp_path, site_server):
    server = site_server(js_site(LISTS, ITEMS))
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("plain", "--threads", "2")
        client = grid.start_client(server.url("/"))
        assert client.wait(60) == 0, grid.log("client.log")
    finally:
        grid.stop()
    assert visited_paths(grid) == {"/"}


def test_gridcrawl_run_render_starts_its_executors_with_a_browser(tmp_path, site_server):
    browser_or_skip()
    server = site_server(js_site(1, 3))
    workdir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--render",
                           "--executors", "1", "--threads", "2", "--workdir", str(workdir), "--no-progress"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + (workdir / "executor-1.log").read_text(errors="replace")
    import sqlite3
    with sqlite3.connect(workdir / "crawl.db") as conn:
        paths = {urlsplit(u).path for (u,) in conn.execute("SELECT url FROM visited_url")} - {"/sitemap.xml"}
    with sqlite3.connect(workdir / "manager.db") as conn:
        capabilities = conn.execute("SELECT capabilities FROM executor").fetchall()
    assert paths == js_reached(1, 3)
    assert capabilities == [("render",)]


def test_gridcrawl_run_takes_browser_path_and_its_executors_drive_that_browser(tmp_path, site_server):
    """``gridcrawl run --browser-path`` (the option the one-line error of a machine without a
    browser names) goes to its executors: a browser that does not start fails the run before
    the crawl, naming it and what it said; without ``--render`` the option is refused."""
    pytest.importorskip("playwright.async_api", reason="playwright is not installed (pip install 'gridcrawl[render]')")
    server = site_server(js_site(1, 3))
    broken = tmp_path / "chromium"
    broken.write_text('#!/bin/sh\necho "chromium: cannot open the profile" >&2\nexit 3\n')
    broken.chmod(0o755)
    run = [sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "1", "--no-progress",
           "--browser-path", str(broken)]
    # (both at once: the second is refused before it starts anything)
    plain = subprocess.Popen([*run, "--workdir", str(tmp_path / "plain")], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        done = subprocess.run([*run, "--render", "--workdir", str(tmp_path / "run")], capture_output=True, text=True,
                              timeout=120)
    finally:
        plain_out, plain_err = plain.communicate(timeout=60)
    assert done.returncode == 2
    assert f"cannot start the browser ({broken})" in done.stderr, done.stderr
    assert "the browser said: chromium: cannot open the profile; exit status 3" in done.stderr, done.stderr
    assert "executor-1 exited with status 2 before the crawl started" in done.stderr, done.stderr
    assert plain.returncode == 2 and "--browser-path goes with --render" in plain_err, plain_err


def test_executor_render_without_a_usable_browser_fails_at_start_with_one_line(tmp_path):
    pytest.importorskip("playwright.async_api", reason="playwright is not installed (pip install 'gridcrawl[render]')")
    done = subprocess.run([sys.executable, "-m", "gridcrawl.executor", "--manager", "tcp://127.0.0.1:1",
                           "--render", "--browser-path", str(tmp_path / "no-chromium")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no-chromium" in lines[0] and "gridcrawl[render]" in lines[0], done.stderr


def test_executor_render_without_playwright_fails_at_start_with_one_line(tmp_path):
    fake = tmp_path / "fake" / "playwright"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('playwright is not installed here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "gridcrawl.executor", "--manager", "tcp://127.0.0.1:1",
                           "--render"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Playwright" in lines[0] and "gridcrawl[render]" in lines[0], done.stderr


def test_a_rendered_page_holds_its_hosts_politeness_slot_for_the_whole_render(tmp_path, site_server):
    """One grid thread of the host in flight at a time (``--concurrent-requests-per-host 1``):
    the requests a page's scripts make (slowed to 0.3 s) all fall between its own document
    fetch and the next page's, whatever the executor's idle worker thread could take."""
    browser_or_skip()
    from sites import slow_page
    site = js_site(1, 2)
    for k in (1,):
        site.extra[f"/api/list-{k}.json"] = slow_page(0.3, site.pages[f"/api/list-{k}.json"], "application/json")
    server = site_server(site)
    grid = Grid(tmp_path)
    try:
        grid.start_manager("--concurrent-requests-per-host", "1")
        grid.start_executor("render", "--threads", "2", "--render")
        client = grid.start_client(server.url("/"), "--render")
        assert client.wait(120) == 0, grid.log("client.log")
    finally:
        grid.stop()
    assert visited_paths(grid) == js_reached(1, 2)
    owner = {"/app.js": "/", "/landing.html": "/hop.html", "/api/list-1.json": "/list/1.html"}
    sequence = [owner.get(r.path, r.path) for r in sorted(server.requests, key=lambda r: r.started)
                if r.path != "/robots.txt"]
    runs = [page for i, page in enumerate(sequence) if i == 0 or sequence[i - 1] != page]
    assert len(runs) == len(set(runs)), sequence  # each page's requests in one run, none interleaved
    assert server.max_concurrency() == 1


def test_an_executor_whose_browser_does_not_start_again_stops_and_its_threads_go_to_one_that_renders(
        tmp_path, site_server):
    """The executor's browser dies and no new one starts (its executable broken, as by an
    upgrade): the executor stops with status 2 and one line saying why, in place of failing every
    page it is sent as ``render`` while it goes on declaring the capability; the crawl ends once
    an executor that renders joins, with every page and no error."""
    import psutil
    chromium = browser_or_skip()
    works = tmp_path / "browser-works"
    works.touch()
    wrapper = tmp_path / "chromium"
    wrapper.write_text(f'#!/bin/sh\nif [ -e "{works}" ]; then exec "{chromium}" "$@"; fi\n'
                       'echo "chromium: removed by an upgrade" >&2\nexit 127\n')
    wrapper.chmod(0o755)
    server = site_server(js_site(1, 3))
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        # its new browser is tried 0.2 s apart, not 1 s (the 3 tries and the stop are what is tested)
        lost = grid.start_executor("lost", "--threads", "2", "--render", "--browser-path", str(wrapper),
                                   env={"GRIDCRAWL_TEST_CONSTANTS": "gridcrawl.executor.render.LAUNCH_RETRY_SECONDS=0.2"})
        wait_for(lambda: "registered as executor" in grid.log("lost.log"), 60, message="the executor registering")
        works.unlink()  # the browser running dies, and none starts again
        for proc in psutil.Process(lost.pid).children(recursive=True):
            if _chromium(proc):
                proc.kill()
        client = grid.start_client(server.url("/"), "--render")
        assert lost.wait(90) == 2, grid.log("lost.log")
        said = grid.log("lost.log").strip().splitlines()[-1]
        assert said.startswith("error: the browser") and "no new one starts" in said, said
        assert "removed by an upgrade" in said and "this executor stops" in said, said
        grid.start_executor("render", "--threads", "2", "--render")
        assert client.wait(120) == 0, grid.log("client.log") + grid.log("render.log")
    finally:
        grid.stop()
    assert visited_paths(grid) == js_reached(1, 3)
    assert grid.query("crawl", "SELECT url, error_kind, error FROM visited_url WHERE error_kind IS NOT NULL") == []


def _chromium(proc) -> bool:
    """True when ``proc`` (psutil) is a Chromium process, not Playwright's driver."""
    try:
        return "chrom" in proc.name().lower()
    except Exception:
        return False
