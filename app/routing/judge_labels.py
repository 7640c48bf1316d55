"""A router's judge measured on a labelled set (``POST /admin/tenants/{t}/routers/{r}/judge/labels``):
the judge grades every (prompt, answer), and its verdicts are compared with the true rewards.

In reward units, with tau the judge's threshold there (a url judge's ``threshold``; a backend judge's
``lo + threshold (hi - lo)``), a label is a success when its true reward r >= tau and the judge's verdict
is a pass when its score reaches its threshold. Over the labels the judge scored:

    TPR = #(pass and success) / #success,   TNR = #(fail and failure) / #failure,
    Pearson rho = cov(judged reward, r) / (sd(judged reward) sd(r))

(None where a denominator is 0). These are the rates PromptWise's Bayes correction takes as
``judge_tpr`` / ``judge_tnr`` (routers/logistic_ucb.py, ``judged_success``). The judge's calls here
belong to no decision: their cost is reported, not counted in the router's spend."""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime

from app.context import AppContext
from app.routing.errors import Invalid
from app.routing.judge import Verdict, ask_judge
from app.schemas import JudgeLabel, JudgeMeasured
from app.store.models import Router

CONCURRENT_GRADES = 8


def threshold_reward(router: Router) -> float:
    """The judge's threshold in the router's reward units (module docstring)."""
    judge = router.judge or {}
    threshold = float(judge.get("threshold", 0.5))
    if judge.get("backend"):
        return router.reward_lo + threshold * (router.reward_hi - router.reward_lo)
    return threshold


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's correlation of paired samples (``statistics.correlation``); None under two pairs or with
    no spread in either."""
    try:
        return statistics.correlation(xs, ys)
    except statistics.StatisticsError:
        return None


def rate(hits: int, total: int) -> float | None:
    return hits / total if total else None


def measured(router: Router, labels: Sequence[JudgeLabel], verdicts: Sequence[Verdict]) -> JudgeMeasured:
    """The judge's rates on ``labels`` from its ``verdicts`` (module docstring)."""
    tau = threshold_reward(router)
    scored = [(label, v) for label, v in zip(labels, verdicts, strict=True) if v.reward is not None]
    successes = [v for label, v in scored if label.reward >= tau]
    failures = [v for label, v in scored if label.reward < tau]
    return JudgeMeasured(
        judge=dict(router.judge or {}),
        labels=len(labels),
        failed=len(labels) - len(scored),
        successes=len(successes),
        failures=len(failures),
        tpr=rate(sum(v.passed for v in successes), len(successes)),
        tnr=rate(sum(not v.passed for v in failures), len(failures)),
        pearson=pearson([float(v.reward or 0.0) for _, v in scored], [label.reward for label, _ in scored]),
        cost=sum(v.cost for v in verdicts),
        measured_at=datetime.now(UTC),
    )


async def measure_judge(ctx: AppContext, router: Router, labels: Sequence[JudgeLabel]) -> JudgeMeasured:
    """Grade every label with the router's judge (``CONCURRENT_GRADES`` at a time) and measure it.
    ``Invalid`` when the router has no judge, a true reward lies outside its range or a text is longer
    than ``max_prompt_chars``."""
    if not router.judge:
        raise Invalid(f"router {router.name!r} has no judge; set one with PATCH {{'judge': ...}}")
    limit = ctx.settings.max_prompt_chars
    for index, label in enumerate(labels):
        if not router.reward_lo <= label.reward <= router.reward_hi:
            raise Invalid(
                f"label {index}: reward {label.reward} is outside the router's reward range "
                f"[{router.reward_lo}, {router.reward_hi}]",
                param=f"body.labels.{index}.reward",
            )
        if len(label.prompt) > limit or len(label.answer) > limit:
            raise Invalid(f"label {index}: prompt and answer are limited to {limit} characters each")
    gate = asyncio.Semaphore(CONCURRENT_GRADES)

    async def grade(index: int, label: JudgeLabel) -> Verdict:
        async with gate:
            return await ask_judge(ctx, router, f"label-{index}", "labelled", label.prompt, label.answer)

    verdicts = await asyncio.gather(*(grade(i, label) for i, label in enumerate(labels)))
    return measured(router, labels, verdicts)
