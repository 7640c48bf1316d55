"""Gateway-driven cascades: a router with a judge gets answers checked before they are returned.

The judge is an HTTP endpoint of the tenant's: ``POST judge_url`` with ``{"decision_id", "model",
"prompt", "answer"}`` answers ``{"pass": true|false}`` or ``{"score": number}``. A step passes when its
score (pass = 1, fail = 0) reaches the router's ``judge_threshold``. Each step is learned as a
``cascade-step`` event whose reward is the score clipped to the router's reward range (pass/fail map to
its ends); a failed step asks for the next model the way ``POST /route/{id}/next`` does (the fixed
cascade's next model, or the policy re-asked without the models tried). The cascade stops at the first
pass, when nothing is left, after ``judge_max_steps`` calls, or when the judge itself fails (the last
answer is then returned as it is, and the step records no reward)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession

from app.backends import AttemptRecord, BackendClient, Target
from app.context import AppContext
from app.routing.answers import CHAT_PATH, Forwarded, JudgedStep, answer_text
from app.routing.cascade import next_step
from app.routing.costs import answer_cost, record_call
from app.routing.errors import BackendsFailed
from app.routing.fallback import call_with_fallback
from app.routing.feedback import FeedbackReport, record_feedback
from app.schemas import CascadeNextRequest, RouteRequest, RouteResponse
from app.store.models import Router, Tenant

log = logging.getLogger(__name__)


async def judged_cascade(
    ctx: AppContext,
    session: AsyncSession,
    tenant: Tenant,
    request: RouteRequest,
    route: RouteResponse,
    body: dict[str, Any],
    router: Router,
    target: Target,
    payload: dict[str, Any],
    cost: float,
    attempts: list[AttemptRecord],
) -> Forwarded:
    """Ask the router's judge about each answer; on a fail, call the cascade's next model."""
    steps: list[JudgedStep] = []
    all_attempts = list(attempts)
    while True:
        verdict = await ask_judge(
            ctx.backends,
            router,
            ctx.settings.judge_timeout_s,
            route.decision_id,
            target.name,
            request.text(),
            answer_text(payload),
        )
        steps.append(JudgedStep(target.name, verdict.score, verdict.passed, cost))
        reward = None if verdict.score is None else reward_for(verdict.score, router)
        if verdict.score is None or verdict.passed or len(steps) >= ctx.settings.judge_max_steps:
            if reward is not None:
                step = FeedbackReport(
                    decision_id=route.decision_id, model=target.name, kind="cascade-step", reward=reward
                )
                await record_feedback(ctx, tenant, [step])
            break
        following = await next_step(
            ctx, session, tenant, route.decision_id, CascadeNextRequest(model=target.name, reward=reward)
        )
        if following.stop or following.model is None:
            break
        step_route = route.model_copy(update={"model": following.model, "models": [following.model]})
        step_attempts: list[AttemptRecord] = []
        try:
            called = [step.model for step in steps]
            target, answer = await call_with_fallback(
                ctx, session, request, step_route, body, CHAT_PATH, step_attempts, False, called
            )
        except BackendsFailed:  # the next backend failed: return the last answer that came back
            all_attempts.extend(step_attempts)
            break
        assert isinstance(answer, dict)
        payload = answer
        cost = answer_cost(target, request, payload, CHAT_PATH)
        await record_call(ctx, session, tenant, route.decision_id, target, step_attempts, cost)
        all_attempts.extend(step_attempts)
    return Forwarded(route, target, payload, sum(s.cost for s in steps), all_attempts, judged=steps)


@dataclass(frozen=True)
class Verdict:
    score: float | None  # None: the judge failed
    passed: bool


def reward_for(score: float, router: Router) -> float:
    """The score as a reward in the router's range (clipped)."""
    return min(max(score, router.reward_lo), router.reward_hi)


async def ask_judge(
    backends: BackendClient,
    router: Router,
    timeout_s: float,
    decision_id: str,
    model: str,
    prompt: str,
    answer: str,
) -> Verdict:
    """The judge's verdict on ``answer``; a judge that fails (unreachable, an error status, an answer of
    another shape) is a verdict without a score, logged as a redacted excerpt: an httpx error names
    ``judge_url``, which may hold credentials, and the judge's answer may echo secrets."""
    assert router.judge_url is not None
    body = {"decision_id": decision_id, "model": model, "prompt": prompt, "answer": answer}
    try:
        response = await backends.http.post(router.judge_url, json=body, timeout=timeout_s)
        response.raise_for_status()
        data = response.json()
        if isinstance(data, dict) and isinstance(data.get("pass"), bool):
            score = router.reward_hi if data["pass"] else router.reward_lo
        elif (
            isinstance(data, dict)
            and isinstance(data.get("score"), int | float)
            and math.isfinite(data["score"])
        ):
            score = float(data["score"])
        else:
            raise ValueError(f"expected {{'pass': bool}} or {{'score': number}}, got {data}")
    except (httpx.HTTPError, ValueError) as exc:  # redacted first, then cut: no secret survives halved
        reason = backends.excerpt(f"{type(exc).__name__}: {exc}")
        log.warning("judge of router %s failed on decision %s: %s", router.id, decision_id, reason)
        return Verdict(None, False)
    return Verdict(score, score >= router.judge_threshold)
