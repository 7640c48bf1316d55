"""Diversity objectives of a mixture of generators, as functions of the mixture weights.

Every objective is a *loss* L(alpha) over the simplex (lower is better) of the mixture
P_alpha = sum_i alpha_i P_i, estimated from the samples each arm produced so far, with its gradient. The
estimates come from sufficient statistics updated once per new sample; nothing is recomputed from all
samples. At alpha = n / sum(n) every loss equals the same loss of the pooled samples (the "score so far").

- ``rke`` (inverse RKE, paper 002 eq. 1, paper 003 eq. 34-35): L = alpha^T Khat alpha with
  Khat_ij = (1/(n_i n_j)) sum_{a in arm i, b in arm j} k(x_a, x_b)^2 (V-statistic, diagonal pairs
  included); k(x, y) = exp(-||x - y||^2 / (2 sigma^2)). Score: RKE mode count 1 / L.
- ``kid`` (Gaussian-kernel MMD^2 against a reference set Y, paper 002 eq. 2-3, paper 003 eq. 3):
  L = alpha^T Khat alpha + fhat^T alpha with kappa = k and f(x) = -2 mean_r k(x, y_r). Score: MMD^2 =
  L + mean_{r,r'} k(y_r, y_r'). Labelled "KID" as in the papers; it is not the polynomial-kernel KID.
- ``vendi`` (negative log-Vendi, paper 003 eq. 11, 17-22): L = tr(C log C), C(alpha) = sum_i alpha_i
  Phi_i / n_i with Phi_i = sum_{x in arm i} phi(x) phi(x)^T and ||phi|| = 1 (cosine features x/||x||, or
  random Fourier features of the Gaussian kernel). dL/dalpha_i = 1 + tr(Phi_i / n_i log C). Score: Vendi
  exp(-L).
- ``fd`` (Frechet distance of the mixture, paper 003 eq. 6-8) from exact mixture moments
  mu(alpha) = sum_i alpha_i mu_i, Sigma(alpha) = sum_i alpha_i M_i - mu mu^T (M_i uncentred second
  moment); L = ||mu - mu_r||^2 + tr Sigma + tr Sigma_r - 2 tr (Sigma_r^{1/2} Sigma Sigma_r^{1/2})^{1/2}.
  Gradient (paper 003 §1.2 of the spec): tr M_i - 2 mu_r^T mu_i - tr(G M_i) + 2 mu_i^T G mu,
  G = Sigma_r^{1/2} A^{-1/2} Sigma_r^{1/2}.

Optional linear quality term (paper 002 §3.4, paper 003 eq. 30): L - lambda * sum_i alpha_i qbar_i, where
q(x) is Precision (1 if x lies in some reference k-NN ball) or Density (count of such balls / k).

Per-sample cost and memory (m arms, d input dimension):
- rke / kid: one kernel row of the new sample against the stored samples of every arm, O(stored * d), and
  the pair-sum matrix S (m x m): S[b, j] += v_j, S[j, b] += v_j, S[b, b] += kappa(x, x) once (the public
  code counts kappa(x, x) twice; not here). Memory is bounded by ``max_samples_per_arm`` (default 4096):
  each arm keeps a uniform reservoir (Vitter's algorithm R) of at most that many samples, and once an arm
  has more samples than its reservoir, v_j = (n_j / stored_j) * sum over the reservoir, an unbiased
  estimate of the exact row sum. Below the cap everything is exact; above it a round costs
  O(m * cap * d), independent of the number of samples.
- vendi: O(D^2) per sample, memory m D^2 (D = d for cosine features, 2 * rff_dim for RFF); each loss
  evaluation is one D x D eigendecomposition, independent of n.
- fd: O(d^2) per sample, memory m d^2; each evaluation one d x d eigendecomposition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from routers.base import require, rng_from_state, rng_state

OBJECTIVES: tuple[str, ...] = ("rke", "kid", "vendi", "fd")
QUALITY_KINDS: tuple[str, ...] = ("precision", "density")
EIG_FLOOR = 1e-12


def squared_distances(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """||x_a - y_b||^2 for rows of x (n, d) and y (r, d), clipped at 0."""
    sq = np.sum(x * x, axis=1)[:, None] + np.sum(y * y, axis=1)[None, :] - 2.0 * (x @ y.T)
    return np.maximum(sq, 0.0)


def gaussian_kernel(x: np.ndarray, y: np.ndarray, bandwidth: float, power: int = 1) -> np.ndarray:
    """k(x, y)^power with k = exp(-||x - y||^2 / (2 sigma^2))."""
    return np.exp(-power * squared_distances(x, y) / (2.0 * bandwidth * bandwidth))


class QualityTerm:
    """Per-sample Precision / Density against a reference set (paper 002 §3.4, k-NN radii among the
    reference, excluding the point itself):

        precision(x) = 1[exists r: ||x - r|| < NND_k(r)],   density(x) = #{r: ||x - r|| < NND_k(r)} / k
    """

    def __init__(self, reference: np.ndarray, kind: str, k: int) -> None:
        import faiss

        require(kind in QUALITY_KINDS, f"quality must be one of {QUALITY_KINDS}, got {kind!r}")
        require(
            isinstance(k, int) and 1 <= k < len(reference),
            f"quality_k must be in [1, |reference|), got {k!r}",
        )
        self.kind = kind
        self.k = k
        self.reference = np.ascontiguousarray(reference, dtype=np.float64)
        # FAISS finds the k + 1 nearest (the point itself included); their distances are then recomputed
        # in float64 so that membership tests agree with exact arithmetic.
        as32 = np.ascontiguousarray(self.reference, dtype=np.float32)
        index = faiss.IndexFlatL2(as32.shape[1])
        index.add(as32)
        _, neighbours = index.search(as32, k + 1)
        exact = np.sum((self.reference[:, None, :] - self.reference[neighbours]) ** 2, axis=2)
        self.radii_sq = np.sort(exact, axis=1)[:, k]

    def __call__(self, x: np.ndarray) -> float:
        inside = squared_distances(x[None, :], self.reference)[0] < self.radii_sq
        if self.kind == "precision":
            return float(np.any(inside))
        return float(np.sum(inside)) / self.k


class MixtureObjective:
    """Shared plumbing: the arm list, per-arm counts, the optional linear quality term, (de)serialisation.

    Subclasses implement ``_allocate(d)``, ``_grow()``, ``_shrink(j)``, ``_observe_batch(j, rows)``
    (called before ``counts[j]`` is advanced), ``_loss_and_gradient(alpha, idx)`` and ``_extra_state`` /
    ``_load_extra``.
    """

    name: ClassVar[str] = "base"
    quadratic: ClassVar[bool] = False

    def __init__(
        self,
        reference: np.ndarray | None = None,
        quality: str | None = None,
        quality_weight: float = 0.0,
        quality_k: int = 5,
    ) -> None:
        self.arms: list[str] = []
        self.counts = np.zeros(0, dtype=np.int64)
        self.quality_sums = np.zeros(0)
        self.dim: int | None = None
        self.reference = None if reference is None else np.asarray(reference, dtype=np.float64)
        require(quality_weight >= 0, f"quality_weight must be >= 0, got {quality_weight!r}")
        self.quality_weight = float(quality_weight)
        self._quality: QualityTerm | None = None
        if quality is not None:
            require(self.reference is not None, "quality needs a reference set")
            assert self.reference is not None
            self._quality = QualityTerm(self.reference, quality, quality_k)

    @property
    def has_quality(self) -> bool:
        return self._quality is not None

    # --- arms ---------------------------------------------------------------------------------------
    def index(self, arm: str) -> int:
        return self.arms.index(arm)

    def indices(self, arms: Sequence[str]) -> np.ndarray:
        return np.array([self.arms.index(a) for a in arms], dtype=np.int64)

    def add_arm(self, arm: str) -> None:
        if arm in self.arms:
            return
        self.arms.append(arm)
        self.counts = np.append(self.counts, 0)
        self.quality_sums = np.append(self.quality_sums, 0.0)
        self._grow()

    def remove_arm(self, arm: str) -> None:
        if arm not in self.arms:
            return
        j = self.arms.index(arm)
        self.arms.pop(j)
        self.counts = np.delete(self.counts, j)
        self.quality_sums = np.delete(self.quality_sums, j)
        self._shrink(j)

    # --- data ---------------------------------------------------------------------------------------
    def observe(self, arm: str, x: np.ndarray | Sequence[float]) -> None:
        """Fold one output embedding of ``arm`` into the statistics (the arm is added if new)."""
        self.observe_many(arm, np.asarray(x, dtype=np.float64).reshape(1, -1))

    def observe_many(self, arm: str, xs: np.ndarray | Sequence[Sequence[float]]) -> None:
        """Fold several outputs of ``arm`` at once; the same statistics as observing them one by one."""
        batch = np.asarray(xs, dtype=np.float64)
        if batch.size == 0:
            return
        batch = batch.reshape(len(batch), -1)
        if self.dim is None:
            self.dim = int(batch.shape[1])
            self._allocate(self.dim)
        require(
            batch.shape[1] == self.dim,
            f"output embedding has dimension {batch.shape[1]}, expected {self.dim}",
        )
        self.add_arm(arm)
        j = self.arms.index(arm)
        self._observe_batch(j, batch)
        self.counts[j] += len(batch)
        if self._quality is not None:
            self.quality_sums[j] += sum(self._quality(x) for x in batch)

    # --- values -------------------------------------------------------------------------------------
    def linear_terms(self, idx: np.ndarray) -> np.ndarray:
        """-lambda * qbar_i for the arms ``idx`` (zeros without a quality term)."""
        if self._quality is None:
            return np.zeros(len(idx))
        return -self.quality_weight * self.quality_sums[idx] / self.counts[idx]

    def loss_and_gradient(self, alpha: np.ndarray, idx: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """L(alpha) and dL/dalpha over the arms ``idx`` (default: all; every one needs a sample)."""
        idx = np.arange(len(self.arms)) if idx is None else np.asarray(idx, dtype=np.int64)
        require(bool(np.all(self.counts[idx] > 0)), "every arm in the mixture needs at least one sample")
        a = np.asarray(alpha, dtype=np.float64)
        value, grad = self._loss_and_gradient(a, idx)
        lin = self.linear_terms(idx)
        return value + float(lin @ a), grad + lin

    def loss(self, alpha: np.ndarray, idx: np.ndarray | None = None) -> float:
        return self.loss_and_gradient(alpha, idx)[0]

    def pooled_loss(self) -> float:
        """The loss of all samples so far: L at alpha = n / sum(n) over the arms with samples."""
        idx = np.flatnonzero(self.counts > 0)
        require(idx.size > 0, "no samples yet")
        n = self.counts[idx].astype(np.float64)
        return self.loss(n / n.sum(), idx)

    @property
    def score_name(self) -> str:
        return "loss"

    def score(self, loss: float) -> float:
        """The reported metric for a loss value (the loss itself when a quality term is mixed in)."""
        return loss

    @property
    def higher_is_better(self) -> bool:
        return False

    # --- state --------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "arms": list(self.arms),
            "counts": self.counts.copy(),
            "quality_sums": self.quality_sums.copy(),
            "dim": self.dim,
            **self._extra_state(),
        }

    def load(self, state: Mapping[str, Any]) -> None:
        self.arms = list(state["arms"])
        self.counts = np.array(state["counts"], dtype=np.int64).reshape(-1)
        self.quality_sums = np.array(state["quality_sums"], dtype=np.float64).reshape(-1)
        self.dim = None if state.get("dim") is None else int(state["dim"])
        if self.dim is not None:
            self._allocate(self.dim)
        self._load_extra(state)

    # --- subclass hooks -----------------------------------------------------------------------------
    def _allocate(self, d: int) -> None:
        raise NotImplementedError

    def _grow(self) -> None:
        raise NotImplementedError

    def _shrink(self, j: int) -> None:
        raise NotImplementedError

    def _observe_batch(self, j: int, batch: np.ndarray) -> None:
        """Fold ``batch`` (rows) into arm j's statistics; called before ``counts[j]`` is advanced."""
        raise NotImplementedError

    def _loss_and_gradient(self, alpha: np.ndarray, idx: np.ndarray) -> tuple[float, np.ndarray]:
        raise NotImplementedError

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra(self, state: Mapping[str, Any]) -> None:
        pass


class KernelQuadraticObjective(MixtureObjective):
    """alpha^T Khat alpha + fhat^T alpha with kappa = k^power (``rke``: power 2, no f; ``kid``: power 1,
    f(x) = -2 mean_r k(x, y_r)). See the module docstring for the update and the reservoir bound."""

    quadratic: ClassVar[bool] = True

    def __init__(
        self,
        name: str,
        bandwidth: float,
        reference: np.ndarray | None = None,
        max_samples_per_arm: int | None = 4096,
        seed: int | None = 0,
        quality: str | None = None,
        quality_weight: float = 0.0,
        quality_k: int = 5,
    ) -> None:
        super().__init__(reference, quality, quality_weight, quality_k)
        require(name in ("rke", "kid"), f"kernel objective must be rke or kid, got {name!r}")
        require(np.isfinite(bandwidth) and bandwidth > 0, f"bandwidth must be > 0, got {bandwidth!r}")
        require(
            max_samples_per_arm is None
            or (isinstance(max_samples_per_arm, int) and max_samples_per_arm >= 1),
            f"max_samples_per_arm must be a positive int or None, got {max_samples_per_arm!r}",
        )
        self.name = name  # type: ignore[misc]
        self.power = 2 if name == "rke" else 1
        self.bandwidth = float(bandwidth)
        self.cap = max_samples_per_arm
        self._rng = np.random.default_rng(seed)
        self.pair_sums = np.zeros((0, 0))
        self.f_sums = np.zeros(0)
        self.samples: list[np.ndarray] = []  # per arm, float64 (capacity, d); first stored[i] rows valid
        self.stored = np.zeros(0, dtype=np.int64)
        self.reference_self = 0.0
        if name == "kid":
            require(self.reference is not None, "objective 'kid' needs a reference set")
            assert self.reference is not None
            self.reference_self = float(
                np.mean(gaussian_kernel(self.reference, self.reference, self.bandwidth))
            )

    def kappa(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return gaussian_kernel(x, y, self.bandwidth, self.power)

    def f_value(self, x: np.ndarray) -> float:
        if self.reference is None or self.name != "kid":
            return 0.0
        return -2.0 * float(np.mean(gaussian_kernel(x[None, :], self.reference, self.bandwidth)))

    def _allocate(self, d: int) -> None:
        self.samples = [np.zeros((0, d), dtype=np.float64) for _ in self.arms]

    def _grow(self) -> None:
        m = len(self.arms)
        grown = np.zeros((m, m))
        grown[: m - 1, : m - 1] = self.pair_sums
        self.pair_sums = grown
        self.f_sums = np.append(self.f_sums, 0.0)
        self.stored = np.append(self.stored, 0)
        if self.dim is not None:
            self.samples.append(np.zeros((0, self.dim), dtype=np.float64))

    def _shrink(self, j: int) -> None:
        self.pair_sums = np.delete(np.delete(self.pair_sums, j, axis=0), j, axis=1)
        self.f_sums = np.delete(self.f_sums, j)
        self.stored = np.delete(self.stored, j)
        if self.samples:
            self.samples.pop(j)

    def _observe_batch(self, j: int, batch: np.ndarray) -> None:
        """Rows of the whole batch against the stored samples, plus the batch's own block (its diagonal
        once), then reservoir insertion one by one. Equals sequential observation below the cap."""
        for i, buf in enumerate(self.samples):
            s = int(self.stored[i])
            if s:
                v = float(np.sum(self.kappa(batch, buf[:s]))) * (self.counts[i] / s)
                self.pair_sums[j, i] += v
                self.pair_sums[i, j] += v
        self.pair_sums[j, j] += float(np.sum(self.kappa(batch, batch)))
        if self.name == "kid":
            assert self.reference is not None
            self.f_sums[j] += -2.0 * float(
                np.sum(np.mean(gaussian_kernel(batch, self.reference, self.bandwidth), axis=1))
            )
        start = int(self.counts[j])
        for k, x in enumerate(batch):
            self.counts[j] = start + k
            self._store(j, x)
        self.counts[j] = start

    def _store(self, j: int, x: np.ndarray) -> None:
        """Reservoir sampling (algorithm R): keep a uniform subset of at most ``cap`` samples per arm."""
        s = int(self.stored[j])
        if self.cap is None or s < self.cap:
            buf = self.samples[j]
            if s == buf.shape[0]:
                bigger = np.zeros(
                    (max(8, 2 * s) if self.cap is None else min(self.cap, max(8, 2 * s)), buf.shape[1]),
                    dtype=np.float64,
                )
                bigger[:s] = buf[:s]
                self.samples[j] = buf = bigger
            buf[s] = x
            self.stored[j] = s + 1
            return
        slot = int(self._rng.integers(0, int(self.counts[j]) + 1))  # counts[j] not yet incremented
        if slot < self.cap:
            self.samples[j][slot] = x

    def quadratic_terms(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(Khat, fhat) over the arms ``idx``: Khat = S / outer(n, n), fhat = F / n - lambda qbar."""
        idx = np.asarray(idx, dtype=np.int64)
        n = self.counts[idx].astype(np.float64)
        k = self.pair_sums[np.ix_(idx, idx)] / np.outer(n, n)
        f = self.f_sums[idx] / n + self.linear_terms(idx)
        return 0.5 * (k + k.T), f

    def _loss_and_gradient(self, alpha: np.ndarray, idx: np.ndarray) -> tuple[float, np.ndarray]:
        n = self.counts[idx].astype(np.float64)
        k = self.pair_sums[np.ix_(idx, idx)] / np.outer(n, n)
        k = 0.5 * (k + k.T)
        f = self.f_sums[idx] / n
        return float(alpha @ k @ alpha + f @ alpha), 2.0 * k @ alpha + f

    @property
    def score_name(self) -> str:
        if self._quality is not None:
            return "loss"
        return "rke" if self.name == "rke" else "kid"

    def score(self, loss: float) -> float:
        if self._quality is not None:
            return loss
        return 1.0 / loss if self.name == "rke" else loss + self.reference_self

    @property
    def higher_is_better(self) -> bool:
        return self._quality is None and self.name == "rke"

    def _extra_state(self) -> dict[str, Any]:
        return {
            "pair_sums": self.pair_sums.copy(),
            "f_sums": self.f_sums.copy(),
            "stored": self.stored.copy(),
            # no buffers before the first sample fixes the dimension
            "samples": [buf[: int(s)].copy() for buf, s in zip(self.samples, self.stored, strict=True)]
            if self.dim is not None
            else [],
            "reservoir_rng": rng_state(self._rng),
        }

    def _load_extra(self, state: Mapping[str, Any]) -> None:
        m = len(self.arms)
        self.pair_sums = np.array(state["pair_sums"], dtype=np.float64).reshape(m, m)
        self.f_sums = np.array(state["f_sums"], dtype=np.float64).reshape(-1)
        self.stored = np.array(state["stored"], dtype=np.int64).reshape(-1)
        self._rng = rng_from_state(state["reservoir_rng"])
        if self.dim is not None:
            self.samples = [np.array(buf, dtype=np.float64).reshape(-1, self.dim) for buf in state["samples"]]


class VendiObjective(MixtureObjective):
    """Negative log-Vendi tr(C log C) from per-arm feature second moments (see the module docstring)."""

    name: ClassVar[str] = "vendi"

    def __init__(
        self,
        feature: str = "cosine",
        rff_dim: int = 256,
        bandwidth: float = 1.0,
        rff_seed: int = 0,
        reference: np.ndarray | None = None,
        quality: str | None = None,
        quality_weight: float = 0.0,
        quality_k: int = 5,
    ) -> None:
        super().__init__(reference, quality, quality_weight, quality_k)
        require(feature in ("cosine", "rff"), f"feature must be 'cosine' or 'rff', got {feature!r}")
        require(isinstance(rff_dim, int) and rff_dim >= 1, f"rff_dim must be a positive int, got {rff_dim!r}")
        require(np.isfinite(bandwidth) and bandwidth > 0, f"bandwidth must be > 0, got {bandwidth!r}")
        self.feature = feature
        self.rff_dim = rff_dim
        self.bandwidth = float(bandwidth)
        self.rff_seed = int(rff_seed)
        self.omega: np.ndarray | None = None
        self.phi_sums = np.zeros((0, 0, 0))

    def feature_dim(self) -> int:
        assert self.dim is not None
        return self.dim if self.feature == "cosine" else 2 * self.rff_dim

    def features(self, x: np.ndarray) -> np.ndarray:
        """phi(x), unit norm: x / ||x||, or [cos(Omega^T x), sin(Omega^T x)] / sqrt(D0) with
        Omega ~ N(0, 1/sigma^2) of shape (d, D0), D0 = rff_dim."""
        if self.feature == "cosine":
            norm = float(np.linalg.norm(x))
            return x / norm if norm > 0 else x
        assert self.omega is not None
        proj = x @ self.omega
        return np.concatenate([np.cos(proj), np.sin(proj)]) / np.sqrt(self.rff_dim)

    def _allocate(self, d: int) -> None:
        if self.feature == "rff":
            rng = np.random.default_rng(self.rff_seed)
            self.omega = rng.normal(0.0, 1.0 / self.bandwidth, size=(d, self.rff_dim))
        dd = self.feature_dim()
        self.phi_sums = np.zeros((len(self.arms), dd, dd))

    def _grow(self) -> None:
        if self.dim is not None:
            dd = self.feature_dim()
            self.phi_sums = np.concatenate([self.phi_sums, np.zeros((1, dd, dd))])

    def _shrink(self, j: int) -> None:
        if self.dim is not None:
            self.phi_sums = np.delete(self.phi_sums, j, axis=0)

    def _observe_batch(self, j: int, batch: np.ndarray) -> None:
        phi = np.stack([self.features(x) for x in batch])
        self.phi_sums[j] += phi.T @ phi

    def _loss_and_gradient(self, alpha: np.ndarray, idx: np.ndarray) -> tuple[float, np.ndarray]:
        means = self.phi_sums[idx] / self.counts[idx].astype(np.float64)[:, None, None]
        c = np.tensordot(alpha, means, axes=1)
        lam, vec = np.linalg.eigh(0.5 * (c + c.T))
        keep = lam > EIG_FLOOR
        value = float(np.sum(lam[keep] * np.log(lam[keep])))
        log_c = (vec * np.log(np.maximum(lam, EIG_FLOOR))) @ vec.T
        grad = 1.0 + np.einsum("ipq,pq->i", means, log_c)
        return value, grad

    @property
    def score_name(self) -> str:
        return "loss" if self._quality is not None else "vendi"

    def score(self, loss: float) -> float:
        return loss if self._quality is not None else float(np.exp(-loss))

    @property
    def higher_is_better(self) -> bool:
        return self._quality is None

    def _extra_state(self) -> dict[str, Any]:
        return {"phi_sums": self.phi_sums.copy()}

    def _load_extra(self, state: Mapping[str, Any]) -> None:
        if self.dim is not None:
            dd = self.feature_dim()
            self.phi_sums = np.array(state["phi_sums"], dtype=np.float64).reshape(len(self.arms), dd, dd)


def psd_sqrt(matrix: np.ndarray) -> np.ndarray:
    """Symmetric square root of a PSD matrix (eigenvalues clipped at 0)."""
    lam, vec = np.linalg.eigh(0.5 * (matrix + matrix.T))
    return (vec * np.sqrt(np.maximum(lam, 0.0))) @ vec.T


class FrechetObjective(MixtureObjective):
    """Frechet distance of the mixture from exact mixture moments (see the module docstring). ``eps`` is
    added to A = Sigma_r^{1/2} Sigma(alpha) Sigma_r^{1/2} before its square root (rank-deficient early
    rounds)."""

    name: ClassVar[str] = "fd"

    def __init__(
        self,
        reference: np.ndarray,
        eps: float = 1e-6,
        quality: str | None = None,
        quality_weight: float = 0.0,
        quality_k: int = 5,
    ) -> None:
        require(
            reference is not None and len(reference) >= 2, "objective 'fd' needs a reference set (>= 2 rows)"
        )
        super().__init__(reference, quality, quality_weight, quality_k)
        require(np.isfinite(eps) and eps >= 0, f"fd_eps must be >= 0, got {eps!r}")
        assert self.reference is not None
        self.eps = float(eps)
        self.ref_mean = self.reference.mean(axis=0)
        centred = self.reference - self.ref_mean
        self.ref_cov = centred.T @ centred / len(self.reference)  # MLE, as the mixture moments
        self.ref_root = psd_sqrt(self.ref_cov)
        self.sums = np.zeros((0, 0))
        self.second = np.zeros((0, 0, 0))

    def _allocate(self, d: int) -> None:
        require(
            d == self.ref_mean.size,
            f"output embedding dimension {d} != reference dimension {self.ref_mean.size}",
        )
        self.sums = np.zeros((len(self.arms), d))
        self.second = np.zeros((len(self.arms), d, d))

    def _grow(self) -> None:
        if self.dim is not None:
            d = self.dim
            self.sums = np.concatenate([self.sums, np.zeros((1, d))])
            self.second = np.concatenate([self.second, np.zeros((1, d, d))])

    def _shrink(self, j: int) -> None:
        if self.dim is not None:
            self.sums = np.delete(self.sums, j, axis=0)
            self.second = np.delete(self.second, j, axis=0)

    def _observe_batch(self, j: int, batch: np.ndarray) -> None:
        self.sums[j] += batch.sum(axis=0)
        self.second[j] += batch.T @ batch

    def _loss_and_gradient(self, alpha: np.ndarray, idx: np.ndarray) -> tuple[float, np.ndarray]:
        n = self.counts[idx].astype(np.float64)
        mus = self.sums[idx] / n[:, None]
        moments = self.second[idx] / n[:, None, None]
        mu = alpha @ mus
        sigma = np.tensordot(alpha, moments, axes=1) - np.outer(mu, mu)
        a = self.ref_root @ sigma @ self.ref_root
        lam, vec = np.linalg.eigh(0.5 * (a + a.T) + self.eps * np.eye(a.shape[0]))
        lam = np.maximum(lam, max(self.eps, EIG_FLOOR))
        diff = mu - self.ref_mean
        value = float(diff @ diff + np.trace(sigma) + np.trace(self.ref_cov) - 2.0 * np.sum(np.sqrt(lam)))
        g = self.ref_root @ ((vec / np.sqrt(lam)) @ vec.T) @ self.ref_root
        traces = np.einsum("ipp->i", moments)
        grad = traces - 2.0 * mus @ self.ref_mean - np.einsum("ipq,pq->i", moments, g) + 2.0 * mus @ (g @ mu)
        return value, grad

    @property
    def score_name(self) -> str:
        return "loss" if self._quality is not None else "fd"

    def _extra_state(self) -> dict[str, Any]:
        return {"sums": self.sums.copy(), "second": self.second.copy()}

    def _load_extra(self, state: Mapping[str, Any]) -> None:
        if self.dim is not None:
            m, d = len(self.arms), self.dim
            self.sums = np.array(state["sums"], dtype=np.float64).reshape(m, d)
            self.second = np.array(state["second"], dtype=np.float64).reshape(m, d, d)


def build_objective(
    objective: str,
    bandwidth: float = 1.0,
    reference: np.ndarray | Sequence[Sequence[float]] | None = None,
    quality: str | None = None,
    quality_weight: float = 0.0,
    quality_k: int = 5,
    feature: str = "cosine",
    rff_dim: int = 256,
    max_samples_per_arm: int | None = 4096,
    fd_eps: float = 1e-6,
    seed: int | None = 0,
) -> MixtureObjective:
    """An objective by name (``OBJECTIVES``) with its options; every bad option raises PolicyConfigError."""
    require(objective in OBJECTIVES, f"objective must be one of {OBJECTIVES}, got {objective!r}")
    ref = None if reference is None else np.asarray(reference, dtype=np.float64)
    require(ref is None or (ref.ndim == 2 and ref.shape[0] >= 1), "reference must be a 2-D array of rows")
    common: dict[str, Any] = {"quality": quality, "quality_weight": quality_weight, "quality_k": quality_k}
    if objective in ("rke", "kid"):
        return KernelQuadraticObjective(
            objective, bandwidth, ref, max_samples_per_arm=max_samples_per_arm, seed=seed, **common
        )
    if objective == "vendi":
        return VendiObjective(
            feature=feature,
            rff_dim=rff_dim,
            bandwidth=bandwidth,
            rff_seed=0 if seed is None else seed,
            reference=ref,
            **common,
        )
    require(ref is not None, "objective 'fd' needs a reference set")
    assert ref is not None
    return FrechetObjective(ref, eps=fd_eps, **common)
