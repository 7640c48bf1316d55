"""A direct Bernoulli loop for the trusted-routing tests: one context, fixed prices, every arm's reward
drawn each round (so the incumbent's reward on the same prompts is known)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from routers.base import Context, Observation, Policy

X = np.array([1.0, 0.0], dtype=np.float32)


@dataclass
class Run:
    reward: np.ndarray  # (T,) the router's realised reward
    cost: np.ndarray  # (T,) its spend
    rewards: np.ndarray  # (T, K) every arm's draw, in ``arms`` order
    picks: list[str]
    forced: np.ndarray  # (T,) bool: the conservative wrapper played the incumbent instead


def play(
    policy: Policy, means: Mapping[str, float], prices: Mapping[str, float], rounds: int, seed: int
) -> Run:
    arms = list(means)
    p = np.array([means[a] for a in arms])
    rng = np.random.default_rng(seed)
    rewards = (rng.random((rounds, len(arms))) < p).astype(float)
    reward, cost, forced = np.zeros(rounds), np.zeros(rounds), np.zeros(rounds, dtype=bool)
    picks: list[str] = []
    for t in range(rounds):
        decision = policy.select(Context(embedding=X, costs=prices, rng=np.random.default_rng([seed, t])))
        arm = decision.arms[0]
        r = float(rewards[t, arms.index(arm)])
        policy.update(Observation(embedding=X, arm=arm, reward=r, cost=float(prices[arm])))
        reward[t], cost[t] = r, prices[arm]
        forced[t] = bool(decision.info.get("incumbent_forced", False))
        picks.append(arm)
    return Run(reward=reward, cost=cost, rewards=rewards, picks=picks, forced=forced)
