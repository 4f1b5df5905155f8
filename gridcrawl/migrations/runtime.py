"""The body of both revision chains' ``env.py``: run Alembic's migrations on the connection that
:func:`gridcrawl.migrations.upgrade` passes in (online mode only; ``schema.sql`` for SQL Server is
rendered from the models by :mod:`gridcrawl.schema_sql`, not by Alembic's offline mode)."""

from __future__ import annotations

from gridcrawl.migrations import VERSION_TABLES


def run() -> None:
    """Configure Alembic's context for the connection and kind in the ``Config``'s attributes and
    run the pending revisions in one transaction where the back end allows (SQLite, PostgreSQL,
    SQL Server; MariaDB commits each DDL statement itself)."""
    from alembic import context
    config = context.config
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("gridcrawl's migrations run only through gridcrawl.migrations.upgrade "
                           "(`gridcrawl db upgrade --db URL`), on a connection")
    context.configure(connection=connection, version_table=VERSION_TABLES[config.attributes["kind"]],
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()
