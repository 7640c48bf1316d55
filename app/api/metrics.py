"""``GET /metrics`` (Prometheus text format) and the ASGI middleware that times every request.

``/metrics`` lists every tenant's routers and traffic, so it needs a bearer token: the metrics token
(``BANDITGATE_METRICS_TOKEN``, for a scraper that should hold nothing more), else the admin key; it is
served to anyone only when ``BANDITGATE_METRICS_PUBLIC=true`` says so.

The middleware labels a request with its route template (``/admin/decisions/{decision_id}``, not the
raw path) so the label set stays small; requests that match no route are labelled ``<unmatched>``.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request, Response, Security, status
from fastapi.security import HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.deps import Credentials, Ctx, admitted_address, bearer_or_401
from app.api.errors import NotedSend
from app.auth import matches_secret
from app.metrics import UNMATCHED_ROUTE, exposition, observe_request

# Parsed as every other key is (app/api/deps.py); the operation is not in the OpenAPI document.
METRICS_KEY = HTTPBearer(scheme_name="metricsToken", auto_error=False)


async def require_metrics_token(
    request: Request, ctx: Ctx, credentials: Annotated[Credentials, Security(METRICS_KEY)]
) -> None:
    """401 unless the bearer is the metrics token (the admin key when none is set); 403 when neither is
    configured and metrics are not explicitly public. A wrong token counts against the caller's
    failed-auth limit, and an address over it gets 429, as on every other endpoint (app/api/deps.py)."""
    settings = ctx.settings
    if settings.metrics_public:
        return
    expected = settings.metrics_token or settings.admin_key
    what = "metrics token" if settings.metrics_token is not None else "admin key"
    if expected is None:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "metrics are disabled: set BANDITGATE_METRICS_TOKEN (or BANDITGATE_ADMIN_KEY), or "
            "BANDITGATE_METRICS_PUBLIC=true",
        )
    token = bearer_or_401(credentials, what)
    address = await admitted_address(request, ctx)
    if not matches_secret(token, expected.get_secret_value()):
        await ctx.limiter.count_failure(address)
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            f"GET /metrics needs 'Authorization: Bearer <{what}>'",
            headers={"WWW-Authenticate": "Bearer"},
        )


router = APIRouter(tags=["metrics"], dependencies=[Depends(require_metrics_token)])


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
        noted = NotedSend(send)
        try:
            await self.app(scope, receive, noted)
        finally:
            route = scope.get("route")
            template = getattr(route, "path_format", None) or getattr(route, "path", None) or UNMATCHED_ROUTE
            status_code = 500 if noted.status is None else noted.status  # no answer: the 500 to come
            observe_request(scope["method"], str(template), status_code, time.perf_counter() - start)
