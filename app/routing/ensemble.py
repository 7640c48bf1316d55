"""An ensemble (a ``set`` decision): every member called in parallel, each answer costed."""

from __future__ import annotations

import asyncio
from typing import Any

from app.backends import AttemptRecord, BackendFailure, Target
from app.routing.answers import Forwarded, Member
from app.routing.costs import answer_cost, attempt_rows, kept, save_attempts
from app.routing.fallback import gave_up, load_target
from app.routing.feedback import FeedbackReport, resolve_feedback, store_feedback
from app.routing.turn import Turn
from app.store.db import commit_if_used
from app.store.ledger import LedgerWrite


async def forward_ensemble(turn: Turn, body: dict[str, Any], path: str) -> Forwarded:
    """An ensemble: call every model of the turn's decision in parallel (each with its own retries, no
    fallback), record each answer's cost, answer with all of them; 502/504 only if none answered."""
    ctx, tenant, request, route = turn.ctx, turn.tenant, turn.request, turn.decided
    attempts: list[AttemptRecord] = []
    targets: list[Target] = []
    failures: list[BackendFailure] = []
    for model in route.models:  # one session: load sequentially, then call concurrently
        try:
            targets.append(await load_target(ctx, model, path, attempts))
        except BackendFailure as exc:
            failures.append(exc)
    await commit_if_used(turn.session)  # end the read transaction: no pooled connection held during the calls
    per_member: list[list[AttemptRecord]] = [[] for _ in targets]
    results = await asyncio.gather(
        *(ctx.backends.call_json(t, path, body, a) for t, a in zip(targets, per_member, strict=True)),
        return_exceptions=True,
    )
    members = [Member(f.backend, None, None, str(f)) for f in failures]
    answered: list[tuple[Target, dict[str, Any], float]] = []
    for target, own, result in zip(targets, per_member, results, strict=True):
        attempts.extend(own)
        if isinstance(result, BackendFailure):
            failures.append(result)
            members.append(Member(target.name, None, None, str(result)))
        elif isinstance(result, BaseException):
            raise result
        else:
            cost = answer_cost(target, request, result, path)
            answered.append((target, result, cost))
            members.append(Member(target.name, result, cost))
    for number, attempt in enumerate(attempts, start=1):
        attempt.number = number
    if not answered:
        await save_attempts(turn, attempts)
        raise gave_up(route.decision_id, failures)
    first, payload, cost = answered[0]
    marks = {"answered_by": first.name, "ensemble": [t.name for t, _, _ in answered]}
    costs = [
        FeedbackReport(decision_id=route.decision_id, model=t.name, kind="cost", cost=c)
        for t, _, c in answered
    ]

    async def record() -> None:
        resolved = await resolve_feedback(ctx, tenant, costs)
        info = (route.decision_id, marks)
        write = LedgerWrite(info=info, attempts=attempt_rows(route.decision_id, attempts))
        await store_feedback(ctx, tenant, resolved, wait=False, alongside=write)

    await kept(turn, record())
    return Forwarded(route, first, payload, cost, attempts, members)
