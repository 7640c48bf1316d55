"""Mixture policies learn from the answer itself: /feedback takes output_text, the gateway embeds it."""

from __future__ import annotations

from app.main import create_app
from tests.conftest import Stack, bearer, make_tenancy, running

ARM_TEXTS = [
    ["the mitochondria produces energy for the cell", "photosynthesis turns light into sugar"],
    ["the treaty ended the war in europe", "the empire collapsed after the invasion"],
]


async def test_output_text_feeds_a_mixture_router(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client, policy="mixture-greedy", hyperparameters={"init_pulls": 2})
        key = bearer(t.key)
        counts = {arm: 0 for arm in t.arms}
        for i in range(12):
            d = (await client.post("/route", json={"prompt": f"write something {i}"}, headers=key)).json()
            assert d["mode"] == "mixture" and set(d["info"]["weights"]) == set(t.arms)
            text = ARM_TEXTS[t.arms.index(d["model"])][i % 2]
            r = await client.post(
                "/feedback", json={"decision_id": d["decision_id"], "output_text": text}, headers=key
            )
            assert r.status_code == 202, r.text
            counts[d["model"]] += 1
        last = (await client.post("/route", json={"prompt": "one more"}, headers=key)).json()
        # Every answer was folded: the policy's per-arm sample counts equal what we sent.
        assert {arm: last["scores"][arm]["n"] for arm in t.arms} == counts
        both = await client.post(
            "/feedback",
            json={"decision_id": last["decision_id"], "output_text": "x", "output_embedding": [1.0]},
            headers=key,
        )
        assert both.status_code == 422 and "not both" in both.text
