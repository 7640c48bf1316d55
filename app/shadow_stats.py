"""The shadow-evaluation figures of a router's stats (app/routing/shadow.py makes the calls).

From the database, inside the stats window (a call counts where it was created):

- calls: the router's probes of kind ``shadow`` that were made (pending, answered or failed), their
  spend (the sum of their stored costs, which the gateway also records as ``cost`` feedback events, so
  they are in ``cost_total`` and the pacer's spend) and, per status, how many; refusals per reason
  (probes of status ``refused``, ``error`` = the reason);
- served: decisions that called a model; share = calls / served;
- spent_last_day: what the budget ``shadow_usd_per_day`` is checked against (the last 24 h, not the
  window).

Per model, the evidence (n, mean, LCB) comes from the folded policy state (``routers.trusted_report.
evidence_report``), replica-consistent like ``app.trusted_stats``.
"""

from __future__ import annotations

from sqlalchemy import case, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.admin_views import ShadowModel, ShadowStats
from app.context import AppContext
from app.routing.shadow import SHADOW, budget_of, spent_last_day
from app.store.models import DecisionRow, Probe, Router
from app.timewindow import Window
from routers.shadow import SHADOW_KEYS
from routers.trusted_report import evidence_report


async def shadow_stats(
    ctx: AppContext, session: AsyncSession, row: Router, window: Window
) -> ShadowStats | None:
    """The figures of the module docstring; None for a router that sets no shadow key and made no
    shadow call in the window."""
    P, D = Probe, DecisionRow
    hyper = row.hyperparameters or {}
    mine = (
        (P.router_id == row.id)
        & (P.kind == SHADOW)
        & (P.created_at >= window.since)
        & (P.created_at < window.until)
    )
    # an inlined literal, not a bound parameter: SELECT and GROUP BY must be the same expression
    reason = case((P.status == literal_column("'refused'"), P.error))
    per_status = {
        (str(model), str(status), error): (int(n), float(cost or 0.0))
        for model, status, error, n, cost in await session.execute(
            select(P.model, P.status, reason, func.count(), func.sum(P.cost))
            .where(mine)
            .group_by(P.model, P.status, reason)
        )
    }
    if not per_status and all(hyper.get(k) is None for k in SHADOW_KEYS):
        return None
    served = await session.scalar(
        select(func.count()).where(
            D.router_id == row.id,
            D.created_at >= window.since,
            D.created_at < window.until,
            func.json_array_length(D.models) > 0,
        )
    )
    statuses: dict[str, int] = {}
    refused: dict[str, int] = {}
    models: dict[str, ShadowModel] = {}
    runtime = await ctx.states.get(row)
    evidence = evidence_report(runtime.policy)
    for (model, status, reason), (n, cost) in sorted(per_status.items(), key=lambda kv: str(kv[0])):
        if status == "refused":
            refused[str(reason)] = refused.get(str(reason), 0) + n
            continue
        statuses[status] = statuses.get(status, 0) + n
        m = models.setdefault(model, ShadowModel())
        m.calls += n
        m.spend += cost
        m.graded += n if status == "answered" else 0
    for model in dict.fromkeys([*row.arms, *models]):
        m = models.setdefault(model, ShadowModel())
        found = None if evidence is None else evidence.get(model)
        if found is not None:
            m.evidence_n, m.evidence_mean, m.evidence_lcb = found.n, found.mean, found.lcb
    calls = sum(statuses.values())
    spend = sum(m.spend for m in models.values())
    served_n = int(served or 0)
    shadow = hyper.get("shadow")
    return ShadowStats(
        shadow=float(shadow) if isinstance(shadow, int | float) else None,
        budget_usd_per_day=budget_of(hyper),
        spent_last_day=await spent_last_day(ctx, row.id),
        calls=calls,
        pending=statuses.get("pending", 0),
        answered=statuses.get("answered", 0),
        failed=statuses.get("failed", 0),
        spend=spend,
        refused=dict(sorted(refused.items())),
        served=served_n,
        share=calls / served_n if served_n else None,
        last_event_id=runtime.last_event_id,
        models=models,
    )
