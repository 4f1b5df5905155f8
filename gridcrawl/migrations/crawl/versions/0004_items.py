"""Items: the item, item_issue and item_spec tables, and document.extract_seconds (executor CPU
seconds spent extracting a page's items).

Revision 0004 of the crawl database (after 0003).
"""

import sqlalchemy as sa

from gridcrawl.migrations import ops
from gridcrawl.migrations.ops import URL, FINGERPRINT, WHEN, REAL, TEXT, ID

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None



def upgrade() -> None:
    """Create the item tables; add document.extract_seconds (0 for pages stored before)."""
    ops.add_column("document", sa.Column("extract_seconds", REAL, nullable=False, server_default="0"))
    ops.create_table(
        "item",
        sa.Column("id", ID, nullable=False, autoincrement=True), sa.Column("type", sa.String(64), nullable=False),
        sa.Column("fingerprint", sa.String(FINGERPRINT), nullable=False),
        sa.Column("url", sa.String(URL), nullable=False), sa.Column("position", sa.Integer, nullable=False),
        sa.Column("fields", TEXT, nullable=False), sa.Column("extracted_at", WHEN, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_item"),
        sa.Index("ux_item_fingerprint", "fingerprint", "type", "position", unique=True),
        sa.Index("ix_item_type", "type", "id"))
    ops.create_table(
        "item_issue",
        sa.Column("id", ID, nullable=False, autoincrement=True), sa.Column("type", sa.String(64), nullable=False),
        sa.Column("fingerprint", sa.String(FINGERPRINT), nullable=False),
        sa.Column("url", sa.String(URL), nullable=False), sa.Column("position", sa.Integer, nullable=False),
        sa.Column("field", sa.String(200), nullable=False), sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("message", sa.String(1024)), sa.Column("noted_at", WHEN, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_item_issue"),
        sa.Index("ux_item_issue_fingerprint", "fingerprint", "type", "position", "field", unique=True))
    ops.create_table(
        "item_spec",
        sa.Column("id", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("source", sa.String(1024), nullable=False), sa.Column("text", TEXT, nullable=False),
        sa.Column("stored_at", WHEN, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_item_spec"))


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
