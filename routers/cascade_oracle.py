"""The budget-limited cascade oracle: the best expected utility of a cascade under tau_max calls.

Given true success probabilities q_a, per-call costs c_a and the cost weight lambda, a cascade calls models
until one succeeds, tau_max calls are made, or it chooses to stop; its utility is
1[some call succeeded] - lambda * (sum of the costs paid) (PromptWise, Eq. 1).

With repeats (the paper's setting: each call is a fresh Bernoulli draw), backward induction on the number
k of calls left (PromptWise spec 1.4):

    V_0 = 0,    V_k = max(0, max_a [ q_a - lambda c_a + (1 - q_a) V_{k-1} ]),    value = V_{tau_max}.

Without repeats (each model at most once per prompt, the gateway contract's ``tried`` rule), the plan is
an ordered subset. Swapping two adjacent calls i, j changes the value by lambda (q_i c_j - q_j c_i), so an
optimal plan calls its models in increasing c_a / q_a; with the models sorted that way,

    W(i, k) = max( W(i + 1, k),  q_i - lambda c_i + (1 - q_i) W(i + 1, k - 1) ),   W(n, k) = W(i, 0) = 0,

and the value is W(0, tau_max). Both are exact and O(|A| tau_max).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def best_cascade(
    success: Sequence[float],
    costs: Sequence[float],
    cost_weight: float,
    max_calls: int,
    allow_repeat: bool = True,
) -> tuple[float, list[int]]:
    """(expected utility, plan): the plan lists model indices to call in order while calls fail."""
    q = np.asarray(success, dtype=np.float64)
    c = np.asarray(costs, dtype=np.float64) * float(cost_weight)
    if q.shape != c.shape or q.ndim != 1:
        raise ValueError("success and costs must be 1-d sequences of the same length")
    if allow_repeat:
        return _with_repeats(q, c, max_calls)
    return _without_repeats(q, c, max_calls)


def _with_repeats(q: np.ndarray, lc: np.ndarray, max_calls: int) -> tuple[float, list[int]]:
    values = [0.0]
    choices: list[int] = []
    for _ in range(max_calls):
        gains = q - lc + (1.0 - q) * values[-1]
        best = int(np.argmax(gains)) if gains.size else -1
        if best < 0 or gains[best] <= 0:
            values.append(0.0)
            choices.append(-1)
        else:
            values.append(float(gains[best]))
            choices.append(best)
    plan: list[int] = []
    for k in range(max_calls, 0, -1):  # with k calls left, choices[k - 1] is optimal
        if choices[k - 1] < 0:
            break
        plan.append(choices[k - 1])
    return values[-1], plan


def _without_repeats(q: np.ndarray, lc: np.ndarray, max_calls: int) -> tuple[float, list[int]]:
    ratio = np.where(q > 0, lc / np.maximum(q, 1e-300), np.inf)
    order = [int(i) for i in np.argsort(ratio, kind="stable") if q[i] > 0]
    n = len(order)
    w = np.zeros((n + 1, max_calls + 1))
    for pos in range(n - 1, -1, -1):
        i = order[pos]
        for k in range(1, max_calls + 1):
            w[pos, k] = max(w[pos + 1, k], q[i] - lc[i] + (1.0 - q[i]) * w[pos + 1, k - 1])
    plan: list[int] = []
    k = max_calls
    for pos in range(n):
        i = order[pos]
        if k == 0 or w[pos, k] <= 0:
            break
        if w[pos, k] > w[pos + 1, k]:
            plan.append(i)
            k -= 1
    return float(w[0, max_calls]), plan
