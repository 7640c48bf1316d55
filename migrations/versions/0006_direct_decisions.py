"""direct decisions: decisions and feedback of no router

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 13:10:00

A ``/v1`` call with ``model: "<backend>"`` is logged as a decision of no router, and its feedback too:
``router_id`` becomes nullable in ``decisions`` and ``feedback``. SQLite rebuilds both tables (batch
mode); migrations/env.py turns its foreign keys off for that, or dropping the old ``decisions`` table
would cascade into ``feedback``, ``attempts`` and ``probes``.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROUTER_ID = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade() -> None:
    for table in ('decisions', 'feedback'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column('router_id', existing_type=ROUTER_ID, nullable=True)


def downgrade() -> None:
    # the rows of no router cannot satisfy NOT NULL again: they go (their attempts and probes with them)
    op.execute('DELETE FROM feedback WHERE router_id IS NULL')
    op.execute('DELETE FROM decisions WHERE router_id IS NULL')
    for table in ('feedback', 'decisions'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column('router_id', existing_type=ROUTER_ID, nullable=False)
