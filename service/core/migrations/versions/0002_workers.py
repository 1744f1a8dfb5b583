"""workers: every worker process with its heartbeat (GET /v1/workers, a queued job's conditions)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-28

A store made by the lwl just before migrations existed has this table already: it is kept as
it is.
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "workers" in sa.inspect(op.get_bind()).get_table_names():
        return
    op.create_table(
        "workers",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("device", sa.String(20), nullable=False),
        sa.Column("queues", sa.Text, nullable=False),
        sa.Column("info", sa.Text, nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("heartbeat_at", sa.Float, nullable=False),
        sa.Column("current_job", sa.String(32)),
        sa.Column("slices", sa.Integer, nullable=False),
    )
    op.create_index("ix_workers_heartbeat_at", "workers", ["heartbeat_at"])


def downgrade() -> None:
    op.drop_table("workers")
