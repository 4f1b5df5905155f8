"""Hostile input: random frames at the protocol decoder, garbage and floods at a running manager,
values that do not fit the manager's tables, and pages full of quotes, NUL characters and
10,000-character values at the crawl store. Every test here fails without its mechanism
(checked decoding, check_limits, PeerGuard, MAXMSGSIZE, parameterised SQL)."""

from __future__ import annotations

import functools
import math
import time

import msgpack
import pytest
import requests
import sqlalchemy as sa
import zmq
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from zmq.utils.monitor import recv_monitor_message

from gridcrawl import protocol as p
from gridcrawl.db import open_database
from gridcrawl.manager.server import PeerGuard, check_limits, is_loopback_endpoint
from gridcrawl.urls import InvalidURL, canonical_url, fingerprint
from grid import Grid, free_port, wait_for
from sites import generate_site, reachable

# ----------------------------------------------------------------------------------------------
# The decoder: random frames only ever raise ProtocolError

_ints = st.integers(min_value=-(2 ** 63), max_value=2 ** 64 - 1)  # what msgpack can carry
_scalars = st.one_of(st.none(), st.booleans(), _ints,
                     st.floats(allow_nan=True), st.text(max_size=20), st.binary(max_size=20))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=10), _ints), inner, max_size=4)),
    max_leaves=12)
_field_names = st.sampled_from(sorted({f for cls in p.MESSAGES.values() for f in cls.__struct_fields__}
                                      | {"url", "page", "threads", "figures", "x"}))
_bodies = st.one_of(
    st.binary(max_size=64),  # not msgpack, or msgpack of anything
    st.builds(lambda d: msgpack.packb(d, use_bin_type=True),
              st.dictionaries(_field_names, _values, max_size=8)),  # maps with real field names
    st.builds(lambda v: msgpack.packb(v, use_bin_type=True), _values))
_frames = st.one_of(
    st.lists(st.binary(max_size=32), max_size=5),  # any frames at all
    st.tuples(st.sampled_from([p.PROTOCOL_VERSION, b"GC2", b""]),
              st.one_of(st.sampled_from(sorted(p.MESSAGES)), st.binary(max_size=12)), _bodies).map(list))


@hsettings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_frames)
def test_decoder_raises_only_protocol_error_on_random_frames(frames):
    try:
        message = p.decode(frames)
    except p.ProtocolError:
        return
    # what decodes is a well-formed message of a known type
    assert type(message) in p.MESSAGES.values()
    assert p.decode(p.encode(message)) == message


@hsettings(max_examples=100, deadline=None)
@given(st.dictionaries(_field_names, _values, max_size=8))
def test_check_limits_never_raises_on_decodable_messages(body):
    for kind in (b"register", b"open", b"submit", b"result", b"heartbeat"):
        try:
            message = p.decode([p.PROTOCOL_VERSION, kind, msgpack.packb(body, use_bin_type=True)])
        except p.ProtocolError:
            continue
        result = check_limits(message)
        assert result is None or isinstance(result, str)


# ----------------------------------------------------------------------------------------------
# Values that do not fit the manager's tables are refused before they reach the core

def _register(**kw) -> p.Register:
    return p.Register(**{"name": "ex", "host": "h", "user": "u", "threads": 4, **kw})


@pytest.mark.parametrize("message, needle", [
    (p.Submit("a" * 32, [p.ThreadSpec(1, "http://a.test/x\x00y")]), "control characters"),
    (p.Submit("a" * 32, [p.ThreadSpec(1, "http://a.test/" + "a" * 10_000)]), "longer than"),
    (p.Submit("a" * 32, [p.ThreadSpec(2 ** 63, "http://a.test/")]), "out of range"),
    (p.Submit("a" * 32, [p.ThreadSpec(1, "http://a.test/", depth=2 ** 40)]), "out of range"),
    (p.Submit("a" * 32, [p.ThreadSpec(i, "http://a.test/") for i in range(10_001)]), "10000"),
    (_register(name="x" * 10_000), "longer than"),
    (_register(user="al\x00ice"), "control characters"),
    (_register(executor_id="'; DROP TABLE executor; --"), "id must be"),
    (_register(threads=10 ** 9), "out of range"),
    (_register(cpu_max=math.inf), "not a finite number"),
    (p.OpenApplication("crawl", "u", application_id="x" * 37), "id must be"),
    (p.Heartbeat({"cpu_usage": math.nan}), "not a finite number"),
    (p.Heartbeat({"x" * 1_000_000: 1}), "figure's name is not a text of at most 32 characters"),
    (p.Heartbeat({7: 1}), "figure's name is not a text"),
    (p.Result(1, p.PageResult("http://a.test/", error_kind="k" * 10_000)), "longer than"),
    (p.Results([p.AttemptResult(1, p.PageResult("http://a.test/"), math.nan)]), "not a finite number"),
    (p.Results([p.AttemptResult(1, p.PageResult("http://a.test/"), -1.0)]), "ran is out of range"),
    (p.Results([p.AttemptResult(1, p.PageResult("http://a.test/")), p.AttemptResult(2 ** 63, p.PageResult("u"))]),
     "attempt 9223372036854775808: attempt_id is out of range"),
    (p.Started([1, 2], [0.5]), "one figure per attempt id"),
    (p.Started([1], [math.inf]), "not a finite number"),
    (p.Started([1], [-0.5]), "running seconds is out of range"),
    (p.Bye("x" * 256), "reason is longer than 255"),
    (p.Bye("leaving\x1b[2J"), "reason contains control characters"),
])
def test_check_limits_refuses_what_does_not_fit(message, needle):
    reason = check_limits(message)
    assert reason is not None and needle in reason


def test_check_limits_accepts_ordinary_messages():
    assert check_limits(_register(executor_id="0123456789abcdef0123456789abcdef")) is None
    assert check_limits(p.Submit("a" * 32, [p.ThreadSpec(1, "http://a.test/it's%20\"quoted\"")])) is None
    assert check_limits(p.Heartbeat({"cpu_usage": 12.5, "mem_usage": 2 ** 40})) is None
    assert check_limits(p.Started([1, 2], [0.25, 3.5])) is None and check_limits(p.Started([1])) is None
    assert check_limits(p.Bye("client stopping")) is None and check_limits(p.Bye()) is None
    assert check_limits(p.Result(3, p.PageResult("http://a.test/", title="\x00" * 10, content="x\x00y"))) is None


def test_an_instruction_over_its_bound_is_counted_only_up_to_it():
    """The manager estimates what an instruction holds (64 bytes a value besides its bytes) to
    refuse one over 4 MiB (a thread's) or 16 MiB (an application's): it walked all of it first,
    3.9 s of the loop for an ``open`` of 10 million empty maps. With a limit, the count stops
    once past it."""
    from gridcrawl.manager.core import MAX_THREAD_INSTRUCTION, NODE_BYTES, _instruction_bytes
    maps = {"items": [[{}] * 10 for _ in range(200_000)]}
    whole = _instruction_bytes(maps)
    assert whole > 2_200_000 * NODE_BYTES
    counted = _instruction_bytes(maps, MAX_THREAD_INSTRUCTION)
    assert MAX_THREAD_INSTRUCTION < counted < whole / 4
    small = {"scope": ["a.test", "b.test"], "content": False}
    assert _instruction_bytes(small, MAX_THREAD_INSTRUCTION) == _instruction_bytes(small) < 1000


# ----------------------------------------------------------------------------------------------
# Per-peer limits (pure: times passed in)

def test_peer_guard_blocks_a_peer_after_too_many_strikes_and_forgets_it_later():
    guard = PeerGuard(max_strikes=5, window=10.0, block_seconds=30.0)
    assert not any(guard.strike(b"bad", 100.0 + i * 0.1) for i in range(4))
    assert guard.strike(b"bad", 100.5)  # the 5th strike within the window blocks
    assert not guard.admit(b"bad", 101.0) and guard.admit(b"good", 101.0)
    assert not guard.admit(b"bad", 129.0)
    guard.prune(131.0)
    assert guard.admit(b"bad", 131.0)


def test_peer_guard_strikes_spread_over_time_do_not_block():
    guard = PeerGuard(max_strikes=3, window=1.0)
    assert not any(guard.strike(b"slow", 100.0 + 2 * i) for i in range(20))


def test_peer_guard_drops_a_flood_beyond_its_rate():
    guard = PeerGuard(rate=100.0, burst=200.0, max_strikes=1000)
    admitted = sum(guard.admit(b"flood", 50.0) for _ in range(1000))  # all at one instant
    assert admitted == 200
    assert guard.admit(b"other", 50.0)
    assert guard.admit(b"flood", 51.0)  # one second later the bucket has refilled


@pytest.mark.parametrize("endpoint, loopback", [
    ("tcp://127.0.0.1:9000", True), ("tcp://localhost:9000", True), ("tcp://[::1]:9000", True),
    ("ipc:///tmp/gc", True), ("tcp://*:9000", False), ("tcp://0.0.0.0:9000", False), ("tcp://10.1.2.3:9000", False)])
def test_loopback_endpoints(endpoint, loopback):
    assert is_loopback_endpoint(endpoint) is loopback


# ----------------------------------------------------------------------------------------------
# Garbage, oversized messages and a flood at a running manager: a crawl still completes

def _garbage() -> list[list[bytes]]:
    body = msgpack.packb({"name": "x", "host": "h", "user": "u", "threads": 2}, use_bin_type=True)
    return [
        [b"\x00\xff" * 10],                                            # one frame of noise
        [b"GC1"],                                                      # too few frames
        [b"GC9", b"register", body],                                   # another protocol version
        [b"GC1", b"launch-missiles", body],                            # unknown type
        [b"GC1", b"register", b"\xc1\xc1\xc1"],                        # not msgpack
        [b"GC1", b"register", msgpack.packb([1, 2, 3])],               # not a map
        [b"GC1", b"register", msgpack.packb({"name": 1})],             # wrong field types
        [b"GC1", b"submit", msgpack.packb({"application_id": "x", "threads": [{"thread_id": 1, "url": "u\x00"}]})],
        [b"GC1", b"result", msgpack.packb({"attempt_id": 1, "page": {"url": "u", "error_kind": "k" * 5000}})],
        [b"GC1", b"welcome", msgpack.packb({"executor_id": "e", "heartbeat_interval": 1.0,
                                            "heartbeat_liveness": 3})],  # a message a manager never takes
        [b"GC1", b"heartbeat", msgpack.packb({"figures": {"cpu_usage": float("nan")}})],
    ]


def _stallers() -> list[list[bytes]]:
    """Messages that killed or stalled the manager (sent once each, from a peer of its own)."""
    return [
        # maps nested 1,000 deep (3 KB): msgspec's RecursionError killed the manager
        [b"GC1", b"heartbeat", b"\x81\xa7figures" + b"\x81\xa1a" * 1000 + b"\x00"],
        [b"GC1", b"result", b"\x82\xaaattempt_id\x01\xa4page\x82\xa3url\xa1u\xa7headers"
         + b"\x81\xa1a" * 1000 + b"\x00"],
        # a message only a client takes, of 1,000 broken pages: decoded page by page, a log line each
        [b"GC1", b"done", msgpack.packb({"application_id": "a", "threads": [
            {"thread_id": 1, "executor_id": None, "attempts": 1, "failed": False, "page": "x"}] * 1000})],
    ]


@pytest.mark.e2e
def test_garbage_oversized_messages_and_a_flood_do_not_stop_a_crawl(tmp_path, site_server):
    site = generate_site(40, links_per_page=4, seed=11)
    server = site_server(site)
    grid = Grid(tmp_path)
    context = zmq.Context()
    sockets = []
    try:
        grid.start_manager("--max-message-bytes", "100000")
        grid.start_executor("ex1", "--threads", "4")
        dealer = functools.partial(_dealer, context, sockets)

        # 1. every kind of garbage, many times over, from one peer
        noisy = dealer()
        noisy.connect(grid.endpoint)
        for _ in range(10):
            for frames in _garbage():
                noisy.send_multipart(frames)
        for frames in _stallers():
            staller = dealer()
            staller.connect(grid.endpoint)
            staller.send_multipart(frames)
        # 2. a message over --max-message-bytes: ZeroMQ drops that peer's connection
        big = dealer()
        monitor = big.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        big.connect(grid.endpoint)
        big.send_multipart([p.PROTOCOL_VERSION, b"heartbeat", b"\x00" * 200_000])
        events = []
        deadline = time.monotonic() + 20
        while zmq.EVENT_DISCONNECTED not in events and time.monotonic() < deadline:
            if monitor.poll(200):
                events.append(recv_monitor_message(monitor)["event"])
        assert zmq.EVENT_DISCONNECTED in events, f"the oversized sender was not disconnected: {events}"
        big.disable_monitor()
        monitor.close(linger=0)
        # 3. a flood of well-formed heartbeats from a peer that never registered
        flood = dealer()
        flood.connect(grid.endpoint)
        beat = p.encode(p.Heartbeat())
        for _ in range(30_000):
            flood.send_multipart(beat)

        # 4. a storm of fresh connections, one malformed message each (a new peer each time)
        for _ in range(100):
            storm = dealer()
            storm.connect(grid.endpoint)
            storm.send_multipart([b"GC1", b"register", b"\xc1"])

        client = grid.start_client(server.url("/"))
        assert client.wait(timeout=120) == 0, grid.log("client.log")
        assert grid.manager.poll() is None, "the manager died"
    finally:
        for sock in sockets:
            sock.close(linger=0)
        context.term()
        grid.stop()
    docs = {row[0] for row in grid.query("crawl", "SELECT url FROM document")}
    assert docs == {canonical_url(server.url(path)) for path in reachable(site)}
    log = grid.log("manager.log")
    assert "dropped a malformed message" in log
    assert "nested too deeply" in log and "does not accept 'done'" in log
    assert "the thread counts as failed" not in log  # the done's pages were never decoded
    assert "blocked for" in log  # the noisy and the flooding peers were blocked
    # the storm's 100 peers: the log says so within its budget, not once a connection
    assert log.count("dropped a malformed message") <= 20


def _raw_executor(context: zmq.Context, grid: Grid, name: str, threads: int) -> zmq.Socket:
    """Start ``grid``'s manager and register a DEALER socket with it as executor ``name`` (a peer
    this test drives by hand); return the socket, welcomed."""
    grid.start_manager()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(grid.endpoint)
    sock.send_multipart(p.encode(p.Register(name=name, host="h", user="u", threads=threads)))
    _answer(sock, p.Welcome)
    return sock


def _dealer(context: zmq.Context, sockets: list, endpoint: str | None = None) -> zmq.Socket:
    """A DEALER socket of ``context`` (linger 0), put in ``sockets`` for the test to close, and
    connected to ``endpoint`` when given."""
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if endpoint is not None:
        sock.connect(endpoint)
    sockets.append(sock)
    return sock


def _answer(sock: zmq.Socket, *kinds, beat: bool = False) -> p.Message:
    """The next message of one of ``kinds`` on ``sock`` (heartbeats skipped), within 60 s (a
    client process started on a loaded two-core machine took more than 10 s to submit); with
    ``beat``, the socket heartbeats meanwhile (a registered executor waiting for work: silent,
    it was declared dead before a slow client's first thread came)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if beat:
            sock.send_multipart(p.encode(p.Heartbeat()))
        if sock.poll(200):
            message = p.decode(sock.recv_multipart())
            if isinstance(message, kinds):
                return message
    raise AssertionError(f"no {kinds} within 60 s")


@pytest.mark.e2e
def test_an_executors_nan_page_is_run_again_by_another_executor_and_the_crawl_goes_on(tmp_path, site_server):
    """A hostile executor answers the seed with a page whose ``fetch_seconds`` is NaN (and says
    bye). The manager relayed it and the client stored it: SQLite keeps NaN as NULL, the NOT NULL
    column refused it, and every run of the client died with "the crawl database failed" as the
    manager delivered the page again. Then the page did not decode at the client, and the seed
    failed saying why (the client still fails such a page: test_protocol). Now the manager decodes
    an executor's first pages in full: the attempt is taken back (``unreadable``) and the seed
    runs on an honest executor; the crawl completes."""
    site = generate_site(3, links_per_page=2, seed=4)
    server = site_server(site)
    grid = Grid(tmp_path)
    context = zmq.Context()
    liar = _raw_executor(context, grid, "liar", 64)
    try:
        client = grid.start_client(server.url("/"), "--no-sitemaps")
        (job, *_) = _answer(liar, p.Assign, beat=True).jobs
        page = p.PageResult(url=job.url, final_url=job.url, status=200, content="<html></html>",
                            fetch_seconds=float("nan"))
        liar.send_multipart(p.encode(p.Result(job.attempt_id, page)))
        liar.send_multipart(p.encode(p.Bye("done lying")))
        grid.start_executor("honest")
        assert client.wait(timeout=60) == 0, grid.log("client.log")
    finally:
        liar.close(linger=0)
        context.term()
        grid.stop()
    assert "the crawl database failed" not in grid.log("client.log")
    assert "fetch_seconds" in grid.log("manager.log")
    assert grid.query("manager", "SELECT outcome FROM attempt WHERE attempt_id = ?", job.attempt_id) == [("unreadable",)]
    docs = {row[0] for row in grid.query("crawl", "SELECT url FROM document")}
    assert docs == {canonical_url(server.url(path)) for path in reachable(site)}


@pytest.mark.e2e
def test_a_late_result_of_an_attempt_the_previous_manager_took_back_is_fenced_not_struck(tmp_path, site_server):
    """An executor paused across a manager restart sends, when it wakes, the result of an attempt
    the previous manager had already taken back (declared it dead: outcome ``lost``). The new
    manager did not know that attempt: it logged the honest desktop as hostile, struck it and,
    after a few such results, blocked it for 60 s. Now it fences the result, as the previous
    manager would have."""
    server = site_server(generate_site(3, links_per_page=2, seed=4))
    grid = Grid(tmp_path)
    context = zmq.Context()
    paused = _raw_executor(context, grid, "paused", 4)
    try:
        grid.start_client(server.url("/"), "--no-sitemaps")
        (job, *_) = _answer(paused, p.Assign, beat=True).jobs
        # no heartbeat from it: declared dead, its attempt taken back (recorded as lost)
        wait_for(lambda: grid.query("manager", "SELECT outcome FROM attempt WHERE attempt_id = ?", job.attempt_id)
                 == [("lost",)], 30, 0.05, "the attempt taken back")
        grid.manager.terminate()
        assert grid.manager.wait(30) == 0
        grid.start_manager()
        wait_for(lambda: grid.log("manager.log").count("manager listening") >= 2, 30, 0.05, "the manager back")
        page = p.PageResult(url=job.url, final_url=job.url, status=200, content="<html></html>")
        paused.send_multipart(p.encode(p.Result(job.attempt_id, page)))  # it wakes and sends its result
        wait_for(lambda: grid.query("manager", "SELECT outcome FROM attempt WHERE attempt_id = ?", job.attempt_id)
                 == [("fenced",)], 30, 0.05, "the late result fenced")
    finally:
        paused.close(linger=0)
        context.term()
        grid.stop()
    log = grid.log("manager.log")
    assert "hostile" not in log and "blocked for" not in log, log[-3000:]


@pytest.mark.e2e
def test_executors_and_crawls_that_come_and_go_without_end_leave_the_manager_bounded(tmp_path):
    grid = Grid(tmp_path)
    http = f"http://127.0.0.1:{free_port()}"
    context = zmq.Context()
    sockets = []

    dealer = functools.partial(_dealer, context, sockets, grid.endpoint)

    def snapshot() -> dict:
        return requests.get(http + "/api/snapshot", timeout=5).json()

    def up() -> bool:
        try:
            return snapshot()["time"] is not None
        except requests.RequestException:
            return False

    env = {"GRIDCRAWL_KEEP_DEPARTED": "5"}
    try:
        grid.start_manager("--http", http.removeprefix("http://"), env=env)
        wait_for(up, 60, message="the manager's dashboard answering")
        # one connection opens and closes 40 applications, one after another
        client = dealer()
        for i in range(40):
            client.send_multipart(p.encode(p.OpenApplication(f"crawl-{i}", "u", client="c")))
            opened = _answer(client, p.ApplicationOpened, p.Refuse)
            assert isinstance(opened, p.ApplicationOpened), opened
            client.send_multipart(p.encode(p.CloseApplication(opened.application_id)))
        # 30 executors register, each on its own connection under its own name, and leave
        ids = []
        for i in range(30):
            sock = dealer()
            sock.send_multipart(p.encode(p.Register(name=f"pod-{i}", host=f"pod-{i}", user="u", threads=2)))
            ids.append(_answer(sock, p.Welcome).executor_id)
            sock.send_multipart(p.encode(p.Bye("scaled down")))
        # the connection's 41st application outlives the liveness of the 40 before it
        client.send_multipart(p.encode(p.OpenApplication("last", "u", client="c")))
        last = _answer(client, p.ApplicationOpened).application_id
        for _ in range(8):  # 2 s: past the manager's 0.75 s liveness (FAST)
            client.send_multipart(p.encode(p.Heartbeat()))
            time.sleep(0.25)
        # accepted, not refused: the snapshot below shows it queued (no executor is connected)
        client.send_multipart(p.encode(p.Submit(last, [p.ThreadSpec(1, "http://127.0.0.1:9/")])))

        def bounded() -> bool:
            snap = snapshot()
            apps = {a["name"]: a for a in snap["applications"]}
            return (snap["summary"]["applications"] == 6 and snap["executors_total"] == 5
                    and apps.get("last", {}).get("threads", {}).get("READY") == 1)
        wait_for(bounded, 10, message="5 departed executors, 5 stopped applications and the running one")
        snap = snapshot()
        assert {e["name"] for e in snap["executors"]} == {f"pod-{i}" for i in range(25, 30)}
        assert "crawl-39" in {a["name"] for a in snap["applications"]}
        assert "crawl-0" not in {a["name"] for a in snap["applications"]}

        # a restarted manager remembers the 5 executors registered last: pod-29 keeps its id,
        # pod-0 gets a new one
        grid.stop()
        wait_for(lambda: "manager stopped" in grid.log("manager.log"), 10, message="the manager stopping")
        grid.start_manager("--http", http.removeprefix("http://"), env=env)
        wait_for(up, 60, message="the restarted manager's dashboard answering")
        for name, old, same in (("pod-29", ids[29], True), ("pod-0", ids[0], False)):
            sock = dealer()
            sock.send_multipart(p.encode(p.Register(name=name, host=name, user="u", threads=2, executor_id=old)))
            assert (_answer(sock, p.Welcome).executor_id == old) is same, name
    finally:
        for sock in sockets:
            sock.close(linger=0)
        context.term()
        grid.stop()
    rows = grid.query("manager", "SELECT COUNT(*) FROM executor")
    assert rows[0][0] == 31  # every executor stays in the records: 30, and pod-0 again under a new id


@pytest.mark.e2e
def test_a_client_opening_applications_in_a_loop_is_refused_and_the_user_told_which_to_cancel(tmp_path, site_server):
    """One connection opens application after application (each new one detaches the last,
    which stays open): the manager holds at most max_applications_per_user of them, refuses
    the rest while none has been without a client past the liveness (10 s here), and blocks
    the peer that keeps trying; the real client of the same user is refused with one line
    naming them, and crawls once one is cancelled. (That a silent one makes room once past
    the liveness: tests/test_core.py.)"""
    import getpass
    import subprocess
    import sys
    site = generate_site(20, links_per_page=3, seed=23)
    server = site_server(site)
    grid = Grid(tmp_path)
    user = getpass.getuser()  # whom a client without --user claims to be on an open grid
    context = zmq.Context()
    hostile = context.socket(zmq.DEALER)
    hostile.setsockopt(zmq.LINGER, 0)
    env = {"GRIDCRAWL_MAX_APPLICATIONS_PER_USER": "3"}
    try:
        grid.start_manager("--heartbeat-liveness", "40", env=env)
        grid.start_executor("ex1")
        hostile.connect(grid.endpoint)
        opened, refused = [], []
        for i in range(23):
            hostile.send_multipart(p.encode(p.OpenApplication(f"loop-{i}", user, client="hostile")))
            answer = _answer(hostile, p.ApplicationOpened, p.Refuse)
            (opened if isinstance(answer, p.ApplicationOpened) else refused).append(answer)
        assert len(opened) == 3 and len(refused) == 20
        # blocked after peer_max_strikes (20) refusals: its next open is not even answered
        hostile.send_multipart(p.encode(p.OpenApplication("loop-23", user, client="hostile")))
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            if hostile.poll(100):
                assert not isinstance(p.decode(hostile.recv_multipart()), (p.ApplicationOpened, p.Refuse))
        assert f"user {user} has 3 applications open at the manager" in refused[0].reason
        # the user's real client is refused with one line naming the open applications
        client = grid.start_client(server.url("/"), env=env)
        assert client.wait(timeout=60) == 2
        lines = [line for line in grid.log("client.log").splitlines() if "refused" in line]
        assert lines and "Traceback" not in grid.log("client.log")
        assert f"the manager refused the application: user {user} has 3 applications open" in lines[-1]
        assert opened[0].application_id[:8] in lines[-1]
        assert f"gridcrawl-client --manager {grid.endpoint} cancel ID" in lines[-1]  # the command, whole
        # the user cancels the oldest with the client's command, and crawls
        done = subprocess.run([sys.executable, "-m", "gridcrawl.client", "--manager", grid.endpoint,
                               "cancel", opened[0].application_id[:8]], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        client = grid.start_client(server.url("/"), env=env)
        assert client.wait(timeout=120) == 0, grid.log("client.log")
        assert grid.query("crawl", "SELECT COUNT(*) FROM document") == [(len(reachable(site)),)]
    finally:
        hostile.close(linger=0)
        context.term()
        grid.stop()
    states = dict(grid.query("manager", "SELECT application_name, state FROM application"))
    assert len(states) == 4 and "loop-3" not in states  # 3 of the loop's, and the real crawl


# ----------------------------------------------------------------------------------------------
# Quotes, NUL characters and 10,000-character values in the crawl store

HOSTILE_TEXT = "it's \"quoted\"; DROP TABLE document; -- \\ \x00 nul " + "é" * 3 + "x" * 10_000


def test_canonical_url_stores_or_rejects_hostile_urls_cleanly():
    quoted = canonical_url("http://a.test/it's \"q\"?a='1';--")
    assert "'" in quoted or "%27" in quoted
    assert "\x00" not in canonical_url("http://a.test/x\x00y")
    for bad in ("http://a\x00b.test/", "http://a.test/" + "a" * 10_000, "http://" + "a" * 10_000 + ".test/"):
        with pytest.raises(InvalidURL):
            canonical_url(bad)


def test_store_keeps_hostile_pages_or_rejects_them_cleanly(db_url):
    from gridcrawl.client.store import CrawlStore, Outcome
    store = CrawlStore(open_database(db_url))
    seed = canonical_url("http://a.test/it's \"quoted\"")
    store.add_seeds([seed])
    scope = store.scope([seed], [], -1)
    (pending,) = store.claim(10)
    links = [[canonical_url("http://a.test/p'1\""), HOSTILE_TEXT], ["http://a.test/" + "b" * 10_000, "long"],
             [canonical_url("http://a.test/x\x00y"), "nul"]]
    page = p.PageResult(url=pending.url, final_url=pending.url, status=200, content_type="text/html",
                        title=HOSTILE_TEXT, content=HOSTILE_TEXT, links=links, error=None)
    counts = store.apply([Outcome(pending, page, "ex'1", 1, False)], scope)
    assert counts["documents"] == 1
    with store.engine.connect() as conn:
        doc = conn.execute(sa.text("SELECT url, title, content FROM document")).one()
        queued = set(conn.execute(sa.text("SELECT url FROM to_visit_url")).scalars())
    assert doc.url == seed
    # text is kept as it came, or with its NUL characters removed: never truncated or corrupted
    assert doc.title in (HOSTILE_TEXT, HOSTILE_TEXT.replace("\x00", ""))
    assert doc.content in (HOSTILE_TEXT, HOSTILE_TEXT.replace("\x00", ""))
    assert canonical_url("http://a.test/p'1\"") in queued
    assert not any(len(u) > 2083 for u in queued)
    assert fingerprint(seed) == fingerprint(doc.url)


def test_peers_that_claim_the_routing_ids_the_manager_hands_out_next_cannot_abort_it(tmp_path):
    """libzmq 4.3 numbers a ROUTER's anonymous peers from an unseeded ``rand()``: every process
    hands out ``00 6b8b4567`` first, then counts up. A real manager, peers that give themselves
    the next 200 of those ids, then anonymous connections: libzmq handed out an id in use and
    aborted the manager (``Assertion failed: ok (src/socket_base.cpp:2113)``). The manager seeds
    ``rand()`` from os.urandom now (transport.seed_routing_ids), and lives."""
    grid = Grid(tmp_path)
    context = zmq.Context()
    sockets = []
    try:
        manager = grid.start_manager()
        wait_for(lambda: "manager listening" in grid.log("manager.log"), 30, 0.05, "the manager listening")
        for k in range(200):  # the ids an unseeded manager would hand out next, claimed first
            sock = context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.ROUTING_ID, b"\x00" + (0x6B8B4567 + k).to_bytes(4, "big"))
            sock.connect(grid.endpoint)
            sock.send_multipart(p.encode(p.Heartbeat()))
            sockets.append(sock)
        time.sleep(0.5)
        for _ in range(50):  # anonymous peers: the manager numbers them
            sock = context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(grid.endpoint)
            sock.send_multipart(p.encode(p.Heartbeat()))
            sockets.append(sock)
        time.sleep(1.0)
        assert manager.poll() is None, grid.log("manager.log")[-2000:]
        probe = sockets[-1]
        probe.send_multipart(p.encode(p.Register(name="late", host="h", user="u", threads=1)))
        assert probe.poll(10_000), "the manager no longer answers"
    finally:
        for sock in sockets:
            sock.close()
        context.term()
        grid.stop()


def test_a_peer_that_never_logged_in_is_blocked_after_too_many_refusals_and_a_forgotten_one_comes_back(tmp_path):
    """A peer that never logged in sent submits, heartbeats, acks, started and availability
    messages: the manager refused each one (324,332 refusals at 13,000/s), never blocked it and
    logged nothing, although a peer refused 20 times within 10 s is to be blocked
    (docs/security.md, "Floods"). Refusing a peer the core does not know is a strike now. A peer
    the manager forgot (an executor declared dead while it was paused) is not hurt: even when
    what its old connection sent gets that connection blocked, it registers again on a new one,
    as gridcrawl.link does at its first refusal, and keeps its executor id."""
    grid = Grid(tmp_path)
    context = zmq.Context()
    sockets = []

    dealer = functools.partial(_dealer, context, sockets, grid.endpoint)

    def heard(sock: zmq.Socket, seconds: float) -> list[p.Message]:
        got, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            if sock.poll(50):
                got.append(p.decode(sock.recv_multipart()))
        return [m for m in got if not isinstance(m, p.Heartbeat)]

    try:
        grid.start_manager("--heartbeat-interval", "0.2", "--heartbeat-liveness", "3")
        stranger = dealer()
        kinds = [p.Submit("a" * 32, [p.ThreadSpec(1, "http://a.test/")]), p.Heartbeat(), p.Ack("a" * 32, [1]),
                 p.Started([1]), p.Availability(True)]
        answers = []
        for i in range(20):
            stranger.send_multipart(p.encode(kinds[i % len(kinds)]))
            answers.append(_answer(stranger, p.Refuse, p.Bye))
            if isinstance(answers[-1], p.Bye):  # (the goodbye of a block may come before the refusal)
                answers.append(_answer(stranger, p.Refuse))
        answers += heard(stranger, 1.0)
        assert sum(isinstance(m, p.Refuse) for m in answers) == 20
        assert [m.reason for m in answers if isinstance(m, p.Bye)] == ["blocked: too many bad messages"]
        for kind in kinds:  # blocked: not even refused
            stranger.send_multipart(p.encode(kind))
        assert heard(stranger, 1.0) == []
        wait_for(lambda: "blocked for 60 s: 20 bad or refused messages" in grid.log("manager.log"), 10, 0.05,
                 "the block logged")

        # an executor declared dead while it was paused, whose old connection then sends 30 messages
        old = dealer()
        old.send_multipart(p.encode(p.Register(name="desk", host="h", user="u", threads=2)))
        welcome = _answer(old, p.Welcome)
        wait_for(lambda: "(desk) silent for" in grid.log("manager.log"), 30, 0.05, "the executor declared dead")
        for _ in range(30):
            old.send_multipart(p.encode(p.Heartbeat()))
        first = _answer(old, p.Refuse)
        assert "register" in first.reason
        new = dealer()  # what gridcrawl.link does at the first refusal: a hello on a new socket
        new.send_multipart(p.encode(p.Register(name="desk", host="h", user="u", threads=2,
                                               executor_id=welcome.executor_id)))
        again = _answer(new, p.Welcome, p.Refuse)
        assert isinstance(again, p.Welcome) and again.executor_id == welcome.executor_id
    finally:
        for sock in sockets:
            sock.close()
        context.term()
        grid.stop()


# ----------------------------------------------------------------------------------------------
# Big messages: read by their length before a login, typed bounds after it

def _next(sock: zmq.Socket, kinds: tuple, seconds: float = 20.0) -> p.Message | None:
    """The next message of one of ``kinds`` on ``sock`` within ``seconds`` (others skipped), or None."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if sock.poll(100):
            message = p.decode(sock.recv_multipart())
            if isinstance(message, kinds):
                return message
    return None


def _empty_maps(prefix: bytes, count: int) -> bytes:
    """``prefix`` (msgpack up to a value) then a msgpack array of ``count`` empty maps: a body of
    about ``count`` bytes that decodes to ``count`` dicts (64 bytes or more each in Python)."""
    return prefix + b"\xdd" + count.to_bytes(4, "big") + b"\x80" * count


def test_big_messages_of_peers_that_never_said_hello_are_refused_unread_and_the_grid_goes_on(tmp_path):
    """A peer that never registered nor opened an application may send up to max_message_bytes
    (64 MiB), and the manager decoded all of it: 60 MiB of empty maps as a heartbeat's figure
    took a manager to 3.7 GB and stood its loop still for over 10 s; 10 MiB as an ``open``'s
    instruction, 880 MB and 4.8 s. Now a body over protocol.MAX_HELLO_BYTES from such a peer is
    refused by its length, unread (a hello is a few KB: a client sends a large instruction with its
    first submit), with a final refusal for a hello; a registered executor's heartbeat whose
    figure is a list, or a started of more attempts than protocol.MAX_BATCH, is refused by the
    decoder from its type or its length before its items are read. An executor's grid thread
    completes meanwhile."""
    grid = Grid(tmp_path)
    context = zmq.Context()
    sockets = []
    dealer = functools.partial(_dealer, context, sockets, grid.endpoint)
    try:
        grid.start_manager()
        good = dealer()
        good.send_multipart(p.encode(p.Register(name="good", host="h", user="u", threads=2)))
        _answer(good, p.Welcome)
        client = dealer()
        client.send_multipart(p.encode(p.OpenApplication("probe", "u", client="probe")))
        app_id = _answer(client, p.ApplicationOpened).application_id

        size = p.MAX_HELLO_BYTES * 4
        refusals = {}
        for kind, body in [
                (b"register", msgpack.packb({"name": "x" * size, "host": "h", "user": "u", "threads": 1})),
                (b"open", _empty_maps(b"\x83\xa4name\xa1x\xa4user\xa1u\xabinstruction\x81\xa1a", size)),
                (b"heartbeat", _empty_maps(b"\x81\xa7figures\x81\xa1a", size)),
                (b"results", msgpack.packb({"results": [{"attempt_id": 7,
                                                          "page": {"url": "u", "title": "x" * size}}]}))]:
            rogue = dealer()
            rogue.send_multipart([p.PROTOCOL_VERSION, kind, body])
            refusals[kind] = _next(rogue, (p.Refuse,))
        for kind in (b"register", b"open"):
            assert refusals[kind] is not None and refusals[kind].final, refusals
            reason = refusals[kind].reason
            assert f"bytes is over the {p.MAX_HELLO_BYTES} bytes a manager reads before a login" in reason
        assert refusals[b"heartbeat"] is not None and "unknown peer" in refusals[b"heartbeat"].reason

        # a registered executor: a figure that is a list, a started of too many attempts
        rogue = dealer()
        rogue.send_multipart(p.encode(p.Register(name="rogue", host="h", user="u", threads=1, accepting=False)))
        _answer(rogue, p.Welcome)
        rogue.send_multipart([p.PROTOCOL_VERSION, b"heartbeat", _empty_maps(b"\x81\xa7figures\x81\xa1a", size)])
        rogue.send_multipart([p.PROTOCOL_VERSION, b"started",
                              b"\x81\xabattempt_ids\xdd" + (p.MAX_BATCH + 1).to_bytes(4, "big")
                              + b"\x01" * (p.MAX_BATCH + 1)])

        # the grid goes on: a thread submitted now is run and reported
        client.send_multipart(p.encode(p.Submit(app_id, [p.ThreadSpec(1, "http://a.test/1")])))
        jobs = _answer(good, p.Assign, beat=True).jobs
        good.send_multipart(p.encode(p.Results([p.AttemptResult(j.attempt_id, p.PageResult(j.url, status=200), 0.01)
                                                for j in jobs])))
        done = _answer(client, p.ThreadDone, beat=True)
        assert [t.thread_id for t in done.threads] == [1] and not done.threads[0].failed
        wait_for(lambda: "length <= 100000" in grid.log("manager.log"), 20, 0.05, "the started refused")
    finally:
        for sock in sockets:
            sock.close()
        context.term()
        grid.stop()
    log = grid.log("manager.log")
    for kind in ("register", "open", "heartbeat", "results"):
        assert f"refused unread a {kind} of " in log, log
    assert "longer than 255" not in log  # the register's name was never decoded
    assert "heartbeat.figures[...]: expected bool | int | float | str | null, got list" in log
