"""Migration 0011: a router's ``judge_url`` / ``judge_threshold`` become its ``judge`` object, and back."""

from __future__ import annotations

import asyncio
import json

from alembic import command

from app.store.migrate import alembic_config, upgrade
from tests.integration.test_migration_direct import _execute, fresh_url  # noqa: F401  (the fixture)

ROUTER = (
    "INSERT INTO routers (id, tenant_id, name, policy, hyperparameters, arms, reward_lo, reward_hi, seed, "
    "is_default, version, judge_url, judge_threshold, created_at, updated_at) "
    "VALUES ({id}, 1, '{name}', 'linucb', '{{}}', '[\"m\"]', 0, 1, 0, false, 1, {url}, {threshold}, :at, :at)"
)


def test_judge_urls_move_into_the_judge_object_and_back(fresh_url: str) -> None:  # noqa: F811
    upgrade(fresh_url, "0009")
    rows = [
        "INSERT INTO tenants (id, name, created_at) VALUES (1, 't', :at)",
        ROUTER.format(id=1, name="judged", url="'http://judge.example/j'", threshold=0.7),
        ROUTER.format(id=2, name="plain", url="NULL", threshold=0.5),
    ]
    asyncio.run(_execute(fresh_url, rows))
    upgrade(fresh_url, "0011")
    found = asyncio.run(_execute(fresh_url, ["SELECT id, judge, judge_measured FROM routers ORDER BY id"]))
    judges = [(i, json.loads(j) if isinstance(j, str) else j, m) for i, j, m in found]
    assert judges == [(1, {"url": "http://judge.example/j", "threshold": 0.7}, None), (2, None, None)]

    backend_judge = json.dumps({"backend": "m", "rubric": "r", "threshold": 0.6})
    asyncio.run(_execute(fresh_url, [f"UPDATE routers SET judge = '{backend_judge}' WHERE id = 2"]))
    command.downgrade(alembic_config(fresh_url), "0010")
    back = asyncio.run(
        _execute(fresh_url, ["SELECT id, judge_url, judge_threshold FROM routers ORDER BY id"])
    )
    assert back == [(1, "http://judge.example/j", 0.7), (2, None, 0.5)]  # a backend judge has no old form
