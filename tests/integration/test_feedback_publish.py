"""Client feedback on Postgres + Redis goes out through the bus's publisher queue: concurrent events
share its pipelined sends, each is published once, and each answer still comes after this process
folded its event (read-your-writes)."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis
from sqlalchemy import select

from app.bus import RedisStreamBus
from app.events import FeedbackMessage, decode_message
from app.main import create_app
from app.store.models import Router, Tenant
from tests.conftest import REDIS_URL, Stack, bearer, make_tenancy, running

BURST = 24


async def test_concurrent_feedback_shares_sends_and_is_folded_before_each_answer(pg_stack: Stack) -> None:
    settings = pg_stack.settings(read_your_writes_timeout_s=5.0)
    app = create_app(settings)
    async with running(app) as client:
        ctx = app.state.ctx
        bus = ctx.bus
        assert isinstance(bus, RedisStreamBus)
        t = await make_tenancy(client, policy="knn-ucb")
        decision_ids = []
        for i in range(BURST):
            routed = await client.post("/route", json={"prompt": f"prompt {i}"}, headers=bearer(t.key))
            assert routed.status_code == 200, routed.text
            decision_ids.append(str(routed.json()["decision_id"]))
        async with ctx.sessionmaker() as session:
            router_id = await session.scalar(
                select(Router.id).join(Tenant, Tenant.id == Router.tenant_id).where(Tenant.name == t.tenant)
            )
        runtime = ctx.states.loaded(router_id)
        assert runtime is not None
        sends_before = bus.sends

        async def give(decision_id: str, reward: float) -> tuple[int, bool]:
            body = {"decision_id": decision_id, "reward": reward}
            response = await client.post("/feedback", json=body, headers=bearer(t.key))
            assert response.status_code == 202, response.text
            event_id = int(response.json()["event_id"])
            return event_id, event_id in runtime.folded

        results = await asyncio.gather(*(give(d, float(i % 2)) for i, d in enumerate(decision_ids)))
        event_ids = sorted(event_id for event_id, _ in results)
        assert [folded for _, folded in results] == [True] * BURST
        assert len(set(event_ids)) == BURST
        assert 1 <= bus.sends - sends_before < BURST  # events queued during a send shared the next one

        redis = Redis.from_url(REDIS_URL)
        try:
            entries = await redis.xrange(settings.event_stream)
        finally:
            await redis.aclose()
        messages = (decode_message(fields[b"m"]) for _, fields in entries)
        published = [
            m.event_id for m in messages if isinstance(m, FeedbackMessage) and m.decision_id in decision_ids
        ]
        assert sorted(published) == event_ids  # each once
        stored = {arm: len(store) for arm, store in runtime.policy._stores.items()}
        assert sum(stored.values()) == BURST  # the policy learned every reward once
