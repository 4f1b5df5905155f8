"""Idempotent schema operations for gridcrawl's revisions: each adds a table, column or index
only if the database lacks it, so a revision applies cleanly to a database made by any
development version between two releases (some of which already had the change).

Use only inside a revision's ``upgrade()`` (they call Alembic's ``op``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mssql, mysql

# The portable column types of gridcrawl's tables, frozen for revisions (the models' types may
# change; these never do — a new type gets a new name): UTC times to the microsecond, doubles,
# unbounded text and bytes, on SQLite, PostgreSQL, SQL Server and MariaDB/MySQL alike.
URL, FINGERPRINT = 2083, 32
WHEN = (sa.DateTime().with_variant(mssql.DATETIME2(precision=6), "mssql")
        .with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb"))
REAL = sa.Float().with_variant(mysql.DOUBLE(), "mysql", "mariadb")
TEXT = (sa.UnicodeText().with_variant(mssql.NVARCHAR(None), "mssql")
        .with_variant(mysql.LONGTEXT(), "mysql", "mariadb"))
BLOB = (sa.LargeBinary().with_variant(mssql.VARBINARY("max"), "mssql")
        .with_variant(mysql.LONGBLOB(), "mysql", "mariadb"))
ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")  # an identity key (SQLite's rowid)


def _inspector() -> sa.engine.reflection.Inspector:
    return sa.inspect(op.get_bind())


def has_table(name: str) -> bool:
    """True if table ``name`` exists."""
    return _inspector().has_table(name)


def create_table(name: str, *items: sa.schema.SchemaItem, **kw) -> None:
    """``op.create_table(name, *items, **kw)`` unless the table exists. Indexes among ``items``
    are created with it (and, when the table existed, those it lacks)."""
    indexes = [i for i in items if isinstance(i, sa.Index)]
    columns = [i for i in items if not isinstance(i, sa.Index)]
    if not has_table(name):
        op.create_table(name, *columns, **kw)
    for index in indexes:
        create_index(index.name, name, [c if isinstance(c, str) else c.name for c in index.expressions],
                     unique=index.unique)


def add_column(table: str, column: sa.Column) -> None:
    """``op.add_column(table, column)`` unless ``table`` has a column of that name. A NOT NULL
    column needs a ``server_default`` (existing rows must get a value)."""
    if column.name not in {c["name"] for c in _inspector().get_columns(table)}:
        with op.batch_alter_table(table) as batch:
            batch.add_column(column)


def create_index(name: str, table: str, columns: list[str], *, unique: bool = False) -> None:
    """``op.create_index`` unless ``table`` has an index called ``name``."""
    if name not in {i["name"] for i in _inspector().get_indexes(table)}:
        op.create_index(name, table, columns, unique=unique)


def widen_on_mysql(table: str, columns: dict[str, tuple[sa.types.TypeEngine, bool]]) -> None:
    """On MariaDB/MySQL only, change ``columns`` (name → (new type, nullable)) of ``table`` to the
    wider types gridcrawl now uses there (``DATETIME(6)``, ``DOUBLE``, ``LONGTEXT``,
    ``LONGBLOB``); other back ends already had them. ``MODIFY`` is idempotent."""
    if op.get_bind().dialect.name not in ("mysql", "mariadb"):
        return
    for name, (type_, nullable) in columns.items():
        op.alter_column(table, name, type_=type_, existing_nullable=nullable, nullable=nullable)
