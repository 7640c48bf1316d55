"""Kernel logistic regression with an RBF kernel for one arm: PromptWise-RBF (Hu et al., 2025, App. C.5).

With the arm's points X_1..X_n, rewards R_j and Gram matrix K_ij = k(X_i, X_j),
k(x, y) = exp(-||x - y||^2 / (2 sigma^2)):

    beta = argmin_beta  sum_j [ log(1 + exp((K beta)_j)) - R_j (K beta)_j ] + (alpha_reg / 2) beta^T K beta
    q(x) = sigma( k_x^T beta + B(x) ),
    B(x) = alpha_reg^{-1/2} sqrt( k(x,x) - k_x^T (K + alpha_reg I)^{-1} k_x )

(the fit uses the un-bonused logit (K beta)_j; spec 7.12), by damped Newton (``fit_klr``, warm-started).
Cost is bounded by ``max_points``: the arm keeps its most recent ``max_points`` observations (a sliding
window), so a refit is a few O(m^3) solves and (K + alpha_reg I)^{-1} an O(m^3) Cholesky factorisation,
m <= max_points, independent of the history length.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy.linalg import cho_factor, cho_solve, solve
from scipy.special import expit

from routers.diversity import gaussian_kernel


def _klr_loss(beta: np.ndarray, k: np.ndarray, r: np.ndarray, reg: float) -> float:
    s = k @ beta
    return float(np.sum(np.logaddexp(0.0, s) - r * s) + 0.5 * reg * float(beta @ s))


def fit_klr(k: np.ndarray, r: np.ndarray, reg: float, beta0: np.ndarray, tol: float = 1e-8) -> np.ndarray:
    """Damped Newton for the KLR objective. Gradient K (sigma(K beta) - R + reg beta), Hessian
    K (W K + reg I) with W = diag(sigma'): the Newton step solves (W K + reg I) step = sigma - R + reg beta,
    a system that stays non-singular when K is singular (repeated contexts)."""
    beta = beta0.copy()
    loss = _klr_loss(beta, k, r, reg)
    for _ in range(50):
        mu = expit(k @ beta)
        rhs = mu - r + reg * beta
        step = solve((mu * (1.0 - mu))[:, None] * k + reg * np.eye(k.shape[0]), rhs)
        t = 1.0
        while True:
            candidate = beta - t * step
            new_loss = _klr_loss(candidate, k, r, reg)
            if new_loss <= loss + 1e-12 or t < 1e-6:
                break
            t *= 0.5
        beta, improvement, loss = candidate, loss - new_loss, new_loss
        if np.max(np.abs(t * step)) < tol or improvement < 1e-14:
            break
    return beta


class RBFLogisticArm:
    """One arm's kernel logistic model over a sliding window of at most ``max_points`` observations."""

    def __init__(self, dim: int, reg: float, bandwidth: float, max_points: int) -> None:
        self.dim = dim
        self.reg = reg
        self.bandwidth = bandwidth
        self.max_points = max_points
        self.n = 0
        self.x = np.zeros((0, dim))
        self.r = np.zeros(0)
        self.beta = np.zeros(0)
        self._chol: tuple[np.ndarray, bool] | None = None

    def _factor(self, k: np.ndarray | None = None) -> None:
        """Cholesky factor of K + reg I; ``k``: the Gram matrix of ``x`` when the caller has it."""
        if self.x.shape[0] == 0:
            self._chol = None
            return
        if k is None:
            k = gaussian_kernel(self.x, self.x, self.bandwidth)
        self._chol = cho_factor(k + self.reg * np.eye(k.shape[0]))

    def logit(self, x: np.ndarray) -> tuple[float, float]:
        """(k_x^T beta, B(x)); B(x) = reg^{-1/2} at an arm without data (k(x, x) = 1)."""
        if self._chol is None:
            return 0.0, 1.0 / math.sqrt(self.reg)
        kx = gaussian_kernel(x[None, :], self.x, self.bandwidth)[0]
        var = 1.0 - float(kx @ cho_solve(self._chol, kx))
        return float(kx @ self.beta), math.sqrt(max(var, 0.0) / self.reg)

    def observe(self, x: np.ndarray, r: float) -> None:
        self.n += 1
        self.x = np.vstack([self.x, x[None, :]])[-self.max_points :]
        self.r = np.append(self.r, r)[-self.max_points :]
        start = np.append(self.beta, 0.0)[-self.max_points :]
        k = gaussian_kernel(self.x, self.x, self.bandwidth)
        self.beta = fit_klr(k, self.r, self.reg, start)
        self._factor(k)

    def state(self) -> dict[str, Any]:
        return {"n": self.n, "x": self.x.copy(), "r": self.r.copy(), "beta": self.beta.copy()}

    def load(self, state: Mapping[str, Any]) -> None:
        self.n = int(state["n"])
        self.x = np.array(state["x"], dtype=np.float64).reshape(-1, self.dim)
        self.r = np.array(state["r"], dtype=np.float64)
        self.beta = np.array(state["beta"], dtype=np.float64)
        self._factor()
