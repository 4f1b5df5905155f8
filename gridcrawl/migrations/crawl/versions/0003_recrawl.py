"""Recrawl (issue 19): each document's body digest, validators (ETag, Last-Modified), last visit,
change and gone times and adaptive schedule (interval, next visit) with an index on the next
visit; the validators a queued recrawl sends (to_visit_url); the document_version history and
the recrawl table of counts.

Revision 0003 of the crawl database (after 0002).
"""

import sqlalchemy as sa

from gridcrawl.migrations import ops
from gridcrawl.migrations.ops import URL, FINGERPRINT, WHEN, REAL, TEXT, BLOB

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None



def _id(name: str) -> sa.Column:
    return sa.Column(name, sa.BigInteger().with_variant(sa.Integer, "sqlite"), nullable=False, autoincrement=True)


def upgrade() -> None:
    """Add the recrawl columns, index and tables that are missing."""
    for column in (sa.Column("content_digest", sa.String(64)), sa.Column("etag", sa.String(255)),
                   sa.Column("last_modified", sa.String(64)), sa.Column("visited_at", WHEN),
                   sa.Column("visit_status", sa.Integer), sa.Column("modified_at", WHEN),
                   sa.Column("gone_at", WHEN), sa.Column("fetch_interval", REAL), sa.Column("next_fetch_at", WHEN)):
        ops.add_column("document", column)
    ops.create_index("ix_document_next_fetch_at", "document", ["next_fetch_at"])
    ops.add_column("to_visit_url", sa.Column("etag", sa.String(255)))
    ops.add_column("to_visit_url", sa.Column("last_modified", sa.String(64)))
    ops.create_table(
        "document_version", _id("id"),
        sa.Column("fingerprint", sa.String(FINGERPRINT), nullable=False), sa.Column("url", sa.String(URL), nullable=False),
        sa.Column("final_url", sa.String(URL)), sa.Column("status", sa.Integer), sa.Column("content_type", sa.String(255)),
        sa.Column("size", sa.BigInteger, nullable=False), sa.Column("content_digest", sa.String(64)),
        sa.Column("etag", sa.String(255)), sa.Column("last_modified", sa.String(64)),
        sa.Column("fetched_at", WHEN, nullable=False), sa.Column("replaced_at", WHEN, nullable=False),
        sa.Column("encoding", sa.String(64)), sa.Column("headers", TEXT), sa.Column("content", TEXT),
        sa.Column("body", BLOB),
        sa.PrimaryKeyConstraint("id", name="pk_document_version"),
        sa.Index("ix_document_version_fingerprint", "fingerprint"))
    ops.create_table(
        "recrawl", _id("recrawl_id"),
        sa.Column("mode", sa.String(16), nullable=False), sa.Column("started_at", WHEN, nullable=False),
        sa.Column("finished_at", WHEN),
        *(sa.Column(name, sa.Integer, nullable=False) for name in
          ("due", "fetched", "not_modified", "unchanged", "changed", "gone", "revived", "errors", "new")),
        sa.PrimaryKeyConstraint("recrawl_id", name="pk_recrawl"))


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
