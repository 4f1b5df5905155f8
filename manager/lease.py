"""The manager's exclusive lease on its database: one manager per database.

A row of ``manager_lease`` (``name``, ``holder``, ``epoch``, ``expires_at``) says which manager
owns the database. A manager takes it when it starts — when there is no row, the row has expired,
or its holder is a process of this host and process space (:func:`process_space`) that no longer
runs (a manager killed with ``kill -9`` and started again) — with a conditional UPDATE on the
epoch it read (compare-and-swap), which increments the epoch. It renews ``expires_at`` while it
runs (every ``lease_seconds / 3``) and lets it expire at once when it stops. A second manager on
the same database finds a live lease and refuses to start, naming the holder (:class:`LeaseHeld`).

The epoch is a fencing token (ZooKeeper/etcd leases, Kafka's controller epoch): every renewal is
``WHERE holder = :me AND epoch = :mine``, so a manager whose lease was taken over (paused past its
expiry, say) learns it at its next renewal (:class:`LeaseLost`) instead of writing on; a later
hot-standby manager can watch the row (:meth:`Lease.read`) and take over an expired lease with
:meth:`Lease.try_acquire`, and later writes can carry the same ``WHERE epoch = :mine``.

A manager paused or hung inside a transaction that locked the row (its recorder's fenced batch)
does not stop a take-over: the lease's transactions ask the server to end them when idle for the
lease length, a standby waits for the row lock only ``lock_wait`` seconds (then "refuse", tried
again), and on PostgreSQL it ends the session of a holder whose lease expired inside such a
transaction (docs/reliability.md, "Failover when the active manager hangs inside a transaction").

The decisions are the pure function :func:`decide` (the row, who I am, ``now``, and whether a
holder process is alive go in; what to do comes out), testable without a database. Times are
POSIX seconds; the database stores naive UTC datetimes. ``now`` is the **database server's
clock** (:func:`gridcrawl.db.server_time`; this host's clock plus the difference last read, in
between), so that managers on hosts whose clocks disagree agree on when a lease expires: judged
by each host's own clock, a standby whose clock ran 20 s ahead took the lease from a healthy
manager at once, and one whose clock ran behind let a dead manager's grid wait that much longer.
A host whose clock differs from the server's by more than a quarter of the lease is warned of
once. On SQLite (a file on this machine) the clock is this host's.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import math
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

import psutil
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from gridcrawl import models
from gridcrawl.db import (end_row_lock_holders, from_timestamp, insert_ignore, is_lock_timeout, limit_idle_transaction,
                          lock_wait, server_time, shown_url)
from gridcrawl.errors import LeaseHeld, LeaseLost  # noqa: F401 (re-exported)

log = logging.getLogger("gridcrawl.manager.lease")

LEASE_NAME = "manager"
#: Seconds between the WARNINGs of a manager lease that keeps failing to renew (the database is down).
LEASE_FAILURE_REPEAT = 60.0
_EPOCH = _dt.datetime(1970, 1, 1)
#: ``expires_at`` of a lease its holder released on a clean stop (:meth:`Lease.release`).
RELEASED = _EPOCH


@dataclass(frozen=True)
class LeaseRow:
    """The lease as stored: ``holder`` (see :func:`holder_name`), ``epoch`` (increments at every
    take-over), ``expires_at`` (POSIX seconds)."""

    holder: str
    epoch: int
    expires_at: float
    address: str | None = None
    since: float | None = None


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` says: ``action`` is ``"take"`` (take the lease over: write epoch
    ``epoch``), ``"renew"`` (it is mine, epoch ``epoch``) or ``"refuse"`` (``reason`` says who
    holds it)."""

    action: str
    epoch: int
    reason: str = ""


def process_space() -> str:
    """Where a process id names one process, as 8 hex digits: this kernel's boot (Linux's boot
    id; elsewhere the boot time) and, on Linux, this process's PID namespace. Two hosts that
    share a name (cloned VMs), or two containers of one host that share its name (host
    networking) but not its process ids, have different ones: there, a holder's pid that does not
    run here says nothing of it."""
    boot = ""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
    except OSError:
        boot = f"{psutil.boot_time():.0f}"
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux: one process space per boot
        namespace = ""
    return hashlib.sha256(f"{boot} {namespace}".encode()).hexdigest()[:8]


def holder_name(endpoint: str = "", pid: int | None = None) -> str:
    """This process's name as a lease holder: ``host pid PID started T in SPACE endpoint`` (T:
    the process's start time, POSIX seconds, so a reused pid is not mistaken for a live holder;
    SPACE: :func:`process_space`, where PID means this process)."""
    pid = os.getpid() if pid is None else pid
    started = psutil.Process(pid).create_time()
    return f"{socket.gethostname()} pid {pid} started {started:.2f} in {process_space()} {endpoint}".strip()[:255]


def _parse_holder(holder: str) -> tuple[str, int, float, str | None, str] | None:
    """A lease ``holder`` (see :func:`holder_name`) as ``(host, pid, started, space, endpoint)``
    (``space`` None for a holder named by an earlier release, without one); None when it is not
    in that form."""
    parts = holder.split()
    try:
        host, pid, started = parts[0], int(parts[2]), float(parts[4])
    except (IndexError, ValueError):
        return None
    if len(parts) > 6 and parts[5] == "in":
        return host, pid, started, parts[6], " ".join(parts[7:])
    return host, pid, started, None, " ".join(parts[5:])


def describe_holder(holder: str | None) -> str:
    """A lease ``holder`` (see :func:`holder_name`) in words: ``pid 17611 on HOST (started
    2026-11-28 14:36:57 UTC), at tcp://...`` (when the process started, not when it took the
    lease); the text as it is when it is not in that form,
    ``"none"`` for no holder (a released lease)."""
    parsed = _parse_holder(holder) if holder else None
    if parsed is None:
        return holder or "none"
    host, pid, started, _, endpoint = parsed
    try:
        since = _dt.datetime.fromtimestamp(started, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):  # not a time this machine can show
        return holder
    return f"pid {pid} on {host} (started {since})" + (f", at {endpoint}" if endpoint else "")


def local_holder_alive(holder: str) -> bool | None:
    """Whether the process named by ``holder`` (see :func:`holder_name`) still runs: True or
    False for a holder of this host and process space (a zombie, ended but not yet reaped, does
    not run), None for another host's, or another process space's (another machine of the same
    name, a container with its own process ids): unknowable from here. A holder named without a
    space (an earlier release) is judged by its host name alone."""
    parsed = _parse_holder(holder)
    if parsed is None:
        return None
    host, pid, started, space, _ = parsed
    if host != socket.gethostname() or (space is not None and space != process_space()):
        return None
    try:
        process = psutil.Process(pid)
        return abs(process.create_time() - started) < 0.02 and process.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def decide(row: LeaseRow | None, me: str, now: float, holder_alive: bool | None = None) -> Decision:
    """The lease decision (pure). ``row``: the stored lease (None: none yet); ``me``: my holder
    name; ``now``: POSIX seconds; ``holder_alive``: whether the row's holder process runs (None:
    unknown, e.g. it is on another host).

    Mine → renew at the same epoch. None, expired, or held by a process known to be dead → take
    it over at epoch + 1. Otherwise → refuse, naming the holder and when its lease expires.
    """
    if row is None:
        return Decision("take", 1)
    if row.holder == me:
        return Decision("renew", row.epoch)
    if row.expires_at <= now or holder_alive is False:
        return Decision("take", row.epoch + 1)
    return Decision("refuse", row.epoch,
                    f"held by the manager {describe_holder(row.holder)} (lease epoch {row.epoch}, "
                    f"expires in {row.expires_at - now:.0f} s unless renewed)")


def _seconds(value: _dt.datetime) -> float:
    return (value - _EPOCH).total_seconds()


class Lease:
    """The lease of one manager on ``engine``'s database.

    ``holder``: this manager's name (:func:`holder_name`); ``seconds``: how long a lease lasts
    unrenewed; ``alive``: tells whether a holder process runs (:func:`local_holder_alive`;
    tests pass their own). :attr:`epoch` is the epoch held (None before :meth:`acquire`).
    """

    def __init__(self, engine: Engine, holder: str, seconds: float = 15.0,
                 alive: Callable[[str], bool | None] = local_holder_alive, address: str | None = None) -> None:
        self.engine, self.holder, self.seconds, self.alive = engine, holder, seconds, alive
        self.address = address  # the endpoint peers reach this manager at (standbys name it)
        self.epoch: int | None = None
        self.previous: LeaseRow | None = None  # the row as the last try_acquire read it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = threading.Event()  # set when a renewal finds the lease taken over
        self.renewed_at = time.monotonic()  # of the last renewal (or the start): :meth:`overdue`
        self._overdue_said = -math.inf
        self._looked_at: float | None = None  # monotonic s of the previous :meth:`overdue` call
        #: the database server's clock minus this host's, seconds, as last read (:meth:`now`)
        self.skew = 0.0
        self._skew_said = False
        # how long try_acquire waits for the row lock of a holder inside a transaction before it
        # answers "refuse" (and is tried again): a standby keeps serving its loop meanwhile
        self.lock_wait = min(1.0, seconds / 3)

    def now(self) -> float:
        """The lease's clock, POSIX seconds: the database server's, as this host's clock plus
        :attr:`skew`, the difference last read (:meth:`read`, :meth:`renew`)."""
        return time.time() + self.skew

    def _read_clock(self, conn: Connection) -> float:
        """Read the database server's clock on ``conn`` (:func:`gridcrawl.db.server_time`; this
        host's for SQLite), keep its difference from this host's (:attr:`skew`) and return it
        (POSIX s). A difference over a quarter of the lease is a WARNING, once."""
        server = server_time(conn)
        local = time.time()
        if server is None:
            return local
        self.skew = server - local
        if abs(self.skew) > self.seconds / 4 and not self._skew_said:
            self._skew_said = True
            log.warning("this host's clock is %.1f s %s the database server's: the manager lease is judged by the "
                        "server's clock, but fix this host's (NTP): its logs and records disagree with the others'",
                        abs(self.skew), "behind" if self.skew > 0 else "ahead of")
        return server

    def read(self, conn: Connection | None = None) -> LeaseRow | None:
        """The stored lease, or None (a standby watches this); reads the server's clock too
        (:meth:`now`)."""
        t = models.manager_lease
        if conn is None:
            with self.engine.connect() as conn:
                return self.read(conn)
        row = conn.execute(sa.select(t.c.holder, t.c.epoch, t.c.expires_at, t.c.address, t.c.since)
                           .where(t.c.name == LEASE_NAME)).first()
        self._read_clock(conn)
        return None if row is None else LeaseRow(row.holder, int(row.epoch), _seconds(row.expires_at), row.address,
                                                 _seconds(row.since) if row.since is not None else None)

    def try_acquire(self, now: float | None = None) -> Decision:
        """Take (or keep) the lease if :func:`decide` allows; returns the decision carried out
        (``refuse``: not taken). Two managers racing both read the same epoch; the conditional
        UPDATE lets only one of them through, the other gets ``refuse``. ``now``: POSIX seconds
        (default: the database server's clock, :meth:`now`)."""
        given = now
        t = models.manager_lease
        row: LeaseRow | None = None
        try:
            with self.engine.connect() as conn, lock_wait(conn, self.lock_wait), conn.begin():
                limit_idle_transaction(conn, self.seconds)
                insert_ignore(conn, t, [{"name": LEASE_NAME, "holder": "", "epoch": 0, "expires_at": _EPOCH}])
                row = self.previous = self.read(conn)
                now = self.now() if given is None else given
                alive = self.alive(row.holder) if row is not None and row.holder and row.holder != self.holder else None
                decision = decide(row if row and row.holder else None, self.holder, now, alive)
                if decision.action == "refuse":
                    return decision
                seen = row.epoch if row is not None else 0
                values = {"holder": self.holder, "epoch": decision.epoch,
                          "expires_at": from_timestamp(now + self.seconds), "address": self.address}
                if decision.action == "take":
                    values["since"] = from_timestamp(now)
                changed = conn.execute(t.update().where(t.c.name == LEASE_NAME, t.c.epoch == seen).values(
                    **values)).rowcount
        except sa.exc.DBAPIError as exc:
            if not is_lock_timeout(exc):
                raise
            # the holder is inside a transaction on the row (renewing, or writing its records): it
            # is alive, or paused until the server ends that transaction (limit_idle_transaction).
            # If its lease has expired as committed, end that transaction now (PostgreSQL only:
            # elsewhere this read would wait on the lock too).
            if self.engine.dialect.name == "postgresql":
                row = self.read()
                now = self.now() if given is None else given
                alive = self.alive(row.holder) if row is not None and row.holder != self.holder else None
                if row is not None and row.holder and decide(row, self.holder, now, alive).action == "take":
                    self._end_expired_holder(row)
            return Decision("refuse", row.epoch if row is not None else 0,
                            "locked by its holder's open transaction")
        if changed != 1:
            return Decision("refuse", seen, "taken by another manager at the same moment")
        self.epoch = decision.epoch
        self.renewed_at = time.monotonic()
        if decision.action == "take":
            log.info("manager lease taken (epoch %d)%s", self.epoch,
                     f"; previous holder: {describe_holder(row.holder)}" if row is not None and row.holder else "")
        return Decision(decision.action, self.epoch)

    def _end_expired_holder(self, row: LeaseRow) -> None:
        """The lease ``row`` has expired but its holder still holds the row inside a transaction
        (paused or hung in it): end that transaction's session, so the next try gets the row."""
        try:
            with self.engine.begin() as conn:
                pids = end_row_lock_holders(conn, models.manager_lease)
        except sa.exc.DBAPIError as exc:
            log.warning("could not end the session of the expired lease holder, the manager %s (%s)",
                        describe_holder(row.holder), str(exc).splitlines()[0])
            return
        if pids:
            log.warning("the lease of the manager %s expired inside its open transaction (paused or hung): ended "
                        "its database session (pid %s)", describe_holder(row.holder), ", ".join(map(str, pids)))

    def acquire(self, now: float | None = None) -> int:
        """Take the lease or raise :class:`LeaseHeld` naming its holder; returns the epoch."""
        decision = self.try_acquire(now)
        if decision.action == "refuse":
            url = shown_url(self.engine.url)
            raise LeaseHeld(f"another manager runs on the database {url}: its lease is {decision.reason}")
        return decision.epoch

    def renew(self, conn: Connection | None = None, now: float | None = None) -> None:
        """Extend the lease by ``seconds`` from ``now`` (POSIX s; default: the database server's
        clock), fenced by holder and epoch (in ``conn``'s transaction when given). Raises
        :class:`LeaseLost` if the lease was taken over."""
        if conn is None:
            with self.engine.begin() as conn:
                return self.renew(conn, now)
        t = models.manager_lease
        limit_idle_transaction(conn, self.seconds)
        now = self._read_clock(conn) if now is None else now
        changed = conn.execute(t.update().where(t.c.name == LEASE_NAME, t.c.holder == self.holder,
                                                t.c.epoch == self.epoch)
                               .values(expires_at=from_timestamp(now + self.seconds))).rowcount
        if changed != 1:
            self.lost.set()
            raise LeaseLost(f"the manager lease (epoch {self.epoch}) was taken over by another manager")
        self.renewed_at = time.monotonic()

    def overdue(self) -> None:
        """Log a WARNING when the lease has gone unrenewed for longer than it lasts (then once a
        :data:`LEASE_FAILURE_REPEAT`): a renewal that neither succeeds nor fails — a database
        that hangs — left the manager silent while its lease ran out and a standby that reaches
        the database could take over. Called from the manager's loop."""
        now = time.monotonic()
        late = now - self.renewed_at
        # the loop calls this every tick: a previous call longer than a lease ago means this
        # process did not run meanwhile (SIGSTOP, a VM frozen, a starved CPU) — it blamed its
        # database, which had answered all along, as the manager woke to find itself taken over
        paused = self._looked_at is not None and now - self._looked_at > self.seconds
        self._looked_at = now
        if late > self.seconds and now - self._overdue_said >= LEASE_FAILURE_REPEAT and not self.lost.is_set():
            self._overdue_said = now
            log.warning("the manager lease has not been renewed for %.0f s (%s): it has expired, and a standby "
                        "manager that reaches the database may take over; this one learns it %s", late,
                        "this manager did not run: it was paused or starved of CPU" if paused
                        else "its database does not answer",
                        "at its next renewal" if paused else "when the database answers")

    def start(self) -> "Lease":
        """Renew the lease every ``seconds / 3`` from a thread of its own (a database that does
        not answer is tried again; a lease taken over sets :attr:`lost` and ends the thread)."""
        def run() -> None:
            failing_since, said = None, -math.inf  # monotonic s: the first failure, the last WARNING
            while not self._stop.wait(self.seconds / 3):
                try:
                    self.renew()
                except LeaseLost as exc:
                    log.error("%s: this manager is no longer the active one", exc)
                    return
                except Exception as exc:  # database down: the lease runs on until it answers
                    now = time.monotonic()
                    failing_since = now if failing_since is None else failing_since
                    if now - said >= LEASE_FAILURE_REPEAT:  # not every renewal: once a second, for the outage
                        said = now
                        log.warning("renewing the manager lease failed for %.0f s (%s); retrying every %.1f s",
                                    now - failing_since, str(exc).splitlines()[0], self.seconds / 3)
                    continue
                if failing_since is not None:
                    log.warning("the manager database answers again: lease renewed after %.0f s of failures",
                                time.monotonic() - failing_since)
                    failing_since, said = None, -math.inf
        self._thread = threading.Thread(target=run, name="lease", daemon=True)
        self._thread.start()
        return self

    def release(self) -> None:
        """Stop renewing and let the lease expire now (a clean stop: the next manager need not
        wait). Errors are logged, not raised: the lease then expires by itself."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.epoch is None or self.lost.is_set():
            return
        t = models.manager_lease
        try:
            with self.engine.begin() as conn:
                conn.execute(t.update().where(t.c.name == LEASE_NAME, t.c.holder == self.holder,
                                              t.c.epoch == self.epoch).values(expires_at=RELEASED))
        except Exception as exc:
            log.warning("could not release the manager lease (%s); it expires in %.0f s",
                        str(exc).splitlines()[0], self.seconds)
