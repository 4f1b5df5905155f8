"""Concurrent writers on one database: claimers get disjoint URLs, racing inserts of one URL leave
one row, and two clients applying the same page store it once — on SQLite, PostgreSQL and
MariaDB (each writer with its own engine, as separate programs would have; servers on
127.0.0.1, skipped when none answers).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
import sqlalchemy as sa

from gridcrawl import models
from gridcrawl.client.store import CrawlStore, Outcome, Scope
from gridcrawl.db import CrawlerLock, init_schema, insert_ignore, insert_ignore_savepoints, open_database, run_transaction
from gridcrawl.protocol import PageResult
from gridcrawl.urls import canonical_url, fingerprint
from grid import wait_for

CLAIMERS = 8
URLS = [f"http://127.0.0.1:9/p/{i}" for i in range(400)]


def run_all(target, count: int, timeout: float = 60) -> list[BaseException]:
    """Run ``target(i)`` in ``count`` threads; return the exceptions they raised."""
    errors: list[BaseException] = []

    def wrapped(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)
    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a writer hung"
    return errors


def test_concurrent_claimers_get_disjoint_urls_covering_all(db_url):
    seeder = CrawlStore(open_database(db_url))
    assert seeder.add_seeds(URLS) == len(URLS)
    claimed: list[list[int]] = [[] for _ in range(CLAIMERS)]
    start = threading.Barrier(CLAIMERS)

    def claimer(i: int) -> None:
        store = CrawlStore(open_database(db_url))  # its own engine and connections
        start.wait(30)
        try:
            while batch := store.claim(7):
                claimed[i].extend(p.thread_id for p in batch)
        finally:
            store.engine.dispose()
    assert run_all(claimer, CLAIMERS) == []
    everything = [tid for ids in claimed for tid in ids]
    twice = [tid for tid, n in Counter(everything).items() if n > 1]
    assert twice == [], f"URLs handed to two claimers: {twice[:10]}"
    with seeder.engine.connect() as conn:
        all_ids = set(conn.execute(sa.select(models.to_visit_url.c.id)).scalars())
        unclaimed = conn.execute(sa.select(sa.func.count()).select_from(models.to_visit_url)
                                 .where(models.to_visit_url.c.in_flight == sa.false())).scalar()
    assert set(everything) == all_ids and unclaimed == 0
    seeder.engine.dispose()


def url_row(url: str = "http://127.0.0.1:9/same") -> dict:
    canonical = canonical_url(url)
    return {"url": canonical, "fingerprint": fingerprint(canonical), "depth": 0, "priority": 5,
            "discovered_from": None, "in_flight": False}


@pytest.mark.parametrize("how", ["dialect", "savepoints"])
def test_racing_inserts_of_one_url_leave_one_row(db_url, how):
    """The second writer inserts while the first one's row is not yet committed (it waits for
    the first, then finds the row there). ``savepoints`` is SQL Server's way, run here on the
    back ends that can run."""
    if how == "savepoints" and db_url.startswith("mysql"):
        pytest.skip("MariaDB always takes INSERT IGNORE")
    insert = insert_ignore if how == "dialect" else insert_ignore_savepoints
    engines = [open_database(db_url) for _ in range(2)]
    init_schema(engines[0], models.crawl_metadata, models.crawl_meta)
    first_inserted = threading.Event()

    def writer(i: int) -> None:
        if i == 1:
            assert first_inserted.wait(30)
        with engines[i].begin() as conn:
            insert(conn, models.to_visit_url, [url_row()])
            if i == 0:
                first_inserted.set()
                time.sleep(0.3)  # keep the row uncommitted while the other writer inserts it
    assert run_all(writer, 2) == []
    with engines[0].connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(models.to_visit_url)).scalar() == 1
    for engine in engines:
        engine.dispose()


def test_many_writers_insert_overlapping_batches(db_url):
    """8 writers insert overlapping batches (in different orders) at once: every URL once, and
    no deadlock escapes (rows are inserted in key order)."""
    engines = [open_database(db_url) for _ in range(CLAIMERS)]
    init_schema(engines[0], models.crawl_metadata, models.crawl_meta)
    rows = [url_row(u) for u in URLS[:120]]
    start = threading.Barrier(CLAIMERS)

    def writer(i: int) -> None:
        mine = rows[i * 10:i * 10 + 60]
        mine = mine[::-1] if i % 2 else mine
        start.wait(30)
        with engines[i].begin() as conn:
            insert_ignore(conn, models.to_visit_url, mine)
    assert run_all(writer, CLAIMERS) == []
    with engines[0].connect() as conn:
        fps = list(conn.execute(sa.select(models.to_visit_url.c.fingerprint)).scalars())
    assert sorted(fps) == sorted({r["fingerprint"] for r in rows[:130]})
    for engine in engines:
        engine.dispose()


def test_two_clients_applying_one_page_store_it_once(db_url):
    """Two clients that both fetched the same URL (overlapping seeds) apply it at once: one
    document, one visit, its links queued once."""
    stores = [CrawlStore(open_database(db_url)) for _ in range(2)]
    stores[0].add_seeds(["http://127.0.0.1:9/"])
    (pending,) = stores[0].claim(1)
    links = [[f"http://127.0.0.1:9/l/{i}", ""] for i in range(30)]
    page = PageResult(url=pending.url, final_url=pending.url, status=200, content_type="text/html", size=10,
                      title="root", encoding="utf-8", content="<html>é</html>", links=links)
    scope = Scope(["127.0.0.1"], -1)
    start = threading.Barrier(2)

    def client(i: int) -> None:
        start.wait(30)
        stores[i].apply([Outcome(pending, page, f"e{i}", 1, False)], scope)
    assert run_all(client, 2) == []
    counts = stores[0].counts()
    assert (counts["documents"], counts["visited"], counts["to_visit"]) == (1, 1, 30)
    for store in stores:
        store.engine.dispose()


def test_a_deadlock_victim_is_run_again(db_url):
    """Two transactions update two rows in opposite orders: the server kills one as a deadlock
    victim, and run_transaction runs it again, so both succeed."""
    if db_url.startswith("sqlite"):
        pytest.skip("SQLite writers queue at BEGIN IMMEDIATE: they cannot deadlock")
    engines = [open_database(db_url) for _ in range(2)]
    meta = models.crawl_meta
    init_schema(engines[0], models.crawl_metadata, meta)
    with engines[0].begin() as conn:
        conn.execute(meta.insert(), [{"name": "a", "value": "0"}, {"name": "b", "value": "0"}])
    both_hold_one = threading.Barrier(2)
    attempts = [0, 0]

    def writer(i: int) -> None:
        first, second = ("a", "b") if i == 0 else ("b", "a")

        def work(conn) -> None:
            attempts[i] += 1
            conn.execute(meta.update().where(meta.c.name == first).values(value=f"w{i}"))
            if attempts[i] == 1:
                both_hold_one.wait(30)
            conn.execute(meta.update().where(meta.c.name == second).values(value=f"w{i}"))
        run_transaction(engines[i], work)
    assert run_all(writer, 2) == []
    assert sorted(attempts) == [1, 2]
    with engines[0].connect() as conn:
        values = set(conn.execute(sa.select(meta.c.value).where(meta.c.name.in_(["a", "b"]))).scalars())
    assert len(values) == 1  # one writer's transaction was last, whole
    for engine in engines:
        engine.dispose()


def test_a_new_sqlite_file_gets_16_kb_pages_and_an_existing_one_keeps_its_own(tmp_path):
    """New SQLite databases take :data:`gridcrawl.db.SQLITE_PAGE_SIZE` (page bodies of tens of KB
    make a quarter of the page writes); a file made before keeps its page size and its rows."""
    import sqlite3

    from gridcrawl.db import SQLITE_PAGE_SIZE

    new = open_database(f"sqlite:///{tmp_path}/new.db")
    init_schema(new, models.crawl_metadata, models.crawl_meta)
    with new.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA page_size").scalar() == SQLITE_PAGE_SIZE == 16384
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    new.dispose()
    old_path = tmp_path / "old.db"
    with sqlite3.connect(old_path) as raw:  # a database from an earlier gridcrawl: 4 KB pages, WAL
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute("CREATE TABLE kept (x TEXT)")
        raw.execute("INSERT INTO kept VALUES ('row')")
    raw.close()
    old = open_database(f"sqlite:///{old_path}")
    with old.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA page_size").scalar() == 4096
        assert conn.exec_driver_sql("SELECT x FROM kept").scalar() == "row"
    old.dispose()


def _client(db: str, seed: str, connect_timeout: float) -> subprocess.Popen:
    """A real ``gridcrawl-client`` on crawl database ``db`` whose manager never answers: it holds
    the crawl database's crawler lock while it waits ``connect_timeout`` seconds for one."""
    return subprocess.Popen([sys.executable, "-m", "gridcrawl.client", "--manager", "tcp://127.0.0.1:9",
                             "--db", db, "--no-progress", "--connect-timeout", str(connect_timeout), seed],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _queued(db: str) -> list[str] | None:
    """The URLs queued in crawl database ``db``; None while it has no crawl tables."""
    engine = open_database(db)
    try:
        with engine.connect() as conn:
            return sorted(conn.execute(sa.select(models.to_visit_url.c.url)).scalars())
    except sa.exc.DBAPIError:
        return None
    finally:
        engine.dispose()


def test_a_second_crawler_on_one_crawl_database_is_refused_until_the_first_ends(db_url):
    """One crawler at a time on a crawl database, on every back end: a second is refused with one
    line naming the first, and queues nothing (before, on PostgreSQL and MariaDB its start handed
    the first's URLs in flight back to the frontier, and both fetched them); once the first is
    killed with ``kill -9`` the server has let its lock go and the next one crawls."""
    first = _client(db_url, "http://127.0.0.1:9/first", 120)
    try:
        wait_for(lambda: _queued(db_url) == ["http://127.0.0.1:9/first"], 60, message="the first client's seed")
        second = _client(db_url, "http://127.0.0.1:9/second", 0.3)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 2, err
        assert re.fullmatch(rf"error: another crawler is crawling into \S+ \(gridcrawl-client, pid {first.pid}"
                            rf"(, | on \S+, )since "
                            r"[\d: -]+\): two on one crawl database fetch the same URLs twice; wait for it to end, "
                            r"or give another --db\n", err), err
        assert _queued(db_url) == ["http://127.0.0.1:9/first"]
        assert first.poll() is None
    finally:
        first.kill()
        first.communicate()
    third = _client(db_url, "http://127.0.0.1:9/third", 0.3)
    _, err = third.communicate(timeout=60)
    assert "another crawler" not in err
    assert "no answer from the manager" in err
    assert _queued(db_url) == ["http://127.0.0.1:9/first", "http://127.0.0.1:9/third"]


@pytest.mark.parametrize("server", ["postgresql", "mariadb"])
def test_a_crawler_lock_let_go_is_free_for_another_at_once(request, server):
    """close() handed the lock's connection back to its engine's pool, where the session, and
    the lock with it, lived on: another crawler (another engine) was refused until the first
    engine was disposed. The connection is closed for good now."""
    url = request.getfixturevalue({"postgresql": "postgres_url", "mariadb": "mariadb_url"}[server])
    engine, other_engine = open_database(url), open_database(url)
    first, other = CrawlerLock(engine), CrawlerLock(other_engine)
    try:
        assert first.take() and not other.take()
        first.close()
        assert other.take()
        assert not CrawlerLock(engine).take()  # the first engine's pool holds no stale lock either way
    finally:
        first.close()
        other.close()
        engine.dispose()
        other_engine.dispose()


def _end_the_locks_connection(lock: CrawlerLock, other_engine, server: str) -> None:
    """End the server session of the connection holding ``lock`` from ``other_engine`` (as a
    server restart, a network cut or MariaDB's ``wait_timeout`` does), and wait until ``lock``
    is taken again on a new connection."""
    lost = lock._conn
    session = lost.execute(sa.text("SELECT pg_backend_pid()" if server == "postgresql"
                                   else "SELECT CONNECTION_ID()")).scalar()
    lost.commit()
    with other_engine.connect() as conn:
        conn.execute(sa.text("SELECT pg_terminate_backend(:s)" if server == "postgresql" else f"KILL {int(session)}"),
                     {"s": session})
        conn.commit()
    wait_for(lambda: lock._conn is not None and lock._conn is not lost, 30,
             message="the lock taken again on a new connection")


@pytest.mark.parametrize("server", ["postgresql", "mariadb"])
def test_the_crawler_lock_is_taken_again_when_its_connection_is_lost(request, server):
    """The connection holding a crawler's lock on a server is ended (a server restart, a network
    cut, MariaDB's ``wait_timeout``): within its keeping interval the crawler takes the lock again
    on a new connection, so a second crawler is still refused."""
    url = request.getfixturevalue({"postgresql": "postgres_url", "mariadb": "mariadb_url"}[server])
    engine, other_engine = open_database(url), open_database(url)
    held, other = CrawlerLock(engine), CrawlerLock(other_engine)
    held.KEEP_SECONDS = 0.2
    try:
        assert held.take()
        assert not other.take()
        _end_the_locks_connection(held, other_engine, server)
        assert not other.take()
    finally:
        held.close()
        other.close()
        engine.dispose()
        other_engine.dispose()
    assert other.take()
    other.close()


@pytest.mark.parametrize("server", ["postgresql", "mariadb"])
def test_a_crawler_lock_names_its_holder_only_while_the_holder_holds_it(request, server):
    """The holder row (``crawl_meta``'s ``crawler``) was written by the crawl's store after the
    lock was taken, and never cleared: a crawler refused in between, or one refused while the
    holder had been killed and another had just taken the lock, was told the crawler before it
    was crawling. The row is written by the lock's own connection now, with its session, and
    :func:`running_crawler` believes it only while that session holds the lock: the first
    holder, no one once it let go, "a crawler starting" for a holder that has not named itself
    (its row still the first's), and a holder whose connection was lost named again once it
    took the lock back on a new one."""
    from gridcrawl.db import running_crawler
    url = request.getfixturevalue({"postgresql": "postgres_url", "mariadb": "mariadb_url"}[server])
    engine, other_engine = open_database(url), open_database(url)
    CrawlStore(engine)  # the crawl's tables, crawl_meta among them
    first_line, third_line = "gridcrawl run, pid 1 on a, since then", "gridcrawl-client, pid 2 on b, since now"
    first, second = CrawlerLock(engine, first_line), CrawlerLock(other_engine)
    third = CrawlerLock(other_engine, third_line)
    third.KEEP_SECONDS = 0.2
    try:
        assert first.take()
        assert running_crawler(other_engine) == first_line
        first.close()
        assert running_crawler(other_engine) is None
        assert second.take()  # as a crawler of an older gridcrawl, or one between its lock and its row
        assert running_crawler(engine) == "a crawler starting"
        second.close()
        assert third.take()
        assert running_crawler(engine) == third_line
        _end_the_locks_connection(third, engine, server)
        assert running_crawler(engine) == third_line
    finally:
        for lock in (first, second, third):
            lock.close()
        engine.dispose()
        other_engine.dispose()


def test_a_crawler_lock_another_crawler_took_while_its_connection_was_lost_is_lost(postgres_url):
    """A network cut ends the connection holding the lock, and a second crawler takes the lock
    before the first can take it again: the first's lock is :attr:`~CrawlerLock.lost` (its client
    stops its crawl: both would fetch the same URLs), not an ERROR line while both go on."""
    engine, other_engine = open_database(postgres_url), open_database(postgres_url)
    held, other = CrawlerLock(engine), CrawlerLock(other_engine)
    held.KEEP_SECONDS = 0.5
    try:
        assert held.take()
        with held._guard:  # the cut, and the second crawler's start, between two checks
            session = held._conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
            held._conn.commit()
            with other_engine.connect() as conn:
                conn.execute(sa.text("SELECT pg_terminate_backend(:s)"), {"s": session})
                conn.commit()
            wait_for(lambda: other.take(), 10, message="the second crawler taking the freed lock")
        wait_for(held.lost.is_set, 30, message="the first crawler's lock lost")
    finally:
        held.close()
        other.close()
        engine.dispose()
        other_engine.dispose()
