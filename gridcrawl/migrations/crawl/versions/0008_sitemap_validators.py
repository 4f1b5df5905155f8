"""Recrawl with sitemaps (issue 19): the ``sitemap`` table — the sitemaps a crawl read, with
their digest and validators (a recrawl reads them again with a conditional request and acts on
the ``<lastmod>`` of the pages it has stored) and, for ``--watch``, their own schedule.

Revision 0008 of the crawl database (after 0007).
"""

import sqlalchemy as sa

from gridcrawl.migrations import ops
from gridcrawl.migrations.ops import FINGERPRINT, ID, REAL, URL, WHEN

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the ``sitemap`` table."""
    ops.create_table(
        "sitemap",
        sa.Column("id", ID, nullable=False, autoincrement=True),
        sa.Column("url", sa.String(URL), nullable=False),
        sa.Column("fingerprint", sa.String(FINGERPRINT), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("depth", sa.Integer, nullable=False),
        sa.Column("status", sa.Integer),
        sa.Column("content_digest", sa.String(64)),
        sa.Column("etag", sa.String(255)),
        sa.Column("last_modified", sa.String(64)),
        sa.Column("visited_at", WHEN, nullable=False),
        sa.Column("fetch_interval", REAL),
        sa.Column("next_fetch_at", WHEN),
        sa.PrimaryKeyConstraint("id", name="pk_sitemap"),
        sa.Index("ux_sitemap_fingerprint", "fingerprint", unique=True),
    )


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
