"""Minimisers over the probability simplex Delta_m = {a in R^m : a >= 0, sum_i a_i = 1}.

- ``solve_simplex_qp``: min_a a^T K a + f^T a (K symmetric PSD), the convex QP of Mixture-UCB-CAB
  (paper 002, eq. 6) and of Mixture-Greedy on quadratic objectives (paper 003, eq. 12). Exact by active
  sets: on a support S the KKT conditions are the linear system
      2 K_SS a_S + f_S = nu 1,   1^T a_S = 1,
  and a point is optimal iff a_S >= 0 and (2 K a + f)_j >= nu for j outside S (convexity makes any KKT
  point a global minimiser). The previous round's support is tried first (usually one 9x9 solve); then
  supports are enumerated by size (2^m - 1 of them, exact for m <= ``max_enumerate``). Beyond that, or if
  rounding defeats every support, FISTA with Euclidean projection finishes the job.
- ``minimize_on_simplex``: scipy SLSQP with an analytic gradient, for the smooth convex objectives (FD,
  log-Vendi) of paper 003.
- ``exponentiated_gradient``: alpha_i <- alpha_i exp(-eta_k g_i) / Z, eta_k = eta / sqrt(k + 1)
  (paper 003, eq. 13; the reference code's step schedule).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np
from scipy.optimize import minimize

ValueAndGradient = Callable[[np.ndarray], tuple[float, np.ndarray]]


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto Delta_m by the sort method (Duchi et al., 2008)."""
    v = np.asarray(v, dtype=np.float64)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    ks = np.arange(1, v.size + 1)
    rho = int(np.flatnonzero(u - css / ks > 0)[-1])
    theta = css[rho] / (rho + 1)
    return np.maximum(v - theta, 0.0)


def clean_weights(alpha: np.ndarray) -> np.ndarray:
    """Clip tiny negatives to 0 and renormalise (uniform if nothing is left)."""
    a = np.clip(np.asarray(alpha, dtype=np.float64), 0.0, None)
    total = float(a.sum())
    return a / total if total > 0 else np.full(a.size, 1.0 / a.size)


def _kkt_on_support(k: np.ndarray, f: np.ndarray, support: Sequence[int], tol: float) -> np.ndarray | None:
    """The KKT point with support ``support`` if it is optimal, else None."""
    s = np.asarray(support, dtype=np.int64)
    size = s.size
    system = np.zeros((size + 1, size + 1))
    system[:size, :size] = 2.0 * k[np.ix_(s, s)]
    system[:size, size] = -1.0
    system[size, :size] = 1.0
    rhs = np.concatenate([-f[s], [1.0]])
    solution, *_ = np.linalg.lstsq(system, rhs, rcond=None)
    if np.linalg.norm(system @ solution - rhs) > tol * (1.0 + size):
        return None
    a_s, nu = solution[:size], solution[size]
    if np.any(a_s < -tol):
        return None
    alpha = np.zeros(f.size)
    alpha[s] = a_s
    grad = 2.0 * k @ alpha + f
    outside = np.setdiff1d(np.arange(f.size), s)
    if outside.size and np.any(grad[outside] < nu - tol):
        return None
    return clean_weights(alpha)


def _fista_qp(k: np.ndarray, f: np.ndarray, alpha0: np.ndarray, iterations: int = 5000) -> np.ndarray:
    """Projected accelerated gradient on a^T K a + f^T a, step 1 / (2 lambda_max(K))."""
    lipschitz = 2.0 * max(float(np.linalg.eigvalsh(k)[-1]), 1e-12)
    x = y = project_simplex(alpha0)
    t = 1.0
    for _ in range(iterations):
        x_next = project_simplex(y - (2.0 * k @ y + f) / lipschitz)
        t_next = (1.0 + np.sqrt(1.0 + 4.0 * t * t)) / 2.0
        y = x_next + ((t - 1.0) / t_next) * (x_next - x)
        if np.max(np.abs(x_next - x)) < 1e-13:
            x = x_next
            break
        x, t = x_next, t_next
    return clean_weights(x)


def solve_simplex_qp(
    k: np.ndarray,
    f: np.ndarray,
    warm_support: Sequence[int] | None = None,
    max_enumerate: int = 10,
) -> np.ndarray:
    """argmin_{a in Delta_m} a^T K a + f^T a for symmetric PSD K (exact; see the module docstring)."""
    k = np.asarray(k, dtype=np.float64)
    k = 0.5 * (k + k.T)
    f = np.asarray(f, dtype=np.float64).reshape(-1)
    m = f.size
    if m == 1:
        return np.ones(1)
    scale = 1.0 + float(np.max(np.abs(k))) + float(np.max(np.abs(f)))
    tol = 1e-9 * scale
    if warm_support is not None and len(warm_support) > 0:
        found = _kkt_on_support(k, f, sorted(set(int(i) for i in warm_support)), tol)
        if found is not None:
            return found
    if m <= max_enumerate:
        for size in range(1, m + 1):
            for support in itertools.combinations(range(m), size):
                found = _kkt_on_support(k, f, support, tol)
                if found is not None:
                    return found
    start = np.full(m, 1.0 / m)
    return _fista_qp(k, f, start)


def minimize_on_simplex(
    value_and_gradient: ValueAndGradient, alpha0: np.ndarray, max_iterations: int = 100, tol: float = 1e-10
) -> np.ndarray:
    """argmin over Delta_m of a smooth convex function by scipy SLSQP (bounds [0, 1], sum = 1)."""
    alpha0 = clean_weights(alpha0)
    m = alpha0.size
    if m == 1:
        return np.ones(1)
    result = minimize(
        value_and_gradient,
        alpha0,
        jac=True,
        method="SLSQP",
        bounds=[(0.0, 1.0)] * m,
        constraints=[{"type": "eq", "fun": lambda a: np.sum(a) - 1.0, "jac": lambda a: np.ones_like(a)}],
        options={"maxiter": max_iterations, "ftol": tol},
    )
    candidate = clean_weights(result.x)
    # SLSQP may stop on a worse point than it started from on flat or ill-conditioned objectives.
    return candidate if value_and_gradient(candidate)[0] <= value_and_gradient(alpha0)[0] else alpha0


def exponentiated_gradient(
    value_and_gradient: ValueAndGradient, alpha0: np.ndarray, eta: float, steps: int
) -> np.ndarray:
    """``steps`` EG steps from ``alpha0`` with eta_k = eta / sqrt(k + 1) (paper 003, eq. 13)."""
    log_alpha = np.log(np.clip(clean_weights(alpha0), 1e-12, None))
    for step in range(steps):
        _, grad = value_and_gradient(np.exp(log_alpha))
        log_alpha = log_alpha - (eta / np.sqrt(step + 1.0)) * grad
        log_alpha -= np.max(log_alpha)
        log_alpha -= np.log(np.sum(np.exp(log_alpha)))
        log_alpha = np.maximum(log_alpha, np.log(1e-12))
    return clean_weights(np.exp(log_alpha))
