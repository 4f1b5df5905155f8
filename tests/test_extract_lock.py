"""``gridcrawl extract`` and the crawler lock, with real processes: an extract on a crawl
database a crawl is crawling into is refused, and a crawl started while an extract runs is
refused (the extract holds the crawl database's crawler lock, as a crawler does)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from dbfixtures import paused_extract, stored_crawl
from grid import Grid, wait_for
from sites import generate_site

pytestmark = pytest.mark.e2e

CRAWL_SPEC = '[[item]]\ntype = "page"\n[item.fields]\ntitle = { css = "title::text" }\n'
NEW_SPEC = '[[item]]\ntype = "headline"\n[item.fields]\ntitle = { css = "title::text", required = true }\n'
REFUSED = (r"error: a crawl is still running on this database \((gridcrawl-client, pid \d+[^)]*)\): gridcrawl "
           r"extract replaces the "
           r"crawl's items and item spec, which would then mix with the items the crawl goes on storing; run it "
           r"once the crawl has ended \(or stop it: Ctrl-C\)\n")


def _items(grid: Grid) -> int:
    try:
        return grid.query("crawl", "SELECT count(*) FROM item")[0][0]
    except Exception:  # no table yet: the client is starting
        return 0


def _writing(engine, url: str, pid: int) -> bool:
    """Whether the extract of process ``pid`` is writing the items: its crawler lock's holder
    row (``crawl_meta``'s ``crawler``, naming ``pid``) is committed, and another connection of
    this test's PostgreSQL database (``url``'s ``application_name``) is in a transaction that
    has written (the extract's, once it has deleted the items it replaces). The holder row
    comes first: the transaction that writes it also has written, and an extract paused in it
    holds the lock with no holder recorded yet (a crawl then is refused as by an unnamed
    crawler, which a fresh clone's CI run once caught). The holder as
    :func:`gridcrawl.db.running_crawler` reads it."""
    import sqlalchemy as sa
    from gridcrawl.db import running_crawler
    if f"pid {pid} " not in (running_crawler(engine) or ""):
        return False
    with engine.connect() as conn:
        return bool(conn.execute(sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = :tag AND backend_xid IS NOT NULL "
            "AND pid <> pg_backend_pid()"), {"tag": sa.engine.make_url(url).query["application_name"]}).scalar())


def _extract(db: str, spec) -> list[str]:
    return [sys.executable, "-m", "gridcrawl", "extract", "--db", db, "--extract", str(spec), "--no-progress"]


def test_an_extract_on_a_crawl_still_running_is_refused_and_writes_nothing(db_url, tmp_path, site_server):
    """A real crawl (manager, executor, client with ``--extract``) is crawling into the crawl
    database: ``gridcrawl extract`` with another spec is refused in one line, exit 2, naming
    the crawler, as a second crawler is; the crawl's spec stays stored and no item of the new
    spec is written; the crawl goes on to its end."""
    site = generate_site(60, links_per_page=4, seed=45)
    server = site_server(site, latency=0.1)
    (tmp_path / "crawl.toml").write_text(CRAWL_SPEC)
    (tmp_path / "new.toml").write_text(NEW_SPEC)
    grid = Grid(tmp_path, crawl_db=db_url)
    try:
        grid.start_manager()
        grid.start_executor("ex", "--threads", "2")
        client = grid.start_client(server.url("/"), "--extract", str(tmp_path / "crawl.toml"))
        wait_for(lambda: _items(grid) >= 3, 60, 0.05, "3 items stored")
        done = subprocess.run(_extract(grid.crawl_db, tmp_path / "new.toml"), capture_output=True, text=True,
                              timeout=60)
        running = client.poll() is None
        server.latency = 0.01  # the extract has come and gone: the rest of the crawl need not be slow
        status = client.wait(timeout=120)
    finally:
        grid.stop()
    assert running, "the crawl ended before the extract ran"
    assert done.returncode == 2 and re.fullmatch(REFUSED, done.stderr), done.stderr
    assert grid.query("crawl", "SELECT source FROM item_spec") == [(str(tmp_path / "crawl.toml"),)]
    assert grid.query("crawl", "SELECT count(*) FROM item WHERE type = 'headline'") == [(0,)]
    assert status == 0, grid.log("client.log")[-3000:]


def test_a_crawl_started_while_an_extract_runs_is_refused_at_once(postgres_url, tmp_path):
    """``gridcrawl extract`` checked that no crawl was running but took no lock: a crawl started
    while it ran (a cron job resuming it) crawled alongside, storing items by its own spec while
    the extract replaced them and the spec (on SQLite it waited, silently, for as long as the
    extract held the database: 100 s for an extract paused 100 s). The extract holds the crawler
    lock now: the crawl, started while the extract is paused (SIGSTOP) mid-run, is refused at
    once, exit 2, naming the extract's process, and writes nothing; the extract then ends with
    every page's items."""
    store = stored_crawl(postgres_url, 300)
    (tmp_path / "new.toml").write_text(NEW_SPEC)
    extract = paused_extract(postgres_url, tmp_path / "new.toml",
                             lambda pid: _writing(store.engine, postgres_url, pid))
    try:
        crawl = subprocess.run([sys.executable, "-m", "gridcrawl.client", "--manager", "tcp://127.0.0.1:1", "--db",
                                postgres_url, "--no-progress", "http://127.0.0.1:1/new.html"],
                               capture_output=True, text=True, timeout=60)
        os.kill(extract.pid, signal.SIGCONT)
        assert extract.wait(timeout=120) == 0, extract.stderr.read()
    finally:
        extract.kill()
        extract.wait()
    assert crawl.returncode == 2, crawl.stderr
    assert re.fullmatch(rf"error: gridcrawl extract is extracting the items of \S+ again \(gridcrawl extract, pid "
                        rf"{extract.pid} on [^)]+\): a crawl now would mix the items it stores with the extract's; "
                        r"wait for it to end, or give another --db\n", crawl.stderr), crawl.stderr
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM to_visit_url").scalar() == 0  # the seed not queued
        assert conn.exec_driver_sql("SELECT count(*) FROM item WHERE type = 'headline'").scalar() == 300
