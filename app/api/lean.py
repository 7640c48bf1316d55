"""Lean routes: the request path's endpoints (``POST /v1/chat/completions``,
``/v1/images/generations``, ``/route``, ``/feedback``, ``/feedback/batch``) bound to their parameters
without FastAPI's per-request dependency solving.

FastAPI still declares these operations: their OpenAPI entries, body and response models come from the
``APIRoute`` as written. A lean route is a Starlette ``Route`` for the same path and method, tried
before it, that calls the same endpoint function with the same arguments, built by a fixed binding
instead of by ``solve_dependencies``: the app context, the request's database session (``get_session``,
closed after the response), the caller's tenant (``current_tenant``: admitted by the rate limiter,
its slot released after the response has been sent, a stream's last byte included) and the body,
read and validated as FastAPI reads it (``request_body_to_args``: the same 422s). A returned model is
serialized by the route's response model, as FastAPI serializes it. Errors propagate to the app's
exception handlers (app/api/errors.py) unchanged.

Why: FastAPI solves an endpoint's dependency tree on every request; for these endpoints (seven
dependants: the context twice, the session, the tenant, its bearer scheme and the request) that costs
about 0.1 ms of CPU per request on the development machine, more than the policy's own choice (issue
13; ``python -m experiments.lean_routes``: 150 against 36 us per request for the framework alone). An
endpoint whose parameters the binding does not know cannot be bound: ``lean_route`` raises at start-up
instead of guessing. While the app has dependency overrides (``app.dependency_overrides``, a test's
stand-ins), a lean route matches nothing, so FastAPI's own route for the operation serves it and
applies them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi.datastructures import DefaultPlaceholder
from fastapi.dependencies.utils import request_body_to_args
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, serialize_response
from fastapi.security import HTTPAuthorizationCredentials
from pydantic_core import PydanticUndefined
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Receive, Scope, Send

from app.api.deps import TENANT_KEY, current_tenant, get_ctx, get_session
from app.context import AppContext

# A parameter's value for one request: (the request, its context, the stack closed after the response)
Binding = Callable[[Request, AppContext, AsyncExitStack], Awaitable[Any]]


# FastAPI's own dependency functions, entered as FastAPI enters a dependency with ``yield``: their exits
# (the session's close, the slot's release) run when the request's stack closes, after the response
session_scope = asynccontextmanager(get_session)
tenant_scope = asynccontextmanager(current_tenant)


async def bind_ctx(request: Request, ctx: AppContext, stack: AsyncExitStack) -> AppContext:
    return ctx


async def bind_session(request: Request, ctx: AppContext, stack: AsyncExitStack) -> Any:
    return await stack.enter_async_context(session_scope(ctx))


async def bind_tenant(request: Request, ctx: AppContext, stack: AsyncExitStack) -> Any:
    credentials: HTTPAuthorizationCredentials | None = await TENANT_KEY(request)
    return await stack.enter_async_context(tenant_scope(request, ctx, credentials))


BINDINGS: dict[Callable[..., Any], Binding] = {
    get_ctx: bind_ctx,
    get_session: bind_session,
    current_tenant: bind_tenant,
}


class Unbindable(Exception):
    """An endpoint with a parameter the lean binding does not know (a programming error)."""


def bindings(route: APIRoute) -> dict[str, Binding]:
    """Each non-body parameter of ``route``'s endpoint with its binding; ``Unbindable`` when one has
    none or the route reads anything but one JSON body (query, path, header or cookie parameters, an
    embedded or form body, router-level dependencies)."""
    dependant = route.dependant
    other = (
        dependant.path_params,
        dependant.query_params,
        dependant.header_params,
        dependant.cookie_params,
    )
    if any(other) or len(dependant.body_params) != 1 or route.dependencies:
        raise Unbindable(f"{route.path}: only one JSON body and the request path's dependencies bind")
    if route.body_field is None or route.body_field.name != dependant.body_params[0].name:
        raise Unbindable(f"{route.path}: an embedded body does not bind")
    bound: dict[str, Binding] = {}
    for dependency in dependant.dependencies:
        binding = BINDINGS.get(dependency.call) if dependency.call is not None else None
        if binding is None or dependency.name is None:
            raise Unbindable(f"{route.path}: dependency {dependency.call!r} has no lean binding")
        bound[dependency.name] = binding
    return bound


async def json_body(request: Request) -> Any:
    """The body as FastAPI's handler reads it: JSON when the content type is ``application/json`` or
    ``application/*+json``, the raw bytes for any other type (left for validation to refuse),
    ``PydanticUndefined`` when empty (a missing body). Invalid JSON is FastAPI's ``json_invalid`` 422,
    a body that cannot be read or decoded at all (not UTF-8, say) its 400; an ``HTTPException`` raised
    while reading (a limit of app/api/http_limits.py) passes through."""
    try:
        raw = await request.body()
        if not raw:
            return PydanticUndefined
        content_type = request.headers.get("content-type", "")
        kind = content_type.split(";", 1)[0].strip().lower()
        main, _, sub = kind.partition("/")
        if main != "application" or not (sub == "json" or sub.endswith("+json")):
            return raw
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        error = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error"}
        raise RequestValidationError(
            [{**error, "input": {}, "ctx": {"error": exc.msg}}], body=exc.doc
        ) from exc
    except HTTPException:
        raise
    except Exception as exc:
        raise HTTPException(status_code=400, detail="There was an error parsing the body") from exc


class LeanEndpoint:
    """The ASGI app of one lean route (an instance, so Starlette passes it the raw ASGI call)."""

    def __init__(self, route: APIRoute) -> None:
        self.route = route
        self.bound = bindings(route)
        self.body_params = route.dependant.body_params
        self.endpoint = route.endpoint
        self.status_code = route.status_code
        self.custom_response = not isinstance(route.response_class, DefaultPlaceholder)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        async with AsyncExitStack() as stack:  # closed after the response has been sent
            response = await self.respond(request, stack)
            await response(scope, receive, send)

    async def respond(self, request: Request, stack: AsyncExitStack) -> Response:
        """In FastAPI's order: the body read (invalid JSON refused first), the dependencies in the
        endpoint's order (a missing key is a 401 before a bad body's 422), then the body validated."""
        received = await json_body(request)
        ctx = await get_ctx(request)
        values: dict[str, Any] = {}
        for name, binding in self.bound.items():
            values[name] = await binding(request, ctx, stack)
        body, errors = await request_body_to_args(self.body_params, received, embed_body_fields=False)
        if errors:
            raise RequestValidationError(errors, body=None if received is PydanticUndefined else received)
        values.update(body)
        answer = await self.endpoint(**values)
        if isinstance(answer, Response):
            return answer
        return await self.serialized(answer)

    async def serialized(self, answer: Any) -> Response:
        """A returned model through the route's response model, as FastAPI's handler serializes it."""
        route = self.route
        status = self.status_code or 200  # a route without one answers its response class's 200
        fast = route.response_field is not None and not self.custom_response
        content = await serialize_response(
            field=route.response_field,
            response_content=answer,
            include=route.response_model_include,
            exclude=route.response_model_exclude,
            by_alias=route.response_model_by_alias,
            exclude_unset=route.response_model_exclude_unset,
            exclude_defaults=route.response_model_exclude_defaults,
            exclude_none=route.response_model_exclude_none,
            dump_json=fast,
        )
        if fast:
            return Response(content=content, media_type="application/json", status_code=status)
        response_class = route.response_class
        cls = response_class.value if isinstance(response_class, DefaultPlaceholder) else response_class
        return cls(content, status_code=status)


class LeanRoute(Route):
    """A Starlette route that names itself in the scope's ``route`` on a match, as FastAPI's routes do
    (FastAPI's router leaves that to the route): the request metrics label requests by its path. It
    matches nothing while the app has dependency overrides."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        app = scope.get("app")
        if app is not None and getattr(app, "dependency_overrides", None):  # FastAPI's route applies them
            return Match.NONE, {}
        match, child_scope = super().matches(scope)
        if match != Match.NONE:
            child_scope["route"] = self
        return match, child_scope


def lean_route(route: APIRoute) -> LeanRoute:
    """A route serving ``route``'s path and methods through ``LeanEndpoint``."""
    return LeanRoute(route.path, LeanEndpoint(route), methods=sorted(route.methods or ()), name=route.name)


def lean_routes(routes: Sequence[BaseRoute], endpoints: Collection[Callable[..., Any]]) -> list[LeanRoute]:
    """The lean routes of the ``APIRoute``s among ``routes`` whose endpoint is one of ``endpoints``
    (each must be found: a renamed endpoint fails the app's start, not its speed)."""
    found = [r for r in routes if isinstance(r, APIRoute) and r.endpoint in endpoints]
    missing = set(endpoints) - {r.endpoint for r in found}
    if missing:
        raise Unbindable(f"no route serves {sorted(getattr(e, '__name__', repr(e)) for e in missing)}")
    return [lean_route(r) for r in found]
