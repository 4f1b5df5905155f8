"""End to end: the real manager, two executors and a client as separate processes crawl a
generated site served by a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from gridcrawl.urls import canonical_url, fingerprint
from grid import FAST, Grid, wait_for
from sites import Site, generate_site, reachable, redirect

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_grid_crawls_every_reachable_page_exactly_once(tmp_path, site_server, request, backend):
    site = generate_site(250, links_per_page=6, seed=7, unreachable=5)
    server = site_server(site)
    if backend == "postgresql":  # manager and client tables in one fresh PostgreSQL schema
        url = request.getfixturevalue("postgres_url")
        grid = Grid(tmp_path, manager_db=url, crawl_db=url)
    else:
        grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "4")
        grid.start_executor("ex2", "--threads", "4")
        # both registered before the crawl (a 2 s crawl on a loaded machine ended before the second
        # executor had started, and the check that work spread over both failed)
        wait_for(lambda: grid.log("manager.log").count("registered:") >= 2, 60, 0.05, "both executors")
        client = grid.start_client(server.url("/"))
        assert client.wait(timeout=120) == 0, grid.log("client.log")
    finally:
        grid.stop()

    expected = {canonical_url(server.url(path)) for path in reachable(site)}
    docs = grid.query("crawl", "SELECT url, fingerprint, status, executor FROM document")
    urls = [row[0] for row in docs]
    assert len(urls) == len(set(urls)), "a page was stored twice"
    assert set(urls) == expected, "document must hold every reachable page and nothing else"
    assert all(fp == fingerprint(url) and status == 200 and ex for url, fp, status, ex in docs)
    assert grid.query("crawl", "SELECT COUNT(*) FROM to_visit_url") == [(0,)]
    # every page, and the host's /sitemap.xml (asked for once: robots.txt names no sitemap; a 404,
    # which is no failure)
    assert grid.query("crawl", "SELECT COUNT(*) FROM visited_url") == [(len(expected) + 1,)]
    sitemap = canonical_url(server.url("/sitemap.xml"))
    assert grid.query("crawl", f"SELECT status, error_kind, error FROM visited_url WHERE url = '{sitemap}'") == [
        (404, None, "no sitemap here (HTTP 404)")]
    # the summary names that probe, so that its figures add up (documents + errors + sitemaps)
    summary = [[c.strip() for c in line.split("│")[1:-1]] for line in grid.log("client.log").splitlines()
               if line.startswith("│")]
    assert ["URLs visited", f"{len(expected) + 1} (1 sitemap URL: no document)"] in summary, summary
    assert ["documents stored", str(len(expected))] in summary and ["errors", "0"] in summary, summary
    # no page was fetched twice, and nothing outside the reachable set was asked for
    counts = server.per_path_counts()
    assert 1 <= counts.pop("/robots.txt", 0) <= 2, "robots.txt is fetched once per executor"
    assert counts.pop("/sitemap.xml") == 1
    assert set(counts) == reachable(site) and set(counts.values()) == {1}

    threads = grid.query("manager", "SELECT state, executor_id, time_submitted, time_started, time_finished, url "
                                    "FROM thread")
    assert len(threads) == len(expected) + 1  # the pages and the /sitemap.xml
    assert {t[5] for t in threads} == expected | {sitemap}
    for state, executor_id, submitted, started, finished, url in threads:
        assert state == 4 and executor_id, url
        assert submitted <= started <= finished, url
    per_executor = grid.query("manager", "SELECT e.name, COUNT(*) FROM thread t JOIN executor e "
                                         "ON e.executor_id = t.executor_id GROUP BY e.name")
    assert len(per_executor) >= 2, per_executor
    assert grid.query("manager", "SELECT COUNT(*) FROM application WHERE state = 2 AND time_completed IS NOT NULL") == [(1,)]


def test_client_rerun_resumes_instead_of_starting_over(tmp_path, site_server):
    site = generate_site(80, links_per_page=4, seed=3)
    server = site_server(site)
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        first = grid.start_client(server.url("/"), "--max-pages", "30")
        assert first.wait(timeout=60) == 0, grid.log("client.log")
        assert grid.query("crawl", "SELECT COUNT(*) FROM visited_url") == [(30,)]
        ((left,),) = grid.query("crawl", "SELECT COUNT(*) FROM to_visit_url")
        assert f"stopped at --max-pages 30, a limit on the whole crawl (30 URLs visited in all): a larger " \
               f"--max-pages, or none, visits the {left} left" in grid.log("client.log")
        # its log said "crawl complete" of a crawl with URLs left to visit
        assert f"crawl stopped at --max-pages 30 ({left} URLs left to visit)" in grid.log("client.log")
        assert "crawl complete" not in grid.log("client.log")
        second = grid.start_client()  # no seeds: resume the crawl in the database
        assert second.wait(timeout=60) == 0, grid.log("client.log")
    finally:
        grid.stop()
    assert grid.query("crawl", "SELECT COUNT(*) FROM document") == [(len(reachable(site)),)]
    counts = server.per_path_counts()
    counts.pop("/robots.txt", None)  # each new executor connection may ask for it again
    assert set(counts.values()) == {1}, "a resumed crawl fetched a page again"


def test_a_second_client_on_a_crawl_database_in_use_is_refused_and_the_first_goes_on(tmp_path, site_server):
    """Two gridcrawl-client on one crawl database used to take its application from each other
    at every message ("is not open on this connection; connecting again", several times a second), and
    the second released the rows the first had in flight. The second is now refused at once, with
    one line; the first crawls on undisturbed, every page fetched once."""
    site = generate_site(60, links_per_page=4, seed=41)
    server = site_server(site, latency=0.1)
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        first = grid.start_client(server.url("/"))
        wait_for(lambda: "application" in grid.log("client.log") and "opened" in grid.log("client.log"), 60,
                 message="the first client's application opened")
        second = subprocess.run([sys.executable, "-m", "gridcrawl.client", "--manager", grid.endpoint,
                                 "--db", grid.crawl_db, "--no-progress", *FAST],
                                capture_output=True, text=True, timeout=60)
        assert first.poll() is None, "the first crawl ended before the second client came"
        server.latency = 0.01  # the second has come and gone: the rest of the first crawl need not be slow
        assert first.wait(timeout=120) == 0, grid.log("client.log")
    finally:
        grid.stop()
    assert second.returncode == 2
    # the crawl database's crawler lock refuses it before the manager could ("application ... is
    # in use by another client"); test_db_concurrency: the lock on every back end
    assert re.fullmatch(r"error: another crawler is crawling into \S+crawl\.db \(gridcrawl-client, pid \d+, since "
                        r"[\d: -]+\): two "
                        r"on one crawl database fetch the same URLs twice; wait for it to end, or give another "
                        r"--db\n", second.stderr), second.stderr
    assert "is not open on this connection" not in grid.log("client.log")
    assert grid.query("crawl", "SELECT COUNT(*) FROM document") == [(len(reachable(site)),)]
    counts = server.per_path_counts()
    counts.pop("/robots.txt", None)
    assert set(counts.values()) == {1}, "a page was fetched twice"


def test_a_client_refused_the_application_leaves_the_crawling_clients_frontier_alone(tmp_path, site_server):
    """A second client started on a crawl database that another client is crawling is refused
    by the manager, and has changed nothing of the first's frontier: the grid threads the first
    submitted are still in flight (before, the second released them at start, so that the first
    claimed and submitted them twice)."""
    site = generate_site(20, links_per_page=3, seed=7)
    server = site_server(site)
    grid = Grid(tmp_path)
    try:
        grid.start_manager()  # no executor: the first client's threads stay in flight
        first = grid.start_client(server.url("/"))

        def in_flight() -> list[tuple]:
            try:
                return grid.query("crawl", "SELECT url FROM to_visit_url WHERE in_flight = 1")
            except Exception:
                return []
        wait_for(lambda: in_flight(), 20, message="the first client's seed in flight")
        before = sorted(in_flight())
        second = subprocess.run([sys.executable, "-m", "gridcrawl.client", "--manager", grid.endpoint,
                                 "--db", grid.crawl_db, "--no-progress"], capture_output=True, text=True, timeout=60)
        assert second.returncode == 2, second.stderr
        assert "another crawler is crawling into" in second.stderr
        assert sorted(in_flight()) == before
        assert first.poll() is None  # the first goes on
    finally:
        grid.stop()


def test_a_seed_that_redirects_to_another_host_brings_that_host_into_the_scope(tmp_path, site_server):
    """``http://wiki/`` answering 301 to ``http://wiki.corp.example/``: the redirect target's host
    joins the crawl's scope (Heritrix's seedsRedirectNewSeeds), the whole site behind it is
    crawled, and the crawl database keeps it for a resume. Here the seed's host is 127.0.0.2
    and the site's 127.0.0.1 (not a subdomain of it)."""
    site = generate_site(30, links_per_page=4, seed=31)
    server = site_server(site)
    front = Site(pages={"/elsewhere.html": b"<html><body>nothing</body></html>"})
    front.extra["/"] = redirect(server.url("/"), 301)
    front.extra["/odd"] = redirect("ftp://127.0.0.4/file.txt", 302)  # a target that never answers
    door = site_server(front, host="127.0.0.2")
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "4")
        client = grid.start_client(door.url("/"), door.url("/odd"))
        assert client.wait(timeout=120) == 0, grid.log("client.log")
    finally:
        grid.stop()
    expected = {canonical_url(server.url(path)) for path in reachable(site)}
    stored = {url for (url,) in grid.query("crawl", "SELECT url FROM document")}
    assert expected - {canonical_url(server.url("/"))} <= stored  # "/" is stored as the seed's page
    assert canonical_url(door.url("/")) in stored
    scope = grid.query("crawl", "SELECT value FROM crawl_meta WHERE name = 'allowed_domains'")[0][0]
    assert "127.0.0.1" in scope and "127.0.0.4" not in scope, scope
    assert "joins the crawl's scope" in grid.log("client.log")
    assert server.count("/p/1.html") == 1  # fetched once, by the executor that had the new scope
