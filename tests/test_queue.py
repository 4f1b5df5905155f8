"""The manager's per-host queues and grid-wide politeness, driven with an explicit clock."""

from __future__ import annotations

import itertools

from gridcrawl import protocol as p
from gridcrawl.settings import Settings
from gridcrawl.manager.core import GridThread, ManagerCore
from gridcrawl.manager.queue import ReadyQueue

_ids = itertools.count(1)


def thread(host: str, priority: int = 5) -> GridThread:
    n = next(_ids)
    return GridThread(n, "app", n, f"http://{host}/{n}", 0, priority, None, 0.0, host=host)


def answered(q: ReadyQueue, *hosts: str) -> ReadyQueue:
    """Mark ``hosts`` as having answered once (a new host has one thread in flight until then)."""
    for host in hosts:
        q.note_answered(host)
    return q


def drain(q: ReadyQueue, now: float) -> list[GridThread]:
    out = []
    while (t := q.pop(now)) is not None:
        out.append(t)
    return out


def test_concurrency_cap_per_host_and_release():
    q = answered(ReadyQueue(concurrency=2), "a")
    for _ in range(5):
        q.push(thread("a"))
    first = drain(q, 0.0)
    assert len(first) == 2 and len(q) == 3
    q.release(first[0], 1.0, status=200)
    assert len(drain(q, 1.0)) == 1


def test_delay_between_fetches_counts_from_completion():
    q = ReadyQueue(concurrency=8, download_delay=2.0)
    for _ in range(3):
        q.push(thread("a"))
    (t1,) = drain(q, 0.0)              # one at a time when a delay is set
    assert drain(q, 5.0) == []         # still in flight
    q.release(t1, 5.0, status=200)
    assert drain(q, 6.9) == []         # 2 s after completion, not before
    assert q.next_wakeup() == 7.0
    assert len(drain(q, 7.0)) == 1


def test_a_held_attempt_keeps_its_slot_and_the_delay_counts_from_its_late_result_or_its_end():
    """An attempt taken back that may still be fetching stays in flight (``hold``) while its
    thread is queued again: a host with a delay starts nothing until its late result (whose
    Crawl-delay then applies, and the delay counts from it), or, with no result, until its time
    is up (the delay counting from then)."""
    q = answered(ReadyQueue(concurrency=8, download_delay=2.0), "a")
    t = thread("a")
    q.push(t)
    assert drain(q, 0.0) == [t]
    q.hold(77, t, 1.0, until=30.0, owner="ex")
    q.push(t)                                       # queued again at once ...
    assert drain(q, 5.0) == [] and q.held == 1      # ... but the old fetch may go on
    assert q.release_hold(77, 6.0, status=200, crawl_delay=3.0) and q.held == 0
    assert drain(q, 8.9) == [] and q.next_wakeup() == 9.0   # its robots.txt's 3 s, from its end
    assert drain(q, 9.0) == [t]
    assert not q.release_hold(77, 9.5)             # (a second result of it: nothing more)
    q.hold(78, t, 10.0, until=20.0)
    q.push(t)
    assert q.next_wakeup() == 20.0 and drain(q, 19.9) == []
    assert drain(q, 20.0) == [] and q.held == 0     # its time is up: released as ending now
    assert drain(q, 23.0) == [t]                    # 3 s later
    q.hold(79, t, 24.0, until=24.0)                 # nothing to hold: released at once
    assert q.hosts["a"].in_flight == 0 and q.held == 0


def test_a_waiting_host_does_not_block_the_others():
    q = ReadyQueue(concurrency=8, download_delay=10.0)
    q.push(thread("slow"))
    q.push(thread("slow"))
    (s1,) = drain(q, 0.0)
    q.release(s1, 0.0, status=200)
    others = [thread(f"h{i}") for i in range(4)]
    for t in others:
        q.push(t)
    got = drain(q, 1.0)
    assert {t.host for t in got} == {"h0", "h1", "h2", "h3"}


def test_priority_across_hosts_then_fifo():
    q = answered(ReadyQueue(), "a", "b", "c")
    low, high, mid1, mid2 = thread("a", 1), thread("b", 9), thread("c", 5), thread("c", 5)
    for t in (low, high, mid1, mid2):
        q.push(t)
    assert drain(q, 0.0) == [high, mid1, mid2, low]


def test_retry_after_pauses_the_host_and_backoff_doubles():
    q = ReadyQueue(concurrency=4)
    for _ in range(5):
        q.push(thread("a"))
    t1 = drain(q, 0.0)[0]
    q.release(t1, 0.0, status=429, retry_after=3.0)
    assert drain(q, 2.9) == []
    assert len(drain(q, 3.0)) == 1
    q2 = ReadyQueue(concurrency=1)
    for _ in range(3):
        q2.push(thread("b"))
    (t,) = drain(q2, 0.0)
    q2.release(t, 0.0, status=503)          # back-off 1 s
    assert drain(q2, 0.9) == []
    (t,) = drain(q2, 1.0)
    q2.release(t, 1.0, status=503)          # back-off 2 s
    assert drain(q2, 2.9) == []
    assert len(drain(q2, 3.0)) == 1
    # a Retry-After past MAX_RETRY_AFTER fails its page (manager.core.retry_wait): the host gets the
    # back-off, not the longest pause for the page that will not come back
    q3 = ReadyQueue(concurrency=1)
    for _ in range(2):
        q3.push(thread("c"))
    (t,) = drain(q3, 0.0)
    q3.release(t, 0.0, status=503, retry_after=86400.0)
    assert drain(q3, 0.9) == [] and len(drain(q3, 1.0)) == 1


def test_a_burst_answered_429_without_retry_after_backs_off_once_not_once_per_thread():
    """8 threads in flight, all answered 429 without Retry-After: each answer doubled the
    back-off (1, 2, 4 ... 60 s), so one burst paused the host 60 s instead of 1 s (a walkthrough's
    site of 9 pages answering 429 once each took 55 s). The answers of threads sent before the
    back-off began keep it; the next round's 429 doubles it."""
    q = answered(ReadyQueue(concurrency=8), "a")
    for _ in range(20):
        q.push(thread("a"))
    burst = drain(q, 0.0)
    assert len(burst) == 8
    for t in burst:
        q.release(t, 0.1, status=429)
    assert drain(q, 1.05) == []
    (one,) = drain(q, 1.1)  # 1 s after the burst's answers
    q.release(one, 1.2, status=429)  # a thread sent since: 2 s
    assert drain(q, 3.15) == [] and len(drain(q, 3.2)) == 1


def test_after_a_429_or_503_pause_the_host_starts_again_one_at_a_time_and_ramps_up_on_success():
    """A server answering 429 got its full concurrency again at the end of every pause (bursts
    of 8 every second under ``Retry-After: 1``): after the pause the host has one thread in
    flight, and one more after each success of a thread sent since (the burst's other answers
    do not count), up to its limit; another 429 starts again at one."""
    q = answered(ReadyQueue(concurrency=8), "a")
    for _ in range(40):
        q.push(thread("a"))
    burst = drain(q, 0.0)
    assert len(burst) == 8
    q.release(burst[0], 0.0, status=429, retry_after=1.0)
    for t in burst[1:]:  # sent before the 429: their successes lift nothing
        q.release(t, 0.1, status=200)
    assert drain(q, 0.5) == []
    (one,) = drain(q, 1.0)  # the pause over: one at a time
    q.release(one, 1.1, status=200)
    two = drain(q, 1.1)
    assert len(two) == 2
    for t in two:
        q.release(t, 1.2, status=200)
    assert len(drain(q, 1.2)) == 4  # twice as many a round
    q2 = answered(ReadyQueue(concurrency=8), "b")
    for _ in range(20):
        q2.push(thread("b"))
    first = drain(q2, 0.0)
    q2.release(first[0], 0.0, status=503)  # back-off 1 s, then one at a time again
    assert drain(q2, 0.9) == []
    for t in first[1:]:
        q2.release(t, 0.5, status=200)
    assert len(drain(q2, 1.0)) == 1


def test_crawl_delay_from_robots_is_capped():
    q = answered(ReadyQueue(concurrency=8, max_crawl_delay=5.0), "a")
    for _ in range(2):
        q.push(thread("a"))
    t1, t2 = drain(q, 0.0)
    q.release(t1, 1.0, status=200, crawl_delay=100.0)
    q.release(t2, 1.0, status=200)
    q.push(thread("a"))
    assert drain(q, 5.9) == []
    assert len(drain(q, 6.0)) == 1


def test_a_thread_that_sent_no_request_frees_the_slot_without_the_delay():
    """A link robots.txt disallows (refused from the executor's cached rules) costs the host no
    crawl delay: the next thread may start at once; one that made a request starts the delay."""
    q = answered(ReadyQueue(concurrency=8, download_delay=10.0), "a")
    for _ in range(3):
        q.push(thread("a"))
    (t1,) = drain(q, 0.0)
    q.release(t1, 1.0, status=200, answered=True)
    assert drain(q, 10.9) == []
    (t2,) = drain(q, 11.0)
    q.release(t2, 11.5, answered=True, requested=False)
    (t3,) = drain(q, 11.5)             # not 21.5: the disallowed URL sent nothing
    q.release(t3, 12.0, status=200, answered=True)
    q.push(thread("a"))
    assert drain(q, 21.9) == [] and len(drain(q, 22.0)) == 1


def test_a_new_host_has_one_thread_in_flight_until_it_answers():
    q = ReadyQueue(concurrency=8)
    for _ in range(4):
        q.push(thread("new"))
    (first,) = drain(q, 0.0)          # its Crawl-delay is not known yet: one request only
    q.release(first, 1.0, status=200, answered=True)
    assert len(drain(q, 1.0)) == 3    # it answered without a Crawl-delay: the concurrency cap
    q.push(thread("slow"))
    q.push(thread("slow"))
    (probe,) = drain(q, 1.0)
    q.release(probe, 2.0, status=200, crawl_delay=0.5, answered=True)
    assert drain(q, 2.4) == [] and len(drain(q, 2.5)) == 1  # it answered with one: the delay


def test_retry_waits_out_its_backoff():
    q = ReadyQueue()
    t = thread("a")
    q.push(t, not_before=4.0)
    assert len(q) == 1 and drain(q, 3.9) == []
    assert drain(q, 4.0) == [t]


def test_discard_removes_a_queued_thread():
    q = ReadyQueue()
    a, b = thread("a"), thread("a")
    q.push(a)
    q.push(b)
    q.discard(a)
    assert len(q) == 1 and drain(q, 0.0) == [b]


def core_with(executors: int, dispatch: str) -> ManagerCore:
    ids = (f"id{i}" for i in itertools.count(1))
    core = ManagerCore(Settings(dispatch=dispatch, prefetch=0, concurrent_requests_per_host=100,
                                max_threads_per_executor=1000, start_window=1000),
                       new_id=lambda: next(ids))
    for i in range(executors):
        core.handle(f"e{i}".encode(), p.Register(name=f"e{i}", host="h", user="u", threads=1000), 0.0)
    return core


def test_host_hash_sends_each_host_to_one_executor_and_moves_only_the_lost_share():
    core = core_with(3, "host-hash")
    hosts = [f"site{i}.test" for i in range(30)]
    before = {h: core.owner(h).executor_id for h in hosts}
    assert len(set(before.values())) == 3
    (opened,) = [a for a in core.handle(b"c", p.OpenApplication("x", "u"), 0.0) if isinstance(getattr(a, "message", None), p.ApplicationOpened)]
    app = opened.message.application_id
    specs = [p.ThreadSpec(i, f"http://{hosts[i % 30]}/{i}") for i in range(300)]
    actions = core.handle(b"c", p.Submit(app, specs), 0.0)
    ran_on: dict[str, set] = {}
    for a in actions:
        if isinstance(getattr(a, "message", None), p.Assign):
            for job in a.message.jobs:
                ran_on.setdefault(job.url.split("/")[2], set()).add(a.peer)
    assert len(ran_on) == 30 and all(len(peers) == 1 for peers in ran_on.values())
    # the executor owning the most hosts leaves: only its hosts move
    gone = max(set(before.values()), key=list(before.values()).count)
    core.handle([peer for peer, k in core.peers.items() if k[1] == gone][0], p.Bye(), 1.0)
    after = {h: core.owner(h).executor_id for h in hosts}
    moved = {h for h in hosts if before[h] != after[h]}
    assert moved == {h for h in hosts if before[h] == gone}


def test_a_host_hash_pass_pops_only_hosts_whose_owner_has_room():
    core = core_with(4, "host-hash")
    for ex in core.executors.values():
        ex.window = 10  # room for 40 of the 2,000 threads in all
    (opened,) = [a for a in core.handle(b"c", p.OpenApplication("x", "u"), 0.0) if isinstance(getattr(a, "message", None), p.ApplicationOpened)]
    specs = [p.ThreadSpec(i, f"http://site{i % 200}.test/{i}") for i in range(2000)]
    actions = core.handle(b"c", p.Submit(opened.message.application_id, specs), 0.0)
    assigns = [a for a in actions if isinstance(getattr(a, "message", None), p.Assign)]
    assert sum(len(a.message.jobs) for a in assigns) == 40
    assert all(core.owner(job.url.split("/")[2]).peer == a.peer for a in assigns for job in a.message.jobs)
    # the queue files eligible hosts by owner: the other 1,960 stay filed under their full owners
    assert len(core.queue) == 1960 and {key[1] for key in core.queue.eligible_keys()} == set(core.executors)
    # an executor leaves: its hosts move to the others' files when a pass meets them
    gone = assigns[0].peer
    core.handle(gone, p.Bye(), 1.0)
    for a in assigns[1:]:  # the others answer, which gives them room again
        results = [p.AttemptResult(job.attempt_id, p.PageResult(url=job.url, status=200), 0.01) for job in a.message.jobs]
        actions = core.handle(a.peer, p.Results(results), 2.0)
        for b in actions:
            if isinstance(getattr(b, "message", None), p.Assign):
                assert b.peer != gone and all(core.owner(job.url.split("/")[2]).peer == b.peer for job in b.message.jobs)


def test_discarding_every_queued_thread_is_linear_and_keeps_counts():
    """Pause or cancel of a big application discards each queued thread (O(1) each since it stopped
    scanning its host's heap): the per-host counts stay right for queued and retrying threads."""
    q = ReadyQueue(concurrency=4)
    threads = [GridThread(i, "app", i, f"http://h{i % 2}.test/{i}", 0, 5, None, 0.0, host=f"h{i % 2}.test")
               for i in range(6_000)]
    for t in threads[:-10]:
        q.push(t)
    for t in threads[-10:]:
        q.push(t, not_before=100.0)  # retries waiting out a back-off
    assert len(q) == 6_000 and q.hosts["h0.test"].queued + q.hosts["h1.test"].queued == 5_990
    for t in threads:
        q.discard(t)
    assert len(q) == 0 and q.hosts["h0.test"].queued == 0 and q.hosts["h1.test"].queued == 0
    assert q.pop(200.0) is None


def needing(host: str, needs: tuple, priority: int = 5) -> GridThread:
    t = thread(host, priority)
    t.needs = needs
    return t


def test_an_unrunnable_head_of_a_host_does_not_stall_the_host_or_the_grid():
    q = answered(ReadyQueue(concurrency=8), "shop", "other")
    for _ in range(3):
        q.push(needing("shop", ("render",), priority=9))   # the host's best threads: nobody renders
    plain = [thread("shop"), thread("shop"), thread("other")]
    for t in plain:
        q.push(t)
    runnable = lambda needs: not needs
    got = []
    while (t := q.pop(0.0, runnable=runnable)) is not None:
        got.append(t)
    assert sorted(t.thread_id for t in got) == sorted(t.thread_id for t in plain)
    assert q.queued_by_needs() == {("render",): 3}
    # once some executor renders, the waiting threads come out, best first
    got = []
    while (t := q.pop(1.0)) is not None:
        got.append(t)
    assert [t.needs for t in got] == [("render",)] * 3 and len(q) == 0


def test_unrunnable_lanes_cost_no_queue_growth():
    """A lane nobody can run stays filed once; popping the host's other lane a thousand times
    does not pile up entries for it."""
    q = ReadyQueue(concurrency=1)
    q.push(needing("shop", ("render",)))
    for _ in range(1000):
        q.push(thread("shop"))
    for i in range(1000):
        t = q.pop(float(i), runnable=lambda needs: not needs)
        assert t is not None and not t.needs
        q.release(t, float(i), status=200)
    assert sum(len(heap) for heap in q._eligible.values()) <= 2
    assert q.queued_by_needs() == {("render",): 1}


def test_politeness_is_shared_by_the_lanes_of_a_host():
    q = answered(ReadyQueue(concurrency=2), "shop")
    q.push(needing("shop", ("plugin:x",)))
    q.push(needing("shop", ("plugin:x",)))
    q.push(thread("shop"))
    got = []
    while (t := q.pop(0.0)) is not None:
        got.append(t)
    assert len(got) == 2   # two in flight on the host, whatever their lanes
    q.release(got[0], 1.0, status=200)
    assert q.pop(1.0) is not None and q.pop(1.0) is None


def test_a_discarded_thread_leaves_the_needs_counts():
    q = ReadyQueue()
    t = needing("shop", ("render",))
    q.push(t)
    q.push(needing("shop", ("render",)), not_before=5.0)
    q.discard(t)
    assert q.queued_by_needs() == {("render",): 1}


def test_idle_hosts_are_dropped_once_their_delay_passed_and_keep_their_crawl_delay():
    """A host's politeness state was kept for ever once it had a delay: 300,000 one-page hosts
    with a Crawl-delay held 229 MB. An idle host is dropped when its delay and pause are over;
    its Crawl-delay stays known (the answered hosts), so its next thread is paced as before."""
    q = ReadyQueue(concurrency=8)
    for i in range(1000):
        q.push(thread(f"h{i}"))
    for t in drain(q, 0.0):
        q.release(t, 1.0, status=200, crawl_delay=2.0, answered=True)
    assert len(q.hosts) == 1000  # within their delay: kept, a new thread must wait it out
    q.push(thread("h1"))
    assert drain(q, 2.9) == []
    (t,) = drain(q, 3.0)
    q.release(t, 3.5, status=200, crawl_delay=2.0, answered=True)
    assert len(q.hosts) == 1  # the others' delay ended at 3.0: dropped
    for _ in range(3):
        q.push(thread("h7"))  # dropped, and known: its delay, not one-then-eight of a new host
    (first,) = drain(q, 3.5)
    q.release(first, 4.0, status=200, answered=True)
    assert drain(q, 5.9) == [] and len(drain(q, 6.0)) == 1


def test_take_origin_takes_its_queued_threads_and_waiting_retries_and_nothing_else():
    q = answered(ReadyQueue(concurrency=8), "b")
    a1, a2, a3, b1 = thread("a"), thread("a"), thread("a"), thread("b")
    a_https = GridThread(99, "app", 99, "https://a/x", 0, 5, None, 0.0, host="a")  # another origin of host a
    for t in (a1, a2, b1, a_https):
        q.push(t)
    q.push(a3, not_before=50.0)  # a retry waiting out its back-off
    running = q.pop(0.0)
    assert running is a1  # in flight: not queued, not taken
    assert q.take_origin(a1.url) == [a2, a3]
    assert all(t.queue_seq is None for t in (a2, a3)) and len(q) == 2
    q.release(a1, 100.0, status=200, answered=True)
    assert sorted(drain(q, 100.0), key=id) == sorted([b1, a_https], key=id)  # the rest goes on


def test_a_down_origin_stays_down_for_its_time_then_is_probed_again():
    q = ReadyQueue()
    assert q.probe_failed("http://a/1") == 1 and q.probe_failed("http://a/2?x") == 2
    assert q.probe_failed("https://a/1") == 1  # another origin of the same host
    q.mark_down("http://a/1", 600.0, "robots_unreachable", "not fetched: http://a did not answer")
    assert q.down("http://A/other", 599.0) == ("robots_unreachable", "not fetched: http://a did not answer")
    assert q.down("https://a/1", 599.0) is None and q.down("http://b/", 599.0) is None
    assert q.probe_failed("http://a/1") == 1  # marking it down started its count again
    assert q.down("http://a/1", 600.0) is None and q.down("http://a/1", 1.0) is None  # over: forgotten


def test_hosts_of_one_crawl_take_turns_a_busy_host_does_not_hold_back_the_idle_ones():
    """Within one application the queue served submission order across hosts: a slow host's
    threads, queued longest while its slots were full, went before every later thread of the
    crawl's other hosts, so a few slow hosts held all the workers (20 small sites waited 28 s
    behind 4 hosts answering in 1 s). A host with nothing in flight now goes before a busy
    one, the busy one's thread taking its place: the application's share is unchanged."""
    q = answered(ReadyQueue(concurrency=3), "slow", "c1", "c2")
    slow = [thread("slow") for _ in range(7)]
    for t in slow:
        q.push(t)
    assert drain(q, 0.0) == slow[:3]  # at its concurrency: the rest waits
    late = [thread("c1"), thread("c2")]
    for t in late:
        q.push(t)
    # each time one slot of the grid frees, a host of the crawl with nothing in flight takes it
    q.release(slow[0], 1.0, status=200)
    assert q.pop(1.0) is late[0]
    q.release(slow[1], 1.0, status=200)
    assert q.pop(1.0) is late[1]
    q.release(slow[2], 1.0, status=200)  # now the slow host has nothing in flight either
    rest = drain(q, 1.0)
    assert len(rest) == 3 and {t.host for t in rest} == {"slow"}
    for t in rest + late:
        q.release(t, 2.0, status=200)
    assert len(drain(q, 2.0)) == 1 and len(q) == 0  # every thread once: none lost in the swaps


def test_the_files_of_idle_hosts_stay_bounded_on_a_crawl_of_delayed_hosts():
    """Hosts with a crawl delay are idle whenever they are served, so every filing of their
    next thread also went into the idle hosts' files, and only a pop that met a busy host read
    those: without compaction 50 hosts served 400 times each left 20,000 stale entries."""
    q = ReadyQueue(concurrency=8)
    hosts = [f"h{i}" for i in range(50)]
    now = 0.0
    for _ in range(400):
        for h in hosts:
            q.push(thread(h))
        for t in drain(q, now):
            q.release(t, now, status=200, crawl_delay=1.0, answered=True)
        now += 1.0
    assert len(q) == 0
    assert q._idle_filed <= 2 * len(hosts) + 1024, q._idle_filed
