"""Thread timings from the manager database, read from its views (see :mod:`gridcrawl.views`):
per-executor and per-application summaries, per-thread timings, and the per-executor timeline
chart of threads (a Gantt-like chart, as the paper's thread table shows); and, from a crawl
database, the counts of its recrawl runs (table ``recrawl``, :func:`recrawl_runs`).

Durations are derived from the stored UTC times: run = finished − started, queue wait =
started − submitted (seconds). A page is a grid thread that finished and did not fail; crawl
seconds run from the first grid thread submitted to the last finished; pages/s = pages / crawl
seconds, for an executor too (README, "Figures").
Drawing needs matplotlib (``pip install 'gridcrawl[report]'``), imported only when drawing.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gridcrawl.errors import ReportError  # noqa: F401 (re-exported)
from gridcrawl.db import from_timestamp, server_time


# The views as lightweight tables: typed columns, so that every back end returns datetimes
# (SQLite returns a view's DATETIME as text unless told its type) and booleans.
_thread_timing = sa.table(
    "thread_timing",
    sa.column("application_id", sa.String), sa.column("application_name", sa.String),
    sa.column("thread_id", sa.BigInteger), sa.column("internal_thread_id", sa.BigInteger),
    sa.column("url", sa.String), sa.column("host", sa.String), sa.column("depth", sa.Integer),
    sa.column("executor_id", sa.String), sa.column("executor_name", sa.String),
    sa.column("executor_host", sa.String), sa.column("state", sa.Integer),
    sa.column("failed", sa.Boolean), sa.column("attempts", sa.Integer), sa.column("error_kind", sa.String),
    sa.column("time_submitted", sa.DateTime), sa.column("time_started", sa.DateTime),
    sa.column("time_finished", sa.DateTime),
    sa.column("queue_wait_seconds", sa.Float), sa.column("run_seconds", sa.Float),
)


def resolve_application(engine: Engine, application_id: str) -> str:
    """The full id of the application whose id is ``application_id`` or starts with it (at least
    4 characters, as pause/resume accept and the client's summary shows 8). Raises
    :class:`ReportError` when none or more than one matches, naming the candidates."""
    from gridcrawl import models
    app = models.application.c
    with engine.connect() as conn:
        if conn.execute(sa.select(app.application_id).where(app.application_id == application_id)).first():
            return application_id
        found = [] if len(application_id) < 4 else list(conn.scalars(
            sa.select(app.application_id).where(app.application_id.startswith(application_id, autoescape=True))
            .order_by(app.application_id).limit(6)))
    if len(found) == 1:
        return found[0]
    if found:
        raise ReportError(f"application id {application_id!r} is ambiguous: {', '.join(found[:5])}"
                          f"{' ...' if len(found) > 5 else ''} (give more characters)")
    short = " (give at least 4 characters)" if len(application_id) < 4 else ""
    raise ReportError(f"no application {application_id!r} in this database{short}")


#: The counts of a recrawl run, as columns of the ``recrawl`` table (see gridcrawl.client.app).
RECRAWL_COLUMNS = ("due", "fetched", "not_modified", "unchanged", "changed", "gone", "revived", "disallowed",
                   "errors", "new")
#: How the recrawl tables (the client's summary, ``gridcrawl report --crawl-db``) name a count
#: whose column name is not plain enough.
RECRAWL_LABELS = {"not_modified": "not modified (304)", "disallowed": "disallowed by robots.txt (kept)",
                  "new": "new pages"}


@dataclass
class RecrawlRun:
    """One recrawl run of a crawl database: ``mode`` (due, all, watch), when it started (naive
    UTC), its length in ``seconds`` (None while running, or if it was killed) and its counts
    (:data:`RECRAWL_COLUMNS`)."""

    recrawl_id: int
    mode: str
    started_at: _dt.datetime
    seconds: float | None
    due: int
    fetched: int
    not_modified: int
    unchanged: int
    changed: int
    gone: int
    revived: int
    disallowed: int
    errors: int
    new: int


def recrawl_runs(engine: Engine) -> list[RecrawlRun]:
    """Every recrawl run stored in the crawl database ``engine``, oldest first. Raises
    SQLAlchemy's ``DBAPIError`` if it is not a crawl database."""
    from gridcrawl.models import recrawl
    with engine.connect() as conn:
        rows = conn.execute(sa.select(recrawl).order_by(recrawl.c.recrawl_id)).all()
    return [RecrawlRun(r.recrawl_id, r.mode, r.started_at,
                       (r.finished_at - r.started_at).total_seconds() if r.finished_at else None,
                       *(int(getattr(r, c)) for c in RECRAWL_COLUMNS)) for r in rows]


def _float(value) -> float | None:
    return None if value is None else float(value)


@dataclass
class ExecutorTimings:
    """Timings of the threads one executor ran: ``threads`` finished, run seconds (mean, min,
    max), mean queue wait seconds, and ``pages_per_second``: its pages per crawl second of the
    application (README "Figures"; the executors' rates add up to the application's)."""

    executor_id: str
    name: str
    host: str
    threads: int
    mean_seconds: float
    min_seconds: float
    max_seconds: float
    mean_wait_seconds: float
    pages_per_second: float


def threads_in_flight(engine: Engine, application_id: str, most: int = 3) -> tuple[list[str], int]:
    """The URLs of ``application_id``'s grid threads given to an executor and not finished (state
    SCHEDULED or STARTED), those tried on the most executors first, at most ``most`` of them, and
    how many there are in all. Raises ``sqlalchemy.exc.DBAPIError`` if the database is no
    manager database."""
    from gridcrawl import models
    from gridcrawl.states import ThreadState
    t = models.thread
    out = (t.c.application_id == application_id) & t.c.state.in_([int(ThreadState.SCHEDULED), int(ThreadState.STARTED)])
    with engine.connect() as conn:
        urls = list(conn.execute(sa.select(t.c.url).where(out).order_by(t.c.attempts.desc(), t.c.thread_id)
                                 .limit(most)).scalars())
        total = int(conn.execute(sa.select(sa.func.count()).select_from(t).where(out)).scalar() or 0)
    return urls, total


def executor_timings(engine: Engine, application_id: str | None = None,
                     since: _dt.datetime | None = None) -> list[ExecutorTimings]:
    """One :class:`ExecutorTimings` per executor that finished pages (of ``application_id``
    only, if given; with ``since``, a naive UTC datetime, only threads finished then or later,
    their pages/s over the seconds from ``since``: one run of a resumed crawl, whose threads
    left running by the run before keep their submission time), by executor name; aggregated
    in SQL from the ``thread_timing`` view. Raises ``sqlalchemy.exc.DBAPIError`` if the
    database has no such view."""
    tt = _thread_timing.c
    query = (sa.select(tt.executor_id, tt.executor_name, tt.executor_host, sa.func.count().label("threads"),
                       sa.func.avg(tt.run_seconds).label("mean"), sa.func.min(tt.run_seconds).label("min"),
                       sa.func.max(tt.run_seconds).label("max"), sa.func.avg(tt.queue_wait_seconds).label("wait"))
             .where(tt.executor_id.is_not(None), tt.time_started.is_not(None), tt.time_finished.is_not(None),
                    tt.failed == sa.false())
             .group_by(tt.executor_id, tt.executor_name, tt.executor_host))
    span_query = sa.select(sa.func.min(tt.time_submitted), sa.func.max(tt.time_finished))
    if application_id:
        query = query.where(tt.application_id == application_id)
        span_query = span_query.where(tt.application_id == application_id)
    if since is not None:
        query = query.where(tt.time_finished >= since)
        span_query = span_query.where(tt.time_finished >= since)
    out = []
    with engine.connect() as conn:
        first, last = conn.execute(span_query).one()
        first = since if since is not None else first
        span = (last - first).total_seconds() if first is not None and last is not None else 0.0
        for r in conn.execute(query):
            out.append(ExecutorTimings(r.executor_id, r.executor_name or "", r.executor_host or "", int(r.threads),
                                       float(r.mean), float(r.min), float(r.max), float(r.wait or 0.0),
                                       r.threads / span if span > 0 else 0.0))
    return sorted(out, key=lambda x: (x.name, x.executor_id))


@dataclass
class ExecutorSummary:
    """A row of the ``executor_summary`` view: threads and pages an executor ran, run seconds of
    its pages (mean, min, max; None without pages), mean queue wait seconds, its pages per
    crawl second of the grid (first thread submitted → last finished, every application; the
    executors' rates add up to the grid's), and its last heartbeat's CPU figures (``cpu_max`` MHz × cores,
    ``cpu_usage``/``cpu_avail`` %, ``cpu_totalusage`` CPU-seconds, memory in bytes)."""

    executor_id: str
    executor_name: str
    host: str
    is_connected: bool
    worker_threads: int
    num_cpus: int
    cpu_max: float
    cpu_usage: float
    cpu_avail: float
    cpu_totalusage: float
    mem_max: int
    mem_usage: int
    threads: int
    pages: int
    failed: int
    mean_run_seconds: float | None
    min_run_seconds: float | None
    max_run_seconds: float | None
    mean_queue_wait_seconds: float | None
    pages_per_second: float | None
    accepting: bool = True  # False: an --idle-only executor waiting for its desktop to be idle


def executor_summary(engine: Engine) -> list[ExecutorSummary]:
    """Every row of the ``executor_summary`` view, by executor name. Raises
    ``sqlalchemy.exc.DBAPIError`` if the database has no such view."""
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM executor_summary")).mappings().all()
    out = [ExecutorSummary(
        executor_id=r["executor_id"], executor_name=r["executor_name"], host=r["host"],
        is_connected=bool(r["is_connected"]), worker_threads=int(r["worker_threads"]), num_cpus=int(r["num_cpus"]),
        cpu_max=float(r["cpu_max"]), cpu_usage=float(r["cpu_usage"]), cpu_avail=float(r["cpu_avail"]),
        cpu_totalusage=float(r["cpu_totalusage"]), mem_max=int(r["mem_max"]), mem_usage=int(r["mem_usage"]),
        threads=int(r["threads"]), pages=int(r["pages"]), failed=int(r["failed"]),
        mean_run_seconds=_float(r["mean_run_seconds"]), min_run_seconds=_float(r["min_run_seconds"]),
        max_run_seconds=_float(r["max_run_seconds"]), mean_queue_wait_seconds=_float(r["mean_queue_wait_seconds"]),
        pages_per_second=_float(r["pages_per_second"]), accepting=bool(r["accepting"])) for r in rows]
    return sorted(out, key=lambda x: (x.executor_name, x.executor_id))


@dataclass
class ApplicationSummary:
    """A row of the ``application_summary`` view: threads, pages, failed threads, executors
    used, ``elapsed_seconds``: its crawl seconds (first thread submitted → last finished) and
    pages per second (None until a thread finished)."""

    application_id: str
    application_name: str
    usr_name: str
    state: int
    threads: int
    pages: int
    failed: int
    executors: int
    elapsed_seconds: float | None
    pages_per_second: float | None


def application_summary(engine: Engine, application_id: str | None = None) -> list[ApplicationSummary]:
    """The rows of the ``application_summary`` view (only ``application_id``'s, if given), in
    the order the applications were created. Raises ``sqlalchemy.exc.DBAPIError`` if the
    database has no such view."""
    query = "SELECT * FROM application_summary"
    params = {}
    if application_id:
        query += " WHERE application_id = :application_id"
        params["application_id"] = application_id
    with engine.connect() as conn:
        rows = conn.execute(sa.text(query + " ORDER BY time_created, application_id"), params).mappings().all()
    return [ApplicationSummary(
        application_id=r["application_id"], application_name=r["application_name"], usr_name=r["usr_name"],
        state=int(r["state"]), threads=int(r["threads"]), pages=int(r["pages"]), failed=int(r["failed"]),
        executors=int(r["executors"]), elapsed_seconds=_float(r["elapsed_seconds"]),
        pages_per_second=_float(r["pages_per_second"])) for r in rows]


@dataclass
class ThreadTiming:
    """A row of the ``thread_timing`` view: which executor ran which URL, when (UTC), and how
    long it waited in the queue and ran (seconds; None while not started/finished)."""

    application_id: str
    thread_id: int
    url: str
    executor_id: str | None
    executor_name: str | None
    state: int
    failed: bool
    attempts: int
    time_submitted: _dt.datetime
    time_started: _dt.datetime | None
    time_finished: _dt.datetime | None
    queue_wait_seconds: float | None
    run_seconds: float | None


def thread_timings(engine: Engine, application_id: str | None = None) -> list[ThreadTiming]:
    """The rows of the ``thread_timing`` view (only ``application_id``'s, if given), by
    application and thread id. Raises ``sqlalchemy.exc.DBAPIError`` if there is no such view."""
    tt = _thread_timing.c
    query = (sa.select(tt.application_id, tt.thread_id, tt.url, tt.executor_id, tt.executor_name, tt.state,
                       tt.failed, tt.attempts, tt.time_submitted, tt.time_started, tt.time_finished,
                       tt.queue_wait_seconds, tt.run_seconds)
             .order_by(tt.application_id, tt.thread_id))
    if application_id:
        query = query.where(tt.application_id == application_id)
    with engine.connect() as conn:
        return [ThreadTiming(r.application_id, int(r.thread_id), r.url, r.executor_id, r.executor_name, int(r.state),
                             bool(r.failed), int(r.attempts), r.time_submitted, r.time_started, r.time_finished,
                             _float(r.queue_wait_seconds), _float(r.run_seconds))
                for r in conn.execute(query)]


def _lanes(spans: list[tuple[float, float]]) -> list[int]:
    """Interval partitioning: a lane for each span (start, end) so that spans in one lane do not
    overlap, using as few lanes as the largest number of spans running at once; each span, in
    order of start, takes the lowest-numbered lane free by then. Two heaps (lanes busy, by the
    end of their span; lanes free, by number) make it O(n log n): a first-fit scan of every lane
    for every span took minutes for 300,000 threads with many running at once."""
    import heapq
    busy: list[tuple[float, int]] = []  # (end, lane) of the lanes whose span has not ended
    free: list[int] = []                # lanes free again, lowest first
    lanes = [0] * len(spans)
    count = 0
    for i in sorted(range(len(spans)), key=lambda i: spans[i]):
        start, end = spans[i]
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lanes[i] = heapq.heappop(free)
        else:
            lanes[i], count = count, count + 1
        heapq.heappush(busy, (end, lanes[i]))
    return lanes


#: The image formats --plot writes, by the file name's ending (matplotlib's Agg canvas writes
#: them all; PGF, which needs LaTeX, and raw pixel dumps are left out).
PLOT_FORMATS = ("png", "svg", "pdf", "jpg", "jpeg", "webp", "tif", "tiff", "eps")


def plot_format(path: str | Path) -> str:
    """The image format to draw the timeline to ``path`` in: its name's ending (``.svg``:
    ``"svg"``), ``"png"`` when it has none. Raises :class:`ReportError` for an ending that is
    none of :data:`PLOT_FORMATS` (``timeline.txt``: a PNG under that name was no use)."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if not suffix:
        return "png"
    if suffix not in PLOT_FORMATS:
        raise ReportError(f"cannot draw the timeline to {path}: .{suffix} is no image format it is drawn in "
                          f"(name a file ending in {', '.join('.' + f for f in PLOT_FORMATS)})")
    return suffix


def require_matplotlib():
    """matplotlib's ``FigureCanvasAgg``, ``Figure`` and ``Patch`` classes, which
    :func:`plot_timeline` draws with (imported here, not at start: about half a second). Raises
    :class:`ReportError` naming what to install when matplotlib is missing (``gridcrawl report
    --plot`` asks first, so that it fails before printing the report, not after)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError:
        raise ReportError("drawing a timeline needs matplotlib: pip install 'gridcrawl[report]'") from None
    return FigureCanvasAgg, Figure, Patch


def plot_timeline(threads: Sequence[ThreadTiming], path: str | Path, title: str = "grid threads per executor") -> int:
    """Draw the per-executor timeline of ``threads`` to the image file ``path`` (in the format
    its name's ending names, :func:`plot_format`; PNG without one): one band per
    executor, one bar per thread from its start to its finish (seconds since the first start),
    concurrent threads of one executor in separate lanes, failed threads in red. Threads that
    never started or finished are left out. Returns the number of bars drawn.

    Uses matplotlib's Agg canvas (no display, no global pyplot state). Raises
    :class:`ReportError` if matplotlib is not installed or the ending is no image format.
    """
    FigureCanvasAgg, Figure, Patch = require_matplotlib()
    done = [t for t in threads if t.time_started and t.time_finished and t.executor_id]
    by_executor: dict[str, list[ThreadTiming]] = {}
    for t in done:
        by_executor.setdefault(t.executor_name or t.executor_id, []).append(t)
    t0 = min((t.time_started for t in done), default=None)
    bands = []  # (label, lane count, [(start, width, lane, failed)])
    for name in sorted(by_executor):
        items = by_executor[name]
        spans = [((t.time_started - t0).total_seconds(), (t.time_finished - t0).total_seconds()) for t in items]
        lanes = _lanes(spans)
        bands.append((name, max(lanes) + 1,
                      [(s, max(e - s, 1e-3), lane, t.failed) for (s, e), lane, t in zip(spans, lanes, items)]))
    total_lanes = sum(n for _, n, _ in bands) or 1
    figure = Figure(figsize=(10, min(2 + 0.25 * total_lanes + 0.4 * len(bands), 40)), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    y, ticks, labels = 0.0, [], []
    for name, n_lanes, bars in bands:
        rows: dict[tuple[int, bool], list[tuple[float, float]]] = {}
        for start, width, lane, failed in bars:
            rows.setdefault((lane, failed), []).append((start, width))
        for (lane, failed), spans in rows.items():  # one call per lane: fast with many threads
            ax.broken_barh(spans, (y + lane + 0.1, 0.8), facecolors="tab:red" if failed else "tab:blue")
        ticks.append(y + n_lanes / 2)
        labels.append(name)
        y += n_lanes + 0.5
        ax.axhline(y - 0.25, color="0.85", linewidth=0.8)
    ax.set_yticks(ticks, labels)
    ax.set_ylim(0, max(y, 1))
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first thread started")
    if done:
        ax.legend(handles=[Patch(color="tab:blue", label="page"), Patch(color="tab:red", label="failed")],
                  loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize="small", frameon=False)
    ax.set_title(f"{title} ({len(done):,} thread{'' if len(done) == 1 else 's'})" if done else f"{title} (no finished threads)")
    figure.tight_layout()
    figure.savefig(str(path), format=plot_format(path))
    return len(done)


@dataclass
class ActiveManager:
    """The manager holding the database's lease (:mod:`gridcrawl.manager.lease`): its
    ``address``, lease ``epoch`` (1 for the first manager, +1 at every take-over), ``since`` (UTC,
    when it took the lease) and ``expires_at`` (UTC; in the past: no manager is active);
    ``read_at``: the database server's clock when the row was read (UTC; on SQLite this host's
    clock then; None: now), by which the lease is judged (:mod:`gridcrawl.manager.lease`), so that
    a report judges it once: judged at each look, a lease expiring between the look that said
    whether executors can be up and the one that printed the manager's line printed "not running"
    over executors "up"."""

    address: str | None
    holder: str
    epoch: int
    since: _dt.datetime | None
    expires_at: _dt.datetime
    read_at: _dt.datetime | None = None

    @property
    def live(self) -> bool:
        """True while the lease is unexpired (its holder is running and renewing it)."""
        return self.expires_at > (self.read_at or _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None))

    def describe(self) -> str:
        """One line for people: who, whether live (running; stopped, having released its lease;
        or gone without releasing it: killed, or its host lost), epoch, since when (UTC)."""
        from gridcrawl.manager.lease import RELEASED
        if self.live:
            state = "active"
        elif self.expires_at == RELEASED:
            state = "stopped (lease released)"
        else:
            state = f"not running (lease expired at {self.expires_at:%Y-%m-%d %H:%M:%S} UTC, not released)"
        since = f", since {self.since:%Y-%m-%d %H:%M:%S} UTC" if self.since else ""
        return f"manager {self.address or self.holder}: {state}, lease epoch {self.epoch}{since}"


def active_manager(engine: Engine) -> ActiveManager | None:
    """The lease row of the manager database ``engine`` (None: no manager ever ran on it)."""
    from gridcrawl import models
    t = models.manager_lease
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(t.name):
            return None
        row = conn.execute(sa.select(t.c.address, t.c.holder, t.c.epoch, t.c.since, t.c.expires_at)
                           .where(t.c.holder != "")).first()
        clock = server_time(conn) if row is not None else None
    return None if row is None else ActiveManager(row.address, row.holder, int(row.epoch), row.since, row.expires_at,
                                                  from_timestamp(time.time() if clock is None else clock))
# ---------------------------------------------------------------------------------------------
# The semantic crawl (crawl database): what the triple table and the ontology focus hold.


@dataclass
class SemanticSummary:
    """Figures of a semantic crawl from its crawl database (``gridcrawl report --crawl-db``).

    ``triples``: rows of the ``triple`` table; ``pages_with_triples``: documents that gave at
    least one; ``rdf_documents``: documents read as RDF documents — not parsed as HTML
    (``document.encoding`` NULL) and served as an RDF type (:data:`gridcrawl.semantic.RDF_TYPES`)
    or giving triples (RDF served with a generic type, read by its URL's suffix or sniffed:
    :func:`gridcrawl.semantic.rdf_format`); an HTML page at an RDF suffix is none; ``structured_pages``: HTML documents with structured data; ``by_kind``: triples per
    object kind (uri, literal, bnode); ``top_predicates``: the ten most used predicates with
    their counts; ``rdf_errors``: visited URLs per error kind ``rdf_parse`` / ``rdf_limit``;
    ``triples_per_second``: triples over the executors' parse seconds of the documents that gave
    them (``None`` without any); ``relevance``: for a focused crawl, ``(documents scored, mean
    page score, documents scoring at least 0.5)``, else ``None``; ``structured_errors``: HTML
    documents whose structured data had errors (``document.structured_data``'s ``errors``: a
    block that does not parse, a bound reached, IRIs read percent-encoded), with
    ``structured_error_example``, ``(url, its first error)`` of one of them, else ``None``.
    """

    triples: int
    pages_with_triples: int
    rdf_documents: int
    structured_pages: int
    by_kind: dict
    top_predicates: list
    rdf_errors: dict
    triples_per_second: float | None
    relevance: tuple | None
    structured_errors: int = 0
    structured_error_example: tuple | None = None


def semantic_summary(engine: Engine) -> SemanticSummary:
    """The :class:`SemanticSummary` of the crawl database ``engine``. Raises SQLAlchemy's
    ``DBAPIError`` when it is not a crawl database with a ``triple`` table."""
    from gridcrawl import models
    from gridcrawl.semantic import RDF_TYPES
    t, d, v = models.triple, models.document, models.visited_url
    with engine.connect() as conn:
        count = lambda stmt: int(conn.execute(stmt).scalar() or 0)
        triples = count(sa.select(sa.func.count()).select_from(t))
        per_page = (sa.select(t.c.fingerprint, sa.func.count().label("n")).group_by(t.c.fingerprint).subquery())
        pages = count(sa.select(sa.func.count()).select_from(per_page))
        media = sa.func.lower(sa.func.coalesce(d.c.content_type, ""))
        # read as RDF: not parsed as HTML (no encoding) and served as an RDF type (even if empty),
        # or gave triples (a generic type read by its URL's suffix or sniffed from its first bytes)
        read_as_rdf = sa.and_(d.c.encoding.is_(None), sa.or_(
            *(media.like(f"{m}%") for m in RDF_TYPES), sa.exists().where(t.c.fingerprint == d.c.fingerprint)))
        rdf_docs = count(sa.select(sa.func.count()).select_from(d).where(read_as_rdf))
        structured = count(sa.select(sa.func.count()).select_from(d).where(d.c.structured_data.is_not(None)))
        by_kind = dict(conn.execute(sa.select(t.c.object_kind, sa.func.count()).group_by(t.c.object_kind)).all())
        top = conn.execute(sa.select(t.c.predicate, sa.func.count().label("n")).group_by(t.c.predicate)
                           .order_by(sa.desc("n"), t.c.predicate).limit(10)).all()
        errors = dict(conn.execute(sa.select(v.c.error_kind, sa.func.count()).where(
            v.c.error_kind.in_(("rdf_parse", "rdf_limit"))).group_by(v.c.error_kind)).all())
        parse = conn.execute(sa.select(sa.func.sum(per_page.c.n), sa.func.sum(d.c.parse_seconds)).select_from(
            per_page.join(d, d.c.fingerprint == per_page.c.fingerprint))).first()
        scored = conn.execute(sa.select(sa.func.count(d.c.relevance), sa.func.avg(d.c.relevance),
                                        sa.func.sum(sa.case((d.c.relevance >= 0.5, 1), else_=0)))).first()
        # "errors" is the last key of the JSON the client stores (executor/page.py, json.dumps)
        erred = sa.and_(d.c.structured_data.like('%"errors": [%'), d.c.structured_data.not_like('%"errors": []}'))
        structured_errors = count(sa.select(sa.func.count()).select_from(d).where(erred))
        example = conn.execute(sa.select(d.c.url, d.c.structured_data).where(erred).order_by(d.c.url).limit(1)).first()
    rate = (float(parse[0]) / float(parse[1])) if parse and parse[0] and parse[1] else None
    relevance = (int(scored[0]), float(scored[1]), int(scored[2] or 0)) if scored and scored[0] else None
    first = None
    if example is not None:
        try:
            first = (example.url, str(json.loads(example.structured_data)["errors"][0]))
        except (ValueError, KeyError, IndexError, TypeError):
            first = (example.url, "")
    return SemanticSummary(triples, pages, rdf_docs, structured, {str(k): int(n) for k, n in by_kind.items()},
                           [(p, int(n)) for p, n in top], {str(k): int(n) for k, n in errors.items()}, rate, relevance,
                           structured_errors, first)


def waiting_for_capabilities(engine: Engine, manager_down: bool = False) -> list[tuple[str, int, str]]:
    """READY grid threads of live applications that no connected executor takes now, per need
    set, as ``(needs, count, why)`` sorted by needs: ``needs`` space-separated as the
    ``thread.needs`` column holds them (``""``: threads that need nothing), ``why`` one
    phrase — no executor is connected, no connected executor has the needs, or those that
    have them take no work now (``executor.accepting`` false: idle-only desktops in use or
    outside their hours). Judged from the executors recorded as connected. Empty when every
    waiting thread has an executor that takes it. ``manager_down``: no manager is running on
    the database (:attr:`ActiveManager.live` false), so none is connected whatever the rows
    say, and every waiting thread waits for a manager (``why`` says so)."""
    from gridcrawl import models
    from gridcrawl.states import ApplicationState, ThreadState
    t, e, a = models.thread, models.executor, models.application
    with engine.connect() as conn:
        executors = [] if manager_down else [
            (frozenset((row.capabilities or "").split()), bool(row.accepting))
            for row in conn.execute(sa.select(e.c.capabilities, e.c.accepting).where(e.c.is_connected == sa.true()))]
        rows = conn.execute(
            sa.select(t.c.needs, sa.func.count().label("n"))
            .select_from(t.join(a, a.c.application_id == t.c.application_id))
            .where(t.c.state == int(ThreadState.READY), a.c.state != int(ApplicationState.STOPPED))
            .group_by(t.c.needs)).all()
    waiting: dict[str, int] = {}
    for row in rows:
        needs = frozenset((row.needs or "").split())
        if not any(needs <= caps and accepting for caps, accepting in executors):
            key = " ".join(sorted(needs))
            waiting[key] = waiting.get(key, 0) + int(row.n)
    result = []
    for key, count in sorted(waiting.items()):
        needs = frozenset(key.split())
        if manager_down:
            why = "no manager is running on this database (above): they run once one is started again"
        elif not executors:
            why = "no executor is connected"
        elif not any(needs <= caps for caps, _ in executors):
            why = f"no connected executor has {key}"
        else:
            able = "the connected executors" if not key else f"the connected executors that have {key}"
            why = f"{able} take no work now (idle-only ones whose desktop is in use or outside their hours)"
        result.append((key, count, why))
    return result


def connected_executors(engine: Engine) -> int:
    """How many executors the manager database records as connected (``executor.is_connected``)."""
    from gridcrawl import models
    e = models.executor
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(e).where(e.c.is_connected == sa.true()))
                   .scalar_one())
