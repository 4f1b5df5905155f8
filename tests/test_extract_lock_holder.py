"""The crawler lock's holder names what it is, with real processes: a crawl, an export or a
second extract meeting ``gridcrawl extract`` says it met an extract (it said "another crawler
is crawling into ..."), and on SQLite a crawl started while an extract writes the items is
refused at once, where it waited silently in its first transaction for as long as the extract
held the database (``gridcrawl-client`` and ``gridcrawl run``)."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys

import pytest

from gridcrawl.db import running_crawler
from dbfixtures import paused_extract, stored_crawl
from grid import run_at_once

pytestmark = pytest.mark.e2e

NEW_SPEC = '[[item]]\ntype = "headline"\n[item.fields]\ntitle = { css = "title::text", required = true }\n'
PAGES = 400
SINCE = r"since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def _sqlite_writing(path: str) -> bool:
    """Whether another connection holds the SQLite file's write lock (the extract, writing items)."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()


def _run(*argv: str) -> subprocess.CompletedProcess:
    return _run_at_once(argv)[0]


def _run_at_once(*commands: tuple[str, ...]) -> list[subprocess.CompletedProcess]:
    """``python -m`` each of ``commands`` (argument tuples), all started at once and waited for
    (60 s at most each): their exit statuses and output, in the order given."""
    return run_at_once(*([sys.executable, "-m", *argv] for argv in commands))


def test_a_crawl_started_while_an_extract_writes_an_sqlite_database_is_refused_at_once(tmp_path):
    """An extract of a crawl database (SQLite) paused while it holds the database's write lock,
    mid-run: ``gridcrawl-client`` and ``gridcrawl run`` on it waited silently in their first
    transaction (20 s and more, for as long as the extract was paused). Each is refused now,
    exit 2, one line naming the extract by its holder line (``gridcrawl extract, pid N, since
    ...``), ``gridcrawl run`` naming ``--workdir``; a second extract is refused as such; an
    export warns that its items are those from before the extract, and exports. The extract
    then ends with every page's items; the crawls queued nothing."""
    workdir = tmp_path / "crawl"
    workdir.mkdir()
    path = str(workdir / "crawl.db")
    db = f"sqlite:///{path}"
    store = stored_crawl(db, PAGES)
    (tmp_path / "new.toml").write_text(NEW_SPEC)
    extract = paused_extract(db, tmp_path / "new.toml", 
                               lambda pid: _sqlite_writing(path) and f"pid {pid}" in (running_crawler(store.engine) or ""))
    try:
        assert _sqlite_writing(path), "the extract was paused before it wrote"
        # the four at once: each meets the paused extract alone (only the export reads the database)
        client, run, second, export = _run_at_once(
            ("gridcrawl.client", "--manager", "tcp://127.0.0.1:1", "--db", db, "--no-progress",
             "http://127.0.0.1:1/new.html"),
            ("gridcrawl", "run", "--workdir", str(workdir), "--no-progress", "http://127.0.0.1:1/new.html"),
            ("gridcrawl", "extract", "--db", db, "--extract", str(tmp_path / "new.toml"), "--no-progress"),
            ("gridcrawl", "export", "--db", db, "--items", str(tmp_path / "items.jsonl")))
        os.kill(extract.pid, signal.SIGCONT)
        assert extract.wait(timeout=120) == 0, extract.stderr.read()
    finally:
        extract.kill()
        extract.wait()
    holder = rf"gridcrawl extract, pid {extract.pid}, {SINCE}"
    for done, option in ((client, "--db"), (run, "--workdir")):
        assert done.returncode == 2, done.stderr
        assert re.fullmatch(rf"error: gridcrawl extract is extracting the items of {re.escape(path)} again "
                            rf"\({holder}\): a crawl now would mix the items it stores with the extract's; wait for "
                            rf"it to end, or give another {option}\n", done.stderr), done.stderr
    assert second.returncode == 2 and re.fullmatch(
        rf"error: another gridcrawl extract is running on this database \({holder}\): run this one once it has "
        r"ended \(the last to end leaves its items and item spec\)\n", second.stderr), second.stderr
    assert export.returncode == 0, export.stderr
    assert re.match(rf"warning: gridcrawl extract is extracting this database's items again \({holder}\): the "
                    r"export holds the items from before it\n", export.stderr), export.stderr
    assert not (workdir / "manager.db").exists()  # refused before gridcrawl run started its grid
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM to_visit_url").scalar() == 0  # no seed queued
        assert conn.exec_driver_sql("SELECT count(*) FROM item WHERE type = 'headline'").scalar() == PAGES
    assert running_crawler(store.engine) is None


def test_the_holder_of_a_crawl_database_names_the_extract_on_every_back_end(db_url, tmp_path):
    """On SQLite (the ``flock``'ed FILE.lock) and on PostgreSQL/MariaDB (the ``crawler`` meta
    row beside the server's lock) the extract writes itself down as ``gridcrawl extract, pid N``
    (``on HOST`` on a server): a crawl started while it runs (paused, SIGSTOP, holding the lock)
    says it met an extract, not "another crawler is crawling into"; ``running_crawler`` and so
    an export's warning name it."""
    store = stored_crawl(db_url, PAGES)
    (tmp_path / "new.toml").write_text(NEW_SPEC)
    extract = paused_extract(db_url, tmp_path / "new.toml", 
                               lambda pid: f"pid {pid}" in (running_crawler(store.engine) or ""))
    try:
        holder = running_crawler(store.engine)
        client, export = _run_at_once(("gridcrawl.client", "--manager", "tcp://127.0.0.1:1", "--db", db_url,
                                       "--no-progress", "http://127.0.0.1:1/new.html"),
                                      ("gridcrawl", "export", "--db", db_url, str(tmp_path / "pages.jsonl")))
        os.kill(extract.pid, signal.SIGCONT)
        assert extract.wait(timeout=120) == 0, extract.stderr.read()
    finally:
        extract.kill()
        extract.wait()
    where = "" if db_url.startswith("sqlite") else r" on \S+"
    assert re.fullmatch(rf"gridcrawl extract, pid {extract.pid}{where}, {SINCE}", holder or ""), holder
    assert client.returncode == 2 and re.fullmatch(
        rf"error: gridcrawl extract is extracting the items of \S+ again \({re.escape(holder)}\): a crawl now would "
        r"mix the items it stores with the extract's; wait for it to end, or give another --db\n", client.stderr), \
        client.stderr
    assert export.returncode == 0 and export.stderr.startswith(
        f"warning: gridcrawl extract is extracting this database's items again ({holder}): "), export.stderr
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM to_visit_url").scalar() == 0
    assert running_crawler(store.engine) is None


def test_an_extract_of_a_database_that_holds_no_crawl_leaves_no_lock_file(tmp_path):
    """The extract takes the crawler lock before it opens an SQLite database, so ``FILE.lock``
    is made before it knows what ``FILE`` holds: an extract given a database that holds no
    crawl is refused, exit 2, and leaves no ``FILE.lock`` beside it."""
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    (tmp_path / "new.toml").write_text(NEW_SPEC)
    done = _run("gridcrawl", "extract", "--db", f"sqlite:///{path}", "--extract", str(tmp_path / "new.toml"),
                "--no-progress")
    assert done.returncode == 2 and "holds no crawl" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.toml", "other.db"]
