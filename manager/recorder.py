"""Batched writes of the manager's records (executor, application, thread, attempt) to SQL.

The server loop hands :class:`~gridcrawl.manager.core.Record` actions to :meth:`Recorder.add`,
which only appends to a list; a background thread flushes every ``record_interval`` seconds in one
transaction, merging all changes to one row into one statement, so SQL never throttles dispatch.

With a *journal* (``gridcrawl-manager --journal``, by default next to its log), the records are
also a write-ahead log: the loop appends them to a local file (JSON lines) before it sends the
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

import json
import logging
import os
import threading
import time
from collections import defaultdict
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gridcrawl import models
from gridcrawl.db import from_timestamp, insert_ignore
from gridcrawl.manager.lease import LeaseLost

log = logging.getLogger("gridcrawl.manager.recorder")

TABLES = {"executor": models.executor, "application": models.application,
          "thread": models.thread, "attempt": models.attempt}
_TIME_COLUMNS = {"ping_time", "quarantined_until", "time_registered", "time_created", "time_completed", "time_submitted",
                 "time_started", "time_finished", "time_assigned"}
# Parents before children, so foreign keys hold within one flush.
_ORDER = ("executor", "application", "thread", "attempt")


def _sql_values(values: dict) -> dict:
    return {k: (from_timestamp(v) if k in _TIME_COLUMNS and v is not None else v) for k, v in values.items()}


class Recorder:
    """Collects record actions and writes them to ``engine`` in batches from its own thread.

    ``journal``: the write-ahead journal file (None: none; records wait in memory while the
    database is down, and those unwritten when the manager stops are lost). Its segment being
    written is ``<journal>.flushing``. Call :meth:`replay` before :meth:`start`.
    """

    def __init__(self, engine: Engine, interval: float = 0.2, journal: Path | str | None = None) -> None:
        self.engine = engine
        self.interval = interval
        self.journal = Path(journal) if journal is not None else None
        self.segment = self.journal.with_name(self.journal.name + ".flushing") if self.journal else None
        self.replayed = 0    # records replayed from an earlier manager's journal
        self._file = None    # the journal, open for appending
        self._lines: list[str] = []   # journal lines not yet written
        self._segment_failed = False  # the segment holds records of a failed flush
        self._lock = threading.Lock()
        self._pending: list = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recorder", daemon=True)
        self._compiled: dict[tuple, tuple[str, list[str]]] = {}
        self.flushed_rows = 0
        self.failures = 0
        # Fencing (hot standbys): ``fence(conn)`` runs first in every transaction and raises
        # LeaseLost when another manager took the lease over, so nothing of a lost epoch lands;
        # ``epoch`` is written into every new attempt row.
        self.fence = None
        self.epoch: int | None = None
        self.fenced = threading.Event()
        self._inodes: set[int] = set()  # the journal files this recorder opened (see abandon)

    def start(self) -> "Recorder":
        """Start the background flusher; returns self."""
        self._open_journal()
        self._thread.start()
        return self

    def add(self, record) -> None:
        """Queue one :class:`~gridcrawl.manager.core.Record` (cheap; called from the server loop).
        A new executor or application is written at once rather than at the next interval:
        they are rare, and programs wait for them (``gridcrawl run`` for its executors)."""
        with self._lock:
            self._pending.append(record)
            if self._file is not None:
                self._lines.append(json.dumps([record.table, record.op, record.values, record.key],
                                              separators=(",", ":")))
        if record.table in ("executor", "application") and record.op != "update":
            self._wake.set()

    def sync_journal(self) -> None:
        """Write the journal lines of the records added so far (one ``write``; no fsync): the
        server loop calls this before it sends the messages that go with them."""
        with self._lock:
            self._write_lines()

    def close(self, timeout: float = 10.0) -> None:
        """Flush what is pending and stop the thread (waits at most ``timeout`` seconds). What
        cannot be written stays in the journal for the next start."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._pending or self._segment_failed:
            try:
                self.flush()
            except Exception as exc:
                if self.journal is not None:
                    log.error("could not write the last records (%s); they wait in the journal %s for the next "
                              "start", str(exc).splitlines()[0], self.journal)
                else:
                    log.error("could not write the last %d records: %s", len(self._pending),
                              str(exc).splitlines()[0])
        if self._file is not None:
            with self._lock:
                self._write_lines()
                self._file.close()
                self._file = None
            if self.journal.stat().st_size == 0:
                self.journal.unlink()

    # ------------------------------------------------------------------ journal

    def _open_journal(self) -> None:
        if self.journal is not None and self._file is None:
            self._file = open(self.journal, "a", encoding="utf-8")
            self._inodes.add(os.fstat(self._file.fileno()).st_ino)

    def _write_lines(self) -> None:
        """(Under the lock.) Append the waiting journal lines to the file."""
        if self._lines and self._file is not None:
            self._file.write("\n".join(self._lines) + "\n")
            self._file.flush()
            self._lines = []

    def _rotate(self) -> None:
        """(Under the lock.) The journal so far becomes (or joins) the segment being flushed,
        fsynced; a new, empty journal takes the next records."""
        self._write_lines()
        self._file.close()
        if self.segment.exists():
            with open(self.segment, "a", encoding="utf-8") as out, open(self.journal, encoding="utf-8") as f:
                out.write(f.read())
            self.journal.unlink()
        else:
            os.replace(self.journal, self.segment)
        with open(self.segment, "rb") as f:
            os.fsync(f.fileno())
        self._file = open(self.journal, "a", encoding="utf-8")
        self._inodes.add(os.fstat(self._file.fileno()).st_ino)

    def _read(self, path: Path) -> list:
        """The records of a journal file, oldest first (a torn last line, from a crash mid-write,
        is skipped)."""
        from gridcrawl.manager.core import Record
        records = []
        if not path.exists():
            return records
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    table, op, values, key = json.loads(line)
                except ValueError:
                    log.warning("skipped a torn line of the journal %s", path)
                    continue
                if table in TABLES:
                    records.append(Record(table, op, values, key))
        return records

    def replay(self) -> int:
        """Write what an earlier manager left in the journal (its segment, then the journal) to
        the database, idempotently, and delete them; returns the number of records replayed.
        Raises the database's error (the files stay). Call before :meth:`start`."""
        if self.journal is None:
            return 0
        records = self._read(self.segment) + self._read(self.journal)
        if records:
            self._write(records, careful=True)
            self.replayed += len(records)
            log.warning("replayed %d records from the journal %s", len(records), self.journal)
        for path in (self.segment, self.journal):
            if path.exists():
                path.unlink()
        return len(records)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            try:
                self.flush()
            except LeaseLost as exc:
                log.error("%s: %d records of this manager are dropped", exc, self.abandon())
                return
            except Exception as exc:  # database down: keep the batch, try again
                self.failures += 1
                log.error("writing records failed (%s); will retry", str(exc).splitlines()[0])
                time.sleep(min(5.0, self.interval * 5))

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
        if not batch:
            return 0
        try:
            rows = self._write(batch, careful=False)
        except sa.exc.IntegrityError:
            try:
                rows = self._write(batch, careful=True)
            except Exception:
                self._put_back(batch)
                raise
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
            self._rotate()
        records = self._read(self.segment) if self._segment_failed else batch
        try:
            try:
                rows = self._write(records, careful=self._segment_failed)
            except sa.exc.IntegrityError:
                rows = self._write(records, careful=True)
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
        ``stale`` (a journal found at start that belongs to a lost epoch)."""
        self.fenced.set()
        self._stop.set()
        self._wake.set()
        with self._lock:
            dropped, self._pending, self._lines = len(self._pending), [], []
            if self._file is not None:
                self._file.close()
                self._file = None
            if stale:
                dropped += len(self._read(self.segment)) + len(self._read(self.journal)) if self.journal else 0
            for path in (self.journal, self.segment):
                try:
                    if path is not None and (stale or path.stat().st_ino in self._inodes):
                        path.unlink()
                except FileNotFoundError:
                    pass
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

    def _write(self, batch: list, careful: bool) -> int:
        inserts: dict[str, dict] = defaultdict(dict)   # table -> key -> row
        upserts: dict[str, dict] = defaultdict(dict)
        updates: dict[str, dict] = defaultdict(dict)   # table -> key -> changed columns
        for r in batch:
            if r.op == "insert":
                inserts[r.table][r.key] = dict(r.values)
            elif r.op == "upsert":
                upserts[r.table][r.key] = dict(r.values)
                updates[r.table].pop(r.key, None)
            elif r.key in inserts[r.table] and not careful:  # careful: the row may exist already
                inserts[r.table][r.key].update(r.values)
            elif r.key in upserts[r.table]:
                upserts[r.table][r.key].update(r.values)
            else:
                updates[r.table].setdefault(r.key, {}).update(r.values)
        rows = 0
        if self.epoch is not None:
            for values in inserts["attempt"].values():
                values.setdefault("epoch", self.epoch)
        with self.engine.begin() as conn:
            if self.fence is not None:
                self.fence(conn)
            for name in _ORDER:
                table = TABLES[name]
                pk = list(table.primary_key.columns)[0]
                for key, values in upserts[name].items():
                    values = _sql_values(values)
                    changed = {k: v for k, v in values.items() if k != pk.name}
                    # rowcount 0: no such row, or (drivers counting changed rows) the same values
                    if conn.execute(table.update().where(pk == key).values(**changed)).rowcount == 0:
                        insert_ignore(conn, table, [values])
                    rows += 1
                shapes: dict[tuple, list] = defaultdict(list)  # executemany needs one key set
                for values in inserts[name].values():
                    shapes[tuple(sorted(values))].append(_sql_values(values))
                for columns, values in shapes.items():
                    if careful:
                        insert_ignore(conn, table, values)
                    else:
                        self._executemany(conn, ("insert", name, columns), table.insert(), values)
                    rows += len(values)
                groups: dict[tuple, list] = defaultdict(list)
                for key, values in updates[name].items():
                    groups[tuple(sorted(values))].append((key, values))
                for columns, items in groups.items():
                    stmt = table.update().where(pk == sa.bindparam("_key")).values(
                        {c: sa.bindparam("v_" + c) for c in columns})
                    self._executemany(conn, ("update", name, columns), stmt,
                                      [{"_key": key, **{"v_" + k: v for k, v in _sql_values(values).items()}}
                                       for key, values in items])
                    rows += len(items)
        return rows

    def _executemany(self, conn, shape: tuple, stmt, rows: list[dict]) -> None:
        """Run ``stmt`` for every row of ``rows`` (all with the same keys).

        On SQLite, the statement is compiled once per shape and its rows go straight to the
        driver's ``executemany``: SQLAlchemy's per-row parameter processing cost more than the
        writes (profiled: most of the recorder's time at thousands of threads a second). The
        values are ones sqlite3 stores as SQLAlchemy would (datetimes as ISO text, booleans as
        integers). Other back ends take the ordinary path.
        """
        if conn.dialect.name != "sqlite":
            conn.execute(stmt, rows)
            return
        compiled = self._compiled.get(shape)
        if compiled is None:
            c = stmt.compile(dialect=conn.dialect, column_keys=list(rows[0]))
            compiled = self._compiled[shape] = (str(c), list(c.positiontup))
        sql, names = compiled
        if not set(names) <= rows[0].keys():  # a column default SQLAlchemy would fill in
            conn.execute(stmt, rows)
            return
        conn.exec_driver_sql(sql, [tuple(row.get(n) for n in names) for row in rows])
