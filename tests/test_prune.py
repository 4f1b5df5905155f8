"""``gridcrawl db prune``: the manager's records of crawls long over are deleted, the rest kept.

The records are written as a manager writes them: a real :class:`ManagerCore` makes the events
and the real :class:`Recorder` writes them to a real database (SQLite, PostgreSQL, MariaDB).
"""

from __future__ import annotations

import datetime as dt
import itertools
import subprocess
import sys
import time

import sqlalchemy as sa

from gridcrawl import models, protocol as p
from gridcrawl.db import init_schema, open_database
from gridcrawl.manager.core import ManagerCore, Send
from gridcrawl.manager.recorder import Recorder
from gridcrawl.prune import prune_records
from gridcrawl.settings import Settings

DAY = 86400.0


class Manager:
    """A manager core whose every event goes to the real recorder of ``engine``."""

    def __init__(self, engine) -> None:
        ids = (f"id{i}" for i in itertools.count(1))
        self.core = ManagerCore(Settings(prefetch=0), new_id=lambda: next(ids))
        self.recorder = Recorder(engine, 60.0)

    def handle(self, peer: bytes, message, now: float) -> list:
        actions = self.core.handle(peer, message, now)
        self.recorder.add_all([a for a in actions if not isinstance(a, Send)])
        self.recorder.flush()
        return [a.message for a in actions if isinstance(a, Send)]

    def crawl(self, user: str, urls: list[str], executor: bytes, now: float, close: bool) -> str:
        """Open an application, run ``urls`` on ``executor`` to the end, and close it if ``close``."""
        (opened,) = [m for m in self.handle(user.encode(), p.OpenApplication("crawl", user), now)
                     if isinstance(m, p.ApplicationOpened)]
        app = opened.application_id
        messages = self.handle(user.encode(), p.Submit(app, [p.ThreadSpec(i, url) for i, url in enumerate(urls)]),
                               now)
        jobs = [job for m in messages if isinstance(m, p.Assign) for job in m.jobs]
        while jobs:
            job = jobs.pop()
            messages = self.handle(executor, p.Result(job.attempt_id, p.PageResult(url=job.url, status=200)), now)
            jobs += [job for m in messages if isinstance(m, p.Assign) for job in m.jobs]
        if close:  # its client stored every result first, as gridcrawl's does
            self.handle(user.encode(), p.Ack(app, list(range(len(urls)))), now)
            self.handle(user.encode(), p.CloseApplication(app), now)
        return app


def counts(engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t.name: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar()
                for t in (models.application, models.thread, models.attempt, models.executor)}


def test_prune_deletes_the_records_of_crawls_long_over_and_keeps_the_rest(db_url):
    """A manager's records grew for ever (about 600 bytes a grid thread): a crawl that ended
    ten days ago and the executor that ran it, gone since, are deleted with their threads and
    attempts; a crawl still running, one that ended yesterday and a connected executor stay. A
    dry run counts exactly what the run then deletes. The manager still remembers the old crawl:
    its client coming back reopens it, and its row is written again for its new threads."""
    engine = open_database(db_url)
    init_schema(engine, models.manager_metadata, models.manager_meta)
    grid = Manager(engine)
    now = time.time()
    old, recent = now - 10 * DAY, now - 1 * DAY
    grid.handle(b"ex-old", p.Register(name="old", host="h", user="u", threads=2), old)
    ended = grid.crawl("ann", [f"http://a.test/{i}" for i in range(5)], b"ex-old", old, close=True)
    grid.handle(b"ex-old", p.Bye(), old)
    grid.handle(b"ex-new", p.Register(name="new", host="h", user="u", threads=2), recent)
    yesterday = grid.crawl("bob", ["http://b.test/1", "http://b.test/2"], b"ex-new", recent, close=True)
    running = grid.crawl("cat", ["http://c.test/1"], b"ex-new", recent, close=False)
    assert counts(engine) == {"application": 3, "thread": 8, "attempt": 8, "executor": 2}

    before = dt.datetime.fromtimestamp(now - 5 * DAY, dt.timezone.utc).replace(tzinfo=None)
    dry = prune_records(engine, before, dry_run=True)
    assert counts(engine)["thread"] == 8  # a dry run deletes nothing
    done = prune_records(engine, before)
    assert (dry.applications, dry.threads, dry.attempts, dry.executors) == (1, 5, 5, 1)
    assert done == dry
    assert counts(engine) == {"application": 2, "thread": 3, "attempt": 3, "executor": 1}
    with engine.connect() as conn:
        assert set(conn.execute(sa.select(models.application.c.application_id)).scalars()) == {yesterday, running}
        assert list(conn.execute(sa.select(models.executor.c.name)).scalars()) == ["new"]
    assert prune_records(engine, before) == type(done)()  # a second run finds nothing more

    # the ended crawl's client comes back: the manager reopens it, and its row is written again
    opened = grid.handle(b"ann2", p.OpenApplication("crawl", "ann", application_id=ended), now)
    assert any(isinstance(m, p.ApplicationOpened) and m.application_id == ended for m in opened), opened
    grid.handle(b"ann2", p.Submit(ended, [p.ThreadSpec(99, "http://a.test/99")]), now)
    with engine.connect() as conn:
        row = conn.execute(models.application.select().where(
            models.application.c.application_id == ended)).mappings().one()
        assert row["usr_name"] == "ann" and row["time_completed"] is None
        assert conn.execute(sa.select(models.thread.c.thread_id).where(
            models.thread.c.application_id == ended)).scalars().all() == [99]


def gridcrawl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gridcrawl", *args], capture_output=True, text=True, timeout=60)


def test_db_prune_command_counts_what_it_deletes_and_refuses_what_it_cannot_do(tmp_path):
    """The command: what it deleted in one line, with a dry run first; a negative age, a crawl
    database (no manager records) and a missing file are refused in one line, exit 2."""
    url = f"sqlite:///{tmp_path / 'manager.db'}"
    engine = open_database(url)
    init_schema(engine, models.manager_metadata, models.manager_meta)
    grid = Manager(engine)
    grid.handle(b"ex", p.Register(name="ex", host="h", user="u", threads=2), time.time() - 3 * DAY)
    grid.crawl("ann", ["http://a.test/1", "http://a.test/2"], b"ex", time.time() - 3 * DAY, close=True)
    grid.handle(b"ex", p.Bye(), time.time() - 3 * DAY)
    engine.dispose()

    dry = gridcrawl("db", "prune", "--db", url, "--older-than", "2", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would delete 1 application, 2 grid threads, 2 attempts and 1 executor that ended "
                                 "before ")
    kept = gridcrawl("db", "prune", "--db", url, "--older-than", "4")
    assert kept.returncode == 0 and kept.stdout.startswith("deleted 0 applications, 0 grid threads"), kept.stdout
    done = gridcrawl("db", "prune", "--db", url, "--older-than", "2")
    assert done.returncode == 0 and done.stdout.startswith("deleted 1 application, 2 grid threads"), done.stdout
    assert "VACUUM" in done.stdout  # the file keeps its size: said, with how to give it back
    assert counts(open_database(url)) == {"application": 0, "thread": 0, "attempt": 0, "executor": 0}
    report = gridcrawl("report", "--db", url)  # an empty table, and notes on its columns, said nothing of why
    assert report.returncode == 0 and "applications: none recorded here (none has been opened yet, or gridcrawl db " \
        "prune deleted those that ended)" in " ".join(report.stdout.split()), report.stdout
    assert "application_summary" not in report.stdout

    crawl_db = tmp_path / "crawl.db"
    init_schema(open_database(f"sqlite:///{crawl_db}"), models.crawl_metadata, models.crawl_meta)
    for args, said in [(["--db", url, "--older-than", "-1"], "--older-than must be a number of days"),
                       # further back than the calendar's year 1: an OverflowError's traceback
                       (["--db", url, "--older-than", "1e12"], "--older-than must be a number of days, 0 or more "
                                                               "(at most "),
                       (["--db", url, "--older-than", "1000000"], "back to the year 1; got 1e+06)"),
                       (["--db", str(crawl_db), "--older-than", "1"], "holds no manager records"),
                       (["--db", str(tmp_path / "nothing.db"), "--older-than", "1"], "no database file")]:
        refused = gridcrawl("db", "prune", *args)
        assert refused.returncode == 2 and said in refused.stderr and "Traceback" not in refused.stderr, refused
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
