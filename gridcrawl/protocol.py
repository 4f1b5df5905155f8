"""The grid's message protocol: every message the manager, executors and clients exchange.

This module is the one definition of the wire format. A message is three ZeroMQ frames::

    [version] [type] [body]

* ``version`` — ``PROTOCOL_VERSION`` (bytes ``b"GC1"``); a peer speaking another version is refused.
* ``type`` — the message's type name in ASCII (``b"register"``, ``b"assign"`` ...).
* ``body`` — a msgpack map of the message's fields (msgpack carries bytes and text alike).

A ROUTER socket prepends the peer's routing id, which the server loop strips before :func:`decode`.
:func:`decode` checks every frame against the dataclass below and raises :class:`ProtocolError` on
anything else, so a malformed or hostile peer can never reach the manager's logic.

The table of messages (direction, fields) is in README.md, generated from this module by
``python -m gridcrawl.protocol``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import msgpack

from gridcrawl.errors import ProtocolError  # noqa: F401 (re-exported)

PROTOCOL_VERSION = b"GC1"


# ----------------------------------------------------------------------------------------------
# Nested payloads


@dataclass
class ThreadSpec:
    """One grid thread as an application submits it: visit ``url`` at ``depth``.

    ``thread_id`` is the application's own number for the thread (unique within the application);
    ``priority``: higher runs first (Alchemi's default is 5; a focused crawl uses
    ``round(1000 * relevance)``, see :mod:`gridcrawl.focus`); ``instruction`` is an optional
    crawling instruction (keep/follow rules, :func:`gridcrawl.rules.instruction_for`) the executor
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
    priority: int = 5
    instruction: dict | None = None
    needs: list[str] = field(default_factory=list)


@dataclass
class PageResult:
    """What an executor learnt about one URL: the fetch, the parse and the links found.

    Times are seconds; ``size`` is bytes of body after decompression. ``links`` holds
    ``[canonical_url, anchor_text]`` pairs; when the thread carried a crawling instruction
    (:mod:`gridcrawl.rules`) it holds only the links its follow rules matched, as
    ``[canonical_url, anchor_text, to_type]`` triples, and ``kept`` the links its keep rules
    matched, as ``[canonical_url, rule_number]`` pairs. ``retry_after`` (from a 429/503) and ``crawl_delay``
    (the host's robots.txt Crawl-delay) are seconds the manager uses for the host's politeness.
    ``error_kind`` is ``None`` on success, else one of
    :class:`gridcrawl.executor.fetch.ErrorKind`'s values. ``content`` is the decoded HTML text, or
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
    text (:mod:`gridcrawl.simhash`), ``canonical`` the canonical URL it names (``<link
    rel="canonical">`` or ``Link: <...>; rel="canonical"``), ``noindex``/``nofollow`` its robots
    meta tag or ``X-Robots-Tag`` for our user agent. A sitemap thread returns ``sitemap_pages``
    (``[url, lastmod]``, lastmod an ISO 8601 UTC time or ``""``) and ``sitemaps`` (child sitemaps
    of an index); a seed thread asked for sitemaps returns the host's sitemaps in ``sitemaps``.

    Items (:mod:`gridcrawl.items`), when the thread's instruction carried item specs: ``items``
    holds ``{"type", "position", "fields"}`` maps, ``item_misses`` ``[type, position, field]``
    for each candidate item a required field left empty, ``item_errors`` ``[type, message]`` for
    each spec that failed on the page (a plugin that raised or ran late), and
    ``extract_seconds`` the executor's CPU seconds spent extracting.
    """

    url: str
    final_url: str = ""
    status: int | None = None
    content_type: str | None = None
    size: int = 0
    fetch_seconds: float = 0.0
    parse_seconds: float = 0.0
    error_kind: str | None = None
    error: str | None = None
    retry_after: float | None = None
    crawl_delay: float | None = None
    title: str = ""
    encoding: str | None = None
    content: str | bytes | None = None
    links: list = field(default_factory=list)
    kept: list = field(default_factory=list)
    redirects: list = field(default_factory=list)
    headers: dict | None = None  # response headers of the final response (lower-case names), for WARC export
    digest: str | None = None  # hex SHA-256 of the body bytes after decompression (content duplicates)
    simhash: int | None = None  # 64-bit SimHash of the visible text, unsigned (gridcrawl.simhash)
    canonical: str | None = None  # canonical URL named by <link rel=canonical> or a Link header
    noindex: bool = False  # robots meta tag or X-Robots-Tag says noindex for our user agent
    nofollow: bool = False  # ... says nofollow: ``links`` is empty
    sitemap_pages: list = field(default_factory=list)  # a sitemap's pages: [canonical_url, lastmod ISO or ""]
    sitemaps: list = field(default_factory=list)  # sitemap URLs to read next (robots.txt Sitemap lines, an index)
    render_seconds: float | None = None  # seconds the page was open in the browser; None: not rendered
    refused_requests: list = field(default_factory=list)  # rendered page: [url, error_kind, reason] refused
    # semantic crawl (gridcrawl.semantic): [subject, predicate, object, kind, datatype, language] lists
    triples: list = field(default_factory=list)
    structured: dict | None = None  # the page's structured data as read (json-ld, microdata, opengraph, rdfa)
    items: list = field(default_factory=list)
    item_misses: list = field(default_factory=list)
    item_errors: list = field(default_factory=list)
    extract_seconds: float = 0.0


# ----------------------------------------------------------------------------------------------
# Messages


@dataclass
class Message:
    """Base class of every message; ``TYPE`` is the wire name.

    ``BATCH`` names the list field of a batchable message: consecutive messages of its type to
    one peer, equal in every other field, travel as one (see :func:`batch`).
    """

    TYPE: ClassVar[bytes] = b""
    BATCH: ClassVar[str] = ""


@dataclass
class Register(Message):
    """Executor → manager: join the grid (``executor_id``: the id it had before, to reclaim it).

    ``threads``: worker threads; ``cpu_max``: MHz × cores (Alchemi); ``mem_max``: bytes.
    ``capabilities``: what it can do beyond fetching and parsing — ``"plugin:NAME"`` and
    ``"plugin:NAME@VERSION"`` for each extractor plugin installed on it, ``"render"`` ... —
    matched against the ``needs`` of grid threads (at most 64 names of at most 128 characters).
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
    capabilities: list[str] = field(default_factory=list)


@dataclass
class Welcome(Message):
    """Manager → executor: registered as ``executor_id``; heartbeat every ``heartbeat_interval`` s."""

    TYPE: ClassVar[bytes] = b"welcome"
    executor_id: str
    heartbeat_interval: float
    heartbeat_liveness: int


@dataclass
class Heartbeat(Message):
    """Any peer → any peer: I am alive (an executor adds its CPU and memory figures).

    Figures are Alchemi's CPU columns: ``cpu_usage``/``cpu_avail`` in %, ``cpu_totalusage`` in
    CPU-seconds, plus ``mem_usage`` bytes, ``running`` threads and ``pages_per_second``.
    """

    TYPE: ClassVar[bytes] = b"heartbeat"
    figures: dict | None = None


@dataclass
class Job:
    """One grid thread handed to an executor: visit ``url`` as attempt ``attempt_id`` (results
    quote it; a result for an attempt that was taken back is fenced out). ``delay``: the
    manager's delay for the URL's host, seconds (``download_delay`` or its robots.txt
    Crawl-delay): the executor spaces the thread's own requests to the host by it (robots.txt,
    redirect hops). ``needs``: the capabilities the thread needs (:class:`ThreadSpec`), all of
    which this executor declared."""

    attempt_id: int
    application_id: str
    thread_id: int
    url: str
    depth: int = 0
    instruction: dict | None = None
    delay: float = 0.0
    needs: list[str] = field(default_factory=list)


@dataclass
class Assign(Message):
    """Manager → executor: run these grid threads (one :class:`Job` each).

    The manager batches the jobs it assigns to one executor in one pass of its loop.
    """

    TYPE: ClassVar[bytes] = b"assign"
    BATCH: ClassVar[str] = "jobs"
    jobs: list[Job]


@dataclass
class Started(Message):
    """Executor → manager: worker threads have begun these attempts.

    The executor batches the starts it sees in one pass of its loop.
    """

    TYPE: ClassVar[bytes] = b"started"
    BATCH: ClassVar[str] = "attempt_ids"
    attempt_ids: list[int]


@dataclass
class Result(Message):
    """Executor → manager: ``attempt_id`` finished with ``page``."""

    TYPE: ClassVar[bytes] = b"result"
    attempt_id: int
    page: PageResult


@dataclass
class Cancel(Message):
    """Manager → executor: drop ``attempt_id`` (aborted or taken back); its result will be fenced."""

    TYPE: ClassVar[bytes] = b"cancel"
    attempt_id: int


@dataclass
class Availability(Message):
    """Executor → manager: whether it takes new work (idle-only desktops; not a death).

    ``accepting`` is False when the desktop's owner is back; the manager stops assigning to it
    without counting it dead. ``handed_back`` lists attempts the executor received but did not
    start: the manager takes them back (not counted as lost) and assigns them elsewhere.
    """

    TYPE: ClassVar[bytes] = b"availability"
    accepting: bool
    handed_back: list[int] = field(default_factory=list)


@dataclass
class OpenApplication(Message):
    """Client → manager: create an application, or reattach to ``application_id`` after a restart."""

    TYPE: ClassVar[bytes] = b"open"
    name: str
    user: str
    application_id: str | None = None
    password: str | None = None


@dataclass
class ApplicationOpened(Message):
    """Manager → client: the application is ready; ``resumed`` when it existed already."""

    TYPE: ClassVar[bytes] = b"opened"
    application_id: str
    resumed: bool
    heartbeat_interval: float
    heartbeat_liveness: int


@dataclass
class Submit(Message):
    """Client → manager: queue these grid threads of ``application_id``."""

    TYPE: ClassVar[bytes] = b"submit"
    application_id: str
    threads: list[ThreadSpec]


@dataclass
class Outcome:
    """How grid thread ``thread_id`` ended: ``failed`` is True when it failed for good (poison
    after ``attempts`` tries); ``page`` is the executor's result, or ``None`` for a poison thread."""

    thread_id: int
    executor_id: str | None
    attempts: int
    failed: bool
    page: PageResult | None = None


@dataclass
class ThreadDone(Message):
    """Manager → client: grid threads of ``application_id`` have finished (one :class:`Outcome`
    each, batched per pass of the manager's loop). The client answers with :class:`Ack`."""

    TYPE: ClassVar[bytes] = b"done"
    BATCH: ClassVar[str] = "threads"
    application_id: str
    threads: list[Outcome]


@dataclass
class Ack(Message):
    """Client → manager: these results are stored; the manager may forget them (thread → Dead)."""

    TYPE: ClassVar[bytes] = b"ack"
    application_id: str
    thread_ids: list[int]


@dataclass
class CloseApplication(Message):
    """Client → manager: the application is complete (or, with ``cancel``, aborted)."""

    TYPE: ClassVar[bytes] = b"close"
    application_id: str
    cancel: bool = False


@dataclass
class Refuse(Message):
    """Manager → peer: your request is refused (bad credentials, unknown application ...).

    A standby manager refuses everything, naming the ``active`` manager's endpoint (hot standbys:
    the peer moves there at once, see :mod:`gridcrawl.link`); ``None`` otherwise.
    """

    TYPE: ClassVar[bytes] = b"refuse"
    reason: str
    active: str | None = None


@dataclass
class Bye(Message):
    """Any peer: I am leaving; forget me now rather than after the liveness timeout."""

    TYPE: ClassVar[bytes] = b"bye"
    reason: str = ""


@dataclass
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


@dataclass
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
    for cls in (Register, Welcome, Heartbeat, Assign, Started, Result, Cancel, Availability,
                OpenApplication, ApplicationOpened, Submit, ThreadDone, Ack, CloseApplication,
                Refuse, Bye, Control, Controlled)
}


# ----------------------------------------------------------------------------------------------
# Encoding and checked decoding


def _to_wire(value: Any) -> Any:
    fields = _FIELDS.get(type(value))
    if fields is not None:
        return {name: _to_wire(getattr(value, name)) for name in fields}
    if isinstance(value, list) and value and type(value[0]) in _FIELDS:
        return [_to_wire(v) for v in value]
    return value  # plain values and lists of plain values go to msgpack as they are


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
                    getattr(last, f) == getattr(m, f) for f in _FIELDS[type(m)] if f != name):
                getattr(last, name).extend(getattr(m, name))
                continue
        if name:
            m = dataclasses.replace(m, **{name: list(getattr(m, name))})
        merged.append(m)
    return merged


def encode(message: Message) -> list[bytes]:
    """Frames ``[version, type, body]`` of ``message`` (without any routing id)."""
    return [PROTOCOL_VERSION, message.TYPE, msgpack.packb(_to_wire(message), use_bin_type=True)]


# Decoding checks every field against its annotation. The checks are compiled once per type into
# small functions (the manager decodes tens of thousands of messages a second).
Checker = Callable[[Any, str], Any]
_FIELDS: dict[type, tuple[str, ...]] = {}
_CHECKERS: dict[Any, Checker] = {}


def _fail(where: str, expected: str, value: Any):
    raise ProtocolError(f"{where}: expected {expected}, got {type(value).__name__}")


def _checker(hint: Any) -> Checker:
    """A function ``(value, where) -> value`` that accepts ``value`` as ``hint`` or raises."""
    cached = _CHECKERS.get(hint)
    if cached is not None:
        return cached
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        optional = type(None) in options
        inner = [_checker(o) for o in options if o is not type(None)]

        def check(value, where, inner=inner, optional=optional, hint=hint):
            if value is None and optional:
                return None
            for option in inner:
                try:
                    return option(value, where)
                except ProtocolError:
                    pass
            raise ProtocolError(f"{where}: {type(value).__name__} fits none of {hint}")
    elif dataclasses.is_dataclass(hint):
        check = _builder(hint)
    elif origin is list or hint is list:
        args = typing.get_args(hint)
        item = _checker(args[0]) if args and args[0] is not Any else None

        def check(value, where, item=item):
            if type(value) is not list:
                _fail(where, "a list", value)
            if item is None:
                return value
            return [item(v, f"{where}[{i}]") for i, v in enumerate(value)]
    elif hint is float:
        def check(value, where):
            if type(value) is float:
                return value
            if type(value) is int:
                return float(value)
            _fail(where, "a number", value)
    elif hint in (int, str, bytes, bool, dict):
        names = {int: "an integer", str: "str", bytes: "bytes", bool: "bool", dict: "a map"}

        def check(value, where, kind=hint, name=names[hint]):
            if type(value) is kind:  # exact: True is not an integer
                return value
            _fail(where, name, value)
    else:  # pragma: no cover - a field type this module does not support is our bug
        raise TypeError(f"unsupported protocol field type {hint}")
    _CHECKERS[hint] = check
    return check


def _builder(cls: type) -> Checker:
    """A function ``(body, where) -> cls instance`` checking every field of dataclass ``cls``."""
    cached = _CHECKERS.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls)]
    _FIELDS[cls] = tuple(f.name for f in fields)
    names = frozenset(_FIELDS[cls])
    required = [f.name for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    _CHECKERS[cls] = None  # recursion guard while the field checkers are compiled
    checks = [(f.name, _checker(hints[f.name])) for f in fields]

    def build(body, where):
        if type(body) is not dict:
            raise ProtocolError(f"{where}: body must be a map, got {type(body).__name__}")
        if not names.issuperset(body):
            raise ProtocolError(f"{where}: unknown fields {sorted(map(str, set(body) - names))}")
        for name in required:
            if name not in body:
                raise ProtocolError(f"{where}: missing field {name!r}")
        kwargs = {}
        for name, check in checks:
            if name in body:
                kwargs[name] = check(body[name], where + "." + name)
        return cls(**kwargs)

    _CHECKERS[cls] = build
    return build


def decode(frames: list[bytes]) -> Message:
    """Decode ``[version, type, body]`` frames into a message.

    Raises :class:`ProtocolError` on a wrong frame count, another protocol version, an unknown
    type, a body that is not msgpack, unknown or missing fields, or fields of the wrong type.
    """
    if len(frames) != 3:
        raise ProtocolError(f"expected 3 frames, got {len(frames)}")
    version, kind, body = (bytes(f) for f in frames)
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {version[:16]!r} is not {PROTOCOL_VERSION!r}")
    cls = MESSAGES.get(kind)
    if cls is None:
        raise ProtocolError(f"unknown message type {kind[:32]!r}")
    try:
        data = msgpack.unpackb(body, raw=False, strict_map_key=True, max_bin_len=len(body),
                               max_str_len=len(body), max_array_len=len(body), max_map_len=len(body))
    except Exception as exc:  # msgpack raises several unrelated classes
        raise ProtocolError(f"{kind.decode()} body is not msgpack: {exc}") from None
    return _builder(cls)(data, cls.TYPE.decode())


for _cls in MESSAGES.values():
    _builder(_cls)


def message_table() -> str:
    """The README's Markdown table of every message: type, class and fields."""
    rows = ["| type | message | fields |", "|---|---|---|"]
    for kind, cls in MESSAGES.items():
        fields = ", ".join(f"`{f.name}`" for f in dataclasses.fields(cls))
        summary = (cls.__doc__ or "").strip().split("\n")[0]
        rows.append(f"| `{kind.decode()}` | {summary} | {fields} |")
    return "\n".join(rows)


if __name__ == "__main__":  # pragma: no cover
    print(message_table())
