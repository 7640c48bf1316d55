"""router judge: one ``judge`` object (url or backend judge) replaces judge_url and judge_threshold

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28 12:30:00

A router's ``judge_url`` and ``judge_threshold`` move into ``judge`` as ``{"url", "threshold"}`` (a router
without a url gets no judge); ``judge_measured`` holds the judge's rates measured on a labelled set.
Downgrading moves url judges back; a backend judge has no place in the old columns and is dropped.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

routers = sa.table(
    "routers",
    sa.column("id", sa.BigInteger()),
    sa.column("judge_url", sa.Text()),
    sa.column("judge_threshold", sa.Float()),
    sa.column("judge", sa.JSON()),
)


def upgrade() -> None:
    with op.batch_alter_table("routers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("judge", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("judge_measured", sa.JSON(), nullable=True))
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(routers.c.id, routers.c.judge_url, routers.c.judge_threshold).where(
            routers.c.judge_url.is_not(None)
        )
    ).all()
    for router_id, url, threshold in rows:
        judge = {"url": url, "threshold": 0.5 if threshold is None else float(threshold)}
        bind.execute(sa.update(routers).where(routers.c.id == router_id).values(judge=judge))
    with op.batch_alter_table("routers", schema=None) as batch_op:
        batch_op.drop_column("judge_threshold")
        batch_op.drop_column("judge_url")


def downgrade() -> None:
    with op.batch_alter_table("routers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("judge_url", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("judge_threshold", sa.Float(), nullable=False, server_default="0.5"))
    bind = op.get_bind()
    for router_id, judge in bind.execute(sa.select(routers.c.id, routers.c.judge)).all():
        if isinstance(judge, dict) and judge.get("url"):
            values = {"judge_url": judge["url"], "judge_threshold": float(judge.get("threshold", 0.5))}
            bind.execute(sa.update(routers).where(routers.c.id == router_id).values(**values))
    with op.batch_alter_table("routers", schema=None) as batch_op:
        batch_op.drop_column("judge_measured")
        batch_op.drop_column("judge")
