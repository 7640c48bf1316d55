"""Set baselines of C2MAB-V's experiments (Dai et al., 2024, Sec. 6; spec section 6).

All share ``SetBandit``'s statistics, cost normalisation, cascade order and state:

- ``cucb``: combinatorial UCB that ignores the budget: the top N models by
  mubar_k = min(muhat_k + alpha rad_k, 1), with C2MAB-V's radius (Lemma 1) and alpha = ``alpha_reward``
  (1.0); ties at random. (Monotone reward models, so the full N is optimal without a budget.)
- ``eps-greedy-set``: with probability eps_t = min(1, 2 sqrt(K) / sqrt(t)) a uniformly random set of N
  models, else the budgeted relaxed problem solved with the plug-in means (muhat, chat) and rounded.
- ``thompson-set``: Beta(1 + a_k, 1 + b_k) posteriors over rewards in [0, 1] (Bernoulli trick: each
  reward X adds s ~ Bernoulli(X) to a_k and 1 - s to b_k, drawn from the observation's
  ``decision_key``, so replicas agree); a sampled theta goes through the budgeted
  relaxed problem with the mean costs chat (``costs="mean"``) or, ``costs="ignore"``, the top N by theta.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from routers.base import Context, Observation, decision_rng
from routers.combinatorial import (
    ConfidenceSetBandit,
    SetBandit,
    SetHyperparameters,
    confidence_radius,
)
from routers.hyperparameters import Hyperparameters, NonNegative

Choice = tuple[list[int], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]


def _top(values: np.ndarray, n: int, rng: np.random.Generator) -> list[int]:
    """Indices of the n largest values, ties broken at random."""
    order = np.lexsort((np.asarray(rng.random(values.shape[0])), -values))
    return [int(i) for i in order[:n]]


class EpsGreedySetHyperparameters(SetHyperparameters):
    """eps-greedy-set's hyperparameters."""

    epsilon_scale: NonNegative = Field(2.0, description="eps_t = min(1, scale sqrt(K) / sqrt(t))")


class ThompsonSetHyperparameters(SetHyperparameters):
    """thompson-set's hyperparameters."""

    costs: Literal["mean", "ignore"] = Field("mean", description="budgeted (mean) or top N (ignore)")


class CUCB(ConfidenceSetBandit):
    """Cost-ignoring combinatorial UCB; ``alpha_reward`` (1.0), ``delta``/``horizon`` as in C2MAB-V."""

    name: ClassVar[str] = "cucb"

    def _choose(
        self, arms: list[str], est: dict[str, np.ndarray], context: Context, rng: np.random.Generator
    ) -> Choice:
        rad = confidence_radius(est["n_mu"], self.round, len(self._arms), self.delta)
        mu_bar = np.minimum(est["mu"] + self.alpha_reward * rad, 1.0)
        chosen = _top(mu_bar, self.set_size(len(arms)), rng)
        z = np.zeros(len(arms))
        z[chosen] = 1.0
        return chosen, z, mu_bar, est["c"], {"solver": "top-n"}


class EpsGreedySet(SetBandit):
    """eps-greedy over sets with eps_t = min(1, ``epsilon_scale`` sqrt(K) / sqrt(t)); ``epsilon_scale`` 2."""

    name: ClassVar[str] = "eps-greedy-set"

    hyperparameters: ClassVar[type[Hyperparameters]] = EpsGreedySetHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed, **hyperparameters)
        assert isinstance(self.params, EpsGreedySetHyperparameters)
        self.epsilon_scale = self.params.epsilon_scale

    def _choose(
        self, arms: list[str], est: dict[str, np.ndarray], context: Context, rng: np.random.Generator
    ) -> Choice:
        k = len(arms)
        n = self.set_size(k)
        eps = min(1.0, self.epsilon_scale * np.sqrt(k) / np.sqrt(self.round))
        if rng.random() < eps:
            chosen = [int(i) for i in rng.choice(k, size=n, replace=False)]
            z = np.zeros(k)
            z[chosen] = 1.0
            return chosen, z, est["mu"], est["c"], {"explore": True, "epsilon": eps}
        z, fallback, how = self.relaxed(est["mu"], est["c"], n)
        return (
            self.round_set(z, rng),
            z,
            est["mu"],
            est["c"],
            {"explore": False, "epsilon": eps, "fallback": fallback, "solver": how},
        )


class ThompsonSet(SetBandit):
    """Thompson sampling over sets; ``costs`` "mean" (budgeted relax-and-round) or "ignore" (top N)."""

    name: ClassVar[str] = "thompson-set"

    hyperparameters: ClassVar[type[Hyperparameters]] = ThompsonSetHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed, **hyperparameters)
        assert isinstance(self.params, ThompsonSetHyperparameters)
        self.costs_mode = self.params.costs
        self._beta: dict[str, list[float]] = {a: [0.0, 0.0] for a in self._arms}

    def _on_add_arm(self, arm: str) -> None:
        super()._on_add_arm(arm)
        self._beta.setdefault(arm, [0.0, 0.0])

    def _on_remove_arm(self, arm: str) -> None:
        super()._on_remove_arm(arm)
        self._beta.pop(arm, None)

    def update(self, observation: Observation) -> None:
        """Eq. 6 statistics, plus the Bernoulli trick: s ~ Bernoulli(clip(X, 0, 1)) into (a_k, b_k).

        s = 1[u < X] with u drawn from ``decision_rng(seed, json.dumps([decision_key, arm, kind]))``: a function of
        the observation alone, so every replica folding it draws the same s whatever it served before
        (with no ``decision_key``, u comes from the policy's own generator: not replica-safe)."""
        super().update(observation)
        if observation.reward is None or observation.arm not in self._beta:
            return
        s = float(self._update_rng(observation).random() < min(max(float(observation.reward), 0.0), 1.0))
        self._beta[observation.arm][0] += s
        self._beta[observation.arm][1] += 1.0 - s

    def _update_rng(self, observation: Observation) -> np.random.Generator:
        key = observation.decision_key
        if key is None:
            return self.rng
        return decision_rng(self.seed or 0, json.dumps([key, observation.arm, observation.kind]))

    def _choose(
        self, arms: list[str], est: dict[str, np.ndarray], context: Context, rng: np.random.Generator
    ) -> Choice:
        ab = np.array([self._beta[a] for a in arms], dtype=np.float64).reshape(-1, 2)
        theta = rng.beta(1.0 + ab[:, 0], 1.0 + ab[:, 1])
        n = self.set_size(len(arms))
        if self.costs_mode == "ignore":
            chosen = _top(theta, n, rng)
            z = np.zeros(len(arms))
            z[chosen] = 1.0
            return chosen, z, theta, est["c"], {"solver": "top-n"}
        z, fallback, how = self.relaxed(theta, est["c"], n)
        return self.round_set(z, rng), z, theta, est["c"], {"fallback": fallback, "solver": how}

    def _state(self) -> dict[str, Any]:
        return {**super()._state(), "beta": {a: list(v) for a, v in self._beta.items()}}

    def _load(self, learned: Mapping[str, Any]) -> None:
        super()._load(learned)
        self._beta = {a: [float(x) for x in v] for a, v in learned.get("beta", {}).items()}
        for arm in self._arms:
            self._beta.setdefault(arm, [0.0, 0.0])
