"""Batched messages on a real manager: the assigns, starts and results of many grid threads travel
as few messages (issue 8), and nothing is lost or reordered on the way."""

from __future__ import annotations

import threading
import time

import zmq

from gridcrawl import protocol as p
from gridcrawl.settings import Settings
from grid import Grid, agent_with_router, collect_results, wait_for
from sites import Site, SiteServer, slow_page

THREADS = 60
#: the raw executor and client sockets of these tests never heartbeat: a manager that waits a
#: minute for them (the grid's test settings declare a peer dead after 0.75 s of silence, less
#: than a slow machine may take between two steps of a test)
PATIENT = ("--heartbeat-interval", "1", "--heartbeat-liveness", "60")


def _receive(sock: zmq.Socket, kind: type, want: int, timeout: float = 20.0) -> list[p.Message]:
    """Messages of type ``kind`` from ``sock`` until their batch lists hold ``want`` items."""
    got: list[p.Message] = []
    deadline = time.monotonic() + timeout
    while sum(len(getattr(m, kind.BATCH)) for m in got) < want:
        assert time.monotonic() < deadline, f"{kind.__name__}: only {got} within {timeout} s"
        if sock.poll(200):
            message = p.decode(sock.recv_multipart())
            if isinstance(message, kind):
                got.append(message)
    return got


def _join(grid: Grid, executor: zmq.Socket, client: zmq.Socket, threads: int, env: dict) -> str:
    """Start ``grid``'s manager (patient with these silent peers; ``env`` its environment),
    register the raw ``executor`` socket with ``threads`` workers and open an application on the
    raw ``client`` socket; returns the application's id."""
    grid.start_manager("--concurrent-requests-per-host", "1000", *PATIENT, env=env)
    for sock in (executor, client):
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(grid.endpoint)
    executor.send_multipart(p.encode(p.Register(name="raw", host="h", user="u", threads=threads)))
    assert executor.poll(20_000), "no welcome"
    assert isinstance(p.decode(executor.recv_multipart()), p.Welcome)
    client.send_multipart(p.encode(p.OpenApplication("batch", "u")))
    assert client.poll(20_000), "no answer to open"
    return p.decode(client.recv_multipart()).application_id


def test_a_burst_of_grid_threads_travels_in_few_batched_messages(tmp_path):
    grid = Grid(tmp_path)
    context = zmq.Context()
    executor = context.socket(zmq.DEALER)
    client = context.socket(zmq.DEALER)
    try:
        # a window as big as the burst: the test is about batching, not the slow start
        app = _join(grid, executor, client, THREADS, {"GRIDCRAWL_START_WINDOW": str(THREADS)})

        # a new host has one thread in flight until it answers (its Crawl-delay is then known)
        client.send_multipart(p.encode(p.Submit(app, [p.ThreadSpec(THREADS, "http://h.test/probe")])))
        (probe,) = _receive(executor, p.Assign, 1)[0].jobs
        executor.send_multipart(p.encode(p.Result(probe.attempt_id, p.PageResult(url=probe.url, status=200))))
        _receive(client, p.ThreadDone, 1)

        # one submit of 60 threads: the manager assigns them all in one pass, so one message
        client.send_multipart(p.encode(p.Submit(app, [p.ThreadSpec(i, f"http://h.test/{i}")
                                                      for i in range(THREADS)])))
        assigns = _receive(executor, p.Assign, THREADS)
        jobs = [job for m in assigns for job in m.jobs]
        assert sorted(job.thread_id for job in jobs) == list(range(THREADS))
        assert len(assigns) < THREADS // 4, f"{len(assigns)} assign messages for {THREADS} threads"

        # the executor reports every start in one message, then each result
        executor.send_multipart(p.encode(p.Started([job.attempt_id for job in jobs])))
        for job in jobs:
            executor.send_multipart(p.encode(p.Result(job.attempt_id, p.PageResult(url=job.url, status=200))))
        dones = _receive(client, p.ThreadDone, THREADS)
        outcomes = [o for m in dones for o in m.threads]
        assert sorted(o.thread_id for o in outcomes) == list(range(THREADS))
        assert all(o.page.status == 200 and not o.failed for o in outcomes)
        assert len(dones) < THREADS // 4, f"{len(dones)} done messages for {THREADS} results"

        client.send_multipart(p.encode(p.Ack(app, [o.thread_id for o in outcomes])))
        # the batched start reached the records: every thread Dead, started before it finished
        wait_for(lambda: grid.query("manager", "SELECT count(*) FROM thread WHERE state = 4 "
                                    "AND time_started IS NOT NULL AND time_started <= time_finished")
                 == [(THREADS,)], 20, message="every thread recorded Dead with its start time")
    finally:
        executor.close(linger=0)
        client.close(linger=0)
        context.term()
        grid.stop()


def test_the_client_applies_link_heavy_results_in_bounded_acknowledged_transactions(tmp_path):
    """Ten pages of 5,000 new links each: applied in transactions of at most APPLY_LINKS links
    (one page alone when it is bigger), each acknowledged on a real socket, nothing lost."""
    from gridcrawl.client import app as client_app
    from gridcrawl.client.store import CrawlStore, Outcome, Scope
    from gridcrawl.db import open_database
    from gridcrawl.settings import Settings

    store = CrawlStore(open_database(f"sqlite:///{tmp_path}/crawl.db"))
    store.add_seeds([f"http://a.test/{i}" for i in range(10)])
    pendings = store.claim(10)
    context = zmq.Context()
    manager = context.socket(zmq.ROUTER)
    port = manager.bind_to_random_port("tcp://127.0.0.1")
    crawl = client_app.CrawlApplication(Settings(), f"tcp://127.0.0.1:{port}", store, Scope(["a.test"]))
    crawl.link.socket = context.socket(zmq.DEALER)
    try:
        crawl.link.socket.connect(f"tcp://127.0.0.1:{port}")
        crawl.application_id = "app"
        for pend in pendings:
            links = [[f"http://a.test/{pend.thread_id}/{k}", ""] for k in range(5000)]
            page = p.PageResult(url=pend.url, final_url=pend.url, status=200, content_type="text/html", links=links)
            crawl.in_flight[pend.thread_id] = pend
            crawl.results.append(Outcome(pend, page, "ex", 1, False))
        crawl._apply()
        acks = []
        while manager.poll(2000):
            acks.append(p.decode(manager.recv_multipart()[1:]))
        per_ack = 20_000 // 5000
        assert [len(a.thread_ids) for a in acks] == [per_ack] * (10 // per_ack) + [10 % per_ack] * (10 % per_ack > 0)
        assert sorted(t for a in acks for t in a.thread_ids) == sorted(pend.thread_id for pend in pendings)
        assert crawl.in_flight == {} and crawl.progress.pages == 10
        assert store.counts()["visited"] == 10 and store.counts()["to_visit"] == 10 * 5000
        assert client_app.APPLY_LINKS == 20_000
    finally:
        crawl.link.socket.close(linger=0)
        manager.close(linger=0)
        context.term()


def test_results_of_one_pass_travel_as_one_message_and_say_when_they_started(tmp_path):
    """An executor's ``results`` message: no ``started`` before it, each result's ``ran`` says
    how long it ran; the manager refills the executor's free slots with one ``assign`` and
    records each start ``ran`` seconds before its result."""
    grid = Grid(tmp_path)
    context = zmq.Context()
    executor = context.socket(zmq.DEALER)
    client = context.socket(zmq.DEALER)
    try:
        app = _join(grid, executor, client, 4, {"GRIDCRAWL_START_WINDOW": "4", "GRIDCRAWL_PREFETCH": "0"})
        # eight hosts, one thread each (a new host has one thread in flight); the executor holds 4
        client.send_multipart(p.encode(p.Submit(app, [p.ThreadSpec(i, f"http://h{i}.test/") for i in range(8)])))
        first = [job for m in _receive(executor, p.Assign, 4) for job in m.jobs]
        time.sleep(0.6)  # they "ran" 0.3 s of these 0.6 s
        executor.send_multipart(p.encode(p.Results([
            p.AttemptResult(job.attempt_id, p.encode_page(p.PageResult(url=job.url, status=200)), 0.3)
            for job in first])))
        refill = _receive(executor, p.Assign, 4)
        assert len(refill) == 1, f"the four free slots were refilled by {len(refill)} assigns"
        executor.send_multipart(p.encode(p.Results([
            p.AttemptResult(job.attempt_id, p.encode_page(p.PageResult(url=job.url, status=200)))
            for job in refill[0].jobs])))
        outcomes = [o for m in _receive(client, p.ThreadDone, 8) for o in m.threads]
        assert sorted(o.thread_id for o in outcomes) == list(range(8))
        client.send_multipart(p.encode(p.Ack(app, [o.thread_id for o in outcomes])))
        wait_for(lambda: grid.query("manager", "SELECT count(*) FROM thread WHERE state = 4") == [(8,)], 20,
                 message="every thread recorded Dead")
        ran = grid.query("manager", "SELECT (julianday(a.time_finished) - julianday(a.time_started)) * 86400, "
                         "(julianday(t.time_finished) - julianday(t.time_started)) * 86400 FROM attempt a "
                         "JOIN thread t ON t.internal_thread_id = a.internal_thread_id WHERE t.thread_id < 4")
        assert len(ran) == 4 and all(abs(a - 0.3) < 0.05 and abs(t - 0.3) < 0.05 for a, t in ran), ran
        # a result without ``ran`` (no start reported): started when its result came
        assert grid.query("manager", "SELECT count(*) FROM thread WHERE thread_id >= 4 "
                          "AND time_started = time_finished") == [(4,)]
    finally:
        executor.close(linger=0)
        client.close(linger=0)
        context.term()
        grid.stop()


def test_an_executor_reports_the_start_of_a_page_only_once_it_has_run_a_while():
    """The real executor against a raw manager socket: a page answered at once is reported by
    its result alone (``ran`` says how long it ran, no ``started``); a page that takes 0.8 s is
    reported ``started`` while it runs, with the seconds it has run, and its result has no
    ``ran``."""
    from gridcrawl.executor.agent import START_REPORT_AFTER

    site = Site(pages={"/fast.html": b"<html><title>fast</title></html>"},
                extra={"/slow.html": slow_page(0.8, b"<html><title>slow</title></html>")})
    server = SiteServer(site).start()
    settings = Settings(obey_robots=False, sitemaps=False, threads=2)
    try:
        with agent_with_router(settings) as (manager, peer):
            manager.send_multipart([peer, *p.encode(p.Assign([p.Job(1, "app", 0, server.url("/fast.html")),
                                                              p.Job(2, "app", 1, server.url("/slow.html"))]))])
            got: list[p.Message] = []
            deadline = time.monotonic() + 20
            while {r.attempt_id for m in got if isinstance(m, p.Results) for r in m.results} != {1, 2}:
                assert time.monotonic() < deadline, f"only {got} within 20 s"
                if manager.poll(200):
                    _, *frames = manager.recv_multipart()
                    message = p.decode(frames)
                    if isinstance(message, (p.Started, p.Results)):
                        got.append(message)
            started = {a: (i, running) for i, m in enumerate(got) if isinstance(m, p.Started)
                       for a, running in zip(m.attempt_ids, m.running)}
            results = {r.attempt_id: (i, r) for i, m in enumerate(got) if isinstance(m, p.Results) for r in m.results}
            assert 2 in started and START_REPORT_AFTER <= started[2][1] < 0.8, got
            assert results[2][1].ran is None and results[2][0] > started[2][0]
            if 1 in started:  # a loaded machine (the suite's other worker) took the fast page past the bar
                assert started[1][1] >= START_REPORT_AFTER and results[1][1].ran is None, got
            else:
                assert results[1][1].ran is not None and 0 <= results[1][1].ran < 0.8
    finally:
        server.stop()


def test_results_are_applied_at_once_while_the_frontier_is_empty(tmp_path, site_server):
    """A slow page in flight must not hold back the links of the pages that came back: once the
    frontier has nothing more to submit, each result is applied (and its links submitted) at
    once, not after ``apply_interval`` (here ten minutes) or when every thread is back.

    ``/`` links to ``/slow`` and to a chain ``/c1`` → ... → ``/c5``; ``/slow`` answers when
    ``/c5`` has been requested, or after 20 s (well within the fetch's read timeout, here a
    minute). The chain reaches ``/c5`` first only if ``/c1``…``/c4`` are applied while ``/slow``
    is still in flight (before, they waited for it)."""
    import os
    import sqlite3
    import subprocess
    import sys

    chain_done = threading.Event()
    slow_saw: list[bool] = []
    site = Site()
    site.pages["/"] = b'<html><body><a href="/slow">slow</a> <a href="/c1">chain</a></body></html>'
    for i in range(1, 5):
        site.pages[f"/c{i}"] = f'<html><body>chain {i} <a href="/c{i + 1}">next</a></body></html>'.encode()

    def slow(h) -> None:
        slow_saw.append(chain_done.wait(20))
        h.respond(200, b"<html><body>slow</body></html>")

    def last(h) -> None:
        chain_done.set()
        h.respond(200, b"<html><body>chain 5</body></html>")

    site.extra["/slow"], site.extra["/c5"] = slow, last
    server = site_server(site)
    env = {**os.environ, "GRIDCRAWL_APPLY_INTERVAL": "600", "GRIDCRAWL_FETCH_READ_TIMEOUT": "60"}
    proc = subprocess.run([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "1",
                           "--workdir", str(tmp_path), "--no-progress", "--no-sitemaps"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with sqlite3.connect(tmp_path / "crawl.db") as conn:
        assert conn.execute("SELECT count(*) FROM visited_url").fetchone()[0] == 7  # /, /slow, /c1…/c5
    assert slow_saw == [True], "the chain reached /c5 only after /slow had answered"


def test_a_page_whose_result_is_over_max_message_bytes_comes_back_as_too_large():
    """A result the manager would refuse (it drops the connection, and the thread would come back
    for ever) is sent as a ``too_large`` failure, URL, status and size kept; the next page of the
    same executor comes back as usual."""
    big = b"<html><title>big</title><body>" + b"<p>words words words</p>" * 120_000 + b"</body></html>"
    site = Site(pages={"/big.html": big, "/small.html": b"<html><title>small</title></html>"})
    server = SiteServer(site).start()
    settings = Settings(obey_robots=False, sitemaps=False, threads=1, max_message_bytes=2_000_000)
    try:
        with agent_with_router(settings) as (manager, peer):
            manager.send_multipart([peer, *p.encode(p.Assign([p.Job(1, "app", 0, server.url("/big.html")),
                                                              p.Job(2, "app", 1, server.url("/small.html"))]))])
            pages = collect_results(manager, 2)
    finally:
        server.stop()
    assert pages[1].error_kind == "too_large" and pages[1].status == 200 and pages[1].size == len(big)
    assert "over max_message_bytes (2000000)" in pages[1].error and pages[1].content is None
    assert pages[2].error_kind is None and pages[2].title == "small"


def test_a_page_whose_items_make_its_result_too_large_comes_back_without_them():
    """Items that make a result too large (a plugin yielding a thousand 100,000-character values:
    100 MB) failed the whole page as ``too_large``, its links and body lost, although a plugin's
    failure is to fail the page's items only. The page now comes back without its items, with an
    item error per type saying why."""
    from gridcrawl.items import parse_spec, spec_to_wire
    text = "word " * 600  # 3,000 characters, read by each of the 1,000 items: 3 MB of items
    page = (f"<html><title>list</title><body><p>{text}</p><ul>{'<li>x</li>' * 1000}</ul>"
            f"<a href='/next.html'>next</a></body></html>").encode()
    site = Site(pages={"/list.html": page})
    server = SiteServer(site).start()
    settings = Settings(obey_robots=False, sitemaps=False, threads=1, max_message_bytes=2_000_000)
    spec = parse_spec('[[item]]\ntype = "row"\neach = "li"\n[item.fields]\npage_text = { xpath = "string(//p)" }\n')
    try:
        with agent_with_router(settings) as (manager, peer):
            manager.send_multipart([peer, *p.encode(p.Assign([p.Job(
                1, "app", 0, server.url("/list.html"), instruction={"items": [spec_to_wire(spec[0])]})]))])
            pages = collect_results(manager, 1)
    finally:
        server.stop()
    result = pages[1]
    assert result.error_kind is None and result.title == "list" and result.content is not None
    assert [link[0] for link in result.links] == [server.url("/next.html")]
    assert result.items == []
    ((kind, message),) = result.item_errors
    assert kind == "row" and message.startswith("items left out: the page's items made its result ")
    assert "over max_message_bytes (2000000)" in message


def test_a_window_held_by_threads_that_do_not_answer_is_refilled_however_little_room_it_has(tmp_path):
    """250 seeds of hosts that never answer took 250 of the client's 256 slots for 3.5 minutes,
    and it claimed nothing more until a quarter of its window was free: the one live site got
    nothing meanwhile. Once no result has come for REFILL_WAIT, what room there is is filled."""
    from gridcrawl.client import app as client_app
    from gridcrawl.client.store import CrawlStore, Scope
    from gridcrawl.db import open_database
    from gridcrawl.settings import Settings

    store = CrawlStore(open_database(f"sqlite:///{tmp_path}/crawl.db"))
    store.add_seeds([f"http://dead{i}.test/" for i in range(250)] + [f"http://live.test/{i}" for i in range(20)])
    context = zmq.Context()
    manager = context.socket(zmq.ROUTER)
    port = manager.bind_to_random_port("tcp://127.0.0.1")
    crawl = client_app.CrawlApplication(Settings(max_in_flight=256), f"tcp://127.0.0.1:{port}", store,
                                        Scope(["dead.test", "live.test"]))
    crawl.link.socket = context.socket(zmq.DEALER)
    try:
        crawl.link.socket.connect(f"tcp://127.0.0.1:{port}")
        crawl.application_id = "app"
        for pend in store.claim(250):
            crawl.in_flight[pend.thread_id] = pend
        crawl._last_result_at = time.monotonic()  # results keep coming: a claim waits for a quarter free
        crawl._refill()
        assert len(crawl.in_flight) == 250
        crawl._last_result_at = time.monotonic() - client_app.REFILL_WAIT - 0.1  # none for a while
        crawl._refill()
        assert len(crawl.in_flight) == 256 and sum(1 for p in crawl.in_flight.values() if "live" in p.url) == 6
    finally:
        crawl.link.socket.close(linger=0)  # (its submits may be unsent: term() waited on them, once for 180 s)
        manager.close(linger=0)
        context.term()
