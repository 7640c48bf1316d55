"""A deeply nested body is a 422 naming the depth, on the lean routes and FastAPI's, never a 500 (a
``RecursionError``) nor an undocumented 400: the depth check (``BANDITGATE_JSON_MAX_DEPTH``) runs
before anything recurses, and a body too deep for the JSON parser itself is its ``json_invalid``."""

from __future__ import annotations

import json

import pytest

from app.main import create_app
from tests.conftest import Stack, admin_headers, bearer, make_tenancy, running

DEPTHS = [500, 600, 1000]


def nested(depth: int) -> str:
    """A JSON object ``depth`` levels deep, as text: the client's bytes."""
    return '{"a": ' * (depth - 1) + "{}" + "}" * (depth - 1)


def body_with(field: str, depth: int, **rest: object) -> bytes:
    """A JSON object with ``rest`` and ``field`` set to a value ``depth`` levels deep."""
    head = json.dumps(rest)[:-1] + (", " if rest else "")
    return f'{head}"{field}": {nested(depth)}}}'.encode()


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "fastapi"])
async def test_deep_bodies_are_422s_everywhere(sqlite_stack: Stack, lean: bool) -> None:
    app = create_app(sqlite_stack.settings(lean_routes=lean))
    async with running(app) as client:
        t = await make_tenancy(client)
        decision = (await client.post("/route", json={"prompt": "hi"}, headers=bearer(t.key))).json()
        routers = f"/admin/tenants/{t.tenant}/routers"
        json_type = {"Content-Type": "application/json"}
        for depth in DEPTHS:
            calls = [
                ("/route", body_with("metadata", depth, prompt="hi"), bearer(t.key)),
                ("/route", body_with("unknown", depth, prompt="hi"), bearer(t.key)),
                (
                    "/feedback",
                    body_with("metadata", depth, decision_id=decision["decision_id"]),
                    bearer(t.key),
                ),
                (routers, body_with("hyperparameters", depth, name="deep", arms=t.arms), admin_headers()),
                (f"{routers}/{t.router}/state", body_with("state", depth), admin_headers()),
            ]
            for path, body, headers in calls:
                response = await client.post(path, content=body, headers=headers | json_type)
                assert response.status_code == 422, (depth, path, response.status_code, response.text)
                detail = response.json()["detail"]
                assert isinstance(detail, list) and detail, (depth, path, detail)
                message = " ".join(str(e["msg"]) for e in detail)
                assert "deep" in message or "unknown" in str(detail) or "Extra" in message, (
                    depth,
                    path,
                    detail,
                )
        chat = body_with("messages", 1000, model="router")
        response = await client.post("/v1/chat/completions", content=chat, headers=bearer(t.key) | json_type)
        assert response.status_code == 400, response.text
        assert "deep" in response.json()["error"]["message"]


async def test_deep_hyperparameters_name_the_depth_limit(sqlite_stack: Stack) -> None:
    async with running(create_app(sqlite_stack.settings())) as client:
        t = await make_tenancy(client)
        routers = f"/admin/tenants/{t.tenant}/routers"
        body = body_with("hyperparameters", 500, name="deep", arms=t.arms)
        response = await client.post(
            routers, content=body, headers=admin_headers() | {"Content-Type": "application/json"}
        )
        assert response.status_code == 422, response.text
        assert "BANDITGATE_JSON_MAX_DEPTH" in response.text
        patch = body_with("hyperparameters", 600)
        response = await client.patch(
            f"{routers}/{t.router}",
            content=patch,
            headers=admin_headers() | {"Content-Type": "application/json"},
        )
        assert response.status_code == 422, response.text
        assert "BANDITGATE_JSON_MAX_DEPTH" in response.text
