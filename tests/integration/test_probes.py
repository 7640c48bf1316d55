"""Active-learning probes (app/routing/probes.py) against real local backends: a BALROG router whose trigger
always fires asks for the other models' rewards; the gateway calls them in the background, lists their
answers at ``GET /feedback/pending`` and learns the ``kind: query`` rewards posted for them."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from sqlalchemy import select

from app.store.models import DecisionRow, FeedbackEvent, Probe, Router
from tests.conftest import Stack, bearer, running, unique
from tests.fake_backend import FakeBackends
from tests.integration.test_forwarding import (
    PROMPT,
    USAGE_COST,
    add_backend,
    add_tenant,
    gateway_app,
    prefer,
)

ALWAYS_QUERY = {"trigger": "random", "budget": 1.0}  # every round queries every other arm


async def balrog_tenant(client: httpx.AsyncClient, arms: list[str]) -> str:
    return await add_tenant(client, arms, policy="balrog", hyperparameters=ALWAYS_QUERY)


def forward_body(prompt: str = PROMPT) -> dict[str, object]:
    return {"prompt": prompt, "forward": True, "request": {"messages": [{"role": "user", "content": prompt}]}}


async def probes_of(app: FastAPI, decision_id: str) -> dict[str, Probe]:
    async with app.state.ctx.sessionmaker() as session:
        rows = await session.scalars(select(Probe).where(Probe.decision_id == decision_id))
        return {p.model: p for p in rows}


async def drain(app: FastAPI) -> None:
    assert app.state.ctx.probes is not None, "no probe was started"
    await app.state.ctx.probes.drain()


async def test_probes_are_called_listed_and_learned(stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(stack)
    async with running(app) as client:
        arms = [await add_backend(client, fake, "ok") for _ in range(3)]
        key = await balrog_tenant(client, arms)
        response = await client.post("/route", json=forward_body(), headers=bearer(key))
        assert response.status_code == 200, response.text
        decided = response.json()
        chosen, decision_id = decided["backend"], decided["decision_id"]
        others = sorted(set(arms) - {chosen})
        assert sorted(decided["query"]) == others
        await drain(app)

        called = sorted(r.body["model"] for r in fake.seen("ok"))  # upstream model = backend name
        assert called == sorted([chosen, *others])
        assert all(r.body["messages"][0]["content"] == PROMPT for r in fake.seen("ok"))

        async with app.state.ctx.sessionmaker() as session:
            decision = await session.get(DecisionRow, decision_id)
            assert decision is not None
            router = await session.get(Router, decision.router_id)
            costs = {
                e.model: e.cost
                for e in await session.scalars(
                    select(FeedbackEvent).where(
                        FeedbackEvent.decision_id == decision_id, FeedbackEvent.kind == "cost"
                    )
                )
            }
        assert costs == {m: USAGE_COST for m in arms}  # the client's call and both probes

        first = await client.get("/feedback/pending", params={"limit": 1}, headers=bearer(key))
        assert first.status_code == 200, first.text
        page = first.json()
        assert len(page["probes"]) == 1 and page["next_cursor"] is not None
        second = await client.get(
            "/feedback/pending", params={"limit": 1, "cursor": page["next_cursor"]}, headers=bearer(key)
        )
        listed = page["probes"] + second.json()["probes"]
        assert second.json()["next_cursor"] is None
        assert sorted(p["model"] for p in listed) == others
        for probe in listed:
            assert probe["decision_id"] == decision_id
            assert probe["prompt_hash"] == decision.prompt_hash
            assert probe["answer"] == "answer from ok"
            assert probe["cost"] == USAGE_COST
        other_tenant = await balrog_tenant(client, arms)
        assert (await client.get("/feedback/pending", headers=bearer(other_tenant))).json()["probes"] == []

        rewards = {others[0]: 0.25, others[1]: 0.75}
        events = [
            {"decision_id": decision_id, "model": m, "kind": "query", "reward": r} for m, r in rewards.items()
        ]
        sent = await client.post("/feedback/batch", json={"events": events}, headers=bearer(key))
        assert sent.status_code == 202, sent.text
        assert (await client.get("/feedback/pending", headers=bearer(key))).json()["probes"] == []
        assert {m: p.status for m, p in (await probes_of(app, decision_id)).items()} == {
            m: "answered" for m in others
        }

        assert router is not None
        runtime = app.state.ctx.states.loaded(router.id)
        assert runtime is not None
        stores = runtime.policy._stores  # kNN histories: the query rewards are stored, costs carry none
        assert {m: len(stores[m]) for m in others} == {m: 1 for m in others}
        assert len(stores[chosen]) == 0  # no reward for the chosen model was posted


async def test_failed_probe_is_marked_and_client_unaffected(stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(stack)
    async with running(app) as client:
        good = await add_backend(client, fake, "ok")
        bad = await add_backend(client, fake, "status-500")
        key = await balrog_tenant(client, [good, bad])
        for arm, reward in ((good, 1.0), (bad, 0.0)):  # teach: good is better (plain /route calls nothing)
            await prefer(client, key, arm, reward=reward)

        response = await client.post("/route", json=forward_body(), headers=bearer(key))
        assert response.status_code == 200, response.text
        decided = response.json()
        assert decided["backend"] == good and decided["query"] == [bad]
        assert decided["response"]["choices"][0]["message"]["content"] == "answer from ok"
        await drain(app)

        probe = (await probes_of(app, decided["decision_id"]))[bad]
        assert probe.status == "failed" and probe.answer is None and probe.cost is None
        assert probe.error is not None and "500" in probe.error
        assert len(fake.seen("status-500")) == 2  # one try and one retry (forward_max_retries=1)
        assert (await client.get("/feedback/pending", headers=bearer(key))).json()["probes"] == []


async def test_streamed_chat_probes_without_stream(stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(stack)
    async with running(app) as client:
        arms = [await add_backend(client, fake, "ok") for _ in range(2)]
        key = await balrog_tenant(client, arms)
        body = {"model": "router", "stream": True, "messages": [{"role": "user", "content": PROMPT}]}
        async with client.stream("POST", "/v1/chat/completions", json=body, headers=bearer(key)) as response:
            assert response.status_code == 200
            text = "".join([chunk async for chunk in response.aiter_text()])
        assert "[DONE]" in text
        chosen = response.headers["x-banditgate-model"]
        (other,) = set(arms) - {chosen}
        assert response.headers["x-banditgate-query"] == other
        await drain(app)
        probe_calls = [r for r in fake.seen("ok") if r.body["model"] == other]
        assert len(probe_calls) == 1 and "stream" not in probe_calls[0].body
        listed = (await client.get("/feedback/pending", headers=bearer(key))).json()["probes"]
        assert [(p["model"], p["answer"]) for p in listed] == [(other, "answer from ok")]


async def test_shutdown_lets_running_probes_finish(stack: Stack, fake: FakeBackends) -> None:
    """A process that stops (a rolling restart) waits up to probe_shutdown_grace_s for its probes: the slow
    probe's answer is stored and listed by the next process; with no grace it is cancelled and lost."""
    for grace, kept in ((5.0, True), (0.0, False)):
        app = gateway_app(stack, probe_shutdown_grace_s=grace)
        async with running(app) as client:
            arms = [await add_backend(client, fake, "delay-0.3", timeout_s=5) for _ in range(2)]
            key = await balrog_tenant(client, arms)
            response = await client.post("/route", json=forward_body(unique("prompt")), headers=bearer(key))
            assert response.status_code == 200, response.text
            decision_id, probed = response.json()["decision_id"], response.json()["query"]
            assert len(probed) == 1 and probed[0] != response.json()["backend"]
        again = gateway_app(stack)
        async with running(again) as client:
            pending = (await client.get("/feedback/pending", headers=bearer(key))).json()["probes"]
            mine = [(p["model"], p["answer"]) for p in pending if p["decision_id"] == decision_id]
            assert mine == ([(probed[0], "answer from delay-0.3")] if kept else [])
