"""The crawler application: the paper's "application machine" loop over the grid.

:class:`CrawlApplication` opens (or reattaches to) an application at the manager, then repeats:
claim URLs from ``to_visit_url`` up to ``max_in_flight``, submit them as grid threads, receive
each finished thread, and apply results in batched transactions (``apply_batch`` results or
``apply_interval`` seconds, whichever first; sooner once every submitted thread is back, or
half of them while the frontier has nothing more to submit, when the results hold the only new
work), acknowledging them to the manager only after they are committed. It stops at
``max_pages``, or when nothing is left to visit and nothing is in flight, and then closes the
application.

Results are applied, and URLs to visit claimed, by a thread of their own (the applier: the one
that writes the crawl database) while the I/O loop goes on receiving and sending heartbeats, so
a long apply (a page with 200,000 links) or a claim the database holds up (a lock held by another
program, a server that stops answering) never looks like death to the manager.
When the crawl database fails for a while (connection lost, server restarting, ``database is
locked``: :func:`gridcrawl.db.transient_error`) the crawl pauses — nothing new is submitted, the
results wait unacknowledged, so the manager keeps them, exactly as during a client restart — and
the apply is tried again with back-off until the database answers. Errors waiting will not cure
(disk full, permission denied, schema mismatch) stop the client with :class:`CrawlDatabaseError`.
Log lines about database errors carry the driver's first line only: never SQL or a page body.

A **recrawl** (``recrawl="due"`` or ``"all"``) first queues the stored documents that are due
again (:meth:`~gridcrawl.client.store.CrawlStore.queue_due`), each with its validators for a
conditional request, and the sitemaps the crawl has read (their ``<lastmod>`` makes stored
documents due: those are queued as the sitemaps are read; not when it resumes a recrawl stopped
before its end, which read them or left them queued), and counts what the visits found in
a ``recrawl`` row; with ``watch`` the application stays open and queues documents and sitemaps
as they come due, until it is stopped.
"""

from __future__ import annotations

import collections
import concurrent.futures
import getpass
import logging
import math
import queue
import secrets
import shlex
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import msgspec
import zmq

from gridcrawl import protocol as p
from gridcrawl.link import ManagerLink
from gridcrawl.db import describe_error, shown_url, transient_error
from gridcrawl.report import RECRAWL_COLUMNS
from gridcrawl.settings import Settings
from gridcrawl.client.store import CrawlStore, HostShare, Outcome, Pending, Scope
from gridcrawl.items import needs_of, spec_to_wire, specs_for
from gridcrawl.db import utcnow
from gridcrawl.urls import url_host
from gridcrawl.words import counted
from gridcrawl.rules import instruction_for
from gridcrawl.errors import ManagerUnreachable, MessageTooLarge, Refused, CrawlDatabaseError  # noqa: F401 (re-exported)

log = logging.getLogger("gridcrawl.client")


@dataclass
class Progress:
    """Figures of a running crawl, updated as results are applied (times in seconds).

    ``pages`` are grid threads whose result this run applied (fetch errors included; what
    ``max_pages`` counts), ``documents`` those that stored a page, ``errors`` those that failed
    (not those robots.txt disallowed, nor the crawl's decisions: duplicates, traps, noindex),
    ``disallowed`` the pages (not sitemap files) robots.txt disallowed, not fetched; ``sitemaps`` are the sitemap threads among ``pages`` (read for their links: no document) and
    ``sitemap_errors`` their failures among ``errors``, which the figures shown leave out
    (:attr:`page_count`, :attr:`pages_per_second`). The crawl's **seconds** run
    from the first grid thread this run submitted to the last result it applied (docs/figures:
    the same definition as ``gridcrawl report``'s, which counts from the manager's records).
    """

    pages: int = 0
    documents: int = 0
    errors: int = 0
    disallowed: int = 0
    sitemaps: int = 0
    sitemap_errors: int = 0
    in_flight: int = 0
    # the frontier: rows of to_visit_url (those in flight included), counted now and then
    # (FRONTIER_COUNT_EVERY), and only when there is an on_progress to show it (None: not yet)
    to_visit: int | None = None
    first_submitted: float | None = None  # time.monotonic() of the first submit of this run
    last_result: float | None = None      # time.monotonic() of the last applied result
    application_id: str = ""
    state: str = "running"  # running, paused or cancelled (by an operator: gridcrawl-client pause ...)
    note: str = ""          # "database unavailable, retrying" while the crawl database does not answer
    # threads in flight that need a capability, by need, while no result has come for a while
    # (they wait for an executor that has it: e.g. "render", an executor started with --render)
    waiting: dict = field(default_factory=dict)
    recrawl: dict | None = None  # a recrawl's counts (RECRAWL_COUNTS), None for a plain crawl

    @property
    def seconds(self) -> float:
        """Seconds from the first grid thread submitted to the last result applied (to now while
        results are awaited; 0 before the first submit)."""
        if self.first_submitted is None:
            return 0.0
        end = self.last_result if self.last_result is not None and not self.in_flight else time.monotonic()
        return max(end - self.first_submitted, 0.0)

    @property
    def page_count(self) -> int:
        """Pages (not sitemap files) whose result this run applied, fetch errors included."""
        return self.pages - self.sitemaps

    @property
    def page_errors(self) -> int:
        """Of :attr:`page_count`, those that failed."""
        return self.errors - self.sitemap_errors

    @property
    def pages_per_second(self) -> float:
        """Pages (not sitemap files: :attr:`page_count`) applied per crawl second of this run
        (0 before the first second)."""
        seconds = self.seconds
        return self.page_count / seconds if seconds > 0 else 0.0


def control_application(settings: Settings, manager: str | list[str], application_id: str, action: str, *,
                        user: str | None = None, password: str | None = None, curve=None) -> p.Controlled:
    """Pause, resume or cancel application ``application_id`` (or a unique prefix of it, at
    least 4 characters) at the manager ``manager`` (or the active one of several, found as every
    peer finds it: :mod:`gridcrawl.link`), as operator ``user``.

    Returns the manager's :class:`~gridcrawl.protocol.Controlled` (``state``: running, paused
    or stopped). Raises :class:`~gridcrawl.errors.ManagerUnreachable` after
    ``settings.connect_timeout`` seconds without an answer, and :class:`~gridcrawl.errors.Refused`
    with the manager's reason (unknown application, bad credentials, missing permission, already
    stopped, a CURVE key the manager does not accept).
    """
    context = zmq.Context()
    link = ManagerLink(context, settings, manager, lambda: p.Control(application_id, action, user or getpass.getuser(),
                                                                     password), (p.Controlled,), curve=curve, logger=log)
    try:
        link.start()
        while True:
            if link.socket.poll(100):
                for message in link.receive():
                    if isinstance(message, p.Controlled):
                        return message
            link.tick()  # raises ManagerUnreachable or Refused when the link gives up
    finally:
        link.close(linger=0)
        context.term()


#: The counts of a recrawl run, in the order the summary and ``gridcrawl report`` show them:
#: documents due (queued again), fetched with a body (unchanged + changed + revived), answered
#: 304 Not Modified, unchanged, changed, gone (404/410), revived, disallowed by robots.txt now
#: (not errors: the stored copy is kept), other errors, new pages stored: the recrawl table's
#: columns, :data:`gridcrawl.report.RECRAWL_COLUMNS`.
RECRAWL_COUNTS = RECRAWL_COLUMNS

#: Links applied in one transaction, at most (a single page with more goes alone).
APPLY_LINKS = 20_000
#: Seconds without a result after which the client fills what room its window has, however
#: little: 250 seeds of hosts that never answer filled 250 of 256 slots for 3.5 minutes while the
#: client waited for a quarter of the window to be free, and the one live site got nothing.
REFILL_WAIT = 1.0
#: Grid threads of one host in flight that come before any host's more, per request the
#: manager lets a host have at once (``concurrent_requests_per_host``): enough queued at the
#: manager to keep the host busy until the next claim (:class:`~gridcrawl.client.store.HostShare`).
HOST_SHARE_PER_REQUEST = 2
#: Sitemaps to read in flight (submitted, or their result not yet applied), at most; pages fill
#: the rest of max_in_flight. A sitemap index of 50,000 sitemaps of 30,000 URLs each (within
#: sitemaps.org's limits) filled the window with sitemaps, one hop above every page: 3 GB of
#: decoded results in the client, and not one page fetched in 4 minutes.
SITEMAPS_IN_FLIGHT = 8
#: Seconds between two counts of the frontier for the progress bar, at least (a COUNT of
#: to_visit_url, in the applier thread: 4-7 ms for a million rows in SQLite), and the share of
#: the time the counts may take: the next comes no sooner than 1 / share times the last one's
#: duration after it.
FRONTIER_COUNT_EVERY = 0.5
FRONTIER_COUNT_SHARE = 0.05
#: Heartbeat intervals without any result after which threads that need a capability are
#: reported as waiting for an executor that has it (then again every WAIT_REPEAT seconds).
WAIT_BEATS = 5
WAIT_REPEAT = 60.0
#: Seconds between tries of a crawl database that failed, at most (the back-off doubles from 1 s):
#: at 30 s a crawl resumed up to 16 s after its database answered again.
DB_RETRY_MAX = 5.0
#: Seconds storing the last results (or claiming URLs) may take before the client says the crawl
#: database holds it up.
SLOW_APPLY = 60.0
#: Seconds the I/O loop waits for a claim it handed to the applier thread before it goes on
#: with its messages and heartbeats (the claim then finishes meanwhile): a claim takes
#: milliseconds, so the loop almost always submits its URLs at once, as when it claimed itself.
CLAIM_WAIT = 0.1
#: Hosts named, at most, when the client says that no result has come for a while.
SILENT_HOSTS = 3


def _links(outcome: Outcome) -> int:
    """Rows (links and triples) an outcome brings to the crawl tables (0 for a failed thread)."""
    return len(outcome.page.links) + len(outcome.page.triples) if outcome.page is not None else 0


def _validators(instruction: dict, pend: Pending) -> dict:
    """``instruction`` with a recrawl's conditional request validators of ``pend`` added
    (``ifNoneMatch``: the stored ETag, ``ifModifiedSince``: the stored Last-Modified; RFC 9110
    §13.1), or ``instruction`` itself when it has none."""
    if pend.etag is None and pend.last_modified is None:
        return instruction
    extra = {"ifNoneMatch": pend.etag, "ifModifiedSince": pend.last_modified}
    return {**instruction, **{k: v for k, v in extra.items() if v is not None}}


def base_instruction(scope: Scope, settings: Settings, strategy) -> dict:
    """The crawling instruction every URL of a crawl carries: the scope (the executor refuses
    redirect hops out of it), ``content: false`` when no body is stored (and no focus needs
    it), ``semantic: true`` when structured data is read, ``simhash_every_page: true`` when a
    recrawl compares SimHashes (``recrawl_simhash_distance`` >= 0)."""
    instruction = scope.instruction()
    if not settings.store_content and strategy.focus is None:
        instruction["content"] = False  # the executor need not send bodies nobody reads
    if strategy.structured_data:
        instruction["semantic"] = True  # executors read RDF documents and structured data
    if settings.recrawl_simhash_distance >= 0:
        instruction["simhash_every_page"] = True  # else only pages with a URL shape get one (traps)
    return instruction


def thread_instruction(instruction: dict, strategy, pend: Pending, wire=spec_to_wire,
                       sitemaps: bool = False, seeds: bool = False) -> tuple[dict, list | None]:
    """The instruction of ``pend``'s URL over ``instruction`` (:func:`base_instruction`'s; the
    grid client passes ``{}``, its application instruction travelling apart): for a
    sitemap to read (``pend.kind``), ``"sitemap": true`` only; else its page type's keep/follow
    rules, ``"sitemaps": true`` for a seed whose host's sitemaps are wanted (``sitemaps``; not
    with keep/follow rules or a focus, which decide themselves what is followed), ``"seed":
    true`` for a seed whose redirects may widen the scope (``seeds``), a recrawl's
    validators, the item specs that apply to it (``wire(spec)``: a spec's instruction entry) and
    the rendering they ask for. Returns it and those item specs (None when the crawl has none).
    Shared by the grid client and the Spark crawl (:mod:`gridcrawl.spark`, which reads no
    sitemaps)."""
    if pend.kind is not None:  # a sitemap read again by a recrawl carries its validators too
        return _validators({**instruction, "sitemap": True}, pend), None
    mine = {**instruction, **instruction_for(pend.page_type, pend.url, strategy.rules)} if strategy.rules \
        else instruction
    if sitemaps and pend.depth == 0 and not strategy.rules and strategy.focus is None:
        mine = {**mine, "sitemaps": True}
    if seeds and pend.depth == 0:  # its redirect may widen the scope (Scope.redirected_seed)
        mine = {**mine, "seed": True}
    mine = _validators(mine, pend)
    items = specs_for(strategy.items, pend.url, pend.page_type) if strategy.items else None
    if items:  # the item specs that apply to the page travel with it; plugins are needs
        mine = {**mine, "items": [wire(spec) for spec in items]}
    render = strategy.render_instruction(pend.page_type, items or ())
    if render:  # pages that need JavaScript go to executors with a browser
        mine = {**mine, **render}
    return mine, items


class CrawlApplication:
    """One crawl through the grid: ``CrawlApplication(settings, endpoint, store, scope).run(stop)``.

    ``settings``: a :class:`~gridcrawl.settings.Settings` (the client's: ``max_pages``,
    ``max_in_flight``, ``apply_batch`` ...); ``manager``: the manager's ZeroMQ endpoint
    (``"tcp://host:9000"``), or a list of them (hot standbys); ``store``: the crawl database, a
    :class:`~gridcrawl.client.store.CrawlStore` whose ``strategy`` carries the rules, focus and
    item specs, its seeds queued (:meth:`~gridcrawl.client.store.CrawlStore.add_seeds`);
    ``scope``: the links followed (:meth:`~gridcrawl.client.store.CrawlStore.scope`);
    ``name``: the application's name at the manager; ``user``/``password``: a login at a
    manager that requires one; ``curve``: a :class:`gridcrawl.keys.ClientKeys` to encrypt the
    connection.
    ``on_progress`` is called with a :class:`Progress` after every applied batch (its
    ``to_visit``, the frontier's size, is counted only for one). ``recrawl``:
    ``None`` (a crawl), ``"due"`` (visit again the stored documents whose next visit is due) or
    ``"all"`` (every stored document); ``watch`` (with ``recrawl``): keep the application open
    and queue documents as they come due (looking at least every ``watch_interval`` seconds)
    until ``stop`` is set.
    """

    def __init__(self, settings: Settings, manager: str | list[str], store: CrawlStore, scope: Scope, *,
                 name: str = "gridcrawl", user: str | None = None, password: str | None = None,
                 on_progress: Callable[[Progress], None] | None = None, curve=None,
                 recrawl: str | None = None, watch: bool = False) -> None:
        if recrawl not in (None, "due", "all"):
            raise ValueError(f"recrawl must be None, 'due' or 'all', not {recrawl!r}")
        if watch and recrawl is None:
            raise ValueError("--watch needs --recrawl")
        self.recrawl, self.watch = recrawl, watch
        self.recrawl_id: int | None = None
        self.settings = settings
        self.curve = curve  # gridcrawl.keys.ClientKeys: CURVE-encrypt the connection to the manager
        self.store = store
        self.scope = scope
        self.name = name
        self.user = user or getpass.getuser()
        self.password = password
        self.on_progress = on_progress
        self.client_token = secrets.token_hex(8)  # this run's: its reconnects get the application back
        self.context = zmq.Context()
        # the link to the manager (gridcrawl.link; several managers: hot standbys)
        self.link = ManagerLink(self.context, settings, manager, self._hello, (p.ApplicationOpened,), curve=curve,
                                logger=log)
        self.in_flight: dict[int, Pending] = {}
        #: grid threads kept submitted and not yet acknowledged, at most: ``max_in_flight``, or
        #: less if the manager keeps fewer of an application (ApplicationOpened.max_threads)
        self.max_in_flight = settings.max_in_flight
        self.results: list[Outcome] = []
        self._waiting: set[int] = set()  # thread ids of results not yet acknowledged (a result delivered twice is applied once)
        self._applier = ThreadPoolExecutor(1, thread_name_prefix="apply")
        self._applying: Future | None = None     # the apply running in the applier thread
        #: the claim running in the applier thread (:meth:`_refill`), with its HostShare and the
        #: results seen when it began; None when none runs
        self._claiming: tuple[Future, HostShare, int] | None = None
        self._committed: queue.SimpleQueue = queue.SimpleQueue()  # (thread ids, counts) committed, to acknowledge
        self._db_retry_at: float | None = None   # monotonic s: the database failed; try again then
        self._db_backoff = 0.0
        self._db_said = float("-inf")  # monotonic s of the last WARNING of a database outage
        self._last_result_at = time.monotonic()  # of the last ThreadDone (REFILL_WAIT)
        self._results_seen = 0  # results received in all
        self.lock_lost = False  # the crawl database's crawler lock went to another crawler (CrawlerLock.lost)
        #: (results seen, monotonic s) at the last claim that left URLs for their hosts' share
        #: (:class:`~gridcrawl.client.store.HostShare`), None when the last one left none
        self._held_back: tuple[int, float] | None = None
        self._frontier_due = -math.inf  # monotonic s: the frontier may be counted again
        self.progress = Progress()
        self.application_id: str | None = store.get_meta("application_id")
        self.visited_before = 0
        self._waiting_said = float("-inf")  # when the client last said why no result comes (_check_waiting)
        self._waiting_reason: object = None  # and the reason it gave
        self._executors: int | None = None  # executors taking grid threads, by the manager's last heartbeat
        self._offered: set[str] | None = None  # the capabilities those executors offer (None: not told)
        self._wired: dict[str, dict] = {}
        self._scope_widened = False  # a seed's redirect widened the scope: the next submit says so
        self._taken_over = False  # the manager opened the application and the frontier is in hand (_take_over)
        self._next_look_at = math.inf  # --watch: monotonic s of the next look for documents due
        self._applying_since = 0.0  # monotonic s: the running apply began
        self._slow_apply_said = float("-inf")

    # ------------------------------------------------------------------ connection

    @property
    def manager(self) -> str:
        """The endpoint of the manager this application talks to now."""
        return self.link.managers.current

    def _hello(self) -> p.OpenApplication:
        """The hello of every connection: open (or reattach to) this crawl's application, with
        the instruction all its grid threads share (:func:`base_instruction`: sent once per
        connection, not with each thread). An instruction over
        :data:`~gridcrawl.protocol.MAX_HELLO_INSTRUCTION` bytes (thousands of seed hosts) is left
        out and goes with the connection's first ``submit``: a manager reads no more than
        :data:`~gridcrawl.protocol.MAX_HELLO_BYTES` of a peer before its login."""
        instruction = base_instruction(self.scope, self.settings, self.store.strategy)
        if len(msgspec.msgpack.encode(instruction)) > p.MAX_HELLO_INSTRUCTION:
            self._scope_widened, instruction = True, None  # (the next submit carries it)
        return p.OpenApplication(self.name, self.user, self.application_id, self.password, instruction,
                                 client=self.client_token)

    def _opened(self, message: p.ApplicationOpened) -> None:
        """The manager opened the application: keep its id, take the crawl database in hand the
        first time (:meth:`_take_over`), and submit again what is in flight (after a reconnect
        the manager may have lost them; it ignores duplicates)."""
        if not self._taken_over:
            self._take_over()
        elif not message.resumed and message.application_id != self.application_id:
            # opened in this run, and now a new one: after a failover, a manager whose database
            # does not hold it (another grid's, listed in --manager by mistake: the crawl's records
            # went on there, and executors with the same list went too) or cancelled it meanwhile
            log.warning("application %s was not reattached: the manager at %s opened a new one, %s (it cancelled "
                        "%s, or its database does not hold it: is %s a manager of this grid?); the crawl goes on "
                        "as %s", self.application_id[:8], self.manager, message.application_id[:8],
                        self.application_id[:8], self.manager, message.application_id[:8])
        if message.application_id != self.application_id:
            self.application_id = message.application_id
            self.store.set_meta("application_id", message.application_id)
        self.progress.application_id = message.application_id
        log.info("application %s %s", message.application_id[:8], "reattached" if message.resumed else "opened")
        self._opened_at = time.monotonic()  # a wait for results counts from here, not from before an outage
        if self.progress.state == "paused":  # resumed while this client was away; if not, the manager says so again
            self.progress.state = "running"
        if message.max_threads is not None and message.max_threads < self.max_in_flight:
            log.warning("the manager keeps at most %d grid threads of an application (max_threads_per_application): "
                        "max_in_flight %d lowered to that", message.max_threads, self.max_in_flight)
            self.max_in_flight = message.max_threads
        if self.in_flight:
            self._submit(list(self.in_flight.values()))

    def _take_over(self) -> None:
        """This client's first writes to the crawl's frontier, made only once the manager has
        opened the application to it, so that a client refused the application (another one is
        crawling this database) changes nothing of the other's: release what an earlier client
        left in flight (it is submitted again), and for a recrawl queue the documents due and
        record the recrawl."""
        self._taken_over = True
        self.store.release_all()
        if not self.recrawl:
            return
        # what an interrupted recrawl queued and did not visit is due too (queue_due skips URLs
        # queued already): "due" counts every document this run visits again
        due = resumed = self.store.queued_revisits()
        self.store.recrawl_since = self._recrawl_start(resumed)
        due += self.store.queue_due(every=self.recrawl == "all")
        # the sitemaps are read again at the start of a recrawl, not when one stopped before its end
        # is resumed: it read them, or left them queued (a recrawl run of --max-pages 1 read the
        # host's sitemap again every time, and never came to a page)
        maps = self.store.queue_sitemaps(every=True) if self.settings.sitemaps and not resumed else 0
        if maps:
            log.info("recrawl: %s to read again (their lastmod may make more documents due)", counted(maps, "sitemap"))
        mode = "watch" if self.watch else self.recrawl
        self.progress.recrawl = dict.fromkeys(RECRAWL_COUNTS, 0) | {"due": due}
        self.recrawl_id = self.store.start_recrawl(mode, due)
        log.info("recrawl (%s): %s due", mode, counted(due, "document"))
        if self.watch:
            self._next_look_at = self._next_look()

    def _recrawl_start(self, resumed: int):
        """When the recrawl this run makes began (naive UTC): now, kept as crawl meta
        ``recrawl_started``; or, when the run resumes a recrawl stopped before its end
        (``resumed``: the visits it left queued), the start that recrawl kept. Sitemaps read since
        then are not read again when a page names them (:attr:`CrawlStore.recrawl_since`)."""
        from datetime import datetime
        now = utcnow()
        if resumed:
            try:
                return min(datetime.fromisoformat(self.store.get_meta("recrawl_started") or ""), now)
            except ValueError:  # a crawl recrawled before the meta was kept
                return now
        self.store.set_meta("recrawl_started", now.isoformat())
        return now

    def _wire(self, spec) -> dict:
        """``spec``'s instruction entry (:func:`gridcrawl.items.spec_to_wire`), made once."""
        wire = self._wired.get(spec.type)
        if wire is None:
            wire = self._wired[spec.type] = spec_to_wire(spec)
        return wire

    def _submit(self, pendings: list[Pending]) -> None:
        strategy = self.store.strategy
        specs = []
        for x in pendings:
            # the thread's own keys: the application's instruction (the hello's) is read under them
            mine, items = thread_instruction({}, strategy, x, self._wire, sitemaps=self.settings.sitemaps,
                                             seeds=not self.recrawl)
            if x.kind is not None:  # a sitemap to read: any executor, never rendered nor extracted
                specs.append(p.ThreadSpec(x.thread_id, x.url, x.depth, 5, mine or None, []))
                continue
            # every thread at the default priority, a focused crawl's too: its relevance orders its
            # own frontier (what is claimed, and so submitted, first; the manager keeps an
            # application's submission order), not the grid. Sent as a priority, relevance put a
            # focused crawl (priority up to 1000) before every other user's (5): a plain crawl of
            # 100 pages of a host a focused crawl also crawled took 38.8 s instead of 2.6 s.
            specs.append(p.ThreadSpec(x.thread_id, x.url, x.depth, 5, mine or None, self._needs(x, items)))
        if specs and self.progress.first_submitted is None:
            self.progress.first_submitted = time.monotonic()
        for start in range(0, len(specs), 1000):  # (one over max_message_bytes goes in halves)
            widened, self._scope_widened = self._scope_widened, False
            self.link.send(p.Submit(self.application_id, specs[start:start + 1000],
                                    base_instruction(self.scope, self.settings, self.store.strategy)
                                    if widened else None))

    def _seed_result(self, pend: Pending, page: p.PageResult | None) -> None:
        """(I/O loop, as a result arrives.) A seed that redirected to a host outside the scope
        and got an answer there widens the scope by that host, as Heritrix's
        ``seedsRedirectNewSeeds``: the crawl database keeps it for a resume, the page's links
        there are followed, and the next ``submit`` carries the application's new instruction,
        so that executors let the host's grid threads through."""
        host = self.scope.redirected_seed(pend, page)
        if host is not None:
            self.store.keep_scope(self.scope.allowed_domains)
            self._scope_widened = True
            log.info("seed %s redirects to %s: %s joins the crawl's scope", pend.url, page.final_url, host)

    def _needs(self, pend: Pending, items: list | None = None) -> list[str]:
        """The capabilities grid thread ``pend`` needs: ``plugin:...`` for the extractor plugins
        of the item specs that apply to it (``items``; found here when ``None``) and ``render``
        for a page to render."""
        strategy = self.store.strategy
        if items is None:
            items = specs_for(strategy.items, pend.url, pend.page_type) if strategy.items else []
        needs = needs_of(items) if items else []
        if strategy.render_instruction(pend.page_type, items or ()):
            needs.append("render")
        return sorted(needs)

    def _executor_command(self) -> str:
        """The command that starts an executor for this client's manager, as the waiting line
        suggests it: on a grid with CURVE, with the manager's public key file this client was
        given and a placeholder for the desktop's own secret key; on one with logins, a
        placeholder for its user (an executor's login is its own, not this client's)."""
        args = ["gridcrawl-executor", "--manager", str(self.link.state.managers.current)]
        options = dict(zip(self.curve.options[::2], self.curve.options[1::2])) if self.curve else {}
        if self.curve:
            args += ["--curve-secret", "DESKTOP.key_secret", "--curve-server-key",
                     options.get("--curve-server-key", "MANAGER.key")]
        if self.password:
            args += ["--user", "NAME"]
        return " ".join(shlex.quote(arg) for arg in args)

    def _check_waiting(self, now: float, last_result: float) -> None:
        """Say why no result has come for a while rather than let the crawl look hung (again
        every ``WAIT_REPEAT`` seconds while the reason stays the same).

        After ``WAIT_BEATS`` heartbeat intervals: when an operator paused the application, that;
        when the manager's heartbeat says no executor
        takes grid threads (none connected; each an ``--idle-only`` one whose desktop is in use,
        or quarantined), that; else the threads in flight that need a capability no executor
        taking work offers (the heartbeat says which are offered), by need: they wait for an
        executor that has it (the manager holds them until one connects). After
        twice ``download_timeout`` (the longest one attempt may take: robots.txt's fetch, then
        the page's), the threads in flight by host: a host that accepts connections but does
        not answer costs each attempt the whole deadline, and an unreachable robots.txt keeps
        its host disallowed for ``robots_retry`` seconds before each of ``retry_times`` retries
        (about 3.5 minutes with the defaults). ``last_result``: monotonic seconds of the last
        result, or of the last (re)opening of the application when later: the time the manager
        was out of reach is not the hosts'."""
        s = self.settings
        silent = now - last_result
        if silent < WAIT_BEATS * s.heartbeat_interval:
            return
        counts: dict[str, int] = {}  # needs no executor taking work offers (a render taking long is no wait)
        for pend in self.in_flight.values():
            for need in self._needs(pend):
                if self._offered is None or need not in self._offered:
                    counts[need] = counts.get(need, 0) + 1
        if self.progress.state == "paused":
            reason = "paused"
        elif self._executors == 0:
            reason = "no executor"
        elif counts:
            reason = counts
        elif silent >= 2 * s.download_timeout:
            reason = "silent"
        else:
            return
        if reason == self._waiting_reason and now - self._waiting_said < WAIT_REPEAT:
            return
        self._waiting_reason, self._waiting_said = reason, now
        self.progress.waiting = counts
        n = len(self.in_flight)
        threads = f"{n} grid thread{'' if n == 1 else 's'} in flight"
        if reason == "paused":
            log.warning("no result for %.0f s: an operator paused this application; its %s %s at the manager until "
                        "it is resumed (gridcrawl-client --manager %s%s resume %s)", silent, threads,
                        "waits" if n == 1 else "wait", self.link.state.managers,  # all: a standby may take over
                        "".join(f" {shlex.quote(arg)}" for arg in [*(["--user", self.user] if self.password else []),
                                                                    *(self.curve.options if self.curve else [])]),
                        self.application_id[:8])
        elif reason == "no executor":
            log.warning("no result for %.0f s: no executor takes grid threads now (none is connected to the "
                        "manager at %s, or each is an --idle-only one whose desktop is in use or is "
                        "quarantined after timed-out attempts); the %s %s "
                        "at the manager until one does (%s)", silent,
                        self.link.state.managers.current, threads, "waits" if n == 1 else "wait",
                        self._executor_command())
        elif counts:
            from gridcrawl.plugins import how_to_provide
            what = ", ".join(f"{n} need {need!r}" for need, n in sorted(counts.items()))
            hints = "; ".join(f"{need}: {how_to_provide(need)}" for need in sorted(counts))
            log.warning("no result for %.0f s: of %d grid threads in flight, %s; they wait until an executor "
                        "that has it connects (%s); gridcrawl report lists waiting threads", silent, n, what, hints)
        else:
            hosts = collections.Counter(url_host(pend.url) for pend in self.in_flight.values())
            named = ", ".join(f"{host} ({n})" for host, n in hosts.most_common(SILENT_HOSTS))
            if len(hosts) > SILENT_HOSTS:
                named += f" and {len(hosts) - SILENT_HOSTS} more hosts"
            log.warning("no result for %.0f s from %s, on %s: they wait for their hosts — a fetch from a host "
                        "that accepts connections but never answers runs to the deadline (%g s, "
                        "download_timeout), a host whose robots.txt is unreachable is tried again %d times, %g s "
                        "apart (retry_times, robots_retry), and a crawl delay or a Retry-After holds a host's "
                        "threads at the manager; the manager's log names each retry",
                        silent, threads, named, s.download_timeout, s.retry_times, s.robots_retry)
        if self.on_progress:
            self.on_progress(self.progress)

    # ------------------------------------------------------------------ loop

    def run(self, stop: threading.Event | None = None) -> Progress:
        """Crawl until done, ``max_pages`` or ``stop``; return the final :class:`Progress`.

        Raises :class:`~gridcrawl.errors.ManagerUnreachable` if no manager answers at the start,
        and :class:`~gridcrawl.errors.Refused` if the manager refuses the application; a manager
        lost later is reconnected with back-off while the crawl goes on (:mod:`gridcrawl.link`).
        Raises :class:`CrawlDatabaseError` when the crawl database fails for good, or when its
        crawler lock (:class:`~gridcrawl.db.CrawlerLock`) went to another crawler (after what
        had come was stored).
        """
        stop = stop or threading.Event()
        s = self.settings
        # a recrawl's --max-pages bounds the pages of this run (its documents are visited already)
        self.visited_before = 0 if self.recrawl else self.store.counts()["visited"]
        if self.on_progress is not None:
            self.progress.to_visit = self._frontier_size()
        last_check = last_result = time.monotonic()
        self._waiting_said = float("-inf")
        self._opened_at = float("-inf")
        exhausted = False
        oldest_result = None
        self.link.state.leaving = stop.is_set  # a manager stopped with this client (one signal to both) is no loss
        try:
            self.link.start()
            loop_at = time.monotonic()
            while not stop.is_set():
                now = time.monotonic()
                if now - loop_at > s.peer_timeout:
                    # the loop itself stood still: the crawl database's SQL it runs (a claim, the
                    # take-over of the frontier) hung, or the process was paused — not the hosts
                    log.warning("this client's loop stood still for %.0f s (a crawl database that did not answer, "
                                "or the process paused): its heartbeats stopped, so the manager may have detached "
                                "the application (it is reattached)", now - loop_at)
                    last_result = self._opened_at = now  # a wait for results counts from here
                loop_at = now
                self._collect()
                if self._claiming is not None and self._claiming[0].done():
                    exhausted = self._claimed()
                if self.results and oldest_result is None:  # put back after the database failed
                    oldest_result = now
                if (self.link.up and not exhausted and self._applying is None and self._claiming is None
                        and self._db_available(now)):
                    exhausted = self._refill()
                busy = self._applying is not None or self._claiming is not None  # the applier thread works
                wait = 0.02 if busy else min(s.apply_interval, s.heartbeat_interval)
                if self._apply_now(exhausted) and self._db_available(now):
                    wait = 0  # apply below, at once
                if exhausted and not self.in_flight and not self.results and self._applying is None and not self.watch:
                    wait = 0  # nothing more will come: end below without waiting on the socket
                if self.link.socket.poll(wait * 1000):
                    for message in self.link.receive():
                        if isinstance(message, p.ThreadDone) and message.application_id == self.application_id:
                            last_result = self._last_result_at = time.monotonic()
                            self.progress.waiting = {}
                            for done in message.threads:
                                if done.thread_id in self._waiting:
                                    continue  # sent again after a reattach: already waiting to be applied
                                pend = self.in_flight.get(done.thread_id) or self._adopt(done.thread_id)
                                if pend is not None:
                                    self._results_seen += 1
                                    self._seed_result(pend, done.page)
                                    self._waiting.add(done.thread_id)
                                    self.results.append(Outcome(pend, done.page, done.executor_id,
                                                                done.attempts, done.failed))
                                    oldest_result = oldest_result or time.monotonic()
                        elif isinstance(message, p.Heartbeat):
                            if message.executors is not None:
                                self._executors = message.executors
                                self._offered = None if message.capabilities is None else set(message.capabilities)
                        elif isinstance(message, p.ApplicationOpened):
                            self._opened(message)
                        elif isinstance(message, p.Controlled) and message.application_id == self.application_id:
                            self.progress.state = "cancelled" if message.action == "cancel" else message.state
                            log.warning("an operator %s this application", {"pause": "paused", "resume": "resumed",
                                        "cancel": "cancelled"}.get(message.action, message.action))
                self.link.tick()  # heartbeats, a silent manager, reconnects (gridcrawl.link)
                if self.progress.state == "cancelled":
                    break  # the manager aborted the threads; unapplied results are applied below
                now = time.monotonic()
                if (self.results and self._applying is None and self._claiming is None and self._db_available(now)
                        and (self._apply_now(exhausted) or len(self.results) >= s.apply_batch
                             or now - oldest_result >= s.apply_interval)):
                    self._start_apply()
                    oldest_result = None
                    exhausted = False
                if now - last_check >= s.heartbeat_interval:
                    last_check = now
                    lock = getattr(self.store, "lock", None)
                    if lock is not None and getattr(lock, "lost", None) is not None and lock.lost.is_set():
                        self.lock_lost = True
                        break  # what came is applied below
                    if self._applying is not None:  # the database, not the hosts, holds the crawl up
                        self._check_applying(now)
                    elif self._claiming is not None:
                        self._check_applying(now, "claim the next URLs to visit")
                    elif self.link.up and self.in_flight and not self.results:
                        self._check_waiting(now, max(last_result, self._opened_at))
                if (now >= self._next_look_at and self._applying is None and self._claiming is None
                        and self._db_available(now)):
                    # --watch: queue what has come due since the last look
                    try:
                        due = self.store.queue_due()
                        if s.sitemaps and self.store.queue_sitemaps():
                            exhausted = False
                    except Exception as exc:
                        self._database_failed(exc)
                        due = 0
                    if due:
                        self.progress.recrawl["due"] += due
                        self.store.update_recrawl(self.recrawl_id, self.progress.recrawl)
                        log.info("recrawl: %d more documents due", due)
                        exhausted = False
                    self._next_look_at = self._next_look()
                limit = bool(s.max_pages) and self.visited_before + self.progress.pages >= s.max_pages
                if (self.link.up and exhausted and not self.in_flight and not self.results and self._applying is None
                        and (not self.watch or limit)):
                    self.link.send(p.CloseApplication(self.application_id))
                    if limit and (left := self._frontier_size()):
                        log.info("crawl stopped at --max-pages %d (%s left to visit)", s.max_pages,
                                 counted(left, "URL"))
                    else:
                        log.info("crawl complete")
                    break
        except CrawlDatabaseError:
            self._db_retry_at = float("inf")  # nothing more is applied
            raise
        finally:
            try:
                if self._db_retry_at is None:
                    self._apply()
                    if self.recrawl_id is not None and self.link.state.ever_up:
                        self.store.update_recrawl(self.recrawl_id, self.progress.recrawl, finished=True)
                    if self.on_progress is not None:  # the bar's last frame: what is left, exactly
                        self.progress.to_visit = self._frontier_size()
                        self.on_progress(self.progress)
                else:
                    self._collect(wait=True)
            except CrawlDatabaseError as exc:
                log.error("%s", exc)
            finally:
                self._applier.shutdown(wait=True)
                # a manager that answers is told at once (else it detaches the application only
                # after the liveness, logging a silent client as a WARNING)
                self.link.close(bye="client stopping" if self.link.up else None, linger=1000)
                self.context.term()
        if self.lock_lost:
            raise CrawlDatabaseError("another crawler took this crawl database's lock while the connection holding "
                                     "it was lost: this crawl stopped, what it fetched stored (two on one crawl "
                                     "database fetch the same URLs twice); run it again once the other has ended")
        return self.progress

    def _check_applying(self, now: float, what: str = "store the last results") -> None:
        """Log a WARNING when the work of the applier thread (``what`` it does: storing the last
        results, or claiming URLs) has taken :data:`SLOW_APPLY` seconds or more (then again every
        SLOW_APPLY seconds): a crawl database that stopped answering (a network cut, a server that
        hangs) left the client silent, then its waiting warning blamed the hosts. ``now``:
        monotonic seconds."""
        took = now - self._applying_since
        if took >= SLOW_APPLY and now - self._slow_apply_said >= SLOW_APPLY:
            self._slow_apply_said = now
            log.warning("the crawl database has taken %.0f s to %s (database %s): it is slow "
                        "or does not answer; the crawl waits for it", took, what, shown_url(self.store.engine.url))

    def _frontier_size(self) -> int | None:
        """The frontier's size for the progress bar (:meth:`CrawlStore.to_visit_count`), and when
        to count it again (:data:`FRONTIER_COUNT_EVERY`); None when the database does not answer
        (a figure to show: the apply, not this, reports the failure)."""
        began = time.monotonic()
        try:
            return self.store.to_visit_count()
        except Exception as exc:
            log.debug("could not count the frontier (%s)", exc)
            return None
        finally:
            now = time.monotonic()
            self._frontier_due = now + max(FRONTIER_COUNT_EVERY, (now - began) / FRONTIER_COUNT_SHARE)

    def _next_look(self) -> float:
        """``--watch``: the monotonic time of the next look for documents coming due: when the
        earliest is due, but at most ``watch_interval`` seconds from now, and at least 1 s (or
        ``watch_interval`` if shorter), so that documents in flight, due until their results are
        applied, do not make the client look again on every pass of its loop."""
        longest = self.settings.watch_interval
        wait = longest
        due = self.store.next_due()
        if due is not None:
            wait = min(wait, max(min(1.0, longest), (due - utcnow()).total_seconds()))
        return time.monotonic() + wait

    def _adopt(self, thread_id: int) -> Pending | None:
        """A result for a thread this process did not submit (it arrived while an earlier client
        was away): adopt it if its URL is still to visit, else acknowledge it at once (it was
        applied already)."""
        pend = self.store.pending(thread_id)
        if pend is None:
            self.link.send(p.Ack(self.application_id, [thread_id]))
            return None
        self.in_flight[thread_id] = pend
        return pend

    def _apply_now(self, exhausted: bool) -> bool:
        """True when the waiting results should be applied without waiting for a full batch
        (``apply_batch``) or for ``apply_interval``: when every submitted thread is back, or at
        least half of them while the frontier has nothing more to submit (``exhausted``). Their
        pages' links are then the only new work, and executors idle until they are applied (as
        after the seed, or while one slow page is in flight). Half, not each result as it comes:
        one small transaction per result cost 8 % more CPU at 50 ms per request for no gain
        (benchmarks/results/2026-11-28-apply-when-the-frontier-is-empty.md)."""
        back, out = len(self.results), len(self.in_flight)
        return (back > 0 and self._applying is None and self._claiming is None
                and (back >= out or (exhausted and 2 * back >= out)))

    def _refill(self) -> bool:
        """Claim more URLs to visit if there is room, in the applier thread (:meth:`CrawlStore.claim`), and
        submit them as grid threads once claimed (:meth:`_claimed`): at once when the claim ends
        within :data:`CLAIM_WAIT`, else when the I/O loop finds it done, having gone on receiving
        and heartbeating meanwhile. True when the frontier has nothing more to give (empty, or
        ``max_pages`` reached); False while a claim runs."""
        s = self.settings
        # in_flight holds every thread submitted and not yet acknowledged: the results waiting to
        # be applied (self.results) are among them, counted once
        room = self.max_in_flight - len(self.in_flight)
        if s.max_pages:
            room = min(room, s.max_pages - self.visited_before - self.progress.pages - len(self.in_flight))
            if room <= 0 and not self.in_flight:
                return True
        if room <= 0 or (self.in_flight and room < self.max_in_flight // 4
                         and time.monotonic() - self._last_result_at < REFILL_WAIT):
            return False  # a claim of a quarter of the window at least, while results keep coming
        if self._held_back is not None and self._results_seen - self._held_back[0] < max(1, len(self.in_flight) // 8) \
                and time.monotonic() - self._held_back[1] < REFILL_WAIT:
            return False  # the last claim left URLs for their hosts' share: wait for some results first
        pendings = self.in_flight.values()
        share = HostShare.of((pend.url for pend in pendings), HOST_SHARE_PER_REQUEST * s.concurrent_requests_per_host)
        sitemaps = max(0, SITEMAPS_IN_FLIGHT - sum(1 for pend in pendings if pend.kind))
        # the applier thread is idle (no apply runs while the loop claims, nor a claim while it
        # applies): the database keeps one writer, and in_flight and the results the share and
        # the room were counted from lose nothing until the claim is taken back
        claim = self._applier.submit(self.store.claim, room, sitemaps=sitemaps, share=share)
        self._claiming = (claim, share, self._results_seen)
        self._applying_since = time.monotonic()
        concurrent.futures.wait([claim], timeout=CLAIM_WAIT)
        return self._claimed() if claim.done() else False  # else the loop takes it back when done

    def _claimed(self) -> bool:
        """(I/O loop.) Take back the claim :meth:`_refill` began, which is done: submit what it
        claimed and keep the host share's verdict (:attr:`_held_back`). Returns True when the
        frontier gave nothing (it is exhausted for now). A claim the database failed goes to
        :meth:`_database_failed` (returns False, or raises :class:`CrawlDatabaseError`)."""
        claim, share, seen = self._claiming
        self._claiming = None
        try:
            claimed = claim.result()
        except Exception as exc:
            self._database_failed(exc)
            return False
        self._held_back = (seen, time.monotonic()) if share.left else None
        if share.left and not claimed:
            return False  # the frontier is not empty: its next URLs wait for their hosts' share
        for pend in claimed:
            self.in_flight[pend.thread_id] = pend
        if claimed:
            self._submit(claimed)
        self.progress.in_flight = len(self.in_flight)
        if claimed and self.on_progress is not None:  # the bar shows them at once, not at the first result
            self.on_progress(self.progress)
        return not claimed

    def _apply(self) -> None:
        """Apply every waiting result now and acknowledge it (waits for the applier thread).
        Raises :class:`CrawlDatabaseError` if the database fails for good."""
        self._collect(wait=True)
        if self.results:
            self._start_apply()
            self._collect(wait=True)

    def _start_apply(self) -> None:
        """Hand every waiting result to the applier thread (:meth:`_apply_batch`)."""
        self._applying = self._applier.submit(self._apply_batch, self.results)
        self._applying_since = time.monotonic()
        self.results = []

    def _apply_batch(self, batch: list[Outcome]) -> list[Outcome]:
        """Apply ``batch`` in the applier thread, in transactions of at most :data:`APPLY_LINKS`
        links (pages of a thousand links each would otherwise make one huge transaction and hold
        every row in memory at once). Each committed part goes to :attr:`_committed` for the I/O
        loop to acknowledge. Returns the outcomes left unapplied (empty, unless the database
        failed: then the error is the last item's ``failure``, see :meth:`_collect`)."""
        start = 0
        while start < len(batch):
            end, links = start, 0
            while end < len(batch) and (end == start or links + _links(batch[end]) <= APPLY_LINKS):
                links += _links(batch[end])
                end += 1
            part = batch[start:end]
            began = time.monotonic()
            try:
                done = self.store.apply(part, self.scope, store_content=self.settings.store_content,
                                        store_duplicates=self.settings.store_duplicates,
                                        recrawl=None if self.progress.recrawl is None or self.recrawl_id is None
                                        else (self.recrawl_id, self.progress.recrawl))
            except Exception as exc:
                return [*batch[start:], exc]
            seconds = time.monotonic() - began
            if seconds >= 1.0:  # the I/O loop kept heartbeating meanwhile
                log.info("applied %d results with %d links in %.1f s", len(part), links, seconds)
            self._count_recrawl(done)
            if self.on_progress is not None and time.monotonic() >= self._frontier_due:
                done["to_visit"] = self._frontier_size()
            self._committed.put(([o.pending.thread_id for o in part], done))
            start = end
        return []

    def _count_recrawl(self, done: dict) -> None:
        """(Applier thread.) A recrawl counts what a committed part found: its ``recrawl`` row got
        them in the part's own transaction (:meth:`CrawlStore.apply`), so a client killed after the
        commit loses none."""
        if self.progress.recrawl is not None and done.get("recrawl") is not None:
            self.progress.recrawl.update(done["recrawl"])

    def _collect(self, wait: bool = False) -> None:
        """In the I/O loop: acknowledge what the applier committed, update the progress and, when
        the apply is over, take back what it could not apply (the database failed). With ``wait``,
        wait for a running apply first."""
        if self._applying is not None and (wait or self._applying.done()):
            left = self._applying.result()
            self._applying = None
            if left:
                *outcomes, exc = left
                self.results[:0] = outcomes  # first again, still waiting (the manager keeps them unacked)
                self._send_acks()
                self._database_failed(exc)
        self._send_acks()

    def _send_acks(self) -> None:
        pr, acked = self.progress, False
        while True:
            try:
                thread_ids, done = self._committed.get_nowait()
            except queue.Empty:
                break
            for thread_id in thread_ids:
                self.in_flight.pop(thread_id, None)
                self._waiting.discard(thread_id)
            for start in range(0, len(thread_ids), p.MAX_BATCH):
                self.link.send(p.Ack(self.application_id, thread_ids[start:start + p.MAX_BATCH]))
            pr.pages += done["pages"]
            pr.documents += done["documents"]
            pr.errors += done["errors"]
            pr.disallowed += done["disallowed"]
            pr.sitemaps += done["sitemaps"]
            pr.sitemap_errors += done["sitemap_errors"]
            if done.get("to_visit") is not None:
                pr.to_visit = done["to_visit"]
            acked = True
        if acked:
            pr.last_result = time.monotonic()
            pr.in_flight = len(self.in_flight)
            if self._db_retry_at is not None:
                log.warning("the crawl database answers again; the crawl goes on")
            self._db_retry_at, self._db_backoff, pr.note = None, 0.0, ""
            if self.on_progress:
                self.on_progress(pr)

    def _database_failed(self, exc: BaseException) -> None:
        """The crawl database failed: pause and retry later with back-off (1 s doubling to
        :data:`DB_RETRY_MAX`) if :func:`~gridcrawl.db.transient_error`, else raise
        :class:`CrawlDatabaseError`. Logged at each step of the back-off, then once a minute."""
        reason = describe_error(exc, self.store.engine)
        if not transient_error(exc):
            raise CrawlDatabaseError(f"the crawl database failed: {reason}") from None
        growing = self._db_backoff < DB_RETRY_MAX
        self._db_backoff = min(DB_RETRY_MAX, max(1.0, self._db_backoff * 2))
        now = time.monotonic()
        self._db_retry_at = now + self._db_backoff
        self.progress.note = "database unavailable, retrying"
        if growing or now - self._db_said >= 60.0:
            self._db_said = now
            log.warning("crawl database unavailable (%s); crawl paused, retrying every %.0f s", reason,
                        self._db_backoff)
        if self.on_progress:
            self.on_progress(self.progress)

    def _db_available(self, now: float) -> bool:
        """False while waiting out the back-off after a database failure."""
        return self._db_retry_at is None or now >= self._db_retry_at
