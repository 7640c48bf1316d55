"""What FastAPI's per-request dependency solving costs, beside a lean binding and a bare Starlette route:
``python -m experiments.lean_routes``.

Three endpoints of one small FastAPI app, each called straight through the ASGI interface (no client,
no socket, none of the gateway's middlewares), with the same JSON body and bearer key:

- ``four``: the shape of the gateway's hot endpoints before app/api/lean.py: a body and three
  dependencies (the context, a session from an async generator that needs the context, the tenant from
  an async generator that needs the request, the context and an ``HTTPBearer`` security scheme);
- ``one``: the same values from one dependency (the request and the security scheme only);
- ``lean``: a Starlette route that binds them itself, as app/api/lean.py does (the scheme called
  directly, the generators entered on an exit stack closed after the response, the body validated by
  FastAPI's ``request_body_to_args``);
- ``raw``: a Starlette route that parses the JSON and answers, the floor.

Process CPU microseconds per request, medians over ``--rounds`` rounds of ``--requests`` each, the
endpoints taking turns within each round (experiments/alternating_cpu.py). experiments/ is not packaged and may import app/.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, MutableMapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Request, Security
from fastapi.dependencies.utils import request_body_to_args
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from experiments.alternating_cpu import alternate, counted_parser, cpu_us_per_op, report

KEY = HTTPBearer(auto_error=False)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(KEY)]
BODY = json.dumps({"model": "router", "messages": [{"role": "user", "content": "hello"}]}).encode()


async def get_ctx(request: Request) -> Any:
    return request.app


Ctx = Annotated[Any, Depends(get_ctx)]


async def get_session(ctx: Ctx) -> AsyncIterator[object]:
    yield object()


async def current_tenant(request: Request, ctx: Ctx, credentials: Credentials) -> AsyncIterator[str]:
    yield "tenant"


async def everything(request: Request, credentials: Credentials) -> AsyncIterator[tuple[Any, str, object]]:
    yield request.app, "tenant", object()


def build() -> FastAPI:
    app = FastAPI()

    @app.post("/four")
    async def four(
        body: Annotated[dict[str, Any], Body()],
        ctx: Ctx,
        session: Annotated[object, Depends(get_session)],
        tenant: Annotated[str, Depends(current_tenant)],
    ) -> Response:
        return JSONResponse({"ok": 1})

    @app.post("/one")
    async def one(
        body: Annotated[dict[str, Any], Body()], scope: Annotated[Any, Depends(everything)]
    ) -> Response:
        return JSONResponse({"ok": 1})

    route = next(r for r in app.routes if isinstance(r, APIRoute) and r.path == "/four")

    class Lean:
        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            request = Request(scope, receive, send)
            async with AsyncExitStack() as stack:
                received = json.loads(await request.body())
                credentials = await KEY(request)
                ctx = request.app
                session = await stack.enter_async_context(asynccontextmanager(get_session)(ctx))
                tenant = await stack.enter_async_context(
                    asynccontextmanager(current_tenant)(request, ctx, credentials)
                )
                _values, errors = await request_body_to_args(
                    route.dependant.body_params, received, embed_body_fields=False
                )
                assert not errors and session is not None and tenant
                await JSONResponse({"ok": 1})(scope, receive, send)

    async def raw(request: Request) -> Response:
        json.loads(await request.body())
        return JSONResponse({"ok": 1})

    app.router.routes[0:0] = [Route("/lean", Lean(), methods=["POST"]), Route("/raw", raw, methods=["POST"])]
    return app


async def call(app: FastAPI, path: str) -> None:
    headers = [
        (b"host", b"bench"),
        (b"content-type", b"application/json"),
        (b"authorization", b"Bearer bg-key"),
        (b"content-length", str(len(BODY)).encode()),
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("bench", 80),
        "state": {},
    }
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": BODY, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        return None

    await app(scope, receive, send)


async def measure(requests: int, rounds: int) -> dict[str, float]:
    """Median CPU us per request of each endpoint, the endpoints taking turns in every round."""
    app = build()
    paths = ("/four", "/one", "/lean", "/raw")
    for path in paths:  # warm-up
        for _ in range(200):
            await call(app, path)

    async def requests_to(path: str) -> None:
        for _ in range(requests):
            await call(app, path)

    async def one_round(path: str) -> float:
        return await cpu_us_per_op(requests_to(path), requests)

    return await alternate(paths, one_round, rounds)


def main() -> None:
    parser = counted_parser(__doc__ or "", "requests", "per endpoint per round", default=3000, rounds=5)
    args = parser.parse_args()
    report(asyncio.run(measure(args.operations, args.rounds)), "request", args.rounds)


if __name__ == "__main__":
    main()
