"""``gridcrawl run``: the one command that starts a manager and executors and crawls."""

from __future__ import annotations

import subprocess
import sys

from grid import Grid
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
