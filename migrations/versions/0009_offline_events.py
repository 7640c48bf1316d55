"""offline events: logged outcomes uploaded as a warm start (issue 15, section 3)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 10:00:00

An event of kind ``offline`` has no decision: ``feedback.decision_id`` becomes nullable, and the event
carries its own ``embedding`` and the uploader's ``row_id``, unique per router (``uq_feedback_router_row``:
a retried upload inserts nothing). NULL row ids (every event of a decision) never collide. SQLite
rebuilds the table (batch mode; migrations/env.py turns its foreign keys off for that).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("feedback", schema=None) as batch_op:
        batch_op.alter_column("decision_id", existing_type=sa.String(length=32), nullable=True)
        batch_op.add_column(sa.Column("row_id", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("embedding", sa.LargeBinary(), nullable=True))
        batch_op.create_unique_constraint("uq_feedback_router_row", ["router_id", "row_id"])


def downgrade() -> None:
    # offline events cannot satisfy NOT NULL decision_id again: they go
    op.execute("DELETE FROM feedback WHERE decision_id IS NULL")
    with op.batch_alter_table("feedback", schema=None) as batch_op:
        batch_op.drop_constraint("uq_feedback_router_row", type_="unique")
        batch_op.drop_column("embedding")
        batch_op.drop_column("row_id")
        batch_op.alter_column("decision_id", existing_type=sa.String(length=32), nullable=False)
