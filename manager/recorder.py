"""Batched writes of the manager's records (executor, application, thread, attempt) to SQL.

The server loop hands the core's events (:mod:`gridcrawl.manager.events`) to
:meth:`Recorder.add`, which only appends them to a list; a background thread maps them to rows
(:func:`rows`: this module is the one place that knows the manager's tables and columns) and
flushes every ``record_interval`` seconds in one transaction, merging all changes to one row into
one statement and sending rows of one shape to the driver's ``executemany`` at once, so SQL never
throttles dispatch. The manager programs (on Linux) have those writes done by a process of their
own (:class:`WriterProcess`, forked at start, :class:`BatchWriter` in it), so that mapping events
to rows and the driver's work do not take the server loop's interpreter: the thread then only
rotates and fsyncs the journal and waits for the writer's answer.

With a *journal* (``gridcrawl-manager --journal``, by default next to its log), the events are
also a write-ahead log: the loop appends them to a local file (one msgpack array of the events of
each pass, each event a :func:`gridcrawl.manager.events.to_list` list, encoded in one call by
:func:`gridcrawl.manager.events.encode`) before it sends the
messages they go with (:meth:`Recorder.sync_journal`: one ``write`` per pass, so they survive the
manager's ``kill -9`` in the page cache), and the flusher fsyncs each batch's segment of the file
before it writes it to SQL and deletes the segment once committed. While the database is down
the segments stay on disk (memory stays bounded) and are written, oldest first, when it answers;
what the manager could not write before it stopped or died is replayed, idempotently (inserts
are insert-if-absent, updates set the same values again), when the next manager starts
(:meth:`Recorder.replay`). So "which executor ran which URL" survives a database that is down,
and a manager killed between a result and its record.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import select
import signal
import sys
import threading
import time
from collections import defaultdict
from multiprocessing.connection import Pipe
from operator import itemgetter
from pathlib import Path

import msgpack
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gridcrawl import models
from gridcrawl.protocol import ErrorKind
from gridcrawl.db import from_timestamp, insert_ignore
from gridcrawl.manager import events as ev
from gridcrawl.manager.lease import Lease, LeaseLost
from gridcrawl.states import ApplicationState, ThreadState
from gridcrawl.words import counted

log = logging.getLogger("gridcrawl.manager.recorder")

TABLES = {"executor": models.executor, "application": models.application,
          "thread": models.thread, "attempt": models.attempt}
_TIME_COLUMNS = {"ping_time", "quarantined_until", "time_registered", "time_created", "time_completed", "time_submitted",
                 "time_started", "time_finished", "time_assigned"}
# Parents before children, so foreign keys hold within one flush.
_ORDER = ("executor", "application", "thread", "attempt")
_READY, _SCHEDULED, _STARTED, _FINISHED, _DEAD = (int(s) for s in ThreadState)
_STOPPED = int(ApplicationState.STOPPED)


def _sql_values(values: dict) -> dict:
    """``values`` with the POSIX seconds of its time columns as naive UTC datetimes (what
    SQLAlchemy binds); other values, datetimes already among them, as they are."""
    return {k: (from_timestamp(v) if k in _TIME_COLUMNS and type(v) in (float, int) else v) for k, v in values.items()}


_SECONDS: dict[float, str] = {}  # whole POSIX second -> "YYYY-MM-DD HH:MM:SS" (UTC)


@functools.lru_cache(maxsize=4096)  # the records of one message share its time
def sqlite_time(seconds: float) -> str:
    """POSIX ``seconds`` as SQLAlchemy stores a DateTime on SQLite: ``YYYY-MM-DD
    HH:MM:SS.ffffff`` text, UTC, rounded to the microsecond as ``datetime.fromtimestamp`` rounds
    (half to even). The recorder hands SQLite these strings itself: sqlite3's datetime adapter
    (``isoformat``) was 19 % of the recorder's instructions (callgrind)."""
    frac, whole = math.modf(seconds)
    micro = round(frac * 1e6)
    if micro >= 1_000_000:
        whole, micro = whole + 1, micro - 1_000_000
    elif micro < 0:
        whole, micro = whole - 1, micro + 1_000_000
    prefix = _SECONDS.get(whole)
    if prefix is None:
        if len(_SECONDS) > 4096:
            _SECONDS.clear()
        prefix = _SECONDS[whole] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(whole))
    return f"{prefix}.{micro:06d}"


#: bind parameter names of time values: the columns, and the ``v_`` names of batched updates
_BIND_TIMES = _TIME_COLUMNS | {"v_" + name for name in _TIME_COLUMNS}


def _bind_values(row: dict) -> dict:
    """A row of bind parameters (column names, or ``v_`` names) with its POSIX seconds as datetimes."""
    return {k: (from_timestamp(v) if k in _BIND_TIMES and type(v) in (float, int) else v) for k, v in row.items()}


def _sqlite_params(names: list[str]):
    """A function of a row (a dict holding every name of ``names``) to its parameter tuple in
    the order of ``names``, POSIX seconds of time parameters as :func:`sqlite_time` text."""
    get = itemgetter(*names) if len(names) > 1 else (lambda row, name=names[0]: (row[name],))
    times = [i for i, name in enumerate(names) if name in _BIND_TIMES]
    if not times:
        return get

    def params(row: dict) -> tuple:
        values = list(get(row))
        for i in times:
            if type(values[i]) in (float, int):  # a datetime (an older journal's) goes as it is
                values[i] = sqlite_time(values[i])
        return tuple(values)
    return params


def _heartbeat(e: ev.ExecutorHeartbeat) -> dict:
    values = {"ping_time": e.time}
    for name in ("cpu_usage", "cpu_avail", "cpu_totalusage", "pages_per_second", "mem_usage"):
        value = getattr(e, name)
        if value is not None:
            values[name] = value
    return values


#: event class -> the rows it writes, as (table, op, primary key value, column values); times are
#: POSIX seconds here, converted where they are written (:func:`_sql_values`, :func:`sqlite_time`)
_ROWS = {
    ev.ExecutorRegistered: lambda e: [("executor", "upsert", e.executor_id, {
        "executor_id": e.executor_id, "name": e.name, "is_dedicated": e.dedicated, "is_connected": True,
        "accepting": e.accepting, "ping_time": e.time, "time_registered": e.time,
        "host": e.host, "usr_name": e.user, "threads": e.workers, "cpu_max": e.cpu_max, "num_cpus": e.num_cpus,
        "mem_max": e.mem_max, "os": e.os[:64], "arch": e.arch[:64], "capabilities": " ".join(e.capabilities) or None})],
    ev.ExecutorHeartbeat: lambda e: [("executor", "update", e.executor_id, _heartbeat(e))],
    ev.ExecutorDisconnected: lambda e: [("executor", "update", e.executor_id, {"is_connected": False})],
    ev.ExecutorAvailability: lambda e: [("executor", "update", e.executor_id, {"accepting": e.accepting})],
    ev.ExecutorQuarantined: lambda e: [("executor", "update", e.executor_id, {"quarantined_until": e.until})],
    ev.ApplicationCreated: lambda e: [("application", "upsert", e.application_id, {
        "application_id": e.application_id, "state": e.state, "time_created": e.time,
        "usr_name": e.user, "application_name": e.name})],
    ev.ApplicationChanged: lambda e: [
        ("application", "upsert", e.application_id, {
            "application_id": e.application_id, "state": e.state, "time_created": e.time_created,
            "time_completed": None, "usr_name": e.user, "application_name": e.name})
        if e.reopened else ("application", "update", e.application_id, {"state": e.state})],
    ev.ApplicationStopped: lambda e: [("application", "update", e.application_id,
                                       {"state": _STOPPED, "time_completed": e.time})],
    ev.ThreadSubmitted: lambda e: [("thread", "insert", e.internal_id, {
        "internal_thread_id": e.internal_id, "application_id": e.application_id, "thread_id": e.thread_id,
        "state": _READY, "url": e.url[:models.URL_LENGTH], "host": e.host[:255], "depth": e.depth,
        "priority": e.priority, "failed": False, "attempts": 0, "time_submitted": e.time,
        "needs": " ".join(e.needs) or None})],
    ev.ThreadAssigned: lambda e: [
        ("thread", "update", e.internal_id, {"state": _SCHEDULED, "executor_id": e.executor_id, "attempts": e.attempts,
                                             **({"time_started": None, "time_finished": None} if e.rerun else {})}),
        ("attempt", "insert", e.attempt_id, {"attempt_id": e.attempt_id, "internal_thread_id": e.internal_id,
                                             "executor_id": e.executor_id, "time_assigned": e.time,
                                             "outcome": "running"})],
    ev.ThreadStarted: lambda e: [
        ("thread", "update", e.internal_id, {"state": _STARTED, "time_started": e.time}),
        ("attempt", "update", e.attempt_id, {"time_started": e.time})],
    ev.ThreadFinished: lambda e: [
        ("thread", "update", e.internal_id, {"state": _FINISHED, "time_started": e.time_started,
                                             "time_finished": e.time, "error_kind": e.error_kind}),
        ("attempt", "update", e.attempt_id, {"outcome": "finished", "time_started": e.time_started,
                                             "time_finished": e.time})],
    ev.ThreadFailed: lambda e: [("thread", "update", e.internal_id, {
        "state": _FINISHED, "failed": True, "time_finished": e.time, "error_kind": ErrorKind.POISON.value})],
    ev.ThreadNotFetched: lambda e: [("thread", "update", e.internal_id, {
        "state": _FINISHED, "time_finished": e.time, "error_kind": e.error_kind})],
    ev.ThreadRequeued: lambda e: [("thread", "update", e.internal_id,
                                   {"state": _READY, "executor_id": None, "time_started": None})],
    ev.ThreadRestored: lambda e: [("thread", "update", e.internal_id, {"state": _READY})],
    ev.ThreadDead: lambda e: [("thread", "update", e.internal_id, {"state": _DEAD})],
    ev.AttemptEnded: lambda e: [("attempt", "update", e.attempt_id,
                                 {"outcome": e.outcome, "time_finished": e.time,
                                  **({} if e.time_started is None else {"time_started": e.time_started})})],
}
_WAKE = (ev.ExecutorRegistered, ev.ApplicationCreated)
#: events that make a batch worth writing before its interval is up, with a writer process (whose
#: work costs the server loop nothing): about 2,000 grid threads' lives, a tenth of a second at
#: 20,000 threads/s; a real crawl's few hundred events a second never reach it
EAGER_BATCH = 10_000
#: Seconds between the ERRORs of a recorder whose database keeps failing (it retries every 2.5 s).
FAILURE_REPEAT = 60.0


def journal_passes(path: Path) -> list[list]:
    """The events of journal file ``path`` (none if it does not exist), one list per pass of the
    server loop, oldest first. A torn end (a manager that died mid-write) is skipped with a
    warning. A journal of an older manager (JSON lines, one row ``[table, op, values, key]``
    each) is read as row tuples of :func:`rows`, one pass per line."""
    if not path.exists():
        return []
    passes: list[list] = []
    with open(path, "rb") as f:
        if f.read(1) == b"[":  # an older manager's JSON lines
            f.seek(0)
            for line in f:
                try:
                    table, op, values, key = json.loads(line)
                except ValueError:
                    log.warning("skipped a torn line of the journal %s", path)
                    continue
                if table in TABLES:
                    passes.append([(table, op, key, _sql_values(values))])
            return passes
        f.seek(0)
        try:
            for items in msgpack.Unpacker(f, raw=False, strict_map_key=True):
                passes.append([ev.from_list(item) for item in items])
        except Exception as exc:  # msgpack raises several unrelated classes; from_list KeyError/TypeError
            log.warning("skipped the torn or unreadable end of the journal %s (%s)", path, type(exc).__name__)
    return passes


def journal_events(path: Path) -> list:
    """The events of journal file ``path``, oldest first: :func:`journal_passes`, flattened."""
    return [event for events in journal_passes(path) for event in events]


def rows(item) -> list[tuple[str, str, object, dict]]:
    """The rows an event of :mod:`gridcrawl.manager.events` writes: ``(table, op, key,
    values)`` with ``op`` ``"insert"`` (``values`` is the whole row), ``"upsert"`` (the whole row,
    inserted or updated) or ``"update"`` (``key`` is the primary key value, ``values`` the changed
    columns). Times are SQL-ready (naive UTC datetimes); URLs and names are cut to their columns.
    A row tuple (an older manager's journal) is returned as it is. Raises ``KeyError`` for
    anything else."""
    if type(item) is tuple:
        return [item]
    return [(table, op, key, _sql_values(values)) for table, op, key, values in _ROWS[type(item)](item)]


class Recorder:
    """Collects record actions and writes them to ``engine`` in batches from its own thread.

    ``journal``: the write-ahead journal file (None: none; records wait in memory while the
    database is down, and those unwritten when the manager stops are lost). Its segment being
    written is ``<journal>.flushing``. ``writer``: a :class:`WriterProcess` that writes the
    batches (None: this process's flusher thread writes them; so does it, with a warning, if the
    writer process ends). Call :meth:`replay` before :meth:`start`.
    """

    def __init__(self, engine: Engine, interval: float = 0.2, journal: Path | str | None = None,
                 writer: "WriterProcess | None" = None) -> None:
        self.engine = engine
        self.interval = interval
        self.journal = Path(journal) if journal is not None else None
        self.segment = self.journal.with_name(self.journal.name + ".flushing") if self.journal else None
        self.replayed = 0    # records replayed from an earlier manager's journal
        self._file = None    # the journal, open for appending
        self._unjournaled: list = []  # events not yet written to the journal
        self._segment_failed = False  # the segment holds records of a failed flush
        self._lock = threading.Lock()
        self._pending: list = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recorder", daemon=True)
        self._batches = BatchWriter(engine)  # writes in this process (replay; no writer process)
        self.writer = writer
        # with a writer process, a batch of EAGER_BATCH events is written at once
        self.eager_batch = EAGER_BATCH if writer is not None else math.inf
        self.flushed_rows = 0
        self.failures = 0
        # Fencing (hot standbys): ``lease`` (a Lease) is renewed first in every transaction and
        # raises LeaseLost when another manager took it over, so nothing of a lost epoch lands;
        # ``epoch`` is written into every new attempt row.
        self.lease = None
        self.epoch: int | None = None
        self.fenced = threading.Event()
        self.dropped = 0  # records dropped by abandon(), this manager was fenced out
        self._inodes: set[int] = set()  # the journal files this recorder opened (see abandon)

    def start(self) -> "Recorder":
        """Start the background flusher; returns self."""
        self._open_journal()
        self._thread.start()
        return self

    def add(self, event: ev.Event) -> None:
        """Queue one event of :mod:`gridcrawl.manager.events` (cheap; called from the server loop).
        A new executor or application is written at once rather than at the next interval:
        they are rare, and programs wait for them (``gridcrawl run`` for its executors)."""
        self.add_all([event])

    def add_all(self, events: list) -> None:
        """Queue ``events`` (as :meth:`add`, in order) under one lock: the server loop hands over
        the events of one message at once. With a writer process, :data:`EAGER_BATCH` waiting
        events wake the flusher before the interval is up (so a burst's records reach SQL in
        batches as fast as the writer takes them, not an interval behind)."""
        with self._lock:
            self._pending += events
            if self._file is not None:
                self._unjournaled += events
            full = len(self._pending) >= self.eager_batch
        if full:
            self._wake.set()
            return
        for event in events:
            if isinstance(event, _WAKE):
                self._wake.set()
                break

    def sync_journal(self) -> None:
        """Write the events added so far to the journal (one line, one ``write``; no fsync): the
        server loop calls this before it sends the messages that go with them."""
        with self._lock:
            self._write_lines()

    def close(self, timeout: float = 10.0) -> None:
        """Flush what is pending and stop the thread (waits at most ``timeout`` seconds for a flush
        under way: a database or writer process that hangs does not hang the manager's stop).
        What cannot be written stays in the journal for the next start."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("the records' last flush still runs after %.0f s; %s", timeout,
                      f"what it has not written waits in the journal {self.journal} for the next start"
                      if self.journal is not None else f"{len(self._pending)} record{'' if len(self._pending) == 1 else 's'} not written {'is' if len(self._pending) == 1 else 'are'} lost")
        elif self._pending or self._segment_failed:
            try:
                self.flush()
            except Exception as exc:
                if self.journal is not None:
                    log.error("could not write the last records (%s); they wait in the journal %s for the next "
                              "start", str(exc).splitlines()[0], self.journal)
                else:
                    log.error("could not write the last %s: %s", counted(len(self._pending), "record"),
                              str(exc).splitlines()[0])
        if self._file is not None:
            with self._lock:
                self._write_lines()
                self._file.close()
                self._file = None
            if self.journal.stat().st_size == 0 and not self.segment.exists():
                self.journal.unlink()
                epoch_file = self._epoch_file()
                if epoch_file.exists():  # nothing left to replay: nothing to date
                    epoch_file.unlink()

    # ------------------------------------------------------------------ journal

    def _open_journal(self) -> None:
        if self.journal is not None and self._file is None:
            self._file = open(self.journal, "ab")
            self._inodes.add(os.fstat(self._file.fileno()).st_ino)

    def _write_lines(self) -> None:
        """(Under the lock.) Append the waiting events to the journal file as one msgpack array."""
        if self._unjournaled and self._file is not None:
            self._file.write(ev.encode(self._unjournaled))
            self._file.flush()
            self._unjournaled = []

    def _rotate(self) -> None:
        """(Under the lock.) The journal so far becomes (or joins) the segment being flushed
        (fsynced after, by :meth:`_sync_segment`); a new, empty journal takes the next records.
        A journal that vanished (deleted or moved by another program) is started afresh, with a
        warning: the manager goes on. Raises :class:`LeaseLost`, touching nothing, when the
        journal is another manager's now (:meth:`_superseded`)."""
        if (theirs := self._superseded()) is not None:
            raise LeaseLost(f"the journal {self.journal} is written by the manager of lease epoch {theirs} now")
        self._write_lines()
        self._file.close()
        self._file = None
        try:
            if self.segment.exists():
                with open(self.segment, "ab") as out, open(self.journal, "rb") as f:
                    out.write(f.read())
                self.journal.unlink()
            else:
                os.replace(self.journal, self.segment)
        except FileNotFoundError:
            log.warning("the journal %s vanished (deleted or moved by another program): a new one is started; "
                        "records written to it since the last flush may be lost", self.journal)
        finally:
            self._open_journal()

    def _superseded(self) -> int | None:
        """The lease epoch of another manager that took this journal over (its ``.epoch`` file
        names it: a standby on this host that shares the path took the lease while this manager
        was paused), else None. Such a manager is fenced out and must not touch the files."""
        theirs = self.journal_epoch()
        return theirs if self.epoch is not None and theirs is not None and theirs != self.epoch else None

    def _sync_segment(self) -> None:
        """fsync the segment (outside the lock: the server loop's :meth:`add` and
        :meth:`sync_journal` do not wait for the disk)."""
        with open(self.segment, "rb") as f:
            os.fsync(f.fileno())

    def replay(self) -> int:
        """Write what an earlier manager left in the journal (its segment, then the journal) to
        the database, idempotently, and delete them; returns the number of records replayed.
        Raises the database's error (the files stay). Call before :meth:`start`."""
        if self.journal is None:
            return 0
        records = journal_events(self.segment) + journal_events(self.journal)
        if records:  # attempts of the manager that wrote them: its epoch, not this one's (None yet)
            self._batches.write(records, True, self.lease, self.journal_epoch())
            self.replayed += len(records)
            log.warning("replayed %s from the journal %s", counted(len(records), "record"), self.journal)
        for path in (self.segment, self.journal):
            if path.exists():
                path.unlink()
        return len(records)

    def _run(self) -> None:
        due = time.monotonic() + self.interval
        said = -math.inf  # monotonic s of the last ERROR of a failing database
        while not self._stop.is_set():
            # every ``interval`` seconds from the start of the previous flush (not from its end:
            # a flush of 50,000 records takes a few tenths of a second)
            self._wake.wait(max(0.0, due - time.monotonic()))
            self._wake.clear()
            due = time.monotonic() + self.interval
            try:
                self.flush()
            except LeaseLost as exc:  # the manager's step-down logs what was dropped (:attr:`dropped`)
                log.debug("%s", exc)
                self.abandon()
                return
            except Exception as exc:  # database down: keep the batch, try again
                if self._taken_over():  # (the standby ended this manager's session: no database fault)
                    log.debug("writing records failed (%s) as the lease was taken over", str(exc).splitlines()[0])
                    self.abandon()
                    return
                self.failures += 1
                now = time.monotonic()
                if now - said >= FAILURE_REPEAT:  # once, then once a minute: not every 2.5 s of an outage
                    said = now
                    log.error("writing records failed (%s); retrying every %.1f s (%s so far)",
                              str(exc).splitlines()[0], min(5.0, self.interval * 5), counted(self.failures, "failure"))
                self._stop.wait(min(5.0, self.interval * 5))  # a stop during an outage does not wait it out
                continue
            if said > -math.inf:
                log.warning("writing records works again after %s", counted(self.failures, "failure"))
                said = -math.inf

    def _taken_over(self) -> bool:
        """After a failed write: whether this manager's lease was taken over, so that the failure
        is the take-over's (a standby ends the database session of a holder paused inside its
        transaction: its next statement fails) and not the database's. Renews the lease to know
        (:class:`LeaseLost` sets ``lease.lost``, which the manager's loop acts on); False when it
        cannot tell (no lease, or the renewal fails too: the database is down)."""
        if self.lease is None:
            return False
        if self.lease.lost.is_set():
            return True
        try:
            self.lease.renew()
        except LeaseLost:
            return True
        except Exception:  # the database fails for the renewal too: it is the database's fault
            return False
        return False

    def flush(self) -> int:
        """Write everything pending in one transaction; return the number of rows written.

        The journal, if any, is replayed first. A batch that breaks a unique key (a row already
        there) is written again with insert-if-absent. On any other failure the batch goes to the
        journal (or, without one, back in front of newer records) and the error is re-raised
        (the database may be down: nothing is lost).
        """
        if self.journal is not None and self._file is not None:
            return self._flush_journaled()
        with self._lock:
            batch, self._pending = self._pending, []
        return self._write_from_memory(batch, careful=False) if batch else 0

    def _write_from_memory(self, batch: list, careful: bool) -> int:
        """Write ``batch``, held only in memory; on failure put it back in front of newer records
        and re-raise. Returns the rows written."""
        try:
            rows = self._write_batch(batch, None, careful=careful)
        except Exception:
            self._put_back(batch)
            raise
        self.flushed_rows += rows
        return rows

    def _flush_journaled(self) -> int:
        """:meth:`flush` with a journal: the journal becomes the segment (fsynced), the segment is
        written (all of it, re-read, if an earlier flush of it failed: oldest records first) and
        deleted once committed. On failure the segment stays, the memory is freed, and the error
        is re-raised."""
        with self._lock:
            batch, self._pending = self._pending, []
            if not batch and not self._segment_failed:
                return 0
            try:
                self._rotate()
            except LeaseLost:
                self._pending = batch + self._pending  # for abandon()'s count of what is dropped
                raise
        if not self.segment.exists():  # the journal had vanished (_rotate): this batch is only in memory
            self._segment_failed = False
            return self._write_from_memory(batch, careful=True)
        self._sync_segment()  # the segment is on disk before its records are written to SQL
        try:  # after a failure, the whole segment: it holds older records too
            rows = self._write_batch(None if self._segment_failed else batch, self.segment,
                                     careful=self._segment_failed)
        except Exception:
            self._segment_failed = True
            raise
        self.segment.unlink()
        self._segment_failed = False
        self.flushed_rows += rows
        return rows

    def abandon(self, stale: bool = False) -> int:
        """Forget every record not yet written, journal included (this manager was fenced out: its
        records must never land); returns how many were dropped. Stops the flusher. Journal
        files are deleted only if this recorder wrote them (a manager that took over on this host
        may have replayed ours and written its own at the same path), or all of them with
        ``stale`` (a journal found at start that belongs to a lost epoch). :attr:`dropped` counts
        every record dropped so far, by any call."""
        self.fenced.set()
        self._stop.set()
        self._wake.set()
        with self._lock:
            dropped, self._pending, self._unjournaled = len(self._pending), [], []
            if self._file is not None:
                self._file.close()
                self._file = None
            if stale:
                dropped += len(journal_events(self.segment)) + len(journal_events(self.journal)) if self.journal else 0
            elif self._superseded() is not None:
                # another manager writes at these paths now: its files (an inode number may have
                # been reused for them) are none of ours to delete
                self.dropped += dropped
                return dropped
            for path in (self.journal, self.segment):
                try:
                    if path is not None and (stale or path.stat().st_ino in self._inodes):
                        path.unlink()
                except FileNotFoundError:
                    pass
            self.dropped += dropped
        return dropped

    def journal_epoch(self) -> int | None:
        """The lease epoch of the manager that wrote the journal (``<journal>.epoch``), or None."""
        path = self._epoch_file()
        try:
            return int(path.read_text()) if path is not None else None
        except (OSError, ValueError):
            return None

    def set_journal_epoch(self, epoch: int) -> None:
        """Record that this manager writes the journal under lease epoch ``epoch``."""
        self.epoch = epoch
        path = self._epoch_file()
        if path is not None:
            path.write_text(str(epoch))

    def _epoch_file(self) -> Path | None:
        return self.journal.with_name(self.journal.name + ".epoch") if self.journal is not None else None

    def _put_back(self, batch: list) -> None:
        with self._lock:
            self._pending = batch + self._pending

    def _write_batch(self, events: list | None, segment: Path | None, careful: bool) -> int:
        """Write one batch in one transaction (see :meth:`BatchWriter.write`): ``events``, or, when
        None, the journal ``segment`` holding them; the writer process, if any, reads the segment
        itself rather than being sent the events. Returns the rows written; raises as
        :meth:`BatchWriter.write`, or :class:`RecordWriteError` for the writer process's errors."""
        if self.writer is not None:
            try:
                return self.writer.write(events if segment is None else None, segment, careful,
                                         self.lease, self.epoch)
            except WriterGone as exc:
                log.error("%s; the manager writes its records itself from now on", exc)
                self.writer, self.eager_batch = None, math.inf
        if events is None:
            events = journal_events(segment)
        return self._batches.write(events, careful, self.lease, self.epoch)


class BatchWriter:
    """Writes batches of the manager's events to SQL (``engine``), one transaction a batch: the
    part of the recording that runs in :class:`WriterProcess` when there is one. Keeps the
    compiled statements of the SQLite fast path (:meth:`_executemany`)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._compiled: dict[tuple, tuple[str, set[str], object]] = {}
        self.through_table = True  # False once the database refused a temporary table

    def write(self, batch: list, careful: bool = False, lease=None, epoch: int | None = None) -> int:
        """Write the events (or older journal row tuples) of ``batch`` in one transaction; returns
        the number of rows written. Every change of one row is merged into one statement, and rows
        of one shape go to the driver's ``executemany`` at once. ``careful``: inserts are
        insert-if-absent (a replay, or a batch that broke a unique key: written again this way
        when ``careful`` is False). ``lease`` (a :class:`~gridcrawl.manager.lease.Lease`) fences
        the transaction: it is renewed first, and :class:`LeaseLost` is raised, nothing written,
        if another manager took it over; ``epoch`` goes into every new attempt row. Raises the
        database's errors (nothing is written then)."""
        if not careful:
            try:
                return self._write(batch, False, lease, epoch)
            except sa.exc.IntegrityError:
                pass
        try:
            return self._write(batch, True, lease, epoch)
        except sa.exc.IntegrityError:
            if len(batch) == 1:
                raise
        return self._write_each(batch, lease, epoch)

    def _write_each(self, batch: list, lease, epoch: int | None) -> int:
        """Write the events of ``batch`` one transaction each, insert-if-absent, leaving out
        those the database still refuses (a key that names no row: a bug of ours), with one
        ERROR that counts them and names the first. Without this, one such record stopped the
        writer for good (it retried the batch for ever) and the manager at every start (the
        journal's replay raised). Returns the rows written."""
        rows, refused, first = 0, 0, None
        for item in batch:
            try:
                rows += self._write([item], True, lease, epoch)
            except sa.exc.IntegrityError as exc:
                refused += 1
                first = first or f"{item!r:.300} ({str(exc).splitlines()[0]})"
        if refused:
            log.error("%d of %d records refused by the database, left out (a bug: please report it); the first: %s",
                      refused, len(batch), first)
        return rows

    def _write(self, batch: list, careful: bool, lease, epoch: int | None) -> int:
        inserts: dict[str, dict] = defaultdict(dict)   # table -> key -> row
        upserts: dict[str, dict] = defaultdict(dict)
        updates: dict[str, dict] = defaultdict(dict)   # table -> key -> changed columns
        for item in batch:  # the rows' dicts are fresh: merged in place
            for table, op, key, values in (_ROWS[type(item)](item) if type(item) is not tuple else [item]):
                if op == "update":
                    if key in inserts[table] and not careful:  # careful: the row may exist already
                        inserts[table][key].update(values)
                    elif key in upserts[table]:
                        upserts[table][key].update(values)
                    else:
                        updates[table].setdefault(key, {}).update(values)
                elif op == "insert":
                    inserts[table][key] = values
                else:
                    upserts[table][key] = values
                    updates[table].pop(key, None)
        rows = 0
        if epoch is not None:
            for values in inserts["attempt"].values():
                values.setdefault("epoch", epoch)
        with self.engine.begin() as conn:
            if lease is not None:
                lease.renew(conn)
            for name in _ORDER:
                table = TABLES[name]
                pk = list(table.primary_key.columns)[0]
                for key, values in upserts[name].items():
                    changed = {k: v for k, v in values.items() if k != pk.name}
                    # rowcount 0: no such row, or (drivers counting changed rows) the same values
                    if conn.execute(table.update().where(pk == key).values(**_sql_values(changed))).rowcount == 0:
                        insert_ignore(conn, table, [_sql_values(values)])
                    rows += 1
                shapes: dict[tuple, list] = defaultdict(list)  # executemany needs one key set
                for values in inserts[name].values():
                    shapes[tuple(sorted(values))].append(values)
                for columns, values in shapes.items():
                    if careful:
                        insert_ignore(conn, table, [_sql_values(v) for v in values])
                    else:
                        self._executemany(conn, ("insert", name, columns), table.insert(), values)
                    rows += len(values)
                groups: dict[tuple, list] = defaultdict(list)
                for key, values in updates[name].items():
                    groups[tuple(sorted(values))].append((key, values))
                for columns, items in groups.items():
                    items, rows_set = self._set_together(conn, table, pk, columns, items)
                    rows += rows_set
                    if not items:
                        continue
                    stmt = table.update().where(pk == sa.bindparam("_key")).values(
                        {c: sa.bindparam("v_" + c) for c in columns})
                    self._executemany(conn, ("update", name, columns), stmt,
                                      [{"_key": key, **{"v_" + k: v for k, v in values.items()}}
                                       for key, values in items])
                    rows += len(items)
        return rows

    def _set_together(self, conn, table: sa.Table, pk: sa.Column, columns: tuple,
                      items: list[tuple[object, dict]]) -> tuple[list[tuple[object, dict]], int]:
        """Where the driver takes a round trip per row of an ``executemany`` UPDATE
        (:data:`ROW_AT_A_TIME`), set what of ``items`` (``(key, changed values)``, all changing
        ``columns``) fewer statements can set: all of them through a temporary table
        (:data:`THROUGH_TABLE`, at least :data:`THROUGH_TABLE_MIN`), else the rows that share
        their values (:func:`_set_same_values`). On SQLite (:data:`SAME_VALUES_IN_PROCESS`)
        only large groups of rows sharing their values are set so, by driver SQL. Returns the
        items left to set one by one and the number of rows set here."""
        dialect = conn.dialect.name
        if dialect not in ROW_AT_A_TIME:
            if (dialect in SAME_VALUES_IN_PROCESS and columns == ("state",)
                    and len(items) >= SAME_VALUES_IN_PROCESS_MIN):
                return _set_same_values(conn, table, pk, columns, items, SAME_VALUES_IN_PROCESS_MIN,
                                        _sqlite_update_in)
            return items, 0
        if len(items) >= THROUGH_TABLE_MIN and dialect in THROUGH_TABLE and self.through_table:
            if _update_through_table(conn, table, pk, columns, items):
                return [], len(items)
            self.through_table = False
            log.warning("the manager's database user may not create temporary tables "
                        "(GRANT CREATE TEMPORARY TABLES): its records are written a row at a time")
        if len(items) >= SAME_VALUES_MIN:
            return _set_same_values(conn, table, pk, columns, items)
        return items, 0

    def _executemany(self, conn, shape: tuple, stmt, rows: list[dict]) -> None:
        """Run ``stmt`` for every row of ``rows`` (all with the same keys).

        On SQLite, the statement is compiled once per shape and its rows go straight to the
        driver's ``executemany``: SQLAlchemy's per-row parameter processing cost more than the
        writes (profiled: most of the recorder's time at thousands of threads a second). The
        values are ones sqlite3 stores as SQLAlchemy would (times as ISO text, :func:`sqlite_time`;
        booleans as integers). Other back ends take the ordinary path, times as datetimes.
        """
        if conn.dialect.name != "sqlite":
            conn.execute(stmt, [_bind_values(row) for row in rows])
            return
        compiled = self._compiled.get(shape)
        if compiled is None:
            c = stmt.compile(dialect=conn.dialect, column_keys=list(rows[0]))
            names = list(c.positiontup)
            compiled = self._compiled[shape] = (str(c), set(names), _sqlite_params(names))
        sql, names, params = compiled
        if not names <= rows[0].keys():  # a column default SQLAlchemy would fill in
            conn.execute(stmt, [_bind_values(row) for row in rows])
            return
        conn.exec_driver_sql(sql, list(map(params, rows)))


#: back ends whose drivers send each row of an ``executemany`` UPDATE on its own round trip
#: (PyMySQL; pyodbc without ``fast_executemany``): there the writer sets rows in fewer
#: statements (:meth:`BatchWriter._set_together`). Not SQLite (in process: a row costs
#: microseconds, less than SQLAlchemy's work for one statement) nor psycopg (it pipelines the rows).
ROW_AT_A_TIME = frozenset({"mysql", "mariadb", "mssql"})
#: of those, the back ends where the rows of a batch that change the same columns, at least
#: ``THROUGH_TABLE_MIN``, go to a temporary table and are set from it by one UPDATE
#: (:func:`_update_through_table`); fewer, and SQL Server's, share values or go one by one
THROUGH_TABLE = frozenset({"mysql", "mariadb"})
#: rows of one table changing the same columns in one batch, at least, that go that way
THROUGH_TABLE_MIN = 64
#: rows of one table given the same new values in one batch, at least, set by one statement
SAME_VALUES_MIN = 4
#: keys in one such statement at most (SQL Server takes 2,100 parameters in one statement)
SAME_VALUES_CHUNK = 500
#: back ends in this process (SQLite) where rows of a batch whose one change is the same new
#: ``state``, at least ``SAME_VALUES_IN_PROCESS_MIN`` of them, are set by ``UPDATE ... WHERE key
#: IN (...)`` statements sent straight to the driver: the threads an application collected (DEAD)
#: in a grid of 1,000 desktops, whose collections fall in batches of their own
#: (``benchmarks/record_writer.py``: 100,000 of them 0.41-0.63 CPU-s instead of 0.64-0.83).
#: Measured with sqlite3 alone, 100,000 keys in batches of 10,000: 0.21 CPU-s instead of 0.36
#: when the keys are consecutive, 0.80-0.84 instead of 0.88-0.93 when scattered. Not other
#: columns: an indexed one (``executor_id``) or scattered groups of 100 were slower that way
#: (2.29-2.54 CPU-s against 1.75-2.05 row by row)
SAME_VALUES_IN_PROCESS = frozenset({"sqlite"})
SAME_VALUES_IN_PROCESS_MIN = 64


def _set_same_values(conn, table: sa.Table, pk: sa.Column, columns: tuple,
                     items: list[tuple[object, dict]], minimum: int = SAME_VALUES_MIN,
                     update_in=None) -> tuple[list[tuple[object, dict]], int]:
    """Of ``items`` (``(key, changed values)`` of one batch, all changing ``columns``), give the
    rows that share their new values with at least ``minimum - 1`` others those values
    in statements of :data:`SAME_VALUES_CHUNK` keys each, ``UPDATE table SET ... WHERE pk IN
    (...)``, on a back end that takes a round trip per row otherwise (SQL Server; MariaDB for
    batches too small for :func:`_update_through_table`): every grid thread an application
    collected goes DEAD, the threads of one ``assign`` go SCHEDULED on one executor (MariaDB,
    20,000 DEAD threads: 1.5 s row by row, 0.13 s so). ``update_in(conn, table, pk, values,
    keys)`` runs one statement, if given (:func:`_sqlite_update_in`); else SQLAlchemy does.
    Returns the items left to set one by one and the number of rows set here."""
    same: dict[tuple, list] = defaultdict(list)  # the new values -> their items
    for item in items:
        values = item[1]
        same[tuple(values[c] for c in columns)].append(item)
    left, done = [], 0
    for group in same.values():
        if len(group) < minimum:
            left += group
            continue
        keys = [key for key, _ in group]
        for start in range(0, len(keys), SAME_VALUES_CHUNK):
            chunk = keys[start:start + SAME_VALUES_CHUNK]
            if update_in is not None:
                update_in(conn, table, pk, group[0][1], chunk)
            else:
                conn.execute(table.update().where(pk.in_(chunk)).values(**_sql_values(group[0][1])))
        done += len(keys)
    return left, done


def _sqlite_update_in(conn, table: sa.Table, pk: sa.Column, values: dict, keys: list) -> None:
    """``UPDATE table SET column = value, ... WHERE pk IN (keys)`` on SQLite, as driver SQL: the
    values as :meth:`BatchWriter._executemany` hands them to sqlite3 (POSIX seconds as
    :func:`sqlite_time` text), the keys as parameters. SQLAlchemy's expansion of an IN list
    cost more than SQLite's work (``benchmarks/record_writer.py``)."""
    quote = conn.dialect.identifier_preparer.quote
    names = list(values)
    sets = ", ".join(f"{quote(name)} = ?" for name in names)
    params = _sqlite_params(names)(values)
    conn.exec_driver_sql(f"UPDATE {quote(table.name)} SET {sets} WHERE {quote(pk.name)} IN "
                         f"({', '.join('?' * len(keys))})", (*params, *keys))


#: MySQL / MariaDB error codes of a refused privilege (database, table, or global)
_ACCESS_DENIED = frozenset({1044, 1142, 1227})


def _update_through_table(conn, table: sa.Table, pk: sa.Column, columns: tuple,
                          items: list[tuple[object, dict]]) -> bool:
    """Set ``items`` (``(key, changed values)``, all changing ``columns``) of ``table`` on MariaDB
    / MySQL in a few statements, whatever their number: the rows go into a temporary table
    (PyMySQL sends an ``executemany`` INSERT as multi-row statements) and one multi-table
    ``UPDATE`` joins it on the key — the bulk update of MySQL's manual ("UPDATE Statement",
    multiple-table syntax) — instead of a round trip per row (``benchmarks/record_writer.py``:
    20,000 finished threads and their attempts in 0.73 s instead of 3.35 s). The temporary
    table is the connection's own and is dropped with ``DROP TEMPORARY TABLE``, which (unlike
    ``DROP TABLE``) does not end the transaction. Returns False, having changed nothing, when
    the database user may not create temporary tables (a refused statement does not end a
    MariaDB transaction); raises the database's other errors."""
    name = f"gc_rows_{table.name}"
    scratch = sa.Table(name, sa.MetaData(), sa.Column(pk.name, pk.type, primary_key=True, autoincrement=False),
                       *[sa.Column(c, table.c[c].type) for c in columns], prefixes=["TEMPORARY"])
    try:
        conn.exec_driver_sql(f"DROP TEMPORARY TABLE IF EXISTS {name}")  # left by a failed transaction
        scratch.create(conn)
    except sa.exc.DBAPIError as exc:
        if (getattr(exc.orig, "args", None) or (None,))[0] in _ACCESS_DENIED:
            return False
        raise
    conn.execute(scratch.insert(), [_sql_values({pk.name: key, **values}) for key, values in items])
    conn.execute(table.update().where(pk == scratch.c[pk.name]).values({c: scratch.c[c] for c in columns}))
    conn.exec_driver_sql(f"DROP TEMPORARY TABLE {name}")
    return True


class RecordWriteError(Exception):
    """The writer process could not write a batch; the message is the database error's first line."""


class WriterGone(Exception):
    """The writer process has ended (killed, or crashed); the batch it was given may or may not
    have been committed (written again, idempotently, by the caller)."""


class WriterProcess:
    """The manager's SQL writes in a process of their own, so that the server loop has its
    interpreter to itself: the writes (mapping events to rows, SQLAlchemy, the driver) were a
    third of the manager's CPU at thousands of grid threads a second, taken from the loop's GIL.

    Made by forking the manager (Linux; :meth:`possible`) before it creates its ZeroMQ context
    or any thread; the child leaves the engine's inherited connections to the manager and opens
    its own. :meth:`write` hands it one batch over a pipe and waits for the outcome: the events
    (msgpack of :func:`gridcrawl.manager.events.to_list`), or the path of the journal segment
    holding them (the child reads it, so the manager never encodes a batch twice), whether to
    insert carefully, the lease to fence the transaction with, and the epoch of new attempts.
    The child ends when :meth:`close` tells it to, or when the manager's end of the pipe closes
    (the manager died, ``kill -9`` included); it ignores SIGINT and SIGTERM, so that a Ctrl-C of
    the terminal's process group leaves it to write the manager's last batch.
    """

    def __init__(self, engine: Engine) -> None:
        self._conn, child = Pipe()
        self._lock = threading.Lock()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the child
            status = 1
            try:
                self._conn.close()
                _serve_writes(child, engine)
                status = 0
            finally:
                os._exit(status)
        child.close()
        self.exit_status: int | None = None

    @staticmethod
    def possible(engine: Engine) -> bool:
        """Whether a writer process can serve ``engine``: on Linux (fork, as ``gridcrawl run``
        starts its programs), and not an in-memory SQLite database (the child would see its own)."""
        url = engine.url
        memory = url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")
        return sys.platform.startswith("linux") and not memory

    def write(self, events: list | None, segment: Path | None, careful: bool, lease: Lease | None,
              epoch: int | None) -> int:
        """Have the child write ``events`` (or, when None, the journal ``segment`` holding them)
        in one transaction, as :meth:`BatchWriter.write` does; returns the rows written. Raises
        :class:`LeaseLost`, :class:`RecordWriteError` (the database's error: nothing written), or
        :class:`WriterGone` (the child has ended)."""
        packed = ev.encode(events) if events is not None else None
        fence = (lease.holder, lease.epoch, lease.seconds) if lease is not None else None
        with self._lock:
            try:
                self._conn.send((packed, None if segment is None else str(segment), careful, fence, epoch))
                kind, value = self._conn.recv()
            except (EOFError, OSError):
                self._wait(0.5)
                raise WriterGone(f"the record writer process {self.pid} ended ({self._status()})") from None
        if kind == "ok":
            return value
        if kind == "lease_lost":
            raise LeaseLost(value)
        raise RecordWriteError(value)

    def close(self, timeout: float = 5.0) -> None:
        """Tell the child to end and wait for it (at most ``timeout`` seconds, then SIGKILL)."""
        if self._lock.acquire(timeout=timeout):
            try:
                self._conn.send(None)
            except OSError:
                pass
            finally:
                self._lock.release()
        self._conn.close()
        if not self._wait(timeout):
            os.kill(self.pid, signal.SIGKILL)
            self._wait(5.0)

    def _wait(self, timeout: float) -> bool:
        """Reap the child if it ends within ``timeout`` seconds; True if it has ended. Waits on a
        pidfd (Linux 5.3+: woken the moment the child ends; ``poll``, not ``select``, which refuses
        descriptors over 1,023 — a manager with a thousand executors has more), else polls every
        10 ms."""
        if self.exit_status is not None:
            return True
        try:
            pidfd = os.pidfd_open(self.pid)
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
        except OSError:  # reaped already (waitpid says so below), or an older kernel
            pidfd = None
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:
                    self.exit_status = -1
                    return True
                if pid:
                    self.exit_status = status
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if pidfd is not None:
                    poller.poll(left * 1000)
                else:
                    time.sleep(min(0.01, left))
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def _status(self) -> str:
        if self.exit_status is None:
            return "still running, its pipe closed"
        if os.WIFSIGNALED(self.exit_status):
            return f"killed by signal {os.WTERMSIG(self.exit_status)}"
        return f"exit status {os.waitstatus_to_exitcode(self.exit_status)}" if self.exit_status >= 0 else "reaped elsewhere"


def _serve_writes(conn, engine: Engine) -> None:  # pragma: no cover - runs in the writer process
    """The writer process's loop: one request of :meth:`WriterProcess.write` at a time, until told
    to end (None) or the manager's end of the pipe closes. Replies ``("ok", rows)``,
    ``("lease_lost", message)`` or ``("error", the error's first line)``."""
    from gridcrawl.cli_common import name_process
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    name_process("gc-recorder")
    engine.dispose(close=False)  # the inherited connections stay the manager's
    writer = BatchWriter(engine)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return  # the manager has gone
        if request is None:
            return
        packed, segment, careful, fence, epoch = request
        try:
            if packed is not None:
                events = [ev.from_list(item) for item in msgpack.unpackb(packed, raw=False, strict_map_key=True)]
            else:
                events = journal_events(Path(segment))
            lease = None
            if fence is not None:
                holder, lease_epoch, seconds = fence
                lease = Lease(engine, holder, seconds)
                lease.epoch = lease_epoch
            reply = ("ok", writer.write(events, careful, lease, epoch))
        except LeaseLost as exc:
            reply = ("lease_lost", str(exc))
        except Exception as exc:  # the database's errors, as the flusher thread would see them
            reply = ("error", (str(exc).splitlines() or [type(exc).__name__])[0])
        try:
            conn.send(reply)
        except OSError:
            return
