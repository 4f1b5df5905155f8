"""Exporting a crawl database: ``gridcrawl export --db URL --format jsonl|warc|csv OUT``.

This module owns the three export formats of a crawl's tables:

* **JSONL** — one JSON object per line per ``document`` row: every column (times as ISO 8601
  UTC, ``headers`` as an object, a kept binary ``body`` as ``body_base64``); ``content=False``
  leaves page text and bodies out.
* **CSV** — the ``visited_url`` table (every URL visited, with status, error and attempts), one
  row per URL with a header row (RFC 4180, UTF-8).
* **WARC 1.1** (ISO 28500:2017) — for every stored page a ``request`` record (the GET as the
  executor sent it: method, path, ``Host``; ``User-Agent`` only when given, as the crawl does not
  record it) and a ``response`` record (status
  line, the response headers stored in ``document.headers``, the body), linked by
  ``WARC-Concurrent-To``, after one ``warcinfo`` record; written with warcio, gzip-compressed per
  record when OUT ends in ``.gz``. A recrawled page whose last visit found the stored body
  current adds a ``revisit`` record (WARC 1.1 §6.7: profile ``server-not-modified`` after a 304,
  ``identical-payload-digest`` after a body with the same digest) referring to its response; the
  versions a recrawl replaced are written as ``request``/``response`` pairs of their own, dated
  when they were fetched, when their bodies were kept (``--keep-versions``). Bodies are stored decompressed, and HTML as decoded text, so
  the payload is the stored page (HTML re-encoded in its detected charset, byte-identical unless
  the page had malformed bytes or characters its charset encodes two ways: counted in
  :attr:`ExportResult.altered`), ``Content-Encoding``/``Transfer-Encoding`` are dropped and
  ``Content-Length`` is the payload's length. Pages crawled with ``--no-content`` have no body and
  are left out of the WARC (counted in the result).

With ``--triples`` (a semantic crawl's ``triple`` table, :mod:`gridcrawl.semantic`):

* **N-Triples** (W3C RDF 1.1 N-Triples) — one line per stored triple, each term written by
  rdflib's N-Triples serializer; blank nodes, numbered per page when parsed, are renamed
  ``_:p<page fingerprint>b<n>`` so that two pages' nodes stay apart. A triple found on two
  pages is written twice (N-Triples readers merge them).
* **JSONL** — one JSON object per triple: ``url`` and ``fingerprint`` of the page, ``subject``,
  ``predicate``, ``object``, ``object_kind``, ``datatype``, ``language``.

Rows are streamed (``yield_per``), so an export does not hold the crawl in memory.
"""

from __future__ import annotations

import base64
import csv
import datetime as _dt
import hashlib
import io
import json
import os
import stat
import sys
import tempfile
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import BinaryIO, Iterator
from urllib.parse import urlsplit

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gridcrawl import models
from gridcrawl.errors import ExportError  # noqa: F401 (re-exported)

FORMATS = ("jsonl", "warc", "csv")
TRIPLE_FORMATS = ("nt", "jsonl")
#: Rows read from the database at a time; rows with page bodies (up to max_body_bytes, 10 MiB,
#: each) BODY_BATCH at a time, so that an export's memory stays near one batch of bodies.
BATCH = 500
BODY_BATCH = 8
# Hop-by-hop or no longer true of the stored (decompressed, whole) body.
_DROPPED_HEADERS = {"content-encoding", "transfer-encoding", "content-length", "connection", "keep-alive"}


@dataclass
class ExportResult:
    """What an export wrote: ``records`` (lines, rows, or pages for WARC), ``skipped``
    (documents left out of a WARC because no body was stored; ``duplicates`` of them are
    duplicates of a stored page, written under its URL), and for a WARC ``revisits``
    (revisit records), ``versions`` (replaced versions written with their bodies),
    ``bare_versions`` (replaced versions left out: replaced without ``--keep-versions``, they
    have no body to write) and ``altered`` (pages whose payload is not the bytes served: their stored text does not encode
    back to them — malformed bytes, or a character with two encodings in the page's charset)."""

    records: int = 0
    skipped: int = 0
    duplicates: int = 0  # of skipped: duplicates of a stored page (document.duplicate_of), whose record is that page's
    revisits: int = 0
    versions: int = 0
    bare_versions: int = 0  # replaced versions left out of a WARC: no body kept (no --keep-versions)
    altered: int = 0  # WARC payloads that are not the bytes served (their digest is not content_digest)


def iso_utc(value: _dt.datetime | None) -> str | None:
    """A naive-UTC datetime of the tables as ISO 8601 with ``Z`` (None for None)."""
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return value.isoformat() + "Z"


def _rows(engine: Engine, table: sa.Table, order) -> Iterator[dict]:
    """Every row of ``table`` in ``order``, streamed in batches (:data:`BODY_BATCH` rows of a
    table with page bodies). Raises :class:`ExportError` if the table is missing (not a crawl
    database)."""
    batch = BODY_BATCH if "content" in table.c else BATCH
    try:
        with engine.connect() as conn:
            result = conn.execution_options(yield_per=batch).execute(sa.select(table).order_by(order))
            for row in result:
                yield dict(row._mapping)
    except sa.exc.DBAPIError as exc:
        from gridcrawl.db import older_schema, shown_url, wrong_kind
        if other := wrong_kind(engine, "crawl"):
            raise ExportError(f"{other}: export takes the crawl database") from None
        if old := older_schema(engine, "crawl"):
            raise ExportError(old) from None
        first = str(exc.orig).splitlines()[0] if exc.orig is not None else str(exc)
        raise ExportError(f"{shown_url(engine.url)} is not a gridcrawl crawl "
                          f"database ({table.name}: {first})") from None


def _headers(row: dict) -> dict:
    """The stored response headers of a document row (``{}`` if none were stored)."""
    raw = row.get("headers")
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# ----------------------------------------------------------------------------------------------
# JSONL and CSV


def export_jsonl(engine: Engine, out: io.TextIOBase, *, content: bool = True) -> ExportResult:
    """Write every document of the crawl in ``engine`` to text stream ``out``, one JSON object
    per line (keys: the ``document`` columns; ``headers`` decoded; binary ``body`` as
    ``body_base64``). ``content``: include page text and bodies."""
    result = ExportResult()
    for row in _rows(engine, models.document, models.document.c.doc_id):
        record: dict = {}
        for key, value in row.items():
            if key in ("content", "body") and not content:
                continue
            if key == "headers":
                record["headers"] = _headers(row) or None
            elif isinstance(value, _dt.datetime):
                record[key] = iso_utc(value)
            elif isinstance(value, (bytes, bytearray, memoryview)):
                record[f"{key}_base64"] = base64.b64encode(bytes(value)).decode("ascii")
            else:
                record[key] = value
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
        result.records += 1
    return result


def export_csv(engine: Engine, out: io.TextIOBase) -> ExportResult:
    """Write the crawl's visited URLs (table ``visited_url``, every column) to text stream
    ``out`` as CSV with a header row; times as ISO 8601 UTC."""
    result = ExportResult()
    writer = csv.writer(out, lineterminator="\r\n")
    rows = _rows(engine, models.visited_url, models.visited_url.c.id)
    first = next(rows, None)  # fail on a database that is no crawl's (or an older one) before the header row
    writer.writerow([c.name for c in models.visited_url.columns])
    for row in _chain(first, rows):
        writer.writerow(["" if v is None else iso_utc(v) if isinstance(v, _dt.datetime) else v for v in row.values()])
        result.records += 1
    return result


# ----------------------------------------------------------------------------------------------
# Triples


def _triple_rows(engine: Engine) -> Iterator[dict]:
    """The ``triple`` rows with their page's URL, in insertion order, streamed. Raises
    :class:`ExportError` when the table is missing (not a crawl database of this version)."""
    t, d = models.triple, models.document
    query = (sa.select(t, d.c.url).select_from(t.outerjoin(d, d.c.fingerprint == t.c.fingerprint))
             .order_by(t.c.id))
    try:
        with engine.connect() as conn:
            for row in conn.execution_options(yield_per=BATCH).execute(query):
                yield dict(row._mapping)
    except sa.exc.DBAPIError as exc:
        from gridcrawl.db import older_schema, wrong_kind
        if other := wrong_kind(engine, "crawl"):
            raise ExportError(f"{other}: export takes the crawl database") from None
        if old := older_schema(engine, "crawl"):  # (it said "no such table: triple")
            raise ExportError(old) from None
        first = str(exc.orig).splitlines()[0] if exc.orig is not None else str(exc)
        raise ExportError(f"cannot read the triple table: {first}") from None


def _rdf_term(value: str, kind: str, fingerprint: str, datatype: str | None = None, language: str | None = None):
    from rdflib import BNode, Literal, URIRef
    if value.startswith("_:") and kind != "literal":
        return BNode(f"p{fingerprint}{value[2:]}")
    if kind == "literal":
        return Literal(value, lang=language or None, datatype=URIRef(datatype) if datatype and not language else None)
    return URIRef(value)


def export_triples(engine: Engine, out: io.TextIOBase, fmt: str = "nt") -> ExportResult:
    """Write the crawl's triples to text stream ``out`` as N-Triples (``fmt="nt"``) or JSON
    lines (``"jsonl"``), see the module docstring. Returns the number of triples written."""
    from rdflib.plugins.serializers.nt import _nt_row
    result = ExportResult()
    for row in _triple_rows(engine):
        if fmt == "nt":
            fp = row["fingerprint"]
            line = _nt_row((_rdf_term(row["subject"], "uri", fp), _rdf_term(row["predicate"], "uri", fp),
                            _rdf_term(row["object"], row["object_kind"], fp, row["datatype"], row["language"])))
        else:
            line = json.dumps({key: row[key] for key in ("url", "fingerprint", "subject", "predicate", "object",
                                                         "object_kind", "datatype", "language")},
                              ensure_ascii=False) + "\n"
        out.write(line)
        result.records += 1
    return result


# ----------------------------------------------------------------------------------------------
# WARC


def _payload(row: dict) -> bytes | None:
    """The stored body of a document: raw ``body`` bytes, or ``content`` text encoded in the
    page's ``encoding`` (UTF-8 if unknown or unusable); None if nothing was stored."""
    if row.get("body") is not None:
        return bytes(row["body"])
    text = row.get("content")
    if text is None:
        return None
    encoding = row.get("encoding") or "utf-8"
    from gridcrawl.charsets import errors_for
    try:
        return text.encode(encoding, errors=errors_for(encoding))
    except LookupError:
        return text.encode("utf-8", errors="replace")


def export_warc(engine: Engine, out: BinaryIO, *, gzip: bool = True, filename: str | None = None,
                user_agent: str | None = None) -> ExportResult:
    """Write the crawl in ``engine`` to binary stream ``out`` as WARC 1.1: a ``warcinfo``
    record, then a ``request`` and a ``response`` record per stored page (see the module
    documentation). ``gzip``: compress each record (``.warc.gz``); ``user_agent``: the
    User-Agent the executors sent, shown in request records (None: not shown — the crawl
    database does not record it, and a request record must not claim one never sent)."""
    from warcio.warcwriter import WARCWriter

    writer = WARCWriter(out, gzip=gzip, warc_version="1.1")
    result = ExportResult()
    rows = _rows(engine, models.document, models.document.c.doc_id)
    first = next(rows, None)  # fail on a non-crawl database before writing anything
    info = {"software": "gridcrawl", "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/",
            "description": "pages of a gridcrawl crawl database", "robots": "obey (unless --ignore-robots)"}
    writer.write_record(writer.create_warcinfo_record(filename or "", info))
    for row in _chain(first, rows):
        body = _payload(row)
        if body is None:
            result.skipped += 1
            result.duplicates += row.get("duplicate_of") is not None
            continue
        if row.get("content_digest") and row.get("body") is None and hashlib.sha256(body).hexdigest() != row["content_digest"]:
            result.altered += 1
        response = _write_exchange(writer, row, body, user_agent)
        revisit = _revisit_record(writer, row, response)
        if revisit is not None:
            writer.write_record(revisit)
            result.revisits += 1
        result.records += 1
    # the versions a recrawl replaced, kept with their bodies (--keep-versions)
    for row in _rows(engine, models.document_version, models.document_version.c.id):
        body = _payload(row)
        if body is not None:
            _write_exchange(writer, row, body, user_agent)
            result.versions += 1
        else:
            result.bare_versions += 1
    return result


def _warc_date(value, writer) -> str:
    """A naive-UTC datetime of the tables as a WARC-Date (microseconds), or now if missing."""
    from warcio.timeutils import datetime_to_iso_date
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:  # warcio wants naive UTC: it appends the "Z" itself
            value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        return datetime_to_iso_date(value, use_micros=True)
    return writer.curr_warc_date()


def _write_exchange(writer, row: dict, body: bytes, user_agent: str):
    """Write the ``request`` and ``response`` records of a stored page (a ``document`` or
    ``document_version`` row with its payload ``body``) dated when it was fetched; return the
    response record (its id and payload digest are set)."""
    from warcio.statusandheaders import StatusAndHeaders
    uri = row.get("final_url") or row["url"]
    status = row.get("status") or 200
    # a header the fetcher kept one line per value (Set-Cookie: "\n"-separated) is one line each again
    headers = [(k, line) for k, v in _headers(row).items() if k.lower() not in _DROPPED_HEADERS
               for line in str(v).split("\n")]
    if not any(k.lower() == "content-type" for k, _ in headers) and row.get("content_type"):
        headers.append(("content-type", row["content_type"]))
    headers.append(("content-length", str(len(body))))
    date = _warc_date(row.get("fetched_at"), writer)
    response = writer.create_warc_record(
        uri, "response", payload=io.BytesIO(body), length=len(body),
        http_headers=StatusAndHeaders(f"{status} {_reason(status)}", headers, protocol="HTTP/1.1"),
        warc_headers_dict={"WARC-Date": date})
    parts = urlsplit(uri)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = parts.netloc.rpartition("@")[2]  # never a URL's user:password
    request_headers = [("Host", host), *([("User-Agent", user_agent)] if user_agent else []),
                       ("Accept", "*/*"), ("Accept-Encoding", "gzip, deflate")]
    request = writer.create_warc_record(
        uri, "request", payload=io.BytesIO(b""), length=0,
        http_headers=StatusAndHeaders(f"GET {path} HTTP/1.1", request_headers, is_http_request=True),
        warc_headers_dict={"WARC-Date": date,
                           "WARC-Concurrent-To": response.rec_headers.get_header("WARC-Record-ID")})
    writer.ensure_digest(response, block=False, payload=True)
    writer.write_record(request)
    writer.write_record(response)
    return response


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


#: WARC 1.1 revisit profiles (WARC 1.1 §6.7): the server said 304, or the body's digest was equal.
PROFILE_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
PROFILE_IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"


def _revisit_record(writer, row: dict, response):
    """The WARC ``revisit`` record of a document's last visit when that visit found the stored
    body current — a 304 (profile server-not-modified) or a body with the same digest (profile
    identical-payload-digest) — after the body was fetched; else None. It refers to the
    ``response`` record (WARC-Refers-To, -Target-URI, -Date) and repeats its payload digest."""
    visited, fetched, status = row.get("visited_at"), row.get("fetched_at"), row.get("visit_status")
    if (not isinstance(visited, _dt.datetime) or not isinstance(fetched, _dt.datetime) or visited <= fetched
            or row.get("gone_at") is not None or status is None or not (200 <= status < 300 or status == 304)):
        return None
    from warcio.statusandheaders import StatusAndHeaders
    validators = [(k, v) for k, v in (("ETag", row.get("etag")), ("Last-Modified", row.get("last_modified"))) if v]
    record = writer.create_revisit_record(
        response.rec_headers.get_header("WARC-Target-URI"), response.rec_headers.get_header("WARC-Payload-Digest"),
        response.rec_headers.get_header("WARC-Target-URI"), response.rec_headers.get_header("WARC-Date"),
        http_headers=StatusAndHeaders(f"{status} {_reason(status)}", validators, protocol="HTTP/1.1"),
        warc_headers_dict={"WARC-Date": _warc_date(visited, writer),
                           "WARC-Refers-To": response.rec_headers.get_header("WARC-Record-ID")})
    if status == 304:
        record.rec_headers.replace_header("WARC-Profile", PROFILE_NOT_MODIFIED)
    else:
        record.rec_headers.replace_header("WARC-Profile", PROFILE_IDENTICAL)
    return record


def _chain(first, rest):
    if first is not None:
        yield first
        yield from rest


# ----------------------------------------------------------------------------------------------


@contextmanager
def open_output(path: str, binary: bool):
    """``path`` opened for writing (``-``: standard output; text as UTF-8 whatever the locale's
    encoding). A file's data goes to a temporary file of its own, ``path.XXXXXXXX.part``
    (:func:`tempfile.mkstemp`, beside the file a symbolic link names), renamed over ``path``
    when the export succeeded and deleted when it failed, so a failed export leaves no (empty or
    partial) output and never clobbers an earlier one; two exports to the same ``path`` at once
    never write into one file: the last to finish replaces ``path`` with its whole export (they
    shared ``path.part``: one renamed the other's half-written file into place, went on writing
    into it and failed). What is not a file (a pipe, ``/dev/stdout``, a device) is written as it
    is. Raises :class:`ExportError` before anything is written when ``path`` is a folder, a
    SQLite database (the crawl's own, named as OUT with ``--format``, was replaced by its
    export), a ``.gz`` name for text (``binary`` False: written plain, it was no gzip file), a
    file this user may not write (read-only: the rename replaced it) or the temporary file
    cannot be created (no such folder, no permission); and, having written nothing to ``path``,
    when a write fails (a full disk). A file replaced keeps its permission bits (a private 0600
    one stays private); a new one gets those the umask gives (``mkstemp``'s 0600 is not kept)."""
    if path == "-":
        if binary:
            yield sys.stdout.buffer
            return
        # UTF-8 and the lines as written, whatever the locale's encoding (latin-1, a Windows
        # code page: a page's non-Latin text stopped the export with a UnicodeEncodeError)
        sys.stdout.flush()
        out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="")
        yield out
        out.detach()  # (flushes it) sys.stdout stays usable
        return
    if os.path.isdir(path):
        raise ExportError(f"cannot write {path}: it is a folder (name a file in it, e.g. "
                          f"{os.path.join(path, 'crawl.jsonl')})")
    if not binary and path.lower().endswith(".gz"):  # (a WARC is compressed record by record)
        raise ExportError(f"cannot write {path}: this export is plain text, not gzip; name it without .gz, "
                          f"or write it to - and pipe it through gzip")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        # a pipe, a terminal, a device: written as it is (read first, a pipe hung the export; renamed
        # over, /dev/full and a link to /dev/stdout became plain files)
        try:
            with _open(path, binary) as fh:
                yield fh
        except OSError as exc:
            raise ExportError(f"cannot write {path}: {exc.strerror or exc}") from None
        return
    target = os.path.realpath(path)  # a link to a file: the file gets the export, the link stays
    if mode is not None:
        try:
            with open(target, "rb") as existing:
                is_database = existing.read(16) == b"SQLite format 3\x00"
        except OSError:
            is_database = False
        if is_database:  # an OUT naming the crawl database itself (with --format) replaced it with the export
            raise ExportError(f"cannot write {path}: it is a SQLite database (a crawl's?), which an export never "
                              "replaces; name another file")
    if mode is not None and not os.access(target, os.W_OK):  # renamed over, a read-only file was replaced
        raise ExportError(f"cannot write {path}: Permission denied (the file is read-only)")
    folder, name = os.path.split(target)
    try:  # a name of its own: a second export to path at once wrote into the same path.part
        fd, part = tempfile.mkstemp(dir=folder, prefix=f"{name}.", suffix=".part")
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {exc.strerror}") from None
    try:
        # the file's permissions stay (a private 0600 export did not become 0644); a new file's
        # are the umask's, as open() gave them, not mkstemp's 0600
        with _open(fd, binary) as fh:
            os.chmod(part, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
            yield fh
        os.replace(part, target)
    except BaseException as exc:
        with suppress(OSError):
            os.remove(part)
        if isinstance(exc, OSError):  # a full disk, a file size limit: nothing written to path
            raise ExportError(f"cannot write {path}: {exc.strerror or exc} (nothing written)") from None
        raise


def _open(path: str | int, binary: bool):
    """``path`` (or an open file descriptor, then owned by the file object) opened for writing:
    bytes, or UTF-8 text with newlines as written (CSV)."""
    return open(path, "wb") if binary else open(path, "w", encoding="utf-8", newline="")


def _umask() -> int:
    """This process's umask (read by setting a private one, 077, for an instant: a file another
    thread creates then is made no less private)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


#: each format's name for people, in messages
FORMAT_NAMES = {"warc": "WARC", "csv": "CSV", "nt": "N-Triples", "jsonl": "JSON lines"}
#: Output file name endings and the format each one means (the longest ending that matches wins).
SUFFIX_FORMATS = {".warc": "warc", ".warc.gz": "warc", ".csv": "csv", ".nt": "nt", ".jsonl": "jsonl",
                  ".ndjson": "jsonl"}


def format_for(path: str, fmt: str | None, *, triples: bool = False, items: bool = False) -> str:
    """The format to write ``path`` in: ``fmt`` when given (lower-cased), else the one its name's
    ending means (:data:`SUFFIX_FORMATS`; ``-`` and names without an ending: ``jsonl``). Raises
    :class:`ExportError` when the ending means a format this export does not write (a WARC of
    triples or items, N-Triples of pages or items) or one it does not know (``.ttl``,
    ``.json``), instead of writing another format under that name."""
    if fmt is not None:
        return fmt.lower()
    name = path.lower()
    ending = max((e for e in SUFFIX_FORMATS if name.endswith(e)), key=len, default=None)
    chosen = SUFFIX_FORMATS.get(ending, "jsonl")
    allowed = ("jsonl", "csv") if items else TRIPLE_FORMATS if triples else FORMATS
    other = Path(name).suffix if path != "-" else ""
    if ending is None and other:  # .ttl, .xml, .json ...: not written as JSON lines under that name
        known = ", ".join(e for e in SUFFIX_FORMATS if SUFFIX_FORMATS[e] in allowed)
        raise ExportError(f"{path}: the {'items' if items else 'triples' if triples else 'pages'} are exported as "
                          f"{' or '.join(FORMAT_NAMES[f] for f in allowed)}, none of them a {other} file: give a "
                          f"name ending in {known}, or --format {' or '.join(allowed)}")
    if chosen not in allowed:
        what = "items" if items else "triples" if triples else "pages"
        triples_hint = "; --triples exports the crawl's triples as N-Triples" if chosen in TRIPLE_FORMATS \
            and not triples and not items else ""
        raise ExportError(f"{path}: a {ending} file is {FORMAT_NAMES[chosen]}, which the {what} are not exported as: "
                          f"give --format {' or '.join(allowed)}, or another file name{triples_hint}")
    return chosen


def export(engine: Engine, fmt: str, path: str, *, content: bool = True, gzip: bool | None = None,
           triples: bool = False) -> ExportResult:
    """Export the crawl in ``engine`` as ``fmt`` (``jsonl``, ``warc`` or ``csv``; with
    ``triples``, the triple table as ``nt`` or ``jsonl``) to the file ``path`` (``-``: standard
    output). ``gzip`` (WARC only): default True when ``path`` ends in ``.gz``. Raises
    :class:`ExportError` (unknown format, unwritable file, not a crawl database); nothing is
    left at ``path`` after an error."""
    fmt = fmt.lower()
    if triples:
        if fmt not in TRIPLE_FORMATS:
            raise ExportError(f"unknown triple format {fmt!r} (use nt or jsonl)")
        with open_output(path, binary=False) as out:
            return export_triples(engine, out, fmt)
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r} (use jsonl, warc or csv"
                          f"{'; nt goes with --triples' if fmt in TRIPLE_FORMATS else ''})")
    if fmt == "warc":
        with open_output(path, binary=True) as out:
            return export_warc(engine, out, gzip=path.lower().endswith(".gz") if gzip is None else gzip,
                               filename=Path(path).name if path != "-" else None)
    with open_output(path, binary=False) as out:
        if fmt == "jsonl":
            return export_jsonl(engine, out, content=content)
        return export_csv(engine, out)


__all__ = ["FORMATS", "TRIPLE_FORMATS", "SUFFIX_FORMATS", "ExportError", "ExportResult", "export", "format_for",
           "iso_utc", "open_output",
           "export_jsonl", "export_csv", "export_warc", "export_triples"]
