"""Call the decision's model; when that backend gives up, ask the policy again with ``tried`` and
call its next choice, up to ``forward_max_fallbacks`` more; every attempt recorded."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import httpx

from app.backend_keys import SecretKeyMissing
from app.backends import AttemptRecord, BackendFailure, Target
from app.context import AppContext
from app.routing.answers import IMAGE_PATH
from app.routing.costs import save_attempts
from app.routing.decide import DIRECT, reselect
from app.routing.errors import BackendsFailed, Declined
from app.routing.turn import Turn
from app.schemas import RouteResponse
from app.store.db import commit_if_used

log = logging.getLogger(__name__)


async def load_target(ctx: AppContext, name: str, path: str, attempts: list[AttemptRecord]) -> Target:
    """The backend ``name`` ready to call (from the catalog cache); a BackendFailure (not retried) when
    it cannot be."""
    target: Target | None = None
    try:
        target = await ctx.catalog.target(name)
        problem = "is not in the catalog" if target is None else ""
    except SecretKeyMissing as exc:
        problem = f"cannot be called: {exc}"
    if target is not None and (target.kind == "image") != (path == IMAGE_PATH):
        problem = f"is a {target.kind} backend and cannot serve {path}"
    if problem or target is None:
        failure = BackendFailure(name, "unusable", problem, retryable=False)
        attempts.append(AttemptRecord(name, len(attempts) + 1, "unusable", None, 0.0, str(failure)))
        raise failure
    return target


async def next_model(turn: Turn, tried: list[str]) -> str | None:
    """The policy's choice for the same prompt once ``tried`` are excluded (None: nothing left)."""
    decision = await reselect(turn.ctx, turn.decision.row(), tried, turn.request.candidates)
    arm = decision.arm if decision is not None else None
    return arm if arm is not None and arm not in tried else None


async def call_with_fallback(
    turn: Turn,
    route: RouteResponse,
    body: dict[str, Any],
    path: str,
    attempts: list[AttemptRecord],
    stream: bool,
    called: Sequence[str] = (),
) -> tuple[Target, dict[str, Any] | httpx.Response]:
    """Call ``route``'s model, then the policy's next choices (never one of ``called``, the models a
    cascade already called for this decision); raise the gateway's 502/504 (the turn's decision, when
    still pending, is written with the attempts first)."""
    if route.model is None:
        raise Declined(
            f"router {route.router!r} declined to choose a model (decision {route.decision_id})",
            decision_id=route.decision_id,
        )
    ctx = turn.ctx
    tried: list[str] = list(called)
    failures: list[BackendFailure] = []
    model: str | None = route.model
    while model is not None:
        tried.append(model)
        try:
            target = await load_target(ctx, model, path, attempts)
            # end the read transaction: no pooled connection held during the call
            await commit_if_used(turn.session)
            if stream:
                return target, await ctx.backends.open_stream(target, path, body, attempts)
            return target, await ctx.backends.call_json(target, path, body, attempts)
        except BackendFailure as exc:
            failures.append(exc)
        if len(failures) > ctx.settings.forward_max_fallbacks or route.mode == DIRECT:
            break  # a direct call is fallback-free: the client named its backend
        model = await next_model(turn, tried)
    await save_attempts(turn, attempts)
    raise gave_up(route.decision_id, failures)


def gave_up(decision_id: str, failures: list[BackendFailure]) -> BackendsFailed:
    """The error when every backend tried failed, naming each (a 504 if all timed out, else a 502)."""
    detail = "; ".join(str(f) for f in failures) + f" (decision {decision_id})"
    return BackendsFailed(
        detail, decision_id=decision_id, timed_out=all(f.outcome == "timeout" for f in failures)
    )
