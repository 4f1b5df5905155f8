"""The manager's decisions, as a pure state machine: events in, actions out.

:class:`ManagerCore` knows the executors, applications and grid threads, and decides which
executor runs which thread, what has expired and what each peer must be told. It has no sockets,
no SQL and no clock: every event method takes ``now`` (POSIX seconds) and returns a list of
actions — :class:`Send` (a message for a peer, named by its ZeroMQ routing id), :class:`Strike`
(a hostile message of a peer), and the events of :mod:`gridcrawl.manager.events` (an executor
registered, a thread assigned, started, finished ...), which :mod:`gridcrawl.manager.recorder`
turns into rows of the manager's database. The server loop (:mod:`gridcrawl.manager.server`)
carries the actions out.

Scheduling (Alchemi's dispatcher, made exact): a READY thread goes to the connected, accepting
executor with the most idle workers (least loaded), among those the one holding the fewest
threads; when none has an idle worker, to the one with the most free slots in its local buffer
(``prefetch`` threads beyond its workers); ties go round robin (:attr:`Executor.rank`). So a
thread waits in a buffer, counting against its host's politeness budget without being fetched,
only while every executor able to run it is busy. An executor
that holds work is refilled once it has ``prefetch`` free slots (:attr:`Executor.refill`), so
it still holds a thread for each worker, and its refills travel ``prefetch`` to an ``assign``.
Capability-based dispatch: an executor declares its ``capabilities`` when it registers
(``"plugin:NAME"``, ``"plugin:NAME@VERSION"``, ``"render"``), a thread names what it ``needs``,
and a thread goes only to an executor whose capabilities include all of its needs; threads no
connected executor can run wait, counted as ``unrunnable`` in :meth:`ManagerCore.stats`. With ``dispatch = "host-hash"`` (ParaCA's host partitioning) every thread of a host goes
to the one executor that owns the host on a consistent-hash ring. Threads leave the queue by
priority (higher first), then with users in turn and each user's applications in turn
(start-time fair queuing), each in its submission order with its hosts in turn, under the grid-wide per-host politeness of
:mod:`gridcrawl.manager.queue`. Connection errors, 5xx and 429 are retried ``retry_times`` times
with exponential back-off, as new attempts.

Reliability (the ZeroMQ guide's Paranoid Pirate pattern): every peer heartbeats; a peer silent for
``heartbeat_interval × heartbeat_liveness`` seconds is dead — silent as seen by a manager that was
listening: silence is measured up to the last time the manager had read all its input
(:meth:`ManagerCore.tick`'s ``heard_all``), so the manager's own backlog or stall never kills a peer. Every assignment is an *attempt*
with its own id; when an executor is lost or a thread outlives ``thread_timeout``, the attempt is
taken back, the thread goes back to READY, and a later result quoting that attempt is fenced out.
A taken-back attempt may still be fetching (its executor alive but late, or told to cancel while
its request was under way): it keeps its host's politeness slot until its late result comes or
its executor's request window has passed (:meth:`ReadyQueue.hold
<gridcrawl.manager.queue.ReadyQueue.hold>`); one that sent nothing frees it at once.
A thread whose attempts were lost ``max_attempts`` times, on at least two different executors when
two exist, is failed (poison) and reported to its application (dask's rule: one flaky worker must
not poison a task).

Hostile or broken executors (see docs/reliability.md): the manager believes at most
``max_threads_per_executor`` worker threads of an executor, and lets it hold only a *window* of
unanswered attempts that starts at ``start_window`` and grows by one per result returned (TCP's slow
start, RFC 5681 §3.1) and halves on a timed-out attempt. A thread taken back from an executor is not
given to it again while another executor can take it. An executor with ``quarantine_after``
consecutive timed-out attempts gets no new work for a back-off period (quarantine). A result is
considered only from the executor its attempt was assigned to; attempt ids are random 63-bit
numbers, and a result naming someone else's attempt is dropped and answered with a :class:`Strike`
against its peer. Results stay at the manager (FINISHED) until the application acknowledges that it
stored them, so a client that restarts gets them again.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import logging
import math
import os
import uuid
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable

import msgspec

from gridcrawl import protocol as p
from gridcrawl.permissions import EXECUTE_THREAD, MANAGE_ALL_APPS, MANAGE_OWN_APP
from gridcrawl.settings import Settings
from gridcrawl.redact import hide_passwords
from gridcrawl.states import TRANSITIONS, ApplicationState, ThreadState, check_transition
from gridcrawl.urls import url_host, url_origin
from gridcrawl.words import counted
from gridcrawl.manager import events as ev
from gridcrawl.manager.queue import ANSWERED_HOSTS, HOST_DOWN_SECONDS, ReadyQueue
from gridcrawl.errors import ControlError  # noqa: F401 (re-exported)

log = logging.getLogger("gridcrawl.manager")

RECENT_THREADS = 100   # finished threads the dashboard lists
#: Seconds between two writes of one executor's heartbeat figures (and ``ping_time``) to its SQL
#: row: the first heartbeat is written at once, later ones at most this often, and the last one
#: when the executor leaves or is declared dead. The dashboard reads the live figures from memory;
#: SQL readers see them at most this many seconds old (1,000 executors heartbeating every second
#: were 1,000 row updates a second).
HEARTBEAT_RECORD_EVERY = 5.0
#: Heartbeat figures that are percentages (at most 100; every figure is 0 or more).
PERCENT_FIGURES = {"cpu_usage": 100.0, "cpu_avail": 100.0}
#: The heartbeat figures an executor sends (``Figures.sample`` in executor/agent.py): the manager
#: keeps these and drops any other name (8 connections whose heartbeats named 60 figures of 1 MB
#: each took 450 MB of the manager's memory, kept after they were declared dead).
HEARTBEAT_FIGURES = frozenset({"cpu_usage", "cpu_avail", "cpu_totalusage", "mem_usage", "running",
                               "pages_per_second", "worker_idle_seconds", "worker_waits"})
CONTROL_ACTIONS = ("pause", "resume", "cancel")
#: Results of an executor (on each registration) whose pages the manager decodes in full, as the
#: client will, before it relays them: an executor of another release (a page field the client does
#: not know) or a broken one is found at its first page, and its threads run elsewhere, where they
#: failed at the client as poison. Later pages are relayed with their envelope checked only
#: (decoding a page in full costs about 13 µs, a tenth of the manager's CPU per grid thread).
CHECKED_IN_FULL = 100
#: Error kinds retried on another attempt (with back-off): the network, robots.txt or the browser failed.
#: Not ``bad_response``: a server that answered, not in usable HTTP, answers the same again.
_RETRIED = frozenset({p.ErrorKind.CONNECTION, p.ErrorKind.ROBOTS_UNREACHABLE, p.ErrorKind.RENDER})


def _bounded_figures(figures: dict, ex: "Executor") -> dict:
    """The heartbeat ``figures`` of executor ``ex`` the manager keeps: the numbers named in
    :data:`HEARTBEAT_FIGURES` (any other name and any other value are dropped), each within what
    it can be, not as a broken or hostile executor sent it: 0 or more, percentages at most 100,
    ``mem_usage`` (bytes resident) at most the ``mem_max`` it registered (the machine's memory;
    when it gave one), ``running`` (workers busy) at most the threads the manager lets it hold
    (``ex.capacity``). ``cpu_totalusage``, ``pages_per_second`` and the worker idle figures have
    no such bound: they are kept as sent (``check_limits`` in manager/server.py has already
    refused non-finite numbers and integers beyond 64 bits)."""
    mem_max = ex.info.get("mem_max") or math.inf
    bounds = {**PERCENT_FIGURES, "mem_usage": mem_max, "running": ex.capacity}
    return {k: min(max(v, 0), bounds.get(k, math.inf)) for k, v in figures.items()
            if k in HEARTBEAT_FIGURES and isinstance(v, (int, float)) and not isinstance(v, bool)}


def _login_refusal(reason: str) -> p.Refuse:
    """The refusal of a login: one to ask again shortly when the manager is over its budget of
    failed password checks (:data:`gridcrawl.auth.LOGINS_BUSY`), else a final one."""
    from gridcrawl.auth import LOGINS_BUSY
    return p.Refuse(reason, retry=reason == LOGINS_BUSY)


def retry_wait(page: "p.PageResult | p.RelayedPage", retries: int, settings: Settings) -> float | None:
    """Seconds before the next attempt of a grid thread whose attempt ``retries`` + 1 gave
    ``page``, or None when it is not tried again: its failure is not one that is retried
    (:meth:`ManagerCore._retryable`), it was retried ``retry_times`` times already, or the site
    asks to come back after more than :data:`~gridcrawl.protocol.MAX_RETRY_AFTER` seconds (the
    executor's error says so). Otherwise ``retry_backoff × 2^retries``, at least the page's
    Retry-After. The one rule of the grid (:meth:`ManagerCore._finish`) and of Spark's tasks."""
    if not ManagerCore._retryable(page) or retries >= settings.retry_times:
        return None
    if (page.retry_after or 0.0) > p.MAX_RETRY_AFTER:
        return None
    return max(page.retry_after or 0.0, settings.retry_backoff * (2 ** retries))


def _instruction_bytes(instruction: dict | None, limit: int | None = None) -> int:
    """What an instruction holds in the manager's memory, about: its msgpack bytes plus
    :data:`NODE_BYTES` for each value in it (0 for none). Bytes alone let ``{"items": [{}] *
    65000}``, 65 KB on the wire, hold 4.5 MB.

    With ``limit`` (bytes), the count stops as soon as it is over ``limit`` and returns what it
    has counted (more than ``limit``): an instruction of 10 million empty maps (a 10 MiB
    ``open``) was walked whole, 3.9 s of the manager's loop, to be refused."""
    if not instruction:
        return 0
    nodes, stack = 0, [instruction]
    most = math.inf if limit is None else limit // NODE_BYTES
    while stack:
        value = stack.pop()
        nodes += 1
        if isinstance(value, dict):
            nodes += len(value)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        if nodes + len(stack) > most:  # (what waits on the stack counts a node each)
            return NODE_BYTES * (nodes + len(stack))
    return len(msgspec.msgpack.encode(instruction)) + NODE_BYTES * nodes


def _read_instruction(instruction, limit: int, where: str) -> tuple[dict | None, int]:
    """``instruction`` (a map, None, or a big message's :class:`~gridcrawl.protocol.PendingInstruction`)
    as the manager keeps it, and its :func:`_instruction_bytes` counted up to ``limit``. A pending
    one is read only when its msgpack bytes are within ``limit``; else it stays unread, its
    length as its size (over ``limit``: the caller refuses it). Raises
    :class:`~gridcrawl.protocol.ProtocolError` (naming ``where``) for one that is no map, or that
    is nested more than :data:`MAX_INSTRUCTION_DEPTH` levels deep."""
    if type(instruction) is p.PendingInstruction:
        if len(instruction) > limit:
            return instruction, len(instruction)
        instruction = instruction.read(where)
    if instruction and _deeper_than(instruction, MAX_INSTRUCTION_DEPTH):
        raise p.ProtocolError(f"{where}: nested more than {MAX_INSTRUCTION_DEPTH} levels deep")
    return instruction, _instruction_bytes(instruction, limit)


def _deeper_than(value, depth: int) -> bool:
    """Whether lists and maps nest in ``value`` more than ``depth`` levels deep."""
    level = [value]
    for _ in range(depth):
        level = [v for node in level
                 for v in (node.values() if isinstance(node, dict) else node if isinstance(node, list) else ())
                 if isinstance(v, (dict, list))]
        if not level:
            return False
    return True


def _instruction_sizes(app: "Application", m: p.Submit) -> tuple[str | None, dict[int, int]]:
    """The :func:`_instruction_bytes` of submit ``m``'s new (or restored) threads by thread id,
    and why the submit cannot be taken for ``app`` (None: it can): a thread's instruction over
    :data:`MAX_THREAD_INSTRUCTION`, the application's over :data:`MAX_APPLICATION_INSTRUCTION`,
    or its threads' together over :data:`MAX_INSTRUCTIONS_PER_APPLICATION` (found at the first
    thread over: the later ones are not read). The instructions it reads replace the pending
    ones of ``m`` (:func:`_read_instruction`; raises ``ProtocolError`` as it does)."""
    if m.instruction is not None and m.instruction != app.instruction:
        m.instruction, size = _read_instruction(m.instruction, MAX_APPLICATION_INSTRUCTION, "submit.instruction")
        if size > MAX_APPLICATION_INSTRUCTION:
            return (f"the application's instruction would hold about {size} bytes at the manager, over "
                    f"{MAX_APPLICATION_INSTRUCTION}"), {}
    sizes: dict[int, int] = {}
    total = app.instruction_bytes
    for spec in m.threads:
        if spec.instruction and (spec.thread_id not in app.threads or app.threads[spec.thread_id].held):
            spec.instruction, size = _read_instruction(spec.instruction, MAX_THREAD_INSTRUCTION,
                                                       f"submit: grid thread {spec.thread_id}'s instruction")
            sizes[spec.thread_id] = size
            if size > MAX_THREAD_INSTRUCTION:
                return (f"grid thread {spec.thread_id}: its instruction would hold about {size} bytes at the "
                        f"manager, over {MAX_THREAD_INSTRUCTION}"), sizes
            total += size
            if total > MAX_INSTRUCTIONS_PER_APPLICATION:
                return (f"application {app.application_id[:8]}'s grid threads would hold {total} bytes of instructions "
                        f"at the manager, over {MAX_INSTRUCTIONS_PER_APPLICATION}: submit fewer at once "
                        "(gridcrawl-client --max-in-flight)"), sizes
    return None, sizes


def _thread_log(t: "GridThread") -> dict:
    """``extra`` fields of a log record about grid thread ``t`` (JSON log lines carry them)."""
    return {"application_id": t.application_id, "thread_id": t.thread_id, "url": hide_passwords(t.url)}


#: Bytes of one grid thread's instruction, of all those one application holds at the manager,
#: and of an application's shared instruction, as :func:`_instruction_bytes` estimates what they
#: hold in memory: a rogue application's 200 threads of 4 MB instructions each, never runnable,
#: held 800 MB of the manager's memory for its 7 days. (A crawl's keep/follow rules travel with
#: each thread of their page type: 1,200 rules are about 1.4 MB.)
MAX_THREAD_INSTRUCTION = 4 * 1024 * 1024
MAX_INSTRUCTIONS_PER_APPLICATION = 256 * 1024 * 1024
MAX_APPLICATION_INSTRUCTION = 16 * 1024 * 1024
#: Levels of lists and maps an instruction may nest (a crawl's rules and item specs take about 6):
#: one some 970 levels deep decoded, then failed to encode again at the manager, which logged a
#: traceback for each such message and answered nothing.
MAX_INSTRUCTION_DEPTH = 64
#: Bytes a decoded value (a dict, list, string or number) costs in Python besides its content, about.
NODE_BYTES = 64
#: Characters of an executor's error text a host's down verdict quotes.
ERROR_QUOTED = 200

def _bad_names(names: list[str], what: str) -> str | None:
    """Why ``names`` (an executor's capabilities, a thread's needs) cannot be taken, or None."""
    if len(names) > p.MAX_CAPABILITIES:
        return f"{what}: at most {p.MAX_CAPABILITIES} names, not {len(names)}"
    for name in names:
        if not name or len(name) > p.CAPABILITY_LENGTH or not name.isprintable() or " " in name:
            return f"{what}: {name[:40]!r} is not a name (1 to {p.CAPABILITY_LENGTH} printable characters, no spaces)"
    return None


def result_bytes(page: "p.RelayedPage | p.PageResult | None") -> int:
    """Bytes of memory, about, that ``page`` takes while the manager holds it until its client
    acknowledges it: the length of a relayed page's msgpack bytes (as the executor sent them)
    plus 200 for the object; for a decoded :class:`~gridcrawl.protocol.PageResult` (tests, an
    in-process core), its content's length plus 200 per link. 0 for None (a poison thread)."""
    if page is None:
        return 0
    raw = getattr(page, "raw", None)
    if raw is not None:
        return 200 + len(raw)
    return 200 + len(page.content or "") + 200 * len(page.links)


def _random_ids(chunk: int = 512) -> Callable[[], int]:
    """A function returning random 63-bit numbers from the OS's CSPRNG (``os.urandom``, as
    :mod:`secrets` uses), read ``chunk`` numbers at a time: one system call per 512 attempt ids
    rather than one per id (profiled: 2–4 % of the manager's CPU under load)."""
    numbers: list[int] = []

    def next_id() -> int:
        if not numbers:
            data = os.urandom(8 * chunk)
            numbers.extend(int.from_bytes(data[i:i + 8], "big") >> 1 for i in range(0, len(data), 8))
        return numbers.pop()
    return next_id


def _hash(text: str) -> int:
    """A stable 64-bit hash of ``text`` (MD5-based; the same on every run and machine)."""
    return int.from_bytes(hashlib.md5(text.encode(), usedforsecurity=False).digest()[:8], "big")


# ----------------------------------------------------------------------------------------------
# Actions


@dataclass(slots=True)
class Send:
    """Action: send ``message`` to the peer with ZeroMQ routing id ``peer``."""

    peer: bytes
    message: p.Message


@dataclass(slots=True)
class Strike:
    """Action: count one hostile message against ``peer`` (the server's :class:`PeerGuard`
    blocks a peer with too many); ``why`` says what it did, for the (rate-limited) log."""

    peer: bytes
    why: str


Action = Send | Strike | ev.Event

LATE_ATTEMPTS = 100_000  # taken-back attempts remembered, so that their late results are fenced


# ----------------------------------------------------------------------------------------------
# State


@dataclass(eq=False, slots=True)
class GridThread:
    """One grid thread at the manager (one URL of one application)."""

    internal_id: int
    application_id: str
    thread_id: int
    url: str
    depth: int
    priority: int
    instruction: dict | None
    time_submitted: float
    host: str = ""
    state: ThreadState = ThreadState.READY
    executor_id: str | None = None
    attempt_id: int | None = None
    time_assigned: float | None = None
    time_started: float | None = None
    time_finished: float | None = None
    attempts: int = 0
    lost: int = 0
    retries: int = 0
    held: bool = False
    rerun: bool = False   # restored after a manager restart: its row has the times of a run before it
    finished_before: bool = False  # restored, and that run had finished (counted done if not run again)
    failed: bool = False
    result: p.RelayedPage | p.PageResult | None = None
    delivered_to: bytes | None = None  # the client connection its result was last sent to
    queue_seq: int | None = None
    tried: set[str] | None = None  # executors an attempt of it was lost on or timed out on (None: none yet)
    needs: tuple = ()    # capabilities an executor must have to run it (sorted, distinct)
    instruction_bytes: int = 0  # what its instruction holds in memory, about (counted in its application's)

    @property
    def name(self) -> str:
        """``application/thread`` label used in logs and errors."""
        return f"application {self.application_id[:8]} thread {self.thread_id}"


@dataclass(eq=False, slots=True)
class Executor:
    """A registered executor and the attempts it holds (``running``: attempt id → thread)."""

    executor_id: str
    peer: bytes | None
    name: str
    host: str
    user: str
    workers: int                      # its worker threads (believed: at most max_threads_per_executor)
    capacity: int
    dedicated: bool = True
    accepting: bool = True
    connected: bool = True
    last_seen: float = 0.0
    registered: float = 0.0           # POSIX s of this registration
    running: dict[int, GridThread] = field(default_factory=dict)
    finished: int = 0
    info: dict = field(default_factory=dict)      # registration figures: os, arch, cpu_max, num_cpus, mem_max
    figures: dict = field(default_factory=dict)   # the latest heartbeat's figures (cpu_usage ... pages_per_second)
    last_heartbeat: float | None = None           # POSIX s of the latest heartbeat with figures
    recorded_heartbeat: float = float("-inf")     # POSIX s of the latest heartbeat written to SQL
    unrecorded: "ev.ExecutorHeartbeat | None" = None  # a later heartbeat not written yet (HEARTBEAT_RECORD_EVERY)
    window: int = 1                   # unanswered attempts it may hold now (slow start; <= capacity)
    timeouts: int = 0                 # consecutive timed-out attempts (reset by a result)
    quarantined_until: float | None = None  # POSIX s; no new work until then
    quarantines: int = 0              # times quarantined (the back-off doubles each time)
    capabilities: frozenset = frozenset()         # what it declared at registration ("plugin:NAME" ...)
    request_window: float = 0.0       # seconds one of its threads may send requests after it starts (0: not said)
    # the attempts it was running when it registered (of its earlier connections): their results
    # are late ones, fenced, or dropped without a strike when this manager never knew them
    prior: frozenset = frozenset()
    progress: float = float("-inf")   # POSIX s of its latest start or result of an attempt it held
    # application id -> the application instruction sent to it (for this registration: a new TCP
    # connection is a new ZeroMQ identity, which the manager answers "register" until it does)
    instructed: dict = field(default_factory=dict)

    def can_run(self, needs: tuple) -> bool:
        """True if this executor has every capability of ``needs``."""
        return not needs or self.capabilities.issuperset(needs)

    @property
    def free(self) -> int:
        """Slots this executor can take now (0 when disconnected, not accepting or quarantined):
        its window of unanswered attempts minus what it holds."""
        if not (self.connected and self.accepting) or self.quarantined_until is not None:
            return 0
        window = self.window  # at most capacity (slow start), so min(capacity, window)
        return (window if window < self.capacity else self.capacity) - len(self.running)

    @property
    def rank(self) -> int:
        """Dispatch order (larger first): the executor with the most idle workers (least
        loaded: Alchemi's and MCMTCrawler's rule) — a thread it gets starts at once instead of
        waiting in a buffer while counting against its host's politeness budget, and work
        spreads over the executors — then, once none has an idle worker, the most free slots
        in a local buffer. Among executors with as many idle workers, the one holding the
        fewest threads comes first (room in its buffer: ``capacity`` less what it holds), and
        equals take turns. Not its free slots: they also count its slow-start window, which
        grows with every result it returns, and would gather the work on the executors that
        answered first (with a crawl delay, one thread in flight at a time, on one executor of
        many)."""
        free = self.free
        held = len(self.running)
        idle = self.workers - held
        return (idle << 32) + self.capacity - held if free > 0 and idle > 0 else free

    @property
    def refill(self) -> int:
        """Free slots an executor that holds work waits for before dispatch refills it: its
        prefetch (``capacity - workers``; at least 1, at most its window). It then still holds
        a thread for each worker, so no worker waits, and its refills travel as one ``assign``
        of ``prefetch`` jobs rather than one message per result: the manager handles about
        ``2 / prefetch`` messages per grid thread of a small executor (1,000 desktops of 2
        workers each: 1.6 messages per grid thread with one job per refill, issue 23)."""
        return max(1, min(self.capacity - self.workers, self.capacity, self.window))


@dataclass(eq=False)
class Application:
    """An application (one crawl) and its live grid threads (thread id → thread)."""

    application_id: str
    name: str
    user: str
    peer: bytes | None
    time_created: float
    state: ApplicationState = ApplicationState.READY
    last_seen: float = 0.0
    threads: dict[int, GridThread] = field(default_factory=dict)
    paused: bool = False                 # an operator paused it: its READY threads are not dispatched
    unacked_bytes: int = 0               # result_bytes() of its FINISHED threads, held until acknowledged
    instruction_bytes: int = 0           # what its threads' instructions hold (MAX_INSTRUCTIONS_PER_APPLICATION)
    throttled: bool = False              # unacked_bytes reached max_unacked_bytes: READY threads not dispatched
    throttles: int = 0                   # times it was throttled (the first is logged as a WARNING)
    done: int = 0                        # threads finished (results received, failed ones included)
    errors: int = 0                      # of those, threads that failed (poison) or whose fetch failed (not robots.txt's)
    time_completed: float | None = None
    first_submitted: float | None = None  # crawl seconds run from here to last_finished (README "Figures")
    last_finished: float | None = None
    instruction: dict | None = None  # the instruction all its threads share (OpenApplication.instruction)
    client: str = ""  # the token of the client process that holds it (OpenApplication.client)
    client_user: str = ""  # the user its client logged in as: its owner, or an administrator who reattached
    #: stopped with grid threads not done (cancelled): their ids are recorded, and its client
    #: submits them again, so a client that comes back gets a new application (:meth:`ManagerCore.on_open`)
    aborted: bool = False
    #: the highest priority its threads get (:data:`protocol.DEFAULT_PRIORITY` for a user without
    #: ManageAllApps on a manager with users, set by the client's login; None: any), and whether
    #: a higher one was asked for and lowered (logged once)
    max_priority: int | None = None
    priority_capped: bool = False


# ----------------------------------------------------------------------------------------------


class ManagerCore:
    """The manager's state and decisions. Not thread-safe; one server loop drives it.

    ``settings`` supplies heartbeat, liveness, timeout, attempt and prefetch figures.
    ``new_id`` makes executor and application ids (uuid4 hex by default; tests pass their own);
    ``new_attempt_id`` makes attempt ids (random 63-bit numbers by default: a peer cannot guess
    another executor's attempt). ``address`` is the endpoint peers reach this manager at
    (``tcp://host:9000``), named in the commands its refusals suggest.
    """

    def __init__(self, settings: Settings, *, new_id: Callable[[], str] | None = None,
                 next_internal_id: int = 1, new_attempt_id: Callable[[], int] | None = None,
                 authenticate: Callable[..., str | None] | None = None,
                 peer_present: Callable[[bytes], bool] | None = None, address: str = "ENDPOINT") -> None:
        self.settings = settings
        self.address = address  # the endpoint peers reach this manager at, for commands in refusals
        # authenticate(user, password, permission, quiet=False) -> None if allowed, else the
        # refusal reason (gridcrawl.auth.UserStore.authenticate, injected by the server; quiet:
        # a question that refuses nothing, not logged); None: an open grid.
        self.authenticate = authenticate
        # peer_present(routing id) -> whether a connection to that peer still exists (the server
        # probes its socket); None: assume it does (a silent peer is then judged by liveness only)
        self.peer_present = peer_present or (lambda peer: True)
        self.new_id = new_id or (lambda: uuid.uuid4().hex)
        self.executors: dict[str, Executor] = {}
        # the connected ones among them: what dispatch, the host-hash ring and the heartbeat's
        # count look at, however many that left the manager still keeps (keep_departed)
        self.connected: dict[str, Executor] = {}
        # name -> ids of the connected executors of that name (two desktops given one --name,
        # a configuration file's name copied to every desktop: warned of at registration)
        self.connected_names: dict[str, set[str]] = {}
        # executor id -> user who registered it, from the database after a restart (an id is
        # reclaimed only by its own user, even when the manager has not seen it since starting)
        self.executor_owners: dict[str, str] = {}
        # (name, host, user) -> executor id of executors recorded earlier (restored from SQL): an
        # executor started again under the same name on the same host and user keeps its id
        self.executor_names: dict[tuple[str, str, str], str] = {}
        self.applications: dict[str, Application] = {}
        self.peers: dict[bytes, tuple[str, str]] = {}  # routing id -> ("executor"|"client", id)
        # ids of executors that left and of applications that stopped, gone longest first: at most
        # settings.keep_departed of each are kept (:meth:`_forget_departed`), so that a manager
        # that sees endless executors and crawls come and go stays bounded in memory
        self._departed: OrderedDict[str, tuple[str, str, str]] = OrderedDict()  # -> (name, host, user)
        self._stopped: OrderedDict[str, None] = OrderedDict()
        # user -> ids of their applications that are not stopped, oldest first: at most
        # settings.max_applications_per_user each (:meth:`_room_for_another`)
        self._open_by_user: dict[str, dict[str, None]] = {}
        self.queue = ReadyQueue(settings.concurrent_requests_per_host, settings.download_delay,
                                settings.max_crawl_delay)
        self._rings: dict[tuple, tuple[frozenset, list]] = {}  # needs -> (members, ring) of host-hash dispatch
        if settings.dispatch == "host-hash":  # eligible hosts filed by owner: a pass looks at the owners with room
            self.queue.partition = self._owner_id
        self.queue.share_of = self._user_of  # users share the grid in turn, each user's applications its turn
        self._next_internal = next_internal_id
        self.new_attempt_id = new_attempt_id or _random_ids()
        self._attempts: dict[int, GridThread] = {}
        # attempt id -> (executor id, routing id or None) of attempts taken back (or running when
        # the previous manager stopped): a late result of one of them is fenced, not a forgery
        self.late: OrderedDict[int, tuple[str, bytes | None]] = OrderedDict()
        # host -> executors on which a thread of it found no answer (no connection, robots.txt
        # unreachable) and that have not had an answer from it since: its threads go to others
        # while another can run them (_avoided). An executor that cannot reach the web (a desktop
        # behind a firewall, a broken proxy) answers every thread at once with "connection
        # refused": least-loaded dispatch gave it each host's next probe, and every host of the
        # crawl was declared down (bounded: the hosts longest in it are forgotten first)
        self.no_answer_on: OrderedDict[str, set[str]] = OrderedDict()
        self._round_robin = 0
        # executors that may have a free slot (every one with ``free > 0`` is here; some here may
        # be full): dispatch looks only at these, not at every executor (1,000 of them per result)
        self._room: dict[str, Executor] = {}
        # the server's loop sets this: a ``results`` message marks a dispatch due instead of
        # dispatching, and the loop calls :meth:`dispatch_due` before it sends its outbox, once
        # per few dozen messages (a dispatch per message cost 9-11 % of the manager's CPU per
        # grid thread: benchmarks/results/2026-11-27-dispatch-once-per-flush.md)
        self.defer_dispatch = False
        self._dispatch_due = False
        self._last_heartbeat = 0.0
        self.fenced = 0
        # finished threads and the names of their executors, newest last (the dashboard's list)
        self.recent: deque[tuple[GridThread, str | None]] = deque(maxlen=RECENT_THREADS)
        self.handlers: dict[type, Callable[[bytes, p.Message, float], list[Action]]] = {
            p.Register: self.on_register,
            p.Heartbeat: self.on_heartbeat,
            p.Started: self.on_started,
            p.Result: self.on_result,
            p.Results: self.on_results,
            p.Availability: self.on_availability,
            p.OpenApplication: self.on_open,
            p.Submit: self.on_submit,
            p.Ack: self.on_ack,
            p.CloseApplication: self.on_close,
            p.Bye: self.on_bye,
            p.Control: self.on_control,
        }
        #: the message types a manager accepts: others are dropped before their body is decoded
        self.accepted = frozenset(kind.TYPE for kind in self.handlers)

    # -------------------------------------------------------------------------- entry points

    def handle(self, peer: bytes, message: p.Message, now: float) -> list[Action]:
        """Apply one decoded ``message`` from ``peer`` at time ``now``; return the actions.

        Messages a manager never receives (``welcome``, ``assign`` ...) are answered with
        :class:`~gridcrawl.protocol.Refuse`.
        """
        handler = self.handlers.get(type(message))
        if handler is None:
            return [Send(peer, p.Refuse(f"a manager does not accept {message.TYPE.decode()!r}"))]
        self._touch(peer, now)
        return handler(peer, message, now)

    def tick(self, now: float, heard_all: float | None = None) -> list[Action]:
        """Periodic work: heartbeats to every peer, dead peers, threads past ``thread_timeout``,
        applications without a client past ``detached_timeout`` (cancelled).

        ``heard_all`` (POSIX s, at most ``now``; None: ``now``) is the last time the manager had
        read every message waiting for it (the server found its socket empty). Silence is
        measured up to then, not up to ``now``: a peer whose heartbeats (or an executor whose
        results) still wait unread behind the manager's own backlog, or arrived while the
        manager's loop was stalled, is not declared dead, nor its attempt timed out. A peer is
        dead when it sent nothing for ``peer_timeout`` seconds before a moment the manager was
        listening — the Paranoid Pirate rule of the ZeroMQ guide (ch. 4), judged from the
        listener's side; a truly silent peer is declared dead as soon as the manager has caught
        up with its input.
        """
        actions: list[Action] = []
        s = self.settings
        judged = now if heard_all is None else min(now, heard_all)
        if now - self._last_heartbeat >= s.heartbeat_interval:
            self._last_heartbeat = now
            beat = to_client = p.Heartbeat()
            if any(kind == "client" for kind, _ in self.peers.values()):  # clients learn which executors take work
                taking = [ex for ex in self.connected.values() if ex.accepting and ex.quarantined_until is None]
                to_client = p.Heartbeat(executors=len(taking),
                                        capabilities=sorted(set().union(*(ex.capabilities for ex in taking)))[:1000])
            actions.extend(Send(peer, to_client if kind == "client" else beat) for peer, (kind, _) in self.peers.items())
        for ex in list(self.connected.values()):
            if judged - ex.last_seen > s.peer_timeout:
                # the pages it was running: one of them may be what ended it (a plugin that exits, a crash)
                started = [hide_passwords(t.url) for t in ex.running.values() if t.state == ThreadState.STARTED]
                log.warning("executor %s (%s) silent for %.1f s: declared dead, its %d grid threads queued again%s",
                            ex.executor_id[:8], ex.name, judged - ex.last_seen, len(ex.running),
                            f" (running: {', '.join(started[:3])}{' …' if len(started) > 3 else ''})" if started else "")
                actions += self._lose_executor(ex, now, "lost")
        for app in list(self.applications.values()):
            if app.peer is not None and judged - app.last_seen > s.peer_timeout:
                if app.state == ApplicationState.STOPPED:  # a finished crawl's client has simply left
                    log.debug("application %s: its client left after the crawl", app.application_id[:8])
                else:
                    log.warning("application %s: client silent, detached (its threads go on)",
                                app.application_id[:8])
                self._detach(app)
            elif (app.peer is None and s.detached_timeout and app.state != ApplicationState.STOPPED
                  and judged - app.last_seen > s.detached_timeout):
                log.warning("application %s: no client for %.0f s (detached_timeout): cancelled, %d grid threads "
                            "dropped; a client that comes back submits again what it had in flight",
                            app.application_id[:8], judged - app.last_seen, len(app.threads))
                actions += self._stop_application(app, now, cancel=True)
        for ex in list(self.connected.values()):  # (one that left holds nothing; its quarantine waits for its return)
            if ex.quarantined_until is not None and now >= ex.quarantined_until:
                log.warning("executor %s (%s): quarantine over, it gets work again", ex.executor_id[:8], ex.name)
                ex.quarantined_until, ex.timeouts = None, 0
                self._has_room(ex)
                actions.append(ev.ExecutorQuarantined(ex.executor_id, None))
            for attempt_id, t in list(ex.running.items()):
                if self._overdue(t, ex, judged):
                    log.warning("%s (%s) ran over %.0f s on executor %s: taken back", t.name, hide_passwords(t.url),
                                s.thread_timeout, ex.name, extra=_thread_log(t))
                    del ex.running[attempt_id]
                    self._has_room(ex)
                    if ex.peer is not None:
                        actions.append(Send(ex.peer, p.Cancel(attempt_id)))
                    actions += self._take_back(t, now, "timeout")
                    actions += self._timed_out(ex, now)
        self.queue.expire_holds(now)  # held slots whose time is up (a dispatch frees them only with threads queued)
        actions += self.dispatch(now)
        if s.straggler_seconds:
            actions += self._steal_stragglers(now, judged)
        return actions

    def _steal_stragglers(self, now: float, judged: float) -> list[Action]:
        """After a dispatch, executors with idle workers found nothing to run: take back from
        other executors the attempts they have held longer than ``straggler_seconds`` (oldest
        first, as many as there are idle workers) and dispatch them again, to executors they
        were not taken back from (those that have returned results first). An executor that
        registered, claimed many workers and never answered held a crawl's seed, then its last
        threads, for ``thread_timeout`` (a 5 s crawl took 601 s) while the honest ones sat idle;
        this is the end-of-job backup of MapReduce (Dean and Ghemawat, OSDI 2004, §3.6), taken
        back rather than duplicated: a late result of the straggler is fenced. Counted as a
        timed-out attempt of its holder (quarantined after ``quarantine_after``; at once, with
        all it holds taken back, when it has never returned a result)."""
        idle = sum(min(ex.free, ex.workers - len(ex.running)) for ex in self._room.values()
                   if ex.free > 0 and ex.workers > len(ex.running))
        if not idle:
            return []
        limit = self.settings.straggler_seconds
        since = lambda t: t.time_started if t.time_started is not None else t.time_assigned  # noqa: E731
        stragglers = sorted(((since(t), attempt_id, t, ex)
                             for ex in self.connected.values() for attempt_id, t in ex.running.items()
                             if since(t) is not None and judged - since(t) > limit), key=lambda entry: entry[:2])
        actions: list[Action] = []
        for held, attempt_id, t, ex in stragglers:
            if idle <= 0 or not any(other is not ex and other.free > 0 and other.workers > len(other.running)
                                    and other.can_run(t.needs) for other in self._room.values()):
                continue
            if attempt_id not in ex.running:
                continue  # taken back with the rest of its unproven executor's attempts, below
            log.warning("%s (%s) held %.0f s by executor %s while others sit idle: taken back (straggler)",
                        t.name, hide_passwords(t.url), judged - held, ex.name, extra=_thread_log(t))
            actions += self._straggler(t, attempt_id, ex, now)
            idle -= 1
            if not ex.finished and ex.quarantined_until is None:
                # it never returned a result: all it holds goes back, and it gets nothing for a while
                # (it took four more of the seed's links before three take-backs quarantined it)
                for other_id, other in list(ex.running.items()):
                    actions += self._straggler(other, other_id, ex, now)
                ex.timeouts = max(ex.timeouts, self.settings.quarantine_after - 1)
                actions += self._timed_out(ex, now)
        return actions + self.dispatch(now) if actions else actions

    def _straggler(self, t: GridThread, attempt_id: int, ex: Executor, now: float) -> list[Action]:
        """Take attempt ``attempt_id`` of ``t`` back from ``ex`` as a straggler: cancelled there,
        a timed-out attempt of ``ex``, and not run on ``ex`` again. It counts towards ``t``'s
        poison (``max_attempts``) when ``ex`` has returned results (a working executor the page
        itself held: one tag of 200,000 attributes held each executor's parse for over 10 minutes,
        and went from one to the other every ``straggler_seconds`` for ever), not when ``ex`` never
        has (silent executors taking the seed in turn made it poison)."""
        del ex.running[attempt_id]
        self._has_room(ex)
        actions: list[Action] = [Send(ex.peer, p.Cancel(attempt_id))] if ex.peer is not None else []
        actions += self._take_back(t, now, "straggler", count=ex.finished > 0)
        t.tried = (t.tried or set()) | {ex.executor_id}
        if ex.quarantined_until is None:
            actions += self._timed_out(ex, now)
        return actions

    def _overdue(self, t: GridThread, ex: Executor, judged: float) -> bool:
        """Whether attempt ``t`` held by ``ex`` has run over ``thread_timeout`` as of ``judged``
        (POSIX s). A started thread counts from its start. One not started yet waits in the
        executor's buffer behind at most ``capacity - 1`` others, run ``workers`` at a time and
        each bounded by ``thread_timeout``: it is overdue once the executor has reported no
        start and no result for ``thread_timeout`` since its assignment (an executor that does
        nothing loses it after one timeout), or after ``ceil(capacity / workers)`` timeouts in all (one
        that works but holds it back; a 2-worker desktop with ``prefetch`` 6: four)."""
        timeout = self.settings.thread_timeout
        if t.time_started is not None:
            return judged - t.time_started > timeout
        if t.time_assigned is None:
            return False
        rounds = -(-ex.capacity // max(1, ex.workers))
        return (judged - max(t.time_assigned, ex.progress) > timeout
                or judged - t.time_assigned > timeout * rounds)

    def _timed_out(self, ex: Executor, now: float) -> list[Action]:
        """An attempt of ``ex`` timed out: halve its window; after ``quarantine_after`` in a row,
        quarantine it for ``quarantine_seconds × 2^(times quarantined before)`` (at most 16×)."""
        ex.window = max(1, ex.window // 2)
        ex.timeouts += 1
        if ex.timeouts < self.settings.quarantine_after or ex.quarantined_until is not None:
            return []
        seconds = self.settings.quarantine_seconds * 2 ** min(ex.quarantines, 4)
        ex.quarantines += 1
        ex.quarantined_until = now + seconds
        log.warning("executor %s (%s) quarantined for %.0f s: %s in a row timed out",
                    ex.executor_id[:8], ex.name, seconds, counted(ex.timeouts, "attempt"))
        return [ev.ExecutorQuarantined(ex.executor_id, ex.quarantined_until)]

    # -------------------------------------------------------------------------- executors

    def _same_executor(self, m: p.Register) -> str | None:
        """The id of a known executor that is not connected and has ``m``'s name, host and user
        (an executor process started again), else None."""
        executor_id = self.executor_names.get((m.name, m.host, m.user))
        ex = self.executors.get(executor_id or "")
        return executor_id if executor_id and (ex is None or not ex.connected) else None

    def on_register(self, peer: bytes, m: p.Register, now: float) -> list[Action]:
        """An executor joins (or rejoins after a reconnect): welcome it and give it work.

        It is granted its ``threads`` up to ``max_threads_per_executor`` (a larger claim logs a
        WARNING here), and its welcome says how many: the executor runs that many, and its
        records show them. Refused unless ``authenticate`` grants ``m.user`` the ExecuteThread
        permission. An executor id is reclaimed only by the user who registered it.
        """
        actions: list[Action] = []
        old = self.peers.get(peer)
        if old and old[0] == "client":
            return [Send(peer, p.Refuse("this connection is a client's; an executor needs its own"))]
        if self.authenticate is not None:
            reason = self.authenticate(m.user, m.password, EXECUTE_THREAD)
            if reason is not None:
                return [Send(peer, _login_refusal(reason))]
        claimed_id = m.executor_id
        ex = self.executors.get(m.executor_id or "") if m.executor_id else None
        if ex is None and old is not None:
            ex = self.executors.get(old[1])
        if ex is None and not claimed_id:
            # the same executor started again (gridcrawl run names them executor-1 ...): one row
            # per executor in the records and the dashboard, not one per process
            claimed_id = self._same_executor(m)
            ex = self.executors.get(claimed_id or "")
        owner = ex.user if ex is not None else self.executor_owners.get(claimed_id or "")
        bad = _bad_names(m.capabilities, "capabilities")
        if bad:
            return [Send(peer, p.Refuse(bad, final=True))]
        if owner is not None and owner != m.user:
            log.warning("user %s may not take over executor %s of user %s: given a new id", m.user,
                        (claimed_id or "")[:8], owner)
            ex, claimed_id = None, None
        elif owner is None:  # an id never given, or forgotten (keep_departed): never one a peer chose
            claimed_id = None
        if ex is not None and ex.connected and self._alive_elsewhere(ex.peer, ex.last_seen, peer, now):
            # alive on another connection: a second process (or a desktop sharing the account) may
            # not take its id, its attempts and its records over
            if m.executor_id == ex.executor_id:
                log.warning("executor %s (%s) is connected on another connection: a registration with its id "
                            "refused", ex.executor_id[:8], ex.name)
                return [Send(peer, p.Refuse(f"executor {ex.executor_id[:8]} ({ex.name}) is connected on another "
                                            f"connection, heard {now - ex.last_seen:.1f} s ago: one process per "
                                            "executor id; trying again shortly", retry=True))]
            ex, claimed_id = None, None  # the same name on a live connection: an executor of its own
        if ex is not None:
            # A re-registration means the executor started afresh: what it held is gone (not the
            # threads' fault, so it does not count towards max_attempts).
            actions += self._lose_executor(ex, now, "lost", record=False, count=False)
            if ex.peer is not None:
                self.peers.pop(ex.peer, None)
        quarantined_until = ex.quarantined_until if ex is not None else None  # a re-registration keeps it
        quarantines = ex.quarantines if ex is not None else 0
        executor_id = ex.executor_id if ex is not None else (claimed_id or self.new_id())
        if m.running is not None and (ex is not None or claimed_id):
            # what it does not run sends nothing more: those slots are free (its attempts this
            # manager took back just now, and a previous manager's: restore)
            self.queue.release_holds(executor_id, now, frozenset(m.running))
        workers = min(m.threads, self.settings.max_threads_per_executor)  # believe no more than the cap
        if workers < m.threads:  # its welcome says so: the executor runs (and logs) no more than these
            log.warning("executor %s claims %d worker threads: believed %d (max_threads_per_executor)",
                        executor_id[:8], m.threads, workers)
        capacity = workers + self.settings.prefetch
        ex = Executor(executor_id=executor_id, peer=peer, name=m.name, host=m.host, user=m.user,
                      workers=workers, capacity=capacity, dedicated=m.dedicated, last_seen=now, registered=now,
                      window=min(capacity, self.settings.start_window), quarantined_until=quarantined_until,
                      quarantines=quarantines, accepting=m.accepting)
        ex.info = {"os": m.os, "arch": m.arch, "cpu_max": m.cpu_max, "num_cpus": m.num_cpus, "mem_max": m.mem_max}
        ex.capabilities = frozenset(m.capabilities)
        ex.request_window = m.request_window
        ex.prior = frozenset(m.running or ())
        self.executors[executor_id] = self.connected[executor_id] = ex
        namesakes = self.connected_names.setdefault(m.name, set())
        namesakes.intersection_update(self.connected)
        other = self.connected.get(next(iter(namesakes))) if namesakes else None
        if other is not None:
            log.warning("executor %s registers as %s, the name of connected executor %s (%s@%s): the dashboard, "
                        "gridcrawl report and the executor table tell them apart only by id; give each executor "
                        "its own name (--name, or none for host:pid)", executor_id[:8], m.name,
                        other.executor_id[:8], other.user, other.host)
        namesakes.add(executor_id)
        self._departed.pop(executor_id, None)
        self._has_room(ex)
        self.executor_owners[executor_id] = m.user
        self.executor_names[(m.name, m.host, m.user)] = executor_id
        self.peers[peer] = ("executor", executor_id)
        log.info("executor %s (%s) registered: %s@%s, %s%s", executor_id[:8], m.name, m.user, m.host,
                 counted(workers, "thread"),
                 f", capabilities {' '.join(sorted(ex.capabilities))}" if ex.capabilities else "")
        actions.append(ev.ExecutorRegistered(executor_id, m.name, m.host, m.user, m.dedicated, workers, m.cpu_max,
                                             m.num_cpus, m.mem_max, m.os, m.arch, tuple(sorted(ex.capabilities)), now,
                                             m.accepting))
        actions.append(Send(peer, p.Welcome(executor_id, self.settings.heartbeat_interval,
                                            self.settings.heartbeat_liveness, workers)))
        actions += self.dispatch(now)
        return actions

    def on_heartbeat(self, peer: bytes, m: p.Heartbeat, now: float) -> list[Action]:
        """Any peer is alive (already noted); executors' figures are recorded (those of
        :data:`HEARTBEAT_FIGURES` only, within what they can be: :func:`_bounded_figures`)."""
        kind = self.peers.get(peer)
        if kind is None:
            return [Send(peer, p.Refuse("unknown peer: register or open an application again"))]
        if kind[0] == "executor" and m.figures:
            f = m.figures
            ex = self.executors.get(kind[1])
            if ex is None:
                return []
            ex.figures = _bounded_figures(f, ex)
            ex.last_heartbeat = now
            f = ex.figures
            figures = [float(f[name]) if name in f else None
                       for name in ("cpu_usage", "cpu_avail", "cpu_totalusage", "pages_per_second")]
            mem_usage = f.get("mem_usage")
            beat = ev.ExecutorHeartbeat(kind[1], now, *figures, mem_usage if isinstance(mem_usage, int) else None)
            if now - ex.recorded_heartbeat < HEARTBEAT_RECORD_EVERY:
                ex.unrecorded = beat  # written later, or when it leaves
                return []
            ex.recorded_heartbeat, ex.unrecorded = now, None
            return [beat]
        return []

    def on_availability(self, peer: bytes, m: p.Availability, now: float) -> list[Action]:
        """An idle-only executor's owner came back (or left): stop or resume assigning to it."""
        ex = self._executor_of(peer)
        if ex is None:
            return [Send(peer, p.Refuse("unknown executor: register again"))]
        ex.accepting = m.accepting
        self._has_room(ex)
        actions: list[Action] = [ev.ExecutorAvailability(ex.executor_id, m.accepting)]
        handed = 0
        for attempt_id in m.handed_back:  # assigned but never started: back to READY, not counted lost
            t = ex.running.get(attempt_id)
            if t is None or t.attempt_id != attempt_id or t.state != ThreadState.SCHEDULED:
                continue  # started meanwhile (its result will come) or already taken back
            del ex.running[attempt_id]
            self._has_room(ex)
            actions += self._take_back(t, now, "handed_back", count=False, fetching=False)
            handed += 1
        log.info("executor %s %s work%s", ex.name, "accepts" if m.accepting else "stops taking",
                 f"; {handed} thread{'' if handed == 1 else 's'} handed back" if handed else "")
        return actions + self.dispatch(now)

    def on_started(self, peer: bytes, m: p.Started, now: float) -> list[Action]:
        """Workers are running attempts: SCHEDULED → STARTED for each one still running here,
        started ``m.running[i]`` seconds before ``now`` (within the attempt's lifetime here;
        ``now`` when the message has no ``running``)."""
        ex = self._executor_of(peer)
        if ex is None:
            return [Send(peer, p.Refuse("unknown executor: register again"))]
        actions: list[Action] = []
        running = m.running if len(m.running) == len(m.attempt_ids) else None
        for i, attempt_id in enumerate(m.attempt_ids):
            t = ex.running.get(attempt_id)
            if t is None or t.state != ThreadState.SCHEDULED:
                continue
            self._move(t, ThreadState.STARTED)
            ex.progress = now
            t.time_started = now if running is None else max(t.time_assigned or now, now - running[i])
            actions.append(ev.ThreadStarted(t.internal_id, attempt_id, t.time_started))
        return actions

    def on_result(self, peer: bytes, m: p.Result, now: float) -> list[Action]:
        """An attempt finished (an executor before issue 23: one result per message): as
        :meth:`on_results` with one result."""
        return self.on_results(peer, p.Results([p.AttemptResult(m.attempt_id, m.page)]), now)

    def on_results(self, peer: bytes, m: p.Results, now: float) -> list[Action]:
        """Attempts finished: store each result, tell the applications, then refill the
        executor once (one dispatch for the whole batch, so its free slots travel in one
        ``assign``; with :attr:`defer_dispatch`, :meth:`dispatch_due` does it later, for every
        ``results`` message handled since).

        A result for an attempt that was taken back (executor declared dead, timeout, cancel) is
        fenced out: recorded as ``fenced`` and otherwise ignored. A result with ``ran`` (no
        ``started`` was sent for it) records the thread as started ``ran`` seconds before ``now``.
        A late result frees its host's slot (:meth:`_not_running`), so it too is followed by a
        dispatch.
        A result whose handling raises (a bug) is logged and its attempt taken back as ``error``
        (counted like a lost one), so that its thread runs again instead of staying assigned
        for ever, and the batch's other results are handled.
        """
        ex = self._executor_of(peer)
        actions: list[Action] = []
        finished = ex.finished if ex is not None else 0
        held = self.queue.held
        for r in m.results:
            t = ex.running.get(r.attempt_id) if ex is not None else None
            try:
                actions += self._finish(peer, ex, r, now)
            except Exception:  # a bug of ours: the thread runs again, the batch's other results count
                log.exception("the result of attempt %d failed to be handled; its thread is queued again",
                              r.attempt_id)
                if t is not None and t.attempt_id == r.attempt_id and t.state in (ThreadState.SCHEDULED,
                                                                                   ThreadState.STARTED):
                    ex.running.pop(r.attempt_id, None)
                    actions += self._take_back(t, now, "error", fetching=False)  # (its result came)
        freed = self.queue.held < held  # late results freed the host slots their attempts held
        if ex is None:  # one refusal per message, not per result
            actions.append(Send(peer, p.Refuse("unknown executor: register again")))
            if not freed:
                return actions
        elif ex.finished == finished and not freed:
            return actions
        if self.defer_dispatch:
            self._dispatch_due = True
            return actions
        return actions + self.dispatch(now)

    def _finish(self, peer: bytes, ex: Executor | None, r: p.AttemptResult, now: float) -> list[Action]:
        """One result of :meth:`on_results` (no dispatch)."""
        t = ex.running.get(r.attempt_id) if ex is not None else None
        if t is None or t.attempt_id != r.attempt_id or t.state not in (ThreadState.SCHEDULED, ThreadState.STARTED):
            return self._not_running(peer, ex, r, now)
        del ex.running[r.attempt_id]
        unreadable = getattr(r.page, "unreadable", None)
        if unreadable is None and ex.finished < CHECKED_IN_FULL and type(r.page) is p.RelayedPage:
            unreadable = r.page.check()
        if unreadable is not None:  # a broken or hostile executor's page: it runs again elsewhere
            self._has_room(ex)
            return [*self._take_back(t, now, "unreadable", fetching=False),
                    Strike(peer, f"executor {ex.name}: the page of {t.name} does not decode ({unreadable}); "
                                 "it runs again on another executor")]
        self._attempts.pop(r.attempt_id, None)
        self._has_room(ex)
        ex.finished += 1
        ex.progress = now
        ex.timeouts = 0
        if ex.window < ex.capacity:
            ex.window += 1  # slow start: one more unanswered attempt per result returned
        page = r.page
        no_answer = self._no_answer(page)
        self._answered_on(t.host, ex.executor_id, not no_answer)
        probe = False
        if no_answer:
            answered_before = self.queue.has_answered(t.host)
            sent = t.time_started if t.time_started is not None else (
                now - r.ran if r.ran is not None else t.time_assigned)
            probe = self.queue.unanswered(t, now, self.settings.retry_times + 1, sent)
            if answered_before and not self.queue.has_answered(t.host):
                log.warning("%s stopped answering (%d results in a row without an answer, the last: %r): one grid "
                            "thread at a time probes it, and after %d failed probes its queued threads fail "
                            "without a fetch", t.host, self.settings.retry_times + 1,
                            hide_passwords((page.error or page.error_kind or "")[:ERROR_QUOTED]),
                            self.settings.retry_times + 1)
        self.queue.release(t, now, status=page.status, retry_after=page.retry_after, crawl_delay=page.crawl_delay,
                           answered=not no_answer, requested=page.requested)
        if probe:  # the origin's probes are counted, not the thread's attempts
            failed = self.queue.probe_failed(t.url)
            down = failed > self.settings.retry_times
            wait = retry_wait(page, failed - 1, self.settings)  # None for a timeout: not retried
            pause = wait if wait is not None or down else self.settings.retry_backoff * 2 ** (failed - 1)
            if pause is not None:
                self.queue.pause(t.host, now, now + pause)
        else:
            wait = retry_wait(page, t.retries, self.settings)
        start_rode_along = t.time_started is None
        if start_rode_along:
            # no ``started`` came (it rode with the result): ``ran`` seconds before now, within
            # the attempt's lifetime at this manager (a finite ran >= 0 is checked at the door)
            t.time_started = now if r.ran is None else max(t.time_assigned or now, now - r.ran)
        if wait is not None:
            return self._retry(t, r.attempt_id, now, wait, t.time_started if start_rode_along else None)
        self._move(t, ThreadState.FINISHED)
        t.time_finished = now
        t.result = page
        self._remember(t, ex.name)
        actions = [ev.ThreadFinished(t.internal_id, r.attempt_id, t.time_started, now, page.error_kind), *self._deliver(t)]
        if probe and down:
            actions += self._origin_down(t.url, page, failed, now)
        return actions

    @staticmethod
    def _no_answer(page: p.PageResult) -> bool:
        """Whether ``page`` found no answer from its host: robots.txt unreachable; no connection
        at all; or, as under ``--ignore-robots`` where no robots.txt is asked, a timeout before
        any status line — not one the executor cancelled, which says nothing of the host. Such a
        result of a host that has not answered (yet, or any more) is a failed probe
        (:meth:`ReadyQueue.unanswered <gridcrawl.manager.queue.ReadyQueue.unanswered>`)."""
        no_status = page.status is None and (
            page.error_kind == p.ErrorKind.CONNECTION
            or (page.error_kind == p.ErrorKind.TIMEOUT and page.error != "cancelled"))
        return page.error_kind == p.ErrorKind.ROBOTS_UNREACHABLE or no_status

    def _answered_on(self, host: str, executor_id: str, answered: bool) -> None:
        """Note whether executor ``executor_id`` had an answer from ``host`` (:attr:`no_answer_on`)."""
        avoid = self.no_answer_on.get(host)
        if answered:
            if avoid is not None:
                avoid.discard(executor_id)
                if not avoid:
                    del self.no_answer_on[host]
            return
        if avoid is None:
            avoid = self.no_answer_on[host] = set()
            if len(self.no_answer_on) > ANSWERED_HOSTS:
                self.no_answer_on.popitem(last=False)
        avoid.add(executor_id)

    def _avoided(self, t: GridThread) -> set[str]:
        """The executors ``t`` goes to only when no other can run it: those it was taken back
        from, and those on which a thread of its host found no answer (:attr:`no_answer_on`)."""
        avoid = self.no_answer_on.get(t.host) if self.no_answer_on else None
        if avoid is None:
            return t.tried or set()
        return avoid | t.tried if t.tried else avoid

    def _origin_down(self, url: str, page: p.PageResult, probes: int, now: float) -> list[Action]:
        """``url``'s origin failed its last probe (``page``, the ``probes``-th): its queued
        threads fail together, without a fetch, and so do its new ones for
        :data:`~gridcrawl.manager.queue.HOST_DOWN_SECONDS` (see :mod:`gridcrawl.manager.queue`)."""
        origin = url_origin(url)
        last = (page.error or page.error_kind)[:ERROR_QUOTED]  # an executor's text: bounded
        error = f"not fetched: {origin} did not answer {counted(probes, 'probe')}; the last: {last}"
        self.queue.mark_down(url, now + HOST_DOWN_SECONDS, page.error_kind, error)
        taken = self.queue.take_origin(url)
        log.warning("%s did not answer %s (%r): %s of it %s without a fetch, and "
                    "its new ones for %.0f s", hide_passwords(origin), counted(probes, "probe"), hide_passwords(last),
                    counted(len(taken), "queued grid thread"), "fails" if len(taken) == 1 else "fail",
                    HOST_DOWN_SECONDS)
        actions: list[Action] = []
        for t in taken:
            actions += self._not_fetched(t, page.error_kind, error, now)
        return actions

    def _not_fetched(self, t: GridThread, error_kind: str, error: str, now: float) -> list[Action]:
        """READY ``t`` finishes without an attempt: its origin is down."""
        self._move(t, ThreadState.FINISHED)
        t.time_finished = now
        t.result = p.PageResult(url=t.url, error_kind=error_kind, error=error, requested=False)
        self._remember(t, None)
        return [ev.ThreadNotFetched(t.internal_id, now, error_kind), *self._deliver(t)]

    def _not_running(self, peer: bytes, ex: Executor | None, r: p.AttemptResult, now: float) -> list[Action]:
        """Result ``r`` for an attempt ``peer`` (executor ``ex``, None if unregistered) does not hold.

        A late result of an attempt taken back from this very executor (same routing id or
        executor id; or, for attempts of the previous manager, any peer quoting the random id) is
        fenced: recorded as ``fenced``, otherwise ignored — but its fetch is over, so the host's
        slot it still held is freed, with its status, Retry-After and Crawl-delay applied to the
        host as any result's (:meth:`ReadyQueue.release_hold
        <gridcrawl.manager.queue.ReadyQueue.release_hold>`). One of the attempts ``ex`` said it
        was running when it registered (:attr:`Executor.prior`) that this manager never knew (a
        manager on another database) is dropped quietly. Anything else is a forgery or garbage:
        dropped without touching any record, and a :class:`Strike` against the peer.
        """
        attempt_id = r.attempt_id
        late = self.late.get(attempt_id)
        if late is not None and (late[1] == peer or late[1] is None
                                 or (ex is not None and ex.executor_id == late[0])):
            del self.late[attempt_id]
            page = r.page
            self.queue.release_hold(attempt_id, now, status=page.status, retry_after=page.retry_after,
                                    crawl_delay=page.crawl_delay, answered=not self._no_answer(page),
                                    requested=page.requested)
            self.fenced += 1
            log.info("fenced out a late result of attempt %d from executor %s", attempt_id,
                     ex.name if ex is not None else late[0][:8])
            return [ev.AttemptEnded(attempt_id, "fenced", now)]
        if ex is not None and attempt_id in ex.prior:  # said at registration: honest, of a manager before
            log.info("dropped a late result of attempt %d from executor %s: not one this manager knows",
                     attempt_id, ex.name)
            return []
        return [Strike(peer, f"result for attempt {attempt_id}, not one of its own")]

    @staticmethod
    def _retryable(page: p.PageResult) -> bool:
        """Connection errors, 5xx, 429, a robots.txt that could not be read and a browser that
        failed (``render``: died mid-page, or no browser on that executor) are retried (4xx are
        not: the page is what it is; nor is ``bad_response``, an answer that is no usable HTTP)."""
        if page.error_kind in _RETRIED:
            return True
        return (page.error_kind == p.ErrorKind.HTTP_STATUS and page.status is not None
                and (page.status >= 500 or page.status == 429))

    def _retry(self, t: GridThread, attempt_id: int, now: float, delay: float,
               started: float | None = None) -> list[Action]:
        """Queue ``t`` again ``delay`` seconds from ``now`` (:func:`retry_wait`), as a new attempt.
        ``started``: when the ended attempt began, if no ``started`` message recorded it."""
        t.retries += 1
        self._move(t, ThreadState.READY)
        t.executor_id = None
        t.time_started = None
        self._enqueue(t, not_before=now + delay)
        log.info("%s (%s): retry %d in %.1f s", t.name, hide_passwords(t.url), t.retries, delay, extra=_thread_log(t))
        return [ev.AttemptEnded(attempt_id, "retry", now, started), ev.ThreadRequeued(t.internal_id)]

    # -------------------------------------------------------------------------- applications

    def on_open(self, peer: bytes, m: p.OpenApplication, now: float) -> list[Action]:
        """A client creates an application, or reattaches to one after a restart.

        Refused unless ``authenticate`` grants ``m.user`` ManageOwnApp, and, to reattach to
        another user's application, ManageAllApps. Submit, ack and close then act only on the
        application opened on the same connection, so a client sees only its own applications.
        """
        old = self.peers.get(peer)
        if old and old[0] == "executor":
            return [Send(peer, p.Refuse("this connection is an executor's"))]
        if self.authenticate is not None:
            reason = self.authenticate(m.user, m.password, MANAGE_OWN_APP)
            if reason is not None:
                return [Send(peer, _login_refusal(reason))]
        try:
            m.instruction, size = _read_instruction(m.instruction, MAX_APPLICATION_INSTRUCTION, "open.instruction")
        except p.ProtocolError as exc:  # (not a map, or nested too deeply)
            return [Send(peer, p.Refuse(str(exc), final=True))]
        if size > MAX_APPLICATION_INSTRUCTION:
            return [Send(peer, p.Refuse(f"the application's instruction would hold about {size} bytes at the "
                                        f"manager, over {MAX_APPLICATION_INSTRUCTION}", final=True))]
        actions: list[Action] = []
        app = self.applications.get(m.application_id) if m.application_id else None
        if app is not None and app.user != m.user and self.authenticate is not None:
            if self.authenticate(m.user, m.password, MANAGE_ALL_APPS) is not None:
                log.warning("user %s refused application %s of user %s", m.user, app.application_id[:8], app.user)
                return [Send(peer, p.Refuse(f"application {app.application_id} belongs to another user: a crawl "
                                            "database goes on with the user who started its crawl, or an administrator "
                                            "(ManageAllApps); give this crawl a database of its own (--db)"))]
        if app is not None and app.state == ApplicationState.STOPPED and app.aborted:
            # its threads' rows hold the ids its client submits again (unique per application):
            # the crawl goes on as a new application, as after a restart of the manager
            log.info("application %s stopped with grid threads not done (cancelled, or completed with threads a "
                     "failover restored, whose results its client had stored): its client's crawl goes on as a new "
                     "application", app.application_id[:8])
            app = None
        resumed = app is not None
        if app is not None and (held := self._held_by_another(app, peer, m.client, now)):
            log.warning("application %s: a second client refused (%s)", app.application_id[:8], held)
            return [Send(peer, p.Refuse(held))]
        if app is None or app.state == ApplicationState.STOPPED:
            made_room, too_many = self._room_for_another(app.user if app else m.user, now)
            if too_many:
                return [Send(peer, p.Refuse(too_many))]
            actions += made_room
        if old is not None and old[1] != (app.application_id if app else None):
            self._detach(self.applications.get(old[1]))  # this connection drove another application before
        if app is None:
            app_id = self.new_id()  # never a client-chosen id: it could name a stopped application of another user
            app = Application(app_id, m.name, m.user, peer, now, last_seen=now, instruction=m.instruction,
                              client=m.client)
            self.applications[app_id] = app
            self._count_open(app)
            actions.append(ev.ApplicationCreated(app_id, m.name, m.user, int(app.state), now))
        else:
            if app.peer != peer:
                self._detach(app)
            app.peer, app.client = peer, m.client
            app.last_seen = now
            # a resumed crawl may have widened its scope; a hello without one (a large instruction
            # comes with the first submit: protocol.MAX_HELLO_INSTRUCTION) keeps the one it has
            if m.instruction is not None and m.instruction != app.instruction:
                app.instruction = m.instruction
            if app.state == ApplicationState.STOPPED:
                self._stopped.pop(app.application_id, None)
                self._count_open(app)
                app.state = ApplicationState.READY
                actions.append(ev.ApplicationChanged(app.application_id, int(app.state), reopened=True, name=app.name,
                                                     user=app.user, time_created=app.time_created))
        # priorities are the operators': another user's threads go no higher than the default,
        # or one user could put a crawl before everyone else's (an open grid trusts everyone)
        app.max_priority = None if self.authenticate is None or self.authenticate(
            m.user, m.password, MANAGE_ALL_APPS, quiet=True) is None else p.DEFAULT_PRIORITY
        self.peers[peer] = ("client", app.application_id)
        app.client_user = m.user
        log.info("application %s %s by %s (%s)", app.application_id[:8], "reattached" if resumed else "created",
                 m.user, m.name)
        actions.append(Send(peer, p.ApplicationOpened(app.application_id, resumed,
                                                      self.settings.heartbeat_interval,
                                                      self.settings.heartbeat_liveness,
                                                      self.settings.max_threads_per_application)))
        if app.paused:  # a client reattaching to a paused application is told, as one attached when it was paused
            actions.append(Send(peer, p.Controlled(app.application_id, "pause", "paused")))
        for t in app.threads.values():
            if t.state == ThreadState.FINISHED and t.delivered_to != peer:  # (an open in a loop: no copies)
                actions += self._deliver(t)
        return actions

    def _count_open(self, app: Application) -> None:
        """Count ``app`` (created, reopened or restored) among its user's open applications
        (:meth:`_room_for_another`; :meth:`_stop_application` uncounts it)."""
        self._open_by_user.setdefault(app.user, {})[app.application_id] = None

    def _room_for_another(self, user: str, now: float) -> tuple[list[Action], str | None]:
        """Make room for one more application of ``user``: ``(actions, None)``, or ``([], why
        not)``. A user may have ``settings.max_applications_per_user`` applications open
        (created or reopened, and not completed or cancelled; detached ones count): each may
        hold ``max_threads_per_application`` grid threads and ``max_unacked_bytes`` of results,
        so the bound caps what one user's crawls hold in the manager's memory. At the bound,
        the one of them without a client for longest, if it has been silent past the peer
        liveness (``peer_timeout``), is cancelled to make room, as ``detached_timeout`` would
        cancel it later (its crawl database keeps its frontier; a client that comes back
        reopens it and submits again what it had in flight); when each has a client (or was
        heard within the liveness), the new one is refused, naming the oldest."""
        held = self._open_by_user.get(user, {})
        cap = self.settings.max_applications_per_user
        if len(held) < cap:
            return [], None
        apps = [self.applications[application_id] for application_id in held]
        silent = [app for app in apps if app.peer is None and now - app.last_seen > self.settings.peer_timeout]
        if silent:
            victim = min(silent, key=lambda app: app.last_seen)
            log.warning("application %s of user %s: no client for %.0f s, cancelled to make room for a new one "
                        "(%d open, max_applications_per_user); a client that comes back reopens it",
                        victim.application_id[:8], user, now - victim.last_seen, len(held))
            return self._stop_application(victim, now, cancel=True), None
        oldest = [f"{app.application_id[:8]} ({app.name}, {'detached' if app.peer is None else 'with a client'}, "
                  f"opened {now - app.time_created:.0f} s ago)" for app in apps[:3]]
        log.warning("user %s refused another application: %d open, max_applications_per_user is %d, none "
                    "without a client past the liveness", user, len(held), cap)
        return [], (f"user {user} has {len(held)} application{'' if len(held) == 1 else 's'} open at the manager, its max_applications_per_user "
                    f"({cap}), none without a client past the liveness: let one end, or cancel one no longer "
                    f"wanted (gridcrawl-client --manager {self.address} cancel ID; the oldest: {', '.join(oldest)})")

    def _alive_elsewhere(self, holder: bytes | None, last_seen: float, peer: bytes, now: float) -> bool:
        """Whether connection ``holder`` (an application's client, an executor), not ``peer``,
        is alive: it still exists (:attr:`peer_present`) and was heard within the liveness."""
        return (holder is not None and holder != peer and now - last_seen <= self.settings.peer_timeout
                and self.peer_present(holder))

    def _held_by_another(self, app: Application, peer: bytes, client: str, now: float) -> str | None:
        """Why a client (``client`` token, on connection ``peer``) may not reattach to ``app``
        now, or None. Another client holds it while that client is alive: its connection still
        exists (:attr:`peer_present`) and it was heard within the liveness. A reconnect of the
        same client (same token), and any client once the holder's process is gone (its
        connection closed: ``kill -9`` and restart) or silent past its liveness, take it over. A
        client without a token (an older release) counts as another client."""
        if client == app.client or not self._alive_elsewhere(app.peer, app.last_seen, peer, now):
            return None
        silent = now - app.last_seen
        return (f"application {app.application_id[:8]} is in use by another client, heard from {silent:.1f} s "
                f"ago: one client crawls a crawl database at a time (wait for it to end, or stop it)")

    def on_submit(self, peer: bytes, m: p.Submit, now: float) -> list[Action]:
        """Queue grid threads. A thread id the application already has is not queued twice (a
        restarted client resubmits what it had in flight); if its result is waiting, it is sent,
        unless it was sent on this connection already (a client resubmitting a finished thread
        in a loop, never reading, made the manager queue a copy of the page each time: 5 GB).
        A new application instruction (``m.instruction``) replaces the old one first."""
        app = self._application_of(peer, m.application_id)
        if app is None:
            return [Send(peer, p.Refuse(f"application {m.application_id} is not open on this connection"))]
        actions: list[Action] = []
        for spec in m.threads:
            bad = _bad_names(spec.needs, f"thread {spec.thread_id} needs")
            if bad:
                return [Send(peer, p.Refuse(bad, final=True))]
        cap = self.settings.max_threads_per_application
        new = sum(1 for spec in m.threads if spec.thread_id not in app.threads)
        if len(app.threads) + new > cap:
            log.warning("application %s refused %d more grid threads: it has %d, max_threads_per_application is %d",
                        app.application_id[:8], new, len(app.threads), cap)
            return [Send(peer, p.Refuse(f"application {app.application_id[:8]} has {len(app.threads)} grid thread{'' if len(app.threads) == 1 else 's'} "
                                        f"at the manager; {new} more would pass its max_threads_per_application "
                                        f"({cap}): submit fewer at once (gridcrawl-client --max-in-flight)",
                                        final=True))]
        try:
            too_big, sizes = _instruction_sizes(app, m)
        except p.ProtocolError as exc:  # (an instruction that is no map, or nested too deeply)
            return [Send(peer, p.Refuse(str(exc), final=True))]
        if too_big:
            return [Send(peer, p.Refuse(too_big, final=True))]
        if m.instruction is not None and m.instruction != app.instruction:
            app.instruction = m.instruction  # a new object: each executor is sent it with its next job
        for spec in m.threads:
            priority = spec.priority
            if app.max_priority is not None and priority > app.max_priority:
                if not app.priority_capped:
                    app.priority_capped = True
                    log.warning("application %s of user %s asked for priority %d: only users with %s go above %d, "
                                "so its threads run at %d", app.application_id[:8], app.user, priority,
                                MANAGE_ALL_APPS, app.max_priority, app.max_priority)
                priority = app.max_priority
            existing = app.threads.get(spec.thread_id)
            if existing is not None:
                if existing.state == ThreadState.FINISHED and existing.delivered_to != app.peer:
                    actions += self._deliver(existing)  # once per connection: a resubmit loop gets no copies
                elif existing.held:  # restored after a restart: now it has its instruction again
                    existing.held = False
                    existing.instruction, existing.priority = spec.instruction, priority
                    existing.instruction_bytes = sizes.get(spec.thread_id, 0)
                    app.instruction_bytes += existing.instruction_bytes
                    existing.needs = tuple(sorted(set(spec.needs)))
                    self._enqueue(existing)
                continue
            t = GridThread(self._next_internal, app.application_id, spec.thread_id, spec.url, spec.depth,
                           priority, spec.instruction, now, host=url_host(spec.url),
                           needs=tuple(sorted(set(spec.needs))), instruction_bytes=sizes.get(spec.thread_id, 0))
            self._next_internal += 1
            app.threads[spec.thread_id] = t
            app.instruction_bytes += t.instruction_bytes
            if app.first_submitted is None:
                app.first_submitted = now
            actions.append(ev.ThreadSubmitted(t.internal_id, t.application_id, t.thread_id, t.url, t.host, t.depth,
                                              t.priority, t.needs, now))
            down = self.queue.down(t.url, now)
            if down is not None:
                actions += self._not_fetched(t, down[0], down[1], now)
            else:
                self._enqueue(t)
        actions += self.dispatch(now)
        return actions

    def on_ack(self, peer: bytes, m: p.Ack, now: float) -> list[Action]:
        """The application stored these results: FINISHED → DEAD, and the manager forgets them."""
        app = self._application_of(peer, m.application_id)
        if app is None:
            return [Send(peer, p.Refuse(f"application {m.application_id} is not open on this connection"))]
        actions: list[Action] = []
        for thread_id in m.thread_ids:
            t = app.threads.get(thread_id)
            if t is None or t.state != ThreadState.FINISHED:
                continue
            self._move(t, ThreadState.DEAD)
            del app.threads[thread_id]
            app.unacked_bytes -= result_bytes(t.result)
            app.instruction_bytes -= t.instruction_bytes
            actions.append(ev.ThreadDead(t.internal_id))
        if app.throttled and app.unacked_bytes <= self.settings.max_unacked_bytes // 2:
            app.throttled = False
            log.info("application %s: its client acknowledged its results; its threads are dispatched again",
                     app.application_id[:8])
            self._requeue(app)
            actions += self.dispatch(now)
        return actions

    def on_close(self, peer: bytes, m: p.CloseApplication, now: float) -> list[Action]:
        """The application is complete (or cancelled): abort what is left and stop it."""
        app = self._application_of(peer, m.application_id)
        if app is None:
            return [Send(peer, p.Refuse(f"application {m.application_id} is not open on this connection"))]
        return self._stop_application(app, now, m.cancel)

    def _stop_application(self, app: Application, now: float, cancel: bool,
                          operator: str | None = None) -> list[Action]:
        """Abort what is left of ``app`` and mark it STOPPED (completed, or cancelled; by
        ``operator``, a user name, when an operator cancelled it: one WARNING line says so)."""
        actions = self._abort_application(app, now)
        app.state = ApplicationState.STOPPED
        app.paused = False
        app.time_completed = now
        held = self._open_by_user.get(app.user, {})
        held.pop(app.application_id, None)
        if not held:
            self._open_by_user.pop(app.user, None)
        self.queue.forget_application(app.application_id)
        app.instruction = None
        for ex in self.connected.values():  # (one that registers again starts with none)
            ex.instructed.pop(app.application_id, None)
        actions.append(ev.ApplicationStopped(app.application_id, now))
        self._stopped[app.application_id] = None
        self._stopped.move_to_end(app.application_id)
        self._forget_departed()
        if operator is not None:
            log.warning("application %s cancelled by operator %s", app.application_id[:8], operator)
        else:
            log.info("application %s %s", app.application_id[:8], "cancelled" if cancel else "completed")
        return actions

    # -------------------------------------------------------------------------- operator control

    def on_control(self, peer: bytes, m: p.Control, now: float) -> list[Action]:
        """An operator pauses, resumes or cancels an application (``gridcrawl-client pause ...``).

        With ``authenticate`` set, the operator logs in with ManageOwnApp (one password check)
        and needs ManageAllApps too for anyone else's application (asked only once the login
        succeeded: answered from the store's cache of verified passwords). Answers
        :class:`~gridcrawl.protocol.Controlled`, or :class:`~gridcrawl.protocol.Refuse` naming why.
        """
        try:
            owner = None
            if self.authenticate is not None:
                # the login first, one password check (a wrong password was checked, and logged,
                # twice): an answer must not tell a stranger which ids exist
                reason = self.authenticate(m.user, m.password, MANAGE_OWN_APP)
                if reason is not None:
                    return [Send(peer, _login_refusal(reason))]
                if self.authenticate(m.user, m.password, MANAGE_ALL_APPS, quiet=True) is not None:
                    # (the password is right: this check is the cache's; a question, not a refusal:
                    # not logged, where a user pausing their own crawl logged a WARNING that they
                    # were "refused: no ManageAllApps permission") a user who manages only
                    # their own applications learns nothing of another's: the answer of an id
                    # that does not exist
                    owner = m.user
            actions, result = self.control(m.application_id, m.action, now, user=m.user, owner=owner)
        except ControlError as exc:
            return [Send(peer, p.Refuse(str(exc)))]
        app = self.applications[result["application_id"]]
        if app.peer != peer:
            actions.append(Send(peer, p.Controlled(app.application_id, m.action, result["state"])))
        return actions

    def find_application(self, application_id: str, *, owner: str | None = None) -> Application:
        """The application whose id is ``application_id`` or starts with it (at least 4
        characters); with ``owner``, only that user's applications are looked at, so another's
        is answered as one that does not exist (a prefix that is also another's is not
        ambiguous). Raises :class:`ControlError` if there is none or more than one."""
        app = self.applications.get(application_id)
        if app is not None and (owner is None or app.user == owner):
            return app
        if len(application_id) >= 4:
            found = [a for key, a in self.applications.items()
                     if key.startswith(application_id) and (owner is None or a.user == owner)]
            if len(found) == 1:
                return found[0]
            if len(found) > 1:
                raise ControlError(f"application id {application_id!r} is ambiguous ({len(found)} match)")
        raise ControlError(f"no application {application_id!r} at this manager"
                           + (" (give 4 or more characters of its id)" if len(application_id) < 4 else ""))

    def control(self, application_id: str, action: str, now: float, *, user: str | None = None,
                owner: str | None = None) -> tuple[list[Action], dict]:
        """Pause, resume or cancel an application (operators: client command, dashboard API).

        ``pause``: its READY threads leave the queue and no new thread is dispatched; threads
        already on executors finish and are delivered. ``resume``: they are queued again.
        ``cancel``: what ``close`` with ``cancel`` does — every live thread is aborted (executors
        get ``cancel``) and the application is STOPPED. The application's client is told with
        :class:`~gridcrawl.protocol.Controlled`. ``owner``: act only on an application of this
        user (one who manages only their own), found among that user's alone (see
        :meth:`find_application`). Returns ``(actions, {"application_id", "action", "state"})``;
        raises :class:`ControlError` for an unknown application or action, or an application that
        is already stopped.
        """
        if action not in CONTROL_ACTIONS:
            raise ControlError(f"unknown action {action!r} (use pause, resume or cancel)")
        app = self.find_application(application_id, owner=owner)
        if app.state == ApplicationState.STOPPED:
            raise ControlError(f"application {app.application_id[:8]} is stopped already")
        actions: list[Action] = []
        if action == "pause" and not app.paused:
            app.paused = True
            self._unqueue(app)
            actions.append(ev.ApplicationChanged(app.application_id, int(ApplicationState.PAUSED)))
        elif action == "resume" and app.paused:
            app.paused = False
            self._requeue(app)
            actions.append(ev.ApplicationChanged(app.application_id, int(app.state)))
            actions += self.dispatch(now)
        elif action == "cancel":
            actions += self._stop_application(app, now, True, operator=user or "?")
        state = self.application_state(app)
        if action != "cancel":  # (a cancel's line is _stop_application's)
            log.warning("application %s %s by operator %s", app.application_id[:8],
                        {"pause": "paused", "resume": "resumed"}[action], user or "?")
        if app.peer is not None:
            actions.append(Send(app.peer, p.Controlled(app.application_id, action, state)))
        return actions, {"application_id": app.application_id, "action": action, "state": state}

    @staticmethod
    def application_state(app: Application) -> str:
        """``app``'s state as operators see it: ``running``, ``paused`` or ``stopped``."""
        if app.state == ApplicationState.STOPPED:
            return "stopped"
        return "paused" if app.paused else "running"

    def revoke(self, now: float, allowed: Callable[[str, str], bool],
               keys_revoked: dict[bytes, str] | None = None) -> list[Action]:
        """Cut the peers whose login or key no longer holds (a login is checked only at hello:
        a user removed with ``gridcrawl-manager users remove``, or a key deleted from the
        allow-list directory, kept its executors and crawls connected until they dropped).

        ``allowed(user, permission) -> bool``: whether ``user`` may still use ``permission``
        (asked once for each pair of :meth:`logins`, before anything changes, so an exception it
        raises changes nothing; the server answers from what a thread of its own read with
        :meth:`gridcrawl.auth.UserStore.allows`, so that a database that does not answer never
        holds the loop up). ``keys_revoked``: peer ->
        name of its CURVE key, for the peers whose key left the allow-list. The applications of a
        user no longer allowed ManageOwnApp are cancelled (their threads aborted, as by an
        operator's cancel); an executor whose user lost ExecuteThread, or a peer whose key was
        revoked, is forgotten as if it said bye (an executor's threads go back to READY, not
        counted as lost; a client's application waits for a client). Each cut peer gets a final
        ``refuse`` saying why: it stops (exit status 2) rather than log in again.
        """
        keys_revoked = keys_revoked or {}
        refused = {pair for pair in self.logins() if not allowed(*pair)}
        actions: list[Action] = []

        def cut(peer: bytes, reason: str) -> None:
            actions.append(Send(peer, p.Refuse(reason, final=True)))
            actions.extend(self.on_bye(peer, p.Bye(reason), now))

        for user, _ in sorted(pair for pair in refused if pair[1] == MANAGE_OWN_APP):
            for application_id in list(self._open_by_user.get(user, ())):
                app = self.applications[application_id]
                if self._driven_by_administrator(app) and (app.client_user, MANAGE_ALL_APPS) not in refused:
                    continue  # an administrator reattached to it: the crawl is theirs now
                log.warning("user %s was removed or lost the %s permission: application %s cancelled%s", user,
                            MANAGE_OWN_APP, application_id[:8], ", its client cut off" if app.peer else "")
                actions.extend(self._stop_application(app, now, True))
                if app.peer is not None:
                    cut(app.peer, f"user {user!r} may no longer crawl on this manager (removed, or without the "
                                  f"{MANAGE_OWN_APP} permission): application {application_id[:8]} is cancelled; "
                                  "the crawl database keeps what was crawled, and the same command resumes it "
                                  "once an administrator lets the user in again (gridcrawl-manager users add)")
        for app in [app for app in self._administered() if (app.client_user, MANAGE_ALL_APPS) in refused]:
            log.warning("user %s was removed or lost the %s permission: the client of application %s (of user %s) "
                        "cut off", app.client_user, MANAGE_ALL_APPS, app.application_id[:8], app.user)
            cut(app.peer, f"user {app.client_user!r} may no longer drive another user's application on this manager "
                          f"(removed, or without the {MANAGE_ALL_APPS} permission): application "
                          f"{app.application_id[:8]} of user {app.user!r} waits for a client")
        for peer, (kind, ident) in list(self.peers.items()):
            if kind == "executor":
                ex = self.executors.get(ident)
                if ex is not None and (ex.user, EXECUTE_THREAD) in refused:
                    log.warning("user %s was removed or lost the %s permission: executor %s (%s) cut off", ex.user,
                                EXECUTE_THREAD, ident[:8], ex.name)
                    cut(peer, f"user {ex.user!r} may no longer run grid threads on this manager (removed, or "
                              f"without the {EXECUTE_THREAD} permission): log in as a user of the Executors group "
                              "(--user NAME)")
                    continue
            key = keys_revoked.get(peer)
            if key is not None:
                name = self.executors[ident].name if kind == "executor" and ident in self.executors else ident[:8]
                log.warning("CURVE key %s left the allow-list directory: %s %s cut off", key,
                            "executor" if kind == "executor" else "the client of application", name)
                cut(peer, f"this program's CURVE key {key!r} was removed from the manager's allow-list directory "
                          f"(--curve-allow): the manager's operator admits it again by putting {key}.key back there")
        return actions

    @staticmethod
    def _driven_by_administrator(app: Application) -> bool:
        """Whether ``app``'s client is connected and logged in as another user than its owner
        (one with ManageAllApps when it reattached)."""
        return app.peer is not None and app.client_user != app.user

    def _administered(self) -> list[Application]:
        """The applications whose connected client logged in as another user than their owner."""
        apps = (self.applications.get(ident) for kind, ident in self.peers.values() if kind == "client")
        return [app for app in apps if app is not None and self._driven_by_administrator(app)]

    def logins(self) -> set[tuple[str, str]]:
        """The ``(user, permission)`` pairs the manager's live peers and applications rest on:
        ManageOwnApp for each user with an application open (detached ones too), ManageAllApps
        for each user whose client drives another user's application, ExecuteThread for each
        connected executor's user (:meth:`revoke`)."""
        pairs = {(user, MANAGE_OWN_APP) for user in self._open_by_user}
        pairs.update((app.client_user, MANAGE_ALL_APPS) for app in self._administered())
        pairs.update((self.executors[ident].user, EXECUTE_THREAD) for kind, ident in self.peers.values()
                     if kind == "executor" and ident in self.executors)
        return pairs

    def _unqueue(self, app: Application) -> None:
        """Take ``app``'s READY threads out of the queue (paused, or throttled)."""
        for t in app.threads.values():
            if t.state == ThreadState.READY:
                self.queue.discard(t)

    def _requeue(self, app: Application) -> None:
        """Queue again the READY threads :meth:`_unqueue` took out, unless ``app`` is still
        paused or throttled."""
        if app.paused or app.throttled:
            return
        for t in app.threads.values():
            if t.state == ThreadState.READY and t.queue_seq is None and not t.held:
                self.queue.push(t)

    def _enqueue(self, t: GridThread, not_before: float = 0.0) -> None:
        """Queue READY ``t`` unless its application is paused or throttled (then it waits for
        ``resume``, or for its client's acknowledgements)."""
        app = self.applications.get(t.application_id)
        if app is not None and (app.paused or app.throttled):
            return
        if not_before:
            self.queue.push(t, not_before=not_before)
        else:
            self.queue.push(t)

    def _remember(self, t: GridThread, executor_name: str | None) -> None:
        """Count a finished thread for its application and keep it in :attr:`recent`."""
        app = self.applications.get(t.application_id)
        page = t.result
        if app is not None:
            app.done += 1
            app.errors += 1 if t.failed or page is None or (page.error_kind and page.error_kind not in p.DISALLOWED) else 0
            app.last_finished = t.time_finished
            app.unacked_bytes += result_bytes(page)
            if app.unacked_bytes >= self.settings.max_unacked_bytes and not app.throttled:
                app.throttled = True
                app.throttles += 1
                self._unqueue(app)
                log.log(logging.WARNING if app.throttles == 1 else logging.INFO,
                        "application %s: its client has not acknowledged %s (about %.1f MB, "
                        "max_unacked_bytes); its threads wait until it acknowledges half",
                        app.application_id[:8],
                        counted(sum(1 for x in app.threads.values() if x.state == ThreadState.FINISHED), "result"),
                        app.unacked_bytes / 1e6)
        self.recent.append((t, executor_name))

    def on_bye(self, peer: bytes, m: p.Bye, now: float) -> list[Action]:
        """A peer leaves: an executor's threads go back to READY at once; a client detaches."""
        kind = self.peers.pop(peer, None)
        if kind is None:
            return []
        if kind[0] == "executor":
            ex = self.executors.get(kind[1])
            if ex is not None:
                return self._lose_executor(ex, now, "handed_back", count=False)
        else:
            app = self.applications.get(kind[1])
            if app is not None and app.peer == peer:
                app.peer = None
                if app.state != ApplicationState.STOPPED:
                    log.info("application %s: its client left (%s), detached (its threads go on)",
                             app.application_id[:8], m.reason or "no reason given")
        return []

    def _detach(self, app: Application | None) -> None:
        """Let ``app``'s client connection go: the application keeps its threads and waits for a
        client to reattach. The connection's own entry is dropped only while it still names
        ``app``, so that a connection that went on to open another application keeps that one."""
        if app is None or app.peer is None:
            return
        if self.peers.get(app.peer) == ("client", app.application_id):
            del self.peers[app.peer]
        app.peer = None

    # -------------------------------------------------------------------------- dispatch

    def _has_room(self, ex: Executor) -> None:
        """``ex`` may have a free slot now (a result or a take-back emptied one, its window grew,
        it registered, accepts work again, left quarantine): dispatch looks at it again."""
        self._room[ex.executor_id] = ex

    def dispatch_due(self, now: float) -> list[Action]:
        """The dispatch that ``results`` messages handled with :attr:`defer_dispatch` on left
        due (none: no actions): one for all of them, so the executors they freed are refilled
        together, at most one ``assign`` each."""
        if not self._dispatch_due:
            return []
        self._dispatch_due = False
        return self.dispatch(now)

    def dispatch(self, now: float) -> list[Action]:
        """Assign READY threads that politeness lets start to executors with free slots.
        Cost: the executors that may have room (:meth:`_has_room`), not all of them. The jobs
        one executor gets travel in one ``assign`` (1,000 desktops: one message per refill, not
        one per thread merged later)."""
        if not len(self.queue):
            return []
        jobs: dict[Executor, list[p.Job]] = {}
        events: list[Action] = []
        if self.settings.dispatch == "host-hash":
            return self._dispatch_by_host(now, jobs, events)
        room = self._room
        for executor_id in [executor_id for executor_id, ex in room.items() if ex.free < ex.refill]:
            del room[executor_id]  # full, gone, not accepting, or busy enough: back when it has room again
        if not room:
            return []
        self._round_robin += 1
        needs_any = self.queue.needs_any()  # some queued thread needs a capability (most grids: none)
        # the executors with room in rank order (most idle workers, then most free slots), ties in
        # turn (a heap: choosing among 1,000 executors costs O(log n) per thread, not O(n))
        n = len(room)
        heap = [(-ex.rank, (i + self._round_robin) % n, ex.executor_id, ex) for i, ex in enumerate(room.values())]
        heapq.heapify(heap)
        turn = n
        deferred: list[GridThread] = []

        def runnable(needs: tuple) -> bool:
            return any(ex.can_run(needs) for ex in room.values())
        while room:
            t = self.queue.pop(now, runnable=runnable if needs_any else None)
            if t is None:
                break
            if t.needs or t.tried or (self.no_answer_on and t.host in self.no_answer_on):
                # few threads: the executors able to run them, one by one
                ex = self._choose([ex for ex in room.values() if ex.can_run(t.needs)], t)
            else:
                ex = self._most_free(heap, room)
            if ex is None:
                deferred.append(t)
                continue
            self._assign(t, ex, now, jobs, events)
            if ex.free <= 0:
                del room[ex.executor_id]
            else:
                turn += 1
                heapq.heappush(heap, (-ex.rank, turn, ex.executor_id, ex))
        for t in deferred:  # they wait for an executor they were not taken back from
            self.queue.release(t, now)
            self._enqueue(t)
        return self._assigned(jobs, events)

    @staticmethod
    def _assigned(jobs: dict[Executor, list[p.Job]], events: list[Action]) -> list[Action]:
        """The actions of one dispatch: one ``assign`` per executor with all of its jobs, then
        the ThreadAssigned events."""
        return [Send(ex.peer, p.Assign(executor_jobs)) for ex, executor_jobs in jobs.items()] + events

    @staticmethod
    def _most_free(heap: list, room: dict[str, Executor]) -> Executor:
        """Pop the first executor in :attr:`Executor.rank` order off ``heap`` (entries ``(-rank,
        turn, id, executor)``; stale entries — full since, or their rank changed — are dropped or
        filed again). ``room`` is not empty, and each of its executors has an entry."""
        while True:
            rank, _, executor_id, ex = heap[0]
            if room.get(executor_id) is not ex:
                heapq.heappop(heap)
            elif -rank != ex.rank:
                heapq.heapreplace(heap, (-ex.rank, heap[0][1], executor_id, ex))
            else:
                heapq.heappop(heap)
                return ex

    def _choose(self, executors: list[Executor], t: GridThread) -> Executor | None:
        """The first executor for ``t`` in :attr:`Executor.rank` order (the most idle workers, then
        the most free slots); ties broken round robin. Executors
        ``t`` was taken back from are left out while another can take it (None: wait for it),
        and a thread taken back goes to an executor that has returned results since it
        registered, else to the one registered longest: executors that register, take a thread
        and vanish (new identities cost nothing) cannot take its every attempt and make it poison.
        So are executors on which a thread of ``t``'s host found no answer (:meth:`_avoided`)."""
        avoid = self._avoided(t)
        if avoid:
            fresh = [ex for ex in executors if ex.executor_id not in avoid]
            if fresh:
                executors = fresh
            elif self._alternative(t):
                return None
            executors = [ex for ex in executors if ex.finished] or [min(executors, key=lambda ex: ex.registered)]
        best = max(ex.rank for ex in executors)
        tied = [ex for ex in executors if ex.rank == best]
        self._round_robin += 1
        return tied[self._round_robin % len(tied)]

    def _alternative(self, t: GridThread) -> bool:
        """Whether an executor ``t`` was not taken back from could run it (connected, accepting,
        not quarantined, able to; full or not). Never under host-hash dispatch, where a host has
        one owner."""
        if self.settings.dispatch == "host-hash":
            return False
        tried = self._avoided(t)
        return any(ex.accepting and ex.quarantined_until is None and ex.executor_id not in tried
                   and ex.can_run(t.needs) for ex in self.connected.values())

    def owner(self, host: str, needs: tuple = ()) -> Executor | None:
        """The executor that runs ``host``'s threads (those that need ``needs``) under host-hash
        dispatch: consistent hashing (Karger et al., STOC 1997) of the host onto a ring of 64
        points per connected, accepting executor able to run them, so an executor that joins or
        leaves moves only its own share of hosts."""
        executor_id = self._owner_on(self._ring(needs), host)
        return None if executor_id is None else self.executors.get(executor_id)

    def _ring(self, needs: tuple) -> list[tuple[int, str]]:
        """The consistent-hash ring of the executors that may run threads needing ``needs``:
        sorted (point, executor id) pairs, made again only when those executors change."""
        members = frozenset(ex.executor_id for ex in self.connected.values()
                            if ex.accepting and ex.quarantined_until is None and ex.can_run(needs))
        cached = self._rings.get(needs)
        if cached is None or cached[0] != members:
            cached = self._rings[needs] = (members, sorted((_hash(f"{executor_id}#{i}"), executor_id)
                                                           for executor_id in members for i in range(64)))
        return cached[1]

    @staticmethod
    def _owner_on(ring: list[tuple[int, str]], host: str) -> str | None:
        """The id of the executor that owns ``host`` on ``ring`` (None: an empty ring)."""
        if not ring:
            return None
        return ring[bisect.bisect(ring, (_hash(host), "")) % len(ring)][1]

    def _user_of(self, application_id: str) -> str:
        """The user of application ``application_id``: the key its threads share the grid under
        (:attr:`ReadyQueue.share_of`); an application not known (never, in practice) is alone."""
        app = self.applications.get(application_id)
        return app.user if app is not None else application_id

    def _owner_id(self, host: str, needs: tuple) -> str | None:
        """The ready queue's partition under host-hash dispatch: ``host``'s owner on the ring as
        the latest dispatch pass made it (:meth:`_dispatch_by_host` makes it again first)."""
        cached = self._rings.get(needs)
        return self._owner_on(cached[1] if cached is not None else self._ring(needs), host)

    def _dispatch_by_host(self, now: float, jobs: dict[Executor, list[p.Job]], events: list[Action]) -> list[Action]:
        """Host-hash dispatch: each READY thread that may start goes to its host's owner
        (:meth:`owner`) while that one has a free slot. The ready queue files eligible hosts by
        owner (:attr:`ReadyQueue.partition`), so a pass pops only from the owners with room,
        and from hosts whose owner changed since they were filed (they move to their new
        owner's file); it ends as soon as no owner has room. Before, every pop walked the
        eligible hosts in order asking each one's owner: 20,000 threads over 2,000 hosts cost
        the manager 58 s of CPU with 4 executors and grew with their number.
        """
        open_ = {executor_id for executor_id, ex in self.connected.items() if ex.free > 0}
        if not open_:
            return []
        rings = {needs: self._ring(needs) for needs in self.queue.queued_by_needs()}  # as the executors are now
        members = {needs: self._rings[needs][0] for needs in rings}
        moved = [key for key in self.queue.eligible_keys()  # filed under an owner that is one no more
                 if members.get(key[0]) and key[1] not in members[key[0]]]

        while open_:
            keys = [(needs, executor_id) for needs in rings for executor_id in open_] + moved
            t = self.queue.pop(now, keys=keys)
            if t is None:
                break
            ex = self.executors[self._owner_on(rings[t.needs], t.host)]
            self._assign(t, ex, now, jobs, events)
            if ex.free <= 0:
                open_.discard(ex.executor_id)
        return self._assigned(jobs, events)

    def _assign(self, t: GridThread, ex: Executor, now: float, jobs: dict[Executor, list[p.Job]],
                events: list[Action]) -> None:
        """Assign ``t`` to ``ex`` as a new attempt: its job is added to ``jobs[ex]``, its
        ThreadAssigned event to ``events`` (:meth:`_assigned` makes the actions)."""
        attempt_id = self.new_attempt_id()
        while attempt_id in self._attempts or attempt_id in self.late or attempt_id <= 0:
            attempt_id = self.new_attempt_id()
        self._move(t, ThreadState.SCHEDULED)
        t.attempt_id = attempt_id
        t.executor_id = ex.executor_id
        t.time_assigned = now
        t.attempts += 1
        ex.running[attempt_id] = t
        self._attempts[attempt_id] = t
        job = p.Job(attempt_id, t.application_id, t.thread_id, t.url, t.depth, t.instruction,
                    delay=self.queue.delay_of(t.host), needs=list(t.needs))
        shared = self.applications[t.application_id].instruction
        if shared is not None and ex.instructed.get(t.application_id) is not shared:
            job.application_instruction = ex.instructed[t.application_id] = shared  # once per executor
        executor_jobs = jobs.get(ex)
        if executor_jobs is None:
            jobs[ex] = [job]
        else:
            executor_jobs.append(job)
        events.append(ev.ThreadAssigned(t.internal_id, attempt_id, ex.executor_id, t.attempts, now, t.rerun))
        t.rerun = False

    # -------------------------------------------------------------------------- helpers

    def _touch(self, peer: bytes, now: float) -> None:
        kind = self.peers.get(peer)
        if kind is None:
            return
        if kind[0] == "executor":
            ex = self.executors.get(kind[1])
            if ex is not None:
                ex.last_seen = now
        else:
            app = self.applications.get(kind[1])
            if app is not None:
                app.last_seen = now

    def _move(self, t: GridThread, new: ThreadState) -> None:
        if new not in TRANSITIONS[t.state]:  # the check inlined: this runs five times a thread
            check_transition(t.name, t.state, new)  # raises, naming the thread
        t.state = new

    def _executor_of(self, peer: bytes) -> Executor | None:
        kind = self.peers.get(peer)
        if kind is None or kind[0] != "executor":
            return None
        return self.executors.get(kind[1])

    def _application_of(self, peer: bytes, application_id: str) -> Application | None:
        kind = self.peers.get(peer)
        if kind != ("client", application_id):
            return None
        return self.applications.get(application_id)

    def _deliver(self, t: GridThread) -> list[Action]:
        """Send finished ``t``'s result to its application's client (nothing while it has none);
        :attr:`GridThread.delivered_to` remembers the connection."""
        app = self.applications.get(t.application_id)
        if app is None or app.peer is None:
            return []
        t.delivered_to = app.peer
        return [Send(app.peer, p.ThreadDone(t.application_id, [p.FinishedThread(t.thread_id, t.executor_id, t.attempts,
                                                                          t.failed, t.result)]))]

    def _lose_executor(self, ex: Executor, now: float, outcome: str, *, record: bool = True,
                       count: bool = True) -> list[Action]:
        """Disconnect ``ex``; its attempts are taken back (``outcome`` recorded on each)."""
        actions: list[Action] = []
        ex.connected = False
        if self.connected.pop(ex.executor_id, None) is not None:
            namesakes = self.connected_names.get(ex.name)
            if namesakes is not None:
                namesakes.discard(ex.executor_id)
                if not namesakes:
                    del self.connected_names[ex.name]
        if ex.peer is not None:
            self.peers.pop(ex.peer, None)
        for attempt_id, t in list(ex.running.items()):
            actions += self._take_back(t, now, outcome, count=count)
        ex.running.clear()
        if ex.unrecorded is not None:  # its last figures, not yet written
            actions.append(ex.unrecorded)
            ex.unrecorded = None
        ex.figures = {}  # live figures only: a departed executor's are in its SQL row
        if record:
            actions.append(ev.ExecutorDisconnected(ex.executor_id))
        self._departed[ex.executor_id] = (ex.name, ex.host, ex.user)
        self._departed.move_to_end(ex.executor_id)
        self._forget_departed()
        return actions

    def remember_executors(self, known: list[tuple[str, str, str, str]]) -> None:
        """Executors recorded by an earlier manager (after a restart or a failover), oldest first:
        ``(executor_id, user, name, host)`` tuples. The latest ``keep_departed`` are kept, so that
        an executor that registers again keeps its id, only its own user may reclaim it, and one
        started again under its name, host and user is the same executor."""
        for executor_id, user, name, host in known[max(0, len(known) - self.settings.keep_departed):]:
            self.executor_owners[executor_id] = user
            self.executor_names[(name, host, user)] = executor_id
            self._departed[executor_id] = (name, host, user)

    def _forget_departed(self) -> None:
        """Forget the executors gone longest, and the applications stopped longest, beyond
        ``settings.keep_departed`` of each. Their rows stay in SQL; a forgotten executor that
        registers again, or a forgotten application a client reopens, gets a new id."""
        keep = self.settings.keep_departed
        while len(self._departed) > keep:
            executor_id, key = self._departed.popitem(last=False)
            if executor_id in self.connected:  # registered again meanwhile
                continue
            self.executors.pop(executor_id, None)
            self._room.pop(executor_id, None)
            self.executor_owners.pop(executor_id, None)
            if self.executor_names.get(key) == executor_id:
                del self.executor_names[key]
        while len(self._stopped) > keep:
            application_id, _ = self._stopped.popitem(last=False)
            app = self.applications.get(application_id)
            if app is None or app.state != ApplicationState.STOPPED:
                continue
            self._detach(app)
            del self.applications[application_id]

    def _take_back(self, t: GridThread, now: float, outcome: str, *, count: bool = True,
                   fetching: bool = True) -> list[Action]:
        """Take an attempt back from its executor: READY again, or failed after ``max_attempts``.
        ``fetching`` False: the attempt certainly sends its host nothing more (handed back
        unstarted, or its result came), so its slot is free at once; else it is held
        (:meth:`_hold`)."""
        actions: list[Action] = [ev.AttemptEnded(t.attempt_id, outcome, now)]
        self._attempts.pop(t.attempt_id, None)
        ex = self.executors.get(t.executor_id or "")
        if ex is not None:
            self._remember_late(t.attempt_id, ex.executor_id, ex.peer)
        if fetching:
            self._hold(t, ex, now)
        else:
            self.queue.release(t, now)
        if count:
            t.lost += 1
            if ex is not None:
                t.tried = (t.tried or set()) | {ex.executor_id}
        t.time_started = None
        limit = self.settings.max_attempts
        if t.lost >= limit and (len(t.tried or ()) >= 2 or t.lost >= 2 * limit or not self._alternative(t)):
            log.error("%s (%s) failed: %s lost (poison)", t.name, hide_passwords(t.url), counted(t.lost, "attempt"),
                      extra=_thread_log(t))
            self._move(t, ThreadState.FINISHED)
            t.failed = True
            t.time_finished = now
            self._remember(t, None)
            actions.append(ev.ThreadFailed(t.internal_id, now))
            actions += self._deliver(t)
        else:
            self._move(t, ThreadState.READY)
            t.executor_id = None
            self._enqueue(t)
            actions.append(ev.ThreadRequeued(t.internal_id))
        return actions

    def _hold(self, t: GridThread, ex: Executor | None, now: float) -> None:
        """Keep the host slot of ``t``'s attempt, taken back from ``ex`` at ``now`` (POSIX s),
        while its fetch may still be running: until its late result comes, or at most the
        executor's request window after its start — after ``now`` when its start was not
        reported (an executor declared dead may start the jobs it buffers until it registers
        again, when it drops them: :meth:`on_register`). The window is what the executor
        declared at registration (:attr:`Register.request_window <gridcrawl.protocol.Register>`;
        it knows its own timeouts, which the manager's settings need not match), else the
        manager's own settings' (:meth:`Settings.request_window
        <gridcrawl.settings.Settings.request_window>`); at most ``thread_timeout``, so no
        executor keeps a host's slots longer than the grid lets an attempt run, and a dead
        one's (kill -9) are free after it.

        An attempt of a connected executor whose start it has not reported frees its slot at
        once: the executor is told to cancel it, skips a cancelled job it has not started, and
        reports a start within :data:`~gridcrawl.executor.agent.START_REPORT_AFTER` (0.1 s) of
        it — so a start it did not report is one of the last moment, whose late result then
        comes. (Held, a silent executor that never reported a start, taken back as a
        straggler, kept its seed's new host, one thread in flight, for the whole window.)"""
        if t.state != ThreadState.STARTED and ex is not None and ex.connected:
            self.queue.release(t, now)
            return
        window = ex.request_window if ex is not None and ex.request_window else self.settings.request_window()
        window = min(window, self.settings.thread_timeout)
        since = t.time_started if t.state == ThreadState.STARTED and t.time_started is not None else now
        self.queue.hold(t.attempt_id, t, now, since + window, ex.executor_id if ex is not None else None)

    def _remember_late(self, attempt_id: int | None, executor_id: str, peer: bytes | None) -> None:
        """Remember a taken-back attempt (bounded: the oldest are forgotten first)."""
        if attempt_id is None:
            return
        self.late[attempt_id] = (executor_id, peer)
        if len(self.late) > LATE_ATTEMPTS:
            self.late.popitem(last=False)

    def _abort_application(self, app: Application, now: float) -> list[Action]:
        actions: list[Action] = []
        for t in list(app.threads.values()):
            if t.state in (ThreadState.SCHEDULED, ThreadState.STARTED):
                ex = self.executors.get(t.executor_id or "")
                self._hold(t, ex, now)  # cancelled, but a request under way goes on
                if ex is not None:
                    ex.running.pop(t.attempt_id, None)
                    self._has_room(ex)
                    self._attempts.pop(t.attempt_id, None)
                    self._remember_late(t.attempt_id, ex.executor_id, ex.peer)
                    if ex.peer is not None:
                        actions.append(Send(ex.peer, p.Cancel(t.attempt_id)))
                actions.append(ev.AttemptEnded(t.attempt_id, "cancelled", now))
            elif t.rerun and t.finished_before:
                # restored after a failover, never submitted again: its client stored the result
                # whose ack the old manager did not record. It ends Dead with that run's finish,
                # a page for gridcrawl report; the dashboard's done counts it too (it said 523
                # where the report said 529 pages)
                app.done += 1
            self.queue.discard(t)
            self._move(t, ThreadState.DEAD)
            actions.append(ev.ThreadDead(t.internal_id))
        app.aborted = app.aborted or bool(app.threads)
        app.threads.clear()
        app.unacked_bytes, app.throttled, app.instruction_bytes = 0, False, 0
        return actions

    # -------------------------------------------------------------------------- restart

    def restore(self, applications: list[dict], threads: list[dict], now: float,
                running: list[tuple[int, str, str, float | None]] = ()) -> list[Action]:
        """Reload state after a manager restart from the database rows.

        ``applications``: rows of non-stopped applications, with their figures so far when known
        (``done``, ``errors``, ``first_submitted`` and ``last_finished`` in POSIX seconds: the
        dashboard's crawl seconds go on from the first run) and ``time_created`` (POSIX s; ``now``
        when not given); ``threads``: rows of threads not DEAD.
        Every such thread becomes READY again (a FINISHED one's result was only in memory, so it
        is fetched again; the application stores each page once by fingerprint), but is *held*
        until its application reattaches and submits it again: the crawling instruction it
        carries lives only in the application. Executors are not restored: they register again
        when they notice the new manager. ``running``: ``(attempt_id, executor_id, host,
        since)`` of the attempts that were running when the previous manager stopped, or that it
        had taken back (``lost``), oldest first, ``since`` when its fetch may have begun (POSIX s:
        its start; the take-back of one taken back before it started; None: not known, now).
        Their late results are fenced rather than counted as forgeries, and each keeps its
        host's politeness slot while its fetch may still be running, as a taken-back attempt's
        (:meth:`_hold`: this manager's request window after its start): its executor, which
        lives on, would otherwise fetch the host beside the threads this manager dispatches there
        (a restart or fail-over mid-crawl sent a host's requests past its limit). The executor
        frees the slots of those it no longer runs when it registers again.
        """
        actions: list[Action] = []
        window = min(self.settings.request_window(), self.settings.thread_timeout)
        held: dict[str, int] = {}
        for attempt_id, executor_id, host, since in running:
            self._remember_late(attempt_id, executor_id or "", None)
            if host and self.queue.hold_restored(attempt_id, host, now, (now if since is None else since) + window,
                                                 executor_id or ""):
                held[host] = held.get(host, 0) + 1
        for host, count in held.items():
            # more than one request in flight there: it had answered (and has no delay), so the
            # slots its held attempts leave are free, not one for a first contact (resumed with
            # fewer executors after a kill -9, a one-host crawl waited the whole window)
            if count > 1:
                self.queue.note_answered(host)
        for row in applications:
            app = Application(row["application_id"], row["application_name"], row["usr_name"], None,
                              row.get("time_created", now), state=ApplicationState(row["state"]), last_seen=now,
                              done=row.get("done", 0), errors=row.get("errors", 0),
                              first_submitted=row.get("first_submitted"), last_finished=row.get("last_finished"))
            if app.state == ApplicationState.PAUSED:  # the pause outlives a manager restart
                app.state, app.paused = ApplicationState.READY, True
            self.applications[app.application_id] = app
            if app.state != ApplicationState.STOPPED:
                self._count_open(app)
        for row in threads:
            app = self.applications.get(row["application_id"])
            if app is None:
                continue
            t = GridThread(row["internal_thread_id"], app.application_id, row["thread_id"], row["url"],
                           row["depth"], row["priority"], None, now, host=row["host"],
                           attempts=row["attempts"])
            t.held = t.rerun = True
            t.finished_before = row.get("time_finished") is not None
            app.threads[t.thread_id] = t
            # the row keeps the executor and times of its last run until it is assigned again (then
            # they are cleared, so that no row has a start after its finish): a thread whose result
            # the application stored but whose ack this manager never got is never submitted
            # again, and ends Dead with them when the application completes
            actions.append(ev.ThreadRestored(t.internal_id))
        log.info("restored %s and %s", counted(len(applications), "application"),
                 counted(len(threads), "unfinished thread"))
        return actions

    def shutdown(self) -> list[Action]:
        """The manager is stopping: no executor stays connected to it (records only; the
        threads stay as they are, for the next start to restore)."""
        actions: list[Action] = []
        for ex in self.connected.values():
            ex.connected = False
            if ex.unrecorded is not None:
                actions.append(ex.unrecorded)
                ex.unrecorded = None
            actions.append(ev.ExecutorDisconnected(ex.executor_id))
        self.connected.clear()
        return actions

    def stats(self, by_state: dict[str, int] | None = None) -> dict:
        """Counts for logs and the dashboard: executors, applications, threads by state
        (``by_state``: those counts if the caller has them already, ``{"READY": n, ...}``)."""
        if by_state is None:
            by_state = {s.name: 0 for s in ThreadState}
            for app in self.applications.values():
                for t in app.threads.values():
                    by_state[t.state.name] += 1
        return {"executors": len(self.connected),
                "applications": len(self.applications), "queued": len(self.queue), "threads": by_state,
                "fenced": self.fenced, "unrunnable": self.unrunnable()}

    def unrunnable(self) -> dict[str, int]:
        """Queued threads that no connected executor able to run them (capability-based
        dispatch) takes work from now, per need set: ``{"plugin:shop render": 12}`` (needs
        joined by spaces; ``""``: threads that need nothing). Executors that do not take work
        now are an idle-only one whose desktop is in use or outside its hours, and a quarantined
        one. Empty when every queued thread has an executor that takes it."""
        taking = [ex for ex in self.connected.values() if ex.accepting and ex.quarantined_until is None]
        return {" ".join(needs): count for needs, count in self.queue.queued_by_needs().items()
                if not any(ex.can_run(needs) for ex in taking)}
