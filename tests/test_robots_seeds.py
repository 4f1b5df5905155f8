"""URLs a site's robots.txt disallows are the crawler obeying the site, not errors: a real
``gridcrawl run`` (its own manager and executors) of a :class:`sites.Site` whose robots.txt says
``Disallow: /private/`` counts them apart ("disallowed by robots.txt", ``crawl_counts``'s
``disallowed``), names them in its summary, says in one line when robots.txt disallowed every
seed, and exits 0 then (as a seed that is ``noindex``); a page that failed still makes a run
that fetched nothing exit 1, and a robots.txt that does not answer (``robots_unreachable``)
stays an error."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from sites import Site, status_page

pytestmark = pytest.mark.e2e

ROBOTS = b"User-agent: *\nDisallow: /private/\n"


def _site(robots=ROBOTS) -> Site:
    """A site of a home page linking to one private page, and a robots.txt (``robots``: its
    body, or a ``Site.extra`` handler) that disallows ``/private/``."""
    site = Site()
    site.pages["/"] = b"<html><head><title>home</title></head><body><a href='/private/a'>a</a></body></html>"
    site.pages["/private/a"] = b"<html><head><title>a</title></head><body>private</body></html>"
    site.pages["/private/"] = b"<html><head><title>p</title></head><body><a href='/'>home</a></body></html>"
    if callable(robots):
        site.extra["/robots.txt"] = robots
    else:
        site.pages["/robots.txt"] = robots
        site.types["/robots.txt"] = "text/plain"
    return site


def _run(workdir, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``gridcrawl run ARGS --workdir WORKDIR`` with one executor, no progress bar and no sitemaps."""
    return subprocess.run([sys.executable, "-m", "gridcrawl", "run", *args, "--workdir", str(workdir),
                           "--executors", "1", "--no-progress", "--no-sitemaps"],
                          capture_output=True, text=True, timeout=120, env=env)


def _row(stderr: str, label: str) -> str | None:
    """The value of the summary's row ``label`` (its folded lines joined), or None."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.split("│")]
        if len(cells) >= 3 and cells[1] == label:
            value = [cells[2]]
            for more in lines[i + 1:]:
                cont = [c.strip() for c in more.split("│")]
                if len(cont) < 3 or cont[1]:
                    break
                value.append(cont[2])
            return " ".join(value)
    return None


def _paths(server) -> list[str]:
    """The paths the site was asked for, in order."""
    with server.lock:
        return [r.path for r in server.requests]


def test_a_seed_robots_txt_disallows_is_no_error_the_summary_names_it_and_the_run_exits_0(tmp_path, site_server):
    """``gridcrawl run http://site/private/`` with ``Disallow: /private/``: the seed is not
    fetched; the summary says 0 errors and names it in a row of its own, one line says robots.txt
    disallows the seed and which option overrides it, and the exit status is 0 (before: "errors
    1", an "errors by kind" table of `robots`, "error: every page of this run failed" and exit
    status 1). The command that line gives fetches it."""
    server = site_server(_site())
    seed = server.url("/private/")
    done = _run(tmp_path / "w", seed)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _paths(server) == ["/robots.txt"]  # obeyed: the seed itself never asked for
    assert _row(done.stderr, "errors") == "0", done.stderr
    assert _row(done.stderr, "disallowed by robots.txt") == (
        f"1 URL not fetched, as the sites ask (not an error), e.g. {seed}"), done.stderr
    assert "errors by kind" not in done.stderr and "every page of this run failed" not in done.stderr
    assert "once the cause is fixed" not in done.stderr  # nothing to fix: no retry of failures offered
    lines = [line for line in done.stderr.splitlines() if line.startswith("no page was fetched")]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"no page was fetched: the site's robots.txt disallows the seed {seed}, and the "
                               "crawl obeys it (not an error); where the site's owner agrees, --ignore-robots "
                               "fetches it regardless: gridcrawl run "), lines[0]
    command = lines[0].split("regardless: ", 1)[1]
    assert command.endswith(" --ignore-robots --retry-failed robots")

    # gridcrawl report --crawl-db tells them apart the same way
    db = f"sqlite:///{tmp_path / 'w' / 'crawl.db'}"
    report = subprocess.run([sys.executable, "-m", "gridcrawl", "report", "--crawl-db", db],
                            capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    shown = report.stdout + report.stderr
    assert re.search(r"│ errors\s+│\s+0 │", shown), shown
    assert re.search(r"│ disallowed by robots.txt \(not errors\)\s+│\s+1 │", shown), shown
    assert "errors by kind" not in shown and seed in shown

    # the line's command fetches the seed (and the page it links to) regardless of robots.txt
    import shlex
    argv = shlex.split(command)
    assert argv[:2] == ["gridcrawl", "run"]
    again = subprocess.run([sys.executable, "-m", "gridcrawl", *argv[1:]], capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "/private/" in _paths(server)
    assert _row(again.stderr, "documents stored") == "3", again.stderr  # /private/, the home page, /private/a


def test_a_crawl_whose_links_robots_txt_disallows_counts_them_apart_and_says_nothing_more(tmp_path, site_server):
    """A crawl from ``/`` whose link to ``/private/a`` robots.txt disallows: its home page stored,
    0 errors, the disallowed page in its row, no "no page was fetched" line, exit status 0."""
    server = site_server(_site())
    done = _run(tmp_path / "w", server.url("/"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "/private/a" not in _paths(server)
    assert _row(done.stderr, "documents stored") == "1", done.stderr
    assert _row(done.stderr, "errors") == "0", done.stderr
    assert _row(done.stderr, "disallowed by robots.txt") == (
        f"1 URL not fetched, as the sites ask (not an error), e.g. {server.url('/private/a')}"), done.stderr
    assert "no page was fetched" not in done.stderr and "errors by kind" not in done.stderr


def test_a_run_whose_pages_failed_or_were_disallowed_still_exits_1(tmp_path, site_server):
    """Seeds ``/private/`` (disallowed) and ``/missing`` (404): nothing fetched well and a page
    failed, so the run failed (exit 1), its line naming both; the error count is the 404 alone."""
    server = site_server(_site())
    done = _run(tmp_path / "w", server.url("/private/"), server.url("/missing"))
    assert done.returncode == 1, done.stderr[-3000:]
    assert _row(done.stderr, "errors") == "1", done.stderr
    assert _row(done.stderr, "disallowed by robots.txt").startswith("1 URL not fetched"), done.stderr
    assert ("error: every page of this run failed or was disallowed by robots.txt (2 pages: 1 failed, "
            "1 disallowed; the crawl's errors by kind: http 404 1)") in done.stderr
    assert "no page was fetched" not in done.stderr
    # the next command retries the failure only: robots.txt would refuse the other again
    assert "--retry-failed http_404" in done.stderr and "--retry-failed robots" not in done.stderr


def test_an_unreachable_robots_txt_stays_an_error(tmp_path, site_server):
    """robots.txt answering 503 is a failure to learn the rules, not a rule: the seed fails as
    ``robots_unreachable``, counted among the errors, and the run exits 1 (retry_times 0: one
    probe)."""
    server = site_server(_site(status_page(503)))
    env = {**os.environ, "GRIDCRAWL_RETRY_TIMES": "0"}
    done = _run(tmp_path / "w", server.url("/private/"), env=env)
    assert done.returncode == 1, done.stderr[-3000:]
    assert _row(done.stderr, "errors") == "1", done.stderr
    assert _row(done.stderr, "disallowed by robots.txt") is None
    assert "robots_unreachable" in done.stderr and "every page of this run failed (1 page;" in done.stderr
    assert "no page was fetched" not in done.stderr


def test_the_store_counts_disallowed_urls_apart_and_retry_failed_all_leaves_them(tmp_path):
    """:meth:`CrawlStore.apply` of a page stored, one failed (404), one ``robots_unreachable`` and
    two disallowed by robots.txt into a real SQLite crawl database: its counts say 2 errors and
    2 disallowed, its error groups tell the ``robots`` one apart, and ``--retry-failed all``
    (``[]``) queues the 2 failures again, not the disallowed URLs (the same robots.txt would
    refuse them again); ``--retry-failed robots`` queues those."""
    from gridcrawl.client.store import CrawlStore, Outcome
    from gridcrawl.db import open_database
    from gridcrawl.protocol import PageResult
    from gridcrawl.urls import canonical_url
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'c.db'}"))
    urls = [canonical_url(f"http://127.0.0.1:1/{name}") for name in ("ok", "gone", "down", "private/a", "private/b")]
    store.add_seeds(urls)
    results = {urls[0]: dict(status=200, content_type="text/html", size=8, title="ok", content="<p>ok</p>"),
               urls[1]: dict(status=404, error_kind="http_status", error="HTTP 404 Not Found"),
               urls[2]: dict(error_kind="robots_unreachable", error="robots.txt unreachable: HTTP 503"),
               urls[3]: dict(error_kind="robots", error="disallowed by robots.txt"),
               urls[4]: dict(error_kind="robots", error="disallowed by robots.txt")}
    pendings = store.claim(5)
    done = store.apply([Outcome(pend, PageResult(url=pend.url, final_url=pend.url, **results[pend.url]), "ex", 1, False)
                        for pend in pendings], store.scope(urls, [], -1))
    assert (done["pages"], done["errors"], done["disallowed"]) == (5, 2, 2)
    counts = store.counts()
    assert (counts["documents"], counts["errors"], counts["disallowed"], counts["set_aside"]) == (1, 2, 2, 0)
    groups = {g.kind: g for g in store.error_summary()}
    assert groups["robots"].disallowed and not groups["robots"].failed and groups["robots"].count == 2
    assert groups["robots_unreachable"].failed and not groups["robots_unreachable"].disallowed
    assert store.retry_failed([]) == 2
    assert store.retry_failed(["robots"]) == 2


def test_gridcrawl_client_names_the_executors_option(tmp_path, site_server):
    """With ``gridcrawl-client`` (its own manager and executor, tests/grid.py), robots.txt is the
    executors' to ignore: the line names executors started with ``--ignore-robots`` and the
    client's own command with ``--retry-failed robots``; exit status 0. The wording follows the
    program, not the application's name, which is the user's to choose (here that of ``gridcrawl run``)."""
    from grid import Grid
    server = site_server(_site())
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex")
        client = grid.start_client(server.url("/private/"), "--no-sitemaps", "--name", "gridcrawl run")
        assert client.wait(timeout=120) == 0, grid.log("client.log")
    finally:
        grid.stop()
    said = " ".join(grid.log("client.log").split())
    assert (f"no page was fetched: the site's robots.txt disallows the seed {server.url('/private/')}, and the crawl "
            "obeys it (not an error); where the site's owner agrees, executors started with --ignore-robots fetch it "
            f"regardless: {grid.client_command()} --retry-failed robots") in said, said
    assert "/private/" not in _paths(server)
