"""``GET /metrics`` (Prometheus text format) and the ASGI middleware that times every request.

The middleware labels a request with its route template (``/admin/decisions/{decision_id}``, not the
raw path) so the label set stays small; requests that match no route are labelled ``<unmatched>``.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.metrics import UNMATCHED_ROUTE, exposition, observe_request

router = APIRouter(tags=["metrics"])


@router.get("/metrics", include_in_schema=False)
async def metrics() -> Response:
    body, content_type = exposition()
    return Response(content=body, media_type=content_type)


class RequestMetrics:
    """Pure ASGI middleware (streams responses untouched): latency, responses and errors per route."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status_code = 500

        async def send_and_record(message: Message) -> None:
            nonlocal status_code
            if message["type"] == "http.response.start":
                status_code = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            route = scope.get("route")
            template = getattr(route, "path_format", None) or getattr(route, "path", None) or UNMATCHED_ROUTE
            observe_request(scope["method"], str(template), status_code, time.perf_counter() - start)
