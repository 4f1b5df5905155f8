"""Rendered pages (issue 16): the seconds a page was open in the browser and the requests its
scripts made that were refused, on ``document``.

Revision 0006 of the crawl database (after 0005, the semantic crawl's).
"""

import sqlalchemy as sa

from gridcrawl.migrations import ops
from gridcrawl.migrations.ops import REAL, TEXT

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None



def upgrade() -> None:
    """Add document.render_seconds (NULL: fetched only) and document.refused_requests (JSON)."""
    ops.add_column("document", sa.Column("render_seconds", REAL))
    ops.add_column("document", sa.Column("refused_requests", TEXT))


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
