"""/route and /feedback on both stacks: the contract, idempotency, and every bad-input error."""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath

from app.main import create_app
from tests.conftest import Stack, admin_headers, bearer, make_tenancy, running


async def test_route_then_feedback_changes_scores(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        first = await client.post(
            "/route", json={"prompt": "What is the capital of France?"}, headers=bearer(t.key)
        )
        assert first.status_code == 200
        d = first.json()
        assert d["policy"] == "linucb" and d["router"] == "main" and d["mode"] == "single"
        assert d["model"] in t.arms and d["models"] == [d["model"]] and d["query"] == []
        assert set(d["scores"]) == set(t.arms)
        assert set(d["scores"][d["model"]]) >= {"estimate", "bonus", "index"}

        fb = await client.post(
            "/feedback",
            json={"decision_id": d["decision_id"], "reward": 1.0, "cost": 0.002},
            headers=bearer(t.key),
        )
        assert fb.status_code == 202
        body = fb.json()
        assert body["duplicate"] is False and body["model"] == d["model"] and body["kind"] == "bandit"

        again = (
            await client.post(
                "/route", json={"prompt": "What is the capital of France?"}, headers=bearer(t.key)
            )
        ).json()
        before, after = d["scores"][d["model"]], again["scores"][d["model"]]
        assert after["estimate"] > before["estimate"] and after["bonus"] < before["bonus"]


async def test_messages_candidates_and_explicit_router(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client, n_arms=3)
        body = {
            "router": "main",
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}],
            "candidates": [t.arms[2]],
            "metadata": {"user": "u1"},
        }
        d = (await client.post("/route", json=body, headers=bearer(t.key))).json()
        assert d["models"] == [t.arms[2]] and set(d["scores"]) == {t.arms[2]}


async def test_feedback_is_idempotent_and_learned_once(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        d = (await client.post("/route", json={"prompt": "p"}, headers=bearer(t.key))).json()
        body = {"decision_id": d["decision_id"], "reward": 0.5}
        first = (await client.post("/feedback", json=body, headers=bearer(t.key))).json()
        second = (await client.post("/feedback", json=body, headers=bearer(t.key))).json()
        assert second["event_id"] == first["event_id"] and second["duplicate"] is True
        # A different kind for the same model is a different event.
        q = (await client.post("/feedback", json=body | {"kind": "query"}, headers=bearer(t.key))).json()
        assert q["event_id"] != first["event_id"]
        state = (
            await client.get(f"/admin/tenants/{t.tenant}/routers/main/state", headers=admin_headers())
        ).json()
        assert state["events_folded"] == 2

        batch = {
            "events": [
                body,
                {
                    "decision_id": d["decision_id"],
                    "model": t.arms[1 - t.arms.index(d["model"])],
                    "kind": "query",
                    "reward": 0.1,
                },
            ]
        }
        result = (await client.post("/feedback/batch", json=batch, headers=bearer(t.key))).json()["events"]
        assert result[0]["duplicate"] is True and result[1]["duplicate"] is False
        state = (
            await client.get(f"/admin/tenants/{t.tenant}/routers/main/state", headers=admin_headers())
        ).json()
        assert state["events_folded"] == 3


async def test_bad_input_gets_a_clear_4xx(stack: Stack) -> None:
    async with running(create_app(stack.settings(max_prompt_chars=50))) as client:
        t = await make_tenancy(client)
        other = await make_tenancy(client)
        key = bearer(t.key)
        d = (await client.post("/route", json={"prompt": "ok"}, headers=key)).json()
        foreign = (await client.post("/route", json={"prompt": "ok"}, headers=bearer(other.key))).json()

        def fb(**kw: object) -> dict[str, object]:
            return {"decision_id": d["decision_id"], **kw}

        cases: list[tuple[str, str, dict[str, str], int, str]] = [
            ("/route", json.dumps({"router": "nope", "prompt": "x"}), key, 404, "router 'nope' not found"),
            ("/route", json.dumps({"prompt": "x" * 51}), key, 413, "limit is 50"),
            (
                "/route",
                json.dumps({"prompt": "x", "messages": [{"role": "user", "content": "y"}]}),
                key,
                422,
                "exactly one",
            ),
            ("/route", json.dumps({"prompt": "x", "candidates": ["ghost"]}), key, 422, "ghost"),
            ("/route", json.dumps({"prompt": "   "}), key, 422, "empty"),
            ("/route", "{not json", key, 422, "JSON"),
            ("/route", json.dumps({"prompt": "x"}), {}, 401, "missing API key"),
            ("/route", json.dumps({"prompt": "x"}), bearer("bg_wrong"), 401, "invalid"),
            ("/route", json.dumps({"prompt": "x"}), admin_headers(), 403, "tenant API key"),
            ("/feedback", json.dumps(fb(reward=2.0)), key, 422, "outside the router's reward range"),
            (
                "/feedback",
                '{{"decision_id": "{}", "reward": NaN}}'.format(d["decision_id"]),
                key,
                422,
                "finite",
            ),
            (
                "/feedback",
                '{{"decision_id": "{}", "reward": Infinity}}'.format(d["decision_id"]),
                key,
                422,
                "finite",
            ),
            ("/feedback", json.dumps(fb(cost=-1)), key, 422, "greater than or equal"),
            ("/feedback", json.dumps(fb()), key, 422, "at least one"),
            ("/feedback", json.dumps(fb(reward=1, model="ghost")), key, 422, "ghost"),
            ("/feedback", json.dumps(fb(reward=1, kind="weird")), key, 422, "kind"),
            ("/feedback", json.dumps(fb(reward=1, extra_field=1)), key, 422, "extra_field"),
            ("/feedback", json.dumps({"decision_id": "0" * 32, "reward": 1}), key, 404, "not found"),
            (
                "/feedback",
                json.dumps({"decision_id": foreign["decision_id"], "reward": 1}),
                key,
                404,
                "not found",
            ),
            (
                "/feedback/batch",
                json.dumps({"events": [fb(reward=1), fb(reward=5, kind="query")]}),
                key,
                422,
                "event 1",
            ),
        ]
        for path, raw, headers, code, needle in cases:
            response = await client.post(
                path, content=raw, headers={"Content-Type": "application/json", **headers}
            )
            assert response.status_code == code, (path, raw, response.text)
            assert needle in response.text, (needle, response.text)
        # Nothing from the rejected batch was written.
        state = (
            await client.get(f"/admin/tenants/{t.tenant}/routers/main/state", headers=admin_headers())
        ).json()
        assert state["events_folded"] == 0


async def test_health_and_docs(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        ready = (await client.get("/readyz")).json()
        assert ready["status"] == "ready"
        assert ("redis" in ready["checks"]) == (stack.redis_url is not None)
        spec = (await client.get("/openapi.json")).json()
        assert {"/route", "/feedback", "/feedback/batch"} <= set(spec["paths"])
        # /docs needs nothing off the gateway: its script, style and icon are the vendored Swagger UI
        docs = await client.get("/docs")
        assert docs.status_code == 200 and "url: '/openapi.json'" in docs.text
        assets = re.findall(r'(?:src|href)="([^"]+)"', docs.text)
        assert sorted(assets) == [
            "/dashboard/vendor/swagger-ui/favicon-32x32.png",
            "/dashboard/vendor/swagger-ui/swagger-ui-bundle.js",
            "/dashboard/vendor/swagger-ui/swagger-ui.css",
        ]
        assert "//" not in docs.text.replace("://", "")  # no protocol-relative URL either
        types = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}
        for asset in assets:
            loaded = await client.get(asset)
            assert loaded.status_code == 200, asset
            assert loaded.headers["content-type"].startswith(types[PurePosixPath(asset).suffix]), asset
        bundle = (await client.get("/dashboard/vendor/swagger-ui/swagger-ui-bundle.js")).text
        assert '"5.35.0"' in bundle  # the version SOURCE.txt names
        assert (await client.get("/redoc")).status_code == 404  # FastAPI's, from a CDN: off


async def test_no_default_router_is_a_404(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        await client.patch(
            f"/admin/tenants/{t.tenant}/routers/main", json={"is_default": False}, headers=admin_headers()
        )
        r = await client.post("/route", json={"prompt": "x"}, headers=bearer(t.key))
        assert r.status_code == 404 and "no default router" in r.json()["detail"]
