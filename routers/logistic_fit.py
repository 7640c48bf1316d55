"""L2-regularised logistic regression for one arm: the exact MLE and a cheap online (Laplace) update.

PromptWise (Hu et al., 2025, Eq. 4-6 and spec section 7.1) models the success probability of arm a at
context x as q_a(x) = sigma(x^T theta_a) and fits

    theta_a = argmin_theta  sum_s [ log(1 + exp(x_s^T theta)) - r_s x_s^T theta ] + (gamma / 2) ||theta||^2

with the design matrix V_a = gamma I + sum_s x_s x_s^T for the exploration bonus ||x||_{V_a^{-1}}.

Exact refit: ``fit_logistic`` (scipy Newton-CG with Hessian-vector products, warm-started), O(Newton
steps * CG steps * n * d). Online update (``LinearLogisticArm.observe``): the previous fit is kept as
a Gaussian (Laplace) posterior N(theta_0, H_0^{-1}) with H_0 = gamma I + sum_s sigma'(x_s^T theta) x_s x_s^T,
and one new point (x, r) is folded exactly into

    min_theta  (1/2)(theta - theta_0)^T H_0 (theta - theta_0) + log(1 + exp(x^T theta)) - r x^T theta.

Its minimiser lies on theta_0 + s H_0^{-1} x, where s solves the scalar equation s = r - sigma(z_0 + s a)
(z_0 = x^T theta_0, a = x^T H_0^{-1} x), found by a few Newton steps; H^{-1} then takes a Sherman-Morrison
step with weight sigma'(x^T theta). Cost O(d^2) per observation. A periodic exact refit (at n = 1, 2, 3,
5, 8, ... with growth factor ``refit_growth``) pulls the online estimate back onto the MLE, so the
amortised cost stays O(d^2) per observation while histories are stored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit


def logistic_loss(theta: np.ndarray, x: np.ndarray, r: np.ndarray, gamma: float) -> tuple[float, np.ndarray]:
    """Penalised negative log-likelihood and its gradient (Eq. 4 with the spec's gamma/2 ||theta||^2)."""
    z = x @ theta
    loss = float(np.sum(np.logaddexp(0.0, z) - r * z) + 0.5 * gamma * float(theta @ theta))
    grad = x.T @ (expit(z) - r) + gamma * theta
    return loss, grad


def logistic_hessp(
    theta: np.ndarray, p: np.ndarray, x: np.ndarray, r: np.ndarray, gamma: float
) -> np.ndarray:
    """Hessian-vector product (sum_s sigma'(x_s^T theta) x_s x_s^T + gamma I) p, O(n d)."""
    mu = expit(x @ theta)
    return x.T @ (mu * (1.0 - mu) * (x @ p)) + gamma * p


def fit_logistic(
    x: np.ndarray, r: np.ndarray, gamma: float, theta0: np.ndarray | None = None, xtol: float = 1e-10
) -> np.ndarray:
    """The exact penalised MLE (score equation sum (r - sigma(x^T theta)) x = gamma theta, Eq. 5), by
    scipy's truncated Newton (Newton-CG with Hessian-vector products), warm-started from ``theta0``."""
    d = x.shape[1]
    start = np.zeros(d) if theta0 is None else np.asarray(theta0, dtype=np.float64)
    if x.shape[0] == 0:
        return np.zeros(d)
    result = minimize(
        logistic_loss,
        start,
        args=(x, r, gamma),
        jac=True,
        hessp=logistic_hessp,
        method="Newton-CG",
        options={"xtol": xtol, "maxiter": 200},
    )
    return np.asarray(result.x, dtype=np.float64)


def logistic_hessian_inverse(x: np.ndarray, theta: np.ndarray, gamma: float) -> np.ndarray:
    """(gamma I + sum_s sigma'(x_s^T theta) x_s x_s^T)^{-1}, the Laplace posterior covariance."""
    p = expit(x @ theta)
    w = p * (1.0 - p)
    h = gamma * np.eye(x.shape[1]) + (x * w[:, None]).T @ x
    return np.linalg.inv(h)


def sherman_morrison(m_inv: np.ndarray, x: np.ndarray, weight: float = 1.0) -> None:
    """In place: (M + w x x^T)^{-1} = M^{-1} - w (M^{-1} x)(M^{-1} x)^T / (1 + w x^T M^{-1} x)."""
    mx = m_inv @ x
    m_inv -= np.outer(mx, mx) * (weight / (1.0 + weight * float(x @ mx)))


def laplace_step(theta: np.ndarray, h_inv: np.ndarray, x: np.ndarray, r: float) -> np.ndarray:
    """The new theta after folding (x, r) into the Gaussian prior N(theta, H^{-1}); see the module doc."""
    v = h_inv @ x
    a = float(x @ v)
    z0 = float(x @ theta)
    s = 0.0
    for _ in range(20):  # Newton on f(s) = s - r + sigma(z0 + s a); f is increasing, convex-concave, 1-d
        p = float(expit(z0 + s * a))
        f = s - r + p
        step = f / (1.0 + a * p * (1.0 - p))
        s -= step
        if abs(step) < 1e-12:
            break
    return theta + s * v


class LinearLogisticArm:
    """One arm's logistic model: theta, V^{-1} (bonus), H^{-1} (online update) and the stored history.

    ``exact=True`` refits after every observation (the paper's "recompute the MLE"); otherwise observations
    take the O(d^2) Laplace step and an exact refit runs when n reaches ``next_refit`` (then
    ``next_refit = max(n + 1, ceil(n * refit_growth))``). The history is kept for refits up to
    ``max_history`` points; past that, refits stop and the arm continues with online steps only, from
    the Laplace posterior N(theta, H^{-1}) of the last refit (H^{-1} is recomputed at every refit, in both
    modes).
    """

    def __init__(self, dim: int, gamma: float, exact: bool, refit_growth: float, max_history: int) -> None:
        self.dim = dim
        self.gamma = gamma
        self.exact = exact
        self.refit_growth = refit_growth
        self.max_history = max_history
        self.theta = np.zeros(dim)
        self.v_inv = np.eye(dim) / gamma
        self.h_inv = np.eye(dim) / gamma
        self.n = 0
        self.next_refit = 1
        self.xs: list[np.ndarray] = []
        self.rs: list[float] = []
        self.refits = 0

    @property
    def history_complete(self) -> bool:
        return len(self.xs) == self.n

    def logit(self, x: np.ndarray) -> tuple[float, float]:
        """(x^T theta, ||x||_{V^{-1}}): the estimate's logit and the bonus width of Eq. 6."""
        return float(x @ self.theta), math.sqrt(max(float(x @ (self.v_inv @ x)), 0.0))

    def observe(self, x: np.ndarray, r: float) -> None:
        self.n += 1
        sherman_morrison(self.v_inv, x)
        if len(self.xs) == self.n - 1 and len(self.xs) < self.max_history:
            self.xs.append(x.astype(np.float32))
            self.rs.append(float(r))
        refit_due = self.exact or self.n >= self.next_refit
        if refit_due and self.history_complete:
            self.refit()
            return
        self.theta = laplace_step(self.theta, self.h_inv, x, r)
        p = float(expit(x @ self.theta))
        sherman_morrison(self.h_inv, x, p * (1.0 - p))

    def refit(self) -> None:
        """Exact MLE on the stored history, warm-started; H^{-1} recomputed at the new theta."""
        x = np.asarray(self.xs, dtype=np.float64).reshape(-1, self.dim)
        r = np.asarray(self.rs, dtype=np.float64)
        self.theta = fit_logistic(x, r, self.gamma, self.theta)
        # in both modes: once max_history stops the refits, the online steps start from this posterior
        self.h_inv = logistic_hessian_inverse(x, self.theta, self.gamma)
        self.next_refit = max(self.n + 1, math.ceil(self.n * self.refit_growth))
        self.refits += 1

    def state(self) -> dict[str, Any]:
        return {
            "theta": self.theta.copy(),
            "v_inv": self.v_inv.copy(),
            "h_inv": self.h_inv.copy(),
            "n": self.n,
            "next_refit": self.next_refit,
            "refits": self.refits,
            "xs": np.asarray(self.xs, dtype=np.float32).reshape(-1, self.dim),
            "rs": np.asarray(self.rs, dtype=np.float64),
        }

    def load(self, state: Mapping[str, Any]) -> None:
        self.theta = np.array(state["theta"], dtype=np.float64)
        self.v_inv = np.array(state["v_inv"], dtype=np.float64)
        self.h_inv = np.array(state["h_inv"], dtype=np.float64)
        self.n = int(state["n"])
        self.next_refit = int(state["next_refit"])
        self.refits = int(state["refits"])
        self.xs = [np.array(row, dtype=np.float32) for row in np.asarray(state["xs"])]
        self.rs = [float(v) for v in np.asarray(state["rs"])]
