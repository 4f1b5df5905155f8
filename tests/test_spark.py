"""The crawl on Apache Spark (``gridcrawl spark``, issue 18) in Spark's local mode, against real
sites on 127.0.0.1, 127.0.0.2 and 127.0.0.3 (one host each) and real SQLite crawl databases.

* A multi-host site crawled on Spark stores exactly the reachable pages, once, identical (URLs,
  fingerprints, bodies, link counts) to what ``gridcrawl run`` stores for the same site.
* Politeness per host (``download_delay``) holds, within a layer and across layers, by the
  servers' own arrival times.
* A task failing mid-layer (a test hook fails its first attempt) is retried by Spark, and
  nothing is stored twice.
* The download stage waits out a host's delay left over from the previous layer.
* Several Python workers write one PostgreSQL crawl database (skipped without the server).
* A ``gridcrawl spark`` killed mid-layer is resumed on Spark (with ``--max-pages``) and the
  crawl is finished on the grid (``gridcrawl run``) over the same tables.

One SparkContext (``local[2]``: two cores, four attempts per task) serves every test here; it
and every ``gridcrawl spark`` the tests run take Spark's defaults from ``tests/data/spark-conf``
(``SPARK_CONF_DIR``: JVM options for short runs on a busy machine).
The whole module is skipped, with one reason, when pyspark or Java is missing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from gridcrawl.spark import spark_unavailable

REASON = spark_unavailable()
if REASON:
    pytest.skip(f"Spark crawl tests need pyspark and Java: {REASON}", allow_module_level=True)

from gridcrawl.cli import _private_networks  # noqa: E402
from gridcrawl.client.cli import open_crawl  # noqa: E402
from gridcrawl.executor.parse import parse_page  # noqa: E402
from gridcrawl.settings import Settings  # noqa: E402
from gridcrawl.spark import SparkCrawl, host_partition, local_master, spark_context, stop_spark  # noqa: E402
from sites import Site, SiteServer, generate_site, login_page, reachable, redirect, slow_page  # noqa: E402

pytestmark = pytest.mark.e2e
ROBOTS = "/robots.txt"


#: Spark's defaults for this module's JVMs (``spark-defaults.conf``: JVM options that start and run
#: a short-lived driver faster on a busy machine; see the file).
SPARK_CONF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "spark-conf")


@pytest.fixture(scope="module", autouse=True)
def spark_conf_dir():
    """``SPARK_CONF_DIR`` is :data:`SPARK_CONF` while this module runs: for the module's
    SparkContext and every ``gridcrawl spark`` its tests start (a test giving its own wins)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARK_CONF_DIR", SPARK_CONF)
        yield SPARK_CONF


@pytest.fixture(scope="module")
def sc(spark_conf_dir):
    """The module's one SparkContext (local mode, 2 cores)."""
    context = spark_context("local[2]")
    yield context
    stop_spark(context)


@pytest.fixture
def three_hosts():
    """Three generated sites on 127.0.0.1, .2 and .3, their roots linked to each other; yields
    the servers and the set of reachable URLs."""
    with _three_hosts() as hosts:
        yield hosts


@contextlib.contextmanager
def _three_hosts():
    """Three generated sites on 127.0.0.1, .2 and .3, their roots linked to each other (the
    first's links 24 pages, two of them unreachable; the second's 12 pages; the third's 10):
    the servers and the set of reachable URLs while the block runs."""
    sites = [generate_site(24, links_per_page=4, seed=18, unreachable=2),
             generate_site(12, links_per_page=3, seed=19),
             generate_site(10, links_per_page=3, seed=20)]
    servers = [SiteServer(site, host=f"127.0.0.{i + 1}").start() for i, site in enumerate(sites)]
    try:
        a, b, c = servers
        _add_links(sites[0], "/", [b.url("/"), c.url("/")])
        _add_links(sites[1], "/", [a.url("/p/3.html"), c.url("/")])
        expected = {srv.url(path) for srv, site in zip(servers, sites) for path in reachable(site)}
        yield servers, expected
    finally:
        for srv in servers:
            srv.stop()


def _add_links(site, path: str, urls: list[str]) -> None:
    extra = "".join(f'<a href="{u}">elsewhere</a>' for u in urls).encode()
    site.pages[path] = site.pages[path].replace(b"</body>", extra + b"</body>")


def _crawl(sc, db: str, seeds: list[str], allow: list[str], **settings) -> object:
    """A Spark crawl through the API (open_crawl + SparkCrawl), as ``gridcrawl spark`` runs it."""
    hook = settings.pop("fail_first_attempt_on", None)
    extract = settings.pop("extract", None)
    s = Settings(**{"spark_partitions": 2, **settings}).validate()
    store, scope = open_crawl(s, db, seeds, allow, extract=extract)
    private = _private_networks([*seeds, *scope.allowed_domains], [])
    try:
        return SparkCrawl(sc, store, db, s, scope, allow_private=private, fail_first_attempt_on=hook).run()
    finally:
        if store.lock is not None:  # the crawler's end, as the command's exit
            store.lock.close()


def _documents(path) -> dict[str, tuple]:
    """url -> (fingerprint, status, size, title, sha-256 of the content, links parsed from it)."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT url, fingerprint, status, size, title, content, final_url, content_type "
                            "FROM document").fetchall()
    out = {}
    for url, fp, status, size, title, content, final_url, ctype in rows:
        links = len(parse_page(content.encode(), final_url, ctype).links) if content else 0
        out[url] = (fp, status, size, title, hashlib.sha256((content or "").encode()).hexdigest(), links)
    return out


def _one(path, sql: str):
    # closed here: sqlite3's context manager only commits, and this polls every 50 ms (the
    # connections left to the collector held 1,300 files of the test process, and tests/netcut.py's
    # select() failed in the next test file)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchone()[0]


def _held(site: Site, path: str, release) -> None:
    """Make ``site``'s page ``path`` answer only once ``release`` (a threading.Event) is set (15
    minutes at most): a layer fetching it is running until the test lets it go."""
    body = site.pages.pop(path)

    def handle(h) -> None:
        release.wait(900)
        h.respond(200, body)
    site.extra[path] = handle


def _pages(srv: SiteServer) -> dict[str, int]:
    return {p: n for p, n in srv.per_path_counts().items() if p != ROBOTS}


def test_host_partition_is_stable_and_local_masters_retry():
    # CRC-32 (zlib), not Python's per-process hash: equal in every worker and on every machine
    import zlib
    assert host_partition("docs.example") == zlib.crc32(b"docs.example")
    assert local_master("local[*]") == "local[*,4]" and local_master("local") == "local[1,4]"
    assert local_master("local[2,1]") == "local[2,1]" and local_master("spark://h:7077") == "spark://h:7077"


def test_download_stage_waits_out_the_previous_layers_delay(tmp_path):
    """The download stage (run here without Spark, as a task runs it) starts a host's first
    fetch no sooner than the delay after the previous layer's last fetch of that host, and
    reports its own last fetch for the next layer."""
    import dataclasses
    from gridcrawl.spark import TaskConfig, download_partition
    srv = SiteServer(generate_site(3, links_per_page=2, seed=7)).start()
    try:
        db = f"sqlite:///{tmp_path / 'stage.db'}"
        s = Settings(download_delay=1.0).validate()
        store, scope = open_crawl(s, db, [srv.url("/")], [])
        pendings = store.claim(10)
        config = TaskConfig(db, s, scope, store.strategy, ["127.0.0.0/8"], token="stage")
        previous_mono, previous = time.monotonic(), time.time()
        records = list(download_partition(config, {"127.0.0.1": (previous, None)}, 0,
                                          [("127.0.0.1", dataclasses.astuple(p)) for p in pendings]))
        first = min(r.started for r in srv.requests if r.path != ROBOTS)
        assert first - previous_mono >= 1.0 - 0.02
        kinds = [r[0] for r in records]
        assert kinds.count("v") == 1 and kinds[-1] == "s" and kinds.count("l") == len(srv.site.links["/"])
        figures = records[-1][1]
        assert figures["pages"] == 1 and figures["hosts"]["127.0.0.1"][0] > previous
        assert _one(tmp_path / "stage.db", "SELECT COUNT(*) FROM document") == 1  # written by the task
        assert _one(tmp_path / "stage.db", "SELECT COUNT(*) FROM visited_url") == 0  # the commit stage's
    finally:
        srv.stop()


def test_a_task_fetches_through_the_proxy_with_the_netrc_logins(tmp_path):
    """The download stage (without Spark, as a task runs it) builds its fetcher as an executor
    does: a site whose name only the proxy resolves, behind a login, is fetched through the proxy
    with the netrc file's credentials."""
    import dataclasses
    from gridcrawl.spark import TaskConfig, download_partition
    from proxy import ForwardProxy
    seen: list = []
    site = Site(extra={"/": login_page(b"<html><body>behind a login</body></html>", "crawler", "s3cret", seen)})
    with SiteServer(site) as srv, ForwardProxy(hosts={"wiki.intranet.invalid": "127.0.0.1"}) as proxy:
        (tmp_path / "netrc").write_text("machine wiki.intranet.invalid login crawler password s3cret\n")
        (tmp_path / "netrc").chmod(0o600)
        seed = f"http://wiki.intranet.invalid:{srv.port}/"
        s = Settings(proxy=proxy.url, netrc=str(tmp_path / "netrc"), obey_robots=False).validate()
        db = f"sqlite:///{tmp_path / 'stage.db'}"
        store, scope = open_crawl(s, db, [seed], [])
        config = TaskConfig(db, s, scope, store.strategy, [], token="proxy")
        records = list(download_partition(config, {}, 0, [("wiki.intranet.invalid", dataclasses.astuple(p))
                                                          for p in store.claim(10)]))
        figures = records[-1][1]
        assert figures["pages"] == 1 and figures["errors"] == 0, figures
        assert proxy.records == [("GET", seed)] and len(seen) == 1 and seen[0][1].startswith("Basic ")


def test_a_download_worker_that_breaks_fails_the_task_not_hangs_it(tmp_path, monkeypatch):
    """A bug in a download worker outside the page's visit (here the politeness queue's release
    raises, injected) used to end that thread silently and leave the task waiting for results
    forever; the task now fails with the worker's error."""
    import dataclasses
    import threading
    from gridcrawl.manager.queue import ReadyQueue
    from gridcrawl.spark import TaskConfig, download_partition
    srv = SiteServer(generate_site(3, links_per_page=2, seed=7)).start()
    try:
        db = f"sqlite:///{tmp_path / 'stage.db'}"
        s = Settings().validate()
        store, scope = open_crawl(s, db, [srv.url("/")], [])
        rows = [("127.0.0.1", dataclasses.astuple(p)) for p in store.claim(10)]
        config = TaskConfig(db, s, scope, store.strategy, ["127.0.0.0/8"], token="stage")

        def broken(self, thread, now, **kw):
            raise ValueError("injected")
        monkeypatch.setattr(ReadyQueue, "release", broken)
        raised: list[BaseException] = []
        escaped: list = []  # exceptions that ended a thread unhandled (printed to stderr, not raised)
        monkeypatch.setattr(threading, "excepthook", escaped.append)

        def run() -> None:
            try:
                list(download_partition(config, {}, 0, rows))
            except BaseException as exc:
                raised.append(exc)
        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        runner.join(60)
        assert not runner.is_alive(), "the task hung"
        assert len(raised) == 1 and "a download worker of partition 0 failed: ValueError('injected')" in str(raised[0])
        assert isinstance(raised[0].__cause__, ValueError)  # the worker's own error, chained
        assert escaped == []  # told once, by the task: no worker thread died with a traceback
    finally:
        srv.stop()


def test_spark_crawl_stores_what_the_grid_stores(sc, three_hosts, tmp_path):
    servers, expected = three_hosts
    seed = servers[0].url("/")
    allow = ["127.0.0.2", "127.0.0.3"]
    spark_db = tmp_path / "spark.db"
    spec = tmp_path / "items.toml"  # an item per page, extracted in the Spark tasks as on the executors
    spec.write_text('[[item]]\ntype = "page"\n[item.fields]\ntitle = { css = "title::text", required = true }\n')
    result = _crawl(sc, f"sqlite:///{spark_db}", [seed], allow, extract=str(spec))
    spark_requests = [_pages(srv) for srv in servers]

    for srv in servers:
        srv.reset()
    grid = subprocess.run([sys.executable, "-m", "gridcrawl", "run", seed, *(a for h in allow for a in ("--allow-domain", h)),
                           "--executors", "2", "--workdir", str(tmp_path / "grid"), "--no-progress",
                           "--extract", str(spec)], capture_output=True, text=True, timeout=120)
    assert grid.returncode == 0, grid.stderr[-2000:]

    spark_docs, grid_docs = _documents(spark_db), _documents(tmp_path / "grid" / "crawl.db")
    assert set(spark_docs) == expected, "the Spark crawl stored a page that is not reachable, or missed one"
    assert spark_docs == grid_docs  # same URLs, fingerprints, statuses, sizes, titles, bodies, link counts
    items = "SELECT type, url, position, fields FROM item ORDER BY url"
    with sqlite3.connect(spark_db) as a, sqlite3.connect(tmp_path / "grid" / "crawl.db") as b:
        spark_items, grid_items = a.execute(items).fetchall(), b.execute(items).fetchall()
    assert len(spark_items) == len(expected) and spark_items == grid_items
    assert result.pages == len(expected) == _one(spark_db, "SELECT COUNT(*) FROM visited_url")
    assert _one(spark_db, "SELECT COUNT(*) FROM to_visit_url") == 0
    assert len(result.layers) >= 4 and [f.depth for f in result.layers] == list(range(len(result.layers)))
    for srv, requests in zip(servers, spark_requests):  # every reachable page fetched exactly once
        assert set(requests.values()) == {1}, requests
    assert sum(len(r) for r in spark_requests) == len(expected)
    exported = subprocess.run([sys.executable, "-m", "gridcrawl", "export", "-", "--db", f"sqlite:///{spark_db}",
                               "--no-content"], capture_output=True, text=True, timeout=60)
    assert exported.returncode == 0 and len(exported.stdout.splitlines()) == len(expected)  # export works on it


def test_a_seed_redirect_brings_its_host_into_the_scope_as_on_the_grid(sc, tmp_path):
    """A seed on 127.0.0.4 answering 301 with a site on 127.0.0.1: the Spark crawl takes that
    host into the scope (in the task that fetched the seed, so its links are followed, and in
    the crawl database for the next layers and a resume), as the grid does."""
    site = generate_site(14, links_per_page=3, seed=23)
    door_site = Site()
    with SiteServer(site) as server:
        door_site.extra["/"] = redirect(server.url("/"), 301)
        with SiteServer(door_site, host="127.0.0.4") as door:
            db = f"sqlite:///{tmp_path / 'spark.db'}"
            s = Settings(spark_partitions=2).validate()
            store, scope = open_crawl(s, db, [door.url("/")], [])
            SparkCrawl(sc, store, db, s, scope, allow_private=["127.0.0.0/8"]).run()
    stored = set(_documents(tmp_path / "spark.db"))
    expected = {server.url(path) for path in reachable(site)} - {server.url("/")}  # "/" is the seed's page
    assert expected <= stored and door.url("/") in stored, sorted(expected - stored)
    assert "127.0.0.1" in _one(tmp_path / "spark.db", "SELECT value FROM crawl_meta WHERE name = 'allowed_domains'")


def test_politeness_per_host_across_layers(sc, tmp_path):
    """No two requests to a host closer than its delay, its robots.txt fetches (one per host
    per layer) included: a task fetched the page right after robots.txt (the executor's pacer
    was missing from Spark's tasks)."""
    delay = 0.1
    sites = [generate_site(8, links_per_page=3, seed=5), generate_site(8, links_per_page=3, seed=6)]
    servers = [SiteServer(site, host=f"127.0.0.{i + 1}").start() for i, site in enumerate(sites)]
    try:
        _add_links(sites[0], "/", [servers[1].url("/")])
        result = _crawl(sc, f"sqlite:///{tmp_path / 'polite.db'}", [servers[0].url("/")], ["127.0.0.2"],
                        download_delay=delay, concurrent_requests_per_host=8, threads=8)
        assert result.pages == 16
        for srv in servers:
            records = sorted(srv.requests, key=lambda r: r.started)
            assert len([r for r in records if r.path != ROBOTS]) == 8
            assert len(records) > 8  # robots.txt too
            gaps = [b.started - a.finished for a, b in zip(records, records[1:])]
            # Heritrix's rule: the next fetch starts no sooner than the delay after the previous ended
            assert min(gaps) >= delay - 0.01, gaps
            assert srv.max_concurrency() == 1
    finally:
        for srv in servers:
            srv.stop()


def test_a_host_without_a_delay_gets_its_concurrency_in_a_task(sc, tmp_path):
    """``concurrent_requests_per_host`` runs inside the task as on the grid: a host that has
    answered may have that many requests in flight (a task kept every host at one: its results
    never lifted the new-host rule)."""
    site = generate_site(24, links_per_page=23, seed=8)
    srv = SiteServer(site, latency=0.2).start()
    try:
        result = _crawl(sc, f"sqlite:///{tmp_path / 'wide.db'}", [srv.url("/")], [],
                        concurrent_requests_per_host=3, threads=8)
        assert result.pages == 24
        assert srv.max_concurrency() == 3
    finally:
        srv.stop()


def test_a_self_generating_family_is_a_trap_across_layers(sc, tmp_path):
    """The template-trap rule counts a family's near-identical pages over the whole crawl, as
    the grid's client does. A calendar whose every month links the next gives a layer one page:
    each layer's task (another Python process, or machine) started with no count, so the family
    ran to the hop limit (the adversarial site's calendar and endless list: 20 layers on Spark).
    The driver now hands each layer's tasks what the earlier layers learnt of their hosts."""
    from adversarial import _calendar, calendar_path
    site = Site()
    site.extra["/calendar"] = _calendar
    with SiteServer(site) as srv:
        db = tmp_path / "c.db"
        _crawl(sc, f"sqlite:///{db}", [srv.url(calendar_path(2024, 1))], [], trap_near_duplicates=1, max_depth=5)
    # a month or two as the shape's samples, then one near-duplicate found on the calendar: the
    # next month's link is a trap (without the driver's state: six months, depth 0 to 5)
    months = _one(db, "SELECT COUNT(*) FROM visited_url WHERE url LIKE '%calendar%' AND status = 200")
    assert months <= 4, months
    assert _one(db, "SELECT COUNT(*) FROM visited_url WHERE error_kind = 'trap'") == 1
    assert _one(db, "SELECT COUNT(*) FROM to_visit_url") == 0


def test_failed_task_is_retried_without_duplicates(sc, tmp_path):
    site = generate_site(14, links_per_page=3, seed=21)
    srv = SiteServer(site).start()
    try:
        expected = {srv.url(path) for path in reachable(site)}
        db = tmp_path / "retry.db"
        hooked = srv.url("/p/9.html")
        # the first attempt of the task owning the host fails mid-layer, right after writing /p/9.html
        result = _crawl(sc, f"sqlite:///{db}", [srv.url("/")], [], apply_batch=1, threads=2,
                        spark_layer_urls=6, fail_first_attempt_on=hooked)
        assert set(_documents(db)) == expected  # the layer finished: Spark ran the failed task again
        depths = [f.depth for f in result.layers]
        assert max(f.urls for f in result.layers) <= 6 and len(depths) > len(set(depths)) and depths == sorted(depths)
        assert _one(db, "SELECT COUNT(*) FROM document") == len(expected)  # written twice, stored once
        assert _one(db, "SELECT COUNT(*) FROM visited_url") == len(expected) == result.pages
        assert _one(db, "SELECT attempts FROM visited_url WHERE url = '%s'" % hooked) == 1
        assert _pages(srv)["/p/9.html"] == 2  # fetched and written by the failed attempt, then by the retry
    finally:
        srv.stop()


def test_killed_spark_crawl_resumes_and_the_grid_finishes_it(sc, held_runs):
    run = held_runs["resumed"]  # the third host's root held: its second layer runs until the kill
    expected, proc = run.expected, run.proc
    work = run.folder / "work"
    db_path = work / "crawl.db"
    db = f"sqlite:///{db_path}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            try:  # mid-layer: documents written by the tasks, their visited rows not yet committed
                if _one(db_path, "SELECT COUNT(*) FROM document") > _one(db_path, "SELECT COUNT(*) FROM visited_url") + 2:
                    break
            except sqlite3.Error:
                pass
            time.sleep(0.05)
        assert proc.poll() is None, run.log.read_text()[-2000:]
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        run.release.set()
    before = _one(db_path, "SELECT COUNT(*) FROM document")
    assert 0 < before < len(expected)
    assert _one(db_path, "SELECT COUNT(*) FROM to_visit_url WHERE in_flight") > 0  # the layer it was running

    visited = _one(db_path, "SELECT COUNT(*) FROM visited_url")
    # resume on Spark: no seeds, the stored scope; --max-pages bounds the whole crawl
    resumed = _crawl(sc, db, [], [], max_pages=visited + 10)
    assert resumed.pages == 10
    assert _crawl(sc, db, [], [], max_pages=visited + 10).pages == 0  # reached: it stops where it stands
    grid = subprocess.run([sys.executable, "-m", "gridcrawl", "run", "--executors", "2", "--workdir", str(work),
                           "--no-progress"], capture_output=True, text=True, timeout=120)
    assert grid.returncode == 0, grid.stderr[-2000:]

    docs = _documents(db_path)
    assert set(docs) == expected
    for table in ("document", "visited_url"):
        assert _one(db_path, f"SELECT COUNT(*) FROM {table}") == len(expected), table
    assert _one(db_path, "SELECT COUNT(*) FROM to_visit_url") == 0


@pytest.mark.postgres
def test_spark_crawl_into_postgresql(sc, postgres_url):
    """The database a cluster needs: tasks in several Python workers write one PostgreSQL
    crawl database at once; every reachable page is stored once."""
    import sqlalchemy as sa
    site = generate_site(20, links_per_page=4, seed=22, unreachable=2)
    srv = SiteServer(site).start()
    try:
        result = _crawl(sc, postgres_url, [srv.url("/")], [], apply_batch=3)
        engine = sa.create_engine(postgres_url)
        with engine.connect() as conn:
            urls = conn.execute(sa.text("SELECT url FROM document")).scalars().all()
            visited = conn.execute(sa.text("SELECT COUNT(*) FROM visited_url")).scalar()
            left = conn.execute(sa.text("SELECT COUNT(*) FROM to_visit_url")).scalar()
        engine.dispose()
        assert sorted(urls) == sorted(srv.url(p) for p in reachable(site))
        assert visited == result.pages == len(urls) and left == 0
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def held_runs(tmp_path_factory, spark_conf_dir):
    """The ``gridcrawl spark`` runs that the Ctrl-C and kill -9 tests signal, started before the
    module's other runs (:func:`spark_runs`) and with them: each crawls a site of its own (two
    layers and more), whose second layer holds one page until the test lets it go (``release``),
    so that a run is in that layer, as long as it takes, when its test has seen the first layer's
    line. Yields ``{name: namespace(proc, folder, log, release, args, env)}``:

    * ``ctrl_c``: 8 pages on one local core (``/`` links /p/1, /p/3 and /p/7; they link the
      rest), /p/1 held; standard output to ``log``, standard error to ``folder/spark.err``;
    * ``killed``: 3 pages (``/`` links /p/1 and /p/2), /p/1 held, on one local core with one
      thread, its temporary folder ``folder/tmp`` (``TMPDIR``) and its results applied one at a
      time; standard output and error to ``log``; ``args`` run again (no seed) with ``env`` resume it;
    * ``resumed``: the three hosts of :func:`_three_hosts` (``servers``, ``expected``: the reachable
      URLs) from the first's root, on two cores, two partitions and two threads a task, each
      result applied at once, the third host's root (a link of the seed's) held; standard output and error to ``log``,
      its database ``folder/work/crawl.db``.

    Their fetches wait 15 minutes at most (``download_timeout``, ``fetch_read_timeout``): a held
    page waits while the module's other runs and tests go on."""
    import threading
    import types
    held, servers = {}, []
    timeouts = {"GRIDCRAWL_DOWNLOAD_TIMEOUT": "900", "GRIDCRAWL_FETCH_READ_TIMEOUT": "900"}
    stack = contextlib.ExitStack()
    try:
        for name, site in (("ctrl_c", generate_site(8, links_per_page=3, seed=21)),
                           ("killed", generate_site(3, links_per_page=2, seed=24))):
            folder = tmp_path_factory.mktemp(name)
            release = threading.Event()
            _held(site, "/p/1.html", release)
            srv = SiteServer(site).start()
            servers.append(srv)
            args = [sys.executable, "-m", "gridcrawl", "spark", "--db", f"sqlite:///{folder / 'c.db'}",
                    "--master", "local[1]", "--partitions", "1"]
            # the held fetch waits as long as its test needs (not the default 30 s, read or in all)
            env = {**os.environ, **timeouts}
            if name == "killed":
                (folder / "tmp").mkdir()
                args += ["--threads", "1"]
                env.update(TMPDIR=str(folder / "tmp"), GRIDCRAWL_APPLY_BATCH="1")
                env.pop("SPARK_LOCAL_DIRS", None)
            log = folder / "spark.log"
            with open(log, "wb") as out, open(folder / "spark.err", "wb") as err:
                proc = subprocess.Popen([*args, srv.url("/")], stdout=out,
                                        stderr=subprocess.STDOUT if name == "killed" else err,
                                        start_new_session=True, env=env)
            held[name] = types.SimpleNamespace(proc=proc, folder=folder, log=log, release=release, args=args, env=env)
        # the three hosts crawled on two cores, two threads a task, each result applied at once
        folder = tmp_path_factory.mktemp("resumed")
        (folder / "work").mkdir()
        servers3, expected = stack.enter_context(_three_hosts())
        release = threading.Event()
        # the third host's root (a link of the seed's): a held first page would hold its host's
        # other pages too (one request to a host until it has answered), and no more would be written
        _held(servers3[2].site, "/", release)
        allow = ["127.0.0.2", "127.0.0.3"]
        args = [sys.executable, "-m", "gridcrawl", "spark", servers3[0].url("/"), "--db",
                f"sqlite:///{folder / 'work' / 'crawl.db'}", "--master", "local[2]", "--partitions", "2",
                "--threads", "2", *(a for h in allow for a in ("--allow-domain", h))]
        env = {**os.environ, "GRIDCRAWL_APPLY_BATCH": "1", **timeouts}
        with open(folder / "spark.log", "wb") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        held["resumed"] = types.SimpleNamespace(proc=proc, folder=folder, log=folder / "spark.log", release=release,
                                                args=args, env=env, servers=servers3, expected=expected)
        yield held
    finally:
        for run in held.values():
            run.release.set()
            if run.proc.poll() is None:
                os.killpg(run.proc.pid, signal.SIGKILL)
                run.proc.wait()
        for srv in servers:
            srv.stop()
        stack.close()


def _wait_for_line(run, line: bytes) -> None:
    """Wait (2 minutes at most) until ``run``'s log has ``line``, or the run has ended."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.proc.poll() is None and line not in run.log.read_bytes():
        time.sleep(0.05)


@pytest.fixture(scope="module")
def spark_runs(tmp_path_factory, spark_conf_dir, held_runs):
    """The ``gridcrawl spark`` runs whose summary, lines and exit status the tests below read,
    started at once and then waited for (each spends most of its time starting a JVM and its
    Python workers, one after the other; they need nothing of one another): each against servers
    of its own, into ``c.db`` of a folder of its own. Yields ``{name: (CompletedProcess, folder,
    seeds, requests its server had)}``:

    * ``summary``: a site of 6 pages (``/`` links the 5 others: two layers) crawled from its
      keep/follow rules (``rules.csv``: follow base and page links, keep the page links matching
      ``\\.pdf$``, none, and all) with an item spec (``--extract``: a page's title, and a byline
      no page has);
    * ``failed``: a seed whose server refuses connections and one robots.txt disallows;
    * ``disallowed``: only a seed robots.txt disallows;
    * ``capped``: a link maze with ``--max-pages-per-host 50`` on two cores and three partitions;
    * ``memory``: a driver given 40 MB (``spark.driver.memory`` with the module's defaults in a
      ``$SPARK_CONF_DIR`` of its own), which cannot start Spark.

    ``summary``, ``failed`` and ``disallowed`` run on one local core, the last two with no retries
    (Spark reads no sitemaps)."""
    from adversarial import maze_site
    from grid import free_port
    servers = {"summary": SiteServer(generate_site(6, links_per_page=5, seed=22)), "failed": SiteServer(_robots_site()),
               "disallowed": SiteServer(_robots_site()), "capped": SiteServer(maze_site())}
    for srv in servers.values():
        srv.start()
    one_core = ["--master", "local[1]", "--partitions", "1"]
    no_retries = {**os.environ, "GRIDCRAWL_RETRY_TIMES": "0"}
    folders = {name: tmp_path_factory.mktemp(name) for name in ("summary", "failed", "disallowed", "capped", "memory")}
    home = servers["summary"].url("/")
    (folders["summary"] / "items.toml").write_text(
        '[[item]]\ntype = "page"\n[item.fields]\ntitle = { css = "title::text", required = true }\n'
        'byline = { css = "span.no-such-class::text" }\n', encoding="utf-8")
    (folders["summary"] / "rules.csv").write_text("base_url,rule_type,from_type,to_type,pattern\n"
                                                  f"{home},follow,base,page,all\n{home},follow,page,page,all\n"
                                                  f"{home},keep,page,,\\.pdf$\n{home},keep,page,,all\n", encoding="utf-8")
    conf = folders["memory"] / "conf"
    conf.mkdir()
    defaults = open(os.path.join(SPARK_CONF, "spark-defaults.conf"), encoding="utf-8").read()
    (conf / "spark-defaults.conf").write_text(defaults + "spark.driver.memory 40m\n")
    runs = {  # name: (seeds, options, environment)
        "summary": ([], ["--rules", str(folders["summary"] / "rules.csv"), "--extract",
                         str(folders["summary"] / "items.toml"), *one_core], None),
        "failed": ([f"http://127.0.0.1:{free_port()}/", servers["failed"].url("/private/a")], one_core, no_retries),
        "disallowed": ([servers["disallowed"].url("/private/a")], one_core, no_retries),
        "capped": ([servers["capped"].url("/")], ["--master", "local[2]", "--partitions", "3",
                                                  "--max-pages-per-host", "50"], None),
        "memory": (["http://127.0.0.1:9/"], ["--master", "local[1]"], {**os.environ, "SPARK_CONF_DIR": str(conf)}),
    }
    procs = {}
    try:
        for name, (seeds, options, env) in runs.items():
            folder = folders[name]
            with open(folder / "out", "wb") as out, open(folder / "err", "wb") as err:
                procs[name] = subprocess.Popen([sys.executable, "-m", "gridcrawl", "spark", *seeds, "--db",
                                                f"sqlite:///{folder / 'c.db'}", *options], stdout=out, stderr=err,
                                               env=env, start_new_session=True)
        done = {}
        for name, proc in procs.items():
            proc.wait(timeout=300)
            folder, seeds = folders[name], runs[name][0]
            result = subprocess.CompletedProcess(proc.args, proc.returncode, (folder / "out").read_text(),
                                                 (folder / "err").read_text())
            done[name] = (result, folder, seeds, list(servers[name].requests) if name in servers else [])
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for srv in servers.values():
            srv.stop()
    yield done


def test_spark_command_exits_1_when_every_page_failed(spark_runs):
    """``gridcrawl spark`` as a process: a seed whose server refuses connections is recorded as
    a failed page, the summary says so, and the exit status is 1 (as ``gridcrawl run``'s). A
    second seed robots.txt disallows is counted apart, not as an error, and the line names both
    (it exited 0 with such a seed: the disallowed page was counted as neither failed nor
    fetched); no "no page was fetched" line, as a page failed."""
    proc, folder, (seed, _), _ = spark_runs["failed"]
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    assert ("error: every page of this run failed or was disallowed by robots.txt (2 pages: 1 failed, 1 disallowed; "
            "the crawl's errors by kind: connection 1)") in proc.stderr, proc.stderr[-2000:]
    assert "no page was fetched" not in proc.stdout
    assert "layer 1 (depth 0): 2 URLs, 2 pages, 1 error, 1 disallowed by robots.txt" in proc.stdout, proc.stdout
    assert ", 1 partition\n" in proc.stdout and "0 new links queued" in proc.stdout  # ("1 partitions" before)
    assert _one(folder / "c.db", f"SELECT error_kind FROM visited_url WHERE url = '{seed}'") == "connection"
    # where the errors are told by kind, and that command tells them
    command = re.search(r"errors by kind, one example each: (gridcrawl report --crawl-db \S+)", proc.stdout).group(1)
    report = subprocess.run([sys.executable, "-m", *command.split()], capture_output=True,
                            text=True, timeout=60)
    flat = re.sub(r"[\s│]+", "", report.stdout)  # the table's cells fold long reasons over lines
    assert report.returncode == 0 and "connectionrefused" in flat and seed in flat, report.stdout


def _robots_site() -> Site:
    """A site whose robots.txt disallows ``/private/`` (a page there, and a home page)."""
    site = Site()
    site.pages["/"] = b"<html><head><title>home</title></head><body><a href='/private/a'>a</a></body></html>"
    site.pages["/private/a"] = b"<html><head><title>a</title></head><body>private</body></html>"
    site.pages["/robots.txt"] = b"User-agent: *\nDisallow: /private/\n"
    site.types["/robots.txt"] = "text/plain"
    return site


def test_spark_says_robots_txt_disallowed_every_seed_and_exits_0_as_gridcrawl_run(spark_runs):
    """A Spark crawl whose only seed robots.txt disallows: nothing failed (exit 0), and one
    line says so and gives the command that fetches it (gridcrawl run's line, naming gridcrawl
    spark's own --ignore-robots); it said only "1 disallowed by robots.txt" in its tables line."""
    proc, _, (seed,), requests = spark_runs["disallowed"]
    asked = [r.path for r in requests]
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert asked == ["/robots.txt"]
    assert "layer 1 (depth 0): 1 URL, 1 page, 0 errors, 1 disallowed by robots.txt, " in proc.stdout, proc.stdout
    lines = [line for line in proc.stdout.splitlines() if line.startswith("no page was fetched")]
    assert len(lines) == 1, proc.stdout
    assert lines[0].startswith(f"no page was fetched: the site's robots.txt disallows the seed {seed}, and the crawl "
                               "obeys it (not an error); where the site's owner agrees, --ignore-robots fetches it "
                               "regardless: gridcrawl spark "), lines[0]
    assert lines[0].endswith(" --ignore-robots --retry-failed robots"), lines[0]
    assert "every page of this run failed" not in proc.stderr


def test_spark_command_says_how_many_links_the_per_host_cap_left_out(spark_runs):
    """``gridcrawl spark`` on a link maze (endless distinct pages, eight links each) with
    ``--max-pages-per-host 50``: the crawl ends at exactly 50 URLs, however many tasks and
    worker processes queue a layer's links (each site's new links go to one task, counting from
    the tables), and each layer and the summary say how many links the cap left out and which
    option moves it, as ``gridcrawl run`` does."""
    proc, folder, _, _ = spark_runs["capped"]
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert _one(folder / "c.db", "SELECT COUNT(*) FROM visited_url") == 50  # 1 + 8 + 41
    assert _one(folder / "c.db", "SELECT COUNT(*) FROM to_visit_url") == 0
    layers = re.findall(r"(\d+) new links? queued \(and (\d+) more left out: over the per-host cap\)", proc.stdout)
    over = [int(n) for _, n in layers]
    summary = re.search(r"^(\d+) links were not queued: their hosts had 50 URLs queued or visited", proc.stdout, re.M)
    assert over and summary and int(summary.group(1)) == sum(over) > 0, proc.stdout
    # the layers' queued links are those the crawl went on to visit: 8 + 41 after the seed
    assert sum(int(n) for n, _ in layers) + sum(int(n) for n in re.findall(
        r"(\d+) new links? queued \|", proc.stdout)) == 49, proc.stdout
    assert "a site that large takes a new --db and a larger cap" in proc.stdout


def test_spark_refuses_a_database_with_queued_recrawl_visits(tmp_path):
    """A recrawl's visits (conditional requests, versions) belong to the grid: gridcrawl spark
    stops before starting Spark, with one line, and fetches nothing."""
    from gridcrawl import models
    from gridcrawl.client.store import CrawlStore
    from gridcrawl.db import open_database, utcnow
    from gridcrawl.urls import canonical_url, fingerprint
    db = tmp_path / "crawl.db"
    store = CrawlStore(open_database(f"sqlite:///{db}"))
    url = canonical_url("http://127.0.0.1:9/a.html")
    with store.engine.begin() as conn:
        conn.execute(models.document.insert().values(url=url, fingerprint=fingerprint(url), final_url=url, size=0,
                                                     depth=0, fetched_at=utcnow(), fetch_seconds=0, parse_seconds=0))
        conn.execute(models.visited_url.insert().values(url=url, fingerprint=fingerprint(url), depth=0,
                                                        status=200, visited_at=utcnow()))
        conn.execute(models.to_visit_url.insert().values(url=url, fingerprint=fingerprint(url), depth=0, priority=5,
                                                         in_flight=False))
    assert store.queued_revisits() == 1
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "spark", "http://127.0.0.1:9/", "--db", f"sqlite:///{db}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "recrawl visits are queued" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    with sqlite3.connect(db) as conn:  # the queued visit waits for the grid; nothing was fetched
        assert conn.execute("SELECT COUNT(*) FROM to_visit_url WHERE fingerprint = ?",
                            (fingerprint(url),)).fetchone()[0] == 1
        assert conn.execute("SELECT COUNT(*) FROM visited_url").fetchone()[0] == 1


def test_a_java_that_cannot_start_spark_is_one_line_not_a_traceback(tmp_path):
    """A Java that answers ``-version`` but cannot run Spark (or a --master Spark cannot use)
    ended in a boxed traceback, exit 1."""
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text('#!/bin/sh\necho \'openjdk version "11.0.2"\' >&2\n')
    java.chmod(0o755)
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "spark", "http://127.0.0.1:9/", "--db",
                           f"sqlite:///{tmp_path}/c.db", "--master", "local[1]"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "JAVA_HOME": str(tmp_path / "jdk")})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error: Spark did not start (--master local[1]): " in done.stderr and "Traceback" not in done.stderr


def test_a_java_home_without_java_is_named_not_said_to_be_unset(tmp_path):
    """A JAVA_HOME that has no bin/java (a JDK removed, a typo) was reported as "java not on
    PATH, JAVA_HOME unset", with java on PATH and JAVA_HOME set: the line names the folder."""
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "spark", "http://127.0.0.1:9/", "--db",
                           f"sqlite:///{tmp_path}/c.db", "--master", "local[1]"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "JAVA_HOME": str(tmp_path / "no-jdk")})
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"error: JAVA_HOME={tmp_path / 'no-jdk'} has no bin/java" in done.stderr, done.stderr
    assert "JAVA_HOME unset" not in done.stderr and "Traceback" not in done.stderr


def test_a_finished_crawl_is_told_so_without_starting_spark(tmp_path):
    """A crawl database with nothing left to visit, or at its --max-pages: one line saying so,
    exit 0, and no JVM started (a JAVA_HOME without java would otherwise be the error)."""
    from gridcrawl import models
    from gridcrawl.client.store import CrawlStore
    from gridcrawl.db import open_database, utcnow
    from gridcrawl.urls import canonical_url, fingerprint
    db = tmp_path / "crawl.db"
    store = CrawlStore(open_database(f"sqlite:///{db}"))
    seed, other = canonical_url("http://127.0.0.1:9/"), canonical_url("http://127.0.0.1:9/b.html")
    with store.engine.begin() as conn:
        conn.execute(models.visited_url.insert().values(url=seed, fingerprint=fingerprint(seed), depth=0,
                                                        status=200, visited_at=utcnow()))
    args = [sys.executable, "-m", "gridcrawl", "spark", seed, "--db", f"sqlite:///{db}"]
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-jdk")}
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("nothing left to visit: the crawl is finished (1 visited")
    assert "Spark not started" in done.stdout and "JAVA_HOME" not in done.stderr
    with store.engine.begin() as conn:  # one URL left, but the whole crawl's --max-pages is reached
        conn.execute(models.to_visit_url.insert().values(url=other, fingerprint=fingerprint(other), depth=1,
                                                         priority=5, in_flight=False))
    done = subprocess.run([*args, "--max-pages", "1"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and "stopped at --max-pages 1" in done.stdout, done.stdout + done.stderr
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)  # without it: Spark is needed
    assert done.returncode == 2 and "has no bin/java" in done.stderr, done.stderr[-2000:]


def test_ctrl_c_is_answered_at_once_and_the_layer_in_progress_is_committed(held_runs):
    """A Ctrl-C during a layer lets the layer finish and commit (a host's crawl delay can make
    that minutes): the command said nothing until then. Now a line on standard error answers the
    Ctrl-C, the run still ends by SIGINT once the layer is committed, and the summary says that
    the same command resumes."""
    run = held_runs["ctrl_c"]  # its layer 2 runs until the Ctrl-C is sent (a crawl delay, as it were)
    proc = run.proc
    try:
        _wait_for_line(run, b"layer 1 (")
        assert proc.poll() is None, run.log.read_text() + (run.folder / "spark.err").read_text()[-2000:]
        os.kill(proc.pid, signal.SIGINT)  # the driver, as the terminal's Ctrl-C
        run.release.set()  # the layer in progress ends
        assert proc.wait(timeout=120) == -signal.SIGINT
    finally:
        run.release.set()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    stderr, stdout = (run.folder / "spark.err").read_text(), run.log.read_text()
    assert "Ctrl-C: stopping once the layer in progress is fetched and committed" in stderr, stderr[-2000:]
    assert "Traceback" not in stderr
    assert "layer 2 (" in stdout and "layer 3 (" not in stdout, stdout  # the layer in progress was the last
    assert "left to visit: the same command resumes the crawl" in stdout, stdout
    assert _one(run.folder / "c.db", "SELECT COUNT(*) FROM to_visit_url WHERE in_flight") == 0


def test_spark_summary_lists_the_items_per_field_as_gridcrawl_run_does(spark_runs):
    """``gridcrawl spark --extract``: the summary ends with the items section of ``gridcrawl
    run``'s (items per type, per field with a value, a field that never matched flagged as a
    broken selector). Spark's summary had none: a spec whose selector matched nothing went
    unnoticed until the item table was read."""
    proc, folder, _, _ = spark_runs["summary"]  # its spec (--extract): a page's title, and a byline never there
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    items = _one(folder / "c.db", "SELECT COUNT(*) FROM item")
    assert items == 6
    flat = re.sub(r"[\s│┃]+", " ", proc.stderr)  # the summary's tables go where gridcrawl run's go
    assert "gridcrawl: items" in proc.stderr, proc.stdout + proc.stderr[-2000:]
    assert f" page {items} " in flat and f" title {items} 0 " in flat and " byline 0 0 never matched " in flat, flat


def test_spark_summary_counts_kept_links_and_names_the_rules_that_found_nothing(spark_runs):
    """``gridcrawl spark --rules``: the summary counts the kept links, and names a keep rule that
    kept nothing (its pattern matches no link) with the command that shows what the rules match,
    as ``gridcrawl run`` does; the rules that found something are not named."""
    proc, folder, _, _ = spark_runs["summary"]  # its rules: follow base and page links, keep page links
    rules = folder / "rules.csv"  # matching \\.pdf$ (none), keep every page link
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    kept = _one(folder / "c.db", "SELECT COUNT(*) FROM kept_link")
    assert kept > 0 and f", {kept:,} link{'s' if kept != 1 else ''} kept (kept_link)" in proc.stdout, proc.stdout
    assert re.search(r"^rule 3 \(rules.csv row 4: keep page\) found nothing: it kept no link from the \d+ 'page' "
                     rf"pages fetched .* --rules {re.escape(str(rules))} --page-type page$", proc.stdout, re.M), proc.stdout
    assert proc.stdout.count("found nothing") == 1, proc.stdout  # rules 1, 2 and 4 found links


def test_a_failed_job_is_told_by_its_python_error(sc):
    """A job whose task raised in its Python worker: what the driver says is the worker's own
    error, not py4j's first line ('An error occurred while calling
    z:org.apache.spark.api.python.PythonRDD.collectAndServe.'), which was all that gridcrawl
    spark's 'the Spark crawl stopped: ...' line said."""
    from gridcrawl.spark import spark_error
    with pytest.raises(Exception) as raised:
        sc.parallelize(["not a number"], 1).map(int).collect()  # a builtin: the workers need not import this file
    line = spark_error(raised.value)
    assert "ValueError: invalid literal for int() with base 10: 'not a number'" in line, line
    assert "PythonException" in line, line
    assert "An error occurred while calling" not in line and "\n" not in line


def test_too_little_driver_memory_is_told_by_spark_s_reason(spark_runs):
    """A driver given too little memory (spark.driver.memory in $SPARK_CONF_DIR's
    spark-defaults.conf) cannot start Spark: the line said only 'An error occurred while calling
    None.org.apache.spark.api.java.JavaSparkContext.'; it now gives Spark's reason."""
    done = spark_runs["memory"][0]  # the module's Spark defaults and spark.driver.memory 40m
    assert done.returncode == 2, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: Spark did not start (--master local[1]): SparkIllegalArgumentException: "
                           "[INVALID_DRIVER_MEMORY.SYSTEM_MEMORY] Insufficient driver memory"), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    # Spark's own log said the same before it, as a 20-line Java stack trace, after its banner
    # (its default log4j profile, "Setting default log level", WARN lines on native Hadoop), and
    # Java's own notice of the incubator module Spark loads
    for noise in ("\tat org.apache.spark", "Error initializing SparkContext", "log4j", "Setting default log level",
                  " WARN ", "incubator"):
        assert noise not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [line], done.stderr[-2000:]


def test_a_log_configuration_of_the_user_s_own_is_kept(tmp_path):
    """gridcrawl's quiet log configuration for Spark's JVM is set only where the user has none:
    a LOG4J_CONFIGURATION_FILE, or a log4j2 file in $SPARK_CONF_DIR (or $SPARK_HOME/conf), wins."""
    from gridcrawl.spark import SPARK_LOG_CONFIG, quiet_spark_log
    assert os.path.isfile(SPARK_LOG_CONFIG)
    environ = {"SPARK_CONF_DIR": str(tmp_path)}
    assert quiet_spark_log(environ) == SPARK_LOG_CONFIG and environ["LOG4J_CONFIGURATION_FILE"] == SPARK_LOG_CONFIG
    environ = {"LOG4J_CONFIGURATION_FILE": "/etc/mine.xml"}
    assert quiet_spark_log(environ) is None and environ["LOG4J_CONFIGURATION_FILE"] == "/etc/mine.xml"
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "log4j2.properties").write_text("rootLogger.level = info\n")
    for environ in ({"SPARK_CONF_DIR": str(tmp_path / "conf")}, {"SPARK_HOME": str(tmp_path)}):
        assert quiet_spark_log(environ) is None and "LOG4J_CONFIGURATION_FILE" not in environ


def test_a_run_killed_with_its_jvm_leaves_no_spark_files_after_the_next_run(held_runs):
    """``kill -9`` of a local-mode run's process group (driver, JVM, Python workers: the OOM
    killer, a service manager's stop) left Spark's block manager and shuffle folders
    (``blockmgr-*``, ``spark-*``) in /tmp for ever. They now go to a folder of the run in the
    temporary folder, ``gridcrawl-spark-PID-*``, that a run ending normally removes and the next
    run removes when its driver is gone."""
    run = held_runs["killed"]  # two layers: the seed, then its two links, one held until the kill
    tmp, db = run.folder / "tmp", run.folder / "c.db"
    try:
        _wait_for_line(run, b"layer 1 (")
        assert run.proc.poll() is None, run.log.read_text()[-2000:]
    finally:
        os.killpg(run.proc.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        run.proc.wait()
        run.release.set()
    left = [p.name for p in tmp.iterdir() if p.name.startswith("gridcrawl-spark-")]
    assert len(left) == 1, sorted(p.name for p in tmp.iterdir())
    assert any(p.name.startswith("blockmgr-") for p in (tmp / left[0]).iterdir())  # Spark's files were there
    # the next run: the second layer again, at once
    done = subprocess.run(run.args, capture_output=True, text=True, timeout=180, env=run.env)  # resumes
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert [p.name for p in tmp.iterdir() if p.name.startswith(("gridcrawl-spark-", "blockmgr-"))] == []
    assert _one(db, "SELECT COUNT(*) FROM to_visit_url") == 0


def test_a_running_driver_s_spark_folder_is_not_swept(tmp_path):
    """The sweep removes a run's folder only when no process holds its lock: a live driver's
    (here this process's) is kept, and removed once its lock is let go."""
    from gridcrawl.spark import LOCAL_DIR_LOCK, sweep_local_dirs
    import fcntl
    folder = tmp_path / f"gridcrawl-spark-{os.getpid()}-abc123"
    folder.mkdir()
    (folder / "blockmgr-1").mkdir()
    lock = open(folder / LOCAL_DIR_LOCK, "w")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    (tmp_path / "gridcrawl-spark-notes").mkdir()  # not a run's folder: its name has no PID
    assert sweep_local_dirs(str(tmp_path)) == [] and folder.exists()
    lock.close()
    assert sweep_local_dirs(str(tmp_path)) == [str(folder)] and not folder.exists()
    assert (tmp_path / "gridcrawl-spark-notes").exists()


def test_a_layer_held_up_by_a_slow_host_is_told_while_it_waits(sc, tmp_path):
    """A layer whose download stage waits on a host (a crawl delay, a server that does not
    answer: 211 s for one such seed, its robots.txt's three 30 s deadlines and back-off) said
    nothing until it ended. The crawl now calls on_wait during the stage, with the layer, the
    seconds so far and the tasks done, and the command prints it every minute."""
    site = generate_site(3, links_per_page=2, seed=24)
    site.extra["/"] = slow_page(1.5, site.pages["/"])  # told about six times, every 0.25 s
    with SiteServer(site) as srv:
        db = f"sqlite:///{tmp_path / 'c.db'}"
        s = Settings(spark_partitions=2).validate()
        store, scope = open_crawl(s, db, [srv.url("/")], [])
        told: list[tuple] = []
        try:
            result = SparkCrawl(sc, store, db, s, scope, allow_private=["127.0.0.0/8"], wait_seconds=0.25,
                                on_wait=lambda f, seconds, done, tasks: told.append((f.layer, f.depth, f.urls, seconds,
                                                                                     done, tasks))).run()
        finally:
            store.lock.close()
    assert result.pages == 3
    first = [t for t in told if t[0] == 1]
    assert first, told  # the seed's layer waited on its slow page and was told
    assert all(layer == 1 and depth == 0 and urls == 1 for layer, depth, urls, *_ in first)
    assert all(0 <= done <= tasks for *_, done, tasks in told)
    assert [t[3] for t in first] == sorted(t[3] for t in first)  # the seconds so far, growing


def test_without_java_the_line_asks_for_java_only(tmp_path):
    """pyspark installed, no java on PATH and no JAVA_HOME: the line asked to pip install
    gridcrawl[spark] (pyspark), which is there; it asks for a Java runtime only."""
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java on it
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "spark", "http://127.0.0.1:9/", "--db",
                           f"sqlite:///{tmp_path}/c.db"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error: no Java runtime (java not on PATH, JAVA_HOME unset): install a Java 17 runtime" in done.stderr
    assert "pip install" not in done.stderr and "Traceback" not in done.stderr
