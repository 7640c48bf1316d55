"""C2MAB-V: cost-effective combinatorial selection of a set of models under a budget (Dai et al., 2024).

Each round the policy picks a set S of at most (AWC) or exactly (SUC, AIC) N models. Per model k it keeps
the mean observed reward mu_k and normalised cost c_k over the calls actually made (Eq. 6: only models
that were called are updated), with the confidence radius of Lemma 1 (spec 3.1):

    L_t = ln(2 pi^2 K t^3 / (3 delta)),   rad_k = sqrt(L_t / (2 n_k))   (+inf while n_k = 0)
    mubar_k = min(muhat_k + alpha_mu rad_k, 1),   cbar_k = max(chat_k - alpha_c rad_k, 0)

solves the relaxed problem of its reward model (``routers.relaxation``, Eq. 3-5) with the budget rho on
cbar, and rounds the relaxed z to a set with E[1_S] = z (``routers.rounding``, Alg. 2 and 3). The budget
therefore holds in expectation, not per round (spec 8.7). AWC is a cascade: the set is returned in
cascade order (cheapest cbar first by default) and the caller stops at the first reward >=
``success_threshold``.

Costs: an observation's ``cost`` is USD; the policy normalises by a scale (spec 5.4, H1), the largest
reference cost among the policy's *current* arms (``cost_scale`` overrides it with a fixed USD amount):

    scale = max_{k in current arms} C_k,   C_k = prices[k] if priced, else the mean of the
            Context.costs[k] the policy was shown, else the mean observed cost of k

The budget ``budget`` (rho) therefore means: per round, at most rho times one call to the most expensive
model the router has now. Removing that model rescales rho to the next priciest one; adding it back
restores the same scale, because a model's mean expected cost is remembered across its removal (its
reward statistics are not). A request restricted by ``Context.arms`` does not change the scale.
``cost_normalization="none"`` uses costs as reported.

Variants: ``batch_size`` B > 1 recomputes z every B rounds and re-rounds it each round (App. E.3, the
asynchronous local-cloud variant); ``direct=True`` is C2MAB-V-Direct (Eq. 48, no rounding). The set
baselines of the paper's Sec. 6 (CUCB, eps-greedy, Thompson sampling) are in ``routers.set_baselines``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
from pydantic import Field

from routers.base import Context, Decision, Observation, candidate_arms
from routers.hyperparameters import Finite, Hyperparameters, NonNegative, Positive, PositiveCount, Prices
from routers.policy_base import PolicyBase
from routers.relaxation import (
    awc_continuous_greedy,
    awc_enumerate,
    awc_vertex_count,
    direct_enumerate,
    linear_relaxation,
)
from routers.rounding import pairwise_round, swap_round

REWARD_MODELS: tuple[str, ...] = ("awc", "suc", "aic")
DEFAULT_BUDGET: dict[str, float] = {"awc": 0.45, "suc": 0.5, "aic": 0.3}  # the paper's Sec. 6 scenarios
CASCADE_ORDERS: tuple[str, ...] = ("cost", "price", "reward")


class SetHyperparameters(Hyperparameters):
    """The hyperparameters of every set policy (see ``SetBandit``)."""

    reward: Literal["awc", "suc", "aic"] = "awc"
    max_models: PositiveCount | None = Field(None, description="N; null: min(4, number of models)")
    budget: NonNegative | None = Field(None, description="rho, normalised cost units; null: the paper's")
    prices: Prices = Field(default_factory=dict, description="{model: USD per call}: reference costs")
    cost_scale: Positive | None = Field(None, description="USD of one normalised cost unit")
    cost_normalization: Literal["max-price", "none"] = "max-price"
    cascade_order: Literal["cost", "price", "reward"] = "cost"
    success_threshold: Finite = 0.5
    solver: Literal["auto", "enumerate", "greedy"] = "auto"
    greedy_steps: PositiveCount = 20
    max_vertices: PositiveCount = 100_000
    rounding: Literal["swap", "pairwise"] | None = Field(
        None, description="null: swap for AWC, else pairwise"
    )
    cost_weight: Finite | None = Field(None, description="accepted and unused (rho trades cost here)")

    def resolved(self) -> Self:
        """``budget`` and ``rounding`` filled in from the reward model when not given."""
        budget = DEFAULT_BUDGET[self.reward] if self.budget is None else self.budget
        rounding = self.rounding or ("swap" if self.reward == "awc" else "pairwise")
        return self.model_copy(update={"budget": budget, "rounding": rounding})


class ConfidenceHyperparameters(SetHyperparameters):
    """The UCB settings shared by C2MAB-V and CUCB."""

    alpha_reward: NonNegative = Field(1.0, description="alpha_mu, the reward bonus weight")
    delta: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = Field(
        None, description="confidence; null: 1 / horizon"
    )
    horizon: PositiveCount = Field(10_000, description="T, the run length")


class C2MABVHyperparameters(ConfidenceHyperparameters):
    """C2MAB-V's hyperparameters (see ``C2MABV``)."""

    alpha_cost: NonNegative = Field(0.01, description="alpha_c, the cost bonus weight")
    batch_size: PositiveCount = Field(1, description="B: rounds between solves")
    direct: bool = Field(False, description="C2MAB-V-Direct (no rounding)")


class SetBandit(PolicyBase):
    """Shared plumbing of the set policies: per-model statistics, cost normalisation, the relaxed solve and
    rounding, cascade order, state. Subclasses implement ``_choose``.

    Hyperparameters: ``reward`` "awc" | "suc" | "aic"; ``max_models`` N (None: min(4, number of models));
    ``budget`` rho in normalised cost units, i.e. a fraction of one call to the priciest current model
    (None: the paper's 0.45 / 0.5 / 0.3); ``prices`` {model: USD per call} (reference costs of the scale
    and the "price" cascade order); ``cost_scale`` USD (a fixed scale, overriding the current arms');
    ``cost_normalization`` "max-price" | "none"; ``cascade_order`` "cost" | "price" | "reward";
    ``success_threshold`` (0.5: a correct answer in the paper's graded rewards); ``solver`` "auto" |
    "enumerate" | "greedy" for AWC (auto: enumeration while at most ``max_vertices`` vertices, else
    continuous greedy with ``greedy_steps``); ``rounding`` "swap" | "pairwise" (None: swap for AWC,
    pairwise for SUC/AIC); ``cost_weight`` is accepted and unused (the budget rho trades cost here).
    """

    cost_aware: ClassVar[bool] = True

    hyperparameters: ClassVar[type[Hyperparameters]] = SetHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed)
        p = self._configure(hyperparameters, SetHyperparameters)
        self.reward, self.max_models, self.budget = p.reward, p.max_models, float(p.budget or 0.0)
        # costs: reference prices and their normalisation
        self.prices, self.cost_scale = dict(p.prices), p.cost_scale
        self.cost_normalization = p.cost_normalization
        self.cascade_order, self.success_threshold = p.cascade_order, p.success_threshold
        # the relaxed problem's solver and rounding
        self.solver, self.greedy_steps = p.solver, p.greedy_steps
        self.max_vertices, self.rounding = p.max_vertices, p.rounding
        self.round = 0
        self._stats: dict[str, list[float]] = {a: [0.0] * 4 for a in self._arms}  # sum r, n r, sum c, n c
        # per model: sum and count of the Context.costs it was shown (kept across its removal)
        self._expected_costs: dict[str, list[float]] = {}

    # --- statistics ----------------------------------------------------------------------------------

    def _on_add_arm(self, arm: str) -> None:
        self._stats.setdefault(arm, [0.0, 0.0, 0.0, 0.0])

    def _on_remove_arm(self, arm: str) -> None:
        self._stats.pop(arm, None)

    def set_size(self, k: int) -> int:
        """N = ``max_models`` or min(4, number of models), capped at the k candidates."""
        return min(self.max_models if self.max_models is not None else min(4, len(self._arms)), k)

    def _scale(self, context: Context) -> float:
        """USD of one normalised cost unit: ``cost_scale``, else max over the current arms of C_k (module
        doc); 1 when no current arm has a positive reference cost. Folds this round's ``Context.costs``."""
        if self.cost_normalization == "none":
            return 1.0
        if self.cost_scale is not None:
            return self.cost_scale
        for arm, cost in (context.costs or {}).items():
            if arm in self._stats:
                seen = self._expected_costs.setdefault(arm, [0.0, 0.0])
                seen[0] += float(cost)
                seen[1] += 1.0
        references = [c for c in (self.reference_cost(a) for a in self._arms) if c is not None]
        largest = max(references, default=0.0)
        return largest if largest > 0 else 1.0

    def reference_cost(self, arm: str) -> float | None:
        """C_k in USD per call: the arm's price, else its mean expected cost, else its mean observed cost
        (None while none is known)."""
        if arm in self.prices:
            return self.prices[arm]
        seen = self._expected_costs.get(arm)
        if seen is not None and seen[1] > 0:
            return seen[0] / seen[1]
        stats = self._stats.get(arm)
        if stats is not None and stats[3] > 0:
            return stats[2] / stats[3]
        return None

    def estimates(self, arms: Sequence[str], scale: float) -> dict[str, np.ndarray]:
        """muhat, n_mu, chat (normalised, clipped to [0, 1]), n_c for ``arms``."""
        s = np.array([self._stats[a] for a in arms], dtype=np.float64).reshape(-1, 4)
        return {
            "mu": np.where(s[:, 1] > 0, s[:, 0] / np.maximum(s[:, 1], 1), 0.0),
            "n_mu": s[:, 1],
            "c": np.minimum(np.where(s[:, 3] > 0, s[:, 2] / np.maximum(s[:, 3], 1), 0.0) / scale, 1.0),
            "n_c": s[:, 3],
        }

    def update(self, observation: Observation) -> None:
        """Eq. 6 for the called model: running means of its reward and of its USD cost (each when given)."""
        stats = self._stats.get(observation.arm)
        if stats is None:
            return
        if observation.reward is not None:
            stats[0] += float(observation.reward)
            stats[1] += 1
        if observation.cost is not None:
            stats[2] += float(observation.cost)
            stats[3] += 1

    # --- solve and round -----------------------------------------------------------------------------

    def relaxed(self, mu: np.ndarray, c: np.ndarray, n: int) -> tuple[np.ndarray, bool, str]:
        """(z, fallback, solver used) for the reward model's relaxed problem (Eq. 3-5)."""
        if self.reward == "awc":
            enumerate_ok = awc_vertex_count(mu.shape[0], n) <= self.max_vertices
            if self.solver == "enumerate" or (self.solver == "auto" and enumerate_ok):
                return awc_enumerate(mu, c, n, self.budget), False, "enumerate"
            return awc_continuous_greedy(mu, c, n, self.budget, self.greedy_steps), False, "greedy"
        weights = mu if self.reward == "suc" else np.log(np.maximum(mu, 1e-12))
        z, fallback = linear_relaxation(weights, mu, c, n, self.budget)
        return z, fallback, "lp"

    def round_set(self, z: np.ndarray, rng: np.random.Generator) -> list[int]:
        return swap_round(z, rng) if self.rounding == "swap" else pairwise_round(z, rng)

    def order(
        self, chosen: list[int], arms: Sequence[str], mu: np.ndarray, c: np.ndarray, context: Context
    ) -> list[int]:
        """AWC cascade order: ascending cost LCB ("cost"), list price ("price"), or descending mubar
        ("reward"); SUC/AIC sets are listed by descending mubar."""
        if self.reward != "awc" or self.cascade_order == "reward":
            return sorted(chosen, key=lambda i: (-mu[i], i))
        if self.cascade_order == "price":
            given = context.costs or {}
            price = [float(given.get(a, self.prices.get(a, c[i]))) for i, a in enumerate(arms)]
            return sorted(chosen, key=lambda i: (price[i], -mu[i], i))
        return sorted(chosen, key=lambda i: (c[i], -mu[i], i))

    def _choose(
        self, arms: list[str], est: dict[str, np.ndarray], context: Context, rng: np.random.Generator
    ) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """(chosen indices, z, index mu, index c, info): implemented by each set policy."""
        raise NotImplementedError

    def select(self, context: Context) -> Decision:
        """One round: the ordered set to call (``mode="set"``); see the module doc."""
        self.round += 1
        arms = candidate_arms(self._arms, context)
        info: dict[str, Any] = {
            "reward_model": self.reward,
            "budget": self.budget,
            "cascade": self.reward == "awc",
            "success_threshold": self.success_threshold,
            "round": self.round,
        }
        if not arms:
            return Decision(arms=[], mode="set", info={**info, "reason": "no candidate arm"})
        scale = self._scale(context)
        est = self.estimates(arms, scale)
        chosen, z, mu_index, c_index, extra = self._choose(arms, est, context, self._rng(context))
        ordered = self.order(chosen, arms, mu_index, c_index, context)
        scores = {
            a: {
                "estimate": float(est["mu"][i]),
                "bonus": float(mu_index[i] - est["mu"][i]),
                "index": float(mu_index[i]),
                "cost_estimate": float(est["c"][i]),
                "cost_lcb": float(c_index[i]),
                "z": float(z[i]),
                "n": float(est["n_mu"][i]),
            }
            for i, a in enumerate(arms)
        }
        info.update(extra)
        info.update(
            {
                "max_models": self.set_size(len(arms)),
                "cost_scale": scale,
                "z": {a: float(z[i]) for i, a in enumerate(arms)},
            }
        )
        return Decision(arms=[arms[i] for i in ordered], scores=scores, mode="set", info=info)

    def _state(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "stats": {a: list(s) for a, s in self._stats.items()},
            "expected_costs": {a: list(c) for a, c in self._expected_costs.items()},
        }

    def _load(self, learned: Mapping[str, Any]) -> None:
        self.round = int(learned.get("round", 0))
        self._stats = {a: [float(v) for v in s] for a, s in learned.get("stats", {}).items()}
        self._expected_costs = {
            a: [float(v) for v in c] for a, c in learned.get("expected_costs", {}).items()
        }
        for arm in self._arms:
            self._on_add_arm(arm)


def confidence_radius(n: np.ndarray, round_: int, num_arms: int, delta: float) -> np.ndarray:
    """sqrt(ln(2 pi^2 K t^3 / (3 delta)) / (2 n)), +inf where n = 0 (Lemma 1)."""
    big_l = math.log(2.0 * math.pi**2 * max(num_arms, 1) * float(round_) ** 3 / (3.0 * delta))
    with np.errstate(divide="ignore"):
        return np.where(n > 0, np.sqrt(big_l / (2.0 * np.maximum(n, 1))), np.inf)


class ConfidenceSetBandit(SetBandit):
    """A set policy with the Lemma 1 confidence radius: ``alpha_reward`` and ``delta`` (None: 1 /
    ``horizon``), shared by C2MAB-V and CUCB."""

    hyperparameters: ClassVar[type[Hyperparameters]] = ConfidenceHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed, **hyperparameters)
        p = self.params
        assert isinstance(p, ConfidenceHyperparameters)
        self.alpha_reward, self.horizon = p.alpha_reward, p.horizon
        self.delta = 1.0 / p.horizon if p.delta is None else p.delta


class C2MABV(ConfidenceSetBandit):
    """C2MAB-V (Algorithm 1). Extra hyperparameters: ``alpha_reward`` alpha_mu (1.0), ``alpha_cost``
    alpha_c (0.01; the paper's setting (1, 0.01) of Fig. 8), ``delta`` (None: 1 / ``horizon``),
    ``horizon`` T (10000; ``bench run`` passes its own T unless the spec sets one, the gateway keeps the
    configured value), ``batch_size`` B (1), ``direct`` (False). See ``SetBandit`` for the rest."""

    name: ClassVar[str] = "c2mab-v"

    hyperparameters: ClassVar[type[Hyperparameters]] = C2MABVHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed, **hyperparameters)
        p = self.params
        assert isinstance(p, C2MABVHyperparameters)
        self.alpha_cost, self.batch_size, self.direct = p.alpha_cost, p.batch_size, p.direct
        self._cached: dict[str, Any] | None = None  # batch mode: the z in use, its arms and round

    def bounds(self, est: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(mubar, cbar): UCB on rewards and LCB on costs with the Lemma 1 radius (spec 3.1)."""
        k = len(self._arms)
        mu_bar = np.minimum(
            est["mu"] + self.alpha_reward * confidence_radius(est["n_mu"], self.round, k, self.delta), 1.0
        )
        c_low = np.maximum(
            est["c"] - self.alpha_cost * confidence_radius(est["n_c"], self.round, k, self.delta), 0.0
        )
        return mu_bar, c_low

    def _choose(
        self, arms: list[str], est: dict[str, np.ndarray], context: Context, rng: np.random.Generator
    ) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        mu_bar, c_low = self.bounds(est)
        n = self.set_size(len(arms))
        cached = self._cached
        if (
            cached is not None
            and self.batch_size > 1
            and cached["arms"] == arms
            and self.round - int(cached["round"]) < self.batch_size
        ):
            z, fallback, how = (
                np.asarray(cached["z"], dtype=np.float64),
                bool(cached["fallback"]),
                str(cached["solver"]),
            )
        else:
            if self.direct:
                z, fallback = direct_enumerate(self.reward, mu_bar, c_low, n, self.budget)
                how = "direct"
            else:
                z, fallback, how = self.relaxed(mu_bar, c_low, n)
            if self.batch_size > 1:
                self._cached = {
                    "arms": list(arms),
                    "round": self.round,
                    "z": z.copy(),
                    "fallback": fallback,
                    "solver": how,
                }
        chosen = [int(i) for i in np.flatnonzero(z > 0.5)] if self.direct else self.round_set(z, rng)
        return chosen, z, mu_bar, c_low, {"fallback": fallback, "solver": how}

    def _state(self) -> dict[str, Any]:
        state = super()._state()
        if self._cached is not None:
            state["cached"] = {**self._cached, "z": np.asarray(self._cached["z"]).copy()}
        return state

    def _load(self, learned: Mapping[str, Any]) -> None:
        super()._load(learned)
        cached = learned.get("cached")
        self._cached = None if cached is None else {**cached, "arms": list(cached["arms"])}
