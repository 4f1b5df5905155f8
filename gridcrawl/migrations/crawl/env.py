"""Alembic environment of the crawl database's revisions (see gridcrawl.migrations)."""
from gridcrawl.migrations.runtime import run

run()
