"""The budget-limited cascade oracle as a reference row (``reference.oracle_cascade``).

For each prompt p and each available model a, the true success probability q[p, a] is the share of the
(prompt, model) reward samples that reach the run's success threshold; c[p, a] is the USD cost of a call.
``routers.cascade_oracle.best_cascade`` (DP over the calls left, PromptWise spec 1.4) gives the plan of
highest expected utility 1[success] - lambda * spend with at most tau_max calls, tau_max = ``--max-calls``
(default: the number of available models). The harness calls each model at most once per round (a repeat
returns the cached outcome at no cost), so the plan is the no-repeat one (``allow_repeat=False``).

The plan is replayed on each seed's draws: call in order until a reward reaches the threshold; the user gets
the best reward seen; an empty plan declines the prompt (reward = the low end of the range, no cost).
"""

from __future__ import annotations

import numpy as np

from bench.replay_env import ReplayEnv, SeedDraws, ties
from bench.trace import Trace
from routers.cascade_oracle import best_cascade


def success_probability(env: ReplayEnv) -> np.ndarray:
    """(P, K): the share of each (prompt, model)'s reward samples >= the run's success threshold."""
    data = env.dataset
    hits = np.concatenate([[0], np.cumsum(data.samples >= env.success_threshold)])
    return (hits[data.offsets + data.counts] - hits[data.offsets]) / data.counts


def cascade_plans(env: ReplayEnv, max_calls: int | None) -> list[list[list[int]]]:
    """plans[segment][prompt]: model indices to call in order (the oracle plan under that availability)."""
    q = success_probability(env)
    cost = env.dataset.cost
    plans = []
    for mask in env.schedule.masks:
        models = np.flatnonzero(mask)
        bound = len(models) if max_calls is None else max_calls
        segment = []
        for p in range(q.shape[0]):
            _, plan = best_cascade(q[p, models], cost[p, models], env.cost_weight, bound, allow_repeat=False)
            segment.append([int(models[i]) for i in plan])
        plans.append(segment)
    return plans


def oracle_cascade_trace(env: ReplayEnv, draws: SeedDraws, plans: list[list[list[int]]]) -> Trace:
    horizon = draws.prompts.shape[0]
    lo = env.dataset.reward_range[0]
    reward = np.full(horizon, lo, dtype=np.float64)
    cost = np.zeros(horizon)
    calls = np.zeros(horizon, dtype=np.int64)
    success = np.zeros(horizon, dtype=bool)
    optimal = np.zeros(horizon, dtype=bool)
    declined = np.zeros(horizon, dtype=bool)
    threshold = env.success_threshold
    for t in range(horizon):
        p = int(draws.prompts[t])
        plan = plans[int(draws.segment[t])][p]
        if not plan:
            declined[t] = True
            continue
        best, delivered = -np.inf, plan[0]
        for k in plan:
            r = float(draws.rewards[t, k])
            cost[t] += float(draws.costs[t, k])
            calls[t] += 1
            if r > best:
                best, delivered = r, k
            if r >= threshold:
                break
        reward[t] = best
        success[t] = best >= threshold
        optimal[t] = bool(ties(env.utility[p, delivered], draws.best_utility[t]))
    return Trace(
        reward=reward,
        cost=cost,
        optimal=optimal,
        calls=calls,
        success=success,
        declined=declined,
        budget=env.run_budget,
        success_threshold=threshold,
    )
