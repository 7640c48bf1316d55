"""Select-time counts live in the database (``router_counters``): kNN-UCB's round t and BALROG's query
budget continue across a restart, are shared by replicas, and start again after a reset."""

from __future__ import annotations

import asyncio

from app.main import create_app
from tests.conftest import Stack, admin_headers, bearer, make_tenancy, running

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
