"""Crawl strategies and WARC export: keep/follow rules (crawl_rule, kept_link), page types and
relevance (focused crawl) on document and to_visit_url, the final response's headers, the
(in_flight, depth, id) frontier index; on MariaDB/MySQL precise times, doubles and long text.

Revision 0002 of the crawl database (after 0001).
"""

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from gridcrawl.migrations import ops
from gridcrawl.migrations.ops import URL, FINGERPRINT, WHEN, REAL, TEXT

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None



def upgrade() -> None:
    """Add the strategy tables and columns, the depth index; widen types on MariaDB/MySQL."""
    for table in ("document", "to_visit_url"):
        ops.add_column(table, sa.Column("page_type", sa.String(64)))
        ops.add_column(table, sa.Column("relevance", REAL))
    ops.add_column("document", sa.Column("headers", TEXT))
    ops.create_index("ix_to_visit_url_depth", "to_visit_url", ["in_flight", "depth", "id"])
    ops.create_table(
        "crawl_rule",
        sa.Column("rule_id", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("base_url", sa.String(URL), nullable=False), sa.Column("rule_type", sa.String(16), nullable=False),
        sa.Column("from_type", sa.String(64), nullable=False), sa.Column("to_type", sa.String(64)),
        sa.Column("pattern", sa.String(1024), nullable=False), sa.Column("element_id", sa.String(255), nullable=False),
        sa.Column("element_class", sa.String(255), nullable=False),
        sa.Column("element_tag", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("rule_id", name="pk_crawl_rule"))
    ops.create_table(
        "kept_link",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), nullable=False, autoincrement=True),
        sa.Column("url", sa.String(URL), nullable=False), sa.Column("fingerprint", sa.String(FINGERPRINT), nullable=False),
        sa.Column("source_url", sa.String(URL), nullable=False), sa.Column("source_page_type", sa.String(64)),
        sa.Column("rule", sa.Integer, nullable=False), sa.Column("kept_at", WHEN, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_kept_link"),
        sa.Index("ux_kept_link_fingerprint", "fingerprint", "rule", unique=True))
    when, real = mysql.DATETIME(fsp=6), mysql.DOUBLE()
    ops.widen_on_mysql("document", {"fetched_at": (when, False), "fetch_seconds": (real, False),
                                    "parse_seconds": (real, False), "title": (mysql.LONGTEXT(), True),
                                    "content": (mysql.LONGTEXT(), True), "body": (mysql.LONGBLOB(), True)})
    ops.widen_on_mysql("visited_url", {"visited_at": (when, False)})


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
