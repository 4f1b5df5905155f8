"""``recrawl.disallowed``: the stored documents a recrawl run found robots.txt now disallows,
counted apart from its ``errors`` (the crawler obeyed the site; the stored copy is kept).

Revision 0011 of the crawl database (after 0010).
"""

import sqlalchemy as sa

from gridcrawl.migrations import ops

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``recrawl.disallowed`` (INTEGER NOT NULL, 0 for the runs recorded before: their
    disallowed visits are among their ``errors``)."""
    ops.add_column("recrawl", sa.Column("disallowed", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
