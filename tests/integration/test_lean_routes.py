"""The lean routes (app/api/lean.py: chat completions, image generations, /route, /feedback and
/feedback/batch) answer every request exactly as FastAPI's own handling of the same operations does: the same statuses, error bodies and headers for bad keys, bad JSON, bad bodies and
failed backends, the same answers for good requests, and the same OpenAPI document."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, HTTPException, status

from app.api.deps import current_tenant
from app.api.lean import LeanEndpoint, Unbindable, lean_routes
from app.main import create_app
from app.store.models import Tenant
from tests.conftest import Stack, admin_headers, bearer, running, unique
from tests.fake_backend import FakeBackends

HEX_ID = re.compile(r"\b[0-9a-f]{32}\b")
COMPARED_HEADERS = ("content-type", "www-authenticate", "x-banditgate-model", "retry-after")


def normalized(response: httpx.Response) -> tuple[int, str, dict[str, str | None]]:
    """Status, body with decision ids, event ids and the backend's clock (``created``, which may tick
    between the two apps' calls) blanked, and the headers that must agree."""
    body = HEX_ID.sub("<id>", response.text)
    body = re.sub(r'"event_id":\s*\d+', '"event_id":<n>', body)
    body = re.sub(r'"created":\s*\d+', '"created":<t>', body)
    body = re.sub(r"chatcmpl-[0-9a-f]+", "chatcmpl-<x>", body)
    return response.status_code, body, {h: response.headers.get(h) for h in COMPARED_HEADERS}


async def provision(client: httpx.AsyncClient, fake: FakeBackends) -> tuple[str, str]:
    """A tenant whose default ``always`` router calls the fake ``ok`` backend; (its key, the backend)."""
    tenant, backend = unique("t"), unique("ok")
    h = admin_headers()
    assert (await client.post("/admin/tenants", json={"name": tenant}, headers=h)).status_code == 201
    spec = {"name": backend, "base_url": fake.url("ok"), "usd_per_mtok_in": 1.0}
    assert (await client.post("/admin/backends", json=spec, headers=h)).status_code == 201
    key = (await client.post(f"/admin/tenants/{tenant}/keys", json={}, headers=h)).json()["key"]
    router = {
        "name": "main",
        "policy": "always",
        "hyperparameters": {"model": backend},
        "arms": [backend],
        "is_default": True,
    }
    assert (await client.post(f"/admin/tenants/{tenant}/routers", json=router, headers=h)).status_code == 201
    return key, backend


CHAT = {"model": "router", "messages": [{"role": "user", "content": "hello"}]}


def cases(key: str, decision_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, path, httpx keyword arguments) of the requests both apps answer."""
    good, json_type = bearer(key), {"content-type": "application/json"}
    out: list[tuple[str, str, dict[str, Any]]] = []
    for path, body in (
        ("/v1/chat/completions", CHAT),
        ("/v1/images/generations", {"model": "router", "prompt": "a cat"}),
        ("/route", {"prompt": "hello"}),
        ("/feedback", {"decision_id": decision_id, "reward": 1.0}),
        ("/feedback/batch", {"events": [{"decision_id": decision_id, "reward": 1.0}]}),
    ):
        out += [
            ("no key", path, {"json": body}),
            ("not a bearer key", path, {"json": body, "headers": {"Authorization": f"Basic {key}"}}),
            ("a wrong key", path, {"json": body, "headers": bearer("bg-not-a-key")}),
            ("bad JSON", path, {"content": b'{"a": ', "headers": {**good, **json_type}}),
            ("bad JSON, no key", path, {"content": b"{nope", "headers": json_type}),
            ("not UTF-8", path, {"content": b"\xac\xed{}", "headers": {**good, **json_type}}),
            ("no body", path, {"headers": good}),
            ("no body, no key", path, {}),  # FastAPI solves the key before it validates the body
            (
                "JSON sent as text",
                path,
                {"content": b"{}", "headers": {**good, "content-type": "text/plain"}},
            ),
            ("a JSON list", path, {"json": [1, 2], "headers": good}),
            ("a +json type", path, {"json": body, "headers": {**good, "content-type": "application/x+json"}}),
        ]
    out += [
        ("chat without messages", "/v1/chat/completions", {"json": {"model": "router"}, "headers": good}),
        ("chat of no model", "/v1/chat/completions", {"json": {**CHAT, "model": "gpt-x"}, "headers": good}),
        (
            "a route of an unknown router",
            "/route",
            {"json": {"prompt": "x", "router": "nope"}, "headers": good},
        ),
        ("a route without a prompt", "/route", {"json": {"router": "main"}, "headers": good}),
        (
            "feedback of no decision",
            "/feedback",
            {"json": {"decision_id": "0" * 32, "reward": 1.0}, "headers": good},
        ),
        (
            "a reward out of range",
            "/feedback",
            {"json": {"decision_id": decision_id, "reward": 7.0}, "headers": good},
        ),
        (
            "a reward that is text",
            "/feedback",
            {"json": {"decision_id": decision_id, "reward": "hi"}, "headers": good},
        ),
        ("a good completion", "/v1/chat/completions", {"json": CHAT, "headers": good}),
        ("a good route", "/route", {"json": {"prompt": "hello"}, "headers": good}),
        (
            "a good reward",
            "/feedback",
            {"json": {"decision_id": decision_id, "reward": 0.5}, "headers": good},
        ),
        (
            "the same reward again",
            "/feedback",
            {"json": {"decision_id": decision_id, "reward": 0.5}, "headers": good},
        ),
        (
            "an image from a chat router",
            "/v1/images/generations",
            {"json": {"model": "router", "prompt": "a cat"}, "headers": good},
        ),
        ("a batch of no events", "/feedback/batch", {"json": {"events": []}, "headers": good}),
        (
            "a batch with a bad event",
            "/feedback/batch",
            {"json": {"events": [{"decision_id": "0" * 32, "reward": 1.0}]}, "headers": good},
        ),
        (
            "a good batch",
            "/feedback/batch",
            {
                "json": {"events": [{"decision_id": decision_id, "reward": 1.0, "kind": "query"}]},
                "headers": good,
            },
        ),
    ]
    return out


async def test_lean_and_fastapi_handling_answer_alike(sqlite_stack: Stack, fake: FakeBackends) -> None:
    lean_app = create_app(sqlite_stack.settings(lean_routes=True))
    plain_app = create_app(sqlite_stack.settings(lean_routes=False))
    assert isinstance(getattr(lean_app.router.routes[0], "app", None), LeanEndpoint)
    assert not any(isinstance(getattr(r, "app", None), LeanEndpoint) for r in plain_app.router.routes)
    async with running(lean_app) as lean, running(plain_app) as plain:
        key, backend = await provision(lean, fake)
        routed = await lean.post("/route", json={"prompt": "feedback target"}, headers=bearer(key))
        # one decision per app, so "the same reward again" is a duplicate in each
        lean_decision = routed.json()["decision_id"]
        plain_routed = await plain.post("/route", json={"prompt": "feedback target"}, headers=bearer(key))
        plain_decision = plain_routed.json()["decision_id"]
        compared = 0
        statuses: set[int] = set()
        for (label, path, kwargs), (_, _, plain_kwargs) in zip(
            cases(key, lean_decision), cases(key, plain_decision), strict=True
        ):
            a = await lean.post(path, **kwargs)
            b = await plain.post(path, **plain_kwargs)
            assert normalized(a) == normalized(b), f"{label} on {path}"
            compared += 1
            statuses.add(a.status_code)
        assert compared == 5 * 11 + 15
        assert {200, 202, 400, 401, 404, 422} <= statuses, statuses  # not one failure compared 70 times
        # the statuses the cases were written for, so the comparison is not of two identical failures
        completion = await lean.post("/v1/chat/completions", json=CHAT, headers=bearer(key))
        assert completion.status_code == 200 and completion.json()["model"] == backend
        assert (await lean.post("/v1/chat/completions", json=CHAT)).status_code == 401
        bad = await lean.post("/route", content=b"{nope", headers={"content-type": "application/json"})
        assert bad.status_code == 422 and bad.json()["detail"][0]["type"] == "json_invalid"
        missing = await lean.post("/route", headers=bearer(key))
        assert missing.status_code == 422 and missing.json()["detail"][0]["type"] == "missing"
        reward = {"decision_id": lean_decision, "reward": 1.0, "model": backend, "kind": "cost"}
        accepted = await lean.post("/feedback", json=reward, headers=bearer(key))
        assert accepted.status_code == 202 and accepted.json()["duplicate"] is False

        docs = [(await c.get("/openapi.json")).json() for c in (lean, plain)]
        assert docs[0] == docs[1]


async def test_dependency_overrides_still_apply(sqlite_stack: Stack) -> None:
    """With an override set, a lean route hands the request to FastAPI's handling, which applies it."""
    app = create_app(sqlite_stack.settings(lean_routes=True))

    async def refused() -> Tenant:
        raise HTTPException(status.HTTP_418_IM_A_TEAPOT, "overridden")

    async with running(app) as client:
        prompt = {"prompt": "hello"}
        assert (await client.post("/route", json=prompt, headers=bearer("bg-nope"))).status_code == 401
        app.dependency_overrides[current_tenant] = refused
        for path, body in (("/route", prompt), ("/feedback", {"decision_id": "0" * 32, "reward": 1.0})):
            answer = await client.post(path, json=body, headers=bearer("bg-nope"))
            assert answer.status_code == 418 and answer.json()["detail"] == "overridden"
        app.dependency_overrides.clear()
        assert (await client.post("/route", json=prompt, headers=bearer("bg-nope"))).status_code == 401


def test_an_endpoint_the_binding_does_not_know_is_refused_at_start() -> None:
    router = APIRouter()

    @router.post("/q")
    async def with_query(limit: int = 3) -> dict[str, int]:
        return {"limit": limit}

    with pytest.raises(Unbindable, match="only one JSON body"):
        lean_routes(router.routes, [with_query])

    async def elsewhere() -> None:
        return None

    with pytest.raises(Unbindable, match="no route serves"):
        lean_routes(router.routes, [elsewhere])
