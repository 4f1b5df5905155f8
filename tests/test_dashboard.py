"""The manager's dashboard: a real grid (manager with ``--http``, two executors, a client) and
the page in a real browser (headless Debian Chromium driven by Playwright), the JSON API, operator
control (pause, resume, cancel) from the API and from ``gridcrawl-client``, and the login that
is required off loopback.

The site's pages (all but ``/``) wait for a gate the test opens, so the grid's state is known
when the test looks: threads running while the gate is shut, finished counts rising once open.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests

from gridcrawl.words import counted
from grid import Grid, free_port, wait_for
from sites import generate_site, reachable

pytestmark = pytest.mark.e2e

CHROMIUM = os.environ.get("GRIDCRAWL_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
                 "--no-first-run", "--disable-component-update", "--disable-sync",
                 # what Chromium still sends to Google (accounts, updates) goes to a closed loopback
                 # port instead of the machine's DNS server; the dashboard on 127.0.0.1 bypasses it
                 "--proxy-server=http://127.0.0.1:9"]


def gated(site, gate: threading.Event):
    """Make every page but ``/`` of ``site`` answer only once ``gate`` is set (30 s at most)."""
    for path, body in site.pages.items():
        if path == "/":
            continue

        def handle(h, body=body) -> None:
            gate.wait(30)
            h.respond(200, body)

        site.extra[path] = handle
    return site


class DashboardGrid:
    """A manager with ``--http``, executors ex1 and ex2 and a crawl of a gated site."""

    def __init__(self, tmp_path: Path, site_server, pages: int = 80) -> None:
        self.gate = threading.Event()
        self.site = gated(generate_site(pages, links_per_page=5, seed=11), self.gate)
        self.server = site_server(self.site)
        self.grid = Grid(tmp_path)
        self.http = f"http://127.0.0.1:{free_port()}"
        self.client = None

    def start(self, *client_args: str) -> "DashboardGrid":
        manager = self.grid.start_manager("--http", self.http.removeprefix("http://"))
        try:
            wait_for(lambda: manager.poll() is not None or self._up(), 60, message="the dashboard answering")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nmanager log:\n{self.grid.log('manager.log')}") from None
        assert manager.poll() is None, f"the manager exited:\n{self.grid.log('manager.log')}"
        self.grid.start_executor("ex1", "--threads", "2")
        self.grid.start_executor("ex2", "--threads", "2")
        wait_for(lambda: len(self.snapshot()["executors"]) == 2, 30, message="two executors registered")
        self.client = self.grid.start_client(self.server.url("/"), *client_args)
        return self

    def _up(self) -> bool:
        try:
            return requests.get(self.http + "/api/snapshot", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def snapshot(self) -> dict:
        response = requests.get(self.http + "/api/snapshot", timeout=5)
        response.raise_for_status()
        return response.json()

    def application(self) -> dict | None:
        apps = self.snapshot()["applications"]
        return apps[0] if apps else None

    def stop(self) -> None:
        self.gate.set()
        self.grid.stop()


@pytest.fixture
def dash(tmp_path, site_server):
    grid = DashboardGrid(tmp_path, site_server)
    yield grid
    grid.stop()


def running(app: dict | None) -> int:
    return 0 if app is None else app["threads"]["SCHEDULED"] + app["threads"]["STARTED"]


# ------------------------------------------------------------------------------ the browser


def _browser():
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed "
                                     "(pip install playwright; it drives Debian's chromium, no browser download)")
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium) — set GRIDCRAWL_CHROMIUM to another")
    return playwright


@contextlib.contextmanager
def _dashboard_page(url: str):
    """Headless Chromium (through Playwright) on the dashboard at ``url``: yields ``(browser,
    page, errors)`` — the page at 1280 x 1000, and the list its JavaScript errors go to; the
    browser is closed after. Skips as :func:`_browser` does."""
    sync_api = _browser()
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(url)
            yield browser, page, errors
        finally:
            browser.close()


def count(page, card: str) -> int:
    """The number on the page's summary card ``card`` (running, finished)."""
    return int(page.locator(f"#{card}-count b").inner_text())


def test_dashboard_page_in_chromium_shows_executors_and_rising_thread_counts(dash, tmp_path):
    _browser()  # (skips before the grid starts when there is no browser)
    dash.start()
    # "/" is fetched, its links are queued: 4 worker threads wait at the gate, the rest queue
    wait_for(lambda: running(dash.application()) >= 4, 60, message="threads running at the gate")
    with _dashboard_page(dash.http + "/") as (browser, page, errors):
        page.wait_for_selector("#executors tbody tr td[data-label=name]")
        names = page.locator("#executors tbody td[data-label=name]").all_inner_texts()
        assert sorted(names) == ["ex1", "ex2"]
        # (polled from here: the page's Content-Security-Policy forbids Playwright's eval'd predicates)
        page.wait_for_selector("#running-count b")
        wait_for(lambda: count(page, "running") >= 4, 30, message="the page showing 4 running threads")
        assert "running" in page.locator("#applications tbody").inner_text()
        assert page.locator("#threads tbody td[data-label=URL]").count() >= 4
        states = lambda: page.locator("#executors tbody td[data-label=state]").all_inner_texts()  # noqa: E731
        assert states() == ["working", "working"]  # 2 threads each wait at the gate
        before = count(page, "finished")
        page.screenshot(path=str(tmp_path / "dashboard-running.png"), full_page=True)

        dash.gate.set()    # the pages answer: the crawl runs; the page updates itself
        wait_for(lambda: count(page, "finished") > before + 10, 60, message="the finished count rising")
        middle = count(page, "finished")
        assert dash.client.wait(timeout=120) == 0, dash.grid.log("client.log")
        total = len(reachable(dash.site)) + 1  # the pages and the host's /sitemap.xml
        wait_for(lambda: count(page, "finished") >= total, 30, message="the page showing every thread finished")
        after = count(page, "finished")
        assert before < middle <= after == total        # the count rose, without a reload
        assert page.locator("#hosts tbody").inner_text().strip() != ""
        # the client's CloseApplication may reach the page one refresh (2 s) after its last result
        wait_for(lambda: "stopped" in page.locator("#applications tbody").inner_text(), 30,
                 message="the page showing the application stopped")
        assert page.locator("#applications tbody td[data-label=errors]").all_inner_texts() == ["0"]
        # connected executors without work are idle, not "working" (issue 21)
        wait_for(lambda: states() == ["idle", "idle"], 30, message="the executors shown idle")
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)

        phone = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True, device_scale_factor=2)
        phone.goto(dash.http + "/")
        phone.wait_for_selector("#executors tbody td[data-label=name]")
        width = phone.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"the page is {width} px wide on a 390 px phone"
        phone.screenshot(path=str(tmp_path / "dashboard-phone.png"), full_page=False)
        assert errors == []
    for name in ("dashboard.png", "dashboard-phone.png", "dashboard-running.png"):  # kept in tmp_path to look at
        assert (tmp_path / name).stat().st_size > 10_000, name


def test_an_application_whose_client_stopped_shows_detached_not_running(dash):
    """A client stopped with Ctrl-C leaves its application detached (state running, attached
    false in the API): the page showed a green "running" badge."""
    _browser()  # (skips before the grid starts when there is no browser)
    dash.start()
    wait_for(lambda: running(dash.application()) >= 4, 60, message="threads running at the gate")
    dash.client.send_signal(signal.SIGINT)
    dash.client.wait(timeout=60)
    wait_for(lambda: dash.application()["attached"] is False, 30, message="the application detached")
    assert dash.application()["state"] == "running"  # (the API's state: operators may still pause it)
    with _dashboard_page(dash.http + "/") as (browser, page, errors):
        page.wait_for_selector("#applications tbody td[data-label=state] .pill")
        badge = page.locator("#applications tbody td[data-label=state] .pill")
        assert badge.inner_text() == "detached"
        assert "warn" in badge.get_attribute("class").split() and "ok" not in badge.get_attribute("class").split()
        assert "no client is connected" in badge.get_attribute("title")
        assert errors == []


# ------------------------------------------------------------------------------ the API and control


def test_api_serves_the_grid_and_controls_applications(dash):
    dash.start()
    wait_for(lambda: running(dash.application()) >= 4, 60, message="threads running at the gate")
    base = dash.http
    index = requests.get(base + "/api/", timeout=5).json()
    assert "/api/snapshot" in index["endpoints"]
    snap = dash.snapshot()
    assert {"time", "summary", "executors", "applications", "threads", "hosts"} <= set(snap)
    ex = snap["executors"][0]
    assert {"host", "user", "dedicated", "connected", "last_heartbeat", "cpu_usage", "cpu_avail", "cpu_totalusage",
            "mem_usage", "running", "finished", "pages_per_second"} <= set(ex)
    host = snap["hosts"][0]
    assert host["host"] == "127.0.0.1" and host["in_flight"] >= 4 and "next_start" in host
    for part in ("executors", "applications", "threads", "hosts", "summary"):
        assert part in requests.get(f"{base}/api/{part}", timeout=5).json()
    # the same figures for Prometheus: two executors, the threads held at the gate, the crawl
    scraped = requests.get(base + "/metrics", timeout=5)
    assert scraped.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    metrics = scrape(scraped.text)
    assert metrics[("gridcrawl_executors_connected", ())] == 2
    assert sum(v for (name, _), v in metrics.items() if name == "gridcrawl_executor_threads_assigned") >= 4
    assert {dict(labels)["executor"] for (name, labels) in metrics if name == "gridcrawl_executor_connected"} == \
        {"ex1", "ex2"}
    app_threads = {dict(labels)["state"]: v for (name, labels), v in metrics.items()
                   if name == "gridcrawl_application_threads"}
    assert app_threads["SCHEDULED"] + app_threads["STARTED"] >= 4
    page = requests.get(base + "/", timeout=5)
    assert page.headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert '<script src="/dashboard.js"' in page.text
    assert 'src="http' not in page.text and 'href="http' not in page.text and "//" not in page.text  # all local
    app_id = dash.application()["application_id"]

    # control: JSON only (a page of another origin cannot send it without a refused preflight)
    assert requests.post(f"{base}/api/applications/{app_id}/pause", data="x", timeout=5).status_code == 415
    assert requests.post(f"{base}/api/applications/{app_id}/explode", json={}, timeout=5).status_code == 404
    assert requests.post(f"{base}/api/applications/nosuchapp/pause", json={}, timeout=5).status_code == 404
    paused = requests.post(f"{base}/api/applications/{app_id[:8]}/pause", json={}, timeout=10)
    assert paused.status_code == 200 and paused.json() == {"application_id": app_id, "action": "pause",
                                                            "state": "paused"}
    dash.gate.set()                 # the running threads finish; nothing new is dispatched
    # READY threads: one the executors had no room for at the pause, or (where they had prefetched
    # every queued one) the links of the finished pages, which the client submits once it has
    # applied them and the paused manager holds
    def held() -> dict | None:
        app = dash.application()
        return app if running(app) == 0 and app["threads"]["READY"] > 0 else None
    app = wait_for(held, 60, message="in-flight threads of the paused crawl finishing and new ones held READY")
    assert app["state"] == "paused" and app["errors"] == 0
    assert dash.client.poll() is None, "the client must wait while its crawl is paused"
    # resume from the client's command line (the operator's tool)
    done = subprocess.run([sys.executable, "-m", "gridcrawl.client", "--manager", dash.grid.endpoint,
                           "resume", app_id], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"application {app_id}: running"
    assert dash.client.wait(timeout=120) == 0, dash.grid.log("client.log")
    assert dash.grid.query("crawl", "SELECT COUNT(*) FROM document") == [(len(reachable(dash.site)),)]
    again = requests.post(f"{base}/api/applications/{app_id}/pause", json={}, timeout=10)
    assert again.status_code == 409 and "stopped" in again.json()["error"]


def test_cancel_from_the_client_command_stops_the_crawl(dash):
    dash.start()
    wait_for(lambda: running(dash.application()) >= 4, 60, message="threads running at the gate")
    app_id = dash.application()["application_id"]
    done = subprocess.run([sys.executable, "-m", "gridcrawl.client", "--manager", dash.grid.endpoint,
                           "cancel", app_id[:6]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"application {app_id}: stopped"
    assert dash.client.wait(timeout=60) == 0, dash.grid.log("client.log")   # the crawling client stops
    assert "cancelled this application" in dash.grid.log("client.log")
    # the summary ends by saying why the crawl stopped with URLs left, and how to go on
    left = dash.grid.query("crawl", "SELECT COUNT(*) FROM to_visit_url")[0][0]
    assert left > 0
    assert (f"cancelled by an operator (gridcrawl-client cancel) with {counted(left, 'URL')} left to visit: the same "
            f"command resumes the crawl ({dash.grid.client_command()})") \
        in " ".join(dash.grid.log("client.log").split())
    # the dashboard's snapshot is refreshed every 0.5 s: wait for the one after the cancel
    wait_for(lambda: dash.application()["state"] == "stopped", 10, message="a snapshot of the stopped application")
    app = dash.application()
    assert app["state"] == "stopped" and sum(app["threads"].values()) == 0
    # the recorder writes every 0.2 s: the stopped state reaches SQL shortly after the snapshot
    wait_for(lambda: dash.grid.query("manager", "SELECT state FROM application") == [(2,)], 10,
             message="the stopped application recorded in SQL")
    dash.gate.set()
    wait_for(lambda: all(e["assigned"] == 0 for e in dash.snapshot()["executors"]), 30,
             message="the executors dropping the cancelled threads")
    bad = subprocess.run([sys.executable, "-m", "gridcrawl.client", "--manager", dash.grid.endpoint,
                          "pause", "zzzz"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no application 'zzzz'" in bad.stderr


def test_a_client_that_reattaches_to_a_paused_application_is_told_and_says_why_it_waits(dash):
    """A client started again (after Ctrl-C, a crash, a reboot) on an application an operator had
    paused waited without a word, and after twice download_timeout blamed the hosts; the manager
    now tells it at once, as it told the client attached when it was paused, and the client says
    why it waits until the application is resumed, then finishes the crawl."""
    dash.start()
    wait_for(lambda: running(dash.application()) >= 4, 60, message="threads running at the gate")
    app_id = dash.application()["application_id"]

    def control(action: str) -> None:
        done = subprocess.run([sys.executable, "-m", "gridcrawl.client", "--manager", dash.grid.endpoint,
                               action, app_id], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr

    control("pause")
    wait_for(lambda: "an operator paused this application" in dash.grid.log("client.log"), 30,
             message="the crawling client told of the pause")
    dash.client.send_signal(signal.SIGTERM)
    dash.client.wait(timeout=60)  # (it stops gracefully, then ends by the signal, as a shell expects)
    assert "stopped before the end (SIGTERM)" in dash.grid.log("client.log")
    before = len(dash.grid.log("client.log"))
    # the same crawl again: it reattaches (given a hot standby too, which does not run here)
    standby = f"tcp://127.0.0.1:{free_port()}"
    # (it says why it waits after 2 heartbeats without a result, not 5)
    dash.client = dash.grid.start_client(dash.server.url("/"), "--manager", standby,
                                         env={"GRIDCRAWL_TEST_CONSTANTS": "gridcrawl.client.app.WAIT_BEATS=2"})

    def said() -> str:
        return dash.grid.log("client.log")[before:]

    wait_for(lambda: "an operator paused this application; its" in said(), 60,
             message=f"the reattached client saying why it waits:\n{said()}")
    text = said()
    assert f"application {app_id[:8]} reattached" in text
    assert text.index("reattached") < text.index("an operator paused this application")
    # the command names every manager (it named the one the client was on: after a failover, the
    # operator's copy of it went to a standby)
    assert f"--manager {dash.grid.endpoint},{standby} resume {app_id[:8]})" in text, text
    assert "they wait for their hosts" not in text
    control("resume")
    dash.gate.set()
    assert dash.client.wait(timeout=90) == 0, said()
    assert dash.grid.query("crawl", "SELECT COUNT(*) FROM document")[0][0] == len(reachable(dash.site))


# ------------------------------------------------------------------------------ login off loopback


def test_off_loopback_the_dashboard_requires_a_user_of_the_manager(tmp_path):
    from gridcrawl.auth import UserStore
    from gridcrawl.db import open_database
    from gridcrawl.manager.dashboard import Dashboard, DashboardError, is_loopback, parse_address

    assert parse_address("127.0.0.1:9080") == ("127.0.0.1", 9080)
    assert parse_address("[::1]:9080") == ("::1", 9080)
    assert parse_address("9080") == ("127.0.0.1", 9080)
    for bad in ("host:", "host:http", "127.0.0.1:70000"):
        with pytest.raises(DashboardError):
            parse_address(bad)
    assert is_loopback("127.0.0.2") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.0.2.1") and not is_loopback("example.org")

    class Source:  # no manager loop here: an empty grid
        def latest_snapshot(self):
            return None

        def request_control(self, application_id, action, user=None, timeout=5.0):  # pragma: no cover
            raise AssertionError("control must not be reached without a login")

    users = UserStore(open_database(f"sqlite:///{tmp_path / 'm.db'}"))
    with pytest.raises(DashboardError, match="requires a login"):
        Dashboard(Source(), "0.0.0.0", 0, users=users)
    users.add("operator", "correct horse battery", "Administrators")
    dashboard = Dashboard(Source(), "0.0.0.0", 0, users=users).start()
    try:
        url = f"http://127.0.0.1:{dashboard.port}"
        anonymous = requests.get(url + "/api/snapshot", timeout=5)
        assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"].startswith("Basic")
        assert requests.get(url + "/", timeout=5).status_code == 401
        wrong = requests.get(url + "/api/snapshot", auth=("operator", "wrong password"), timeout=5)
        assert wrong.status_code == 401 and wrong.json()["error"] == "wrong user name or password"
        assert anonymous.json()["error"].startswith("login required")
        assert requests.get(url + "/api/snapshot", auth=("nobody", "correct horse battery"), timeout=5).status_code == 401
        ok = requests.get(url + "/api/snapshot", auth=("operator", "correct horse battery"), timeout=5)
        assert ok.status_code == 200 and ok.json()["executors"] == []
        assert requests.post(url + "/api/applications/abcd/pause", json={}, timeout=5).status_code == 401
    finally:
        dashboard.stop()


def test_dns_rebinding_and_cross_origin_posts_are_refused_and_refused_logins_logged(tmp_path, caplog):
    """A web page whose name was re-pointed at 127.0.0.1 (DNS rebinding) is same-origin with a
    loopback dashboard: it read every URL and, on a manager without users (every gridcrawl
    run), cancelled crawls. A loopback dashboard now answers only a loopback Host, and a POST
    whose Origin is another site's is refused. Refused logins are logged (they were not)."""
    from gridcrawl.auth import UserStore
    from gridcrawl.db import open_database
    from gridcrawl.manager.dashboard import Dashboard

    controlled = []

    class Source:
        def latest_snapshot(self):
            return None

        def request_control(self, application_id, action, user=None, timeout=5.0):
            controlled.append((application_id, action))
            raise AssertionError("a forged request must not reach the manager")

    loopback = Dashboard(Source(), "127.0.0.1", 0).start()
    try:
        url = f"http://127.0.0.1:{loopback.port}"
        assert requests.get(url + "/api/summary", timeout=5).status_code == 200
        assert requests.get(url + "/api/summary", headers={"Host": f"localhost:{loopback.port}"}, timeout=5).ok
        rebound = requests.get(url + "/api/applications", headers={"Host": f"attacker.example:{loopback.port}"},
                               timeout=5)
        assert rebound.status_code == 403 and "is not this loopback dashboard's" in rebound.json()["error"]
        forged = requests.post(url + "/api/applications/abcd/cancel", json={}, timeout=5,
                               headers={"Origin": "http://attacker.example:8000"})
        assert forged.status_code == 403 and "another origin" in forged.json()["error"]
        assert controlled == []
    finally:
        loopback.stop()

    users = UserStore(open_database(f"sqlite:///{tmp_path / 'm.db'}"))
    users.add("operator", "correct horse battery", "Administrators")
    public = Dashboard(Source(), "0.0.0.0", 0, users=users).start()
    try:
        url = f"http://127.0.0.1:{public.port}"
        with caplog.at_level("WARNING", logger="gridcrawl.manager.dashboard"):
            for i in range(5):
                assert requests.get(url + "/api/summary", auth=("operator", f"guess {i}"), timeout=5).status_code == 401
        lines = [r.getMessage() for r in caplog.records if "login refused" in r.getMessage()]
        assert 1 <= len(lines) <= 2 and "'operator' from 127.0.0.1 (wrong user name or password)" in lines[0], lines
    finally:
        public.stop()


def test_first_read_gets_a_fresh_snapshot_with_its_age_and_executors_get_no_dashboard(tmp_path):
    """Before: the first API read returned ``{"time": null}`` and a read after 30 s without
    readers got a snapshot up to 30 s old; the Executors group could read every URL."""
    import threading
    import time as _time
    from gridcrawl.auth import UserStore
    from gridcrawl.db import open_database
    from gridcrawl.manager.dashboard import Dashboard
    from gridcrawl.manager.server import SNAPSHOT_READERS, ManagerServer
    from gridcrawl.settings import Settings

    engine = open_database(f"sqlite:///{tmp_path / 'manager.db'}")
    server = ManagerServer(Settings(), "tcp://127.0.0.1:0", engine)
    stop = threading.Event()
    loop = threading.Thread(target=server.serve, args=(stop,), daemon=True)
    loop.start()
    users = UserStore(engine)
    users.add("operator", "correct horse battery", "Users")
    users.add("desktop", "correct horse battery", "Executors")
    dashboard = Dashboard(server, "0.0.0.0", 0, users=users).start()
    try:
        url = f"http://127.0.0.1:{dashboard.port}/api/summary"
        first = requests.get(url, auth=("operator", "correct horse battery"), timeout=10).json()
        server._snapshot_read -= SNAPSHOT_READERS + 1  # nobody read for longer than the loop keeps building
        _time.sleep(0.6)
        later = requests.get(url, auth=("operator", "correct horse battery"), timeout=10).json()
        executor = requests.get(url, auth=("desktop", "correct horse battery"), timeout=10)
    finally:
        dashboard.stop()
        stop.set()
        loop.join(10)
    print(f"\n[dashboard] first read: time set={first['time'] is not None}, age={first['age']:.3f} s; after "
          f"{SNAPSHOT_READERS:.0f} s without readers: age={later['age']:.3f} s; Executors group: HTTP {executor.status_code}")
    assert first["time"] is not None and first["age"] < 0.5 and first["summary"]["executors"] == 0
    assert later["age"] < 0.5
    assert executor.status_code == 403 and "no dashboard access" in executor.json()["error"]


def test_off_loopback_a_user_sees_only_its_own_applications_and_their_urls(tmp_path):
    """On a grid shared by several users, a dashboard login of the Users group (ManageOwnApp)
    showed every user's applications, names and URLs, which the grid's protocol keeps from it:
    now it sees its own applications, their threads and their hosts; an administrator
    (ManageAllApps) sees all, and the grid's executors and summary are the same for both."""
    from gridcrawl.auth import UserStore
    from gridcrawl.db import open_database
    from gridcrawl.manager.dashboard import Dashboard

    def app(application_id, owner):
        return {"application_id": application_id, "name": f"crawl of {owner}", "owner": owner, "state": "running"}

    def thread(application_id, url, host):
        return {"application_id": application_id, "thread_id": 1, "url": url, "host": host, "state": "started"}

    snap = {"time": 1700000000.0, "age": 0.1, "summary": {"executors": 1}, "executors": [{"name": "desk-1"}],
            "applications": [app("aaaa1111", "alice"), app("bbbb2222", "bob")],
            "threads": [thread("aaaa1111", "http://alice.example/secret-plan", "alice.example"),
                        thread("bbbb2222", "http://bob.example/page", "bob.example")],
            "hosts": [{"host": "alice.example", "queued": 9}, {"host": "bob.example", "queued": 1}], "hosts_total": 2}
    asked = []

    class Source(_FixedSource):
        def request_control(self, application_id, action, user=None, timeout=5.0, owner=None):
            asked.append((application_id, action, user, owner))
            return type("Done", (), {"error": None, "result": {"application_id": application_id, "action": action,
                                                               "state": "paused"}})()

    users = UserStore(open_database(f"sqlite:///{tmp_path / 'm.db'}"))
    users.add("admin", "correct horse battery", "Administrators")
    users.add("bob", "bobs horse battery", "Users")
    dashboard = Dashboard(Source(snap), "0.0.0.0", 0, users=users).start()
    try:
        url = f"http://127.0.0.1:{dashboard.port}"
        bob = requests.get(url + "/api/snapshot", auth=("bob", "bobs horse battery"), timeout=5).json()
        admin = requests.get(url + "/api/snapshot", auth=("admin", "correct horse battery"), timeout=5).json()
        bob_threads = requests.get(url + "/api/threads", auth=("bob", "bobs horse battery"), timeout=5).json()
        own = requests.post(url + "/api/applications/bbbb2222/pause", json={}, auth=("bob", "bobs horse battery"),
                            timeout=5)
    finally:
        dashboard.stop()
    assert [a["owner"] for a in bob["applications"]] == ["bob"]
    assert [t["url"] for t in bob["threads"]] == ["http://bob.example/page"] == [t["url"] for t in bob_threads["threads"]]
    assert [h["host"] for h in bob["hosts"]] == ["bob.example"] and bob["hosts_total"] == 1
    assert "secret-plan" not in str(bob) and "alice" not in str(bob)
    assert bob["summary"] == admin["summary"] and bob["executors"] == admin["executors"] == snap["executors"]
    assert admin["applications"] == snap["applications"] and admin["threads"] == snap["threads"]
    assert admin["hosts"] == snap["hosts"]
    # bob's actions reach the manager's loop bound to his own applications (the next test)
    assert own.status_code == 200 and asked == [("bbbb2222", "pause", "bob", "bob")]


def test_a_user_controls_its_own_applications_from_the_dashboard_and_no_one_elses(tmp_path, monkeypatch):
    """The dashboard judged an action by the owner it found in its snapshot, which lists the
    newest applications only: a user's own application beyond them was refused (403), and
    another user's was answered 403 naming it, where an id that does not exist is 404. The
    manager's loop now looks among the user's own applications alone: its own is found wherever
    it is listed, another's is answered as one that does not exist, as the client's ``pause``
    is; an administrator acts on any."""
    import zmq
    from gridcrawl import protocol as p
    from gridcrawl.auth import UserStore
    from gridcrawl.db import open_database
    from gridcrawl.manager import dashboard as board
    from gridcrawl.manager.server import ManagerServer
    from gridcrawl.settings import Settings

    monkeypatch.setattr(board, "SNAPSHOT_APPLICATIONS", 1)  # (50 on a real grid) alice's is not listed
    engine = open_database(f"sqlite:///{tmp_path / 'manager.db'}")
    users = UserStore(engine)
    for name, group in (("alice", "Users"), ("bob", "Users"), ("admin", "Administrators")):
        users.add(name, f"{name} horse battery", group)
    server = ManagerServer(Settings(), "tcp://127.0.0.1:0", engine)
    stop = threading.Event()
    loop = threading.Thread(target=server.serve, args=(stop,), daemon=True)
    loop.start()
    context = zmq.Context()
    dashboard = board.Dashboard(server, "127.0.0.1", 0, users=users).start()
    try:
        ids = {}
        for name in ("alice", "bob"):  # alice's first: the older one
            sock = context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(server.endpoint)
            sock.send_multipart(p.encode(p.OpenApplication(f"crawl of {name}", name, password=f"{name} horse battery")))
            assert sock.poll(10_000), f"no answer to {name}'s open"
            ids[name] = p.decode(sock.recv_multipart()).application_id

        def post(who: str, application_id: str, action: str = "pause") -> requests.Response:
            return requests.post(f"http://127.0.0.1:{dashboard.port}/api/applications/{application_id}/{action}",
                                 json={}, auth=(who, f"{who} horse battery"), timeout=10)

        wait_for(lambda: requests.get(dashboard.url + "api/applications", timeout=10).json()["applications"], 10,
                 message="a snapshot with bob's application")
        listed = [a["application_id"] for a in requests.get(dashboard.url + "api/applications", timeout=10).json()[
            "applications"]]
        own = post("alice", ids["alice"][:6])
        others = post("alice", ids["bob"])
        unknown = post("alice", "0123456789")
        admin = post("admin", ids["bob"][:8])
    finally:
        dashboard.stop()
        stop.set()
        loop.join(10)
        context.destroy(linger=0)
    assert listed == [ids["bob"]]
    assert own.status_code == 200 and own.json() == {"application_id": ids["alice"], "action": "pause",
                                                     "state": "paused"}, own.text
    assert others.status_code == unknown.status_code == 404, (others.text, unknown.text)
    assert others.json()["error"] == f"no application {ids['bob']!r} at this manager"
    assert admin.status_code == 200 and admin.json()["state"] == "paused"


def test_a_standby_managers_dashboard_names_the_active_manager_at_once(tmp_path):
    """Two managers on one database: the standby's dashboard answers at once (it waited 2 s for
    a snapshot its loop never builds, then showed an empty grid as if it were the whole grid),
    with ``manager.role`` ``standby`` and the active manager's address; a control request gets
    503 naming the active manager (it waited 7 s for "did not answer in time"). The active
    manager's snapshot says ``role`` ``active`` (it said ``standby: true``, its --standby flag)."""
    from gridcrawl.db import open_database
    from gridcrawl.manager.dashboard import Dashboard
    from gridcrawl.manager.server import ManagerServer
    from gridcrawl.settings import Settings

    db = f"sqlite:///{tmp_path / 'manager.db'}"
    settings = Settings(heartbeat_interval=0.2)
    active = ManagerServer(settings, "tcp://127.0.0.1:0", open_database(db), standby=True)
    standby = ManagerServer(settings, "tcp://127.0.0.1:0", open_database(db), standby=True)
    stop = threading.Event()
    loops = [threading.Thread(target=server.serve, args=(stop,), daemon=True) for server in (active, standby)]
    for loop in loops:
        loop.start()
    boards = [Dashboard(server, "127.0.0.1", 0).start() for server in (active, standby)]
    try:
        wait_for(lambda: standby.snapshot is not None, 10, 0.05, "the standby's first lease check")
        url = f"http://127.0.0.1:{boards[1].port}/api/snapshot"
        seen = requests.get(url, timeout=10).json()
        asked = standby._snapshot_wanted.qsize()  # requests for a snapshot its loop never builds
        control = requests.post(f"http://127.0.0.1:{boards[1].port}/api/applications/abcd/pause", json={}, timeout=10)
        mine = requests.get(f"http://127.0.0.1:{boards[0].port}/api/snapshot", timeout=10).json()
        # a standby scraped by Prometheus said gridcrawl_executors_connected 0, as a grid whose executors left
        metrics = [scrape(requests.get(f"http://127.0.0.1:{board.port}/metrics", timeout=10).text) for board in boards]
    finally:
        for board in boards:
            board.stop()
        stop.set()
        for loop in loops:
            loop.join(10)
    print(f"\n[standby dashboard] {seen['manager']}; control: HTTP {control.status_code}")
    assert seen["manager"] == {"address": standby.address, "role": "standby", "epoch": None, "since": None,
                               "active": active.address}
    assert seen["executors"] == [] and seen["time"] is not None and asked == 0
    assert control.status_code == 503 and control.json()["error"].startswith(
        f"this manager is a standby; the active manager is {active.address}")
    assert mine["manager"]["role"] == "active" and mine["manager"]["active"] == active.address
    assert mine["manager"]["epoch"] == 1 and "standby" not in mine["manager"]
    assert metrics[1] == {("gridcrawl_manager_active", (("address", standby.address),)): 0.0}
    assert metrics[0][("gridcrawl_manager_active", (("address", active.address),))] == 1.0
    assert metrics[0][("gridcrawl_executors_connected", ())] == 0.0


def scrape(text: str) -> dict[tuple[str, tuple], float]:
    """Prometheus exposition ``text`` read by prometheus_client's own parser: ``{(sample name,
    sorted label pairs): value}``."""
    from prometheus_client.parser import text_string_to_metric_families
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_metrics_for_prometheus_show_a_user_what_the_api_shows_it(tmp_path):
    """``GET /metrics``: the snapshot in Prometheus' text format, read back by prometheus_client's
    parser: counters end in _total, label values with quotes, backslashes and new lines come back
    as they were; off loopback it needs a login like the API, and a user of the Users group sees
    only its own applications there too. A manager with no snapshot yet answers zeros."""
    from gridcrawl.auth import UserStore
    from gridcrawl.db import open_database
    from gridcrawl.manager.dashboard import Dashboard, empty_snapshot
    from gridcrawl.manager.metrics import metrics_text

    odd = 'crawl "a"\\b\nc'
    snap = {"time": 1700000000.0, "age": 0.1,
            "summary": {"executors": 1, "applications": 2, "queued": 7, "fenced": 3,
                        "threads": {"READY": 7, "SCHEDULED": 1, "STARTED": 2, "FINISHED": 0, "DEAD": 4},
                        "unrunnable": {"render": 2}},
            "executors": [{"name": "desk-1", "executor_id": "e1", "connected": True, "workers": 8, "assigned": 3,
                           "running": 2, "finished": 40, "pages_per_second": 1.5, "cpu_usage": 12.5,
                           "mem_usage": 1 << 30}],
            "applications": [{"application_id": "aaaa1111", "name": odd, "owner": "alice", "state": "paused",
                              "threads": {"READY": 5, "STARTED": 1}, "done": 20, "errors": 2, "pages_per_second": 2.0},
                             {"application_id": "bbbb2222", "name": "bob's", "owner": "bob", "state": "running",
                              "threads": {"READY": 2, "STARTED": 1}, "done": 4, "errors": 0, "pages_per_second": 0.5}],
            "threads": [], "hosts": [], "hosts_total": 2}
    metrics = scrape(metrics_text(snap).decode())
    alice = (("application", "aaaa1111"), ("name", odd), ("owner", "alice"))
    assert metrics[("gridcrawl_application_threads_done_total", alice)] == 20
    assert metrics[("gridcrawl_application_threads_failed_total", alice)] == 2
    assert metrics[("gridcrawl_application_paused", alice)] == 1
    assert metrics[("gridcrawl_application_threads", tuple(sorted(alice + (("state", "READY"),))))] == 5
    assert metrics[("gridcrawl_threads", (("state", "DEAD"),))] == 4
    assert metrics[("gridcrawl_threads_unrunnable", (("needs", "render"),))] == 2
    assert metrics[("gridcrawl_results_fenced_total", ())] == 3
    desk = (("executor", "desk-1"), ("executor_id", "e1"))
    assert metrics[("gridcrawl_executor_threads_finished_total", desk)] == 40
    assert metrics[("gridcrawl_executor_memory_bytes", desk)] == 1 << 30
    assert metrics[("gridcrawl_hosts", ())] == 2 and metrics[("gridcrawl_threads_queued", ())] == 7
    empty = scrape(metrics_text({**empty_snapshot(None), "age": None}).decode())
    assert empty[("gridcrawl_executors_connected", ())] == 0
    assert not [name for name, _ in empty if name.startswith(("gridcrawl_executor_", "gridcrawl_application_"))]

    users = UserStore(open_database(f"sqlite:///{tmp_path / 'm.db'}"))
    users.add("bob", "bobs horse battery", "Users")
    dashboard = Dashboard(_FixedSource(snap), "0.0.0.0", 0, users=users).start()
    try:
        url = f"http://127.0.0.1:{dashboard.port}/metrics"
        anonymous = requests.get(url, timeout=5)
        bob = scrape(requests.get(url, auth=("bob", "bobs horse battery"), timeout=5).text)
    finally:
        dashboard.stop()
    assert anonymous.status_code == 401
    assert {dict(labels)["owner"] for (name, labels) in bob if name.startswith("gridcrawl_application_")} == {"bob"}


class _FixedSource:
    """A :class:`gridcrawl.manager.dashboard.SnapshotSource` whose snapshot is a fixed dict."""

    def __init__(self, snapshot: dict) -> None:
        self.snapshot = snapshot

    def latest_snapshot(self, wait: float = 2.0) -> dict:
        return self.snapshot

    def request_control(self, application_id: str, action: str, user=None, timeout: float = 5.0):
        raise AssertionError("not asked in this test")


def test_the_api_encodes_snapshots_as_json_in_order_with_non_finite_figures_as_null():
    """The JSON API goes through msgspec (the 1,000-executor snapshot in about a millisecond):
    the same data back, keys in the order the snapshot gives them, non-ASCII text intact, a
    figure that is not finite as ``null`` (``Infinity`` is not JSON; a browser would refuse it)."""
    import json

    from gridcrawl.manager.dashboard import create_app
    executors = [{"name": f"desk-{i}", "user": "élodie", "cpu_usage": 12.5 + i, "load": float("nan") if i == 1 else 0.0}
                 for i in range(3)]
    snap = {"time": 1700000000.25, "age": 0.5, "summary": {"queued": 7, "running": 2}, "executors": executors,
            "applications": [], "threads": [], "hosts": [{"host": "a.example", "next_start": "busy"}], "hosts_total": 1}
    client = create_app(_FixedSource(snap)).test_client()
    whole = client.get("/api/snapshot")
    assert whole.status_code == 200 and whole.mimetype == "application/json"
    data = json.loads(whole.data)
    assert list(data) == list(snap)
    assert data["executors"][1]["load"] is None
    assert data["executors"][0] == executors[0] and data["executors"][0]["user"] == "élodie"
    assert {k: v for k, v in data.items() if k != "executors"} == {k: v for k, v in snap.items() if k != "executors"}
    part = json.loads(client.get("/api/hosts").data)
    assert part == {"time": snap["time"], "age": snap["age"], "hosts": snap["hosts"]}
    assert json.loads(client.post("/api/applications/x/explode", json={}).data)["error"].startswith("unknown action")


def test_the_api_answers_a_wrong_method_or_path_in_json():
    """``curl http://.../api/applications/ID/pause`` (a GET) and a misspelt endpoint got Flask's
    HTML error pages from a JSON API; they now get ``{"error": ...}`` saying what to use, with
    the status (405 with ``Allow``, 404) as before. Pages outside /api/ are left as they are."""
    from gridcrawl.manager.dashboard import Dashboard
    snap = {"time": 1.0, "age": 0.0, "summary": {}, "executors": [], "applications": [], "threads": [],
            "hosts": [], "hosts_total": 0}
    dashboard = Dashboard(_FixedSource(snap), "127.0.0.1", 0).start()
    try:
        get = requests.get(dashboard.url + "api/applications/abcd/pause", timeout=10)
        delete = requests.delete(dashboard.url + "api/snapshot", timeout=10)
        missing = requests.get(dashboard.url + "api/executor", timeout=10)
        page = requests.get(dashboard.url + "nothing-here", timeout=10)
    finally:
        dashboard.stop()
    assert get.status_code == 405 and "POST" in get.headers["Allow"]
    assert get.json() == {"error": "/api/applications/abcd/pause takes POST, not GET"}
    assert delete.status_code == 405 and delete.json() == {"error": "/api/snapshot takes GET, not DELETE"}
    assert missing.status_code == 404 and missing.json() == {"error": "no endpoint /api/executor: GET /api/ lists them"}
    assert missing.headers["X-Content-Type-Options"] == "nosniff"
    assert page.status_code == 404 and page.headers["Content-Type"].startswith("text/html")


def test_a_served_dashboard_lowers_the_gil_switch_interval_and_answers():
    """``Dashboard.start`` lowers the GIL switch interval (a request's thread waits less for the
    manager's busy loop) and serves the snapshot over real HTTP (waitress on 127.0.0.1)."""
    from gridcrawl.manager.dashboard import SWITCH_INTERVAL, Dashboard
    before = sys.getswitchinterval()
    snap = {"time": 1.0, "age": 0.0, "summary": {"queued": 1}, "executors": [], "applications": [], "threads": [],
            "hosts": [], "hosts_total": 0}
    dashboard = Dashboard(_FixedSource(snap), "127.0.0.1", 0)
    try:
        assert sys.getswitchinterval() == before  # only a serving dashboard changes it
        dashboard.start()
        assert sys.getswitchinterval() <= SWITCH_INTERVAL < 0.005
        answer = requests.get(dashboard.url + "api/snapshot", timeout=10)
        assert answer.status_code == 200 and answer.json() == snap
    finally:
        dashboard.stop()
        sys.setswitchinterval(before)
