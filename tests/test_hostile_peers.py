"""Hostile and broken peers, as real ZeroMQ DEALER sockets, against a real manager (and the real
executor and client programs beside them): each test here fails without the fix it names."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import msgpack
import msgspec
import pytest
import zmq

from gridcrawl import protocol as p
from gridcrawl.urls import canonical_url
from grid import Grid
from sites import generate_site, reachable


def _answer(sock: zmq.Socket, *kinds, beat: bool = False, seconds: float = 60.0, also: tuple = ()) -> p.Message:
    """The next message of one of ``kinds`` on ``sock`` (others skipped) within ``seconds``;
    with ``beat``, the socket heartbeats meanwhile, and so do the sockets ``also`` (registered
    peers that must stay alive while this one waits)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if beat:
            for peer in (sock, *also):
                peer.send_multipart(p.encode(p.Heartbeat()))
        if sock.poll(100):
            message = p.decode(sock.recv_multipart())
            if isinstance(message, kinds):
                return message
    raise AssertionError(f"no {kinds} within {seconds} s")


class RawExecutor(threading.Thread):
    """A registered executor driven by hand, in a thread of its own: ``answer(job)`` gives the
    page it returns for each job (a :class:`~gridcrawl.protocol.PageResult`, or a dict sent as
    it is; None: no answer), until :meth:`stop`. ``jobs`` counts the jobs it was given."""

    def __init__(self, context: zmq.Context, endpoint: str, name: str, answer, threads: int = 8) -> None:
        super().__init__(daemon=True)
        self.context, self.endpoint, self.name, self.answer, self.threads = context, endpoint, name, answer, threads
        self.jobs = 0
        self.welcomed = threading.Event()
        self._done = threading.Event()

    def run(self) -> None:
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoint)
        try:
            sock.send_multipart(p.encode(p.Register(name=self.name, host="h", user="u", threads=self.threads)))
            _answer(sock, p.Welcome)
            self.welcomed.set()
            while not self._done.is_set():
                sock.send_multipart(p.encode(p.Heartbeat()))
                if not sock.poll(100):
                    continue
                message = p.decode(sock.recv_multipart())
                if isinstance(message, p.Assign):
                    self.jobs += len(message.jobs)
                    results = [{"attempt_id": job.attempt_id, "page": msgspec.to_builtins(page), "ran": 0.001}
                               for job in message.jobs if (page := self.answer(job)) is not None]
                    if results:
                        sock.send_multipart([p.PROTOCOL_VERSION, b"results", msgpack.packb({"results": results})])
        finally:
            sock.close()

    def stop(self) -> None:
        """End the thread (its socket is closed)."""
        self._done.set()
        self.join(10)


def _crawl_beside(tmp_path, site_server, name: str, answer, pages: int, seed: int, timeout: float):
    """Crawl a generated site of ``pages`` pages with a :class:`RawExecutor` ``name`` answering
    every grid thread with ``answer(job)`` (registered first, so it is the most idle) beside an
    honest executor of 2 threads. Returns (grid, server, site, the raw executor), the grid
    stopped; the client must have exited with status 0 within ``timeout`` seconds."""
    site = generate_site(pages, links_per_page=4, seed=seed)
    server = site_server(site)
    grid = Grid(tmp_path)
    context = zmq.Context()
    raw = RawExecutor(context, grid.endpoint, name, answer, threads=16)
    try:
        grid.start_manager()
        raw.start()
        assert raw.welcomed.wait(30)
        grid.start_executor("honest", "--threads", "2")
        client = grid.start_client(server.url("/"), "--no-sitemaps")
        assert client.wait(timeout=timeout) == 0, grid.log("client.log")
    finally:
        grid.stop()
        raw.stop()
        context.term()
    assert raw.jobs >= 1  # it did get work
    return grid, server, site, raw


@pytest.mark.e2e
def test_an_executor_that_cannot_reach_the_web_does_not_take_the_crawls_hosts_down(tmp_path, site_server):
    """A desktop behind a firewall (or with a broken proxy) answers every grid thread at once with
    "connection refused". It is the most idle executor, so least-loaded dispatch gave it each
    host's next probe: three failed probes, and the manager declared the site down and failed every
    queued URL of it without a fetch. Now a host's threads go to another executor than those that
    found no answer from it, while one can run them: every page is crawled."""
    grid, server, site, _ = _crawl_beside(tmp_path, site_server, "no-network", lambda job: p.PageResult(
        url=job.url, error_kind="connection", error="connection refused"), pages=30, seed=21, timeout=120)
    assert "did not answer 3 probes" not in grid.log("manager.log")
    docs = {row[0] for row in grid.query("crawl", "SELECT url FROM document")}
    assert docs == {canonical_url(server.url(path)) for path in reachable(site)}


@pytest.mark.e2e
@pytest.mark.parametrize("page, problem", [
    ({"status": "200"}, "page.status: expected int | null, got str"),
    ({"status": 200, "content": "<html></html>", "added_by_a_later_release": 1},
     "page: unknown fields ['added_by_a_later_release']")])
def test_an_executor_whose_pages_do_not_decode_gets_its_threads_run_elsewhere_at_once(tmp_path, site_server, page,
                                                                                      problem):
    """A broken executor answers every grid thread with a page that does not decode. One the
    manager cannot read (its status a text): the manager dropped the whole ``results`` message as
    malformed, so its threads, and any good results of the same message, waited for a straggler
    take-back (120 s) or thread_timeout (300 s). One of another release, with a field the client
    does not know: the manager relayed it, and the client failed every such URL as poison. Now
    each such page's attempt is taken back at once (recorded ``unreadable``, a strike against the
    executor, whose first pages the manager decodes in full) and its thread runs on another
    executor: the crawl completes, well within a straggler delay."""
    grid, server, site, _ = _crawl_beside(tmp_path, site_server, "broken", lambda job: {"url": job.url, **page},
                                          pages=20, seed=22, timeout=60)
    docs = {row[0] for row in grid.query("crawl", "SELECT url FROM document")}
    assert docs == {canonical_url(server.url(path)) for path in reachable(site)}
    assert grid.query("manager", "SELECT count(*) FROM attempt WHERE outcome = 'unreadable'")[0][0] >= 1
    log = grid.log("manager.log")
    assert "executor broken: the page of application" in log and problem in log, log[-3000:]


class _Dealers:
    """A factory of DEALER sockets connected to the manager at ``endpoint`` (``dealer()`` makes
    one, linger 0); :meth:`close` closes them all and ends their context."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint, self.context, self.sockets = endpoint, zmq.Context(), []

    def __call__(self) -> zmq.Socket:
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoint)
        self.sockets.append(sock)
        return sock

    def close(self) -> None:
        """Close every socket made, then the context."""
        for sock in self.sockets:
            sock.close()
        self.context.term()


def _peak_rss_mb(pid: int) -> float:
    """The peak resident memory of process ``pid`` so far, MB (Linux: VmHWM)."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024


def _empty_maps(count: int) -> bytes:
    """A msgpack array of ``count`` empty maps: ``count`` bytes that decode to ``count`` dicts."""
    return b"\xdd" + count.to_bytes(4, "big") + b"\x80" * count


def test_a_big_submit_is_refused_by_its_instructions_length_before_they_are_decoded(tmp_path):
    """A registered client sends a 30 MiB ``submit`` whose application instruction is a list of
    empty maps, then one of 1,000 grid threads with a 30 KB such instruction each. The manager
    decoded each body whole before it weighed the instructions: 2.5 GB (3.4 s of its loop) and
    2.3 GB (8.5 s). Now a big body's instructions stay msgpack bytes until their length is within
    the manager's bounds: the first is refused by its length, unread; the second after the
    threads that reach the application's bound of instructions. The client is told why (a final
    refusal), the manager stays small, and an honest executor's thread completes meanwhile."""
    grid = Grid(tmp_path)
    dealer = _Dealers(grid.endpoint)
    try:
        # liveness 10 s: the test's own peers are silent while it builds 30 MB (over 0.8 s on a
        # loaded machine, and both were declared dead; the submit refused as from no application)
        manager = grid.start_manager("--heartbeat-liveness", "40")
        honest = dealer()
        honest.send_multipart(p.encode(p.Register(name="honest", host="h", user="u", threads=2)))
        _answer(honest, p.Welcome)
        client = dealer()
        client.send_multipart(p.encode(p.OpenApplication("big", "u", client="big")))
        app_id = _answer(client, p.ApplicationOpened, beat=True, also=(honest,)).application_id
        two_fields = msgpack.packb({"application_id": app_id, "threads": []})  # a map of 2, and a third:
        big = 30 * 1024 * 1024
        client.send_multipart([p.PROTOCOL_VERSION, b"submit", b"\x83" + two_fields[1:] + b"\xabinstruction\x81\xa1a"
                               + _empty_maps(big)])
        refused = _answer(client, p.Refuse, beat=True, also=(honest,))
        assert refused.final and "the application's instruction would hold about" in refused.reason, refused
        per = big // 1000
        threads = msgpack.packb({"application_id": app_id, "threads": [
            {"thread_id": i, "url": f"http://a.test/{i}", "instruction": {"a": None}} for i in range(1000)]})
        client.send_multipart([p.PROTOCOL_VERSION, b"submit", threads.replace(b"\xa1a\xc0", b"\xa1a" + _empty_maps(per))])
        refused = _answer(client, p.Refuse, beat=True, also=(honest,))
        assert refused.final and "grid threads would hold" in refused.reason, refused
        # the grid goes on: a thread submitted now is run and reported
        client.send_multipart(p.encode(p.Submit(app_id, [p.ThreadSpec(5000, "http://a.test/ok")])))
        (job,) = _answer(honest, p.Assign, beat=True, also=(client,)).jobs
        honest.send_multipart(p.encode(p.Results([p.AttemptResult(job.attempt_id, p.PageResult(job.url, status=200),
                                                                  0.01)])))
        done = _answer(client, p.ThreadDone, beat=True, also=(honest,))
        assert [t.thread_id for t in done.threads] == [5000] and not done.threads[0].failed
        peak = _peak_rss_mb(manager.pid)
    finally:
        dealer.close()
        grid.stop()
    assert peak < 700, f"the manager peaked at {peak:.0f} MB"


def test_a_big_honest_submit_reaches_the_executor_with_its_instructions_as_sent(tmp_path):
    """The other side of the bound above: a client's 2.4 MiB submit (a scope of 100,000 seed
    hosts as the application's instruction, and rules in its threads' own) is taken, and each
    executor's job carries the instructions as the client sent them."""
    grid = Grid(tmp_path)
    dealer = _Dealers(grid.endpoint)
    try:
        grid.start_manager()
        executor, client = dealer(), dealer()
        executor.send_multipart(p.encode(p.Register(name="honest", host="h", user="u", threads=2)))
        _answer(executor, p.Welcome)
        client.send_multipart(p.encode(p.OpenApplication("big", "u", client="big")))
        app_id = _answer(client, p.ApplicationOpened).application_id
        shared = {"scope": [f"host-{i}.example.org" for i in range(100_000)]}
        own = {"pageType": "list", "followRules": [{"pattern": "/item/\\d+", "to_type": "item"}]}
        submit = p.Submit(app_id, [p.ThreadSpec(1, "http://host-1.example.org/", instruction=own)], instruction=shared)
        assert len(p.encode(submit)[2]) > p.DECODE_WHOLE_BYTES
        client.send_multipart(p.encode(submit))
        (job,) = _answer(executor, p.Assign, beat=True, also=(client,)).jobs
    finally:
        dealer.close()
        grid.stop()
    assert job.instruction == own and job.application_instruction == shared


#: A peer that registers as an executor and sends heartbeats without pause for ``sys.argv[2]``
#: seconds (a flood: the manager drops what passes its rate, and reads it all).
FLOODER = """
import sys, time, zmq
from gridcrawl import protocol as p
sock = zmq.Context().socket(zmq.DEALER)
sock.setsockopt(zmq.LINGER, 0)
sock.setsockopt(zmq.SNDHWM, 1_000_000)
sock.connect(sys.argv[1])
sock.send_multipart(p.encode(p.Register(name="flood", host="h", user="u", threads=1, accepting=False)))
beat, end = p.encode(p.Heartbeat()), time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    for _ in range(1000):
        try:
            sock.send_multipart(beat, zmq.NOBLOCK)
        except zmq.Again:
            pass
"""


@pytest.mark.e2e
def test_a_flood_does_not_stop_the_manager_declaring_a_silent_executor_dead(tmp_path):
    """A peer sends heartbeats without pause (the manager drops all but 5,000 a second of them,
    but reads them all). The manager judges peers silent only up to the last time it had read
    all its input, found as an empty socket, which a flood never leaves: an executor that went
    silent holding a grid thread was declared dead only when the flood stopped (13 s late in a
    20 s flood), its thread held meanwhile. Now a round of ZeroMQ's fair queuing that comes back
    to a peer counts as having read all that waited before it: the silent executor is declared
    dead within its liveness, and its thread goes to the honest one, while the flood goes on."""
    grid = Grid(tmp_path)
    dealer = _Dealers(grid.endpoint)
    floods = []
    try:
        grid.start_manager()
        floods = [subprocess.Popen([sys.executable, "-c", FLOODER, grid.endpoint, "60"]) for _ in range(2)]
        time.sleep(3)  # the floods fill the manager's socket
        silent, honest, client = dealer(), dealer(), dealer()
        # its fetches, it says, end within 1 s: the slot its lost attempt holds is free 1 s after
        # it is declared dead (ReadyQueue.hold), not the default window's minutes later
        silent.send_multipart(p.encode(p.Register(name="silent", host="h", user="u", threads=1,
                                                  request_window=1.0)))
        _answer(silent, p.Welcome, beat=True)
        client.send_multipart(p.encode(p.OpenApplication("app", "u", client="app")))
        app_id = _answer(client, p.ApplicationOpened, beat=True, also=(silent,)).application_id
        client.send_multipart(p.encode(p.Submit(app_id, [p.ThreadSpec(1, "http://a.test/")])))
        _answer(silent, p.Assign, beat=True, also=(client,))  # it takes the thread, and says nothing more
        silent_since = time.monotonic()
        honest.send_multipart(p.encode(p.Register(name="honest", host="h", user="u", threads=1)))
        while time.monotonic() < silent_since + 20:
            honest.send_multipart(p.encode(p.Heartbeat()))
            client.send_multipart(p.encode(p.Heartbeat()))
            if honest.poll(100) and isinstance(p.decode(honest.recv_multipart()), p.Assign):
                break
        moved = time.monotonic() - silent_since
        assert all(flood.poll() is None for flood in floods), "a flood ended before the thread moved"
    finally:
        for flood in floods:
            flood.kill()
            flood.wait()
        dealer.close()
        grid.stop()
    # liveness 0.75 s (tests' heartbeats), and ticks of 0.06 s: a few seconds on a loaded machine
    assert moved < 5, f"the silent executor's thread moved after {moved:.1f} s"
    assert "(silent) silent for" in grid.log("manager.log")


def test_a_thousand_idle_connections_do_not_keep_an_executor_out(tmp_path):
    """A peer opens 1,100 TCP connections to the manager and says nothing on them. With the soft
    limit of descriptors a desktop has by default (1,024) the manager could accept no more
    connections: an executor that came next waited some 20 s, until ZeroMQ dropped idle ones at
    its handshake interval, and a peer that opened them again kept it out again; a grid of 1,000
    desktops hit the same wall with nothing said. Now the manager raises its soft limit to the
    hard one: the executor registers at once."""
    import resource
    import socket
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"this machine's hard limit of open descriptors is {hard}")
    grid = Grid(tmp_path)
    context = zmq.Context()
    idle = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))  # what the manager starts with
    try:
        grid.start_manager()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(grid.endpoint)
        sock.send_multipart(p.encode(p.Register(name="first", host="h", user="u", threads=1)))
        _answer(sock, p.Welcome)  # the manager is up
        sock.close()

        def held_by_manager() -> int:
            return len(os.listdir(f"/proc/{grid.manager.pid}/fd"))
        for _ in range(22):  # fifty at a time: past the listen backlog (100) a SYN is dropped, and tried a second later
            idle.extend(socket.create_connection(("127.0.0.1", grid.port)) for _ in range(50))
            taken_by = time.monotonic() + 0.5
            while time.monotonic() < taken_by and held_by_manager() < len(idle):
                time.sleep(0.01)
        # accepted, or not, by now: once the manager holds a descriptor for each, or after a second
        accepted_by = time.monotonic() + 1
        while time.monotonic() < accepted_by and held_by_manager() < len(idle):
            time.sleep(0.02)
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(grid.endpoint)
        started = time.monotonic()
        sock.send_multipart(p.encode(p.Register(name="late", host="h", user="u", threads=1)))
        _answer(sock, p.Welcome, seconds=60)
        waited = time.monotonic() - started
        sock.close()
    finally:
        for conn in idle:
            conn.close()
        context.term()
        grid.stop()
    assert waited < 5, f"the executor waited {waited:.1f} s to be welcomed"
    assert "open descriptors: at most" in grid.log("manager.log")


def test_an_ack_or_a_register_with_millions_of_entries_is_refused_unread(tmp_path):
    """A registered client acknowledges 20 million thread ids at once, and a registered executor
    registers again with 20 million capabilities. Neither list had a bound in the protocol's
    types, so the manager decoded them whole: 880 MB and 2-5 s of its loop for the ack, 250 MB
    for the register. Now the decoder refuses them from the list's length (at most
    protocol.MAX_BATCH thread ids, 16 × MAX_CAPABILITIES names), logged as malformed.

    The two peers are this test's own sockets, silent while it builds and sends the 100 MB (over
    0.8 s with the machine loaded: the manager rightly declared both dead, refused the messages
    as from unregistered peers and the thread was never assigned); the manager's liveness is
    10 s here (nothing here is about liveness), and the register is built before the grid."""
    count = 20_000_000
    ids = b"\xdd" + count.to_bytes(4, "big") + b"\xcd\x03\xe8" * count  # 1000, 20 million times
    register = msgpack.packb({"name": "ex", "host": "h", "user": "u", "threads": 1, "capabilities": []})[:-1] \
        + b"\xdd" + count.to_bytes(4, "big") + b"\xa1a" * count
    grid = Grid(tmp_path)
    dealer = _Dealers(grid.endpoint)
    try:
        manager = grid.start_manager("--heartbeat-liveness", "40")
        executor, client = dealer(), dealer()
        executor.send_multipart(p.encode(p.Register(name="ex", host="h", user="u", threads=1)))
        _answer(executor, p.Welcome)
        client.send_multipart(p.encode(p.OpenApplication("app", "u", client="app")))
        app_id = _answer(client, p.ApplicationOpened, beat=True, also=(executor,)).application_id
        client.send_multipart([p.PROTOCOL_VERSION, b"ack",
                               msgpack.packb({"application_id": app_id, "thread_ids": []})[:-1] + ids])
        executor.send_multipart([p.PROTOCOL_VERSION, b"register", register])
        deadline = time.monotonic() + 30
        while (dropped := grid.log("manager.log").count("dropped a malformed message")) < 2:
            assert time.monotonic() < deadline, f"{dropped} of the 2 messages dropped as malformed within 30 s"
            for sock in dealer.sockets:
                sock.send_multipart(p.encode(p.Heartbeat()))
            time.sleep(0.1)
        # the grid goes on
        client.send_multipart(p.encode(p.Submit(app_id, [p.ThreadSpec(1, "http://a.test/")])))
        (job,) = _answer(executor, p.Assign, beat=True, also=(client,)).jobs
        executor.send_multipart(p.encode(p.Results([p.AttemptResult(job.attempt_id, p.PageResult(job.url, status=200),
                                                                    0.01)])))
        assert not _answer(client, p.ThreadDone, beat=True, also=(executor,)).threads[0].failed
        peak = _peak_rss_mb(manager.pid)
    finally:
        dealer.close()
        grid.stop()
    log = grid.log("manager.log")
    assert f"ack.thread_ids: Expected `array` of length <= {p.MAX_BATCH}" in log
    assert "register.capabilities: Expected `array` of length <= 1024" in log
    assert peak < 500, f"the manager peaked at {peak:.0f} MB"


def test_an_instruction_nested_hundreds_deep_is_refused_saying_so(tmp_path):
    """Clients open applications whose instructions nest 940 to 1,000 levels deep. Up to about
    970 the manager's decoder took them, then failed to encode them again to weigh them: a
    traceback in the log for each such message ("handling open from peer … failed"), no strike,
    and no answer to the client. Now an instruction nested more than 64 levels is refused (final,
    saying so) in an ``open`` and in a ``submit``; deeper ones are dropped as malformed by the
    decoder, as before; an honest application's thread still runs."""
    grid = Grid(tmp_path)
    dealer = _Dealers(grid.endpoint)
    try:
        grid.start_manager()
        executor = dealer()
        executor.send_multipart(p.encode(p.Register(name="ex", host="h", user="u", threads=2)))
        _answer(executor, p.Welcome)
        answers = []
        for depth in range(940, 1001, 2):
            hostile = dealer()
            hostile.send_multipart([p.PROTOCOL_VERSION, b"open", b"\x83\xa4name\xa1x\xa4user\xa1u\xabinstruction"
                                    + b"\x81\xa1a" * depth + b"\xc0"])
            # then a control of an application that does not exist, on the same connection: the
            # manager answers a peer's messages in order, so whatever comes before that refusal
            # (which names the id asked for) is the answer to the nested open, and nothing means
            # the open was dropped as malformed
            marker = f"marker-{depth}"
            hostile.send_multipart(p.encode(p.Control(marker, "pause", user="u")))
            deadline = time.monotonic() + 30
            while True:
                assert time.monotonic() < deadline, f"no answer to a control after an open nested {depth} deep"
                executor.send_multipart(p.encode(p.Heartbeat()))  # (it stays registered meanwhile)
                if hostile.poll(100):
                    answer = p.decode(hostile.recv_multipart())
                    if isinstance(answer, p.Refuse) and f"no application {marker!r}" in answer.reason:
                        break
                    answers.append(answer)
        assert answers and all(isinstance(a, p.Refuse) and a.final and "nested more than 64 levels deep" in a.reason
                               for a in answers), answers
        client = dealer()
        client.send_multipart(p.encode(p.OpenApplication("app", "u", client="app")))
        app_id = _answer(client, p.ApplicationOpened, beat=True, also=(executor,)).application_id
        client.send_multipart(p.encode(p.Submit(app_id, [p.ThreadSpec(1, "http://a.test/", instruction={"a": [[[[]]]] * 2})],
                                                instruction={"x": [[{"y": [[]]}]] * 20})))  # shallow: taken
        client.send_multipart([p.PROTOCOL_VERSION, b"submit", msgpack.packb({"application_id": app_id,
                               "threads": [{"thread_id": 2, "url": "http://a.test/2"}]}).replace(b"\x82", b"\x83", 1)
                               + b"\xabinstruction" + b"\x81\xa1a" * 100 + b"\xc0"])
        refused = _answer(client, p.Refuse, beat=True, also=(executor,))
        assert refused.final and "submit.instruction: nested more than 64 levels deep" in refused.reason, refused
        (job,) = _answer(executor, p.Assign, beat=True, also=(client,)).jobs
        assert job.thread_id == 1
    finally:
        dealer.close()
        grid.stop()
    log = grid.log("manager.log")
    assert "Traceback" not in log and "failed" not in log, log[-3000:]
