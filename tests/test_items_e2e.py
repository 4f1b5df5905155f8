"""Items end to end: the real manager, three executors and the client crawl a generated shop
(tests/shop.py) with an item spec; one executor has the test extractor plugin, the others do
not, and one of those is killed with SIGKILL mid-crawl. The stored items equal the shop's
truth exactly and none is stored twice; the plugin's threads ran only where the plugin is; the
summary, ``gridcrawl report --crawl-db``, ``export --items`` and a re-extraction from the
stored pages (``gridcrawl extract``) agree with the crawl."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from grid import Grid, wait_for
from plugins import PLUGIN_NAME, plugin_env
from shop import SPEC, generate_shop, stored

pytestmark = pytest.mark.e2e

PLUGIN_SPEC = f"""
[[item]]
type = "shout"
url = '/p/[A-Z0-9-]+\\.html$'
plugin = "{PLUGIN_NAME}"
"""


def gridcrawl(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gridcrawl", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def items_so_far(grid: Grid) -> int:
    try:
        return grid.query("crawl", "SELECT COUNT(*) FROM item")[0][0]
    except sqlite3.OperationalError:  # the client has not created its tables yet
        return 0


def test_items_equal_the_truth_after_a_kill_and_reextraction_agrees(tmp_path, site_server):
    shop = generate_shop(lists=8, per_list=6)
    server = site_server(shop.site, latency=0.03)
    base = server.url("/").rstrip("/")
    spec = tmp_path / "shop.toml"
    spec.write_text(SPEC + PLUGIN_SPEC)
    env = plugin_env(tmp_path / "meta")
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("plugged", "--threads", "2", env=env)
        grid.start_executor("plain", "--threads", "2")
        victim = grid.start_executor("victim", "--threads", "3")
        client = grid.start_client(server.url("/"), "--extract", str(spec))
        wait_for(lambda: items_so_far(grid) >= 10, 60, message="the first items")
        victim.send_signal(signal.SIGKILL)   # mid-crawl: its threads are taken back and run again elsewhere
        assert client.wait(timeout=120) == 0, grid.log("client.log")
    finally:
        grid.stop()
    assert victim.returncode == -signal.SIGKILL
    lost = grid.query("manager", "SELECT COUNT(*) FROM attempt a JOIN executor e ON e.executor_id = a.executor_id "
                                 "WHERE e.name = 'victim' AND a.outcome = 'lost'")
    assert lost[0][0] >= 1, "the victim held no thread when it was killed"

    rows = grid.query("crawl", "SELECT type, url, position, fields FROM item")
    assert len(rows) == len({(t, u, p) for t, u, p, _ in rows}), "an item was stored twice"
    truth = shop.items | shop.shouts
    assert stored(rows, base) == truth
    misses = grid.query("crawl", "SELECT type, url, position, field FROM item_issue WHERE kind = 'missing'")
    assert {(t, u[len(base):], p, f) for t, u, p, f in misses} == shop.misses
    assert grid.query("crawl", "SELECT COUNT(*) FROM item_issue WHERE kind = 'error'") == [(0,)]

    # the plugin's threads (product pages) ran on the executor with the plugin and nowhere else
    ran = grid.query("manager", "SELECT t.needs, e.name FROM thread t JOIN executor e ON e.executor_id = t.executor_id "
                                "WHERE t.state = 4")
    assert {name for needs, name in ran if needs} == {"plugged"}
    assert sum(1 for needs, _ in ran if needs) == len(shop.product_paths)
    assert {name for needs, name in ran if not needs} >= {"plain"}

    # the client's summary names the misses per field
    log = grid.log("client.log")
    assert "gridcrawl: items" in log and "never matched" not in log

    # gridcrawl report --crawl-db: the same figures
    report = gridcrawl("report", "--crawl-db", grid.crawl_db)
    assert report.returncode == 0, report.stderr
    products = {t for t in truth if t[0] == "product"}
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in report.stdout.splitlines() if line.startswith("│")]
    assert ["product", "", str(len(products)), "", "", ""] in cells
    # product's name: every stored item has one, and the nameless pages are its misses
    assert ["", "name", "", str(len(products)), str(len(shop.misses)), ""] in cells
    # and the crawl's own counts, as the database has them; no recrawl run, so no recrawl table
    ((documents, visited, sitemaps),) = grid.query("crawl", "SELECT (SELECT count(*) FROM document), "
                                                  "(SELECT count(*) FROM visited_url), (SELECT count(*) FROM sitemap)")
    assert sitemaps == 1  # the host's /sitemap.xml, a 404
    assert ["documents stored", f"{documents:,}"] in cells
    assert ["URLs visited", f"{visited:,} (1 sitemap URL: no document)"] in cells
    assert "recrawls" not in report.stdout

    # export --items: every item, CSV with one column per field
    out = tmp_path / "product.csv"
    done = gridcrawl("export", "--db", grid.crawl_db, "--items", "--type", "product", "--format", "csv", str(out))
    assert done.returncode == 0, done.stderr
    with open(out, newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(products)
    assert set(table[0]) == {"type", "url", "position", "extracted_at", "sku", "name", "price", "added", "tags"}
    assert {(r["sku"], float(r["price"])) for r in table} == \
        {(json.loads(f)["sku"], json.loads(f)["price"]) for _, _, _, f in products}

    # re-extraction from the stored pages, nothing fetched: the same items
    fetched = server.per_path_counts()
    again = gridcrawl("extract", "--db", grid.crawl_db, "--extract", str(spec), "--no-progress", env=env)
    assert again.returncode == 0, again.stderr
    assert server.per_path_counts() == fetched
    assert stored(grid.query("crawl", "SELECT type, url, position, fields FROM item"), base) == truth
    assert f"{len(truth)} items from" in again.stderr


def test_a_plugin_that_ends_its_process_is_named_by_the_page_it_was_on(tmp_path, site_server):
    """A plugin calling os._exit on one page (as a crash in a native library would) ends every
    executor the page is tried on, and gridcrawl run stopped with "every executor exited during
    the crawl; see executor-*.log" — logs that say nothing of it. The line names the pages the
    executors had then, the one that ends them among them."""
    from sites import Site
    site = Site()
    site.pages["/"] = b"<html><body><a href='/die.html'>die</a></body></html>"
    site.pages["/die.html"] = b"<html><body><p>the end</p></body></html>"
    server = site_server(site)
    spec = tmp_path / "die.toml"
    spec.write_text(f'[[item]]\ntype = "shout"\nurl = "/die"\nplugin = "{PLUGIN_NAME}"\n')
    proc = gridcrawl("run", server.url("/"), "--extract", str(spec), "--executors", "2", "--threads", "1",
                     "--no-sitemaps", "--workdir", str(tmp_path / "w"), "--no-progress",
                     env=plugin_env(tmp_path / "meta"))
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: every executor exited during the crawl; see {tmp_path / 'w'}/executor-*.log; "
                           f"the 1 page they had then: {server.url('/die.html')} (a page that ends its executor"), last
    assert "Traceback" not in proc.stderr
