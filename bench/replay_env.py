"""The replay environment: a dataset's arrays plus the per-seed draws every policy shares.

For seed s, ``np.random.default_rng(s)`` draws T prompt indices uniformly with replacement and then a
(T, K) matrix of uniforms U; a call of model k in round t returns sample ``floor(U[t, k] * n)`` of that
(prompt, model) pair. Every policy, and the random reference, sees the same prompts and the same reward
draws (common random numbers), so differences between rows of a table are differences between policies.

True mean utility of model k on prompt p: ``u[p, k] = mean_reward[p, k] - lambda * cost[p, k]``.
The oracle picks, per prompt, the available model of highest u (the cheapest among ties, then the first);
best single is the available model of highest u averaged over the whole dataset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.arm_schedule import ArmSchedule
from bench.dataset import Dataset

TIE_RTOL = 1e-9
TIE_ATOL = 1e-12


def ties(values: np.ndarray, best: np.ndarray) -> np.ndarray:
    """Elementwise: does ``values`` equal ``best`` up to float noise (ties count as optimal)?"""
    return np.isclose(values, best, rtol=TIE_RTOL, atol=TIE_ATOL)


@dataclass(frozen=True)
class OracleTable:
    """For one availability mask: per prompt the oracle's model and its utility; the best single model."""

    choice: np.ndarray
    best_utility: np.ndarray
    best_single: int


def oracle_table(utility: np.ndarray, cost: np.ndarray, mask: np.ndarray) -> OracleTable:
    masked = np.where(mask[None, :], utility, -np.inf)
    best = masked.max(axis=1)
    candidates = mask[None, :] & ties(utility, best[:, None])
    choice = np.argmin(np.where(candidates, cost, np.inf), axis=1)
    mean_u = np.where(mask, utility.mean(axis=0), -np.inf)
    single_best = mean_u.max()
    single_ties = np.flatnonzero(mask & ties(mean_u, single_best))
    best_single = int(single_ties[np.argmin(cost.mean(axis=0)[single_ties])])
    return OracleTable(choice=choice, best_utility=best, best_single=best_single)


def normalisation_scale(cost: np.ndarray) -> float:
    """max_k mean_p cost[p, k] (USD), so that the most expensive model's mean cost is 1 (spec 5.4, H1)."""
    scale = float(cost.mean(axis=0).max()) if cost.size else 0.0
    return scale if scale > 0 else 1.0


@dataclass(frozen=True)
class SeedDraws:
    """What one seed fixes: prompts (T,), realized rewards and costs of every model (T, K), the
    availability segment of each round, and the oracle's per-round pick and utilities."""

    seed: int
    prompts: np.ndarray
    rewards: np.ndarray
    costs: np.ndarray
    segment: np.ndarray
    best_utility: np.ndarray
    oracle_choice: np.ndarray


class ReplayEnv:
    """Everything the simulator needs, as numpy arrays (built once per ``bench run``)."""

    def __init__(
        self,
        dataset: Dataset,
        embeddings: np.ndarray,
        schedule: ArmSchedule,
        cost_weight: float,
        success_threshold: float,
        output_embeddings: np.ndarray | None = None,
        run_budget: float | None = None,
    ) -> None:
        self.dataset = dataset
        # per-round budget in USD for rows that declare none (references, non-set policies)
        self.run_budget = dataset.budget if run_budget is None else float(run_budget)
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        self.schedule = schedule
        self.cost_weight = float(cost_weight)
        self.success_threshold = float(success_threshold)
        # (P, K, d) embeddings of each model's response, for policies that learn from outputs (mixtures)
        self.output_embeddings = output_embeddings
        self.models = dataset.model_names
        self.index = {m: k for k, m in enumerate(self.models)}
        self.utility = dataset.mean_reward - self.cost_weight * dataset.cost
        self.tables = [oracle_table(self.utility, dataset.cost, mask) for mask in schedule.masks]
        self.available = [
            [(int(k), self.models[int(k)]) for k in np.flatnonzero(mask)] for mask in schedule.masks
        ]

    @property
    def cost_scale(self) -> float:
        """USD of one normalised cost unit (C2MAB-V spec 5.4, H1): the largest mean cost of a model."""
        return normalisation_scale(self.dataset.cost)

    @property
    def horizon(self) -> int:
        return int(self.schedule.segment.shape[0])

    def draw(self, seed: int) -> SeedDraws:
        data = self.dataset
        rng = np.random.default_rng(seed)
        prompts = rng.integers(data.n_prompts, size=self.horizon)
        uniforms = rng.random((self.horizon, len(self.models)))
        counts = data.counts[prompts]
        picks = np.minimum((uniforms * counts).astype(np.int64), counts - 1)
        rewards = data.samples[data.offsets[prompts] + picks]
        segment = self.schedule.segment
        best = np.empty(self.horizon)
        choice = np.empty(self.horizon, dtype=np.int64)
        for s, table in enumerate(self.tables):
            rounds = np.flatnonzero(segment == s)
            best[rounds] = table.best_utility[prompts[rounds]]
            choice[rounds] = table.choice[prompts[rounds]]
        return SeedDraws(
            seed=seed,
            prompts=prompts,
            rewards=rewards,
            costs=data.cost[prompts],
            segment=segment,
            best_utility=best,
            oracle_choice=choice,
        )
