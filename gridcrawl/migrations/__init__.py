"""Schema migrations of gridcrawl's two databases (the manager's and a crawl's), with Alembic.

Each database has its own chain of revisions, numbered ``0001``, ``0002``, ... in
``gridcrawl/migrations/<kind>/versions/`` (``kind`` is ``manager`` or ``crawl``), and its own
version table (:data:`VERSION_TABLES`), so both can live in one database. Revision ``0001`` is the
first released schema; every later one adds what a release added. The integer of the newest
revision is also written to the ``schema_version`` row of ``manager_meta`` / ``crawl_meta``.

:func:`gridcrawl.db.init_schema` calls :func:`prepare`: a new, empty database gets the current
tables from :mod:`gridcrawl.models` and is stamped at the head revision (no migration runs, and
Alembic is not even imported: it costs about half a second of start-up); a database at the head is
left alone; an older one — including one made before migrations existed, which has no version
table — is upgraded to the head by Alembic. ``gridcrawl db upgrade --db URL`` does the same on
demand. A database whose revision this release does not know was written by a newer gridcrawl:
:class:`SchemaTooNew` is raised (opening programs turn it into a one-line error).

Revisions are written to be idempotent (:mod:`gridcrawl.migrations.ops`: add a table, column or
index only if it is missing), so a database made by any development version between two releases
upgrades cleanly. How to add one: ``gridcrawl/migrations/README.md``.
"""

from __future__ import annotations

import os
import re

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from gridcrawl.errors import SchemaTooNew  # noqa: F401 (re-exported)

KINDS = ("manager", "crawl")
VERSION_TABLES = {"manager": "gridcrawl_manager_version", "crawl": "gridcrawl_crawl_version"}
_HERE = os.path.dirname(os.path.abspath(__file__))
_REVISION_FILE = re.compile(r"^(\d{4})_[A-Za-z0-9_]+\.py$")


def versions_dir(kind: str) -> str:
    """The folder of ``kind``'s revision files (``kind``: ``manager`` or ``crawl``)."""
    if kind not in KINDS:
        raise ValueError(f"unknown schema kind {kind!r} (expected one of {KINDS})")
    return os.path.join(_HERE, kind, "versions")


def revisions(kind: str) -> list[str]:
    """``kind``'s revision ids, oldest first, read from the file names (no Alembic import)."""
    found = sorted(m.group(1) for m in map(_REVISION_FILE.match, os.listdir(versions_dir(kind))) if m)
    return found


def head(kind: str) -> str:
    """The newest revision id of ``kind`` (``"0002"`` ...)."""
    return revisions(kind)[-1]


def version_table(kind: str) -> sa.Table:
    """Alembic's version table of ``kind`` (one ``version_num`` column), as a Core table."""
    name = VERSION_TABLES[kind]
    return sa.Table(name, sa.MetaData(), sa.Column("version_num", sa.String(32), nullable=False),
                    sa.PrimaryKeyConstraint("version_num", name=f"{name}_pkc"))


def current(conn: Connection, kind: str) -> str | None:
    """The revision ``conn``'s database is at, or ``None`` if it has no version table."""
    table = version_table(kind)
    if not sa.inspect(conn).has_table(table.name):
        return None
    return conn.execute(sa.select(table.c.version_num)).scalar()


def stamp(conn: Connection, kind: str, revision: str | None = None) -> None:
    """Record that ``conn``'s database is at ``revision`` (default: the head) without running
    any migration: used right after the current tables were created from the models."""
    table = version_table(kind)
    table.create(conn, checkfirst=True)
    conn.execute(table.delete())
    conn.execute(table.insert().values(version_num=revision or head(kind)))


def alembic_config(conn: Connection, kind: str):
    """An Alembic ``Config`` for ``kind`` running on ``conn`` (for ``alembic.command``)."""
    from alembic.config import Config
    config = Config()
    config.set_main_option("script_location", os.path.join(_HERE, kind))
    config.attributes["connection"] = conn
    config.attributes["kind"] = kind
    return config


def upgrade(conn: Connection, kind: str) -> str | None:
    """Upgrade ``conn``'s database to ``kind``'s head with Alembic; return the revision it was
    at before (``None``: no version table, i.e. made before migrations or empty).

    Raises :class:`SchemaTooNew` if the database is at a revision this release does not know.
    """
    before = current(conn, kind)
    if before is not None and before not in revisions(kind):
        raise SchemaTooNew(f"the {kind} database is at schema revision {before}, newer than this "
                           f"gridcrawl's {head(kind)}: upgrade gridcrawl")
    if before == head(kind):
        return before
    from alembic import command
    command.upgrade(alembic_config(conn, kind), "head")
    return before
