"""Migration 0010 (a probe's kind): the active-learning probes stored before it become kind ``query``,
shadow rows fit after it, and its downgrade drops the shadow rows with the column, on both stacks."""

from __future__ import annotations

import asyncio

from alembic import command

from app.store.migrate import alembic_config, upgrade
from tests.integration.test_migration_direct import ROWS, _execute, fresh_url  # noqa: F401 (fixture)

PROBE = (
    "INSERT INTO probes (decision_id, tenant_id, router_id, model, answer, cost, status, created_at) "
    "VALUES ('d1', 1, 1, 'm', 'text', 0.5, 'pending', :at)"
)
SHADOW = (
    "INSERT INTO probes (decision_id, tenant_id, router_id, model, kind, answer, cost, status, created_at) "
    "VALUES ('d1', 1, 1, 'n', 'shadow', 'text', 0.25, 'pending', :at)"
)


def test_existing_probes_become_queries_and_downgrade_drops_shadow_rows(fresh_url: str) -> None:  # noqa: F811
    upgrade(fresh_url, "0009")
    asyncio.run(_execute(fresh_url, [*ROWS, PROBE]))
    upgrade(fresh_url, "0010")
    kinds = asyncio.run(_execute(fresh_url, [SHADOW, "SELECT model, kind FROM probes ORDER BY model"]))
    assert kinds == [("m", "query"), ("n", "shadow")]
    command.downgrade(alembic_config(fresh_url), "0009")
    left = asyncio.run(_execute(fresh_url, ["SELECT model, status FROM probes"]))
    assert left == [("m", "pending")]
