"""POST /route: which model(s) to call for a prompt; with ``forward: true``, the chosen backend's answer."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, HTTPException, status

from app.api.contract import documented
from app.api.deps import Ctx, CurrentTenant, Session
from app.input_types import DecisionId
from app.routing import cascade, decide, forward, probes
from app.routing.turn import routed_turn
from app.schemas import (
    AttemptOut,
    CascadeNextRequest,
    CascadeNextResponse,
    EnsembleMemberOut,
    ForwardedRouteResponse,
    JudgedStepOut,
    RouteRequest,
    RouteResponse,
)

router = APIRouter(tags=["routing"])


@router.post(
    "/route", response_model=ForwardedRouteResponse | RouteResponse, responses=documented(404, 502, 503, 504)
)
async def route(
    body: RouteRequest, ctx: Ctx, session: Session, tenant: CurrentTenant
) -> RouteResponse | ForwardedRouteResponse:
    """Embed the prompt, ask the router's policy, log the decision and return it. Send the outcome to
    ``POST /feedback`` with the returned ``decision_id``. With ``forward: true`` the gateway also calls
    the chosen backend with ``request`` (falling back to the policy's next choice when it fails) and
    returns its answer, the call's cost and every attempt."""
    if not body.forward:
        return await decide.decide(await routed_turn(ctx, session, tenant, body))
    assert body.request is not None
    if body.request.get("stream"):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "streaming is served by POST /v1/chat/completions; /route forwards without 'stream'",
        )
    turn = await routed_turn(ctx, session, tenant, body, body.request)
    done = await forward.forward_json(turn)
    probes.schedule(turn, done)
    return ForwardedRouteResponse(
        **done.route.model_dump(),
        backend=done.target.name,
        response=done.payload,
        cost=done.cost,
        attempts=[AttemptOut.model_validate(a, from_attributes=True) for a in done.attempts],
        ensemble=None
        if done.members is None
        else [
            EnsembleMemberOut(backend=m.backend, response=m.payload, cost=m.cost, error=m.error)
            for m in done.members
        ],
        judged=None if done.judged is None else [JudgedStepOut(**asdict(step)) for step in done.judged],
    )


@router.post("/route/{decision_id}/next", response_model=CascadeNextResponse)
async def next_step(
    decision_id: DecisionId, body: CascadeNextRequest, ctx: Ctx, tenant: CurrentTenant
) -> CascadeNextResponse:
    """Client-driven cascade: report the step that did not satisfy (its reward/cost are recorded as a
    ``cascade-step`` event) and get the next model to call, or ``stop``."""
    return await cascade.next_step(ctx, tenant, decision_id, body)
