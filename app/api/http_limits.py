"""What one HTTP request may cost the server: a pure ASGI middleware in front of every endpoint.

- **Headers**: more than ``max_header_count`` headers, or more than ``max_header_bytes`` of names and
  values, is a 431. (``banditgate serve`` also has uvicorn's h11 parser refuse a head over
  ``max_header_bytes`` before it is parsed, with a 400; this check covers any other server.)
- **Body size**: a ``Content-Length`` over the limit is a 413 before any of the body is read; a body
  without one (chunked) is counted as it streams in and is a 413 as soon as it passes the limit. The
  limit of each path is in one table, ``HttpLimits.body_limit``: the bulk uploads have their own,
  larger ones, and only a request that carries an ``Authorization`` header gets them (FastAPI reads and
  parses a body before the dependencies check its key, so a client without one must not be able to
  make the server read 64 MiB). Such a request is also refused (429) before its body is read when its
  address is over its failed-authentication limit (app/ratelimit/).
- **Slow clients**: the whole body must arrive within ``body_read_timeout_s`` of the headers, else a
  408. A client that declares a longer body than it sends therefore holds its connection that long at
  most. (Idle keep-alive connections are closed by the server after ``keep_alive_s``.)
- **JSON limits**: the app's ``JsonLimits`` are in force (``current_limits()``) while it serves the
  request, for the validators of app/input_types.py.

Every refusal answers ``Connection: close`` (the rest of the body is never read), in the error shape of
its path (app/api/errors.py).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.deps import client_address
from app.api.errors import NotedSend, as_http, error_response
from app.input_types import DEFAULT_LIMITS, JsonLimits, limits_in_force
from app.routing.errors import RateLimited
from app.settings import SettingsView

CLOSE = {"Connection": "close"}
# What one event of POST /feedback/batch holds besides its metadata (its id, model, reward, cost, kind and
# JSON punctuation; an output embedding or text shares the batch's budget).
FEEDBACK_EVENT_BYTES = 1024

_ROUTER = r"^/admin/tenants/[^/]+/routers/[^/]+"
OBSERVATIONS_PATH = re.compile(_ROUTER + r"/observations$")
STATE_PATH = re.compile(_ROUTER + r"/state$")
FEEDBACK_BATCH_PATH = re.compile(r"^/feedback/batch$")


@dataclass(frozen=True)
class HttpLimits(SettingsView):
    max_body_bytes: int
    max_offline_body_bytes: int
    state_import_max_bytes: int
    max_feedback_batch: int
    metadata_max_bytes: int
    body_read_timeout_s: float
    max_header_bytes: int
    max_header_count: int

    def feedback_batch_bytes(self) -> int:
        """What the largest valid feedback batch can be: every event with metadata at its limit."""
        per_event = self.metadata_max_bytes + FEEDBACK_EVENT_BYTES
        return max(self.max_body_bytes, self.max_feedback_batch * per_event)

    def body_limit(self, path: str, authorized: bool) -> int:
        """The largest body of a request to ``path``: the one table of the body limits (docs/settings.md
        and docs/security.md list it). ``authorized``: the request carries an
        ``Authorization`` header; without one every path gets ``max_body_bytes``."""
        if authorized:
            if OBSERVATIONS_PATH.match(path):
                return self.max_offline_body_bytes
            if STATE_PATH.match(path):
                return self.state_import_max_bytes
            if FEEDBACK_BATCH_PATH.match(path):
                return self.feedback_batch_bytes()
        return self.max_body_bytes


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than {limit} bytes", headers=CLOSE)


class BodyTooSlow(HTTPException):
    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            408, f"the request body did not arrive within {timeout_s:g} s of its headers", headers=CLOSE
        )


def declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The ``Content-Length`` header's value; None when absent or not a number (the server rejects those)."""
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def has_header(headers: list[tuple[bytes, bytes]], wanted: bytes) -> bool:
    return any(name.lower() == wanted for name, _ in headers)


async def address_refusal(scope: Scope) -> RateLimited | None:
    """Why the client's address may not send a bulk body now (over its failed-auth limit), or None; also
    None in an app without the gateway's context (the replay backends)."""
    ctx = getattr(getattr(scope.get("app"), "state", None), "ctx", None)
    if ctx is None:
        return None
    try:
        await ctx.limiter.check_address(client_address(Request(scope)))
    except RateLimited as exc:
        return exc
    return None


class RequestLimits:
    """Pure ASGI middleware (streamed responses untouched) enforcing ``HttpLimits``, with ``json_limits``
    in force inside."""

    def __init__(self, app: ASGIApp, limits: HttpLimits, json_limits: JsonLimits = DEFAULT_LIMITS) -> None:
        self.app = app
        self.limits = limits
        self.json_limits = json_limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.limits
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        if len(headers) > limits.max_header_count:
            await refuse(scope, send, 431, f"more than {limits.max_header_count} request headers")
            return
        if sum(map(len, chain.from_iterable(headers))) > limits.max_header_bytes:
            await refuse(
                scope, send, 431, f"the request headers are larger than {limits.max_header_bytes} bytes"
            )
            return
        limit = limits.body_limit(scope["path"], has_header(headers, b"authorization"))
        if limit > limits.max_body_bytes:
            refusal = await address_refusal(scope)
            if refusal is not None:
                http = as_http(refusal)
                await refuse(scope, send, http.status_code, str(http.detail), http.headers)
                return
        declared = declared_length(headers)
        if declared is not None and declared > limit:
            await refuse(scope, send, 413, str(BodyTooLarge(limit).detail))
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limits.body_read_timeout_s
        received = 0
        body_done = False

        async def limited_receive() -> Message:
            nonlocal received, body_done
            if body_done:  # after the body: waiting for a disconnect is not bounded
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):  # a timer, not a task per receive (wait_for)
                    message = await receive()
            except TimeoutError:
                raise BodyTooSlow(limits.body_read_timeout_s) from None
            if message["type"] != "http.request":
                body_done = True
                return message
            received += len(message.get("body", b""))
            if received > limit:
                raise BodyTooLarge(limit)
            body_done = not message.get("more_body", False)
            return message

        noted = NotedSend(send)
        try:
            with limits_in_force(self.json_limits):
                await self.app(scope, limited_receive, noted)
        except (BodyTooLarge, BodyTooSlow) as exc:  # raised where no handler answered it (a mounted app)
            if noted.status is not None:
                raise
            await refuse(scope, send, exc.status_code, str(exc.detail))


async def refuse(
    scope: Scope, send: Send, status_code: int, message: str, headers: Mapping[str, str] | None = None
) -> None:
    """Answer ``status_code`` without reading the body, and close the connection after it."""

    async def no_body() -> Message:
        return {"type": "http.disconnect"}

    response = error_response(Request(scope), status_code, message, {**(headers or {}), **CLOSE})
    await response(scope, no_body, send)
