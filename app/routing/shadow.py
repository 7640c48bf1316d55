"""Shadow evaluation's bounds and grading rules (the calls themselves are probes of kind ``shadow``,
app/routing/probes.py).

A policy's ``decision.shadow`` names models the gateway calls as well, off the client's path; their
answers are stored as pending probes and graded by ``kind: shadow`` feedback. Each call is bounded:

- concurrency: at most ``shadow_concurrency`` shadow calls run at once per process; one over that is
  refused when it is scheduled (``ShadowSlots.take``), never queued;
- budget: a router's hyperparameter ``shadow_usd_per_day`` caps its shadow spend over any 24 h. A call
  is refused unless spent + reserved + expected <= budget, where spent is the cost of the router's
  stored shadow calls created in the last 24 h (``spent_last_day``), reserved the expected cost of its
  shadow calls in flight in this process, and expected the call's expected cost (prompt characters / 4
  input tokens and the backend's ``default_tokens_out``, as ``decide.expected_costs``). Replicas do not
  see each other's calls in flight: across N replicas the overshoot is at most N - 1 calls in flight.

A refused call is stored as a probe of status ``refused`` whose ``error`` is the reason (so the stats
count refusals from the database, whichever replica refused) and counted in
``banditgate_shadow_refused_total{reason}``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select

from app import metrics
from app.context import AppContext
from app.routing.errors import Invalid
from app.store.ledger import LedgerWrite
from app.store.models import Probe, utcnow

SHADOW = "shadow"
BUDGET_KEY = "shadow_usd_per_day"  # a field of routers.shadow.ShadowHyperparameters
BUDGET_PERIOD = timedelta(days=1)
GRADABLE = ("pending", "answered")  # a shadow call that answered: failed and refused ones did not


def budget_of(hyperparameters: Mapping[str, Any] | None) -> float | None:
    """The router's ``shadow_usd_per_day`` (None: unbounded)."""
    value = (hyperparameters or {}).get(BUDGET_KEY)
    return float(value) if isinstance(value, int | float) else None


async def spent_last_day(ctx: AppContext, router_id: int) -> float:
    """USD of the router's stored shadow calls created in the last 24 h."""
    since = utcnow() - BUDGET_PERIOD
    async with ctx.sessionmaker() as session:
        found = await session.scalar(
            select(func.sum(Probe.cost)).where(
                Probe.router_id == router_id, Probe.kind == SHADOW, Probe.created_at >= since
            )
        )
    return float(found or 0.0)


async def store_refusal(ctx: AppContext, row: Mapping[str, Any], names: tuple[str, str], reason: str) -> None:
    """Count a refused shadow call (``names``: tenant and router) and store it as a ``refused`` probe."""
    metrics.count_shadow_refused(*names, reason)
    refused = {**row, "kind": SHADOW, "status": "refused", "error": reason, "answer": None, "cost": None}
    await ctx.ledger.write(LedgerWrite(probes=[refused]))


async def called(ctx: AppContext, tenant_id: int, decision_id: str, model: str) -> bool:
    """Whether the gateway made a shadow call of ``model`` for this tenant's decision (its probe row,
    whatever its status)."""
    async with ctx.sessionmaker() as session:
        found = await session.scalar(
            select(Probe.id).where(
                Probe.tenant_id == tenant_id,
                Probe.kind == SHADOW,
                Probe.decision_id == decision_id,
                Probe.model == model,
            )
        )
    return found is not None


async def check_graded(ctx: AppContext, tenant_id: int, pairs: list[tuple[str, str]]) -> None:
    """Invalid unless each (decision id, model) of ``kind: shadow`` feedback has a shadow answer of
    this tenant's (a probe of kind shadow, pending or answered): shadow feedback grades the gateway's
    shadow calls, never a served answer."""
    if not pairs:
        return
    async with ctx.sessionmaker() as session:
        found = set(
            (
                await session.execute(
                    select(Probe.decision_id, Probe.model).where(
                        Probe.tenant_id == tenant_id,
                        Probe.kind == SHADOW,
                        Probe.status.in_(GRADABLE),
                        Probe.decision_id.in_({d for d, _ in pairs}),
                    )
                )
            ).all()
        )
    for decision_id, model in pairs:
        if (decision_id, model) not in found:
            raise Invalid(
                f"decision {decision_id!r} has no shadow answer of model {model!r}: kind 'shadow' grades "
                "the shadow calls the gateway made (GET /feedback/pending lists them); a served answer "
                "is graded with kind 'bandit', an active-learning probe with kind 'query'"
            )
