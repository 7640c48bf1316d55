"""Error bodies: ``{"detail": ...}`` everywhere, OpenAI's ``{"error": {...}}`` under ``/v1``.

OpenAI clients (the official SDKs, LangChain, ...) read the reason from ``error.message`` and drop a
FastAPI ``detail``; so every error answered on a ``/v1`` path — authentication, unknown model, invalid
body, the backends' 502/504, a declined decision's 503, an unknown path — is rewritten here, in one
place, into ``{"error": {"message", "type", "param", "code"}}`` with the same status and headers. One
exception: an invalid request body is a 400 there (OpenAI's and every compatible server's status for
it, which the SDKs raise as ``BadRequestError``) where the gateway's own API answers 422.

Outside ``/v1`` every 422 has FastAPI's one shape, ``{"detail": [{"type", "loc", "msg", "input"?}]}``
(what the OpenAPI document declares), whether pydantic or the gateway refused the request; ``loc``
names the offending field when it is known. What a 422 echoes of the client's input is made safe to
send first (``echoed``): a lone surrogate or NaN inside the invalid value must not turn it into a 500.

A database that cannot be reached (``DatabaseUnavailable``, raised by the store) is a 503 with
``Retry-After`` (``BANDITGATE_DB_RETRY_AFTER_S``) and, under ``/v1``, the code ``database_unavailable``;
unlike a declined decision's 503 it has no ``x-banditgate-declined`` header. A transaction the
database aborted for a conflict (``Contended``), still aborted after the store sent it again, is a 503
with ``Retry-After: 1`` and the code ``database_conflict``: nothing was written.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.jsonable import readable, readable_text
from app.routing.errors import (
    BackendsFailed,
    Conflict,
    Declined,
    GatewayError,
    Invalid,
    NotFound,
    RateLimited,
    TooLarge,
)
from app.store.availability import Contended, DatabaseUnavailable

log = logging.getLogger("banditgate")

OPENAI_PREFIX = "/v1"
DECLINED_HEADER = "x-banditgate-declined"  # on the 503 of a decision that chose no model
DECISION_HEADER = "x-banditgate-decision-id"
UNAVAILABLE_CODE = "database_unavailable"
CONTENDED_CODE = "database_conflict"
UNAVAILABLE_LOG_EVERY_S = 10.0  # an outage fails every request: its log line is written this often at most

STATUS_OF: dict[type[GatewayError], int] = {
    NotFound: status.HTTP_404_NOT_FOUND,
    Invalid: status.HTTP_422_UNPROCESSABLE_CONTENT,
    Conflict: status.HTTP_409_CONFLICT,
    TooLarge: status.HTTP_413_CONTENT_TOO_LARGE,
    Declined: status.HTTP_503_SERVICE_UNAVAILABLE,
    RateLimited: status.HTTP_429_TOO_MANY_REQUESTS,
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


def is_openai_path(path: str) -> bool:
    """Whether ``path`` is under ``/v1``, where errors are in OpenAI's shape (also the OpenAPI
    document's rule: app/api/contract.py)."""
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


# How much of an invalid input a 422 echoes: enough to recognise it, never the whole of a large body.
ECHO_DEPTH = 3
ECHO_CHARS = 200
ECHO_ITEMS = 20


def echoed(value: Any) -> Any:
    """``value`` as a 422 may echo it: valid JSON whatever the client sent, cut short (``readable``)."""
    return readable(value, ECHO_DEPTH, ECHO_ITEMS, ECHO_CHARS)


def validation_errors(errors: Any) -> list[dict[str, Any]]:
    """pydantic's errors in FastAPI's shape, each part safe to send (``echoed``)."""
    out: list[dict[str, Any]] = []
    for error in errors if isinstance(errors, list) else []:
        if not isinstance(error, Mapping):
            continue
        item: dict[str, Any] = {
            "type": echoed(error.get("type", "value_error")),
            "loc": [p if isinstance(p, int) else echoed(str(p)) for p in error.get("loc") or ()],
            "msg": readable_text(str(error.get("msg", "invalid"))),
        }
        if "input" in error:
            item["input"] = echoed(error["input"])
        if isinstance(error.get("ctx"), Mapping):
            item["ctx"] = {str(k): echoed(v) for k, v in error["ctx"].items()}
        out.append(item)
    return out


def unprocessable_detail(detail: Any, param: str | None) -> list[dict[str, Any]]:
    """A 422's ``detail`` in the one shape: pydantic's errors as they are, a message as one error."""
    if isinstance(detail, list):
        return validation_errors(detail)
    loc = param.split(".") if param else []
    return [{"type": "value_error", "loc": loc, "msg": readable_text(str(detail))}]


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


def error_response(
    request: Request, status_code: int, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """An error in the shape of its path: OpenAI's under ``/v1``, ``{"detail": message}`` elsewhere."""
    if is_openai_path(request.url.path):
        return openai_error(status_code, message, headers=headers)
    return JSONResponse({"detail": message}, status_code=status_code, headers=headers or None)


class NotedSend:
    """An ASGI ``send`` that notes the response's status as it starts (None until then): whether a
    middleware may still answer, and what the response was."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.status: int | None = None

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
        await self.send(message)


class AnswerServerErrors:
    """Pure ASGI middleware, the outermost of the app's own: an exception no handler answered is logged
    once, with its traceback, and answered 500 in the error shape of its path. It is not raised further,
    so the server neither logs it a second time nor drops the client's keep-alive connection (Starlette's
    own last-resort handler answers and then re-raises). When the response had already started (a
    stream broke), the server closes the connection: the client sees the answer end early."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        noted = NotedSend(send)
        try:
            await self.app(scope, receive, noted)
        except Exception:
            log.exception("unhandled error on %s %s", scope["method"], scope["path"])
            if noted.status is None:
                response = error_response(Request(scope), 500, "internal error; see the server log")
                await response(scope, receive, send)


def retry_after(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds (RFC 9110 delta-seconds), rounded up, at least 1."""
    return str(max(1, math.ceil(seconds)))


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
    if isinstance(exc, RateLimited):
        headers["Retry-After"] = retry_after(exc.retry_after_s)
    http = HTTPException(code, exc.message, headers=headers or None)
    http.param = exc.param  # type: ignore[attr-defined]
    return http


def conflicted() -> HTTPException:
    """The 503 of a transaction the database aborted for a conflict with a concurrent one, after the
    store sent it again: nothing was written, and the request may be sent again at once."""
    http = HTTPException(
        status.HTTP_503_SERVICE_UNAVAILABLE,
        "the database aborted this request's transaction for a conflict with a concurrent change "
        "(a deletion, say); nothing was written; retry",
        headers={"Retry-After": "1"},
    )
    http.code = CONTENDED_CODE  # type: ignore[attr-defined]
    return http


def unavailable(retry_after_s: float) -> HTTPException:
    """The 503 of a database that cannot be reached: ``Retry-After``, OpenAI's code under /v1."""
    seconds = retry_after(retry_after_s)
    http = HTTPException(
        status.HTTP_503_SERVICE_UNAVAILABLE,
        f"the database is unavailable; retry after {seconds} s",
        headers={"Retry-After": seconds},
    )
    http.code = UNAVAILABLE_CODE  # type: ignore[attr-defined]
    return http


class OutageLog:
    """Logs a ``DatabaseUnavailable`` with what the driver said, at most once per ``every_s``, with the
    count of the ones not logged since."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.last = -math.inf
        self.unlogged = 0

    def note(self, exc: DatabaseUnavailable) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s:
            self.unlogged += 1
            return
        log.warning("503 database unavailable (%d more since the last line): %s", self.unlogged, exc.message)
        self.last, self.unlogged = now, 0


def undecodable_body(exc: StarletteHTTPException) -> RequestValidationError | None:
    """FastAPI answers a body it cannot decode as UTF-8 with a bare 400 (``There was an error parsing
    the body``), where a body that is not JSON is its 422 ``json_invalid``. JSON is UTF-8 (RFC 8259), so
    both are the same mistake: this is that 422, naming the byte. A body nested too deep for the JSON
    parser (its ``RecursionError``, at about a thousand levels) is the same 422, naming the depth limit
    that every body's free-form JSON is held to. None for any other error."""
    cause = exc.__cause__
    if exc.status_code != status.HTTP_400_BAD_REQUEST:
        return None
    if isinstance(cause, UnicodeDecodeError):
        message = f"the body is not UTF-8 (byte {cause.start}: {cause.reason}); JSON must be"
    elif isinstance(cause, RecursionError):
        message = "the body is nested too deep to parse (the limit is BANDITGATE_JSON_MAX_DEPTH)"
    else:
        return None
    return RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": message}])


def install(app: FastAPI) -> None:
    """Register the app's error handlers and its last-resort 500 (call it after adding every other
    middleware)."""

    outages = OutageLog(UNAVAILABLE_LOG_EVERY_S)

    @app.exception_handler(DatabaseUnavailable)
    async def database_unavailable(request: Request, exc: DatabaseUnavailable) -> JSONResponse:
        outages.note(exc)
        ctx = getattr(request.app.state, "ctx", None)
        return await http_error(request, unavailable(ctx.settings.db_retry_after_s if ctx else 1.0))

    @app.exception_handler(Contended)
    async def database_contended(request: Request, exc: Contended) -> JSONResponse:
        log.warning(
            "503 transaction aborted for a conflict on %s %s: %s", request.method, request.url.path, exc
        )
        return await http_error(request, conflicted())

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
        return await http_error(request, as_http(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        undecodable = undecodable_body(exc)
        if undecodable is not None:
            return await invalid_request(request, undecodable)
        headers = dict(exc.headers or {})
        param = getattr(exc, "param", None)
        if not is_openai_path(request.url.path):
            detail: Any = exc.detail
            if exc.status_code == status.HTTP_422_UNPROCESSABLE_CONTENT:
                detail = unprocessable_detail(detail, param)
            return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=headers or None)
        if isinstance(exc.detail, list):  # pydantic errors of a body the endpoint validated itself
            errors = validation_errors(exc.detail)
            message = _validation_message(errors)
            param = param or (_param(errors[0].get("loc")) if errors else None)
        else:
            message = str(exc.detail)
        return openai_error(exc.status_code, message, param, getattr(exc, "code", None), headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # The default handler echoes the offending input as it is: NaN, a lone surrogate, a whole body.
        errors = validation_errors(exc.errors())
        if not is_openai_path(request.url.path):
            return JSONResponse(status_code=422, content={"detail": errors})
        first = errors[0].get("loc") if errors else None
        return openai_error(422, _validation_message(errors), _param(first))

    app.add_middleware(AnswerServerErrors)  # last added: outermost of the app's own middleware
