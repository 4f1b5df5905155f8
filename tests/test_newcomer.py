"""A newcomer's first hour (issue 21): every failure of a crawl says why, and what to do next.

Real programs as processes on a generated site: a grid whose executor refuses the loopback site
(no ``--allow-private``, as on a private network), the client's summary of errors by kind, its
exit status, and ``--retry-failed`` once the cause is fixed.
"""

from __future__ import annotations

import pytest

from grid import Grid
from sites import generate_site

pytestmark = pytest.mark.e2e


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
        assert "--allow-private 127.0.0.0/8" in out and server.url("/") in out
        assert "every page of this crawl failed" in out
        # where to find all of them, and the command that retries them
        assert "--format csv" in out and "--retry-failed blocked" in out
        # the executor said so once, as a WARNING, with the option to use
        warnings = [line for line in grid.log("private.log").splitlines() if "SSRF guard" in line]
        assert len(warnings) == 1 and "WARNING" in warnings[0] and "--allow-private 127.0.0.0/8" in warnings[0]

        blocked.terminate()
        blocked.wait(10)
        grid.start_executor("allowed")
        again = grid.start_client("--retry-failed", "blocked")
        assert again.wait(timeout=90) == 0, grid.log("client.log")
    finally:
        grid.stop()
    documents = grid.query("crawl", "SELECT count(*) FROM document")[0][0]
    failed = grid.query("crawl", "SELECT count(*) FROM visited_url WHERE error_kind IS NOT NULL")[0][0]
    assert documents == 8 and failed == 0
    assert "1 failed URL queued again" in grid.log("client.log")
