"""One active manager per database and hot standbys: the manager_lease table (holder, epoch,
expiry, the holder's address and since when), the epoch under which each attempt was assigned, and
the quarantine of executors whose attempts keep timing out.

Revision 0003 of the manager database (after 0002).
"""

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from gridcrawl.migrations import ops

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

WHEN = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    """Create manager_lease; add executor.quarantined_until and attempt.epoch."""
    ops.create_table("manager_lease", sa.Column("name", sa.String(64), nullable=False),
                     sa.Column("holder", sa.String(255), nullable=False),
                     sa.Column("epoch", sa.BigInteger, nullable=False),
                     sa.Column("expires_at", WHEN, nullable=False),
                     sa.Column("address", sa.String(255)), sa.Column("since", WHEN),
                     sa.PrimaryKeyConstraint("name", name="pk_manager_lease"))
    ops.add_column("executor", sa.Column("quarantined_until", WHEN))
    ops.add_column("attempt", sa.Column("epoch", sa.BigInteger))


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
