"""POST /route: which model(s) to call for a prompt."""

from __future__ import annotations

from fastapi import APIRouter

from app import gateway
from app.deps import Ctx, CurrentTenant, Session
from app.schemas import RouteRequest, RouteResponse

router = APIRouter(tags=["routing"])


@router.post("/route", response_model=RouteResponse)
async def route(body: RouteRequest, ctx: Ctx, session: Session, tenant: CurrentTenant) -> RouteResponse:
    """Embed the prompt, ask the router's policy, log the decision and return it. Send the outcome to
    ``POST /feedback`` with the returned ``decision_id``."""
    return await gateway.route(ctx, session, tenant, body)
