"""tenant rate limits: each key's requests per second, burst and requests in flight (NULL = default)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.add_column(sa.Column("rate_limit_rps", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("rate_limit_burst", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("rate_limit_concurrency", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.drop_column("rate_limit_concurrency")
        batch_op.drop_column("rate_limit_burst")
        batch_op.drop_column("rate_limit_rps")
