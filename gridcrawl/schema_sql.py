"""``schema.sql``: the T-SQL script a SQL Server DBA runs by hand, rendered from the models.

``python -m gridcrawl.schema_sql > schema.sql`` writes it: every table of
:mod:`gridcrawl.models` (columns with SQLAlchemy's mssql types, ``IDENTITY`` columns, primary,
unique and foreign keys named by the models' naming convention, indexes), the views of
:mod:`gridcrawl.views` rendered for SQL Server, and the schema version rows. Batches are
separated by ``GO`` lines, as ``sqlcmd`` expects. ``tests/test_schema_sql.py`` parses the file
as T-SQL and checks it against the models, so a model change without a new ``schema.sql``
fails the tests.
"""

from __future__ import annotations

import sys

import sqlalchemy as sa
from sqlalchemy.dialects import mssql

from gridcrawl import migrations, models, views

_DIALECT = mssql.dialect()

HEADER = """\
-- schema.sql: gridcrawl's tables and views for Microsoft SQL Server (T-SQL), to run by hand.
--
-- GENERATED from gridcrawl/models.py and gridcrawl/views.py by `python -m gridcrawl.schema_sql`;
-- tests/test_schema_sql.py parses it as T-SQL and checks it equals the models (tables, columns,
-- types, keys, indexes, views). It is the schema `gridcrawl db init --db mssql+pyodbc://...`
-- creates (see docs/databases.md). Needs SQL Server 2016 SP1 or later (CREATE OR ALTER VIEW,
-- DATEDIFF_BIG). Run it with sqlcmd (GO separates batches):
--
--     sqlcmd -S host -d gridcrawl -U user -i schema.sql
--
-- Two databases, or both in one: the manager's records (manager_meta, executor, application,
-- thread, attempt, users and groups, and the timing views) and a crawl's tables (the paper's
-- figure 10: crawl_meta, document, visited_url, to_visit_url, ...).
-- Times are UTC, DATETIME2(6). Ids of executors and applications are GUIDs as text.
"""

TABLE_NOTES = {
    "manager_meta": "Settings and the schema version (a later release migrates from it).",
    "executor": "One row per executor, as its last heartbeat reported it (Alchemi's executor table).",
    "application": "One row per application (a crawl). state: 0 awaiting manifest, 1 ready, 2 stopped, 3 paused (by an operator).",
    "thread": "One row per grid thread (one URL of one application).\n"
              "state: 0 ready, 1 scheduled, 2 started, 3 finished, 4 dead.",
    "attempt": "One row per assignment of a grid thread to an executor (outcome: running, finished, ...).",
    "prm": "Permissions (Alchemi's prm): ExecuteThread, ManageOwnApp, ManageAllApps, ManageUsers.",
    "grp": "Groups of users (Alchemi's grp): Administrators, Executors, Users.",
    "grp_prm": "The permissions of each group.",
    "usr": "Users (Alchemi's usr), with a salted password hash (see gridcrawl.auth).",
    "crawl_rule": "The user's keep/follow rules (gridcrawl.rules).",
    "kept_link": "The links the keep rules kept.",
    "crawl_meta": "The crawl's settings (application id, scope) and the schema version.",
    "document": "The pages fetched: one row per canonical URL.",
    "triple": "Semantic crawl: the triples of RDF documents and HTML structured data, once per page (gridcrawl.semantic).",
    "visited_url": "Every URL whose grid thread finished, fetched or not (error_kind says why not).",
    "to_visit_url": "The frontier. A row's id is also its grid thread's thread_id within the application.\n"
                    "Clients claim rows with SELECT TOP (n) ... FROM to_visit_url WITH (UPDLOCK, READPAST, ROWLOCK).",
}

COLUMN_NOTES = {
    ("executor", "executor_id"): "GUID",
    ("executor", "is_dedicated"): "work pushed to it (1) or pulled by it (0)",
    ("executor", "accepting"): "0: takes no new threads now",
    ("executor", "ping_time"): "last heartbeat",
    ("executor", "threads"): "grid threads it runs at once",
    ("executor", "cpu_max"): "MHz x cores",
    ("executor", "cpu_usage"): "%",
    ("executor", "cpu_avail"): "%",
    ("executor", "cpu_totalusage"): "CPU-seconds, cumulative",
    ("executor", "mem_max"): "bytes",
    ("executor", "mem_usage"): "bytes",
    ("executor", "pages_per_second"): "as the executor reported it",
    ("application", "application_id"): "GUID",
    ("thread", "thread_id"): "the id within its application",
    ("thread", "executor_id"): "NULL until scheduled",
    ("document", "final_url"): "after redirects",
    ("document", "headers"): "final response's headers, JSON object",
    ("document", "structured_data"): "semantic crawl: JSON-LD, microdata, Open Graph, JSON",
    ("triple", "fingerprint"): "the page's (document.fingerprint)",
    ("triple", "subject"): "IRI, or _:bN (a blank node of the page)",
    ("triple", "object_kind"): "uri, literal or bnode",
    ("triple", "triple_key"): "SHA-256 of the six fields, hex",
    ("document", "status"): "HTTP status",
    ("document", "size"): "bytes, after decompression",
    ("document", "content"): "decoded text, or NULL",
    ("document", "body"): "raw bytes of a kept non-text page, or NULL",
    ("document", "executor"): "executor_id of the executor that fetched it",
    ("to_visit_url", "priority"): "higher runs first",
    ("to_visit_url", "in_flight"): "claimed by a client, submitted to the grid",
}


def q(name: str) -> str:
    """``name`` quoted for T-SQL if it must be (a reserved word such as RULE: ``[rule]``)."""
    return _DIALECT.identifier_preparer.quote(name)


def _names(columns) -> str:
    return ", ".join(q(c.name) for c in columns)


def _index_keys(index: sa.Index) -> str:
    """An index's key columns in order, each with ``DESC`` when the index sorts it descending."""
    keys = []
    for expr in index.expressions:
        descending = getattr(expr, "modifier", None) is sa.sql.operators.desc_op
        keys.append(q(expr.element.name if descending else expr.name) + (" DESC" if descending else ""))
    return ", ".join(keys)


def column_type(column: sa.Column) -> str:
    """The T-SQL type of ``column`` as SQLAlchemy's mssql dialect renders it (``(max)`` as
    ``(MAX)``)."""
    return column.type.compile(dialect=_DIALECT).replace("(max)", "(MAX)")


def _column(table: sa.Table, column: sa.Column) -> str:
    parts = [f"{q(column.name):<20}", f"{column_type(column):<15}"]
    if table.autoincrement_column is column:
        parts.append("IDENTITY(1, 1)")
    if column.server_default is not None:
        parts.append("DEFAULT " + _DIALECT.ddl_compiler(_DIALECT, None).get_column_default_string(column))
    parts.append("NULL" if column.nullable else "NOT NULL")
    return " ".join(parts)


def _name(constraint) -> str:
    return str(sa.schema.conv(constraint.name)) if constraint.name else ""


def _constraints(table: sa.Table) -> list[str]:
    out = []
    pk = table.primary_key
    if pk.columns:
        out.append(f"CONSTRAINT {_name(pk)} PRIMARY KEY ({_names(pk.columns)})")
    uniques = [c for c in table.constraints if isinstance(c, sa.UniqueConstraint)]
    for uq in sorted(uniques, key=_name):
        out.append(f"CONSTRAINT {_name(uq)} UNIQUE ({_names(uq.columns)})")
    for fk in sorted(table.foreign_key_constraints, key=_name):
        referred = _names(e.column for e in fk.elements)
        out.append(f"CONSTRAINT {_name(fk)} FOREIGN KEY ({_names(fk.columns)}) "
                   f"REFERENCES {q(fk.referred_table.name)} ({referred})")
    return out


def _comment(text: str) -> str:
    return "".join(f"-- {line}\n" for line in text.splitlines())


def render_table(table: sa.Table) -> str:
    """``CREATE TABLE`` and its ``CREATE INDEX`` statements for ``table``, in ``GO`` batches."""
    lines = []
    columns = list(table.columns)
    constraints = _constraints(table)
    for i, column in enumerate(columns):
        text = "    " + _column(table, column) + ("," if i < len(columns) - 1 or constraints else "")
        note = COLUMN_NOTES.get((table.name, column.name))
        lines.append(f"{text:<60}  -- {note}" if note else text)
    lines += [f"    {c}," for c in constraints[:-1]] + [f"    {c}" for c in constraints[-1:]]
    out = _comment(TABLE_NOTES.get(table.name, f"Table {table.name} (see gridcrawl/models.py)."))
    out += f"CREATE TABLE {q(table.name)} (\n" + "\n".join(lines) + "\n);\nGO\n"
    indexes = sorted(table.indexes, key=lambda i: (not i.unique, i.name))
    if indexes:
        out += "".join(f"CREATE {'UNIQUE ' if i.unique else ''}INDEX {q(i.name)} ON {q(table.name)} "
                       f"({_index_keys(i)});\n" for i in indexes) + "GO\n"
    return out + "\n"


def _tables(metadata: sa.MetaData, meta_table: sa.Table) -> list[sa.Table]:
    return [meta_table] + [t for t in metadata.sorted_tables if t is not meta_table]


def _banner(title: str) -> str:
    rule = "-- " + "=" * 92 + "\n"
    return rule + f"-- {title}\n" + rule + "\n"


def render() -> str:
    """The whole of ``schema.sql``."""
    out = [HEADER, "\n", _banner("The manager's database")]
    out += [render_table(t) for t in _tables(models.manager_metadata, models.manager_meta)]
    out.append(_comment("The views: \"which executor ran which URL, and how long did it take\" in one SELECT.\n"
                        "A page is a thread that finished and did not fail. Seconds: DATEDIFF_BIG in microseconds."))
    out.append("\n")
    for view in views.views_for(models.manager_metadata):
        (statement,) = view.create_sql("mssql")
        out.append(statement + ";\nGO\n\n")
    out.append(_banner("A crawl's database (the paper's figure 10), keyed by URL fingerprint "
                       "(MD5 of the canonical URL)"))
    out += [render_table(t) for t in _tables(models.crawl_metadata, models.crawl_meta)]
    out.append(_banner("The schema revisions: Alembic's version tables (gridcrawl.migrations)"))
    for kind, meta in (("manager", models.manager_meta), ("crawl", models.crawl_meta)):
        out.append(render_table(migrations.version_table(kind)))
        out.append(f"INSERT INTO {q(migrations.VERSION_TABLES[kind])} (version_num) VALUES ('{migrations.head(kind)}');\n")
        out.append(f"INSERT INTO {q(meta.name)} (name, value) VALUES ('schema_version', '{int(migrations.head(kind))}');\n")
    out.append("GO\n")
    return "".join(out)


def main() -> None:
    """Print :func:`render` (``python -m gridcrawl.schema_sql > schema.sql``)."""
    sys.stdout.write(render())


if __name__ == "__main__":  # pragma: no cover
    main()
