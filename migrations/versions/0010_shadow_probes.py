"""shadow probes: a stored extra call has a kind, ``query`` (active learning) or ``shadow``

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28 12:30:00

``probes.kind`` says why the gateway made the call: ``query`` (a policy's ``decision.query``, graded by
``kind: query`` feedback) or ``shadow`` (``decision.shadow``, graded by ``kind: shadow`` feedback). The
existing rows are all active-learning probes: the column is added NOT NULL with server default
``query``, which backfills them. ``ix_probes_router_kind`` serves the shadow budget's question (a
router's shadow spend since a moment).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("probes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("kind", sa.String(length=16), nullable=False, server_default="query"))
        batch_op.create_index("ix_probes_router_kind", ["router_id", "kind", "created_at"], unique=False)


def downgrade() -> None:
    # shadow rows have no place in a table without kinds: they go
    op.execute("DELETE FROM probes WHERE kind <> 'query'")
    with op.batch_alter_table("probes", schema=None) as batch_op:
        batch_op.drop_index("ix_probes_router_kind")
        batch_op.drop_column("kind")
