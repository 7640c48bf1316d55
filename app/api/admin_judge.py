"""Admin: a router's judge measured on a labelled set (app/routing/judge_labels.py)."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import update

from app.api.deps import AdminOnly, Ctx, Session
from app.catalog_admin import get_router, get_tenant
from app.input_types import Text
from app.routing.judge_labels import measure_judge
from app.schemas import JudgeLabels, JudgeMeasured
from app.store.models import Router

router = APIRouter(
    prefix="/admin/tenants/{tenant}/routers", tags=["admin: routers"], dependencies=[AdminOnly]
)


@router.post("/{name}/judge/labels", response_model=JudgeMeasured)
async def measure_router_judge(
    tenant: Text, name: Text, body: JudgeLabels, ctx: Ctx, session: Session
) -> JudgeMeasured:
    """Run the router's judge on each labelled (prompt, answer, reward) and answer its TPR, TNR and
    Pearson correlation with the true rewards; they are kept as the router's ``judge`` stats (GET
    .../stats) until the next measurement. Set PromptWise's ``judge_tpr`` / ``judge_tnr`` from them."""
    owner = await get_tenant(session, tenant)
    row = await get_router(session, owner, name)
    await session.commit()  # no pooled connection held during the judge's calls
    result = await measure_judge(ctx, row, body.labels)
    stored = result.model_dump(mode="json")
    await session.execute(update(Router).where(Router.id == row.id).values(judge_measured=stored))
    await session.commit()
    return result
