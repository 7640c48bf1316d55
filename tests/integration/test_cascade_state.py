"""PromptWise's per-decision state through the gateway: interleaved client-driven cascades each keep
their own step (keyed by the decision id), and a fresh process rebuilds it from the stored events."""

from __future__ import annotations

import httpx

from tests.conftest import Stack, bearer, running
from tests.fake_backend import FakeBackends
from tests.integration.test_forwarding import add_backend, add_tenant, gateway_app

PROMPTS = ("What is the capital of Australia?", "Factor x^2 - 5x + 6.")


async def _router(client: httpx.AsyncClient, fake: FakeBackends) -> tuple[str, list[str]]:
    arms = [await add_backend(client, fake, "ok") for _ in range(3)]
    key = await add_tenant(client, arms, policy="promptwise", hyperparameters={"cost_weight": 0.0})
    return key, arms


async def _route(client: httpx.AsyncClient, key: str, prompt: str) -> dict:
    response = await client.post("/route", json={"prompt": prompt}, headers=bearer(key))
    assert response.status_code == 200, response.text
    return response.json()


async def _next(client: httpx.AsyncClient, key: str, decision: dict, body: dict) -> dict:
    url = f"/route/{decision['decision_id']}/next"
    response = await client.post(url, json=body, headers=bearer(key))
    assert response.status_code == 200, response.text
    return response.json()


async def test_interleaved_cascades_behave_as_if_sequential(sqlite_stack: Stack, fake: FakeBackends) -> None:
    """Sequentially, an exploration step calls one model and stops. Interleaved (A routes, B routes, then
    both report a failure and ask for the next model), each still stops after its one call; and a new
    process, which has only the stored events, stops B's cascade too."""
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        key, _ = await _router(client, fake)
        sequential = await _route(client, key, PROMPTS[0])
        assert sequential["info"]["phase"] == "explore"
        alone = await _next(client, key, sequential, {"reward": 0.0})
        assert alone["stop"] is True and alone["tried"] == [sequential["model"]]

        key, _ = await _router(client, fake)
        a = await _route(client, key, PROMPTS[0])
        b = await _route(client, key, PROMPTS[1])
        while b["model"] == a["model"]:  # two concurrent pulls of one model: see routers/logistic_ucb.py
            b = await _route(client, key, PROMPTS[1])  # (an abandoned decision leaves no state)
        assert a["info"]["phase"] == b["info"]["phase"] == "explore"
        a_next = await _next(client, key, a, {"reward": 0.0})
        assert a_next["stop"] is True and a_next["tried"] == [a["model"]]
        feedback = {"decision_id": b["decision_id"], "reward": 0.0, "kind": "cascade-step"}
        assert (await client.post("/feedback", json=feedback, headers=bearer(key))).status_code == 202

    replica = gateway_app(sqlite_stack)  # a fresh process: it folds the stored events on first use
    async with running(replica) as client:
        b_next = await _next(client, key, b, {})
        assert b_next["stop"] is True and b_next["tried"] == [b["model"]]
        # both pulls were folded: the next exploration step calls the model neither of them called
        third = await _route(client, key, PROMPTS[0])
        assert third["info"]["phase"] == "explore" and third["model"] not in {a["model"], b["model"]}
