"""Items: structured data extracted from pages, by declarative rules or by installed plugins.

An *item spec* file (TOML, ``--extract FILE``) lists ``[[item]]`` tables (docs/items.md)::

    [[item]]
    type = "product"                    # rows of this item type
    url = '/p/[0-9]+\\.html$'            # regex searched in the page's canonical URL (optional)
    page_type = "product"               # keep/follow rules' page type (optional)
    each = ".product"                   # optional: every match is one item, fields relative to it
    [item.fields]
    name  = { css = "h1::text", required = true }
    price = { css = ".price::text", type = "float" }
    tags  = { xpath = ".//li[@class='tag']/text()", many = true }
    sku   = { jsonld = "$.offers.sku" }  # the page's JSON-LD (structured data), JMESPath
    [item.where]
    name = { re = "^[A-Z]" }            # keep only items whose field matches
    date = { within_days = 30 }         # ... whose date field is at most 30 days old (not later than tomorrow)

or ``plugin = "NAME"`` (``NAME@VERSION``) instead of ``fields``: the function registered as NAME
in the entry-point group ``gridcrawl.extractors`` on the executors (:mod:`gridcrawl.plugins`).

Selectors are parsel's (Scrapy's selector library on lxml: CSS with ``::text``/``::attr()``,
XPath 1.0); ``each`` is CSS unless it starts with ``/``, ``./``, ``..`` or ``(`` (XPath), or is written
``{ css = ... }``/``{ xpath = ... }``. A field's value, per match: the text (or attribute, or
XPath string) it selects — an element selected without ``::text`` gives its whole text content
as a reader sees it (:func:`element_text`: blocks apart, no script or style text) —
whitespace collapsed (``normalize = false`` keeps it), then ``re`` (the first match of the
regular expression; its first group if it has groups; a value without a match is dropped), then
``type``: ``str``; ``int``/``float`` (plain numbers, or prices and amounts in any common format
parsed by Zyte's price-parser: ``1.234,50 €`` is 1234.5); ``date`` (ISO 8601 in, else dateutil's parser; ISO 8601
out: ``2024-03-05``, or with the time when it has one; ``dayfirst = true`` reads 03/04 as 3
April); ``url`` (resolved against the document's base URL and made canonical by
:func:`gridcrawl.urls.canonical_url`). Values that do not convert are dropped (a number needs a
digit: ``"free"`` is dropped, not 0).

A ``jsonld`` field reads the page's structured data instead of its markup: a JMESPath
expression (parsel's own JSON query language; a leading ``$.`` as JSONPath writes it is
accepted) evaluated on each JSON-LD object of the page in turn (every
``<script type="application/ld+json">``, a top-level list or ``@graph`` giving one object per
entry), whatever ``each`` selected; strings and numbers are the matches (a list result gives one
match per entry), then ``re``, ``type`` and ``many`` apply as above. The objects are read on the
executor (extruct's JSON-LD reader, lenient with comments) once per page, or taken from the
semantic crawl's structured data (:mod:`gridcrawl.semantic`) when the crawl has it. ``many = true``
gives the list of values, otherwise the first. A ``required`` field without a value makes the
candidate item a *miss* of that field: no item, counted per field.

:func:`load_spec` reads and validates a file (:class:`ItemSpecError` names the file, the item and
the field). The validated specs travel to the executors inside each grid thread's crawling
instruction (``instruction["items"]``, only the specs that apply to the page), with the plugins
they name in the thread's ``needs``; the executor runs :func:`extract` on the page it parsed.
This module imports no SQL: executors use it.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime as _dt
import decimal
import functools
import json
import logging
import math
import re
import threading
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from gridcrawl.errors import ItemSpecError, PatternTooSlow
from gridcrawl.patterns import PatternError, compile_pattern, search
from gridcrawl.plugins import PLUGIN_REFERENCE
from gridcrawl.rules import anchored_path_error, glob_hint as _glob_hint, read_text_file
from gridcrawl.protocol import INT64, json_safe

__all__ = ["ItemSpec", "FieldSpec", "ItemSpecError", "Page", "Extraction", "load_spec", "parse_spec",
           "specs_for", "needs_of", "extract", "spec_to_wire", "specs_from_wire"]

TYPES = ("str", "int", "float", "date", "url")
TYPE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")

log = logging.getLogger(__name__)
#: Spec url patterns whose match was stopped at its time limit and said so (once each, per process).
_SAID_TOO_SLOW: set[str] = set()
FIELD_KEYS = {"css", "xpath", "jsonld", "re", "many", "type", "required", "normalize", "dayfirst"}
ITEM_KEYS = {"type", "url", "page_type", "each", "fields", "where", "plugin", "render", "wait_for"}
WHERE_KEYS = {"re", "within_days", "min", "max"}
#: Items kept from one page at most (a hostile page of a million list entries stays bounded).
MAX_ITEMS_PER_PAGE = 1000
#: Characters of one item's fields as JSON at most; longer values are cut.
MAX_VALUE_CHARS = 100_000


@dataclass(frozen=True)
class FieldSpec:
    """One field of a declarative item: a ``css`` or ``xpath`` selector, or a ``jsonld``
    JMESPath expression on the page's JSON-LD, and how its matches become the value (``re``,
    ``many``, ``type``, ``required``, ``normalize``, ``dayfirst``)."""

    name: str
    css: str | None = None
    xpath: str | None = None
    jsonld: str | None = None
    re: str | None = None
    many: bool = False
    type: str = "str"
    required: bool = False
    normalize: bool = True
    dayfirst: bool = False


@dataclass(frozen=True)
class ItemSpec:
    """One ``[[item]]`` of a spec file: which pages (``url`` regex, ``page_type``), how items are
    found (``each``: ``("css"|"xpath", expression)`` or None for one item per page), their
    ``fields`` or the ``plugin`` that makes them, and the ``where`` conditions (field name →
    ``{"re": ..., "within_days": N, "min": x, "max": y}``). ``number`` is its 1-based place.
    ``render``: the pages it applies to are rendered in a headless browser first (their grid
    threads need the ``render`` capability, :mod:`gridcrawl.executor.render`); ``wait_for``: a
    CSS selector the browser waits for before taking the DOM."""

    type: str
    number: int = 1
    url: str | None = None
    page_type: str | None = None
    each: tuple[str, str] | None = None
    fields: tuple[FieldSpec, ...] = ()
    where: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    plugin: str | None = None
    render: bool = False
    wait_for: str | None = None

    @property
    def label(self) -> str:
        """``item N (type)`` for messages."""
        return f"item {self.number} ({self.type})"

    def applies_to(self, url: str, page_type: str | None) -> bool:
        """True if this spec extracts from the page ``url`` (canonical) of ``page_type``."""
        if self.page_type is not None and self.page_type != page_type:
            return False
        try:
            return self.url is None or search(self.url, url) is not None
        except PatternTooSlow as exc:  # the user's own pattern, on the client: said once, spec left out
            if self.url not in _SAID_TOO_SLOW:
                _SAID_TOO_SLOW.add(self.url)
                log.warning("%s url: %s; the spec extracts from no page whose URL stops it", self.label, exc)
            return False

    def why_not(self, url: str, page_type: str | None) -> str | None:
        """Why this spec does not extract from page ``url`` (canonical) of ``page_type``, in
        words naming its ``page_type`` or ``url`` (with a hint when the ``url`` looks like a
        glob, ``/p/*.html``: it is a regular expression); None when it does."""
        if self.page_type is not None and self.page_type != page_type:
            return f"{self.label}: its page_type is {self.page_type!r}, this page's {page_type!r}"
        try:
            if self.url is None or search(self.url, url) is not None:
                return None
        except PatternTooSlow as exc:
            return f"{self.label} url: {exc}"
        return f"{self.label}: its url {self.url!r} is not found in the URL{_glob_hint(self.url)}"


# ----------------------------------------------------------------------------------------------
# Reading and validating


@functools.lru_cache(maxsize=1)
def _probe():
    from parsel import Selector
    return Selector(text="<html><body></body></html>")


def _check_selector(kind: str, expression: str) -> str | None:
    """Why ``expression`` is not a valid parsel ``kind`` (css/xpath) selector, or None."""
    if not isinstance(expression, str) or not expression.strip():
        return f"{kind} must be a non-empty string"
    try:
        getattr(_probe(), kind)(expression)
    except Exception as exc:  # cssselect raises SelectorError/ExpressionError, lxml ValueError
        return f"invalid {kind} selector '{expression}': {exc}"
    return None


def _jmespath(expression: str) -> str:
    """The JMESPath text of a ``jsonld`` field (a leading ``$.`` or ``$`` dropped)."""
    text = expression.strip()
    return text[2:] if text.startswith("$.") else text[1:] if text.startswith("$") else text


@functools.lru_cache(maxsize=256)
def _compiled_jmespath(expression: str):
    import jmespath
    return jmespath.compile(_jmespath(expression))


def _check_jsonld(expression) -> str | None:
    """Why ``expression`` is not a valid ``jsonld`` expression, or None."""
    if not isinstance(expression, str) or not _jmespath(expression):
        return "jsonld must be a non-empty JMESPath expression such as \"$.offers.price\""
    try:
        _compiled_jmespath(expression)
    except Exception as exc:  # jmespath's ParseError / LexerError
        return f"invalid jsonld expression {expression!r}: {' '.join(str(exc).split())}"
    return None


def _check_regex(pattern, where: str, url: bool = False) -> None:
    if not isinstance(pattern, str):
        raise ItemSpecError(f"{where}: re must be a string")
    try:
        compile_pattern(pattern)
    except PatternError as exc:
        raise ItemSpecError(f"{where}: invalid regular expression '{pattern}': {exc}{_glob_hint(pattern) if url else ''}") from None
    if url and (why := anchored_path_error(pattern)):
        raise ItemSpecError(f"{where}: {why}")


def _field(name: str, data, where: str) -> FieldSpec:
    where = f"{where} field {name!r}"
    if not isinstance(data, dict):
        raise ItemSpecError(f"{where}: must be a table such as {{ css = \"h1::text\" }}")
    unknown = set(data) - FIELD_KEYS
    if unknown:
        raise ItemSpecError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(FIELD_KEYS)})")
    kinds = [k for k in ("css", "xpath", "jsonld") if k in data]
    if len(kinds) != 1:
        raise ItemSpecError(f"{where}: give exactly one of css, xpath or jsonld")
    problem = (_check_jsonld(data["jsonld"]) if kinds[0] == "jsonld"
               else _check_selector(kinds[0], data[kinds[0]]))
    if problem:
        raise ItemSpecError(f"{where}: {problem}")
    if "re" in data:
        _check_regex(data["re"], where)
    if data.get("type", "str") not in TYPES:
        raise ItemSpecError(f"{where}: type must be one of {', '.join(TYPES)}, not {data.get('type')!r}")
    for flag in ("many", "required", "normalize", "dayfirst"):
        if flag in data and not isinstance(data[flag], bool):
            raise ItemSpecError(f"{where}: {flag} must be true or false")
    if data.get("dayfirst") and data.get("type", "str") != "date":  # false is the default: no harm
        raise ItemSpecError(f"{where}: dayfirst is for a field of type date (it says how 03/04/2026 is read), "
                            f"not {data.get('type', 'str')}")
    return FieldSpec(name, css=data.get("css"), xpath=data.get("xpath"), jsonld=data.get("jsonld"), re=data.get("re"),
                     many=data.get("many", False), type=data.get("type", "str"),
                     required=data.get("required", False), normalize=data.get("normalize", True),
                     dayfirst=data.get("dayfirst", False))


def _each(value, where: str) -> tuple[str, str]:
    if isinstance(value, dict):
        if len(value) != 1 or next(iter(value)) not in ("css", "xpath"):
            raise ItemSpecError(f"{where}: each must be a selector string, {{ css = ... }} or {{ xpath = ... }}")
        kind, expression = next(iter(value.items()))
    elif isinstance(value, str):
        kind = "xpath" if value.lstrip().startswith(("/", "./", "..", "(")) else "css"
        expression = value
    else:
        raise ItemSpecError(f"{where}: each must be a selector string")
    problem = _check_selector(kind, expression)
    if problem:
        raise ItemSpecError(f"{where}: each: {problem}")
    return kind, expression


def _where(data, fields: dict[str, FieldSpec] | None, where: str) -> tuple:
    if not isinstance(data, dict):
        raise ItemSpecError(f"{where}: where must be a table of field = {{ condition }}")
    out = []
    for name, cond in data.items():
        at = f"{where} where {name!r}"
        if fields is not None and name not in fields:
            raise ItemSpecError(f"{at}: no such field")
        if not isinstance(cond, dict) or not cond:
            raise ItemSpecError(f"{at}: must be a table such as {{ re = \"...\" }} or {{ within_days = 30 }}")
        unknown = set(cond) - WHERE_KEYS
        if unknown:
            raise ItemSpecError(f"{at}: unknown conditions {sorted(unknown)} (known: {sorted(WHERE_KEYS)})")
        if "re" in cond:
            _check_regex(cond["re"], at)
        for key in ("within_days", "min", "max"):
            value = cond.get(key)
            if key in cond and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ItemSpecError(f"{at}: {key} must be a number")
        if "within_days" in cond:
            if cond["within_days"] < 0:
                raise ItemSpecError(f"{at}: within_days must not be negative")
            if fields is not None and fields[name].type != "date":
                raise ItemSpecError(f"{at}: within_days needs a field of type date")
        if fields is not None and ("min" in cond or "max" in cond) and fields[name].type not in ("int", "float"):
            raise ItemSpecError(f"{at}: min/max need a field of type int or float")
        if "min" in cond and "max" in cond and cond["min"] > cond["max"]:
            raise ItemSpecError(f"{at}: min ({cond['min']:g}) is above max ({cond['max']:g}): no value could pass")
        out.append((name, tuple(sorted(cond.items()))))
    return tuple(out)


def _item(data, number: int, source: str) -> ItemSpec:
    where = f"{source}: item {number}"
    if not isinstance(data, dict):
        raise ItemSpecError(f"{where}: must be a table")
    kind = data.get("type")
    if kind is None:  # "not None" said nothing to one who had only forgotten it
        raise ItemSpecError(f'{where}: has no type (type = "product": the name its items are stored under)')
    if not isinstance(kind, str) or not TYPE_NAME.match(kind):
        raise ItemSpecError(f"{where}: type must be a name of letters, digits, _ . - (at most 64), not {kind!r}")
    where = f"{source}: item {number} ({kind})"
    unknown = set(data) - ITEM_KEYS
    if unknown:
        raise ItemSpecError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(ITEM_KEYS)})")
    if "url" in data:
        if not isinstance(data["url"], str):
            raise ItemSpecError(f"{where}: url must be a regular expression string")
        _check_regex(data["url"], f"{where} url", url=True)
    if "page_type" in data and not isinstance(data["page_type"], str):
        raise ItemSpecError(f"{where}: page_type must be a string")
    each = _each(data["each"], where) if "each" in data else None
    render = data.get("render", False)
    if not isinstance(render, bool):
        raise ItemSpecError(f"{where}: render must be true or false")
    wait_for = data.get("wait_for")
    from gridcrawl.rules import wait_for_error
    if wait_for is not None and (why := wait_for_error(wait_for)):
        raise ItemSpecError(f"{where}: {why}")
    if wait_for is not None and not render:  # (it was ignored: the page was fetched, never rendered)
        raise ItemSpecError(f"{where}: wait_for is what the browser waits for on a rendered page: it goes with "
                            "render = true")
    plugin = data.get("plugin")
    if plugin is not None:
        if not isinstance(plugin, str) or not PLUGIN_REFERENCE.match(plugin):
            raise ItemSpecError(f"{where}: plugin must be NAME or NAME@VERSION, not {plugin!r}")
        if "fields" in data or each is not None:
            raise ItemSpecError(f"{where}: a plugin item has no fields and no each (the plugin makes them)")
        fields: tuple[FieldSpec, ...] = ()
        conditions = _where(data.get("where", {}), None, where)
    else:
        raw = data.get("fields")
        if not isinstance(raw, dict) or not raw:
            raise ItemSpecError(f"{where}: needs [item.fields] (at least one field) or plugin = \"NAME\"")
        fields = tuple(_field(str(name), spec, where) for name, spec in raw.items())
        conditions = _where(data.get("where", {}), {f.name: f for f in fields}, where)
    return ItemSpec(kind, number, url=data.get("url"), page_type=data.get("page_type"), each=each,
                    fields=fields, where=conditions, plugin=plugin, render=render,
                    wait_for=wait_for.strip() if wait_for else None)


def parse_spec(text: str, source: str = "items.toml") -> list[ItemSpec]:
    """The item specs of TOML ``text`` (``source`` names it in errors). Raises
    :class:`ItemSpecError` for TOML errors, a file without ``[[item]]``, two items of one type,
    and every invalid item, field, selector, regular expression, type or condition."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ItemSpecError(f"{source}: not valid TOML: {exc}") from None
    unknown = set(data) - {"item"}
    if unknown:
        raise ItemSpecError(f"{source}: unknown top-level keys {sorted(unknown)} (write [[item]] tables)")
    items = data.get("item")
    if isinstance(items, dict):  # [item]: one table, which TOML does not let a second one join
        raise ItemSpecError(f"{source}: [item] is a single table: write [[item]] (two brackets), one per item "
                            "type, and [item.fields] under it")
    if not isinstance(items, list) or not items:
        raise ItemSpecError(f"{source}: no [[item]] table")
    specs = [_item(item, n, source) for n, item in enumerate(items, 1)]
    seen: set[str] = set()
    for spec in specs:
        if spec.type in seen:
            raise ItemSpecError(f"{source}: {spec.label}: another item has type {spec.type!r} (types are unique)")
        seen.add(spec.type)
    return specs


def load_spec(path: str | Path) -> list[ItemSpec]:
    """The validated item specs of the TOML file ``path`` (:func:`parse_spec`); a file that
    cannot be read raises :class:`ItemSpecError` too."""
    path = Path(path)
    try:
        text = read_text_file(path)
    except (OSError, ValueError) as exc:
        raise ItemSpecError(f"{path}: cannot read the item spec: {exc}") from None
    return parse_spec(text, str(path))


# ----------------------------------------------------------------------------------------------
# Travelling with grid threads


def spec_to_wire(spec: ItemSpec) -> dict:
    """``spec`` as a msgpack/JSON-ready dict (the crawling instruction's ``items`` entries)."""
    out: dict = {"type": spec.type, "number": spec.number}
    if spec.each is not None:
        out["each"] = {spec.each[0]: spec.each[1]}
    if spec.plugin is not None:
        out["plugin"] = spec.plugin
    else:
        out["fields"] = {f.name: {k: v for k, v in (("css", f.css), ("xpath", f.xpath), ("jsonld", f.jsonld),
                                                     ("re", f.re),
                                                     ("many", f.many), ("type", f.type), ("required", f.required),
                                                     ("normalize", f.normalize), ("dayfirst", f.dayfirst or None))
                                  if v is not None} for f in spec.fields}
    if spec.where:
        out["where"] = {name: dict(cond) for name, cond in spec.where}
    return out


def specs_from_wire(entries: list) -> list[ItemSpec]:
    """Item specs from an instruction's ``items`` list, validated again (a peer may send
    anything); raises :class:`ItemSpecError`. Cached by content: the executor sees the same few
    specs on every page."""
    return list(_from_wire_cached(json.dumps(entries, sort_keys=True)))


@functools.lru_cache(maxsize=64)
def _from_wire_cached(key: str) -> tuple[ItemSpec, ...]:
    entries = json.loads(key)
    if not isinstance(entries, list):
        raise ItemSpecError("instruction items: expected a list")
    out = []
    for entry in entries:
        number = entry.get("number", 1) if isinstance(entry, dict) else 1
        data = {k: v for k, v in entry.items() if k != "number"} if isinstance(entry, dict) else entry
        spec = _item(data, number if isinstance(number, int) else 1, "instruction")
        out.append(spec)
    return tuple(out)


def specs_for(specs: Sequence[ItemSpec], url: str, page_type: str | None) -> list[ItemSpec]:
    """The specs that extract from page ``url`` (canonical) of ``page_type``."""
    return [s for s in specs if s.applies_to(url, page_type)]


def check_page_types(specs: Iterable[ItemSpec], rules: Sequence) -> None:
    """Raise :class:`ItemSpecError` when a spec's ``page_type`` is no page type the keep/follow
    ``rules`` (:class:`gridcrawl.rules.Rule`) give a page (``base``, a seed's, or a follow
    rule's ``to_type``): its items would never be extracted. Without rules only the seeds have a
    page type, ``base``."""
    from gridcrawl.rules import BASE, unknown_page_type
    for spec in specs:
        if spec.page_type is None:
            continue
        if not rules:
            if spec.page_type != BASE:
                raise ItemSpecError(f"{spec.label}: page_type {spec.page_type!r} is no page type of this crawl: "
                                    f"page types come from keep/follow rules (--rules), and without them only the "
                                    f"seeds have one, {BASE!r}")
            continue
        why = unknown_page_type(spec.page_type, rules)
        if why is not None:
            raise ItemSpecError(f"{spec.label}: page_type {why}")


def needs_of(specs: Iterable[ItemSpec]) -> list[str]:
    """The capabilities a thread carrying ``specs`` needs: ``plugin:REFERENCE`` per plugin."""
    from gridcrawl.plugins import need
    return sorted({need(s.plugin) for s in specs if s.plugin is not None})


# ----------------------------------------------------------------------------------------------
# Extraction


@dataclass
class Page:
    """What a plugin's ``extract(page)`` gets: ``url`` (the grid thread's canonical URL),
    ``final_url`` (after redirects), ``status``, ``headers`` (lower-case names), ``text`` (the
    decoded HTML), ``selector`` (a parsel ``Selector`` on the parsed document) and ``links``
    (``[canonical_url, anchor_text]`` pairs) and ``base_url`` (what relative links resolve
    against: the ``<base href>``, else ``final_url``; empty when not known); ``jsonld``, the
    page's JSON-LD objects, is read from the document when first needed (:meth:`jsonld_objects`)."""

    url: str
    final_url: str
    status: int | None
    headers: dict
    text: str
    selector: Any
    links: list
    base_url: str = ""
    jsonld: list | None = None

    def jsonld_objects(self) -> list:
        """The page's JSON-LD objects: every ``application/ld+json`` script (extruct's lenient
        reading, :func:`gridcrawl.semantic.jsonld_script_items`: a number no float holds, such as
        ``1e400``, is the text the page wrote), a top-level list or ``@graph`` flattened to its
        entries; invalid scripts skipped."""
        if self.jsonld is None:
            from gridcrawl.semantic import jsonld_script_items
            found = []
            for node in self.selector.root.iterfind(".//script[@type='application/ld+json']"):
                try:
                    found.extend(jsonld_script_items(node))
                except (ValueError, RecursionError):
                    continue
            self.jsonld = found
        out = []
        for obj in self.jsonld:
            graph = obj.get("@graph") if isinstance(obj, dict) else None
            out.extend(graph if isinstance(graph, list) else [obj])
        return [o for o in out if isinstance(o, (dict, list))]


@dataclass
class Extraction:
    """The items of one page: ``items`` as ``{"type", "position", "fields"}`` dicts, ``misses``
    as ``[type, position, field]`` for each candidate item a required field left empty, and
    ``errors`` as ``[type, message]`` for each spec that failed on the page (a plugin that raised
    or ran past its deadline) or gave more than :data:`MAX_ITEMS_PER_PAGE` items (the rest cut);
    ``dropped`` as ``[type, position]`` for each item its ``[item.where]`` conditions left out
    (not sent to the crawl: ``gridcrawl fetch`` shows them)."""

    items: list = field(default_factory=list)
    misses: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    dropped: list = field(default_factory=list)


def _collapse(text: str) -> str:
    return " ".join(text.split())


#: Elements whose text a reader sees on a line of its own (HTML's block-level and table elements,
#: ``br``): an element's text content puts a line break at their edges where the page has no
#: whitespace, so that ``<p>One.</p><p>Two.</p>`` reads "One. Two.", not "One.Two." (a
#: browser's ``innerText`` does the same).
BLOCK_TAGS = frozenset((
    "address", "article", "aside", "blockquote", "br", "caption", "dd", "details", "dialog", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hgroup",
    "hr", "li", "main", "nav", "ol", "option", "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot",
    "th", "thead", "tr", "ul"))

#: Elements whose content is no text a reader sees: scripts, style sheets and templates inside a
#: selected element are left out of its text content.
HIDDEN_TAGS = frozenset(("script", "style", "template"))


def element_text(element) -> str:
    """The text a reader sees in lxml ``element``: its text nodes in document order, without the
    content of the scripts, style sheets and templates inside it (:data:`HIDDEN_TAGS`; the
    element itself may be one) or of comments, and with a line break at the edges of the
    block-level elements inside it (:data:`BLOCK_TAGS`) where the page put no whitespace there.

    Args:
        element: an lxml element (HTML or XML; a tag is matched without its namespace).

    Returns:
        The text, not normalised (the caller collapses whitespace when the field asks for it).
    """
    parts: list = []  # text, or None: a line break at a block's edge, written only between texts

    def gap() -> None:
        if parts and parts[-1] is not None and not parts[-1][-1:].isspace():
            parts.append(None)

    def add(text) -> None:
        if text:
            if parts and parts[-1] is None and text[:1].isspace():
                parts.pop()  # the page's own whitespace separates them
            parts.append(text)

    if not isinstance(getattr(element, "tag", None), str):  # not an element: its XPath string value
        return str(element.xpath("string()")) if hasattr(element, "xpath") else str(element)
    add(element.text)
    # the walk keeps its own stack (a page may nest 2,048 elements: Python's recursion stops at 1,000)
    stack, closing = [iter(element)], []  # closing[i]: (block, tail) of the element stack[i + 1] walks
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
            if closing:
                block, tail = closing.pop()
                if block:
                    gap()
                add(tail)
            continue
        tag = child.tag if isinstance(child.tag, str) else None  # None: a comment or PI
        name = tag.rsplit("}", 1)[-1].lower() if tag else None
        if name is not None and name not in HIDDEN_TAGS:
            block = name in BLOCK_TAGS
            if block:
                gap()
            add(child.text)
            stack.append(iter(child))
            closing.append((block, child.tail))
        else:
            add(child.tail)
    while parts and parts[-1] is None:
        parts.pop()
    return "".join("\n" if part is None else part for part in parts)


def _strings(results, normalize: bool) -> list[str]:
    out = []
    for sel in results:
        root = sel.root
        if isinstance(root, bool):  # an XPath boolean (boolean(//h1)): its XPath string value
            value = "true" if root else "false"
        elif isinstance(root, float):  # an XPath number (count(//pre)): "33", not "33.0"
            value = str(int(root)) if root.is_integer() else str(root)
        else:
            value = root if isinstance(root, str) else element_text(root)
        value = _collapse(value) if normalize else value
        if value.strip():
            out.append(value)
    return out


#: Apostrophes a page may print as a thousands separator (CHF 1’234.50), read as the ASCII one.
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'", "\u2032": "'", "\uff07": "'"})
#: A percent sign right after a digit (12.5%).
_PERCENT = re.compile(r"(?<=\d)%")


def _number(text: str, integral: bool):
    """``text`` as an ``int`` (``integral``) or a ``float``, or None when it is no number: a plain
    number as Python reads it (so ``"1.234"`` is 1.234, and as an int it is dropped), else an
    amount in any common format by price-parser (``"1.234,50 €"`` is 1234.5); text without a
    digit (``"free"``, which price-parser reads as 0) is no number."""
    cleaned = text.strip()
    if integral:
        try:
            number = int(cleaned)
        except ValueError:
            pass
        else:
            return number if -INT64 - 1 <= number <= INT64 else None
    try:
        plain = float(cleaned)
    except ValueError:
        pass
    else:
        if not math.isfinite(plain):
            return None
        return (int(plain) if plain.is_integer() and abs(plain) <= INT64 else None) if integral else plain
    if not any(ch.isdigit() for ch in cleaned):
        return None
    from price_parser import Price
    # price-parser reads the ASCII apostrophe of Swiss amounts (1'234.50) but stops at the
    # typographic one pages print (1’234.50 was 1.0), and reads 12.5% as 12: give it both as it reads them
    cleaned = _PERCENT.sub(" %", cleaned.translate(_APOSTROPHES))
    amount = Price.fromstring(cleaned).amount_float
    if amount is None:
        return None
    if cleaned.lstrip().startswith("-"):
        amount = -amount
    if not math.isfinite(amount):
        return None
    if integral:
        return int(amount) if float(amount).is_integer() and abs(amount) <= INT64 else None
    return amount


#: Time-zone abbreviations a date may end with, and their offsets east of UTC (seconds): those
#: with a single common meaning. dateutil knows only UTC, GMT and Z by itself: it read "10:00
#: CET" and "3 PM EST" as times without a zone, hours away from what the page meant. Names with
#: several meanings (CST: US Central or China; IST: India, Ireland or Israel; AST; BST is
#: British Summer Time here) and unknown names still give the time as written, without a zone.
TZ_ABBREVIATIONS = {name: int(hours * 3600) for name, hours in {
    "UTC": 0, "UT": 0, "GMT": 0, "WET": 0, "WEST": 1, "BST": 1, "CET": 1, "CEST": 2, "MET": 1, "MEST": 2,
    "EET": 2, "EEST": 3, "MSK": 3, "EST": -5, "EDT": -4, "CDT": -5, "MST": -7, "MDT": -6, "PST": -8,
    "PDT": -7, "AKST": -9, "AKDT": -8, "HST": -10, "JST": 9, "KST": 9, "HKT": 8, "SGT": 8, "AWST": 8,
    "ACST": 9.5, "ACDT": 10.5, "AEST": 10, "AEDT": 11, "NZST": 12, "NZDT": 13}.items()}


def _zone(name: str | None, offset: int | None) -> int | None:
    """dateutil's ``tzinfos``: the offset (seconds east of UTC) of zone ``name`` when it is one of
    :data:`TZ_ABBREVIATIONS`, else the numeric ``offset`` written (``+02:00``), else None: the
    time as written, without a zone (and without dateutil's warning about a name it does not
    know, which a mapping of names would give for "CST")."""
    return TZ_ABBREVIATIONS.get(name, offset) if name else offset


def _date(text: str, dayfirst: bool):
    from dateutil import parser
    try:
        value = _dt.datetime.fromisoformat(text.strip())  # ISO 8601 first: never read day-first
    except ValueError:
        value = None
    try:
        value = value or parser.parse(text, dayfirst=dayfirst, default=_dt.datetime(1, 1, 1),
                                      tzinfos=_zone)
    except (ValueError, OverflowError, parser.ParserError):
        return None
    if value.year == 1:  # no year in the text: not a date
        return None
    if value.hour == value.minute == value.second == value.microsecond == 0 and value.tzinfo is None:
        return value.date().isoformat()
    return value.isoformat()


def _convert(value: str, f: FieldSpec, base_url: str):
    if f.type == "str":
        return value
    if f.type in ("int", "float"):
        return _number(value, f.type == "int")
    if f.type == "date":
        return _date(value, f.dayfirst)
    from gridcrawl.urls import InvalidURL, canonical_url
    try:
        return canonical_url(value.strip(), base_url)
    except (InvalidURL, ValueError):
        return None


def _jsonld_strings(page: "Page", f: FieldSpec) -> list[str]:
    """The matches of a ``jsonld`` field: its expression on each JSON-LD object of ``page``."""
    out = []
    expression = _compiled_jmespath(f.jsonld)
    for obj in page.jsonld_objects():
        try:
            found = expression.search(obj)
        except Exception:  # a function applied to a value of the wrong type: no match
            continue
        for value in found if isinstance(found, list) else [found]:
            if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
                continue
            text = _collapse(str(value)) if f.normalize else str(value)
            if text.strip():
                out.append(text)
    return out


def _field_value(context, f: FieldSpec, base_url: str, page: "Page | None" = None):
    if f.jsonld is not None:
        texts = _jsonld_strings(page, f) if page is not None else []
    else:
        results = context.css(f.css) if f.css is not None else context.xpath(f.xpath)
        texts = _strings(results, f.normalize)
    values = []
    for text in texts:
        if f.re is not None:
            match = search(f.re, text)
            if match is None:
                continue
            text = next((g for g in match.groups() if g is not None), match.group(0)) if match.groups() else match.group(0)
            if not text.strip():
                continue
        converted = _convert(text, f, base_url)
        if converted is not None:
            values.append(converted)
            if not f.many:
                break
    return values if f.many else (values[0] if values else None)


def _empty(value) -> bool:
    return value is None or value == [] or value == ""


def _passes(fields: dict, where, today: _dt.date) -> bool:
    """True if ``fields`` meet every condition of ``where`` (a list field: any of its values)."""
    for name, cond in where:
        value = fields.get(name)
        values = value if isinstance(value, list) else [value]
        values = [v for v in values if v is not None]
        ok = bool(values)
        for key, limit in cond:
            if not ok:
                break
            if key == "re":
                ok = any(search(limit, str(v)) for v in values)
            elif key == "within_days":
                def recent(v):
                    try:
                        day = _dt.date.fromisoformat(str(v)[:10])
                    except ValueError:
                        return False
                    # up to ``limit`` days before today, and not after tomorrow (a page's own
                    # date may be a day ahead of UTC's; a later one is no recent date: a typo, an
                    # event to come)
                    return -1 <= (today - day).days <= limit
                ok = any(recent(v) for v in values)
            elif key in ("min", "max"):
                numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
                ok = any((v >= limit) if key == "min" else (v <= limit) for v in numbers)
        if not ok:
            return False
    return True


#: What one plugin value may hold: maps and lists nested this deep (deeper: their ``str``), keys
#: per map and characters per key.
MAX_VALUE_DEPTH, MAX_KEYS, MAX_KEY_CHARS = 4, 200, 200


def _jsonable(value, cut: set, depth: int = 0):
    """A plugin's value made JSON- and msgpack-safe (:func:`gridcrawl.protocol.json_safe`: an
    integer beyond 64 bits, NaN and infinities become their ``str``, as other objects do; a date
    its ISO 8601 text; a ``Decimal`` the float of the same decimal value, or its ``str`` when no
    float has it: ``Decimal("12.50")`` is 12.5, a 30-digit one stays text) and
    bounded: text at :data:`MAX_VALUE_CHARS`, lists at :data:`MAX_ITEMS_PER_PAGE` entries, maps
    at :data:`MAX_KEYS` keys of :data:`MAX_KEY_CHARS`, nesting past :data:`MAX_VALUE_DEPTH` as
    text; what was cut is added to ``cut`` (the page's items record it as an error)."""
    if value is None or isinstance(value, (bool, int, float)):
        return json_safe(value)
    if isinstance(value, str):
        if len(value) > MAX_VALUE_CHARS:
            cut.add(f"text past {MAX_VALUE_CHARS:,} characters")
        return value[:MAX_VALUE_CHARS]
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):  # a price as Python code keeps it: a number, when a float holds it
        number = float(value) if value.is_finite() else None
        if number is not None and math.isfinite(number) and decimal.Decimal(repr(number)) == value:
            return number
    if isinstance(value, (list, tuple, dict)) and depth >= MAX_VALUE_DEPTH:
        cut.add(f"lists and maps nested past {MAX_VALUE_DEPTH} levels (kept as text)")
    elif isinstance(value, (list, tuple)):
        if len(value) > MAX_ITEMS_PER_PAGE:
            cut.add(f"lists past {MAX_ITEMS_PER_PAGE:,} entries")
        return [_jsonable(v, cut, depth + 1) for v in list(value)[:MAX_ITEMS_PER_PAGE]]
    elif isinstance(value, dict):
        return _fields(value, cut, depth + 1)
    text = str(value)
    if len(text) > MAX_VALUE_CHARS:
        cut.add(f"text past {MAX_VALUE_CHARS:,} characters")
    return text[:MAX_VALUE_CHARS]


def _fields(values: dict, cut: set, depth: int = 0) -> dict:
    """A plugin's map (an item's fields, or a value) as :func:`_jsonable` bounds it."""
    if len(values) > MAX_KEYS:
        cut.add(f"maps past {MAX_KEYS} keys")
    out = {}
    for k, v in list(values.items())[:MAX_KEYS]:
        key = str(k)
        if len(key) > MAX_KEY_CHARS:
            cut.add(f"keys past {MAX_KEY_CHARS} characters")
        out[key[:MAX_KEY_CHARS]] = _jsonable(v, cut, depth)
    return out


#: Plugin calls past their deadline that may still be running at once; beyond it, plugin items
#: fail at once instead of starting another thread (a plugin that hangs on every page must not
#: pile up threads on the executor).
MAX_ABANDONED = 8
_abandoned: set = set()
_abandoned_lock = threading.Lock()  # worker threads of one executor run plugins at once


def _a(noun: str) -> str:
    """``noun`` with its indefinite article: ``"an int"``, ``"a dict"``."""
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def _run_plugin(function: Callable, page: Page, deadline: float) -> list:
    """Call ``function(page)`` and collect its items within ``deadline`` seconds, on a helper
    thread (Python cannot stop a thread: one past its deadline is abandoned, as a daemon, and the
    page's items fail; at most :data:`MAX_ABANDONED` of them at once). Raises ``TimeoutError``,
    ``RuntimeError`` (too many abandoned calls), ``TypeError`` (``function`` returned something
    that is no iterable of items: a dict, a string, a number) or what the plugin raised."""
    with _abandoned_lock:
        _abandoned.difference_update([w for w in _abandoned if not w.is_alive()])
        if len(_abandoned) >= MAX_ABANDONED:
            raise RuntimeError(f"{len(_abandoned)} earlier calls still run past their deadline; not started")
    box: dict = {}

    def work() -> None:
        try:
            produced = []
            returned = function(page)
            if returned is not None and (isinstance(returned, (dict, str, bytes))
                                         or not isinstance(returned, collections.abc.Iterable)):
                # a dict returned gave its keys, a string its characters: "yielded a str, not a dict"
                raise TypeError(f"returned {_a(type(returned).__name__)}, not an iterable of dicts: "
                                "yield each item (or return a list of dicts)")
            for item in returned or ():
                produced.append(item)
                if len(produced) > MAX_ITEMS_PER_PAGE:
                    break
            box["items"] = produced
        except BaseException as exc:  # noqa: BLE001 - reported as the page's item error
            box["error"] = exc

    worker = threading.Thread(target=work, name="plugin", daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        with _abandoned_lock:
            _abandoned.add(worker)
        raise TimeoutError(f"ran past its deadline of {deadline:g} s")
    if "error" in box:
        raise box["error"]
    return box["items"]


def extract(specs: Sequence[ItemSpec], page: Page, *, plugins: dict | None = None,
            plugin_timeout: float = 10.0, today: _dt.date | None = None) -> Extraction:
    """Run ``specs`` on ``page`` (its ``selector`` built on the parsed document).

    ``plugins``: the installed plugins by name (:func:`gridcrawl.plugins.installed_plugins`);
    ``plugin_timeout``: seconds a plugin may take on one page; ``today``: the date ``within_days``
    counts from (UTC today by default: a date passes from that many days before it to the day
    after it). Returns an :class:`Extraction`. Never raises for a page:
    a plugin that is missing, raises or runs late becomes an entry of ``errors``.
    """
    today = today or _dt.datetime.now(_dt.timezone.utc).date()
    out = Extraction()
    base = page.base_url or page.final_url or page.url
    for spec in specs:
        if spec.plugin is not None:
            from gridcrawl.plugins import missing, split_reference
            why = missing(spec.plugin, plugins or {}, " on this executor")
            if why is not None:
                out.errors.append([spec.type, why])
                continue
            plugin = (plugins or {})[split_reference(spec.plugin)[0]]
            try:
                produced = _run_plugin(plugin.load(), _own_copy(page), plugin_timeout)
            except BaseException as exc:  # noqa: BLE001 - a plugin's failure fails its items only
                out.errors.append([spec.type, f"plugin {spec.plugin}: {type(exc).__name__}{f': {exc}' if str(exc) else ''}"[:1000]])
                continue
            if len(produced) > MAX_ITEMS_PER_PAGE:
                out.errors.append([spec.type, f"plugin {spec.plugin}: kept its first {MAX_ITEMS_PER_PAGE} items, "
                                              f"it yielded more (at most {MAX_ITEMS_PER_PAGE} a page and type)"])
            position = 0
            cut: set = set()
            for item in produced[:MAX_ITEMS_PER_PAGE]:
                if not isinstance(item, dict):
                    out.errors.append([spec.type, f"plugin {spec.plugin}: yielded {_a(type(item).__name__)}, "
                                                  "not a dict"])
                    break
                fields = _fields(item, cut)
                try:
                    passes = _passes(fields, spec.where, today)
                except PatternTooSlow as exc:
                    out.errors.append([spec.type, f"where: {exc}"])
                    break
                if passes:
                    out.items.append({"type": spec.type, "position": position, "fields": fields})
                else:
                    out.dropped.append([spec.type, position])
                position += 1
            if cut:  # the items are kept, cut; the page's issues say what was cut
                out.errors.append([spec.type, f"plugin {spec.plugin}: values cut to fit: {', '.join(sorted(cut))}"])
            continue
        contexts = [page.selector] if spec.each is None else \
            (page.selector.css(spec.each[1]) if spec.each[0] == "css" else page.selector.xpath(spec.each[1]))
        if len(contexts) > MAX_ITEMS_PER_PAGE:
            out.errors.append([spec.type, f"kept the first {MAX_ITEMS_PER_PAGE} of the {len(contexts)} matches of "
                                          f"its 'each' (at most {MAX_ITEMS_PER_PAGE} a page and type)"])
        try:
            for position, context in enumerate(contexts[:MAX_ITEMS_PER_PAGE]):
                fields = {f.name: _field_value(context, f, base, page) for f in spec.fields}
                missing = [f.name for f in spec.fields if f.required and _empty(fields[f.name])]
                if missing:
                    out.misses.extend([spec.type, position, name] for name in missing)
                    continue
                if _passes(fields, spec.where, today):
                    out.items.append({"type": spec.type, "position": position, "fields": fields})
                else:
                    out.dropped.append([spec.type, position])
        except PatternTooSlow as exc:  # a user's pattern that backtracks without end fails its spec's items
            out.errors.append([spec.type, str(exc)])
    return out


def _own_copy(page: Page) -> Page:
    """``page`` for one plugin call, with a document tree, links, headers and JSON-LD of its own:
    what the plugin changes (``selector.css("script").drop()`` to read the text, a call abandoned
    at its deadline still running) reaches neither the specs after it nor what the executor reads
    of the page later. Copying the tree costs about 1 ms for a 130 KB page. Before, a plugin
    that dropped the page's scripts left the item specs after it without the page's JSON-LD."""
    import copy
    from parsel import Selector
    return dataclasses.replace(page, headers=dict(page.headers), links=[list(link) for link in page.links],
                               selector=Selector(root=copy.deepcopy(page.selector.root), type="html"), jsonld=None)


def page_for(url: str, final_url: str, status: int | None, headers: dict | None, root, text: str,
             links: list, base_url: str = "", jsonld: list | None = None) -> Page:
    """A :class:`Page` on the lxml document ``root`` parsed by
    :func:`gridcrawl.executor.parse.parse_page` (parsel wraps the tree: no second parse);
    ``jsonld``: the page's JSON-LD objects when already read (a semantic crawl), else ``None``."""
    from parsel import Selector
    return Page(url=url, final_url=final_url or url, status=status, headers=dict(headers or {}), text=text,
                selector=Selector(root=root, type="html"), links=links, base_url=base_url, jsonld=jsonld)
