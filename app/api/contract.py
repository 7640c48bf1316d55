"""The error half of the OpenAPI contract: every status an operation answers, each with its body.

Statuses that follow from what an operation *is* are derived here, once, from its OpenAPI description,
so a new endpoint documents them without saying so:

- every operation: 500 (a bug, answered by ``AnswerServerErrors``) and 431 (the header limits of
  app/api/http_limits.py, in front of every endpoint);
- an operation with a request body: 413 (body size) and 408 (slow body), the same middleware's;
- an operation that needs a key (its ``security``, from the dependencies in app/api/deps.py): 401, 403,
  429 (with ``Retry-After``) and 503 (the database cannot be reached: a key is checked against it);
- an operation with a path parameter: 404 (the tenant, router, backend, decision, key or model it names
  does not exist);
- an operation with parameters or a body: 422, FastAPI's own (400 under ``/v1``, see below).

Statuses that follow from an endpoint's own logic (a 409 on a name taken, a 404 on a router named in the
body, the backends' 502/504, a declined decision's 503) are declared on its route with ``documented(...)``.

Every error status gets the body of its path, by the same rule app/api/errors.py answers with
(``is_openai_path``): under ``/v1`` OpenAI's ``{"error": {"message", "type", "param", "code"}}``, and an
invalid request is a 400 there, not a 422; elsewhere ``{"detail": "<message>"}``, and a 422's ``detail``
is FastAPI's list of ``{"type", "loc", "msg", "input"?, "ctx"?}``. A route that declares a body of its
own for an error status (``/readyz``'s 503) keeps it.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field
from pydantic.json_schema import models_json_schema

from app.api.errors import is_openai_path

# What each status means in this API: the description every operation that answers it shows.
MEANING: dict[int, str] = {
    400: "The request is invalid (under /v1 this is also what the gateway's own API answers with 422)",
    401: "No key, or a key that is wrong or revoked (`Authorization: Bearer <key>`)",
    403: "The wrong kind of key: the admin key on a tenant endpoint, a tenant key on an admin one "
    "(or the admin API is off: no BANDITGATE_ADMIN_KEY)",
    404: "What the request names does not exist, or not for this tenant",
    408: "The body did not arrive within BANDITGATE_BODY_READ_TIMEOUT_S of the headers",
    409: "The name is taken, or the resource is still in use",
    413: "The body is over its path's limit (BANDITGATE_MAX_BODY_BYTES, or a bulk upload's own), or what "
    "it holds (a prompt, metadata, a batch, an upload) is over its limit: the message names the limit",
    422: "A field, parameter or limit refused: `loc` names the field",
    429: "Over the key's rate or in-flight limit, or the client address over its failed-authentication "
    "limit: retry after `Retry-After` seconds",
    431: "Too many header fields (BANDITGATE_MAX_HEADER_COUNT) or too large a head",
    500: "A bug: the traceback is in the server log; the connection stays usable",
    502: "Every backend tried failed (the message says which, and how, never what it answered)",
    503: "The database cannot be reached (code `database_unavailable` under /v1, no declined header): "
    "retry after `Retry-After` seconds; or the router's policy chose no model (header "
    "`x-banditgate-declined: true`)",
    504: "Every backend tried timed out",
}

EVERY_OPERATION = (431, 500)
WITH_BODY = (408, 413)
WITH_KEY = (401, 403, 429, 503)
WITH_PATH_PARAMETER = (404,)

OPENAI_ERROR = "OpenAIError"
DETAIL_ERROR = "ErrorDetail"
VALIDATION_ERROR = "HTTPValidationError"  # FastAPI's name for a 422's body: generated clients know it


class ErrorDetail(BaseModel):
    """An error outside ``/v1`` (other than a 422)."""

    detail: str = Field(description="what went wrong, for a person to read")


class OpenAIErrorInfo(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, rate_limit_error, ...")
    param: str | None = Field(description="the request field at fault, when there is one")
    code: str | None = Field(description="invalid_api_key, model_not_found, rate_limit_exceeded, ...")


class OpenAIError(BaseModel):
    """An error under ``/v1``, in OpenAI's shape (what the OpenAI SDKs read)."""

    error: OpenAIErrorInfo


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route for the statuses its own logic answers (bodies are filled in by
    ``install``)."""
    return {status: {"description": MEANING[status]} for status in statuses}


def _error_schemas() -> dict[str, Any]:
    _, top = models_json_schema(
        [(ErrorDetail, "serialization"), (OpenAIError, "serialization")],
        ref_template="#/components/schemas/{model}",
    )
    return dict(top["$defs"])


def _ref(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}


def derived_statuses(operation: dict[str, Any]) -> set[int]:
    """The statuses an operation answers because of what it is (the module docstring's list)."""
    statuses = set(EVERY_OPERATION)
    if "requestBody" in operation:
        statuses.update(WITH_BODY)
    if operation.get("security"):
        statuses.update(WITH_KEY)
    if any(p.get("in") == "path" for p in operation.get("parameters", [])):
        statuses.update(WITH_PATH_PARAMETER)
    return statuses


def document_errors(path: str, operation: dict[str, Any]) -> None:
    """Complete ``operation``'s responses in place: derived statuses, and each error's body."""
    responses: dict[str, Any] = operation.setdefault("responses", {})
    for derived in derived_statuses(operation):
        responses.setdefault(str(derived), {"description": MEANING[derived]})
    openai = is_openai_path(path)
    if openai and "422" in responses:  # an invalid request is a 400 under /v1 (app/api/errors.py)
        del responses["422"]
        responses.setdefault("400", {"description": MEANING[400]})
    for status, response in responses.items():
        if not status.isdigit() or int(status) < 400 or "content" in response:
            continue
        response["content"] = _ref(OPENAI_ERROR if openai else DETAIL_ERROR)
        if status in ("429", "503"):
            response["headers"] = {
                "Retry-After": {
                    "description": "whole seconds until a request may be admitted (at least 1); on a "
                    "503, only when the database cannot be reached",
                    "schema": {"type": "integer", "minimum": 1},
                }
            }
    if not openai and "422" in responses:
        responses["422"]["content"] = _ref(VALIDATION_ERROR)
    operation["responses"] = dict(sorted(responses.items()))


def complete(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` (FastAPI's OpenAPI document) with every operation's error statuses and bodies."""
    for path, operations in spec.get("paths", {}).items():
        for operation in operations.values():
            document_errors(path, operation)
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(_error_schemas())
    if VALIDATION_ERROR in schemas:  # FastAPI's own, where some operation validates its input
        schemas[VALIDATION_ERROR]["required"] = ["detail"]  # every 422 of the gateway has one
    return spec


def install(app: FastAPI) -> None:
    """Serve FastAPI's document, completed (``complete``), as ``/openapi.json``: built once."""
    generate = app.openapi  # FastAPI's: builds the document once and keeps it in app.openapi_schema

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            complete(generate())
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
