"""Active-learning probes: the gateway calls the models a policy asks about (``decision.query``, BALROG).

After a forwarded decision whose ``query`` is non-empty, ``schedule`` starts one background task per
queried model (never awaited by the client's request; at most ``probe_concurrency`` calls run at once per
process). Each task sends the client's request to that model's backend; an answer is stored as a
``pending`` row of ``probes`` (its text and cost) and its cost is recorded as a ``cost`` feedback event
through ``record_feedback`` (app/routing/feedback.py); a failed call is stored as ``failed`` with the error. Evaluators list the
pending probes with ``GET /feedback/pending`` and post ``kind: query`` feedback, which folds as a query
observation; ``POST /feedback`` then marks the probe ``answered`` (``mark_answered``). A router with a
judge has each stored answer graded by it at once (``app.routing.judge.grade_probe``: the grade is the
probe's ``query`` reward, the judge's cost is added to the probe's cost event)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Exists, exists, select

from app.backends import AttemptRecord, BackendFailure
from app.context import AppContext
from app.routing.answers import CHAT_PATH, Forwarded, Stream, contents, path_for
from app.routing.costs import answer_cost
from app.routing.fallback import load_target
from app.routing.feedback import FeedbackReport, record_feedback
from app.routing.judge import grade_probe
from app.routing.probe_tasks import ProbeRunner
from app.routing.turn import Turn
from app.schemas import FeedbackAccepted, RouteRequest, RouteResponse
from app.store.ledger import LedgerWrite
from app.store.models import DecisionRow, FeedbackEvent, Probe, Tenant

log = logging.getLogger(__name__)


def runner(ctx: AppContext) -> ProbeRunner:
    if ctx.probes is None:
        ctx.probes = ProbeRunner(ctx.settings.probe_concurrency)
    return ctx.probes


def schedule(turn: Turn, done: Forwarded | Stream) -> None:
    """Start the probes of the turn's decision's ``query`` other than the models whose answers the
    client got (``done``: an ensemble's members that answered, else the one that answers)."""
    route, body = turn.decided, turn.body or {}
    members = done.members if isinstance(done, Forwarded) else None
    answered = (
        [done.target.name] if members is None else [m.backend for m in members if m.payload is not None]
    )
    models = [m for m in dict.fromkeys(route.query) if m not in answered]
    if not models:
        return
    probe_body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    for model in models:
        job = ProbeJob(turn.tenant.id, turn.request, route, probe_body, model)
        runner(turn.ctx).start(_probe(turn.ctx, job))


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


async def _probe(ctx: AppContext, job: ProbeJob) -> None:
    async with runner(ctx).semaphore:
        try:
            await _call_and_store(ctx, job)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "probe of %s for decision %s failed to be recorded", job.model, job.route.decision_id
            )


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
        probe |= {"model": model, "answer": None, "cost": None, "error": None}
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
        if await session.scalar(select(query_reward(route.decision_id, model))):
            await ctx.ledger.write(LedgerWrite(answered_probes=[(route.decision_id, model)]))
        elif path == CHAT_PATH:  # not rated yet: the router's judge, if it has one, grades it now
            await session.commit()  # no pooled connection held during the judge's call
            text = _answer_text(payload)
            cost += await grade_probe(
                ctx, tenant, decision.router_id, route.decision_id, model, request.text(), text
            )
        feedback = FeedbackReport(decision_id=route.decision_id, model=model, kind="cost", cost=cost)
        await record_feedback(ctx, tenant, [feedback])


async def mark_answered(ctx: AppContext, accepted: list[FeedbackAccepted]) -> None:
    """Mark the pending probes that new ``kind: query`` events answer, through the ledger. After the
    events' commit: a probe whose query reward exists is never listed as pending anyway (``pending``),
    so this status is kept for the admin views, not for correctness."""
    answered = [(a.decision_id, a.model) for a in accepted if a.kind == "query" and not a.duplicate]
    if answered:
        await ctx.ledger.write(LedgerWrite(answered_probes=answered))


def query_reward(decision_id: Any, model: Any) -> Exists:
    """EXISTS a ``kind: query`` feedback event for (decision_id, model)."""
    return exists().where(
        FeedbackEvent.decision_id == decision_id, FeedbackEvent.model == model, FeedbackEvent.kind == "query"
    )


async def pending(
    ctx: AppContext, tenant: Tenant, limit: int, cursor: int | None
) -> tuple[list[tuple[Probe, str]], int | None]:
    """The tenant's pending probes after ``cursor`` (a probe id), oldest first, each with its decision's
    prompt hash; and the cursor of the next page (None when this page is the last). A probe whose query
    reward exists is never listed, even in the rare race where its status was left ``pending``."""
    async with ctx.sessionmaker() as session:
        query = (
            select(Probe, DecisionRow.prompt_hash)
            .join(DecisionRow, DecisionRow.id == Probe.decision_id)
            .where(Probe.tenant_id == tenant.id, Probe.status == "pending")
            .where(~query_reward(Probe.decision_id, Probe.model))
            .order_by(Probe.id)
            .limit(limit + 1)
        )
        if cursor is not None:
            query = query.where(Probe.id > cursor)
        rows = [(p, h) for p, h in (await session.execute(query)).all()]
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (rows[-1][0].id if more and rows else None)
