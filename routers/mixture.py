"""Diversity-aware mixtures of generators: Mixture-UCB-CAB / -OGD (paper 002), Mixture-Greedy (paper 003),
Vanilla-UCB, and the offline oracles.

The arms are unconditional generators; the feedback is the *output's* embedding
(``Observation.output_embedding``), folded into a ``routers.diversity`` objective L(alpha) (a loss, lower
is better: inverse RKE, KID/MMD^2, negative log-Vendi or FD, optionally minus lambda * quality). The prompt
embedding in ``Context`` is not used. ``select`` returns ``Decision(arms=[arm], mode="mixture",
info={"weights": {arm: w}, ...})``.

Every policy first pulls each candidate arm ``init_pulls`` times round robin (the arm with the fewest
observed samples, ties by position; warm start, paper 002 Alg. 1 / paper 003 §5). Counts are of *observed*
outputs, so a caller that selects again before feeding back the output gets the same warm-up arm.
Feedback about an arm that carries no output embedding (a reward-only event, an empty answer) is counted
too: once an arm has had ``max_missing_outputs`` such feedbacks (default 2 x ``init_pulls``) the warm-up
stops waiting for it, and an arm left without a single output is left out of the mixture (its loss is
undefined) and listed in ``info["without_output"]``; when no candidate has an output the policy samples
the candidates uniformly (``info["phase"] = "no-output"``). Removing and re-adding an arm resets its count.

Confidence bonus, shared by every UCB variant (paper 002 eq. 7, with the 1/n quality bonus of its code):
    eps_i = delta_l * sqrt(beta * log t / (2 n_i)) + delta_kappa / n_i + quality_weight * delta_g / n_i
with t the number of samples of the candidate arms. It is *subtracted* from the loss (optimism for a
minimisation) in CAB, OGD and Vanilla alike; the public code adds the quality bonus in OGD (a sign bug)
and drops the /2 in its mixture variants only; neither is copied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
from pydantic import Field, model_validator

from routers.base import Context, Decision, Observation, candidate_arms, require
from routers.diversity import KernelQuadraticObjective, MixtureObjective, build_objective
from routers.hyperparameters import (
    MAX_DIM,
    Dim,
    Finite,
    Hyperparameters,
    NonNegative,
    Positive,
    PositiveCount,
)
from routers.policy_base import PolicyBase
from routers.simplex import clean_weights, exponentiated_gradient, minimize_on_simplex, solve_simplex_qp

# the hyperparameters that configure the objective (routers.diversity.build_objective)
OBJECTIVE_OPTIONS: tuple[str, ...] = (
    "objective",
    "bandwidth",
    "reference",
    "quality",
    "quality_weight",
    "quality_k",
    "feature",
    "rff_dim",
    "max_samples_per_arm",
    "fd_eps",
)


def quadratic_terms(objective: MixtureObjective, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Khat, fhat) of a quadratic objective over the arms ``idx``."""
    require(isinstance(objective, KernelQuadraticObjective), f"objective {objective.name!r} is not quadratic")
    assert isinstance(objective, KernelQuadraticObjective)
    return objective.quadratic_terms(idx)


class MixtureHyperparameters(Hyperparameters):
    """The objective and warm-up hyperparameters of every mixture policy (see ``MixturePolicyBase``)."""

    objective: Literal["rke", "kid", "vendi", "fd"] = "rke"
    bandwidth: Positive = Field(1.0, description="Gaussian sigma, on the raw embedding scale")
    reference: list[Annotated[list[Finite], Field(min_length=1, max_length=MAX_DIM)]] | None = Field(
        None, min_length=1, description="reference embeddings (rows), for kid, fd and quality terms"
    )
    quality: Literal["precision", "density"] | None = None
    quality_weight: NonNegative = Field(0.0, description="lambda, the weight of the quality term")
    quality_k: PositiveCount = 5
    feature: Literal["cosine", "rff"] = Field("cosine", description="vendi's feature map")
    rff_dim: Dim = 256
    max_samples_per_arm: PositiveCount | None = Field(4096, description="reservoir cap; null: keep all")
    fd_eps: NonNegative = 1e-6
    init_pulls: PositiveCount = Field(5, description="n0, warm-up pulls per arm")
    max_missing_outputs: PositiveCount | None = Field(None, description="null: 2 n0")

    @model_validator(mode="after")
    def _rows_alike(self) -> Self:
        if self.reference is not None and len({len(row) for row in self.reference}) > 1:
            raise ValueError("reference rows must all have the same length")
        return self


class UCBHyperparameters(MixtureHyperparameters):
    """The bonus of the UCB mixture policies (see ``UCBPolicyBase``)."""

    delta_l: NonNegative = 0.6
    beta: NonNegative = 1.0
    delta_kappa: NonNegative = 0.0
    delta_g: NonNegative = 0.4


class MixtureGreedyHyperparameters(MixtureHyperparameters):
    """Mixture-Greedy's hyperparameters (see ``MixtureGreedy``)."""

    solver: Literal["exact", "eg"] = "exact"
    eg_steps: PositiveCount = 10
    eg_eta: Positive = 0.1
    alpha_floor: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.0


class MixturePolicyBase(PolicyBase):
    """Shared plumbing: the objective, warm-up, sampling from weights, arms and state.

    Objective hyperparameters (all JSON-able): ``objective`` (rke | kid | vendi | fd), ``bandwidth``
    (Gaussian sigma, on the raw embedding scale), ``reference`` (list of reference embeddings, needed for
    kid, fd and quality terms), ``quality`` (None | precision | density), ``quality_weight`` (lambda),
    ``quality_k``, ``feature`` (cosine | rff, for vendi), ``rff_dim``, ``max_samples_per_arm`` (reservoir
    cap of the kernel objectives; None = keep everything), ``fd_eps``; ``init_pulls`` (n0 >= 1) and
    ``max_missing_outputs`` (feedbacks without an output embedding after which the warm-up gives up on an
    arm; None: 2 n0; see the module doc).
    """

    name: ClassVar[str] = "mixture-base"

    hyperparameters: ClassVar[type[Hyperparameters]] = MixtureHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed)
        p = self._configure(hyperparameters, MixtureHyperparameters)
        options = p.model_dump(include=set(OBJECTIVE_OPTIONS))
        self.objective: MixtureObjective = build_objective(**options, seed=seed)
        for arm in self._arms:
            self.objective.add_arm(arm)
        self.init_pulls = p.init_pulls
        self.max_missing_outputs = (
            2 * p.init_pulls if p.max_missing_outputs is None else p.max_missing_outputs
        )
        self._last_weights: dict[str, float] = {}  # last solution: warm start of the next solve
        self._missing: dict[str, int] = {}  # per arm: feedbacks that carried no output embedding

    # --- the contract -------------------------------------------------------------------------------
    def select(self, context: Context) -> Decision:
        """Warm-up: the candidate with the fewest observed outputs among those with fewer than n0 and fewer
        than ``max_missing_outputs`` feedbacks without one (round robin, paper 002 Alg. 1 lines 1-2, paper
        003 §5); then the subclass's rule (``_decide``) over the candidates with at least one output."""
        arms = candidate_arms(self._arms, context)
        if not arms:
            return Decision(arms=[], mode="mixture", info={"reason": "no candidate arm"})
        idx = self.objective.indices(arms)
        counts = self.objective.counts[idx]
        missing = np.array([self._missing.get(a, 0) for a in arms])
        waiting = (counts < self.init_pulls) & (missing < self.max_missing_outputs)
        scores = {a: {"n": float(c)} for a, c in zip(arms, counts, strict=True)}
        if waiting.any():
            chosen = arms[int(np.argmin(np.where(waiting, counts, np.iinfo(np.int64).max)))]
            weights = {a: float(a == chosen) for a in arms}
            return Decision(
                arms=[chosen], mode="mixture", scores=scores, info={"weights": weights, "phase": "warm-up"}
            )
        silent = [a for a, c in zip(arms, counts, strict=True) if c == 0]
        if len(silent) == len(arms):
            uniform = np.full(len(arms), 1.0 / len(arms))
            return self._sample(
                arms, uniform, context, scores, {"phase": "no-output", "without_output": silent}
            )
        if silent:
            arms = [a for a in arms if a not in silent]
            idx = self.objective.indices(arms)
        decision = self._decide(arms, idx, context)
        decision.info["without_output"] = silent
        return decision

    def update(self, observation: Observation) -> None:
        """Fold the output embedding of the called arm; feedback without one is counted as a missing
        output (module doc); feedback for an unknown arm is ignored."""
        if observation.arm not in self._arms:
            return
        if observation.output_embedding is None:
            self._missing[observation.arm] = self._missing.get(observation.arm, 0) + 1
            return
        self.objective.observe(observation.arm, observation.output_embedding)

    def _on_add_arm(self, arm: str) -> None:
        self.objective.add_arm(arm)

    def _on_remove_arm(self, arm: str) -> None:
        self.objective.remove_arm(arm)
        self._last_weights.pop(arm, None)
        self._missing.pop(arm, None)

    def _state(self) -> dict[str, Any]:
        return {
            "objective": self.objective.state(),
            "last_weights": dict(self._last_weights),
            "missing_outputs": dict(self._missing),
        }

    def _load(self, learned: Mapping[str, Any]) -> None:
        if "objective" in learned:
            self.objective.load(learned["objective"])
        self._last_weights = {a: float(w) for a, w in learned.get("last_weights", {}).items()}
        self._missing = {a: int(n) for a, n in learned.get("missing_outputs", {}).items()}

    # --- helpers for subclasses ---------------------------------------------------------------------
    def _decide(self, arms: list[str], idx: np.ndarray, context: Context) -> Decision:
        raise NotImplementedError

    def _sample(
        self,
        arms: list[str],
        weights: np.ndarray,
        context: Context,
        scores: dict[str, dict[str, float]],
        info: dict[str, Any],
    ) -> Decision:
        """Draw b ~ Categorical(weights) with the policy's (or the context's) generator."""
        p = clean_weights(weights)
        chosen = arms[int(self._rng(context).choice(len(arms), p=p))]
        info = {"weights": {a: float(w) for a, w in zip(arms, p, strict=True)}, **info}
        return Decision(arms=[chosen], mode="mixture", scores=scores, info=info)

    def _warm_support(self, arms: list[str]) -> list[int]:
        """Positions in ``arms`` of the last solution's support (tried first by the exact QP)."""
        return [i for i, a in enumerate(arms) if self._last_weights.get(a, 0.0) > 1e-12]

    def _warm_start(self, arms: list[str], idx: np.ndarray) -> np.ndarray:
        """The last solution on ``arms`` if it carries most of the mass there, else the proportions."""
        last = np.array([self._last_weights.get(a, 0.0) for a in arms])
        if last.sum() > 0.5:
            return last
        n = self.objective.counts[idx].astype(np.float64)
        return n / n.sum()

    def _remember(self, arms: list[str], weights: np.ndarray) -> None:
        self._last_weights = {a: float(w) for a, w in zip(arms, weights, strict=True)}


class UCBPolicyBase(MixturePolicyBase):
    """The bonus eps_i of the module docstring (paper 002 eq. 7), shared by CAB, OGD and Vanilla-UCB.
    Hyperparameters: those of ``MixturePolicyBase`` plus ``delta_l`` (0.6), ``beta`` (1.0),
    ``delta_kappa`` (0.0), ``delta_g`` (0.4); defaults are the public code's tuned values, with the
    paper's /2 under the square root kept in every variant."""

    hyperparameters: ClassVar[type[Hyperparameters]] = UCBHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed, **hyperparameters)
        p = self.params
        assert isinstance(p, UCBHyperparameters)
        self.delta_l, self.beta, self.delta_kappa, self.delta_g = p.delta_l, p.beta, p.delta_kappa, p.delta_g

    def bonus(self, idx: np.ndarray) -> np.ndarray:
        """eps_i = delta_l sqrt(beta log t / (2 n_i)) + delta_kappa / n_i + lambda delta_g / n_i."""
        n = self.objective.counts[idx].astype(np.float64)
        t = float(n.sum())
        lam = self.objective.quality_weight if self.objective.has_quality else 0.0
        return (
            self.delta_l * np.sqrt(self.beta * np.log(max(t, 1.0)) / (2.0 * n))
            + self.delta_kappa / n
            + lam * self.delta_g / n
        )


class MixtureUCBCAB(UCBPolicyBase):
    """Mixture-UCB-CAB (paper 002, Algorithm 1, eq. 6):

        alpha^(t) = argmin_{alpha in simplex} Lhat(alpha) - eps^T alpha,   b ~ alpha^(t)

    For the quadratic objectives (rke, kid; paper 002's setting) Lhat - eps^T alpha =
    alpha^T Khat alpha + (fhat - eps)^T alpha, solved exactly by ``routers.simplex.solve_simplex_qp``
    (active sets, warm-started from the last support). For vendi and fd, an extension not in paper 002
    (which has no bound for them), the same optimistic objective is minimised by SLSQP from the last
    weights. Hyperparameters: see ``UCBPolicyBase``.
    """

    name: ClassVar[str] = "mixture-ucb-cab"

    def _decide(self, arms: list[str], idx: np.ndarray, context: Context) -> Decision:
        """alpha = argmin_simplex Lhat(alpha) - eps^T alpha (paper 002 eq. 6), b ~ alpha."""
        eps = self.bonus(idx)
        if self.objective.quadratic:
            k, f = quadratic_terms(self.objective, idx)
            alpha = solve_simplex_qp(k, f - eps, warm_support=self._warm_support(arms))
        else:

            def optimistic(a: np.ndarray) -> tuple[float, np.ndarray]:
                value, grad = self.objective.loss_and_gradient(a, idx)
                return value - float(eps @ a), grad - eps

            alpha = minimize_on_simplex(optimistic, self._warm_start(arms, idx))
        self._remember(arms, alpha)
        scores = {
            a: {"weight": float(alpha[i]), "n": float(self.objective.counts[idx[i]]), "bonus": float(eps[i])}
            for i, a in enumerate(arms)
        }
        return self._sample(arms, alpha, context, scores, {"objective": self.objective.name})


class MixtureUCBOGD(UCBPolicyBase):
    """Mixture-UCB-OGD (paper 002, Algorithm 2, eq. 8): a Frank-Wolfe step at the current proportions,

        h = grad Lhat(n / t) - eps,   b = argmin_i h_i

    which for the quadratic objectives is h_i = (2/t)(Khat n)_i + fhat_i - eps_i
    = 2 sum_j S_ij / (t n_i) + fhat_i - eps_i. Deterministic (ties: first arm in order).
    ``info["weights"]`` are the current proportions n / t. For vendi and fd this is an extension (paper
    002 defines it for quadratic losses). Hyperparameters: see ``UCBPolicyBase``.
    """

    name: ClassVar[str] = "mixture-ucb-ogd"

    def _decide(self, arms: list[str], idx: np.ndarray, context: Context) -> Decision:
        """b = argmin_i [grad Lhat(n / t) - eps]_i (paper 002 eq. 8)."""
        n = self.objective.counts[idx].astype(np.float64)
        t = float(n.sum())
        eps = self.bonus(idx)
        _, grad = self.objective.loss_and_gradient(n / t, idx)
        h = grad - eps
        chosen = arms[int(np.argmin(h))]
        scores = {
            a: {"index": float(h[i]), "n": float(n[i]), "bonus": float(eps[i])} for i, a in enumerate(arms)
        }
        weights = {a: float(n[i] / t) for i, a in enumerate(arms)}
        return Decision(
            arms=[chosen],
            mode="mixture",
            scores=scores,
            info={"weights": weights, "objective": self.objective.name},
        )


class VanillaUCB(UCBPolicyBase):
    """Vanilla-UCB (paper 002 §2.4 of the spec): the same bonus over the vertices only,

        b = argmin_i L(e_i) - eps_i      (L(e_i) = Khat_ii + fhat_i for quadratic objectives)

    It converges to the best single arm. Works with every objective. Hyperparameters: see
    ``UCBPolicyBase``.
    """

    name: ClassVar[str] = "vanilla-ucb"

    def _decide(self, arms: list[str], idx: np.ndarray, context: Context) -> Decision:
        """b = argmin_i L(e_i) - eps_i (paper 002 §5.1 baseline, eq. 6 restricted to vertices)."""
        single = np.array([self.objective.loss(np.ones(1), idx[i : i + 1]) for i in range(len(arms))])
        eps = self.bonus(idx)
        index = single - eps
        chosen = arms[int(np.argmin(index))]
        scores = {
            a: {
                "estimate": float(single[i]),
                "bonus": float(eps[i]),
                "index": float(index[i]),
                "n": float(self.objective.counts[idx[i]]),
            }
            for i, a in enumerate(arms)
        }
        return Decision(
            arms=[chosen],
            mode="mixture",
            scores=scores,
            info={"weights": {a: float(a == chosen) for a in arms}, "objective": self.objective.name},
        )


class MixtureGreedy(MixturePolicyBase):
    """Mixture-Greedy (paper 003, Algorithm 1, eq. 5/13/14): no bonus,

        alpha_t = argmin_{alpha in simplex} Lhat_{t-1}(alpha),   a_t ~ alpha_t

    ``solver="exact"``: the exact simplex QP for rke/kid, scipy SLSQP with the analytic gradient
    (warm-started from alpha_{t-1}) for vendi/fd. ``solver="eg"``: ``eg_steps`` exponentiated-gradient
    steps (eq. 13) from the proportions n / sum(n) with eta_k = ``eg_eta`` / sqrt(k + 1): the authors'
    public code's inexact solve, not the paper's (paper 003 §4 starts EG from the uniform distribution
    with an unstated fixed step size). ``alpha_floor`` (default 0, off as in the paper) mixes the weights with the uniform
    distribution so that every alpha_i >= alpha_floor: cheap insurance against starving an arm on
    objectives whose optimum is on the boundary (spec §6.5). Default warm start ``init_pulls`` = 5.
    """

    name: ClassVar[str] = "mixture-greedy"

    hyperparameters: ClassVar[type[Hyperparameters]] = MixtureGreedyHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed, **hyperparameters)
        p = self.params
        assert isinstance(p, MixtureGreedyHyperparameters)
        self.solver, self.eg_steps, self.eg_eta, self.alpha_floor = (
            p.solver,
            p.eg_steps,
            p.eg_eta,
            p.alpha_floor,
        )

    def weights(self, arms: list[str], idx: np.ndarray) -> np.ndarray:
        """The minimiser of Lhat over the simplex of ``arms`` (before the floor)."""
        n = self.objective.counts[idx].astype(np.float64)
        proportions = n / n.sum()
        if self.solver == "eg":
            return exponentiated_gradient(
                lambda a: self.objective.loss_and_gradient(a, idx), proportions, self.eg_eta, self.eg_steps
            )
        if self.objective.quadratic:
            k, f = quadratic_terms(self.objective, idx)
            return solve_simplex_qp(k, f, warm_support=self._warm_support(arms))
        return minimize_on_simplex(
            lambda a: self.objective.loss_and_gradient(a, idx), self._warm_start(arms, idx)
        )

    def _decide(self, arms: list[str], idx: np.ndarray, context: Context) -> Decision:
        """alpha_t = argmin_simplex Lhat_{t-1}(alpha) (paper 003 eq. 5, 14), floored if asked; a_t ~ alpha."""
        alpha = self.weights(arms, idx)
        self._remember(arms, alpha)
        if self.alpha_floor > 0:
            floor = min(self.alpha_floor, 1.0 / len(arms))
            alpha = (1.0 - len(arms) * floor) * alpha + floor
        scores = {
            a: {"weight": float(alpha[i]), "n": float(self.objective.counts[idx[i]])}
            for i, a in enumerate(arms)
        }
        return self._sample(arms, alpha, context, scores, {"objective": self.objective.name})


# --- offline oracles (evaluation references, not policies) --------------------------------------------


def optimal_mixture(objective: MixtureObjective, arms: Sequence[str] | None = None) -> dict[str, float]:
    """Mixture Oracle weights: argmin_alpha L(alpha) on the objective's (large, offline) samples, exact QP
    for quadratic objectives and SLSQP from the best of {uniform, every vertex} for the others."""
    names = list(objective.arms if arms is None else arms)
    idx = objective.indices(names)
    if objective.quadratic:
        k, f = quadratic_terms(objective, idx)
        alpha = solve_simplex_qp(k, f)
    else:
        m = len(names)
        starts = [np.full(m, 1.0 / m), *np.eye(m)]
        best = min(starts, key=lambda a: objective.loss(a, idx))
        alpha = minimize_on_simplex(lambda a: objective.loss_and_gradient(a, idx), best, max_iterations=500)
    return {a: float(w) for a, w in zip(names, alpha, strict=True)}


def best_single_arm(objective: MixtureObjective, arms: Sequence[str] | None = None) -> tuple[str, float]:
    """One-Arm Oracle: the arm i minimising L(e_i) on the objective's samples, and that loss."""
    names = list(objective.arms if arms is None else arms)
    losses = [objective.loss(np.ones(1), objective.indices([a])) for a in names]
    best = int(np.argmin(losses))
    return names[best], float(losses[best])
