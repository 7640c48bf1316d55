"""A router's judge: what scores an answer the gateway forwarded (the judged cascade that asks it is in
app/routing/cascade.py; a pending probe's answer is graded by ``grade_probe``). A router's ``judge``
(app.schemas.JudgeConfig) is one of:

- ``{"url", "threshold"}``: an HTTP endpoint of the tenant's. ``POST url`` with ``{"decision_id",
  "model", "prompt", "answer"}`` answers ``{"pass": true|false}`` or ``{"score": number}``; the score is
  in the router's reward units (pass = its highest reward, fail = its lowest), its reward the score
  clipped to the range. The tenant pays for it: it costs the gateway nothing.
- ``{"backend", "rubric", "threshold"[, "template"]}``: one of the catalog's chat backends, asked through
  the backend client (retries included) with the grading prompt of app/judge_prompt.py; the score s is
  in [0, 1] and the reward ``lo + s (hi - lo)`` in the router's range [lo, hi]. Its cost is the reply's
  usage (else characters / 4) at the backend's prices, and its tries are attempts of the decision,
  under the backend's name.

Either way a step passes when its score reaches ``threshold``, and every judge call is bounded by
``judge_timeout_s`` in all. A judge that fails (unreachable, an error status, a reply without a score)
gives a verdict without a score, logged as a redacted excerpt; it never fails the client's request."""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from app.backends import AttemptRecord, BackendFailure
from app.context import AppContext
from app.judge_prompt import JUDGE_MAX_TOKENS, TEMPLATE, parse_score, render
from app.routing.answers import CHAT_PATH, answer_chars, answer_text
from app.routing.costs import attempt_rows, usage_tokens
from app.routing.fallback import load_target
from app.routing.feedback import FeedbackReport, record_feedback
from app.store.ledger import LedgerWrite
from app.store.models import Router, Tenant

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    score: float | None  # None: the judge failed
    passed: bool
    reward: float | None = None  # the score as a reward in the router's range
    cost: float = 0.0  # USD of the judge's call (a backend judge's)
    attempts: list[AttemptRecord] = field(default_factory=list)


FAILED = Verdict(None, False)


def reward_for(score: float, router: Router) -> float:
    """A url judge's score as a reward in the router's range (clipped)."""
    return min(max(score, router.reward_lo), router.reward_hi)


def unit_reward(score: float, router: Router) -> float:
    """A backend judge's score in [0, 1] as a reward in the router's range: lo + s (hi - lo)."""
    return router.reward_lo + score * (router.reward_hi - router.reward_lo)


def judges_answers(router: Router | None) -> bool:
    """Whether the router has a judge."""
    return router is not None and bool(router.judge)


async def ask_judge(
    ctx: AppContext, router: Router, decision_id: str, model: str, prompt: str, answer: str
) -> Verdict:
    """The router's judge's verdict on ``answer`` (module docstring)."""
    judge = router.judge or {}
    threshold = float(judge.get("threshold", 0.5))
    if judge.get("backend"):
        verdict = await ask_backend(ctx, judge, prompt, answer, router, decision_id)
    else:
        verdict = await ask_url(ctx, str(judge["url"]), router, decision_id, model, prompt, answer)
    if verdict.score is None:
        return verdict
    return replace(verdict, passed=verdict.score >= threshold)


async def ask_url(
    ctx: AppContext, url: str, router: Router, decision_id: str, model: str, prompt: str, answer: str
) -> Verdict:
    """An HTTP judge's verdict; logged failures are redacted excerpts: an httpx error names the url,
    which may hold credentials, and the judge's answer may echo secrets."""
    backends = ctx.backends
    body = {"decision_id": decision_id, "model": model, "prompt": prompt, "answer": answer}
    try:
        response = await backends.http.post(url, json=body, timeout=ctx.settings.judge_timeout_s)
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
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:  # redacted, then cut: no secret halved
        reason = backends.excerpt(f"{type(exc).__name__}: {exc}")
        log.warning("judge of router %s failed on decision %s: %s", router.id, decision_id, reason)
        return FAILED
    return Verdict(score, False, reward_for(score, router))


async def ask_backend(
    ctx: AppContext, judge: dict[str, Any], prompt: str, answer: str, router: Router, decision_id: str
) -> Verdict:
    """A backend judge's verdict: one chat call (its retries within ``judge_timeout_s`` in all), the
    score parsed from its reply (app/judge_prompt.py), costed at the backend's prices."""
    message = render(judge.get("template") or TEMPLATE, prompt, answer, str(judge["rubric"]))
    body = {
        "messages": [{"role": "user", "content": message}],
        "temperature": 0,
        "max_tokens": JUDGE_MAX_TOKENS,
    }
    name = str(judge["backend"])
    attempts: list[AttemptRecord] = []
    limit = ctx.settings.judge_timeout_s
    reply: dict[str, Any] | None = None
    try:
        target = await load_target(ctx, name, CHAT_PATH, attempts)
        target = replace(target, timeout_s=min(target.timeout_s, limit))
        async with asyncio.timeout(limit):
            reply = await ctx.backends.call_json(target, CHAT_PATH, body, attempts)
    except BackendFailure as exc:
        log.warning("judge of router %s failed on decision %s: %s", router.id, decision_id, exc.logged())
        return Verdict(None, False, attempts=attempts)
    except TimeoutError:
        attempts.append(
            AttemptRecord(name, len(attempts) + 1, "timeout", None, limit * 1000, "judge timed out")
        )
        log.warning("judge of router %s timed out on decision %s", router.id, decision_id)
        return Verdict(None, False, attempts=attempts)
    tokens_in, tokens_out = usage_tokens(reply.get("usage"), len(message), answer_chars(reply))
    cost = target.cost(tokens_in, tokens_out)
    score = parse_score(answer_text(reply))
    if score is None:
        excerpt = ctx.backends.excerpt(answer_text(reply))
        log.warning("judge of router %s gave no score on decision %s: %s", router.id, decision_id, excerpt)
        return Verdict(None, False, cost=cost, attempts=attempts)
    return Verdict(score, False, unit_reward(score, router), cost, attempts)


async def grade_probe(
    ctx: AppContext,
    tenant: Tenant,
    router_id: int | None,
    decision_id: str,
    model: str,
    prompt: str,
    answer: str,
    kind: str = "query",
) -> float:
    """A stored pending probe's answer graded by its router's judge (when it has one): the reward is the
    probe's feedback of ``kind`` (its observation kind: ``query`` or ``shadow``), recorded now, and the probe is marked
    answered; the judge's attempts are the decision's. Returns the judge's cost (0 without a judge),
    which the probe's cost event carries."""
    router = await ctx.catalog.router_by_id(router_id) if router_id is not None else None
    if router is None or not judges_answers(router):
        return 0.0
    verdict = await ask_judge(ctx, router, decision_id, model, prompt, answer)
    if verdict.attempts:
        await ctx.ledger.write(LedgerWrite(attempts=attempt_rows(decision_id, verdict.attempts)))
    if verdict.reward is not None:
        graded = FeedbackReport(decision_id=decision_id, model=model, kind=kind, reward=verdict.reward)
        await record_feedback(ctx, tenant, [graded])
        await ctx.ledger.write(LedgerWrite(answered_probes=[(decision_id, model)]))
    return verdict.cost
