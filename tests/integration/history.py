"""Decisions and feedback events written straight into the database with known values and times, for
the tests of the stats views (tests/integration/test_admin_stats.py, test_trusted_stats.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from fastapi import FastAPI

from app.store.models import DecisionRow, FeedbackEvent

Event = tuple[str, str, float | None, float | None]  # model, kind, reward, cost


@dataclass
class Row:
    """One decision and its events (written in this order, so event ids follow it)."""

    decision_id: str
    when: datetime
    models: list[str]
    query: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    prompt_chars: int = 1
    policy: str = "linucb"


async def write_rows(app: FastAPI, tenant_id: int, router_id: int, rows: list[Row]) -> None:
    async with app.state.ctx.sessionmaker() as session:
        for row in rows:
            session.add(
                DecisionRow(
                    id=row.decision_id,
                    tenant_id=tenant_id,
                    router_id=router_id,
                    router_version=1,
                    policy=row.policy,
                    models=row.models,
                    query=row.query,
                    scores={},
                    info=row.info,
                    embedding=np.zeros(4, np.float32).tobytes(),
                    prompt_hash="0" * 64,
                    prompt_chars=row.prompt_chars,
                    created_at=row.when,
                )
            )
            await session.flush()
            for model, kind, reward, cost in row.events:
                session.add(
                    FeedbackEvent(
                        decision_id=row.decision_id,
                        tenant_id=tenant_id,
                        router_id=router_id,
                        model=model,
                        kind=kind,
                        reward=reward,
                        cost=cost,
                        payload={},
                        created_at=row.when,
                    )
                )
                await session.flush()
        await session.commit()
