"""Forwarding, the story in one function: decide (unless given), call with fallback, record the call; an
ensemble or a judged cascade when the decision or its router asks for one.

A decision made here is written by ``record_call``, with its attempts, cost event and its router's counter,
in one transaction after the call; it is durable before the answer, like every decision. Only a policy
that spends a budget on the counter (``counter_use == "exact"``, BALROG) has it counted and committed
alone before the call, so no lock is held during it. One that declines or names a set is written
before anything else, as ``/route`` writes it."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.backends import AttemptRecord
from app.context import AppContext
from app.routing.answers import CHAT_PATH, Decided, Forwarded, answer_text, mixture_output, path_for
from app.routing.costs import answer_cost, record_call
from app.routing.decide import PendingDecision, choose, log_decision
from app.routing.ensemble import forward_ensemble
from app.routing.fallback import call_with_fallback
from app.routing.judge import judged_cascade
from app.routing.kinds import check_serves
from app.schemas import RouteRequest
from app.store.db import commit_if_used
from app.store.models import Tenant


async def forward_json(
    ctx: AppContext,
    session: AsyncSession,
    tenant: Tenant,
    request: RouteRequest,
    body: dict[str, Any],
    decided: Decided | None = None,
) -> Forwarded:
    """Route (unless ``decided`` is the decision already made, with its router), call, record the call; an
    ensemble or a judged cascade when the decision or its router asks for one."""
    path = path_for(body)
    pending: PendingDecision | None = None
    if decided is not None:
        route, router = decided
    else:
        await check_serves(ctx, tenant, request, path)
        route, chosen, pending = await choose(ctx, session, tenant, request)
        router = chosen
        if route.model is None or route.mode == "set":  # answered before any record_call: written now
            await log_decision(ctx, session, tenant, pending)
            pending = None
        else:  # an exact policy's counter alone, or the read of it: nothing held during the call
            await commit_if_used(session)
    attempts: list[AttemptRecord] = []
    if route.mode == "set" and len(route.models) > 1:
        return await forward_ensemble(ctx, session, tenant, request, route, body, path)
    target, payload = await call_with_fallback(
        ctx, session, request, route, body, path, attempts, stream=False, pending=pending
    )
    assert isinstance(payload, dict)
    cost = answer_cost(target, request, payload, path)
    output = mixture_output(route.mode, answer_text(payload)) if path == CHAT_PATH else None
    await record_call(ctx, session, tenant, route.decision_id, target, attempts, cost, output, pending)
    if router is not None and router.judge_url and path == CHAT_PATH:
        return await judged_cascade(
            ctx, session, tenant, request, route, body, router, target, payload, cost, attempts
        )
    return Forwarded(route, target, payload, cost, attempts)
