"""PAK-UCB: per-arm kernel ridge regression with a UCB bonus (Hu et al. 2025; BALROG spec section 6).

Per arm g with stored points X_g = (x_1..x_n), rewards y_g, kernel matrix K_g and M_g = (K_g + alpha I)^{-1}:

    mu_g(x)    = k_g(x)^T M_g y_g
    sigma_g(x) = alpha^{-1/2} sqrt(max(0, k(x, x) - k_g(x)^T M_g k_g(x)))
    index_g(x) = mu_g(x) + eta sigma_g(x)          (+inf while the arm has no point)

M_g is kept exactly: it starts empty (n = 0) and grows by the block (Schur complement) inverse, so the first
point gives M = [1 / (k(x, x) + alpha)] (not an identity or a scaled identity). Cost is bounded by a window:
an arm keeps its latest ``window`` points, and evicting the oldest is the inverse block downdate
D^{-1} = G - f f^T / e for M = [[e, f^T], [f, G]]. select is O(n d + n^2) per arm, update O(n^2),
n <= window.

Hyperparameters: ``kernel`` "poly" ((gamma <x, x'> + c)^degree, degree 3, c = 1) or "rbf"
(exp(-gamma ||x - x'||^2)); ``gamma`` (default 1); ``alpha`` (ridge, default 1); ``eta`` (bonus weight;
default sqrt(2 ln(2 T G / delta)) with T = ``horizon``, G = the number of arms, delta = 0.05, the
reference code's choice); ``window`` (default 1000); ``dim`` (inferred when omitted).

``horizon`` T is the run length. ``bench run`` passes its own T when the spec does not set one
(``bench.policy_spec``). The gateway does not know T: a router uses its configured ``horizon`` (default
10000), so set it to the number of decisions the router is expected to serve. A wrong guess costs
little: eta grows as sqrt(ln T) (G = 3: eta = 5.29 at T = 1e4, 5.71 at T = 1e5, 4.84 at T = 1e3).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from routers.base import Context, Decision, Observation, argmax_random_tie, candidate_arms
from routers.diversity import squared_distances
from routers.hyperparameters import (
    DIM_DESCRIPTION,
    Dim,
    Hyperparameters,
    NonNegative,
    Positive,
    PositiveCount,
)
from routers.policy_base import PolicyBase


class PakUCBHyperparameters(Hyperparameters):
    """PAK-UCB's hyperparameters (see the module docstring)."""

    kernel: Literal["poly", "rbf"] = "poly"
    gamma: Positive = 1.0
    alpha: Positive = Field(1.0, description="kernel ridge")
    eta: NonNegative | None = Field(None, description="bonus weight; null: sqrt(2 ln(2 T G / 0.05))")
    horizon: PositiveCount = Field(10_000, description="T, the run length, for the default eta")
    window: PositiveCount = Field(1000, description="points kept per arm")
    dim: Dim | None = Field(None, description=DIM_DESCRIPTION)


class PakUCB(PolicyBase):
    """Kernel UCB per arm (PAK-UCB). See the module docstring for formulas and hyperparameters."""

    name: ClassVar[str] = "pak-ucb"
    hyperparameters: ClassVar[type[Hyperparameters]] = PakUCBHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed)
        p = self._configure(hyperparameters, PakUCBHyperparameters)
        self.kernel, self.gamma, self.alpha = p.kernel, p.gamma, p.alpha
        self.eta, self.horizon, self.window, self.dim = p.eta, p.horizon, p.window, p.dim
        self._x: dict[str, np.ndarray] = {}
        self._y: dict[str, np.ndarray] = {}
        self._m: dict[str, np.ndarray] = {}
        for arm in self._arms:
            self._on_add_arm(arm)

    def kern(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """k(a_i, b_j) for rows of a (n, d) and b (m, d)."""
        if self.kernel == "poly":
            return (self.gamma * (a @ b.T) + 1.0) ** 3
        return np.exp(-self.gamma * squared_distances(a, b))

    def bonus_weight(self, arms: int) -> float:
        """eta, or sqrt(2 ln(2 T G / 0.05)) by default."""
        if self.eta is not None:
            return float(self.eta)
        return math.sqrt(2.0 * math.log(2.0 * self.horizon * max(arms, 1) / 0.05))

    def _on_add_arm(self, arm: str) -> None:
        if arm in self._x and self._x[arm].shape[1] == (self.dim or 0):
            return
        d = self.dim or 0
        self._x[arm] = np.zeros((0, d))
        self._y[arm] = np.zeros(0)
        self._m[arm] = np.zeros((0, 0))

    def _on_remove_arm(self, arm: str) -> None:
        for table in (self._x, self._y, self._m):
            table.pop(arm, None)

    def explain(self, arm: str, x: np.ndarray, eta: float) -> dict[str, float]:
        """estimate mu_g(x), bonus eta sigma_g(x), index = their sum (+inf for an empty arm)."""
        xs = self._x[arm]
        n = xs.shape[0]
        if n == 0:
            return {"estimate": 0.0, "bonus": math.inf, "index": math.inf, "n": 0.0}
        kx = self.kern(xs, x[None, :])[:, 0]
        mk = self._m[arm] @ kx
        mu = float(mk @ self._y[arm])
        kxx = float(self.kern(x[None, :], x[None, :])[0, 0])
        sigma = math.sqrt(max(kxx - float(kx @ mk), 0.0) / self.alpha)
        return {"estimate": mu, "bonus": eta * sigma, "index": mu + eta * sigma, "n": float(n)}

    def select(self, context: Context) -> Decision:
        """g_t = argmax_g mu_g(x) + eta sigma_g(x), empty arms first, ties at random."""
        x = np.asarray(context.embedding, dtype=np.float64).reshape(-1)
        self._ensure_dim(x)
        arms = candidate_arms(self._arms, context)
        if not arms:
            return Decision(arms=[], info={"reason": "no candidate arm"})
        eta = self.bonus_weight(len(self._arms))
        scores = {a: self.explain(a, x, eta) for a in arms}
        index = np.array([scores[a]["index"] for a in arms])
        return Decision(arms=[arms[argmax_random_tie(index, self._draws(context))]], scores=scores)

    def update(self, observation: Observation) -> None:
        """Append (x, y): M grows by the block inverse; past ``window`` points the oldest is downdated out."""
        if observation.reward is None or observation.arm not in self._x:
            return
        x = np.asarray(observation.embedding, dtype=np.float64).reshape(-1)
        self._ensure_dim(x)
        arm = observation.arm
        xs, m = self._x[arm], self._m[arm]
        if xs.shape[0] >= self.window:
            e, f, g = m[0, 0], m[1:, 0], m[1:, 1:]
            m = g - np.outer(f, f) / e
            xs, self._y[arm] = xs[1:], self._y[arm][1:]
        b = self.kern(xs, x[None, :])[:, 0]
        c = float(self.kern(x[None, :], x[None, :])[0, 0]) + self.alpha
        mb = m @ b
        schur = c - float(b @ mb)
        n = xs.shape[0]
        grown = np.empty((n + 1, n + 1))
        grown[:n, :n] = m + np.outer(mb, mb) / schur
        grown[:n, n] = grown[n, :n] = -mb / schur
        grown[n, n] = 1.0 / schur
        self._m[arm] = grown
        self._x[arm] = np.vstack([xs, x[None, :]])
        self._y[arm] = np.append(self._y[arm], float(observation.reward))

    def _state(self) -> dict[str, Any]:
        return {
            "dim": self.dim,
            "x": {a: v.copy() for a, v in self._x.items()},
            "y": {a: v.copy() for a, v in self._y.items()},
            "m": {a: v.copy() for a, v in self._m.items()},
        }

    def _load(self, learned: Mapping[str, Any]) -> None:
        if learned.get("dim") is None:
            return
        self.dim = int(learned["dim"])
        self.config["dim"] = self.dim
        for table, key in ((self._x, "x"), (self._y, "y"), (self._m, "m")):
            for arm, value in dict(learned[key]).items():
                if arm in self._x:
                    table[arm] = np.array(value, dtype=np.float64)
