"""Client-driven cascades: ``POST /route/{decision_id}/next``, and re-asking a policy for its next choice.

A client that called a decision's model and judged the answer not good enough reports that step (a
``cascade-step`` feedback event, when it carries a reward or a cost) and asks what to call next:

- a fixed cascade (several ``models``, not ``adaptive``) continues with its next model not yet tried;
- otherwise (single decisions, adaptive cascades) the policy is asked again with the decision's stored
  embedding, its per-decision generator, its id as ``Context.decision_key`` (the key its feedback
  events carry, so a policy's per-decision state finds this cascade) and ``Context(tried=[...])``
  (``reselect``), as the forwarding fallback does.

The answer is the next model, or ``stop`` when nothing is left or the policy declines. The models offered
so far are kept in the decision's ``info.offered`` so a step that names no model means the last one."""

from __future__ import annotations

import logging

import numpy as np
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.context import AppContext
from app.jsonable import jsonable
from app.routing.decide import decision_rng, expected_costs
from app.routing.errors import Invalid, NotFound
from app.routing.feedback import FeedbackReport, record_feedback
from app.schemas import CascadeNextRequest, CascadeNextResponse
from app.store.models import DecisionRow, Router, Tenant
from routers.base import Context, Decision

log = logging.getLogger(__name__)


async def reselect(
    ctx: AppContext,
    session: AsyncSession,
    row: DecisionRow,
    router: Router,
    tried: list[str],
    candidates: list[str] | None = None,
) -> Decision | None:
    """The policy's decision for the same prompt with ``tried`` excluded; None if the policy raises."""
    context = Context(
        embedding=np.frombuffer(row.embedding, dtype=np.float32).copy(),
        arms=candidates,
        costs=await expected_costs(ctx, list(router.arms), row.prompt_chars),
        tried=list(tried),
        rng=decision_rng(router.seed, row.id, (row.info or {}).get("seed")),
        decision_key=row.id,
    )
    runtime = await ctx.states.get(router)
    try:
        return runtime.policy.select(context)
    except Exception:  # a policy that cannot re-select must not turn a clean answer into a 500
        log.exception("re-selecting after %s failed for decision %s", tried, row.id)
        return None


async def next_step(
    ctx: AppContext, session: AsyncSession, tenant: Tenant, decision_id: str, body: CascadeNextRequest
) -> CascadeNextResponse:
    row = await session.scalar(
        select(DecisionRow).where(DecisionRow.id == decision_id, DecisionRow.tenant_id == tenant.id)
    )
    if row is None:
        raise NotFound(f"decision {decision_id!r} not found")
    info = dict(row.info or {})
    offered = [str(m) for m in info.get("offered") or row.models[:1]]
    failed = body.model or (offered[-1] if offered else None)
    if failed is None:
        raise Invalid("the decision called no model; name the step's model")
    if body.reward is not None or body.cost is not None:
        step = FeedbackReport(
            decision_id=decision_id,
            model=failed,
            kind="cascade-step",
            reward=body.reward,
            cost=body.cost,
            metadata=body.metadata,
        )
        await record_feedback(ctx, tenant, [step])
    tried = [*offered, failed] if failed not in offered else offered
    scores: dict[str, dict[str, float | None]] = {}
    untried = [m for m in row.models if m not in tried]
    model: str | None
    if untried and not info.get("adaptive"):
        model = untried[0]
    else:
        router = await ctx.catalog.router_by_id(row.router_id) if row.router_id is not None else None
        decision = await reselect(ctx, session, row, router, tried) if router is not None else None
        model = decision.arm if decision is not None and decision.arm not in tried else None
        scores = jsonable(decision.scores) if decision is not None else {}
    row.info = {**info, "offered": [*tried, model] if model is not None else tried}
    await session.commit()
    return CascadeNextResponse(
        decision_id=decision_id, model=model, stop=model is None, tried=tried, scores=scores
    )
