"""Feedback about a decision this process committed is resolved from the ledger's memory
(app/store/recent_decisions.py), with no read of the database, and a deletion memory cannot see still
ends in a 404, never a 500: on SQLite and on Postgres + Redis."""

from __future__ import annotations

import asyncio
import time

import httpx
from sqlalchemy import delete, select

from app.main import create_app
from app.store.models import DecisionRow, FeedbackEvent, Router, Tenant
from tests.conftest import Stack, Tenancy, admin_headers, bearer, make_tenancy, running


async def route(client: httpx.AsyncClient, t: Tenancy, prompt: str) -> str:
    routed = await client.post("/route", json={"prompt": prompt}, headers=bearer(t.key))
    assert routed.status_code == 200, routed.text
    return str(routed.json()["decision_id"])


async def give(client: httpx.AsyncClient, t: Tenancy, decision_id: str) -> httpx.Response:
    return await client.post(
        "/feedback", json={"decision_id": decision_id, "reward": 1.0}, headers=bearer(t.key)
    )


async def test_feedback_about_a_recent_decision_reads_no_decision(stack: Stack) -> None:
    app = create_app(stack.settings(recent_decisions=100))
    async with running(app) as client:
        recent = app.state.ctx.ledger.recent
        assert recent is not None and recent.size == 100
        t = await make_tenancy(client)
        decision_ids = [await route(client, t, f"prompt {i}") for i in range(3)]
        misses = recent.misses
        for decision_id in decision_ids:
            response = await give(client, t, decision_id)
            assert response.status_code == 202, response.text
            assert response.json()["model"] in t.arms
        assert recent.misses == misses  # every one answered from memory
        async with app.state.ctx.sessionmaker() as session:
            stored = await session.scalars(
                select(FeedbackEvent.decision_id).where(FeedbackEvent.decision_id.in_(decision_ids))
            )
            assert sorted(stored.all()) == sorted(decision_ids)
        # another tenant naming the decision finds nothing, as in the database
        other = await make_tenancy(client)
        response = await give(client, other, decision_ids[0])
        assert response.status_code == 404 and "not found" in response.text


async def test_a_deletion_memory_did_not_see_is_a_404(stack: Stack) -> None:
    """A router deleted on another replica whose message never came (deleted here in SQL, so no message
    is sent): this process still holds the router (catalog) and its decision (memory); the feedback's
    write fails its foreign keys, and the item, resolved again from the database, is not found."""
    app = create_app(stack.settings(recent_decisions=100))
    async with running(app) as client:
        ctx = app.state.ctx
        t = await make_tenancy(client)
        gone, kept = await route(client, t, "deleted behind our back"), await route(client, t, "kept")
        async with ctx.sessionmaker() as session:
            await session.execute(delete(DecisionRow).where(DecisionRow.id == gone))
            await session.commit()
        response = await give(client, t, gone)
        assert response.status_code == 404, response.text
        assert f"decision {gone!r} not found" in response.text
        assert not ctx.ledger.recent.holds_any([gone])

        async with ctx.sessionmaker() as session:
            tenant_id = await session.scalar(select(Tenant.id).where(Tenant.name == t.tenant))
            await session.execute(delete(Router).where(Router.tenant_id == tenant_id))
            await session.commit()
        response = await give(client, t, kept)
        assert response.status_code == 404, response.text


async def test_an_admin_change_clears_memory(stack: Stack) -> None:
    app = create_app(stack.settings(recent_decisions=100))
    async with running(app) as client:
        recent = app.state.ctx.ledger.recent
        t = await make_tenancy(client)
        decision_id = await route(client, t, "about to go")
        assert recent.holds_any([decision_id])
        response = await client.delete(
            f"/admin/tenants/{t.tenant}/routers/{t.router}", headers=admin_headers()
        )
        assert response.status_code == 204, response.text
        deadline = time.monotonic() + 10  # on Redis the message comes back through the stream
        while recent.holds_any([decision_id]) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(recent) == 0
        assert (await give(client, t, decision_id)).status_code == 404


async def test_no_memory_when_switched_off(sqlite_stack: Stack) -> None:
    app = create_app(sqlite_stack.settings(recent_decisions=0))
    async with running(app) as client:
        assert app.state.ctx.ledger.recent is None
        t = await make_tenancy(client)
        response = await give(client, t, await route(client, t, "read from the database"))
        assert response.status_code == 202, response.text
