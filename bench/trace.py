"""What one run (one policy or reference, one seed) leaves behind: per-round arrays."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bench.replay_env import ReplayEnv, SeedDraws, ties


@dataclass
class Trace:
    """Per round t: the reward the user got, the USD spent on every call, whether the delivered model has
    the oracle's true mean utility, how many calls were made, whether the round succeeded, whether the
    policy declined. Plus query and shadow-call counts, ``select`` wall times (ns), the per-round budget in
    USD the trace is judged against (the last one the policy declared, else the run's), whether the policy
    declared it, and the success threshold of its last round. With a judge: per round the judged calls,
    false passes and false fails ``judged`` (T, 3), and the USD paid to the judge ``judge_cost`` (already
    part of ``cost``)."""

    reward: np.ndarray
    cost: np.ndarray
    optimal: np.ndarray
    calls: np.ndarray
    success: np.ndarray
    declined: np.ndarray
    query_rounds: int = 0
    query_calls: int = 0
    shadow_calls: int = 0  # shadow evaluation calls (their cost is in ``cost``, their reward in no round's)
    select_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    budget: float | None = None
    declared_budget: bool = False
    success_threshold: float | None = None
    delivered: np.ndarray | None = None
    incumbent: np.ndarray | None = None
    incumbent_reward: np.ndarray | None = None
    incumbent_cost: np.ndarray | None = None
    # rounds whose decision said the floor held the spend above a cost target (``floor_over_target``),
    # and the target the decisions named (``info["cost_target"]``, the last one)
    floor_over_target: np.ndarray | None = None
    cost_target: float | None = None
    # a simulated judge's calls per round (calls, false passes, false fails) and their cost
    judged: np.ndarray | None = None
    judge_cost: np.ndarray | None = None


def fixed_choice_trace(env: ReplayEnv, draws: SeedDraws, choice: np.ndarray) -> Trace:
    """A trace for a rule that calls model ``choice[t]`` alone in round t (the references); the run's
    budget (``ReplayEnv.run_budget``) applies to it as to the policies that declare none."""
    rounds = np.arange(choice.shape[0])
    reward = draws.rewards[rounds, choice]
    utility = env.utility[draws.prompts, choice]
    return Trace(
        reward=reward,
        cost=draws.costs[rounds, choice],
        optimal=ties(utility, draws.best_utility),
        calls=np.ones(choice.shape[0], dtype=np.int64),
        success=reward >= env.success_threshold,
        declined=np.zeros(choice.shape[0], dtype=bool),
        budget=env.run_budget,
    )


def reference_traces(env: ReplayEnv, draws: SeedDraws) -> dict[str, tuple[str, Trace]]:
    """``{"oracle" | "best_single" | "random": (name, trace)}`` for one seed.

    ``random`` picks uniformly among the available models with ``default_rng([seed, 1])``."""
    single = np.array([env.tables[s].best_single for s in draws.segment], dtype=np.int64)
    rng = np.random.default_rng([draws.seed, 1])
    masks = env.schedule.masks[draws.segment]
    # uniform among available models: rank of a uniform draw within each round's available set
    n_available = masks.sum(axis=1)
    nth = (rng.random(draws.segment.shape[0]) * n_available).astype(np.int64)
    random_choice = np.argmax(np.cumsum(masks, axis=1) > nth[:, None], axis=1)
    names = sorted({env.models[k] for k in np.unique(single)})
    return {
        "oracle": ("oracle", fixed_choice_trace(env, draws, draws.oracle_choice)),
        "best_single": ("+".join(names), fixed_choice_trace(env, draws, single)),
        "random": ("random", fixed_choice_trace(env, draws, random_choice)),
    }
