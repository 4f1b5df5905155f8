"""Hostile and broken executors at the manager's pure core (issue 22, items 1 and 2): believed
capacity is capped and grows with what an executor returns, a thread taken back is not given to
the same executor again, poison needs lost attempts on two executors, an executor whose attempts
keep timing out is quarantined, and a result counts only from the executor its attempt was
assigned to. No sockets, no clock: ``now`` is passed in."""

from __future__ import annotations

import itertools

from gridcrawl import protocol as p
from gridcrawl.settings import Settings
from gridcrawl.states import ThreadState
from gridcrawl.manager import events as ev
from gridcrawl.manager.core import ManagerCore, Strike
from gridcrawl.manager.dashboard import snapshot
from test_core import assigned, open_app, register, sends, submit

S = Settings(heartbeat_interval=1.0, heartbeat_liveness=3, thread_timeout=10.0, max_attempts=3, prefetch=0,
             start_window=4, max_threads_per_executor=64, quarantine_after=3, quarantine_seconds=60.0)


def make_core(settings=S) -> ManagerCore:
    ids = (f"id{i}" for i in itertools.count(1))
    return ManagerCore(settings, new_id=lambda: next(ids))


def beat(core, peers, now):
    for peer in peers:
        core.handle(peer, p.Heartbeat(), now)


def test_a_huge_thread_claim_is_capped_and_the_window_grows_with_results():
    core = make_core()
    for host in ("h0.test", "h1.test", "h2.test"):  # hosts heard from before: no first-contact limit
        core.queue.note_answered(host)
    register(core, b"rogue", 50_000)
    app = open_app(core)
    got = assigned(submit(core, app, range(100)))
    rogue = core.executors[core.peers[b"rogue"][1]]
    assert rogue.workers == 64 and rogue.capacity == 64
    assert len(got) == 4  # the start window, not 50,000
    # each result returned lets one more attempt out: the window doubles per round trip
    for _, job in got:
        actions = core.handle(b"rogue", p.Result(job.attempt_id, p.PageResult(url=job.url, status=200)), 1.0)
        assert len(assigned(actions)) == 2
    assert rogue.window == 8 and len(rogue.running) == 8


def test_a_timed_out_thread_goes_to_another_executor_and_the_rogue_is_quarantined():
    core = make_core(S.replace(start_window=64))
    register(core, b"rogue", 50_000)
    app = open_app(core)
    submit(core, app, range(3))
    register(core, b"honest", 1)
    rogue = core.executors[core.peers[b"rogue"][1]]
    assert len(rogue.running) == 3
    beat(core, (b"rogue", b"honest", b"client"), 10.5)
    actions = core.tick(10.5)  # all three ran over thread_timeout on the rogue
    assert {peer for peer, _ in assigned(actions)} == {b"honest"}  # one slot: the others wait for it
    assert rogue.quarantined_until == 70.5 and rogue.free == 0 and rogue.window == 8
    assert ev.ExecutorQuarantined(rogue.executor_id, 70.5) in actions
    threads = core.applications[app].threads
    assert all(t.tried == {rogue.executor_id} and t.lost == 1 for t in threads.values())
    assert sum(t.state == ThreadState.READY for t in threads.values()) == 2
    # the quarantine ends after quarantine_seconds; the next one lasts twice as long
    beat(core, (b"rogue", b"honest", b"client"), 70.6)
    core.tick(70.6)
    assert rogue.quarantined_until is None
    assert snapshot(core, 70.6)["executors"][0]["quarantined_until"] is None


def test_a_thread_waits_for_another_executor_rather_than_the_one_it_was_taken_back_from():
    core = make_core(S.replace(quarantine_after=100))
    register(core, b"a", 1)
    app = open_app(core)
    ((_, first),) = assigned(submit(core, app, [1]))
    register(core, b"b", 1, now=0.1)
    ((peer, other),) = assigned(submit(core, app, [2], now=0.1))
    assert peer == b"b"
    beat(core, (b"a", b"b", b"client"), 10.05)
    assert assigned(core.tick(10.05)) == []  # thread 1 timed out on a; only a has room: it waits for b
    actions = core.handle(b"b", p.Result(other.attempt_id, p.PageResult(url="x", status=200)), 10.2)
    ((peer, again),) = assigned(actions)
    assert peer == b"b" and again.thread_id == 1


def test_poison_needs_lost_attempts_on_two_executors_when_two_exist():
    core = make_core(S.replace(max_attempts=1, quarantine_after=100))
    register(core, b"flaky", 1)
    app = open_app(core)
    submit(core, app, [1])
    register(core, b"good", 1)
    t = core.applications[app].threads[1]
    beat(core, (b"flaky", b"good", b"client"), 10.5)
    ((peer, again),) = assigned(core.tick(10.5))  # lost once on flaky: max_attempts, but one executor
    assert peer == b"good" and not t.failed and t.lost == 1
    (done,) = sends(core.handle(b"good", p.Result(again.attempt_id, p.PageResult(url="x", status=200)), 11.0),
                    p.ThreadDone)
    assert not done.message.failed and done.message.page.status == 200
    # with one executor only, max_attempts lost attempts are poison as before
    alone = make_core(S.replace(max_attempts=1))
    register(alone, b"only", 1)
    app = open_app(alone)
    submit(alone, app, [1])
    beat(alone, (b"only", b"client"), 10.5)
    (done,) = sends(alone.tick(10.5), p.ThreadDone)
    assert done.message.failed


def test_results_only_from_the_assigned_executor_others_are_strikes_and_touch_no_record():
    core = make_core()
    register(core, b"a", 1)
    register(core, b"b", 1)
    app = open_app(core)
    got = dict(assigned(submit(core, app, [1, 2])))
    mine, theirs = got[b"a"], got[b"b"]
    assert mine.attempt_id != theirs.attempt_id and max(mine.attempt_id, theirs.attempt_id) > 2 ** 32
    # a registered executor names the other's attempt; a stranger names one too
    for peer in (b"a", b"stranger"):
        actions = core.handle(peer, p.Result(theirs.attempt_id, p.PageResult(url="forged")), 1.0)
        assert [a for a in actions if type(a) in ev.EVENTS.values()] == []
        assert [a.peer for a in actions if isinstance(a, Strike)] == [peer]
    assert core.fenced == 0
    t = core.applications[app].threads[2]
    assert t.state == ThreadState.SCHEDULED and t.result is None
    actions = core.handle(b"b", p.Result(theirs.attempt_id, p.PageResult(url="real", status=200)), 1.1)
    (done,) = sends(actions, p.ThreadDone)
    assert done.message.page.url == "real"


def test_attempts_running_when_the_previous_manager_stopped_keep_their_hosts_slots():
    """A manager restarted (or a standby taking over) mid-crawl knew nothing of the previous
    manager's attempts still fetching at their executors, which live on: it dispatched their
    hosts' threads to other executors at once, and a host allowed one request at a time had two.
    Each such attempt now holds its host's slot as a taken-back one does: until its late result,
    until its executor registers again without it, or for the request window after its start
    (thread_timeout 10 s here); one that started longer ago holds nothing."""
    T = 1000.0
    core = make_core(S.replace(concurrent_requests_per_host=1))
    core.remember_executors([("old-ex", "u", "old", "h")])
    core.restore([], [], T, running=[(77, "old-ex", "h1.test", T - 1), (78, "old-ex", "h2.test", T - 1),
                                     (79, "old-ex", "h0.test", T - 20)])
    for host in ("h0.test", "h1.test", "h2.test"):
        core.queue.note_answered(host)
    register(core, b"new", 4, now=T)
    app = open_app(core, now=T)
    got = assigned(submit(core, app, [1, 2, 3], now=T))
    assert [job.thread_id for _, job in got] == [3]  # h0.test's attempt began 20 s ago: no longer held
    # the old executor comes back still running attempt 77, not 78: h2.test's slot is free (90: an
    # attempt this manager never knew)
    actions = core.handle(b"old", p.Register(name="old", host="h", user="u", threads=2, executor_id="old-ex",
                                             running=[77, 90]), T + 1)
    assert sends(actions, p.Welcome)[0].message.executor_id == "old-ex"
    assert [job.thread_id for _, job in assigned(actions)] == [2]
    assert [job.thread_id for _, job in assigned(core.tick(T + 2))] == []  # h1.test still held
    # its late result frees h1.test's slot (fenced, not struck), and thread 1 goes out
    actions = core.handle(b"old", p.Result(77, p.PageResult(url="http://h1.test/1", status=200)), T + 3)
    assert [a.outcome for a in actions if isinstance(a, ev.AttemptEnded)] == ["fenced"]
    assert [job.thread_id for _, job in assigned(actions)] == [1]
    # a result of an attempt it named at registration that this manager never knew (a manager on
    # another database): dropped, no strike against an honest executor
    assert core.handle(b"old", p.Result(90, p.PageResult(url="http://h2.test/9", status=200)), T + 3) == []
    assert core.handle(b"new", p.Result(90, p.PageResult(url="http://h2.test/9", status=200)), T + 3) \
        == [Strike(b"new", "result for attempt 90, not one of its own")]
    # an executor that never comes back holds its hosts' slots only for the window
    again = make_core(S.replace(concurrent_requests_per_host=1))
    again.restore([], [], T, running=[(80, "gone", "h1.test", T - 1)])
    again.queue.note_answered("h1.test")
    register(again, b"new", 4, now=T)
    app = open_app(again, now=T)
    assert assigned(submit(again, app, [1], now=T)) == []
    for now in (T + 2, T + 4, T + 6, T + 8, T + 8.9):
        beat(again, (b"new", b"client"), now)
        assert assigned(again.tick(now)) == []
    beat(again, (b"new", b"client"), T + 9.1)
    assert [job.thread_id for _, job in assigned(again.tick(T + 9.1))] == [1]


def test_a_host_with_several_restored_attempts_has_its_other_slots_free_at_once():
    """Restored attempts hold their slots, but a host that had several requests in flight had
    answered: its other slots are free at once, not one at a time for a first contact. Resumed
    with 2 executors after a kill -9 of a run with 4, a one-host crawl waited the whole request
    window (96 s for the Python docs, 1.7 s now). A host with one restored attempt may have been
    a first contact: it waits for it."""
    T = 1000.0
    core = make_core(S.replace(concurrent_requests_per_host=4))
    core.restore([], [], T, running=[(70, "gone", "h1.test", T - 1), (71, "gone", "h1.test", T - 1),
                                     (72, "gone", "h2.test", T - 1)])
    register(core, b"new", 8, now=T)
    app = open_app(core, now=T)
    got = assigned(submit(core, app, [1, 4, 7, 10, 2, 5], now=T))  # h1.test: 1, 4, 7, 10; h2.test: 2, 5
    assert sorted(job.thread_id for _, job in got) == [1, 4]  # 4 slots less the 2 held; none of h2.test's


def test_a_late_result_of_the_previous_manager_is_fenced_not_struck():
    core = make_core()
    core.restore([], [], 0.0, running=[(123456789012, "old-executor", "a.test", None)])
    actions = core.handle(b"x", p.Result(123456789012, p.PageResult(url="late")), 1.0)
    assert [a.outcome for a in actions if type(a) in ev.EVENTS.values()] == ["fenced"]
    assert not any(isinstance(a, Strike) for a in actions) and sends(actions, p.Refuse)
