"""The manager's pure core: scheduling, liveness, timeouts, fencing, poison, acknowledgement.

No sockets and no clock: events go in with an explicit ``now`` and the returned actions are
inspected.
"""

from __future__ import annotations

import itertools

import msgspec
import pytest
import sqlalchemy as sa

from gridcrawl import protocol as p
from gridcrawl.settings import Settings
from gridcrawl.states import ApplicationState, IllegalTransition, ThreadState, check_transition
from gridcrawl.manager import events as ev
from gridcrawl.manager.core import ManagerCore, Send
from gridcrawl.manager.dashboard import snapshot
from gridcrawl.manager.recorder import rows

S = Settings(heartbeat_interval=1.0, heartbeat_liveness=3, thread_timeout=10.0, max_attempts=3, prefetch=0)


def make_core(settings=S) -> ManagerCore:
    ids = (f"id{i}" for i in itertools.count(1))
    return ManagerCore(settings, new_id=lambda: next(ids))


def sends(actions, kind=None):
    """The Send actions of ``actions`` (of message type ``kind``); a batched message (assign,
    done) comes out as one Send per item (Job, Outcome), which is how the core emits them."""
    out = []
    for a in actions:
        if isinstance(a, Send) and (kind is None or isinstance(a.message, kind)):
            if a.message.BATCH:
                out += [Send(a.peer, item) for item in getattr(a.message, a.message.BATCH)]
            else:
                out.append(a)
    return out


def recorded(tmp_path):
    """A new SQLite manager database under ``tmp_path`` and ``record(actions)``, which writes the
    events among ``actions`` to it through the manager's real recorder and returns ``actions``."""
    from gridcrawl import models
    from gridcrawl.db import init_schema, open_database
    from gridcrawl.manager.recorder import Recorder

    engine = open_database(f"sqlite:///{tmp_path / 'manager.db'}")
    init_schema(engine, models.manager_metadata, models.manager_meta)

    def record(actions):
        recorder = Recorder(engine)
        recorder.add_all([a for a in actions if not isinstance(a, Send)])
        recorder.flush()
        return actions
    return engine, record


def register(core, peer: bytes, threads: int, now=0.0) -> str:
    actions = core.handle(peer, p.Register(name=peer.decode(), host="h", user="u", threads=threads), now)
    (welcome,) = sends(actions, p.Welcome)
    return welcome.message.executor_id


def open_app(core, peer=b"client", now=0.0, user="u") -> str:
    (opened,) = sends(core.handle(peer, p.OpenApplication("crawl", user), now), p.ApplicationOpened)
    return opened.message.application_id


def submit(core, app, ids, peer=b"client", now=0.0, priority=5):
    specs = [p.ThreadSpec(i, f"http://h{i % 3}.test/{i}", priority=priority) for i in ids]
    return core.handle(peer, p.Submit(app, specs), now)


def assigned(actions):
    return [(a.peer, a.message) for a in sends(actions, p.Assign)]


def test_transition_table_refuses_illegal_moves_naming_the_thread():
    assert check_transition("t1", ThreadState.READY, ThreadState.SCHEDULED) == ThreadState.SCHEDULED
    with pytest.raises(IllegalTransition, match="t1: DEAD -> READY"):
        check_transition("t1", ThreadState.DEAD, ThreadState.READY)
    with pytest.raises(IllegalTransition):
        check_transition("t1", ThreadState.READY, ThreadState.STARTED)


def test_dispatch_goes_to_the_executor_with_most_free_slots():
    core = make_core()
    for host in ("h0.test", "h1.test", "h2.test"):  # hosts that answered before: no first-contact limit
        core.queue.note_answered(host)
    register(core, b"small", 1)
    register(core, b"big", 3)
    app = open_app(core)
    got = assigned(submit(core, app, range(4)))
    peers = [peer for peer, _ in got]
    # big has 3 free, small 1: big, then a tie (2 vs 1 → big), then tie 1/1 round robin.
    assert peers.count(b"big") == 3 and peers.count(b"small") == 1
    assert peers[0] == b"big"


def test_ties_are_broken_round_robin():
    core = make_core()
    for name in (b"a", b"b", b"c"):
        register(core, name, 1)
    app = open_app(core)
    peers = [peer for peer, _ in assigned(submit(core, app, range(3)))]
    assert sorted(peers) == [b"a", b"b", b"c"]


def test_applications_at_one_priority_share_the_grid_thread_by_thread_whatever_each_has_queued():
    """An application that submits 2,000 grid threads at once (as an Alchemi application
    submits all of its threads) used to hold back every application that came after it until
    its last thread had left: the queue served submission order across applications. Start-time
    fair queuing now serves applications of one priority in turn, each in its own order; a
    higher priority still goes first, across applications as within one."""
    core = make_core(S.replace(thread_timeout=100.0))
    hosts = [f"a{i}.test" for i in range(50)] + ["b.test"]
    for host in hosts:
        core.queue.note_answered(host)
    register(core, b"e", 1)
    big, small = open_app(core, peer=b"big", user="ann"), open_app(core, peer=b"small", user="bob")

    def run(specs_big, specs_small) -> list:
        core.handle(b"big", p.Submit(big, specs_big), 0.0)
        core.handle(b"small", p.Submit(small, specs_small), 0.1)
        ex, served, now = core.executors[core.peers[b"e"][1]], [], 1.0
        while ex.running or len(core.queue):
            (attempt_id, t), = ex.running.items()
            served.append((t.application_id, t.thread_id))
            core.handle(b"e", p.Result(attempt_id, p.PageResult(url=t.url, status=200)), now)
            now += 0.01
        return served

    served = run([p.ThreadSpec(i, f"http://a{i % 50}.test/{i}") for i in range(2000)],
                 [p.ThreadSpec(i, f"http://b.test/{i}") for i in range(10)])
    # the big one's first thread was running when the small one submitted; then they take turns
    assert [i for i, (app, _) in enumerate(served) if app == small] == list(range(1, 20, 2))
    assert [tid for app, tid in served if app == big] == list(range(2000))    # each in its own order
    assert [tid for app, tid in served if app == small] == list(range(10))
    served = run([p.ThreadSpec(i, f"http://a{i % 50}.test/{i}", priority=9) for i in range(3000, 3020)],
                 [p.ThreadSpec(i, f"http://b.test/{i}", priority=1) for i in range(20, 25)])
    assert [app for app, _ in served] == [big] * 20 + [small] * 5  # priority before turn
    core.handle(b"big", p.CloseApplication(big), 2.0)  # a stopped application's tag is forgotten
    assert big not in core.queue._apps and small in core.queue._apps


def test_users_share_the_grid_in_turn_not_their_applications():
    """A user running three crawls used to get three turns for every one of a user running one
    (fair queuing was per application). Users now take turns, and a user's applications share
    that user's turn: tags step by the number of the user's applications with threads queued.
    Threads submitted in windows, as gridcrawl's client does, so every push sees all three."""
    core = make_core(S.replace(thread_timeout=100.0))
    for i in range(40):
        core.queue.note_answered(f"h{i}.test")
    register(core, b"e", 1)
    anns = [open_app(core, peer=f"ann{i}".encode(), user="ann") for i in range(3)]
    bob = open_app(core, peer=b"bob", user="bob")
    served, now = [], 1.0
    for window in range(10):  # 4 threads of each application a window, all on their own hosts
        for peer, app in [(f"ann{i}".encode(), a) for i, a in enumerate(anns)] + [(b"bob", bob)]:
            core.handle(peer, p.Submit(app, [p.ThreadSpec(window * 4 + j, f"http://h{(window * 4 + j) % 40}.test/"
                                                              f"{app}/{window * 4 + j}") for j in range(4)]), now)
        ex = core.executors[core.peers[b"e"][1]]
        for _ in range(8):  # half of the window's 16 threads are served before the next window
            (attempt_id, t), = ex.running.items()
            served.append((t.application_id, t.thread_id))
            core.handle(b"e", p.Result(attempt_id, p.PageResult(url=t.url, status=200)), now)
            now += 0.01
    apps = [app for app, _ in served]
    bobs = apps.count(bob)
    assert 36 <= bobs <= 44, apps  # half of the 80 served, give or take a window's rounding
    assert all(abs(apps.count(a) - (80 - bobs) / 3) <= 3 for a in anns), [apps.count(a) for a in anns]
    for a in anns + [bob]:  # every application's threads still leave in submission order
        ids = [tid for app, tid in served if app == a]
        assert ids == sorted(ids)
    core.handle(b"bob", p.CloseApplication(bob), now)
    assert "bob" not in core.queue._sharing and core.queue._sharing["ann"] == 3


def test_priority_first_then_fifo():
    core = make_core()
    app = open_app(core)
    submit(core, app, [1, 2], priority=5)
    submit(core, app, [3], priority=9)
    submit(core, app, [4], priority=5)
    register(core, b"e", 1)
    order = []
    for _ in range(4):
        ex = core.executors[core.peers[b"e"][1]]
        (attempt_id,) = ex.running
        order.append(ex.running[attempt_id].thread_id)
        core.handle(b"e", p.Result(attempt_id, p.PageResult(url="x")), 1.0)
    assert order == [3, 1, 2, 4]


def test_deferred_dispatch_refills_every_freed_executor_once_when_due():
    """The server's loop (defer_dispatch): results mark a dispatch due; dispatch_due refills
    every executor they freed in one dispatch, one assign each, and is a no-op when none is due."""
    core = make_core(S.replace(prefetch=1))
    core.defer_dispatch = True
    for host in ("h0.test", "h1.test", "h2.test"):
        core.queue.note_answered(host)
    register(core, b"a", 1)
    register(core, b"b", 1)
    app = open_app(core)
    first = assigned(submit(core, app, range(12)))  # immediate: a submit is not deferred
    assert sorted(peer for peer, _ in first) == [b"a", b"a", b"b", b"b"]
    assert core.dispatch_due(1.0) == []
    for peer in (b"a", b"b"):
        ex = core.executors[core.peers[peer][1]]
        actions = core.handle(peer, p.Results([p.AttemptResult(attempt_id, p.PageResult(url="x"))
                                               for attempt_id in list(ex.running)]), 1.0)
        assert assigned(actions) == [] and sends(actions, p.ThreadDone)  # delivered, not refilled
    refill = core.dispatch_due(1.0)
    by_peer = {a.peer: a.message for a in refill if isinstance(a, Send) and isinstance(a.message, p.Assign)}
    assert {peer: len(m.jobs) for peer, m in by_peer.items()} == {b"a": 2, b"b": 2}
    assert len([a for a in refill if isinstance(a, Send)]) == 2  # one assign per executor
    assert core.dispatch_due(1.0) == []
    assert len(core.queue) == 12 - 8


def test_no_executor_no_dispatch_and_capacity_respected():
    core = make_core(S.replace(prefetch=2))
    for host in ("h0.test", "h1.test", "h2.test"):
        core.queue.note_answered(host)
    app = open_app(core)
    assert assigned(submit(core, app, range(10))) == []
    actions = core.handle(b"e", p.Register(name="e", host="h", user="u", threads=3), 0.0)
    assert len(assigned(actions)) == 5  # threads + prefetch


def test_a_thread_waits_in_a_buffer_only_while_no_able_executor_has_an_idle_worker():
    """Executor.rank: an idle worker first, then the most free slots. A big executor in its
    slow-start window (8 workers, window 8) has as few free slots as a small one (2 workers,
    capacity 2 + 6): by free slots alone the small one would get threads into its buffer while
    the big one has idle workers."""
    for rounds in range(4):  # the round-robin turn differs with every dispatch
        core = make_core(S.replace(prefetch=6, start_window=8))
        for host in ("h0.test", "h1.test", "h2.test"):
            core.queue.note_answered(host)
        register(core, b"small", 2)
        register(core, b"big", 8)
        app = open_app(core)
        for _ in range(rounds):
            core.dispatch(0.0)
        got = [peer for peer, _ in assigned(submit(core, app, range(10)))]
        assert got.count(b"small") == 2 and got.count(b"big") == 8, got


def test_work_spreads_by_idle_workers_not_by_the_slow_start_windows_results_have_grown():
    """Executor.rank: two executors of 8 workers; one has returned results (its window grew from
    8 to 14, free slots 14), the other has not (window 8). New threads go to the one with more
    idle workers, not to the one with more free slots: the work spreads (gridcrawl run's 4
    executors on one host once gave 198, 3, 179, 149 threads)."""
    core = make_core(S.replace(prefetch=6, start_window=8))
    for host in ("h0.test", "h1.test", "h2.test"):
        core.queue.note_answered(host)
    register(core, b"first", 8)
    app = open_app(core)
    ((_, job),) = assigned(submit(core, app, [0]))
    first = core.executors[core.peers[b"first"][1]]
    first.window = 14  # as after six results returned
    register(core, b"later", 8)
    got = [peer for peer, _ in assigned(submit(core, app, range(1, 7)))]
    del job
    # six more threads: three each (by free slots first, "first" took five of them)
    assert sorted(got) == [b"first"] * 3 + [b"later"] * 3, got



def test_one_thread_at_a_time_goes_to_each_idle_executor_in_turn():
    """With a crawl delay one thread is in flight at a time, so every executor has all its
    workers idle at each dispatch: they take turns, whatever their windows. (Ranked by free slots
    after idle workers, the executor whose window the results had grown took all 529 threads of
    a `gridcrawl run --download-delay 0.05` and the other none.)"""
    core = make_core(S.replace(prefetch=6, start_window=8))
    core.queue.note_answered("h0.test")
    register(core, b"a", 8)
    register(core, b"b", 8)
    app = open_app(core)
    got = []
    for i, now in zip(range(0, 30, 3), itertools.count(1.0)):  # host h0.test only
        ((peer, job),) = assigned(submit(core, app, [i], now=now))
        got.append(peer)
        core.handle(peer, p.Result(job.attempt_id, p.PageResult(url=job.url, status=200)), now + 0.5)
        core.handle(b"client", p.Ack(app, [i]), now + 0.6)
    assert max(ex.window for ex in core.executors.values()) > 8  # the results did grow a window
    assert got.count(b"a") == got.count(b"b") == 5, got
def test_a_thread_is_timed_out_from_its_start_and_a_buffered_one_after_the_rounds_ahead_of_it():
    core = make_core(S.replace(prefetch=1))  # thread_timeout 10 s; 1 worker + 1 buffered: 2 rounds
    register(core, b"a", 1)
    for host in ("h0.test", "h1.test", "h2.test"):
        core.queue.note_answered(host)
    app = open_app(core)
    submit(core, app, [1, 2, 3])  # a holds two: one to run, one in its buffer; the third waits
    a = core.executors[core.peers[b"a"][1]]
    first, waiting = sorted(a.running.values(), key=lambda t: t.thread_id)

    def tick(now):
        for x in (b"a", b"client"):
            core.handle(x, p.Heartbeat(), now)
        return {c.message.attempt_id for c in sends(core.tick(now), p.Cancel)}
    core.handle(b"a", p.Result(first.attempt_id, p.PageResult(url=first.url, status=200)), 9.0)
    (third,) = [t for t in a.running.values() if t is not waiting]  # the refill
    core.handle(b"a", p.Started([third.attempt_id]), 12.0)
    waiting_attempt, third_attempt = waiting.attempt_id, third.attempt_id  # (a thread taken back is assigned anew)
    for now in range(9, 21):
        assert not tick(float(now))                # the buffered one: 2 rounds of 10 s
    assert tick(20.5) == {waiting_attempt}         # 20.5 s after its assignment at 0.0
    assert tick(21.5) == set()                     # the third: 10 s from its start at 12.0, not before
    assert tick(22.5) == {third_attempt}


def test_result_is_delivered_and_ack_makes_thread_dead():
    core = make_core()
    register(core, b"e", 1)
    app = open_app(core)
    ((_, assign),) = assigned(submit(core, app, [42]))
    core.handle(b"e", p.Started([assign.attempt_id]), 1.0)
    t = core.applications[app].threads[42]
    assert t.state == ThreadState.STARTED and t.time_started == 1.0
    actions = core.handle(b"e", p.Result(assign.attempt_id, p.PageResult(url=assign.url, status=200)), 2.0)
    (done,) = sends(actions, p.ThreadDone)
    assert done.peer == b"client" and done.message.thread_id == 42 and done.message.page.status == 200
    assert t.state == ThreadState.FINISHED
    core.handle(b"client", p.Ack(app, [42]), 3.0)
    assert t.state == ThreadState.DEAD and 42 not in core.applications[app].threads


@pytest.mark.parametrize("relayed", [False, True], ids=["decoded", "relayed"])
@pytest.mark.parametrize("retry_after, retried", [(30.0, True), (600.0, True), (86_400.0, False)])
def test_a_retry_after_past_the_longest_wait_is_not_retried_in_this_crawl(retry_after, retried, relayed):
    """A 429 whose Retry-After is a day used to be retried a day later, the crawl open till then:
    the host is paused the longest (600 s) and the URL ends, failed, with the page as the
    executor sent it (whose error says why). The manager's server relays pages undecoded
    (``relayed``): the core wrote the reason into the page, which a relayed page cannot take,
    and the thread was lost (an AttributeError), the crawl open for ever."""
    core = make_core(S.replace(retry_times=2))
    register(core, b"e", 1)
    app = open_app(core)
    ((_, assign),) = assigned(submit(core, app, [7]))
    page = p.PageResult(url=assign.url, status=429, error_kind=p.ErrorKind.HTTP_STATUS.value,
                        error="HTTP 429 Too Many Requests", retry_after=retry_after)
    result = p.Result(assign.attempt_id, page)
    if relayed:  # as the manager's server loop decodes an executor's message
        result = p.decode(list(p.encode(result)), relay=True)
    actions = core.handle(b"e", result, 1.0)
    t = core.applications[app].threads.get(7)
    host = core.queue.hosts[t.host] if t is not None and t.host in core.queue.hosts else None
    if retried:
        assert t.state == ThreadState.READY and t.retries == 1 and not sends(actions, p.ThreadDone)
        assert host.paused_until == 1.0 + retry_after
    else:
        (done,) = sends(actions, p.ThreadDone)
        assert t.state == ThreadState.FINISHED and done.message.page.status == 429
        if relayed:  # as the client decodes it
            (delivered,) = p.decode(p.encode(p.ThreadDone(app, [done.message]))).threads
        else:
            delivered = done.message
        assert delivered.page.error == "HTTP 429 Too Many Requests"
        # the page fails; its host gets the back-off of a 429 without Retry-After (1 s), not the
        # longest pause (600 s), which held the host's other pages
        assert core.queue.hosts[t.host].paused_until == 2.0


def test_an_application_may_not_hold_more_than_max_threads_per_application():
    core = make_core(S.replace(max_threads_per_application=5))
    app = open_app(core)
    submit(core, app, range(4))
    (refused,) = sends(submit(core, app, range(4, 6)), p.Refuse)  # 4 + 2 > 5: none of the two queued
    assert "has 4 grid threads at the manager; 2 more would pass its max_threads_per_application (5)" \
        in refused.message.reason
    assert sorted(core.applications[app].threads) == [0, 1, 2, 3]
    assert not sends(submit(core, app, range(5)), p.Refuse)  # a resubmitted id is no new thread
    assert sends(submit(core, app, [9]), p.Refuse)
    other = open_app(core, peer=b"other")  # another application has its own count
    assert not sends(submit(core, other, range(5), peer=b"other"), p.Refuse)


def test_a_user_may_not_have_more_than_max_applications_per_user_open():
    """Each open application may hold max_threads_per_application threads and max_unacked_bytes
    of results: without a bound on their number, one user (or a client opening applications in
    a loop, each detaching the last) held the manager's memory without end. At the bound, the
    application without a client for longest makes room; with none such, the new one is refused."""
    core = make_core(S.replace(max_applications_per_user=2))  # peer liveness: 3 s
    first = open_app(core, peer=b"c1", now=0.0)
    second = open_app(core, peer=b"c2", now=5.0)
    (refused,) = sends(core.handle(b"c3", p.OpenApplication("crawl", "u"), 6.0), p.Refuse)
    reason = refused.message.reason
    assert ("user u has 2 applications open at the manager, its max_applications_per_user (2), none without "
            "a client past the liveness") in reason and "cancel ID" in reason
    assert f"{first[:8]} (crawl, with a client, opened 6 s ago), {second[:8]} (crawl, with a client, opened 1 s ago)" \
        in reason
    assert len(core.applications) == 2 and b"c3" not in core.peers
    for peer in (b"o1", b"o2"):  # another user has a count of their own
        assert sends(core.handle(peer, p.OpenApplication("crawl", "v"), 6.0), p.ApplicationOpened)
    core.handle(b"c1", p.Heartbeat(), 7.0)
    core.handle(b"c1", p.Bye(), 7.0)  # detached: its threads go on; it may come back within the liveness
    assert sends(core.handle(b"c3", p.OpenApplication("crawl", "u"), 9.0), p.Refuse)
    actions = core.handle(b"c3", p.OpenApplication("crawl", "u"), 10.5)  # 3.5 s without a client: it makes room
    (opened,) = sends(actions, p.ApplicationOpened)
    third = opened.message.application_id
    assert ev.ApplicationStopped(first, 10.5) in actions and core.applications[first].state == ApplicationState.STOPPED
    assert third not in (first, second) and core.applications[second].state != ApplicationState.STOPPED
    # reopening a stopped application opens one more: refused while the two open have clients
    assert sends(core.handle(b"c1", p.OpenApplication("crawl", "u", first), 11.0), p.Refuse)
    core.handle(b"c2", p.CloseApplication(second), 12.0)  # completed: no longer counted
    (reopened,) = sends(core.handle(b"c1", p.OpenApplication("crawl", "u", first), 13.0), p.ApplicationOpened)
    assert reopened.message.application_id == first and reopened.message.resumed
    (reattached,) = sends(core.handle(b"c3", p.OpenApplication("crawl", "u", third), 14.0), p.ApplicationOpened)
    assert reattached.message.resumed  # reattaching to an open application opens nothing more
    assert sends(core.handle(b"c4", p.OpenApplication("crawl", "u"), 14.0), p.Refuse)
    # a restarted manager counts the applications it restores (and gives their clients the liveness to return)
    restarted = make_core(S.replace(max_applications_per_user=2))
    restarted.restore([{"application_id": a, "application_name": "crawl", "usr_name": "u", "state": 1}
                       for a in (first, third)], [], 20.0)
    assert sends(restarted.handle(b"c5", p.OpenApplication("crawl", "u"), 21.0), p.Refuse)
    assert sends(restarted.handle(b"c5", p.OpenApplication("crawl", "u", third), 21.0), p.ApplicationOpened)


def test_a_restored_application_keeps_its_figures_so_far_on_the_dashboard():
    """After a manager restart the dashboard showed "done 57, 1.9 s" for a crawl of 529 pages
    in 200 s: the restored application counted from zero, from its first submission since."""
    from gridcrawl.manager.dashboard import snapshot
    core = make_core()
    core.restore([{"application_id": "a" * 32, "application_name": "crawl", "usr_name": "u", "state": 2,
                   "done": 472, "errors": 3, "first_submitted": 1000.0, "last_finished": 1190.0}], [], 1200.0)
    (app,) = snapshot(core, 1200.0)["applications"]
    assert (app["done"], app["errors"], app["elapsed"]) == (472, 3, 190.0)


def _page(n: int) -> p.PageResult:
    return p.PageResult(url="x", status=200, content="x" * n)


def test_an_application_whose_client_does_not_acknowledge_waits_once_its_results_pass_max_unacked_bytes():
    """A client that stops acknowledging costs the manager max_unacked_bytes of results, not
    its memory: its threads wait (other applications' are dispatched) until it acknowledges
    half."""
    core = make_core(S.replace(max_unacked_bytes=10_000))
    for host in ("h0.test", "h1.test", "h2.test"):
        core.queue.note_answered(host)
    register(core, b"e", 1)
    app = open_app(core)
    other = open_app(core, peer=b"other")
    submit(core, app, range(100))
    submit(core, other, range(1000, 1010), peer=b"other")
    ex = core.executors[core.peers[b"e"][1]]
    ran = []
    for step in range(30):
        if not ex.running:
            break
        (attempt_id, t), = ex.running.items()
        ran.append(t.application_id)
        core.handle(b"e", p.Result(attempt_id, _page(3_000)), 1.0 + step)
        if t.application_id == other:  # the other client acknowledges every result
            core.handle(b"other", p.Ack(other, [t.thread_id]), 1.0 + step)
    # about 3,200 bytes a result: the 4th passes 10,000 and the application waits; the other
    # application's ten threads run, then nothing is left to dispatch
    assert ran.count(app) == 4 and ran.count(other) == 10 and not ex.running
    assert core.applications[app].throttled
    shown = {a["application_id"]: a for a in snapshot(core, 40.0)["applications"]}  # the dashboard says so
    assert shown[app]["throttled"] and shown[app]["unacked_bytes"] == 4 * 3_200 and not shown[other]["throttled"]
    finished = sorted(i for i, t in core.applications[app].threads.items() if t.state == ThreadState.FINISHED)
    core.handle(b"client", p.Ack(app, finished[:1]), 40.0)  # 9,600 bytes held: still over half
    assert not ex.running
    got = assigned(core.handle(b"client", p.Ack(app, finished[1:]), 41.0))  # none held: dispatched again
    assert [m.application_id for _, m in got] == [app] and not core.applications[app].throttled
    assert core.applications[app].unacked_bytes == 0 and core.applications[app].throttles == 1


def test_an_executor_that_does_nothing_has_its_buffered_threads_taken_back_after_one_timeout():
    """Buffered threads may wait a timeout per round of workers only while their executor
    reports starts or results; one that reports nothing loses them after one timeout."""
    core = make_core(S.replace(prefetch=3))  # thread_timeout 10 s; 1 worker + 3 buffered: 4 rounds
    register(core, b"a", 1)
    core.queue.note_answered("h1.test")
    app = open_app(core)
    submit(core, app, [1, 4, 7, 10])  # all on h1.test: one running, three in the buffer
    held = list(core.executors[core.peers[b"a"][1]].running.values())
    assert len(held) == 4

    def tick(now):
        for x in (b"a", b"client"):
            core.handle(x, p.Heartbeat(), now)
        return {c.message.attempt_id for c in sends(core.tick(now), p.Cancel)}
    for now in range(1, 11):
        assert not tick(float(now))
    assert tick(10.5) == {t.attempt_id for t in held}  # no start, no result for 10 s: all back


def test_a_start_reported_late_is_recorded_when_it_began_within_the_attempt():
    core = make_core()
    register(core, b"e", 2)
    app = open_app(core)
    core.queue.note_answered("h1.test")
    core.queue.note_answered("h2.test")
    (_, a), (_, b) = assigned(submit(core, app, [1, 2], now=10.0))
    actions = core.handle(b"e", p.Started([a.attempt_id, b.attempt_id], [0.4, 60.0]), 12.0)
    threads = core.applications[app].threads
    assert threads[1].time_started == pytest.approx(11.6)  # 0.4 s before the message
    assert threads[2].time_started == 10.0                 # not before its assignment
    assert [e.time for e in actions if isinstance(e, ev.ThreadStarted)] == [pytest.approx(11.6), 10.0]


def test_an_executor_declared_dead_names_the_pages_it_was_running(caplog):
    """An executor that died on a page (a plugin calling os._exit, a crash in a C library) left
    no word in its own log, and the manager's said only how many threads it had: the warning now
    names the pages it had started."""
    core = make_core()
    register(core, b"a", 2, now=0.0)
    app = open_app(core)
    core.queue.note_answered("h1.test")
    core.queue.note_answered("h2.test")
    (_, first), (_, second) = assigned(submit(core, app, [1, 2], now=0.0))
    core.handle(b"a", p.Started([first.attempt_id], [0.0]), 0.5)
    register(core, b"b", 2, now=0.0)
    for now in (1.0, 2.0, 3.0, 4.0):  # b and the client heartbeat, a is silent
        core.handle(b"b", p.Heartbeat(), now)
        core.handle(b"client", p.Heartbeat(), now)
    with caplog.at_level("WARNING", logger="gridcrawl.manager"):
        core.tick(4.0)
    (said,) = [r.getMessage() for r in caplog.records if "declared dead" in r.getMessage()]
    assert said.endswith(f"declared dead, its 2 grid threads queued again (running: {first.url})"), said


def test_silent_executor_is_declared_dead_and_its_threads_reassigned(caplog):
    core = make_core()
    # answered hosts (limit 8): the lost attempt keeps its slot (ReadyQueue.hold), another is free
    for host in ("h1.test", "h2.test"):
        core.queue.note_answered(host)
    register(core, b"a", 2, now=0.0)
    app = open_app(core)
    submit(core, app, [1, 2], now=0.0)
    register(core, b"b", 2, now=0.0)  # joins after: gets nothing yet
    # b keeps heartbeating, a goes silent.
    for now in (1.0, 2.0, 3.0):
        core.handle(b"b", p.Heartbeat(), now)
        core.handle(b"client", p.Heartbeat(), now)
    with caplog.at_level("WARNING", logger="gridcrawl.manager"):
        actions = core.tick(3.5)
    assert [peer for peer, _ in assigned(actions)] == [b"b", b"b"]
    (said,) = [r.getMessage() for r in caplog.records if "declared dead" in r.getMessage()]
    assert said.endswith("silent for 3.5 s: declared dead, its 2 grid threads queued again"), said
    lost = core.executors[core.peers[b"b"][1]]
    assert all(t.lost == 1 and t.attempts == 2 for t in lost.running.values())
    records = [r for a in actions if type(a) in ev.EVENTS.values() for r in rows(a) if r[0] == "executor"]
    assert records and records[0][3] == {"is_connected": False}


def test_the_heartbeat_to_a_client_counts_the_executors_that_take_work():
    """A client learns from the manager's heartbeat how many executors take grid threads now
    (connected, accepting, not quarantined), so that one whose threads get no result can say
    that none does; executors get the plain heartbeat."""
    core = make_core()
    open_app(core)

    def beats(now):
        return {a.peer: a.message for a in sends(core.tick(now), p.Heartbeat)}
    assert beats(1.0)[b"client"].executors == 0
    register(core, b"a", 2, now=1.5)
    register(core, b"b", 2, now=1.5)
    core.handle(b"r", p.Register(name="r", host="h", user="u", threads=2, capabilities=["render"]), 1.5)
    got = beats(2.5)
    # and what they offer: a client whose render takes long is not told to start a render executor
    assert got[b"client"].executors == 3 and got[b"client"].capabilities == ["render"]
    assert got[b"a"].executors is None and got[b"b"].executors is None
    core.handle(b"a", p.Availability(accepting=False), 3.0)  # an idle-only desktop in use
    core.handle(b"b", p.Bye("stopping"), 3.0)
    core.handle(b"r", p.Availability(accepting=False), 3.0)
    core.handle(b"client", p.Heartbeat(), 3.0)
    assert beats(3.5)[b"client"].executors == 0 and beats(4.5)[b"client"].capabilities == []


def test_threads_queued_while_no_executor_is_connected_are_unrunnable_until_one_is():
    """The dashboard's "threads no executor can run" and ``gridcrawl report`` count the threads
    that need nothing too while no executor is connected (key ``""``)."""
    core = make_core()
    app = open_app(core)
    submit(core, app, [1, 2, 3])
    assert core.unrunnable() == {"": 3} and snapshot(core, 0.0)["summary"]["unrunnable"] == {"": 3}
    register(core, b"a", 1, now=1.0)
    assert core.unrunnable() == {}


def test_threads_queued_while_every_executor_takes_no_work_are_unrunnable_until_one_does():
    """An idle-only executor whose desktop is in use is connected but takes no work: the threads
    wait, and the dashboard and the report count them (they counted only while no executor was
    connected, so a grid of busy desktops showed nothing waiting)."""
    core = make_core()
    core.handle(b"a", p.Register(name="a", host="h", user="u", threads=2, accepting=False), 0.0)
    app = open_app(core)
    assert assigned(submit(core, app, [1, 2, 3])) == []
    assert core.unrunnable() == {"": 3}
    got = assigned(core.handle(b"a", p.Availability(accepting=True), 1.0))
    assert len(got) == 2 and core.unrunnable() == {}


def test_a_stalled_manager_does_not_declare_dead_the_peers_whose_heartbeats_wait_unread():
    """The loop read everything up to t=2 (heard_all), then was stalled (a big submit, a slow
    pass) until t=10 while the peers went on heartbeating into its socket: nobody is dead at the
    tick after the stall, nor after the waiting heartbeats are read; the thread is not taken back
    (its 10 s timeout is not reached)."""
    core = make_core()
    register(core, b"a", 1)
    app = open_app(core)
    ((peer, job),) = assigned(submit(core, app, [1]))
    for now in (1.0, 2.0):
        for x in (b"a", b"client"):
            core.handle(x, p.Heartbeat(), now)
    actions = core.tick(8.0, heard_all=2.0)  # 6 s after the last read: past the 3 s liveness
    assert not [a for a in actions if isinstance(a, ev.ExecutorDisconnected)] and not sends(actions, p.Assign)
    for x in (b"a", b"client"):  # the heartbeats of t=3..7, read now in one go
        core.handle(x, p.Heartbeat(), 8.0)
    actions = core.tick(8.1, heard_all=8.1)
    ex = core.executors[core.peers[b"a"][1]]
    assert ex.connected and job.attempt_id in ex.running and not sends(actions, p.Cancel)
    assert core.applications[app].peer == b"client"


def test_a_silent_executor_is_declared_dead_once_the_manager_has_caught_up():
    """Same stall, but executor b sent nothing since t=2: while the manager is behind (heard_all
    still 2) b is not judged; once the socket is drained (heard_all 10.1) b is dead and its thread
    goes to a, which heartbeated all along."""
    core = make_core()
    # answered hosts (limit 8): the lost attempt keeps its slot (ReadyQueue.hold), another is free
    core.queue.note_answered("h1.test")
    register(core, b"b", 1)
    app = open_app(core)
    assert [peer for peer, _ in assigned(submit(core, app, [1]))] == [b"b"]
    register(core, b"a", 1, now=2.0)
    for now in (1.0, 2.0):
        core.handle(b"client", p.Heartbeat(), now)
    assert not assigned(core.tick(10.0, heard_all=2.0))
    for x in (b"a", b"client"):
        core.handle(x, p.Heartbeat(), 10.0)
    actions = core.tick(10.1, heard_all=10.1)
    assert [peer for peer, _ in assigned(actions)] == [b"a"]
    assert [a for a in actions if isinstance(a, ev.ExecutorDisconnected)]


def test_silence_is_judged_at_heard_all_never_later_than_now():
    """``heard_all`` only ever delays judgement: with the manager caught up (heard_all = now) a
    peer silent past the liveness is dead; a heard_all later than now counts as now."""
    core = make_core()
    register(core, b"a", 1)
    actions = core.tick(3.5, heard_all=3.5)
    assert [a for a in actions if isinstance(a, ev.ExecutorDisconnected)]
    core2 = make_core()
    register(core2, b"a", 1)
    assert not [a for a in core2.tick(2.9, heard_all=99.0) if isinstance(a, ev.ExecutorDisconnected)]


def test_late_result_of_a_taken_back_attempt_is_fenced():
    core = make_core()
    # answered hosts (limit 8): the lost attempt keeps its slot (ReadyQueue.hold), another is free
    core.queue.note_answered("h1.test")
    register(core, b"a", 1)
    app = open_app(core)
    ((_, first),) = assigned(submit(core, app, [1]))
    register(core, b"b", 1, now=2.0)
    for now in (1.0, 2.0, 3.0, 3.9):
        core.handle(b"b", p.Heartbeat(), now)
        core.handle(b"client", p.Heartbeat(), now)
    ((peer, second),) = assigned(core.tick(4.0))
    assert peer == b"b" and second.attempt_id != first.attempt_id
    # a wakes up (SIGCONT) and re-registers, then sends its late result.
    register(core, b"a", 1, now=4.1)
    actions = core.handle(b"a", p.Result(first.attempt_id, p.PageResult(url="x")), 4.2)
    assert sends(actions, p.ThreadDone) == [] and core.fenced == 1
    actions = core.handle(b"b", p.Result(second.attempt_id, p.PageResult(url="x")), 4.3)
    assert len(sends(actions, p.ThreadDone)) == 1


def test_attempts_taken_back_from_an_executor_declared_dead_keep_their_host_slots_until_late_result_or_window():
    """Executor a, declared dead while late (a loaded machine), may still be fetching its two
    pages of h0.test, whose limit is 2: until the late result of one comes, the host has no free
    slot and executor b gets nothing (a third request at once, measured before); that result
    frees one slot, and the other attempt's slot is free once a's request window (here
    thread_timeout, 10 s, from the take-back: it never reported a start) has passed, as for a
    dead executor whose result never comes. Then every thread has run again."""
    core = make_core(S.replace(concurrent_requests_per_host=2))
    core.queue.note_answered("h0.test")
    register(core, b"a", 2)
    app = open_app(core)
    assert [peer for peer, _ in assigned(submit(core, app, [0, 3, 6]))] == [b"a", b"a"]  # h0's limit: 2
    first = {t.thread_id: t.attempt_id for t in core.executors[core.peers[b"a"][1]].running.values()}
    register(core, b"b", 4, now=1.0)
    host = core.queue.hosts["h0.test"]

    def tick(now, *peers):
        for peer in (b"b", b"client", *peers):
            core.handle(peer, p.Heartbeat(), now)
        return assigned(core.tick(now))
    for now in (1.0, 2.0, 3.0):
        assert not tick(now)
    assert not tick(3.5)  # a declared dead: its two attempts are taken back, their threads queued
    assert core.queue.held == 2 and host.in_flight == 2 and len(core.queue) == 3
    from gridcrawl.manager.dashboard import snapshot  # the dashboard's host row says why no slot is free
    assert {k: v for k, v in snapshot(core, 3.5)["hosts"][0].items() if k in ("host", "in_flight", "held")} \
        == {"host": "h0.test", "in_flight": 2, "held": 2}
    register(core, b"a", 2, now=4.0)  # a comes back (nothing is assigned: no slot is free)
    assert not tick(4.5, b"a")
    actions = core.handle(b"a", p.Result(first[0], p.PageResult(url="http://h0.test/0", status=200)), 5.0)
    assert core.fenced == 1 and core.queue.held == 1
    ((_, job),) = assigned(actions)  # one slot free: one thread runs again
    assert host.in_flight == 2
    for now in (6.0, 8.0, 10.0, 13.0):
        assert not tick(now, b"a")  # the other slot is held until 3.5 + 10
    ((_, second),) = tick(13.6, b"a")  # a's attempt of thread 3 can no longer be running
    assert core.queue.held == 0 and host.in_flight == 2
    assert {job.thread_id, second.thread_id} <= {0, 3, 6} and job.thread_id != second.thread_id


def test_an_executor_registering_again_frees_the_held_slots_of_the_attempts_it_no_longer_runs():
    """Executor a, declared dead, registers again (a new connection: it drops the jobs of the old
    one it had not started, and their results) saying which attempts its workers still run: the
    slots of its other attempts are free at once; the one it still runs keeps its slot."""
    core = make_core(S.replace(concurrent_requests_per_host=2, prefetch=1))
    core.queue.note_answered("h0.test")
    register(core, b"a", 1)  # one worker, one job buffered
    app = open_app(core)
    jobs = [job for _, job in assigned(submit(core, app, [0, 3, 6]))]
    assert len(jobs) == 2
    core.handle(b"a", p.Started([jobs[0].attempt_id]), 0.5)
    register(core, b"b", 4, now=1.0)
    for now in (1.0, 2.0, 3.0):
        for peer in (b"b", b"client"):
            core.handle(peer, p.Heartbeat(), now)
    assert not assigned(core.tick(3.6)) and core.queue.held == 2  # a declared dead
    actions = core.handle(b"a2", p.Register(name="a", host="h", user="u", threads=1,
                                            running=[jobs[0].attempt_id]), 4.0)
    assert core.queue.held == 1 and len(assigned(actions)) == 1  # the buffered job's slot: free
    assert core.queue.hosts["h0.test"].in_flight == 2


def test_a_held_slot_lasts_the_request_window_the_executor_declared_from_its_start_at_most_thread_timeout():
    """An executor says at registration how long one of its threads may go on sending requests
    after it starts (its settings' request_window); the manager keeps a taken-back attempt's slot
    that long from the attempt's reported start (here 4 s from 1.0), never longer than its own
    thread_timeout (an executor saying 10^6 s holds a slot 10 s). A new host (one thread in
    flight until it answers) gets its next thread only then."""
    for window, free_at in ((4.0, 5.0), (1e6, 11.0)):
        core = make_core()
        core.handle(b"a", p.Register(name="a", host="h", user="u", threads=1, request_window=window), 0.0)
        app = open_app(core)
        ((_, job),) = assigned(submit(core, app, [1]))
        core.handle(b"a", p.Started([job.attempt_id]), 1.0)
        register(core, b"b", 1, now=1.0)
        got = {}
        for now in (2.0, 3.0, 3.5, 4.9, 5.1, 7.0, 10.9, 11.1):
            for peer in (b"b", b"client"):
                core.handle(peer, p.Heartbeat(), now)
            if assigned(core.tick(now)):
                got.setdefault("at", now)
        assert free_at < got["at"] < free_at + 0.5, (window, got)


def test_attempts_that_sent_nothing_free_their_slot_at_once_and_a_cancelled_crawl_s_are_held():
    """A job handed back unstarted (``availability``) frees its host's slot at once; an
    attempt of an application cancelled while it ran (its start reported) keeps it (a cancel
    does not stop a request under way) until its late result, which another application's
    thread of that host waits for."""
    core = make_core()
    register(core, b"a", 2)
    app = open_app(core)
    ((_, job),) = assigned(submit(core, app, [1]))  # h1.test, a new host: one thread in flight
    core.handle(b"a", p.Availability(False, [job.attempt_id]), 0.5)
    assert core.queue.hosts["h1.test"].in_flight == 0 and core.queue.held == 0
    ((_, job),) = assigned(core.handle(b"a", p.Availability(True), 0.6))  # at once: nothing holds its slot
    core.handle(b"a", p.Started([job.attempt_id]), 0.65)
    other = open_app(core, b"client2", now=0.7)
    assert not assigned(submit(core, other, [1], peer=b"client2", now=0.7))  # h1.test is busy
    core.handle(b"client", p.Control(app, "cancel", "u"), 0.8)
    assert core.queue.held == 1 and not assigned(core.dispatch(0.9))
    actions = core.handle(b"a", p.Result(job.attempt_id, p.PageResult(url=job.url, status=200)), 1.0)
    assert core.queue.held == 0 and [peer for peer, _ in assigned(actions)] == [b"a"]


def test_thread_timeout_takes_the_thread_back():
    core = make_core()
    register(core, b"a", 1)
    register(core, b"b", 1)
    app = open_app(core)
    ((peer, first),) = assigned(submit(core, app, [1]))
    for now in range(1, 12):
        for x in (b"a", b"b", b"client"):
            core.handle(x, p.Heartbeat(), float(now))
    actions = core.tick(11.0)
    (cancel,) = sends(actions, p.Cancel)
    assert cancel.peer == peer and cancel.message.attempt_id == first.attempt_id
    ((_, again),) = assigned(actions)
    assert again.thread_id == 1 and again.attempt_id != first.attempt_id


def test_poison_thread_fails_after_max_attempts():
    core = make_core(S.replace(max_attempts=2))
    # answered hosts (limit 8): the lost attempt keeps its slot (ReadyQueue.hold), another is free
    core.queue.note_answered("h1.test")
    app = open_app(core)
    submit(core, app, [1])
    now = 0.0
    for round_ in range(2):
        peer = f"e{round_}".encode()
        register(core, peer, 1, now=now)
        core.handle(b"client", p.Heartbeat(), now + 3.5)
        now += 4.0
        actions = core.tick(now)  # the executor died silently
    (done,) = sends(actions, p.ThreadDone)
    assert done.message.failed and done.message.page is None and done.message.attempts == 2


def test_a_thread_taken_back_goes_to_a_proven_executor_not_to_the_next_newcomer():
    """Executors that register with many workers, take a thread and vanish, each a new identity,
    made the seed poison in 4.5 s (every attempt went to the newest, most idle of them). A
    thread taken back goes to an executor that has returned results, else to the one
    registered longest."""
    core = make_core(S.replace(max_attempts=3))
    # answered hosts (limit 8): the lost attempt keeps its slot (ReadyQueue.hold), another is free
    core.queue.note_answered("h1.test")
    register(core, b"honest", 1, now=0.0)
    app = open_app(core)
    core.handle(b"storm-0", p.Register(name="storm-0", host="s", user="u", threads=64), 0.5)
    ((peer, job),) = assigned(submit(core, app, [1], now=0.6))
    assert peer == b"storm-0"  # the most idle: least-loaded dispatch at work
    core.handle(b"storm-1", p.Register(name="storm-1", host="s", user="u", threads=64), 3.4)
    for peer in (b"honest", b"client", b"storm-1"):
        core.handle(peer, p.Heartbeat(), 3.5)
    actions = core.tick(4.0)  # storm-0 vanished without a word: declared dead, its attempt lost
    assert [peer for peer, _ in assigned(actions)] == [b"honest"]  # not storm-1, the most idle
    t = core.applications[app].threads[1]
    assert t.state == ThreadState.SCHEDULED and core.executors[t.executor_id].name == "honest"


def test_a_result_whose_handling_fails_puts_its_thread_back_and_the_batch_goes_on(caplog):
    """A bug while handling one result (the Retry-After one: the thread was already off its
    executor's list, so no timeout ever recovered it, and the crawl never ended) is logged, its
    attempt taken back as ``error`` so the thread runs again, and the batch's other results are
    handled. The bug is injected: the queue's release fails once."""
    core = make_core()
    register(core, b"e", 2)
    app = open_app(core)
    jobs = {job.thread_id: job for _, job in assigned(submit(core, app, [1, 2]))}
    release, calls = core.queue.release, []

    def failing_once(*args, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("injected bug")
        return release(*args, **kw)

    core.queue.release = failing_once
    results = p.Results([p.AttemptResult(jobs[1].attempt_id, p.PageResult(url=jobs[1].url, status=200)),
                         p.AttemptResult(jobs[2].attempt_id, p.PageResult(url=jobs[2].url, status=200))])
    actions = core.handle(b"e", results, 1.0)
    threads = core.applications[app].threads
    assert [done.message.thread_id for done in sends(actions, p.ThreadDone)] == [2]
    assert threads[2].state == ThreadState.FINISHED
    assert threads[1].state in (ThreadState.READY, ThreadState.SCHEDULED) and threads[1].attempt_id != jobs[1].attempt_id
    assert [a.outcome for a in actions if isinstance(a, ev.AttemptEnded)] == ["error"]
    assert "failed to be handled; its thread is queued again" in caplog.text


def test_client_restart_reattaches_and_gets_waiting_results():
    core = make_core()
    register(core, b"e", 1)
    app = open_app(core, b"c1")
    ((_, assign),) = assigned(submit(core, app, [5], peer=b"c1"))
    core.handle(b"c1", p.Bye(), 0.5)  # the client goes away
    actions = core.handle(b"e", p.Result(assign.attempt_id, p.PageResult(url="x")), 1.0)
    assert sends(actions, p.ThreadDone) == []
    actions = core.handle(b"c2", p.OpenApplication("crawl", "u", app), 2.0)
    (opened,) = sends(actions, p.ApplicationOpened)
    assert opened.message.resumed
    (done,) = sends(actions, p.ThreadDone)
    assert done.peer == b"c2" and done.message.thread_id == 5
    # resubmitting the same thread id does not queue it twice, nor send the result again on the
    # connection that has it (a client resubmitting in a loop, never reading, made the manager
    # queue a copy of the page each time: 5 GB in 15 s); nor does an open again on it
    for i in range(3):
        actions = submit(core, app, [5], peer=b"c2", now=2.1 + i)
        assert assigned(actions) == [] and sends(actions, p.ThreadDone) == []
    assert sends(core.handle(b"c2", p.OpenApplication("crawl", "u", app), 6.0), p.ThreadDone) == []
    # a client on a new connection gets it, once
    (done,) = sends(core.handle(b"c3", p.OpenApplication("crawl", "u", app), 7.0), p.ThreadDone)
    assert done.peer == b"c3" and sends(submit(core, app, [5], peer=b"c3", now=7.1), p.ThreadDone) == []


def test_a_second_client_is_refused_the_application_while_the_first_is_alive():
    """One client drives a crawl at a time: a client with another token is refused the
    application while its holder's connection exists and was heard within the liveness (two
    gridcrawl-client on one crawl database took it from each other at every message). The same
    client reconnecting takes it back, and any client once the holder's connection is gone (kill
    -9) or it has been silent past the liveness."""
    present = {b"a1": True}
    core = ManagerCore(S, new_id=lambda: "app1", peer_present=lambda peer: present.get(peer, False))

    def open_as(peer, token, now):
        return core.handle(peer, p.OpenApplication("crawl", "u", "app1" if core.applications else None,
                                                   client=token), now)
    assert sends(open_as(b"a1", "A", 0.0), p.ApplicationOpened)
    (refused,) = sends(open_as(b"b1", "B", 1.0), p.Refuse)
    assert refused.peer == b"b1" and refused.message.reason == (
        "application app1 is in use by another client, heard from 1.0 s ago: one client crawls a crawl "
        "database at a time (wait for it to end, or stop it)")
    assert core.applications["app1"].peer == b"a1"
    assert sends(submit(core, "app1", [1], peer=b"a1", now=1.1), p.Refuse) == []  # the holder goes on
    # the holder reconnects on a new connection: its own token gets the application back at once
    present[b"a2"] = True
    assert sends(open_as(b"a2", "A", 1.5), p.ApplicationOpened) and core.applications["app1"].peer == b"a2"
    # its process is killed: the connection is gone, so a new client takes over at once
    present[b"a2"] = False
    assert sends(open_as(b"b1", "B", 1.6), p.ApplicationOpened) and core.applications["app1"].peer == b"b1"
    # a holder silent past the liveness (3 s) is taken over even if its connection lingers
    present[b"b1"] = True
    assert sends(open_as(b"c1", "C", 4.0), p.Refuse)
    assert sends(open_as(b"c1", "C", 4.7), p.ApplicationOpened)
    # a client without a token (an older release, or one that hopes to pass as the holder) is
    # another client
    present[b"c1"] = True
    assert sends(open_as(b"d1", "", 4.8), p.Refuse)


def test_executor_bye_hands_work_back_without_counting_an_attempt():
    """An executor that stops hands back the jobs it has not started (``availability``), then
    says goodbye: not counted as lost, and, never started, they free their hosts' slots at once."""
    core = make_core()
    register(core, b"a", 1)
    app = open_app(core)
    ((_, job),) = assigned(submit(core, app, [1]))
    core.handle(b"a", p.Availability(False, [job.attempt_id]), 0.5)
    core.handle(b"a", p.Bye(), 0.5)
    t = core.applications[app].threads[1]
    assert t.state == ThreadState.READY and t.lost == 0
    ((peer, _),) = assigned(core.handle(b"b", p.Register(name="b", host="h", user="u", threads=1), 0.6))
    assert peer == b"b"


def test_unknown_peers_and_wrong_applications_are_refused():
    core = make_core()
    (refuse,) = sends(core.handle(b"x", p.Heartbeat(), 0.0), p.Refuse)
    assert "register" in refuse.message.reason
    app = open_app(core, b"c1")
    (refuse,) = sends(core.handle(b"c2", p.Submit(app, [p.ThreadSpec(1, "http://a.test/")]), 0.0), p.Refuse)
    assert app in refuse.message.reason
    (refuse,) = sends(core.handle(b"x", p.Welcome("a", 1.0, 3), 0.0), p.Refuse)


def test_close_with_cancel_aborts_running_threads():
    core = make_core()
    register(core, b"e", 2)
    app = open_app(core)
    submit(core, app, [1, 2, 3])
    actions = core.handle(b"client", p.CloseApplication(app, cancel=True), 1.0)
    assert len(sends(actions, p.Cancel)) == 2
    assert core.applications[app].threads == {} and len(core.queue) == 0
    assert not core.executors[core.peers[b"e"][1]].running


def test_heartbeats_are_sent_to_every_peer_each_interval():
    core = make_core()
    register(core, b"e", 1, now=10.0)
    open_app(core, b"c", now=10.0)
    assert {a.peer for a in sends(core.tick(10.5), p.Heartbeat)} == {b"e", b"c"}
    assert sends(core.tick(10.7), p.Heartbeat) == []
    assert {a.peer for a in sends(core.tick(11.6), p.Heartbeat)} == {b"e", b"c"}


def test_5xx_and_connection_errors_are_retried_with_backoff_but_404_is_not():
    core = make_core(S.replace(retry_times=2, retry_backoff=1.0))
    register(core, b"e", 4)
    app = open_app(core)
    got = dict((a.message.thread_id, a.message) for _, a in [(None, x) for x in sends(submit(core, app, [1, 2]), p.Assign)])
    # thread 1 gets 503 twice then 200; thread 2 gets 404 once
    actions = core.handle(b"e", p.Result(got[2].attempt_id, p.PageResult(url="x", status=404, error_kind="http_status")), 1.0)
    assert len(sends(actions, p.ThreadDone)) == 1
    attempt = got[1].attempt_id
    now = 1.0
    for retry, wait in enumerate((1.0, 2.0)):
        actions = core.handle(b"e", p.Result(attempt, p.PageResult(url="x", status=503, error_kind="http_status")), now)
        assert sends(actions, p.ThreadDone) == [] and assigned(actions) == []
        assert assigned(core.dispatch(now + wait - 0.01)) == []
        ((_, again),) = assigned(core.dispatch(now + wait))
        attempt, now = again.attempt_id, now + wait
    actions = core.handle(b"e", p.Result(attempt, p.PageResult(url="x", status=503, error_kind="http_status")), now)
    (done,) = sends(actions, p.ThreadDone)  # retry_times exhausted: the 503 is the result
    assert done.message.page.status == 503 and done.message.attempts == 3 and not done.message.failed


def test_an_answer_that_is_no_usable_http_is_not_retried_a_connection_error_is():
    """``bad_response`` (an SSH banner on the port, headers past the limits, a body that does not
    decode) gets the same answer at every attempt: the thread ends at its first, where as
    ``connection`` it was tried ``retry_times`` times more. A reset is still retried."""
    from gridcrawl.manager.core import retry_wait
    s = S.replace(retry_times=2, retry_backoff=1.0)
    unusable = p.PageResult(url="x", error_kind="bad_response", error="not an HTTP response: it began 'SSH-2.0-'")
    reset = p.PageResult(url="x", error_kind="connection", error="connection reset by the server")
    assert retry_wait(unusable, 0, s) is None
    assert [retry_wait(reset, n, s) for n in range(3)] == [1.0, 2.0, None]
    core = make_core(s)
    register(core, b"e", 4)
    ((_, job),) = assigned(submit(core, open_app(core), [1]))
    (done,) = sends(core.handle(b"e", p.Result(job.attempt_id, unusable), 1.0), p.ThreadDone)
    assert done.message.attempts == 1 and done.message.page.error_kind == "bad_response"


def test_a_retried_attempt_whose_start_rode_with_its_result_is_recorded_with_that_start(tmp_path):
    """An attempt that ends in a retry (a 503) and sent no ``started`` (its start came as the
    result's ``ran``) keeps its start in the ``attempt`` table: before, its ``time_started`` stayed
    NULL (seen on every retried attempt of a fast crawl on SQLite), so the attempt looked never run."""
    from gridcrawl import models
    from gridcrawl.db import init_schema, open_database
    from gridcrawl.manager.recorder import Recorder

    core = make_core(S.replace(retry_times=1, retry_backoff=1.0))
    events = []

    def keep(actions):
        events.extend(a for a in actions if not isinstance(a, Send))
        return actions

    keep(core.handle(b"e", p.Register(name="e", host="h", user="u", threads=2), 0.0))
    (opened,) = sends(keep(core.handle(b"client", p.OpenApplication("crawl", "u"), 0.0)), p.ApplicationOpened)
    ((_, first),) = assigned(keep(submit(core, opened.message.application_id, [1], now=1.0)))
    page = p.PageResult(url="x", status=503, error_kind="http_status")
    keep(core.handle(b"e", p.Results([p.AttemptResult(first.attempt_id, page, ran=0.25)]), 3.0))
    (ended,) = [e for e in events if isinstance(e, ev.AttemptEnded)]
    assert (ended.outcome, ended.time_started, ended.time) == ("retry", pytest.approx(2.75), 3.0)
    ((_, second),) = assigned(keep(core.dispatch(4.0)))
    keep(core.handle(b"e", p.Results([p.AttemptResult(second.attempt_id, _page(1), ran=0.5)]), 5.0))

    engine = open_database(f"sqlite:///{tmp_path / 'manager.db'}")
    init_schema(engine, models.manager_metadata, models.manager_meta)
    recorder = Recorder(engine)
    recorder.add_all(events)
    recorder.flush()
    with engine.connect() as conn:
        rows_ = conn.execute(sa.text("SELECT outcome, time_assigned, time_started, time_finished FROM attempt "
                                     "ORDER BY time_assigned")).all()
    engine.dispose()
    assert [r.outcome for r in rows_] == ["retry", "finished"]
    for r in rows_:
        assert r.time_started is not None and r.time_assigned <= r.time_started <= r.time_finished, r


@pytest.mark.parametrize("relayed", [False, True])
@pytest.mark.parametrize("error_kind,status,error,retry_after", [
    ("robots_unreachable", None, "robots.txt unreachable, so disallowed for now: timed out after 30 s", 60.0),
    ("connection", None, "cannot connect to http://dead.test: Connection refused", None)])
def test_a_new_host_that_never_answers_costs_one_probe_round_then_its_threads_fail_together(
        error_kind, status, error, retry_after, relayed):
    """A host whose robots.txt never answered used to be opened to 8 threads at once by its
    first (failed) result, each URL then waiting out its own deadline and retries: on 225
    loopback sites, 20 such hosts took 57 % of the grid's worker-seconds. Now its threads are
    probes, one at a time with the retries' back-off between them; after ``retry_times`` + 1
    failed probes every queued thread of the host fails together, without a fetch, and so does
    a new one until HOST_DOWN_SECONDS have passed. Other hosts are not held meanwhile."""
    from gridcrawl.manager.queue import HOST_DOWN_SECONDS
    core = make_core(S.replace(retry_times=2, retry_backoff=1.0, thread_timeout=1000.0))
    core.queue.note_answered("live.test")
    register(core, b"e", 8)
    app = open_app(core)
    specs = [p.ThreadSpec(i, f"http://dead.test/{i}") for i in range(5)] + [p.ThreadSpec(9, "http://live.test/")]
    got = assigned(core.handle(b"client", p.Submit(app, specs), 0.0))
    assert sorted(job.url for _, job in got) == ["http://dead.test/0", "http://live.test/"]  # one probe at a time

    def answer(job, now):
        page = p.PageResult(url=job.url, status=status, error_kind=error_kind, error=error,
                            retry_after=retry_after, requested=False)
        result = p.Result(job.attempt_id, page)
        if relayed:  # as the manager's server loop decodes an executor's message
            result = p.decode(list(p.encode(result)), relay=True)
        return core.handle(b"e", result, now)

    probe = next(job for _, job in got if job.url.startswith("http://dead"))
    now, waits, tried = 1.0, [], [probe.url]
    for _ in range(2):  # two failed probes: each paused the host for the retry's wait
        actions = answer(probe, now)
        assert sends(actions, p.ThreadDone) == [] and assigned(actions) == []
        wait = max(retry_after or 0.0, 1.0 * 2 ** len(waits))
        waits.append(wait)
        assert assigned(core.dispatch(now + wait - 0.01)) == []  # nothing of the host before the wait
        ((_, probe),) = assigned(core.dispatch(now + wait))
        tried.append(probe.url)
        now += wait
    actions = answer(probe, now)  # the third failed probe: the host is down
    done = {d.message.thread_id: d.message for d in sends(actions, p.ThreadDone)}
    assert sorted(done) == [0, 1, 2, 3, 4] and assigned(actions) == []
    if relayed:
        done = {d.thread_id: d for d in p.decode(p.encode(p.ThreadDone(app, list(done.values())))).threads}
    threads = core.applications[app].threads
    for i in range(5):
        assert threads[i].state == ThreadState.FINISHED and done[i].page.error_kind == error_kind
        if done[i].page.url != probe.url:  # not fetched: the manager's page says why
            assert done[i].page.error == f"not fetched: http://dead.test did not answer 3 probes; the last: {error}"
            assert done[i].attempts == tried.count(done[i].page.url) and not done[i].failed
            assert done[i].executor_id is None
    assert sum(1 for a in actions if isinstance(a, ev.ThreadNotFetched)) == 4
    ((table, op, key, values),) = rows(ev.ThreadNotFetched(threads[1].internal_id, now, error_kind))
    assert (table, op, key) == ("thread", "update", threads[1].internal_id)  # FINISHED, not poison
    assert values["state"] == ThreadState.FINISHED and values["error_kind"] == error_kind and "failed" not in values
    assert len(core.queue) == 0 and threads[9].state == ThreadState.SCHEDULED  # the live host was never held
    # a new thread of the down host fails at once; after HOST_DOWN_SECONDS it probes again
    actions = core.handle(b"client", p.Submit(app, [p.ThreadSpec(20, "http://dead.test/20")]), now + 1)
    ((_, d),) = [(a.peer, a.message) for a in sends(actions, p.ThreadDone)]
    assert d.thread_id == 20 and d.page.error_kind == error_kind and assigned(actions) == []
    later = now + HOST_DOWN_SECONDS + 1
    ((_, job),) = assigned(core.handle(b"client", p.Submit(app, [p.ThreadSpec(21, "http://dead.test/21")]), later))
    assert job.url == "http://dead.test/21"


def test_the_manager_logs_a_urls_password_as_stars(caplog):
    """The manager's log printed a URL's credentials as given (``http://user:pw@host/``): in
    its retry, down-host, straggler, timeout and poison lines, and the ``url`` of JSON lines."""
    import logging
    core = make_core(S.replace(retry_times=1, retry_backoff=1.0, thread_timeout=5.0, max_attempts=1))
    register(core, b"e", 4)
    app = open_app(core)
    secret = "http://alice:s3cret@dead.test/1"
    with caplog.at_level(logging.INFO, logger="gridcrawl.manager"):
        ((_, job),) = assigned(core.handle(b"client", p.Submit(app, [p.ThreadSpec(1, secret)]), 0.0))
        failed = p.PageResult(url=job.url, error_kind="connection", error=f"connection refused: {secret}")
        core.handle(b"e", p.Result(job.attempt_id, failed), 1.0)        # retried: "retry 1 in 1.0 s"
        ((_, job),) = assigned(core.dispatch(2.0))
        core.handle(b"e", p.Result(job.attempt_id, failed), 2.5)        # the host is down
        core.queue.note_answered("slow.test")
        ((_, job),) = assigned(core.handle(b"client", p.Submit(app, [p.ThreadSpec(2, "http://bob:pw2@slow.test/")]),
                                           3.0))
        core.handle(b"e", p.Heartbeat(), 9.0)
        core.tick(9.0)                                                   # ran over the timeout: taken back
        core.tick(9.5)                                                   # lost max_attempts times: poison
    said = [(r.getMessage(), getattr(r, "url", "")) for r in caplog.records]
    assert not [line for line in said if "s3cret" in str(line) or "pw2" in str(line)]
    for shown in ("retry 1", "did not answer 2 probes", "ran over", "failed: 1 attempt lost (poison)"):
        assert [m for m, _ in said if shown in m], (shown, said)
    assert [m for m, _ in said if "alice:***@dead.test" in m] and [m for m, _ in said if "bob:***@slow.test" in m]
    assert "http://bob:***@slow.test/" in [url for _, url in said]


def test_timeouts_of_a_new_host_are_probes_too_each_thread_failing_once():
    """Under ``--ignore-robots`` no robots.txt probes a new host: its first pages do. A timeout
    before any status line is a failed probe, but timeouts are not retried: each probe's thread
    ends as ``timeout``, the host pauses for the back-off, the next thread probes, and after
    ``retry_times`` + 1 of them the queued rest fail together without a fetch."""
    core = make_core(S.replace(retry_times=2, retry_backoff=1.0, thread_timeout=1000.0))
    register(core, b"e", 8)
    app = open_app(core)
    ((_, job),) = assigned(core.handle(b"client", p.Submit(app, [p.ThreadSpec(i, f"http://dead.test/{i}")
                                                                  for i in range(5)]), 0.0))
    now = 10.0
    for wait in (1.0, 2.0):
        actions = core.handle(b"e", p.Result(job.attempt_id, p.PageResult(
            url=job.url, error_kind="timeout", error="no connection within 10 s")), now)
        (done,) = sends(actions, p.ThreadDone)
        assert done.message.thread_id == int(job.url[-1]) and done.message.page.error_kind == "timeout"
        assert assigned(actions) == [] and assigned(core.dispatch(now + wait - 0.01)) == []
        ((_, job),) = assigned(core.dispatch(now + wait))
        now += wait + 10.0
    actions = core.handle(b"e", p.Result(job.attempt_id, p.PageResult(
        url=job.url, error_kind="timeout", error="no connection within 10 s")), now)
    done = {d.message.thread_id: d.message.page for d in sends(actions, p.ThreadDone)}
    assert sorted(done) == [2, 3, 4] and done[2].error == "no connection within 10 s"
    assert done[3].error == "not fetched: http://dead.test did not answer 3 probes; the last: no connection within 10 s"


def test_a_host_that_answered_once_keeps_each_threads_own_retries():
    """The probes are a new host's: a host that has answered is not failed as a whole by some of
    its threads' connection errors (the page's own retries apply, its other threads go on)."""
    core = make_core(S.replace(retry_times=2, retry_backoff=1.0, thread_timeout=1000.0))
    core.queue.note_answered("h.test")
    register(core, b"e", 8)
    app = open_app(core)
    got = assigned(core.handle(b"client", p.Submit(app, [p.ThreadSpec(i, f"http://h.test/{i}") for i in range(3)]), 0.0))
    assert len(got) == 3
    for _, job in got[:2]:
        actions = core.handle(b"e", p.Result(job.attempt_id, p.PageResult(
            url=job.url, error_kind="connection", error="Connection reset")), 1.0)
        assert sends(actions, p.ThreadDone) == []
    assert len(assigned(core.dispatch(2.0))) == 2  # both retried after 1 s, the host not paused
    assert core.queue.down("http://h.test/0", 2.0) is None


def test_a_host_that_stops_answering_mid_crawl_is_probed_then_its_queued_threads_fail_together():
    """A host that answered, then accepts connections and never answers (a server that hangs
    mid-crawl) kept every URL's own attempt: each of its queued pages waited out the 30 s
    deadline, 8 at a time, so 10,000 pages left took 10 hours. Now ``retry_times`` + 1 results
    in a row without an answer make it a new host again: the threads still in flight end as
    they come (they are no probes), the next ones probe it one at a time, and after
    ``retry_times`` + 1 failed probes its queued threads fail together without a fetch."""
    core = make_core(S.replace(retry_times=2, retry_backoff=1.0, thread_timeout=1000.0))
    core.queue.note_answered("h.test")
    register(core, b"e", 8)
    app = open_app(core)
    got = assigned(core.handle(b"client", p.Submit(app, [p.ThreadSpec(i, f"http://h.test/{i}")
                                                         for i in range(30)]), 0.0))
    assert len(got) == 8  # an answered host: its whole concurrency

    def silent(job, now):
        return core.handle(b"e", p.Result(job.attempt_id, p.PageResult(
            url=job.url, error_kind="timeout", error="deadline of 30 s exceeded")), now)

    now, in_flight, probes, results = 30.0, [job for _, job in got], [], 0
    while in_flight:  # those in flight time out; the host stops answering at the third result
        actions = silent(in_flight.pop(0), now)
        results += 1
        assert [d.message.page.error_kind for d in sends(actions, p.ThreadDone)] == ["timeout"]
        (in_flight if core.queue.has_answered("h.test") else probes).extend(job for _, job in assigned(actions))
    assert results == 10 and not core.queue.has_answered("h.test")  # 2 sent before it stopped: no probes
    (probe,) = probes  # the last one out: one probe, no more
    tried = results + 1
    for wait in (1.0, 2.0):  # each failed probe: the next after the back-off
        now += 30.0
        actions = silent(probe, now)
        assert assigned(actions) == [] and len(sends(actions, p.ThreadDone)) == 1
        assert assigned(core.dispatch(now + wait - 0.01)) == []
        ((_, probe),) = assigned(core.dispatch(now + wait))
        tried += 1
        now += wait
    actions = silent(probe, now + 30.0)  # the third failed probe: the queued rest fail together
    done = sends(actions, p.ThreadDone)
    assert len(done) == 1 + 30 - tried and assigned(actions) == []  # the probe, then those never sent
    assert done[-1].message.page.error == ("not fetched: http://h.test did not answer 3 probes; the last: "
                                           "deadline of 30 s exceeded")
    assert len(core.queue) == 0


def test_a_host_whose_answers_come_between_its_silent_results_keeps_its_concurrency():
    """Results without an answer count only in a row: an answer between them (a page that
    hangs among pages that do not) keeps the host open to its whole concurrency."""
    core = make_core(S.replace(retry_times=2, retry_backoff=1.0, thread_timeout=1000.0))
    core.queue.note_answered("h.test")
    register(core, b"e", 8)
    app = open_app(core)
    got = assigned(core.handle(b"client", p.Submit(app, [p.ThreadSpec(i, f"http://h.test/{i}")
                                                         for i in range(30)]), 0.0))
    for i, (_, job) in enumerate(got):
        page = (p.PageResult(url=job.url, status=200) if i % 2 else
                p.PageResult(url=job.url, error_kind="timeout", error="deadline of 30 s exceeded"))
        core.handle(b"e", p.Result(job.attempt_id, page), 30.0)
    assert core.queue.has_answered("h.test") and core.queue.hosts["h.test"].in_flight == 8


@pytest.mark.parametrize("error,down", [("cancelled", False), ("no connection within 10 s", True)])
def test_a_fetch_the_executor_cancelled_is_not_a_failed_probe(error, down):
    """An executor that stops cuts its fetches short as ``timeout`` ("cancelled"): that says
    nothing of the host, so it is no failed probe and does not put the host down; a timeout
    without a status line is one (with ``retry_times`` 0, the first puts the host down)."""
    core = make_core(S.replace(retry_times=0, thread_timeout=1000.0))
    register(core, b"e", 8)
    app = open_app(core)
    ((_, job),) = assigned(core.handle(b"client", p.Submit(app, [p.ThreadSpec(0, "http://n.test/0")]), 0.0))
    actions = core.handle(b"e", p.Result(job.attempt_id, p.PageResult(url=job.url, error_kind="timeout", error=error)), 1.0)
    (done,) = sends(actions, p.ThreadDone)
    assert done.message.page.error_kind == "timeout"
    actions = core.handle(b"client", p.Submit(app, [p.ThreadSpec(1, "http://n.test/1")]), 2.0)
    assert (core.queue.down("http://n.test/1", 2.0) is not None) == down
    assert len(assigned(actions)) == (0 if down else 1)


def test_a_probe_that_answers_opens_the_host_and_forgets_its_failures():
    core = make_core(S.replace(retry_times=2, retry_backoff=1.0, thread_timeout=1000.0))
    register(core, b"e", 8)
    app = open_app(core)
    ((_, job),) = assigned(core.handle(b"client", p.Submit(app, [p.ThreadSpec(i, f"http://n.test/{i}") for i in range(4)]), 0.0))
    core.handle(b"e", p.Result(job.attempt_id, p.PageResult(url=job.url, error_kind="connection", error="refused")), 1.0)
    ((_, job),) = assigned(core.dispatch(2.0))
    actions = core.handle(b"e", p.Result(job.attempt_id, p.PageResult(url=job.url, status=200)), 2.5)
    assert len(assigned(actions)) == 3  # answered: the concurrency cap, not one at a time
    assert core.queue.has_answered("n.test")


def test_restart_restores_a_paused_application_paused_and_holds_threads_until_resubmitted():
    core = make_core()
    apps = [{"application_id": "app1", "application_name": "crawl", "usr_name": "u", "state": 3}]
    threads = [{"internal_thread_id": 7, "application_id": "app1", "thread_id": 1, "url": "http://a.test/",
                "depth": 0, "priority": 5, "host": "a.test", "attempts": 1}]
    core.restore(apps, threads, 0.0)
    register(core, b"e", 2)
    (opened,) = sends(core.handle(b"c", p.OpenApplication("crawl", "u", "app1"), 0.1), p.ApplicationOpened)
    assert opened.message.resumed and core.applications["app1"].paused
    # the client is told it is paused (it waited in silence, then blamed the hosts), after the opening
    told = [a.message for a in sends(core.handle(b"c2", p.OpenApplication("crawl", "u", "app1"), 0.15))]
    assert [type(m) for m in told] == [p.ApplicationOpened, p.Controlled]
    assert told[1] == p.Controlled("app1", "pause", "paused")
    core.handle(b"c", p.OpenApplication("crawl", "u", "app1"), 0.16)  # (back on b"c")
    # resubmitted with its instruction: still not dispatched while paused
    actions = core.handle(b"c", p.Submit("app1", [p.ThreadSpec(1, "http://a.test/", instruction={"scope": ["a.test"]})]), 0.2)
    assert assigned(actions) == []
    actions, result = core.control("app1", "resume", 0.3)
    ((_, assign),) = assigned(actions)
    assert result["state"] == "running" and assign.instruction == {"scope": ["a.test"]}
    assert ev.ApplicationChanged("app1", 1) in actions
    # a client that opens a running application is told nothing more
    assert [type(a.message) for a in sends(core.handle(b"c3", p.OpenApplication("crawl", "u", "app1"), 0.4))] \
        == [p.ApplicationOpened]


def test_a_thread_run_again_after_a_manager_restart_never_has_a_start_after_its_finish(tmp_path):
    """A thread that finished under a manager killed before its application stored the result is
    run again by the next manager. Its row kept the previous run's finish while the new run
    started: ``thread_timing`` showed a negative ``run_seconds`` and counted it as a page while it
    ran again. Its first new assignment now clears the old start and finish."""
    engine, record = recorded(tmp_path)
    T = 1_700_000_000.0

    def timing():
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT state, run_seconds FROM thread_timing")).one(), \
                conn.execute(sa.text("SELECT pages FROM application_summary")).scalar()

    first = make_core()
    record(first.handle(b"e", p.Register(name="e", host="h", user="u", threads=1), T))
    (opened,) = sends(record(first.handle(b"c", p.OpenApplication("crawl", "u"), T)), p.ApplicationOpened)
    app = opened.message.application_id
    first.queue.note_answered("h1.test")
    ((_, job),) = assigned(record(submit(first, app, [1], peer=b"c", now=T + 1)))
    record(first.handle(b"e", p.Results([p.AttemptResult(job.attempt_id, _page(1), ran=0.5)]), T + 2))
    assert timing() == ((int(ThreadState.FINISHED), 0.5), 1)
    # the manager dies before the ack; the next one restores the thread and runs it again
    second = make_core()
    record(second.restore([{"application_id": app, "application_name": "crawl", "usr_name": "u", "state": 1}],
                          [{"internal_thread_id": first.applications[app].threads[1].internal_id,
                            "application_id": app, "thread_id": 1, "url": "http://h1.test/1", "depth": 0,
                            "priority": 5, "host": "h1.test", "attempts": 1}], T + 10))
    second.queue.note_answered("h1.test")
    record(second.handle(b"e2", p.Register(name="e", host="h", user="u", threads=1), T + 10))
    record(second.handle(b"c2", p.OpenApplication("crawl", "u", app), T + 10))
    ((_, again),) = assigned(record(submit(second, app, [1], peer=b"c2", now=T + 11)))
    record(second.handle(b"e2", p.Started([again.attempt_id]), T + 12))
    assert timing() == ((int(ThreadState.STARTED), None), 0)  # before: run_seconds -10.0, and 1 page
    record(second.handle(b"e2", p.Results([p.AttemptResult(again.attempt_id, _page(1))]), T + 13))
    assert timing() == ((int(ThreadState.FINISHED), 1.0), 1)
    engine.dispose()


def test_urls_robots_txt_disallows_are_no_errors_on_the_dashboard_before_and_after_a_restart(tmp_path):
    """The client's summary counts the URLs robots.txt disallows apart from its errors; the
    dashboard (and ``/metrics``) counted them as errors, and a manager started on the records
    counted only poisoned threads (a 404 was no error after a restart). Both count as the summary
    does now: of a disallowed URL, a 404 and a page, one error."""
    from gridcrawl.manager.server import application_figures

    engine, record = recorded(tmp_path)
    T = 1_700_000_000.0
    core = make_core()
    record(core.handle(b"e", p.Register(name="e", host="h", user="u", threads=3), T))
    (opened,) = sends(record(core.handle(b"c", p.OpenApplication("crawl", "u"), T)), p.ApplicationOpened)
    app = opened.message.application_id
    for host in ("h0.test", "h1.test", "h2.test"):
        core.queue.note_answered(host)
    jobs = [job for _, job in assigned(record(submit(core, app, [1, 2, 3], peer=b"c", now=T + 1)))]
    pages = {"/1": p.PageResult(url="x", error_kind="robots", error="disallowed by robots.txt"),
             "/2": p.PageResult(url="x", status=404, error_kind="http_status", error="http 404"),
             "/3": p.PageResult(url="x", status=200)}
    record(core.handle(b"e", p.Results([p.AttemptResult(job.attempt_id, pages[job.url[-2:]]) for job in jobs]), T + 2))
    record(core.handle(b"c", p.Ack(app, [1, 2, 3]), T + 3))
    (shown,) = snapshot(core, T + 4)["applications"]
    assert (shown["done"], shown["errors"]) == (3, 1)  # before: 3, 2
    with engine.connect() as conn:
        restored = application_figures(conn, [app])[app]
    assert (restored["done"], restored["errors"]) == (3, 1)  # before: 3, 0
    engine.dispose()


def test_after_a_failover_the_dashboard_counts_the_pages_the_report_counts(tmp_path, caplog):
    """Two threads finished under a manager that died before their acks: the client had stored
    thread 1 (never submitted again), not thread 2 (run again). Thread 1 ends Dead with its first
    run's finish — a page for ``application_summary`` (``gridcrawl report``) — but the dashboard's
    done left it out: 523 against the report's 529 pages in a walkthrough."""
    from gridcrawl import models

    engine, record = recorded(tmp_path)
    T = 1_700_000_000.0

    first = make_core()
    record(first.handle(b"e", p.Register(name="e", host="h", user="u", threads=2), T))
    (opened,) = sends(record(first.handle(b"c", p.OpenApplication("crawl", "u"), T)), p.ApplicationOpened)
    app = opened.message.application_id
    for host in ("h1.test", "h2.test"):
        first.queue.note_answered(host)
    jobs = assigned(record(submit(first, app, [1, 2], peer=b"c", now=T + 1)))
    record(first.handle(b"e", p.Results([p.AttemptResult(job.attempt_id, _page(1), ran=0.5) for _, job in jobs]),
                        T + 2))
    # the manager dies before the acks; the standby restores both threads from the database
    with engine.connect() as conn:
        threads = [dict(r._mapping) for r in conn.execute(sa.select(models.thread))]
    second = make_core()
    record(second.restore([{"application_id": app, "application_name": "crawl", "usr_name": "u", "state": 1}],
                          threads, T + 10))
    second.queue.note_answered("h2.test")
    record(second.handle(b"e2", p.Register(name="e", host="h", user="u", threads=1), T + 10))
    record(second.handle(b"c2", p.OpenApplication("crawl", "u", app), T + 10))
    ((_, again),) = assigned(record(submit(second, app, [2], peer=b"c2", now=T + 11)))
    record(second.handle(b"e2", p.Results([p.AttemptResult(again.attempt_id, _page(1))]), T + 12))
    record(second.handle(b"c2", p.Ack(app, [2]), T + 13))
    record(second.handle(b"c2", p.CloseApplication(app), T + 14))
    with engine.connect() as conn:
        pages = conn.execute(sa.text("SELECT pages FROM application_summary")).scalar()
    (shown,) = snapshot(second, T + 15)["applications"]
    assert (shown["done"], pages) == (2, 2)  # before: done 1
    engine.dispose()
    # resumed later, the crawl goes on as a new application; the log said it "was cancelled"
    import logging
    with caplog.at_level(logging.INFO, logger="gridcrawl.manager"):
        (opened,) = sends(second.handle(b"c3", p.OpenApplication("crawl", "u", app), T + 20), p.ApplicationOpened)
    assert not opened.message.resumed  # (this test core's ids start again at id1: the new one is id2 too)
    assert (f"application {app[:8]} stopped with grid threads not done (cancelled, or completed with threads a "
            "failover restored") in caplog.text and "was cancelled" not in caplog.text


def test_an_executor_id_known_from_the_database_is_reclaimed_only_by_its_user():
    core = make_core()
    core.executor_owners["old-id"] = "alice"
    (w,) = sends(core.handle(b"x", p.Register(name="x", host="h", user="mallory", threads=1, executor_id="old-id"), 0.0), p.Welcome)
    assert w.message.executor_id != "old-id"
    (w,) = sends(core.handle(b"y", p.Register(name="y", host="h", user="alice", threads=1, executor_id="old-id"), 0.0), p.Welcome)
    assert w.message.executor_id == "old-id"


def test_an_executor_id_the_manager_never_gave_is_not_taken():
    core = make_core()
    (w,) = sends(core.handle(b"x", p.Register(name="x", host="h", user="u", threads=1, executor_id="chosen"), 0.0), p.Welcome)
    assert w.message.executor_id != "chosen" and "chosen" not in core.executors


def test_a_connection_that_opens_a_second_application_keeps_it_when_the_first_ones_client_times_out():
    # the first application keeps no claim on the connection: before, the liveness sweep saw its
    # last_seen go stale and dropped the connection, and the second application's submits were refused
    core = make_core()
    register(core, b"e", 2)
    first = open_app(core, b"c")
    core.handle(b"c", p.CloseApplication(first), 0.1)
    second = open_app(core, b"c", now=0.2)
    for now in (1.5, 3.0, 4.5, 6.0):  # the client heartbeats; the first application hears nothing
        core.handle(b"c", p.Heartbeat(), now)
        core.handle(b"e", p.Heartbeat(), now)
        core.tick(now)
    assert core.peers[b"c"] == ("client", second) and core.applications[second].peer == b"c"
    assert core.applications[first].peer is None
    assert not sends(submit(core, second, [1], peer=b"c", now=6.1), p.Refuse)
    assert core.applications[second].threads


def test_an_application_without_a_client_past_detached_timeout_is_cancelled_and_its_client_goes_on_anew():
    core = make_core(S.replace(detached_timeout=100.0, thread_timeout=1000.0))
    register(core, b"e", 1)
    app = open_app(core, b"c")
    ((_, job),) = assigned(submit(core, app, [1, 2, 3], peer=b"c"))  # one runs, two wait
    cancels = []
    for now in range(1, 101):  # the client is gone; the executor heartbeats
        core.handle(b"e", p.Heartbeat(), float(now))
        cancels += sends(core.tick(float(now)), p.Cancel)
    assert core.applications[app].peer is None  # detached after its liveness
    assert core.applications[app].state != ApplicationState.STOPPED and len(core.applications[app].threads) == 3
    assert not cancels
    core.handle(b"e", p.Heartbeat(), 101.0)
    actions = core.tick(101.0)
    assert [c.message.attempt_id for c in sends(actions, p.Cancel)] == [job.attempt_id]
    assert ev.ApplicationStopped(app, 101.0) in actions
    assert core.applications[app].state == ApplicationState.STOPPED and not core.applications[app].threads
    # the client comes back: a new application (the cancelled one's thread rows hold the ids it
    # submits again, unique per application), and what it submits again runs
    (opened,) = sends(core.handle(b"c2", p.OpenApplication("crawl", "u", app), 102.0), p.ApplicationOpened)
    anew = opened.message.application_id
    assert not opened.message.resumed and anew != app
    actions = submit(core, anew, [1, 2, 3], peer=b"c2", now=102.0)
    assert len(assigned(actions)) == 1
    submitted = [e for e in actions if isinstance(e, ev.ThreadSubmitted)]
    assert sorted(e.thread_id for e in submitted) == [1, 2, 3] and {e.application_id for e in submitted} == {anew}
    # detached_timeout 0: never
    core = make_core(S.replace(detached_timeout=0.0))
    app = open_app(core, b"c")
    core.tick(10.0 ** 9)
    assert core.applications[app].state != ApplicationState.STOPPED


def test_the_manager_keeps_at_most_keep_departed_stopped_applications():
    core = make_core(S.replace(keep_departed=2))
    ids = []
    for i in range(5):
        peer = f"c{i}".encode()
        ids.append(open_app(core, peer, now=i))
        core.handle(peer, p.CloseApplication(ids[-1]), i + 0.5)
    assert sorted(core.applications) == sorted(ids[-2:])  # the three stopped longest are forgotten
    assert core._stopped and len(core._stopped) == 2
    running = open_app(core, b"live", now=10.0)  # a running application is never forgotten
    assert running in core.applications
    # a kept application reopens under its id; a forgotten one gets a new id, as after a restart
    (kept,) = sends(core.handle(b"c4", p.OpenApplication("crawl", "u", ids[4]), 11.0), p.ApplicationOpened)
    assert kept.message.resumed and kept.message.application_id == ids[4]
    (gone,) = sends(core.handle(b"c0", p.OpenApplication("crawl", "u", ids[0]), 12.0), p.ApplicationOpened)
    assert not gone.message.resumed and gone.message.application_id not in ids


def test_the_manager_keeps_at_most_keep_departed_executors_that_left():
    core = make_core(S.replace(keep_departed=2))
    left = []
    for i in range(5):
        peer = f"pod{i}".encode()
        left.append(register(core, peer, 2, now=i))
        core.handle(peer, p.Bye("scaled down"), i + 0.5)
    staying = register(core, b"desk", 2, now=9.0)
    assert sorted(core.executors) == sorted(left[-2:] + [staying])
    assert set(core.executor_owners) == set(core.executors)
    assert sorted(core.executor_names.values()) == sorted(core.executors)
    # a kept executor that registers again keeps its id, a forgotten one gets a new id
    (w,) = sends(core.handle(b"pod4b", p.Register(name="pod4", host="h", user="u", threads=2, executor_id=left[4]), 10.0), p.Welcome)
    assert w.message.executor_id == left[4]
    (w,) = sends(core.handle(b"pod0b", p.Register(name="pod0", host="h", user="u", threads=2, executor_id=left[0]), 11.0), p.Welcome)
    assert w.message.executor_id not in left
    # connected executors are never forgotten, however many
    core = make_core(S.replace(keep_departed=0))
    connected = {f"e{i}".encode(): register(core, f"e{i}".encode(), 1) for i in range(4)}
    core.handle(b"e0", p.Bye(), 1.0)
    assert set(core.executors) == {connected[b"e1"], connected[b"e2"], connected[b"e3"]}


def test_the_snapshot_lists_every_connected_executor_and_the_50_that_left_last():
    core = make_core()
    for i in range(60):
        peer = f"gone{i:02d}".encode()
        register(core, peer, 1, now=float(i))
        core.handle(peer, p.Bye(), float(i))
    here = {register(core, b"desk1", 1, now=70.0), register(core, b"desk2", 1, now=70.0)}
    for i in range(60):  # stopped applications beyond the 50 listed are still counted
        app = open_app(core, f"c{i}".encode(), now=float(i))
        core.handle(f"c{i}".encode(), p.CloseApplication(app), float(i))
    snap = snapshot(core, 80.0)
    listed = snap["executors"]
    assert {e["executor_id"] for e in listed if e["connected"]} == here
    assert sorted(e["name"] for e in listed if not e["connected"]) == [f"gone{i:02d}" for i in range(10, 60)]
    assert snap["executors_total"] == 62 and snap["summary"]["applications"] == 60
    assert len(snap["applications"]) == 50


def test_host_hash_dispatch_and_the_heartbeat_count_only_connected_executors():
    core = make_core(S.replace(dispatch="host-hash"))
    for i in range(50):  # executors that left, kept (keep_departed)
        register(core, f"gone{i}".encode(), 4)
        core.handle(f"gone{i}".encode(), p.Bye(), 0.0)
    here = {register(core, b"a", 4), register(core, b"b", 4)}
    assert set(core.connected) == here and len(core.executors) == 52
    app = open_app(core)
    owners = {core.owner(f"h{i}.test").executor_id for i in range(40)}
    assert owners == here  # the ring is made of connected executors only
    beats = sends(core.tick(1.0), p.Heartbeat)
    assert {b.message.executors for b in beats if b.peer == b"client"} == {2}
    assert core.stats()["executors"] == 2
    # one that leaves is out of the ring at once
    a_id = core.peers[b"a"][1]
    core.handle(b"b", p.Bye(), 1.1)
    assert set(core.connected) == {a_id}
    assert {core.owner(f"h{i}.test").executor_id for i in range(40)} == {a_id}
    assert app in core.applications


def test_a_restarted_manager_remembers_the_latest_keep_departed_executors():
    core = make_core(S.replace(keep_departed=2))
    core.remember_executors([(f"x{i}", "alice", f"pod{i}", "h") for i in range(5)])  # oldest first
    assert core.executor_owners == {"x3": "alice", "x4": "alice"}
    (w,) = sends(core.handle(b"a", p.Register(name="pod4", host="h", user="alice", threads=1), 0.0), p.Welcome)
    assert w.message.executor_id == "x4"  # the same executor, started again
    (w,) = sends(core.handle(b"b", p.Register(name="other", host="h", user="alice", threads=1, executor_id="x0"), 0.0), p.Welcome)
    assert w.message.executor_id != "x0"  # forgotten: a new id, never one the peer names
    other = w.message.executor_id
    core.handle(b"a", p.Bye(), 1.0)
    core.handle(b"b", p.Bye(), 1.0)  # three gone now: x3 (never seen since the restart), x4, other
    assert set(core.executor_owners) == set(core.executors) == {"x4", other}


def test_a_new_host_gets_one_job_and_later_jobs_carry_its_crawl_delay():
    core = make_core(S.replace(max_crawl_delay=5.0))
    register(core, b"e", 4)
    app = open_app(core)
    specs = [p.ThreadSpec(i, f"http://d.test/{i}") for i in range(3)]
    ((_, job),) = assigned(core.handle(b"client", p.Submit(app, specs), 0.0))  # its delay is not known yet
    assert job.delay == 0.0
    core.handle(b"e", p.Started([job.attempt_id]), 0.1)
    page = p.PageResult(url=job.url, status=200, crawl_delay=100.0)  # robots.txt asks 100 s: capped at 5
    assert assigned(core.handle(b"e", p.Result(job.attempt_id, page), 1.0)) == []
    for now in (3.0, 5.5):  # both peers stay alive
        core.handle(b"e", p.Heartbeat(), now)
        core.handle(b"client", p.Heartbeat(), now)
    assert assigned(core.tick(5.9)) == []
    ((_, nxt),) = assigned(core.tick(6.0))
    assert nxt.delay == 5.0  # the executor spaces this thread's own requests (redirect hops) by it


@pytest.mark.parametrize("relayed", [False, True], ids=["decoded", "relayed"])
def test_a_link_robots_txt_disallows_costs_its_host_no_crawl_delay(relayed):
    """An executor refuses a disallowed URL from the robots.txt rules it holds, sending the host
    nothing: the next thread of the host starts at once, not a Crawl-delay later (a page of 100
    disallowed links cost 100 delays)."""
    core = make_core(S.replace(max_crawl_delay=5.0))
    register(core, b"e", 4)
    app = open_app(core)
    specs = [p.ThreadSpec(i, f"http://d.test/{i}") for i in range(3)]
    ((_, job),) = assigned(core.handle(b"client", p.Submit(app, specs), 0.0))

    def result(job, page, now):
        message = p.Result(job.attempt_id, page)
        if relayed:  # as the manager's server loop decodes an executor's message
            message = p.decode(list(p.encode(message)), relay=True)
        return assigned(core.handle(b"e", message, now))

    assert result(job, p.PageResult(url=job.url, status=200, crawl_delay=5.0), 1.0) == []
    for now in (3.0, 5.5):  # both peers stay alive
        core.handle(b"e", p.Heartbeat(), now)
        core.handle(b"client", p.Heartbeat(), now)
    ((_, job),) = assigned(core.tick(6.0))
    refused = p.PageResult(url=job.url, error_kind="robots", error="disallowed by robots.txt",
                           crawl_delay=5.0, requested=False)
    ((_, job),) = result(job, refused, 6.1)  # at once
    assert result(job, p.PageResult(url=job.url, status=200, crawl_delay=5.0), 6.2) == []


def test_an_executor_started_again_under_its_name_keeps_its_id():
    """gridcrawl run names its executors executor-1 ...: after a re-run (new processes, new
    connections, no id given) each keeps its id, so the records and the dashboard list it once
    (issue 21: twice, with different counts). A live executor's name is not taken over."""
    core = make_core()
    first = register(core, b"ex", threads=1)
    core.handle(b"ex", p.Bye("stopping"), 1.0)
    again = sends(core.handle(b"ex-new", p.Register(name="ex", host="h", user="u", threads=1), 2.0), p.Welcome)
    assert again[0].message.executor_id == first
    twin = sends(core.handle(b"twin", p.Register(name="ex", host="h", user="u", threads=1), 3.0), p.Welcome)
    assert twin[0].message.executor_id != first  # the first is connected: a second process is another executor
    other = sends(core.handle(b"o", p.Register(name="ex", host="h", user="bob", threads=1), 3.0), p.Welcome)
    assert other[0].message.executor_id not in (first, twin[0].message.executor_id)

    restarted = make_core()  # a manager restarted on the same database knows the executors' names
    restarted.executor_owners[first] = "u"
    restarted.executor_names[("ex", "h", "u")] = first
    (w,) = sends(restarted.handle(b"p", p.Register(name="ex", host="h", user="u", threads=1), 0.0), p.Welcome)
    assert w.message.executor_id == first


def test_two_connected_executors_of_one_name_are_warned_of_at_registration(caplog):
    """A configuration file's ``name = "desk-01"`` copied to every desktop made executors that
    the dashboard, ``gridcrawl report`` and the executor table list under one name, told apart
    only by id, without a word: the manager now says so when the second registers, naming the
    first, and only while a namesake is connected."""
    import logging
    core = make_core()

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    with caplog.at_level(logging.WARNING, logger="gridcrawl.manager"):
        (a,) = sends(core.handle(b"a", p.Register(name="desk-01", host="pc-a", user="u", threads=1), 0.0), p.Welcome)
        sends(core.handle(b"o", p.Register(name="desk-02", host="pc-o", user="u", threads=1), 0.0), p.Welcome)
        assert warnings() == []
        (b,) = sends(core.handle(b"b", p.Register(name="desk-01", host="pc-b", user="u", threads=1), 1.0), p.Welcome)
        assert warnings() == [
            f"executor {b.message.executor_id[:8]} registers as desk-01, the name of connected executor "
            f"{a.message.executor_id[:8]} (u@pc-a): the dashboard, gridcrawl report and the executor table tell "
            "them apart only by id; give each executor its own name (--name, or none for host:pid)"]
        core.handle(b"a", p.Bye("stopping"), 2.0)
        core.handle(b"b", p.Bye("stopping"), 2.0)
        caplog.clear()
        sends(core.handle(b"c", p.Register(name="desk-01", host="pc-c", user="u", threads=1), 3.0), p.Welcome)
        assert warnings() == []  # its namesakes left: one desk-01 now


# ---------------------------------------------------------------------------- capability dispatch


def register_with(core, peer: bytes, threads: int, capabilities, now=0.0) -> str:
    actions = core.handle(peer, p.Register(name=peer.decode(), host="h", user="u", threads=threads,
                                           capabilities=list(capabilities)), now)
    (welcome,) = sends(actions, p.Welcome)
    return welcome.message.executor_id


def submit_needing(core, app, ids, needs, host="shop.test", peer=b"client", now=0.0):
    specs = [p.ThreadSpec(i, f"http://{host}/{i}", needs=list(needs)) for i in ids]
    return core.handle(peer, p.Submit(app, specs), now)


def test_a_thread_needing_a_plugin_goes_only_to_an_executor_that_has_it():
    core = make_core()
    register_with(core, b"plain", 4, [])
    register_with(core, b"shop", 1, ["plugin:shop", "plugin:shop@1.0"])
    app = open_app(core)
    got = assigned(submit_needing(core, app, range(1, 4), ["plugin:shop"]))
    assert [(peer, job.thread_id, job.needs) for peer, job in got] == [(b"shop", 1, ["plugin:shop"])]
    # the other two wait for the one capable executor's slot, not for the idle plain one
    assert core.stats()["queued"] == 2 and core.unrunnable() == {}
    (result,) = [job for _, job in got]
    actions = core.handle(b"shop", p.Result(result.attempt_id, p.PageResult(url=result.url, status=200)), 1.0)
    assert [(peer, job.thread_id) for peer, job in assigned(actions)] == [(b"shop", 2)]


def test_threads_no_connected_executor_can_run_wait_visibly_and_block_nobody():
    core = make_core()
    core.queue.note_answered("shop.test")  # a host heard from before: no first-contact limit
    register_with(core, b"plain", 2, [])
    app = open_app(core)
    # the unrunnable threads come first, on the same host, at a higher priority
    specs = [p.ThreadSpec(i, f"http://shop.test/r{i}", priority=9, needs=["render"]) for i in range(1, 4)]
    specs += [p.ThreadSpec(i, f"http://shop.test/p{i}") for i in range(4, 6)]
    got = assigned(core.handle(b"client", p.Submit(app, specs), 0.0))
    assert sorted(job.thread_id for _, job in got) == [4, 5]
    assert core.unrunnable() == {"render": 3}
    assert snapshot(core, 0.0)["summary"]["unrunnable"] == {"render": 3}
    # an executor that can render joins: the waiting threads go to it, and nothing waits any more
    register_with(core, b"browser", 3, ["render"], now=1.0)
    assert core.unrunnable() == {}
    assert core.stats()["queued"] == 0
    running = core.executors[[e for e, ex in core.executors.items() if ex.name == "browser"][0]].running
    assert sorted(t.thread_id for t in running.values()) == [1, 2, 3]


def test_a_thread_needs_every_capability_it_names():
    core = make_core()
    register_with(core, b"a", 2, ["render"])
    register_with(core, b"b", 2, ["plugin:x"])
    register_with(core, b"ab", 1, ["render", "plugin:x"])
    app = open_app(core)
    got = assigned(submit_needing(core, app, [1, 2], ["plugin:x", "render"]))
    assert [peer for peer, _ in got] == [b"ab"]
    assert core.unrunnable() == {}  # the second one waits for ab's slot: it has an executor


def test_a_capable_executor_that_leaves_takes_its_threads_back_to_waiting():
    core = make_core()
    register_with(core, b"plain", 2, [])
    register_with(core, b"shop", 1, ["plugin:shop"])
    app = open_app(core)
    submit_needing(core, app, [1, 2], ["plugin:shop"])
    core.handle(b"shop", p.Bye("stopping"), 1.0)
    assert core.unrunnable() == {"plugin:shop": 2}
    assert snapshot(core, 1.0)["executors"][1]["capabilities"] == ["plugin:shop"]


def test_host_hash_dispatch_hashes_among_capable_executors_only():
    core = make_core(Settings(heartbeat_interval=1.0, heartbeat_liveness=3, prefetch=0, dispatch="host-hash",
                              start_window=30))  # about hashing, not the slow start of new executors
    for i in range(3):
        register_with(core, f"plain{i}".encode(), 30, [])
    register_with(core, b"shop", 30, ["plugin:shop"])
    app = open_app(core)
    specs = [p.ThreadSpec(i, f"http://h{i}.test/", needs=["plugin:shop"]) for i in range(1, 5)]
    specs += [p.ThreadSpec(i, f"http://h{i}.test/x") for i in range(5, 25)]
    got = assigned(core.handle(b"client", p.Submit(app, specs), 0.0))
    assert {peer for peer, job in got if job.needs} == {b"shop"}
    assert len({peer for peer, job in got if not job.needs}) > 1   # plain hosts still spread
    assert len(got) == 24 and core.unrunnable() == {}


def test_registration_and_submission_refuse_malformed_capability_names():
    core = make_core()
    actions = core.handle(b"x", p.Register(name="x", host="h", user="u", threads=1,
                                           capabilities=["plugin:a b"]), 0.0)
    (refuse,) = sends(actions, p.Refuse)
    assert "capabilities" in refuse.message.reason and not core.executors
    app = open_app(core)
    (refuse,) = sends(submit_needing(core, app, [1], ["x" * 200]), p.Refuse)
    assert "thread 1 needs" in refuse.message.reason and core.stats()["queued"] == 0


def test_executor_capabilities_are_recorded():
    core = make_core()
    actions = core.handle(b"e", p.Register(name="e", host="h", user="u", threads=1,
                                           capabilities=["plugin:shop@1.0", "plugin:shop"]), 0.0)
    (row,) = [rows(a)[0][3] for a in actions if isinstance(a, ev.ExecutorRegistered)]
    assert row["capabilities"] == "plugin:shop plugin:shop@1.0"
    app = open_app(core)
    inserted = [rows(a)[0][3] for a in submit_needing(core, app, [1], ["render", "plugin:shop"])
                if isinstance(a, ev.ThreadSubmitted)]
    assert inserted[0]["needs"] == "plugin:shop render"


def test_a_page_whose_browser_failed_is_retried_as_a_new_attempt_on_a_rendering_executor():
    core = make_core(S.replace(retry_times=2, retry_backoff=1.0))
    register_with(core, b"plain", 4, [])
    register_with(core, b"browser", 1, ["render"])
    app = open_app(core)
    ((peer, job),) = assigned(submit_needing(core, app, [1], ["render"]))
    assert peer == b"browser"
    died = p.PageResult(url=job.url, error_kind="render", error="browser: Target closed")
    actions = core.handle(b"browser", p.Result(job.attempt_id, died), 1.0)
    assert sends(actions, p.ThreadDone) == [] and assigned(actions) == []  # not delivered: retried
    ((peer, again),) = assigned(core.dispatch(2.0))
    assert peer == b"browser" and again.attempt_id != job.attempt_id and again.needs == ["render"]



def test_heartbeat_figures_are_recorded_at_most_every_few_seconds_and_the_last_when_it_leaves():
    from gridcrawl.manager.core import HEARTBEAT_RECORD_EVERY as EVERY
    core = make_core()
    register(core, b"e", 1)

    def beat(now, cpu):
        return [a for a in core.handle(b"e", p.Heartbeat({"cpu_usage": cpu}), now) if isinstance(a, ev.ExecutorHeartbeat)]
    assert [e.cpu_usage for e in beat(1.0, 10.0)] == [10.0]          # the first at once
    assert beat(2.0, 20.0) == [] and beat(1.0 + EVERY - 0.1, 30.0) == []  # then at most every EVERY s
    assert core.executors["id1"].figures == {"cpu_usage": 30.0}      # the dashboard's figures are live
    assert [e.cpu_usage for e in beat(1.0 + EVERY, 40.0)] == [40.0]
    assert beat(2.0 + EVERY, 50.0) == []
    left = core.handle(b"e", p.Bye(), 3.0 + EVERY)                   # leaving writes the last one
    assert [(e.cpu_usage, e.time) for e in left if isinstance(e, ev.ExecutorHeartbeat)] == [(50.0, 2.0 + EVERY)]


def test_absurd_heartbeat_figures_are_kept_within_what_they_can_be():
    """A CPU percentage of -5e18 and a memory of -2^62 bytes were recorded and shown as sent."""
    core = make_core()
    register(core, b"e", 1)
    (beat,) = [a for a in core.handle(b"e", p.Heartbeat({"cpu_usage": -5e18, "cpu_avail": 9e18, "mem_usage": -2**62,
                                                         "pages_per_second": 1e18, "running": -3}), 1.0)
               if isinstance(a, ev.ExecutorHeartbeat)]
    assert (beat.cpu_usage, beat.cpu_avail, beat.mem_usage, beat.pages_per_second) == (0.0, 100.0, 0, 1e18)
    assert core.executors["id1"].figures["running"] == 0 and core.executors["id1"].figures["cpu_avail"] == 100.0


def test_only_known_heartbeat_figures_are_kept_within_their_bounds_and_dropped_when_the_executor_leaves():
    """8 connections whose heartbeats named 60 figures of 1 MB each took the manager from 97 MB
    to 548 MB, kept after they were declared dead (departed executors are kept, keep_departed);
    a memory of 2**63-1 bytes was kept as sent."""
    core = make_core()
    core.handle(b"e", p.Register(name="e", host="h", user="u", threads=2, mem_max=8 * 2 ** 30), 0.0)
    ex = core.executors["id1"]
    figures = {f"{j:02d}" + "x" * 1000: 1 for j in range(60)}
    figures.update(cpu_usage=12.5, mem_usage=2 ** 63 - 1, running=10 ** 6, pages_per_second=3.0, other="text")
    core.handle(b"e", p.Heartbeat(figures), 1.0)
    assert ex.figures == {"cpu_usage": 12.5, "mem_usage": 8 * 2 ** 30, "running": ex.capacity,
                          "pages_per_second": 3.0}
    core.tick(10.0)  # silent for 9 s: declared dead, kept as a departed executor
    assert not ex.connected and core.executors["id1"] is ex and ex.figures == {}
    assert next(e for e in snapshot(core, 10.0)["executors"] if e["executor_id"] == "id1")["cpu_usage"] is None


def test_instructions_are_bounded_per_thread_and_per_application():
    """A rogue application submitted 200 threads with a 4 MB instruction each, needing a
    capability no executor has: 800 MB of the manager's memory for the application's 7 days.
    A thread's instruction over MAX_THREAD_INSTRUCTION, an application's over
    MAX_APPLICATION_INSTRUCTION, and more than MAX_INSTRUCTIONS_PER_APPLICATION held by one
    application's threads are refused for good (``final``: the client stops rather than send
    it again), nothing of the submit queued; the size is what the instruction holds in memory,
    its values counted (65 KB of ``[{}] * 65000`` held 4.5 MB); acknowledged threads free their
    share."""
    from gridcrawl.manager import core as c
    core = make_core(S.replace(max_threads_per_application=10 ** 6))
    app = open_app(core)
    big = {"x": "y" * c.MAX_THREAD_INSTRUCTION}
    (refused,) = sends(core.handle(b"client", p.Submit(app, [p.ThreadSpec(1, "http://h.test/1", instruction=big)]),
                                   0.0), p.Refuse)
    assert refused.message.reason.startswith("grid thread 1: its instruction would hold about") and refused.message.final
    assert not core.applications[app].threads
    bomb = {"items": [{}] * 65_000}  # 65 KB of msgpack
    assert len(msgspec.msgpack.encode(bomb)) < 70_000 and c._instruction_bytes(bomb) > 65_000 * c.NODE_BYTES
    (refused,) = sends(core.handle(b"client", p.OpenApplication("crawl", "u", instruction={
        "x": "y" * c.MAX_APPLICATION_INSTRUCTION}), 0.0), p.Refuse)
    assert refused.message.reason.startswith("the application's instruction would hold about") and refused.message.final
    each = {"x": "y" * (c.MAX_THREAD_INSTRUCTION // 2)}
    size = c._instruction_bytes(each)
    per_submit = c.MAX_INSTRUCTIONS_PER_APPLICATION // size // 2
    for n in range(2):  # about half the budget each
        specs = [p.ThreadSpec(n * per_submit + i, f"http://h.test/{n}/{i}", instruction=each) for i in range(per_submit)]
        assert not sends(core.handle(b"client", p.Submit(app, specs), 0.0), p.Refuse)
    more = [p.ThreadSpec(10 ** 5 + i, f"http://h.test/z{i}", instruction=each) for i in range(2)]
    (refused,) = sends(core.handle(b"client", p.Submit(app, more), 0.0), p.Refuse)
    assert f"over {c.MAX_INSTRUCTIONS_PER_APPLICATION}: submit fewer at once" in refused.message.reason
    held = core.applications[app].instruction_bytes
    assert held == 2 * per_submit * size
    # resubmitting threads it holds adds nothing; finished and acknowledged ones free their share
    assert not sends(core.handle(b"client", p.Submit(app, specs[:3]), 0.0), p.Refuse)
    assert core.applications[app].instruction_bytes == held
    ((peer, job),) = assigned(core.handle(b"e", p.Register(name="e", host="h", user="u", threads=1), 1.0))
    core.handle(peer, p.Result(job.attempt_id, p.PageResult(url=job.url, status=200)), 2.0)
    done = next(t for t in core.applications[app].threads.values() if t.state == ThreadState.FINISHED)
    core.handle(b"client", p.Ack(app, [done.thread_id]), 3.0)
    assert core.applications[app].instruction_bytes == held - size


def test_a_page_that_holds_every_proven_executor_past_straggler_seconds_ends_as_poison():
    """A page whose parse held every executor it went to (one tag of 200,000 attributes: over 10
    minutes each) was taken back as a straggler every 120 s and handed to the other executor, for
    ever: take-backs were never counted, and the crawl never ended. Taken back from an executor
    that has returned results (a proven one, not a silent one), the attempt counts towards the
    thread's max_attempts: it fails as poison, delivered to the client as failed."""
    core = make_core(S.replace(thread_timeout=3000.0, straggler_seconds=120.0, quarantine_after=100))
    for host in ("h0.test", "h1.test", "h2.test"):
        core.queue.note_answered(host)
    register(core, b"a", 1)
    register(core, b"b", 1)
    app = open_app(core)
    for (peer, job) in assigned(submit(core, app, [1, 2])):  # both answer: proven executors
        core.handle(peer, p.Result(job.attempt_id, p.PageResult(url=job.url, status=200)), 1.0)
    core.handle(b"client", p.Ack(app, [1, 2]), 1.0)
    ((holder, pinned),) = assigned(submit(core, app, [0], now=2.0))
    outcome, now = None, 2
    while outcome is None and now < 2000:
        now += 1
        actions = [a for peer in (b"a", b"b", b"client") for a in core.handle(peer, p.Heartbeat(), float(now))]
        for send in sends(actions + core.tick(float(now)), p.ThreadDone):
            outcome = send.message
    assert outcome is not None and outcome.thread_id == 0 and outcome.failed  # ended, as poison
    t = core.applications[app].threads[0]
    assert t.state == ThreadState.FINISHED and t.lost == S.max_attempts and len(t.tried) == 2
    assert now <= (S.max_attempts + 1) * 121


def test_a_straggler_is_taken_back_for_an_idle_executor_and_only_then():
    """An executor that registers first, takes the seed and never answers (heartbeating all the
    while) held it for thread_timeout (300 s) while the others sat idle: a 5 s crawl took 601 s.
    Now, once another executor has an idle worker and nothing to run, an attempt held longer than
    straggler_seconds is taken back from its holder (cancelled there, recorded ``straggler``)
    and runs on the idle one. While the idle one has work of its own, nothing is taken."""
    core = make_core(S.replace(thread_timeout=300.0, straggler_seconds=120.0, quarantine_after=3))
    register(core, b"rogue", 8)
    app = open_app(core)
    ((_, seed),) = assigned(submit(core, app, [0]))
    good = register(core, b"good", 1, now=1.0)
    taken = None
    for now in range(2, 130):
        for peer in (b"rogue", b"good"):
            core.handle(peer, p.Heartbeat(), float(now))
        actions = core.tick(float(now))
        if assigned(actions):
            taken = (now, actions)
            break
    now, actions = taken
    assert 120 < now <= 122  # held more than straggler_seconds, not thread_timeout
    ((peer, job),) = assigned(actions)
    assert peer == b"good" and job.url == seed.url
    assert [a.message.attempt_id for a in sends(actions, p.Cancel)] == [seed.attempt_id]  # the holder is told
    assert [(e.attempt_id, e.outcome) for e in actions if isinstance(e, ev.AttemptEnded)] == [
        (seed.attempt_id, "straggler")]
    rogue = next(ex for ex in core.executors.values() if ex.name == "rogue")
    # it never returned a result: quarantined at once, with nothing held; the seed's take-back is
    # no lost attempt (silent executors taking it in turn made it poison), and not run there again
    assert rogue.quarantined_until is not None and not rogue.running
    t = core.applications[app].threads[0]
    assert t.lost == 0 and t.tried == {rogue.executor_id}
    assert core.executors[good].running  # and its late result would be fenced
    # the idle executor busy with work of its own: nothing is taken from the other
    core2 = make_core(S.replace(thread_timeout=300.0, straggler_seconds=120.0))
    for host in ("h0.test", "h1.test"):
        core2.queue.note_answered(host)
    register(core2, b"slow", 1)
    app2 = open_app(core2)
    submit(core2, app2, [0])
    register(core2, b"busy", 1, now=1.0)
    submit(core2, app2, [1], now=1.0)
    for now in range(2, 200):
        for peer in (b"slow", b"busy"):
            core2.handle(peer, p.Heartbeat(), float(now))
        assert not [e for e in core2.tick(float(now)) if isinstance(e, ev.AttemptEnded)]


def test_log_lines_say_one_thing_in_the_singular(caplog):
    import logging
    """Counts in the manager's log that can be 1 read as a person writes them: an executor of
    one worker thread was "registered: u@h, 1 threads", a poisoned thread "failed: 1 attempts
    lost" and a failover "restored 1 applications"."""
    core = make_core(S.replace(max_attempts=1))
    with caplog.at_level(logging.INFO, logger="gridcrawl.manager"):
        register(core, b"e", 1)
        app = open_app(core)
        ((_, job),) = assigned(core.handle(b"client", p.Submit(app, [p.ThreadSpec(1, "http://h.test/1")]), 0.0))
        core.handle(b"e", p.Heartbeat(), 9.0)
        core.tick(1000.0)                                  # ran over the timeout: taken back, poison
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if m.endswith("registered: u@h, 1 thread")], said
    assert [m for m in said if "failed: 1 attempt lost (poison)" in m], said


def test_timeouts_of_requests_sent_before_the_hosts_last_answer_do_not_make_it_stop_answering():
    """A slow part of a site: 4 of a host's pages time out together, 30 s after they were sent,
    while its other pages answer meanwhile. Their results came in a row after the last answer,
    so the host "stopped answering": one thread at a time, probes, and, when the probes were
    slow pages too, every queued page of the host failed without a fetch. A request sent before
    the host's last answer says nothing of the host now: it keeps its concurrency."""
    core = make_core(S.replace(retry_times=2, retry_backoff=1.0, thread_timeout=1000.0))
    core.queue.note_answered("h.test")
    register(core, b"e", 8)
    app = open_app(core)
    got = [job for _, job in assigned(core.handle(b"client", p.Submit(app, [p.ThreadSpec(i, f"http://h.test/{i}")
                                                                             for i in range(30)]), 0.0))]
    assert len(got) == 8
    fast, slow = got[:4], got[4:]
    for i, job in enumerate(fast):  # the fast pages answer, 1 s to 4 s after they were sent
        core.handle(b"e", p.Results([p.AttemptResult(job.attempt_id, p.PageResult(url=job.url, status=200),
                                                     ran=1.0)]), 1.0 + i)
    for job in slow:  # the slow ones, sent at 0, time out at 30 s
        core.handle(b"e", p.Results([p.AttemptResult(job.attempt_id, p.PageResult(
            url=job.url, error_kind="timeout", error="no data from the server for 30 s"), ran=30.0)]), 30.0)
    # its whole concurrency (each result's dispatch refilled it), not one probe at a time
    assert core.queue.has_answered("h.test") and core.queue.hosts["h.test"].in_flight == 8
