"""The warm-start figures of a router's stats: the offline events (logged outcomes uploaded through
``POST .../observations`` or imported from direct calls) the router holds, per model.

- stored: the router's offline events in the event log, all time (logs are not traffic of a window);
- folded: those the state this process serves has learned, i.e. ids in (base, last_event_id], where
  base is the watermark of the router's newest ``reset`` or ``import`` snapshot (state replaced there,
  so the events at or below it are stored but no longer learned) and last_event_id the newest event the
  state folded (``app.state.RouterRuntime``);
- pending: stored events above last_event_id, not folded yet by this process.

Replica-consistent like ``app.trusted_stats``: counts come from the event log and the folded watermark,
so two replicas at the same watermark report the same figures.
"""

from __future__ import annotations

from sqlalchemy import case, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.admin_views import WarmStartModel, WarmStartStats
from app.context import AppContext
from app.routing.offline import OFFLINE
from app.store.models import FeedbackEvent, Router, Snapshot

STATE_REPLACING = ("reset", "import")


async def learning_base(session: AsyncSession, router_id: int) -> int:
    """The watermark of the router's newest reset or import snapshot (0 when none)."""
    found = await session.scalar(
        select(func.max(Snapshot.watermark)).where(
            Snapshot.router_id == router_id, Snapshot.kind.in_(STATE_REPLACING)
        )
    )
    return int(found or 0)


async def warm_start_stats(ctx: AppContext, session: AsyncSession, row: Router) -> WarmStartStats | None:
    """Per model: offline events stored, folded into the served state, and their mean reward; None for a
    router without any offline event (the state is not loaded for it)."""
    F = FeedbackEvent
    mine = (F.router_id == row.id) & (F.kind == OFFLINE)
    if await session.scalar(select(F.id).where(mine).limit(1)) is None:  # any, not how many
        return None
    base = await learning_base(session, row.id)
    last = (await ctx.states.get(row)).last_event_id
    folded = case(((F.id > base) & (F.id <= last), 1), else_=0)
    pending = case((F.id > last, 1), else_=0)
    models: dict[str, WarmStartModel] = {}
    for model, stored, n_folded, n_pending, rewarded, reward_sum in await session.execute(
        select(
            F.model,
            func.count(),
            func.sum(folded),
            func.sum(pending),
            func.count(F.reward),
            func.sum(F.reward),
        )
        .where(mine)
        .group_by(F.model)
        .order_by(F.model)
    ):
        models[str(model)] = WarmStartModel(
            stored=int(stored),
            folded=int(n_folded or 0),
            pending=int(n_pending or 0),
            reward_mean=float(reward_sum) / int(rewarded) if rewarded else None,
        )
    return WarmStartStats(
        last_event_id=last,
        learned_after=base,
        stored=sum(m.stored for m in models.values()),
        folded=sum(m.folded for m in models.values()),
        pending=sum(m.pending for m in models.values()),
        models=models,
    )
