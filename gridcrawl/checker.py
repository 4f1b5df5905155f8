"""``gridcrawl fetch URL``: one URL fetched and parsed exactly as an executor would, for a user to look at.

The first hour with a crawler goes to questions about single pages: why does this one fail,
what does the crawler get back through our proxy, which of its links will be followed? Nutch
answers them with ``bin/nutch parsechecker``, Scrapy with ``scrapy fetch`` and ``scrapy parse``.
:func:`check_url` runs the executor's own code path (:func:`gridcrawl.executor.page.visit`)
once, in this process, with the executor's fetching settings (user agent, timeouts, proxy,
``--netrc`` logins, ``--ca-bundle``, robots.txt, the SSRF guard) and the scope a crawl from that
URL would have, and sorts the page's links into those the crawl would follow (depth 1) and the
rest; with keep/follow rules (``--rules``) it shows what they keep and follow, with item specs
(``--extract``) the items they find, as Scrapy's ``scrapy parse`` does for a callback, with
``--structured-data`` the RDF triples a semantic crawl reads, and with ``--render`` it renders
the page in a headless browser first. Nothing is stored and no manager
is involved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from gridcrawl.protocol import PageResult
from gridcrawl.settings import Settings


@dataclass
class Check:
    """What :func:`check_url` found.

    ``page``: the :class:`~gridcrawl.protocol.PageResult` an executor would send (``content``
    left out unless asked for); ``route``: how the fetch went (``"directly"`` or ``"through the proxy URL"``,
    password masked); ``scope``: the allowed domains; ``followed`` and ``outside``: the page's
    links as ``[canonical URL, anchor text]`` (with keep/follow rules ``[URL, anchor, to_type]``
    of the links their follow rules match), those a crawl from the URL would queue at depth 1
    and the others (another host, a crawler-trap path, or past ``max_depth``). The links the
    keep rules match are ``page.kept`` (``[URL, rule number]``). ``item_types``: the types of
    the item specs that applied to the page (None when no spec was given); ``item_dropped``:
    ``[type, position]`` of each item their ``[item.where]`` conditions left out;
    ``item_skipped``: why each spec that did not apply to the page did not (its ``url`` or
    ``page_type``, :meth:`gridcrawl.items.ItemSpec.why_not`).
    """

    page: PageResult
    route: str
    scope: list[str]
    followed: list[list] = field(default_factory=list)
    outside: list[list] = field(default_factory=list)
    item_types: list[str] | None = None
    item_dropped: list[list] = field(default_factory=list)
    item_skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the page was fetched (and parsed when HTML): no error kind."""
        return self.page.error_kind is None


def check_url(url: str, settings: Settings, *, allow_domains: Iterable[str] = (),
              allow_private: Iterable[str] = (), items: Sequence = (), rules: Sequence = (),
              page_type: str | None = None, render: bool = False, wait_for: str | None = None,
              page_types: dict | None = None, structured_data: bool = False, body: bool = False) -> Check:
    """Fetch and parse ``url`` as an executor of a crawl seeded with it would.

    Args:
        url: the URL (canonicalised first, as a seed).
        settings: the fetching settings (validated).
        allow_domains: more domains in scope besides the URL's host (``--allow-domain``).
        allow_private: CIDRs the SSRF guard lets through (the URL's own private address
            included by the caller, as ``gridcrawl run`` does for its seeds).
        items: item specs (:class:`gridcrawl.items.ItemSpec`, an ``--extract`` file's): those
            that apply to the URL run as on an executor, with the extractor plugins installed
            here; the page's ``items``, ``item_misses`` and ``item_errors`` tell what they found,
            ``Check.item_dropped`` what their ``[item.where]`` conditions left out.
        rules: keep/follow rules (:class:`gridcrawl.rules.Rule`, a ``--rules`` file's): the
            instruction of ``page_type`` (:func:`gridcrawl.rules.instruction_for`; default the
            base type, a seed's) is applied as on an executor.
        page_type: the page's type for ``rules`` and ``items`` (None: the base type).
        render: open the page in a headless browser first, as an executor started with
            ``--render`` does (:class:`gridcrawl.executor.render.Renderer`; the browser's
            requests go through the same fetcher); ``wait_for``: a CSS selector it waits for.
        page_types: the rules file's page type options (``{NAME: PageType}``,
            :func:`gridcrawl.rules.load_page_types`). The page is rendered as a crawl would
            render it (:meth:`gridcrawl.client.frontier.Strategy.render_instruction`): with
            ``render``, when ``page_type`` says ``render = true``, or when an item spec that
            applies to it does, waiting for the page type's, the spec's or ``wait_for``'s selector.
        structured_data: read the page as a semantic crawl does (RDF documents, JSON-LD,
            microdata, RDFa, Open Graph: the page's ``triples`` and ``structured``).
        body: keep the page's body in ``page.content`` (the decoded text an executor parsed,
            the rendered DOM with ``render``); left out otherwise.

    Returns:
        A :class:`Check`. A page that fails is a result (``page.error_kind``), not an exception.

    Raises:
        gridcrawl.urls.InvalidURL: ``url`` cannot be crawled.
        ValueError: a setting cannot work (proxy, netrc, CA bundle, a bad CIDR).
        gridcrawl.errors.RenderUnavailable: ``render`` without Playwright or a browser.
    """
    from gridcrawl.client.frontier import Pending, Scope, Strategy
    from gridcrawl.executor.fetch import Fetcher
    from gridcrawl.executor.page import visit
    from gridcrawl.executor.robots import RobotsCache
    from gridcrawl.items import spec_to_wire, specs_for
    from gridcrawl.plugins import installed_plugins
    from gridcrawl.rules import BASE, instruction_for
    from gridcrawl.semantic import Limits
    from gridcrawl.urls import canonical_url, fingerprint, url_host

    canonical = canonical_url(url)
    domains = list(dict.fromkeys([url_host(canonical), *(d.lower().strip(".") for d in allow_domains)]))
    scope = Scope(domains, settings.max_depth)
    scope.follow_nofollow = settings.follow_nofollow
    page_type = page_type or BASE
    instruction = {**scope.instruction(), "content": body, "seed": True}  # as a crawl's seed
    if rules:
        instruction.update(instruction_for(page_type, canonical, rules))
    applying = specs_for(items, canonical, page_type)
    if applying:
        instruction["items"] = [spec_to_wire(spec) for spec in applying]
    if structured_data:
        instruction["semantic"] = True
    instruction.update(Strategy(render=render, wait_for=wait_for, page_types=page_types or {})
                       .render_instruction(page_type, applying))
    render = bool(instruction.get("render"))
    if wait_for and not render:
        from gridcrawl.rules import WAIT_FOR_UNUSED
        raise ValueError(WAIT_FOR_UNUSED)
    fetcher = Fetcher.from_settings(settings, allow_private)
    proxy = fetcher.proxy
    robots = RobotsCache.for_fetcher(fetcher, retry_after=settings.robots_retry) if settings.obey_robots else None
    renderer = None
    dropped: list[list] = []
    try:
        if render:
            from gridcrawl.executor.render import Renderer
            renderer = Renderer(fetcher, browser_path=settings.browser_path or None, max_pages=1,
                                deadline=settings.render_timeout, idle_timeout=settings.render_idle).start()
        page = visit(fetcher, canonical, instruction=instruction, robots=robots,
                     semantic_limits=Limits(max_bytes=settings.rdf_max_bytes, max_triples=settings.max_triples,
                                            deadline=settings.rdf_parse_deadline),
                     delay=settings.download_delay, max_crawl_delay=settings.max_crawl_delay,
                     plugins=installed_plugins() if applying else None, plugin_timeout=settings.plugin_timeout,
                     renderer=renderer, max_links=settings.max_links_per_page,
                     on_items=lambda found: dropped.extend(found.dropped))
    finally:
        if renderer is not None:
            renderer.close()
        fetcher.close()
        if robots is not None:
            robots.fetcher.close()
    scope.redirected_seed(Pending(0, canonical, fingerprint(canonical), 0), page)  # a redirect's host joins
    check = Check(page, "directly" if proxy is None or not proxy.applies_to(canonical)
                  else f"through the proxy {proxy.shown}", scope.allowed_domains,
                  item_types=[spec.type for spec in applying] if items else None, item_dropped=dropped,
                  item_skipped=[why for spec in items if (why := spec.why_not(canonical, page_type))])
    for link in page.links:
        (check.followed if scope.allows(link[0], 1) else check.outside).append(list(link))
    return check


__all__ = ["Check", "check_url"]
