"""Users, groups and permissions (usr, grp, prm, grp_prm: the security issue), and on
MariaDB/MySQL times to the microsecond and double-precision CPU figures.

Revision 0002 of the manager database (after 0001).
"""

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from gridcrawl.migrations import ops
from gridcrawl.migrations.ops import WHEN

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the user tables; widen times and figures on MariaDB/MySQL."""
    ops.create_table("prm", sa.Column("prm_id", sa.SmallInteger, nullable=False, autoincrement=False),
                     sa.Column("prm_name", sa.String(64), nullable=False),
                     sa.PrimaryKeyConstraint("prm_id", name="pk_prm"),
                     sa.UniqueConstraint("prm_name", name="uq_prm_prm_name"))
    ops.create_table("grp", sa.Column("grp_id", sa.SmallInteger, nullable=False, autoincrement=False),
                     sa.Column("grp_name", sa.String(64), nullable=False),
                     sa.PrimaryKeyConstraint("grp_id", name="pk_grp"),
                     sa.UniqueConstraint("grp_name", name="uq_grp_grp_name"))
    ops.create_table("grp_prm", sa.Column("grp_id", sa.SmallInteger, nullable=False),
                     sa.Column("prm_id", sa.SmallInteger, nullable=False),
                     sa.PrimaryKeyConstraint("grp_id", "prm_id", name="pk_grp_prm"),
                     sa.ForeignKeyConstraint(["grp_id"], ["grp.grp_id"], name="fk_grp_prm_grp_id"),
                     sa.ForeignKeyConstraint(["prm_id"], ["prm.prm_id"], name="fk_grp_prm_prm_id"))
    ops.create_table("usr", sa.Column("usr_name", sa.String(64), nullable=False),
                     sa.Column("password_hash", sa.String(255), nullable=False),
                     sa.Column("salt", sa.String(64), nullable=False),
                     sa.Column("grp_id", sa.SmallInteger, nullable=False),
                     sa.Column("created", WHEN, nullable=False),
                     sa.PrimaryKeyConstraint("usr_name", name="pk_usr"),
                     sa.ForeignKeyConstraint(["grp_id"], ["grp.grp_id"], name="fk_usr_grp_id"))
    when, real = mysql.DATETIME(fsp=6), mysql.DOUBLE()
    ops.widen_on_mysql("executor", {"ping_time": (when, True), "time_registered": (when, True),
                                    "cpu_max": (real, False), "cpu_usage": (real, False),
                                    "cpu_avail": (real, False), "cpu_totalusage": (real, False),
                                    "pages_per_second": (real, False)})
    ops.widen_on_mysql("application", {"time_created": (when, False), "time_completed": (when, True)})
    ops.widen_on_mysql("thread", {"time_submitted": (when, False), "time_started": (when, True),
                                  "time_finished": (when, True)})
    ops.widen_on_mysql("attempt", {"time_assigned": (when, False), "time_started": (when, True),
                                   "time_finished": (when, True)})


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
