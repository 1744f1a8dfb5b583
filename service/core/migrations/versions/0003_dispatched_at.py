"""jobs.dispatched_at: when the last slice message of a queued job was sent (service.core.dispatch)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-28

Rows stored before it have NULL there; the dispatcher then reads ``updated_at`` (when the job
became queued).
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("jobs")}
    if "dispatched_at" not in have:  # a store made before migrations gained it from the store's tables already
        op.add_column("jobs", sa.Column("dispatched_at", sa.Float))


def downgrade() -> None:
    op.drop_column("jobs", "dispatched_at")
