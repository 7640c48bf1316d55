"""POST /feedback and /feedback/batch: rewards, costs and output embeddings for decisions;
GET /feedback/pending: the active-learning probes and shadow calls waiting for a reward
(app/routing/probes.py)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query, status

from app.api.contract import documented
from app.api.deps import Ctx, CurrentTenant
from app.context import AppContext
from app.input_types import DbInt
from app.routing import probes
from app.routing.feedback import FeedbackReport, record_feedback
from app.schemas import (
    FeedbackAccepted,
    FeedbackBatch,
    FeedbackBatchAccepted,
    FeedbackRequest,
    PendingProbe,
    PendingProbes,
)
from app.store.models import Tenant

router = APIRouter(prefix="/feedback", tags=["feedback"])


async def accept(ctx: AppContext, tenant: Tenant, bodies: list[FeedbackRequest]) -> list[FeedbackAccepted]:
    """Record the events (app/routing/feedback.py), then mark the probes their query and shadow rewards
    answer."""
    reports = [FeedbackReport(**body.model_dump()) for body in bodies]
    accepted = await record_feedback(ctx, tenant, reports)
    await probes.mark_answered(ctx, accepted)
    return accepted


@router.post(
    "", status_code=status.HTTP_202_ACCEPTED, response_model=FeedbackAccepted, responses=documented(404)
)
async def feedback(body: FeedbackRequest, ctx: Ctx, tenant: CurrentTenant) -> FeedbackAccepted:
    """Record one event. Idempotent on (decision_id, model, kind): a retry returns the first event id
    with ``duplicate: true`` and is learned once. 202 means committed to the log."""
    return (await accept(ctx, tenant, [body]))[0]


@router.post(
    "/batch",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=FeedbackBatchAccepted,
    responses=documented(404),
)
async def feedback_batch(body: FeedbackBatch, ctx: Ctx, tenant: CurrentTenant) -> FeedbackBatchAccepted:
    """Record several events in one transaction: all are accepted, or none (the error names the event)."""
    if len(body.events) > ctx.settings.max_feedback_batch:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            f"{len(body.events)} events in one batch; the limit is {ctx.settings.max_feedback_batch}",
        )
    return FeedbackBatchAccepted(events=await accept(ctx, tenant, body.events))


@router.get("/pending", response_model=PendingProbes)
async def pending_probes(
    ctx: Ctx,
    tenant: CurrentTenant,
    limit: int = Query(100, ge=1, le=1000),
    cursor: DbInt | None = Query(None, description="next_cursor of the previous page"),
) -> PendingProbes:
    """The tenant's answers of other models the gateway called off the client's path (active-learning
    probes, ``kind: query``; shadow calls, ``kind: shadow``) still waiting for a reward, oldest first.
    Post feedback of the item's ``kind`` for (decision_id, model) to answer one: it is then no longer
    listed, and the policy learns the reward as an observation of that kind (a shadow grade is evidence
    about the model, never a served reward)."""
    rows, next_cursor = await probes.pending(ctx, tenant, limit, cursor)
    return PendingProbes(
        probes=[
            PendingProbe(
                probe_id=p.id,
                decision_id=p.decision_id,
                model=p.model,
                kind=p.kind,
                prompt_hash=prompt_hash,
                answer=p.answer,
                cost=p.cost,
                created_at=p.created_at,
            )
            for p, prompt_hash in rows
        ],
        next_cursor=next_cursor,
    )
