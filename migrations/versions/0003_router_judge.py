"""router judge for gateway-driven cascades

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 17:25:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("routers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("judge_url", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("judge_threshold", sa.Float(), nullable=False, server_default="0.5"))


def downgrade() -> None:
    with op.batch_alter_table("routers", schema=None) as batch_op:
        batch_op.drop_column("judge_threshold")
        batch_op.drop_column("judge_url")
