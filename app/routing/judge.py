"""A router's judge: an HTTP endpoint of the tenant's that scores forwarded answers (the judged cascade
that asks it is in app/routing/cascade.py). ``POST judge_url`` with ``{"decision_id", "model",
"prompt", "answer"}`` answers ``{"pass": true|false}`` or ``{"score": number}``; a step passes when its
score (pass = the router's highest reward, fail = its lowest) reaches the router's ``judge_threshold``."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import httpx

from app.backends import BackendClient
from app.store.models import Router

log = logging.getLogger(__name__)


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
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:  # redacted, then cut: no secret halved
        reason = backends.excerpt(f"{type(exc).__name__}: {exc}")
        log.warning("judge of router %s failed on decision %s: %s", router.id, decision_id, reason)
        return Verdict(None, False)
    return Verdict(score, score >= router.judge_threshold)
