"""The cost of an answer (its usage at the backend's prices, else characters / 4) and ``record_call``: the
attempts, who answered and the cost event, in one ledger transaction (app/store/ledger.py)."""

from __future__ import annotations

import logging
from typing import Any

from app import metrics
from app.backends import AttemptRecord, Target
from app.context import AppContext
from app.routing.answers import CHAT_PATH, IMAGE_PATH, answer_chars, answer_text, mixture_output
from app.routing.feedback import FeedbackReport, store_feedback
from app.routing.turn import PendingDecision, Turn
from app.schemas import RouteRequest
from app.store.ledger import LedgerWrite
from app.store.models import DecisionRow, Tenant
from routers.prices import whole_tokens

log = logging.getLogger(__name__)


async def save_attempts(turn: Turn, attempts: list[AttemptRecord]) -> None:
    """Commit the attempts (and the turn's decision first when it is still pending) through the
    ledger."""
    pending = turn.pending
    write = pending.write() if pending is not None else LedgerWrite()
    write.attempts = attempt_rows(turn.decided.decision_id, attempts)
    await turn.ctx.ledger.write(write)
    turn.pending = None


def attempt_rows(decision_id: str, attempts: list[AttemptRecord]) -> list[dict[str, Any]]:
    """The attempts' ``attempts`` rows."""
    return [{"decision_id": decision_id, **a.row()} for a in attempts]


def usage_tokens(usage: Any, prompt_chars: int, answer_chars: int) -> tuple[int, int]:
    """(input, output) tokens from an OpenAI ``usage`` object (chat or images), else characters / 4."""
    if isinstance(usage, dict):
        tin = usage.get("prompt_tokens", usage.get("input_tokens"))
        tout = usage.get("completion_tokens", usage.get("output_tokens"))
        if isinstance(tin, int) and isinstance(tout, int):
            return max(tin, 0), max(tout, 0)
    return whole_tokens(prompt_chars), whole_tokens(answer_chars)


async def record_call(
    turn: Turn,
    target: Target,
    attempts: list[AttemptRecord],
    cost: float | None,
    output_text: str | None = None,
) -> None:
    """Store the attempts, mark who answered, and record the cost event (when the call completed), in
    one ledger transaction; the turn's pending decision (a forwarded request's) is written in it too,
    already marked, with its counter's increment, so a forwarded request commits once. For mixture
    routers the event also carries the answer, which the gateway embeds. The answer does not wait for
    the event to come back over the bus: the policy still learns it only from the stream, in stream
    order.

    Everything that may wait on something else (the router from the catalog, a mixture answer's
    embedding) happens before the write."""
    ctx, tenant, pending = turn.ctx, turn.tenant, turn.pending
    decision_id = turn.decided.decision_id
    answered = {"answered_by": target.name}
    if pending is not None:
        values = {**pending.values, "info": {**pending.values["info"], **answered}}
        write = pending.write(values)
        row = DecisionRow(**values)
    else:  # written before the call: as the ledger committed it
        found = await ctx.ledger.decisions(tenant.id, [decision_id])
        if not found:
            return
        write = LedgerWrite(info=(decision_id, answered))
        row = found[0]
    feedback = None if cost is None else await cost_event(ctx, decision_id, target.name, cost, output_text)
    router = await ctx.catalog.router_by_id(row.router_id) if row.router_id is not None and feedback else None
    write.attempts = attempt_rows(decision_id, attempts)
    if feedback is None:
        await ctx.ledger.write(write)
    else:
        await store_feedback(ctx, tenant, [(feedback, row, router, target.name)], wait=False, alongside=write)
    turn.pending = None
    count_logged(tenant, pending)


async def record_answer(
    turn: Turn, target: Target, attempts: list[AttemptRecord], payload: dict[str, Any], path: str
) -> float:
    """``record_call`` for a whole answer: its cost (``answer_cost``), and for a mixture router's chat
    answer its text; returns the cost."""
    cost = answer_cost(target, turn.request, payload, path)
    route = turn.decided
    output = mixture_output(route.mode, answer_text(payload)) if path == CHAT_PATH else None
    await record_call(turn, target, attempts, cost, output)
    return cost


async def cost_event(
    ctx: AppContext, decision_id: str, model: str, cost: float, output_text: str | None
) -> FeedbackReport:
    """The cost event of an answer; a mixture router's answer (``output_text``) embedded now, not
    inside the write transaction (an answer over ``max_prompt_chars`` is left for ``store_feedback``
    to refuse)."""
    embedding: list[float] | None = None
    if output_text is not None and len(output_text) <= ctx.settings.max_prompt_chars:
        vector, _ = await ctx.embeddings.embed(output_text)
        embedding, output_text = [float(v) for v in vector], None
    return FeedbackReport(
        decision_id=decision_id,
        model=model,
        kind="cost",
        cost=cost,
        output_embedding=embedding,
        output_text=output_text,
    )


def count_logged(tenant: Tenant, pending: PendingDecision | None) -> None:
    """Count a pending decision in the metrics once it is written."""
    if pending is not None:
        metrics.count_decision(tenant.name, pending.router_name)


def answer_cost(target: Target, request: RouteRequest, payload: dict[str, Any], path: str) -> float:
    """USD of an answer: its reported usage (else characters / 4) at the backend's prices."""
    if path == IMAGE_PATH:
        tin, tout = usage_tokens(payload.get("usage"), 0, 0)
    else:
        tin, tout = usage_tokens(payload.get("usage"), len(request.text()), answer_chars(payload))
    return target.cost(tin, tout)
