"""Simplex solvers against scipy SLSQP and exhaustive enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import minimize

from routers.simplex import exponentiated_gradient, minimize_on_simplex, project_simplex, solve_simplex_qp


def _slsqp_reference(k: np.ndarray, f: np.ndarray) -> np.ndarray:
    m = f.size
    result = minimize(
        lambda a: a @ k @ a + f @ a,
        np.full(m, 1.0 / m),
        jac=lambda a: 2 * k @ a + f,
        method="SLSQP",
        bounds=[(0, 1)] * m,
        constraints=[{"type": "eq", "fun": lambda a: a.sum() - 1}],
        options={"ftol": 1e-14, "maxiter": 1000},
    )
    return result.x


@pytest.mark.parametrize("seed", range(8))
def test_exact_qp_matches_slsqp_on_random_psd_problems(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 8))
    b = rng.normal(size=(m, int(rng.integers(1, m + 2))))  # rank-deficient for some seeds
    k = b @ b.T
    f = rng.normal(size=m)
    alpha = solve_simplex_qp(k, f)
    ref = _slsqp_reference(k, f)
    assert alpha.min() >= 0 and alpha.sum() == pytest.approx(1.0)
    obj = lambda a: a @ k @ a + f @ a  # noqa: E731
    assert obj(alpha) <= obj(ref) + 1e-9
    assert obj(alpha) == pytest.approx(obj(ref), abs=1e-7)


def test_exact_qp_hand_solved_case() -> None:
    # two orthogonal point masses: K = I, f = 0 -> (1/2, 1/2); a linear tilt f = (0, 0.5) -> (5/8, 3/8)
    np.testing.assert_allclose(solve_simplex_qp(np.eye(2), np.zeros(2)), [0.5, 0.5])
    np.testing.assert_allclose(solve_simplex_qp(np.eye(2), np.array([0.0, 0.5])), [0.625, 0.375])
    # a dominated arm gets exactly zero: K = diag(1, 1, 1), f = (0, 0, 5)
    alpha = solve_simplex_qp(np.eye(3), np.array([0.0, 0.0, 5.0]))
    np.testing.assert_allclose(alpha, [0.5, 0.5, 0.0])


def test_warm_support_gives_the_same_answer_and_fista_fallback_agrees() -> None:
    rng = np.random.default_rng(11)
    b = rng.normal(size=(12, 5))
    k, f = b @ b.T, rng.normal(size=12)
    exact = solve_simplex_qp(k, f, max_enumerate=12)
    warm = solve_simplex_qp(k, f, warm_support=list(np.flatnonzero(exact > 0)))
    fista = solve_simplex_qp(k, f, max_enumerate=0)  # skips enumeration
    np.testing.assert_allclose(warm, exact, atol=1e-10)
    obj = lambda a: a @ k @ a + f @ a  # noqa: E731
    assert obj(fista) == pytest.approx(obj(exact), abs=1e-8)


def test_projection_is_the_nearest_point_of_the_simplex() -> None:
    rng = np.random.default_rng(2)
    for _ in range(20):
        v = rng.normal(size=4) * 2
        p = project_simplex(v)
        assert p.min() >= 0 and p.sum() == pytest.approx(1.0)
        # compare with the best of many random simplex points and the vertices
        candidates = np.vstack([rng.dirichlet(np.ones(4), size=2000), np.eye(4)])
        assert np.linalg.norm(p - v) <= np.min(np.linalg.norm(candidates - v, axis=1)) + 1e-12


def _entropy_like(a: np.ndarray) -> tuple[float, np.ndarray]:
    # sum a_i log a_i + c^T a: minimiser is softmax(-c)
    c = np.array([0.3, -0.2, 0.5, 0.0])
    safe = np.maximum(a, 1e-300)
    return float(np.sum(safe * np.log(safe)) + c @ a), np.log(safe) + 1 + c


def test_slsqp_and_eg_reach_the_known_minimiser() -> None:
    c = np.array([0.3, -0.2, 0.5, 0.0])
    target = np.exp(-c) / np.exp(-c).sum()
    np.testing.assert_allclose(minimize_on_simplex(_entropy_like, np.full(4, 0.25)), target, atol=1e-4)
    np.testing.assert_allclose(
        exponentiated_gradient(_entropy_like, np.full(4, 0.25), 0.5, 400), target, atol=1e-3
    )


def test_enumeration_reference_on_tiny_grid() -> None:
    # brute force over a fine grid of the 2-simplex
    k = np.array([[1.0, 0.2, 0.1], [0.2, 0.8, 0.3], [0.1, 0.3, 0.6]])
    f = np.array([0.1, -0.05, 0.2])
    grid = [
        np.array([i, j, 200 - i - j]) / 200
        for i, j in itertools.product(range(201), range(201))
        if i + j <= 200
    ]
    best = min(grid, key=lambda a: a @ k @ a + f @ a)
    np.testing.assert_allclose(solve_simplex_qp(k, f), best, atol=6e-3)
