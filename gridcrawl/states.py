"""Grid thread and application states, and the one table of allowed thread transitions.

States follow Alchemi's numbering (its ``thread.state`` column), so the SQL records read as
Alchemi's did:

======  ===========  ==================================================================
 value   state        meaning
======  ===========  ==================================================================
 0       READY        queued at the manager, waiting for an executor slot
 1       SCHEDULED    assigned to an executor (an attempt was sent)
 2       STARTED      a worker thread of the executor is running it
 3       FINISHED     its result is at the manager, not yet stored by the application
 4       DEAD         result stored by the application (acknowledged), or aborted
======  ===========  ==================================================================

Transitions (anything else raises :class:`IllegalTransition`)::

    READY     -> SCHEDULED                 dispatch
    SCHEDULED -> STARTED                   executor reports the start
    SCHEDULED -> READY, STARTED -> READY   executor lost, thread timeout, hand-back (an attempt
                                           that may still be fetching keeps its host's
                                           politeness slot meanwhile: manager/queue.py)
    SCHEDULED -> FINISHED, STARTED -> FINISHED   result arrives, or the thread is failed as
                                           poison (``max_attempts`` attempts lost): FINISHED
                                           with ``failed`` set, delivered like a result
    READY     -> FINISHED                  its host is down (failed its probes): failed
                                           without an attempt, delivered like a result
    FINISHED  -> DEAD                      application acknowledged the result
    FINISHED  -> READY                     manager restarted before delivering (result lost)
    READY/SCHEDULED/STARTED/FINISHED -> DEAD   aborted (application cancelled; a running
                                           attempt keeps its host's slot likewise)
"""

from __future__ import annotations

import enum

from gridcrawl.errors import IllegalTransition  # noqa: F401 (re-exported)


class ThreadState(enum.IntEnum):
    """State of a grid thread (Alchemi's numbering)."""

    READY = 0
    SCHEDULED = 1
    STARTED = 2
    FINISHED = 3
    DEAD = 4


class ApplicationState(enum.IntEnum):
    """State of an application (Alchemi: 0 AwaitingManifest, 1 Ready, 2 Stopped; gridcrawl adds
    3 Paused: an operator paused it, its READY threads wait for ``resume``)."""

    AWAITING = 0
    READY = 1
    STOPPED = 2
    PAUSED = 3


_S = ThreadState
TRANSITIONS: dict[ThreadState, frozenset[ThreadState]] = {
    _S.READY: frozenset({_S.SCHEDULED, _S.FINISHED, _S.DEAD}),
    _S.SCHEDULED: frozenset({_S.STARTED, _S.READY, _S.FINISHED, _S.DEAD}),
    _S.STARTED: frozenset({_S.READY, _S.FINISHED, _S.DEAD}),
    _S.FINISHED: frozenset({_S.DEAD, _S.READY}),
    _S.DEAD: frozenset(),
}


def check_transition(thread_name: str, old: ThreadState, new: ThreadState) -> ThreadState:
    """Return ``new`` if ``old -> new`` is allowed; else raise :class:`IllegalTransition` naming
    ``thread_name`` (for example ``"app 3f2a…/thread 17"``)."""
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(f"{thread_name}: {old.name} -> {new.name} is not allowed")
    return new
