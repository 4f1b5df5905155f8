"""Batched writes of the manager's records (executor, application, thread, attempt) to SQL.

The server loop hands :class:`~gridcrawl.manager.core.Record` actions to :meth:`Recorder.add`,
which only appends to a list; a background thread flushes every ``record_interval`` seconds in one
transaction, merging all changes to one row into one statement, so SQL never throttles dispatch.
If the database is down, the batch is kept and retried (nothing is lost while the manager runs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gridcrawl import models
from gridcrawl.db import from_timestamp, insert_ignore

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
    """Collects record actions and writes them to ``engine`` in batches from its own thread."""

    def __init__(self, engine: Engine, interval: float = 0.2) -> None:
        self.engine = engine
        self.interval = interval
        self._lock = threading.Lock()
        self._pending: list = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recorder", daemon=True)
        self._compiled: dict[tuple, tuple[str, list[str]]] = {}
        self.flushed_rows = 0
        self.failures = 0

    def start(self) -> "Recorder":
        """Start the background flusher; returns self."""
        self._thread.start()
        return self

    def add(self, record) -> None:
        """Queue one :class:`~gridcrawl.manager.core.Record` (cheap; called from the server loop).
        A new executor or application is written at once rather than at the next interval:
        they are rare, and programs wait for them (``gridcrawl run`` for its executors)."""
        with self._lock:
            self._pending.append(record)
        if record.table in ("executor", "application") and record.op != "update":
            self._wake.set()

    def close(self, timeout: float = 10.0) -> None:
        """Flush what is pending and stop the thread (waits at most ``timeout`` seconds)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        if self._pending:
            try:
                self.flush()
            except Exception as exc:
                log.error("could not write the last %d records: %s", len(self._pending),
                          str(exc).splitlines()[0])

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            try:
                self.flush()
            except Exception as exc:  # database down: keep the batch, try again
                self.failures += 1
                log.error("writing records failed (%s); will retry", str(exc).splitlines()[0])
                time.sleep(min(5.0, self.interval * 5))

    def flush(self) -> int:
        """Write everything pending in one transaction; return the number of rows written.

        A batch that breaks a unique key (a row already there) is written again with
        insert-if-absent. On any other failure the batch is put back in front of newer records
        and the error re-raised (the database may be down: nothing is lost).
        """
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
            elif r.key in inserts[r.table]:
                inserts[r.table][r.key].update(r.values)
            elif r.key in upserts[r.table]:
                upserts[r.table][r.key].update(r.values)
            else:
                updates[r.table].setdefault(r.key, {}).update(r.values)
        rows = 0
        with self.engine.begin() as conn:
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
