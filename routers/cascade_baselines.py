"""Cascade baselines of PromptWise (Hu et al., 2025, Sec. 5.1; spec section 5).

"Till-succeed" policies keep calling models for a prompt until one succeeds or tau_max calls were made;
each ``select`` names the next model (``mode="cascade"``, ``adaptive=True``) and the caller reports every
call's outcome. Lowest-cost and highest-cost call one model per prompt (``mode="single"``).

- ``random-till-succeed``: each call picks uniformly among the candidates.
- ``greedy-till-succeed``: each call picks argmax_a (rbar_a - lambda c_a), rbar_a the arm's non-contextual
  mean reward over all its past calls (+inf while unvisited, so every arm is tried first); it never stops
  early because of a negative gain, only on success or tau_max.
- ``lowest-cost`` / ``highest-cost``: the cheapest / most expensive candidate for this prompt (ties at
  random), once, without exploration.

All accept ``cost_weight`` (lambda) so a benchmark can pass its lambda uniformly; only greedy uses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from routers.base import Context, Decision, Observation, argmax_random_tie, candidate_arms
from routers.hyperparameters import Hyperparameters
from routers.logistic_ucb import CascadeHyperparameters, call_budget
from routers.policy_base import PolicyBase
from routers.prices import call_costs


class _CascadeBaseline(PolicyBase):
    cost_aware: ClassVar[bool] = True

    hyperparameters: ClassVar[type[Hyperparameters]] = CascadeHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed)
        p = self._configure(hyperparameters, CascadeHyperparameters)
        self.cost_weight = p.cost_weight
        self.max_calls = p.max_calls
        self.prices = dict(p.prices)
        self.allow_repeat = p.allow_repeat

    def _next_candidates(self, context: Context) -> list[str]:
        if len(context.tried) >= call_budget(context, self.max_calls):
            return []
        return candidate_arms(self._arms, context, self.allow_repeat)

    def update(self, observation: Observation) -> None:
        pass


class RandomTillSucceed(_CascadeBaseline):
    """Uniform random model per call, until success or tau_max."""

    name: ClassVar[str] = "random-till-succeed"

    def select(self, context: Context) -> Decision:
        arms = self._next_candidates(context)
        chosen = [arms[int(self._rng(context).integers(len(arms)))]] if arms else []
        return Decision(arms=chosen, mode="cascade", adaptive=True)


class GreedyTillSucceed(_CascadeBaseline):
    """argmax_a (rbar_a - lambda c_a) per call (unvisited arms first), until success or tau_max."""

    name: ClassVar[str] = "greedy-till-succeed"

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed, **hyperparameters)
        self._sum: dict[str, float] = {a: 0.0 for a in self._arms}
        self._n: dict[str, int] = {a: 0 for a in self._arms}

    def _on_add_arm(self, arm: str) -> None:
        self._sum.setdefault(arm, 0.0)
        self._n.setdefault(arm, 0)

    def _on_remove_arm(self, arm: str) -> None:
        self._sum.pop(arm, None)
        self._n.pop(arm, None)

    def select(self, context: Context) -> Decision:
        arms = self._next_candidates(context)
        if not arms:
            return Decision(arms=[], mode="cascade", adaptive=True)
        costs = call_costs(arms, context, self.prices)
        scores = {}
        for arm, cost in zip(arms, costs, strict=True):
            mean = self._sum[arm] / self._n[arm] if self._n[arm] else np.inf
            scores[arm] = {
                "estimate": float(mean),
                "cost": float(cost),
                "index": float(mean - self.cost_weight * cost),
            }
        index = np.array([scores[a]["index"] for a in arms])
        chosen = arms[argmax_random_tie(index, self._draws(context))]
        return Decision(arms=[chosen], scores=scores, mode="cascade", adaptive=True)

    def update(self, observation: Observation) -> None:
        """rbar_a <- running mean of every reward of arm a (updated after each call, inside a step too)."""
        if observation.reward is None or observation.arm not in self._n:
            return
        self._sum[observation.arm] += float(observation.reward)
        self._n[observation.arm] += 1

    def _state(self) -> dict[str, Any]:
        return {"sum": dict(self._sum), "n": dict(self._n)}

    def _load(self, learned: Mapping[str, Any]) -> None:
        self._sum = {a: float(v) for a, v in learned.get("sum", {}).items()}
        self._n = {a: int(v) for a, v in learned.get("n", {}).items()}
        for arm in self._arms:
            self._on_add_arm(arm)


class _PriceExtreme(_CascadeBaseline):
    sign: ClassVar[float] = 1.0

    def select(self, context: Context) -> Decision:
        if context.tried:
            return Decision(arms=[], mode="single")
        arms = candidate_arms(self._arms, context, self.allow_repeat)
        if not arms:
            return Decision(arms=[], mode="single")
        costs = call_costs(arms, context, self.prices)
        chosen = arms[argmax_random_tie(self.sign * costs, self._draws(context))]
        return Decision(
            arms=[chosen], scores={a: {"cost": float(c)} for a, c in zip(arms, costs, strict=True)}
        )


class LowestCost(_PriceExtreme):
    """The cheapest candidate, one call per prompt."""

    name: ClassVar[str] = "lowest-cost"
    sign: ClassVar[float] = -1.0


class HighestCost(_PriceExtreme):
    """The most expensive candidate, one call per prompt."""

    name: ClassVar[str] = "highest-cost"
    sign: ClassVar[float] = 1.0
