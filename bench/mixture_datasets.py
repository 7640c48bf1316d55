"""Mixture datasets: per arm, a pool of output embeddings (the generator's outputs), in one ``.npz`` file.

Format (documented in docs/datasets.md, "Mixture datasets"):

- ``arm:<name>``: float32 array (N_i, d), the pool of outputs of generator ``<name>`` (one row per output).
- ``reference``: float32 array (R, d), optional; the reference ("real") set for KID, FD and quality terms.
- ``meta``: optional 0-d string array holding a JSON object: ``name``, ``description``, ``bandwidth``
  (a suggested Gaussian sigma), ``known_optimum`` ({objective: {arm: weight}} where the optimum is known
  analytically), and free-form provenance.

Builders here: ``gaussian_dataset`` (Gaussian generators with analytically known optimal mixtures),
``mmlu_dataset`` (real sentences: MMLU prompts of a few subjects per arm, embedded), ``texts_dataset``
(any JSONL of ``{"arm": ..., "text": ...}`` rows; ``"reference": true`` rows form the reference set).
Text embeddings go through ``bench run``'s disk cache (``bench.embedding_cache.embed_texts``: one vector
per text and embedder, keyed by the text's SHA-256), so a text is embedded once for both tracks.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.embedding_cache import embed_texts
from routers.simplex import solve_simplex_qp

ARM_PREFIX = "arm:"


@dataclass
class MixtureDataset:
    """Per-arm pools of output embeddings, an optional reference set and metadata."""

    pools: dict[str, np.ndarray]
    reference: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def arms(self) -> list[str]:
        return list(self.pools)

    @property
    def dim(self) -> int:
        return int(next(iter(self.pools.values())).shape[1])

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {
            ARM_PREFIX + a: np.asarray(x, dtype=np.float32) for a, x in self.pools.items()
        }
        if self.reference is not None:
            arrays["reference"] = np.asarray(self.reference, dtype=np.float32)
        arrays["meta"] = np.array(json.dumps(self.meta))
        with path.open("wb") as handle:
            np.savez_compressed(handle, **arrays)  # type: ignore[arg-type]
        return path


def load_mixture_dataset(path: str | Path) -> MixtureDataset:
    """Read and check a mixture dataset file."""
    with np.load(Path(path), allow_pickle=False) as data:
        pools = {
            k[len(ARM_PREFIX) :]: np.asarray(data[k], dtype=np.float32)
            for k in data.files
            if k.startswith(ARM_PREFIX)
        }
        reference = np.asarray(data["reference"], dtype=np.float32) if "reference" in data.files else None
        meta = json.loads(str(data["meta"])) if "meta" in data.files else {}
    if not pools:
        raise ValueError(f"{path}: no 'arm:<name>' arrays")
    dims = {x.shape[1] for x in pools.values() if x.ndim == 2}
    if len(dims) != 1 or any(x.ndim != 2 or len(x) == 0 for x in pools.values()):
        raise ValueError(f"{path}: every arm needs a non-empty (N, d) array with the same d")
    if reference is not None and (reference.ndim != 2 or reference.shape[1] not in dims):
        raise ValueError(f"{path}: reference must be (R, d) with the arms' d")
    return MixtureDataset(pools=pools, reference=reference, meta=meta)


# --- Gaussian generators with known optima -------------------------------------------------------------


def _gaussian_kernel_expectation(
    mean_diff: np.ndarray, variance: float, bandwidth_sq: float, dim: int
) -> float:
    """E exp(-||Z||^2 / (2 s)) for Z ~ N(mean_diff, variance I_d), s = bandwidth_sq:
    (s / (s + v))^(d/2) exp(-||mu||^2 / (2 (s + v)))."""
    return float(
        (bandwidth_sq / (bandwidth_sq + variance)) ** (dim / 2)
        * np.exp(-(mean_diff @ mean_diff) / (2 * (bandwidth_sq + variance)))
    )


def gaussian_dataset(
    pool_size: int = 4000, reference_size: int = 2000, dim: int = 8, seed: int = 0, bandwidth: float = 2.0
) -> MixtureDataset:
    """Four isotropic Gaussian generators in R^dim: three tight modes at 3 e_1, 3 e_2, 3 e_3 (std 0.5) and
    one broad generator at the origin (std 0.8). The reference set is the (0.4, 0.3, 0.3, 0) mixture of
    the generators, so KID and FD are minimised exactly there (MMD with a characteristic kernel and FD
    are 0 only at the reference); the RKE optimum comes from the closed-form kernel expectations
    E k^2(X_i, X_j) (``meta.known_optimum``)."""
    rng = np.random.default_rng(seed)
    means = np.zeros((4, dim))
    means[0, 0] = means[1, 1] = means[2, 2] = 3.0
    stds = np.array([0.5, 0.5, 0.5, 0.8])
    names = ["mode-x", "mode-y", "mode-z", "broad"]
    pools = {n: means[i] + stds[i] * rng.normal(size=(pool_size, dim)) for i, n in enumerate(names)}
    target = np.array([0.4, 0.3, 0.3, 0.0])
    comp = rng.choice(4, size=reference_size, p=target)
    reference = means[comp] + stds[comp, None] * rng.normal(size=(reference_size, dim))
    # RKE: kappa = k^2 = exp(-||x - y||^2 / sigma^2), i.e. a Gaussian expectation with s = sigma^2 / 2
    k = np.array(
        [
            [
                _gaussian_kernel_expectation(
                    means[i] - means[j], stds[i] ** 2 + stds[j] ** 2, bandwidth**2 / 2, dim
                )
                for j in range(4)
            ]
            for i in range(4)
        ]
    )
    rke_alpha = solve_simplex_qp(k, np.zeros(4))
    meta = {
        "name": "gaussian",
        "description": "4 Gaussian generators (3 tight modes, 1 broad); reference: 0.4/0.3/0.3/0 mix",
        "bandwidth": bandwidth,
        "seed": seed,
        "known_optimum": {
            "kid": dict(zip(names, target.tolist(), strict=True)),
            "fd": dict(zip(names, target.tolist(), strict=True)),
            "rke": dict(zip(names, rke_alpha.tolist(), strict=True)),
        },
        "known_optimum_note": "rke weights are for the Gaussian bandwidth in 'bandwidth'",
    }
    return MixtureDataset(pools=pools, reference=reference, meta=meta)


# --- texts ----------------------------------------------------------------------------------------------


def texts_dataset(
    arm_texts: Mapping[str, Sequence[str]],
    reference_texts: Sequence[str] = (),
    embedder_name: str = "minilm",
    meta: Mapping[str, Any] | None = None,
) -> MixtureDataset:
    """Embed every arm's texts (and the reference texts) in one batch, through the disk cache."""
    names = list(arm_texts)
    flat = [t for a in names for t in arm_texts[a]] + list(reference_texts)
    vectors = embed_texts(flat, embedder_name, progress=False)
    pools, start = {}, 0
    for a in names:
        pools[a] = vectors[start : start + len(arm_texts[a])]
        start += len(arm_texts[a])
    reference = vectors[start:] if reference_texts else None
    return MixtureDataset(
        pools=pools, reference=reference, meta={"embedder": embedder_name, **dict(meta or {})}
    )


def read_texts_jsonl(path: str | Path) -> tuple[dict[str, list[str]], list[str]]:
    """Rows ``{"arm": name, "text": str}``; rows with ``"reference": true`` (no arm needed) form the
    reference set."""
    arms: dict[str, list[str]] = {}
    reference: list[str] = []
    with Path(path).open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row.get("text"), str):
                raise ValueError(f"{path}:{line_no}: a row needs a string 'text'")
            if row.get("reference"):
                reference.append(row["text"])
            else:
                arms.setdefault(str(row["arm"]), []).append(row["text"])
    return arms, reference


MMLU_ARMS: dict[str, tuple[str, ...]] = {
    "math": ("abstract_algebra", "college_mathematics", "elementary_mathematics"),
    "science": ("high_school_physics", "high_school_chemistry", "college_biology"),
    "medicine": ("anatomy", "clinical_knowledge", "virology"),
    "humanities": ("philosophy", "world_religions", "prehistory"),
    "society": ("high_school_macroeconomics", "sociology", "marketing"),
}


def _mmlu_prompts(data_dir: Path, subject: str) -> list[str]:
    with (data_dir / "routellm" / "mmlu" / f"mmlu_{subject}.csv").open(
        encoding="utf-8", newline=""
    ) as handle:
        return [row["prompt"] for row in csv.DictReader(handle)]


def mmlu_dataset(
    data_dir: str | Path,
    arms: Mapping[str, Sequence[str]] | None = None,
    per_arm: int = 600,
    reference_size: int = 1000,
    seed: int = 0,
    embedder_name: str = "minilm",
) -> MixtureDataset:
    """Generators over real text: arm ``a`` emits MMLU prompts (column ``prompt``) of its subjects
    (``MMLU_ARMS`` by default), up to ``per_arm`` of them, balanced over its subjects. The reference set
    is ``reference_size`` prompts drawn uniformly from all 57 subjects, none of them in any pool."""
    data_dir = Path(data_dir)
    arms = dict(arms or MMLU_ARMS)
    rng = np.random.default_rng(seed)
    used: set[str] = set()
    arm_texts: dict[str, list[str]] = {}
    for arm, subjects in arms.items():
        texts: list[str] = []
        share = per_arm // len(subjects)
        for subject in subjects:
            prompts = _mmlu_prompts(data_dir, subject)
            order = rng.permutation(len(prompts))[:share]
            texts.extend(prompts[i] for i in order)
        arm_texts[arm] = texts
        used.update(texts)
    every = sorted(p.stem.removeprefix("mmlu_") for p in (data_dir / "routellm" / "mmlu").glob("mmlu_*.csv"))
    pool = [t for s in every for t in _mmlu_prompts(data_dir, s) if t not in used]
    reference = [pool[i] for i in rng.permutation(len(pool))[:reference_size]]
    meta = {
        "name": "mmlu",
        "description": "MMLU prompts, a few subjects per arm; reference = prompts of all 57 subjects",
        "arms": {a: list(s) for a, s in arms.items()},
        "seed": seed,
        "bandwidth": 0.5,
        "source": "lm-sys/RouteLLM evals (Apache-2.0), data/routellm/mmlu",
    }
    return texts_dataset(arm_texts, reference, embedder_name, meta)


def project_dataset(dataset: MixtureDataset, dim: int) -> MixtureDataset:
    """PCA to ``dim`` dimensions, fitted on all pools and the reference together (cheaper Vendi/FD)."""
    blocks = [*dataset.pools.values()] + ([dataset.reference] if dataset.reference is not None else [])
    stacked = np.concatenate(blocks).astype(np.float64)
    mean = stacked.mean(axis=0)
    _, sv, vt = np.linalg.svd(stacked - mean, full_matrices=False)
    basis = vt[:dim].T
    kept = float(np.sum(sv[:dim] ** 2) / np.sum(sv**2))

    def proj(x: np.ndarray) -> np.ndarray:
        return ((x - mean) @ basis).astype(np.float32)

    meta = {**dataset.meta, "pca_dim": dim, "pca_variance_kept": kept}
    reference = None if dataset.reference is None else proj(dataset.reference)
    return MixtureDataset(
        pools={a: proj(x) for a, x in dataset.pools.items()}, reference=reference, meta=meta
    )
