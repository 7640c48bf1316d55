"""Routing really learns through the API, and the learned state survives a restart."""

from __future__ import annotations

import numpy as np

from app.main import create_app
from tests.conftest import Stack, admin_headers, bearer, make_tenancy, running
from tests.mmlu_prompts import mmlu_questions

MATH = ["elementary_mathematics", "high_school_mathematics"]
HUMANITIES = ["prehistory", "world_religions"]


async def test_linucb_learns_topics_through_the_api(pg_stack: Stack) -> None:
    """Arm A is right for maths questions, arm B for history/religion ones. After 400 feedback events,
    the router picks the right arm on at least 80% of 200 questions it has never seen."""
    math_q, hum_q = mmlu_questions(MATH, 300), mmlu_questions(HUMANITIES, 300)
    rng = np.random.default_rng(0)
    train = [(q, 0) for q in math_q[:200]] + [(q, 1) for q in hum_q[:200]]
    rng.shuffle(train)  # type: ignore[arg-type]
    unseen = [(q, 0) for q in math_q[200:]] + [(q, 1) for q in hum_q[200:]]

    async with running(create_app(pg_stack.settings(embedder="minilm"))) as client:
        t = await make_tenancy(client, hyperparameters={"alpha": 0.5})
        key = bearer(t.key)
        for prompt, topic in train:
            d = (await client.post("/route", json={"prompt": prompt}, headers=key)).json()
            reward = 1.0 if d["model"] == t.arms[topic] else 0.0
            r = await client.post(
                "/feedback", json={"decision_id": d["decision_id"], "reward": reward}, headers=key
            )
            assert r.status_code == 202
        state = (
            await client.get(f"/admin/tenants/{t.tenant}/routers/main/state", headers=admin_headers())
        ).json()
        assert state["events_folded"] == 400
        right = 0
        for prompt, topic in unseen:
            d = (await client.post("/route", json={"prompt": prompt}, headers=key)).json()
            right += d["model"] == t.arms[topic]
        assert right / len(unseen) >= 0.8, right


async def test_restart_rebuilds_the_same_policy(stack: Stack) -> None:
    """Fold feedback in one app instance; a second instance on the same database, started afterwards,
    makes the same selections with the same scores for the same contexts."""
    probes = [f"probe question number {i} about topic {i % 3}" for i in range(20)]
    async with running(create_app(stack.settings())) as first:
        t = await make_tenancy(first, n_arms=3)
        key = bearer(t.key)
        for i in range(60):
            d = (
                await first.post("/route", json={"prompt": f"training prompt {i} topic {i % 3}"}, headers=key)
            ).json()
            reward = 1.0 if t.arms.index(d["model"]) == i % 3 else 0.0
            await first.post(
                "/feedback", json={"decision_id": d["decision_id"], "reward": reward}, headers=key
            )
        before = [(await first.post("/route", json={"prompt": p}, headers=key)).json() for p in probes]
    async with running(create_app(stack.settings())) as second:
        after = [
            (await second.post("/route", json={"prompt": p}, headers=bearer(t.key))).json() for p in probes
        ]
        state = (
            await second.get(f"/admin/tenants/{t.tenant}/routers/main/state", headers=admin_headers())
        ).json()
    assert state["events_folded"] == 60
    assert [a["scores"] for a in after] == [b["scores"] for b in before]
    assert sum(b["scores"][b["model"]]["n"] for b in before) > 0
