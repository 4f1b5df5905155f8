"""The manager's queue of READY grid threads, one queue per host, with politeness for the grid.

The manager is the one place that sees every fetch of every executor, so it enforces politeness
for the whole grid (design.md §3):

* at most ``concurrent_requests_per_host`` threads of a host in flight (assigned, not yet
  finished) across all executors and applications (Scrapy's default: 8);
* a host the grid has not heard from yet has one thread in flight until its first result
  arrives: that result carries the host's robots.txt ``Crawl-delay`` (or says there is none), so
  no burst of requests reaches a host before its delay is known;
* a host with a delay — ``download_delay``, or its robots.txt ``Crawl-delay`` (capped at
  ``max_crawl_delay``) — has one thread in flight at a time, and the next may start no sooner than
  ``delay`` seconds after the previous one finished (Heritrix's politeness: the gap is measured
  from completion, so requests are never closer than the delay, whatever the executors buffer);
* ``429``/``503`` with ``Retry-After`` pause the host until then; without it the host backs off
  exponentially (1 s doubling to 60 s), reset by the next success; either way the host then has
  one thread in flight, and one more after each success of a thread sent since (twice as many
  per round, as TCP's slow start after a loss; Scrapy's AutoThrottle lowers its concurrency
  likewise), up to its limit: a server that keeps answering 429 got its full concurrency again
  after every pause;
* a new host whose first thread finds no answer (robots.txt unreachable, or no connection) is a
  *probe* that failed: it does not lift the one-in-flight rule, the host pauses for the retry's
  wait, and its next thread (the same one or another) probes again. When the thread's origin
  (scheme, host and port: robots.txt's unit) has failed ``retry_times`` + 1 probes, the manager
  fails the origin's queued threads together (:meth:`ReadyQueue.take_origin`) and the origin is
  :meth:`down <ReadyQueue.mark_down>` for :data:`HOST_DOWN_SECONDS`: its new threads fail at
  once. One round of probes, not every URL's attempts, is what a dead host costs the grid
  (Heritrix fails a queue's URIs when their prerequisite, DNS or robots.txt, cannot be had).
  A host that answered and then gives ``retry_times`` + 1 results in a row without an answer,
  of requests sent after its last answer, has stopped answering (:meth:`ReadyQueue.unanswered`):
  it is a new host again, and the threads assigned from then on probe it;
* an attempt the manager takes back from an executor (declared dead, registered again,
  ``thread_timeout``, straggler, its application cancelled) may still be fetching there: the
  executor may be alive, only late, and a cancel does not stop a request under way. Its slot
  stays taken — it counts among the host's threads in flight, and a host with a delay waits
  from its end — until its late result arrives (:meth:`ReadyQueue.release_hold`, which applies
  that result's status and Crawl-delay as a release would) or until it can no longer be
  running: its executor's request window (:meth:`gridcrawl.settings.Settings.request_window`)
  after it started, or after it was taken back when it had not reported its start
  (:meth:`ReadyQueue.hold`), or, when that executor registers again, at once if it says it no
  longer runs it. Its thread, queued again at once, starts when a slot is free. An attempt
  that sent nothing (handed back unstarted, its result in) frees its slot at once, and so does
  one a connected executor is told to cancel before it reported its start (the manager's
  ``_hold``). Before, every slot was freed at the take-back: an executor stopped while two
  requests of a host whose limit is 2 were under way, declared dead, had its threads run again
  elsewhere at once: 3 requests at once at the host (tests/test_faults.py, 3 runs of 3; now 2).

Across hosts, threads leave by priority (higher first), then in turn across users, and across
each user's applications: each thread gets a start tag by start-time fair queuing (Goyal, Vin
and Cheng, SIGCOMM 1996; every thread of unit length), so users who submit at the same priority
share the grid thread by thread, whatever each has queued, and each one's threads leave in
submission order, but that within an application its hosts take turns: when the thread due
next belongs to a host with threads in flight, a host of the same application and priority with
none in flight starts instead, and the two threads swap tags (the application's share stays; the
busy host's thread goes where the other was). In submission order alone, a slow host's threads,
queued longest while its slots were full, went before every later thread of the crawl's other
hosts: 4 hosts answering in 1 s kept all 16 workers of two executors, and 20 small sites crawled
with them were done at 28 s, after the slow ones. An application's weight is one over the
number of its user's applications with threads queued at its push (its tags step by that number): a user running three crawls
gets the share of one user, split three ways, not three shares (a one-level approximation of
hierarchical SFQ, which would tag at dequeue; tags here are fixed at push). A host that waits out its delay never blocks the
others: only hosts that may start now are considered. Retried threads wait in a delay heap until
their back-off has passed.

Capability-based dispatch: a thread may name what it ``needs`` of an executor (``"render"``,
``"plugin:NAME"``; a sorted tuple, empty for most threads). Each host keeps one *lane* (a
priority heap) per distinct ``needs``, and hosts that may start now are filed per ``needs`` too,
so :meth:`ReadyQueue.pop` looks only at the lanes some free executor can run: a thread no
executor can run never stands in front of the others, of its host or of the grid. Politeness
(in flight, delay, pauses) stays per host, shared by its lanes.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from gridcrawl.protocol import MAX_RETRY_AFTER  # noqa: F401 (the longest host pause; re-exported)
from gridcrawl.urls import url_host, url_origin

if TYPE_CHECKING:  # pragma: no cover
    from gridcrawl.manager.core import GridThread

#: Hosts remembered as having answered once their queue state is dropped (least recent forgotten).
ANSWERED_HOSTS = 100_000
#: Seconds a host that failed its probes stays down (its new threads fail without a fetch);
#: then its next thread probes it again. Hosts down at once: at most ANSWERED_HOSTS.
HOST_DOWN_SECONDS = 600.0
BACKOFF_START = 1.0
BACKOFF_MAX = 60.0
#: Bits of a thread's ``queue_seq`` below its fair-queuing start tag: the order of pushes.
SEQ_BITS = 64


@dataclass(eq=False)
class HostState:
    """Politeness state of one host: its queued threads and when it may start the next fetch.

    Times are POSIX seconds; ``delay`` is seconds between fetches (0: only the concurrency cap);
    ``paused_until`` is set by 429/503 responses; ``backoff`` is the current back-off step.
    """

    host: str
    lanes: dict = field(default_factory=dict)  # needs -> heap of (-priority, seq, thread)
    queued: int = 0
    in_flight: int = 0
    delay: float = 0.0
    crawl_delay: float | None = None
    last_finish: float = float("-inf")
    paused_until: float = 0.0
    backoff: float = 0.0
    version: int = 0
    answered: bool = False  # a result of this host has arrived (its Crawl-delay, if any, is known)
    held: int = 0  # of in_flight, attempts taken back that may still be fetching (ReadyQueue.hold)
    silent: int = 0  # results in a row that found no answer, since the host last answered
    answered_at: float = float("-inf")  # when its last answer arrived (POSIX s)
    silent_skip: int = 0  # threads in flight when it stopped answering: their results are no probes
    ramp: int = 0  # after a 429/503: threads in flight allowed, one more by each success (0: no such limit)
    ramp_skip: int = 0  # threads in flight when it was set: their answers do not count
    filed: dict = field(default_factory=dict)  # needs -> (stamp, head's -priority, head's seq) filed as eligible

    def head(self, needs: tuple = ()):
        """The next live entry ``(-priority, seq, thread)`` of this host's lane ``needs``, or
        None (drops stale entries, and the lane once it is empty)."""
        heap = self.lanes.get(needs)
        if heap is None:
            return None
        while heap and heap[0][2].queue_seq != heap[0][1]:
            heapq.heappop(heap)
        if not heap:
            del self.lanes[needs]
            return None
        return heap[0]

    @property
    def next_start(self) -> float:
        """Earliest POSIX time the next fetch may start (``inf`` while a delayed host is busy)."""
        if self.delay > 0:
            if self.in_flight:
                return float("inf")
            return max(self.paused_until, self.last_finish + self.delay)
        return self.paused_until


class AppShare:
    """Fair-queuing state of one application: its threads queued now, the finish tag of its
    latest thread (its next start tag, unless the virtual time has passed it), and, while it has
    threads queued, the key it shares its turn under (its user)."""

    __slots__ = ("queued", "finish", "key")

    def __init__(self) -> None:
        self.queued = 0
        self.finish = 0
        self.key: object = None


class ReadyQueue:
    """READY grid threads in per-host queues, released under the grid's politeness rules.

    ``concurrency``: threads of one host in flight at most; ``download_delay``: seconds between
    fetches of one host; ``max_crawl_delay``: cap of a robots.txt Crawl-delay, seconds.
    """

    def __init__(self, concurrency: int = 8, download_delay: float = 0.0, max_crawl_delay: float = 30.0) -> None:
        self.concurrency = concurrency
        self.download_delay = download_delay
        self.max_crawl_delay = max_crawl_delay
        self.hosts: dict[str, HostState] = {}
        self._seq = itertools.count()
        # start-time fair queuing across users and their applications: the virtual time (the
        # start tag of the thread popped last) and, per application that queued threads since it
        # was last forgotten, an AppShare; share_of(application_id) -> the key applications
        # share a turn under (the manager's: their user; None: every application alone), and per
        # key, how many of its applications have threads queued
        self._virtual_time = 0
        self._apps: dict[str, AppShare] = {}
        self.share_of: Callable[[str], object] | None = None
        self._sharing: dict[object, int] = {}
        self._stamps = itertools.count()  # eligible entries: valid while their host's lane files this stamp
        # needs -> heap of (-priority, seq, stamp, host): hosts whose lane may start now; with a
        # partition, (needs, partition(host, needs)) -> such a heap
        self._eligible: dict[tuple, list] = {}
        # (key of _eligible, application id) -> heap of the same entries, for the hosts filed while
        # they had nothing in flight: hosts take turns within an application (see :meth:`pop`)
        self._idle_eligible: dict[tuple, list] = {}
        self._idle_filed = 0  # entries in the idle files, stale ones included
        self._idle_compact_at = 1024  # _idle_filed at which they are compacted next (twice the live ones)
        # partition(host, needs) -> a key (host-hash dispatch: the owner's executor id), or None:
        # eligible hosts are filed apart by it, so that a pop can look at the partitions whose
        # executor has room and nothing else (see :meth:`pop`)
        self.partition: Callable[[str, tuple], object] | None = None
        self._waiting: list = []    # (time, version, host): hosts that may start at time
        self._later: list = []      # (time, seq, thread): retries waiting out their back-off
        self._later_seqs: set[int] = set()  # queue_seq of the threads in _later (not in a host heap)
        self._live = 0
        # hosts that have answered (bounded), with their Crawl-delay (None: none)
        self._answered: OrderedDict[str, float | None] = OrderedDict()
        self._idle: list = []  # (time, host): hosts with nothing queued or in flight, to drop from then
        # origins of hosts not answered yet whose probes failed: origin -> how many (kept apart
        # from the host states, which go while a probe waits out its back-off)
        self._probes: OrderedDict[str, int] = OrderedDict()
        # origins that failed their probes: origin -> (POSIX time down until, error kind, error)
        self._down: OrderedDict[str, tuple[float, str, str]] = OrderedDict()
        self._by_needs: dict[tuple, int] = {}  # queued threads per needs (waiting retries included)
        # attempts taken back that may still be fetching: attempt id -> (host, POSIX s held until,
        # executor id), and a heap of (until, attempt id) to expire them (see :meth:`hold`)
        self._holds: dict[int, tuple[str, float, str | None]] = {}
        self._hold_ends: list = []

    # ---------------------------------------------------------------- threads

    def push(self, thread: "GridThread", not_before: float = 0.0) -> None:
        """Queue READY ``thread``; with ``not_before`` (POSIX s) it waits until then (retries)."""
        if thread.queue_seq is not None:
            self.discard(thread)
        app = thread.application_id
        share = self._apps.get(app)
        if share is None:
            share = self._apps[app] = AppShare()
        if not share.queued:  # the application has threads queued again: it shares its user's turn
            share.key = app if self.share_of is None else self.share_of(app)
            self._sharing[share.key] = self._sharing.get(share.key, 0) + 1
        share.queued += 1
        start = max(self._virtual_time, share.finish)
        share.finish = start + self._sharing[share.key]
        # the start tag, then the order of pushes: unique, and ordered as the queue serves them
        thread.queue_seq = (start << SEQ_BITS) + next(self._seq)
        self._live += 1
        self._by_needs[thread.needs] = self._by_needs.get(thread.needs, 0) + 1
        if not_before:
            heapq.heappush(self._later, (not_before, thread.queue_seq, thread))
            self._later_seqs.add(thread.queue_seq)
            return
        self._enqueue(thread)

    def _host(self, name: str) -> HostState:
        """The politeness state of host ``name``, made if it has none now."""
        host = self.hosts.get(name)
        if host is None:
            crawl_delay = self._answered.get(name)  # known from before its state was dropped
            host = self.hosts[name] = HostState(name, answered=name in self._answered, crawl_delay=crawl_delay,
                                                delay=self._delay(crawl_delay))
        return host

    def _enqueue(self, thread: "GridThread") -> None:
        host = self._host(thread.host)
        heapq.heappush(host.lanes.setdefault(thread.needs, []), (-thread.priority, thread.queue_seq, thread))
        host.queued += 1
        self._schedule(host, 0.0)

    def discard(self, thread: "GridThread") -> None:
        """Forget ``thread`` if it is queued (its entries are skipped later). O(1): a pause or
        a cancel of 100,000 queued threads must not stall the manager's loop."""
        seq = thread.queue_seq
        if seq is None:
            return
        thread.queue_seq = None
        self._live -= 1
        self._uncount(thread.needs, thread.application_id)
        if seq in self._later_seqs:
            self._later_seqs.discard(seq)
            return
        host = self.hosts.get(thread.host)
        if host is not None:
            host.queued -= 1

    def __len__(self) -> int:
        return self._live

    def _uncount(self, needs: tuple, app: str) -> None:
        """A thread of ``needs`` and application ``app`` left the queue (popped or discarded)."""
        left = self._by_needs[needs] - 1
        if left:
            self._by_needs[needs] = left
        else:
            del self._by_needs[needs]
        share = self._apps[app]
        share.queued -= 1
        if not share.queued:
            sharing = self._sharing[share.key] - 1
            if sharing:
                self._sharing[share.key] = sharing
            else:
                del self._sharing[share.key]

    def needs_any(self) -> bool:
        """Whether some queued thread (waiting retries included) needs a capability."""
        return len(self._by_needs) > 1 or (bool(self._by_needs) and () not in self._by_needs)

    def queued_by_needs(self) -> dict[tuple, int]:
        """Queued threads (waiting retries included) per distinct ``needs`` tuple; threads
        that need nothing are under ``()``."""
        return dict(self._by_needs)

    # ---------------------------------------------------------------- hosts

    def _schedule(self, host: HostState, now: float) -> None:
        """(Re)file ``host`` as eligible now (one entry per lane whose head is not filed yet),
        waiting for a time, or blocked (not filed). An entry of a lane no executor can run stays
        filed, untouched, until one can: it costs nothing meanwhile."""
        host.version += 1
        if not host.lanes or host.in_flight >= self._limit(host):
            return
        if host.next_start > now:
            heapq.heappush(self._waiting, (host.next_start, host.version, host.host))
            return
        for needs in list(host.lanes):
            head = host.head(needs)
            if head is None:
                continue
            idle = host.in_flight == 0
            filed = host.filed.get(needs)
            if filed is not None and filed[1] == head[0] and filed[2] == head[1] and filed[3] == idle:
                continue  # this head is filed already
            stamp = next(self._stamps)
            host.filed[needs] = (stamp, head[0], head[1], idle)
            key = needs if self.partition is None else (needs, self.partition(host.host, needs))
            entry = (head[0], head[1], stamp, host.host)
            heapq.heappush(self._eligible.setdefault(key, []), entry)
            if idle:  # also among its application's hosts with nothing in flight (see :meth:`_idle_host`)
                heapq.heappush(self._idle_eligible.setdefault((key, head[2].application_id), []), entry)
                self._idle_filed += 1
                if self._idle_filed > self._idle_compact_at:
                    self._compact_idle()

    def _compact_idle(self) -> None:
        """Drop the stale entries of the idle files (a file is looked at only when a busy host
        comes first, so without this they would grow with every filing of a crawl whose hosts
        are all idle when served, as hosts with a crawl delay are)."""
        files: dict[tuple, list] = {}
        for (key, app), heap in self._idle_eligible.items():
            live = [entry for entry in heap if self._idle_valid(entry, key)]
            if live:
                heapq.heapify(live)
                files[(key, app)] = live
        self._idle_eligible = files
        self._idle_filed = sum(map(len, files.values()))
        self._idle_compact_at = 2 * self._idle_filed + 1024  # amortised: no count at every filing

    def _idle_valid(self, entry: tuple, key) -> bool:
        """Whether an idle file's ``entry`` still stands: its host's lane is filed under this
        stamp, with nothing in flight."""
        host = self.hosts.get(entry[3])
        lane = key if self.partition is None else key[0]
        filed = None if host is None else host.filed.get(lane)
        return filed is not None and filed[0] == entry[2] and filed[3] and host.in_flight == 0

    def _idle_host(self, key, app: str, negprio: int, now: float) -> "HostState | None":
        """A host of application ``app`` filed under ``key`` with nothing in flight whose head
        has priority ``-negprio`` and may start at ``now`` (POSIX s), taken out of the files (its
        entry in :attr:`_eligible` goes stale), or None."""
        heap = self._idle_eligible.get((key, app))
        while heap:
            entry = heap[0]
            if not self._idle_valid(entry, key):
                heapq.heappop(heap)
                self._idle_filed -= 1
                continue
            if entry[0] != negprio:
                return None  # (a higher priority would have come first; a lower one waits)
            host = self.hosts[entry[3]]
            lane = key if self.partition is None else key[0]
            if host.next_start > now or (self.partition is not None and self.partition(host.host, lane) != key[1]):
                return None  # (filed again, or taken by the main file, when a pop meets it there)
            heapq.heappop(heap)
            self._idle_filed -= 1
            del host.filed[lane]
            return host
        self._idle_eligible.pop((key, app), None)
        return None

    def _limit(self, host: HostState) -> int:
        limit = 1 if host.delay > 0 or not host.answered else self.concurrency
        return min(limit, host.ramp) if host.ramp else limit

    def _promote(self, now: float) -> None:
        if self._hold_ends and self._hold_ends[0][0] <= now:
            self.expire_holds(now)
        while self._later and self._later[0][0] <= now:
            _, seq, thread = heapq.heappop(self._later)
            self._later_seqs.discard(seq)
            if thread.queue_seq == seq:
                self._enqueue(thread)
        while self._waiting and self._waiting[0][0] <= now:
            _, version, name = heapq.heappop(self._waiting)
            host = self.hosts.get(name)
            if host is not None and host.version == version:
                self._schedule(host, now)

    def pop(self, now: float, runnable: Callable[[tuple], bool] | None = None,
            keys: list | None = None) -> "GridThread | None":
        """The next thread that may start at ``now`` (POSIX s), or None. Marks it in flight.

        ``runnable(needs)`` says whether some executor with a free slot can run threads that need
        ``needs`` (None: every thread is runnable); lanes it refuses are not looked at, so they
        cost nothing and block nobody.

        With a :attr:`partition`, eligible hosts are filed under ``(needs, partition)`` keys, and
        ``keys`` names those to look at (None: every key ``runnable`` accepts): host-hash
        dispatch names the files of the executors with a free slot, so it never meets a host
        whose owner is full. A host whose partition changed since it was filed (the executors
        did) is filed again under its new one when a pop meets it.

        When the thread due next belongs to a host with threads in flight, a host of the same
        application, priority and file with none in flight starts instead (their tags swap):
        hosts of one crawl take turns.
        """
        self._promote(now)
        if keys is None:
            keys = [key for key in self._eligible if runnable is None or runnable(key)]
        while True:
            best = None
            for key in keys:  # the best entry over the lanes looked at (few distinct needs)
                heap = self._eligible.get(key)
                if heap and (best is None or heap[0] < self._eligible[best][0]):
                    best = key
            if best is None:
                return None
            heap = self._eligible[best]
            _, _, stamp, name = heapq.heappop(heap)
            if not heap:
                del self._eligible[best]
            lane = best if self.partition is None else best[0]
            host = self.hosts.get(name)
            if host is None or host.filed.get(lane, (None,))[0] != stamp:
                continue  # stale: the lane was filed again since
            del host.filed[lane]
            if host.in_flight >= self._limit(host) or host.next_start > now:
                continue  # blocked since it was filed: filed again when it may start
            if self.partition is not None and self.partition(name, lane) != best[1]:
                self._schedule(host, now)  # its partition changed: filed under the new one
                continue
            head = host.head(lane)
            if head is None:
                continue
            idle = self._idle_host(best, head[2].application_id, head[0], now) if host.in_flight else None
            other = idle.head(lane) if idle is not None else None
            if other is not None and (other[0] != head[0] or other[2].application_id != head[2].application_id):
                other = None  # (its head changed since it was filed)
            if idle is not None and other is None:
                self._schedule(idle, now)
            if other is not None:
                # hosts take turns within an application: one of its hosts with nothing in flight
                # starts instead, and the busy host's thread takes that one's place in the queue
                # (their tags swap: the application's share of the grid stays what it was)
                heapq.heappop(idle.lanes[lane])
                taken, waiting = other[2], head[2]
                if taken.queue_seq > waiting.queue_seq:
                    heapq.heappop(host.lanes[lane])
                    waiting.queue_seq, taken.queue_seq = taken.queue_seq, waiting.queue_seq
                    heapq.heappush(host.lanes[lane], (head[0], waiting.queue_seq, waiting))
                self._schedule(host, now)
                host, head = idle, (other[0], taken.queue_seq, taken)
            else:
                heapq.heappop(host.lanes[lane])
            thread = head[2]
            self._virtual_time = max(self._virtual_time, thread.queue_seq >> SEQ_BITS)
            thread.queue_seq = None
            host.queued -= 1
            self._live -= 1
            self._uncount(lane, thread.application_id)
            host.in_flight += 1
            self._schedule(host, now)
            return thread

    def forget_application(self, application_id: str) -> None:
        """Drop the fair-queuing state of an application that stopped (its threads are gone
        from the queue); one that is reopened starts again at the virtual time. (One with threads
        still queued, which a stop does not leave, keeps it until they are gone.)"""
        share = self._apps.get(application_id)
        if share is not None and not share.queued:
            del self._apps[application_id]

    def eligible_keys(self) -> list:
        """The keys eligible hosts are filed under now: needs tuples, or with a
        :attr:`partition` ``(needs, partition)`` pairs."""
        return list(self._eligible)

    def hold(self, attempt_id: int, thread: "GridThread", now: float, until: float, owner: str | None = None) -> None:
        """Attempt ``attempt_id`` of in-flight ``thread`` was taken back from its executor
        (``owner``, its id) but may still be fetching there: its slot stays taken (counted in its
        host's ``in_flight`` and ``held``) until :meth:`release_hold` (its late result),
        :meth:`release_holds` (its executor says it no longer runs it) or ``until`` (POSIX s: it
        can no longer be running), when it is released as a fetch that ended then. ``until`` at
        or before ``now`` releases it at once. The thread itself may be queued again meanwhile."""
        host = self.hosts.get(thread.host)
        if host is None:
            return
        if until <= now:
            self.release(thread, now)
            return
        self._hold(host, attempt_id, until, owner)

    def hold_restored(self, attempt_id: int, host_name: str, now: float, until: float, owner: str) -> bool:
        """Attempt ``attempt_id`` of executor ``owner`` was running at host ``host_name`` when the
        previous manager stopped (a restart, a fail-over): its executor may still be fetching, so
        its slot is taken (counted in the host's ``in_flight`` and ``held``, the host's state made
        if need be) as :meth:`hold` keeps one, until its late result, its executor registering
        without it (:meth:`release_holds`) or ``until`` (POSIX s). Returns False (nothing done)
        when ``until`` is at or before ``now``, or the attempt is held already."""
        if until <= now or attempt_id in self._holds:
            return False
        host = self._host(host_name)
        host.in_flight += 1
        self._hold(host, attempt_id, until, owner)
        return True

    def _hold(self, host: HostState, attempt_id: int, until: float, owner: str | None) -> None:
        host.held += 1
        self._holds[attempt_id] = (host.host, until, owner)
        heapq.heappush(self._hold_ends, (until, attempt_id))

    def release_holds(self, owner: str, now: float, running: set[int] | frozenset[int]) -> None:
        """Executor ``owner`` registered again at ``now`` (POSIX s) running ``running`` (attempt
        ids): the slots held for its other attempts are free (they will send nothing more).
        Costs the attempts held over all executors (few: those taken back in one window)."""
        for attempt_id in [a for a, entry in self._holds.items() if entry[2] == owner and a not in running]:
            self.release_hold(attempt_id, now)

    def release_hold(self, attempt_id: int, now: float, **result) -> bool:
        """The late result of held attempt ``attempt_id`` arrived at ``now`` (POSIX s): its slot
        is free, and ``result`` (:meth:`release`'s keywords: ``status``, ``retry_after``,
        ``crawl_delay``, ``answered``, ``requested``) applies to its host as a release's would.
        False (nothing done) when it is not held (never, or its hold has ended)."""
        entry = self._holds.pop(attempt_id, None)
        if entry is None:
            return False
        self._release(entry[0], now, unheld=True, **result)
        return True

    def expire_holds(self, now: float) -> None:
        """Release the held attempts whose time is up at ``now`` (POSIX s): their fetches have
        ended, at the latest now (a host with a delay waits from now)."""
        while self._hold_ends and self._hold_ends[0][0] <= now:
            _, attempt_id = heapq.heappop(self._hold_ends)
            entry = self._holds.pop(attempt_id, None)
            if entry is not None:
                self._release(entry[0], now, unheld=True)

    @property
    def held(self) -> int:
        """Attempts taken back and still held (:meth:`hold`), over all hosts."""
        return len(self._holds)

    def release(self, thread: "GridThread", now: float, *, status: int | None = None,
                retry_after: float | None = None, crawl_delay: float | None = None,
                answered: bool = False, requested: bool = True) -> None:
        """A thread of ``thread.host`` is no longer in flight (finished, lost or taken back).

        ``status`` and ``retry_after`` (seconds) of its response pause the host on 429 and 503
        (without Retry-After, or with one over :data:`MAX_RETRY_AFTER`, whose page fails rather
        than wait: back-off doubling from 1 s to 60 s, reset by a success — one answer that
        asks for a day must not hold the host's other pages for the longest pause; the answers
        of threads already in flight when the back-off began do not double it: 8 threads of
        one burst answered 429 paused their host 60 s, not 1 s);
        ``crawl_delay`` (seconds, from robots.txt) sets the host's delay, capped; ``answered``
        (an executor's result, not a lost thread) lifts the one-in-flight rule of a new host;
        ``requested`` False (the thread sent the host no request: robots.txt rules the executor
        held refused it) frees the slot without starting the host's delay.
        """
        self._release(thread.host, now, status=status, retry_after=retry_after, crawl_delay=crawl_delay,
                      answered=answered, requested=requested)

    def _release(self, name: str, now: float, *, status: int | None = None, retry_after: float | None = None,
                 crawl_delay: float | None = None, answered: bool = False, requested: bool = True,
                 unheld: bool = False) -> None:
        """:meth:`release` of a thread of host ``name`` (``unheld``: of a held attempt)."""
        host = self.hosts.get(name)
        if host is None:
            return
        host.in_flight = max(0, host.in_flight - 1)
        if unheld:
            host.held = max(0, host.held - 1)
        sent_before = host.ramp_skip > 0  # (no thread starts before those are back: the limit is 1)
        if sent_before:
            host.ramp_skip -= 1
        if host.silent_skip > 0:
            host.silent_skip -= 1
        if requested:
            host.last_finish = now
        if answered and requested:
            host.silent, host.answered_at = 0, now
        if answered and not host.answered:
            self.note_answered(host.host)
        if crawl_delay is not None and crawl_delay != host.crawl_delay:
            host.crawl_delay = crawl_delay
            host.delay = self._delay(crawl_delay)
            if host.answered:
                self._answered[host.host] = crawl_delay
        if status in (429, 503):
            if retry_after is not None and retry_after <= MAX_RETRY_AFTER:
                pause = max(retry_after, 0.0)
            elif sent_before and host.backoff:  # of the burst the last back-off answered: no doubling
                pause = host.backoff
            else:
                host.backoff = min(BACKOFF_MAX, max(BACKOFF_START, host.backoff * 2))
                pause = host.backoff
            host.paused_until = max(host.paused_until, now + pause)
            host.ramp, host.ramp_skip = 1, host.in_flight  # the pause over, one at a time (slow start)
        elif status is not None and status < 400:
            host.backoff = 0.0
            if host.ramp and not sent_before:
                host.ramp = 0 if host.ramp + 1 >= self.concurrency else host.ramp + 1
        self._schedule(host, now)
        if host.queued == 0 and host.in_flight == 0:  # idle: dropped once its delay and pause are over
            if host.next_start <= now:
                del self.hosts[host.host]
            else:
                heapq.heappush(self._idle, (host.next_start, host.host))
        if self._idle and self._idle[0][0] <= now:
            self._forget_idle(now)

    def _delay(self, crawl_delay: float | None) -> float:
        """Seconds between fetches of a host whose robots.txt asks ``crawl_delay`` (None: none)."""
        return self.download_delay if crawl_delay is None else max(self.download_delay,
                                                                   min(crawl_delay, self.max_crawl_delay))

    def _forget_idle(self, now: float) -> None:
        """Drop the state of hosts idle since their delay and pause ended (their Crawl-delay stays
        known among the answered hosts). Kept for ever before, a crawl of 300,000 hosts with a
        crawl delay held 229 MB of host states it no longer needed."""
        while self._idle and self._idle[0][0] <= now:
            _, name = heapq.heappop(self._idle)
            host = self.hosts.get(name)
            if host is not None and host.queued == 0 and host.in_flight == 0 and host.next_start <= now:
                del self.hosts[name]

    def note_answered(self, name: str) -> None:
        """Host ``name`` has answered once: it may have ``concurrency`` threads in flight."""
        host = self.hosts.get(name)
        self._answered[name] = host.crawl_delay if host is not None else self._answered.get(name)
        self._answered.move_to_end(name)
        while len(self._answered) > ANSWERED_HOSTS:
            self._answered.popitem(last=False)
        if host is not None and not host.answered:
            host.answered = True
            self._schedule(host, host.last_finish if host.last_finish > float("-inf") else 0.0)

    def has_answered(self, name: str) -> bool:
        """Whether host ``name`` has answered once (its first-contact limit is lifted)."""
        host = self.hosts.get(name)
        return host.answered if host is not None else name in self._answered

    def unanswered(self, thread: "GridThread", now: float, silent_limit: int, sent: float | None = None) -> bool:
        """A result of in-flight ``thread`` found no answer from its host (robots.txt unreachable,
        no connection, a timeout before any status line): whether it is a failed *probe*, to be
        counted by :meth:`probe_failed`. It is while the host has not answered, unless the thread
        was in flight when the host stopped answering. A host that has answered and gives
        ``silent_limit`` such results in a row (none answered between) has stopped answering:
        it is a new host again, one thread in flight, and the threads sent from then on probe
        it. A result whose request went out (``sent``, POSIX s; None: unknown) before the host's
        last answer is not counted: the host has answered since, so a slow part of a site whose
        pages time out together, in a row, while its other pages answer is no host gone silent
        (it was, and every queued page of the host failed). Call before :meth:`release` of the
        thread (``now``: POSIX s, unused)."""
        host = self.hosts.get(thread.host)
        if host is None:  # (a thread in flight keeps its host's state)
            return thread.host not in self._answered
        if not host.answered:
            return host.silent_skip == 0
        if sent is not None and sent < host.answered_at:
            return False
        host.silent += 1
        if host.silent >= silent_limit:
            host.answered, host.silent, host.silent_skip = False, 0, host.in_flight
            self._answered.pop(host.host, None)
            self._probes.pop(url_origin(thread.url), None)
        return False

    def probe_failed(self, url: str) -> int:
        """A thread of ``url``'s origin (scheme, host, port), whose host has not answered yet,
        found no answer (robots.txt unreachable, or no connection): count it, and return how
        many probes the origin has failed. (Origins, not hosts: ``http://h`` may be dead while
        ``https://h`` answers.)"""
        origin = url_origin(url)
        failed = self._probes.pop(origin, 0) + 1
        self._probes[origin] = failed
        while len(self._probes) > ANSWERED_HOSTS:
            self._probes.popitem(last=False)
        return failed

    def pause(self, name: str, now: float, until: float) -> None:
        """Start no thread of host ``name`` before ``until`` (POSIX s; ``now`` is the time now):
        a failed probe's back-off."""
        host = self.hosts.get(name)
        if host is not None and until > host.paused_until:
            host.paused_until = until
            self._schedule(host, now)

    def take_origin(self, url: str) -> list["GridThread"]:
        """Take every queued thread of ``url``'s origin out of the queue (retries waiting out
        their back-off included) and return them, in queue order; threads in flight stay."""
        origin, name = url_origin(url), url_host(url)

        def ours(thread: "GridThread") -> bool:
            return thread.host == name and url_origin(thread.url) == origin
        taken = []
        host = self.hosts.get(name)
        if host is not None:
            for heap in host.lanes.values():
                taken += [entry[2] for entry in heap if entry[2].queue_seq == entry[1] and ours(entry[2])]
        taken += [thread for _, seq, thread in self._later if thread.queue_seq == seq and ours(thread)]
        taken.sort(key=lambda thread: thread.queue_seq)
        for thread in taken:
            self.discard(thread)
        if host is not None:
            host.version += 1  # its lanes' stale entries are dropped as they come up
        return taken

    def mark_down(self, url: str, until: float, error_kind: str, error: str) -> None:
        """``url``'s origin failed its probes: :meth:`down` gives ``(error_kind, error)`` for its
        URLs until ``until`` (POSIX s); its count of failed probes starts again."""
        origin = url_origin(url)
        self._probes.pop(origin, None)
        self._down[origin] = (until, error_kind, error)
        self._down.move_to_end(origin)
        while len(self._down) > ANSWERED_HOSTS:
            self._down.popitem(last=False)

    def down(self, url: str, now: float) -> tuple[str, str] | None:
        """``(error_kind, error)`` of the last failed probe of ``url``'s origin while it is down
        at ``now``, else None: never down, or its :data:`HOST_DOWN_SECONDS` are over (then its
        next thread probes it again). Free while no origin is down (every submission asks)."""
        if not self._down:
            return None
        origin = url_origin(url)
        entry = self._down.get(origin)
        if entry is None:
            return None
        if entry[0] <= now:
            del self._down[origin]
            return None
        return entry[1], entry[2]

    def delay_of(self, name: str) -> float:
        """The current delay of host ``name`` in seconds (0.0 for a host without one)."""
        host = self.hosts.get(name)
        return host.delay if host is not None else 0.0

    def next_wakeup(self) -> float | None:
        """The earliest POSIX time at which a waiting host or a retry becomes ready, or a held
        attempt's slot is freed (:meth:`hold`), if any."""
        times = [entry[0] for entry in (self._waiting[:1] + self._later[:1] + self._hold_ends[:1])]
        return min(times) if times else None
