"""The real web (issue 14): a page's text SimHash, canonical URL, the page it duplicates and its
sitemap lastmod on document, with an index on the body digest (the column came with 0003 (recrawl), for
content duplicates); the kind of a to-visit URL (a sitemap to read) and its sitemap lastmod on
to_visit_url.

Revision 0007 of the crawl database (after 0006).
"""

import sqlalchemy as sa

from gridcrawl.migrations import ops
from gridcrawl.migrations.ops import URL, WHEN

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None



def upgrade() -> None:
    """Add the columns and the digest index."""
    ops.add_column("document", sa.Column("simhash", sa.String(16)))
    ops.add_column("document", sa.Column("canonical_url", sa.String(URL)))
    ops.add_column("document", sa.Column("duplicate_of", sa.String(URL)))
    ops.add_column("document", sa.Column("lastmod", WHEN))
    ops.create_index("ix_document_content_digest", "document", ["content_digest"])
    ops.add_column("to_visit_url", sa.Column("kind", sa.String(16)))
    ops.add_column("to_visit_url", sa.Column("lastmod", WHEN))


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
