"""Gateway-driven cascades: a router with a judge gets answers checked before they are returned.

The judge is an HTTP endpoint of the tenant's: ``POST judge_url`` with ``{"decision_id", "model",
"prompt", "answer"}`` answers ``{"pass": true|false}`` or ``{"score": number}``. A step passes when its
score (pass = 1, fail = 0) reaches the router's ``judge_threshold``. Each step is learned as a
``cascade-step`` event whose reward is the score clipped to the router's reward range (pass/fail map to
its ends); a failed step asks for the next model the way ``POST /route/{id}/next`` does (the fixed
cascade's next model, or the policy re-asked without the models tried). The cascade stops at the first
pass, when nothing is left, after ``judge_max_steps`` calls, or when the judge itself fails (the last
answer is then returned as it is, and the step records no reward).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import httpx

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
    client: httpx.AsyncClient,
    router: Router,
    timeout_s: float,
    decision_id: str,
    model: str,
    prompt: str,
    answer: str,
) -> Verdict:
    assert router.judge_url is not None
    body = {"decision_id": decision_id, "model": model, "prompt": prompt, "answer": answer}
    try:
        response = await client.post(router.judge_url, json=body, timeout=timeout_s)
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
            raise ValueError(f"expected {{'pass': bool}} or {{'score': number}}, got {str(data)[:200]}")
    except (httpx.HTTPError, ValueError) as exc:
        log.warning("judge of router %s failed on decision %s: %s", router.id, decision_id, exc)
        return Verdict(None, False)
    return Verdict(score, score >= router.judge_threshold)
