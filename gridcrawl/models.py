"""The SQL tables of gridcrawl, as SQLAlchemy Core tables (the source ``schema.sql`` must match).

Two databases, two metadata objects:

* :data:`manager_metadata` — the manager's records, modelled on Alchemi's ``executor``,
  ``application`` and ``thread`` tables (with keys and indexes, which Alchemi lacked), plus
  ``attempt`` (one row per assignment of a grid thread to an executor).
* :data:`crawl_metadata` — a crawler application's tables from the paper's figure 10:
  ``document``, ``visited_url`` and ``to_visit_url``, keyed by URL fingerprint, plus ``crawl_meta``;
  for recrawls ``document_version`` (the versions a change replaced), ``recrawl`` (one row of
  counts per recrawl run) and ``sitemap`` (the sitemaps read, with their validators).

Times are naive UTC datetimes with microseconds on every back end (``DATETIME2(6)`` on SQL
Server, ``DATETIME(6)`` on MariaDB/MySQL, whose plain ``DATETIME`` drops fractions of a second);
durations are derived from them by the views of :mod:`gridcrawl.views`. Page text and bodies are
unbounded (``NVARCHAR(MAX)``/``VARBINARY(MAX)`` on SQL Server, ``LONGTEXT``/``LONGBLOB`` on
MariaDB, whose ``TEXT``/``BLOB`` stop at 64 KiB). Constraint names follow one naming convention
so that every back end (and ``schema.sql``) names them alike, as migrations need.
"""

from __future__ import annotations

from sqlalchemy import (BigInteger, Boolean, Column, DateTime, Float, ForeignKey, Index, Integer,
                        LargeBinary, MetaData, SmallInteger, String, Table, Unicode, UnicodeText)
from sqlalchemy.types import TypeDecorator

from gridcrawl.urls import MAX_URL_LENGTH

#: Size of the URL columns: the longest canonical URL (:data:`gridcrawl.urls.MAX_URL_LENGTH`).
URL_LENGTH = MAX_URL_LENGTH
FINGERPRINT_LENGTH = 32

# Portable types: the generic type, with the variant a back end needs.
class UTCTimestamp(TypeDecorator):
    """A naive UTC datetime to the microsecond on every back end: ``DATETIME2(6)`` on SQL
    Server, ``DATETIME(6)`` on MariaDB/MySQL, ``TIMESTAMP`` on PostgreSQL, text on SQLite.

    The MariaDB ODBC driver drops the fraction of a second of a datetime parameter (seen with
    Connector/ODBC 3.1 through pyodbc), so on ``mysql+pyodbc`` values are sent as ISO text,
    which the server converts without loss."""

    impl = DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect):
        """The column type for ``dialect`` (SQLAlchemy's hook): the variants above."""
        if dialect.name == "mssql":
            from sqlalchemy.dialects import mssql
            return dialect.type_descriptor(mssql.DATETIME2(precision=6))
        if dialect.name in ("mysql", "mariadb"):
            from sqlalchemy.dialects import mysql
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime())

    def process_bind_param(self, value, dialect):
        """``value`` (a naive UTC datetime or None) as sent to ``dialect`` (SQLAlchemy's hook):
        ISO text with microseconds on MariaDB/MySQL through pyodbc, else unchanged."""
        if value is not None and dialect.driver == "pyodbc" and dialect.name in ("mysql", "mariadb"):
            return value.isoformat(sep=" ", timespec="microseconds")
        return value


class _Portable(TypeDecorator):
    """A generic type (``impl``) with the variants some back ends need: ``variants`` maps a
    dialect name to (dialect module, type name, arguments) or (..., arguments, keyword
    arguments). The dialect module is imported when a statement for that back end is compiled
    (SQL Server's and MariaDB's modules cost every program about 0.1 s of start-up otherwise)."""

    cache_ok = True
    variants: dict[str, tuple[str, str, tuple]] = {}

    def load_dialect_impl(self, dialect):
        variant = self.variants.get(dialect.name)
        if variant is None:
            return self.impl_instance
        module, name, args, *kwargs = variant
        from importlib import import_module
        return getattr(import_module(f"sqlalchemy.dialects.{module}"), name)(*args, **(kwargs[0] if kwargs else {}))


class _LongText(_Portable):
    """Unbounded text: ``NVARCHAR(max)`` on SQL Server, ``LONGTEXT`` on MariaDB/MySQL."""
    cache_ok = True
    impl = UnicodeText
    variants = {"mssql": ("mssql", "NVARCHAR", (None,)), "mysql": ("mysql", "LONGTEXT", ()),
                "mariadb": ("mysql", "LONGTEXT", ())}


class _Real(_Portable):
    """A double, read back as a Python ``float`` on every back end: ``DOUBLE`` on MariaDB/MySQL,
    whose FLOAT is single precision. SQLAlchemy's ``DOUBLE`` returns ``Decimal`` unless told
    ``asdecimal=False``: a Decimal is no JSON number (``gridcrawl export`` of a MariaDB crawl
    failed on ``fetch_seconds``) and does not mix with floats in arithmetic."""
    cache_ok = True
    impl = Float
    variants = {"mysql": ("mysql", "DOUBLE", (), {"asdecimal": False}),
                "mariadb": ("mysql", "DOUBLE", (), {"asdecimal": False})}


class _LongBinary(_Portable):
    """Unbounded bytes: ``VARBINARY(max)`` on SQL Server, ``LONGBLOB`` on MariaDB/MySQL."""
    cache_ok = True
    impl = LargeBinary
    variants = {"mssql": ("mssql", "VARBINARY", ("max",)), "mysql": ("mysql", "LONGBLOB", ()),
                "mariadb": ("mysql", "LONGBLOB", ())}


Timestamp = UTCTimestamp()
LongText = _LongText()
Real = _Real()
LongBinary = _LongBinary()

NAMING_CONVENTION = {
    "pk": "pk_%(table_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "ix": "ix_%(table_name)s_%(column_0_name)s",
}

manager_metadata = MetaData(naming_convention=NAMING_CONVENTION)
crawl_metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _meta_table(metadata: MetaData, name: str) -> Table:
    return Table(
        name, metadata,
        Column("name", String(64), primary_key=True),
        Column("value", String(1024), nullable=False),
    )


manager_meta = _meta_table(manager_metadata, "manager_meta")

executor = Table(
    "executor", manager_metadata,
    Column("executor_id", String(36), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("is_dedicated", Boolean, nullable=False, default=True),
    Column("is_connected", Boolean, nullable=False, default=False),
    Column("accepting", Boolean, nullable=False, default=True),
    Column("ping_time", Timestamp),
    Column("time_registered", Timestamp),
    Column("host", String(255), nullable=False),
    Column("port", Integer),
    Column("usr_name", String(64), nullable=False),
    Column("threads", Integer, nullable=False),
    Column("cpu_max", Real, nullable=False, default=0),
    Column("cpu_usage", Real, nullable=False, default=0),
    Column("cpu_avail", Real, nullable=False, default=0),
    Column("cpu_totalusage", Real, nullable=False, default=0),
    Column("mem_max", BigInteger, nullable=False, default=0),
    Column("mem_usage", BigInteger, nullable=False, default=0),
    Column("num_cpus", Integer, nullable=False, default=1),
    Column("pages_per_second", Real, nullable=False, default=0),
    Column("arch", String(64), nullable=False, default=""),
    Column("os", String(64), nullable=False, default=""),
    Column("quarantined_until", Timestamp),  # no new work until then: its attempts kept timing out
    Column("capabilities", LongText),    # what it declared, space-separated ("plugin:shop plugin:shop@1.0")
)

application = Table(
    "application", manager_metadata,
    Column("application_id", String(36), primary_key=True),
    Column("state", SmallInteger, nullable=False),
    Column("time_created", Timestamp, nullable=False),
    Column("time_completed", Timestamp),
    Column("usr_name", String(64), nullable=False),
    Column("application_name", String(255), nullable=False),
)

thread = Table(
    "thread", manager_metadata,
    Column("internal_thread_id", BigInteger, primary_key=True, autoincrement=False),
    Column("application_id", String(36), ForeignKey("application.application_id"), nullable=False),
    Column("thread_id", BigInteger, nullable=False),
    Column("executor_id", String(36), ForeignKey("executor.executor_id")),
    Column("state", SmallInteger, nullable=False),
    Column("url", String(URL_LENGTH), nullable=False),
    Column("host", String(255), nullable=False),
    Column("depth", Integer, nullable=False, default=0),
    Column("priority", Integer, nullable=False, default=5),
    Column("failed", Boolean, nullable=False, default=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("error_kind", String(32)),
    Column("needs", LongText),           # capabilities an executor must have to run it, space-separated
    Column("time_submitted", Timestamp, nullable=False),
    Column("time_started", Timestamp),
    Column("time_finished", Timestamp),
    Index("ux_thread_application_thread", "application_id", "thread_id", unique=True),
    Index("ix_thread_executor", "executor_id"),
    Index("ix_thread_state", "state"),
)

attempt = Table(
    "attempt", manager_metadata,
    Column("attempt_id", BigInteger, primary_key=True, autoincrement=False),
    Column("internal_thread_id", BigInteger, ForeignKey("thread.internal_thread_id"), nullable=False),
    Column("executor_id", String(36), ForeignKey("executor.executor_id"), nullable=False),
    Column("time_assigned", Timestamp, nullable=False),
    Column("time_started", Timestamp),
    Column("time_finished", Timestamp),
    Column("outcome", String(16), nullable=False),
    Column("epoch", BigInteger),        # the manager lease epoch under which it was assigned
    Index("ix_attempt_thread", "internal_thread_id"),
    Index("ix_attempt_executor", "executor_id"),
)

# The manager's lease on its database (gridcrawl.manager.lease): one row per lease name; the
# holder renews expires_at; a take-over increments epoch, so writes can be fenced by it.
manager_lease = Table(
    "manager_lease", manager_metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(255), nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("expires_at", Timestamp, nullable=False),
    Column("address", String(255)),         # the holder's endpoint for peers (standbys name it)
    Column("since", Timestamp),             # when the holder took the lease
)

# Users, groups and permissions (Alchemi's usr / grp / prm, with keys; see gridcrawl.auth).
# Passwords: an scrypt hash "scrypt$n=..,r=..,p=..$<hex>" and a per-user random salt (hex).

prm = Table(
    "prm", manager_metadata,
    Column("prm_id", SmallInteger, primary_key=True, autoincrement=False),
    Column("prm_name", String(64), nullable=False, unique=True),
)

grp = Table(
    "grp", manager_metadata,
    Column("grp_id", SmallInteger, primary_key=True, autoincrement=False),
    Column("grp_name", String(64), nullable=False, unique=True),
)

grp_prm = Table(
    "grp_prm", manager_metadata,
    Column("grp_id", SmallInteger, ForeignKey("grp.grp_id"), primary_key=True),
    Column("prm_id", SmallInteger, ForeignKey("prm.prm_id"), primary_key=True),
)

usr = Table(
    "usr", manager_metadata,
    Column("usr_name", String(64), primary_key=True),
    Column("password_hash", String(255), nullable=False),
    Column("salt", String(64), nullable=False),
    Column("grp_id", SmallInteger, ForeignKey("grp.grp_id"), nullable=False),
    Column("created", Timestamp, nullable=False),
)

# ---------------------------------------------------------------------------------------------
# The crawler application's tables (paper, figure 10)

crawl_meta = _meta_table(crawl_metadata, "crawl_meta")

document = Table(
    "document", crawl_metadata,
    Column("doc_id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("url", String(URL_LENGTH), nullable=False),
    Column("fingerprint", String(FINGERPRINT_LENGTH), nullable=False),
    Column("final_url", String(URL_LENGTH), nullable=False),
    Column("status", Integer),
    Column("content_type", String(255)),
    Column("size", BigInteger, nullable=False, default=0),
    Column("title", LongText),
    Column("encoding", String(64)),
    Column("content", LongText),
    Column("body", LongBinary),
    Column("depth", Integer, nullable=False, default=0),
    Column("fetched_at", Timestamp, nullable=False),
    Column("executor", String(36)),
    Column("fetch_seconds", Real, nullable=False, default=0),
    Column("parse_seconds", Real, nullable=False, default=0),
    Column("extract_seconds", Real, nullable=False, default=0),   # items: executor CPU seconds extracting
    Column("page_type", String(64)),    # keep/follow rules: the page's type ("base" for seeds)
    Column("relevance", Real),          # focused crawl: the page score R(p) (gridcrawl.focus)
    Column("headers", LongText),        # the final response's headers as a JSON object (WARC export)
    Column("structured_data", LongText),  # semantic crawl: the page's JSON-LD, microdata, Open Graph (JSON)
    # Recrawl (gridcrawl.schedule, docs/recrawl.md). fetched_at above is when the stored body was
    # fetched; the columns below say how fresh it is and when to look again.
    Column("content_digest", String(64)),   # hex SHA-256 of the body bytes after decompression
    Column("etag", String(255)),            # validators of the stored body (RFC 9110 §8.8)
    Column("last_modified", String(64)),
    Column("visited_at", Timestamp),        # the last visit, whatever it found (a 304 moves only this)
    Column("visit_status", Integer),        # HTTP status of the last visit (304 Not Modified, 404 ...)
    Column("modified_at", Timestamp),       # when a recrawl last found the body changed
    Column("gone_at", Timestamp),           # since when the page answers 404/410 (NULL: not gone)
    Column("fetch_interval", Real),         # seconds between two visits (adaptive schedule)
    Column("next_fetch_at", Timestamp),     # when the next visit is due (NULL: due now)
    # The real web (issue 14, docs/realweb.md): what a page says about itself.
    Column("simhash", String(16)),      # 64-bit SimHash of the visible text, hex (gridcrawl.simhash); NULL
                                        # unless the URL has digits (traps) or recrawl_simhash_distance >= 0
    Column("canonical_url", String(URL_LENGTH)),  # <link rel=canonical> or Link header, canonicalised
    Column("duplicate_of", String(URL_LENGTH)),   # the stored page this one duplicates (canonical or digest)
    Column("lastmod", Timestamp),       # <lastmod> of the sitemap that listed it (UTC), for recrawls
    Column("render_seconds", Real),     # rendered in a browser: seconds it took (NULL: fetched only)
    Column("refused_requests", LongText),  # rendered: the page's requests refused, JSON [[url, kind, reason]]
    Index("ux_document_fingerprint", "fingerprint", unique=True),
    Index("ix_document_next_fetch_at", "next_fetch_at"),
    Index("ix_document_content_digest", "content_digest"),
)

# Recrawl history: one row per change a recrawl found, holding the version it replaced.
document_version = Table(
    "document_version", crawl_metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("fingerprint", String(FINGERPRINT_LENGTH), nullable=False),   # the document's
    Column("url", String(URL_LENGTH), nullable=False),
    Column("final_url", String(URL_LENGTH)),
    Column("status", Integer),
    Column("content_type", String(255)),
    Column("size", BigInteger, nullable=False, default=0),
    Column("content_digest", String(64)),   # the replaced body's digest (NULL: crawled before digests)
    Column("etag", String(255)),
    Column("last_modified", String(64)),
    Column("fetched_at", Timestamp, nullable=False),     # when the replaced body was fetched
    Column("replaced_at", Timestamp, nullable=False),    # when the recrawl found it changed
    Column("encoding", String(64)),
    Column("headers", LongText),
    Column("content", LongText),             # the replaced body, only with --keep-versions
    Column("body", LongBinary),
    Index("ix_document_version_fingerprint", "fingerprint"),
)

# One row per recrawl run (gridcrawl run --recrawl / gridcrawl-client --recrawl): its counts.
recrawl = Table(
    "recrawl", crawl_metadata,
    Column("recrawl_id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("mode", String(16), nullable=False),          # due | all | watch
    Column("started_at", Timestamp, nullable=False),
    Column("finished_at", Timestamp),                    # NULL while running (or if it was killed)
    Column("due", Integer, nullable=False, default=0),           # documents submitted again
    Column("fetched", Integer, nullable=False, default=0),       # of those, answered with a body
    Column("not_modified", Integer, nullable=False, default=0),  # answered 304 Not Modified
    Column("unchanged", Integer, nullable=False, default=0),     # body with the same digest
    Column("changed", Integer, nullable=False, default=0),       # body with another digest
    Column("gone", Integer, nullable=False, default=0),          # answered 404/410
    Column("revived", Integer, nullable=False, default=0),       # gone before, back now
    Column("errors", Integer, nullable=False, default=0),        # other failures (page kept as it was)
    Column("new", Integer, nullable=False, default=0),           # new pages found and stored
    Column("disallowed", Integer, nullable=False, default=0),    # robots.txt disallows now (copy kept)
)

# The sitemaps a crawl read (robots.txt Sitemap lines or /sitemap.xml, and the sitemaps an index
# names), with their validators, so that a recrawl reads them again conditionally and acts on the
# <lastmod> of pages it has stored (docs/recrawl.md).
sitemap = Table(
    "sitemap", crawl_metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("url", String(URL_LENGTH), nullable=False),
    Column("fingerprint", String(FINGERPRINT_LENGTH), nullable=False),
    Column("kind", String(16), nullable=False),      # 'sitemap' (a host's) | 'sitemap-child' (of an index)
    Column("depth", Integer, nullable=False, default=0),
    Column("status", Integer),                       # of the last read that was not a 304
    Column("content_digest", String(64)),            # SHA-256 of the body last read in full
    Column("etag", String(255)),
    Column("last_modified", String(64)),
    Column("visited_at", Timestamp, nullable=False),  # the last read
    Column("fetch_interval", Real),                  # --watch: seconds between two reads (adaptive)
    Column("next_fetch_at", Timestamp),              # --watch: when it is read again
    Index("ux_sitemap_fingerprint", "fingerprint", unique=True),
)

visited_url = Table(
    "visited_url", crawl_metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("url", String(URL_LENGTH), nullable=False),
    Column("fingerprint", String(FINGERPRINT_LENGTH), nullable=False),
    Column("depth", Integer, nullable=False, default=0),
    Column("status", Integer),
    Column("error_kind", String(32)),
    Column("error", String(1024)),
    Column("attempts", Integer, nullable=False, default=1),
    Column("visited_at", Timestamp, nullable=False),
    Column("page_type", String(64)),    # keep/follow rules: the page type it was visited as (--retry-failed)
    Index("ux_visited_url_fingerprint", "fingerprint", unique=True),
)

to_visit_url = Table(
    "to_visit_url", crawl_metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("url", String(URL_LENGTH), nullable=False),
    Column("fingerprint", String(FINGERPRINT_LENGTH), nullable=False),
    Column("depth", Integer, nullable=False, default=0),
    Column("priority", Integer, nullable=False, default=5),
    Column("discovered_from", String(URL_LENGTH)),
    Column("in_flight", Boolean, nullable=False, default=False),
    Column("page_type", String(64)),    # keep/follow rules: the type its follow rule gave it
    Column("relevance", Real),          # focused crawl: the link score r(c) (gridcrawl.focus)
    Column("etag", String(255)),        # recrawl: the stored document's validators, sent as
    Column("last_modified", String(64)),  # If-None-Match / If-Modified-Since
    Column("kind", String(16)),         # None: a page; 'sitemap' (robots.txt/sitemap.xml), 'sitemap-child' (of an index)
    Column("lastmod", Timestamp),       # <lastmod> of the sitemap that listed it (UTC), carried to document
    Index("ux_to_visit_url_fingerprint", "fingerprint", unique=True),
    # breadth- and depth-first claims read the frontier in (depth, id) order: without this index
    # every claim sorted the whole frontier (143-262 ms per claim at 1,000,000 rows, 2-4 ms with it)
    Index("ix_to_visit_url_depth", "in_flight", "depth", "id"),
    # ids are grid thread ids: never reuse one (SQLite would reuse the largest after a delete)
    sqlite_autoincrement=True,
)

# priority claims read the frontier highest priority first, then oldest: (priority DESC, id) (an
# index in (priority, id) order left SQLite sorting every row of the top priority on each claim:
# 218 ms per claim with 200,000 of 1,000,000 URLs at one priority, under 1 ms with this one)
Index("ix_to_visit_url_priority", to_visit_url.c.in_flight, to_visit_url.c.priority.desc(), to_visit_url.c.id)


# Crawl strategies (gridcrawl.rules): the user's keep/follow rules and the links they kept.

crawl_rule = Table(
    "crawl_rule", crawl_metadata,
    Column("rule_id", Integer, primary_key=True, autoincrement=False),   # the rule's number
    Column("base_url", String(URL_LENGTH), nullable=False),
    Column("rule_type", String(16), nullable=False),      # keep | follow
    Column("from_type", String(64), nullable=False),
    Column("to_type", String(64)),                        # follow rules only
    Column("pattern", String(1024), nullable=False, default="all"),
    Column("element_id", String(255), nullable=False, default="all"),
    Column("element_class", String(255), nullable=False, default="all"),
    Column("element_tag", String(64), nullable=False, default="all"),
)

kept_link = Table(
    "kept_link", crawl_metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("url", String(URL_LENGTH), nullable=False),
    Column("fingerprint", String(FINGERPRINT_LENGTH), nullable=False),
    Column("source_url", String(URL_LENGTH), nullable=False),
    Column("source_page_type", String(64)),
    Column("rule", Integer, nullable=False),              # crawl_rule.rule_id of the keep rule
    Column("kept_at", Timestamp, nullable=False),
    Index("ux_kept_link_fingerprint", "fingerprint", "rule", unique=True),
)


# Semantic crawl (gridcrawl.semantic): the triples of RDF documents and of HTML structured data.

triple = Table(
    "triple", crawl_metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("fingerprint", String(FINGERPRINT_LENGTH), nullable=False),  # the page it came from
    Column("subject", Unicode(URL_LENGTH), nullable=False),            # an IRI, or _:bN (blank node, per page)
    Column("predicate", Unicode(URL_LENGTH), nullable=False),
    Column("object", LongText, nullable=False),
    Column("object_kind", String(8), nullable=False),                  # uri | literal | bnode
    Column("datatype", Unicode(URL_LENGTH)),                           # literals: the datatype IRI, if any
    Column("language", String(64)),                                    # literals: the language tag, if any
    # SHA-256 (hex) of the triple's six fields: the unique key (page, triple) on every back end,
    # where an index cannot cover the unbounded object text
    Column("triple_key", String(64), nullable=False),
    Index("ux_triple_page", "fingerprint", "triple_key", unique=True),
)


# Items (gridcrawl.items): structured data extracted from pages by item specs or plugins.

item = Table(
    "item", crawl_metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("type", String(64), nullable=False),            # the item spec's type
    Column("fingerprint", String(FINGERPRINT_LENGTH), nullable=False),  # the page's (document.fingerprint)
    Column("url", String(URL_LENGTH), nullable=False),      # the page's canonical URL
    Column("position", Integer, nullable=False),           # 0, 1 ... on the page (the each match, the plugin's order)
    Column("fields", LongText, nullable=False),            # the fields as a JSON object (JSON_VALUE on SQL Server)
    Column("extracted_at", Timestamp, nullable=False),
    # a page fetched or applied twice never duplicates its items
    Index("ux_item_fingerprint", "fingerprint", "type", "position", unique=True),
    Index("ix_item_type", "type", "id"),
)

item_issue = Table(
    "item_issue", crawl_metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("type", String(64), nullable=False),
    Column("fingerprint", String(FINGERPRINT_LENGTH), nullable=False),
    Column("url", String(URL_LENGTH), nullable=False),
    Column("position", Integer, nullable=False),           # the candidate item (-1: the whole page)
    Column("field", String(200), nullable=False),          # the required field left empty ("" for an error)
    Column("kind", String(16), nullable=False),            # missing | error
    Column("message", String(1024)),                       # error: the exception's type and message
    Column("noted_at", Timestamp, nullable=False),
    Index("ux_item_issue_fingerprint", "fingerprint", "type", "position", "field", unique=True),
)

item_spec = Table(
    "item_spec", crawl_metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),   # 1: the crawl's one spec
    Column("source", String(1024), nullable=False),                 # the file it was read from
    Column("text", LongText, nullable=False),                       # the TOML text (a resumed crawl keeps it)
    Column("stored_at", Timestamp, nullable=False),
)
