"""Relaxed problems of C2MAB-V: AWC vertex enumeration against brute force, the LP and its fallback."""

from itertools import combinations

import numpy as np
import pytest

from routers.relaxation import (
    awc_continuous_greedy,
    awc_enumerate,
    awc_objective,
    direct_enumerate,
    linear_relaxation,
)


def brute_force_vertices(c: np.ndarray, n: int, rho: float) -> np.ndarray:
    """Every basic feasible point of {0 <= z <= 1, sum z <= n, c.z <= rho}: solve each choice of K active
    constraints among the 2K + 2, keep the feasible solutions (independent of the enumeration's algebra)."""
    k = c.shape[0]
    a = np.vstack([np.eye(k), np.eye(k), np.ones((1, k)), c[None, :]])
    b = np.concatenate([np.zeros(k), np.ones(k), [n], [rho]])
    out = []
    for rows in combinations(range(2 * k + 2), k):
        m = a[list(rows)]
        if abs(np.linalg.det(m)) < 1e-10:
            continue
        z = np.linalg.solve(m, b[list(rows)])
        if np.all(z >= -1e-9) and np.all(z <= 1 + 1e-9) and z.sum() <= n + 1e-9 and c @ z <= rho + 1e-9:
            out.append(np.clip(z, 0, 1))
    return np.array(out)


@pytest.mark.parametrize("seed", range(12))
def test_awc_enumeration_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    k = 5
    mu = rng.uniform(0.05, 0.95, k)
    c = rng.uniform(0.05, 1.0, k)
    n = int(rng.integers(1, 4))
    rho = float(rng.uniform(0.1, 1.5))
    z = awc_enumerate(mu, c, n, rho)
    assert z.sum() <= n + 1e-9 and c @ z <= rho + 1e-9 and np.all((z >= 0) & (z <= 1))
    best = awc_objective(brute_force_vertices(c, n, rho), mu).max()
    assert awc_objective(z, mu)[0] == pytest.approx(best, abs=1e-10)


def test_awc_ties_fill_the_set_with_optimistic_arms():
    """All rewards clipped at 1 (unexplored arms), zero cost LCBs: the tie-break picks N arms."""
    z = awc_enumerate(np.ones(9), np.zeros(9), 4, 0.45)
    assert z.sum() == 4 and set(np.unique(z)) <= {0.0, 1.0}


@pytest.mark.parametrize("seed", range(4))
def test_continuous_greedy_is_feasible_and_near_optimal(seed):
    rng = np.random.default_rng(seed)
    mu, c = rng.uniform(0.05, 0.9, 8), rng.uniform(0.05, 1.0, 8)
    z = awc_continuous_greedy(mu, c, 3, 0.8, steps=20)
    assert z.sum() <= 3 + 1e-9 and c @ z <= 0.8 + 1e-9
    assert awc_objective(z, mu)[0] >= (1 - 1 / np.e) * awc_objective(awc_enumerate(mu, c, 3, 0.8), mu)[0]


def test_lp_solution_is_feasible_and_optimal_against_subsets():
    rng = np.random.default_rng(1)
    mu, c = rng.uniform(0.1, 0.5, 9), np.array([0.04, 0.17, 0.67, 0.125, 0.04, 0.07, 0.42, 0.42, 1.0])
    z, fallback = linear_relaxation(mu, mu, c, 4, 0.5)
    assert not fallback
    assert z.sum() == pytest.approx(4) and c @ z <= 0.5 + 1e-9
    best_set = max(mu[list(s)].sum() for s in combinations(range(9), 4) if c[list(s)].sum() <= 0.5)
    assert mu @ z >= best_set - 1e-9  # the relaxation is at least the best integral set
    assert np.sum((z > 1e-9) & (z < 1 - 1e-9)) <= 2  # a vertex: at most two fractional coordinates


def test_lp_fallback_when_infeasible():
    mu = np.array([0.9, 0.2, 0.5, 0.4])
    c = np.array([0.3, 0.2, 0.2, 0.5])
    z, fallback = linear_relaxation(mu, mu, c, 2, 0.3)  # the two cheapest cost 0.4 > 0.3
    assert fallback
    np.testing.assert_array_equal(z, [0.0, 1.0, 1.0, 0.0])  # smallest c; tie 0.2/0.2 both kept
    z2, fallback2 = linear_relaxation(mu, mu, np.array([0.3, 0.2, 0.25, 0.5]), 2, 0.5)
    assert fallback2 is False and z2.sum() == pytest.approx(2)


def test_lp_fallback_breaks_cost_ties_by_larger_reward():
    z, fallback = linear_relaxation(np.zeros(3), np.array([0.1, 0.9, 0.5]), np.array([0.5, 0.5, 0.5]), 1, 0.1)
    assert fallback and list(z) == [0.0, 1.0, 0.0]


@pytest.mark.parametrize("reward", ["awc", "suc", "aic"])
def test_direct_enumeration_equals_brute_force(reward):
    rng = np.random.default_rng(7)
    mu, c = rng.uniform(0.1, 0.9, 6), rng.uniform(0.05, 0.6, 6)
    z, fallback = direct_enumerate(reward, mu, c, 3, 0.9)
    sizes = range(0, 4) if reward == "awc" else [3]

    def value(s):
        m = mu[list(s)]
        return {"awc": 1 - np.prod(1 - m), "suc": m.sum(), "aic": np.prod(m)}[reward]

    best = max(value(s) for m in sizes for s in combinations(range(6), m) if c[list(s)].sum() <= 0.9)
    assert not fallback and value(np.flatnonzero(z)) == pytest.approx(best)
