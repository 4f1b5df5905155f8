"""User-specified keep/follow crawling rules and the crawling instruction built from them.

Source: Z. Peng et al.'s recursive rule-based crawler (``rule-based-recursive-crawler.txt``,
section II, Tables I and II). A :class:`Rule` has the paper's attributes:

* ``base_url`` — the web domain the rule applies to; also the crawl's seed (its page type is
  ``base``);
* ``rule_type`` — ``keep`` (store the matching links in ``kept_link``, do not crawl them) or
  ``follow`` (queue the matching links for crawling with page type ``to_type``);
* ``from_type`` — the page type of the pages the rule applies to;
* ``to_type`` — the page type given to the links a follow rule queues (follow rules only);
* ``pattern`` — a regular expression searched for in the link's canonical URL (Python ``re``
  syntax, :func:`re.search`: "contains a match"), or ``all`` for every link;
* ``id`` / ``class`` / ``tag`` — at most one of them names the DOM elements whose links count
  (an element with that ``id``; elements carrying every class name of ``class``; elements of
  that tag); ``all`` (the default) means every link of the page.

Every page carries a page type. The crawling instruction of a page is built from all rules whose
``from_type`` is the page's type (:func:`instruction_for`), in the paper's JSON form::

    {"baseURL": ..., "urlToCrawl": ..., "keepRules": [{"pattern", "id", "class", "tag"}],
     "followRules": [{"toType", "pattern", "id", "class", "tag"}]}

(each rule entry also carries ``"rule"``: the rule's number, so kept links can name their rule).
The instruction travels with the page's grid thread; the executor parses the page once and
applies every rule of the instruction to its DOM (:func:`apply_instruction`).

Pages that need JavaScript: a TOML rules file may give a page type options, in a
``[page_type.NAME]`` table: ``render = true`` (its pages are rendered in a headless browser, on
an executor with the ``render`` capability) and ``wait_for = "CSS selector"`` (render until
that element exists instead of until the network is idle) — :func:`parse_page_types`,
:class:`PageType`. Only the pages of those types pay for a browser.

Rules are read from a TOML file (``[[rule]]`` tables), a CSV file (a header row with the column
names; TSV when the file ends in ``.tsv`` or its header has tabs and no comma, semicolons when it has
semicolons and no comma), or the crawl database's ``crawl_rule`` table
(:func:`load_rules`, :func:`rules_from_table`, :func:`store_rules`). Column and key names are the
snake_case names above or the paper's camelCase ones (``baseURL``, ``ruleType``, ``fromType``,
``toType``). :func:`validate_rules` refuses, naming the rule: an unknown rule type, a follow rule
without ``to_type``, a keep rule with one, more than one of id/class/tag, an invalid regular
expression, a ``base_url`` that is not an http(s) URL, a ``from_type`` no follow rule leads to,
and a base URL without a follow rule from ``base``.
"""

from __future__ import annotations

import csv
import difflib
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:  # SQLAlchemy is imported only where rules meet the database (not by executors)
    import sqlalchemy as sa

from gridcrawl.urls import InvalidURL, address_hint, canonical_url
from gridcrawl.errors import PatternTooSlow, RuleError
from gridcrawl.patterns import PatternError, compile_pattern, search

__all__ = ["ALL", "BASE", "PAGE_TYPE_LENGTH", "PageType", "Rule", "RuleError", "apply_instruction", "instruction_for", "load_page_types",
           "load_rules", "parse_csv", "parse_page_types", "parse_toml", "rules_from_table", "store_rules",
           "validate_rules"]

#: The default of ``pattern``, ``id``, ``class`` and ``tag``: no restriction.
ALL = "all"
#: The page type of a seed (the rules' base URL).
BASE = "base"
KEEP, FOLLOW = "keep", "follow"
#: Characters of a page type, at most (the width of the ``page_type``, ``from_type`` and
#: ``to_type`` columns of the crawl database).
PAGE_TYPE_LENGTH = 64

# Accepted spellings of each attribute (file keys, CSV columns, instruction keys) -> field name.
_ALIASES = {
    "base_url": "base_url", "baseurl": "base_url",
    "rule_type": "rule_type", "ruletype": "rule_type", "type": "rule_type",
    "from_type": "from_type", "fromtype": "from_type",
    "to_type": "to_type", "totype": "to_type",
    "pattern": "pattern",
    "id": "element_id", "element_id": "element_id",
    "class": "element_class", "element_class": "element_class",
    "tag": "element_tag", "element_tag": "element_tag",
}


@dataclass(frozen=True)
class Rule:
    """One user-specified crawling rule (the paper's Table I row).

    ``element_id``, ``element_class`` and ``element_tag`` are the paper's ``id``, ``class`` and
    ``tag`` attributes (``"all"``: no restriction). ``number`` is the rule's 1-based position in
    its file or table (the paper's "Rule 1", "Rule 2" ...); ``source`` says where it was read
    (e.g. ``"rules.csv line 3"``) for error messages.
    """

    base_url: str
    rule_type: str
    from_type: str
    to_type: str | None = None
    pattern: str = ALL
    element_id: str = ALL
    element_class: str = ALL
    element_tag: str = ALL
    number: int = 0
    source: str = ""

    @property
    def label(self) -> str:
        """How error messages name the rule: ``rule 3 (rules.csv line 4: follow topLevel -> x)``."""
        arrow = f" -> {self.to_type}" if self.to_type else ""
        where = f"{self.source}: " if self.source else ""
        return f"rule {self.number} ({where}{self.rule_type} {self.from_type}{arrow})"

    @property
    def scope(self) -> tuple[str, str] | None:
        """The DOM restriction as ``("id"|"class"|"tag", value)``, or None for every link."""
        for kind, value in (("id", self.element_id), ("class", self.element_class), ("tag", self.element_tag)):
            if value != ALL:
                return kind, value
        return None

    def instruction_entry(self) -> dict:
        """This rule as an element of the instruction's ``keepRules``/``followRules`` array."""
        entry = {"rule": self.number, "pattern": self.pattern, "id": self.element_id,
                 "class": self.element_class, "tag": self.element_tag}
        if self.rule_type == FOLLOW:
            entry = {"toType": self.to_type, **entry}
        return entry


# ----------------------------------------------------------------------------------------------
# Reading rules


def _clean(value) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _rule_from_mapping(data: dict, number: int, source: str, default_base: str | None = None) -> Rule:
    """Build a rule from a mapping of attribute names (any accepted spelling) to values."""
    fields: dict[str, str | None] = {}
    for key, value in data.items():
        name = _ALIASES.get(str(key).strip().lower().replace("-", "_")) if key is not None else None
        if name is None:
            raise RuleError(f"rule {number} ({source}): unknown attribute {key!r} "
                            f"(use base_url, rule_type, from_type, to_type, pattern, id, class, tag)")
        if value is not None and not isinstance(value, (str, int, float)):
            raise RuleError(f"rule {number} ({source}): {key} must be text, not {type(value).__name__}")
        fields[name] = _clean(value)
    missing = [n for n in ("rule_type", "from_type") if not fields.get(n)]
    if not fields.get("base_url") and not default_base:
        missing.insert(0, "base_url")
    if missing:
        raise RuleError(f"rule {number} ({source}): missing {', '.join(missing)}")
    return Rule(
        base_url=fields.get("base_url") or default_base or "",
        rule_type=(fields["rule_type"] or "").lower(),
        from_type=fields["from_type"] or "",
        to_type=fields.get("to_type"),
        pattern=fields.get("pattern") or ALL,
        element_id=fields.get("element_id") or ALL,
        element_class=fields.get("element_class") or ALL,
        element_tag=(fields.get("element_tag") or ALL).lower(),
        number=number, source=source)


def parse_toml(text: str, name: str = "rules.toml") -> list[Rule]:
    """Rules from TOML text: an array of tables ``[[rule]]`` with the attribute keys.

    A top-level ``base_url`` is the default of every rule. Raises :class:`RuleError` on invalid
    TOML or rules (not validated as a set: see :func:`validate_rules`).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{name}: not valid TOML: {exc}") from None
    default_base = _clean(data.get("base_url") or data.get("baseURL"))
    unknown = set(data) - {"rule", "base_url", "baseURL", "page_type"}
    if unknown:
        raise RuleError(f"{name}: unknown top-level keys {sorted(unknown)} (rules go in [[rule]] tables, "
                        f"page type options in [page_type.NAME] tables)")
    tables = data.get("rule", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise RuleError(f"{name}: 'rule' must be an array of tables ([[rule]])")
    return [_rule_from_mapping(t, i, f"{name} [[rule]] {i}", default_base) for i, t in enumerate(tables, 1)]


@dataclass(frozen=True)
class PageType:
    """Options of one page type (``[page_type.NAME]`` in a TOML rules file).

    ``render``: the type's pages are rendered in a headless browser (their grid threads need
    the ``render`` capability); ``wait_for``: a CSS selector the browser waits for before taking
    the DOM (instead of waiting for the network to go idle); ``None`` when not given.
    """

    render: bool = False
    wait_for: str | None = None

    def as_dict(self) -> dict:
        """JSON-ready form (stored in ``crawl_meta`` for a resume)."""
        return {"render": self.render, "wait_for": self.wait_for}


#: Why a --wait-for given for a crawl or a fetch that renders no page is refused.
WAIT_FOR_UNUSED = "--wait-for goes with --render (or a page type or item spec with render = true): no page is rendered"


def read_text_file(path: Path) -> str:
    """The text of the UTF-8 file ``path`` (a rules file, an item spec), without the byte-order
    mark Windows editors may write first. Raises ``OSError``, or ``ValueError`` saying what to
    do for a file that is not UTF-8 (UTF-16, as PowerShell's ``>`` writes, or Latin-1)."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        utf16 = data[:2] in (b"\xff\xfe", b"\xfe\xff")
        raise ValueError(f"it is {'UTF-16' if utf16 else 'not UTF-8'} text ({exc.reason} at byte {exc.start}): "
                         "save it as UTF-8") from None


def anchored_path_error(pattern: str) -> str | None:
    """Why ``pattern`` (a regular expression searched in a page's canonical URL: a rule's
    ``pattern``, an item spec's ``url``) can match no URL because it anchors a path at the start
    (``^/p/``: the URL begins with ``http``), else None."""
    if not re.match(r"(\^|\\A)/", pattern):
        return None
    rest = pattern[1:] if pattern.startswith("^") else pattern[2:]
    return (f"'{pattern}' can match no page: it is searched in the whole URL (http://host/...), which begins "
            f"with 'http', not '/'; write '{rest}', or anchor at the scheme: '^https?://[^/]+{rest}'")


def glob_hint(pattern: str) -> str:
    """A hint for a regular expression written as a shell glob (``*.html``, ``/p/*``), else ""
    (a rule's ``pattern``, an item spec's ``url``)."""
    if not re.search(r"(^|/)\*|\*\.[A-Za-z]", pattern):
        return ""
    return (" (a regular expression searched in the URL, not a glob: '*' repeats what is before it;"
            " any text is '.*', a dot '\\.', as in '/p/.*\\.html$')")


def wait_for_error(selector: str) -> str | None:
    """Why ``selector`` cannot be a ``wait_for`` (the CSS selector a browser waits for before
    taking a rendered page's DOM), or None. Standard CSS is parsed (cssselect), so ``li[`` is
    refused at start instead of failing every page in the browser; Playwright's own forms pass
    as they are, checked by the browser: ``>>`` chains, an engine prefix (``text=``,
    ``xpath=``), XPath (``//li``), pseudo-classes such as ``:has-text()``."""
    if not isinstance(selector, str) or not selector.strip():
        return "wait_for must be a CSS selector"
    text = selector.strip()
    if ">>" in text or re.match(r"[a-z][a-z0-9_-]*=", text) or text.startswith(("/", "..", "(")):
        return None
    import cssselect
    try:
        cssselect.parse(text)
    except cssselect.SelectorError as exc:
        return f"wait_for {selector!r} is not a CSS selector: {exc}"
    return None


def unknown_page_type(name: str, rules: Sequence[Rule]) -> str | None:
    """None when ``name`` is a page type ``rules`` give a page (``base``, a seed's, or a follow
    rule's ``to_type``); else why not, naming the page types (and the likeliest one meant)."""
    known = sorted({BASE} | {r.to_type for r in rules if r.to_type})
    if name in known:
        return None
    alike = [k for k in known if k.lower() == name.lower()] or difflib.get_close_matches(name, known, n=1)
    return (f"{name!r} is no page type of the rules ({', '.join(known)})"
            + (f": did you mean {alike[0]!r}?" if alike else ""))


def parse_page_types(text: str, name: str = "rules.toml", rules: Sequence[Rule] = ()) -> dict[str, PageType]:
    """The ``[page_type.NAME]`` tables of TOML text, as ``{NAME: PageType}``.

    With ``rules`` given, every NAME must be ``base`` or a follow rule's ``to_type``. Raises
    :class:`RuleError` for invalid TOML, an unknown key (only ``render`` and ``wait_for``), a
    value of the wrong type, or a page type no rule gives.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{name}: not valid TOML: {exc}") from None
    tables = data.get("page_type", {})
    if not isinstance(tables, dict):
        raise RuleError(f"{name}: 'page_type' must be tables ([page_type.NAME])")
    known = {BASE} | {r.to_type for r in rules if r.to_type}
    types = {}
    for type_name, options in tables.items():
        where = f"{name} [page_type.{type_name}]"
        if not isinstance(options, dict):
            raise RuleError(f"{where}: must be a table")
        unknown = set(options) - {"render", "wait_for"}
        if unknown:
            raise RuleError(f"{where}: unknown keys {sorted(unknown)} (use render, wait_for)")
        render = options.get("render", False)
        wait_for = options.get("wait_for")
        if not isinstance(render, bool):
            raise RuleError(f"{where}: render must be true or false")
        if wait_for is not None and (why := wait_for_error(wait_for)):
            raise RuleError(f"{where}: {why}")
        if rules and type_name not in known:
            raise RuleError(f"{where}: no rule gives pages the type {type_name!r}")
        types[str(type_name)[:PAGE_TYPE_LENGTH]] = PageType(render, wait_for.strip() if wait_for else None)
    return types


def load_page_types(path: str | Path, rules: Sequence[Rule] = ()) -> dict[str, PageType]:
    """The page type options of rules file ``path`` (TOML only; CSV and TSV files have none).
    Raises :class:`RuleError` as :func:`parse_page_types` does, or for an unreadable file."""
    path = Path(path)
    if path.suffix.lower() != ".toml":
        return {}
    try:
        text = read_text_file(path)
    except (OSError, ValueError) as exc:
        raise RuleError(f"cannot read rules file {path}: {exc}") from None
    return parse_page_types(text, path.name, rules)


def parse_csv(text: str, name: str = "rules.csv", delimiter: str = ",") -> list[Rule]:
    """Rules from CSV text: a header row naming the columns, then one rule per row.

    Blank rows and rows starting with ``#`` are skipped; empty cells take the defaults
    (``all``; no ``to_type``). Raises :class:`RuleError` on unknown columns or bad rows.
    """
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        return []
    reader = csv.reader(lines, delimiter=delimiter)
    header = next(reader)
    rules = []
    for number, row in enumerate(reader, 1):
        if len(row) > len(header):
            raise RuleError(f"rule {number} ({name} row {number + 1}): {len(row)} cells, "
                            f"but the header names {len(header)} columns")
        cells = dict(zip(header, row))
        rules.append(_rule_from_mapping(cells, number, f"{name} row {number + 1}"))
    return rules


def load_rules(path: str | Path) -> list[Rule]:
    """Read and validate the rules in ``path`` (``.toml``, ``.csv`` or ``.tsv``).

    Raises :class:`RuleError` for an unreadable file, an unknown extension, or invalid rules.
    """
    path = Path(path)
    try:
        text = read_text_file(path)
    except (OSError, ValueError) as exc:
        raise RuleError(f"cannot read rules file {path}: {exc}") from None
    suffix = path.suffix.lower()
    if suffix == ".toml":
        rules = parse_toml(text, path.name)
    elif suffix in (".csv", ".tsv"):
        header = next((line for line in text.splitlines() if line.strip()), "")
        # a header with tabs (or semicolons: a spreadsheet's CSV where the decimal mark is the comma) and no commas
        separator = "\t" if suffix == ".tsv" else next((s for s in "\t;" if s in header and "," not in header), ",")
        rules = parse_csv(text, path.name, separator)
    else:
        raise RuleError(f"rules file {path}: unknown format {suffix!r} (use .toml, .csv or .tsv)")
    if not rules:  # validate_rules said "no rules given" of a file that was given
        raise RuleError(f"{path.name} has no rule: " + (
            "write each rule in a [[rule]] table" if suffix == ".toml" else
            "write a header row naming the columns, then one rule per row"))
    return validate_rules(rules)


# ----------------------------------------------------------------------------------------------
# Validation


_TAG_NAME = re.compile(r"[a-z][a-z0-9-]*\Z", re.IGNORECASE)


def _scope_error(rule: Rule) -> str | None:
    """Why the rule's ``id``, ``class`` or ``tag`` cannot name the elements the user meant
    (a CSS selector or an XPath expression written where a plain name goes), or None."""
    hint = "(id, class and tag take plain names, as in the page's HTML; no CSS selector or XPath)"
    if rule.element_tag != ALL and not _TAG_NAME.match(rule.element_tag):
        return f"tag {rule.element_tag!r} is not an element name such as main or div {hint}"
    if rule.element_id != ALL and (rule.element_id.startswith("#") or re.search(r"\s", rule.element_id)):
        return f"id {rule.element_id!r} cannot be an element's id (no '#', no spaces) {hint}"
    if rule.element_class != ALL and any(name.startswith(".") for name in rule.element_class.split()):
        return (f"class {rule.element_class!r} has a name starting with '.': give the class names "
                f"separated by spaces {hint}")
    return None


def validate_rules(rules: Sequence[Rule]) -> list[Rule]:
    """Check every rule and the set; return the rules with canonical base URLs.

    Raises :class:`RuleError` naming the (first) offending rule: rule type not keep/follow;
    empty from_type; a from_type or to_type longer than :data:`PAGE_TYPE_LENGTH`; follow
    without to_type; keep with a to_type; more than one of
    id/class/tag; an id, class or tag written as a CSS selector or XPath (``#main``, ``.body``,
    ``div[@role='main']``); two follow rules of one from_type with the same pattern and
    id/class/tag but different to_types (the second never applies); a pattern that is not a
    valid regular expression; a base_url that is not an
    http(s) URL; a from_type (other than ``base``) that no follow rule leads to; a base URL with
    no follow rule from ``base`` (the paper: "it is necessary to have at least one rule with
    ruleType 'follow' and fromType 'base'"); or no rules at all.
    """
    if not rules:
        raise RuleError("no rules given")
    checked = []
    for rule in rules:
        if rule.rule_type not in (KEEP, FOLLOW):
            raise RuleError(f"{rule.label}: rule_type must be keep or follow, not {rule.rule_type!r}")
        if not rule.from_type:
            raise RuleError(f"{rule.label}: from_type is empty")
        for name, value in (("from_type", rule.from_type), ("to_type", rule.to_type or "")):
            if len(value) > PAGE_TYPE_LENGTH:
                # the crawl database keeps 64: the pages were stored with the type cut short, and
                # no rule applied to them, so the crawl stopped there
                raise RuleError(f"{rule.label}: {name} is {len(value)} characters long; a page type takes at most "
                                f"{PAGE_TYPE_LENGTH}")
        if rule.rule_type == FOLLOW and not rule.to_type:
            raise RuleError(f"{rule.label}: a follow rule needs a to_type (the page type of the links it queues)")
        if rule.rule_type == KEEP and rule.to_type:
            raise RuleError(f"{rule.label}: a keep rule takes no to_type (kept links are not crawled)")
        restricted = [k for k, v in (("id", rule.element_id), ("class", rule.element_class),
                                     ("tag", rule.element_tag)) if v != ALL]
        if len(restricted) > 1:
            raise RuleError(f"{rule.label}: at most one of id, class and tag may be set, "
                            f"not {' and '.join(restricted)}")
        if why := _scope_error(rule):
            raise RuleError(f"{rule.label}: {why}")
        if rule.pattern != ALL:
            try:
                compile_pattern(rule.pattern)
            except PatternError as exc:
                raise RuleError(f"{rule.label}: pattern '{rule.pattern}' is not a valid regular expression: "
                                f"{exc}{glob_hint(rule.pattern)}") from None
            if why := anchored_path_error(rule.pattern):
                raise RuleError(f"{rule.label}: pattern {why}")
        try:
            base = canonical_url(rule.base_url)
        except InvalidURL as exc:
            raise RuleError(f"{rule.label}: base_url {rule.base_url!r} is not a crawlable URL: {exc}"
                            f"{address_hint(rule.base_url.strip())}") from None
        checked.append(replace(rule, base_url=base))
    seen: dict[tuple, Rule] = {}
    for rule in checked:
        if rule.rule_type != FOLLOW:
            continue
        first = seen.setdefault((rule.base_url, rule.from_type, rule.pattern, rule.scope), rule)
        if first is not rule and first.to_type != rule.to_type:
            raise RuleError(f"{rule.label}: follows the same links as rule {first.number} (same from_type, "
                            f"pattern and id/class/tag), which gives them the type {first.to_type!r} first: "
                            f"the first follow rule matching a link gives its type, so this rule never applies")
    reached = {BASE} | {r.to_type for r in checked if r.rule_type == FOLLOW}
    for rule in checked:
        if rule.from_type not in reached:
            alike = ([k for k in sorted(reached) if k.lower() == rule.from_type.lower()]
                     or difflib.get_close_matches(rule.from_type, sorted(reached), n=1))
            raise RuleError(f"{rule.label}: no follow rule has to_type {rule.from_type!r}, "
                            f"so the rule never applies" + (f": did you mean {alike[0]!r}?" if alike else ""))
    for base in dict.fromkeys(r.base_url for r in checked):
        if not any(r.base_url == base and r.rule_type == FOLLOW and r.from_type == BASE for r in checked):
            first = next(r for r in checked if r.base_url == base)
            raise RuleError(f"{first.label}: base URL {base} has no follow rule from 'base', "
                            f"so the crawl cannot go past it")
    return checked


# ----------------------------------------------------------------------------------------------
# The crawl_rule table


def store_rules(conn: sa.Connection, rules: Sequence[Rule]) -> None:
    """Replace the rows of the ``crawl_rule`` table with ``rules`` (inside the caller's
    transaction). ``rule_id`` is the rule's number."""
    from gridcrawl.models import crawl_rule
    conn.execute(crawl_rule.delete())
    if rules:
        conn.execute(crawl_rule.insert(), [
            {"rule_id": r.number, "base_url": r.base_url, "rule_type": r.rule_type, "from_type": r.from_type,
             "to_type": r.to_type, "pattern": r.pattern, "element_id": r.element_id,
             "element_class": r.element_class, "element_tag": r.element_tag} for r in rules])


def rules_from_table(conn: sa.Connection) -> list[Rule]:
    """The rules stored in the ``crawl_rule`` table, in ``rule_id`` order, validated (empty
    list when the table is empty). Raises :class:`RuleError` for invalid stored rules."""
    import sqlalchemy as sa
    from gridcrawl.models import crawl_rule
    rows = conn.execute(sa.select(crawl_rule).order_by(crawl_rule.c.rule_id)).mappings().all()
    rules = [Rule(base_url=r["base_url"], rule_type=r["rule_type"], from_type=r["from_type"],
                  to_type=r["to_type"], pattern=r["pattern"] or ALL, element_id=r["element_id"] or ALL,
                  element_class=r["element_class"] or ALL, element_tag=r["element_tag"] or ALL,
                  number=r["rule_id"], source="crawl_rule table") for r in rows]
    return validate_rules(rules) if rules else []


# ----------------------------------------------------------------------------------------------
# Instructions


def instruction_for(page_type: str | None, url: str, rules: Sequence[Rule]) -> dict:
    """The crawling instruction of the page ``url`` of type ``page_type`` (paper, section II.B).

    Built from every rule whose ``from_type`` is ``page_type``; a base URL's own page (type
    ``base``) takes only the ``base`` rules of its ``base_url`` (every site's seed has the type
    ``base``, so a rules file for several sites could not keep their first hops apart; a seed
    no rule names takes every ``base`` rule). Returns the JSON-ready dict
    ``{"baseURL", "urlToCrawl", "pageType", "keepRules", "followRules"}``; the rule arrays keep the
    rules' order. A page type no rule applies to gets empty arrays: nothing is kept or followed.
    """
    mine = [r for r in rules if r.from_type == page_type]
    if page_type == BASE:
        mine = [r for r in mine if r.base_url == url] or mine
    base = mine[0].base_url if mine else (rules[0].base_url if rules else "")
    return {"baseURL": base, "urlToCrawl": url, "pageType": page_type,
            "keepRules": [r.instruction_entry() for r in mine if r.rule_type == KEEP],
            "followRules": [r.instruction_entry() for r in mine if r.rule_type == FOLLOW]}


def _xpath_literal(value: str) -> str:
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    return "concat(" + ", \"'\", ".join(f"'{part}'" for part in value.split("'")) + ")"


def _scope_elements(root, entry: dict) -> list | None:
    """The DOM elements an instruction entry restricts links to, or None for the whole page."""
    element_id = str(entry.get("id") or ALL)
    element_class = str(entry.get("class") or ALL)
    element_tag = str(entry.get("tag") or ALL)
    if element_id != ALL:
        return root.xpath(f"//*[@id={_xpath_literal(element_id)}]")
    if element_class != ALL:
        names = element_class.split()
        tests = " and ".join(
            f"contains(concat(' ', normalize-space(@class), ' '), {_xpath_literal(' ' + n + ' ')})" for n in names)
        return root.xpath(f"//*[{tests}]") if names else None
    if element_tag != ALL:
        return list(root.iter(element_tag.lower()))
    return None


def _matcher(pattern):
    if pattern in (None, "", ALL):
        return lambda url: True
    try:
        compile_pattern(str(pattern))
    except PatternError as exc:
        raise RuleError(f"instruction pattern {_shown(pattern)} is not a valid regular expression: {exc}") from None

    def matches(url: str) -> bool:
        try:
            return search(str(pattern), url) is not None
        except PatternTooSlow as exc:  # the page fails as bad_instruction, naming the pattern
            raise RuleError(f"instruction pattern: {exc}") from None
    return matches


def _shown(value) -> str:
    """An instruction's value in an error message: quoted, at most 200 characters of it."""
    text = str(value)
    return repr(text if len(text) <= 200 else text[:200] + "...")


def apply_instruction(root, page_url: str, links: Iterable, instruction: dict, max_links: int | None = None
                      ) -> tuple[list[tuple[str, str, str]], list[tuple[str, int]]]:
    """Apply a crawling instruction to a parsed page (executor side; one parse, every rule).

    Args:
        root: the lxml root element of the page (``ParsedPage.document``).
        page_url: the URL the page was fetched from (after redirects); links in DOM-scoped
            rules resolve against the page's ``<base href>``, else this URL.
        links: every link of the page, as :class:`gridcrawl.executor.parse.Link` objects or
            ``[url, text]`` pairs (used for rules without a DOM restriction).
        instruction: a dict from :func:`instruction_for`.
        max_links: links a DOM-scoped rule reads from its elements, at most, and the length of
            ``follow`` and of ``keep``, at most (``None``: no bound).

    Returns:
        ``(follow, keep)``: ``follow`` lists ``(url, anchor_text, to_type)`` once per URL (the
        first follow rule that matches gives the type); ``keep`` lists ``(url, rule_number)``
        once per URL and rule, where rule_number is the entry's ``"rule"`` (else its 1-based
        index in ``keepRules``). Raises :class:`RuleError` for an invalid pattern, or an id,
        class or tag lxml cannot look up (a NUL character, ``{`` as a tag): the executor fails
        the page as ``bad_instruction``.
    """
    from gridcrawl.executor.parse import document_base, extract_links

    all_links = [(link.url, link.text) if hasattr(link, "url") else (link[0], link[1]) for link in links]
    base = None

    def candidates(entry: dict) -> list[tuple[str, str]]:
        nonlocal base
        try:
            elements = _scope_elements(root, entry)
        except ValueError as exc:  # lxml: a NUL or a lone surrogate in an id or class, "{" as a tag
            named = next((v for v in (entry.get("id"), entry.get("class"), entry.get("tag")) if v and str(v) != ALL), "")
            raise RuleError(f"instruction id, class or tag {_shown(named)} cannot be looked up: {exc}") from None
        if elements is None:
            return all_links
        if base is None:
            base = document_base(root, page_url)
        return [(link.url, link.text) for link in extract_links(root, base, within=elements, limit=max_links)]

    follow: list[tuple[str, str, str]] = []
    followed: set[str] = set()
    for entry in instruction.get("followRules") or []:
        matches = _matcher(entry.get("pattern"))
        to_type = str(entry.get("toType") or "")
        for url, text in candidates(entry):
            if url not in followed and to_type and matches(url):
                followed.add(url)
                follow.append((url, text, to_type))
    keep: list[tuple[str, int]] = []
    kept: set[tuple[str, int]] = set()
    for index, entry in enumerate(instruction.get("keepRules") or [], 1):
        matches = _matcher(entry.get("pattern"))
        number = entry.get("rule") if isinstance(entry.get("rule"), int) else index
        for url, _text in candidates(entry):
            if (url, number) not in kept and matches(url):
                kept.add((url, number))
                keep.append((url, number))
    if max_links is not None:  # each rule's links are bounded; so is what all of them make
        del follow[max_links:], keep[max_links:]
    return follow, keep
