"""The grid's message protocol: every message the manager, executors and clients exchange.

This module is the one definition of the wire format. A message is three ZeroMQ frames::

    [version] [type] [body]

* ``version`` — ``PROTOCOL_VERSION`` (bytes ``b"GC1"``); a peer speaking another version is refused.
* ``type`` — the message's type name in ASCII (``b"register"``, ``b"assign"`` ...).
* ``body`` — a msgpack map of the message's fields (msgpack carries bytes and text alike);
  fields at their default value are left out.

A ROUTER socket prepends the peer's routing id, which the server loop strips before :func:`decode`.
The messages and their parts are typed structs (msgspec_): :func:`decode` checks every frame
against them, in C, and raises :class:`ProtocolError` on anything else (unknown or missing fields,
wrong types, an unknown :class:`ErrorKind`), so a malformed or hostile peer can never reach the
manager's logic. msgspec replaced a hand-written checker over msgpack: the manager's CPU per grid
thread fell from 216 to 150 µs (``benchmarks/grid_overhead.py``, issue 13;
benchmarks/results/2026-11-23-grid-overhead-msgspec.md).

The manager does not decode what it only carries: with ``relay=True`` (the manager's server loop)
a :class:`Result`'s page stays msgpack bytes (a :class:`RelayedPage`, of which only the few
fields the manager schedules by are read) and goes on to the client as it came, in the
:class:`FinishedThread` of a :class:`ThreadDone`; the client checks it in full there, page by page (a
page that does not decode is a failed thread, not a refused message). An executor encodes a
page once, in the worker that fetched it, and its text only as far as needed: a body that was
valid UTF-8 travels as those bytes (:class:`Utf8Text`), the same msgpack str on the wire.

.. _msgspec: https://jcristharif.com/msgspec/

The table of messages (direction, fields) is in README.md, generated from this module by
``python -m gridcrawl.protocol``.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Collection
from typing import Annotated, Any, ClassVar, Literal

import msgspec
from msgspec import Meta, field

from gridcrawl.errors import ProtocolError  # noqa: F401 (re-exported)

PROTOCOL_VERSION = b"GC1"

#: Longest Retry-After (a page's ``retry_after``) the grid honours, seconds: the longest a 429/503
#: pauses its host, and past which its URL is not retried in this crawl (a Retry-After of a day
#: must not keep a crawl open); the executor says so in the page's error.
MAX_RETRY_AFTER = 600.0

log = logging.getLogger("gridcrawl.protocol")

#: The largest body (bytes) a manager reads of a message from a peer that has not said hello
#: (not registered, no application opened on its connection): a larger one is refused by its
#: length, before it is decoded (decoding costs up to 64 bytes of memory and about 100 ns per
#: byte of body: 10 MiB of empty maps in a heartbeat took a manager to 800 MB for 0.9 s, in an
#: ``open`` to 880 MB for 4.8 s). The largest hello is far below: a ``register`` with 64
#: capabilities of 128 characters, a 255-character name and host, a 1,024-character os, arch and
#: password is about 12 KB, a ``control`` about 1.2 KB, an ``open`` without its instruction
#: about 1.5 KB, and a client sends an instruction over :data:`MAX_HELLO_INSTRUCTION` with its
#: first ``submit`` instead; any other message of such a peer is refused anyway.
MAX_HELLO_BYTES = 64 * 1024
#: The largest instruction (msgpack bytes) a client puts in its ``open``: a larger one (a crawl of
#: some 2,500 seed hosts or more: 20,000 make a scope of 250 KB) goes with the first ``submit``
#: of the connection, so that a hello stays under :data:`MAX_HELLO_BYTES`.
MAX_HELLO_INSTRUCTION = 32 * 1024
#: A ``submit`` or ``open`` body longer than this is decoded by the manager with its instructions
#: left as msgpack bytes (:class:`PendingInstruction`): the manager reads each one only once its
#: length is within what it keeps (``MAX_THREAD_INSTRUCTION`` and ``MAX_APPLICATION_INSTRUCTION``
#: of :mod:`gridcrawl.manager.core`) and stops at the first over its bounds. Decoded whole, a
#: 30 MiB submit of empty maps took a registered client's manager to 2.5 GB and stood its loop
#: still for 3.4 s before the instruction was refused. Smaller bodies (a client's submit of
#: 1,000 threads is about 100 KB) are decoded whole, as before: they cannot hold much.
DECODE_WHOLE_BYTES = 1024 * 1024
#: Most entries of the lists a peer sends the manager (attempts started, handed back or finished
#: in one message), and most grid threads in one ``submit``: refused by the decoder from the
#: list's length, before its items are read.
MAX_BATCH = 100_000
MAX_SUBMIT = 10_000
#: Most figures in a heartbeat (an executor sends 8).
MAX_FIGURES = 64
#: Most capabilities an executor declares (:class:`Register`) and most a grid thread needs
#: (:class:`ThreadSpec`), each 1 to :data:`CAPABILITY_LENGTH` printable characters without
#: spaces: the manager refuses more. Every extractor plugin installed on an executor takes two
#: (``plugin:NAME`` and ``plugin:NAME@VERSION``), ``render`` one.
MAX_CAPABILITIES = 64
CAPABILITY_LENGTH = 128
#: Most capabilities (needs) the decoder reads of a ``register`` (a grid thread): a longer list
#: is refused unread (20 million of them in a registered executor's ``register`` took its manager
#: to 250 MB for 1.8 s); one over :data:`MAX_CAPABILITIES` up to this is refused by the manager
#: saying why, so that an executor with too many plugins is told rather than left waiting.
Names = Annotated[list[str], Meta(max_length=16 * MAX_CAPABILITIES)]


class ErrorKind(str, enum.Enum):
    """Why a grid thread's page failed, or what the application decided about it; the value is
    the stable string sent over the wire (``PageResult.error_kind``) and stored
    (``visited_url.error_kind``, the manager's ``thread.error_kind``)."""

    TIMEOUT = "timeout"  #: connect/read timeout, or the whole-fetch deadline passed
    TOO_LARGE = "too_large"  #: body (after decompression) exceeded max_body_bytes
    REDIRECT_LOOP = "redirect_loop"  #: a URL came back in the redirect chain
    TOO_MANY_REDIRECTS = "too_many_redirects"  #: more than max_redirects hops
    CONNECTION = "connection"  #: refused, reset, DNS failure, TLS failure, a body cut short (retried)
    BAD_RESPONSE = "bad_response"  #: the server answered, not in usable HTTP: another protocol, headers past the limits, an undecodable body (not retried)
    HTTP_STATUS = "http_status"  #: final status >= 400
    INVALID_URL = "invalid_url"  #: not an http(s) URL with a host, or unparseable
    BLOCKED = "blocked"  #: the hop check refused a hop (e.g. a private address)
    ROBOTS = "robots"  #: robots.txt disallows the URL (or a redirect hop) for our user agent
    ROBOTS_UNREACHABLE = "robots_unreachable"  #: robots.txt gave 5xx/429 or no answer: disallowed for now
    OUT_OF_SCOPE = "out_of_scope"  #: a redirect hop left the crawl's allowed domains
    CRASH = "crash"  #: an unexpected exception on the executor; its message is kept in ``error``
    RENDER = "render"  #: the browser failed (died, did not answer), or the executor has none (retried elsewhere)
    RDF_PARSE = "rdf_parse"  #: an RDF document that does not parse, or refused XML entities (gridcrawl.semantic)
    RDF_LIMIT = "rdf_limit"  #: an RDF document past rdf_max_bytes, max_triples or rdf_parse_deadline
    BAD_SITEMAP = "bad_sitemap"  #: a sitemap thread's body is no readable sitemap (or over 50 MiB)
    BAD_INSTRUCTION = "bad_instruction"  #: the thread's keep/follow rules cannot be applied (a pattern that is no regular expression ...)
    # Set by the manager or the client, never sent by an executor:
    POISON = "poison"  #: the thread failed for good: its executors died or timed out ``max_attempts`` times
    LOST = "lost"  #: finished without a page (the manager had none to give)
    GONE = "gone"  #: a stored document answered 404/410 on a recrawl
    # Decisions of the application about a fetched page (recorded in visited_url.error_kind):
    TRAP = "trap"  #: not followed: its URL shape repeats near-identical pages (``error`` names the shape)
    DUPLICATE = "duplicate"  #: its canonical link or body digest names a page stored already
    NOINDEX = "noindex"  #: robots meta tag / X-Robots-Tag noindex: kept out of ``document``


#: Error kinds of URLs that robots.txt disallows: not fetched, as the site asks, and no failure
#: (Scrapy counts them apart too, ``robotstxt/forbidden``). The client's summary and the manager's
#: per-application figures (the dashboard's and ``/metrics``' errors) leave them out of the
#: errors; ``robots_unreachable``, a robots.txt that did not answer, is a failure.
DISALLOWED = (ErrorKind.ROBOTS.value,)

#: An error kind on the wire: one of :class:`ErrorKind`'s values, decoded as plain text.
ErrorKindName = Literal[tuple(kind.value for kind in ErrorKind)]  # type: ignore[valid-type]

#: A link found on a page: ``[canonical_url, anchor_text]``, or, when the thread's instruction
#: carried keep/follow rules (:mod:`gridcrawl.rules`), ``[canonical_url, anchor_text, to_type]``.
Link = Annotated[list[str], Meta(min_length=2, max_length=3)]

#: Seconds a page reports (fetch, parse, render and extract times, a site's Retry-After and
#: Crawl-delay): finite, 0 or more, at most 10^9 (about 32 years; the executor caps a site's
#: values there), so that a broken or hostile executor's NaN, infinity or negative time reaches
#: neither a crawl table's NOT NULL column (SQLite stores NaN as NULL) nor the manager's
#: politeness arithmetic: the page does not decode, and its thread fails saying why.
MAX_SECONDS = 1e9
Seconds = Annotated[float, Meta(ge=0, le=MAX_SECONDS)]
#: A byte count a page reports (``size``).
ByteCount = Annotated[int, Meta(ge=0, le=2**63 - 1)]
#: An HTTP status code a page reports (``status``).
HttpStatus = Annotated[int, Meta(ge=0, le=999)]
#: A link a keep rule matched: ``[canonical_url, rule_number]``.
KeptLink = tuple[str, int]

#: The integers msgpack and the crawl tables' JSON carry: signed 64-bit.
INT64 = 2**63 - 1


def json_safe(value: Any) -> Any:
    """``value`` (JSON-shaped: a page's items or structured data, as a page or a plugin gave them)
    with what neither msgpack nor strict JSON (RFC 8259) can hold made a string: an integer
    beyond signed 64 bits (``"123456789012345678901234567890"``), NaN and infinities (``"nan"``,
    ``"inf"``); dict keys become strings, and a ``str`` subclass (which msgspec does not
    encode) a plain ``str``. Lists and dicts are copied, other values returned as they are. A
    page's value must cost at most its own field, never the page's result."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return value if type(value) is str else str(value)
    if isinstance(value, int):
        return value if -INT64 - 1 <= value <= INT64 else str(value)
    if isinstance(value, float):
        return value if value - value == 0.0 else str(value)  # NaN and ±inf: inf - inf is NaN
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): json_safe(v) for k, v in value.items()}
    return value


class Wire(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Base of every typed part of the protocol: unknown fields are refused, defaults are not sent."""


# ----------------------------------------------------------------------------------------------
# Nested payloads


class Instruction(msgspec.Struct, omit_defaults=True):
    """The crawling instruction of one grid thread: every key the client may send and the
    executor reads (:func:`gridcrawl.executor.page.visit`). On the wire it is a map
    (``ThreadSpec.instruction``, ``Job.instruction``: :meth:`wire`) holding the keys not at
    their default, under their wire names (in brackets). The keys every thread of an
    application shares travel once, as the application's instruction
    (``OpenApplication.instruction``, ``Job.application_instruction``), and the executor reads
    the thread's own keys over them. The client's
    :func:`gridcrawl.client.app.thread_instruction` assembles it (from
    :meth:`gridcrawl.client.frontier.Scope.instruction`, :func:`gridcrawl.rules.instruction_for`,
    the recrawl validators, the item specs and the page type's rendering).

    * ``scope``: allowed domains; a hop outside fails as ``out_of_scope`` (``None``: no check).
    * ``seed``: the thread is a seed, whose redirects may leave the scope (SSRF guard and
      robots.txt still checked); the client then adds the redirect target's host to the crawl's
      scope (Heritrix's ``seedsRedirectNewSeeds``).
    * ``follow_nofollow``: report ``rel="nofollow"`` links too.
    * ``content``: False leaves the body out of the result (nobody stores it).
    * ``semantic``: a semantic crawl (RDF documents, structured data; :mod:`gridcrawl.semantic`).
    * ``sitemap``: read the URL as a sitemap; ``sitemaps``: a seed also reports its host's sitemaps.
    * ``if_none_match`` [``ifNoneMatch``], ``if_modified_since`` [``ifModifiedSince``]: a
      recrawl's stored ETag and Last-Modified, sent as conditional request headers (RFC 9110 §13.1).
    * ``base_url`` [``baseURL``], ``url_to_crawl`` [``urlToCrawl``], ``page_type`` [``pageType``],
      ``keep_rules`` [``keepRules``], ``follow_rules`` [``followRules``]: keep/follow rules
      (:mod:`gridcrawl.rules`, the paper's instruction); rule entries are maps
      (:meth:`gridcrawl.rules.Rule.instruction_entry`). With rules, ``links`` holds only the
      followed links (with their ``to_type``) and ``kept`` the kept ones.
    * ``items``: item specs that apply to the page (:mod:`gridcrawl.items`' wire maps).
    * ``render``: open the page in the executor's browser; ``wait_for`` [``waitFor``]: a CSS
      selector to wait for.
    * ``simhash_every_page``: report the SimHash of every HTML page (a recrawl comparing
      SimHashes needs it); otherwise it is computed only when the thread's URL has a shape
      (:func:`gridcrawl.urls.url_shape`: digits in its path or query), which is all the trap
      detector looks at.
    """

    scope: list[str] | None = None
    seed: bool = False
    follow_nofollow: bool = False
    content: bool = True
    semantic: bool = False
    sitemap: bool = False
    sitemaps: bool = False
    if_none_match: str | None = field(default=None, name="ifNoneMatch")
    if_modified_since: str | None = field(default=None, name="ifModifiedSince")
    base_url: str | None = field(default=None, name="baseURL")
    url_to_crawl: str | None = field(default=None, name="urlToCrawl")
    page_type: str | None = field(default=None, name="pageType")
    keep_rules: list[dict] | None = field(default=None, name="keepRules")
    follow_rules: list[dict] | None = field(default=None, name="followRules")
    items: list | None = None
    render: bool = False
    wait_for: str | None = field(default=None, name="waitFor")
    simhash_every_page: bool = False

    @property
    def has_rules(self) -> bool:
        """True when keep/follow rules decide which links are reported."""
        return self.keep_rules is not None or self.follow_rules is not None

    def wire(self) -> dict:
        """The instruction as it travels: a map of the keys not at their default (wire names)."""
        return msgspec.to_builtins(self)

    @classmethod
    def read(cls, wire: dict | Instruction | None) -> Instruction:
        """The instruction in the map ``wire`` (``None``: every default). Keys of the wrong type
        and unknown keys are ignored, each on its own: an instruction never fails a page."""
        if wire is None:
            return _NO_INSTRUCTION
        if type(wire) is cls:
            return wire
        try:
            return msgspec.convert(wire, cls, strict=False)
        except msgspec.ValidationError:
            pass
        good = {}
        for key, value in (wire.items() if isinstance(wire, dict) else ()):
            try:
                msgspec.convert({key: value}, cls, strict=False)
            except msgspec.ValidationError:
                continue
            good[key] = value
        return msgspec.convert(good, cls, strict=False)


_NO_INSTRUCTION = Instruction()


#: A grid thread's priority unless its application asks for another (Alchemi's default); the
#: highest a user without ManageAllApps gets from a manager that has users.
DEFAULT_PRIORITY = 5


class ThreadSpec(Wire):
    """One grid thread as an application submits it: visit ``url`` at ``depth``.

    ``thread_id`` is the application's own number for the thread (unique within the application);
    ``priority``: higher runs first (:data:`DEFAULT_PRIORITY`, Alchemi's default, unless a user
    allowed to manage every application asks for more: the manager caps everyone else's at it;
    gridcrawl's client always sends it, a focused crawl's relevance orders its own frontier,
    :mod:`gridcrawl.focus`); ``instruction`` is an optional
    crawling instruction, an :class:`Instruction`'s map (:meth:`Instruction.wire`), the executor
    applies to the page. A recrawl adds the stored document's validators to it:
    ``"ifNoneMatch"`` (its ETag) and ``"ifModifiedSince"`` (its Last-Modified), which the executor
    sends as conditional request headers (RFC 9110 §13.1.2, §13.1.3); see
    :func:`gridcrawl.executor.page.visit`.
    ``needs`` names the capabilities an executor must have to run it (capability-based dispatch:
    ``"plugin:NAME"``, ``"plugin:NAME@VERSION"``, ``"render"``); the manager assigns it only to an
    executor that declared all of them in :class:`Register`.
    """

    thread_id: int
    url: str
    depth: int = 0
    priority: int = DEFAULT_PRIORITY
    instruction: dict | None = None
    needs: Names = field(default_factory=list)


class PageResult(Wire):
    """What an executor learnt about one URL: the fetch, the parse and the links found.

    Times are seconds; ``size`` is bytes of body after decompression. ``links`` holds
    :data:`Link` lists, ``[canonical_url, anchor_text]``; when the thread carried a crawling instruction
    (:mod:`gridcrawl.rules`) it holds only the links its follow rules matched, as
    ``[canonical_url, anchor_text, to_type]`` triples, and ``kept`` the links its keep rules
    matched, as :data:`KeptLink` ``[canonical_url, rule_number]`` pairs. ``retry_after`` (from a 429/503) and ``crawl_delay``
    (the host's robots.txt Crawl-delay) are seconds the manager uses for the host's politeness;
    ``requested`` is False when the thread sent no request to its host (refused by the scope, or
    by robots.txt rules the executor already held): the manager frees the host's slot without
    starting its delay, so a page's disallowed links do not each cost a crawl delay.
    ``error_kind`` is ``None`` on success, else one of :class:`ErrorKind`'s values. ``content`` is the decoded HTML text, or
    raw bytes of a kept non-HTML body, or ``None``. ``digest`` is the hex SHA-256 of the body
    bytes after decompression (``None`` when no body was read: errors, 304 Not Modified,
    bodies not downloaded); the client compares it with the stored one on a recrawl. A semantic
    crawl (thread instruction ``"semantic": true``) adds ``triples`` (:mod:`gridcrawl.semantic`'s
    wire shape) from RDF documents and HTML structured data, and ``structured`` (what an HTML
    page's JSON-LD, microdata and Open Graph said, with a list of ``errors``).
    A rendered page (:mod:`gridcrawl.executor.render`) has ``render_seconds`` (the browser's
    part, apart from ``fetch_seconds`` and ``parse_seconds``), its rendered DOM as ``content``
    and the requests its scripts made that were refused as ``refused_requests`` (``[url,
    error_kind, reason]`` triples). The body digest also finds content duplicates.

    The standards a page publishes (issue 14): ``simhash`` is the 64-bit SimHash of its visible
    text (:mod:`gridcrawl.simhash`; ``None`` unless the thread's URL has a shape or its
    instruction says ``simhash_every_page``), ``canonical`` the canonical URL it names (``<link
    rel="canonical">`` or ``Link: <...>; rel="canonical"``), ``noindex``/``nofollow`` its robots
    meta tag or ``X-Robots-Tag`` for our user agent. A sitemap thread returns ``sitemap_pages``
    (``[url, lastmod]``, lastmod an ISO 8601 UTC time or ``""``) and ``sitemaps`` (child sitemaps
    of an index); a seed thread asked for sitemaps returns the host's sitemaps in ``sitemaps``.
    ``links_cut`` is the executor's ``max_links_per_page`` when the page had more links than
    that (only the first were read: ``links`` holds those its rules follow), else 0.

    Items (:mod:`gridcrawl.items`), when the thread's instruction carried item specs: ``items``
    holds ``{"type", "position", "fields"}`` maps, ``item_misses`` ``[type, position, field]``
    for each candidate item a required field left empty, ``item_errors`` ``[type, message]`` for
    each spec that failed on the page (a plugin that raised or ran late), and
    ``extract_seconds`` the executor's CPU seconds spent extracting.
    """

    url: str
    final_url: str = ""
    status: HttpStatus | None = None
    content_type: str | None = None
    size: ByteCount = 0
    fetch_seconds: Seconds = 0.0
    parse_seconds: Seconds = 0.0
    error_kind: ErrorKindName | None = None
    error: str | None = None
    retry_after: Seconds | None = None
    crawl_delay: Seconds | None = None
    requested: bool = True
    title: str = ""
    encoding: str | None = None
    content: Any = None  # str, bytes or None (checked by __post_init__: msgspec has no str | bytes)
    links: list[Link] = field(default_factory=list)
    kept: list[KeptLink] = field(default_factory=list)
    redirects: list[str] = field(default_factory=list)
    headers: dict | None = None  # response headers of the final response (lower-case names), for WARC export
    digest: str | None = None  # hex SHA-256 of the body bytes after decompression (content duplicates)
    simhash: int | None = None  # 64-bit SimHash of the visible text, unsigned (gridcrawl.simhash)
    canonical: str | None = None  # canonical URL named by <link rel=canonical> or a Link header
    noindex: bool = False  # robots meta tag or X-Robots-Tag says noindex for our user agent
    nofollow: bool = False  # ... says nofollow: ``links`` is empty
    links_cut: int = 0  # the page had more links than this (its executor's max_links_per_page): the first are read
    sitemap_pages: list = field(default_factory=list)  # a sitemap's pages: [canonical_url, lastmod ISO or ""]
    sitemaps: list[str] = field(default_factory=list)  # sitemap URLs to read next (robots.txt Sitemap lines, an index)
    render_seconds: Seconds | None = None  # seconds the page was open in the browser; None: not rendered
    refused_requests: list = field(default_factory=list)  # rendered page: [url, error_kind, reason] refused
    # semantic crawl (gridcrawl.semantic): [subject, predicate, object, kind, datatype, language] lists
    triples: list = field(default_factory=list)
    structured: dict | None = None  # the page's structured data as read (json-ld, microdata, opengraph, rdfa)
    items: list = field(default_factory=list)
    item_misses: list = field(default_factory=list)
    item_errors: list = field(default_factory=list)
    extract_seconds: Seconds = 0.0

    def __post_init__(self) -> None:
        if self.content is not None and type(self.content) is not str and type(self.content) is not bytes:
            raise TypeError(f"expected str or bytes, got {type(self.content).__name__} - at `$.content`")


# ----------------------------------------------------------------------------------------------
# Messages


class Message(Wire):
    """Base class of every message; ``TYPE`` is the wire name.

    ``BATCH`` names the list field of a batchable message: consecutive messages of its type to
    one peer, equal in every other field, travel as one (see :func:`batch`), and one over
    ``max_message_bytes`` travels in parts (:func:`gridcrawl.transport.send`).
    """

    TYPE: ClassVar[bytes] = b""
    BATCH: ClassVar[str] = ""


#: Most worker threads an executor may declare (:class:`Register`): the manager drops a
#: registration claiming more as malformed (and grants at most its ``max_threads_per_executor``).
#: Defined with the settings, whose validation refuses a ``threads`` above it before any program
#: starts (and which ``--help`` and ``config show`` load without this module).
from gridcrawl.settings import MAX_THREADS  # noqa: E402,F401 (re-exported: the bound of Register.threads)


class Register(Message):
    """Executor → manager: join the grid (``executor_id``: the id it had before, to reclaim it).

    ``threads``: worker threads (1 to :data:`MAX_THREADS`); ``cpu_max``: MHz × cores (Alchemi); ``mem_max``: bytes.
    ``capabilities``: what it can do beyond fetching and parsing — ``"plugin:NAME"`` and
    ``"plugin:NAME@VERSION"`` for each extractor plugin installed on it, ``"render"`` ... —
    matched against the ``needs`` of grid threads (at most :data:`MAX_CAPABILITIES` names of at
    most :data:`CAPABILITY_LENGTH` characters).
    ``accepting``: False for an idle-only executor whose desktop is not idle yet: it gets no
    work until it says otherwise (``availability``).
    ``request_window``: the longest, in seconds, one of its grid threads may go on sending
    requests to its host after it starts (its settings'
    :meth:`~gridcrawl.settings.Settings.request_window`; 0: not said, as by an executor of an
    earlier release). An attempt the manager takes back from it keeps its host's politeness slot
    until its late result comes or this long has passed since it started (at most the manager's
    ``thread_timeout``; when 0, the manager's own settings' window).
    ``running``: the attempts its workers are running as it registers (those of an earlier
    connection, when it registers again: it drops the jobs of that connection it has not started,
    and their results); None: not said (an executor of an earlier release). The manager frees at
    once the host slots it held for this executor's other attempts (:meth:`ReadyQueue.hold
    <gridcrawl.manager.queue.ReadyQueue.hold>`): they send nothing more.
    """

    TYPE: ClassVar[bytes] = b"register"
    name: str
    host: str
    user: str
    threads: int
    dedicated: bool = True
    cpu_max: float = 0.0
    num_cpus: int = 1
    mem_max: int = 0
    os: str = ""
    arch: str = ""
    executor_id: str | None = None
    password: str | None = None
    capabilities: Names = field(default_factory=list)
    accepting: bool = True
    request_window: Seconds = 0.0
    running: Annotated[list[int], Meta(max_length=MAX_BATCH)] | None = None


class Welcome(Message):
    """Manager → executor: registered as ``executor_id``; heartbeat every ``heartbeat_interval`` s.

    ``threads``: the worker threads the manager grants, the registration's ``threads`` up to its
    ``max_threads_per_executor``: it sends no more grid threads than these and its prefetch, and
    the executor runs that many workers (None: all those it asked for)."""

    TYPE: ClassVar[bytes] = b"welcome"
    executor_id: str
    heartbeat_interval: float
    heartbeat_liveness: int
    threads: Annotated[int, Meta(ge=1)] | None = None


class Heartbeat(Message):
    """Any peer → any peer: I am alive (an executor adds its CPU and memory figures; the manager tells a client how many executors take work).

    Figures are Alchemi's CPU columns: ``cpu_usage``/``cpu_avail`` in %, ``cpu_totalusage`` in
    CPU-seconds, plus ``mem_usage`` bytes, ``running`` threads and ``pages_per_second``.
    ``executors`` (manager → client only): the executors that take grid threads now (connected,
    accepting, not quarantined), and ``capabilities`` what they offer between them (``render``,
    ``plugin:NAME`` ...), so that a client whose threads get no result can say why.
    """

    TYPE: ClassVar[bytes] = b"heartbeat"
    #: at most :data:`MAX_FIGURES`, each a number (or a text, a bool, nil): a nested value is
    #: refused by the decoder (10 MiB of empty maps as a figure took a manager to 800 MB)
    figures: Annotated[dict[str, float | int | str | bool | None], Meta(max_length=MAX_FIGURES)] | None = None
    executors: int | None = None
    capabilities: Annotated[list[str], Meta(max_length=1000)] | None = None


class Job(Wire):
    """One grid thread handed to an executor: visit ``url`` as attempt ``attempt_id`` (results
    quote it; a result for an attempt that was taken back is fenced out). ``delay``: the
    manager's delay for the URL's host, seconds (``download_delay`` or its robots.txt
    Crawl-delay): the executor spaces the thread's own requests to the host by it (robots.txt,
    redirect hops). ``needs``: the capabilities the thread needs (:class:`ThreadSpec`), all of
    which this executor declared. ``application_instruction``: the application's own
    instruction (:class:`OpenApplication`), on the first job of the application this executor
    gets on this registration (and again when that instruction changes); the executor keeps
    it and reads each job's own ``instruction`` over it."""

    attempt_id: int
    application_id: str
    thread_id: int
    url: str
    depth: int = 0
    instruction: dict | None = None
    delay: float = 0.0
    needs: list[str] = field(default_factory=list)
    application_instruction: dict | None = None


class Assign(Message):
    """Manager → executor: run these grid threads (one :class:`Job` each).

    The manager batches the jobs it assigns to one executor in one pass of its loop.
    """

    TYPE: ClassVar[bytes] = b"assign"
    BATCH: ClassVar[str] = "jobs"
    jobs: list[Job]


class Started(Message):
    """Executor → manager: worker threads have been running these attempts for a while.

    An executor reports an attempt's start only once it has run
    ``gridcrawl.executor.agent.START_REPORT_AFTER`` seconds (most pages are done sooner: their
    result's ``ran`` says when they started), all it sees in one pass of its loop in one
    message. ``running``: the seconds each attempt had run when the message was sent (the
    executor's monotonic clock), in the order of ``attempt_ids``; the manager records each as
    started that long before the message arrived. Empty: they have just started.
    """

    TYPE: ClassVar[bytes] = b"started"
    BATCH: ClassVar[str] = "attempt_ids"
    attempt_ids: Annotated[list[int], Meta(max_length=MAX_BATCH)]
    running: Annotated[list[float], Meta(max_length=MAX_BATCH)] = []


class Result(Message):
    """Executor → manager: ``attempt_id`` finished with ``page`` (older executors; now ``results``).

    Executors before issue 23 sent one per result; they now send :class:`Results`. The manager
    takes both."""

    TYPE: ClassVar[bytes] = b"result"
    attempt_id: int
    page: PageResult


class AttemptResult(Wire):
    """One finished attempt in a :class:`Results`: ``attempt_id`` ended with ``page``.
    ``ran``: seconds from the worker's start of the attempt to its result (the executor's
    monotonic clock), sent when the executor sent no :class:`Started` for it (it finished
    before its start was due to be reported); the manager records the thread as started
    ``ran`` seconds before it received the result. ``None``: a :class:`Started` was sent."""

    attempt_id: int
    page: PageResult
    ran: float | None = None


class Results(Message):
    """Executor → manager: these attempts finished (one :class:`AttemptResult` each).

    The executor sends the results it sees in one pass of its loop as one message (of at most
    ``max_message_bytes // 2`` bytes, a bigger page alone); an attempt whose start it has not
    reported (:class:`Started`) carries ``ran``, which says when it started. The manager
    handles them together and refills the executor once, with one ``assign``.
    """

    TYPE: ClassVar[bytes] = b"results"
    BATCH: ClassVar[str] = "results"
    results: Annotated[list[AttemptResult], Meta(max_length=MAX_BATCH)]


class Cancel(Message):
    """Manager → executor: drop ``attempt_id`` (aborted or taken back); its result will be fenced."""

    TYPE: ClassVar[bytes] = b"cancel"
    attempt_id: int


class Availability(Message):
    """Executor → manager: whether it takes new work (idle-only desktops; not a death).

    ``accepting`` is False when the desktop's owner is back; the manager stops assigning to it
    without counting it dead. ``handed_back`` lists attempts the executor received but did not
    start: the manager takes them back (not counted as lost) and assigns them elsewhere.
    """

    TYPE: ClassVar[bytes] = b"availability"
    accepting: bool
    handed_back: Annotated[list[int], Meta(max_length=MAX_BATCH)] = field(default_factory=list)


class OpenApplication(Message):
    """Client → manager: create an application, or reattach to ``application_id`` after a restart.

    ``client``: a token of this client process (random, made once per crawl run): a reconnect of
    the same client always gets its application back; another client is refused it while the
    one holding it is alive (one client drives a crawl at a time).

    ``instruction``: the crawling instruction every grid thread of the application shares (an
    :class:`Instruction`'s map: the crawl's scope, ``content``, ``semantic`` ...), sent once per
    connection rather than with each thread, which carries only its own keys; the manager hands
    it to each executor once (:attr:`Job.application_instruction`). (A crawl of 20,000 seed
    hosts has a scope of 250 KB.) An instruction over :data:`MAX_HELLO_INSTRUCTION` bytes
    travels with the first :class:`Submit` of the connection instead, so that the hello stays
    under :data:`MAX_HELLO_BYTES`; an ``open`` without one leaves a reattached application's
    instruction as it was."""

    TYPE: ClassVar[bytes] = b"open"
    name: str
    user: str
    application_id: str | None = None
    password: str | None = None
    instruction: dict | None = None
    client: str = ""


class ApplicationOpened(Message):
    """Manager → client: the application is ready; ``resumed`` when it existed already.
    ``max_threads``: the grid threads the manager keeps for one application at most (its
    ``max_threads_per_application``; ``None``: no limit given): a client keeps no more than
    that submitted and not yet acknowledged, as the manager refuses a submit beyond it."""

    TYPE: ClassVar[bytes] = b"opened"
    application_id: str
    resumed: bool
    heartbeat_interval: float
    heartbeat_liveness: int
    max_threads: int | None = None


class Submit(Message):
    """Client → manager: queue these grid threads of ``application_id`` (and set its new ``instruction``).

    ``instruction``, when given, replaces the application's shared instruction before the
    threads are queued (its scope widened by a seed's redirect); each executor gets it with its
    next job of the application."""

    TYPE: ClassVar[bytes] = b"submit"
    BATCH: ClassVar[str] = "threads"
    application_id: str
    threads: Annotated[list[ThreadSpec], Meta(max_length=MAX_SUBMIT)]
    instruction: dict | None = None


class FinishedThread(Wire):
    """How grid thread ``thread_id`` ended: ``failed`` is True when it failed for good (poison
    after ``attempts`` tries); ``page`` is the executor's result, or ``None`` for a poison thread
    (a thread of a host that failed its probes gets the manager's page: its error, no request).
    (Named apart from :class:`gridcrawl.client.store.Outcome`, the client's pairing of its pending
    URL with this report.)"""

    thread_id: int
    executor_id: str | None
    attempts: int
    failed: bool
    page: PageResult | None = None


class ThreadDone(Message):
    """Manager → client: grid threads of ``application_id`` have finished (one
    :class:`FinishedThread` each, batched per pass of the manager's loop). The client answers with :class:`Ack`."""

    TYPE: ClassVar[bytes] = b"done"
    BATCH: ClassVar[str] = "threads"
    application_id: str
    threads: list[FinishedThread]


class Ack(Message):
    """Client → manager: these results are stored; the manager may forget them (thread → Dead).
    At most :data:`MAX_BATCH` thread ids (a longer list is refused unread: 20 million took a
    manager to 880 MB and 5.5 s of its loop); a client acknowledges more in several."""

    TYPE: ClassVar[bytes] = b"ack"
    application_id: str
    thread_ids: Annotated[list[int], Meta(max_length=MAX_BATCH)]


class CloseApplication(Message):
    """Client → manager: the application is complete (or, with ``cancel``, aborted)."""

    TYPE: ClassVar[bytes] = b"close"
    application_id: str
    cancel: bool = False


class Refuse(Message):
    """Manager → peer: your request is refused (bad credentials, unknown application ...).

    A standby manager refuses everything, naming the ``active`` manager's endpoint (hot standbys:
    the peer moves there at once, see :mod:`gridcrawl.link`); ``None`` otherwise. ``retry``: the
    refusal is for now (a manager over its budget of failed logins): the peer asks again shortly,
    until its connect timeout. ``final``: the request cannot succeed as sent (a submit over a
    bound): the peer stops with ``reason`` rather than connect again and send it again.
    """

    TYPE: ClassVar[bytes] = b"refuse"
    reason: str
    active: str | None = None
    retry: bool = False
    final: bool = False


class Bye(Message):
    """Any peer: I am leaving; forget me now rather than after the liveness timeout."""

    TYPE: ClassVar[bytes] = b"bye"
    reason: str = ""


class Control(Message):
    """Client → manager: pause, resume or cancel application ``application_id`` (operator action).

    ``action`` is ``pause`` (no more dispatch; running threads finish), ``resume`` or ``cancel``
    (``close`` with ``cancel``: every live thread is aborted). ``application_id`` may be a unique
    prefix of at least 4 characters. ``user``/``password`` identify the operator.
    """

    TYPE: ClassVar[bytes] = b"control"
    application_id: str
    action: str
    user: str = ""
    password: str | None = None


class Controlled(Message):
    """Manager → client: ``action`` was applied to ``application_id``, which is now ``state``.

    Sent to the operator who asked, and to the application's own client (which stops on
    ``cancel``). ``state`` is ``running``, ``paused`` or ``stopped``.
    """

    TYPE: ClassVar[bytes] = b"controlled"
    application_id: str
    action: str
    state: str


MESSAGES: dict[bytes, type[Message]] = {
    cls.TYPE: cls
    for cls in (Register, Welcome, Heartbeat, Assign, Started, Result, Results, Cancel, Availability,
                OpenApplication, ApplicationOpened, Submit, ThreadDone, Ack, CloseApplication,
                Refuse, Bye, Control, Controlled)
}


# ----------------------------------------------------------------------------------------------
# Encoding and checked decoding


class RelayedPage:
    """A :class:`PageResult` as the manager holds it: msgpack bytes it forwards as they came
    (``raw``), with the few fields it schedules and records by decoded and checked (``url``,
    ``status``, ``size``, ``error_kind``, ``error``, ``retry_after``, ``crawl_delay``,
    ``requested``; as in :class:`PageResult`). :func:`encode` writes ``raw`` back where the page goes.
    ``unreadable``: why those fields do not decode (one line), or None: a broken or hostile
    executor's page, whose attempt the manager takes back rather than relay it."""

    __slots__ = ("raw", "url", "status", "size", "error_kind", "error", "retry_after", "crawl_delay", "requested",
                 "unreadable")

    def __init__(self, raw: msgspec.Raw, summary: _PageSummary, unreadable: str | None = None) -> None:
        self.raw = raw
        self.url, self.status, self.size = summary.url, summary.status, summary.size
        self.error_kind, self.retry_after, self.crawl_delay = summary.error_kind, summary.retry_after, summary.crawl_delay
        self.error, self.requested = summary.error, summary.requested
        self.unreadable = unreadable

    @classmethod
    def read(cls, raw: msgspec.Raw, where: str) -> "RelayedPage":
        """The page ``raw`` as the manager holds it; one whose summary fields do not decode is
        ``unreadable`` (saying why, naming the message part ``where``) instead of raising."""
        try:
            return cls(raw, _checked(_SUMMARY.decode, raw, where))
        except ProtocolError as exc:
            return cls(raw, _UNREADABLE, str(exc))

    def check(self) -> str | None:
        """Why the whole page does not decode as the client will decode it (one line), or None:
        what the manager asks of an executor's first results (an executor of another release,
        whose pages have a field the client does not know, failed every URL it was given)."""
        try:
            _checked(_PAGE.decode, self.raw, "page")
        except ProtocolError as exc:
            return str(exc)
        return None

    def __eq__(self, other) -> bool:
        return isinstance(other, RelayedPage) and bytes(self.raw) == bytes(other.raw)


class Utf8Text(str):
    """Text that keeps the UTF-8 bytes it was decoded from (``utf8``), so that :func:`encode_page`
    sends those bytes as the msgpack str they already are instead of encoding the text again.

    An executor's page content is its body decoded; when the body is valid UTF-8 the encoding
    of the text *is* the body, and encoding it again cost an executor about 3 % of its CPU on
    the Python docs (issue 23). It is a ``str`` everywhere else; on the wire it is an ordinary
    msgpack str, so nothing decodes it differently.
    """

    utf8: bytes

    @classmethod
    def decode(cls, data: bytes) -> "Utf8Text":
        """``data`` decoded as UTF-8, strictly (no replacement characters: the text's UTF-8 is
        then exactly ``data``). Raises ``UnicodeDecodeError`` when ``data`` is not valid UTF-8."""
        text = cls(data, "utf-8")
        text.utf8 = data
        return text


def _msgpack_str(data: bytes) -> msgspec.Raw:
    """The msgpack str whose UTF-8 bytes are ``data`` (msgpack spec: fixstr, str 8/16/32)."""
    n = len(data)
    if n < 32:
        head = bytes((0xA0 | n,))
    elif n < 0x100:
        head = bytes((0xD9, n))
    elif n < 0x10000:
        head = b"\xda" + n.to_bytes(2, "big")
    else:
        head = b"\xdb" + n.to_bytes(4, "big")
    return msgspec.Raw(head + data)


class _PageSummary(msgspec.Struct):
    """What the manager reads of a page it relays (other fields are skipped, checked at the client)."""

    url: str
    status: HttpStatus | None = None
    size: ByteCount = 0
    error_kind: ErrorKindName | None = None
    error: str | None = None
    retry_after: Seconds | None = None
    crawl_delay: Seconds | None = None
    requested: bool = True


_UNREADABLE = _PageSummary(url="")


class PendingInstruction:
    """An instruction of a big ``submit`` or ``open`` (:data:`DECODE_WHOLE_BYTES`) as the manager's
    :func:`decode` leaves it: its msgpack bytes, ``raw``, well-formed and nested at most as deep as
    any message, but not read; :meth:`read` decodes it."""

    __slots__ = ("raw",)

    def __init__(self, raw: msgspec.Raw) -> None:
        self.raw = raw

    def __len__(self) -> int:
        return len(self.raw)

    def read(self, where: str) -> dict:
        """The instruction as a map. Raises :class:`ProtocolError` (naming ``where``) when it is none."""
        return _checked(_MAP.decode, self.raw, where)


class _PendingSpec(Wire):
    thread_id: int
    url: str
    depth: int = 0
    priority: int = DEFAULT_PRIORITY
    instruction: msgspec.Raw = msgspec.Raw(b"\xc0")  # msgpack nil: none
    needs: Names = field(default_factory=list)


class _PendingSubmit(Wire):
    application_id: str
    threads: Annotated[list[_PendingSpec], Meta(max_length=MAX_SUBMIT)]
    instruction: msgspec.Raw = msgspec.Raw(b"\xc0")


class _PendingOpen(Wire):
    name: str
    user: str
    application_id: str | None = None
    password: str | None = None
    instruction: msgspec.Raw = msgspec.Raw(b"\xc0")
    client: str = ""


def _pending(raw: msgspec.Raw) -> PendingInstruction | None:
    return None if bytes(raw) == b"\xc0" else PendingInstruction(raw)


class _RelayedResult(Wire):
    attempt_id: int
    page: msgspec.Raw


class _RelayedAttemptResult(Wire):
    attempt_id: int
    page: msgspec.Raw
    ran: float | None = None


class _RelayedResults(Wire):
    results: Annotated[list[_RelayedAttemptResult], Meta(max_length=MAX_BATCH)]


class _RelayedOutcome(Wire):
    thread_id: int
    executor_id: str | None
    attempts: int
    failed: bool
    page: msgspec.Raw = msgspec.Raw(b"\xc0")  # msgpack nil: no page


class _RelayedDone(Wire):
    application_id: str
    threads: list[_RelayedOutcome]


def _enc_hook(value: Any) -> Any:
    if type(value) is RelayedPage:
        return value.raw
    if type(value) is Utf8Text:
        return _msgpack_str(value.utf8)
    raise NotImplementedError(f"{type(value).__name__} is not part of the protocol")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_DECODERS = {kind: msgspec.msgpack.Decoder(cls) for kind, cls in MESSAGES.items()}
_PAGE = msgspec.msgpack.Decoder(PageResult | None)
_SUMMARY = msgspec.msgpack.Decoder(_PageSummary)
_RELAYED_RESULT = msgspec.msgpack.Decoder(_RelayedResult)
_RELAYED_RESULTS = msgspec.msgpack.Decoder(_RelayedResults)
_RELAYED_DONE = msgspec.msgpack.Decoder(_RelayedDone)
_MAP = msgspec.msgpack.Decoder(dict)
_PENDING_SUBMIT = msgspec.msgpack.Decoder(_PendingSubmit)
_PENDING_OPEN = msgspec.msgpack.Decoder(_PendingOpen)


def batch(messages: list[Message]) -> list[Message]:
    """Merge runs of batchable messages (``BATCH`` set) bound for one peer into single messages.

    ``messages`` are in sending order; a message joins the one before it when both are of the
    same type and equal in every field but the ``BATCH`` list, which is concatenated. Order is
    kept, so a ``cancel`` after an ``assign`` still arrives after it. Returns a new list; the
    first message of each run is copied before its list grows.
    """
    merged: list[Message] = []
    for m in messages:
        name = m.BATCH
        if name and merged:
            last = merged[-1]
            if type(last) is type(m) and all(
                    getattr(last, f) == getattr(m, f) for f in m.__struct_fields__ if f != name):
                getattr(last, name).extend(getattr(m, name))
                continue
        if name:
            m = msgspec.structs.replace(m, **{name: list(getattr(m, name))})
        merged.append(m)
    return merged


def encode(message: Message) -> list[bytes]:
    """Frames ``[version, type, body]`` of ``message`` (without any routing id)."""
    return [PROTOCOL_VERSION, message.TYPE, _ENCODER.encode(message)]


def encode_page(page: PageResult) -> msgspec.Raw:
    """``page`` encoded once (msgpack), for an :class:`AttemptResult`'s ``page``: an executor's
    worker thread encodes its page, its main loop batches the encoded pages into :class:`Results`
    without encoding them again."""
    return msgspec.Raw(_ENCODER.encode(page))


# msgspec's messages, in this module's words (the tests and the logs read these)
_NAMES = {"int": "an integer", "array": "a list", "object": "a map", "float": "a number", "str": "str",
          "bool": "bool", "bytes": "bytes"}
_GOT = {"object": "dict", "array": "list", "null": "NoneType"}  # msgpack's names -> Python's
_EXPECTED = re.compile(r"Expected `([^`]*)`, got `([^`]*)`(?: - at `\$(.*)`)?$")
_MISSING = re.compile(r"Object missing required field `([^`]*)`(?: - at `\$(.*)`)?$")
_UNKNOWN = re.compile(r"Object contains unknown field `([^`]*)`(?: - at `\$(.*)`)?$")
_AT = re.compile(r" - at `\$(.*)`$")


def _problem(exc: Exception, where: str) -> str:
    """One line saying what is wrong, from a msgspec error ``exc`` on message ``where``."""
    text = str(exc)
    m = _EXPECTED.match(text)
    if m:
        expected, got, path = m.group(1), m.group(2), m.group(3) or ""
        if expected == "object" and not path:
            return f"{where}: body must be a map, got {_NAMES.get(got, got)}"
        return f"{where}{path}: expected {_NAMES.get(expected, expected)}, got {_GOT.get(got, got)}"
    m = _MISSING.match(text)
    if m:
        return f"{where}{m.group(2) or ''}: missing field {m.group(1)!r}"
    m = _UNKNOWN.match(text)
    if m:
        return f"{where}{m.group(2) or ''}: unknown fields [{m.group(1)!r}]"
    m = _AT.search(text)
    return f"{where}{m.group(1)}: {text[:m.start()]}" if m else f"{where}: {text}"


def _checked(decoder, body: bytes, where: str):
    try:
        return decoder(body)
    except msgspec.ValidationError as exc:
        raise ProtocolError(_problem(exc, where)) from None
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"{where} body is not msgpack: {exc}") from None
    except RecursionError:  # maps or lists nested ~1,000 deep: a 3 KB message (a hostile peer's)
        raise ProtocolError(f"{where} body is nested too deeply") from None


def decode(frames: list[bytes], *, relay: bool = False, only: Collection[bytes] | None = None) -> Message:
    """Decode ``[version, type, body]`` frames into a message.

    Raises :class:`ProtocolError` on a wrong frame count, another protocol version, an unknown
    type (or one not in ``only``, the types the receiver accepts: its body is not read), a body
    that is not msgpack or is nested too deeply, unknown or missing fields, or fields of the wrong type.
    With ``relay`` (the manager), the page of a :class:`Result` (and of each :class:`AttemptResult`
    of a :class:`Results`) is a :class:`RelayedPage`: only its envelope fields are checked, page by
    page (one whose fields do not decode is ``unreadable``: the message's other results count). A :class:`ThreadDone`'s pages are checked one by one: an
    outcome whose page does not decode becomes a failed thread without a page (logged once per
    message), so one broken executor cannot make a client refuse the other threads of a batch.
    """
    if len(frames) != 3:
        raise ProtocolError(f"expected 3 frames, got {len(frames)}")
    version, kind, body = (f if type(f) is bytes else bytes(f) for f in frames)  # zmq.Frame: copy=False
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {version[:16]!r} is not {PROTOCOL_VERSION!r}")
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise ProtocolError(f"unknown message type {kind[:32]!r}")
    if only is not None and kind not in only:
        raise ProtocolError(f"this peer does not accept {kind.decode()!r}")
    if kind == b"done":
        return _decode_done(body)
    if relay and kind in (b"submit", b"open") and len(body) > DECODE_WHOLE_BYTES:
        return _decode_pending(kind, body)
    if relay and kind == b"result":
        m = _checked(_RELAYED_RESULT.decode, body, "result")
        return Result(m.attempt_id, RelayedPage.read(m.page, "result.page"))
    if relay and kind == b"results":
        m = _checked(_RELAYED_RESULTS.decode, body, "results")
        summary = _SUMMARY.decode
        try:
            return Results([AttemptResult(r.attempt_id, RelayedPage(r.page, summary(r.page)), r.ran) for r in m.results])
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            # a page that does not decode costs its own attempt, not the others of the message
            # (they waited for a straggler take-back or thread_timeout: 120-300 s)
            return Results([AttemptResult(r.attempt_id, RelayedPage.read(r.page, f"results.results[{i}].page"), r.ran)
                            for i, r in enumerate(m.results)])
    return _checked(decoder.decode, body, kind.decode())


def _decode_pending(kind: bytes, body: bytes) -> Submit | OpenApplication:
    """A big ``submit`` or ``open`` for the manager, its instructions :class:`PendingInstruction`."""
    if kind == b"open":
        o = _checked(_PENDING_OPEN.decode, body, "open")
        return OpenApplication(o.name, o.user, o.application_id, o.password, _pending(o.instruction), o.client)
    m = _checked(_PENDING_SUBMIT.decode, body, "submit")
    return Submit(m.application_id, [ThreadSpec(s.thread_id, s.url, s.depth, s.priority, _pending(s.instruction), s.needs)
                                     for s in m.threads], _pending(m.instruction))


def _decode_done(body: bytes) -> ThreadDone:
    m = _checked(_RELAYED_DONE.decode, body, "done")
    threads = []
    broken = []
    for o in m.threads:
        try:
            page = _checked(_PAGE.decode, o.page, f"done.threads.page (thread {o.thread_id})")
            failed = o.failed
        except ProtocolError as exc:  # a broken or hostile executor's page: failed, saying why (visited_url.error)
            broken.append(exc)
            page = PageResult(url="", error_kind=ErrorKind.POISON.value,
                              error=f"the result of executor {str(o.executor_id)[:8]} does not decode: {exc}"[:1000])
            failed = True
        threads.append(FinishedThread(o.thread_id, o.executor_id, o.attempts, failed, page))
    if broken:
        log.warning("%s: the thread counts as failed%s", broken[0],
                    f" (and {len(broken) - 1} more pages of this message that do not decode)" if len(broken) > 1 else "")
    return ThreadDone(m.application_id, threads)


def message_table() -> str:
    """The README's Markdown table of every message: type, class and fields."""
    rows = ["| type | message | fields |", "|---|---|---|"]
    for kind, cls in MESSAGES.items():
        fields = ", ".join(f"`{name}`" for name in cls.__struct_fields__)
        summary = (cls.__doc__ or "").strip().split("\n")[0]
        rows.append(f"| `{kind.decode()}` | {summary} | {fields} |")
    return "\n".join(rows)


if __name__ == "__main__":  # pragma: no cover
    print(message_table())
