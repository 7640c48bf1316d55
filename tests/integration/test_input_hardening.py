"""Input hardening: every reproduction of a bad input that reached a 500 (or was silently stored), on
the SQLite default and on Postgres + Redis. Each is now a 4xx that names the field or the limit, and
rows stored before input was checked still render in the admin views."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import numpy as np
from fastapi import FastAPI

from app.main import create_app
from app.store.models import DecisionRow, FeedbackEvent, Tenant
from tests.conftest import Stack, admin_headers, bearer, error_text, make_tenancy, running, unique
from tests.fake_backend import FakeBackends
from tests.integration.test_forwarding import add_backend, add_tenant

SURROGATE = "\ud800"


def raw(value: Any) -> str:
    """JSON as a careless client may send it: lone surrogates escaped, NaN and Infinity allowed."""
    return json.dumps(value)


async def post(client: httpx.AsyncClient, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    return await client.post(path, content=raw(body), headers={"Content-Type": "application/json", **headers})


def nested(depth: int) -> dict[str, Any]:
    """``{"a": {"a": ... {"a": 1}}}`` with ``depth`` dicts."""
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def locs(response: httpx.Response) -> list[list[Any]]:
    return [e["loc"] for e in response.json()["detail"]]


def cursor_of(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


async def test_strings_refuse_surrogates_nul_and_overlong_names(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        h = admin_headers()
        for path, body, field, says in [
            ("/admin/tenants", {"name": "a\x00b"}, "name", "pattern"),
            ("/admin/tenants", {"name": "x" * 101}, "name", "at most 100"),
            (
                "/admin/tenants/" + t.tenant + "/keys",
                {"name": "k" + SURROGATE},
                "name",
                "unicode",
            ),  # pydantic: a constrained str
            (
                "/admin/backends",
                {"name": unique("b"), "base_url": "http://x/v1", "upstream_model": "m" * 300},
                "upstream_model",
                "at most 200",
            ),
            ("/admin/backends", {"name": "b" * 201, "base_url": "http://x/v1"}, "name", "at most 200"),
            (
                "/admin/backends",
                {"name": unique("b"), "base_url": "http://x/v1", "api_key": "k\x00"},
                "api_key",
                "NUL",
            ),
        ]:
            response = await post(client, path, body, h)
            assert response.status_code == 422, (path, response.text)
            assert ["body", field] in locs(response) and says in error_text(response), response.text
        # The 300-character upstream model was not stored on either database.
        listed = (await client.get("/admin/backends", headers=h)).json()
        assert all(len(b["upstream_model"] or "") <= 200 for b in listed)
        patched = await client.patch(
            f"/admin/backends/{t.arms[0]}", json={"upstream_model": "m" * 300}, headers=h
        )
        assert patched.status_code == 422 and ["body", "upstream_model"] in locs(patched)

        key = bearer(t.key)
        for body, field in [
            ({"prompt": "hello " + SURROGATE}, ["body", "prompt"]),
            ({"prompt": "hello\x00"}, ["body", "prompt"]),
            (
                {"messages": [{"role": "user", "content": SURROGATE}]},
                ["body", "messages", 0, "content"],
            ),
            ({"prompt": "x", "router": "r" * 101}, ["body", "router"]),
            ({"prompt": "x", "candidates": [SURROGATE]}, ["body", "candidates", 0]),
        ]:
            response = await post(client, "/route", body, key)
            assert response.status_code == 422, response.text
            assert field in locs(response), response.text
        # A NUL in a path or query string is a 422 naming it (Postgres refuses NUL in text).
        response = await client.get("/admin/tenants/a%00b", headers=h)
        assert response.status_code == 422 and ["path", "tenant"] in locs(response)
        response = await client.get("/admin/decisions", params={"tenant": "a\x00"}, headers=h)
        assert response.status_code == 422 and ["query", "tenant"] in locs(response)
        router = f"/admin/tenants/{t.tenant}/routers"
        for method, path, field in [
            ("GET", "/admin/tenants/a%00b/limits", "tenant"),
            ("PUT", "/admin/tenants/a%00b/limits", "tenant"),
            ("POST", "/admin/tenants/a%00b/routers/main/observations", "tenant"),
            ("POST", f"{router}/a%00b/observations", "name"),
            ("POST", f"{router}/a%00b/observations/from-direct-calls", "name"),
        ]:
            response = await client.request(method, path, json={} if method == "PUT" else [], headers=h)
            assert response.status_code == 422 and ["path", field] in locs(response), (path, response.text)
        # A decision id longer than any id is a 422 in every path that takes one (an unknown one a 404).
        long_id = "d" * 65
        step = await client.post(f"/route/{long_id}/next", json={}, headers=key)
        assert step.status_code == 422 and ["path", "decision_id"] in locs(step), step.text
        shown = await client.get(f"/admin/decisions/{long_id}", headers=h)
        assert shown.status_code == 422 and ["path", "decision_id"] in locs(shown), shown.text
        assert (await client.get(f"/admin/decisions/{'d' * 64}", headers=h)).status_code == 404
        response = await client.get(f"{router}/main/stats", params={"bucket": "1h\x00"}, headers=h)
        assert response.status_code == 422 and ["query", "bucket"] in locs(response), response.text
        assert "NUL" in error_text(response)


async def test_metadata_is_bounded_and_checked_before_storage(stack: Stack) -> None:
    settings = stack.settings(metadata_max_bytes=1000, json_max_depth=8)
    async with running(create_app(settings)) as client:
        t = await make_tenancy(client)
        key = bearer(t.key)
        decided = (await post(client, "/route", {"prompt": "q"}, key)).json()
        fb = {"decision_id": decided["decision_id"], "reward": 1.0}
        for path, body, says in [
            ("/route", {"prompt": "q", "metadata": {"who": SURROGATE}}, "surrogate"),
            ("/route", {"prompt": "q", "metadata": {SURROGATE: 1}}, "surrogate"),
            ("/route", {"prompt": "q", "metadata": {"x": float("nan")}}, "finite"),
            ("/route", {"prompt": "q", "metadata": {"x": [float("inf")]}}, "finite"),
            ("/route", {"prompt": "q", "metadata": nested(300)}, "BANDITGATE_JSON_MAX_DEPTH"),
            ("/feedback", {**fb, "metadata": nested(300)}, "BANDITGATE_JSON_MAX_DEPTH"),
            ("/feedback", {**fb, "metadata": {"x": "\x00"}}, "NUL"),
        ]:
            response = await post(client, path, body, key)
            assert response.status_code == 422, (path, response.text)
            assert ["body", "metadata"] in locs(response) and says in error_text(response), response.text
        # Over a size limit is a 413, like every size refusal (depth and non-finite numbers stay 422s).
        big = {"big": "x" * 2000}
        for path, body in [
            ("/route", {"prompt": "q", "metadata": big}),
            ("/feedback", {**fb, "metadata": big}),
        ]:
            response = await post(client, path, body, key)
            assert response.status_code == 413, (path, response.text)
            assert (
                error_text(response)
                == "2010 bytes of JSON; the limit is 1000 (BANDITGATE_METADATA_MAX_BYTES)"
            )
        batch = await post(client, "/feedback/batch", {"events": [fb, {**fb, "metadata": nested(9)}]}, key)
        assert batch.status_code == 422 and ["body", "events", 1, "metadata"] in locs(batch)
        step = await post(client, f"/route/{decided['decision_id']}/next", {"metadata": nested(9)}, key)
        assert step.status_code == 422 and ["body", "metadata"] in locs(step)
        # Within the limits: stored and shown as sent.
        fine = {"who": "ok", "deep": nested(7), "n": 1.5}
        routed = await post(client, "/route", {"prompt": "q", "metadata": fine}, key)
        assert routed.status_code == 200, routed.text
        shown = await client.get(f"/admin/decisions/{routed.json()['decision_id']}", headers=admin_headers())
        assert shown.json()["metadata"] == fine
        # Nothing refused reached the log: the tenant has the two accepted decisions only.
        page = await client.get("/admin/decisions", params={"tenant": t.tenant}, headers=admin_headers())
        assert len(page.json()["items"]) == 2


async def test_forwarded_bodies_refuse_non_finite_numbers(stack: Stack, fake: FakeBackends) -> None:
    app = create_app(stack.settings(forward_max_retries=0, max_body_bytes=5000))
    async with running(app) as client:
        chat = await add_backend(client, fake, "ok")
        key = bearer(await add_tenant(client, [chat]))
        messages = [{"role": "user", "content": "hi"}]
        body = {"model": "router", "messages": messages, "temperature": float("nan")}
        response = await post(client, "/v1/chat/completions", body, key)
        error = response.json()["error"]
        assert response.status_code == 400 and error["type"] == "invalid_request_error", response.text
        assert "finite" in error["message"] and "temperature" in error["message"]
        large = {"model": "router", "messages": [{"role": "user", "content": "x" * 6000}]}
        response = await post(client, "/v1/chat/completions", large, key)
        assert response.status_code == 413, response.text
        assert response.json()["error"]["message"] == "the request body is larger than 5000 bytes"
        forward = {"prompt": "hi", "forward": True, "request": {"messages": messages, "top_p": float("inf")}}
        response = await post(client, "/route", forward, key)
        assert response.status_code == 422 and ["body", "request"] in locs(response), response.text
        assert "finite" in error_text(response)
        assert not [r for r in fake.requests if r.path.endswith("/chat/completions")]  # none forwarded


async def test_router_kind_must_match_the_endpoint(stack: Stack, fake: FakeBackends) -> None:
    async with running(create_app(stack.settings(forward_max_retries=0))) as client:
        chat = await add_backend(client, fake, "ok")
        key = bearer(await add_tenant(client, [chat]))
        response = await post(client, "/v1/images/generations", {"model": "router", "prompt": "a cat"}, key)
        assert response.status_code == 400, response.text
        message = response.json()["error"]["message"]
        assert "routes chat backends" in message and "cannot serve image generations" in message
        direct = await post(client, "/v1/images/generations", {"model": chat, "prompt": "a cat"}, key)
        assert direct.status_code == 400 and f"backend '{chat}'" in direct.json()["error"]["message"]
        forward = {"prompt": "a cat", "forward": True, "request": {"prompt": "a cat"}}
        response = await post(client, "/route", forward, key)
        assert response.status_code == 422 and "cannot serve image generations" in error_text(response)
        painter = await add_backend(client, fake, "ok", kind="image", usd_per_call=0.04)
        image_key = bearer(await add_tenant(client, [painter]))
        body = {"model": "router", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        streamed = await post(client, "/v1/chat/completions", body, image_key)
        assert streamed.status_code == 400 and "cannot serve chat completions" in streamed.text
        assert not fake.requests  # nothing was called
        logged = await client.get("/admin/decisions", headers=admin_headers())
        assert all(d["model"] not in (chat, painter) for d in logged.json()["items"])  # nothing decided


async def test_integers_dates_and_cursors_are_range_checked(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        h = admin_headers()
        stats = f"/admin/tenants/{t.tenant}/routers/main/stats"
        for path, params, headers, field in [
            ("/feedback/pending", {"cursor": 2**63}, bearer(t.key), ["query", "cursor"]),
            ("/admin/feedback", {"cursor": cursor_of({"id": 2**63})}, h, ["cursor"]),
            ("/admin/feedback", {"cursor": cursor_of({"id": True})}, h, ["cursor"]),
            ("/admin/feedback", {"cursor": cursor_of({"id": -1})}, h, ["cursor"]),
            (
                "/admin/decisions",
                {"cursor": cursor_of({"t": "0001-01-01T00:00:00+05:00", "id": "a"})},
                h,
                ["cursor"],
            ),
            ("/admin/decisions", {"cursor": cursor_of({"t": True, "id": 1})}, h, ["cursor"]),
            ("/admin/decisions", {"cursor": base64.urlsafe_b64encode(b"[" * 5000).decode()}, h, ["cursor"]),
            ("/admin/decisions", {"since": "0001-01-01"}, h, ["since"]),
            ("/admin/feedback", {"until": "0001-01-01T00:00:00+01:00"}, h, ["until"]),
            ("/admin/decisions", {"limit": 2**63}, h, ["query", "limit"]),
            (stats, {"since": "0001-01-01"}, h, ["since"]),
            (stats, {"bucket": "1000d"}, h, ["bucket"]),
            (stats, {"bucket": "9" * 30}, h, ["bucket"]),
            (f"/admin/tenants/{t.tenant}/keys/{2**63}", {}, h, ["path", "key_id"]),
        ]:
            response = await client.get(path, params=params, headers=headers)
            if path.endswith(str(2**63)):
                response = await client.delete(path, headers=headers)
            assert response.status_code == 422, (path, params, response.text)
            assert field in locs(response), (path, params, response.text)


async def test_the_422_never_fails_on_what_it_echoes(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        key = bearer(t.key)
        for body in [
            {"prompt": "x", "seed": SURROGATE},
            {"prompt": "x", "seed": float("nan")},
            {"prompt": "x", "forward": {"v": [float("inf"), SURROGATE]}},
            {"prompt": "x", "seed": {"deep": nested(600)}},
            {"prompt": "x" * 10, "seed": "y" * 100_000},
        ]:
            response = await post(client, "/route", body, key)
            assert response.status_code == 422, response.text
            detail = response.json()["detail"]
            assert isinstance(detail, list) and all({"type", "loc", "msg"} <= set(e) for e in detail)
            assert len(response.content) < 5000  # a large input is echoed cut short
        echoed = (await post(client, "/route", {"prompt": "x", "seed": "a" + SURROGATE}, key)).json()
        assert echoed["detail"][0]["input"] == "a\ufffd"
        nan = (await post(client, "/route", {"prompt": "x", "seed": float("nan")}, key)).json()
        assert nan["detail"][0]["input"] is None
        # /v1 keeps OpenAI's shape for the same mistakes.
        v1 = await post(client, "/v1/chat/completions", {"model": "router", "messages": SURROGATE}, key)
        assert v1.status_code == 400 and set(v1.json()["error"]) == {"message", "type", "param", "code"}
        # Outside /v1 a 422 the gateway raised itself has the same shape as pydantic's.
        gateway = await post(client, "/route", {"prompt": "   "}, key)
        assert gateway.status_code == 422 and gateway.json()["detail"][0]["msg"] == "the prompt is empty"


def has_zone(moment: str) -> bool:
    return moment.endswith("Z") or moment[-6] in "+-"


async def test_timestamps_carry_a_zone(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        h = admin_headers()
        decided = (await post(client, "/route", {"prompt": "q"}, bearer(t.key))).json()
        fb = {"decision_id": decided["decision_id"], "reward": 1.0}
        assert (await post(client, "/feedback", fb, bearer(t.key))).status_code == 202
        moments = [
            (await client.get(f"/admin/tenants/{t.tenant}", headers=h)).json()["created_at"],
            (await client.get(f"/admin/tenants/{t.tenant}/keys", headers=h)).json()[0]["created_at"],
            (await client.get(f"/admin/backends/{t.arms[0]}", headers=h)).json()["updated_at"],
            (await client.get(f"/admin/tenants/{t.tenant}/routers/main", headers=h)).json()["created_at"],
            (await client.get("/admin/decisions", params={"tenant": t.tenant}, headers=h)).json()["items"][0][
                "created_at"
            ],
            (await client.get(f"/admin/decisions/{decided['decision_id']}", headers=h)).json()["feedback"][0][
                "created_at"
            ],
            (await client.get("/admin/feedback", params={"tenant": t.tenant}, headers=h)).json()["items"][0][
                "created_at"
            ],
        ]
        stats = (await client.get(f"/admin/tenants/{t.tenant}/routers/main/stats", headers=h)).json()
        moments += [stats["since"], stats["until"], stats["buckets"][0]["start"]]
        assert all(has_zone(m) for m in moments), moments


async def store_legacy_rows(app: FastAPI, tenant: str) -> tuple[str, int]:
    """A decision and a feedback event as a tenant could store them before input was checked: a lone
    surrogate in the decision's metadata, feedback metadata nested 300 levels deep."""
    async with app.state.ctx.sessionmaker() as session:
        from sqlalchemy import select

        owner = await session.scalar(select(Tenant).where(Tenant.name == tenant))
        assert owner is not None
        decision = DecisionRow(
            id=unique("legacy").replace("-", "")[:32],
            tenant_id=owner.id,
            router_id=None,
            router_version=0,
            policy="direct",
            models=["m"],
            query=[],
            scores={},
            info={},
            embedding=np.zeros(2, np.float32).tobytes(),
            prompt_hash="0" * 64,
            prompt_chars=1,
            request_metadata={"who": "x" + SURROGATE, SURROGATE: 1},
        )
        session.add(decision)
        await session.flush()
        event = FeedbackEvent(
            decision_id=decision.id,
            tenant_id=owner.id,
            router_id=None,
            model="m",
            kind="bandit",
            reward=1.0,
            payload={"metadata": nested(300)},
        )
        session.add(event)
        await session.commit()
        return decision.id, event.id


async def test_rows_stored_before_the_checks_still_render(stack: Stack) -> None:
    app = create_app(stack.settings(json_max_depth=32))
    async with running(app) as client:
        t = await make_tenancy(client)
        decision_id, event_id = await store_legacy_rows(app, t.tenant)
        h = admin_headers()
        page = await client.get("/admin/decisions", params={"tenant": t.tenant}, headers=h)
        assert page.status_code == 200, page.text
        shown = next(d for d in page.json()["items"] if d["id"] == decision_id)
        assert shown["metadata"] == {"who": "x\ufffd", "\ufffd": 1}
        events = await client.get("/admin/feedback", params={"tenant": t.tenant}, headers=h)
        assert events.status_code == 200, events.text
        payload = next(e for e in events.json()["items"] if e["id"] == event_id)["payload"]
        depth = 0
        while isinstance(payload, dict):
            payload, depth = next(iter(payload.values())), depth + 1
        assert payload == "…" and depth == 32  # cut at the configured depth, not a 500
        detail = await client.get(f"/admin/decisions/{decision_id}", headers=h)
        assert detail.status_code == 200 and detail.json()["feedback"][0]["id"] == event_id
        # The dashboard's own query: the newest decisions of every tenant.
        assert (await client.get("/admin/decisions", params={"limit": 50}, headers=h)).status_code == 200


async def test_warm_start_uploads_refuse_deep_json_and_out_of_range_pages(stack: Stack) -> None:
    async with running(create_app(stack.settings(max_offline_batch=50))) as client:
        t = await make_tenancy(client)
        h = admin_headers()
        router = f"/admin/tenants/{t.tenant}/routers/{t.router}/observations"
        deep = "[" * 100_000 + "]" * 100_000  # deeper than Python's JSON parser can recurse
        for content_type in ("application/json", "application/x-ndjson"):
            response = await client.post(router, content=deep, headers=h | {"Content-Type": content_type})
            assert response.status_code == 422, response.text
            assert error_text(response) == "row 0: JSON nested too deep to parse"
        direct = f"{router}/from-direct-calls"
        for params, field, says in [
            ({"after": 2**63, "limit": 10}, "after", "less than or equal to 9223372036854775807"),
            ({"after": -1, "limit": 10}, "after", "greater than or equal to 0"),
            ({"limit": 51}, "limit", "less than or equal to 50 (BANDITGATE_MAX_OFFLINE_BATCH)"),
        ]:
            response = await client.post(direct, params=params, headers=h)
            assert response.status_code == 422 and ["query", field] in locs(response), response.text
            assert says in error_text(response)
        page = await client.post(direct, params={"after": 2**63 - 1, "limit": 50}, headers=h)
        assert page.json() == {"scanned": 0, "new": 0, "duplicates": 0, "skipped": 0, "next_after": None}
