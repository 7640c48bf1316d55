"""The replay environment: a dataset's arrays plus the per-seed draws every policy shares.

For seed s, ``rng = np.random.default_rng(s)`` first draws the T prompts of the seed, then a (T, K) matrix
of uniforms U; a call of model k in round t returns sample ``floor(U[t, k] * n)`` of that (prompt, model)
pair. The prompts (``draw_prompts``), by the run's ``draws``:

- ``without-replacement`` (the default of every replay command): ``rng.permutation(N)[:T]``, a random
  order of the N prompts with none played twice, T <= N (T > N is an error);
- ``with-replacement``: ``rng.integers(N, size=T)``, uniform draws that may repeat a prompt (the papers'
  own protocols, BALROG's). Every (prompt, model) outcome is fixed, so a repeated prompt shows a
  neighbour-based policy its own answer at distance 0: memory, not routing.

With a warm start (``bench.warm_start``) a seed first sets its warm prompts aside and draws the same way
from the remaining pool of N' = N - round(F x N) prompts (T <= N' without replacement).

``repeat_share`` of a seed is the share of its rounds whose prompt *text* was already played earlier in
that seed: 1 - (distinct texts played) / T. Without replacement it is 0 unless the dataset holds one text
under several ids (MMLU holds 105 texts twice). Every policy, and the random reference, sees the same prompts and the same reward
draws (common random numbers), so differences between rows of a table are differences between policies.

True mean utility of model k on prompt p: ``u[p, k] = mean_reward[p, k] - lambda * cost[p, k]``.
The oracle picks, per prompt, the available model of highest u (the cheapest among ties, then the first);
best single is the available model of highest u averaged over the whole dataset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from bench.arm_schedule import ArmSchedule
from bench.dataset import Dataset
from bench.warm_start import WarmSplit, WarmStart, split

Draws = Literal["without-replacement", "with-replacement"]
WITHOUT_REPLACEMENT: Draws = "without-replacement"
WITH_REPLACEMENT: Draws = "with-replacement"
DRAWS: tuple[Draws, ...] = (WITHOUT_REPLACEMENT, WITH_REPLACEMENT)

TIE_RTOL = 1e-9
TIE_ATOL = 1e-12


def ties(values: np.ndarray, best: np.ndarray) -> np.ndarray:
    """Elementwise: does ``values`` equal ``best`` up to float noise (ties count as optimal)?"""
    return np.isclose(values, best, rtol=TIE_RTOL, atol=TIE_ATOL)


def check_draws(draws: str) -> Draws:
    if draws == WITHOUT_REPLACEMENT:
        return WITHOUT_REPLACEMENT
    if draws == WITH_REPLACEMENT:
        return WITH_REPLACEMENT
    raise ValueError(f"--draws must be one of {', '.join(DRAWS)}; got {draws!r}")


def resolve_horizon(horizon: int | None, n_prompts: int, draws: str) -> int:
    """T: ``horizon``, else the dataset's prompt count N. Without replacement T > N is an error."""
    check_draws(draws)
    rounds = n_prompts if horizon is None else int(horizon)
    if rounds < 1:
        raise ValueError(f"--horizon must be >= 1, got {rounds}")
    if draws == WITHOUT_REPLACEMENT and rounds > n_prompts:
        raise ValueError(
            f"--horizon {rounds} exceeds the dataset's {n_prompts} prompts: without replacement each seed "
            f"plays a prompt at most once, so T <= {n_prompts} (omit --horizon for all of them, or pass "
            f"--draws {WITH_REPLACEMENT} to draw prompts with repeats)"
        )
    return rounds


def draw_prompts(rng: np.random.Generator, n_prompts: int, horizon: int, draws: str) -> np.ndarray:
    """The T prompt indices of a seed (see the module doc); the first use of ``rng``."""
    if check_draws(draws) == WITHOUT_REPLACEMENT:
        resolve_horizon(horizon, n_prompts, draws)
        return rng.permutation(n_prompts)[:horizon]
    return rng.integers(n_prompts, size=horizon)


def text_ids(prompts: Sequence[str]) -> np.ndarray:
    """Per prompt, an id shared by exactly the prompts of the same text."""
    return np.unique(np.asarray(prompts, dtype=object), return_inverse=True)[1].astype(np.int64).ravel()


def repeat_share(played_text_ids: np.ndarray) -> float:
    """Share of rounds whose text was already played in an earlier round: 1 - distinct / T."""
    T = played_text_ids.shape[0]
    return 1.0 - np.unique(played_text_ids).shape[0] / T if T else 0.0


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
    availability segment of each round, the oracle's per-round pick and utilities, and the share of
    rounds whose prompt text was already played earlier in the seed."""

    seed: int
    prompts: np.ndarray
    rewards: np.ndarray
    costs: np.ndarray
    segment: np.ndarray
    best_utility: np.ndarray
    oracle_choice: np.ndarray
    repeat_share: float = 0.0
    warm: WarmSplit | None = None


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
        draws: Draws = WITHOUT_REPLACEMENT,
        warm_start: WarmStart | None = None,
    ) -> None:
        self.dataset = dataset
        self.draws = check_draws(draws)
        # with a warm start each seed plays only its online pool (bench.warm_start)
        self.warm_start = warm_start
        self.pool_size = (
            dataset.n_prompts if warm_start is None else warm_start.online_count(dataset.n_prompts)
        )
        resolve_horizon(int(schedule.segment.shape[0]), self.pool_size, self.draws)
        self.text_ids = text_ids(dataset.prompts)
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
        warm = None
        if self.warm_start is None:
            prompts = draw_prompts(rng, data.n_prompts, self.horizon, self.draws)
        else:
            warm = split(self.warm_start, seed, data.n_prompts, len(self.models))
            prompts = warm.online[draw_prompts(rng, warm.online.shape[0], self.horizon, self.draws)]
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
            repeat_share=repeat_share(self.text_ids[prompts]),
            warm=warm,
        )
