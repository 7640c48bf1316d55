"""Rate limits through the HTTP API (docs/security.md): a key over its rate or in-flight limit and an
address over its failed-auth limit get 429 with Retry-After on every tenant endpoint; the limits are
set per tenant through the admin API; with Redis two gateways share one budget."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx
from fastapi import FastAPI

from app.main import create_app
from tests.conftest import Stack, admin_headers, bearer, running, unique
from tests.fake_backend import FakeBackends
from tests.integration.processes import private_redis
from tests.integration.test_forwarding import add_backend, add_tenant, gateway_app
from tests.served import served

PROMPT = {"prompt": "What is the capital of France?"}
CHAT = {"messages": [{"role": "user", "content": "What is the capital of France?"}]}


async def tenant_of_key(client: httpx.AsyncClient, arms: list[str]) -> tuple[str, str]:
    """A new tenant with a default router over ``arms``: (its name, its key)."""
    tenant = unique("t")
    return tenant, await add_tenant(client, arms, tenant=tenant)


async def set_limits(client: httpx.AsyncClient, tenant: str, **limits: float) -> dict[str, object]:
    response = await client.put(f"/admin/tenants/{tenant}/limits", json=limits, headers=admin_headers())
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


@asynccontextmanager
async def from_addresses(app: FastAPI, *hosts: str) -> AsyncIterator[list[httpx.AsyncClient]]:
    """The app with its lifespan entered and one in-process client per client address."""
    async with app.router.lifespan_context(app), AsyncExitStack() as stack:
        clients = []
        for host in hosts:
            transport = httpx.ASGITransport(app=app, client=(host, 40000))
            clients.append(
                await stack.enter_async_context(httpx.AsyncClient(transport=transport, base_url="http://gw"))
            )
        yield clients


def retry_after_s(response: httpx.Response) -> int:
    assert response.status_code == 429, response.text
    return int(response.headers["retry-after"])


async def test_over_its_rate_a_key_gets_429_with_retry_after_on_every_tenant_endpoint(
    stack: Stack, fake: FakeBackends
) -> None:
    async with running(gateway_app(stack)) as client:
        arm = await add_backend(client, fake, "ok")
        tenant, key = await tenant_of_key(client, [arm])
        _, neighbour = await tenant_of_key(client, [arm])
        await set_limits(client, tenant, rate_limit_rps=0.01, rate_limit_burst=3)
        started = time.monotonic()
        decision = await client.post("/route", json=PROMPT, headers=bearer(key))
        assert decision.status_code == 200
        feedback = {"decision_id": decision.json()["decision_id"], "reward": 1.0}
        assert (await client.post("/feedback", json=feedback, headers=bearer(key))).status_code == 202
        direct = await client.post("/v1/chat/completions", json={**CHAT, "model": arm}, headers=bearer(key))
        assert direct.status_code == 200, direct.text

        # The bucket is empty: one token comes back after (1 - 0.01 * elapsed) / 0.01 s.
        refused = [
            await client.post("/route", json=PROMPT, headers=bearer(key)),
            await client.post("/feedback", json=feedback, headers=bearer(key)),
            await client.post("/v1/chat/completions", json={**CHAT, "model": "router"}, headers=bearer(key)),
            await client.get("/v1/models", headers=bearer(key)),
        ]
        elapsed = time.monotonic() - started
        for response in refused:
            assert 100 - math.ceil(elapsed) <= retry_after_s(response) <= 100
        detail = refused[0].json()["detail"]
        assert detail.startswith(
            "rate limit exceeded for this API key: 0.01 requests per second, bursts of 3"
        )
        error = refused[2].json()["error"]  # OpenAI's shape under /v1
        assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
        assert error["message"].startswith("rate limit exceeded for this API key")

        # Another tenant, and another key of the same tenant (limits are per key), are not affected.
        assert (await client.post("/route", json=PROMPT, headers=bearer(neighbour))).status_code == 200
        second = await client.post(f"/admin/tenants/{tenant}/keys", json={}, headers=admin_headers())
        assert (
            await client.post("/route", json=PROMPT, headers=bearer(second.json()["key"]))
        ).status_code == 200


async def test_limits_round_trip_through_the_admin_api_and_apply_at_once(stack: Stack) -> None:
    app = create_app(stack.settings(rate_limit_rps=500.0, rate_limit_burst=600, rate_limit_concurrency=70))
    async with running(app) as client:
        arm = unique("m")
        body = {"name": arm, "base_url": "http://127.0.0.1:9/v1"}
        assert (await client.post("/admin/backends", json=body, headers=admin_headers())).status_code == 201
        tenant, key = await tenant_of_key(client, [arm])
        unset = {"rate_limit_rps": None, "rate_limit_burst": None, "rate_limit_concurrency": None}
        defaults = {"rate_limit_rps": 500.0, "rate_limit_burst": 600, "rate_limit_concurrency": 70}
        url = f"/admin/tenants/{tenant}/limits"
        assert (await client.get(url, headers=admin_headers())).json() == {
            "configured": unset,
            "effective": defaults,
        }
        # The key is used (its tenant is now in the catalog cache) before its limits change.
        assert (await client.post("/route", json=PROMPT, headers=bearer(key))).status_code == 200

        own = {"rate_limit_rps": 0.01, "rate_limit_burst": 1, "rate_limit_concurrency": 7}
        assert await set_limits(client, tenant, **own) == {"configured": own, "effective": own}
        assert (await client.get(url, headers=admin_headers())).json()["configured"] == own
        assert (await client.get(f"/admin/tenants/{tenant}", headers=admin_headers())).json()["limits"] == own
        listed = (await client.get("/admin/tenants", headers=admin_headers())).json()
        assert next(t for t in listed if t["name"] == tenant)["limits"] == own
        # The bucket kept its tokens, capped at the new burst of 1: one request, then 429.
        assert (await client.post("/route", json=PROMPT, headers=bearer(key))).status_code == 200
        assert (await client.post("/route", json=PROMPT, headers=bearer(key))).status_code == 429

        # A partial body replaces: what it leaves out falls back to the default.
        partial = await set_limits(client, tenant, rate_limit_burst=5)
        assert partial["configured"] == {**unset, "rate_limit_burst": 5}
        assert partial["effective"] == {**defaults, "rate_limit_burst": 5}
        assert (await client.post("/route", json=PROMPT, headers=bearer(key))).status_code == 200
        assert (await set_limits(client, tenant))["configured"] == unset

        for bad in (
            {"rate_limit_rps": 0},
            {"rate_limit_burst": 0},
            {"rate_limit_concurrency": -1},
            {"rps": 1},
        ):
            assert (await client.put(url, json=bad, headers=admin_headers())).status_code == 422, bad
        missing = await client.put("/admin/tenants/nobody-here/limits", json={}, headers=admin_headers())
        assert missing.status_code == 404
        assert (await client.put(url, json={}, headers=bearer(key))).status_code == 403


async def test_requests_in_flight_are_limited_per_key(stack: Stack, fake: FakeBackends) -> None:
    async with running(gateway_app(stack)) as client:
        slow = await add_backend(client, fake, "delay-0.5", timeout_s=5)
        tenant, key = await tenant_of_key(client, [slow])
        await set_limits(client, tenant, rate_limit_concurrency=1)
        before = fake.counts["delay-0.5"]
        first = asyncio.create_task(
            client.post("/v1/chat/completions", json={**CHAT, "model": slow}, headers=bearer(key))
        )
        while fake.counts["delay-0.5"] == before:  # the first call has reached the backend
            await asyncio.sleep(0.01)
        busy = await client.post("/route", json=PROMPT, headers=bearer(key))
        assert retry_after_s(busy) == 1
        assert busy.json()["detail"] == "too many requests in flight for this API key: at most 1 at once"
        assert (await first).status_code == 200
        assert (await client.post("/route", json=PROMPT, headers=bearer(key))).status_code == 200


async def test_a_stream_holds_its_slot_until_it_ends(sqlite_stack: Stack, fake: FakeBackends) -> None:
    """The slot is released after the response's last byte, not when the endpoint returns the stream."""
    app = gateway_app(sqlite_stack)
    async with served(app) as url, httpx.AsyncClient(base_url=url) as client:
        slow = await add_backend(client, fake, "slowstream", timeout_s=5)
        tenant, key = await tenant_of_key(client, [slow])
        await set_limits(client, tenant, rate_limit_concurrency=1)
        body = {**CHAT, "model": "router", "stream": True}
        async with client.stream("POST", "/v1/chat/completions", json=body, headers=bearer(key)) as response:
            async for line in response.aiter_lines():
                if "part1" in line:
                    break
            busy = await client.post("/route", json=PROMPT, headers=bearer(key))
            assert retry_after_s(busy) == 1
        # The client left: the stream ends (the gateway notices the disconnect) and frees the slot.
        deadline = time.monotonic() + 10
        while (await client.post("/route", json=PROMPT, headers=bearer(key))).status_code == 429:
            assert time.monotonic() < deadline, "the stream's slot was not released within 10 s"
            await asyncio.sleep(0.1)


async def test_wrong_keys_from_one_address_lock_that_address_out(stack: Stack) -> None:
    prefix = unique("bg:test-ratelimit")  # a bucket of its own for the addresses
    app = create_app(
        stack.settings(auth_failure_limit=3, auth_failure_window_s=30.0, rate_limit_prefix=prefix)
    )
    async with from_addresses(app, "10.9.0.1", "10.9.0.2") as (guesser, neighbour):
        arm = unique("m")
        body = {"name": arm, "base_url": "http://127.0.0.1:9/v1"}
        assert (
            await neighbour.post("/admin/backends", json=body, headers=admin_headers())
        ).status_code == 201
        _, key = await tenant_of_key(neighbour, [arm])
        # The key is now in this gateway's catalog: its address check and admission are one step.
        assert (await neighbour.post("/route", json=PROMPT, headers=bearer(key))).status_code == 200

        assert (await guesser.post("/route", json=PROMPT)).status_code == 401  # no key: not counted
        wrong = bearer("bg_not-a-key")
        assert (await guesser.post("/route", json=PROMPT, headers=wrong)).status_code == 401
        assert (await guesser.get("/v1/models", headers=wrong)).status_code == 401
        assert (await guesser.get("/admin/tenants", headers=wrong)).status_code == 401  # a wrong admin key
        started = time.monotonic()
        # Three failures spent the bucket; one is forgiven every 30 / 3 = 10 s.
        locked = [
            await guesser.post("/route", json=PROMPT, headers=wrong),
            await guesser.post("/route", json=PROMPT, headers=bearer(key)),  # even the right key
            await guesser.get("/admin/tenants", headers=admin_headers()),  # and the admin key
            await guesser.get("/v1/models", headers=bearer(key)),
        ]
        elapsed = time.monotonic() - started
        for response in locked:
            assert 10 - math.ceil(elapsed) <= retry_after_s(response) <= 10
        assert locked[0].json()["detail"].startswith("too many failed authentications from this address")
        assert locked[3].json()["error"]["code"] == "rate_limit_exceeded"

        # The other address is not affected, and its own wrong key is its own first failure.
        assert (await neighbour.post("/route", json=PROMPT, headers=bearer(key))).status_code == 200
        assert (await neighbour.post("/route", json=PROMPT, headers=wrong)).status_code == 401


async def test_two_gateways_on_one_redis_share_a_keys_budget(pg_stack: Stack) -> None:
    prefix = unique("bg:test-ratelimit")  # 127.0.0.1's failures of other tests do not count here
    settings = pg_stack.settings(catalog_ttl_s=60.0, auth_failure_limit=2, rate_limit_prefix=prefix)
    a, b = create_app(settings), create_app(settings)
    async with running(a) as on_a, running(b) as on_b:
        arm = unique("m")
        body = {"name": arm, "base_url": "http://127.0.0.1:9/v1"}
        assert (await on_a.post("/admin/backends", json=body, headers=admin_headers())).status_code == 201
        tenant, key = await tenant_of_key(on_a, [arm])
        # B reads the tenant (default limits) into its catalog cache, then A changes its limits: B hears
        # of it over the bus (its cache would otherwise keep the defaults for 60 s).
        assert (await on_b.post("/route", json=PROMPT, headers=bearer(key))).status_code == 200
        await set_limits(on_a, tenant, rate_limit_rps=0.01, rate_limit_burst=3)
        deadline = time.monotonic() + 10
        while (await on_b.post("/route", json=PROMPT, headers=bearer(key))).status_code != 429:
            assert time.monotonic() < deadline, "B did not apply A's new limits within 10 s"
            await asyncio.sleep(0.05)
        assert (await on_a.post("/route", json=PROMPT, headers=bearer(key))).status_code == 429

        # A fresh key: its 3 tokens are spent across both gateways.
        fresh = await on_a.post(f"/admin/tenants/{tenant}/keys", json={}, headers=admin_headers())
        other = bearer(fresh.json()["key"])
        statuses = [
            (await gateway.post("/route", json=PROMPT, headers=other)).status_code
            for gateway in (on_a, on_b, on_a, on_b, on_a)
        ]
        assert statuses == [200, 200, 200, 429, 429]

        # Failed authentications from one address count on both.
        wrong = bearer(unique("bg_wrong"))
        assert (await on_a.get("/v1/models", headers=wrong)).status_code == 401
        assert (await on_b.get("/v1/models", headers=wrong)).status_code == 401
        assert (await on_a.get("/v1/models", headers=bearer(key))).status_code == 429


async def test_the_failed_auth_lockout_holds_in_process_while_redis_is_down(pg_url: str) -> None:
    """With Redis gone the key limits fail open, but wrong keys are counted in the process's memory: the
    guessing address is locked out by this replica as it would be without Redis."""
    with private_redis() as redis:
        stack = Stack("postgres", pg_url, redis.url)
        app = create_app(stack.settings(auth_failure_limit=5, redis_url=redis.url))
        async with running(app) as client:
            wrong = bearer(unique("bg_wrong"))
            assert (await client.post("/route", json=PROMPT, headers=wrong)).status_code == 401
            redis.kill()
            statuses = [
                (await client.post("/route", json=PROMPT, headers=wrong)).status_code for _ in range(7)
            ]
            assert statuses == [401] * 5 + [429] * 2
            locked = await client.get("/v1/models", headers=wrong)
            assert locked.status_code == 429
            assert int(locked.headers["retry-after"]) >= 1
