"""Alembic environment of the manager database's revisions (see gridcrawl.migrations)."""
from gridcrawl.migrations.runtime import run

run()
