"""``visited_url.page_type``: the page type (keep/follow rules) a URL was visited as, so that
``--retry-failed`` queues a failed page again as that type (before, it went back without one: a
page type with ``render = true`` was fetched without rendering and stored as its empty shell,
and its page type's follow rules no longer applied).

Revision 0009 of the crawl database (after 0008).
"""

import sqlalchemy as sa

from gridcrawl.migrations import ops

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``visited_url.page_type`` (NULL for the visits made before)."""
    ops.add_column("visited_url", sa.Column("page_type", sa.String(64)))


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
