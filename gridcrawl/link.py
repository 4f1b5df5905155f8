"""The link of a peer (executor, client, operator command) to the manager: connect, hello,
heartbeat, silence detection and reconnect with back-off — the ZeroMQ guide's Paranoid Pirate
worker, written once — and, with hot-standby managers, which manager to talk to.

Three parts, the decisions apart from the sockets (as :mod:`gridcrawl.manager.core` is apart
from :mod:`gridcrawl.manager.server`):

* :class:`ManagerEndpoints`: the managers and the current one (below);
* :class:`LinkState`: the link's decisions, pure (no sockets, no clock): events in, actions out;
* :class:`ManagerLink`: the socket-owning shell that carries the actions out, used by
  :class:`gridcrawl.executor.agent.ExecutorAgent`, :class:`gridcrawl.client.app.CrawlApplication`
  and :func:`gridcrawl.client.app.control_application`.

With hot standbys (docs/operations.md, "Several managers"), exactly one manager is *active* (it
holds the lease on the shared database, :mod:`gridcrawl.manager.lease`); a *standby* answers any
peer with a ``refuse`` naming the active manager's address. A peer is configured with every
manager's endpoint (``--manager`` repeated, or comma-separated in the configuration file and
``GRIDCRAWL_MANAGER``), starts with the first, goes to the one a refusal names — only if it is
one of the configured endpoints, so a hostile answer cannot send a peer elsewhere — and, when the
current manager falls silent, tries the next one in order (with the usual exponential back-off
between attempts, kept by :class:`LinkState`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import zmq

from gridcrawl import protocol as p
from gridcrawl.errors import LinkError, ManagerUnreachable, Refused
from gridcrawl.settings import Settings
from gridcrawl.transport import (RECONNECT_SLOW, SLOW_AFTER_CLOSED, HandshakeWatch, apply_curve_client, make_socket,
                                 probe_endpoint, receive, send, why_unreachable)

log = logging.getLogger("gridcrawl.link")

#: Seconds between two log lines about malformed messages from the manager (the first is
#: logged at once, later ones counted): a broken peer must not flood the log.
MALFORMED_LOG_EVERY = 10.0
#: Seconds between two heartbeats at least, whatever interval a manager asks for.
MIN_INTERVAL = 0.05
#: A peer whose manager has not answered yet says so after this many seconds, then every
#: :data:`WAITING_SAID_EVERY` seconds, while its ``connect_timeout`` lets it wait longer (a
#: desktop started before its manager, with the day-long timeout of the service recipes, was
#: silent until the manager came or the day ended).
WAITING_SAID_AFTER = 10.0
WAITING_SAID_EVERY = 60.0
#: Seconds between two "no manager has answered" WARNINGs of a peer that had a manager and whose
#: managers have all gone silent (each round of them between is logged at DEBUG).
ROUND_SAID_EVERY = 60.0


def split_endpoints(values: str | list[str] | tuple[str, ...]) -> list[str]:
    """The manager endpoints of an option value: one string, a comma-separated string, or a list
    of either (``["tcp://a:9000,tcp://b:9000"]`` → two), stripped, duplicates dropped, in order.
    Raises ``ValueError`` if none is left."""
    if isinstance(values, str):
        values = [values]
    found: list[str] = []
    for value in values:
        for part in str(value).split(","):
            part = part.strip()
            if part and part not in found:
                found.append(part)
    if not found:
        raise ValueError("no manager endpoint given (--manager tcp://HOST:9000)")
    return found


class ManagerEndpoints:
    """The managers a peer may talk to, and the one it talks to now (:attr:`current`).

    ``endpoints``: ZeroMQ endpoints in the order to try (see :func:`split_endpoints`).
    """

    def __init__(self, endpoints: str | list[str] | tuple[str, ...]) -> None:
        self.endpoints = split_endpoints(endpoints)
        self.index = 0

    @property
    def current(self) -> str:
        """The endpoint to connect to now."""
        return self.endpoints[self.index]

    @property
    def several(self) -> bool:
        """True when there is another manager to try."""
        return len(self.endpoints) > 1

    def follow(self, active: str | None) -> bool:
        """A standby refused us naming the ``active`` manager: switch to it if it is one of ours
        (True: reconnect now); otherwise move to the next endpoint (True if there is another).
        Returns False when there is nothing else to try."""
        if active and active in self.endpoints:
            if active == self.current:
                return False
            self.index = self.endpoints.index(active)
            return True
        return self.next()

    def next(self) -> bool:
        """The current manager is silent or refuses: move to the next endpoint, round the list.
        Returns False (and stays) when there is only one."""
        if not self.several:
            return False
        self.index = (self.index + 1) % len(self.endpoints)
        return True

    def __str__(self) -> str:
        return ",".join(self.endpoints)


# ----------------------------------------------------------------------------------------------
# The link's decisions: the ZeroMQ guide's Paranoid Pirate worker, as a pure state machine


@dataclass(frozen=True)
class Connect:
    """Action: close the socket (if any), open a new one to ``endpoint`` and send the hello
    (the guide: a new socket on every reconnect, so nothing queued for a dead manager is sent)."""

    endpoint: str


@dataclass(frozen=True)
class Beat:
    """Action: send a heartbeat to the manager."""


@dataclass(frozen=True)
class Fail:
    """Action: give up and raise ``error`` (:class:`~gridcrawl.errors.ManagerUnreachable` or
    :class:`~gridcrawl.errors.Refused`)."""

    error: LinkError


Action = Connect | Beat | Fail


class LinkState:
    """When a peer connects, beats, counts the manager dead, reconnects or gives up — the ZeroMQ
    guide's Paranoid Pirate worker (chapter 4, ``ppworker``), once for executor, client and
    operator command. Pure: every method takes ``now`` (monotonic seconds) and returns a list of
    actions (:class:`Connect`, :class:`Beat`, :class:`Fail`) for :class:`ManagerLink` to carry out.

    ``managers``: the endpoints (:class:`ManagerEndpoints`, or what :func:`split_endpoints`
    takes); ``settings``: ``heartbeat_interval`` (s), ``heartbeat_liveness`` (intervals),
    ``reconnect_initial``/``reconnect_max`` (s), ``connect_timeout`` (s); ``answers``: the message
    classes that answer the peer's hello (``Welcome`` to ``register``, ``ApplicationOpened`` to
    ``open``, ``Controlled`` to ``control``); ``logger`` gets the link's warnings.

    The rules (the guide's, with the hot standbys of this module):

    * **hello**: :meth:`start` connects to the first manager and says hello; the manager is *up*
      once it answers. A peer that never had an answer gives up after ``connect_timeout`` s
      (``ManagerUnreachable``, or ``Refused`` with the last refusal heard).
    * **liveness**: any message from the manager is a sign of life; silence for
      ``heartbeat_interval × heartbeat_liveness`` s (the guide's liveness counter, kept as a time
      so that other sockets waking the poll do not count as missed beats) makes the manager dead:
      the next manager is tried at once when there are several (once a whole round of them has
      stayed silent, the next after the back-off, logged once every :data:`ROUND_SAID_EVERY`:
      a peer whose managers were all gone logged a WARNING every 3 s for ever; likewise a manager
      silent again with no manager having served the peer since, as an active manager out of the
      peer's reach whose standby names it), otherwise the
      same one after the back-off. A peer that never had an answer from its only manager waits for it (up to
      ``connect_timeout``) instead.
    * **heartbeat**: every ``heartbeat_interval`` s while up, unless the peer sent the manager
      another message within the last interval (any message is a sign of life to the manager too);
      then it waits, but at most :data:`FIGURES_EVERY` intervals, so that an executor's figures
      (CPU, memory, pages/s), which only heartbeats carry, are never older than that. A busy
      executor sends results every pass: a thousand of them sent the manager a heartbeat each
      second on top, one message in three (issue 23).
    * **back-off**: reconnecting waits ``reconnect_initial`` s, doubling at every reconnect up to
      ``reconnect_max``; an answer to the hello resets it and cancels a reconnect still pending.
    * **refusal** (``refuse``): a standby names the active manager — go there at once if it is
      one of ours, else to the next (:meth:`ManagerEndpoints.follow`); a standby naming itself
      (it is taking over), or another manager while it is the only one, or the manager this peer
      left silent or leaving less than ``peer_timeout`` s ago (its lease has not expired yet), is
      asked again after a moment (logged once), and the final error of a peer never answered names the active manager
      to add to its ``--manager`` list. A refusal naming nobody, while not up,
      moves on to the next manager when there are several — and is final once a standby names the
      manager that gave it as the active one; with one manager it answers the hello and is final
      (``Refused``). While up, it means the manager forgot this peer (it restarted):
      say hello again at once.
    * **bye**: the manager is leaving; with several, try the next at once (a standby takes over
      the lease it releases), else reconnect after the back-off. A peer that is stopping itself
      (:attr:`leaving`; the signal that stops a service's processes together reaches the manager
      too) only notes it: no WARNING, no reconnect.
    * **handshake failure** (CURVE): final before the first answer; later only logged, every 30 s.
    """

    FAILURE_LOG_EVERY = 30.0  # s; libzmq retries a failed handshake every ~0.1 s: do not flood the log
    FIGURES_EVERY = 5  # heartbeat intervals between two heartbeats at most, however busy the peer

    def __init__(self, managers, settings: Settings, answers: tuple[type, ...], *,
                 logger: logging.Logger = log) -> None:
        self.managers = managers if isinstance(managers, ManagerEndpoints) else ManagerEndpoints(managers)
        self.interval = settings.heartbeat_interval
        self.peer_timeout = settings.peer_timeout
        self.initial, self.maximum = settings.reconnect_initial, settings.reconnect_max
        self.connect_timeout = settings.connect_timeout
        self.answers = answers
        self.log = logger
        self.up = False           # the current connection's manager answered the hello
        self.ever_up = False      # some manager answered once: from then on the link never gives up
        self.started = self.connected_at = self.last_heard = self.next_beat = 0.0
        self.last_tick: float | None = None  # the previous tick: a long gap is this program's own pause
        self.heard_any = 0.0  # the last sign of life of any manager (for "no answer for N s")
        self.served = 0.0  # the last message of a manager that took this peer (refusals are not)
        self.named_active: str | None = None  # the active manager the last standby's refusal named
        self.last_sent = self.last_beat = float("-inf")  # any message to the manager; a heartbeat
        self.backoff = self.initial
        self.reconnect_at: float | None = None
        # the last refusal naming nobody, or an active manager not ours, before the first answer
        self.refusal: str | None = None
        # the manager this peer left because it fell silent or said bye, and when (monotonic s):
        # a standby that still names it active has not yet seen its lease expire (see _refused)
        self.left: tuple[str, float] | None = None
        # endpoint -> (its refusal naming nobody, monotonic s): the active manager's own answer
        self.answered_no: dict[str, tuple[str, float]] = {}
        self._refusal_said: tuple | None = None  # (reason, active) of the last refusal logged
        self._failure_said = float("-inf")
        self._round_said = float("-inf")  # when "no manager has answered" was last logged
        self._next_on_reconnect = False  # the reconnect due goes to the next manager (a round went silent)
        #: whether this peer is stopping (its program sets it: a client's stop event's is_set)
        self.leaving: Callable[[], bool] = lambda: False

    def silence(self, now: float) -> float:
        """Seconds without a sign of life from the current manager (since the hello while it has
        not answered)."""
        return now - (self.last_heard if self.up else self.connected_at)

    def start(self, now: float) -> list[Action]:
        """Connect to the first manager and say hello."""
        self.started = self.heard_any = self.served = now
        return [self._connect(now)]

    def received(self, now: float, message) -> list[Action]:
        """A message from the manager (``protocol.Message``): a sign of life; an answer to the
        hello, a refusal or a goodbye move the link (see the class's rules)."""
        self.last_heard = self.heard_any = now
        self._next_on_reconnect = False  # the current manager lives: what follows decides where to go
        if self.up or isinstance(message, self.answers):
            self.served = now
        if isinstance(message, self.answers):
            self._adopt_interval(getattr(message, "heartbeat_interval", None))
            self.up = self.ever_up = True
            self.reconnect_at = None  # a reconnect the silence before this answer scheduled: not needed
            self.backoff, self.refusal, self._refusal_said, self.left = self.initial, None, None, None
            self.answered_no.clear()
            self.next_beat = now + self.interval
            self.last_beat = now  # (the hello told the manager who this peer is)
        elif isinstance(message, p.Refuse):
            return self._refused(now, message.reason, message.active, message.retry, message.final)
        elif isinstance(message, p.Bye) and self.leaving():
            self.up = False  # nothing more goes to it (no goodbye either)
            self.log.info("manager left (%s) as this program stops", message.reason)
        elif isinstance(message, p.Bye) and self.reconnect_at is None:
            gone = self.managers.current
            if self.managers.next():  # hot standbys: one takes over as this one stops
                self.left = (gone, now)
                self.log.warning("the manager at %s left (%s); trying %s", gone, message.reason, self.managers.current)
                self._reconnect(now)
            else:
                self.log.warning("the manager at %s left (%s); reconnecting in %.1f s", gone, message.reason,
                                 self.backoff)
                self._reconnect(now + self.backoff)
        return self._due(now)

    def _adopt_interval(self, interval) -> None:
        """Beat at least as often as the manager's ``heartbeat_interval`` (its welcome or opened
        says it): a manager started with a shorter one than this peer's counted the peer dead
        between two of its heartbeats, and the peer, refused as unknown, connected again, in a
        loop that named no cause. Never below :data:`MIN_INTERVAL` (a manager cannot make its
        peers flood it)."""
        if isinstance(interval, (int, float)) and math.isfinite(interval) and interval < self.interval:
            interval = max(float(interval), MIN_INTERVAL)
            self.log.info("heartbeats every %g s, as the manager asks (this program's heartbeat_interval is %g s)",
                          interval, self.interval)
            self.interval = interval

    def sent(self, now: float) -> None:
        """A message went to the manager: a sign of life to it (see the heartbeat rule)."""
        self.last_sent = now

    def handshake_failed(self, now: float, reason: str) -> list[Action]:
        """The security handshake with the manager failed (``reason``: one line): final with one
        manager, even after it answered once (its key was revoked, or the manager's keys changed:
        retrying would only say "manager silent" for ever); with hot standbys, logged, and the
        others tried as they come due (one may not have this key yet)."""
        if not self.ever_up:
            return [Fail(Refused(reason))]
        if not self.managers.several:
            return [Fail(Refused(f"{reason} (it was accepted before: the key was revoked, or the manager's "
                                 "keys changed)"))]
        if now - self._failure_said >= self.FAILURE_LOG_EVERY:
            self._failure_said = now
            self.log.warning("%s", reason)
        return []

    def tick(self, now: float) -> list[Action]:
        """Time passes: give up, count the manager dead, reconnect, or beat, as due. A tick more
        than ``peer_timeout`` after the previous one means this program itself was stopped
        (SIGSTOP, a laptop asleep): the manager's silence over that time is not its own, so it
        gets a fresh ``peer_timeout`` instead of being counted dead at once."""
        paused = self.last_tick is not None and now - self.last_tick > self.peer_timeout
        self.last_tick = now
        if paused and self.up:
            self.log.info("this program was paused for %.1f s: the manager is given %.1f s to be heard again",
                          now - self.last_heard, self.peer_timeout)
            self.last_heard = now
        if not self.ever_up and now - self.started > self.connect_timeout:
            if self.refusal is not None:
                return [Fail(Refused(self.refusal))]
            return [Fail(ManagerUnreachable(f"no answer from the manager at {self.managers} "
                                            f"within {self.connect_timeout:g} s"))]
        silent = self.silence(now)
        if (self.reconnect_at is None and (self.ever_up or self.managers.several)
                and silent > self.peer_timeout):
            gone = self.managers.current
            # the whole silence, reconnects and all, and whose: "manager silent for 3.0 s" was
            # the same at every reconnect of an hour's outage, and named no manager
            quiet = max(silent, now - self.heard_any)
            unheard = now - self.heard_any
            if self.managers.several and unheard >= len(self.managers.endpoints) * self.peer_timeout:
                # a whole round of them silent: the next after the back-off, said once a minute at most;
                # the current one's socket stays open meanwhile (an answer from it is taken)
                endpoints = self.managers.endpoints
                # (before any answer, ManagerLink's "no answer from the manager" line says it, with the reason)
                said = self.ever_up and now - self._round_said >= ROUND_SAID_EVERY
                self._round_said = now if said else self._round_said
                self.log.log(logging.WARNING if said else logging.DEBUG,
                             "no manager has answered for %.0f s (%s); trying %s in %.1f s%s", unheard,
                             self.managers, endpoints[(endpoints.index(gone) + 1) % len(endpoints)], self.backoff,
                             f" (said again at most every {ROUND_SAID_EVERY:.0f} s)" if said else "")
                self.left, self._next_on_reconnect = (gone, now), True
                self._reconnect(now + self.backoff)
            elif self.managers.next():  # hot standbys: the next manager may be the active one now
                self.left = (gone, now)
                unserved = now - self.served
                if unserved < 2 * self.peer_timeout:  # the first silence since a manager served this peer
                    self.log.warning("no answer from the manager at %s for %.0f s; trying %s", gone, quiet,
                                     self.managers.current)
                else:
                    # silent again, and no manager took this peer meanwhile: each round logged the
                    # line above again, a WARNING every 6 s for as long as the active manager, cut
                    # off from its peers but not from its database, kept its lease
                    said = now - self._round_said >= ROUND_SAID_EVERY
                    self._round_said = now if said else self._round_said
                    why = (f"{gone}, the active manager as the standbys say, does not answer it (it holds the "
                           "database's lease, so they wait for it: a network cut between it and this program, "
                           "or it is stopped and its lease has not expired yet)" if gone == self.named_active
                           else f"{gone} does not answer it")
                    self.log.log(logging.WARNING if said else logging.DEBUG,
                                 "no manager has served this program for %.0f s: %s; trying %s%s", unserved, why,
                                 self.managers.current,
                                 f" (said again at most every {ROUND_SAID_EVERY:.0f} s)" if said else "")
                self._reconnect(now)
            else:
                self.log.warning("no answer from the manager at %s for %.0f s; reconnecting in %.1f s", gone, quiet,
                                 self.backoff)
                self._reconnect(now + self.backoff)
        actions = self._due(now)
        if self.up and now >= self.next_beat:
            self.next_beat = now + self.interval
            if (now - self.last_sent >= self.interval
                    or now - self.last_beat >= self.FIGURES_EVERY * self.interval - self.interval / 2):
                self.last_beat = now
                actions.append(Beat())
        return actions

    def _refused(self, now: float, reason: str, active: str | None, retry: bool = False,
                 final: bool = False) -> list[Action]:
        if active is not None:
            self.named_active = active
        if final:  # the request cannot succeed: sent again after a reconnect, it looped 12,781 times in 2 min
            return [Fail(Refused(reason))]
        if retry:  # for now (a manager busy with failed logins): ask again shortly, until the timeout
            if reason != self.refusal:
                self.log.warning("manager refused (%s)", reason)
            self.refusal = reason
            self._reconnect(now + min(self.backoff, self.interval / 4))
            return self._due(now)
        if active is not None and (no := self.answered_no.get(active)) and now - no[1] < self.peer_timeout:
            # a standby names the manager that has just refused this peer itself: that one is the
            # active manager and its refusal the answer (going back and forth between the two,
            # at once each time, made thousands of connections until the connect timeout)
            return [Fail(Refused(no[0]))]
        if (active is not None and self.left is not None and active == self.left[0] != self.managers.current
                and now - self.left[1] < self.peer_timeout):
            # a standby names the manager this peer has just left, silent or leaving: its lease has
            # not yet expired as the standby last read it, and it takes over when it does. Going
            # back cost a whole peer_timeout of silence more (the lease and the peers' liveness are
            # the same 3 s by default); ask this standby again for as long instead
            if (reason, active) != self._refusal_said:
                self.log.info("manager refused (%s); %s has just been left: asking %s again shortly", reason,
                              active, self.managers.current)
            self._refusal_said = (reason, active)
            self._reconnect(now + min(self.backoff, self.interval / 4))
        elif active is not None or (self.managers.several and not self.up):
            if active is None:
                self.refusal = reason
                self.answered_no[self.managers.current] = (reason, now)
            elif active not in self.managers.endpoints:  # never followed: a peer goes only where it was told
                self.refusal = (f"{reason}; {active} is not one of the managers given to this program "
                                f"({self.managers}): add --manager {active}")
            moved = self.managers.follow(active)  # a standby: go where it points, or to the next
            # the same refusal again (a standby asked every quarter interval) is worth a line once;
            # a standby naming an active manager we know is how hot standbys work, not a warning
            routine = active is not None and moved and active in self.managers.endpoints
            level = (logging.DEBUG if (reason, active) == self._refusal_said
                     else logging.INFO if routine else logging.WARNING)
            self._refusal_said = (reason, active)
            self.log.log(level, "manager refused (%s); connecting to %s%s", reason, self.managers.current,
                         "" if moved else " again shortly")
            self._reconnect(now if moved else now + min(self.backoff, self.interval / 4))
        elif self.up:  # the manager forgot us (it restarted): hello again
            self.log.warning("manager says: %s; connecting again", reason)
            self._reconnect(now)
        elif self.reconnect_at is None:  # the one manager's answer to our hello
            return [Fail(Refused(reason))]
        return self._due(now)

    def _reconnect(self, at: float) -> None:
        self.up = False
        self.reconnect_at = at if self.reconnect_at is None else min(at, self.reconnect_at)

    def _due(self, now: float) -> list[Action]:
        if self.reconnect_at is None or now < self.reconnect_at:
            return []
        self.reconnect_at = None
        if self._next_on_reconnect:
            self._next_on_reconnect = False
            self.managers.next()
        action = self._connect(now)
        self.backoff = min(self.maximum, self.backoff * 2)
        return [action]

    def _connect(self, now: float) -> Connect:
        self.up = False
        self.connected_at = now
        self.last_sent = float("-inf")  # what went to another manager is no sign of life to this one
        return Connect(self.managers.current)


# ----------------------------------------------------------------------------------------------
# The shell: one DEALER socket to the manager


#: Seconds without an answer from any manager before :meth:`ManagerLink.tick` asks the network
#: what listens at the endpoints (a manager's greeting comes at once, from ZeroMQ's I/O thread).
PROBE_AFTER = 2.0


class ManagerLink:
    """The socket side of :class:`LinkState`: one DEALER socket to the current manager, made anew
    at every :class:`Connect`, with CURVE and a handshake watch when keys are given.

    ``ManagerLink(context, settings, managers, hello, answers)``: ``hello()`` returns the message
    that opens a connection (``Register``, ``OpenApplication``, ``Control``); ``answers`` the
    message classes that answer it; ``heartbeat()`` the heartbeat to send (default an empty
    ``Heartbeat``); ``curve`` a :class:`gridcrawl.keys.ClientKeys`; ``on_connect()`` is called
    after every new socket (the executor hands its queued work back there); ``clock`` gives
    monotonic seconds. Call :meth:`start`, then in the program's loop poll :attr:`socket`, read
    with :meth:`receive` and call :meth:`tick`; both raise :class:`~gridcrawl.errors.Refused` or
    :class:`~gridcrawl.errors.ManagerUnreachable` when the link gives up. :meth:`close` at the end.
    """

    def __init__(self, context: zmq.Context, settings: Settings, managers, hello: Callable[[], p.Message],
                 answers: tuple[type, ...], *, heartbeat: Callable[[], p.Message] = p.Heartbeat, curve=None,
                 on_connect: Callable[[], None] | None = None, logger: logging.Logger = log,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.context, self.settings = context, settings
        self.state = LinkState(managers, settings, answers, logger=logger)
        self.hello, self.heartbeat, self.curve = hello, heartbeat, curve
        self.on_connect, self.clock, self.log = on_connect, clock, logger
        self.socket: zmq.Socket | None = None
        self._watch: HandshakeWatch | None = None
        self._slow = False  # the socket reconnects every RECONNECT_SLOW s (tick)
        self._probed = False  # the network was asked what listens there (tick, _malformed)
        self._waiting_said_at = WAITING_SAID_AFTER  # seconds after start of the next "still waiting" line
        self._malformed_count, self._malformed_said = 0, -math.inf

    @property
    def managers(self) -> ManagerEndpoints:
        """The manager endpoints and the current one."""
        return self.state.managers

    @property
    def up(self) -> bool:
        """True while the current manager has answered the hello (and is not counted dead)."""
        return self.state.up

    def start(self) -> None:
        """Connect to the first manager and send the hello."""
        self._carry_out(self.state.start(self.clock()))

    def receive(self) -> Iterator[p.Message]:
        """Yield every message waiting on the socket (never blocks), each after the link has
        taken it into account; malformed ones are logged and dropped. Stops at a reconnect (the
        old socket's messages are dropped with it)."""
        sock = self.socket
        while sock is not None and sock is self.socket:
            try:
                frames = receive(sock)
            except zmq.Again:
                return
            try:
                message = p.decode(frames)
            except p.ProtocolError as exc:
                self._malformed(exc)
                continue
            self._carry_out(self.state.received(self.clock(), message))
            yield message

    def _malformed(self, exc: p.ProtocolError) -> None:
        """A message from the manager that does not decode (``exc`` says why). Before any
        manager has answered, the network is asked what listens there (:func:`why_unreachable`,
        once): a web server's answer to ZeroMQ's greeting reads as ZeroMQ 1.0 frames, and one
        comes with every reconnect (about a hundred a second), so such a peer ends the link at
        once with :class:`~gridcrawl.errors.ManagerUnreachable` naming it. Otherwise the message
        is logged and dropped: the first one, then one line with the count every
        :data:`MALFORMED_LOG_EVERY` seconds."""
        if not self.state.ever_up and not self._probed:
            self._probed = True
            endpoint = self.managers.current
            hint = why_unreachable(endpoint)
            if hint is not None:
                raise ManagerUnreachable(f"the manager at {endpoint} answered in a form gridcrawl cannot read ({exc}): "
                                         f"{hint}")
        now = self.clock()
        self._malformed_count += 1
        if now - self._malformed_said >= MALFORMED_LOG_EVERY:
            more = (f" ({self._malformed_count} in the last {now - self._malformed_said:.0f} s)"
                    if self._malformed_count > 1 else "")
            self.log.warning("dropped a malformed message from the manager%s: %s", more, exc)
            self._malformed_said, self._malformed_count = now, 0

    def tick(self) -> None:
        """Check the handshake and the time: give up, reconnect or beat as due. Before any
        manager has answered, :data:`PROBE_AFTER` seconds in, the network is asked once what
        listens at each endpoint: when every one is something that does not speak ZeroMQ (a web
        server, the manager's own dashboard port), the link ends at once with
        :class:`~gridcrawl.errors.ManagerUnreachable` naming it, instead of at the connect
        timeout. A port where nothing listens yet is waited for (the manager may be starting)."""
        now = self.clock()
        if not self.state.ever_up and not self._probed and now - self.state.started >= PROBE_AFTER:
            self._probed = True
            found = [probe_endpoint(endpoint) for endpoint in self.state.managers.endpoints]
            if all(f is not None and f[0] == "not_zeromq" for f in found):
                raise ManagerUnreachable(f"no answer from the manager at {self.state.managers}: "
                                         + "; ".join(reason for _, reason in found))
        failure = self._watch.failure() if self._watch is not None else None
        if failure is not None:
            self._carry_out(self.state.handshake_failed(now, failure))
        elif self._watch is not None and self._watch.closed_early >= SLOW_AFTER_CLOSED and not self._slow:
            closed = self._watch.closed_early
            self.log.info("the manager at %s closed %d connections during the handshake: trying again every %g s",
                          self.managers.current, closed, RECONNECT_SLOW)
            self._connect(self.managers.current, slow=True)
            self._watch.closed_early = closed  # (counted on: the messages say how many in all)
        self._carry_out(self.state.tick(now))
        self._say_waiting(now)

    def _say_waiting(self, now: float) -> None:
        """While no manager has answered yet and ``connect_timeout`` lets the peer wait on, log a
        WARNING after :data:`WAITING_SAID_AFTER` seconds, then every :data:`WAITING_SAID_EVERY`:
        how long it has waited, what the network says of each endpoint (:func:`why_unreachable`:
        nothing listens there, no route, no answer) and how much longer it waits."""
        waited = now - self.state.started
        if self.state.ever_up or waited < self._waiting_said_at or waited >= self.state.connect_timeout:
            return
        self._waiting_said_at = waited + WAITING_SAID_EVERY
        hints = self._hints()
        self.log.warning("no answer from the manager at %s for %.0f s%s; waiting for it up to %.0f s more "
                         "(--connect-timeout %.0f)", self.state.managers, waited,
                         f" ({'; '.join(hints)})" if hints else "", self.state.connect_timeout - waited,
                         self.state.connect_timeout)

    def _hints(self) -> list[str]:
        """Why no manager answers, for the waiting line and the final error: what the network says
        of each endpoint (:func:`why_unreachable`), else what the handshakes the manager closed
        suggest (:meth:`HandshakeWatch.hint`: a wrong manager public key, a plain peer at a CURVE
        manager), which the waiting line left out: a desktop given a wrong key and a day's
        ``--connect-timeout`` logged "no answer" every minute without a cause."""
        hints = [hint for endpoint in self.state.managers.endpoints if (hint := why_unreachable(endpoint)) is not None]
        if not hints and self._watch is not None and (hint := self._watch.hint()) is not None:
            hints = [hint]
        return hints

    def send(self, message: p.Message) -> bool:
        """Send ``message`` on the current socket; False if it could not be queued."""
        if self.socket is None or not send(self.socket, message):
            return False
        self.state.sent(self.clock())
        return True

    def close(self, bye: str | None = None, linger: int = 500) -> None:
        """Say ``bye`` (when given) and close the socket, waiting up to ``linger`` ms for what is
        queued (idempotent); at once when no manager ever answered (nothing queued is for anyone:
        a program that could not reach its manager ended half a second later for nothing)."""
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        if not self.state.ever_up:
            linger = 0
        if self.socket is not None:
            if bye is not None:
                send(self.socket, p.Bye(bye))
            self.socket.close(linger=linger)
            self.socket = None

    def _carry_out(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Fail):
                if isinstance(action.error, ManagerUnreachable):
                    hints = self._hints()
                    if hints:
                        raise ManagerUnreachable("; ".join([str(action.error), *hints]))
                raise action.error
            if isinstance(action, Beat):
                self.send(self.heartbeat())
            elif isinstance(action, Connect):
                self._connect(action.endpoint)

    def _connect(self, endpoint: str, slow: bool = False) -> None:
        """A new socket to ``endpoint`` and the hello on it; ``slow``: it reconnects every
        :data:`~gridcrawl.transport.RECONNECT_SLOW` seconds (the manager kept closing the
        connections of the last one during the handshake), until the next new socket."""
        self.close(linger=0)
        self._slow = slow
        self.socket = make_socket(self.context, zmq.DEALER, self.settings,
                                  **({"reconnect_first": RECONNECT_SLOW} if slow else {}))
        if self.curve is not None:
            apply_curve_client(self.socket, self.curve)
        self._watch = HandshakeWatch(self.socket, curve=self.curve is not None)
        self.socket.connect(endpoint)
        send(self.socket, self.hello())
        if self.on_connect is not None:
            self.on_connect()
