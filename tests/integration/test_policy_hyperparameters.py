"""Typed policy hyperparameters through the admin API, on both stacks: every bad value is a 422 at router
creation that names the field (never a router that answers 500 on each later /route), and the policies
and their schemas are listed at GET /admin/policies."""

from __future__ import annotations

import json

from app.main import create_app
from routers.base import encode_state
from routers.registry import POLICIES, build_policy
from tests.conftest import Stack, admin_headers, bearer, error_text, make_tenancy, running


async def test_bad_hyperparameters_are_422s_at_creation_naming_the_field(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        url, h = f"/admin/tenants/{t.tenant}/routers", admin_headers()
        cases: list[tuple[str, dict[str, object], str]] = [
            ("linucb", {"alpha": [1, 2]}, "hyperparameter alpha: Input should be a valid number"),
            (
                "linucb",
                {"dim": 2147483648},
                "hyperparameter dim: Input should be less than or equal to 16384",
            ),
            ("knn-ucb", {"dim": 2147483648}, "hyperparameter dim"),
            (
                "linucb",
                {"dim": 7},
                "hyperparameter dim: 7 is not the dimension of this gateway's embedder (384)",
            ),
            ("pak-ucb", {"dim": 7, "retry": True}, "hyperparameter dim: 7"),
            (
                "always",
                {"model": "not-an-arm"},
                "hyperparameter model: 'not-an-arm' is not one of the router's arms",
            ),
            ("always", {}, "hyperparameter model: Field required"),
            ("knn-ucb", {"incumbent": "not-an-arm"}, "hyperparameter incumbent: 'not-an-arm'"),
            ("knn-ucb", {"max_loss": 1.5}, "hyperparameter max_loss"),
            ("linucb", {"cost_target": 0}, "hyperparameter cost_target"),
            ("linucb", {"pacing_rate": -1}, "hyperparameter pacing_rate"),
            ("c2mab-v", {"cost_target": -0.5}, "hyperparameter cost_target"),
            ("eps-greedy", {"eps": "0.1"}, "hyperparameter eps"),
            ("linucb", {"gamma": 1}, "unknown hyperparameter 'gamma'; known: alpha, ridge, dim, shared"),
        ]
        for policy, hyper, needle in cases:
            body = {"name": "x", "policy": policy, "arms": t.arms, "hyperparameters": hyper}
            response = await client.post(url, json=body, headers=h)
            assert response.status_code == 422, (policy, hyper, response.text)
            assert needle in error_text(response), (needle, response.text)
            assert response.json()["detail"][0]["loc"] == ["body", "hyperparameters"], response.text
        assert (await client.get(f"{url}/x", headers=h)).status_code == 404  # nothing was stored

        # The embedder's own dimension is accepted, and the router routes.
        body = {"name": "d", "policy": "linucb", "arms": t.arms, "hyperparameters": {"dim": 384}}
        assert (await client.post(url, json=body, headers=h)).status_code == 201
        routed = await client.post("/route", json={"router": "d", "prompt": "hello"}, headers=bearer(t.key))
        assert routed.status_code == 200 and routed.json()["model"] in t.arms

        # A PATCH that sets bad hyperparameters is refused the same way, and the router is unchanged.
        bad = await client.patch(f"{url}/d", json={"hyperparameters": {"dim": 7}}, headers=h)
        assert bad.status_code == 422 and "hyperparameter dim" in error_text(bad)
        assert (await client.get(f"{url}/d", headers=h)).json()["hyperparameters"] == {"dim": 384}


async def test_an_arm_named_by_always_may_leave_later_and_the_policy_falls_back(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        url, h = f"/admin/tenants/{t.tenant}/routers", admin_headers()
        first, second = t.arms
        body = {"name": "fixed", "policy": "always", "arms": t.arms, "hyperparameters": {"model": first}}
        assert (await client.post(url, json=body, headers=h)).status_code == 201
        route = {"router": "fixed", "prompt": "hello"}
        assert (await client.post("/route", json=route, headers=bearer(t.key))).json()["model"] == first
        # Removing the arm it names is allowed: the documented fallback (a random candidate) takes over.
        assert (await client.patch(f"{url}/fixed", json={"arms": [second]}, headers=h)).status_code == 200
        routed = (await client.post("/route", json=route, headers=bearer(t.key))).json()
        assert routed["model"] == second and routed["info"]["fallback"] is True
        # Naming a model that is not an arm is not: neither as new hyperparameters nor with a new policy.
        renamed = await client.patch(f"{url}/fixed", json={"hyperparameters": {"model": first}}, headers=h)
        assert renamed.status_code == 422 and "hyperparameter model" in error_text(renamed)
        switched = {"policy": "knn-ucb", "hyperparameters": {"incumbent": first}}
        refused = await client.patch(f"{url}/fixed", json=switched, headers=h)
        assert refused.status_code == 422 and "hyperparameter incumbent" in error_text(refused)


async def test_a_state_of_another_dimension_is_not_imported(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        policy = build_policy("linucb", t.arms, 0, {"dim": 7})
        state = json.loads(encode_state(policy.state_dict()))
        url = f"/admin/tenants/{t.tenant}/routers/main/state"
        response = await client.post(url, json={"state": state}, headers=admin_headers())
        assert response.status_code == 422 and "its dim is 7" in error_text(response)
        routed = await client.post("/route", json={"prompt": "hello"}, headers=bearer(t.key))
        assert routed.status_code == 200  # the router kept its own state


async def test_admin_policies_lists_every_policy_with_its_schema(stack: Stack) -> None:
    async with running(create_app(stack.settings(embedder="hashing:64"))) as client:
        t = await make_tenancy(client)
        listed = await client.get("/admin/policies", headers=admin_headers())
        assert listed.status_code == 200
        body = listed.json()
        assert body["embedding_dim"] == 64
        by_name = {p["name"]: p for p in body["policies"]}
        assert sorted(by_name) == sorted(POLICIES)
        linucb = by_name["linucb"]
        assert linucb["hyperparameters"]["additionalProperties"] is False
        assert linucb["hyperparameters"]["properties"]["alpha"]["minimum"] == 0
        assert linucb["defaults"]["alpha"] == 1.0 and linucb["defaults"]["max_loss"] is None
        assert by_name["promptwise-rbf"]["defaults"]["kernel"] == "rbf"
        assert "model" not in by_name["always"]["defaults"]  # required: no default
        assert (await client.get("/admin/policies", headers=bearer(t.key))).status_code == 403

        # On a 64-d embedder 384 is the wrong dimension and 64 the right one.
        url, h = f"/admin/tenants/{t.tenant}/routers", admin_headers()
        wrong = {"name": "w", "policy": "knn-ucb", "arms": t.arms, "hyperparameters": {"dim": 384}}
        response = await client.post(url, json=wrong, headers=h)
        assert response.status_code == 422 and "embedder (64)" in error_text(response)
        right = {**wrong, "hyperparameters": {"dim": 64}}
        assert (await client.post(url, json=right, headers=h)).status_code == 201
        routed = await client.post("/route", json={"router": "w", "prompt": "hi"}, headers=bearer(t.key))
        assert routed.status_code == 200
