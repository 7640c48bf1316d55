"""Admin: a router's judge measured on a labelled set (app/routing/judge_labels.py)."""

from __future__ import annotations

from fastapi import APIRouter

from app import catalog_admin
from app.api.deps import AdminOnly, Ctx, Session
from app.catalog_admin import Announcements, deliver, get_router, get_tenant
from app.input_types import Text
from app.routing.judge_labels import measure_judge
from app.schemas import JudgeLabels, JudgeMeasured

router = APIRouter(
    prefix="/admin/tenants/{tenant}/routers", tags=["admin: routers"], dependencies=[AdminOnly]
)


@router.post("/{name}/judge/labels", response_model=JudgeMeasured)
async def measure_router_judge(
    tenant: Text, name: Text, body: JudgeLabels, ctx: Ctx, session: Session
) -> JudgeMeasured:
    """Run the router's judge on each labelled (prompt, answer, reward) and answer its TPR, TNR and
    Pearson correlation with the true rewards; they are kept as the router's ``judge`` stats (GET
    .../stats) until the next measurement. With ``apply: true`` they also become the router's
    ``judge_tpr`` / ``judge_tnr`` (PromptWise's Bayes correction; 422, nothing stored, when the policy
    takes no such hyperparameter or a rate could not be measured)."""
    owner = await get_tenant(session, tenant)
    row = await get_router(session, owner, name)
    await session.commit()  # no pooled connection held during the judge's calls
    result = await measure_judge(ctx, row, body.labels)
    news = Announcements()
    row = await get_router(session, owner, name)
    if body.apply:
        await catalog_admin.set_judge_rates(session, row, result.tpr, result.tnr, ctx.embeddings.dim, news)
    row.judge_measured = result.model_dump(mode="json")
    await session.commit()
    await deliver(ctx, news)
    return result
