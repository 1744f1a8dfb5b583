"""baseline: the job store as lwl 0.1 made it (jobs, history, datasets, label_batches)

Revision ID: 0001
Revises:
Create Date: 2026-11-28
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a table that exists is kept: a store made before migrations (its columns were brought up to
    # date first), or a first start that stopped half-way (SQLite commits each CREATE TABLE)
    have = set(sa.inspect(op.get_bind()).get_table_names())
    if "jobs" not in have:
        _jobs()
    if "history" not in have:
        _history()
    if "datasets" not in have:
        _datasets()
    if "label_batches" not in have:
        _label_batches()


def _jobs() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("idempotency_key", sa.String(200)),
        sa.Column("request_hash", sa.String(64)),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float),
        sa.Column("finished_at", sa.Float),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("progress", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("result", sa.Text),
        sa.Column("checkpoint", sa.LargeBinary),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("lease", sa.String(64)),
        sa.Column("worker", sa.String(200)),
        sa.Column("heartbeat_at", sa.Float),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("ask_step", sa.Integer, nullable=False),
        sa.Column("kind", sa.Text),
        sa.Column("queue", sa.String(40)),
        sa.UniqueConstraint("owner", "idempotency_key", name="uq_jobs_owner_idempotency"),
    )
    op.create_index("ix_jobs_owner", "jobs", ["owner"])
    op.create_index("ix_jobs_status", "jobs", ["status"])


def _history() -> None:
    op.create_table(
        "history",
        sa.Column("job_id", sa.String(32), primary_key=True),
        sa.Column("iteration", sa.Integer, primary_key=True),
        sa.Column("seconds", sa.Float, nullable=False),
        sa.Column("record", sa.Text, nullable=False),
    )


def _datasets() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("shape", sa.Text, nullable=False),
        sa.Column("dtype", sa.String(20), nullable=False),
        sa.Column("nbytes", sa.Integer, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_datasets_owner", "datasets", ["owner"])


def _label_batches() -> None:
    op.create_table(
        "label_batches",
        sa.Column("job_id", sa.String(32), primary_key=True),
        sa.Column("batch_id", sa.String(64), primary_key=True),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("step_key", sa.String(64), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("inputs", sa.LargeBinary, nullable=False),
        sa.Column("labels", sa.LargeBinary),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("labelled_at", sa.Float),
        sa.Column("outcomes", sa.LargeBinary),
        sa.Column("partial", sa.LargeBinary),
    )


def downgrade() -> None:
    for table in ("label_batches", "datasets", "history", "jobs"):
        op.drop_table(table)
