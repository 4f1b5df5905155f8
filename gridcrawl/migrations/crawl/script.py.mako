"""${message}

Revision ${up_revision} of the ${config.attributes.get("kind", "")} database (after ${down_revision}).
"""

from gridcrawl.migrations import ops

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision (idempotent: see gridcrawl.migrations.ops)."""
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
