"""Summaries of traces across seeds: the numbers of the report's JSON and table.

For S seeds of T rounds, with L the harness's lambda (reward units per USD):

- ``mean_reward``, ``mean_cost`` (USD per round, every call counted), ``mean_utility`` = reward - L * cost,
  averaged over rounds and seeds; ``ci95`` = 1.96 * sd / sqrt(S) of the per-seed mean rewards
  (``cost_ci95``, ``utility_ci95``, ``regret_ci95`` likewise);
- ``mean_regret`` = oracle's mean utility - this row's, on the same draws (so it can be negative for
  multi-call policies, which the single-model oracle does not bound);
- ``opr``: share of rounds whose delivered model has the oracle's true mean utility (ties count);
- ``success_rate``: share of rounds that succeeded; ``calls_per_round``: model calls per round;
- ``violation`` (C2MAB-V Eq. 1): V(T) = [ (1/T) sum_t spend_t - rho ]^+ with rho the per-round budget in
  USD; ``reward_per_violation`` (C2MAB-V §5.6): mean reward / ((1/T) sum_tau V(tau)), null when that is 0;
- ``converged_round`` (policies): the first round t (1-based) from which the running mean reward, averaged
  over seeds, stays within ``CONVERGENCE_TOLERANCE`` (2%) of its final value for every t' >= t;
- ``judge`` (policies, with ``--judge``): judged calls per round, the shares of judged calls the judge
  passed although they failed (``false_pass_share``) and failed although they succeeded
  (``false_fail_share``), and the judge's USD per round (part of ``mean_cost``);
- ``shadow_calls`` (policies): shadow evaluation calls per seed (their cost is part of ``mean_cost``, their
  reward of no round's), ``shadow_share``: shadow calls / served requests (rounds not declined);
- ``incumbent`` (policies): the floor ratio against the incumbent, the share of rounds off it and the cost
  saved against calling it always, per seed and summarised (``bench.incumbent_check``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.incumbent_check import incumbent_comparison, summarise_incumbent
from bench.trace import Trace

Z95 = 1.96
CONVERGENCE_TOLERANCE = 0.02


def ci95(values: Sequence[float] | np.ndarray) -> float:
    """Half-width of the normal 95% interval of the mean of ``values`` (0 for fewer than 2)."""
    v = np.asarray(values, dtype=np.float64)
    return float(Z95 * v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else 0.0


def utility(trace: Trace, cost_weight: float) -> np.ndarray:
    return trace.reward - cost_weight * trace.cost


def regret_per_round(trace: Trace, oracle: Trace, cost_weight: float) -> np.ndarray:
    return utility(oracle, cost_weight) - utility(trace, cost_weight)


def violation_curve(cost: np.ndarray, budget: float) -> np.ndarray:
    """V(tau) for tau = 1..T: [ running mean spend - budget ]^+ (C2MAB-V Eq. 1 at horizon tau)."""
    running = np.cumsum(cost) / np.arange(1, cost.shape[0] + 1)
    return np.maximum(running - budget, 0.0)


def converged_round(traces: Sequence[Trace], tolerance: float = CONVERGENCE_TOLERANCE) -> int:
    """First round (1-based) after which the seed-averaged running mean reward stays within ``tolerance``
    x |final value| of the final value (see the module doc)."""
    rewards = np.mean([t.reward for t in traces], axis=0)
    running = np.cumsum(rewards) / np.arange(1, rewards.shape[0] + 1)
    outside = np.abs(running - running[-1]) > tolerance * abs(running[-1])
    late = np.flatnonzero(outside)
    return int(late[-1] + 2) if late.size else 1


def summarise(traces: Sequence[Trace], oracles: Sequence[Trace], cost_weight: float) -> dict[str, Any]:
    """One row of the report from the traces of its seeds (``oracles[i]`` is seed i's oracle trace)."""
    reward = np.array([t.reward.mean() for t in traces])
    cost = np.array([t.cost.mean() for t in traces])
    util = reward - cost_weight * cost
    regret = np.array(
        [regret_per_round(t, o, cost_weight).mean() for t, o in zip(traces, oracles, strict=True)]
    )
    row: dict[str, Any] = {
        "mean_reward": float(reward.mean()),
        "ci95": ci95(reward),
        "mean_cost": float(cost.mean()),
        "cost_ci95": ci95(cost),
        "mean_utility": float(util.mean()),
        "utility_ci95": ci95(util),
        "mean_regret": float(regret.mean()),
        "regret_ci95": ci95(regret),
        "opr": float(np.mean([t.optimal.mean() for t in traces])),
        "success_rate": float(np.mean([t.success.mean() for t in traces])),
        "calls_per_round": float(np.mean([t.calls.mean() for t in traces])),
        "declined_rate": float(np.mean([t.declined.mean() for t in traces])),
    }
    budgets = [t.budget for t in traces]
    if any(b is not None for b in budgets):
        violations, areas = [], []
        for trace in traces:
            curve = violation_curve(trace.cost, trace.budget if trace.budget is not None else np.inf)
            violations.append(float(curve[-1]))
            areas.append(float(curve.mean()))
        row["budget"] = float(np.mean([b for b in budgets if b is not None]))
        row["violation"] = float(np.mean(violations))
        area = float(np.mean(areas))
        row["reward_per_violation"] = row["mean_reward"] / area if area > 0 else None
    return row


def summarise_policy(
    spec: str, traces: Sequence[Trace], oracles: Sequence[Trace], cost_weight: float
) -> dict:
    select_ns = np.concatenate([t.select_ns for t in traces]) if traces else np.zeros(0)
    row = {"spec": spec, **summarise(traces, oracles, cost_weight)}
    row["queries"] = float(np.mean([t.query_rounds for t in traces]))
    row["query_calls"] = float(np.mean([t.query_calls for t in traces]))
    row["shadow_calls"] = float(np.mean([t.shadow_calls for t in traces]))
    row["shadow_share"] = float(np.mean([shadow_share(t) for t in traces])) if traces else 0.0
    row["select_ms_p50"] = float(np.median(select_ns) / 1e6) if select_ns.size else 0.0
    row["converged_round"] = converged_round(traces) if traces else 0
    judged = judge_figures(traces)
    if judged is not None:
        row["judge"] = judged
    compared = [incumbent_figures(t) for t in traces]
    if traces and all(c is not None for c in compared):
        row["incumbent"] = summarise_incumbent([c for c in compared if c is not None])
        targets = [t.cost_target for t in traces if t.cost_target is not None]
        if targets:
            row["incumbent"]["cost_target"] = float(targets[-1])
    return row


def shadow_share(trace: Trace) -> float:
    """Shadow calls per served request (rounds not declined); 0 when none was served."""
    served = int(np.sum(~trace.declined))
    return trace.shadow_calls / served if served else 0.0


def judge_figures(traces: Sequence[Trace]) -> dict[str, float] | None:
    """The judge's work over all seeds (module doc); None when no trace was judged."""
    counts = [t.judged for t in traces if t.judged is not None]
    spent = [t.judge_cost for t in traces if t.judge_cost is not None]
    if not counts or not spent:
        return None
    calls, false_pass, false_fail = np.concatenate(counts).sum(axis=0)
    rounds = sum(c.shape[0] for c in counts)
    return {
        "calls_per_round": float(calls / rounds),
        "false_pass_share": float(false_pass / calls) if calls else 0.0,
        "false_fail_share": float(false_fail / calls) if calls else 0.0,
        "cost_per_round": float(np.mean([s.mean() for s in spent])),
    }


def incumbent_figures(trace: Trace) -> dict[str, Any] | None:
    """One seed's comparison with the incumbent, when the trace recorded it (policies' traces do)."""
    if trace.delivered is None or trace.incumbent is None:
        return None
    if trace.incumbent_reward is None or trace.incumbent_cost is None:
        return None
    return incumbent_comparison(
        trace.reward,
        trace.cost,
        trace.delivered,
        trace.incumbent,
        trace.incumbent_reward,
        trace.incumbent_cost,
        over_target=trace.floor_over_target,
    )


def summarise_reference(
    name: str, traces: Sequence[Trace], oracles: Sequence[Trace], cost_weight: float
) -> dict:
    return {"name": name, **summarise(traces, oracles, cost_weight)}
