"""A crawl database as gridcrawl first released it: crawl_meta and the paper's figure 10 tables
document, visited_url and to_visit_url, keyed by URL fingerprint.

Revision 0001 of the crawl database.
"""

import sqlalchemy as sa

from gridcrawl.migrations import ops
from gridcrawl.migrations.ops import FINGERPRINT, URL, WHEN

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None



def _id() -> sa.Column:
    return sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), nullable=False, autoincrement=True)


def upgrade() -> None:
    """Create the first release's tables that are missing."""
    ops.create_table("crawl_meta", sa.Column("name", sa.String(64), nullable=False),
                     sa.Column("value", sa.String(1024), nullable=False),
                     sa.PrimaryKeyConstraint("name", name="pk_crawl_meta"))
    ops.create_table(
        "document",
        sa.Column("doc_id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), nullable=False, autoincrement=True),
        sa.Column("url", sa.String(URL), nullable=False), sa.Column("fingerprint", sa.String(FINGERPRINT), nullable=False),
        sa.Column("final_url", sa.String(URL), nullable=False), sa.Column("status", sa.Integer),
        sa.Column("content_type", sa.String(255)), sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("title", sa.UnicodeText), sa.Column("encoding", sa.String(64)), sa.Column("content", sa.UnicodeText),
        sa.Column("body", sa.LargeBinary), sa.Column("depth", sa.Integer, nullable=False),
        sa.Column("fetched_at", WHEN, nullable=False), sa.Column("executor", sa.String(36)),
        sa.Column("fetch_seconds", sa.Float, nullable=False), sa.Column("parse_seconds", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("doc_id", name="pk_document"),
        sa.Index("ux_document_fingerprint", "fingerprint", unique=True))
    ops.create_table(
        "visited_url", _id(),
        sa.Column("url", sa.String(URL), nullable=False), sa.Column("fingerprint", sa.String(FINGERPRINT), nullable=False),
        sa.Column("depth", sa.Integer, nullable=False), sa.Column("status", sa.Integer),
        sa.Column("error_kind", sa.String(32)), sa.Column("error", sa.String(1024)),
        sa.Column("attempts", sa.Integer, nullable=False), sa.Column("visited_at", WHEN, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_visited_url"),
        sa.Index("ux_visited_url_fingerprint", "fingerprint", unique=True))
    ops.create_table(
        "to_visit_url", _id(),
        sa.Column("url", sa.String(URL), nullable=False), sa.Column("fingerprint", sa.String(FINGERPRINT), nullable=False),
        sa.Column("depth", sa.Integer, nullable=False), sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("discovered_from", sa.String(URL)), sa.Column("in_flight", sa.Boolean, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_to_visit_url"),
        sa.Index("ux_to_visit_url_fingerprint", "fingerprint", unique=True),
        sa.Index("ix_to_visit_url_queue", "in_flight", "priority", "id"),
        sqlite_autoincrement=True)


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
