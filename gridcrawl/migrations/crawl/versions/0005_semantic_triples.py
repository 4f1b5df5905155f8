"""Semantic crawl: the ``triple`` table (one row per page and triple, unique on the page's
fingerprint and the triple's SHA-256) and ``document.structured_data`` (gridcrawl.semantic).

Revision 0005 of the crawl database (after 0004, the items).
"""

import sqlalchemy as sa

from gridcrawl.migrations import ops
from gridcrawl.migrations.ops import URL, FINGERPRINT, TEXT

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None



def upgrade() -> None:
    """Add ``document.structured_data`` and the ``triple`` table with its unique index."""
    ops.add_column("document", sa.Column("structured_data", TEXT))
    ops.create_table(
        "triple",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), nullable=False, autoincrement=True),
        sa.Column("fingerprint", sa.String(FINGERPRINT), nullable=False),
        sa.Column("subject", sa.Unicode(URL), nullable=False), sa.Column("predicate", sa.Unicode(URL), nullable=False),
        sa.Column("object", TEXT, nullable=False), sa.Column("object_kind", sa.String(8), nullable=False),
        sa.Column("datatype", sa.Unicode(URL)), sa.Column("language", sa.String(64)),
        sa.Column("triple_key", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_triple"),
        sa.Index("ux_triple_page", "fingerprint", "triple_key", unique=True))


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
