"""The manager's decisions, as a pure state machine: events in, actions out.

:class:`ManagerCore` knows the executors, applications and grid threads, and decides which
executor runs which thread, what has expired and what each peer must be told. It has no sockets,
no SQL and no clock: every event method takes ``now`` (POSIX seconds) and returns a list of
actions — :class:`Send` (a message for a peer, named by its ZeroMQ routing id) and
:class:`Record` (a row to write to the manager's database). The server loop
(:mod:`gridcrawl.manager.server`) carries the actions out.

Scheduling (Alchemi's dispatcher, made exact): a READY thread goes to the connected, accepting
executor with the most free slots (``threads + prefetch`` minus what it holds); ties go round
robin. Threads leave the queue by priority (higher first), then in submission order.

Reliability (the ZeroMQ guide's Paranoid Pirate pattern): every peer heartbeats; a peer silent for
``heartbeat_interval × heartbeat_liveness`` seconds is dead. Every assignment is an *attempt*
with its own id; when an executor is lost or a thread outlives ``thread_timeout``, the attempt is
taken back, the thread goes back to READY, and a later result quoting that attempt is fenced out.
A thread whose attempts were lost ``max_attempts`` times is failed (poison) and reported to its
application. Results stay at the manager (FINISHED) until the application acknowledges that it
stored them, so a client that restarts gets them again.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Callable

from gridcrawl import protocol as p
from gridcrawl.settings import Settings
from gridcrawl.states import ApplicationState, ThreadState, check_transition
from gridcrawl.urls import url_host
from gridcrawl.manager.queue import ReadyQueue

log = logging.getLogger("gridcrawl.manager")


# ----------------------------------------------------------------------------------------------
# Actions


@dataclass(slots=True)
class Send:
    """Action: send ``message`` to the peer with ZeroMQ routing id ``peer``."""

    peer: bytes
    message: p.Message


@dataclass(slots=True)
class Record:
    """Action: write to the manager database. ``op`` is ``"insert"`` (``values`` is the row) or
    ``"update"`` (``key`` is the primary key value, ``values`` the changed columns). Times in
    ``values`` are POSIX seconds; the recorder turns them into SQL datetimes."""

    table: str
    op: str
    values: dict
    key: object = None


Action = Send | Record


# ----------------------------------------------------------------------------------------------
# State


@dataclass(eq=False)
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
    failed: bool = False
    result: p.PageResult | None = None
    queue_seq: int | None = None

    @property
    def name(self) -> str:
        """``application/thread`` label used in logs and errors."""
        return f"application {self.application_id[:8]} thread {self.thread_id}"


@dataclass(eq=False)
class Executor:
    """A registered executor and the attempts it holds (``running``: attempt id → thread)."""

    executor_id: str
    peer: bytes | None
    name: str
    host: str
    user: str
    threads: int
    capacity: int
    dedicated: bool = True
    accepting: bool = True
    connected: bool = True
    last_seen: float = 0.0
    running: dict[int, GridThread] = field(default_factory=dict)
    finished: int = 0

    @property
    def free(self) -> int:
        """Slots this executor can take now (0 when disconnected or not accepting)."""
        if not (self.connected and self.accepting):
            return 0
        return self.capacity - len(self.running)


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


# ----------------------------------------------------------------------------------------------


class ManagerCore:
    """The manager's state and decisions. Not thread-safe; one server loop drives it.

    ``settings`` supplies heartbeat, liveness, timeout, attempt and prefetch figures.
    ``new_id`` makes executor and application ids (uuid4 hex by default; tests pass their own).
    """

    def __init__(self, settings: Settings, *, new_id: Callable[[], str] | None = None,
                 next_internal_id: int = 1, next_attempt_id: int = 1) -> None:
        self.settings = settings
        self.new_id = new_id or (lambda: uuid.uuid4().hex)
        self.executors: dict[str, Executor] = {}
        self.applications: dict[str, Application] = {}
        self.peers: dict[bytes, tuple[str, str]] = {}  # routing id -> ("executor"|"client", id)
        self.queue = ReadyQueue()
        self._next_internal = next_internal_id
        self._next_attempt = next_attempt_id
        self._attempts: dict[int, GridThread] = {}
        self._round_robin = 0
        self._last_heartbeat = 0.0
        self.fenced = 0
        self.handlers: dict[type, Callable[[bytes, p.Message, float], list[Action]]] = {
            p.Register: self.on_register,
            p.Heartbeat: self.on_heartbeat,
            p.Started: self.on_started,
            p.Result: self.on_result,
            p.Availability: self.on_availability,
            p.OpenApplication: self.on_open,
            p.Submit: self.on_submit,
            p.Ack: self.on_ack,
            p.CloseApplication: self.on_close,
            p.Bye: self.on_bye,
        }

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

    def tick(self, now: float) -> list[Action]:
        """Periodic work: heartbeats to every peer, dead peers, threads past ``thread_timeout``."""
        actions: list[Action] = []
        s = self.settings
        if now - self._last_heartbeat >= s.heartbeat_interval:
            self._last_heartbeat = now
            beat = p.Heartbeat()
            actions.extend(Send(peer, beat) for peer in self.peers)
        for ex in list(self.executors.values()):
            if ex.connected and now - ex.last_seen > s.peer_timeout:
                log.warning("executor %s (%s) silent for %.1f s: declared dead", ex.executor_id[:8],
                            ex.name, now - ex.last_seen)
                actions += self._lose_executor(ex, now, "lost")
        for app in self.applications.values():
            if app.peer is not None and now - app.last_seen > s.peer_timeout:
                log.warning("application %s: client silent, detached (its threads go on)", app.application_id[:8])
                self.peers.pop(app.peer, None)
                app.peer = None
        for ex in self.executors.values():
            for attempt_id, t in list(ex.running.items()):
                if t.time_assigned is not None and now - t.time_assigned > s.thread_timeout:
                    log.warning("%s (%s) ran over %.0f s on executor %s: taken back", t.name, t.url,
                                s.thread_timeout, ex.name)
                    del ex.running[attempt_id]
                    if ex.peer is not None:
                        actions.append(Send(ex.peer, p.Cancel(attempt_id)))
                    actions += self._take_back(t, now, "timeout")
        actions += self.dispatch(now)
        return actions

    # -------------------------------------------------------------------------- executors

    def on_register(self, peer: bytes, m: p.Register, now: float) -> list[Action]:
        """An executor joins (or rejoins after a reconnect): welcome it and give it work."""
        actions: list[Action] = []
        old = self.peers.get(peer)
        if old and old[0] == "client":
            return [Send(peer, p.Refuse("this connection is a client's; an executor needs its own"))]
        ex = self.executors.get(m.executor_id or "") if m.executor_id else None
        if ex is None and old is not None:
            ex = self.executors.get(old[1])
        if ex is not None:
            # A re-registration means the executor started afresh: what it held is gone.
            actions += self._lose_executor(ex, now, "lost", record=False)
            if ex.peer is not None:
                self.peers.pop(ex.peer, None)
        executor_id = ex.executor_id if ex is not None else (m.executor_id or self.new_id())
        capacity = m.threads + self.settings.prefetch
        ex = Executor(executor_id=executor_id, peer=peer, name=m.name, host=m.host, user=m.user,
                      threads=m.threads, capacity=capacity, dedicated=m.dedicated, last_seen=now)
        self.executors[executor_id] = ex
        self.peers[peer] = ("executor", executor_id)
        log.info("executor %s registered: %s@%s, %d threads", executor_id[:8], m.user, m.host, m.threads)
        row = {"executor_id": executor_id, "name": m.name, "is_dedicated": m.dedicated,
               "is_connected": True, "accepting": True, "ping_time": now, "time_registered": now,
               "host": m.host, "usr_name": m.user, "threads": m.threads, "cpu_max": m.cpu_max,
               "num_cpus": m.num_cpus, "mem_max": m.mem_max, "os": m.os[:64], "arch": m.arch[:64]}
        actions.append(Record("executor", "upsert", row, executor_id))
        actions.append(Send(peer, p.Welcome(executor_id, self.settings.heartbeat_interval,
                                            self.settings.heartbeat_liveness)))
        actions += self.dispatch(now)
        return actions

    def on_heartbeat(self, peer: bytes, m: p.Heartbeat, now: float) -> list[Action]:
        """Any peer is alive (already noted); executors' figures are recorded."""
        kind = self.peers.get(peer)
        if kind is None:
            return [Send(peer, p.Refuse("unknown peer: register or open an application again"))]
        if kind[0] == "executor" and m.figures:
            f = m.figures
            values = {"ping_time": now}
            for name in ("cpu_usage", "cpu_avail", "cpu_totalusage", "pages_per_second"):
                if isinstance(f.get(name), (int, float)):
                    values[name] = float(f[name])
            if isinstance(f.get("mem_usage"), int):
                values["mem_usage"] = f["mem_usage"]
            return [Record("executor", "update", values, kind[1])]
        return []

    def on_availability(self, peer: bytes, m: p.Availability, now: float) -> list[Action]:
        """An idle-only executor's owner came back (or left): stop or resume assigning to it."""
        ex = self._executor_of(peer)
        if ex is None:
            return [Send(peer, p.Refuse("unknown executor: register again"))]
        ex.accepting = m.accepting
        log.info("executor %s %s work", ex.name, "accepts" if m.accepting else "stops taking")
        return [Record("executor", "update", {"accepting": m.accepting}, ex.executor_id)] + self.dispatch(now)

    def on_started(self, peer: bytes, m: p.Started, now: float) -> list[Action]:
        """A worker began an attempt: SCHEDULED → STARTED."""
        ex = self._executor_of(peer)
        if ex is None:
            return [Send(peer, p.Refuse("unknown executor: register again"))]
        t = ex.running.get(m.attempt_id)
        if t is None or t.state != ThreadState.SCHEDULED:
            return []
        self._move(t, ThreadState.STARTED)
        t.time_started = now
        return [Record("thread", "update", {"state": int(t.state), "time_started": now}, t.internal_id),
                Record("attempt", "update", {"time_started": now}, m.attempt_id)]

    def on_result(self, peer: bytes, m: p.Result, now: float) -> list[Action]:
        """An attempt finished: store the result, tell the application, refill the executor.

        A result for an attempt that was taken back (executor declared dead, timeout, cancel) is
        fenced out: recorded as ``fenced`` and otherwise ignored.
        """
        ex = self._executor_of(peer)
        if ex is None:
            return [Send(peer, p.Refuse("unknown executor: register again"))]
        t = ex.running.pop(m.attempt_id, None)
        if t is None or t.attempt_id != m.attempt_id or t.state not in (ThreadState.SCHEDULED, ThreadState.STARTED):
            self.fenced += 1
            log.info("fenced out a late result of attempt %d from executor %s", m.attempt_id, ex.name)
            return [Record("attempt", "update", {"outcome": "fenced", "time_finished": now}, m.attempt_id)]
        self._attempts.pop(m.attempt_id, None)
        ex.finished += 1
        self._move(t, ThreadState.FINISHED)
        t.time_finished = now
        if t.time_started is None:
            t.time_started = now
        t.result = m.page
        actions: list[Action] = [
            Record("thread", "update", {"state": int(t.state), "time_started": t.time_started,
                                        "time_finished": now, "error_kind": m.page.error_kind}, t.internal_id),
            Record("attempt", "update", {"outcome": "finished", "time_finished": now}, m.attempt_id),
        ]
        actions += self._deliver(t)
        actions += self.dispatch(now)
        return actions

    # -------------------------------------------------------------------------- applications

    def on_open(self, peer: bytes, m: p.OpenApplication, now: float) -> list[Action]:
        """A client creates an application, or reattaches to one after a restart."""
        old = self.peers.get(peer)
        if old and old[0] == "executor":
            return [Send(peer, p.Refuse("this connection is an executor's"))]
        actions: list[Action] = []
        app = self.applications.get(m.application_id) if m.application_id else None
        resumed = app is not None
        if app is None:
            app_id = m.application_id or self.new_id()
            app = Application(app_id, m.name, m.user, peer, now, last_seen=now)
            self.applications[app_id] = app
            actions.append(Record("application", "upsert",
                                  {"application_id": app_id, "state": int(app.state), "time_created": now,
                                   "usr_name": m.user, "application_name": m.name}, app_id))
        else:
            if app.peer is not None and app.peer != peer:
                self.peers.pop(app.peer, None)
            app.peer = peer
            app.last_seen = now
            if app.state == ApplicationState.STOPPED:
                app.state = ApplicationState.READY
                actions.append(Record("application", "update",
                                      {"state": int(app.state), "time_completed": None}, app.application_id))
        self.peers[peer] = ("client", app.application_id)
        log.info("application %s %s by %s (%s)", app.application_id[:8], "reattached" if resumed else "created",
                 m.user, m.name)
        actions.append(Send(peer, p.ApplicationOpened(app.application_id, resumed,
                                                      self.settings.heartbeat_interval,
                                                      self.settings.heartbeat_liveness)))
        for t in app.threads.values():
            if t.state == ThreadState.FINISHED:
                actions += self._deliver(t)
        return actions

    def on_submit(self, peer: bytes, m: p.Submit, now: float) -> list[Action]:
        """Queue grid threads. A thread id the application already has is not queued twice (a
        restarted client resubmits what it had in flight); if its result is waiting, it is sent."""
        app = self._application_of(peer, m.application_id)
        if app is None:
            return [Send(peer, p.Refuse(f"application {m.application_id} is not open on this connection"))]
        actions: list[Action] = []
        rows = []
        for spec in m.threads:
            existing = app.threads.get(spec.thread_id)
            if existing is not None:
                if existing.state == ThreadState.FINISHED:
                    actions += self._deliver(existing)
                continue
            t = GridThread(self._next_internal, app.application_id, spec.thread_id, spec.url, spec.depth,
                           spec.priority, spec.instruction, now, host=url_host(spec.url))
            self._next_internal += 1
            app.threads[spec.thread_id] = t
            self.queue.push(t)
            rows.append({"internal_thread_id": t.internal_id, "application_id": t.application_id,
                         "thread_id": t.thread_id, "state": int(t.state), "url": t.url[:2083],
                         "host": t.host[:255], "depth": t.depth, "priority": t.priority, "failed": False,
                         "attempts": 0, "time_submitted": now})
        actions.extend(Record("thread", "insert", row, row["internal_thread_id"]) for row in rows)
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
            actions.append(Record("thread", "update", {"state": int(t.state)}, t.internal_id))
        return actions

    def on_close(self, peer: bytes, m: p.CloseApplication, now: float) -> list[Action]:
        """The application is complete (or cancelled): abort what is left and stop it."""
        app = self._application_of(peer, m.application_id)
        if app is None:
            return [Send(peer, p.Refuse(f"application {m.application_id} is not open on this connection"))]
        actions = self._abort_application(app, now)
        app.state = ApplicationState.STOPPED
        actions.append(Record("application", "update", {"state": int(app.state), "time_completed": now},
                              app.application_id))
        log.info("application %s %s", app.application_id[:8], "cancelled" if m.cancel else "completed")
        return actions

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
        return []

    # -------------------------------------------------------------------------- dispatch

    def dispatch(self, now: float) -> list[Action]:
        """Assign READY threads to executors with free slots; return the Assign actions."""
        actions: list[Action] = []
        if not len(self.queue):
            return actions
        executors = [ex for ex in self.executors.values() if ex.free > 0]
        while executors and len(self.queue):
            ex = self._choose(executors)
            t = self.queue.pop()
            if t is None:
                break
            actions += self._assign(t, ex, now)
            if ex.free <= 0:
                executors.remove(ex)
        return actions

    def _choose(self, executors: list[Executor]) -> Executor:
        """The executor with the most free slots; ties broken round robin."""
        best = max(ex.free for ex in executors)
        tied = [ex for ex in executors if ex.free == best]
        self._round_robin += 1
        return tied[self._round_robin % len(tied)]

    def _assign(self, t: GridThread, ex: Executor, now: float) -> list[Action]:
        attempt_id = self._next_attempt
        self._next_attempt += 1
        self._move(t, ThreadState.SCHEDULED)
        t.attempt_id = attempt_id
        t.executor_id = ex.executor_id
        t.time_assigned = now
        t.attempts += 1
        ex.running[attempt_id] = t
        self._attempts[attempt_id] = t
        return [
            Send(ex.peer, p.Assign(attempt_id, t.application_id, t.thread_id, t.url, t.depth, t.instruction)),
            Record("thread", "update", {"state": int(t.state), "executor_id": ex.executor_id,
                                        "attempts": t.attempts}, t.internal_id),
            Record("attempt", "insert", {"attempt_id": attempt_id, "internal_thread_id": t.internal_id,
                                         "executor_id": ex.executor_id, "time_assigned": now,
                                         "outcome": "running"}, attempt_id),
        ]

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
        t.state = check_transition(t.name, t.state, new)

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
        app = self.applications.get(t.application_id)
        if app is None or app.peer is None:
            return []
        return [Send(app.peer, p.ThreadDone(t.application_id, t.thread_id, t.executor_id, t.attempts,
                                            t.failed, t.result))]

    def _lose_executor(self, ex: Executor, now: float, outcome: str, *, record: bool = True,
                       count: bool = True) -> list[Action]:
        """Disconnect ``ex``; its attempts are taken back (``outcome`` recorded on each)."""
        actions: list[Action] = []
        ex.connected = False
        if ex.peer is not None:
            self.peers.pop(ex.peer, None)
        for attempt_id, t in list(ex.running.items()):
            actions += self._take_back(t, now, outcome, count=count)
        ex.running.clear()
        if record:
            actions.append(Record("executor", "update", {"is_connected": False}, ex.executor_id))
        return actions

    def _take_back(self, t: GridThread, now: float, outcome: str, *, count: bool = True) -> list[Action]:
        """Take an attempt back from its executor: READY again, or failed after ``max_attempts``."""
        actions: list[Action] = [Record("attempt", "update", {"outcome": outcome, "time_finished": now},
                                        t.attempt_id)]
        self._attempts.pop(t.attempt_id, None)
        if count:
            t.lost += 1
        t.time_started = None
        if t.lost >= self.settings.max_attempts:
            log.error("%s (%s) failed: %d attempts lost (poison)", t.name, t.url, t.lost)
            self._move(t, ThreadState.FINISHED)
            t.failed = True
            t.time_finished = now
            actions.append(Record("thread", "update", {"state": int(t.state), "failed": True,
                                                       "time_finished": now, "error_kind": "poison"},
                                  t.internal_id))
            actions += self._deliver(t)
        else:
            self._move(t, ThreadState.READY)
            t.executor_id = None
            self.queue.push(t)
            actions.append(Record("thread", "update", {"state": int(t.state), "executor_id": None,
                                                       "time_started": None}, t.internal_id))
        return actions

    def _abort_application(self, app: Application, now: float) -> list[Action]:
        actions: list[Action] = []
        for t in list(app.threads.values()):
            if t.state in (ThreadState.SCHEDULED, ThreadState.STARTED):
                ex = self.executors.get(t.executor_id or "")
                if ex is not None:
                    ex.running.pop(t.attempt_id, None)
                    if ex.peer is not None:
                        actions.append(Send(ex.peer, p.Cancel(t.attempt_id)))
                actions.append(Record("attempt", "update", {"outcome": "cancelled", "time_finished": now},
                                      t.attempt_id))
            self.queue.discard(t)
            self._move(t, ThreadState.DEAD)
            actions.append(Record("thread", "update", {"state": int(t.state)}, t.internal_id))
        app.threads.clear()
        return actions

    # -------------------------------------------------------------------------- restart

    def restore(self, applications: list[dict], threads: list[dict], now: float) -> list[Action]:
        """Reload state after a manager restart from the database rows.

        ``applications``: rows of non-stopped applications; ``threads``: rows of threads not DEAD.
        Every such thread becomes READY again (a FINISHED one's result was only in memory, so it
        is fetched again; the application stores each page once by fingerprint). Executors are
        not restored: they register again when they notice the new manager.
        """
        actions: list[Action] = []
        for row in applications:
            app = Application(row["application_id"], row["application_name"], row["usr_name"], None,
                              now, state=ApplicationState(row["state"]), last_seen=now)
            self.applications[app.application_id] = app
        for row in threads:
            app = self.applications.get(row["application_id"])
            if app is None:
                continue
            t = GridThread(row["internal_thread_id"], app.application_id, row["thread_id"], row["url"],
                           row["depth"], row["priority"], None, now, host=row["host"],
                           attempts=row["attempts"])
            app.threads[t.thread_id] = t
            self.queue.push(t)
            actions.append(Record("thread", "update", {"state": int(ThreadState.READY), "executor_id": None,
                                                       "time_started": None}, t.internal_id))
        log.info("restored %d applications and %d unfinished threads", len(applications), len(threads))
        return actions

    def stats(self) -> dict:
        """Counts for logs and the dashboard: executors, applications, threads by state."""
        by_state = {s.name: 0 for s in ThreadState}
        for app in self.applications.values():
            for t in app.threads.values():
                by_state[t.state.name] += 1
        return {"executors": sum(ex.connected for ex in self.executors.values()),
                "applications": len(self.applications), "queued": len(self.queue), "threads": by_state,
                "fenced": self.fenced}
