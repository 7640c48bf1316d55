"""The relaxed selection problems of C2MAB-V (Dai et al., 2024, Eq. 3-5) and their solvers.

A relaxed selection is z in [0, 1]^K; mu are the optimistic rewards (UCB), c the pessimistic costs (LCB),
N the set size, rho the budget:

    AWC (Eq. 3):  max 1 - prod_k (1 - mu_k z_k)   s.t. sum z <= N, c.z <= rho, 0 <= z <= 1
    SUC (Eq. 4):  max sum_k mu_k z_k              s.t. sum z  = N, c.z <= rho, 0 <= z <= 1
    AIC (Eq. 5):  max sum_k z_k ln mu_k           s.t. sum z  = N, c.z <= rho, 0 <= z <= 1

AWC is quasi-convex (its log-complement sum ln(1 - mu_k z_k) is concave), so its maximum is at a vertex of
the polytope; every vertex has at most two fractional coordinates (spec 3.2): 1_A (|A| <= N), 1_A + t e_i
(cost constraint tight, |A| <= N - 1), 1_A + t e_i + (1 - t) e_j (both tight, |A| = N - 1).
``awc_enumerate`` scores them all (exact; about 55k candidates at K = 16, N = 4); ties, common while many
mu_k are clipped at 1, go to the larger sum mu.z, then the smaller c.z. ``awc_continuous_greedy`` is the
(1 - 1/e) continuous greedy (Frank-Wolfe with an LP oracle) for larger K. SUC and AIC are LPs solved with
HiGHS dual simplex (a vertex solution); when no z meets sum z = N and c.z <= rho, the fallback takes the N
arms of smallest c (ties: larger mu). ``direct_enumerate`` is C2MAB-V-Direct (App. E.3, Eq. 48): the
discrete problem, by enumerating the sets.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations
from math import comb

import numpy as np
from scipy.optimize import linprog

TIE_TOL = 1e-12


@lru_cache(maxsize=64)
def subset_masks(k: int, max_size: int, min_size: int = 0) -> np.ndarray:
    """Boolean (num_subsets, k) rows: every subset of range(k) with min_size <= |A| <= max_size."""
    rows = [
        np.isin(np.arange(k), combo)
        for m in range(min_size, max_size + 1)
        for combo in combinations(range(k), m)
    ]
    return np.array(rows, dtype=bool).reshape(-1, k)


@lru_cache(maxsize=64)
def _awc_structure(k: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Index arrays for the vertex types: sets (|A| <= N); (set, i) with |A| <= N - 1, i not in A;
    (set, i, j) with |A| = N - 1, i < j both outside A."""
    sets = subset_masks(k, n)
    small = np.flatnonzero(sets.sum(axis=1) <= n - 1)
    s_idx, i_idx = np.nonzero(~sets[small])
    one_set, one_i = small[s_idx], i_idx
    full = np.flatnonzero(sets.sum(axis=1) == n - 1)
    pi, pj = np.triu_indices(k, 1)
    outside = ~sets[full]
    ok = outside[:, pi] & outside[:, pj]
    r_idx, p_idx = np.nonzero(ok)
    return sets, one_set, one_i, full[r_idx], np.stack([pi[p_idx], pj[p_idx]], axis=1)


def _best_with_ties(objective: np.ndarray, z: np.ndarray, mu: np.ndarray, c: np.ndarray) -> int:
    """Lexicographic argmax: objective, then mu.z, then -c.z (tolerance TIE_TOL)."""
    keep = np.flatnonzero(objective >= objective.max() - TIE_TOL)
    second = z[keep] @ mu
    keep = keep[second >= second.max() - TIE_TOL]
    return int(keep[np.argmin(z[keep] @ c)])


def awc_objective(z: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """1 - prod_k (1 - mu_k z_k) for each row of z (Eq. 3's objective; exact on integral z, Eq. 14)."""
    return 1.0 - np.prod(1.0 - np.atleast_2d(z) * mu, axis=1)


def awc_enumerate(mu: np.ndarray, c: np.ndarray, n: int, rho: float) -> np.ndarray:
    """The exact maximiser of Eq. 3 by scoring every vertex of the polytope (see the module doc)."""
    k = mu.shape[0]
    n = min(n, k)
    if n == 0:
        return np.zeros(k)
    sets, one_set, one_i, two_set, pairs = _awc_structure(k, n)
    base = sets.astype(np.float64)
    cost_sets = base @ c
    cands = [base[cost_sets <= rho + TIE_TOL]]
    # type (ii): 1_A + t e_i, t = (rho - c(A)) / c_i in (0, 1)
    ci = c[one_i]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (rho - cost_sets[one_set]) / ci
    ok = (ci > 0) & (t > TIE_TOL) & (t < 1 - TIE_TOL)
    z2 = base[one_set[ok]].copy()
    z2[np.arange(z2.shape[0]), one_i[ok]] = t[ok]
    cands.append(z2)
    # type (iii): 1_A + t e_i + (1 - t) e_j, t = (rho - c(A) - c_j) / (c_i - c_j) in (0, 1)
    i, j = pairs[:, 0], pairs[:, 1]
    diff = c[i] - c[j]
    with np.errstate(divide="ignore", invalid="ignore"):
        t3 = (rho - cost_sets[two_set] - c[j]) / diff
    ok3 = (np.abs(diff) > 0) & (t3 > TIE_TOL) & (t3 < 1 - TIE_TOL)
    z3 = base[two_set[ok3]].copy()
    rows = np.arange(z3.shape[0])
    z3[rows, i[ok3]] = t3[ok3]
    z3[rows, j[ok3]] = 1.0 - t3[ok3]
    cands.append(z3)
    z = np.vstack(cands)
    if z.shape[0] == 0:
        return np.zeros(k)
    return z[_best_with_ties(awc_objective(z, mu), z, mu, c)].copy()


def _lp_oracle(g: np.ndarray, c: np.ndarray, n: int, rho: float) -> np.ndarray:
    """argmax g.v over {v in [0,1]^K : sum v <= N, c.v <= rho} (HiGHS dual simplex)."""
    k = g.shape[0]
    res = linprog(
        -g, A_ub=np.vstack([np.ones(k), c]), b_ub=[n, rho], bounds=[(0.0, 1.0)] * k, method="highs-ds"
    )
    return np.clip(res.x, 0.0, 1.0) if res.status == 0 else np.zeros(k)


def awc_continuous_greedy(mu: np.ndarray, c: np.ndarray, n: int, rho: float, steps: int = 20) -> np.ndarray:
    """Continuous greedy for Eq. 3: z += v / M with v = argmax_{v in P} grad F(z).v, M = ``steps``;
    grad_k F = mu_k prod_{l != k} (1 - mu_l z_l). Feasible by convexity; (1 - 1/e)-optimal."""
    k = mu.shape[0]
    z = np.zeros(k)
    for _ in range(steps):
        factors = 1.0 - mu * z
        prefix = np.concatenate([[1.0], np.cumprod(factors)[:-1]])
        suffix = np.concatenate([np.cumprod(factors[::-1])[::-1][1:], [1.0]])
        grad = mu * prefix * suffix
        if not np.any(grad > 0):
            break
        z += _lp_oracle(grad, c, min(n, k), rho) / steps
    return np.clip(z, 0.0, 1.0)


def linear_relaxation(
    weights: np.ndarray, mu: np.ndarray, c: np.ndarray, n: int, rho: float
) -> tuple[np.ndarray, bool]:
    """(z, fallback): the LP max weights.z s.t. sum z = N, c.z <= rho, box (Eq. 4 with weights = mu,
    Eq. 5 with weights = ln mu); when infeasible, the N smallest c (ties: larger mu) and fallback=True."""
    k = weights.shape[0]
    n = min(n, k)
    res = linprog(
        -weights,
        A_ub=c[None, :],
        b_ub=[rho],
        A_eq=np.ones((1, k)),
        b_eq=[n],
        bounds=[(0.0, 1.0)] * k,
        method="highs-ds",
    )
    if res.status == 0:
        return np.clip(res.x, 0.0, 1.0), False
    z = np.zeros(k)
    z[np.lexsort((-mu, c))[:n]] = 1.0
    return z, True


def direct_enumerate(
    reward: str, mu: np.ndarray, c: np.ndarray, n: int, rho: float
) -> tuple[np.ndarray, bool]:
    """C2MAB-V-Direct: the best set with c(S) <= rho, |S| <= N (AWC) or = N (SUC, AIC), under mu; ties
    as in ``awc_enumerate``. (indicator, fallback); SUC/AIC fall back as ``linear_relaxation`` does."""
    k = mu.shape[0]
    n = min(n, k)
    sets = subset_masks(k, n, 0 if reward == "awc" else n).astype(np.float64)
    feasible = sets[sets @ c <= rho + TIE_TOL]
    if feasible.shape[0] == 0:
        z = np.zeros(k)
        z[np.lexsort((-mu, c))[:n]] = 1.0
        return z, True
    if reward == "awc":
        objective = awc_objective(feasible, mu)
    elif reward == "suc":
        objective = feasible @ mu
    else:
        objective = feasible @ np.log(np.maximum(mu, 1e-12))
    return feasible[_best_with_ties(objective, feasible, mu, c)].copy(), False


def awc_vertex_count(k: int, n: int) -> int:
    """How many candidate vertices ``awc_enumerate`` scores (its cost is proportional)."""
    n = min(n, k)
    sets = sum(comb(k, m) for m in range(n + 1))
    one = sum(comb(k, m) * (k - m) for m in range(n))
    two = comb(k, n - 1) * comb(k - n + 1, 2) if n >= 1 else 0
    return sets + one + two
