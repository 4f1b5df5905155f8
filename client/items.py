"""Items in the crawl database: the ``item``, ``item_issue`` and ``item_spec`` tables.

* :func:`item_rows` turns the items, misses and errors an executor sent with a page into rows
  (checked: an executor may send anything); :meth:`gridcrawl.client.store.CrawlStore.apply`
  inserts them in the page's own transaction, insert-if-absent on (page, type, position), so a
  page fetched or applied twice never duplicates its items.
* :func:`save_spec` / :func:`stored_spec`: the crawl's item spec file, kept like the rules so a
  resumed crawl keeps it.
* :func:`item_summary`: items per type, and per field how many items have a value and how many
  candidate items a required field left empty (how a user finds a broken selector).
* :func:`export_items`: ``gridcrawl export --items`` (JSON lines, or CSV with one column per field).
* :func:`reextract`: ``gridcrawl extract``: every item again from the stored pages, nothing fetched.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from typing import Callable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gridcrawl import models
from gridcrawl.db import init_schema, insert_ignore, run_transaction, utcnow
from gridcrawl.items import MAX_ITEMS_PER_PAGE, ItemSpec, ItemSpecError, extract, page_for, parse_spec, specs_for
from gridcrawl.errors import ItemExportError  # noqa: F401 (re-exported)

#: Items read from the database at a time by an export (streamed, not all at once).
BATCH = 500

item, item_issue, item_spec = models.item, models.item_issue, models.item_spec
MAX_FIELDS_JSON = 1_000_000  # characters of one item's JSON at most (a hostile executor stays bounded)


def _name(value, limit: int) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


def _position(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31 else None


def item_rows(found_items: list, misses: list, errors: list, fingerprint: str, url: str, types: set[str],
              now) -> tuple[list[dict], list[dict]]:
    """The ``item`` and ``item_issue`` rows of one page ``url``/``fingerprint`` from what its
    extraction found (a :class:`~gridcrawl.protocol.PageResult`'s ``items``, ``item_misses``
    and ``item_errors``). Entries of a type not in ``types`` (the crawl's item types) or of the
    wrong shape are dropped, and entries past :data:`~gridcrawl.items.MAX_ITEMS_PER_PAGE` per
    spec type (at most that many per page and type are ever made)."""
    items, issues = [], []
    limit = MAX_ITEMS_PER_PAGE * max(1, len(types))
    found_items, misses, errors = (list(x or [])[:limit] for x in (found_items, misses, errors))
    for entry in found_items:
        if not isinstance(entry, dict):
            continue
        kind, position, fields = _name(entry.get("type"), 64), _position(entry.get("position")), entry.get("fields")
        if kind not in types or position is None or not isinstance(fields, dict):
            continue
        try:  # strict JSON (RFC 8259): a broken or hostile executor's NaN drops its item, not the batch
            text = json.dumps(fields, ensure_ascii=False, default=str, allow_nan=False)
        except (TypeError, ValueError):
            continue
        if len(text) > MAX_FIELDS_JSON:
            continue
        items.append({"type": kind, "fingerprint": fingerprint, "url": url, "position": position,
                      "fields": text, "extracted_at": now})
    for entry in misses:
        if not isinstance(entry, list) or len(entry) != 3:
            continue
        kind, position, name = _name(entry[0], 64), _position(entry[1]), _name(entry[2], 200)
        if kind in types and position is not None and name:
            issues.append({"type": kind, "fingerprint": fingerprint, "url": url, "position": position,
                           "field": name, "kind": "missing", "message": None, "noted_at": now})
    for entry in errors:
        if not isinstance(entry, list) or len(entry) != 2:
            continue
        kind, message = _name(entry[0], 64), _name(entry[1], 1024)
        if kind is not None and (kind in types or kind == "*"):
            issues.append({"type": kind, "fingerprint": fingerprint, "url": url, "position": -1, "field": "",
                           "kind": "error", "message": message, "noted_at": now})
    return items, issues


# ----------------------------------------------------------------------------------------------
# The spec


def save_spec(engine: Engine, source: str, text: str) -> None:
    """Keep the item spec ``text`` (read from file ``source``) in ``item_spec``, replacing it."""
    run_transaction(engine, lambda conn: _store_spec(conn, source, text))


def _store_spec(conn, source: str, text: str) -> None:
    conn.execute(item_spec.delete())
    conn.execute(item_spec.insert().values(id=1, source=source[:1024], text=text, stored_at=utcnow()))


def stored_spec(engine: Engine) -> list[ItemSpec]:
    """The item specs kept in ``item_spec`` (empty when there are none). Raises
    :class:`~gridcrawl.items.ItemSpecError` if the stored text is no longer valid."""
    with engine.connect() as conn:
        row = conn.execute(sa.select(item_spec.c.source, item_spec.c.text).where(item_spec.c.id == 1)).first()
    return parse_spec(row.text, f"{row.source} (stored in the crawl database)") if row else []


# ----------------------------------------------------------------------------------------------
# Figures


@dataclass
class FieldFigures:
    """One field of an item type: ``filled`` items have a value for it; ``missed`` candidate
    items had it empty although it is required (they yielded no item)."""

    name: str
    filled: int = 0
    missed: int = 0


@dataclass
class TypeFigures:
    """One item type: ``items`` stored, ``pages`` they came from, ``errors`` (pages whose items
    failed: a plugin raised or ran late) and its fields (in the spec's order when known)."""

    type: str
    items: int = 0
    pages: int = 0
    errors: int = 0
    fields: dict[str, FieldFigures] = field(default_factory=dict)
    error_example: tuple[str, str] | None = None  # (url, message) of one page whose items failed

    @property
    def never_matched(self) -> list[str]:
        """Fields no stored item has a value for (a broken selector, usually)."""
        return [f.name for f in self.fields.values() if f.filled == 0]


def item_summary(engine: Engine, specs: Sequence[ItemSpec] = ()) -> list[TypeFigures]:
    """Items per type and, per field, items with a value and misses of required fields, from
    the ``item`` and ``item_issue`` tables (``specs`` name the fields and their order; fields
    only the items name are added). Reads every item's JSON once."""
    figures: dict[str, TypeFigures] = {}
    for spec in specs:
        figures[spec.type] = TypeFigures(spec.type, fields={f.name: FieldFigures(f.name) for f in spec.fields})
    with engine.connect().execution_options(yield_per=BATCH) as conn:  # streamed, as export_items
        pages: dict[str, set] = {}
        for kind, fingerprint, text in conn.execute(sa.select(item.c.type, item.c.fingerprint, item.c.fields)):
            t = figures.setdefault(kind, TypeFigures(kind))
            t.items += 1
            pages.setdefault(kind, set()).add(fingerprint)
            try:
                values = json.loads(text)
            except ValueError:
                continue
            for name, value in values.items():
                f = t.fields.setdefault(name, FieldFigures(name))
                if value not in (None, "", []):
                    f.filled += 1
        for kind, name, issue, count in conn.execute(
                sa.select(item_issue.c.type, item_issue.c.field, item_issue.c.kind, sa.func.count())
                .group_by(item_issue.c.type, item_issue.c.field, item_issue.c.kind)):
            t = figures.setdefault(kind, TypeFigures(kind))
            if issue == "missing":
                t.fields.setdefault(name, FieldFigures(name)).missed += int(count)
            else:
                t.errors += int(count)
        for kind, url, message in conn.execute(  # one failed page per type, for the summary to show
                sa.select(item_issue.c.type, item_issue.c.url, item_issue.c.message)
                .where(item_issue.c.kind == "error").order_by(item_issue.c.id)):
            t = figures[kind]
            if t.error_example is None:
                t.error_example = (url, message or "")
    for kind, fps in pages.items():
        figures[kind].pages = len(fps)
    return list(figures.values())


# ----------------------------------------------------------------------------------------------
# Export


def _gone_pages():
    """The fingerprints of the stored documents a recrawl found gone (404/410)."""
    doc = models.document
    return sa.select(doc.c.fingerprint).where(doc.c.gone_at.is_not(None))


def _item_query(kind: str | None, include_gone: bool = True):
    query = sa.select(item.c.type, item.c.url, item.c.position, item.c.fields, item.c.extracted_at).order_by(item.c.id)
    if not include_gone:
        query = query.where(item.c.fingerprint.not_in(_gone_pages()))
    return query.where(item.c.type == kind) if kind else query


@dataclass
class ItemExport:
    """What :func:`export_items` wrote: ``items`` written, and ``gone`` items left out because a
    recrawl found their page gone (404/410), on ``gone_pages`` pages; ``spec``: the crawl has an
    item spec (it ran with ``--extract``, or ``gridcrawl extract`` ran on it)."""

    items: int = 0
    gone: int = 0
    gone_pages: int = 0
    spec: bool = True


def export_items(engine: Engine, out: str, format: str = "jsonl", kind: str | None = None, *,
                 include_gone: bool = False) -> ItemExport:
    """Write the items (of type ``kind`` only, if given) to the file ``out`` (``-``: standard
    output) as JSON lines (``{"type", "url", "position", "extracted_at", "fields": {...}}``) or
    CSV (columns type, url, position, extracted_at, then one per field: the stored spec's in its
    order, then any other (a plugin's) in first-seen order; lists and maps as JSON; a field
    named as one of the first four columns, or starting ``field.``, gets the column
    ``field.NAME``, so that no two columns share a name). A ``kind``
    the crawl has neither items nor a spec of is an :class:`ItemExportError`. The items of a page
    a recrawl found gone (404/410: ``document.gone_at`` set; the page and its items stay stored,
    docs/recrawl.md) are left out unless ``include_gone``: an export is what the site holds now.
    Returns an :class:`ItemExport` (items written, gone items left out). Raises :class:`ItemExportError`, or :class:`~gridcrawl.errors.ExportError` when
    ``out`` cannot be written (nothing is left there then: :func:`gridcrawl.export.open_output`)."""
    from gridcrawl.export import iso_utc, open_output
    if format not in ("jsonl", "csv"):
        raise ItemExportError(f"--format must be jsonl or csv for items, not {format!r}")
    if not sa.inspect(engine).has_table("item"):
        from gridcrawl.db import older_schema, wrong_kind
        if other := wrong_kind(engine, "crawl"):
            raise ItemExportError(f"{other}: export takes the crawl database")
        # a release before items: it said the crawl "ran without --extract", which it could not be given
        raise ItemExportError(older_schema(engine, "crawl")
                              or "this crawl database has no item table (the crawl ran without --extract)")
    result = ItemExport()
    try:
        specs = stored_spec(engine)
        result.spec = bool(specs)
    except ItemSpecError:
        specs = []
    if kind is not None:
        with engine.connect() as conn:
            types = set(conn.execute(sa.select(item.c.type).distinct()).scalars()) | {s.type for s in specs}
        if kind not in types:
            raise ItemExportError(f"--type {kind!r}: this crawl has no items of that type (its types: "
                                  f"{', '.join(sorted(types)) or 'none'})")
    if not include_gone and sa.inspect(engine).has_table("document"):
        with engine.connect() as conn:
            gone = (sa.select(sa.func.count(), sa.func.count(sa.distinct(item.c.fingerprint)))
                    .where(item.c.fingerprint.in_(_gone_pages()), *([item.c.type == kind] if kind else [])))
            result.gone, result.gone_pages = conn.execute(gone).one()
    else:
        include_gone = True
    # streamed (a server-side cursor on PostgreSQL and MariaDB), BATCH rows at a time: psycopg read all
    # 100,000 items of 2 KB into memory first (270 MB) where the pages export stays near 50 MB
    with open_output(out, binary=False) as stream, engine.connect().execution_options(yield_per=BATCH) as conn:
        if format == "jsonl":
            for row in conn.execute(_item_query(kind, include_gone)):
                stream.write(json.dumps({"type": row.type, "url": row.url, "position": row.position,
                                         "extracted_at": iso_utc(row.extracted_at),
                                         "fields": json.loads(row.fields)}, ensure_ascii=False) + "\n")
                result.items += 1
            return result
        # the spec's fields in its order (a crawl's and a re-extraction's rows alike), then any other
        columns: dict[str, None] = {f.name: None for spec in specs if kind is None or spec.type == kind
                                    for f in spec.fields}
        for (text,) in conn.execute(sa.select(item.c.fields).where(item.c.type == kind) if kind
                                    else sa.select(item.c.fields)):
            columns.update(dict.fromkeys(json.loads(text)))
        writer = csv.writer(stream)
        fixed = ("type", "url", "position", "extracted_at")  # a field of one of these names: "field.url"
        writer.writerow([*fixed, *(f"field.{c}" if c in fixed or c.startswith("field.") else c for c in columns)])
        for row in conn.execute(_item_query(kind, include_gone)):
            values = json.loads(row.fields)
            cells = [v if isinstance(v, str) or v is None else json.dumps(v, ensure_ascii=False)
                     for v in (values.get(c) for c in columns)]
            writer.writerow([row.type, row.url, row.position,
                             iso_utc(row.extracted_at) or "", *cells])
            result.items += 1
        return result


# ----------------------------------------------------------------------------------------------
# Re-extraction


@dataclass
class Reextraction:
    """What :func:`reextract` did: ``pages`` read, ``items`` stored, ``misses`` and ``errors``
    recorded, ``skipped`` pages without a stored HTML body; ``unrendered``: per item type whose
    spec asks for rendering (``render = true``), the pages it applied to whose stored body was
    not rendered (``document.render_seconds`` NULL: the HTML as served, before any script ran)."""

    pages: int = 0
    items: int = 0
    misses: int = 0
    errors: int = 0
    skipped: int = 0
    unrendered: dict[str, int] = field(default_factory=dict)


def reextract(engine: Engine, specs: Sequence[ItemSpec], *, plugins: dict | None = None,
              plugin_timeout: float = 10.0, batch: int = 200,
              on_progress: Callable[[int, int], None] | None = None,
              spec: tuple[str, str] | None = None) -> Reextraction:
    """Extract every item again from the pages stored in ``document`` (their ``content``),
    fetching nothing, with ``specs`` (plugins: those installed here). The ``item`` and
    ``item_issue`` tables are replaced (the new spec is the truth) and ``spec``, ``(source
    file, text)``, is kept as the crawl's, all in one transaction: a run interrupted (Ctrl-C, a
    crash, a database error) leaves the crawl's items and spec as they were (it deleted them
    first, then wrote batch by batch). ``on_progress(done, total)`` is called after each batch
    of ``batch`` pages. Raises :class:`ItemExportError` when no page body was stored."""
    from gridcrawl.executor.parse import parse_page
    document = models.document
    init_schema(engine, models.crawl_metadata, models.crawl_meta)
    with engine.connect() as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(document)).scalar()
        stored = conn.execute(sa.select(sa.func.count()).select_from(document)
                              .where(document.c.content.is_not(None))).scalar()
    if total and not stored:
        raise ItemExportError("no page bodies are stored in this crawl (it ran with --no-content): "
                              "nothing to extract from")
    types = {s.type for s in specs}
    done = Reextraction()
    with engine.begin() as conn:  # one transaction (see above)
        conn.execute(item.delete())
        conn.execute(item_issue.delete())
        last_id = None
        while True:
            query = (sa.select(document.c.doc_id, document.c.url, document.c.fingerprint, document.c.final_url,
                               document.c.status, document.c.content, document.c.headers, document.c.page_type,
                               document.c.render_seconds)
                     .order_by(document.c.doc_id).limit(batch))
            if last_id is not None:
                query = query.where(document.c.doc_id > last_id)
            rows = conn.execute(query).all()
            if not rows:
                break
            last_id = rows[-1].doc_id
            items, issues = [], []
            now = utcnow()
            for row in rows:
                done.pages += 1
                mine = specs_for(specs, row.url, row.page_type)
                if not mine:
                    continue
                if row.content is None:
                    done.skipped += 1
                    continue
                if row.render_seconds is None:
                    for one in mine:
                        if one.render:
                            done.unrendered[one.type] = done.unrendered.get(one.type, 0) + 1
                parsed = parse_page(row.content.encode("utf-8"), row.final_url or row.url, "text/html; charset=utf-8")
                headers = json.loads(row.headers) if row.headers else {}
                view = page_for(row.url, row.final_url, row.status, headers, parsed.document, row.content,
                                [[link.url, link.text] for link in parsed.links], parsed.base_url)
                found = extract(mine, view, plugins=plugins, plugin_timeout=plugin_timeout)
                new_items, new_issues = item_rows(found.items, found.misses, found.errors, row.fingerprint, row.url,
                                                  types, now)
                items += new_items
                issues += new_issues
                done.items += len(new_items)
                done.misses += sum(1 for i in new_issues if i["kind"] == "missing")
                done.errors += sum(1 for i in new_issues if i["kind"] == "error")
            insert_ignore(conn, item, items)
            insert_ignore(conn, item_issue, issues)
            if on_progress is not None:
                on_progress(done.pages, total)
        if spec is not None:
            _store_spec(conn, *spec)
    return done
