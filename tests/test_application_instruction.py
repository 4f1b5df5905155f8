"""The application's instruction (the crawl's scope and the keys every grid thread shares)
travels once: from the client with ``OpenApplication``, from the manager to each executor with
the first job of the application it sends there, and the executor reads each job's own keys over
it. A crawl of 20,000 seed hosts has a scope of 250 KB, which every thread used to carry."""

from __future__ import annotations

import os

import msgspec
import zmq

from gridcrawl import protocol as p
from gridcrawl.manager.core import ManagerCore, Send
from gridcrawl.settings import Settings
from grid import agent_with_router, collect_results
from sites import Site, SiteServer, redirect

SETTINGS = Settings(heartbeat_interval=1.0, heartbeat_liveness=3, thread_timeout=10.0, max_attempts=3, prefetch=0)


def _core() -> ManagerCore:
    ids = iter(f"id{i}" for i in range(1000))
    return ManagerCore(SETTINGS, new_id=lambda: next(ids))


def _jobs(actions) -> list[tuple[bytes, p.Job]]:
    return [(a.peer, job) for a in actions if isinstance(a, Send) and isinstance(a.message, p.Assign)
            for job in a.message.jobs]


def _open(core, instruction, application_id=None) -> str:
    actions = core.handle(b"client", p.OpenApplication("crawl", "u", application_id, instruction=instruction), 0.0)
    (opened,) = [a.message for a in actions if isinstance(a, Send) and isinstance(a.message, p.ApplicationOpened)]
    return opened.application_id


def _register(core, peer: bytes, now: float) -> list[tuple[bytes, p.Job]]:
    return _jobs(core.handle(peer, p.Register(name=peer.decode(), host="h", user="u", threads=2), now))


def test_the_manager_sends_an_applications_instruction_once_per_executor_registration():
    core = _core()
    shared = {"scope": [f"host{i}.test" for i in range(1000)], "content": False}
    app = _open(core, shared)
    core.handle(b"client", p.Submit(app, [p.ThreadSpec(i, f"http://host{i}.test/", instruction=(
        {"sitemaps": True} if i == 0 else None)) for i in range(8)]), 0.0)

    first = _register(core, b"e1", 0.1)
    assert [job.application_instruction for _, job in first] == [shared, None]
    assert first[0][1].instruction == {"sitemaps": True} and first[1][1].instruction is None
    second = _register(core, b"e2", 0.2)
    assert [job.application_instruction for _, job in second] == [shared, None]

    # e1 starts afresh (a new registration): its jobs are taken back and it is told again
    again = _register(core, b"e1", 0.3)
    assert [job.application_instruction is not None for _, job in again] == [True, False]

    # the client reattaches with a wider scope: the executors get the new instruction next time
    wider = {**shared, "scope": [*shared["scope"], "more.test"]}
    assert _open(core, wider, app) == app
    results = [p.AttemptResult(job.attempt_id, p.PageResult(url=job.url, status=200)) for _, job in second]
    more = _jobs(core.handle(b"e2", p.Results(results), 0.4))
    assert more and more[0][1].application_instruction == wider
    assert all(job.application_instruction is None for _, job in more[1:])

    # a stopped application's instruction is let go, by the manager and its executor records
    core.handle(b"client", p.CloseApplication(app), 0.5)
    assert core.applications[app].instruction is None
    assert all(app not in ex.instructed for ex in core.executors.values())


def test_a_submit_with_a_new_instruction_reaches_every_executor_with_its_next_job():
    """A seed redirected out of the scope: the client's next ``submit`` carries the application's
    widened instruction; executors already told the old one get the new one, once each."""
    core = _core()
    shared = {"scope": ["a.test"]}
    app = _open(core, shared)
    core.handle(b"client", p.Submit(app, [p.ThreadSpec(i, f"http://h{i}.a.test/") for i in range(4)]), 0.0)
    first = _register(core, b"e1", 0.1)
    assert [job.application_instruction for _, job in first] == [shared, None]

    wider = {"scope": ["a.test", "b.test"]}
    core.handle(b"client", p.Submit(app, [p.ThreadSpec(9, "http://b.test/")], wider), 0.2)
    assert core.applications[app].instruction == wider
    results = [p.AttemptResult(job.attempt_id, p.PageResult(url=job.url, status=200)) for _, job in first]
    more = _jobs(core.handle(b"e1", p.Results(results), 0.3))
    assert [job.application_instruction for _, job in more] == [wider, None]
    # the same instruction again (a submit split in halves carries it twice) changes nothing
    core.handle(b"client", p.Submit(app, [p.ThreadSpec(10, "http://b.test/x")], dict(wider)), 0.4)
    assert core.applications[app].instruction is wider


def test_the_executor_reads_each_jobs_keys_over_its_applications_instruction():
    """Real sockets: a ROUTER plays the manager. The first job brings the application's
    instruction (a scope of one host, no body wanted); the second job, without it, is still
    refused a redirect out of that scope and still sends no body; a job of another application,
    which has none, follows the same redirect and sends its body."""
    site = Site(pages={"/page.html": b"<html><title>page</title><body>text</body></html>"})
    server = SiteServer(site).start()
    site.extra["/away.html"] = redirect(server.url("/page.html").replace("127.0.0.1", "localhost"))
    settings = Settings(obey_robots=False, sitemaps=False, threads=1)
    try:
        with agent_with_router(settings) as (manager, peer):
            shared = {"scope": ["127.0.0.1"], "content": False}
            manager.send_multipart([peer, *p.encode(p.Assign([
                p.Job(1, "app", 0, server.url("/page.html"), application_instruction=shared),
                p.Job(2, "app", 1, server.url("/away.html"), instruction={"follow_nofollow": True}),
                p.Job(3, "other", 0, server.url("/away.html"))]))])
            pages = collect_results(manager, 3)
    finally:
        server.stop()
    assert pages[1].status == 200 and pages[1].content is None
    assert pages[2].error_kind == "out_of_scope" and "localhost" in pages[2].error
    assert pages[3].status == 200 and pages[3].error_kind is None and "text" in (pages[3].content or "")


def test_a_message_over_max_message_bytes_goes_in_halves_or_is_refused_before_it_is_sent():
    """The receiver would drop a connection that sends more than MAXMSGSIZE, and the sender would
    connect and send it again for ever: a batched message goes in halves, one that cannot be
    split is refused by its sender (real sockets)."""
    from gridcrawl import transport
    from gridcrawl.errors import MessageTooLarge
    context = zmq.Context()
    settings = Settings(max_message_bytes=1_500_000)
    router = transport.make_socket(context, zmq.ROUTER, settings)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer = transport.make_socket(context, zmq.DEALER, settings)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    try:
        spec = lambda i, n=1000: p.ThreadSpec(i, f"http://h{i}.test/", instruction={"items": ["x" * n]})  # noqa: E731
        assert transport.send(dealer, p.Submit("app", [spec(i) for i in range(3000)]))  # 3 MB: in 4 parts
        received = []
        while sum(len(m.threads) for m in received) < 3000:
            assert router.poll(10_000), f"only {[len(m.threads) for m in received]} threads"
            received.append(p.decode(transport.receive(router)[1:]))
        assert [len(m.threads) for m in received] == [750, 750, 750, 750]
        assert [t.thread_id for m in received for t in m.threads] == list(range(3000))
        try:
            transport.send(dealer, p.Submit("app", [spec(0, 2_000_000)]))
            raise AssertionError("a 2 MB thread was sent")
        except MessageTooLarge as exc:
            assert "the submit message (1.9 MiB)" in str(exc) and "max_message_bytes (1.4 MiB)" in str(exc)
    finally:
        dealer.close(0)
        router.close(0)
        context.term()


def test_a_client_whose_scope_is_over_max_message_bytes_says_so_and_exits(tmp_path):
    """100,000 seed hosts make a 2.2 MiB application instruction: with max_message_bytes at 1 MB
    the client stops with one line naming the setting, instead of connecting for ever (the
    instruction goes with the first submit: it is over protocol.MAX_HELLO_INSTRUCTION)."""
    import subprocess
    import sys
    from grid import Grid
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"http://host{i}.example.test/\n" for i in range(100_000)))
    grid = Grid(tmp_path)
    env = {"GRIDCRAWL_MAX_MESSAGE_BYTES": "1000000"}
    try:
        grid.start_manager(env=env)
        done = subprocess.run([sys.executable, "-m", "gridcrawl.client", "--manager", grid.endpoint, "--db",
                               grid.crawl_db, "--no-progress", "--seeds-file", str(seeds)],
                              capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    finally:
        grid.stop()
    assert done.returncode == 2, done.stderr[-2000:]
    assert "the submit message (2.2 MiB)" in done.stderr and "raise max_message_bytes" in done.stderr
    assert "Traceback" not in done.stderr and "connecting again" not in done.stderr


def test_an_instruction_over_a_hellos_bound_travels_with_the_first_submit(tmp_path):
    """A manager reads at most protocol.MAX_HELLO_BYTES of a peer that has not logged in (a
    bigger body was decoded whole: 10 MiB of empty maps in an ``open`` stalled a manager 4.8 s),
    so a crawl whose instruction is larger (6,000 allowed domains: about 80 KB) leaves it out of
    its ``open`` and sends it with its first ``submit``: the crawl runs (real programs), and its
    executor still applies the scope (a redirect out of it fails as out_of_scope)."""
    from gridcrawl.client.store import Scope
    from grid import Grid
    site = Site(pages={"/": b'<html><body><a href="/page.html">p</a> <a href="/away.html">a</a></body></html>',
                       "/page.html": b"<html><title>page</title><body>text</body></html>"})
    server = SiteServer(site).start()
    site.extra["/away.html"] = redirect(server.url("/page.html").replace("127.0.0.1", "localhost"))
    domains = [f"d{i}.example.org" for i in range(6000)]
    assert len(msgspec.msgpack.encode(Scope(domains).instruction())) > p.MAX_HELLO_BYTES
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2", "--ignore-robots")
        client = grid.start_client(server.url("/"), "--no-sitemaps",
                                   *[arg for d in domains for arg in ("--allow-domain", d)])
        assert client.wait(timeout=120) == 0, grid.log("client.log") + grid.log("manager.log")
    finally:
        grid.stop()
        server.stop()
    visited = dict(grid.query("crawl", "SELECT url, error_kind FROM visited_url"))
    assert visited[server.url("/page.html")] is None
    assert visited[server.url("/away.html")] == "out_of_scope"
    assert "refused unread" not in grid.log("manager.log")
