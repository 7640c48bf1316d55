"""The cost of an answer (its usage at the backend's prices, else characters / 4) and ``record_call``: the
attempts, who answered and the cost event, in one ledger transaction (app/store/ledger.py), with the
turn's decision when it is not written yet."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

from app import metrics
from app.backends import AttemptRecord, Target
from app.context import AppContext
from app.routing.answers import CHAT_PATH, IMAGE_PATH, answer_chars, answer_text, mixture_output
from app.routing.errors import NotFound
from app.routing.feedback import FeedbackReport, store_feedback
from app.routing.turn import Turn
from app.schemas import RouteRequest
from app.store.ledger import OwnerDeleted
from routers.prices import call_cost, whole_tokens

log = logging.getLogger(__name__)


async def save_attempts(turn: Turn, attempts: list[AttemptRecord]) -> None:
    """Commit the attempts (with the turn's decision when it is not written yet) through the ledger."""
    write = turn.unwritten()
    write.attempts = attempt_rows(turn.decided.decision_id, attempts)
    if await kept(turn, turn.ctx.ledger.write(write)):
        count_written(turn)


async def kept(turn: Turn, write: Awaitable[object]) -> bool:
    """Await a write made after the backends were called; False when the turn's router or tenant was
    deleted while they were (``OwnerDeleted``, or ``NotFound`` from the feedback's check of its
    decision): the call happened, so its answer (or its error) still goes to the client, and nothing of
    it is kept, as the deletion would have removed it."""
    try:
        await write
    except (OwnerDeleted, NotFound) as exc:
        router = turn.router.name if turn.router is not None else "(direct)"
        log.warning(
            "decision %s of tenant %r, router %r: not recorded, deleted during the call (%s)",
            turn.decided.decision_id,
            turn.tenant.name,
            router,
            exc,
        )
        return False
    return True


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
) -> bool:
    """Store the attempts, mark who answered, and record the cost event (when the call completed), in
    one ledger transaction, which also writes the turn's decision when it is not written yet (a
    forwarded request's, with its counter's increment, so such a request commits once): the ledger
    merges who answered into the decision's ``info`` either way (``LedgerWrite.info``). For mixture
    routers the event also carries the answer, which the gateway embeds. The answer does not wait for
    the event to come back over the bus: the policy still learns it only from the stream, in stream
    order.

    Everything that may wait on something else (the router from the catalog, a mixture answer's
    embedding) happens before the write. False when nothing was kept (``kept``: the router or tenant
    was deleted during the call)."""
    ctx, decision_id = turn.ctx, turn.decided.decision_id
    write = turn.unwritten()
    write.info = (decision_id, {"answered_by": target.name})
    write.attempts = attempt_rows(decision_id, attempts)
    if cost is None:
        written = await kept(turn, ctx.ledger.write(write))
    else:
        feedback = await cost_event(ctx, decision_id, target.name, cost, output_text)
        row = turn.decision.row()
        # as feedback reads it: the catalog's router by id (cached; the client's feedback finds it there)
        router = await ctx.catalog.router_by_id(turn.router.id) if turn.router is not None else None
        stored = store_feedback(
            ctx, turn.tenant, [(feedback, row, router, target.name)], wait=False, alongside=write
        )
        written = await kept(turn, stored)
    if written:
        count_written(turn)
    return written


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


def count_written(turn: Turn) -> None:
    """The turn's decision is committed (by this write, or before it): counted in the metrics, once."""
    if turn.wrote():
        metrics.count_decision(turn.tenant.name, turn.decision.router_name)


def answer_cost(target: Target, request: RouteRequest, payload: dict[str, Any], path: str) -> float:
    """USD of an answer: its reported usage (else characters / 4) at the backend's prices."""
    if path == IMAGE_PATH:
        tin, tout = usage_tokens(payload.get("usage"), 0, 0)
    else:
        tin, tout = usage_tokens(payload.get("usage"), len(request.text()), answer_chars(payload))
    return call_cost(target, tin, tout)
