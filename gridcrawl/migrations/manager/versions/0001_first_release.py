"""The manager database as gridcrawl first released it: manager_meta, executor, application,
thread (Alchemi's tables, with keys) and attempt.

Revision 0001 of the manager database.
"""

import sqlalchemy as sa

from gridcrawl.migrations import ops
from gridcrawl.migrations.ops import URL, WHEN

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None



def upgrade() -> None:
    """Create the first release's tables that are missing."""
    ops.create_table("manager_meta", sa.Column("name", sa.String(64), nullable=False),
                     sa.Column("value", sa.String(1024), nullable=False),
                     sa.PrimaryKeyConstraint("name", name="pk_manager_meta"))
    ops.create_table(
        "executor",
        sa.Column("executor_id", sa.String(36), nullable=False), sa.Column("name", sa.String(255), nullable=False),
        sa.Column("is_dedicated", sa.Boolean, nullable=False), sa.Column("is_connected", sa.Boolean, nullable=False),
        sa.Column("accepting", sa.Boolean, nullable=False), sa.Column("ping_time", WHEN),
        sa.Column("time_registered", WHEN), sa.Column("host", sa.String(255), nullable=False),
        sa.Column("port", sa.Integer), sa.Column("usr_name", sa.String(64), nullable=False),
        sa.Column("threads", sa.Integer, nullable=False), sa.Column("cpu_max", sa.Float, nullable=False),
        sa.Column("cpu_usage", sa.Float, nullable=False), sa.Column("cpu_avail", sa.Float, nullable=False),
        sa.Column("cpu_totalusage", sa.Float, nullable=False), sa.Column("mem_max", sa.BigInteger, nullable=False),
        sa.Column("mem_usage", sa.BigInteger, nullable=False), sa.Column("num_cpus", sa.Integer, nullable=False),
        sa.Column("pages_per_second", sa.Float, nullable=False), sa.Column("arch", sa.String(64), nullable=False),
        sa.Column("os", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("executor_id", name="pk_executor"))
    ops.create_table(
        "application",
        sa.Column("application_id", sa.String(36), nullable=False), sa.Column("state", sa.SmallInteger, nullable=False),
        sa.Column("time_created", WHEN, nullable=False), sa.Column("time_completed", WHEN),
        sa.Column("usr_name", sa.String(64), nullable=False),
        sa.Column("application_name", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("application_id", name="pk_application"))
    ops.create_table(
        "thread",
        sa.Column("internal_thread_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("application_id", sa.String(36), nullable=False),
        sa.Column("thread_id", sa.BigInteger, nullable=False), sa.Column("executor_id", sa.String(36)),
        sa.Column("state", sa.SmallInteger, nullable=False), sa.Column("url", sa.String(URL), nullable=False),
        sa.Column("host", sa.String(255), nullable=False), sa.Column("depth", sa.Integer, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False), sa.Column("failed", sa.Boolean, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False), sa.Column("error_kind", sa.String(32)),
        sa.Column("time_submitted", WHEN, nullable=False), sa.Column("time_started", WHEN),
        sa.Column("time_finished", WHEN),
        sa.PrimaryKeyConstraint("internal_thread_id", name="pk_thread"),
        sa.ForeignKeyConstraint(["application_id"], ["application.application_id"], name="fk_thread_application_id"),
        sa.ForeignKeyConstraint(["executor_id"], ["executor.executor_id"], name="fk_thread_executor_id"),
        sa.Index("ux_thread_application_thread", "application_id", "thread_id", unique=True),
        sa.Index("ix_thread_executor", "executor_id"), sa.Index("ix_thread_state", "state"))
    ops.create_table(
        "attempt",
        sa.Column("attempt_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("internal_thread_id", sa.BigInteger, nullable=False),
        sa.Column("executor_id", sa.String(36), nullable=False),
        sa.Column("time_assigned", WHEN, nullable=False), sa.Column("time_started", WHEN),
        sa.Column("time_finished", WHEN), sa.Column("outcome", sa.String(16), nullable=False),
        sa.PrimaryKeyConstraint("attempt_id", name="pk_attempt"),
        sa.ForeignKeyConstraint(["internal_thread_id"], ["thread.internal_thread_id"],
                                name="fk_attempt_internal_thread_id"),
        sa.ForeignKeyConstraint(["executor_id"], ["executor.executor_id"], name="fk_attempt_executor_id"),
        sa.Index("ix_attempt_thread", "internal_thread_id"), sa.Index("ix_attempt_executor", "executor_id"))


def downgrade() -> None:
    """gridcrawl does not downgrade schemas: restore a backup instead."""
    raise NotImplementedError("gridcrawl does not downgrade schemas")
