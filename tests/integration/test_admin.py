"""The admin API on both stacks: CRUD, validation through the registry, auth, state export/import/reset."""

from __future__ import annotations

from app.main import create_app
from tests.conftest import Stack, admin_headers, bearer, error_text, make_tenancy, running, unique


async def test_tenant_key_backend_router_crud(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        h = admin_headers()
        tenant = unique("crud")
        assert (await client.post("/admin/tenants", json={"name": tenant}, headers=h)).status_code == 201
        assert (await client.post("/admin/tenants", json={"name": tenant}, headers=h)).status_code == 409
        assert tenant in [t["name"] for t in (await client.get("/admin/tenants", headers=h)).json()]

        issued = (await client.post(f"/admin/tenants/{tenant}/keys", json={"name": "ci"}, headers=h)).json()
        assert issued["key"].startswith("bg_") and issued["prefix"] == issued["key"][:10]
        listed = (await client.get(f"/admin/tenants/{tenant}/keys", headers=h)).json()
        assert [k["id"] for k in listed] == [issued["id"]] and "key" not in listed[0]

        backend = {
            "name": unique("openai/gpt"),  # names may hold "/" (Hugging Face ids): GET/PATCH/DELETE by it
            "base_url": "http://127.0.0.1:9/v1",
            "usd_per_mtok_in": 2.5,
            "api_key": "sk-secret",
        }
        created = (await client.post("/admin/backends", json=backend, headers=h)).json()
        assert created["has_api_key"] is True and "sk-secret" not in str(created)
        patched = await client.patch(
            f"/admin/backends/{backend['name']}", json={"usd_per_call": 0.01}, headers=h
        )
        assert patched.json()["usd_per_call"] == 0.01

        router = {
            "name": "r",
            "policy": "linucb",
            "arms": [backend["name"]],
            "hyperparameters": {"alpha": 0.3},
        }
        made = await client.post(f"/admin/tenants/{tenant}/routers", json=router, headers=h)
        assert made.status_code == 201 and made.json()["version"] == 1
        upd = await client.patch(f"/admin/tenants/{tenant}/routers/r", json={"is_default": True}, headers=h)
        assert upd.json()["is_default"] is True and upd.json()["version"] == 2
        # A backend in use cannot be deleted.
        assert (await client.delete(f"/admin/backends/{backend['name']}", headers=h)).status_code == 409
        assert (await client.delete(f"/admin/tenants/{tenant}/routers/r", headers=h)).status_code == 204
        assert (await client.get(f"/admin/tenants/{tenant}/routers/r", headers=h)).status_code == 404
        assert (await client.delete(f"/admin/backends/{backend['name']}", headers=h)).status_code == 204

        revoked = await client.delete(f"/admin/tenants/{tenant}/keys/{issued['id']}", headers=h)
        assert revoked.json()["revoked_at"] is not None
        assert (
            await client.post("/route", json={"prompt": "x"}, headers=bearer(issued["key"]))
        ).status_code == 401
        assert (await client.delete(f"/admin/tenants/{tenant}", headers=h)).status_code == 204
        assert (await client.get(f"/admin/tenants/{tenant}", headers=h)).status_code == 404


async def test_router_configuration_is_validated(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        url, h = f"/admin/tenants/{t.tenant}/routers", admin_headers()
        cases = [
            ({"name": "x", "policy": "no-such-policy", "arms": t.arms}, "unknown policy"),
            ({"name": "x", "policy": "linucb", "arms": t.arms, "hyperparameters": {"alpha": -2}}, "alpha"),
            ({"name": "x", "policy": "linucb", "arms": t.arms, "hyperparameters": {"gamma": 1}}, "gamma"),
            ({"name": "x", "policy": "linucb", "arms": ["ghost"]}, "ghost"),
            ({"name": "x", "policy": "linucb", "arms": t.arms, "reward_range": [1, 0]}, "reward_range"),
            ({"name": "x", "policy": "linucb", "arms": t.arms, "embed_text": {"strategy": "tail"}}, "tail"),
            (
                {"name": "x", "policy": "linucb", "arms": t.arms, "embed_text": {"max_tokens": 4}},
                "max_tokens",
            ),
            ({"name": "x", "policy": "linucb", "arms": t.arms, "embed_text": {"k": 1}}, "k"),
        ]
        for body, needle in cases:
            response = await client.post(url, json=body, headers=h)
            assert response.status_code == 422, body
            assert needle in response.text
        assert (
            await client.post(url, json={"name": "main", "policy": "linucb", "arms": t.arms}, headers=h)
        ).status_code == 409
        assert (await client.post("/admin/tenants/nobody/routers", json={}, headers=h)).status_code in (
            404,
            422,
        )
        assert (await client.get("/admin/tenants/nobody/routers/main", headers=h)).status_code == 404
        assert (await client.get("/admin/backends/ghost", headers=h)).status_code == 404


async def test_router_embed_text_is_stored_and_changed(stack: Stack) -> None:
    """The embed-text rule is a router setting of its own (not a hyperparameter): default when not given,
    stored, changed by PATCH ({} restores the default), rejected with a 422 when bad."""
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        url, h = f"/admin/tenants/{t.tenant}/routers", admin_headers()
        default = {"strategy": "last-user-first", "max_tokens": None}
        assert (await client.get(f"{url}/main", headers=h)).json()["embed_text"] == default
        body = {
            "name": "chunks",
            "policy": "linucb",
            "arms": t.arms,
            "embed_text": {"strategy": "chunk-mean"},
        }
        made = (await client.post(url, json=body, headers=h)).json()
        assert made["embed_text"] == {"strategy": "chunk-mean", "max_tokens": None}
        assert made["hyperparameters"] == {}
        patch = {"embed_text": {"strategy": "head", "max_tokens": 64}}
        assert (await client.patch(f"{url}/chunks", json=patch, headers=h)).status_code == 200
        assert (await client.get(f"{url}/chunks", headers=h)).json()["embed_text"] == patch["embed_text"]
        bad = await client.patch(f"{url}/chunks", json={"embed_text": {"max_tokens": 10**6}}, headers=h)
        assert bad.status_code == 422
        restored = await client.patch(f"{url}/chunks", json={"embed_text": {}}, headers=h)
        assert restored.json()["embed_text"] == default


async def test_admin_auth(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        assert (await client.get("/admin/tenants")).status_code == 401
        assert (await client.get("/admin/tenants", headers=bearer("wrong"))).status_code == 401
        forbidden = await client.get("/admin/tenants", headers=bearer(t.key))
        assert forbidden.status_code == 403 and "admin key" in forbidden.json()["detail"]
    async with running(create_app(stack.settings(admin_key=None))) as client:
        disabled = await client.get("/admin/tenants", headers=admin_headers())
        assert disabled.status_code == 403 and "BANDITGATE_ADMIN_KEY" in disabled.json()["detail"]


async def test_state_export_import_reset(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        base = f"/admin/tenants/{t.tenant}/routers/{t.router}/state"
        for i in range(6):
            d = (await client.post("/route", json={"prompt": f"question {i}"}, headers=bearer(t.key))).json()
            r = await client.post(
                "/feedback", json={"decision_id": d["decision_id"], "reward": 1.0}, headers=bearer(t.key)
            )
            assert r.status_code == 202
        exported = (await client.get(base, headers=admin_headers())).json()
        assert exported["events_folded"] == 6 and exported["policy"] == "linucb"
        assert sum(exported["state"]["learned"]["n"].values()) == 6

        # Import into a second router: it routes exactly like the first.
        t2 = await make_tenancy(client)
        patch = {"arms": t.arms}
        assert (
            await client.patch(
                f"/admin/tenants/{t2.tenant}/routers/main", json=patch, headers=admin_headers()
            )
        ).status_code == 200
        imported = await client.post(  # the export as it is: its informational fields are ignored
            f"/admin/tenants/{t2.tenant}/routers/main/state", json=exported, headers=admin_headers()
        )
        assert imported.status_code == 200, imported.text
        assert imported.json()["name"] == "main" and imported.json()["tenant"] == t2.tenant
        typo = await client.post(base, json={**exported, "stat": {}}, headers=admin_headers())
        assert typo.status_code == 422 and "stat" in typo.text
        probe = {"prompt": "question 3"}
        a = (await client.post("/route", json=probe, headers=bearer(t.key))).json()
        b = (await client.post("/route", json=probe, headers=bearer(t2.key))).json()
        assert a["scores"] == b["scores"]

        bad = await client.post(base, json={"state": {"policy": "linucb"}}, headers=admin_headers())
        assert bad.status_code == 422 and "cannot be restored" in error_text(bad)

        reset = await client.delete(base, headers=admin_headers())
        assert reset.status_code == 200
        after = (await client.get(base, headers=admin_headers())).json()
        assert after["events_folded"] == 0 and sum(after["state"]["learned"]["n"].values()) == 0
