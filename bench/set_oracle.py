"""The C2MAB-V set oracle (``reference.oracle_set``): the best affordable set, found by enumeration.

C2MAB-V spec 1.7: S* = argmax r(S; mu) over the action space of the reward model (AWC: 1..N models, SUC
and AIC: exactly N) subject to sum_{k in S} c_k <= rho under the true mean costs. Here the true mean cost
c_k of model k is its mean USD cost over the dataset's prompts, rho is the set policy's budget in USD
(``SetProblem.budget_usd``), and r(S; mu) is the set's mean reward over the prompts played the way the
harness plays a set (``bench.simulator``): AWC calls S in ascending mean cost and stops at the first reward
>= the success threshold, the user getting the best reward seen; SUC sums and AIC multiplies the rewards.
Each prompt's rewards are its mean rewards (its single logged reward when it has one). Ties: the cheaper
set. When no set is affordable (rho below the N cheapest), the N cheapest models (spec 3.2's fallback).

The fixed set is then replayed on each seed's draws (common random numbers), like the other references.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from bench.replay_env import ReplayEnv, SeedDraws, ties
from bench.trace import Trace
from routers.combinatorial import SetBandit

COST_ATOL = 1e-12


@dataclass(frozen=True)
class SetProblem:
    """What a set policy optimises: reward model, set size N, budget rho in USD, success threshold."""

    reward_model: str
    max_models: int
    budget_usd: float
    success_threshold: float


def set_problem(policy: SetBandit, n_arms: int, cost_scale: float) -> SetProblem:
    """A set policy's problem; a normalised rho is turned into USD with the policy's own scale when it
    was given one (``cost_scale``, ``prices``), else with the dataset's (``cost_scale``, spec 5.4 H1)."""
    if policy.cost_normalization == "none":
        scale = 1.0
    elif policy.cost_scale is not None:
        scale = policy.cost_scale
    elif policy.prices:
        scale = max(policy.prices.values())
    else:
        scale = cost_scale
    return SetProblem(
        reward_model=policy.reward,
        max_models=policy.set_size(n_arms),
        budget_usd=float(policy.budget) * scale,
        success_threshold=policy.success_threshold,
    )


def play_set(
    rewards: np.ndarray, costs: np.ndarray, reward_model: str, threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Play one ordered set on R rows: ``rewards``, ``costs`` (R, |S|) in call order.

    Returns (reward, cost, calls, success, delivered position) per row, as ``bench.simulator`` plays it."""
    rows = rewards.shape[0]
    if reward_model == "awc":
        best = np.full(rows, -np.inf)
        delivered = np.zeros(rows, dtype=np.int64)
        spent = np.zeros(rows)
        calls = np.zeros(rows, dtype=np.int64)
        done = np.zeros(rows, dtype=bool)
        for j in range(rewards.shape[1]):
            active = ~done
            better = active & (rewards[:, j] > best)
            best[better] = rewards[better, j]
            delivered[better] = j
            spent[active] += costs[active, j]
            calls[active] += 1
            done |= rewards[:, j] >= threshold
        return best, spent, calls, best >= threshold, delivered
    hits = rewards >= threshold
    value = rewards.sum(axis=1) if reward_model == "suc" else rewards.prod(axis=1)
    success = np.asarray(hits.any(axis=1) if reward_model == "suc" else hits.all(axis=1))
    n = np.full(rows, rewards.shape[1], dtype=np.int64)
    return value, costs.sum(axis=1), n, success, np.zeros(rows, dtype=np.int64)


def best_set(
    mean_reward: np.ndarray, cost: np.ndarray, available: np.ndarray, problem: SetProblem
) -> tuple[list[int], bool]:
    """(S* as model indices in call order, feasible): enumeration over the reward model's action space."""
    models = [int(k) for k in np.flatnonzero(available)]
    mean_cost = cost.mean(axis=0)
    n = min(problem.max_models, len(models))
    sizes = range(1, n + 1) if problem.reward_model == "awc" else (n,)
    best: tuple[float, float] | None = None
    chosen: list[int] = []
    for size in sizes:
        for subset in itertools.combinations(models, size):
            spend = float(mean_cost[list(subset)].sum())
            if spend > problem.budget_usd + COST_ATOL:
                continue
            ordered = call_order(list(subset), mean_reward, mean_cost, problem.reward_model)
            value = float(
                play_set(
                    mean_reward[:, ordered], cost[:, ordered], problem.reward_model, problem.success_threshold
                )[0].mean()
            )
            key = (value, -spend)
            if best is None or key > best:
                best, chosen = key, ordered
    if best is None:
        cheapest = sorted(models, key=lambda k: (mean_cost[k], k))[:n]
        return call_order(cheapest, mean_reward, mean_cost, problem.reward_model), False
    return chosen, True


def call_order(
    subset: list[int], mean_reward: np.ndarray, mean_cost: np.ndarray, reward_model: str
) -> list[int]:
    """AWC: ascending mean cost (C2MAB-V's default cascade order); SUC/AIC: descending mean reward."""
    if reward_model == "awc":
        return sorted(subset, key=lambda k: (mean_cost[k], k))
    means = mean_reward.mean(axis=0)
    return sorted(subset, key=lambda k: (-means[k], k))


def oracle_set_trace(env: ReplayEnv, draws: SeedDraws, problem: SetProblem) -> tuple[str, Trace]:
    """(name, trace) of the best affordable set (per availability segment) replayed on ``draws``."""
    data = env.dataset
    horizon = draws.prompts.shape[0]
    reward = np.empty(horizon)
    cost = np.empty(horizon)
    calls = np.empty(horizon, dtype=np.int64)
    success = np.zeros(horizon, dtype=bool)
    optimal = np.zeros(horizon, dtype=bool)
    names = []
    for s, mask in enumerate(env.schedule.masks):
        rounds = np.flatnonzero(draws.segment == s)
        if rounds.size == 0:
            continue
        chosen, feasible = best_set(data.mean_reward, data.cost, mask, problem)
        names.append(
            "{" + ",".join(env.models[k] for k in chosen) + "}" + ("" if feasible else " (no affordable set)")
        )
        r, c, n, ok, pos = play_set(
            draws.rewards[rounds][:, chosen],
            draws.costs[rounds][:, chosen],
            problem.reward_model,
            problem.success_threshold,
        )
        reward[rounds], cost[rounds], calls[rounds], success[rounds] = r, c, n, ok
        delivered = np.asarray(chosen)[pos]
        prompts = draws.prompts[rounds]
        optimal[rounds] = ties(env.utility[prompts, delivered], draws.best_utility[rounds])
    trace = Trace(
        reward=reward,
        cost=cost,
        optimal=optimal,
        calls=calls,
        success=success,
        declined=np.zeros(horizon, dtype=bool),
        budget=problem.budget_usd,
        declared_budget=True,
        success_threshold=problem.success_threshold,
    )
    return f"{problem.reward_model} " + " then ".join(names), trace
