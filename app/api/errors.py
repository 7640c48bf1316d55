"""Error bodies: ``{"detail": ...}`` everywhere, OpenAI's ``{"error": {...}}`` under ``/v1``.

OpenAI clients (the official SDKs, LangChain, ...) read the reason from ``error.message`` and drop a
FastAPI ``detail``; so every error answered on a ``/v1`` path — authentication, unknown model, invalid
body, the backends' 502/504, a declined decision's 503, an unknown path — is rewritten here, in one
place, into ``{"error": {"message", "type", "param", "code"}}`` with the same status and headers. One
exception: an invalid request body is a 400 there (OpenAI's and every compatible server's status for
it, which the SDKs raise as ``BadRequestError``) where the gateway's own API answers 422.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.jsonable import jsonable
from app.routing.errors import BackendsFailed, Declined, GatewayError, Invalid, NotFound, TooLarge

log = logging.getLogger("banditgate")

OPENAI_PREFIX = "/v1"
DECLINED_HEADER = "x-banditgate-declined"  # on the 503 of a decision that chose no model
DECISION_HEADER = "x-banditgate-decision-id"

STATUS_OF: dict[type[GatewayError], int] = {
    NotFound: status.HTTP_404_NOT_FOUND,
    Invalid: status.HTTP_422_UNPROCESSABLE_CONTENT,
    TooLarge: status.HTTP_413_CONTENT_TOO_LARGE,
    Declined: status.HTTP_503_SERVICE_UNAVAILABLE,
}


class InvalidParam(HTTPException):
    """A request field the endpoint refuses; ``param`` names it in OpenAI's error body."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(status.HTTP_422_UNPROCESSABLE_CONTENT, message)
        self.param = param


class ModelNotFound(HTTPException):
    """A ``model`` that is neither a router of the tenant nor an arm of one of its routers."""

    def __init__(self, model: str) -> None:
        super().__init__(
            status.HTTP_404_NOT_FOUND,
            f"the model {model!r} does not exist or this key has no access to it: use 'router', "
            "'router/<name>' or a backend that is an arm of one of your routers (GET /v1/models lists them)",
        )
        self.param = "model"
        self.code = "model_not_found"


def is_openai_path(request: Request) -> bool:
    path = request.url.path
    return path == OPENAI_PREFIX or path.startswith(OPENAI_PREFIX + "/")


def _type_and_code(status_code: int, headers: dict[str, str]) -> tuple[str, str | None]:
    """OpenAI's ``type`` for a status, and a ``code`` a program can branch on."""
    if status_code == 401:
        return "authentication_error", "invalid_api_key"
    if status_code == 403:
        return "permission_error", "permission_denied"
    if status_code == 404:
        return "invalid_request_error", "not_found"
    if status_code == 429:
        return "rate_limit_error", "rate_limit_exceeded"
    if status_code == 503 and headers.get(DECLINED_HEADER) == "true":
        return "server_error", "model_declined"
    if status_code == 502:
        return "backend_error", "bad_gateway"
    if status_code == 504:
        return "backend_error", "backend_timeout"
    if status_code >= 500:
        return "server_error", None
    return "invalid_request_error", None


def _param(loc: Any) -> str | None:
    """A pydantic error location as a dotted field name, without its leading ``body``."""
    parts = [str(p) for p in (loc or ()) if p != "body"]
    return ".".join(parts) or None


def _validation_message(errors: list[dict[str, Any]]) -> str:
    return "; ".join(f"{_param(e.get('loc')) or 'body'}: {e.get('msg', 'invalid')}" for e in errors)


def openai_error(
    status_code: int,
    message: str,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    given = dict(headers or {})
    kind, default_code = _type_and_code(status_code, given)
    if status_code == status.HTTP_422_UNPROCESSABLE_CONTENT:
        status_code = status.HTTP_400_BAD_REQUEST
    error = {"message": message, "type": kind, "param": param, "code": code or default_code}
    return JSONResponse({"error": error}, status_code=status_code, headers=given or None)


def as_http(exc: GatewayError) -> HTTPException:
    """A domain error as the HTTP error the client gets: its status, the decision id header, and for
    a declined decision the declined header."""
    if isinstance(exc, BackendsFailed):
        code = status.HTTP_504_GATEWAY_TIMEOUT if exc.timed_out else status.HTTP_502_BAD_GATEWAY
    else:
        code = next(
            (c for kind, c in STATUS_OF.items() if isinstance(exc, kind)),
            status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    headers = {DECISION_HEADER: exc.decision_id} if exc.decision_id is not None else {}
    if isinstance(exc, Declined):
        headers[DECLINED_HEADER] = "true"
    http = HTTPException(code, exc.message, headers=headers or None)
    http.param = exc.param  # type: ignore[attr-defined]
    return http


def install(app: FastAPI) -> None:
    """Register the app's error handlers."""

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
        return await http_error(request, as_http(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if not is_openai_path(request):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers or None)
        param = getattr(exc, "param", None)
        if isinstance(exc.detail, list):  # pydantic errors of a body the endpoint validated itself
            errors = [e for e in exc.detail if isinstance(e, dict)]
            message = _validation_message(errors)
            param = param or (_param(errors[0].get("loc")) if errors else None)
        else:
            message = str(exc.detail)
        return openai_error(exc.status_code, message, param, getattr(exc, "code", None), headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # The default handler echoes the offending input, which may be NaN or infinity: not valid JSON.
        errors = jsonable(jsonable_encoder(exc.errors(), custom_encoder={Exception: str}))
        if not is_openai_path(request):
            return JSONResponse(status_code=422, content={"detail": errors})
        first = errors[0].get("loc") if errors else None
        return openai_error(422, _validation_message(errors), _param(first))

    @app.exception_handler(Exception)
    async def unhandled(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        message = "internal error; see the server log"
        if is_openai_path(request):
            return openai_error(500, message)
        return JSONResponse(status_code=500, content={"detail": message})
