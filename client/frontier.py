"""What a crawl follows and in which order, apart from its database: :class:`Scope` (which
links are followed), :class:`Strategy` (frontier order, keep/follow rules, focus, semantic,
rendering, items) and :class:`Pending` (a URL of the frontier submitted as a grid thread).

Kept out of :mod:`gridcrawl.client.store` so that what checks one URL as a crawl would
(``gridcrawl fetch``, :mod:`gridcrawl.checker`) does not import SQLAlchemy and the crawl's
tables: 0.25 s and more of its start-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from gridcrawl.focus import Focus
from gridcrawl.protocol import ErrorKind, PageResult
from gridcrawl.rules import PageType, Rule
from gridcrawl.urls import Domains, domain_keys, in_scope, path_trap, scope_domain, url_host, url_origin


@dataclass(slots=True)
class Pending:
    """A URL the application has submitted as a grid thread (``thread_id`` = to_visit row id)."""

    thread_id: int
    url: str
    fingerprint: str
    depth: int
    priority: int = 5
    page_type: str | None = None     # keep/follow rules: the page's type ("base" for a seed)
    relevance: float | None = None   # focused crawl: the score it was queued with
    kind: str | None = None          # None: a page; "sitemap" or "sitemap-child": a sitemap to read
    lastmod: datetime | None = None  # <lastmod> of the sitemap that listed it (naive UTC)
    etag: str | None = None          # recrawl: the stored document's ETag (sent as If-None-Match)
    last_modified: str | None = None  # recrawl: its Last-Modified (sent as If-Modified-Since)
    discovered_from: str | None = None  # the page whose link queued it (None: a seed, a revisit)


@dataclass
class Scope:
    """Which links are followed: hosts in ``allowed_domains`` (and their subdomains), depth at
    most ``max_depth`` (-1: unlimited), paths that are no crawler trap (no segment three times,
    :func:`gridcrawl.urls.path_trap`), and at most ``max_pages_per_host`` URLs per :meth:`site`
    (0: unlimited; counted by :meth:`CrawlStore.apply`; sitemap files are bounded apart, by
    :data:`SITEMAP_FILES_PER_SITE`). URLs longer than 2,083 characters never
    get here: :func:`gridcrawl.urls.canonical_url` refuses them.

    Also: ``follow_nofollow`` (follow ``rel="nofollow"`` links: the executors leave them out
    otherwise), and the template-trap rule of :mod:`gridcrawl.client.traps`: a URL shape with
    ``trap_near_duplicates`` near-identical pages (SimHashes within ``trap_distance`` bits),
    each found on a page of that shape, is no longer followed (0: off)."""

    allowed_domains: list[str] = field(default_factory=list)
    max_depth: int = -1
    max_pages_per_host: int = 0
    follow_nofollow: bool = False
    trap_near_duplicates: int = 8
    trap_distance: int = 3
    #: ``allowed_domains`` as :func:`gridcrawl.urls.in_scope` checks them fast (set at creation)
    domains: Domains = field(init=False, repr=False, compare=False)
    #: host -> :meth:`site`, for the hosts seen lately (emptied when the scope widens or it fills)
    _sites: dict = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.domains = domain_keys(self.allowed_domains)

    def widen(self, host: str) -> bool:
        """Add ``host`` to the allowed domains (a seed redirected there); False if it was in scope."""
        if not host or in_scope(host, self.domains):
            return False
        self.allowed_domains.append(host)
        self.domains = domain_keys(self.allowed_domains)
        self._sites.clear()
        return True

    def redirected_seed(self, pend: "Pending", page: PageResult | None) -> str | None:
        """The host a seed's redirect brought into the crawl, added to the scope (as Heritrix's
        ``seedsRedirectNewSeeds``), or None: ``pend`` is a seed (depth 0, not a sitemap) whose
        ``page`` followed a redirect to a host outside the scope that answered (no error, or an
        HTTP status; a refused or failed hop widens nothing)."""
        if pend.depth or pend.kind is not None or page is None or not page.redirects \
                or page.error_kind not in (None, ErrorKind.HTTP_STATUS.value):
            return None
        host = url_host(page.final_url)
        return host if self.widen(host) else None

    def site(self, url: str) -> str:
        """What the per-host cap counts ``url`` under: the allowed domain its host falls under
        (a seed's host, counting its subdomains with it, or an ``--allow-domain``; the most
        specific wins, :func:`gridcrawl.urls.scope_domain`), else its host name. Counting a
        seed's subdomains with it is what ends a maze spread over endless host names (a
        wildcard DNS record), whose every host has one page."""
        host = url_host(url)
        site = self._sites.get(host)
        if site is None:
            if len(self._sites) >= 100_000:
                self._sites.clear()
            site = self._sites[host] = scope_domain(host, self.domains) or host
        return site

    def allows(self, url: str, depth: int) -> bool:
        """True if a link to ``url`` found at ``depth`` is to be crawled (the per-host cap aside).
        A link that carries credentials (``http://user:password@host/``) is not: a page does
        not choose what the crawler sends its hosts as a login (``--netrc`` does), and the
        password would be stored with the URL."""
        if self.max_depth >= 0 and depth > self.max_depth:
            return False
        if not in_scope(url_host(url), self.domains) or "@" in url_origin(url):
            return False
        return path_trap(url) is None

    def instruction(self) -> dict:
        """The crawling instruction sent with every grid thread: ``{"scope": allowed_domains}``,
        so the executor refuses redirect hops out of scope (``out_of_scope``), and
        ``"follow_nofollow": true`` when rel=nofollow links are to be followed."""
        instruction: dict = {"scope": list(self.allowed_domains)}
        if self.follow_nofollow:
            instruction["follow_nofollow"] = True
        return instruction


#: Frontier orders of :class:`Strategy` (``--order``).
ORDERS = ("bfs", "dfs", "priority")


@dataclass
class Strategy:
    """How a crawl picks and follows links (docs/strategies.md).

    * ``order`` — which to-visit URLs are claimed first: ``bfs`` (breadth-first: lowest depth,
      then discovery order), ``dfs`` (depth-first: deepest, then newest first — a stack),
      ``priority`` (highest ``priority``, then discovery order; a focused crawl's priority is
      its relevance, :func:`gridcrawl.focus.priority`).
    * ``rules`` — keep/follow rules (:mod:`gridcrawl.rules`); when given, a page's links are
      followed only through its instruction's follow rules, and keep rules' links go to
      ``kept_link``.
    * ``focus`` and ``min_relevance`` — a focused crawl (:mod:`gridcrawl.focus`): links scoring
      below ``min_relevance`` (0 ... 1) are not queued. ``focus`` is a keyword
      :class:`~gridcrawl.focus.Focus` or an :class:`~gridcrawl.focus.OntologyFocus`.
    * ``structured_data`` — a semantic crawl (:mod:`gridcrawl.semantic`): executors read RDF
      documents and HTML structured data; their triples go to the ``triple`` table.
    * ``render``, ``wait_for`` and ``page_types`` — pages that need JavaScript
      (:mod:`gridcrawl.executor.render`): ``render`` renders every page (``--render``),
      ``page_types`` (from the rules file) only the pages of types with ``render = true``;
      ``wait_for`` is the CSS selector the browser waits for (a page type's own wins).
    * ``items`` — item specs (:mod:`gridcrawl.items`): the executors extract them from the
      pages they apply to; the items go to the ``item`` table (:mod:`gridcrawl.client.items`).

    Raises ``ValueError`` for an unknown order or a ``min_relevance`` outside 0 ... 1.
    """

    order: str = "bfs"
    rules: list[Rule] = field(default_factory=list)
    focus: Focus | None = None
    min_relevance: float = 0.0
    structured_data: bool = False
    items: list = field(default_factory=list)   # item specs (gridcrawl.items.ItemSpec) run on the executors
    render: bool = False
    wait_for: str | None = None
    page_types: dict[str, PageType] = field(default_factory=dict)

    def render_instruction(self, page_type: str | None, items=()) -> dict:
        """What a page of ``page_type`` adds to its grid thread's instruction: ``{"render": True}``
        (plus ``"waitFor"``: a CSS selector) when it is to be rendered — every page with
        ``render``, a page type with ``render = true``, or a page one of whose item specs
        ``items`` (:class:`gridcrawl.items.ItemSpec`, those that apply to it) says
        ``render = true`` — else ``{}``. The selector: the page type's, else an item spec's,
        else ``wait_for``."""
        options = self.page_types.get(page_type or "")
        wanting = [s for s in items if getattr(s, "render", False)]
        if not (self.render or (options is not None and options.render) or wanting):
            return {}
        wait_for = ((options.wait_for if options is not None else None)
                    or next((s.wait_for for s in wanting if s.wait_for), None) or self.wait_for)
        return {"render": True, "waitFor": wait_for} if wait_for else {"render": True}

    def __post_init__(self) -> None:
        from gridcrawl.items import check_page_types
        check_page_types(self.items, self.rules)  # ItemSpecError is a ValueError
        if self.order not in ORDERS:
            raise ValueError(f"--order must be one of {', '.join(ORDERS)}, not {self.order!r}")
        if not 0.0 <= self.min_relevance <= 1.0:
            raise ValueError(f"--min-relevance must be between 0 and 1, not {self.min_relevance!r}")
