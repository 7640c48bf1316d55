"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from sqlalchemy import text

from app.api.deps import Ctx

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    responses={503: {"description": "The database or Redis does not answer", "model": dict[str, object]}},
)
async def readyz(ctx: Ctx, response: Response) -> dict[str, object]:
    """The database answers, and Redis too when configured; 503 otherwise."""
    checks: dict[str, str] = {}
    try:
        async with ctx.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    if ctx.redis is not None:
        checks["redis"] = "ok" if await ctx.bus.ping() else "error: no answer"
    ready = all(v == "ok" for v in checks.values())
    if not ready:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return {"status": "ready" if ready else "not ready", "checks": checks}
