"""A small cascade simulator for the tests: the Sudoku-like Table 1 environment with true pass rates."""

from __future__ import annotations

import numpy as np

from bench.synth_promptwise import LEVELS, PASS_RATE, PRICES
from routers.base import Context, Observation, Policy

ARMS = list(PRICES)
EYE = np.eye(len(LEVELS), dtype=np.float32)


def run_cascades(policy: Policy, steps: int, seed: int, cost_weight: float = 0.05) -> float:
    """Mean utility 1[success] - lambda * sum(costs) over ``steps`` prompts (PromptWise Eq. 1)."""
    rng = np.random.default_rng(seed)
    total = 0.0
    for _ in range(steps):
        level = int(rng.integers(len(LEVELS)))
        x = EYE[level]
        tried: list[str] = []
        while True:
            decision = policy.select(Context(embedding=x, tried=tuple(tried), costs=PRICES))
            if not decision.arms:
                break
            arm = decision.arms[0]
            reward = float(rng.random() < PASS_RATE[arm][LEVELS[level]])
            total -= cost_weight * PRICES[arm]
            tried.append(arm)
            policy.update(
                Observation(embedding=x, arm=arm, reward=reward, cost=PRICES[arm], kind="cascade-step")
            )
            if reward == 1.0:
                total += 1.0
                break
            if not decision.adaptive:
                break
    return total / steps
