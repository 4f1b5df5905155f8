"""Capability-based dispatch: what each executor declared it can do (executor.capabilities) and
what each grid thread needs (thread.needs), both space-separated names.

Revision 0003 of the manager database (after 0002).
"""

import sqlalchemy as sa

from gridcrawl.migrations import ops
from gridcrawl.migrations.ops import TEXT

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None



def upgrade() -> None:
    """Add executor.capabilities and thread.needs (NULL: nothing declared, nothing needed)."""
    ops.add_column("executor", sa.Column("capabilities", TEXT))
    ops.add_column("thread", sa.Column("needs", TEXT))


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
