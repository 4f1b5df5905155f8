"""schema.sql (the T-SQL a SQL Server DBA runs by hand) equals the SQLAlchemy models and views.

schema.sql is rendered by gridcrawl.schema_sql, but these tests do not trust that rendering:
the file is parsed as T-SQL by sqlglot, batch by batch (``GO`` separates batches, as sqlcmd
does), and compared with gridcrawl.models: the same tables, columns, types (each model type
rendered by SQLAlchemy's mssql dialect, both sides normalised by sqlglot), nullability,
identity columns, primary, unique and foreign keys, and indexes (unique or not); its views equal
gridcrawl.views rendered for SQL Server; and it stores this release's schema version. Run top to
bottom it is valid for SQL Server where sqlglot would not notice: each view alone in its batch,
every table created before a key, index, view or insert names it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mssql

sqlglot = pytest.importorskip("sqlglot", reason="sqlglot is in the test extra: pip install -e '.[test]'")
from sqlglot import exp  # noqa: E402

from gridcrawl import migrations, models, views  # noqa: E402

SCHEMA_SQL = Path(__file__).resolve().parent.parent / "schema.sql"
MSSQL = mssql.dialect()
TABLES = {t.name: t for md in (models.manager_metadata, models.crawl_metadata) for t in md.sorted_tables}
TABLES.update({name: migrations.version_table(kind) for kind, name in migrations.VERSION_TABLES.items()})


def batches() -> list[str]:
    """schema.sql's batches: the text between lines that hold only GO."""
    text = SCHEMA_SQL.read_text(encoding="utf-8")
    return [b for b in re.split(r"^\s*GO\s*$", text, flags=re.MULTILINE | re.IGNORECASE) if b.strip()]


def statements() -> list[exp.Expression]:
    out = []
    for batch in batches():
        out.extend(s for s in sqlglot.parse(batch, read="tsql") if s is not None)
    return out


def norm_type(sql_type: str) -> str:
    """A T-SQL type in sqlglot's canonical spelling (INTEGER = INT, max = MAX)."""
    return exp.DataType.build(sql_type, dialect="tsql").sql("tsql").upper()


def names(expressions) -> list[str]:
    """Column names of a key's column list (plain identifiers, columns or ordered columns)."""
    return [e.name if isinstance(e, exp.Identifier) else e.find(exp.Identifier).name for e in expressions]


def norm_sql(text: str) -> str:
    return " ".join(text.replace(";", " ").split())


@pytest.fixture(scope="module")
def parsed():
    """schema.sql as {"tables": name -> facts, "indexes": name -> facts, "views": name -> select,
    "inserts": [(table, {column: value})]}."""
    tables, indexes, views_, inserts = {}, {}, {}, []
    for s in statements():
        assert not isinstance(s, exp.Command), f"sqlglot could not parse as T-SQL: {s.sql()[:200]}"
        if isinstance(s, exp.Insert):
            columns = [c.name for c in s.this.expressions]
            values = [v.this for v in s.expression.expressions[0].expressions]
            inserts.append((s.this.this.name, dict(zip(columns, values))))
            continue
        assert isinstance(s, exp.Create), f"unexpected statement in schema.sql: {s.sql('tsql')[:200]}"
        kind = s.args["kind"]
        if kind == "TABLE":
            columns, pk, fks, uniques = {}, None, {}, {}
            for item in s.this.expressions:
                if isinstance(item, exp.ColumnDef):
                    constraints = [c.kind for c in item.args.get("constraints") or []]
                    columns[item.name] = {
                        "type": item.args["kind"].sql("tsql").upper(),
                        "nullable": not any(isinstance(c, exp.NotNullColumnConstraint) and not c.args.get("allow_null")
                                            for c in constraints),
                        "identity": any(isinstance(c, exp.GeneratedAsIdentityColumnConstraint) for c in constraints),
                    }
                else:
                    key = item.find(exp.PrimaryKey)
                    if key is not None:
                        pk = names(key.expressions)
                    unique = item.find(exp.UniqueColumnConstraint)
                    if unique is not None:
                        uniques[item.name] = names(unique.this.expressions)
                    fk = item.find(exp.ForeignKey)
                    if fk is not None:
                        ref = fk.args["reference"].this
                        fks[item.name] = (names(fk.expressions), ref.this.name, names(ref.expressions))
            tables[s.this.this.name] = {"columns": columns, "pk": pk, "fks": fks, "uniques": uniques}
        elif kind == "INDEX":
            index = s.this
            indexes[index.name] = {"table": index.args["table"].name, "unique": bool(s.args.get("unique")),
                                   "columns": [c.this.name for c in index.args["params"].args["columns"]]}
        elif kind == "VIEW":
            assert s.args.get("replace"), f"view {s.this.name} must be CREATE OR ALTER (idempotent)"
            views_[s.this.name] = s
        else:
            raise AssertionError(f"unexpected CREATE {kind} in schema.sql")
    return {"tables": tables, "indexes": indexes, "views": views_, "inserts": inserts}


def test_every_statement_parses_as_tsql(parsed):
    assert parsed["tables"] and parsed["views"]


def test_schema_sql_is_the_rendering_of_the_models():
    """schema.sql is generated; after changing gridcrawl/models.py or gridcrawl/views.py run
    ``python -m gridcrawl.schema_sql > schema.sql``."""
    from gridcrawl.schema_sql import render
    assert SCHEMA_SQL.read_text(encoding="utf-8") == render(), \
        "schema.sql is stale: run python -m gridcrawl.schema_sql > schema.sql"


def test_same_tables(parsed):
    assert sorted(parsed["tables"]) == sorted(TABLES)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_columns_types_and_nullability(parsed, name):
    table, got = TABLES[name], parsed["tables"][name]["columns"]
    assert list(got) == [c.name for c in table.columns], "same columns in the same order"
    for column in table.columns:
        expected_type = norm_type(column.type.compile(dialect=MSSQL))
        assert got[column.name]["type"] == expected_type, f"{name}.{column.name}"
        assert got[column.name]["nullable"] == column.nullable, f"{name}.{column.name} nullability"
        identity = table.autoincrement_column is column
        assert got[column.name]["identity"] == identity, f"{name}.{column.name} IDENTITY"


@pytest.mark.parametrize("name", sorted(TABLES))
def test_primary_and_foreign_keys(parsed, name):
    table, got = TABLES[name], parsed["tables"][name]
    assert got["pk"] == [c.name for c in table.primary_key.columns]
    expected = {}
    for fk in table.foreign_key_constraints:
        fk_name = sa.schema.conv(fk.name) if fk.name else None
        expected[str(fk_name)] = ([c.name for c in fk.columns], fk.referred_table.name,
                                  [e.column.name for e in fk.elements])
    assert got["fks"] == expected
    uniques = {str(sa.schema.conv(c.name)): [col.name for col in c.columns]
               for c in table.constraints if isinstance(c, sa.UniqueConstraint)}
    assert got["uniques"] == uniques


def test_same_indexes(parsed):
    expected = {i.name: {"table": t.name, "unique": bool(i.unique), "columns": [c.name for c in i.columns]}
                for t in TABLES.values() for i in t.indexes}
    assert parsed["indexes"] == expected


def test_reserved_words_are_bracketed():
    """RULE, KEY, ... are reserved in T-SQL: such names must be written [rule] (SQL Server would
    refuse the script otherwise; sqlglot would not notice)."""
    from sqlalchemy.dialects.mssql.base import RESERVED_WORDS
    checked = 0
    for s in statements():
        if isinstance(s, exp.Create) and s.args["kind"] in ("TABLE", "INDEX"):
            for identifier in s.find_all(exp.Identifier):
                if identifier.name.lower() in RESERVED_WORDS:
                    assert identifier.args.get("quoted"), f"{identifier.name} must be bracketed in schema.sql"
                checked += 1
    assert checked > 100


def test_constraint_names_follow_the_models_naming_convention():
    """schema.sql names keys as SQLAlchemy does on every other back end (migrations need it)."""
    from sqlalchemy.schema import CreateTable
    text = norm_sql(SCHEMA_SQL.read_text(encoding="utf-8"))
    for table in TABLES.values():
        for name in re.findall(r"CONSTRAINT (\w+)", str(CreateTable(table).compile(dialect=MSSQL))):
            assert f"CONSTRAINT {name} " in text


def test_views_equal_gridcrawl_views_for_sql_server(parsed):
    assert sorted(parsed["views"]) == sorted(v.name for v in views.MANAGER_VIEWS)
    text = SCHEMA_SQL.read_text(encoding="utf-8")
    for view in views.MANAGER_VIEWS:
        (statement,) = view.create_sql("mssql")
        assert norm_sql(statement) in norm_sql(text), f"view {view.name} differs from gridcrawl.views"


def test_view_columns(parsed):
    """The columns a user selects from (the same on every back end: tests/test_db_backends.py)."""
    columns = {name: s.expression.named_selects for name, s in parsed["views"].items()}
    assert columns["thread_timing"][:3] == ["application_id", "application_name", "thread_id"]
    for needed in ("url", "executor_id", "executor_name", "state", "failed", "attempts", "time_submitted",
                   "time_started", "time_finished", "queue_wait_seconds", "run_seconds"):
        assert needed in columns["thread_timing"]
    for needed in ("executor_id", "executor_name", "threads", "pages", "mean_run_seconds", "min_run_seconds",
                   "max_run_seconds", "cpu_max", "cpu_usage", "cpu_avail", "cpu_totalusage", "pages_per_second"):
        assert needed in columns["executor_summary"]
    for needed in ("application_id", "pages", "elapsed_seconds", "pages_per_second"):
        assert needed in columns["application_summary"]


def test_views_use_datediff_big_in_microseconds(parsed):
    sql = parsed["views"]["thread_timing"].sql("tsql")
    assert sql.count("DATEDIFF_BIG(MICROSECOND") == 2


def test_schema_version_is_stored(parsed):
    for kind in ("manager", "crawl"):
        head = migrations.head(kind)
        assert (f"{kind}_meta", {"name": "schema_version", "value": str(int(head))}) in parsed["inserts"]
        assert (migrations.VERSION_TABLES[kind], {"version_num": head}) in parsed["inserts"]


def test_a_changed_model_is_noticed(parsed):
    """The comparison can fail: a column type the file does not have is seen as different."""
    assert parsed["tables"]["thread"]["columns"]["url"]["type"] != norm_type(sa.String(2000).compile(dialect=MSSQL))
    assert parsed["tables"]["document"]["columns"]["title"]["type"] != norm_type("NTEXT")


def test_each_view_is_alone_in_its_batch():
    """SQL Server refuses ``CREATE VIEW`` (and ``CREATE OR ALTER VIEW``) anywhere but as the one
    statement of its batch; sqlglot parses such a script without complaint, so it is checked here."""
    views_seen = 0
    for batch in batches():
        parsed = [s for s in sqlglot.parse(batch, read="tsql") if s is not None]
        kinds = [s.args.get("kind") if isinstance(s, exp.Create) else type(s).__name__ for s in parsed]
        if "VIEW" in kinds:
            assert kinds == ["VIEW"], f"a view shares its batch: {kinds}"
            views_seen += 1
    assert views_seen == len(views.MANAGER_VIEWS)


def test_tables_come_before_the_keys_and_views_that_name_them():
    """Run top to bottom, schema.sql creates a table before a foreign key, index or insert names
    it, and every table a view reads before the view (SQL Server checks both when it creates
    them; the tests above compare sets and would not notice a reordering)."""
    created: set[str] = set()
    for s in statements():
        if isinstance(s, exp.Create) and s.args["kind"] == "TABLE":
            for fk in s.find_all(exp.ForeignKey):
                target = fk.args["reference"].this.this.name
                assert target in created, f"{s.this.this.name} refers to {target} before it is created"
            created.add(s.this.this.name)
        elif isinstance(s, exp.Create) and s.args["kind"] == "INDEX":
            assert s.this.args["table"].name in created, s.sql("tsql")
        elif isinstance(s, exp.Create) and s.args["kind"] == "VIEW":
            read = {t.name for t in s.expression.find_all(exp.Table)}
            assert read <= created, (s.this.name, read - created)
            created.add(s.this.name)
        elif isinstance(s, exp.Insert):
            assert s.this.this.name in created, s.sql("tsql")
