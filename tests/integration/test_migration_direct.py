"""Migration 0006 (decisions and feedback of no router) keeps every row: on SQLite it rebuilds both
tables, which with foreign keys on would have cascaded the old ``decisions`` table's drop into
``feedback`` (migrations/env.py turns them off for migrations)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from app.store.db import make_engine
from app.store.migrate import upgrade
from tests.conftest import PG_SERVER, _admin_sql

ROWS = [
    "INSERT INTO tenants (id, name, created_at) VALUES (1, 't', :at)",
    "INSERT INTO routers (id, tenant_id, name, policy, hyperparameters, arms, reward_lo, reward_hi, seed, "
    "is_default, version, judge_threshold, created_at, updated_at) "
    "VALUES (1, 1, 'r', 'linucb', '{}', '[\"m\"]', 0, 1, 0, true, 1, 0.5, :at, :at)",
    "INSERT INTO decisions (id, tenant_id, router_id, router_version, policy, models, query, scores, info, "
    "embedding, prompt_hash, prompt_chars, metadata, created_at) "
    "VALUES ('d1', 1, 1, 1, 'linucb', '[\"m\"]', '[]', '{}', '{}', :blob, 'h', 1, '{}', :at)",
    "INSERT INTO feedback (decision_id, tenant_id, router_id, model, kind, reward, payload, created_at) "
    "VALUES ('d1', 1, 1, 'm', 'bandit', 0.5, '{}', :at)",
    "INSERT INTO attempts (decision_id, model, number, outcome, http_status, latency_ms, created_at) "
    "VALUES ('d1', 'm', 1, 'ok', 200, 1.0, :at)",
]


async def _execute(url: str, statements: list[str]) -> list[tuple[object, ...]]:
    engine = make_engine(url)
    try:
        async with engine.begin() as conn:
            result: list[tuple[object, ...]] = []
            for statement in statements:
                done = await conn.execute(text(statement), {"at": datetime.now(UTC), "blob": b"\0\0\0\0"})
                if done.returns_rows:
                    result.extend(tuple(row) for row in done)
            return result
    finally:
        await engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
        return
    name = f"bg_mig_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    asyncio.run(_admin_sql(f'CREATE DATABASE "{name}"'))
    yield PG_SERVER.replace("postgresql://", "postgresql+asyncpg://") + f"/{name}"
    asyncio.run(_admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_router_id_becomes_nullable_and_no_row_is_lost(fresh_url: str) -> None:
    upgrade(fresh_url, "0005")
    asyncio.run(_execute(fresh_url, ROWS))
    upgrade(fresh_url)
    counts = asyncio.run(
        _execute(
            fresh_url,
            [
                "SELECT (SELECT count(*) FROM decisions), (SELECT count(*) FROM feedback), "
                "(SELECT count(*) FROM attempts)",
                # a direct decision and its feedback, of no router, now fit
                "INSERT INTO decisions (id, tenant_id, router_id, router_version, policy, models, query, "
                "scores, info, embedding, prompt_hash, prompt_chars, metadata, created_at) VALUES ('d2', 1, "
                "NULL, 0, 'direct', '[\"m\"]', '[]', '{}', '{}', :blob, 'h', 1, '{}', :at)",
                "INSERT INTO feedback (decision_id, tenant_id, router_id, model, kind, payload, created_at) "
                "VALUES ('d2', 1, NULL, 'm', 'cost', '{}', :at)",
                "SELECT count(*) FROM feedback WHERE router_id IS NULL",
            ],
        )
    )
    assert counts == [(1, 1, 1), (1,)]
    # and deleting the router still cascades to its decisions (the foreign key survived the rebuild)
    after = asyncio.run(_execute(fresh_url, ["DELETE FROM routers", "SELECT count(*) FROM decisions"]))
    assert after == [(1,)]
