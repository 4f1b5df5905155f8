"""Capability-based dispatch (issue 15): ``executor.capabilities`` (what an executor declared)
and ``thread.needs`` (what a grid thread needs), both space-separated.

Revision 0003 of the manager database (after 0002). Written while merging the items branch into
the semantic crawl's: whichever branch lands first keeps it.
"""

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from gridcrawl.migrations import ops

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TEXT = sa.UnicodeText().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    """Add the two columns."""
    ops.add_column("executor", sa.Column("capabilities", TEXT))
    ops.add_column("thread", sa.Column("needs", TEXT))


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
