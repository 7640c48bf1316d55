"""A router created without ``policy`` gets the default (routers/default.py), stored resolved, and routes;
on both stacks."""

from __future__ import annotations

import pytest

from app.main import create_app
from routers import default
from tests.conftest import Stack, admin_headers, bearer, make_tenancy, running


async def test_a_router_created_without_policy_gets_the_default_and_routes(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(stack.settings())
    async with running(app) as client:
        h = admin_headers()
        t = await make_tenancy(client)  # arms m0 ($1 per M input tokens) and m1 ($2): m1 is the dearest
        dear = t.arms[1]
        base = f"/admin/tenants/{t.tenant}/routers"
        body = {"name": "auto", "arms": t.arms, "is_default": True}
        created = await client.post(base, json=body, headers=h)
        assert created.status_code == 201, created.text
        expected = {"policy": default.POLICY, "hyperparameters": dict(default.HYPERPARAMETERS)}
        assert {k: created.json()[k] for k in expected} == expected
        stored = (await client.get(f"{base}/auto", headers=h)).json()
        assert {k: stored[k] for k in expected} == expected

        # a later release changes the default: this router keeps what it was created with
        monkeypatch.setattr(default, "POLICY", "thompson")
        monkeypatch.setattr(default, "HYPERPARAMETERS", {"incumbent": dear, "max_loss": 0.5})
        for i in range(4):
            d = (await client.post("/route", json={"prompt": f"question {i}"}, headers=bearer(t.key))).json()
            assert d["router"] == "auto" and d["policy"] == expected["policy"]
            # the default it was created with holds no floor: no decision is checked against an incumbent
            assert "incumbent" not in d["info"] and d["model"] in t.arms
            feedback = {"decision_id": d["decision_id"], "reward": 1.0}
            assert (await client.post("/feedback", json=feedback, headers=bearer(t.key))).status_code == 202


async def test_default_by_name_and_its_overrides_are_stored_resolved(stack: Stack) -> None:
    app = create_app(stack.settings())
    async with running(app) as client:
        h = admin_headers()
        t = await make_tenancy(client, policy="linucb")
        base = f"/admin/tenants/{t.tenant}/routers"
        given = {"cost_target": 0.002, "max_loss": 0.02}
        body = {"name": "paced", "policy": "default", "hyperparameters": given, "arms": t.arms}
        created = (await client.post(base, json=body, headers=h)).json()
        assert created["policy"] == default.POLICY
        assert created["hyperparameters"] == {**default.HYPERPARAMETERS, **given}
        # PATCH to the default: resolved as well; a null drops the default's key
        patch = {"policy": "default", "hyperparameters": {"max_loss": None}}
        patched = (await client.patch(f"{base}/main", json=patch, headers=h)).json()
        assert patched["policy"] == default.POLICY
        assert patched["hyperparameters"] == {
            k: v for k, v in default.HYPERPARAMETERS.items() if k != "max_loss"
        }
        bad = {"name": "bad", "hyperparameters": {"max_loss": 2}, "arms": t.arms}
        refused = await client.post(base, json=bad, headers=h)
        assert refused.status_code == 422 and "max_loss" in refused.text
