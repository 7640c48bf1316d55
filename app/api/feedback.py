"""POST /feedback and /feedback/batch: rewards, costs and output embeddings for decisions."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from app import gateway
from app.deps import Ctx, CurrentTenant, Session
from app.schemas import FeedbackAccepted, FeedbackBatch, FeedbackBatchAccepted, FeedbackRequest

router = APIRouter(prefix="/feedback", tags=["feedback"])


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=FeedbackAccepted)
async def feedback(
    body: FeedbackRequest, ctx: Ctx, session: Session, tenant: CurrentTenant
) -> FeedbackAccepted:
    """Record one event. Idempotent on (decision_id, model, kind): a retry returns the first event id
    with ``duplicate: true`` and is learned once. 202 means committed to the log."""
    return (await gateway.record_feedback(ctx, session, tenant, [body]))[0]


@router.post("/batch", status_code=status.HTTP_202_ACCEPTED, response_model=FeedbackBatchAccepted)
async def feedback_batch(
    body: FeedbackBatch, ctx: Ctx, session: Session, tenant: CurrentTenant
) -> FeedbackBatchAccepted:
    """Record several events in one transaction: all are accepted, or none (the error names the event)."""
    if len(body.events) > ctx.settings.max_feedback_batch:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            f"{len(body.events)} events in one batch; the limit is {ctx.settings.max_feedback_batch}",
        )
    return FeedbackBatchAccepted(events=await gateway.record_feedback(ctx, session, tenant, body.events))
