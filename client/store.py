"""The crawl's tables — ``document``, ``visited_url``, ``to_visit_url`` (the paper's figure 10) —
and the operations of the application's crawl loop on them.

The tables are the truth of a crawl: a URL is identified by its fingerprint (MD5 of the
canonical URL, see :mod:`gridcrawl.urls`), ``document`` and ``visited_url`` have a unique key on
it, so no page is ever stored twice, and a new client on the same database resumes the crawl.
A ``to_visit_url`` row's id is also its grid thread's id within the application.

Several clients may share one database (PostgreSQL, SQL Server, MariaDB): :meth:`CrawlStore.claim`
locks the rows it takes and skips rows another client is taking (``FOR UPDATE SKIP LOCKED``;
on SQL Server the table hints ``UPDLOCK, READPAST, ROWLOCK``; SQLite takes its write lock at
``BEGIN IMMEDIATE``), inserts are insert-if-absent on the fingerprint keys, and a transaction
rolled back as a deadlock victim is run again (:func:`~gridcrawl.db.run_transaction`).
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import sys
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Iterable, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gridcrawl import models
from gridcrawl.db import chunks, init_schema, insert_ignore, run_transaction, utcnow
from gridcrawl.focus import page_text, priority as focus_priority
from gridcrawl.protocol import DISALLOWED, ErrorKind, PageResult
from gridcrawl.rules import BASE, PAGE_TYPE_LENGTH, Rule, rules_from_table, store_rules
from gridcrawl.semantic import triple_key, valid_triple
from gridcrawl.client.items import item_rows
from gridcrawl.items import specs_for
from gridcrawl.schedule import VERDICTS, AdaptiveSchedule, verdict
from gridcrawl.settings import Settings
from gridcrawl.urls import InvalidURL, canonical_url, fingerprint, in_scope, url_host, url_origin
from gridcrawl.client.traps import TrapDetector
from gridcrawl.client.frontier import ORDERS, Pending, Scope, Strategy

log = logging.getLogger("gridcrawl.client")

document, visited, to_visit = models.document, models.visited_url, models.to_visit_url
kept_link, document_version, recrawl_table = models.kept_link, models.document_version, models.recrawl
sitemap_table = models.sitemap
triple = models.triple


#: A claim with a :class:`HostShare` reads up to this many times its room of the frontier's next
#: pages, in up to :data:`CLAIM_ROUNDS` rounds, each but the first leaving out the URLs of the
#: hosts at their share (Frontera's broad-crawling queue, which caps requests per host too,
#: reads ahead of the batch it returns in the same way).
CLAIM_SCAN = 4
CLAIM_ROUNDS = 3

#: Sitemap files (a host's own and the sitemaps its indexes name) queued per site
#: (:meth:`Scope.site`) at most, over the whole crawl. sitemaps.org bounds each file (50,000
#: entries, 50 MiB) but not their number: a robots.txt of 3,000 ``Sitemap:`` lines, each an
#: index of 100 sitemaps of 1,000 URLs, is 300,000 files, hours of requests that bring no page
#: (Nutch, Scrapy and StormCrawler read every sitemap they are given, each file bounded only by
#: its size). 1,000 files of 100 URLs each fill the default ``max_pages_per_host`` (100,000): a
#: site whose sitemaps are small (one per day of a news archive) still has its pages found, and
#: the requests its sitemaps cost stay at 1 % of its page cap. Once a site has
#: ``max_pages_per_host`` URLs, its sitemaps are not read at all (:meth:`CrawlStore._queue`):
#: every page they list would be left out.
SITEMAP_FILES_PER_SITE = 1_000
#: Of :data:`SITEMAP_FILES_PER_SITE`, the host's own sitemaps (its robots.txt's ``Sitemap:``
#: lines, or ``/sitemap.xml``) at most. They are queued first and read first (the seed names
#: them all at once), so the indexes among them would otherwise take the whole budget and leave
#: none to the sitemaps they name, which list the pages. Google's Search Console takes 500 index
#: files per site; a robots.txt names a handful. 100 leaves nine tenths to the indexes' sitemaps.
HOST_SITEMAPS = 100
#: A robots.txt Crawl-delay from this many seconds on is told once per host, as a WARNING: its
#: pages come that far apart (2,880 a day at the largest kept, max_crawl_delay's 30 s), and the
#: crawl's progress alone did not say why.
SLOW_CRAWL_DELAY = 10.0
#: SQLite's page cache (KiB) while --retry-failed queues the failed URLs again, instead of its
#: 2 MiB: each URL updates the random-ordered fingerprint indexes of to_visit_url and visited_url,
#: and with 2 MiB the pages spilled to disk again and again (1,000,000 URLs: 56 s, 11-20 s with
#: 64 MiB; 94 s a row at a time before). Set back after.
RETRY_CACHE_KIB = 65_536
#: Hosts whose Crawl-delay a store keeps for the summary, at most.
CRAWL_DELAY_HOSTS = 1_000


@dataclass(slots=True)
class HostShare:
    """A claim's rule for sharing an application's window of grid threads among hosts: every
    host's first ``share`` threads in flight come before any host's more, and the window's rest
    goes in the frontier's order. One crawl of many sites would otherwise fill its window with
    the thousands of URLs of one site (its sitemap, an index page), all waiting at the manager
    for that site's crawl delay, while every other site waited for a free slot. A single site
    still gets the whole window.

    ``held`` counts the threads in flight by host (:func:`~gridcrawl.urls.url_host`);
    :meth:`pick` adds what it takes and puts the URL prefixes (``scheme://host:port/``) of the
    hosts at their share in :attr:`full`; :attr:`left` says a claim left room to spare while
    other hosts' URLs may lie further on than it read (the caller then waits for results
    before it claims again).
    """

    share: int
    held: collections.Counter = field(default_factory=collections.Counter)
    full: set[str] = field(default_factory=set)
    left: bool = False

    @classmethod
    def of(cls, urls: Iterable[str], share: int) -> "HostShare":
        """The share of a window whose grid threads in flight are those of ``urls``; the hosts
        at their share already are :attr:`full` from the start, so a claim's first read leaves
        their URLs out."""
        urls = list(urls)
        held = collections.Counter(url_host(url) for url in urls)
        return cls(share, held, {url_origin(url) + "/" for url in urls if held[url_host(url)] >= share})

    def pick(self, rows: Sequence, limit: int) -> list:
        """Up to ``limit`` of ``rows`` (the frontier's next to-visit rows, in claim order, each
        with a ``url``), in their order, passing over those of hosts at their share."""
        taken = []
        for row in rows:
            if len(taken) == limit:
                break
            host = url_host(row.url)
            if self.held[host] < self.share:
                self.held[host] += 1
                taken.append(row)
            else:
                self.full.add(url_origin(row.url) + "/")
        return taken


def _mark_in_flight(conn, rows: Sequence) -> None:
    """Mark the to-visit ``rows`` (each with an ``id``) in flight, in ``conn``'s transaction."""
    for ids in chunks([r.id for r in rows], 500):
        conn.execute(to_visit.update().where(to_visit.c.id.in_(ids)).values(in_flight=True))


@dataclass(slots=True)
class FrontierMemo:
    """What a client's last claims found absent from the frontier's waiting (not in flight) rows,
    so that its next claims do not read the whole frontier again to find it absent: without an
    index that answers them, a claim's read of the sitemaps to read first (``kind IS NOT NULL``)
    and its read of the pages of hosts below their share (``url NOT LIKE`` the full hosts') each
    walked every waiting row when there were none — one host's crawl with the default
    ``concurrent_requests_per_host`` keeps its host at its share — 1-1.4 s a claim each with a
    frontier of 1,000,000 URLs, 2.4 s of the client's every claim of 64 or more URLs.

    ``last_id``: the highest ``to_visit_url`` id the facts below cover (None: nothing known);
    ``no_sitemaps``: no sitemap file waits; ``only``: every waiting page's URL has one of these
    origin prefixes (``scheme://host[:port]/``, :class:`HostShare`'s), or None (unknown). Rows
    queued later have higher ids (ids are never reused), so :meth:`catch_up` reads only those;
    rows put back out of flight (:meth:`CrawlStore.release`) make the store forget it all. Kept per
    client process: another client's releases on a shared database are not seen, which only
    makes a claim take the frontier in its order instead of another host's URLs first."""

    last_id: int | None = None
    no_sitemaps: bool = False
    only: frozenset[str] | None = None

    def catch_up(self, conn) -> "FrontierMemo":
        """A copy brought up to the frontier now: the rows queued since :attr:`last_id` (read by
        id) take back what they contradict. Nothing known yet: a copy that covers every row up
        to the highest id now, knowing nothing."""
        top = conn.execute(sa.select(sa.func.max(to_visit.c.id))).scalar() or 0
        if self.last_id is None:
            return FrontierMemo(top)
        memo = FrontierMemo(top, self.no_sitemaps, self.only)
        if top > self.last_id and (memo.no_sitemaps or memo.only is not None):
            for url, kind in conn.execute(sa.select(to_visit.c.url, to_visit.c.kind)
                                          .where(to_visit.c.id > self.last_id)):
                if kind is not None:
                    memo.no_sitemaps = False
                elif memo.only is not None and url_origin(url) + "/" not in memo.only:
                    memo.only = None
        return memo


@dataclass
class Outcome:
    """A finished grid thread as the client applies it: the manager's verdict and the page."""

    pending: Pending
    page: PageResult | None
    executor_id: str | None
    attempts: int
    failed: bool


@dataclass
class Rows:
    """Crawl-table rows of a batch of finished grid threads (:meth:`CrawlStore.rows`): the
    ``document``, ``visited_url`` and ``kept_link`` rows, the ``to_visit_url`` rows of their
    links keyed by fingerprint, the to-visit ids (= thread ids) they finish, how many failed
    (neither a decision of the crawl's, :data:`DECISIONS`, nor disallowed by robots.txt),
    the time they were made (naive UTC), the ``triple``, ``item`` and ``item_issue`` rows, and
    the ``visited_url`` rows of links not followed because their URL shape is a template trap."""

    docs: list[dict]
    visits: list[dict]
    links: dict[str, dict]
    kept: list[dict]
    thread_ids: list[int]
    errors: int = 0
    now: object = None
    triples: list[dict] = field(default_factory=list)
    items: list[dict] = field(default_factory=list)
    issues: list[dict] = field(default_factory=list)
    traps: list[dict] = field(default_factory=list)   # visited_url rows of links into template traps
    sitemaps: list[dict] = field(default_factory=list)  # sitemap rows of the sitemaps read (validators, schedule)


@dataclass
class _Queued:
    """What one transaction's :meth:`CrawlStore._queue` queued and left out, counted once it
    commits (:meth:`CrawlStore._count_sites`): the site (:meth:`Scope.site`) of each page
    queued (``added``) and of each left out at ``max_pages_per_host`` (``capped``), the site and
    kind of each sitemap file queued (``maps``), the site of each sitemap file not queued or taken
    out of the queue (``skipped``), and the sites found at their cap (``full``)."""

    added: list[str] = field(default_factory=list)
    capped: list[str] = field(default_factory=list)
    maps: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    full: set[str] = field(default_factory=set)


def add_recrawl_counts(counts: Mapping, found: Mapping) -> dict:
    """A recrawl run's ``counts`` (keys of the ``recrawl`` table) with what one applied batch
    ``found`` added (:meth:`CrawlStore.apply`'s verdict counts, ``new`` and ``due``): a new dict.
    ``fetched`` is unchanged + changed + revived (a body came back); ``errors`` the ``error``
    verdicts; ``disallowed`` the stored documents robots.txt now disallows (not errors)."""
    total = dict(counts)
    for key in ("due", "not_modified", "unchanged", "changed", "gone", "revived", "disallowed", "new"):
        total[key] = total.get(key, 0) + found.get(key, 0)
    total["errors"] = total.get("errors", 0) + found.get("error", 0)
    total["fetched"] = total.get("fetched", 0) + sum(found.get(k, 0) for k in ("unchanged", "changed", "revived"))
    return total


class CrawlStore:
    """The crawl tables in ``engine`` (created if missing); ``strategy`` (default: breadth-first,
    no rules, no focus) decides the claim order and which links are followed; ``schedule``
    (default: Nutch's defaults) when each stored document is due again; ``keep_versions``: a
    recrawl that finds a page changed keeps the replaced body in ``document_version``.

    ``recrawl_since`` (naive UTC, set by the application when a recrawl run starts; ``None`` in
    a plain crawl): sitemaps not read since then are read again when a page names them, and a
    stored document that a sitemap's ``<lastmod>`` makes due is queued at once (see
    :meth:`apply`)."""

    def __init__(self, engine: Engine, strategy: Strategy | None = None, *,
                 schedule: AdaptiveSchedule | None = None, keep_versions: bool = False) -> None:
        self.engine = engine
        self.strategy = strategy or Strategy()
        self.schedule = schedule or AdaptiveSchedule()
        self.keep_versions = keep_versions
        self.recrawl_since: datetime | None = None
        self.lock = None  # what holds the crawl database's crawler lock (client.cli.open_crawl)
        self._site_counts: collections.Counter[str] | None = None  # URLs per Scope.site, for max_pages_per_host
        # Sitemap files queued or read per Scope.site (key: the site) and the host's own among them
        # (key: (site, "sitemap")), for SITEMAP_FILES_PER_SITE and HOST_SITEMAPS (None: not read yet)
        self._sitemap_counts: collections.Counter | None = None
        # Sites found at max_pages_per_host: their sitemaps are no longer read (committed only)
        self._full_sites: set[str] = set()
        #: Sitemap files this store did not queue, or took out of the queue, per site: beyond
        #: :data:`SITEMAP_FILES_PER_SITE` or :data:`HOST_SITEMAPS`, or of a site that had reached
        #: ``max_pages_per_host`` (committed transactions only).
        self.sitemaps_skipped: collections.Counter[str] = collections.Counter()
        #: Links this store did not queue because their site (:meth:`Scope.site`: a seed's host
        #: with its subdomains) had reached ``max_pages_per_host``, per site (committed
        #: transactions only).
        self.capped: collections.Counter[str] = collections.Counter()
        #: In-scope links found on pages at ``max_depth`` and not followed (the hop limit), as
        #: hashes of their URLs (bounded like the cache below: ``len`` is at least the count).
        self.beyond_depth: set[int] = set()
        #: Links a focused crawl scored below ``min_relevance`` and did not queue (hashes, bounded).
        self.below_relevance: set[int] = set()
        #: Pages whose links reached their executor's ``max_links_per_page`` (it read that many,
        #: no more; the results' ``links_cut``): URL -> that bound, at most 1,000 kept (``len`` is
        #: at least the count).
        self.links_cut: dict[str, int] = {}
        #: Hosts whose robots.txt asks a Crawl-delay: host -> seconds asked (its results'
        #: ``crawl_delay``), at most CRAWL_DELAY_HOSTS of them; the manager keeps at most
        #: ``max_crawl_delay`` (the client's setting, which ``gridcrawl run`` shares; cli sets it).
        self.crawl_delays: dict[str, float] = {}
        self.max_crawl_delay = Settings.max_crawl_delay
        self.best_below = 0.0  # the highest score among them
        # URLs known to be queued or visited (their hash) with the shallowest depth known: most
        # links of a page were seen before, and this skips their scope checks and SQL unless they
        # are found by a shorter path now. A bounded cache, not the truth: cleared when full, so
        # memory does not grow with the frontier (the tables decide).
        self._known: dict[int, int] = {}
        # keep/follow rules: the page type each URL of that cache was queued or visited with,
        # so that a link a follow rule gives another type is counted (a URL is crawled once, with
        # its first type): how many (at least), and one ``(url, its type, the type not given)``
        self._types: dict[int, str] = {}
        self.retyped = 0
        self.retyped_example: tuple[str, str, str] | None = None
        # A sitemap's lastmod for pages that were in flight when it was read (their Pending was
        # claimed without it): fingerprint -> lastmod, until their result is applied.
        self._late_lastmods: dict[str, datetime] = {}
        self.traps: TrapDetector | None = None  # made by apply() from the scope's trap settings
        #: what the last claims found absent from the frontier (committed claims only)
        self._frontier = FrontierMemo()
        init_schema(engine, models.crawl_metadata, models.crawl_meta)

    # ------------------------------------------------------------------ meta

    def get_meta(self, name: str, default: str | None = None) -> str | None:
        """The stored crawl setting ``name`` (application id, scope ...), or ``default``."""
        with self.engine.connect() as conn:
            value = conn.execute(sa.select(models.crawl_meta.c.value)
                                 .where(models.crawl_meta.c.name == name)).scalar()
        return default if value is None else value

    def metas(self) -> dict[str, str]:
        """Every stored crawl setting, name to value (one query, for the start of a crawl)."""
        with self.engine.connect() as conn:
            return {name: value for name, value in conn.execute(sa.select(models.crawl_meta.c.name,
                                                                           models.crawl_meta.c.value))}

    def set_meta(self, name: str, value: str) -> None:
        """Store crawl setting ``name`` (replacing an older value)."""
        self.set_metas({name: value})

    def set_metas(self, values: dict[str, str]) -> None:
        """Store the crawl settings ``values`` (name to value, replacing older values) in one
        transaction."""
        meta = models.crawl_meta

        def work(conn) -> None:
            for name, value in values.items():
                # rowcount 0 may also mean "same value" (drivers that count changed rows): insert-if-absent
                if conn.execute(meta.update().where(meta.c.name == name).values(value=value)).rowcount == 0:
                    insert_ignore(conn, meta, [{"name": name, "value": value}])
        run_transaction(self.engine, work)

    def scope(self, seeds: Sequence[str], allow_domains: Iterable[str], max_depth: int,
              max_pages_per_host: int = 0) -> Scope:
        """The crawl's scope: the seeds' hosts plus ``allow_domains``, merged with what an
        earlier run stored (so a resumed crawl keeps its scope), with the depth and per-host caps."""
        stored = json.loads(self.get_meta("allowed_domains", "[]"))
        domains = list(dict.fromkeys([*stored, *(url_host(u) for u in seeds), *(d.lower().strip(".") for d in allow_domains)]))
        self.keep_scope(domains)
        return Scope(domains, max_depth, max_pages_per_host)

    def keep_scope(self, domains: Sequence[str]) -> None:
        """Store the crawl's allowed domains (``crawl_meta.allowed_domains``) for a resume."""
        self.set_meta("allowed_domains", json.dumps(list(domains)))

    # ------------------------------------------------------------------ frontier

    def add_seeds(self, urls: Sequence[str]) -> int:
        """Queue seed URLs at depth 0 unless already visited; return how many were new.
        Raises :class:`~gridcrawl.urls.InvalidURL` for a URL that cannot be crawled."""
        rows = []
        for url in urls:
            canonical = canonical_url(url)
            focused = self.strategy.focus is not None
            rows.append({"url": canonical, "fingerprint": fingerprint(canonical), "depth": 0,
                         "priority": focus_priority(1.0) if focused else 5, "discovered_from": None,
                         "in_flight": False, "page_type": BASE, "relevance": 1.0 if focused else None,
                         "kind": None, "lastmod": None})

        def work(conn) -> int:
            before = conn.execute(sa.select(sa.func.count()).select_from(to_visit)).scalar()
            seen = self._visited(conn, [r["fingerprint"] for r in rows])
            insert_ignore(conn, to_visit, [r for r in rows if r["fingerprint"] not in seen])
            return conn.execute(sa.select(sa.func.count()).select_from(to_visit)).scalar() - before
        return run_transaction(self.engine, work)

    def release_all(self) -> int:
        """Mark every to-visit URL as not in flight (at start: what an earlier client had
        submitted is submitted again); return how many were."""
        self._frontier = FrontierMemo()
        with self.engine.begin() as conn:
            return conn.execute(to_visit.update().where(to_visit.c.in_flight == sa.true())
                                .values(in_flight=False)).rowcount

    def claim(self, limit: int, depth: int | None = None, sitemaps: int | None = None,
              share: "HostShare | None" = None) -> list[Pending]:
        """Take up to ``limit`` to-visit URLs in the strategy's order (:meth:`claim_statement`),
        only those at ``depth`` when given (a layer of the Spark crawl), of which at most
        ``sitemaps`` sitemaps to read when given, and mark them in flight. Returns them as
        :class:`Pending` grid threads.

        With ``share`` (:class:`HostShare`), no host gets more than its share of the window: the
        URLs of a host at its share stay to visit, in their place, for a later claim, and the
        claim takes the next ones of other hosts (:meth:`_claim_shared`).

        Safe with several clients on one database: no URL is ever handed to two of them (see
        :meth:`claim_statement`). May return fewer than ``limit`` while other clients are
        claiming.
        """
        if limit <= 0:
            return []

        held, full = (collections.Counter(share.held), set(share.full)) if share is not None else (None, None)
        learnt: list[FrontierMemo] = []

        def work(conn) -> list:
            if share is not None:  # as it was before this transaction (run again after a deadlock)
                share.held, share.full, share.left = collections.Counter(held), set(full), False
            # what earlier claims found absent (not with depth: a layer's read is not the frontier's)
            memo = self._frontier.catch_up(conn) if depth is None else None
            stmt = self.claim_statement(conn.dialect, limit, self.strategy.order)
            if depth is not None:
                stmt = stmt.where(to_visit.c.depth == depth)
            rows: list = []
            if sitemaps is not None:  # the sitemaps first (at most that many), then pages for the rest
                if sitemaps > 0 and not (memo and memo.no_sitemaps):
                    rows = conn.execute(stmt.where(to_visit.c.kind.is_not(None)).limit(min(sitemaps, limit))).all()
                    if memo and len(rows) < min(sitemaps, limit):
                        memo.no_sitemaps = True  # read to the end: no other sitemap waits
                stmt = stmt.where(to_visit.c.kind.is_(None))
            if share is None and len(rows) < limit:
                rows += conn.execute(stmt.limit(limit - len(rows))).all()
            _mark_in_flight(conn, rows)
            if share is not None and len(rows) < limit:
                share.held.update(url_host(r.url) for r in rows)
                rows += self._claim_shared(conn, stmt, limit - len(rows), share,
                                           memo if sitemaps is not None else None)
            learnt[:] = [memo] if memo else []
            return rows
        rows = run_transaction(self.engine, work)
        if learnt:
            self._frontier = learnt[0]
        return [Pending(r.id, r.url, r.fingerprint, r.depth, r.priority, r.page_type, r.relevance, r.kind, r.lastmod,
                        r.etag, r.last_modified, r.discovered_from) for r in rows]

    @staticmethod
    def _claim_shared(conn, pages: sa.Select, room: int, share: HostShare, memo: FrontierMemo | None = None) -> list:
        """Up to ``room`` rows of ``pages`` by ``share``'s rule (:meth:`claim`): up to
        :data:`CLAIM_ROUNDS` reads of ``CLAIM_SCAN`` × the room left, each leaving out the URLs of
        the hosts found at their share; when the frontier holds nothing else, its next URLs in
        order fill what room is left, whatever their hosts. Marked in flight round by round
        (a later read must not find them again). ``memo`` (``pages`` are then every waiting page):
        when it knows that only hosts at their share have pages waiting, the reads are skipped
        (each would walk the whole frontier to find nothing); a read that reaches the frontier's
        end teaches it which hosts those are."""
        taken: list = []
        if memo is not None and memo.only is not None and memo.only <= share.full:
            more = conn.execute(pages.limit(room)).all()  # the frontier holds nothing else: in order
            _mark_in_flight(conn, more)
            share.held.update(url_host(r.url) for r in more)
            return more
        for _ in range(CLAIM_ROUNDS):
            want = room - len(taken)
            read = pages
            if share.full:
                read = read.where(sa.not_(sa.or_(*(to_visit.c.url.startswith(prefix, autoescape=True)
                                                   for prefix in sorted(share.full)))))
            found = conn.execute(read.limit(CLAIM_SCAN * want)).all()
            more = share.pick(found, want)
            _mark_in_flight(conn, more)
            taken += more
            if len(taken) == room:
                break
            if len(found) < CLAIM_SCAN * want:  # the frontier holds nothing else: the rest in order
                if memo is not None:  # every page still waiting is of a host at its share now
                    memo.only = frozenset(share.full)
                more = conn.execute(pages.limit(room - len(taken))).all()
                _mark_in_flight(conn, more)
                share.held.update(url_host(r.url) for r in more)
                return taken + more
        share.left = len(taken) < room
        return taken

    @staticmethod
    def claim_statement(dialect: sa.engine.Dialect, limit: int, order: str = "bfs") -> sa.Select:
        """The ``SELECT`` that picks and locks up to ``limit`` unclaimed to-visit rows on
        ``dialect``, so that concurrent claimers get disjoint rows without waiting for each other:

        * PostgreSQL, MySQL 8, MariaDB 10.6+: ``FOR UPDATE SKIP LOCKED`` (older MariaDB/MySQL:
          ``FOR UPDATE``, which waits instead of skipping);
        * SQL Server: ``WITH (UPDLOCK, READPAST, ROWLOCK)`` — SQLAlchemy's mssql dialect drops
          ``with_for_update()`` without a word, so the hint is written out;
        * SQLite: nothing — the transaction began with ``BEGIN IMMEDIATE`` and holds the
          database's write lock.

        Sources: PostgreSQL manual, SELECT "The Locking Clause"; SQL Server docs, "Table Hints";
        MariaDB docs, "SELECT ... SKIP LOCKED".

        ``order`` (:data:`ORDERS`): ``bfs`` takes the lowest depth first, then the oldest row;
        ``dfs`` the deepest, then the newest (a stack); ``priority`` the highest priority, then
        the oldest.
        """
        c = to_visit.c
        order_by = {"bfs": (c.depth, c.id), "dfs": (c.depth.desc(), c.id.desc()),
                    "priority": (c.priority.desc(), c.id)}[order]
        stmt = (sa.select(c.id, c.url, c.fingerprint, c.depth, c.priority, c.page_type, c.relevance, c.kind, c.lastmod,
                          c.etag, c.last_modified, c.discovered_from)
                .where(c.in_flight == sa.false())
                .order_by(*order_by).limit(limit)
                .with_hint(to_visit, "WITH (UPDLOCK, READPAST, ROWLOCK)", "mssql"))
        if dialect.name in ("postgresql", "mysql", "mariadb"):
            stmt = stmt.with_for_update(skip_locked=_skip_locked(dialect))
        return stmt

    def release(self, thread_ids: Sequence[int]) -> None:
        """Mark the to-visit rows ``thread_ids`` as not in flight (claimed, then not done)."""
        self._frontier = FrontierMemo()
        with self.engine.begin() as conn:
            for ids in chunks(sorted(thread_ids), 500):
                conn.execute(to_visit.update().where(to_visit.c.id.in_(ids)).values(in_flight=False))

    def pending(self, thread_id: int) -> Pending | None:
        """The to-visit URL whose grid thread is ``thread_id``, marked in flight, or None if it
        is no longer to visit."""
        with self.engine.begin() as conn:
            c = to_visit.c
            row = conn.execute(sa.select(c.id, c.url, c.fingerprint, c.depth, c.priority, c.page_type, c.relevance,
                                         c.kind, c.lastmod, c.etag, c.last_modified, c.discovered_from)
                               .where(c.id == thread_id)).first()
            if row is None:
                return None
            conn.execute(to_visit.update().where(to_visit.c.id == thread_id).values(in_flight=True))
        return Pending(row.id, row.url, row.fingerprint, row.depth, row.priority, row.page_type, row.relevance,
                       row.kind, row.lastmod, row.etag, row.last_modified, row.discovered_from)

    # ------------------------------------------------------------------ results

    @staticmethod
    def _visited(conn, fingerprints: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for part in chunks(list(fingerprints), 500):
            found.update(conn.execute(sa.select(visited.c.fingerprint).where(visited.c.fingerprint.in_(part))).scalars())
        return found

    def _note_crawl_delay(self, url: str, crawl_delay: float) -> None:
        """Keep the Crawl-delay (seconds) a result of ``url`` reports for its host; the first
        time a host asks :data:`SLOW_CRAWL_DELAY` or more, say so in a WARNING."""
        host = url_host(url)
        if host in self.crawl_delays:
            self.crawl_delays[host] = crawl_delay
            return
        if len(self.crawl_delays) >= CRAWL_DELAY_HOSTS:
            return
        self.crawl_delays[host] = crawl_delay
        kept = min(crawl_delay, self.max_crawl_delay)
        if crawl_delay >= SLOW_CRAWL_DELAY and kept > 0:
            capped = f", of which max_crawl_delay keeps {kept:g} s" if kept < crawl_delay else ""
            log.warning("%s asks for a Crawl-delay of %g s in its robots.txt%s: its pages are fetched one at a "
                        "time, %g s apart (%s a day)", host, crawl_delay, capped, kept, f"{round(86400 / kept):,}")

    def rows(self, outcomes: Sequence[Outcome], scope: Scope, *, store_content: bool = True,
             store_duplicates: bool = False) -> "Rows":
        """The crawl-table rows of finished grid threads, writing nothing (the database is only
        read, for the stored originals that make a page a duplicate; see :meth:`apply`): each
        fetched page's ``document`` row (with its recrawl schedule), every thread's
        ``visited_url`` row, the ``to_visit_url`` rows of its in-scope links (one per
        fingerprint, the best relevance kept; links known to this store's cache, traps, and
        links the strategy does not follow are left out), its ``kept_link``, ``triple``,
        ``item`` and ``item_issue`` rows. :meth:`apply` writes them in one transaction; the
        Spark crawl (:mod:`gridcrawl.spark`) writes them in its stages. Returns a :class:`Rows`."""
        now = utcnow()
        docs, visits, links, kept, traps, triples = [], [], {}, [], {}, {}
        items, issues = [], []
        item_types = {spec.type for spec in self.strategy.items}
        errors = 0
        first = self.schedule.first_interval()
        detector = self._trap_detector(scope)
        # pages stored as originals in this batch: canonical URL fingerprint -> url, digest -> url
        batch_urls: dict[str, str] = {}
        batch_digests: dict[str, str] = {}
        with self.engine.connect() as conn:
            stored_urls, stored_digests = self._originals(conn, outcomes)
            read_before = self._stored_sitemaps(conn, [o.pending.fingerprint for o in outcomes
                                                       if o.pending.kind is not None])
        sitemaps = []
        for o in outcomes:
            page, pend = o.page, o.pending
            if page is not None and page.crawl_delay:  # (a poisoned or lost thread has no page)
                self._note_crawl_delay(pend.url, page.crawl_delay)
            status = page.status if page else None
            kind = ErrorKind.POISON.value if o.failed else (page.error_kind if page else ErrorKind.LOST.value)
            error = ((page.error or "") if page else "")[:1000] or None
            duplicate_of = None
            if not kind and pend.kind is None:
                if page.noindex:
                    kind, error = "noindex", "robots meta tag or X-Robots-Tag: noindex"
                else:
                    duplicate_of, error = self._duplicate_of(page, pend, stored_urls, stored_digests,
                                                             batch_urls, batch_digests)
                    if duplicate_of is not None:
                        kind = "duplicate"
                    else:
                        batch_urls[pend.fingerprint] = pend.url
                        if page.digest:
                            batch_digests.setdefault(page.digest, pend.url)
            if kind and kind not in NOT_FAILED:
                errors += 1
            visits.append({"url": pend.url, "fingerprint": pend.fingerprint, "depth": pend.depth, "status": status,
                           "error_kind": kind, "error": error, "attempts": o.attempts, "visited_at": now,
                           "page_type": pend.page_type})
            if pend.kind is not None and page is not None:
                row, unchanged = self._sitemap_row(page, pend, kind, read_before.get(pend.fingerprint), now)
                sitemaps.append(row)
                if not kind and not unchanged:  # a sitemap: its pages and child sitemaps, no document
                    self._sitemap_rows(page, pend, scope, links)
                continue
            if page is None or (kind and kind not in ("noindex", "duplicate")):
                continue
            if page.sitemaps and pend.depth == 0:  # a seed: its host's sitemaps
                self._sitemap_files(page.sitemaps, pend, scope, "sitemap", links)
            newly = detector.observe(pend.url, page.simhash, pend.discovered_from) if detector is not None else None
            if newly is not None:
                log.warning("URL shape %s repeats near-identical pages: its links are no longer followed", newly)
            if kind != "noindex":
                keep_body = duplicate_of is None or store_duplicates
                content = page.content if store_content and keep_body else None
                docs.append({"url": pend.url, "fingerprint": pend.fingerprint, "final_url": page.final_url or pend.url,
                             "status": status, "content_type": (page.content_type or "")[:255] or None,
                             "size": page.size, "title": page.title, "encoding": page.encoding,
                             "content": content if isinstance(content, str) else None,
                             "body": content if isinstance(content, bytes) else None, "depth": pend.depth,
                             "fetched_at": now, "executor": o.executor_id, "fetch_seconds": page.fetch_seconds,
                             "parse_seconds": page.parse_seconds, "extract_seconds": page.extract_seconds,
                             "simhash": f"{page.simhash:016x}" if isinstance(page.simhash, int) else None,
                             "canonical_url": page.canonical, "duplicate_of": duplicate_of,
                             "lastmod": pend.lastmod or self._late_lastmods.get(pend.fingerprint)})
            relevance = self._page_score(page, pend)
            if kind != "noindex":  # a noindex page has no document row, nor triples
                headers = page.headers if isinstance(page.headers, dict) else {}
                docs[-1].update(page_type=pend.page_type, relevance=relevance,
                                headers=json.dumps(page.headers) if page.headers else None,
                                structured_data=_json_or_none(page.structured),
                                content_digest=page.digest if isinstance(page.digest, str) else None,
                                etag=_validator(headers, "etag", document.c.etag),
                                last_modified=_validator(headers, "last-modified", document.c.last_modified),
                                visited_at=now, visit_status=status, fetch_interval=first,
                                next_fetch_at=self.schedule.due_at(now, first),
                                render_seconds=page.render_seconds,
                                refused_requests=json.dumps(page.refused_requests) if page.refused_requests else None)
                triples.update(self._triple_rows(page, pend))
            kept.extend(self._kept_rows(page, pend, now))
            # a page set aside (a duplicate of a stored one, noindex) stores no items, as a
            # re-extraction, which reads the stored bodies, finds none there: the original's count
            if item_types and kind != "noindex" and (duplicate_of is None or store_duplicates):
                new_items, new_issues = item_rows(page.items, page.item_misses, page.item_errors, pend.fingerprint,
                                                  pend.url, item_types, now)
                items += new_items
                issues += new_issues
            depth = pend.depth + 1
            known = self._known if self.strategy.focus is None else {}
            if page.links_cut and len(self.links_cut) < 1000:
                self.links_cut[pend.url] = page.links_cut
            for link in page.links:
                url = link[0]
                if self._types and len(link) > 2 and link[2] and self._types.get(hash(url), link[2]) != link[2]:
                    self._note_retyped(url, self._types[hash(url)], link[2])
                if known.get(hash(url), depth + 1) <= depth or len(url) > models.URL_LENGTH:
                    continue  # queued or visited already, no deeper than this (found shallower: its depth drops)
                if not scope.allows(url, depth):
                    if (0 <= scope.max_depth < depth and len(self.beyond_depth) < KNOWN_CACHE
                            and scope.allows(url, scope.max_depth)):
                        self.beyond_depth.add(hash(url))
                    continue
                shape = detector.trapped(url) if detector is not None else None
                if shape is not None:
                    fp = fingerprint(url)
                    traps.setdefault(fp, {"url": url, "fingerprint": fp, "depth": depth, "status": None,
                                          "error_kind": "trap", "attempts": 0, "visited_at": now,
                                          "error": f"URL shape {shape} repeats near-identical pages"})
                    continue
                row = self._link_row(link, pend, depth, relevance)
                if row is None:
                    continue
                old = links.get(row["fingerprint"])
                if old is not None and old["page_type"] != row["page_type"] and hash(url) not in self._types:
                    self._note_retyped(url, old["page_type"], row["page_type"])
                if old is None or (row["relevance"] or 0.0) > (old["relevance"] or 0.0):
                    links[row["fingerprint"]] = row
                    if old is not None:
                        row["depth"] = min(row["depth"], old["depth"])
                elif row["depth"] < old["depth"]:  # linked again in this batch, by a shorter path
                    old["depth"] = row["depth"]
        for fp in traps:
            links.pop(fp, None)

        kept = list({(row["fingerprint"], row["rule"]): row for row in kept}.values())

        docs, visits, kept = _fit(document, docs), _fit(visited, visits), _fit(kept_link, kept)
        trap_rows = _fit(visited, list(traps.values()))
        triples = _fit(triple, list(triples.values()))
        items, issues = _fit(models.item, items), _fit(models.item_issue, issues)
        _fit(to_visit, list(links.values()))  # in place, one pass over every link row
        return Rows(docs, visits, links, kept, sorted(o.pending.thread_id for o in outcomes), errors, now,
                    triples, items, issues, trap_rows, _fit(sitemap_table, sitemaps))

    def apply(self, outcomes: Sequence[Outcome], scope: Scope, *, store_content: bool = True,
              store_duplicates: bool = False, recrawl: tuple[int, Mapping] | None = None) -> dict:
        """Apply finished grid threads in ONE transaction (the paper's application steps 7–10):
        store each fetched page in ``document``, add its URL to ``visited_url``, delete it from
        ``to_visit_url``, and queue its in-scope links that are neither visited nor queued (nor
        traps, nor over the scope's ``max_pages_per_host``, see :class:`Scope`).
        With keep/follow rules only links carrying a to_type (``[url, text, to_type]``) are
        queued, with that page type, and kept links go to ``kept_link``; in a focused crawl each
        document gets its page score and each link its relevance, and links below
        ``min_relevance`` are not queued (:attr:`strategy`).

        What pages say about themselves (issue 14):

        * ``noindex`` (robots meta tag or ``X-Robots-Tag``): no ``document`` row;
          ``visited_url.error_kind = 'noindex'``; its links are followed (unless nofollow).
        * a duplicate — its canonical link names another URL whose page is stored (in an earlier
          batch or this one), or its body's SHA-256 ``digest`` equals a stored page's: its
          ``document`` row says which (``duplicate_of``) and holds no content unless
          ``store_duplicates``; ``visited_url.error_kind = 'duplicate'``.
        * template traps: each page's SimHash and the page its URL was found on
          (``to_visit_url.discovered_from``, :attr:`Pending.discovered_from`) feed the scope's
          :class:`TrapDetector`; a link whose URL shape is a trap is not queued but recorded in
          ``visited_url`` with ``error_kind = 'trap'`` and the shape in ``error``.
        * sitemaps: a seed's result names its host's sitemaps, queued as ``kind='sitemap'``
          grid threads at the seed's depth; a sitemap's pages are queued one hop deeper with
          their ``lastmod`` (carried to ``document.lastmod``); an index's sitemaps are queued
          as ``kind='sitemap-child'`` (whose own index entries are ignored: sitemaps.org allows
          no nesting). Sitemap files do not count against ``max_pages_per_host``: a site has at
          most :data:`SITEMAP_FILES_PER_SITE` of them queued or read, :data:`HOST_SITEMAPS` of its
          own among them, and none more once it has ``max_pages_per_host`` URLs (those waiting
          are taken out of the queue); the others are counted in :attr:`sitemaps_skipped`.
          A sitemap gets a ``visited_url`` row and a ``sitemap`` row (its digest, validators
          and schedule), no ``document`` row. A sitemap read again that answers
          304 or the same digest is not read again: its pages are known.
        * a sitemap's ``<lastmod>`` for a stored document updates ``document.lastmod`` and, by
          :meth:`AdaptiveSchedule.lastmod_hint`, its schedule: modified since the last visit,
          it is due (and queued at once during a recrawl run, counted in ``due``); not
          modified, its interval lengthens as after a 304.

        An outcome for a URL that has a document already is a **recrawl** visit
        (:meth:`queue_due`), applied by :meth:`_revisit`: a 304 moves only the visit time, an
        unchanged body (same digest) the visit time and validators, a changed body replaces the
        document and keeps the old version in ``document_version``; a 404/410 marks it gone.
        Every visit reschedules the document (:attr:`schedule`).

        Items the executors extracted go to ``item`` and ``item_issue`` (:mod:`gridcrawl.client.items`);
        a changed page's items replace those of its stored copy.

        Returns counts ``{"pages", "documents", "errors", "links", "kept", "traps", "items"}``
        (``errors``: failures, neither the crawl's decisions, :data:`DECISIONS`, nor URLs
        disallowed by robots.txt), ``disallowed`` (pages, not sitemaps, that robots.txt
        disallowed: :data:`DISALLOWED`), ``sitemaps`` (of ``pages``, the sitemap threads: read
        for their links, no document) and ``sitemap_errors`` (of ``errors``, theirs) plus, for recrawl
        visits, one count per :data:`gridcrawl.schedule.VERDICTS` (but ``disallowed``, which
        counts them among every page disallowed), ``new`` (documents stored
        for the first time; equal to ``documents``) and ``due`` (stored documents a sitemap's
        lastmod made due and this batch queued). Idempotent: applying the same outcome twice
        changes nothing the second time.

        ``recrawl``: ``(recrawl_id, counts)``, the recrawl run these results belong to and its
        counts before them (keys of the ``recrawl`` table): its row gets the counts with this
        batch's added (:func:`add_recrawl_counts`) in the same transaction, returned as
        ``"recrawl"``. (Written afterwards, a client killed between the two lost the counts of
        what it had stored.)
        """
        rows = self.rows(outcomes, scope, store_content=store_content, store_duplicates=store_duplicates)
        links = rows.links
        item_types = {spec.type for spec in self.strategy.items}
        found: dict = {}
        queued = [_Queued()]
        late: dict = {}

        def work(conn) -> None:
            found.clear()
            found.update(dict.fromkeys(VERDICTS, 0))
            late.clear()
            stored = self._revisit(conn, outcomes, rows.docs, rows.visits, rows.now, found)
            self._write_sitemaps(conn, rows.sitemaps)
            new_docs = [d for d in rows.docs if d["fingerprint"] not in stored]
            insert_ignore(conn, document, new_docs)
            found["due"] = self._lastmod_hints(conn, links.values(), rows.now, late)
            insert_ignore(conn, visited, [v for v in rows.visits if v["fingerprint"] not in stored])
            found["new"] = len(new_docs)
            self._delete_to_visit(conn, rows.thread_ids)
            self._record_traps(conn, rows.traps)
            queued[0] = self._queue(conn, list(links.values()), scope)
            insert_ignore(conn, kept_link, rows.kept)
            if item_types and stored:  # a page visited again with a body: its new items replace the old
                self._drop_items(conn, [o.pending.fingerprint for o in outcomes if o.pending.fingerprint in stored
                                        and self._extracted(o)])
            if stored:  # a page visited again with a body: its new triples replace the old
                self._drop_triples(conn, [o.pending.fingerprint for o in outcomes if o.pending.fingerprint in stored
                                          and self._reparsed(o)])
            insert_ignore(conn, triple, rows.triples)
            insert_ignore(conn, models.item, rows.items)
            insert_ignore(conn, models.item_issue, rows.issues)
            if recrawl is not None:
                totals[0] = add_recrawl_counts(recrawl[1], found)
                self._write_recrawl(conn, recrawl[0], totals[0])
        totals: list = [None]
        run_transaction(self.engine, work)
        for o in outcomes:
            self._late_lastmods.pop(o.pending.fingerprint, None)
        self._late_lastmods.update(late)
        if len(self._known) > KNOWN_CACHE:
            self._known.clear()
            self._types.clear()
        known = self._known
        for url, depth in [*((row["url"], row["depth"]) for row in links.values()),
                           *((o.pending.url, o.pending.depth) for o in outcomes),
                           *((row["url"], row["depth"]) for row in rows.traps)]:
            if known.get(hash(url), depth + 1) > depth:
                known[hash(url)] = depth
        if self.strategy.rules:
            types = self._types
            for url, page_type in [*((row["url"], row["page_type"]) for row in links.values()),
                                   *((o.pending.url, o.pending.page_type) for o in outcomes)]:
                if page_type:
                    types.setdefault(hash(url), sys.intern(page_type))
        self._count_sites(queued[0])
        maps = [o.pending.fingerprint for o in outcomes if o.pending.kind is not None]
        failed = {v["fingerprint"] for v in rows.visits if v["error_kind"] and v["error_kind"] not in NOT_FAILED}
        read = set(maps)  # a sitemap file is no page: the pages disallowed leave it out
        disallowed = sum(v["error_kind"] in DISALLOWED and v["fingerprint"] not in read for v in rows.visits)
        return {**found,  # first: its verdict "disallowed" is among this batch's disallowed pages
                "pages": len(outcomes), "sitemaps": len(maps), "sitemap_errors": sum(fp in failed for fp in maps),
                "documents": found["new"], "errors": rows.errors, "disallowed": disallowed, "links": len(links),
                "kept": len(rows.kept), "traps": len(rows.traps), "items": len(rows.items),
                "triples": len(rows.triples), **({"recrawl": totals[0]} if recrawl is not None else {})}

    def write_documents(self, rows: "Rows") -> None:
        """Store ``rows``' documents, kept links, triples, items and item issues
        (insert-if-absent on their keys: writing them twice stores them once; a document already
        stored is left as it is — the Spark crawl does not recrawl). The Spark crawl's download
        stage."""
        def work(conn) -> None:
            insert_ignore(conn, document, rows.docs)
            insert_ignore(conn, kept_link, rows.kept)
            insert_ignore(conn, triple, rows.triples)
            insert_ignore(conn, models.item, rows.items)
            insert_ignore(conn, models.item_issue, rows.issues)
        run_transaction(self.engine, work)

    def write_visits(self, rows: "Rows") -> None:
        """Add ``rows``' URLs to ``visited_url`` and delete their ``to_visit_url`` rows
        (idempotent). The Spark crawl's commit stage, once the pages' links are queued."""
        def work(conn) -> None:
            insert_ignore(conn, visited, rows.visits)
            self._delete_to_visit(conn, rows.thread_ids)
            self._record_traps(conn, rows.traps)
        run_transaction(self.engine, work)

    def queue_links(self, links: Sequence[dict], scope: Scope) -> int:
        """Queue ``to_visit_url`` rows (from :meth:`rows`) whose fingerprint is not visited,
        within the scope's per-host cap, in one transaction (insert-if-absent: a row queued
        already, or by another writer meanwhile, is stored once); return how many rows the cap
        left out (also counted in :attr:`capped`)."""
        queued = [_Queued()]

        def work(conn) -> None:
            queued[0] = self._queue(conn, list(links), scope)
        run_transaction(self.engine, work)
        self._count_sites(queued[0])
        return len(queued[0].capped)

    @staticmethod
    def _record_traps(conn, trap_rows: list[dict]) -> None:
        """Record links into template traps in ``visited_url`` (``error_kind = 'trap'``) and drop
        those queued before their shape became a trap (and not yet submitted)."""
        if not trap_rows:
            return
        insert_ignore(conn, visited, trap_rows)
        waiting = _waiting(conn, [row["fingerprint"] for row in trap_rows])
        for ids in chunks(sorted(row.id for row in waiting.values()), 500):
            conn.execute(to_visit.delete().where(to_visit.c.id.in_(ids)))

    @staticmethod
    def _delete_to_visit(conn, thread_ids: Sequence[int]) -> None:
        for ids in chunks(sorted(thread_ids), 500):
            conn.execute(to_visit.delete().where(to_visit.c.id.in_(ids)))

    def _queue(self, conn, links: list[dict], scope: Scope) -> "_Queued":
        """Insert into ``to_visit_url`` the link rows not yet visited (pages within the per-host
        cap, :meth:`_cap_per_site`; sitemap files within their own bounds, :meth:`_bound_sitemaps`)
        and take out the sitemap files of the sites the cap has filled (:meth:`_drop_sitemaps`);
        return what was queued and left out, to count once committed."""
        result = _Queued()
        if not links:
            return result
        pages = [row for row in links if row.get("kind") is None]
        maps = [row for row in links if row.get("kind") is not None]
        plain = self.recrawl_since is None
        seen = self._visited(conn, [row["fingerprint"] for row in (pages + maps if plain else pages)])
        rows = [row for row in pages if row["fingerprint"] not in seen]
        again: list[dict] = []  # a recrawl's sitemaps read before, read again: no new files
        if plain:
            maps = [row for row in maps if row["fingerprint"] not in seen]
        elif maps:  # a recrawl reads again the sitemaps not read since it started, conditionally
            read = self._stored_sitemaps(conn, [row["fingerprint"] for row in maps])
            new = []
            for row in maps:
                old = read.get(row["fingerprint"])
                if old is None:
                    new.append({**row, "etag": None, "last_modified": None})
                elif old.visited_at < self.recrawl_since:
                    again.append({**row, "etag": old.etag, "last_modified": old.last_modified})
            maps = new
        unvisited = rows
        if scope.max_pages_per_host > 0:
            rows, result.added, result.capped = self._cap_per_site(conn, rows, scope)
        maps = self._bound_sitemaps(conn, maps, scope, result)
        insert_ignore(conn, to_visit, rows)
        insert_ignore(conn, to_visit, maps + again)
        self._drop_sitemaps(conn, scope, result)
        self._lower_depth(conn, unvisited)
        if self.strategy.focus is not None:  # a queued link found again: the cap left it out, its score may rise
            self._raise_relevance(conn, unvisited + maps + again)
        return result

    @staticmethod
    def _lower_depth(conn, rows: list[dict]) -> None:
        """A queued link found again by a shorter path (a large page whose result came late, a
        depth-first crawl) takes the shorter path's depth while it waits, so that ``depth`` is
        the hops from a seed and ``--max-depth`` does not leave out what is within it. One
        UPDATE per depth (a batch's links share few), by id, of the waiting rows read by
        fingerprint (:func:`_waiting`)."""
        shortest: dict[str, int] = {}
        for row in rows:
            shortest[row["fingerprint"]] = min(row["depth"], shortest.get(row["fingerprint"], row["depth"]))
        by_depth: dict[int, list[int]] = collections.defaultdict(list)
        for fp, waiting in _waiting(conn, list(shortest)).items():
            if waiting.depth > shortest[fp]:
                by_depth[shortest[fp]].append(waiting.id)
        c = to_visit.c
        for depth, ids in sorted(by_depth.items()):
            for part in chunks(sorted(ids), 500):
                conn.execute(to_visit.update().where(c.id.in_(part), c.depth > depth).values(depth=depth))

    def _count_sites(self, queued: "_Queued") -> None:
        """Count what a committed transaction's :meth:`_queue` queued and left out, by site
        (:meth:`Scope.site`; a retried transaction recomputed it all)."""
        for site in queued.added:
            self._site_counts[site] += 1
        self.capped.update(queued.capped)
        for site, kind in queued.maps:
            self._sitemap_counts[site] += 1
            if kind == "sitemap":
                self._sitemap_counts[(site, "sitemap")] += 1
        self.sitemaps_skipped.update(queued.skipped)
        self._full_sites |= queued.full

    def _extracted(self, o: Outcome) -> bool:
        """True if the executor ran the crawl's item specs on ``o``'s page: one applies to it and
        an HTML body was parsed (``encoding`` set; not a failure, not a 304). Its items are then
        the page's items."""
        page = o.page
        return (page is not None and not o.failed and page.error_kind is None and page.encoding is not None
                and bool(specs_for(self.strategy.items, o.pending.url, o.pending.page_type)))

    @staticmethod
    def _drop_items(conn, fingerprints: list[str]) -> None:
        """Delete the items and item issues of the pages ``fingerprints``."""
        for part in chunks(sorted(fingerprints), 500):
            conn.execute(models.item.delete().where(models.item.c.fingerprint.in_(part)))
            conn.execute(models.item_issue.delete().where(models.item_issue.c.fingerprint.in_(part)))

    # ------------------------------------------------------------------ recrawl

    def _revisit(self, conn, outcomes: Sequence[Outcome], docs: list[dict], visits: list[dict], now,
                 found: dict) -> set[str]:
        """Apply the outcomes whose URL already has a document (recrawl visits) inside
        :meth:`apply`'s transaction; add each visit's verdict to ``found``; return the
        fingerprints of every stored document among the outcomes (the caller inserts only the
        others). A visit is applied only while its ``to_visit_url`` row exists, so applying it
        twice changes nothing the second time."""
        from gridcrawl.executor.fetch import media_type
        fps = [o.pending.fingerprint for o in outcomes]
        c = document.c
        columns = [c.fingerprint, c.url, c.final_url, c.status, c.content_type, c.size, c.content_digest, c.etag,
                   c.last_modified, c.fetched_at, c.encoding, c.headers, c.gone_at, c.fetch_interval, c.simhash]
        if self.keep_versions:
            columns += [c.content, c.body]
        stored: dict[str, sa.Row] = {}
        for part in chunks(fps, 500):
            stored.update((r.fingerprint, r) for r in conn.execute(sa.select(*columns).where(c.fingerprint.in_(part))))
        if not stored:
            return set()
        live: set[int] = set()
        for ids in chunks(sorted(o.pending.thread_id for o in outcomes if o.pending.fingerprint in stored), 500):
            live.update(conn.execute(sa.select(to_visit.c.id).where(to_visit.c.id.in_(ids))).scalars())
        new_rows = {d["fingerprint"]: d for d in docs}
        visit_rows = {v["fingerprint"]: v for v in visits}
        updates, versions, visited_updates, visits_absent = [], [], [], []
        for o in outcomes:
            old = stored.get(o.pending.fingerprint)
            if old is None or o.pending.thread_id not in live:
                continue
            page = o.page
            status = page.status if page is not None else None
            kind = "poison" if o.failed else (page.error_kind if page is not None else "lost")
            was_gone = old.gone_at is not None
            found_now = verdict(status, kind, page.digest if page is not None else None, old.content_digest,
                                was_gone, page is not None and self.schedule.near_unchanged(page.simhash, old.simhash),
                                page is not None and media_type(page.content_type) != media_type(old.content_type))
            if found_now in ("changed", "revived") and visit_rows[o.pending.fingerprint]["error_kind"] == "noindex":
                # a new body this crawl does not store: the stored copy stays and so does its
                # interval, as after an error; counted changed, the interval shrank to the
                # minimum and no version was kept, visit after visit
                found_now = "error"
            found[found_now] += 1
            interval = self.schedule.next_interval(old.fetch_interval, found_now)
            values = {"b_fp": old.fingerprint, "visited_at": now, "visit_status": status,
                      "fetch_interval": interval, "next_fetch_at": self.schedule.due_at(now, interval)}
            headers = page.headers if page is not None and isinstance(page.headers, dict) else {}
            if found_now == "gone":
                values["gone_at"] = old.gone_at or now
            elif found_now in ("error", "disallowed"):
                pass  # the stored copy stays as it was (robots.txt now disallowing a page deletes nothing)
            elif status == 304 or found_now == "unchanged":
                # the stored copy is current; a 304 may carry updated validators (RFC 9110 §15.4.5)
                for key, name in (("etag", "etag"), ("last_modified", "last-modified")):
                    if _header(headers, name) is not None:
                        values[key] = _validator(headers, name, document.c[key])
                if old.simhash is None and page is not None and isinstance(page.simhash, int):
                    values["simhash"] = f"{page.simhash:016x}"  # stored while no one asked for it
            else:  # changed, or revived with a body: the new copy replaces the stored one
                row = new_rows.get(o.pending.fingerprint)
                if row is not None:
                    if old.content_digest is None or row["content_digest"] != old.content_digest:
                        versions.append(self._version_row(old, now))
                        values["modified_at"] = now
                    values.update({k: v for k, v in row.items()
                                   if k not in ("url", "fingerprint", "depth", "page_type", "relevance",
                                                "fetch_interval", "next_fetch_at", "visited_at")
                                   and not (k == "lastmod" and v is None)})  # a sitemap's lastmod stays
            if found_now == "revived":
                values["gone_at"] = None
            updates.append(values)
            visits_absent.append(visit_rows[o.pending.fingerprint])
            visit = dict(visit_rows[o.pending.fingerprint])
            if found_now == "gone":
                visit["error_kind"] = ErrorKind.GONE.value
            visited_updates.append({"b_fp": visit.pop("fingerprint"), **{k: visit[k] for k in
                                    ("status", "error_kind", "error", "attempts", "visited_at")}})
        _execute_grouped(conn, document, document.c.fingerprint, updates)
        # a document without a visit (a Spark layer cut off before its commit stage) gets one
        insert_ignore(conn, visited, visits_absent)
        _execute_grouped(conn, visited, visited.c.fingerprint, visited_updates)
        insert_ignore(conn, document_version, _fit(document_version, versions))
        return set(stored)

    def _version_row(self, old: sa.Row, now) -> dict:
        """The ``document_version`` row keeping stored document ``old`` (body only with
        :attr:`keep_versions`), replaced at ``now``."""
        row = {"fingerprint": old.fingerprint, "url": old.url, "final_url": old.final_url, "status": old.status,
               "content_type": old.content_type, "size": old.size or 0, "content_digest": old.content_digest,
               "etag": old.etag, "last_modified": old.last_modified, "fetched_at": old.fetched_at,
               "replaced_at": now, "encoding": old.encoding, "headers": old.headers, "content": None,
               "body": None}
        if self.keep_versions:
            row.update(content=old.content, body=old.body)
        return row

    def waiting_page_types(self) -> dict[str | None, int]:
        """How many pages wait in the frontier (not in flight, no sitemap) by page type
        (``None``: without one), e.g. ``{"list": 9}``."""
        c = to_visit.c
        with self.engine.connect() as conn:
            return dict(conn.execute(sa.select(c.page_type, sa.func.count()).where(
                c.in_flight == sa.false(), c.kind.is_(None)).group_by(c.page_type)).all())

    def forget_validators(self) -> int:
        """Clear every stored document's ETag and Last-Modified, so that its next recrawl visit
        is a full fetch (no ``If-None-Match`` / ``If-Modified-Since``): the crawl's rules changed,
        and a ``304 Not Modified`` would bring no body to apply them to. The visit that follows
        stores the validators it gets. The pages a recrawl stopped before its end left queued lose
        theirs too. Returns how many documents had one."""
        c, q = document.c, to_visit.c
        with self.engine.begin() as conn:
            conn.execute(to_visit.update().where(q.kind.is_(None),
                                                 sa.or_(q.etag.is_not(None), q.last_modified.is_not(None)))
                         .values(etag=None, last_modified=None))
            return conn.execute(document.update().where(sa.or_(c.etag.is_not(None), c.last_modified.is_not(None)))
                                .values(etag=None, last_modified=None)).rowcount

    @property
    def _revisit_priority(self) -> int:
        """The frontier priority of a stored document queued again: in a focused crawl the
        seeds' (``focus_priority(1.0)``, as :meth:`retry_failed` gives), so that its due pages
        are visited before the links the frontier holds (at 5 they came after every link scoring
        over 0.005, and a recrawl stopped at ``--max-pages`` visited none of them); else 5."""
        return focus_priority(1.0) if self.strategy.focus is not None else 5

    def queue_due(self, now=None, *, every: bool = False, batch: int = 5000) -> int:
        """Queue again, as grid threads to visit, every stored document whose next visit is due
        at ``now`` (naive UTC; default: the current time) — or, with ``every``, every stored
        document (``--recrawl-all``) — unless its URL is queued already. Each row carries the
        document's ETag and Last-Modified, sent as ``If-None-Match`` / ``If-Modified-Since``,
        and, in a focused crawl, the seeds' priority (:attr:`_revisit_priority`).
        Documents stored before schedules were kept (``next_fetch_at`` NULL) are due.

        Reads the documents in ``batch``-row slices (memory stays bounded), one transaction
        each: every document by ``doc_id``; the due ones through the ``next_fetch_at`` index, those
        never scheduled by ``doc_id``, then the others by ``(next_fetch_at, doc_id)``, the longest
        overdue first. (The due ones were read by ``doc_id`` too, "next_fetch_at <= now" a filter:
        the whole table was read, bodies and all, at every look of a ``--watch`` — 300,000 stored
        pages with 30 due, 1.2 s on SQLite — however few were due.) Returns how many URLs it queued.
        """
        now = now or utcnow()
        c = document.c
        passes = ([(sa.true(), (c.doc_id,))] if every else
                  [(c.next_fetch_at.is_(None), (c.doc_id,)), (c.next_fetch_at <= now, (c.next_fetch_at, c.doc_id))])
        queued = 0
        for due, keys in passes:
            after = None
            while True:
                def work(conn, after=after, due=due, keys=keys):
                    query = (sa.select(c.doc_id, c.url, c.fingerprint, c.depth, c.page_type, c.etag, c.last_modified,
                                       c.next_fetch_at)
                             .where(due, *([_after(keys, after)] if after is not None else []))
                             .order_by(*keys).limit(batch))
                    rows = conn.execute(query).all()
                    count = _queue_absent(conn, [_revisit_row(r, priority=self._revisit_priority) for r in rows])
                    return (tuple(getattr(rows[-1], k.name) for k in keys) if rows else None), count, len(rows)
                after, count, read = run_transaction(self.engine, work)
                queued += count
                if read < batch:
                    break
        return queued

    def queue_sitemaps(self, now=None, *, every: bool = False) -> int:
        """Queue again, as grid threads, the sitemaps this crawl has read (``sitemap`` rows) —
        every one with ``every`` (the start of a recrawl run), else those whose own schedule is
        due at ``now`` (``--watch``) — unless queued already, each with its ETag and
        Last-Modified for a conditional request. Returns how many it queued."""
        now = now or utcnow()
        c = sitemap_table.c
        due = sa.true() if every else sa.or_(c.next_fetch_at.is_(None), c.next_fetch_at <= now)

        def work(conn) -> int:
            rows = conn.execute(sa.select(c.url, c.fingerprint, c.kind, c.depth, c.etag, c.last_modified)
                                .where(due).order_by(c.id)).all()
            return _queue_absent(conn, [_revisit_row(r, kind=r.kind) for r in rows])
        return run_transaction(self.engine, work)

    def next_due(self, sitemaps: bool = True):
        """When the earliest stored document or read sitemap (not with ``sitemaps`` false: a
        recrawl reads every one at its start) is due again (naive UTC), or None if none has a
        schedule (``--recrawl --watch`` sleeps until then)."""
        with self.engine.connect() as conn:
            times = [conn.execute(sa.select(sa.func.min(table.c.next_fetch_at))).scalar()
                     for table in ((document, sitemap_table) if sitemaps else (document,))]
        times = [t for t in times if t is not None]
        return min(times) if times else None

    # ------------------------------------------------------------------ sitemaps and their lastmod

    @staticmethod
    def _stored_sitemaps(conn, fingerprints: Sequence[str]) -> dict[str, sa.Row]:
        """The ``sitemap`` rows of ``fingerprints``, by fingerprint."""
        c = sitemap_table.c
        found: dict[str, sa.Row] = {}
        for part in chunks(sorted(set(fingerprints)), 500):
            found.update((r.fingerprint, r) for r in conn.execute(
                sa.select(c.fingerprint, c.status, c.content_digest, c.etag, c.last_modified, c.visited_at,
                          c.fetch_interval)
                .where(c.fingerprint.in_(part))))
        return found

    def _sitemap_row(self, page: PageResult, pend: Pending, error_kind: str | None, old: sa.Row | None,
                     now) -> tuple[dict, bool]:
        """The ``sitemap`` row of a sitemap read at ``now`` (``old``: its row from an earlier
        read, or None) and whether it is unchanged since then (a 304, or the same status with the
        stored digest — a sitemap still missing (404) too: its pages need not be read again).
        A failed read keeps the stored digest and validators. Its own schedule (``--watch``) is
        the adaptive one, starting at ``min_interval``: a changed sitemap is read sooner, an
        unchanged one later."""
        status = page.status
        digest = page.digest if isinstance(page.digest, str) else None
        unchanged = old is not None and not error_kind and (
            status == 304 or (status == old.status and digest == old.content_digest))
        headers = page.headers if isinstance(page.headers, dict) else {}
        found = "error" if error_kind else ("not_modified" if unchanged else "changed")
        interval = self.schedule.next_interval(
            old.fetch_interval if old is not None and old.fetch_interval else self.schedule.min_interval, found)
        row = {"url": pend.url, "fingerprint": pend.fingerprint, "kind": pend.kind, "depth": pend.depth,
               "status": old.status if status == 304 and old is not None else status,
               "visited_at": now, "fetch_interval": interval,
               "next_fetch_at": self.schedule.due_at(now, interval),
               "content_digest": old.content_digest if old is not None else None,
               "etag": old.etag if old is not None else None,
               "last_modified": old.last_modified if old is not None else None}
        if not error_kind and status != 304:
            row.update(content_digest=digest, etag=_validator(headers, "etag", sitemap_table.c.etag),
                       last_modified=_validator(headers, "last-modified", sitemap_table.c.last_modified))
        elif status == 304:  # a 304 may carry updated validators (RFC 9110 §15.4.5)
            for key, name in (("etag", "etag"), ("last_modified", "last-modified")):
                if _header(headers, name) is not None:
                    row[key] = _validator(headers, name, sitemap_table.c[key])
        return row, unchanged

    @staticmethod
    def _write_sitemaps(conn, rows: list[dict]) -> None:
        """Insert or update the ``sitemap`` rows of the sitemaps read (one per fingerprint)."""
        if not rows:
            return
        rows = list({row["fingerprint"]: row for row in rows}.values())
        insert_ignore(conn, sitemap_table, rows)
        _execute_grouped(conn, sitemap_table, sitemap_table.c.fingerprint,
                         [{"b_fp": row["fingerprint"],
                           **{k: v for k, v in row.items() if k not in ("fingerprint", "url")}} for row in rows])

    def _lastmod_hints(self, conn, links: Iterable[dict], now, late: dict) -> int:
        """Act on the ``<lastmod>`` a sitemap read now gives for pages already queued or stored
        (inside :meth:`apply`'s transaction). A page queued before (by a link) gets it in its
        ``to_visit_url`` row; one in flight also in ``late`` (fingerprint -> lastmod, for
        :attr:`_late_lastmods`: its Pending was claimed without it). A stored page: update
        ``document.lastmod`` and, during a recrawl run
        (:attr:`recrawl_since`) for a document not visited in that run or not in the last
        ``min_interval`` (a visit just rescheduled it), apply
        :meth:`AdaptiveSchedule.lastmod_hint` to its schedule; a document made due now is
        queued at once with its validators (a one-shot ``--recrawl`` looked for due documents
        only at its start). A plain crawl only keeps the lastmod: a sitemap read seconds after
        the visit tells nothing about change. Returns how many it queued."""
        listed = {row["fingerprint"]: row["lastmod"] for row in links
                  if row.get("kind") is None and row.get("lastmod") is not None}
        if not listed:
            return 0
        c = document.c
        docs = []
        for part in chunks(sorted(listed), 500):
            docs += conn.execute(sa.select(c.fingerprint, c.url, c.depth, c.page_type, c.etag, c.last_modified,
                                           c.lastmod, c.visited_at, c.fetched_at, c.fetch_interval, c.next_fetch_at)
                                 .where(c.fingerprint.in_(part))).all()
        stored = {d.fingerprint for d in docs}
        self._lastmod_to_queued(conn, {fp: lm for fp, lm in listed.items() if fp not in stored}, late)
        updates, due = [], []
        for d in docs:
            lastmod = listed[d.fingerprint]
            values = {"lastmod": lastmod} if d.lastmod != lastmod else {}
            visited_at = d.visited_at or d.fetched_at
            hint = None
            recent = visited_at is not None and (now - visited_at).total_seconds() < self.schedule.min_interval
            if self.recrawl_since is not None and visited_at is not None and (
                    visited_at < self.recrawl_since or not recent):
                hint = self.schedule.lastmod_hint(lastmod, visited_at, d.fetch_interval, d.next_fetch_at, now)
            if hint is not None:
                found, interval, when = hint
                values.update(fetch_interval=interval, next_fetch_at=when)
                if found == "due" and when <= now:
                    due.append(_revisit_row(d, priority=self._revisit_priority))
            if values:
                updates.append({"b_fp": d.fingerprint, **values})
        _execute_grouped(conn, document, c.fingerprint, updates)
        return _queue_absent(conn, due)

    @staticmethod
    def _lastmod_to_queued(conn, listed: dict, late: dict) -> None:
        """Give the ``to_visit_url`` rows of ``listed`` (fingerprint -> a sitemap's lastmod, pages
        not stored) that lastmod; put those in flight in ``late`` too."""
        c = to_visit.c
        updates = []
        for part in chunks(sorted(listed), 500):
            for fp, lastmod, in_flight in conn.execute(sa.select(c.fingerprint, c.lastmod, c.in_flight)
                                                       .where(c.fingerprint.in_(part))):
                if lastmod != listed[fp]:
                    updates.append({"b_fp": fp, "lastmod": listed[fp]})
                if in_flight:
                    late[fp] = listed[fp]
        _execute_grouped(conn, to_visit, c.fingerprint, updates)

    def start_recrawl(self, mode: str, due: int) -> int:
        """Record the start of a recrawl run (``mode``: due, all or watch) that queued ``due``
        documents; return its ``recrawl_id``."""
        def work(conn) -> int:
            result = conn.execute(recrawl_table.insert().values(mode=mode, started_at=utcnow(), due=due))
            return result.inserted_primary_key[0]
        return run_transaction(self.engine, work)

    def update_recrawl(self, recrawl_id: int, counts: dict, *, finished: bool = False) -> None:
        """Store the counts of recrawl run ``recrawl_id`` (keys of the ``recrawl`` table: due,
        fetched, not_modified, unchanged, changed, gone, revived, errors, new); with
        ``finished``, its end time."""
        run_transaction(self.engine, lambda conn: self._write_recrawl(conn, recrawl_id, counts, finished=finished))

    @staticmethod
    def _write_recrawl(conn, recrawl_id: int, counts: Mapping, *, finished: bool = False) -> None:
        """Set the counts (and with ``finished`` the end time) of recrawl run ``recrawl_id`` on ``conn``."""
        names = {c.name for c in recrawl_table.columns} - {"recrawl_id", "mode", "started_at", "finished_at"}
        values = {k: int(v) for k, v in counts.items() if k in names}
        if finished:
            values["finished_at"] = utcnow()
        conn.execute(recrawl_table.update().where(recrawl_table.c.recrawl_id == recrawl_id).values(**values))

    def _reparsed(self, o: Outcome) -> bool:
        """True if a semantic crawl parsed ``o``'s page again (an HTML or RDF body was read: not
        a failure, not a 304): its triples are then the page's triples."""
        page = o.page
        return (self.strategy.structured_data and page is not None and not o.failed and page.error_kind is None
                and page.status != 304 and (page.encoding is not None or bool(page.triples)))

    @staticmethod
    def _drop_triples(conn, fingerprints: list[str]) -> None:
        """Delete the triples of the pages ``fingerprints``."""
        for part in chunks(sorted(fingerprints), 500):
            conn.execute(triple.delete().where(triple.c.fingerprint.in_(part)))

    # ------------------------------------------------------------------ standards pages publish

    def _trap_detector(self, scope: Scope) -> TrapDetector | None:
        """The template-trap detector of this crawl (made once, from ``scope``'s settings)."""
        if scope.trap_near_duplicates <= 0:
            return None
        if self.traps is None:
            self.traps = TrapDetector(scope.trap_near_duplicates, scope.trap_distance)
        return self.traps

    @staticmethod
    def _originals(conn, outcomes: Sequence[Outcome]) -> tuple[dict[str, str], dict[str, str]]:
        """Stored original pages (``duplicate_of`` empty) that this batch's pages may duplicate:
        ``({fingerprint: url}, {content_digest: url})`` for the canonical URLs and body digests
        the pages name."""
        fps, digests = set(), set()
        for o in outcomes:
            page = o.page
            if page is None or o.failed or page.error_kind:
                continue
            if page.canonical and page.canonical != o.pending.url:
                fps.add(fingerprint(page.canonical))
            if page.digest:
                digests.add(page.digest)
        urls: dict[str, str] = {}
        by_digest: dict[str, str] = {}
        d = document.c
        for part in chunks(sorted(fps), 500):
            for fp, url in conn.execute(sa.select(d.fingerprint, d.url).where(d.fingerprint.in_(part),
                                                                            d.duplicate_of.is_(None))):
                urls[fp] = url
        for part in chunks(sorted(digests), 500):
            for digest, url in conn.execute(sa.select(d.content_digest, d.url).where(
                    d.content_digest.in_(part), d.duplicate_of.is_(None)).order_by(d.doc_id)):
                by_digest.setdefault(digest, url)
        return urls, by_digest

    @staticmethod
    def _duplicate_of(page: PageResult, pend: Pending, stored_urls: dict, stored_digests: dict,
                      batch_urls: dict, batch_digests: dict) -> tuple[str | None, str | None]:
        """``(original_url, reason)`` when ``page`` duplicates a stored page (its canonical link
        names one, or its body digest equals one), else ``(None, None)``."""
        canonical = page.canonical
        if canonical and canonical != pend.url:
            fp = fingerprint(canonical)
            original = stored_urls.get(fp) or batch_urls.get(fp)
            if original is not None:
                return original, f"canonical link names {original}"
        if page.digest:
            original = stored_digests.get(page.digest) or batch_digests.get(page.digest)
            if original is not None and original != pend.url:
                return original, f"same body (SHA-256) as {original}"
        return None, None

    def _sitemap_rows(self, page: PageResult, pend: Pending, scope: Scope, links: dict) -> None:
        """Queue the pages a sitemap lists (one hop below it, with their lastmod) and, for a
        top-level sitemap that is an index, its sitemaps."""
        depth = pend.depth + 1
        for entry in page.sitemap_pages:
            if not isinstance(entry, list) or not entry or not isinstance(entry[0], str):
                continue
            url = entry[0]
            if len(url) > models.URL_LENGTH or not scope.allows(url, depth):
                continue
            lastmod = _lastmod(entry[1] if len(entry) > 1 else None)
            row = {"url": url, "fingerprint": fingerprint(url), "depth": depth, "priority": 5,
                   "discovered_from": pend.url[:models.URL_LENGTH], "in_flight": False,
                   "page_type": BASE if self.strategy.rules else None, "relevance": None, "kind": None,
                   "lastmod": lastmod}
            links.setdefault(row["fingerprint"], row)
        if pend.kind == "sitemap" and page.sitemaps:
            self._sitemap_files(page.sitemaps, pend, scope, "sitemap-child", links)

    @staticmethod
    def _sitemap_files(urls: list, pend: Pending, scope: Scope, kind: str, links: dict) -> None:
        """Queue sitemap ``urls`` (in scope, at most 50,000) as grid threads of ``kind`` at
        ``pend``'s depth."""
        for url in urls[:50_000]:
            if not isinstance(url, str):
                continue
            try:
                url = canonical_url(url)
            except InvalidURL:
                continue
            if len(url) > models.URL_LENGTH or not in_scope(url_host(url), scope.domains):
                continue
            row = {"url": url, "fingerprint": fingerprint(url), "depth": pend.depth, "priority": 5,
                   "discovered_from": pend.url[:models.URL_LENGTH], "in_flight": False,
                   "page_type": None, "relevance": None, "kind": kind, "lastmod": None}
            links[row["fingerprint"]] = row

    def _bound_sitemaps(self, conn, maps: list[dict], scope: Scope, result: "_Queued") -> list[dict]:
        """The rows of ``maps`` (sitemap files new to the crawl: neither visited nor read) to
        queue: not queued already, of a site below ``max_pages_per_host`` (else every page they
        list would be left out; a recrawl aside: their lastmods tell which stored pages are due),
        and within :data:`SITEMAP_FILES_PER_SITE` and
        :data:`HOST_SITEMAPS` of their site. Adds the site (and kind) of each kept row to
        ``result.maps``, of each other to ``result.skipped``, and the sites found at their cap to
        ``result.full``."""
        if not maps:
            return []
        queued: set[str] = set()
        for part in chunks([row["fingerprint"] for row in maps], 500):
            queued.update(conn.execute(sa.select(to_visit.c.fingerprint)
                                       .where(to_visit.c.fingerprint.in_(part))).scalars())
        maps = [row for row in maps if row["fingerprint"] not in queued]
        if not maps:
            return []
        if self._sitemap_counts is None:
            self._sitemap_counts = self._load_sitemap_counts(conn, scope)
        cap = scope.max_pages_per_host if self.recrawl_since is None else 0
        if cap > 0 and self._site_counts is None:
            self._site_counts = self._load_site_counts(conn, scope)
        full = self._full_sites | set(result.capped)
        counts, pending = self._sitemap_counts, collections.Counter()
        kept = []
        for row in maps:
            site = scope.site(row["url"])
            if cap > 0 and (site in full or self._site_counts[site] >= cap):
                result.full.add(site)
                result.skipped.append(site)
                continue
            own = (site, "sitemap") if row["kind"] == "sitemap" else None
            if counts[site] + pending[site] >= SITEMAP_FILES_PER_SITE or \
                    (own is not None and counts[own] + pending[own] >= HOST_SITEMAPS):
                result.skipped.append(site)
                continue
            pending[site] += 1
            if own is not None:
                pending[own] += 1
            kept.append(row)
            result.maps.append((site, row["kind"]))
        return kept

    def _drop_sitemaps(self, conn, scope: Scope, result: "_Queued") -> None:
        """Take out of ``to_visit_url`` the sitemap files waiting (not in flight) of the sites
        found at ``max_pages_per_host`` in this transaction for the first time (their links
        left out, ``result.capped``, or their sitemaps, ``result.full``): every page they list
        would be left out. Their sites go to ``result.skipped``; ``result.full`` becomes those
        sites. Only the sites that have sitemap files are looked for (a seed's host), each once.
        Not in a recrawl: the sitemaps it reads again tell which stored pages are due."""
        if self.recrawl_since is not None:
            return
        newly = (set(result.capped) | result.full) - self._full_sites
        result.full = newly
        if not newly:
            return
        if self._sitemap_counts is None:
            self._sitemap_counts = self._load_sitemap_counts(conn, scope)
        look = {site for site in newly if self._sitemap_counts[site]}
        if not look:
            return
        c = to_visit.c
        waiting = conn.execute(sa.select(c.id, c.url).where(c.kind.is_not(None), c.in_flight == sa.false())).all()
        gone = [row for row in waiting if scope.site(row.url) in look]
        for ids in chunks(sorted(row.id for row in gone), 500):
            conn.execute(to_visit.delete().where(c.id.in_(ids), c.in_flight == sa.false()))
        result.skipped += [scope.site(row.url) for row in gone]
        if gone:
            log.info("%d sitemap files not read: their sites reached max_pages_per_host (%s)", len(gone),
                     ", ".join(sorted({scope.site(row.url) for row in gone})))

    # ------------------------------------------------------------------ strategies

    def _page_score(self, page: PageResult, pend: Pending) -> float | None:
        """A focused crawl's page score R(p) of a fetched page (:meth:`Focus.page_score`), else None."""
        focus = self.strategy.focus
        if focus is None:
            return None
        text = page_text(page.content) if isinstance(page.content, str) else ""
        iris = {v for row in page.triples if isinstance(row, list) and len(row) >= 5
                for v in (row[0], row[1], row[2] if row[3] == "uri" else None, row[4]) if isinstance(v, str)}
        return focus.page_score(page.title or "", text, 1.0 if pend.relevance is None else pend.relevance, iris)

    @staticmethod
    def _triple_rows(page: PageResult, pend: Pending) -> dict[tuple, dict]:
        """``triple`` rows of a page's triples, keyed by (page, triple); malformed ones skipped."""
        rows = {}
        for row in page.triples or []:
            if not valid_triple(row):
                continue
            key = triple_key(row)
            rows[(pend.fingerprint, key)] = {
                "fingerprint": pend.fingerprint, "subject": row[0], "predicate": row[1], "object": row[2],
                "object_kind": row[3], "datatype": row[4], "language": row[5], "triple_key": key}
        return rows

    def _note_retyped(self, url: str, first: str | None, other: str | None) -> None:
        """Count a link a follow rule gave the page type ``other`` while its URL was queued or
        visited as ``first`` (it keeps ``first``: a URL is crawled once)."""
        self.retyped += 1
        if self.retyped_example is None:
            self.retyped_example = (url, first or "", other or "")

    def _link_row(self, link: list, pend: Pending, depth: int, parent_score: float | None) -> dict | None:
        """The ``to_visit_url`` row of a link found on ``pend``'s page, or None when the strategy
        does not follow it: with rules, a link without a to_type (``[url, text, to_type]``);
        in a focused crawl, a link scoring below ``min_relevance``."""
        strategy, url = self.strategy, link[0]
        page_type = None
        if strategy.rules:
            if len(link) < 3 or not link[2]:  # types are the protocol's (gridcrawl.protocol.Link)
                return None
            page_type = link[2][:PAGE_TYPE_LENGTH]
        relevance, priority = None, 5
        if strategy.focus is not None:
            relevance = strategy.focus.link_score(link[1], url, parent_score or 0.0)
            if relevance < strategy.min_relevance:
                if len(self.below_relevance) < KNOWN_CACHE:
                    self.below_relevance.add(hash(url))
                self.best_below = max(self.best_below, relevance)
                return None
            priority = focus_priority(relevance)
        return {"url": url, "fingerprint": fingerprint(url), "depth": depth, "priority": priority,
                "discovered_from": pend.url[:models.URL_LENGTH], "in_flight": False,
                "page_type": page_type, "relevance": relevance, "kind": None, "lastmod": None}

    @staticmethod
    def _kept_rows(page: PageResult, pend: Pending, now) -> list[dict]:
        """``kept_link`` rows of the links a page's keep rules matched (``[url, rule]`` pairs,
        :data:`gridcrawl.protocol.KeptLink`: types checked by the protocol; a pair that is not
        one, an empty or over-long URL is skipped)."""
        rows = []
        for item in page.kept:
            if len(item) != 2 or not item[0] or len(item[0]) > models.URL_LENGTH:
                continue
            rows.append({"url": item[0], "fingerprint": fingerprint(item[0]),
                         "source_url": pend.url[:models.URL_LENGTH], "source_page_type": pend.page_type,
                         "rule": item[1], "kept_at": now})
        return rows

    @staticmethod
    def _raise_relevance(conn, rows: list[dict]) -> None:
        """Focused crawl: a link found again from a better page gets the higher score (and
        priority) while it waits (shark-search keeps the best score of a URL)."""
        if not rows:
            return
        c = to_visit.c
        stmt = (to_visit.update()
                .where(c.fingerprint == sa.bindparam("b_fp"), c.in_flight == sa.false(),
                       sa.or_(c.relevance.is_(None), c.relevance < sa.bindparam("b_rel")))
                .values(relevance=sa.bindparam("b_rel"), priority=sa.bindparam("b_prio")))
        conn.execute(stmt, [{"b_fp": r["fingerprint"], "b_rel": r["relevance"], "b_prio": r["priority"]}
                            for r in sorted(rows, key=lambda r: r["fingerprint"])])

    def rescore_frontier(self, focus, batch: int = 2000) -> int:
        """Score the waiting links of the frontier again by ``focus`` (a :class:`Focus` or
        :class:`~gridcrawl.focus.OntologyFocus`), for a resumed crawl given a focus it was not
        queued with: each link found on a page (``discovered_from``) gets
        ``focus.link_score("", url, R)``, where ``R`` is the similarity of that stored page's
        title and text under ``focus`` (0 when it is not stored; its anchor text is not stored,
        and its triples do not count). Seeds and pages queued again (no ``discovered_from``) are
        scored as a focused crawl's seeds (1, priority 1000: a plain crawl queued them at 5); URLs
        in flight keep their scores. Reads and writes ``batch`` rows at a time.

        Returns how many waiting links were scored again.
        """
        c, d = to_visit.c, document.c
        with self.engine.begin() as conn:
            conn.execute(to_visit.update().where(c.in_flight == sa.false(), c.discovered_from.is_(None),
                                                 c.kind.is_(None))
                         .values(relevance=1.0, priority=focus_priority(1.0)))
        done, after = 0, 0
        while True:
            with self.engine.begin() as conn:
                # by id alone (reads and writes): with in_flight in the WHERE clause SQLite walked a
                # frontier index instead of the key (252 s for 1,000,000 waiting links)
                rows = conn.execute(sa.select(c.id, c.url, c.discovered_from, c.in_flight)
                                    .where(c.id > after).order_by(c.id).limit(batch)).all()
                if not rows:
                    return done
                after = rows[-1].id
                rows = [r for r in rows if r.discovered_from is not None and not r.in_flight]
                parents = {fingerprint(r.discovered_from): r.discovered_from for r in rows}
                scores = dict.fromkeys(parents.values(), 0.0)
                for part in chunks(sorted(parents), 500):
                    for doc in conn.execute(sa.select(d.fingerprint, d.title, d.content)
                                            .where(d.fingerprint.in_(part))):
                        text = page_text(doc.content) if isinstance(doc.content, str) else ""
                        scores[parents[doc.fingerprint]] = focus.page_sim(doc.title or "", text)
                updates = []
                for r in rows:
                    relevance = focus.link_score("", r.url, scores[r.discovered_from])
                    updates.append({"b_id": r.id, "b_rel": relevance, "b_prio": focus_priority(relevance)})
                conn.execute(to_visit.update().where(c.id == sa.bindparam("b_id"))
                             .values(relevance=sa.bindparam("b_rel"), priority=sa.bindparam("b_prio")), updates)
                done += len(updates)

    def drop_below(self, min_relevance: float) -> int:
        """Leave out the waiting links of a focused crawl's frontier that score below
        ``min_relevance`` (0 ... 1), for a crawl resumed with a higher ``--min-relevance``:
        their rows are deleted, and they count among the links not queued (:attr:`below_relevance`,
        :attr:`best_below`), as those the threshold leaves out when found. Seeds and pages queued
        again (no ``discovered_from``) and URLs in flight stay. Returns how many were left out."""
        c = to_visit.c
        dropped, after = 0, 0
        self._frontier = FrontierMemo()
        while True:
            with self.engine.begin() as conn:  # by id alone, as rescore_frontier reads
                rows = conn.execute(sa.select(c.id, c.url, c.relevance, c.discovered_from, c.in_flight)
                                    .where(c.id > after).order_by(c.id).limit(2000)).all()
                if not rows:
                    return dropped
                after = rows[-1].id
                rows = [r for r in rows if r.discovered_from is not None and not r.in_flight
                        and r.relevance is not None and r.relevance < min_relevance]
                if not rows:
                    continue
                conn.execute(to_visit.delete().where(c.id.in_([r.id for r in rows])))
            for row in rows:
                if len(self.below_relevance) < KNOWN_CACHE:
                    self.below_relevance.add(hash(row.url))
                self.best_below = max(self.best_below, row.relevance)
            dropped += len(rows)

    def save_rules(self, rules: Sequence[Rule]) -> None:
        """Store ``rules`` in the ``crawl_rule`` table, replacing what was there."""
        run_transaction(self.engine, lambda conn: store_rules(conn, rules))

    def stored_rules(self) -> list[Rule]:
        """The rules in the ``crawl_rule`` table (validated; empty when there are none)."""
        with self.engine.connect() as conn:
            return rules_from_table(conn)

    def idle_rules(self) -> list[tuple[Rule, int, str]]:
        """The crawl's keep/follow rules that found nothing on the pages they apply to: a follow
        rule whose ``to_type`` no URL of the crawl has (queued or visited), a keep rule that kept
        no link — each only when a page of its ``from_type`` was fetched without error (else the
        error summary tells why), and since the crawl's rules were last changed (crawl setting
        ``rules_since``: a page fetched under other rules says nothing of these). Returns
        ``[(rule, pages of its from_type fetched, one of their URLs)]`` in rule order; ``[]``
        without rules."""
        rules = self.strategy.rules
        if not rules:
            return []
        since = self.metas().get("rules_since")
        with self.engine.connect() as conn:
            typed = {t for (t,) in conn.execute(sa.select(visited.c.page_type).distinct()
                                                .union(sa.select(to_visit.c.page_type).distinct()))}
            fetched = {r.page_type: (r.n, r.url) for r in conn.execute(
                sa.select(visited.c.page_type, sa.func.count().label("n"), sa.func.min(visited.c.url).label("url"))
                .where(visited.c.error_kind.is_(None), visited.c.page_type.is_not(None),
                       *([visited.c.visited_at >= datetime.fromisoformat(since)] if since else []))
                .group_by(visited.c.page_type))}
            kept_by = {n for (n,) in conn.execute(sa.select(kept_link.c.rule).distinct())}
        return [(r, *fetched[r.from_type]) for r in rules if r.from_type in fetched
                and (r.to_type not in typed if r.rule_type == "follow" else r.number not in kept_by)]

    def _cap_per_site(self, conn, rows: list[dict], scope: Scope) -> tuple[list[dict], list[str], list[str]]:
        """Keep the rows whose site (:meth:`Scope.site`) has fewer than ``scope.max_pages_per_host``
        URLs queued or visited, counting the rows kept; return them, the site of each new one and
        the site of each row left out. Rows already queued are left out uncounted (they are
        counted already)."""
        if self._site_counts is None:
            self._site_counts = self._load_site_counts(conn, scope)
        queued: set[str] = set()
        for part in chunks([r["fingerprint"] for r in rows], 500):
            queued.update(conn.execute(sa.select(to_visit.c.fingerprint)
                                       .where(to_visit.c.fingerprint.in_(part))).scalars())
        cap = scope.max_pages_per_host
        pending: dict[str, int] = {}
        kept, added, capped = [], [], []
        for row in rows:
            if row["fingerprint"] in queued:
                continue
            site = scope.site(row["url"])
            if self._site_counts[site] + pending.get(site, 0) >= cap:
                capped.append(site)
                continue
            pending[site] = pending.get(site, 0) + 1
            kept.append(row)
            added.append(site)
        return kept, added, capped

    def site_counts(self, scope: Scope) -> "collections.Counter[str]":
        """URLs queued or visited per site (:meth:`Scope.site`), read from the tables now: what
        the per-host cap counts against (a Spark layer's driver reads it once and hands it to the
        tasks that queue the layer's links, :meth:`start_site_counts`)."""
        with self.engine.connect() as conn:
            return self._load_site_counts(conn, scope)

    def start_site_counts(self, counts: Mapping[str, int]) -> None:
        """Count the per-host cap from ``counts`` (site -> URLs, from :meth:`site_counts`) instead
        of what this store counted or would read from the tables."""
        self._site_counts = collections.Counter(counts)

    @staticmethod
    def _load_site_counts(conn, scope: Scope) -> "collections.Counter[str]":
        """URLs per site (:meth:`Scope.site`) in ``visited_url`` and ``to_visit_url``, each once
        (a recrawl's due pages and ``--retry-failed``'s URLs are in both), sitemap files aside
        (those read, in the ``sitemap`` table, and those queued, with a ``kind``). Read once per
        client; several clients on one database each count what they see, so the cap is
        approximate."""
        counts: collections.Counter[str] = collections.Counter()
        for query in (sa.select(visited.c.url).where(visited.c.fingerprint.not_in(
                          sa.select(sitemap_table.c.fingerprint))),
                      sa.select(to_visit.c.url).where(to_visit.c.kind.is_(None), to_visit.c.fingerprint.not_in(
                          sa.select(visited.c.fingerprint)))):
            for url in conn.execute(query).scalars():
                counts[scope.site(url)] += 1
        return counts

    @staticmethod
    def _load_sitemap_counts(conn, scope: Scope) -> collections.Counter:
        """Sitemap files read (``sitemap`` rows) or queued (``to_visit_url`` rows with a
        ``kind``) per site (:meth:`Scope.site`), and the host's own among them under
        ``(site, "sitemap")``: what :data:`SITEMAP_FILES_PER_SITE` and :data:`HOST_SITEMAPS`
        count against (read once per client, approximate with several)."""
        found: dict[str, tuple[str, str]] = {}
        for table, where in ((sitemap_table, sa.true()), (to_visit, to_visit.c.kind.is_not(None))):
            for fp, url, kind in conn.execute(sa.select(table.c.fingerprint, table.c.url, table.c.kind).where(where)):
                found[fp] = (url, kind)
        counts: collections.Counter = collections.Counter()
        for url, kind in found.values():
            site = scope.site(url)
            counts[site] += 1
            if kind == "sitemap":
                counts[(site, "sitemap")] += 1
        return counts

    # ------------------------------------------------------------------ figures

    def error_summary(self, limit: int = 20) -> list["ErrorGroup"]:
        """:func:`error_groups` of this crawl database."""
        return error_groups(self.engine, limit)

    def retry_failed(self, kinds: Sequence[str] = (), *, batch: int = 10_000,
                     progress: Callable[[int, int], None] | None = None) -> int:
        """Queue the visited URLs that failed again (only those whose ``error_kind`` is in
        ``kinds``, if given, where ``http_NNN`` names the ``http_status`` failures of status NNN,
        as the summary's ``http NNN``; without kinds, not the crawl's own decisions on pages that
        were fetched well — ``trap``, ``duplicate``, ``noindex``, :data:`DECISIONS` — nor the URLs
        robots.txt disallowed, ``robots``, :data:`DISALLOWED`, which only ``kinds`` naming them
        queue again, for a crawl that ignores robots.txt or a site that changed it): each goes
        back to ``to_visit_url`` at its depth and as the page type it was visited as (its rendering
        and follow rules; a sitemap as a sitemap) and leaves ``visited_url``, except a stored
        document's (a ``gone`` page, a recrawl's failure), whose visit is a revisit that updates
        its row. Returns how many. Run before a crawl starts (``--retry-failed``), in one
        transaction, ``batch`` visited URLs at a time (by id), each batch one ``INSERT ...
        SELECT`` and one ``DELETE`` (no row goes through Python: read all at once, a crawl's
        1,000,000 URLs failed while a host was down took 680 MB, and a row at a time, minutes). ``progress(done, total)`` is
        called with 0 and how many will be queued before the first batch, then after each batch
        (a million take minutes)."""
        v, sm = visited.c, sitemap_table.c
        failed = v.error_kind.is_not(None)
        if kinds:
            statuses = [int(k[5:]) for k in kinds if http_status_kind(k)]
            plain = [k for k in kinds if not http_status_kind(k)]
            failed = sa.and_(failed, sa.or_(v.error_kind.in_(plain), sa.and_(
                v.error_kind == ErrorKind.HTTP_STATUS.value, v.status.in_(statuses))))
        else:
            failed = sa.and_(failed, v.error_kind.not_in(NOT_FAILED))
        # set-based, a batch of ids at a time: one INSERT ... SELECT and one DELETE per batch (a
        # row at a time through Python, a million failed URLs took minutes on SQLite)
        page = sm.fingerprint.is_(None)  # a sitemap goes back as one (not as a page whose 404 is an error)
        if self.strategy.focus is not None:  # a page of a focused crawl: at the seeds' priority
            priority, relevance = sa.case((page, focus_priority(1.0)), else_=5), sa.case((page, 1.0))
        else:
            priority, relevance = sa.literal(5), sa.null()
        again = (sa.select(v.url, v.fingerprint, v.depth, priority.label("priority"),
                           sa.literal(False, sa.Boolean).label("in_flight"), sm.kind,
                           # the page type it was visited as (its rendering, its follow rules)
                           sa.case((page, sa.func.coalesce(v.page_type, document.c.page_type,
                                                           sa.case((v.depth == 0, BASE))))).label("page_type"),
                           relevance.label("relevance"))
                 .select_from(visited.outerjoin(document, document.c.fingerprint == v.fingerprint)
                              .outerjoin(sitemap_table, sm.fingerprint == v.fingerprint))
                 .where(~sa.exists().where(to_visit.c.fingerprint == v.fingerprint)))
        columns = ["url", "fingerprint", "depth", "priority", "in_flight", "kind", "page_type", "relevance"]

        def work(conn) -> int:
            if conn.dialect.name == "sqlite":  # for this transaction: the indexes' pages stay in memory
                cache = conn.exec_driver_sql("PRAGMA cache_size").scalar()
                conn.exec_driver_sql(f"PRAGMA cache_size=-{RETRY_CACHE_KIB}")
                try:
                    return requeue(conn)
                finally:
                    conn.exec_driver_sql(f"PRAGMA cache_size={int(cache)}")
            return requeue(conn)

        def requeue(conn) -> int:
            done, after = 0, 0
            total = 0
            if progress is not None:
                total = conn.execute(sa.select(sa.func.count()).where(failed)).scalar() or 0
                progress(0, total)
            while ids := conn.execute(sa.select(v.id).where(failed, v.id > after).order_by(v.id)
                                      .limit(batch)).scalars().all():
                these = sa.and_(failed, v.id > after, v.id <= ids[-1])
                conn.execute(to_visit.insert().from_select(columns, again.where(these).order_by(v.id)))
                # a stored document's visit stays: its retry is a revisit that updates the row
                conn.execute(visited.delete().where(these, ~sa.exists().where(document.c.fingerprint == v.fingerprint)))
                after, done = ids[-1], done + len(ids)
                if progress is not None:
                    progress(done, max(total, done))
            return done
        return run_transaction(self.engine, work)

    def queued_revisits(self) -> int:
        """URLs waiting in ``to_visit_url`` that are stored and visited documents: visits a
        recrawl (``--recrawl``) queued and has not made yet. (A document without a visit is a
        Spark layer's cut off between its download and its commit stage: the layer runs again.)"""
        t, d, v = models.to_visit_url, models.document, models.visited_url
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(
                t.join(d, d.c.fingerprint == t.c.fingerprint).join(v, v.c.fingerprint == t.c.fingerprint))
            ).scalar() or 0)

    def to_visit_count(self) -> int:
        """Rows of ``to_visit_url``: the frontier's size, the URLs in flight included."""
        with self.engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(to_visit)).scalar()

    def item_count(self) -> int:
        """Items stored (``item`` rows)."""
        with self.engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(models.item)).scalar() or 0

    def counts(self) -> dict:
        """:func:`crawl_counts` of this crawl database."""
        return crawl_counts(self.engine)


def crawl_counts(engine: Engine) -> dict:
    """Rows in each table of the crawl database ``engine``: ``documents``, ``visited``,
    ``to_visit``, ``duplicates`` (documents that are a duplicate of another: ``duplicate_of``, also
    in ``documents`` and ``set_aside``), ``errors`` (visited URLs that failed), ``set_aside`` (visited URLs the crawl's
    rules left out: :data:`DECISIONS`), ``disallowed`` (visited URLs that robots.txt disallowed,
    not fetched: :data:`DISALLOWED`; neither errors nor set aside), ``sitemaps`` (visited URLs that were sitemaps, or a
    host's ``/sitemap.xml`` probed and not found: read for their links, no document), ``kept``,
    ``gone`` (documents marked gone), ``versions`` (``document_version`` rows) and ``triples``.
    Raises SQLAlchemy's ``DBAPIError`` when it is not a crawl database."""
    kind = visited.c.error_kind
    with engine.connect() as conn:
        count = lambda table, *where: conn.execute(sa.select(sa.func.count()).select_from(table).where(*where)).scalar()
        return {"documents": count(document), "duplicates": count(document, document.c.duplicate_of.is_not(None)),
                "visited": count(visited), "to_visit": count(to_visit),
                "errors": count(visited, kind.is_not(None), kind.not_in(NOT_FAILED)),
                "set_aside": count(visited, kind.in_(DECISIONS)), "disallowed": count(visited, kind.in_(DISALLOWED)),
                "sitemaps": count(sitemap_table),
                "kept": count(kept_link),
                "gone": count(document, document.c.gone_at.is_not(None)), "versions": count(document_version),
                "triples": count(triple)}


def error_groups(engine: Engine, limit: int = 20) -> list["ErrorGroup"]:
    """The visited URLs of the crawl database ``engine`` with an ``error_kind`` (failures and
    the crawl's decisions and the URLs robots.txt disallowed, told apart by
    :attr:`ErrorGroup.failed` and :attr:`ErrorGroup.disallowed`) grouped by kind
    (``http_status`` also by status, so 404s and 500s are apart), most frequent first, at most
    ``limit`` groups, each with one example URL and its error message (the first recorded)."""
    v = visited.c
    with engine.connect() as conn:
        rows = conn.execute(sa.select(v.error_kind, v.status, sa.func.count().label("n"),
                                      sa.func.min(v.id).label("first"))
                            .where(v.error_kind.is_not(None)).group_by(v.error_kind, v.status)).all()
        groups: dict[tuple, list] = {}
        for r in rows:
            key = (r.error_kind, r.status if r.error_kind == "http_status" else None)
            group = groups.setdefault(key, [0, r.first])
            group[0] += r.n
            group[1] = min(group[1], r.first)
        ranked = sorted(groups.items(), key=lambda item: (-item[1][0], item[0][0], item[0][1] or 0))[:limit]
        examples = {r.id: r for r in conn.execute(sa.select(v.id, v.url, v.error, v.page_type).where(
            v.id.in_([first for _, (_, first) in ranked])))} if ranked else {}
    return [ErrorGroup(kind, status, n, examples[first].url, examples[first].error or "", examples[first].page_type)
            for (kind, status), (n, first) in ranked]


@dataclass(frozen=True)
class ErrorGroup:
    """Visited URLs of one error kind (:meth:`CrawlStore.error_summary`): ``kind`` (the stored
    ``error_kind``), ``status`` (the HTTP status for ``http_status``, else None), ``count``, and
    one example ``url`` with its ``error`` message and the ``page_type`` it was visited as (keep/follow
    rules; None without rules or for a visit recorded before crawl schema 0009)."""

    kind: str
    status: int | None
    count: int
    url: str
    error: str
    page_type: str | None = None

    @property
    def failed(self) -> bool:
        """True for a failure; False for a decision of the crawl's on a page (:data:`DECISIONS`:
        a duplicate, a trap, noindex), which retrying would not change, and for URLs robots.txt
        disallowed (:attr:`disallowed`): the crawler obeyed the site."""
        return self.kind not in NOT_FAILED

    @property
    def disallowed(self) -> bool:
        """True for the URLs robots.txt disallowed (``robots``, :data:`DISALLOWED`): not fetched,
        neither a failure nor a decision of the crawl's rules. (``robots_unreachable``, a
        robots.txt that did not answer, is a failure.)"""
        return self.kind in DISALLOWED

    @property
    def label(self) -> str:
        """``"http 404"`` for an HTTP status, else the kind (``"blocked"``, ``"timeout"`` ...)."""
        return f"http {self.status}" if self.kind == "http_status" and self.status else self.kind

    @property
    def retry_kind(self) -> str:
        """The kind ``--retry-failed`` takes for this group: ``"http_404"`` for an HTTP status
        (:func:`http_status_kind`), else the kind."""
        return f"http_{self.status}" if self.kind == "http_status" and self.status else self.kind


def http_status_kind(kind: str) -> bool:
    """True if ``kind`` names the ``http_status`` failures of one status, ``http_`` and three
    digits (``"http_503"``), as ``--retry-failed`` takes them."""
    return len(kind) == 8 and kind.startswith("http_") and kind[5:].isdigit()


#: ``visited_url.error_kind`` values that are decisions on a page fetched well, not failures.
DECISIONS = (ErrorKind.TRAP.value, ErrorKind.DUPLICATE.value, ErrorKind.NOINDEX.value)
#: ``visited_url.error_kind`` values that are no failure: :data:`DECISIONS` and :data:`DISALLOWED`.
NOT_FAILED = DECISIONS + DISALLOWED

KNOWN_CACHE = 500_000  # entries of CrawlStore's known-URL cache (about 30 MB)


def _header(headers: dict, name: str) -> str | None:
    """Response header ``name`` (lower case) of a page's headers as text, or None."""
    value = headers.get(name)
    return value if isinstance(value, str) and value else None


def _after(keys: tuple, values: tuple):
    """The condition "``keys`` (columns) come after ``values`` in the order ``keys`` give", for
    keyset paging, written without row values (SQL Server has none): ``k1 > v1``, or
    ``k1 > v1 OR (k1 = v1 AND k2 > v2)``."""
    first = keys[0] > values[0]
    if len(keys) == 1:
        return first
    return sa.or_(first, sa.and_(keys[0] == values[0], _after(keys[1:], values[1:])))


def _validator(headers: dict, name: str, column: sa.Column) -> str | None:
    """Validator header ``name`` (``etag`` or ``last-modified``, lower case) of a page's headers
    as stored in ``column`` (``document.etag`` …), or None when missing or longer than the column
    holds: cut, it would match nothing when sent back, and a value too long failed the batch's
    update on PostgreSQL and MariaDB (the apply stopped on a 304 or unchanged page carrying it)."""
    value = _header(headers, name)
    return value if value is not None and len(value) <= (column.type.length or len(value)) else None


def _execute_grouped(conn, table: sa.Table, key: sa.Column, rows: list[dict]) -> None:
    """``UPDATE table SET ... WHERE key = :b_fp`` for each of ``rows`` (a ``b_fp`` value plus the
    columns to set), as one executemany per set of columns, in key order (no deadlock between
    two writers)."""
    groups: dict[tuple, list[dict]] = {}
    for row in sorted(rows, key=lambda r: r["b_fp"]):
        groups.setdefault(tuple(sorted(row)), []).append(row)
    for names, group in groups.items():
        columns = [name for name in names if name != "b_fp"]
        stmt = table.update().where(key == sa.bindparam("b_fp")).values(
            {name: sa.bindparam("v_" + name, type_=table.c[name].type) for name in columns})
        conn.execute(stmt, [{"b_fp": row["b_fp"], **{"v_" + name: row[name] for name in columns}} for row in group])


@functools.lru_cache(maxsize=None)
def _column_limits(table: sa.Table) -> dict[str, int | None]:
    """Each column's declared length (None when it has none)."""
    return {c.name: getattr(c.type, "length", None) for c in table.columns}


def _fit(table: sa.Table, rows: list[dict]) -> list[dict]:
    """``rows`` made storable in ``table`` on every back end, whatever a page or an executor
    sent: NUL characters removed from text (PostgreSQL refuses them) and text cut to its
    column's length (PostgreSQL, SQL Server and MariaDB in strict mode refuse longer values).
    Values are always bound parameters; this only keeps a hostile page from failing the batch."""
    limits = _column_limits(table)
    for row in rows:
        for name, value in row.items():
            if isinstance(value, str):
                if value.find("\x00") != -1:  # str.find scans for one character about twice as fast as `in`
                    value = value.replace("\x00", "")
                limit = limits.get(name)
                row[name] = value[:limit] if limit else value
    return rows


def _revisit_row(stored, kind: str | None = None, priority: int = 5) -> dict:
    """The ``to_visit_url`` row that visits stored document (or, with ``kind``, sitemap)
    ``stored`` again at frontier ``priority``, with its validators for a conditional request
    (``stored`` has ``url``, ``fingerprint``, ``depth``, ``etag``, ``last_modified`` and, for a
    document, ``page_type``)."""
    return {"url": stored.url, "fingerprint": stored.fingerprint, "depth": stored.depth, "priority": priority,
            "discovered_from": None, "in_flight": False, "page_type": None if kind else stored.page_type,
            "relevance": None, "kind": kind, "lastmod": None, "etag": stored.etag,
            "last_modified": stored.last_modified}


def _waiting(conn, fingerprints: Sequence[str]) -> dict[str, sa.Row]:
    """The ``to_visit_url`` rows of ``fingerprints`` that wait (not in flight), by fingerprint,
    each with its ``id`` and ``depth``: read by fingerprint alone, so that a write that follows
    goes by id. With ``in_flight = 0`` in the same statement as ``fingerprint IN (...)`` (or
    ``id IN (...)``), SQLite, which keeps no statistics here, took ``ix_to_visit_url_depth`` for
    the more selective index and walked every waiting row: 1.4 s for one batch's depth update in
    a frontier of 1,000,000 URLs, instead of a millisecond."""
    found: dict[str, sa.Row] = {}
    for part in chunks(sorted(set(fingerprints)), 500):
        for row in conn.execute(sa.select(to_visit.c.id, to_visit.c.fingerprint, to_visit.c.depth, to_visit.c.in_flight)
                                .where(to_visit.c.fingerprint.in_(part))):
            if not row.in_flight:
                found[row.fingerprint] = row
    return found


def _queue_absent(conn, rows: list[dict]) -> int:
    """Insert the ``to_visit_url`` ``rows`` whose URL is not queued already; return how many."""
    present: set[str] = set()
    for part in chunks([row["fingerprint"] for row in rows], 500):
        present.update(conn.execute(sa.select(to_visit.c.fingerprint).where(to_visit.c.fingerprint.in_(part)))
                       .scalars())
    rows = [row for row in rows if row["fingerprint"] not in present]
    insert_ignore(conn, to_visit, rows)
    return len(rows)


def _json_or_none(value) -> str | None:
    """``value`` as strict JSON text (RFC 8259: no NaN), or None when it is empty or not JSON-able
    (a hostile executor's bytes keys or NaN must not fail the batch)."""
    if not value:
        return None
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None


def _lastmod(value) -> datetime | None:
    """A sitemap entry's lastmod (ISO 8601 UTC text from the executor) as a naive UTC datetime,
    or None when empty or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when.replace(tzinfo=None) if when.tzinfo is None else None


def _skip_locked(dialect: sa.engine.Dialect) -> bool:
    """True if ``dialect``'s server knows ``SKIP LOCKED`` (PostgreSQL 9.5+, MySQL 8.0.1+,
    MariaDB 10.6+)."""
    if dialect.name == "postgresql":
        return True
    version = dialect.server_version_info or ()
    return version >= ((10, 6) if getattr(dialect, "is_mariadb", False) else (8, 0, 1))


def check_seed(url: str) -> str:
    """The canonical form of seed ``url``; raises :class:`InvalidURL` with the reason."""
    return canonical_url(url)


__all__ = ["CrawlStore", "ErrorGroup", "ORDERS", "Outcome", "Pending", "Rows", "Scope", "Strategy", "InvalidURL", "check_seed", "http_status_kind"]
