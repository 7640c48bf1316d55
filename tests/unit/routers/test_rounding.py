"""Rounding preserves marginals (statistically) and the cardinality rule (always)."""

import numpy as np
import pytest

from routers.rounding import pairwise_round, swap_round, systematic_decomposition

DRAWS = 6000
# Each marginal is a mean of DRAWS Bernoulli draws: sd <= 0.5 / sqrt(6000) = 0.0065; 0.03 is > 4.6 sd.
TOLERANCE = 0.03


def _z(sum_to: float, k: int = 9, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    while True:
        z = rng.random(k)
        z *= sum_to / z.sum()
        if z.max() < 1:
            return z


@pytest.mark.parametrize("rounding", [pairwise_round, swap_round])
@pytest.mark.parametrize("total", [3.3, 4.0])
def test_marginals_and_cardinality(rounding, total):
    z = _z(total)
    rng = np.random.default_rng(0)
    counts = np.zeros(z.shape[0])
    sizes = set()
    for _ in range(DRAWS):
        chosen = rounding(z, rng)
        assert len(set(chosen)) == len(chosen)
        counts[chosen] += 1
        sizes.add(len(chosen))
    assert np.max(np.abs(counts / DRAWS - z)) < TOLERANCE
    expected = {int(np.floor(total)), int(np.ceil(total))}
    assert sizes <= expected
    if float(total).is_integer():
        assert sizes == {int(total)}


@pytest.mark.parametrize("rounding", [pairwise_round, swap_round])
def test_integral_input_is_returned_unchanged(rounding):
    z = np.array([1.0, 0.0, 1.0, 1.0 - 1e-12, 1e-12])
    assert rounding(z, np.random.default_rng(0)) == [0, 2, 3]


def test_decomposition_is_exact_convex_combination():
    z = _z(3.3)
    parts = systematic_decomposition(z)
    assert abs(sum(w for w, _ in parts) - 1.0) < 1e-12
    rebuilt = np.zeros_like(z)
    for weight, members in parts:
        assert len(members) in (3, 4)
        rebuilt[list(members)] += weight
    np.testing.assert_allclose(rebuilt, z, atol=1e-12)
