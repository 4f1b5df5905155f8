"""The manager's I/O shell: a ZeroMQ ROUTER loop that feeds :class:`ManagerCore` and carries out
its actions (messages to peers, records to SQL through the :class:`Recorder`).

Peer input is never trusted: frames that do not decode, and messages whose values do not fit
the manager's tables (:func:`check_limits`: NUL characters, over-long names and URLs,
out-of-range numbers), are logged and dropped; a peer that sends too many of them, is refused too
often, or floods the manager is blocked for a while (:class:`PeerGuard`). The loop never dies on
what a peer sends, and ``MAXMSGSIZE`` makes ZeroMQ drop the connection of a peer sending an
oversized message. Of a peer that has not said hello (registered, or opened an application) the
loop reads at most :data:`gridcrawl.protocol.MAX_HELLO_BYTES` of a message: a larger body is
refused by its length, before it is decoded (decoding 60 MiB of empty maps took 3.7 GB and
over 10 s).

Security (see docs/security.md): logins and permissions are checked by the core through the
injected :meth:`gridcrawl.auth.UserStore.authenticate`; with CURVE keys the socket is a CURVE
server, pyzmq's ZAP handler accepts only the keys of the allow-list directory, and the name of a
peer's key (the message's ``User-Id`` property) is its identity when no login is required.
"""

from __future__ import annotations

import hashlib
import logging
import os
import math
import queue
import re
import threading
import time

import msgspec
import sqlalchemy as sa
import zmq

from gridcrawl import models, protocol
from gridcrawl.db import from_timestamp, init_schema, shown_url, to_timestamp
from gridcrawl.errors import MessageTooLarge
from gridcrawl.settings import Settings
from gridcrawl.states import ApplicationState, ThreadState
from gridcrawl.transport import apply_curve_server, is_loopback_endpoint, make_socket, reachable, receive, send
from gridcrawl.manager import dashboard
from gridcrawl.manager.core import LATE_ATTEMPTS, ControlError, ManagerCore, Send, Strike
from gridcrawl.manager.lease import (LEASE_FAILURE_REPEAT, Lease, LeaseHeld, describe_holder,  # noqa: F401  (LeaseHeld: for the CLI)
                                     holder_name)
from gridcrawl.manager.recorder import Recorder, WriterProcess
from gridcrawl.auth import UserStore
from gridcrawl.keys import AllowList, ServerKeys, start_authenticator

log = logging.getLogger("gridcrawl.manager")

BATCH = 2000  # messages handled before the loop looks at timers again
SEND_EVERY = 64  # messages handled between two sends of the outbox (batched per peer)
SNAPSHOT_INTERVAL = 0.5  # seconds between dashboard snapshots of the core
SNAPSHOT_READERS = 30.0  # seconds snapshots go on being built after the last read
HOSTILE_LOG_EVERY = 60.0  # seconds between two log lines about one peer's hostile messages
BAD_PEER_LOG_LINES = 20  # log lines about bad or hostile messages, all peers together, ...
BAD_PEER_LOG_WINDOW = 60.0  # ... per this many seconds (a storm of fresh connections is one peer each)
REVOKE_EVERY = 1.0  # seconds between two checks that connected peers' users and keys are still allowed
BEHIND_LOG_EVERY = 10.0  # seconds between two log lines about the loop lagging behind its input



#: The key of :func:`peer_label` (random per process).
_PEER_KEY = os.urandom(16)


def peer_label(peer: bytes) -> str:
    """How logs name a peer's ZeroMQ routing id: 8 hex digits of a keyed hash, the same for one
    peer throughout a manager's run. Not the id itself: the ids the ROUTER gives count up from
    ``rand()`` (seeded at random: :func:`gridcrawl.transport.seed_routing_ids`), and a peer that
    knows the next one can claim it, which aborts libzmq 4.3 (an assertion in its ROUTER)."""
    return hashlib.blake2s(peer, key=_PEER_KEY, digest_size=4).hexdigest()


class ControlRequest:
    """An operator action asked from another thread (the dashboard's HTTP thread), carried out by
    the server loop: ``application_id``, ``action``, ``user``, ``owner`` (act only on that user's
    applications, :meth:`ManagerCore.control`); :attr:`result` (a dict) or :attr:`error` (a
    message) is set before :attr:`done` is."""

    def __init__(self, application_id: str, action: str, user: str | None, owner: str | None = None) -> None:
        self.application_id, self.action, self.user, self.owner = application_id, action, user, owner
        self.result: dict | None = None
        self.error: str | None = None
        self.done = threading.Event()


def application_figures(conn, application_ids: list[str]) -> dict[str, dict]:
    """Each application's figures so far as the manager's records have them, for a manager that
    starts on the database (the dashboard's done, errors and crawl seconds): application id ->
    ``{"done", "errors", "first_submitted", "last_finished"}`` (counts; times as Unix seconds or
    None); an application without threads is left out. Threads done are the DEAD ones that
    finished (the others run again, and count when they end); errors are counted as the live
    count (:meth:`ManagerCore._remember <gridcrawl.manager.core.ManagerCore._remember>`) counts
    them: failed, or an error kind other than robots.txt's disallow
    (:data:`gridcrawl.protocol.DISALLOWED`)."""
    if not application_ids:
        return {}
    t = models.thread
    dead = t.c.state == int(ThreadState.DEAD)
    error = sa.or_(t.c.failed == sa.true(), sa.and_(t.c.error_kind.is_not(None),
                                                     t.c.error_kind.not_in(protocol.DISALLOWED)))
    rows = conn.execute(
        sa.select(t.c.application_id,
                  sa.func.sum(sa.case((sa.and_(dead, t.c.time_finished.is_not(None)), 1), else_=0)).label("done"),
                  sa.func.sum(sa.case((sa.and_(dead, error), 1), else_=0)).label("errors"),
                  sa.func.min(t.c.time_submitted).label("first_submitted"),
                  sa.func.max(t.c.time_finished).label("last_finished"))
        .where(t.c.application_id.in_(application_ids)).group_by(t.c.application_id))
    return {r.application_id: {"done": int(r.done or 0), "errors": int(r.errors or 0),
                               "first_submitted": to_timestamp(r.first_submitted),
                               "last_finished": to_timestamp(r.last_finished)} for r in rows}


class ManagerServer:
    """A running manager: ``ManagerServer(settings, bind, engine).serve(stop)``.

    ``bind`` is a ZeroMQ endpoint (``tcp://*:9000``; port 0 picks a free port, see
    :attr:`endpoint`); ``engine`` the manager database (its schema is created if missing, and
    unfinished work is restored from it); ``journal`` the file records wait in while the database
    is down (see :class:`Recorder`; replayed here first). Raises ``zmq.ZMQError`` if the address
    is in use and :class:`~gridcrawl.manager.lease.LeaseHeld` if another manager runs on the database.
    ``record_process``: write the records from a process of their own (:class:`WriterProcess`,
    Linux only; the programs do, an embedding that already runs threads should not fork).
    """

    def __init__(self, settings: Settings, bind: str, engine: sa.engine.Engine, *,
                 curve: ServerKeys | None = None, require_login: bool = False, journal=None,
                 standby: bool = False, advertise: str | None = None, record_process: bool = False) -> None:
        self.settings = settings
        self.engine = engine
        self.journal = journal
        self.standby = standby
        init_schema(engine, models.manager_metadata, models.manager_meta)
        self.users = UserStore(engine, require_login=require_login)
        if require_login and not self.users.has_users():  # (each refusal says only "unknown user or wrong password")
            url = shown_url(engine.url)
            log.warning("--require-login and no user in %s yet: every executor and client is refused until one is "
                        "added (gridcrawl-manager users add NAME --group Executors --db %s)", url, url)
        # the records' SQL writes in a process of their own (forked now, before any thread or
        # ZeroMQ context of this one); without it the recorder's thread writes them
        self.writer: WriterProcess | None = None
        if record_process and WriterProcess.possible(engine):
            try:
                self.writer = WriterProcess(engine)
            except OSError as exc:  # no more processes (ulimit -u), no memory
                log.warning("could not start the record writer process (%s); the manager writes its records itself",
                            exc)
        self.guard = PeerGuard(rate=settings.peer_rate, burst=settings.peer_burst, max_strikes=settings.peer_max_strikes,
                               window=settings.peer_strike_window, block_seconds=settings.peer_block_seconds)
        self.curve = curve
        self.context = zmq.Context()
        self.authenticator = None
        self.allow_list: AllowList | None = None
        # peer -> the name of the CURVE key it said hello with (register, open): cut when the
        # key leaves the allow-list directory (ManagerCore.revoke)
        self._peer_keys: dict[bytes, str] = {}
        self._next_revoke = 0.0
        # (user, permission) -> whether it still holds, as the login-check thread last read it
        # (_revoke: SQL off the loop, which a database that does not answer would hold up)
        self._logins_read: dict[tuple[str, str], bool] = {}
        self._login_check: threading.Thread | None = None
        if curve is not None:  # the ZAP handler must run before the socket binds
            self.allow_list = AllowList(curve.allow_dir)
            for problem in self.allow_list.problems():
                log.warning("%s", problem)
            self.authenticator = start_authenticator(self.context, self.allow_list)
        elif not is_loopback_endpoint(bind):
            log.warning("*** listening on %s WITHOUT CURVE: traffic (passwords included) is unencrypted and any "
                        "host that reaches this port can connect; use --curve-secret and --curve-allow ***", bind)
        self.socket = make_socket(self.context, zmq.ROUTER, settings)
        if curve is not None:
            apply_curve_server(self.socket, curve.public, curve.secret)
        try:
            if bind.endswith(":0"):
                port = self.socket.bind_to_random_port(bind[:-2])
                self.endpoint = f"{bind[:-2]}:{port}"
            else:
                self.socket.bind(bind)
                self.endpoint = bind
        except zmq.ZMQError:
            self._close_sockets()
            raise
        # the address peers reach this manager at: what a standby names in its refusals
        self.address = advertise or advertised_endpoint(self.endpoint)
        # one active manager per database: the lease (gridcrawl.manager.lease). Without
        # ``standby`` a second manager refuses to start (LeaseHeld, naming the holder); with it,
        # it waits as a hot standby and takes over when the active manager's lease expires.
        self.lease = Lease(engine, holder_name(self.address), settings.lease_seconds or settings.peer_timeout,
                           address=self.address)
        self.recorder: Recorder | None = None
        self.core: ManagerCore | None = None
        self.active_since: float | None = None
        self._outbox: dict[bytes, list[protocol.Message]] = {}  # messages waiting to be sent, per peer
        self._sent_at: dict[bytes, float] = {}  # peer -> time.time() of the last message sent to it
        self.malformed: dict[bytes, int] = {}
        self._bad_peer_log = [float("-inf"), 0, 0]  # see _may_log_bad_peer
        self._hostile_log: dict[bytes, list] = {}  # peer -> [time of the last log line, count since]
        # time.time() when the loop last found its socket empty (had read every message sent
        # before): peers' silence is judged up to then (ManagerCore.tick's heard_all)
        self.heard_all = time.time()
        # the peers read from since _round_start (time.time()): one read again closes a round of
        # ZeroMQ's fair queuing, which had visited every other peer with a message waiting (_heard_all)
        self._round: set[bytes] = set()
        self._round_start = self.heard_all
        self._behind_logged = float("-inf")
        self._due = time.time()  # when the loop's current pass ends its wait for input, at the latest
        self._stalled_at = float("-inf")  # time.time() when the loop was last found stalled
        # Hand-off to the dashboard's HTTP thread, which never touches the core: the loop replaces
        # ``snapshot`` (a fresh dict, never mutated afterwards) every SNAPSHOT_INTERVAL seconds,
        # and carries out the ControlRequests the HTTP thread puts on ``controls``.
        self.snapshot: dict | None = None
        self._snapshot_read = float("-inf")  # time.monotonic() of the last latest_snapshot() call
        self._snapshot_wanted: queue.Queue[threading.Event] = queue.Queue()  # readers waiting for a fresh one
        self.controls: queue.Queue[ControlRequest] = queue.Queue()
        try:
            decision = self.lease.try_acquire()
            if decision.action != "refuse":
                self._activate()
            elif not standby:
                url = shown_url(engine.url)
                raise LeaseHeld(f"another manager runs on the database {url}: its lease is {decision.reason}")
        except BaseException:
            self._close_sockets()
            raise

    def _close_sockets(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.socket.close(linger=0)
        if self.authenticator is not None:
            self.authenticator.stop()
        self.context.term()

    def _activate(self) -> None:
        """This manager holds the lease now: replay its journal if no other manager held the
        lease since it was written, restore the grid from the database, start recording."""
        previous = self.lease.previous
        self.recorder = Recorder(self.engine, self.settings.record_interval, self.journal, self.writer)
        journal_epoch = self.recorder.journal_epoch()
        prior = previous.epoch if previous is not None else 0
        if journal_epoch is not None and journal_epoch != prior:
            # another manager ran (epoch moved on) and restored from the database: these are stale
            # (an empty journal is no news: "0 of its records dropped" was a WARNING at every take-over
            # by a manager that had been active before)
            if dropped := self.recorder.abandon(stale=True):
                log.warning("the journal %s is from lease epoch %d, another manager has held the lease since "
                            "(epoch %d): %d of its records dropped", self.journal, journal_epoch, prior, dropped)
            self.recorder = Recorder(self.engine, self.settings.record_interval, self.journal, self.writer)
        self.recorder.replay()  # records an earlier manager could not write, before the state is read
        self.recorder.set_journal_epoch(self.lease.epoch)
        self.recorder.lease = self.lease  # every batch of records: WHERE epoch = mine
        self.core = self._restore()
        self.active_since = time.time()
        self.snapshot = None  # a standby's (the loop builds the active one when it is read)
        log.info("manager active at %s (lease epoch %d)", self.address, self.lease.epoch)

    def _restore(self) -> ManagerCore:
        """Build the core from the database: ids continue, unfinished threads are READY again."""
        t, a, x = models.thread, models.application, models.attempt
        with self.engine.begin() as conn:
            next_internal = (conn.execute(sa.select(sa.func.max(t.c.internal_thread_id))).scalar() or 0) + 1
            # attempts whose late result is fenced, not struck as a forgery: those running when the
            # previous manager stopped, and the latest it had taken back (an executor paused
            # across the restart sends their results then); each holds its host's slot while its
            # fetch may go on (ManagerCore.restore)
            rows = conn.execute(
                sa.select(x.c.attempt_id, x.c.executor_id, x.c.outcome, t.c.host, x.c.time_started, x.c.time_finished)
                .outerjoin(t, t.c.internal_thread_id == x.c.internal_thread_id).where(x.c.outcome.in_(("running", "lost")))
                .order_by(x.c.time_assigned.desc()).limit(LATE_ATTEMPTS)).all()[::-1]
            # since when each may be fetching: its start (one taken back before it started: then)
            running = [(r.attempt_id, r.executor_id, r.host,
                        to_timestamp(r.time_started or (r.time_finished if r.outcome == "lost" else None))) for r in rows]
            apps = [dict(r._mapping) for r in conn.execute(
                sa.select(a).where(a.c.state != int(ApplicationState.STOPPED)))]
            figures = application_figures(conn, [r["application_id"] for r in apps])
            for row in apps:
                row["time_created"] = to_timestamp(row["time_created"])
                row.update(figures.get(row["application_id"], {}))  # (none: Application's defaults)
            threads = [dict(r._mapping) for r in conn.execute(
                sa.select(t).join(a, a.c.application_id == t.c.application_id)
                .where(t.c.state != int(ThreadState.DEAD), a.c.state != int(ApplicationState.STOPPED))
                .order_by(t.c.internal_thread_id))]
            e = models.executor.c
            known = conn.execute(sa.select(e.executor_id, e.usr_name, e.name, e.host)  # the latest, newest first
                                 .order_by(e.time_registered.desc()).limit(self.settings.keep_departed)).all()[::-1]
            conn.execute(models.executor.update().values(is_connected=False))
            # (lost when the previous manager stopped; this start is when that is known, as a
            # running manager records the time it takes an attempt back)
            conn.execute(x.update().where(x.c.outcome == "running").values(
                outcome="lost", time_finished=sa.func.coalesce(x.c.time_finished, from_timestamp(time.time()))))
        core = ManagerCore(self.settings, next_internal_id=next_internal, authenticate=self.users.authenticate,
                           peer_present=lambda peer: reachable(self.socket, peer), address=self.address)
        core.defer_dispatch = True  # refills once per flush of the outbox (see _flush)
        core.remember_executors([(r.executor_id, r.usr_name, r.name, r.host) for r in known])
        self._carry_out(core.restore(apps, threads, time.time(), running))
        return core

    def _carry_out(self, actions, flush: bool = True, strike: bool = True) -> None:
        """Events (:mod:`gridcrawl.manager.events`) go to the recorder; messages wait in the outbox, sent by :meth:`_flush`
        (now, unless ``flush`` is False: the drain loop sends once per few dozen messages, so
        that the assigns, starts and results of one pass travel batched). A refusal is a strike
        against its peer when ``strike`` is True."""
        quiet = None
        events = []
        for action in actions:
            kind = type(action)
            if kind is Send:
                if type(action.message) is protocol.Heartbeat:
                    # any message is a heartbeat (Paranoid Pirate): skip peers sent one lately
                    if quiet is None:
                        quiet = self._quiet_since()
                    if self._sent_at.get(action.peer, float("-inf")) > quiet:
                        continue
                if strike and type(action.message) is protocol.Refuse:
                    if events:  # a strike may forget the peer: its records come after these
                        self.recorder.add_all(events)
                        events = []
                    self._strike(action.peer, f"refused: {action.message.reason}")
                self._outbox.setdefault(action.peer, []).append(action.message)
            elif kind is Strike:
                if events:
                    self.recorder.add_all(events)
                    events = []
                self._hostile(action.peer, action.why)
            else:
                events.append(action)
        if events:
            self.recorder.add_all(events)
        if flush:
            self._flush()

    def _quiet_since(self) -> float:
        """A peer sent a message after this time (POSIX s) needs no heartbeat now: half a
        heartbeat interval ago, so that the longest gap it sees, 1.5 intervals, stays within
        its liveness (-inf with a liveness of 1: every peer gets every heartbeat). Prunes the
        send times of peers the core has forgotten."""
        s = self.settings
        if len(self._sent_at) > 2 * len(self.core.peers) + 100:
            self._sent_at = {peer: t for peer, t in self._sent_at.items() if peer in self.core.peers}
        return time.time() - s.heartbeat_interval / 2 if s.heartbeat_liveness >= 2 else float("-inf")

    def _flush(self) -> None:
        """Send every message of the outbox, batched per peer (:func:`gridcrawl.protocol.batch`),
        after the dispatch the ``results`` handled since the last flush left due
        (:meth:`ManagerCore.dispatch_due`)."""
        if self.core is not None:
            self._carry_out(self.core.dispatch_due(time.time()), flush=False)
        self.recorder.sync_journal()  # write-ahead: the records before the messages they go with
        outbox, self._outbox = self._outbox, {}
        now, sent_at = time.time(), self._sent_at
        for peer, messages in outbox.items():
            sent_at[peer] = now
            for message in (protocol.batch(messages) if len(messages) > 1 else messages):
                try:
                    if not send(self.socket, message, peer):
                        log.debug("peer %s gone; dropped %s", peer_label(peer), message.TYPE)
                except MessageTooLarge as exc:  # one job or page alone: its thread times out, is retried
                    log.error("not sent to peer %s: %s", peer_label(peer), exc)

    def serve(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set; then say goodbye to peers and flush the records.

        A standby (``standby=True``, lease held by another manager) answers every peer with a
        refusal naming the active manager until the lease expires, then takes it over. An active
        manager whose lease is taken over (it was paused or cut off past the lease) is fenced: its
        records are dropped, and it becomes a standby (or, without ``standby``, stops).
        """
        try:
            while not stop.is_set():
                if self.core is None and not self._wait_as_standby(stop):
                    break
                self._serve_active(stop)
                if stop.is_set() and not self.lease.lost.is_set() and not self.recorder.fenced.is_set():
                    break
                self._step_down()  # the lease was taken over: fenced out
                if not self.standby:
                    break
        finally:
            if self.core is not None:
                for peer in list(self.core.peers):
                    send(self.socket, protocol.Bye("manager shutting down"), peer)
                self._carry_out(self.core.shutdown())
                self.recorder.close()
                self.lease.release()
            if self.writer is not None:
                self.writer.close()
            self.socket.close(linger=200)
            if self.authenticator is not None:
                self.authenticator.stop()
            self.context.term()
            log.info("manager stopped")

    def _serve_active(self, stop: threading.Event) -> None:
        """The active manager's loop: until ``stop`` or the lease is lost."""
        self.recorder.start()
        self.lease.start()
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        if hasattr(stop, "fileno"):  # a StopEvent: a stop wakes the poll at once
            poller.register(stop, zmq.POLLIN)
        tick_every = min(0.25, self.settings.heartbeat_interval / 4)
        next_tick = 0.0
        self.heard_all = self._due = time.time()
        log.info("manager listening on %s%s", self.endpoint,
                 f" (this machine only: executors and clients on other hosts cannot connect; --bind "
                 f"tcp://*:{self.endpoint.rpartition(':')[2]} lets them)"
                 if self.endpoint.startswith("tcp://") and is_loopback_endpoint(self.endpoint) else "")
        while not stop.is_set() and not self.lease.lost.is_set() and not self.recorder.fenced.is_set():
            wakeup = self.core.queue.next_wakeup()
            timeout = max(0.0, min(next_tick, wakeup if wakeup is not None else next_tick) - time.time())
            self._pass_starts(timeout)
            if poller.poll(timeout * 1000):
                self._drain()
            else:  # nothing came during the wait: every message sent before now has been read
                self._heard_all()
            now = time.time()
            if wakeup is not None and now >= wakeup:  # a polite host or a retry may start now
                self._carry_out(self.core.dispatch(now))
            if now >= next_tick:
                self._note_backlog(now)
                self.lease.overdue()
                self._carry_out(self.core.tick(now, self.heard_all))
                if now >= self._next_revoke:
                    self._next_revoke = now + REVOKE_EVERY
                    self._revoke(now)
                self.guard.prune(now)
                next_tick = now + tick_every
            self._serve_dashboard(now)

    def _step_down(self) -> None:
        """The lease was taken over: drop the grid state and every unwritten record (they belong
        to a lost epoch), and become a standby. Peers are told where the active manager is when
        they next speak."""
        self.lease.lost.set()
        self.lease.release()  # stops the renewal thread; the row is the new holder's
        self.recorder.abandon()  # (its flusher may have dropped them already, on finding the lease gone)
        log.error("fenced out: another manager took the lease over (this manager's epoch %s); %d unwritten "
                  "records dropped; %s", self.lease.epoch, self.recorder.dropped,
                  "now a standby" if self.standby else "stopping (no --standby)")
        self.core, self.recorder, self.active_since, self._outbox, self.snapshot = None, None, None, {}, None
        self.lease = Lease(self.engine, self.lease.holder, self.lease.seconds, address=self.address)

    def _wait_as_standby(self, stop: threading.Event) -> bool:
        """Answer every peer with a refusal naming the active manager, and try the lease every
        half heartbeat interval; True once this manager holds it (it is active), False on ``stop``."""
        held = self.lease.previous  # as the try at start read it (None after a fencing: a new Lease)
        log.info("standby manager at %s: waiting for the lease%s", self.address,
                 f", held by the manager {describe_holder(held.holder)} (lease epoch {held.epoch})"
                 if held is not None and held.holder else "")
        active: str | None = None
        reads = True  # whether the last look at the lease read it (the database answered)
        next_try = 0.0
        # the database as this standby sees it: its last answer, until when an expired lease is
        # left to its holder, the last WARNING of an outage (monotonic s)
        answered, grace_until, said = time.monotonic(), -math.inf, -math.inf
        while not stop.is_set():
            now = time.time()
            if now >= next_try:
                next_try = now + self.settings.heartbeat_interval / 2
                try:  # one SELECT while the lease is live; the conditional UPDATE only when it is not
                    row = self.lease.previous = self.lease.read()
                    clock = self.lease.now()  # the server's clock, as the lease is judged by it
                    mono = time.monotonic()
                    alive = self.lease.alive(row.holder) if row is not None and row.holder else None
                    if mono - answered > self.lease.seconds / 2 and alive is not False:
                        # the database did not answer for a while (it failed, or hung): its holder could
                        # not renew either, so an expiry meanwhile says nothing of whether it runs; it
                        # gets one lease length to renew (a take-over at the first moment the database
                        # answered again dropped the work the active manager held: a third of a
                        # crawl's pages were fetched twice)
                        grace_until = mono + self.lease.seconds
                        log.warning("standby: the database answers again after %.1f s; the active manager has "
                                    "%.1f s to renew its lease", mono - answered, self.lease.seconds)
                        said = -math.inf
                    answered = mono
                    live = (row is not None and row.holder and (row.expires_at > clock or mono < grace_until)
                            and alive is not False)  # a dead holder on this host: now
                    decision = None if live else self.lease.try_acquire(clock)
                    reads = True
                except sa.exc.SQLAlchemyError as exc:
                    reads = False
                    mono = time.monotonic()
                    if mono - said >= LEASE_FAILURE_REPEAT:  # once, then once a minute: not twice a second
                        said = mono
                        log.warning("standby: the database does not answer (%s); trying every %.1f s",
                                    str(exc).splitlines()[0], self.settings.heartbeat_interval / 2)
                    decision = None
                if decision is not None and decision.action != "refuse":
                    log.warning("taking over as the active manager (lease epoch %d; previous holder: %s)",
                                self.lease.epoch,
                                describe_holder(self.lease.previous.holder if self.lease.previous else None))
                    self._activate()
                    return True
                row = self.lease.previous
                # an expired lease is about to be ours: peers wait here rather than go elsewhere. Not
                # while the database does not answer this standby: the lease as last read expires
                # then though its holder renews it, and naming itself kept peers waiting here (an
                # executor with a long --connect-timeout for ever) while the active manager served;
                # the holder it last read is the best it knows
                if row is not None and not reads:
                    active = row.address
                else:
                    active = self.address if row is None or row.expires_at <= self.lease.now() else row.address
                self.snapshot = self._standby_snapshot(now, active)
            if not self.socket.poll(100):
                continue
            while True:
                try:
                    frames = self.socket.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if len(frames) > 1 and self.guard.admit(frames[0], now):
                    send(self.socket, protocol.Refuse(f"standby manager; the active manager is {active or 'unknown'}",
                                                      active=active), frames[0])
        return False

    def _serve_dashboard(self, now: float) -> None:
        """Carry out queued operator requests; refresh :attr:`snapshot` when it is due."""
        while True:
            try:
                request = self.controls.get_nowait()
            except queue.Empty:
                break
            try:
                actions, request.result = self.core.control(request.application_id, request.action, now,
                                                            user=request.user, owner=request.owner)
                self._carry_out(actions)
            except ControlError as exc:
                request.error = str(exc)
            except Exception as exc:  # a bug of ours must not take the grid down
                log.exception("operator request %s %s failed", request.action, request.application_id)
                request.error = f"internal error: {exc}"
            request.done.set()
        # a snapshot walks every thread: build them only while someone reads them (the dashboard)
        waiting = []
        while True:
            try:
                waiting.append(self._snapshot_wanted.get_nowait())
            except queue.Empty:
                break
        if (waiting or time.monotonic() - self._snapshot_read < SNAPSHOT_READERS) and \
                (self.snapshot is None or now - self.snapshot["time"] >= SNAPSHOT_INTERVAL):
            snapshot = dashboard.snapshot(self.core, now)
            snapshot["manager"] = {"address": self.address, "role": "active", "epoch": self.lease.epoch,
                                   "since": self.active_since, "active": self.address}
            self.snapshot = snapshot
        for event in waiting:
            event.set()

    def _standby_snapshot(self, now: float, active: str | None) -> dict:
        """What the dashboard of a standby shows: an empty grid (a standby keeps no grid state)
        whose ``manager`` says so and names the ``active`` manager's address (None: unknown)."""
        return dashboard.empty_snapshot(now, {"address": self.address, "role": "standby", "epoch": None,
                                              "since": None, "active": active})

    def latest_snapshot(self, wait: float = 2.0) -> dict | None:
        """The newest snapshot of the core with its ``age`` (seconds since it was taken; any
        thread may call this; never mutate the result).

        When the newest is older than ``SNAPSHOT_INTERVAL`` seconds (or there is none yet), the
        loop is asked for a fresh one and this waits up to ``wait`` seconds for it. The loop also
        refreshes it every ``SNAPSHOT_INTERVAL`` seconds while it is read, and stops
        ``SNAPSHOT_READERS`` seconds after the last read. None only if the loop did not answer.
        """
        self._snapshot_read = time.monotonic()
        snapshot = self.snapshot
        standby = snapshot is not None and snapshot["manager"]["role"] == "standby"  # refreshed by its own loop
        if not standby and (snapshot is None or time.time() - snapshot["time"] >= SNAPSHOT_INTERVAL):
            built = threading.Event()
            self._snapshot_wanted.put(built)
            built.wait(wait)
            snapshot = self.snapshot
        if snapshot is None:
            return None
        return {**snapshot, "age": max(0.0, time.time() - snapshot["time"])}

    def request_control(self, application_id: str, action: str, user: str | None = None,
                        timeout: float = 5.0, owner: str | None = None) -> ControlRequest:
        """Ask the server loop to pause/resume/cancel an application (any thread may call this;
        ``owner``: only an application of that user); wait up to ``timeout`` seconds. The
        returned request has ``result`` or ``error`` set, or neither if the loop did not answer
        in time."""
        request = ControlRequest(application_id, action, user, owner)
        self.controls.put(request)
        request.done.wait(timeout)
        return request

    def _may_log_bad_peer(self, now: float) -> bool:
        """Whether one more line about a bad or hostile message may be logged: at most
        ``BAD_PEER_LOG_LINES`` per ``BAD_PEER_LOG_WINDOW`` seconds over all peers (each peer's
        own limits count per connection, and a storm of fresh connections is a new peer each);
        the first line of a window says how many the previous one left out."""
        budget = self._bad_peer_log  # [window start, lines logged, lines left out]
        if now - budget[0] >= BAD_PEER_LOG_WINDOW:
            if budget[2]:
                log.warning("%d more lines about bad or hostile messages were not logged in %.0f s",
                            budget[2], BAD_PEER_LOG_WINDOW)
            budget[:] = [now, 0, 0]
        if budget[1] >= BAD_PEER_LOG_LINES:
            budget[2] += 1
            return False
        budget[1] += 1
        return True

    def _hostile(self, peer: bytes, why: str) -> None:
        """A peer sent something only a hostile or broken peer sends (a result for an attempt not
        its own): a strike, logged at most once per peer per ``HOSTILE_LOG_EVERY`` seconds with
        the count since the last line."""
        now = time.time()
        entry = self._hostile_log.get(peer)
        if entry is None:
            if len(self._hostile_log) > 10_000:
                self._hostile_log.clear()
            entry = self._hostile_log[peer] = [float("-inf"), 0]
        entry[1] += 1
        if now - entry[0] >= HOSTILE_LOG_EVERY and self._may_log_bad_peer(now):
            log.warning("peer %s: %d hostile messages dropped (last: %s)", peer_label(peer), entry[1], why)
            entry[0], entry[1] = now, 0
        self._strike(peer, why)

    def _strike(self, peer: bytes, why: str) -> None:
        """Count a bad message (or a refusal) against ``peer``; block it when it has too many."""
        now = time.time()
        if self.guard.strike(peer, now):
            log.warning("peer %s blocked for %.0f s: %d bad or refused messages within %.0f s (last: %s)",
                        peer_label(peer), self.guard.block_seconds, self.guard.max_strikes, self.guard.window, why)
            self._forget(peer, now, "blocked: too many bad messages")

    def _forget(self, peer: bytes, now: float, reason: str) -> None:
        """Drop what the core knows of ``peer`` (as if it said bye) and tell it why."""
        if peer in self.core.peers:
            try:
                self._carry_out(self.core.handle(peer, protocol.Bye(reason), now))
            except Exception:
                log.exception("forgetting peer %s failed", peer_label(peer))
        send(self.socket, protocol.Bye(reason), peer)

    def _revoke(self, now: float) -> None:
        """Cut the peers of users removed (or without their permission now) and the peers
        whose CURVE key left the allow-list directory since they said hello
        (:meth:`ManagerCore.revoke`). The users are read by a thread of its own (one check at a
        time; the loop goes by the last one's answers), so a database that does not answer, or
        hangs, cuts no one and never holds the loop up: its errors are the recorder's and the
        lease's to report."""
        core = self.core
        revoked: dict[bytes, str] = {}
        if self._peer_keys:
            self._peer_keys = {peer: key for peer, key in self._peer_keys.items() if peer in core.peers}
            allowed = self.allow_list.names()  # (as the ZAP handler reads it: a directory gone allows none)
            revoked = {peer: key for peer, key in self._peer_keys.items() if key not in allowed}
        if self._login_check is None or not self._login_check.is_alive():
            self._login_check = threading.Thread(target=self._read_logins, args=(core.logins(),),
                                                 name="login-check", daemon=True)
            self._login_check.start()
        read, self._logins_read = self._logins_read, {}  # each answer used once: the next is read afresh
        self._carry_out(core.revoke(now, lambda user, permission: read.get((user, permission), True), revoked),
                        strike=False)

    def _read_logins(self, pairs: set[tuple[str, str]]) -> None:
        """The login-check thread: whether each ``(user, permission)`` of ``pairs`` still holds
        (:meth:`gridcrawl.auth.UserStore.allows`), for the next :meth:`_revoke`."""
        try:
            self._logins_read = {pair: self.users.allows(*pair) for pair in pairs}
        except sa.exc.SQLAlchemyError as exc:
            log.debug("could not check the connected peers' users: %s", exc)

    def _login_required(self) -> bool:
        return self.users.require_login or self.users.has_users()

    def _drain(self) -> None:
        """Handle up to ``BATCH`` waiting messages; when the socket is found empty, the manager
        has heard all (:meth:`_heard_all`). A dashboard reader waiting for a snapshot (or an
        operator's request) is served every ``SEND_EVERY`` messages, not after the batch (1,000
        executors: ``GET /api/snapshot`` waited 300-400 ms behind a busy loop's batch)."""
        sock, core = self.socket, self.core
        curve = self.curve is not None
        now = self._round_start = time.time()
        self._round.clear()
        try:
            for handled in range(BATCH):
                if handled % SEND_EVERY == SEND_EVERY - 1:
                    self._flush()
                    if not (self._snapshot_wanted.empty() and self.controls.empty()):
                        self._serve_dashboard(time.time())  # a reader waits: not behind the whole batch
                if not self._handle_one(sock, core, curve, now):
                    self._heard_all()
                    return
        finally:
            self._flush()

    def _pass_starts(self, timeout: float) -> None:
        """A pass of the loop starts, to wait up to ``timeout`` seconds for input: note a stall
        if the previous pass ran over its wait by more than a heartbeat interval."""
        now = time.time()
        if now - self._due > self.settings.heartbeat_interval:
            self._stalled_at = now
        self._due = now + timeout

    def _heard_all(self, since: float | None = None) -> None:
        """The socket was found empty: every message sent before now has been read, so set
        :attr:`heard_all` (the core judges peers' silence only up to it, see
        :meth:`ManagerCore.tick`) — unless the loop was stalled (a pass ran over its wait by more
        than a heartbeat interval) within the last heartbeat interval. A stalled process (paused,
        swapped, starved of CPU) stalls ZeroMQ's I/O thread too: what peers sent meanwhile may
        still be in the kernel's buffers, not yet in the socket, for a moment after it resumes.

        ``since`` (POSIX s): a peer was read from again, a round of ZeroMQ's fair queuing after
        ``since``, and the round read one message from every other peer that had one waiting:
        every message waiting at ``since`` has been read. A peer that sends without pause (a
        flood, dropped by :class:`PeerGuard`) keeps the socket from ever being empty: a dead
        executor was declared dead 13 s late, its threads held meanwhile, and never while the
        flood went on."""
        now, interval = time.time(), self.settings.heartbeat_interval
        if now - self._due > interval:
            self._stalled_at = now
        if now - self._stalled_at > interval:
            self.heard_all = now if since is None else max(self.heard_all, since)

    def _note_backlog(self, now: float) -> None:
        """Log (at most every ``BEHIND_LOG_EVERY`` seconds) when the loop has not caught up with
        its input for longer than a peer's liveness: peers are not judged dead meanwhile."""
        behind = now - self.heard_all
        if behind > self.settings.peer_timeout and now - self._behind_logged >= BEHIND_LOG_EVERY:
            self._behind_logged = now
            log.warning("the manager is %.1f s behind its input (stalled or overloaded): peers are judged "
                        "silent only up to the last time it had read all of it", behind)

    def _handle_one(self, sock, core, curve: bool, now: float) -> bool:
        """Receive and handle one waiting message; False when none was waiting."""
        try:
            # with CURVE, frames (not bytes): the last one carries the peer key's User-Id
            frames = sock.recv_multipart(zmq.NOBLOCK, copy=False) if curve else receive(sock)
        except zmq.Again:
            return False
        peer = frames[0].bytes if curve else frames[0]
        if peer in self._round:  # a round of fair queuing is over: all that waited at its start is read
            self._heard_all(self._round_start)
            self._round.clear()
            self._round_start = time.time()
        self._round.add(peer)
        if not self.guard.admit(peer, now):
            return True
        if len(frames) == 4 and len(frames[3]) > protocol.MAX_HELLO_BYTES and peer not in core.peers:
            self._refuse_unread(peer, bytes(frames[2]), len(frames[3]), now)  # not decoded: a hello is small
            return True
        try:
            message = protocol.decode(frames[1:], relay=True, only=core.accepted)
            problem = check_limits(message)
            if problem is not None:
                raise protocol.ProtocolError(problem)
        except Exception as exc:  # malformed, or a bug of ours in decoding: dropped, the grid goes on
            if not isinstance(exc, protocol.ProtocolError):
                log.exception("decoding a message from peer %s failed", peer_label(peer))
            count = self.malformed[peer] = self.malformed.get(peer, 0) + 1
            if len(self.malformed) > 10_000:
                self.malformed.clear()
            if (count <= 3 or count % 1000 == 0) and self._may_log_bad_peer(now):
                log.warning("dropped a malformed message from peer %s (%d so far): %s", peer_label(peer), count, exc)
            self._strike(peer, str(exc))
            return True
        if curve and type(message) in _IDENTIFIED:
            try:
                key_name = frames[-1].get("User-Id")  # the ZAP handler's name for the peer's key
            except (zmq.ZMQError, KeyError):
                key_name = None
            log.info("%s from CURVE key %s", message.TYPE.decode(), key_name)
            if key_name and type(message) is not protocol.Control:  # a control's connection says no more
                self._peer_keys[peer] = key_name
            if key_name and not self._login_required():  # the key is the only identity there is
                message = msgspec.structs.replace(message, user=key_name[:64])
        known = peer in core.peers
        try:
            actions = core.handle(peer, message, time.time())
        except Exception:  # a bug of ours must not take the grid down
            log.exception("handling %s from peer %s failed", message.TYPE.decode(), peer_label(peer))
            return True
        # A refusal is a strike when it refuses a login (register, open, control: that is how
        # credentials are guessed) or a peer the core does not know (one that never logged in,
        # sending heartbeats, submits, acks, results ...: 13,000 refusals a second went unblocked).
        # A peer the manager forgot (an executor after a manager restart, a client detached while
        # it was busy) is not hurt: at its first refusal it says hello again on a new socket
        # (gridcrawl.link), a new peer with strikes of its own; what the old one sent meanwhile
        # only blocks that abandoned connection. The refusals of a known peer (an ack for an
        # application it no longer holds) are not strikes.
        self._carry_out(actions, flush=False, strike=not known or type(message) in _IDENTIFIED)
        return True

    def _refuse_unread(self, peer: bytes, kind: bytes, size: int, now: float) -> None:
        """Refuse, without decoding it, a message of type ``kind`` whose body of ``size`` bytes is
        over :data:`gridcrawl.protocol.MAX_HELLO_BYTES`, from ``peer``, which has not said hello:
        a strike, a log line (within the bad-peer log budget), and a refusal: a final one for a
        hello (it cannot succeed as sent), else the core's answer to a peer it does not know (a
        forgotten executor or client says hello again at once)."""
        name = kind[:32].decode("ascii", "replace")
        limit = protocol.MAX_HELLO_BYTES
        if self._may_log_bad_peer(now):
            log.warning("refused unread a %s of %d bytes from peer %s: over the %d bytes read from a "
                        "peer that has not registered or opened an application", name, size, peer_label(peer), limit)
        if kind in (protocol.Register.TYPE, protocol.OpenApplication.TYPE, protocol.Control.TYPE):
            refusal = protocol.Refuse(f"the {name} message of {size} bytes is over the {limit} bytes a manager reads "
                                      "before a login", final=True)
        else:
            refusal = protocol.Refuse("unknown peer: register or open an application again")
        self._carry_out([Send(peer, refusal)], flush=False)


# ----------------------------------------------------------------------------------------------
# Hostile input: bounds on what a peer may send, and per-peer limits


_ID = re.compile(r"^[A-Za-z0-9_-]{1,36}$")
# Messages naming a user: with CURVE and no login required, the user is the peer's key name.
_IDENTIFIED = (protocol.Register, protocol.OpenApplication, protocol.Control)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_INT32 = 2 ** 31
_INT64 = 2 ** 63


def _bad_text(value: str | None, limit: int, what: str, *, control: bool = False) -> str | None:
    if value is None:
        return None
    if len(value) > limit:
        return f"{what} is longer than {limit} characters"
    if "\x00" in value or (control and _CONTROL.search(value)):
        return f"{what} contains control characters"
    return None


def _bad_number(value, low: float, high: float, what: str) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"{what} is not a finite number"
    if not low <= value < high:
        return f"{what} is out of range"
    return None


def check_limits(message: protocol.Message) -> str | None:
    """Why ``message`` (already decoded, so well-typed) cannot be accepted, or None.

    Catches what would break the manager's tables or its loop: NUL and control characters,
    text longer than its column (names 255, users 64, ids 36 of ``[A-Za-z0-9_-]``, URLs
    ``models.URL_LENGTH``, error kinds 32, heartbeat figure names 32), numbers outside their
    column's range or not finite, more than 10,000 grid threads in one submit. Pure.
    """
    m = message
    if type(m) is protocol.Results and len(m.results) <= 100_000:
        # the message of every grid thread: a quick pass over what is almost always right; any
        # doubt (an error kind, an odd number) goes the long way below, which names the problem
        for r in m.results:
            ran = r.ran
            if not 0 <= r.attempt_id < _INT64 or r.page.error_kind is not None or \
                    (ran is not None and not 0 <= ran < 1e9):
                break
        else:
            return None
    from gridcrawl.auth import MAX_PASSWORD
    checks: list[str | None] = []
    if isinstance(m, (protocol.Register, protocol.OpenApplication)):
        ident = m.executor_id if isinstance(m, protocol.Register) else m.application_id
        if ident is not None and not _ID.match(ident):
            return "id must be 1-36 letters, digits, _ or -"
        checks += [_bad_text(m.name, 255, "name", control=True), _bad_text(m.user, 64, "user", control=True),
                   _bad_text(m.password, MAX_PASSWORD, "password")]
    if isinstance(m, protocol.Register):
        checks += [_bad_text(m.host, 255, "host", control=True), _bad_text(m.os, 1024, "os"),
                   _bad_text(m.arch, 1024, "arch"), _bad_number(m.threads, 1, protocol.MAX_THREADS, "threads"),
                   _bad_number(m.num_cpus, 0, _INT32, "num_cpus"), _bad_number(m.mem_max, 0, _INT64, "mem_max"),
                   _bad_number(m.cpu_max, 0, 1e15, "cpu_max")]
    elif isinstance(m, protocol.Heartbeat) and m.figures:
        if len(m.figures) > 64:
            return "too many heartbeat figures"
        for key, value in m.figures.items():
            if not isinstance(key, str) or len(key) > 32:
                return "a heartbeat figure's name is not a text of at most 32 characters"
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                checks.append(_bad_number(value, -_INT64, _INT64, f"figure {str(key)[:32]!r}"))
    elif isinstance(m, protocol.Result):
        checks += [_bad_number(m.attempt_id, 0, _INT64, "attempt_id"),
                   _bad_text(m.page.error_kind, 32, "error_kind", control=True)]
    elif isinstance(m, protocol.Results):
        if len(m.results) > 100_000:
            return "more than 100000 results at once"
        for r in m.results:
            problem = (_bad_number(r.attempt_id, 0, _INT64, "attempt_id")
                       or _bad_text(r.page.error_kind, 32, "error_kind", control=True)
                       or (_bad_number(r.ran, 0, 1e9, "ran") if r.ran is not None else None))
            if problem:
                return f"result of attempt {r.attempt_id}: {problem}"
    elif isinstance(m, protocol.Submit):
        if len(m.threads) > 10_000:
            return "more than 10000 grid threads in one submit"
        for spec in m.threads:
            problem = (_bad_number(spec.thread_id, 0, _INT64, "thread_id")
                       or _bad_text(spec.url, models.URL_LENGTH, "url", control=True)
                       or _bad_number(spec.depth, -_INT32, _INT32, "depth")
                       or _bad_number(spec.priority, -_INT32, _INT32, "priority"))
            if problem:
                return f"grid thread {spec.thread_id}: {problem}"
    elif isinstance(m, protocol.Control):
        checks += [_bad_text(m.user, 64, "user", control=True), _bad_text(m.password, MAX_PASSWORD, "password"),
                   _bad_text(m.application_id, 36, "application id", control=True),
                   _bad_text(m.action, 16, "action", control=True)]
    elif isinstance(m, protocol.Bye):  # its reason is logged
        checks.append(_bad_text(m.reason, 255, "reason", control=True))
    elif isinstance(m, protocol.Availability):
        if len(m.handed_back) > 100_000:
            return "more than 100000 attempts handed back at once"
        checks += [_bad_number(a, 0, _INT64, "handed-back attempt_id") for a in m.handed_back]
    elif isinstance(m, protocol.Started):
        if len(m.attempt_ids) > 100_000:
            return "more than 100000 attempts started at once"
        if m.running and len(m.running) != len(m.attempt_ids):
            return "started: running must give one figure per attempt id"
        checks += [_bad_number(a, 0, _INT64, "started attempt_id") for a in m.attempt_ids]
        checks += [_bad_number(r, 0, _INT32, "started running seconds") for r in m.running]
    elif isinstance(m, protocol.Cancel):
        checks.append(_bad_number(m.attempt_id, 0, _INT64, "attempt_id"))
    return next((c for c in checks if c), None)


class PeerGuard:
    """Per-peer limits of the manager's loop (peers are ZeroMQ routing ids; the state of peers
    idle for ``window`` seconds is pruned, so memory stays bounded).

    * a token bucket: at most ``rate`` messages per second on average, bursts of ``burst``;
      messages beyond are dropped (and count as a strike once per second);
    * strikes: malformed, out-of-bounds or refused messages. ``max_strikes`` within ``window``
      seconds block the peer for ``block_seconds``: everything it sends is dropped.

    ZeroMQ cannot close one peer's connection of a ROUTER, so a blocked peer is ignored (and its
    state at the core forgotten). Times are POSIX seconds, passed in. The manager takes the limits
    from its settings (``peer_rate``, ``peer_burst``, ``peer_max_strikes``, ``peer_strike_window``,
    ``peer_block_seconds``), whose defaults are these.
    """

    def __init__(self, *, rate: float = Settings.peer_rate, burst: float = Settings.peer_burst,
                 max_strikes: int = Settings.peer_max_strikes, window: float = Settings.peer_strike_window,
                 block_seconds: float = Settings.peer_block_seconds) -> None:
        self.rate, self.burst = rate, burst
        self.max_strikes, self.window, self.block_seconds = max_strikes, window, block_seconds
        self._buckets: dict[bytes, list[float]] = {}   # peer -> [tokens, last time, last strike]
        self._strikes: dict[bytes, list[float]] = {}   # peer -> [window start, count]
        self._blocked: dict[bytes, float] = {}         # peer -> blocked until
        self.dropped = 0

    def blocked(self, peer: bytes, now: float) -> bool:
        """True while ``peer`` is blocked."""
        until = self._blocked.get(peer)
        return until is not None and now < until

    def admit(self, peer: bytes, now: float) -> bool:
        """Whether to handle a message from ``peer`` now (False: drop it)."""
        if self._blocked and self.blocked(peer, now):
            self.dropped += 1
            return False
        bucket = self._buckets.get(peer)
        if bucket is None:
            bucket = self._buckets[peer] = [self.burst, now, 0.0]
        tokens = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate)
        bucket[1] = now
        if tokens < 1.0:
            bucket[0] = tokens
            self.dropped += 1
            if now - bucket[2] >= 1.0:
                bucket[2] = now
                log.warning("peer %s floods the manager (over %.0f messages/s): dropping", peer_label(peer), self.rate)
                self.strike(peer, now)
            return False
        bucket[0] = tokens - 1.0
        return True

    def strike(self, peer: bytes, now: float) -> bool:
        """Count one bad message of ``peer``; True if that blocks it (from now on)."""
        entry = self._strikes.get(peer)
        if entry is None or now - entry[0] > self.window:
            entry = self._strikes[peer] = [now, 0]
        entry[1] += 1
        if entry[1] >= self.max_strikes and not self.blocked(peer, now):
            self._blocked[peer] = now + self.block_seconds
            del self._strikes[peer]
            return True
        return False

    def prune(self, now: float) -> None:
        """Forget peers idle for ``window`` seconds and blocks that expired."""
        for peer in [p for p, b in self._buckets.items() if now - b[1] > self.window]:
            del self._buckets[peer]
        for peer in [p for p, e in self._strikes.items() if now - e[0] > self.window]:
            del self._strikes[peer]
        for peer in [p for p, until in self._blocked.items() if now >= until]:
            del self._blocked[peer]


def advertised_endpoint(endpoint: str) -> str:
    """The endpoint peers can reach a manager bound at ``endpoint`` with: a wildcard host
    (``tcp://*:9000``, ``tcp://0.0.0.0:9000``) becomes this host's name; other endpoints are
    returned as they are."""
    import socket as _socket
    for wildcard in ("tcp://*:", "tcp://0.0.0.0:", "tcp://[::]:"):
        if endpoint.startswith(wildcard):
            return f"tcp://{_socket.gethostname()}:{endpoint[len(wildcard):]}"
    return endpoint
