"""The contract: what the schemathesis run (tests/integration/test_contract.py) found, each pinned
by a direct test on the SQLite default and on Postgres + Redis, and the OpenAPI document's error half."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import httpx
import jsonschema

from app.main import create_app
from app.timewindow import ZONED_TIME
from tests.conftest import Stack, admin_headers, bearer, make_tenancy, running

NOT_UTF8 = b'{"name": "\xff\xfe"}'  # bytes that no UTF-8 decoder accepts


async def send(client: httpx.AsyncClient, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return await client.post(path, content=body, headers={"Content-Type": "application/json", **headers})


async def test_a_body_that_is_not_utf8_is_the_invalid_body_answer(stack: Stack) -> None:
    """FastAPI answered such a body with a bare 400 that no operation documented; it is the same
    mistake as a body that is not JSON, so it gets the same answer: 422 ``json_invalid`` (400 in OpenAI's
    shape under /v1), naming the byte."""
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        for path, headers in [
            ("/admin/tenants", admin_headers()),
            ("/route", bearer(t.key)),
            ("/feedback", bearer(t.key)),
        ]:
            response = await send(client, path, NOT_UTF8, headers)
            assert response.status_code == 422, (path, response.text)
            [error] = response.json()["detail"]
            assert error["type"] == "json_invalid" and error["loc"] == ["body"], error
            assert "not UTF-8 (byte 10" in error["msg"], error
        response = await send(client, "/v1/chat/completions", NOT_UTF8, bearer(t.key))
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and "not UTF-8" in error["message"], error


async def test_observation_uploads_refuse_bodies_and_rows_that_are_not_text(stack: Stack) -> None:
    """An upload that is not UTF-8 was a 500 (its rows are parsed as they stream in, outside FastAPI's
    body parsing); a row whose id, prompt or model held a NUL was accepted (Postgres refuses NUL in
    text: a 500 when stored). Each is a 422 now, and nothing is stored."""
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        path = f"/admin/tenants/{t.tenant}/routers/{t.router}/observations"
        h = admin_headers()
        response = await send(client, path, b"[\xff]", h)
        assert response.status_code == 422, response.text
        assert "row 0: not JSON" in response.json()["detail"][0]["msg"]
        good: dict[str, Any] = {"id": "r1", "prompt": "what is 2 + 2?", "model": t.arms[0], "reward": 1.0}
        for field, value, says in [
            ("id", "r\ud800", "unicode"),  # pydantic's own refusal, for a constrained str
            ("id", "r\x00", "NUL"),
            ("prompt", "2 + 2\x00", "NUL"),
            ("model", "m\x00", "NUL"),
        ]:
            # json.dumps escapes the lone surrogate (\\ud800), as a careless client's JSON would
            response = await send(client, path, json.dumps([{**good, field: value}]).encode(), h)
            assert response.status_code == 422, (field, response.text)
            assert f"row 0: {field}" in response.json()["detail"][0]["msg"] and says in response.text
        accepted = await client.post(path, json=[good], headers=h)
        assert accepted.status_code == 200 and accepted.json()["new"] == 1, accepted.text
        events = (await client.get("/admin/feedback", params={"tenant": t.tenant}, headers=h)).json()["items"]
        assert [e["row_id"] for e in events] == ["r1"], events  # none of the refused rows was stored


async def test_times_carry_their_zone_on_both_databases(stack: Stack) -> None:
    """SQLite stores times without a zone; every time the API answers with ends with it (UTC), as on
    Postgres, and the OpenAPI document says so (a pattern the contract fuzz checks every time against)."""
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        h = admin_headers()
        tenant = (await client.get(f"/admin/tenants/{t.tenant}", headers=h)).json()
        router = (await client.get(f"/admin/tenants/{t.tenant}/routers/{t.router}", headers=h)).json()
        key = (await client.get(f"/admin/tenants/{t.tenant}/keys", headers=h)).json()[0]
        decided = (await client.post("/route", json={"prompt": "hi"}, headers=bearer(t.key))).json()
        decision = (await client.get(f"/admin/decisions/{decided['decision_id']}", headers=h)).json()
        for moment in [
            tenant["created_at"],
            router["created_at"],
            router["updated_at"],
            key["created_at"],
            decision["created_at"],
        ]:
            assert re.search(ZONED_TIME, moment), moment
            parsed = datetime.fromisoformat(moment)
            assert parsed.utcoffset() is not None and parsed.utcoffset().total_seconds() == 0, moment
            assert abs((datetime.now(UTC) - parsed).total_seconds()) < 600, moment
        spec = (await client.get("/openapi.json")).json()
        assert spec["components"]["schemas"]["TenantOut"]["properties"]["created_at"]["pattern"] == ZONED_TIME


async def test_every_error_status_is_documented_with_the_body_of_its_path(sqlite_stack: Stack) -> None:
    """The OpenAPI document's error half (app/api/contract.py): statuses derived from what an operation is,
    those its logic declares, and each error's body by path: ``{"detail": str}``, FastAPI's 422 list, and
    OpenAI's ``{"error": ...}`` with 400 for an invalid body under /v1."""
    async with running(create_app(sqlite_stack.settings())) as client:
        spec = (await client.get("/openapi.json")).json()

    def schema(path: str, method: str, status: str) -> str:
        return str(spec["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"])

    def statuses(path: str, method: str) -> list[str]:
        return sorted(spec["paths"][path][method]["responses"])

    assert statuses("/healthz", "get") == ["200", "431", "500"]
    assert statuses("/admin/tenants", "post") == [
        *("201", "401", "403", "408", "409", "413", "422", "429", "431", "500", "503")
    ]
    assert statuses("/v1/chat/completions", "post") == [
        *("200", "400", "401", "403", "404", "408", "413", "429", "431", "500", "502", "503", "504")
    ]
    assert statuses("/admin/decisions/{decision_id}", "get") == [
        *("200", "401", "403", "404", "422", "429", "431", "500", "503")
    ]
    assert "ErrorDetail" in schema("/admin/tenants", "post", "409")
    assert "HTTPValidationError" in schema("/admin/tenants", "post", "422")
    assert "OpenAIError" in schema("/v1/models", "get", "401")
    assert "OpenAIError" in schema("/v1/chat/completions", "post", "400")
    assert "ErrorDetail" not in schema("/readyz", "get", "503")  # its own body, the readiness checks
    retry = spec["paths"]["/route"]["post"]["responses"]["429"]["headers"]["Retry-After"]
    assert retry["schema"] == {"type": "integer", "minimum": 1}
    assert spec["paths"]["/route"]["post"]["security"] == [{"tenantKey": []}]
    assert spec["paths"]["/admin/backends"]["get"]["security"] == [{"adminKey": []}]
    errors = spec["components"]["schemas"]
    assert errors["OpenAIErrorInfo"]["required"] == ["message", "type", "param", "code"]
    assert errors["HTTPValidationError"]["required"] == ["detail"]


async def test_a_500_has_the_documented_body_on_both_sides_of_v1(sqlite_stack: Stack) -> None:
    """Every operation documents 500 (a bug): the last-resort answer matches that body, in both shapes."""
    app = create_app(sqlite_stack.settings())

    @app.get("/boom")
    @app.get("/v1/boom")
    async def boom() -> None:
        raise RuntimeError("boom")

    async with running(app) as client:
        spec = (await client.get("/openapi.json")).json()
        for path in ("/boom", "/v1/boom"):
            response = await client.get(path)
            assert response.status_code == 500, response.text
            documented = spec["paths"][path]["get"]["responses"]["500"]["content"]["application/json"]
            jsonschema.validate(response.json(), {**documented["schema"], "components": spec["components"]})
        assert response.json()["error"]["type"] == "server_error"
