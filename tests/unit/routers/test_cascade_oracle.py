"""The budget-limited cascade oracle against hand-computed values and brute force."""

from itertools import permutations

import numpy as np
import pytest

from routers.cascade_oracle import best_cascade


def test_single_arm_with_repeats_by_hand():
    # V1 = 0.5 - 0.1 = 0.4;  V2 = 0.4 + 0.5 * 0.4 = 0.6
    value, plan = best_cascade([0.5], [1.0], 0.1, 2)
    assert value == pytest.approx(0.6) and plan == [0, 0]


def test_two_arms_without_repeats_by_hand():
    # c/q: arm 0 -> 2, arm 1 -> 5: call 0 then 1: 0.4 + 0.5 * (0.8 - 0.4) = 0.6 (1 then 0: 0.48; alone 0.4)
    value, plan = best_cascade([0.5, 0.8], [1.0, 4.0], 0.1, 5, allow_repeat=False)
    assert value == pytest.approx(0.6) and plan == [0, 1]


def test_declines_when_no_model_is_worth_its_cost():
    value, plan = best_cascade([0.2, 0.3], [5.0, 7.0], 0.1, 5)
    assert value == 0.0 and plan == []


def test_matches_the_spec_values_for_table_1():
    costs = [0.75, 5.50, 1.37]  # gpt-4o-mini, o3-mini, deepseek-chat
    easy = best_cascade([0.7520, 0.8706, 0.9348], costs, 0.05, 5)
    medium = best_cascade([0.2346, 0.7578, 0.6184], costs, 0.05, 5)
    hard = best_cascade([0.0681, 0.6085, 0.2745], costs, 0.05, 5)
    assert easy[0] == pytest.approx(0.9498, abs=1e-4) and easy[1] == [0, 0, 0, 0, 2]
    assert medium[0] == pytest.approx(0.8820, abs=1e-4) and medium[1] == [2] * 5
    assert hard[0] == pytest.approx(0.6411, abs=1e-4) and hard[1] == [2, 2, 2, 1, 1]


def _plan_value(plan, q, lc):
    value, reach = 0.0, 1.0
    for i in plan:
        value += reach * (q[i] - lc[i])
        reach *= 1 - q[i]
    return value


@pytest.mark.parametrize("seed", range(10))
def test_without_repeats_equals_brute_force_over_ordered_subsets(seed):
    rng = np.random.default_rng(seed)
    q, c = rng.uniform(0.05, 0.95, 5), rng.uniform(0.1, 10.0, 5)
    lam, budget = 0.05, 3
    brute = max(_plan_value(p, q, lam * c) for m in range(budget + 1) for p in permutations(range(5), m))
    value, plan = best_cascade(q, c, lam, budget, allow_repeat=False)
    assert value == pytest.approx(brute, abs=1e-12)
    assert _plan_value(plan, q, lam * c) == pytest.approx(value, abs=1e-12)
