"""Linear contextual bandits: disjoint LinUCB (Li et al., 2010, Algorithm 1).

Per arm a, a ridge regression of reward on the context x:

    A_a = lambda I + sum_s x_s x_s^T,    b_a = sum_s r_s x_s,    theta_a = A_a^{-1} b_a
    index_a(x) = x^T theta_a + alpha * sqrt(x^T A_a^{-1} x)

The inverse is kept in closed form with the Sherman-Morrison update
    A^{-1} <- A^{-1} - (A^{-1} x x^T A^{-1}) / (1 + x^T A^{-1} x),
so ``select`` and ``update`` cost O(d^2) per arm, independent of the history length.

``shared=True`` is the variant of the PAK-UCB authors' harness (the LinUCB baseline of the BALROG paper,
spec section 6): one ridge model over the feature map z(x, a) = [x ; e_a] (the context followed by a
one-hot of the arm's slot, d + #slots dimensions), index_a(x) = z^T theta + alpha sqrt(z^T A^{-1} z). The
context part of theta is shared by all arms, so estimates differ between arms only by their intercepts:
this baseline cannot route by prompt (it converges to the best-average model). Adding an arm appends a
coordinate (A^{-1} grows by a diagonal 1/lambda entry: no past z touched it); a removed arm's coordinate
is kept, unused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from routers.base import Context, Decision, Observation, argmax_random_tie, candidate_arms
from routers.hyperparameters import DIM_DESCRIPTION, Dim, Hyperparameters, NonNegative, Positive
from routers.policy_base import PolicyBase


class LinUCBHyperparameters(Hyperparameters):
    """LinUCB's hyperparameters."""

    alpha: NonNegative = Field(1.0, description="bonus weight")
    ridge: Positive = Field(1.0, description="ridge lambda of A_a = lambda I + sum x x^T")
    dim: Dim | None = Field(None, description=DIM_DESCRIPTION)
    shared: bool = Field(False, description="one model over [x ; one-hot(arm)] instead of one per arm")


class LinUCB(PolicyBase):
    """Disjoint LinUCB. Hyperparameters (``LinUCBHyperparameters``): ``alpha`` (bonus weight, >= 0),
    ``ridge`` (lambda > 0), ``dim`` (context dimension; inferred from the first context when omitted),
    ``shared`` (False: one model per arm; True: one model over [x ; one-hot(arm)], see the module
    docstring)."""

    name: ClassVar[str] = "linucb"
    hyperparameters: ClassVar[type[Hyperparameters]] = LinUCBHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed)
        p = self._configure(hyperparameters, LinUCBHyperparameters)
        self.shared = p.shared
        self._slots: dict[str, int] = {}
        self.alpha = p.alpha
        self.ridge = p.ridge
        self.dim = p.dim
        self._a_inv: dict[str, np.ndarray] = {}
        self._b: dict[str, np.ndarray] = {}
        self._n: dict[str, int] = {}
        if self.dim is not None:
            for arm in self._arms:
                self._on_add_arm(arm)

    def _on_add_arm(self, arm: str) -> None:
        if self.shared:
            self._add_slot(arm)
            return
        if self.dim is None or arm in self._a_inv:
            return
        self._a_inv[arm] = np.eye(self.dim) / self.ridge
        self._b[arm] = np.zeros(self.dim)
        self._n[arm] = 0

    def _add_slot(self, arm: str) -> None:
        """Shared model: give ``arm`` a one-hot coordinate (A^{-1} gains a 1/lambda diagonal entry)."""
        if self.dim is None:
            return
        if arm in self._slots:  # re-added after a removal: same coordinate
            self._n.setdefault(arm, 0)
            return
        if "" not in self._a_inv:
            self._a_inv[""] = np.eye(self.dim) / self.ridge
            self._b[""] = np.zeros(self.dim)
        old = self._a_inv[""]
        size = old.shape[0]
        grown = np.zeros((size + 1, size + 1))
        grown[:size, :size] = old
        grown[size, size] = 1.0 / self.ridge
        self._a_inv[""] = grown
        self._b[""] = np.append(self._b[""], 0.0)
        self._slots[arm] = size
        self._n[arm] = 0

    def _features(self, arm: str, x: np.ndarray) -> tuple[str, np.ndarray]:
        """(key of the model, its feature vector): (arm, x) disjoint; ("", [x ; e_slot]) shared."""
        if not self.shared:
            return arm, x
        z = np.zeros(self._a_inv[""].shape[0])
        z[: self.dim] = x
        z[self._slots[arm]] = 1.0
        return "", z

    def _on_remove_arm(self, arm: str) -> None:
        if self.shared:
            self._n.pop(arm, None)  # the slot stays: its coordinate is part of the shared model
            return
        for table in (self._a_inv, self._b, self._n):
            table.pop(arm, None)

    def explain(self, arm: str, x: np.ndarray) -> dict[str, float]:
        """estimate = x^T theta_a, bonus = alpha * sqrt(x^T A_a^{-1} x), index = estimate + bonus (shared:
        z(x, a) in place of x, one A and b)."""
        key, x = self._features(arm, x)
        a_inv = self._a_inv[key]
        a_inv_x = a_inv @ x
        estimate = float(a_inv_x @ self._b[key])  # x^T A^-1 b, A^-1 symmetric
        bonus = self.alpha * float(np.sqrt(max(float(x @ a_inv_x), 0.0)))
        return {"estimate": estimate, "bonus": bonus, "index": estimate + bonus, "n": float(self._n[arm])}

    def select(self, context: Context) -> Decision:
        x = np.asarray(context.embedding, dtype=np.float64).reshape(-1)
        self._ensure_dim(x)
        arms = candidate_arms(self._arms, context)
        if not arms:
            return Decision(arms=[], info={"reason": "no candidate arm"})
        scores = {arm: self.explain(arm, x) for arm in arms}
        index = np.array([scores[a]["index"] for a in arms])
        chosen = arms[argmax_random_tie(index, self._draws(context))]
        return Decision(arms=[chosen], scores=scores)

    def update(self, observation: Observation) -> None:
        """Fold one reward: A^{-1} by Sherman-Morrison, b += r x. Feedback without a reward is ignored."""
        if observation.reward is None or observation.arm not in self._arms:
            return
        x = np.asarray(observation.embedding, dtype=np.float64).reshape(-1)
        self._ensure_dim(x)
        key, x = self._features(observation.arm, x)
        a_inv = self._a_inv[key]
        a_inv_x = a_inv @ x
        a_inv -= np.outer(a_inv_x, a_inv_x) / (1.0 + float(x @ a_inv_x))
        self._b[key] += float(observation.reward) * x
        self._n[observation.arm] += 1

    def _state(self) -> dict[str, Any]:
        return {
            "dim": self.dim,
            "a_inv": {a: m.copy() for a, m in self._a_inv.items()},
            "b": {a: v.copy() for a, v in self._b.items()},
            "n": dict(self._n),
            "slots": dict(self._slots),
        }

    def _load(self, learned: Mapping[str, Any]) -> None:
        if learned.get("dim") is None:
            return
        self.dim = int(learned["dim"])
        self.config["dim"] = self.dim
        self._a_inv = {a: np.array(m, dtype=np.float64) for a, m in learned["a_inv"].items()}
        self._b = {a: np.array(v, dtype=np.float64) for a, v in learned["b"].items()}
        self._n = {a: int(n) for a, n in learned["n"].items()}
        self._slots = {a: int(i) for a, i in dict(learned.get("slots", {})).items()}
        for arm in self._arms:
            self._on_add_arm(arm)
