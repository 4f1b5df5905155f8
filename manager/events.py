"""What the manager's core tells its recorder: typed events of executors, applications, grid
threads and attempts.

:class:`~gridcrawl.manager.core.ManagerCore` returns these among its actions; it knows nothing of
tables or columns. :mod:`gridcrawl.manager.recorder` maps each event to the rows it changes
(:func:`gridcrawl.manager.recorder.rows`) and journals them. Every event is a frozen dataclass
with slots whose fields are plain values (str, int, float, bool, None, tuples of str), so it
goes through the journal's JSON as a list (:func:`to_list`, :func:`from_list`). Times are POSIX
seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import attrgetter


@dataclass(frozen=True, slots=True)
class ExecutorRegistered:
    """An executor registered (or registered again): its whole row. ``workers`` is the worker
    count it claimed; ``capabilities`` its declared names, sorted."""

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


@dataclass(frozen=True, slots=True)
class ExecutorHeartbeat:
    """An executor's heartbeat with figures (None: a figure it did not send)."""

    executor_id: str
    time: float
    cpu_usage: float | None = None
    cpu_avail: float | None = None
    cpu_totalusage: float | None = None
    pages_per_second: float | None = None
    mem_usage: int | None = None


@dataclass(frozen=True, slots=True)
class ExecutorDisconnected:
    """An executor left, was declared dead, or the manager stopped."""

    executor_id: str


@dataclass(frozen=True, slots=True)
class ExecutorAvailability:
    """An idle-only executor stopped (``accepting`` False) or resumed taking work."""

    executor_id: str
    accepting: bool


@dataclass(frozen=True, slots=True)
class ExecutorQuarantined:
    """An executor gets no new work until ``until`` (None: its quarantine is over)."""

    executor_id: str
    until: float | None


@dataclass(frozen=True, slots=True)
class ApplicationCreated:
    """A client opened a new application."""

    application_id: str
    name: str
    user: str
    state: int
    time: float


@dataclass(frozen=True, slots=True)
class ApplicationChanged:
    """An application's state changed (a :class:`~gridcrawl.states.ApplicationState` value):
    paused, resumed, or reopened after it stopped (``reopened``: its completion time is cleared)."""

    application_id: str
    state: int
    reopened: bool = False


@dataclass(frozen=True, slots=True)
class ApplicationStopped:
    """An application completed or was cancelled at ``time``."""

    application_id: str
    time: float


@dataclass(frozen=True, slots=True)
class ThreadSubmitted:
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


@dataclass(frozen=True, slots=True)
class ThreadAssigned:
    """A thread went to an executor as a new attempt (SCHEDULED); ``attempts`` counts them."""

    internal_id: int
    attempt_id: int
    executor_id: str
    attempts: int
    time: float


@dataclass(frozen=True, slots=True)
class ThreadStarted:
    """An executor's worker began the attempt (STARTED)."""

    internal_id: int
    attempt_id: int
    time: float


@dataclass(frozen=True, slots=True)
class ThreadFinished:
    """The attempt's result arrived (FINISHED); ``error_kind`` is the page's, None on success."""

    internal_id: int
    attempt_id: int
    time_started: float
    time: float
    error_kind: str | None


@dataclass(frozen=True, slots=True)
class ThreadFailed:
    """The thread failed for good (poison: its attempts were lost too often); FINISHED."""

    internal_id: int
    time: float


@dataclass(frozen=True, slots=True)
class ThreadRequeued:
    """The thread is READY again (taken back, or a retry waiting out its back-off)."""

    internal_id: int


@dataclass(frozen=True, slots=True)
class ThreadRestored:
    """A manager restart made the thread READY again (held until its application reattaches)."""

    internal_id: int


@dataclass(frozen=True, slots=True)
class ThreadDead:
    """The application stored the thread's result, or the thread was aborted (DEAD)."""

    internal_id: int


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    """An attempt ended other than by its result: ``outcome`` is ``lost``, ``timeout``,
    ``handed_back``, ``retry``, ``cancelled`` or ``fenced`` (a late result of one taken back)."""

    attempt_id: int
    outcome: str
    time: float


Event = (ExecutorRegistered | ExecutorHeartbeat | ExecutorDisconnected | ExecutorAvailability
         | ExecutorQuarantined | ApplicationCreated | ApplicationChanged | ApplicationStopped
         | ThreadSubmitted | ThreadAssigned | ThreadStarted | ThreadFinished | ThreadFailed
         | ThreadRequeued | ThreadRestored | ThreadDead | AttemptEnded)

#: event class name -> class (the journal's first element of each event)
EVENTS: dict[str, type] = {cls.__name__: cls for cls in Event.__args__}
_VALUES = {cls: attrgetter(*(f.name for f in fields(cls))) for cls in EVENTS.values()}


def to_list(event: Event) -> list:
    """``event`` as ``[class name, field values...]`` (JSON-ready)."""
    values = _VALUES[type(event)](event)
    return [type(event).__name__, *values] if isinstance(values, tuple) else [type(event).__name__, values]


def from_list(item: list) -> Event:
    """The event of a :func:`to_list` list. Raises ``KeyError`` for an unknown class name and
    ``TypeError`` for a wrong number of values."""
    cls = EVENTS[item[0]]
    return cls(*item[1:])
