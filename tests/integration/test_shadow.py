"""Shadow evaluation through the gateway (app/routing/probes.py, app/routing/shadow.py) against real local
backends: a router with ``shadow=1.0`` over an incumbent (served, ``ok``) and a challenger that answers
slowly (``delay-<s>``). The client gets the served answer at once; the gateway calls the challenger in the
background, lists its answer at ``GET /feedback/pending`` as a ``shadow`` item, folds its grade as
evidence (never a served round), counts its cost, and refuses shadow calls over its bounds."""

from __future__ import annotations

import asyncio
import math
import time

import httpx
from fastapi import FastAPI
from sqlalchemy import select

from app.store.models import FeedbackEvent, Probe
from routers.conservative import Conservative
from routers.wrapper import layers
from tests.conftest import Stack, admin_headers, bearer, error_text, running
from tests.fake_backend import FakeBackends
from tests.integration.test_forwarding import PROMPT, USAGE_COST, add_backend, add_tenant, gateway_app
from tests.integration.test_probes import drain, forward_body, probes_of

SLOW_S = 5.0  # the shadow backend's delay: the client's answer must not wait for it


async def shadow_tenant(
    client: httpx.AsyncClient, fake: FakeBackends, slow: str = f"delay-{SLOW_S}", **hyper: object
) -> tuple[str, str, str, str]:
    """(key, tenant, incumbent, challenger): a greedy router whose floor keeps it on the incumbent
    (no evidence yet) and that shadows every decision; the challenger is the only other arm."""
    incumbent = await add_backend(client, fake, "ok")
    challenger = await add_backend(client, fake, slow, timeout_s=10.0)
    tenant = f"t-{incumbent}"
    hyperparameters = {"incumbent": incumbent, "max_loss": 0.05, "shadow": 1.0, **hyper}
    key = await add_tenant(
        client, [incumbent, challenger], policy="greedy", hyperparameters=hyperparameters, tenant=tenant
    )
    return key, tenant, incumbent, challenger


def floor_of(app: FastAPI, router_id: int) -> Conservative:
    runtime = app.state.ctx.states.loaded(router_id)
    assert runtime is not None
    return next(layer for layer in layers(runtime.policy) if isinstance(layer, Conservative))


async def cost_events(app: FastAPI, decision_id: str) -> dict[str, float | None]:
    """The decision's cost events, by model."""
    async with app.state.ctx.sessionmaker() as session:
        query = select(FeedbackEvent).where(
            FeedbackEvent.decision_id == decision_id, FeedbackEvent.kind == "cost"
        )
        return {e.model: e.cost for e in await session.scalars(query)}


async def stats_of(client: httpx.AsyncClient, tenant: str) -> dict[str, object]:
    response = await client.get(f"/admin/tenants/{tenant}/routers/main/stats", headers=admin_headers())
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_shadow_call_is_off_the_path_listed_graded_and_costed(stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(stack)
    async with running(app) as client:
        key, tenant, incumbent, challenger = await shadow_tenant(client, fake)
        started = time.perf_counter()
        response = await client.post("/route", json=forward_body(), headers=bearer(key))
        elapsed = time.perf_counter() - started
        assert response.status_code == 200, response.text
        decided = response.json()
        decision_id = decided["decision_id"]
        assert decided["backend"] == incumbent
        assert decided["response"]["choices"][0]["message"]["content"] == "answer from ok"
        assert "answer from delay" not in response.text and "shadow" not in decided  # only the served answer
        assert challenger not in str(response.headers)
        assert elapsed < SLOW_S, elapsed  # the answer did not wait for the shadow backend
        # the shadow call is still running when the client has its answer
        assert (await client.get("/feedback/pending", headers=bearer(key))).json()["probes"] == []
        await drain(app)

        shadow_calls = [r for r in fake.requests if r.body.get("model") == challenger]
        assert len(shadow_calls) == 1 and shadow_calls[0].body["messages"][0]["content"] == PROMPT
        (item,) = (await client.get("/feedback/pending", headers=bearer(key))).json()["probes"]
        assert item["kind"] == "shadow" and item["decision_id"] == decision_id and item["model"] == challenger
        assert item["answer"] == f"answer from delay-{SLOW_S}" and item["cost"] == USAGE_COST

        costs = await cost_events(app, decision_id)
        assert costs == {incumbent: USAGE_COST, challenger: USAGE_COST}  # served and shadow calls both paid

        router_id = (await probes_of(app, decision_id))[challenger].router_id
        floor = floor_of(app, router_id)
        played_before = {a: list(s) for a, s in floor.played.items()}
        assert floor.seen.get(challenger, [0.0, 0.0])[0] == 0

        # grading: only a (decision, model) with a shadow answer takes kind shadow
        wrong = {"decision_id": decision_id, "model": incumbent, "kind": "shadow", "reward": 1.0}
        refused = await client.post("/feedback", json=wrong, headers=bearer(key))
        assert refused.status_code == 422 and "no shadow answer" in error_text(refused)
        grade = {"decision_id": decision_id, "model": challenger, "kind": "shadow", "reward": 0.75}
        sent = await client.post("/feedback", json=grade, headers=bearer(key))
        assert sent.status_code == 202, sent.text
        assert sent.json()["kind"] == "shadow" and not sent.json()["duplicate"]
        assert (await client.get("/feedback/pending", headers=bearer(key))).json()["probes"] == []
        assert (await probes_of(app, decision_id))[challenger].status == "answered"

        assert floor.played == played_before  # the floor's realised sums hold no shadow answer
        assert floor.seen[challenger] == [1.0, 0.75]  # evidence: one more reward of the challenger

        stats = await stats_of(client, tenant)
        shadow = stats["shadow"]
        assert isinstance(shadow, dict)
        assert (shadow["calls"], shadow["answered"], shadow["pending"], shadow["refused"]) == (1, 1, 0, {})
        assert shadow["served"] == 1 and shadow["share"] == 1.0
        assert math.isclose(shadow["spend"], USAGE_COST) and math.isclose(
            shadow["spent_last_day"], USAGE_COST
        )
        assert math.isclose(stats["cost_total"], 2 * USAGE_COST)  # type: ignore[arg-type]
        model = shadow["models"][challenger]
        lcb = max(0.0, 0.75 - math.sqrt(math.log(1 / 0.01) / 2))  # Hoeffding, n = 1, delta = 0.01, range 1
        assert (model["calls"], model["graded"], model["evidence_n"], model["evidence_mean"]) == (
            1,
            1,
            1,
            0.75,
        )
        assert math.isclose(model["evidence_lcb"], lcb)
        assert shadow["models"][incumbent]["calls"] == 0


async def test_streamed_answer_does_not_wait_for_the_shadow_call(stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(stack)
    async with running(app) as client:
        key, _, incumbent, challenger = await shadow_tenant(client, fake)
        body = {"model": "router", "stream": True, "messages": [{"role": "user", "content": PROMPT}]}
        started = time.perf_counter()
        async with client.stream("POST", "/v1/chat/completions", json=body, headers=bearer(key)) as response:
            assert response.status_code == 200
            text = "".join([chunk async for chunk in response.aiter_text()])
        assert time.perf_counter() - started < SLOW_S
        assert "[DONE]" in text and "answer from delay" not in text
        assert response.headers["x-banditgate-model"] == incumbent
        assert (await client.get("/feedback/pending", headers=bearer(key))).json()["probes"] == []
        await drain(app)
        (call,) = [r for r in fake.requests if r.body.get("model") == challenger]
        assert "stream" not in call.body
        (item,) = (await client.get("/feedback/pending", headers=bearer(key))).json()["probes"]
        assert item["kind"] == "shadow" and item["model"] == challenger


async def test_shadow_answer_survives_a_restart(stack: Stack, fake: FakeBackends) -> None:
    first = gateway_app(stack)
    async with running(first) as client:
        key, _, _, challenger = await shadow_tenant(client, fake, slow="ok")
        decision_id = (await client.post("/route", json=forward_body(), headers=bearer(key))).json()[
            "decision_id"
        ]
        await drain(first)
    second = gateway_app(stack)  # a new process on the same database
    async with running(second) as client:
        (item,) = (await client.get("/feedback/pending", headers=bearer(key))).json()["probes"]
        assert (item["kind"], item["decision_id"], item["model"]) == ("shadow", decision_id, challenger)
        grade = {"decision_id": decision_id, "model": challenger, "kind": "shadow", "reward": 1.0}
        assert (await client.post("/feedback", json=grade, headers=bearer(key))).status_code == 202
        assert (await client.get("/feedback/pending", headers=bearer(key))).json()["probes"] == []


async def refused_metric(client: httpx.AsyncClient, tenant: str, reason: str) -> float:
    text = (await client.get("/metrics", headers=admin_headers())).text
    prefix = f'banditgate_shadow_refused_total{{reason="{reason}",router="main",tenant="{tenant}"}} '
    found = [line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix)]
    return float(found[0]) if found else 0.0


async def test_budget_refuses_shadow_calls_once_spent(stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(stack)
    async with running(app) as client:
        # room for one call: after it, spent (USAGE_COST) + any expected cost > the budget
        key, tenant, _, challenger = await shadow_tenant(
            client, fake, slow="ok", shadow_usd_per_day=USAGE_COST
        )
        ids = []
        for _ in range(2):
            ids.append(
                (await client.post("/route", json=forward_body(), headers=bearer(key))).json()["decision_id"]
            )
            await drain(app)
        first, second = [(await probes_of(app, d))[challenger] for d in ids]
        assert (first.kind, first.status, first.cost) == ("shadow", "pending", USAGE_COST)
        assert (second.kind, second.status, second.error, second.cost) == (
            "shadow",
            "refused",
            "budget",
            None,
        )
        assert len([r for r in fake.requests if r.body.get("model") == challenger]) == 1
        assert await refused_metric(client, tenant, "budget") == 1.0
        shadow = (await stats_of(client, tenant))["shadow"]
        assert isinstance(shadow, dict)
        assert (shadow["calls"], shadow["refused"], shadow["served"]) == (1, {"budget": 1}, 2)
        assert shadow["share"] == 0.5 and shadow["budget_usd_per_day"] == USAGE_COST
        refused = {"decision_id": ids[1], "model": challenger, "kind": "shadow", "reward": 1.0}
        assert (await client.post("/feedback", json=refused, headers=bearer(key))).status_code == 422


async def test_concurrency_refuses_instead_of_queueing(stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(stack, shadow_concurrency=1)
    async with running(app) as client:
        key, tenant, _, challenger = await shadow_tenant(client, fake)
        ids = [
            (await client.post("/route", json=forward_body(), headers=bearer(key))).json()["decision_id"]
            for _ in range(2)
        ]  # the second decision comes while the first shadow call holds the only slot
        await drain(app)
        first, second = [(await probes_of(app, d))[challenger] for d in ids]
        assert first.status == "pending"
        assert (second.status, second.error) == ("refused", "concurrency")
        assert len([r for r in fake.requests if r.body.get("model") == challenger]) == 1
        assert await refused_metric(client, tenant, "concurrency") == 1.0
        assert app.state.ctx.probes.shadow.in_flight == 0  # every slot given back
        shadow = (await stats_of(client, tenant))["shadow"]
        assert isinstance(shadow, dict)
        assert shadow["refused"] == {"concurrency": 1} and shadow["calls"] == 1


async def test_pending_probes_of_both_kinds_say_which(stack: Stack, fake: FakeBackends) -> None:
    """A stored active-learning probe is listed with kind query, and kind shadow does not grade it."""
    app = gateway_app(stack)
    async with running(app) as client:
        arms = [await add_backend(client, fake, "ok") for _ in range(2)]
        key = await add_tenant(
            client, arms, policy="balrog", hyperparameters={"trigger": "random", "budget": 1.0}
        )
        decided = (await client.post("/route", json=forward_body(), headers=bearer(key))).json()
        await drain(app)
        (item,) = (await client.get("/feedback/pending", headers=bearer(key))).json()["probes"]
        assert item["kind"] == "query"
        async with app.state.ctx.sessionmaker() as session:
            stored = await session.scalar(
                select(Probe.kind).where(Probe.decision_id == decided["decision_id"])
            )
        assert stored == "query"
        wrong = {
            "decision_id": decided["decision_id"],
            "model": item["model"],
            "kind": "shadow",
            "reward": 1.0,
        }
        assert (await client.post("/feedback", json=wrong, headers=bearer(key))).status_code == 422


async def test_shadow_cost_is_spend_of_its_decision_for_the_pacer(stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(stack)
    async with running(app) as client:
        key, tenant, _, _ = await shadow_tenant(client, fake, slow="ok", cost_target=1.0)
        await client.post("/route", json=forward_body(), headers=bearer(key))
        await drain(app)
        # the gateway's cost events are folded without read-your-writes: wait for the fold
        for _ in range(50):
            pacing = (await stats_of(client, tenant))["trusted"]["pacing"]  # type: ignore[index]
            if pacing["spent"] is not None and pacing["spent"] >= 2 * USAGE_COST - 1e-12:
                break
            await asyncio.sleep(0.1)
        assert pacing["requests"] == 1  # one decision, two paid calls
        assert math.isclose(pacing["spent"], 2 * USAGE_COST)


async def test_a_shadow_call_whose_arm_is_removed_meanwhile_is_still_costed_and_gradable(
    sqlite_stack: Stack, fake: FakeBackends
) -> None:
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        key, tenant, incumbent, challenger = await shadow_tenant(client, fake, slow="delay-1.0")
        response = await client.post("/route", json=forward_body(), headers=bearer(key))
        assert response.status_code == 200, response.text
        decision_id = response.json()["decision_id"]
        removed = await client.patch(  # while the shadow call is out
            f"/admin/tenants/{tenant}/routers/main", json={"arms": [incumbent]}, headers=admin_headers()
        )
        assert removed.status_code == 200, removed.text
        await drain(app)
        costs = await cost_events(app, decision_id)
        assert costs == {incumbent: USAGE_COST, challenger: USAGE_COST}  # the shadow call is paid for
        grade = {"decision_id": decision_id, "model": challenger, "kind": "shadow", "reward": 0.5}
        sent = await client.post("/feedback", json=grade, headers=bearer(key))
        assert sent.status_code == 202, sent.text
        stranger = {"decision_id": decision_id, "model": "no-such-model", "reward": 0.5}
        refused = await client.post("/feedback", json=stranger, headers=bearer(key))
        assert refused.status_code == 422 and "neither in the decision nor an arm" in error_text(refused)
