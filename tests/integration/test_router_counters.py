"""Select-time counts live in the database (``router_counters``): kNN-UCB's round t and BALROG's query
budget continue across a restart, are shared by replicas, and start again after a reset."""

from __future__ import annotations

import asyncio
from unittest.mock import ANY

import httpx
from sqlalchemy import select

from app.main import create_app
from app.store.db import make_engine, make_sessionmaker
from app.store.models import DecisionRow, RouterCounter, Tenant
from tests.conftest import Stack, admin_headers, bearer, make_tenancy, running
from tests.fake_backend import FakeBackends

CAPPED = {"trigger": "warm", "max_queries": 2}  # every round wants a query; two are allowed in all


async def test_t_and_the_query_budget_survive_restarts_and_are_shared(stack: Stack) -> None:
    async def decide(client, key: str) -> tuple[int, list[str]]:  # type: ignore[no-untyped-def]
        response = await client.post("/route", json={"prompt": "What is 2 + 2?"}, headers=bearer(key))
        assert response.status_code == 200, response.text
        return response.json()["info"]["t"], response.json()["query"]

    async with running(create_app(stack.settings())) as first:
        t = await make_tenancy(first, policy="balrog", hyperparameters=CAPPED)
        assert [len((await decide(first, t.key))[1]) for _ in range(2)] == [1, 1]
    # a restarted process: the third decision is round 3, and the budget of two queries is spent
    async with running(create_app(stack.settings())) as second:
        assert await decide(second, t.key) == (3, [])
        if stack.redis_url is not None:  # a replica running beside it sees the same counts
            async with running(create_app(stack.settings())) as third:
                assert await decide(third, t.key) == (4, [])
                assert await decide(second, t.key) == (5, [])
        reset = await second.delete(f"/admin/tenants/{t.tenant}/routers/main/state", headers=admin_headers())
        assert reset.status_code == 200, reset.text
        t_after, query = await decide(second, t.key)
        assert t_after == 1 and len(query) == 1  # a reset state starts counting again


async def test_a_cascade_reselect_is_not_counted_as_a_decision(stack: Stack) -> None:
    """``/route/{id}/next`` re-asks the policy (``Context.tried``): neither ``router_counters`` nor the
    policy's own t and query budget may count it."""
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client, policy="balrog", hyperparameters=CAPPED)
        first = await client.post("/route", json={"prompt": "What is 2 + 2?"}, headers=bearer(t.key))
        assert first.status_code == 200, first.text
        assert first.json()["info"]["t"] == 1 and len(first.json()["query"]) == 1
        decision_id = first.json()["decision_id"]
        for _ in range(2):
            step = await client.post(f"/route/{decision_id}/next", json={}, headers=bearer(t.key))
            assert step.status_code == 200, step.text
        second = await client.post("/route", json={"prompt": "What is 3 + 3?"}, headers=bearer(t.key))
        assert second.json()["info"]["t"] == 2 and len(second.json()["query"]) == 1  # 1 of 2 was spent


async def test_a_read_policy_sees_its_own_decisions_at_once_and_a_replicas_within_the_ttl(
    pg_stack: Stack,
) -> None:
    """kNN-UCB reads its round t (``counter_use == "read"``) through ``RoundCounts``: the committed count,
    re-read at most every ``counter_read_ttl_s``, plus this process's decisions since. So a process's
    own decisions count at once (t = 1, 2, 3 without a read each), a replica's show after the TTL, and
    with a TTL of 0 every decision reads the count."""

    async def t_of(client, key: str) -> int:  # type: ignore[no-untyped-def]
        response = await client.post("/route", json={"prompt": "What is 2 + 2?"}, headers=bearer(key))
        assert response.status_code == 200, response.text
        return int(response.json()["info"]["t"])

    cached = pg_stack.settings(counter_read_ttl_s=0.5)
    async with running(create_app(cached)) as first, running(create_app(cached)) as second:
        t = await make_tenancy(first, policy="knn-ucb")
        assert [await t_of(first, t.key) for _ in range(2)] == [1, 2]
        assert await t_of(second, t.key) == 3  # its first read: the two committed decisions
        assert await t_of(first, t.key) == 3  # within the TTL: its read (0) and its own two since
        await asyncio.sleep(0.6)
        assert await t_of(first, t.key) == 5  # re-read: 4 committed (3 of its own, 1 of the replica's)
        reset = await first.delete(f"/admin/tenants/{t.tenant}/routers/main/state", headers=admin_headers())
        assert reset.status_code == 200, reset.text
        assert await t_of(first, t.key) == 1  # the reset deleted the counts, and this process forgot its read
    every = pg_stack.settings(counter_read_ttl_s=0.0)
    async with running(create_app(every)) as first, running(create_app(every)) as second:
        t = await make_tenancy(first, policy="knn-ucb")
        assert [await t_of(first, t.key), await t_of(second, t.key), await t_of(first, t.key)] == [1, 2, 3]


async def test_concurrent_decisions_of_two_replicas_see_every_count_and_never_overspend(
    stack: Stack, fake: FakeBackends
) -> None:
    """BALROG spends its query budget at select (``counter_use == "exact"``): the ledger locks the
    router's counter from the read of its counts through select to the decision's write
    (``Ledger.counted``). So 16 concurrent decisions, half ``/route`` and half forwarded chat
    completions, half on each of two processes over one database, are rounds 1..16 each once, and
    exactly 3 of them query (with a lock-free read, concurrent decisions would see the same counts:
    repeated rounds and more than 3 queries). A forwarded decision, written while choosing, gets who
    answered merged into it after the call."""
    budget = {"trigger": "warm", "max_queries": 3}
    async with (
        running(create_app(stack.settings())) as first,
        running(create_app(stack.settings())) as second,
    ):
        t = await make_tenancy(first, policy="balrog", hyperparameters=budget)
        for arm in t.arms:  # answered by the fake backend
            patched = await first.patch(
                f"/admin/backends/{arm}", json={"base_url": fake.url("ok")}, headers=admin_headers()
            )
            assert patched.status_code == 200, patched.text

        async def route(client: httpx.AsyncClient) -> tuple[str, int | None, int]:
            response = await client.post("/route", json={"prompt": "What is 2 + 2?"}, headers=bearer(t.key))
            assert response.status_code == 200, response.text
            return response.json()["decision_id"], response.json()["info"]["t"], len(response.json()["query"])

        async def chat(client: httpx.AsyncClient) -> tuple[str, int | None, int]:
            body = {"model": "router", "messages": [{"role": "user", "content": "What is 3 + 3?"}]}
            response = await client.post("/v1/chat/completions", json=body, headers=bearer(t.key))
            assert response.status_code == 200, response.text
            queried = response.headers.get("x-banditgate-query", "")
            return (
                response.json()["banditgate"]["decision_id"],
                None,
                len([m for m in queried.split(",") if m]),
            )

        made = await asyncio.gather(
            *(call(client) for _ in range(4) for call in (route, chat) for client in (first, second))
        )
        assert sum(queries for _, _, queries in made) == 3
        assert await route(first) == (ANY, 17, 0)
        engine = make_engine(stack.database_url)
        try:
            async with make_sessionmaker(engine)() as session:
                mine = select(DecisionRow).join(Tenant).where(Tenant.name == t.tenant)
                rows = (await session.scalars(mine)).all()
                counter = await session.get(RouterCounter, rows[0].router_id)
        finally:
            await engine.dispose()
        by_id = {row.id: row for row in rows}
        assert sorted(row.info["t"] for row in rows) == list(range(1, 18))
        assert sum(1 for row in rows if row.query) == 3
        assert counter is not None and (counter.decisions, counter.query_rounds) == (17, 3)
        forwarded = [by_id[decision_id] for (decision_id, t_seen, _) in made if t_seen is None]
        assert len(forwarded) == 8 and all(row.info["answered_by"] in t.arms for row in forwarded)
