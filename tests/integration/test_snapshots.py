"""Periodic snapshots (workers/snapshotter.py) and the bounded folded-id set (PolicyStates.compact)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import numpy as np
import pytest
from sqlalchemy import func, select, update

from app.main import create_app
from app.state import PolicyStates, RouterRuntime, advance_watermark
from app.store.models import FeedbackEvent, Router, Snapshot, Tenant
from routers.base import Context
from tests.conftest import Stack, admin_headers, bearer, make_tenancy, running
from workers.snapshotter import snapshot_router

PROMPTS = [f"question {i} about {topic}" for i in range(4) for topic in ("algebra", "poetry", "law")]


async def teach(client: httpx.AsyncClient, key: str, prompts: list[str]) -> list[int]:
    ids = []
    for i, prompt in enumerate(prompts):
        decision = (await client.post("/route", json={"prompt": prompt}, headers=bearer(key))).json()
        body = {"decision_id": decision["decision_id"], "reward": float(i % 2)}
        response = await client.post("/feedback", json=body, headers=bearer(key))
        assert response.status_code == 202
        ids.append(response.json()["event_id"])
    return ids


async def router_row(app_ctx: object, tenant: str) -> Router:
    async with app_ctx.sessionmaker() as session:  # type: ignore[attr-defined]
        row = await session.scalar(
            select(Router).join(Tenant, Tenant.id == Router.tenant_id).where(Tenant.name == tenant)
        )
        assert row is not None
        return row


def probe_scores(runtime: RouterRuntime) -> list[float]:
    """Every score number the policy gives on five fixed random unit embeddings, flattened."""
    rng = np.random.default_rng(7)
    out: list[float] = []
    for _ in range(5):
        v = rng.normal(size=384).astype(np.float32)
        v /= np.linalg.norm(v)
        scores = runtime.policy.select(Context(embedding=v, rng=np.random.default_rng(1))).scores
        out += [float(scores[arm][k]) for arm in sorted(scores) for k in sorted(scores[arm])]
    return out


async def test_periodic_snapshot_is_the_start_and_bounds_the_folded_ids(pg_stack: Stack) -> None:
    app = create_app(pg_stack.settings(compact_interval_s=0))
    async with running(app) as client:
        ctx = app.state.ctx
        t = await make_tenancy(client)
        ids = await teach(client, t.key, PROMPTS)
        row = await router_row(ctx, t.tenant)
        live = ctx.states.loaded(row.id)
        assert live is not None and live.folded == set(ids) and live.watermark == 0

        # With a safety lag longer than the events' age nothing is settled, so nothing is claimed.
        assert await snapshot_router(ctx.sessionmaker, row.id, lag_s=3600, keep=2) is None
        taken = await snapshot_router(ctx.sessionmaker, row.id, lag_s=0, keep=2)
        assert taken is not None and taken.watermark == max(ids) and taken.events_folded == len(ids)
        # Nothing new: no second snapshot.
        assert await snapshot_router(ctx.sessionmaker, row.id, lag_s=0, keep=2) is None

        # A process starting now begins at the snapshot: empty folded set, same decisions.
        restarted = await PolicyStates(ctx.sessionmaker).get(row)
        assert restarted.watermark == max(ids) and restarted.folded == set()
        assert restarted.events_folded == len(ids)
        assert probe_scores(restarted) == pytest.approx(probe_scores(live))

        # The live process compacts: its watermark moves to the snapshot's, the folded ids go.
        assert await ctx.states.compact() == len(ids)
        assert live.watermark == max(ids) and live.folded == set()
        assert live.events_folded == len(ids)
        more = await teach(client, t.key, PROMPTS[:3])
        assert live.folded == set(more) and live.events_folded == len(ids) + 3

        # Only `keep` periodic snapshots stay.
        for prompt in PROMPTS[3:6]:
            await teach(client, t.key, [prompt])
            assert await snapshot_router(ctx.sessionmaker, row.id, lag_s=0, keep=2) is not None
        async with ctx.sessionmaker() as session:
            kept = await session.scalar(
                select(func.count())
                .select_from(Snapshot)
                .where(Snapshot.router_id == row.id, Snapshot.kind == "periodic")
            )
        assert kept == 2


async def test_compaction_folds_an_event_the_bus_never_delivered(pg_stack: Stack) -> None:
    """An event committed by a process that died before publishing: compaction finds it below the
    snapshot's watermark and folds it before forgetting ids."""
    app = create_app(pg_stack.settings(compact_interval_s=0))
    lonely = create_app(pg_stack.settings(redis_url=None, compact_interval_s=0))  # in-process bus only
    async with running(app) as client, running(lonely) as other:
        ctx = app.state.ctx
        t = await make_tenancy(client)
        await teach(client, t.key, PROMPTS[:4])
        hidden = await teach(other, t.key, PROMPTS[4:5])  # committed, never on the Redis stream
        row = await router_row(ctx, t.tenant)
        live = ctx.states.loaded(row.id)
        assert live is not None and live.events_folded == 4
        taken = await snapshot_router(ctx.sessionmaker, row.id, lag_s=0, keep=3)
        assert taken is not None and taken.watermark == hidden[0] and taken.events_folded == 5
        assert await ctx.states.compact() == 5
        assert live.events_folded == 5 and live.watermark == hidden[0] and live.folded == set()


async def test_the_safety_lag_leaves_recent_events_unclaimed(stack: Stack) -> None:
    app = create_app(stack.settings(compact_interval_s=0))
    async with running(app) as client:
        ctx = app.state.ctx
        t = await make_tenancy(client)
        old = await teach(client, t.key, PROMPTS[:3])
        async with ctx.sessionmaker() as session:
            await session.execute(
                update(FeedbackEvent)
                .where(FeedbackEvent.id.in_(old))
                .values(created_at=datetime.now(UTC) - timedelta(minutes=5))
            )
            await session.commit()
        recent = await teach(client, t.key, PROMPTS[3:5])
        row = await router_row(ctx, t.tenant)
        taken = await snapshot_router(ctx.sessionmaker, row.id, lag_s=60, keep=3)
        assert taken is not None and taken.watermark == max(old) and taken.events_folded == 3
        restarted = await PolicyStates(ctx.sessionmaker).get(row)
        assert restarted.watermark == max(old) and restarted.folded == set(recent)
        assert restarted.events_folded == 5


async def test_reset_after_a_periodic_snapshot_wins(stack: Stack) -> None:
    app = create_app(stack.settings(compact_interval_s=0))
    async with running(app) as client:
        ctx = app.state.ctx
        t = await make_tenancy(client)
        ids = await teach(client, t.key, PROMPTS[:4])
        row = await router_row(ctx, t.tenant)
        assert await snapshot_router(ctx.sessionmaker, row.id, lag_s=0, keep=3) is not None
        reset = await client.delete(f"/admin/tenants/{t.tenant}/routers/main/state", headers=admin_headers())
        assert reset.status_code == 200
        row = await router_row(ctx, t.tenant)
        restarted = await PolicyStates(ctx.sessionmaker).get(row)
        assert restarted.events_folded == 0 and restarted.watermark == max(ids)
        # And the snapshotter has nothing new to claim over the reset.
        assert await snapshot_router(ctx.sessionmaker, row.id, lag_s=0, keep=3) is None


def test_advance_watermark_refuses_to_forget_an_unfolded_event() -> None:
    runtime = RouterRuntime(1, 1, "h", policy=None, watermark=10, folded={11, 12, 14})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="13"):
        advance_watermark(runtime, 14, committed=[11, 12, 13, 14])
    advance_watermark(runtime, 12, committed=[11, 12])
    assert runtime.watermark == 12 and runtime.folded == {14}
