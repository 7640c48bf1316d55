"""router decision counters

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 19:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('router_counters',
    sa.Column('router_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('decisions', sa.BigInteger(), nullable=False),
    sa.Column('query_rounds', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['router_id'], ['routers.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('router_id')
    )


def downgrade() -> None:
    op.drop_table('router_counters')
