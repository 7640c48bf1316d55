"""The cost of an answer (its usage at the backend's prices, else characters / 4) and ``settle``: the
attempts, who answered and the cost event, in one transaction."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.backends import AttemptRecord, Target
from app.context import AppContext
from app.routing.answers import IMAGE_PATH, answer_chars
from app.routing.feedback import Outcome, store_feedback
from app.schemas import RouteRequest
from app.store.models import Attempt, DecisionRow, Tenant
from routers.replay_format import whole_tokens

log = logging.getLogger(__name__)


async def save_attempts(session: AsyncSession, decision_id: str, attempts: list[AttemptRecord]) -> None:
    session.add_all(Attempt(decision_id=decision_id, **asdict(a)) for a in attempts)
    await session.commit()


def usage_tokens(usage: Any, prompt_chars: int, answer_chars: int) -> tuple[int, int]:
    """(input, output) tokens from an OpenAI ``usage`` object (chat or images), else characters / 4."""
    if isinstance(usage, dict):
        tin = usage.get("prompt_tokens", usage.get("input_tokens"))
        tout = usage.get("completion_tokens", usage.get("output_tokens"))
        if isinstance(tin, int) and isinstance(tout, int):
            return max(tin, 0), max(tout, 0)
    return whole_tokens(prompt_chars), whole_tokens(answer_chars)


async def settle(
    ctx: AppContext,
    session: AsyncSession,
    tenant: Tenant,
    decision_id: str,
    target: Target,
    attempts: list[AttemptRecord],
    cost: float | None,
    output_text: str | None = None,
) -> None:
    """Store the attempts, mark who answered, and record the cost event (when the call completed), in
    one transaction; for mixture routers the event also carries the answer, which the gateway embeds.
    The answer does not wait for the event to come back over the bus: the policy still learns it only
    from the stream, in stream order."""
    row = await session.get(DecisionRow, decision_id)  # the session that decided holds it already
    if row is None:
        return
    row.info = {**(row.info or {}), "answered_by": target.name}
    session.add_all(Attempt(decision_id=decision_id, **asdict(a)) for a in attempts)
    if cost is None:
        await session.commit()
        return
    router = await ctx.catalog.router_by_id(row.router_id) if row.router_id is not None else None
    feedback = Outcome(
        decision_id=decision_id, model=target.name, kind="cost", cost=cost, output_text=output_text
    )
    await store_feedback(ctx, session, tenant, [(feedback, row, router, target.name)], wait=False)


def answer_cost(target: Target, request: RouteRequest, payload: dict[str, Any], path: str) -> float:
    """USD of an answer: its reported usage (else characters / 4) at the backend's prices."""
    if path == IMAGE_PATH:
        tin, tout = usage_tokens(payload.get("usage"), 0, 0)
    else:
        tin, tout = usage_tokens(payload.get("usage"), len(request.text()), answer_chars(payload))
    return target.cost(tin, tout)
