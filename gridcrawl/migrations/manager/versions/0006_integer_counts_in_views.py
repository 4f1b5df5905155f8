"""The views count pages and failed grid threads with ``COUNT`` (integers on every back end:
MariaDB/MySQL gave the ``SUM`` they had as ``DECIMAL``, which a user's script read as
``Decimal('100')`` and could not write as JSON), and on SQLite their seconds are exact to the
microsecond (``julianday`` read milliseconds: 0.395 for 0.394889 s). No table changes: a database at an older
revision gets this release's views when it is upgraded (:func:`gridcrawl.db.init_schema`).

Revision 0006 of the manager database (after 0005).
"""

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing to change in the tables; the views are created again after the upgrade."""


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
