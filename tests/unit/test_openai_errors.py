"""OpenAI's error body for each status the gateway answers on /v1 (app/api/errors.py)."""

from __future__ import annotations

import json

import pytest

from app.api.errors import openai_error


@pytest.mark.parametrize(
    ("given", "headers", "status", "kind", "code"),
    [
        (422, {}, 400, "invalid_request_error", None),  # OpenAI's status for an invalid body
        (413, {}, 413, "invalid_request_error", None),
        (401, {"WWW-Authenticate": "Bearer"}, 401, "authentication_error", "invalid_api_key"),
        (403, {}, 403, "permission_error", "permission_denied"),
        (404, {}, 404, "invalid_request_error", "not_found"),
        (429, {"Retry-After": "3"}, 429, "rate_limit_error", "rate_limit_exceeded"),
        (502, {}, 502, "backend_error", "bad_gateway"),
        (503, {"x-banditgate-declined": "true"}, 503, "server_error", "model_declined"),
        (503, {}, 503, "server_error", None),
        (504, {}, 504, "backend_error", "backend_timeout"),
        (500, {}, 500, "server_error", None),
    ],
)
def test_status_type_code_and_headers(
    given: int, headers: dict[str, str], status: int, kind: str, code: str | None
) -> None:
    response = openai_error(given, "why", "field", headers=headers)
    assert response.status_code == status
    assert json.loads(response.body) == {
        "error": {"message": "why", "type": kind, "param": "field", "code": code}
    }
    assert {k.lower(): v for k, v in headers.items()}.items() <= dict(response.headers).items()


def test_an_explicit_code_wins() -> None:
    response = openai_error(404, "no such model", "model", "model_not_found")
    assert json.loads(response.body)["error"]["code"] == "model_not_found"
