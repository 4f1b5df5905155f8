"""What the manager's core tells its recorder: typed events of executors, applications, grid
threads and attempts.

:class:`~gridcrawl.manager.core.ManagerCore` returns these among its actions; it knows nothing of
tables or columns. :mod:`gridcrawl.manager.recorder` maps each event to the rows it changes
(:func:`gridcrawl.manager.recorder.rows`) and journals them. Every event is a frozen msgspec struct
whose fields are plain values (str, int, float, bool, None, tuples of str), so it goes through
the journal as a list (:func:`to_list`, :func:`encode`, :func:`from_list`). Times are POSIX
seconds.
"""

from __future__ import annotations

import msgspec

#: the journal's encoder: an event is the array ``[class name, field values...]`` (msgspec's
#: tagged array-like structs; the same bytes-level shape :func:`to_list` gives)
_ENCODER = msgspec.msgpack.Encoder()


class _Event(msgspec.Struct, frozen=True, array_like=True, tag=True, gc=False):
    """Base of the events: frozen, encoded as ``[class name, field values...]``, never tracked by
    the cyclic garbage collector (their fields are plain values, so they cannot form cycles).
    msgspec structs rather than dataclasses: built in about a sixth of the time and encoded in
    one call (measured: 0.93 → 0.16 µs an event built, 0.79 → 0.05 µs encoded)."""


class ExecutorRegistered(_Event):
    """An executor registered (or registered again): its whole row. ``workers`` is the worker
    count it was granted (its claim, up to ``max_threads_per_executor``: what it runs);
    ``capabilities`` its declared names, sorted."""

    executor_id: str
    name: str
    host: str
    user: str
    dedicated: bool
    workers: int
    cpu_max: float
    num_cpus: int
    mem_max: int
    os: str
    arch: str
    capabilities: tuple
    time: float
    accepting: bool = True


class ExecutorHeartbeat(_Event):
    """An executor's heartbeat with figures (None: a figure it did not send)."""

    executor_id: str
    time: float
    cpu_usage: float | None = None
    cpu_avail: float | None = None
    cpu_totalusage: float | None = None
    pages_per_second: float | None = None
    mem_usage: int | None = None


class ExecutorDisconnected(_Event):
    """An executor left, was declared dead, or the manager stopped."""

    executor_id: str


class ExecutorAvailability(_Event):
    """An idle-only executor stopped (``accepting`` False) or resumed taking work."""

    executor_id: str
    accepting: bool


class ExecutorQuarantined(_Event):
    """An executor gets no new work until ``until`` (None: its quarantine is over)."""

    executor_id: str
    until: float | None


class ApplicationCreated(_Event):
    """A client opened a new application."""

    application_id: str
    name: str
    user: str
    state: int
    time: float


class ApplicationChanged(_Event):
    """An application's state changed (a :class:`~gridcrawl.states.ApplicationState` value):
    paused, resumed, or reopened after it stopped (``reopened``: its completion time is cleared,
    and its row is written whole from ``name``, ``user`` and ``time_created``, POSIX s, in case
    ``gridcrawl db prune`` deleted it since it stopped)."""

    application_id: str
    state: int
    reopened: bool = False
    name: str = ""
    user: str = ""
    time_created: float = 0.0


class ApplicationStopped(_Event):
    """An application completed or was cancelled at ``time``."""

    application_id: str
    time: float


class ThreadSubmitted(_Event):
    """A new grid thread was queued (READY). ``needs``: sorted capability names."""

    internal_id: int
    application_id: str
    thread_id: int
    url: str
    host: str
    depth: int
    priority: int
    needs: tuple
    time: float


class ThreadAssigned(_Event):
    """A thread went to an executor as a new attempt (SCHEDULED); ``attempts`` counts them.
    ``rerun``: the first attempt of a thread restored after a manager restart, whose row still
    holds the start and finish of its run under the previous manager (cleared now)."""

    internal_id: int
    attempt_id: int
    executor_id: str
    attempts: int
    time: float
    rerun: bool = False


class ThreadStarted(_Event):
    """An executor's worker began the attempt (STARTED)."""

    internal_id: int
    attempt_id: int
    time: float


class ThreadFinished(_Event):
    """The attempt's result arrived (FINISHED); ``error_kind`` is the page's, None on success."""

    internal_id: int
    attempt_id: int
    time_started: float
    time: float
    error_kind: str | None


class ThreadFailed(_Event):
    """The thread failed for good (poison: its attempts were lost too often); FINISHED."""

    internal_id: int
    time: float


class ThreadNotFetched(_Event):
    """The thread finished without an attempt: its host is down (it failed its probes, see
    :mod:`gridcrawl.manager.queue`); FINISHED, with the probes' ``error_kind``."""

    internal_id: int
    time: float
    error_kind: str


class ThreadRequeued(_Event):
    """The thread is READY again (taken back, or a retry waiting out its back-off)."""

    internal_id: int


class ThreadRestored(_Event):
    """A manager restart made the thread READY again (held until its application reattaches)."""

    internal_id: int


class ThreadDead(_Event):
    """The application stored the thread's result, or the thread was aborted (DEAD)."""

    internal_id: int


class AttemptEnded(_Event):
    """An attempt ended other than by its result: ``outcome`` is ``lost``, ``timeout``,
    ``straggler`` (taken back for an idle executor), ``handed_back``, ``retry``, ``cancelled``,
    ``fenced`` (a late result of one taken back), ``unreadable`` (its page does not decode: taken
    back, counted as lost) or ``error`` (its result could not be handled: a bug, logged). ``time_started``: when the attempt began, for a ``retry`` whose start
    rode with its result (no ``started`` message came, so no :class:`ThreadStarted` recorded it);
    None otherwise."""

    attempt_id: int
    outcome: str
    time: float
    time_started: float | None = None


Event = (ExecutorRegistered | ExecutorHeartbeat | ExecutorDisconnected | ExecutorAvailability
         | ExecutorQuarantined | ApplicationCreated | ApplicationChanged | ApplicationStopped
         | ThreadSubmitted | ThreadAssigned | ThreadStarted | ThreadFinished | ThreadFailed | ThreadNotFetched
         | ThreadRequeued | ThreadRestored | ThreadDead | AttemptEnded)

#: event class name -> class (the journal's first element of each event)
EVENTS: dict[str, type] = {cls.__name__: cls for cls in Event.__args__}


def to_list(event: Event) -> list:
    """``event`` as ``[class name, field values...]`` (JSON-ready)."""
    return [type(event).__name__, *msgspec.structs.astuple(event)]


def encode(events: list) -> bytes:
    """``events`` as one msgpack array of :func:`to_list` arrays (what the journal holds for
    one pass of the server loop), in one call."""
    return _ENCODER.encode(events)


def from_list(item: list) -> Event:
    """The event of a :func:`to_list` list. Raises ``KeyError`` for an unknown class name and
    ``TypeError`` for a wrong number of values."""
    cls = EVENTS[item[0]]
    return cls(*item[1:])
