"""The trusted-routing figures of a router's stats: cost pacing and the incumbent check.

Replica-consistent by construction: lambda_t, the pacer's spend and the margins come from the policy
state this process folded (``PolicyStates``, the same events in id order on every replica; the
response names the newest event folded, so two replicas can be compared at equal watermarks), and the
shares and costs from the decisions and feedback tables (``app/store/stats.incumbent_stats``), never from
what one process served.

A router with both a cost target and an incumbent check has a ``conflict`` block: the floor wins over
the target, so when the pacer's spend per request is above the target while the check holds decisions
on the incumbent (``app/store/stats.floor_hold``), the target cannot be met and the block says so, with
the spend the floor holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.admin_views import CostConflict, PacingStats, SafetyStats, TrustedStats
from app.context import AppContext
from app.store.models import DecisionRow, Router
from app.store.stats import FloorHold, IncumbentStats, floor_hold, incumbent_stats
from app.timewindow import Window
from routers.conservative import CONSERVATIVE_KEYS
from routers.cost_aware import COST_KEYS
from routers.paced_cascade import PACING_KEYS
from routers.prices import CallPrices, call_cost, estimated_tokens
from routers.trusted_report import PacingReport, SafetyReport, pacing_report, safety_report

TRUSTED_KEYS = frozenset((*COST_KEYS, *CONSERVATIVE_KEYS, *PACING_KEYS))


def uses_trusted_keys(hyperparameters: Mapping[str, Any]) -> bool:
    """Whether a router's hyperparameters set any key of the wrappers (else there is nothing to show)."""
    return any(v is not None for k, v in hyperparameters.items() if k in TRUSTED_KEYS)


def share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


async def latest_incumbent(session: AsyncSession, router_id: int) -> str | None:
    """The incumbent the router's newest checked decision was checked against (the default incumbent,
    the highest-priced candidate, is chosen per decision)."""
    incumbent = DecisionRow.info["incumbent"].as_string()
    found = await session.scalar(
        select(incumbent)
        .where(DecisionRow.router_id == router_id, incumbent.is_not(None))
        .order_by(DecisionRow.created_at.desc(), DecisionRow.id.desc())
        .limit(1)
    )
    return None if found is None else str(found)


def incumbent_estimate(prices: CallPrices, decisions: int, chars: int, tokens_out: int) -> float:
    """USD of ``decisions`` calls of the incumbent on prompts of ``chars`` characters in all: the
    gateway's expected cost of a call (prompt characters / 4 input tokens, ``default_tokens_out``
    output tokens) summed, which is linear in the characters."""
    if decisions == 0:
        return 0.0
    return decisions * call_cost(prices, estimated_tokens(chars) / decisions, tokens_out)


async def incumbent_costs(ctx: AppContext, found: IncumbentStats) -> tuple[float, float] | None:
    """(cost of the checked decisions, estimated cost of calling only their incumbents); None when
    none reported a cost or an incumbent backend no longer exists."""
    if not found.costs:
        return None
    backends = {b.name: b for b in await ctx.catalog.backends(sorted(found.costs))}
    actual = reference = 0.0
    for name, c in found.costs.items():
        backend = backends.get(name)
        if backend is None:
            return None
        actual += c.cost
        estimate = incumbent_estimate(backend, c.unobserved, c.unobserved_chars, backend.default_tokens_out)
        reference += c.incumbent_cost + estimate
    return actual, reference


async def safety_stats(
    ctx: AppContext, session: AsyncSession, row: Router, window: Window, report: SafetyReport
) -> SafetyStats:
    found = await incumbent_stats(session, row.id, window)
    costs = await incumbent_costs(ctx, found)
    actual, reference = (None, None) if costs is None else costs
    saved = None if costs is None else costs[1] - costs[0]
    return SafetyStats(
        incumbent=report.incumbent,
        max_loss=report.max_loss,
        margin=report.margin,
        floor_margin=report.floor_margin,
        incumbent_rounds=report.incumbent_rounds,
        other_rounds=report.other_rounds,
        checked=found.checked,
        forced=found.forced,
        chosen=found.chosen,
        off_incumbent=found.off_incumbent,
        forced_share=share(found.forced, found.checked),
        chosen_share=share(found.chosen, found.checked),
        off_share=share(found.off_incumbent, found.checked),
        cost=actual,
        incumbent_cost=reference,
        cost_saved=saved,
        cost_saved_share=None if saved is None or not reference else saved / reference,
    )


def pacing_stats(report: PacingReport) -> PacingStats:
    per_request, target = report.spend_per_request, report.cost_target
    return PacingStats(
        cost_multiplier=report.cost_multiplier,
        cost_weight=report.cost_weight,
        cost_target=target,
        requests=report.requests,
        spent=report.spent,
        spend_per_request=per_request,
        spend_vs_target=None if per_request is None or not target else per_request / target,
    )


def cost_conflict(pacing: PacingStats, checked: int, hold: FloorHold) -> CostConflict | None:
    """The ``conflict`` block (module doc) of a router with a target and a check; None without a target."""
    target, spend = pacing.cost_target, pacing.spend_per_request
    if target is None:
        return None
    over = spend is not None and spend > target and hold.held > 0
    message = None
    if over and spend is not None:
        message = (
            f"the cost target {target:.6g} USD per request cannot be met under the floor: it holds the spend "
            f"at {spend:.6g} USD per request ({spend / target:.0%} of the target; decisions held on the "
            f"incumbent: {hold.held}); the floor wins"
        )
    return CostConflict(
        floor_over_target=over,
        cost_target=target,
        spend_per_request=spend,
        spend_vs_target=pacing.spend_vs_target,
        held=hold.held,
        held_share=share(hold.held, checked),
        held_cost=hold.cost,
        evidence=hold.evidence,
        message=message,
    )


async def trusted_stats(
    ctx: AppContext, session: AsyncSession, row: Router, window: Window
) -> TrustedStats | None:
    """The figures of the module docstring; None for a router without any trusted-routing key."""
    if not uses_trusted_keys(row.hyperparameters or {}):
        return None
    runtime = await ctx.states.get(row)
    pacing = pacing_report(runtime.policy)
    configured = (row.hyperparameters or {}).get("incumbent")
    fallback = None if configured is not None else await latest_incumbent(session, row.id)
    safety = safety_report(runtime.policy, fallback)
    if pacing is None and safety is None:
        return None
    paced = None if pacing is None else pacing_stats(pacing)
    checked = None if safety is None else await safety_stats(ctx, session, row, window, safety)
    conflict = None
    if paced is not None and checked is not None:
        conflict = cost_conflict(paced, checked.checked, await floor_hold(session, row.id, window))
    return TrustedStats(
        last_event_id=runtime.last_event_id,
        events_folded=runtime.events_folded,
        pacing=paced,
        safety=checked,
        conflict=conflict,
    )
