"""Hot-standby managers: the lease row names its holder's address and since when it holds the
lease, and every attempt records the lease epoch of the manager that assigned it.

Revision 0005 of the manager database (after 0004).
"""

import sqlalchemy as sa

from gridcrawl.migrations import ops
from gridcrawl.migrations.ops import WHEN

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add manager_lease.address and .since, and attempt.epoch."""
    ops.add_column("manager_lease", sa.Column("address", sa.String(255)))
    ops.add_column("manager_lease", sa.Column("since", WHEN))
    ops.add_column("attempt", sa.Column("epoch", sa.BigInteger))


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
