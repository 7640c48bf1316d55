"""The floor against the incumbent, checked on the simulator's trace: safety that still learns.

For every policy row ``bench run`` compares each seed's rounds with what the incumbent a_0 would have
earned and spent on the same prompts. a_0 of round t is the model the decision names in
``info["incumbent"]`` (the conservative wrapper, ``routers/conservative.py``, names the one it checked
against), else the highest-priced available model of the round (the wrapper's documented default
incumbent: what a team calls without routing). With R_t the router's reward and I_t the incumbent's in
round t (1-based), per seed:

    floor ratio    min over t >= FLOOR_FROM of  (R_1 + ... + R_t) / (I_1 + ... + I_t)   (rounds whose
                   incumbent sum is <= 0 are skipped; none left: null)
    off share      share of rounds whose delivered model is not a_0 (a declined round counts as off)
    cost saved     1 - (router's spend) / (a_0's spend on the same prompts), and the difference in USD
                   per round
    spend share    (router's spend) / (a_0's spend on the same prompts): 1 - cost saved
    over target    share of rounds whose decision said the floor held the spend above a cost target
                   (``info["floor_over_target"]``, routers/conservative.py); 0 without a target

The issue's floor "cumulative reward >= (1 - alpha) x the incumbent's at every round t >= 100" holds for a
seed iff its floor ratio is >= 1 - alpha.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

FLOOR_FROM = 100


def floor_ratio(reward: np.ndarray, incumbent_reward: np.ndarray, start: int = FLOOR_FROM) -> float | None:
    """min over rounds t >= ``start`` (1-based) of cumulative reward / the incumbent's cumulative reward,
    skipping rounds whose incumbent sum is <= 0; None when no round is left."""
    mine = np.cumsum(np.asarray(reward, dtype=np.float64))[start - 1 :]
    theirs = np.cumsum(np.asarray(incumbent_reward, dtype=np.float64))[start - 1 :]
    positive = theirs > 0
    if not positive.any():
        return None
    return float(np.min(mine[positive] / theirs[positive]))


def incumbent_comparison(
    reward: np.ndarray,
    cost: np.ndarray,
    delivered: np.ndarray,
    incumbent: np.ndarray,
    incumbent_reward: np.ndarray,
    incumbent_cost: np.ndarray,
    start: int = FLOOR_FROM,
    over_target: np.ndarray | None = None,
) -> dict[str, Any]:
    """One seed's figures of the module doc; ``delivered`` / ``incumbent`` are model indices per round
    (-1: declined); ``over_target`` the rounds whose decision said ``floor_over_target``."""
    spend, incumbent_spend = float(np.sum(cost)), float(np.sum(incumbent_cost))
    rounds = max(int(reward.shape[0]), 1)
    return {
        "floor_ratio": floor_ratio(reward, incumbent_reward, start),
        "off_incumbent_share": float(np.mean(delivered != incumbent)) if reward.shape[0] else 0.0,
        "cost_saved_share": 1.0 - spend / incumbent_spend if incumbent_spend > 0 else None,
        "spend_share": spend / incumbent_spend if incumbent_spend > 0 else None,
        "cost_saved_usd": (incumbent_spend - spend) / rounds,
        "incumbent_reward": float(np.mean(incumbent_reward)) if reward.shape[0] else 0.0,
        "floor_over_target_share": float(np.mean(over_target))
        if over_target is not None and over_target.size
        else 0.0,
    }


def summarise_incumbent(per_seed: Sequence[dict[str, Any]], start: int = FLOOR_FROM) -> dict[str, Any]:
    """The report's ``incumbent`` block of a policy row: the per-seed figures and their summaries (the
    worst seed's floor ratio, means of the rest)."""
    ratios = [s["floor_ratio"] for s in per_seed if s["floor_ratio"] is not None]
    saved = [s["cost_saved_share"] for s in per_seed if s["cost_saved_share"] is not None]
    spend = [s["spend_share"] for s in per_seed if s.get("spend_share") is not None]
    return {
        "floor_from_round": start,
        "min_floor_ratio": min(ratios) if ratios else None,
        "off_incumbent_share": float(np.mean([s["off_incumbent_share"] for s in per_seed])),
        "cost_saved_share": float(np.mean(saved)) if saved else None,
        "spend_share": float(np.mean(spend)) if spend else None,
        "floor_over_target_share": float(np.mean([s.get("floor_over_target_share", 0.0) for s in per_seed])),
        "cost_saved_usd": float(np.mean([s["cost_saved_usd"] for s in per_seed])),
        "incumbent_reward": float(np.mean([s["incumbent_reward"] for s in per_seed])),
        "per_seed": list(per_seed),
    }
