"""Extra calls of a forwarded decision, made by the gateway off the client's path: active-learning
probes (``decision.query``, BALROG; kind ``query``) and shadow calls (``decision.shadow``; kind
``shadow``, bounded as app/routing/shadow.py says).

After a forwarded decision whose ``query`` or ``shadow`` is non-empty, ``schedule`` starts one
background task per model (never awaited by the client's request; at most ``probe_concurrency`` query
calls run at once per process, queued beyond; at most ``shadow_concurrency`` shadow calls, refused
beyond). Each task sends the client's request to that model's backend; an answer is stored as a
``pending`` row of ``probes`` of its kind (its text and cost) and its cost is recorded as a ``cost``
feedback event through ``record_feedback`` (app/routing/feedback.py); a failed call is stored as
``failed`` with the error. Evaluators list the pending rows with ``GET /feedback/pending`` and post
feedback of the row's kind (``query`` or ``shadow``), which folds as an observation of that kind;
``POST /feedback`` then marks the row ``answered`` (``mark_answered``). A router with a judge has each
stored chat answer graded by it at once (``app.routing.judge.grade_probe``: the grade is the row's
reward of its kind, the judge's cost is added to the row's cost event)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Exists, exists, select

from app.backends import AttemptRecord, BackendFailure
from app.context import AppContext
from app.routing import shadow
from app.routing.answers import CHAT_PATH, Forwarded, Stream, contents, path_for
from app.routing.costs import answer_cost
from app.routing.decide import expected_costs
from app.routing.errors import NotFound
from app.routing.fallback import load_target
from app.routing.feedback import FeedbackReport, record_feedback
from app.routing.judge import grade_probe
from app.routing.probe_tasks import ProbeRunner
from app.routing.turn import Turn
from app.schemas import FeedbackAccepted, RouteRequest, RouteResponse
from app.store.ledger import LedgerWrite, OwnerDeleted
from app.store.models import DecisionRow, FeedbackEvent, Probe, Tenant

log = logging.getLogger(__name__)


def runner(ctx: AppContext) -> ProbeRunner:
    if ctx.probes is None:
        ctx.probes = ProbeRunner(ctx.settings.probe_concurrency, ctx.settings.shadow_concurrency)
    return ctx.probes


def schedule(turn: Turn, done: Forwarded | Stream) -> None:
    """Start the probes of the turn's decision's ``query`` and ``shadow`` other than the models whose
    answers the client got (``done``: an ensemble's members that answered, else the one that answers);
    a model in both is called once, as a query."""
    route, body = done.route, turn.body or {}
    members = done.members if isinstance(done, Forwarded) else None
    answered = (
        [done.target.name] if members is None else [m.backend for m in members if m.payload is not None]
    )
    queried = [m for m in dict.fromkeys(route.query) if m not in answered]
    shadowed = [m for m in dict.fromkeys(turn.shadow) if m not in answered and m not in queried]
    if not queried and not shadowed:
        return
    probe_body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    for model in queried:
        job = ProbeJob(turn.tenant.id, turn.request, route, probe_body, model)
        runner(turn.ctx).start(_probe(turn.ctx, job))
    for model in shadowed:
        _start_shadow(turn, ProbeJob(turn.tenant.id, turn.request, route, probe_body, model, shadow.SHADOW))


def _answer_text(payload: dict[str, Any]) -> str:
    """A chat answer's text, or an image answer's URLs."""
    texts = contents(payload)
    for item in payload.get("data") or []:
        if isinstance(item, dict) and isinstance(item.get("url"), str):
            texts.append(item["url"])
    return "\n".join(texts)


@dataclass(frozen=True)
class ProbeJob:
    tenant_id: int
    request: RouteRequest
    route: RouteResponse
    body: dict[str, Any]
    model: str
    kind: str = "query"


async def _probe(ctx: AppContext, job: ProbeJob) -> None:
    async with runner(ctx).semaphore:
        await _logged(_call_and_store(ctx, job), job)


async def _logged(work: Coroutine[Any, Any, None], job: ProbeJob) -> None:
    """Run a probe's work; an error is logged, never raised into the task set."""
    try:
        await work
    except asyncio.CancelledError:
        raise
    except (OwnerDeleted, NotFound) as exc:  # the router or tenant was deleted meanwhile: nothing to keep
        log.warning(
            "%s probe of %s for decision %s not recorded, deleted meanwhile: %s",
            job.kind,
            job.model,
            job.route.decision_id,
            exc,
        )
    except Exception:
        log.exception(
            "%s probe of %s for decision %s failed to be recorded", job.kind, job.model, job.route.decision_id
        )


def _start_shadow(turn: Turn, job: ProbeJob) -> None:
    """Start a shadow call if a slot is free (else store its refusal) and hold the slot until it ends."""
    ctx, router = turn.ctx, turn.router
    assert router is not None, "a decision with shadow calls has a router"
    row = {"decision_id": job.route.decision_id, "tenant_id": job.tenant_id, "router_id": router.id}
    row["model"] = job.model
    names = (turn.tenant.name, router.name)
    if not runner(ctx).shadow.take():
        runner(ctx).start(_logged(shadow.store_refusal(ctx, row, names, "concurrency"), job))
        return
    budget = shadow.budget_of(router.hyperparameters)
    runner(ctx).start(_shadow(ctx, job, row, names, budget))


async def _shadow(
    ctx: AppContext, job: ProbeJob, row: dict[str, Any], names: tuple[str, str], budget: float | None
) -> None:
    """A shadow call in its slot (``_budgeted``); the slot and the reservation are released once its
    cost is stored."""
    slots, reserved = runner(ctx).shadow, [0.0]
    try:
        await _logged(_budgeted(ctx, job, row, names, budget, reserved), job)
    finally:
        slots.give()
        slots.settle(int(row["router_id"]), reserved[0])


async def _budgeted(
    ctx: AppContext,
    job: ProbeJob,
    row: dict[str, Any],
    names: tuple[str, str],
    budget: float | None,
    reserved: list[float],
) -> None:
    """Refused (stored) when the router's budget has no room for the call's expected cost
    (app/routing/shadow.py), else ``reserved[0]`` set to that cost and the call made and stored like a
    probe."""
    if budget is not None:
        router_id = int(row["router_id"])
        expected = (await expected_costs(ctx, [job.model], len(job.request.text()))).get(job.model, 0.0)
        spent = await shadow.spent_last_day(ctx, router_id)
        if not runner(ctx).shadow.reserve(router_id, spent, expected, budget):
            await shadow.store_refusal(ctx, row, names, "budget")
            return
        reserved[0] = expected
    await _call_and_store(ctx, job)


async def _call_and_store(ctx: AppContext, job: ProbeJob) -> None:
    tenant_id, request, route, body, model = job.tenant_id, job.request, job.route, job.body, job.model
    path = path_for(body)
    attempts: list[AttemptRecord] = []
    async with ctx.sessionmaker() as session:
        decision = await session.get(DecisionRow, route.decision_id)
        tenant = await session.get(Tenant, tenant_id)
        if decision is None or tenant is None:
            return
        probe = {"decision_id": route.decision_id, "tenant_id": tenant_id, "router_id": decision.router_id}
        probe |= {"model": model, "kind": job.kind, "answer": None, "cost": None, "error": None}
        try:
            target = await load_target(ctx, model, path, attempts)
            await session.commit()  # no pooled connection held during the call
            payload = await ctx.backends.call_json(target, path, body, attempts)
        except BackendFailure as exc:
            failed = {**probe, "status": "failed", "error": exc.logged()}
            await ctx.ledger.write(LedgerWrite(probes=[failed]))
            return
        cost = answer_cost(target, request, payload, path)
        answer = {**probe, "answer": _answer_text(payload), "cost": cost, "status": "pending"}
        await ctx.ledger.write(LedgerWrite(probes=[answer]))
        # A query reward committed before this row was (an evaluator that read x-banditgate-query) found
        # no probe to mark: look again now that the row is committed.
        if await session.scalar(select(graded(route.decision_id, model, job.kind))):
            await ctx.ledger.write(LedgerWrite(answered_probes=[(route.decision_id, model)]))
        elif path == CHAT_PATH:  # not rated yet: the router's judge, if it has one, grades it now
            await session.commit()  # no pooled connection held during the judge's call
            text = _answer_text(payload)
            cost += await grade_probe(
                ctx, tenant, decision.router_id, route.decision_id, model, request.text(), text, kind=job.kind
            )
        feedback = FeedbackReport(decision_id=route.decision_id, model=model, kind="cost", cost=cost)
        await record_feedback(ctx, tenant, [feedback])


GRADING_KINDS = ("query", shadow.SHADOW)  # the feedback kinds that grade a probe of the same kind


async def mark_answered(ctx: AppContext, accepted: list[FeedbackAccepted]) -> None:
    """Mark the pending probes that new ``kind: query`` or ``kind: shadow`` events answer, through the
    ledger. After the events' commit: a probe whose grade exists is never listed as pending anyway
    (``pending``), so this status is kept for the admin views, not for correctness."""
    answered = [(a.decision_id, a.model) for a in accepted if a.kind in GRADING_KINDS and not a.duplicate]
    if answered:
        await ctx.ledger.write(LedgerWrite(answered_probes=answered))


def graded(decision_id: Any, model: Any, kind: Any) -> Exists:
    """EXISTS a feedback event of ``kind`` (a probe's: ``query`` or ``shadow``) for (decision_id, model)."""
    return exists().where(
        FeedbackEvent.decision_id == decision_id, FeedbackEvent.model == model, FeedbackEvent.kind == kind
    )


async def pending(
    ctx: AppContext, tenant: Tenant, limit: int, cursor: int | None
) -> tuple[list[tuple[Probe, str]], int | None]:
    """The tenant's pending probes (both kinds) after ``cursor`` (a probe id), oldest first, each with
    its decision's prompt hash; and the cursor of the next page (None when this page is the last). A
    probe whose grade (feedback of its kind) exists is never listed, even in the rare race where its
    status was left ``pending``."""
    async with ctx.sessionmaker() as session:
        query = (
            select(Probe, DecisionRow.prompt_hash)
            .join(DecisionRow, DecisionRow.id == Probe.decision_id)
            .where(Probe.tenant_id == tenant.id, Probe.status == "pending")
            .where(~graded(Probe.decision_id, Probe.model, Probe.kind))
            .order_by(Probe.id)
            .limit(limit + 1)
        )
        if cursor is not None:
            query = query.where(Probe.id > cursor)
        rows = [(p, h) for p, h in (await session.execute(query)).all()]
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (rows[-1][0].id if more and rows else None)
