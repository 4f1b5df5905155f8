"""Running one grid thread on an executor: check robots.txt and scope, fetch the URL, parse it if
it is HTML, return a :class:`~gridcrawl.protocol.PageResult` (the executor steps 2–5 of the
paper's grid flow).

Every hop of a fetch (the URL and each redirect target) passes, in order: the fetcher's own hop
check (private addresses), the thread's scope (``instruction["scope"]``: the client's allowed
domains; a hop outside is ``out_of_scope``) and robots.txt (``robots``, or
``robots_unreachable`` while robots.txt cannot be fetched). A body is parsed as HTML only when it
is declared HTML (or, without a ``Content-Type``, sniffed as HTML) and is not binary.

A thread whose instruction asks for rendering (``"render": true``, optionally ``"waitFor"``: a
CSS selector) is fetched the same way, then its HTML is opened in the executor's browser
(:mod:`gridcrawl.executor.render`) and the DOM the scripts leave is parsed instead of the bytes
fetched: the same links, canonical URLs, scope and rules as for a fetched page.

A semantic crawl (instruction ``"semantic": true``, :mod:`gridcrawl.semantic`) also downloads RDF
documents and parses them into triples (their http(s) URI objects are the links), and reads the
structured data (JSON-LD, microdata, RDFa, Open Graph) of every HTML page into triples.

Politeness inside the thread: the fetcher's :class:`~gridcrawl.executor.pacing.HostPacer` gets
the host's delay (the manager's for the host, or its robots.txt ``Crawl-delay``, whichever is
larger) before the first request, so the page waits out the delay after a robots.txt fetch and
every redirect hop waits it after the previous one.

What a page says about itself is reported, not acted on here (the application decides): the
body's SHA-256 ``digest``, the ``simhash`` of its visible text (only where someone reads it: when
the thread's URL has a shape, :func:`gridcrawl.urls.url_shape`, which is all the client's trap
detector looks at, or when the instruction says ``simhash_every_page``, as a recrawl comparing
SimHashes does; else ``None``), its ``canonical`` URL, and ``noindex`` from its robots meta tags
or ``X-Robots-Tag``. Only ``nofollow`` acts here: the page's
links are not reported at all, and ``rel="nofollow"`` links are left out unless the thread's
instruction says ``"follow_nofollow": true``. A thread whose instruction says ``"sitemap"`` reads
its URL as a sitemap (:mod:`gridcrawl.executor.sitemap`); one that says ``"sitemaps"`` (a seed)
also reports its host's sitemaps: the robots.txt ``Sitemap:`` lines, else ``/sitemap.xml``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from functools import lru_cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gridcrawl.protocol import Instruction, PageResult
from gridcrawl.redact import hide_passwords
from gridcrawl.settings import Settings
from gridcrawl.urls import Domains, domain_keys, in_scope, url_host, url_shape
from gridcrawl.executor.fetch import (ErrorKind, Fetcher, HopCheck, HopRefusal, chain_hop_checks,
                                      parse_retry_after)
from gridcrawl.executor.parse import (canonical_link, header_robots, html_document, looks_binary, meta_robots,
                                      parse_page, visible_text)
from gridcrawl.executor.robots import RobotsCache, product_token
from gridcrawl.executor.sitemap import MAX_SITEMAP_BYTES, TOO_LARGE, SitemapError, parse_sitemap
from gridcrawl.simhash import simhash
from gridcrawl.items import ItemSpecError, extract, page_for, specs_from_wire
from gridcrawl.rules import RuleError, apply_instruction
from gridcrawl.semantic import (RDF_ACCEPT, Limits, RDFError, RDFLimit, extract_structured, parse_rdf, rdf_format,
                                rdf_alternates, triple_links, wants_body)

log = logging.getLogger("gridcrawl.executor")

if TYPE_CHECKING:  # Playwright is imported only by executors started with --render
    from gridcrawl.executor.render import Renderer


@lru_cache(maxsize=8)
def _scope_keys(domains: tuple[str, ...]) -> Domains:
    """``domains`` as :func:`gridcrawl.urls.in_scope`'s set, made once for the many grid threads
    of a crawl that carry the same scope (thousands of seed hosts: 11 ms a thread otherwise)."""
    return domain_keys(domains)


def scope_check(domains: list[str]) -> HopCheck:
    """A hop check refusing URLs whose host is not one of ``domains`` or their subdomains
    (:func:`gridcrawl.urls.in_scope`), as ``HopRefusal(OUT_OF_SCOPE, ...)``."""
    domains = _scope_keys(tuple(map(str, domains)))

    def check(url: str) -> HopRefusal | None:
        host = url_host(url)
        if in_scope(host, domains):
            return None
        return HopRefusal(ErrorKind.OUT_OF_SCOPE, f"{host or url!r} is outside the crawl's scope"
                          + (f" (--allow-domain {host} adds it)" if host else ""))

    return check


def conditional_headers(instruction: Instruction | dict | None, now: float | None = None) -> dict[str, str] | None:
    """The conditional request headers of a recrawl's ``instruction`` (``ifNoneMatch``: the
    stored ETag, ``ifModifiedSince``: the stored Last-Modified; RFC 9110 §13.1.2, §13.1.3), or
    ``None`` when it has none. Values that are not short single-line text are dropped, so a
    hostile stored header cannot inject another header.

    A stored Last-Modified that is not a date before ``now`` (POSIX seconds; default: this
    machine's clock) is not sent: a server whose clock was ahead (or that dated a file in the
    future) answers an ``If-Modified-Since`` of that date with ``304`` for as long as the page's
    new Last-Modified is earlier, and most servers compare so (the page's date not after the one
    asked: werkzeug, Django, Express). Every edit until that date went unseen, the page counted
    "not modified" and visited less and less often. Without it the page is fetched in full and
    compared by digest (an ETag, evaluated first, is still sent).
    """
    instruction = Instruction.read(instruction)
    headers = {}
    for name, value in (("If-None-Match", instruction.if_none_match),
                        ("If-Modified-Since", instruction.if_modified_since)):
        if value and len(value) <= 1024 and value.isprintable():
            headers[name] = value
    since = headers.get("If-Modified-Since")
    if since is not None and (parse_retry_after(since, now) or 0.0) > 0.0:  # seconds until that date
        del headers["If-Modified-Since"]
    return headers or None


def visit(fetcher: Fetcher, url: str, *, store_content: bool = True, instruction: Instruction | dict | None = None,
          robots: RobotsCache | None = None, parse_gate: threading.Semaphore | None = None,
          semantic_limits: Limits | None = None, plugins: dict | None = None,
          plugin_timeout: float = 10.0, renderer: Renderer | None = None,
          delay: float = 0.0, max_crawl_delay: float = 30.0, sitemap_fetcher: Fetcher | None = None,
          max_links: int = Settings.max_links_per_page, on_items=None) -> PageResult:
    """Fetch ``url`` with ``fetcher`` and, for an HTML page, extract its links.

    Args:
        fetcher: the executor's page fetcher.
        url: the grid thread's URL (canonical).
        store_content: put the body in ``PageResult.content`` (decoded text for HTML; bytes for
            other types only when the fetcher keeps non-HTML bodies).
        instruction: the thread's :class:`~gridcrawl.protocol.Instruction` (or its wire map;
            keys of the wrong type are ignored); ``{"scope": [domain, ...]}`` makes every hop
            outside those domains fail as ``out_of_scope`` (no scope key: no check);
            ``"content": false`` leaves the body out of the result (the application does not
            store it); with
            ``keepRules``/``followRules`` (:func:`gridcrawl.rules.instruction_for`) the rules are
            applied to the parsed page: ``links`` holds only the followed links as
            ``[url, anchor_text, to_type]`` and ``kept`` the kept ones as ``[url, rule]``
            (rules that cannot be applied, such as a pattern that is no regular expression,
            fail the page as ``bad_instruction``, logged in one line);
            ``ifNoneMatch``/``ifModifiedSince`` (a recrawl, :func:`conditional_headers`) are
            sent as conditional request headers (not for a page to render: its scripts may
            load what changed): a ``304 Not Modified`` comes back with no body, nothing
            parsed; ``"semantic": true`` makes it a semantic crawl (see the module
            docstring).
        robots: the executor's robots.txt cache, or ``None`` to ignore robots.txt.
        parse_gate: a semaphore held while the page is parsed (the executor's
            ``parse_threads``): it bounds the page trees alive at once, so an executor's memory
            does not grow with its fetching threads. ``None``: no bound. It is let go before
            an extractor plugin runs (one that waited out its ``plugin_timeout`` held every
            other page of the executor back): a page waiting on a plugin holds its tree, so
            the trees alive are then bounded by the executor's threads.
        semantic_limits: the bounds of one page's RDF or structured-data parse (the executor's
            ``rdf_max_bytes``, ``max_triples``, ``rdf_parse_deadline``); defaults of
            :class:`gridcrawl.semantic.Limits` when ``None``.
        renderer: the executor's browser (``--render``), used when the instruction carries
            ``"render": true`` (and ``"waitFor"``: a CSS selector to wait for). Without one such
            a thread fails as ``render`` (the manager retries it, on an executor that renders).
        delay: the manager's delay for this URL's host, seconds (the job's ``delay``); with the
            robots.txt Crawl-delay (capped at ``max_crawl_delay`` seconds) it spaces the
            requests of this thread to the host (robots.txt, redirect hops) through the
            fetcher's pacer.
        sitemap_fetcher: the fetcher for sitemap threads (any content type, bodies up to
            50 MiB); ``None``: one derived from ``fetcher`` for this call.
        plugins: the extractor plugins installed on this executor, by name
            (:func:`gridcrawl.plugins.installed_plugins`), for item specs that name one.
        plugin_timeout: seconds a plugin may spend on one page before its items fail.
        max_links: links of the page reported, at most: the first in document order (setting
            ``max_links_per_page``; a page that has more is logged at INFO).

    Items: when ``instruction["items"]`` holds item specs (:mod:`gridcrawl.items`), they are
    run on the parsed page (:func:`extract_items`); a spec that cannot run fails the page's
    items (``item_errors``), never the page or its links. ``on_items``, when given, is called
    with the :class:`~gridcrawl.items.Extraction` (``gridcrawl fetch`` shows the items the
    ``[item.where]`` conditions dropped, which the result does not carry).

    Returns a :class:`PageResult`: times in seconds, sizes in bytes, ``links`` as
    ``[canonical_url, anchor_text]`` pairs, ``digest`` the hex SHA-256 of the body read (after
    decompression; of the rendered DOM for a rendered page; ``None`` without a body),
    ``error_kind`` set when the fetch failed or was refused (``robots``: disallowed, not
    fetched), ``crawl_delay`` the URL's host's robots.txt delay in seconds (or ``None``). Never
    raises for anything the web sends.
    """
    instruction = Instruction.read(instruction)
    if not instruction.content:  # the application does not store bodies
        store_content = False
    # a seed's redirects may leave the scope: the client adds their host to it (Instruction.seed)
    checks = [scope_check(instruction.scope) if instruction.scope is not None and not instruction.seed else None]
    crawl_delay = None
    pacer = fetcher.pacer
    if pacer is not None and robots is None:
        pacer.set_delay(url, delay)
    if robots is not None:
        # the first URL is checked here (scope first: no robots.txt fetch for a foreign host),
        # every redirect hop by the fetcher through robots.hop_check
        refusal = checks[0](url) if checks[0] is not None else None
        requested = False  # a request to the host: robots.txt fetched now
        if refusal is None:
            decision = robots.decide(url)
            crawl_delay, requested = decision.crawl_delay, decision.fetched
            refusal = decision.refusal()
            if pacer is not None:
                pacer.set_delay(url, max(delay, min(crawl_delay or 0.0, max_crawl_delay)))
        if refusal is not None:
            return PageResult(url=url, final_url=url, error_kind=ErrorKind(refusal.kind).value,
                              error=refusal.reason, retry_after=refusal.retry_after, crawl_delay=crawl_delay,
                              requested=requested)
        robots_check = _robots_hop_check(robots, url, max_crawl_delay) if pacer is not None else robots.hop_check
        # ``url`` itself was allowed just above: checked again as the fetch's first hop, a
        # robots.txt of 25,000 wildcard rules cost each page two matches of ~60 ms, not one
        checks.append(lambda hop: None if hop == url else robots_check(hop))
    if instruction.sitemap:
        return _visit_sitemap(sitemap_fetcher or fetcher.derive(keep_non_html=True, max_body_bytes=MAX_SITEMAP_BYTES),
                              url, chain_hop_checks(*checks[1:]), crawl_delay, close=sitemap_fetcher is None,
                              headers=conditional_headers(instruction), scope_check=checks[0])
    semantic = instruction.semantic
    # a page to render is asked for in full: an unchanged shell says nothing of what its scripts load
    headers = None if instruction.render else conditional_headers(instruction)
    if semantic:  # RDF documents too, asked for by content negotiation
        headers = {**(headers or {}), "Accept": RDF_ACCEPT}
    # the scope before the SSRF guard: a redirect out of it is out_of_scope, its host not looked up
    fetched = fetcher.fetch(url, scope_check=checks[0], hop_check=chain_hop_checks(*checks[1:]), headers=headers,
                            body_wanted=wants_body if semantic else None)
    result = PageResult(
        url=url, final_url=fetched.final_url or url, status=fetched.status,
        content_type=fetched.content_type, size=fetched.size, fetch_seconds=fetched.seconds,
        error_kind=fetched.error_kind.value if fetched.error_kind else None, error=fetched.error,
        retry_after=fetched.retry_after, redirects=list(fetched.redirects), crawl_delay=crawl_delay,
        headers=dict(fetched.headers) or None)
    if fetched.ok and instruction.sitemaps:
        result.sitemaps = _host_sitemaps(robots, result.final_url)
    body = fetched.body
    if not fetched.ok:
        return result
    token = product_token(fetcher.user_agent)
    robots_tags = header_robots(fetched.headers.get("x-robots-tag"), token)
    result.noindex = "noindex" in robots_tags
    result.nofollow = "nofollow" in robots_tags
    if body is None:
        return result
    result.digest = hashlib.sha256(body).hexdigest()
    html = html_document(fetched.content_type, body)
    limits = semantic_limits or Limits()
    fmt = rdf_format(fetched.content_type, result.final_url, body) if semantic and not html else None
    if fmt is not None:
        with parse_gate if parse_gate is not None else contextlib.nullcontext():
            _visit_rdf(result, body, fmt, limits, max_links)
        result.content = body if store_content and fetcher.keep_non_html else None
        return result
    if not html or looks_binary(body, fetched.content_type):
        # not HTML, or binary served as HTML: never parsed; the body is kept only when asked for
        result.content = body if store_content and fetcher.keep_non_html else None
        return result
    content_type = fetched.content_type
    if instruction.render:
        if renderer is None:
            result.error_kind = ErrorKind.RENDER.value
            result.error = "this executor has no browser (start it with --render)"
            return result
        wait_for = instruction.wait_for
        rendered = renderer.render(
            result.final_url, status=fetched.status, content_type=content_type, body=body,
            scope_check=checks[0], navigation_check=chain_hop_checks(*checks[1:]),
            resource_check=robots.hop_check if robots else None, headers=fetched.headers,
            wait_for=wait_for or None,
            max_bytes=fetcher.max_body_bytes)
        result.render_seconds = rendered.seconds
        result.refused_requests = rendered.refused
        if not rendered.ok:
            result.error_kind, result.error = rendered.error_kind.value, rendered.error
            return result
        if rendered.document is not None:  # its script sent it to a PDF, JSON ...: as an HTTP redirect there
            result.final_url = rendered.final_url
            result.status, result.content_type, body = rendered.document
            result.size = len(body)
            result.digest = hashlib.sha256(body).hexdigest()
            result.content = body if store_content and fetcher.keep_non_html else None
            return result
        result.final_url = rendered.final_url
        body, content_type = rendered.html.encode("utf-8"), "text/html; charset=utf-8"
        result.size = len(body)
        result.digest = hashlib.sha256(body).hexdigest()  # of the document stored: the rendered DOM
        del rendered
    with contextlib.ExitStack() as gate:
        if parse_gate is not None:
            gate.enter_context(parse_gate)
        started = time.perf_counter()
        # one link past the bound is read, so that a page of exactly max_links links is not taken for a cut one
        page = parse_page(body, result.final_url, content_type,
                          skip_nofollow=not instruction.follow_nofollow, max_links=max_links + 1)
        if len(page.links) > max_links:
            log.info("%s: the first %d links are followed, no more (max_links_per_page)", hide_passwords(url),
                     max_links)
            result.links_cut = max_links
            del page.links[max_links:]
        result.title = page.title
        result.encoding = page.encoding
        robots_tags |= meta_robots(page.document, token, page.metas)
        result.noindex = "noindex" in robots_tags
        result.nofollow = "nofollow" in robots_tags
        result.canonical = canonical_link(page.document, page.base_url, fetched.headers.get("link"))
        if result.nofollow:
            pass  # the page asks that none of its links be followed: none are reported
        elif instruction.has_rules:
            # keep/follow rules (gridcrawl.rules): every rule applied to this one parse of the page
            try:
                follow, keep = apply_instruction(page.document, result.final_url, page.links,
                                                 {"keepRules": instruction.keep_rules,
                                                  "followRules": instruction.follow_rules}, max_links)
            except RuleError as exc:  # the client's instruction, not the page nor a bug of ours: one line
                log.warning("%s: %s", hide_passwords(url), exc)
                result.error_kind, result.error = ErrorKind.BAD_INSTRUCTION.value, str(exc)[:1000]
                return result
            result.links = [[url, text, to_type] for url, text, to_type in follow]
            result.kept = [[url, rule] for url, rule in keep]
        else:
            result.links = [[link.url, link.text] for link in page.links]
        text = page.decoded if (store_content or semantic or instruction.items) else None  # decoded once
        if semantic:
            structured = extract_structured(page.document, text, result.final_url, limits)
            result.triples = structured.triples
            if structured.errors or any(structured.data.values()):  # nothing found: nothing kept
                result.structured = {**structured.data, "errors": structured.errors}
            if not result.nofollow and not instruction.has_rules:
                known = {link[0] for link in result.links}
                result.links += [link for link in rdf_alternates(page.document, page.base_url or result.final_url)
                                 + triple_links(structured.triples) if link[0] not in known and not known.add(link[0])]
                del result.links[max_links:]
        if store_content:
            result.content = text
        result.parse_seconds = time.perf_counter() - started
        if instruction.items:
            if any(isinstance(entry, dict) and "plugin" in entry for entry in instruction.items):
                gate.close()  # a plugin is user code that may wait up to plugin_timeout: not holding the gate
            extract_items(result, page, text, instruction.items, plugins, plugin_timeout, on_items)
        if instruction.simhash_every_page or url_shape(url) is not None:  # its only readers
            started = time.perf_counter()  # last: visible_text strips scripts (JSON-LD ...) from the tree
            result.simhash = simhash(visible_text(page.document))
            result.parse_seconds += time.perf_counter() - started
        del page  # the tree goes before another worker may parse
    return result


def extract_items(result: PageResult, page, text: str, entries: list, plugins: dict | None,
                  plugin_timeout: float, on_items=None) -> None:
    """Run the item specs ``entries`` (an instruction's ``items``) on the parsed ``page``
    (:class:`~gridcrawl.executor.parse.ParsedPage`, decoded ``text``) and put the items, the
    misses and the errors in ``result``; ``result.extract_seconds`` gets the CPU seconds spent
    (this thread's). Specs that are not valid fail the page's items, not the page.
    ``on_items(extraction)``, when given, gets the :class:`~gridcrawl.items.Extraction`."""
    started = time.thread_time()
    try:
        specs = specs_from_wire(entries)
    except (ItemSpecError, TypeError, ValueError) as exc:
        result.item_errors = [["*", f"invalid item specs: {exc}"[:1000]]]
        return
    jsonld = result.structured.get("json-ld") if isinstance(result.structured, dict) else None
    view = page_for(result.url, result.final_url, result.status, result.headers, page.document, text,
                    [[link.url, link.text] for link in page.links], page.base_url,
                    jsonld=jsonld)  # a semantic crawl read the page's JSON-LD already
    try:
        found = extract(specs, view, plugins=plugins, plugin_timeout=plugin_timeout)
    except Exception as exc:  # a page lxml/parsel cannot evaluate: its items fail, not its links
        result.item_errors = [[spec.type, f"{type(exc).__name__}: {exc}"[:1000]] for spec in specs]
        return
    result.items, result.item_misses, result.item_errors = found.items, found.misses, found.errors
    result.extract_seconds = time.thread_time() - started
    if on_items is not None:
        on_items(found)


def _visit_rdf(result: PageResult, body: bytes, fmt: str, limits: Limits, max_links: int) -> None:
    """Parse an RDF document into ``result``: its triples, and its first ``max_links`` http(s)
    URI objects as links (``max_links_per_page``, as for an HTML page: it was always 10,000);
    a document that does not parse or passes a bound fails as ``rdf_parse`` / ``rdf_limit``
    (the ``rdf_parse`` message of one whose type is no RDF type says its syntax ``fmt`` was
    sniffed: :func:`gridcrawl.semantic.rdf_format`)."""
    started = time.perf_counter()
    try:
        result.triples = parse_rdf(body, result.final_url, fmt, limits)
        result.links = triple_links(result.triples, max_links + 1)  # one past the bound: is there more?
        if len(result.links) > max_links:
            log.info("%s: the first %d links are followed, no more (max_links_per_page)",
                     hide_passwords(result.url), max_links)
            result.links_cut = max_links
            del result.links[max_links:]
    except RDFLimit as exc:
        result.error_kind, result.error = ErrorKind.RDF_LIMIT.value, str(exc)
    except RDFError as exc:
        result.error_kind, result.error = ErrorKind.RDF_PARSE.value, str(exc)
        if rdf_format(result.content_type, "") is None:  # not an RDF type: the syntax was sniffed
            served = result.content_type.split(";", 1)[0].strip() if result.content_type else "no type"
            result.error += f" (served as {served}: read as {fmt} by its URL's suffix or its first bytes)"
    result.parse_seconds = time.perf_counter() - started


def _robots_hop_check(robots: RobotsCache, url: str, max_crawl_delay: float) -> HopCheck:
    """robots.txt's hop check that also gives the fetcher's pacer the Crawl-delay of a redirect
    hop's host when the hop leaves ``url``'s host (that host's delay then spaces the hops)."""
    host = url_host(url)
    pacer = robots.fetcher.pacer if hasattr(robots.fetcher, "pacer") else None

    def check(hop: str) -> HopRefusal | None:
        decision = robots.decide(hop)
        if pacer is not None and url_host(hop) != host:
            pacer.set_delay(hop, min(decision.crawl_delay or 0.0, max_crawl_delay))
        return decision.refusal()

    return check


def _host_sitemaps(robots: RobotsCache | None, url: str) -> list[str]:
    """The sitemaps of ``url``'s host: the ``Sitemap:`` lines of its robots.txt (RFC 9309 §2.2.4
    leaves them to other records; protego reads them), else ``/sitemap.xml`` at its root."""
    found = robots.sitemaps(url) if robots is not None else []
    if found:
        return found
    parts = urlsplit(url)
    return [f"{parts.scheme}://{parts.netloc}/sitemap.xml"]


def _visit_sitemap(fetcher: Fetcher, url: str, hop_check: HopCheck | None, crawl_delay: float | None,
                   close: bool, headers: dict[str, str] | None = None,
                   scope_check: HopCheck | None = None) -> PageResult:
    """Fetch and read the sitemap at ``url`` (closing ``fetcher`` afterwards when ``close``):
    its pages go to ``sitemap_pages`` as ``[url, lastmod]``, the sitemaps an index names to
    ``sitemaps``. A body that is no readable sitemap, or is over the sitemaps.org size limit
    (decompressed from a ``.gz`` file or from a ``Content-Encoding``: the fetcher's
    ``too_large``), fails as ``bad_sitemap``, unless it is an HTML page (a "soft 404": no failure, as a 404);
    entries ignored (past 50,000, not http(s)) are counted in ``error`` of an otherwise
    successful visit. A sitemap that is not there (404, 410) is no
    failure: ``error_kind`` stays ``None``, ``error`` says ``no sitemap here (HTTP 404)``.
    ``headers``: a recrawl's conditional request headers (:func:`conditional_headers`); a
    ``304 Not Modified`` is returned as it is (no body, nothing read). The response headers are
    returned (``headers``) so that the client keeps the sitemap's validators. ``scope_check``:
    the crawl's scope, checked on every hop before the fetcher's SSRF guard (``Fetcher.fetch``)."""
    try:
        fetched = fetcher.fetch(url, hop_check=hop_check, scope_check=scope_check, headers=headers)
    finally:
        if close:
            fetcher.close()
    result = PageResult(
        url=url, final_url=fetched.final_url or url, status=fetched.status, content_type=fetched.content_type,
        size=fetched.size, fetch_seconds=fetched.seconds,
        error_kind=fetched.error_kind.value if fetched.error_kind else None, error=fetched.error,
        retry_after=fetched.retry_after, redirects=list(fetched.redirects), crawl_delay=crawl_delay,
        headers=dict(fetched.headers) or None)
    if fetched.error_kind == ErrorKind.TOO_LARGE:
        # the limit is sitemaps.org's, on the sitemap uncompressed, whatever the transport: the
        # same failure as a .xml.gz file that decompresses past it (max_body_bytes plays no part)
        result.error_kind, result.error = ErrorKind.BAD_SITEMAP.value, TOO_LARGE
        return result
    if fetched.error_kind == ErrorKind.HTTP_STATUS and fetched.status in (404, 410):
        # most hosts have nothing at /sitemap.xml: that is no failure of the crawl
        result.error_kind, result.error = None, f"no sitemap here (HTTP {fetched.status})"
        return result
    if not fetched.ok or fetched.body is None:
        return result
    result.digest = hashlib.sha256(fetched.body).hexdigest()
    try:
        parsed = parse_sitemap(fetched.body)
    except SitemapError as exc:
        if html_document(fetched.content_type, fetched.body):
            # a "soft 404": a site's HTML page (its home, a "not found" page) answering for /sitemap.xml
            result.error = f"no sitemap here (an HTML page, HTTP {fetched.status})"
            return result
        result.error_kind, result.error = ErrorKind.BAD_SITEMAP.value, str(exc)
        return result
    if parsed.index:
        result.sitemaps = [loc for loc, _ in parsed.entries]
    else:
        result.sitemap_pages = [[loc, lastmod] for loc, lastmod in parsed.entries]
    notes = [f"{parsed.ignored} entr{'y' if parsed.ignored == 1 else 'ies'} ignored (over the 50,000 limit or not "
             "http(s) URLs)"] if parsed.ignored else []
    if parsed.broken:
        notes.append(parsed.broken)
    if notes:
        result.error = "; ".join(notes)
    return result
