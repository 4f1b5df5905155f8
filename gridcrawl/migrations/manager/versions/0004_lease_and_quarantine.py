"""The manager's lease on its database (manager_lease: one manager per database) and the
executor's quarantine (executor.quarantined_until): issue 22.

Revision 0004 of the manager database (after 0003).
"""

import sqlalchemy as sa

from gridcrawl.migrations import ops
from gridcrawl.migrations.ops import WHEN

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create manager_lease; add executor.quarantined_until."""
    ops.create_table("manager_lease", sa.Column("name", sa.String(64), nullable=False),
                     sa.Column("holder", sa.String(255), nullable=False),
                     sa.Column("epoch", sa.BigInteger, nullable=False),
                     sa.Column("expires_at", WHEN, nullable=False),
                     sa.PrimaryKeyConstraint("name", name="pk_manager_lease"))
    ops.add_column("executor", sa.Column("quarantined_until", WHEN, nullable=True))


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
