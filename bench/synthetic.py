"""Synthetic replay datasets (``bench synth linear|balrog``); parameters are fixed and documented
below.

``linear``: tiny and fast, for tests and smoke runs. Each row carries a ``context`` vector x (unit, d-dim,
standard normal before normalising); model k's true mean is ``0.5 + 0.4 * <x, theta_k>`` (theta_k unit,
standard normal before normalising), and each row stores ``samples`` draws of it plus N(0, noise^2),
clipped to [0, 1]. Prices: model k costs ``0.001 * (k + 1)`` USD per call.

``balrog``: a BALROG-like image-generation table without images. Six simulated generators, prompts are
real sentences (MMLU question stems), rewards on a CLIPScore-like scale. For prompt embedding x (the same
embedder the harness uses) and arm k with anchors a_k1..a_k3 (prompts drawn at random):

    s_k(x)  = tau * log sum_j exp(cos(x, a_kj) / tau)          (a smooth maximum, tau = 0.05)
    z_k(x)  = (s_k(x) - mean_p s_k) / sd_p s_k                 (standardised over the prompts)
    mu_k(x) = BASE[k] + AMPLITUDE * z_k(x)
    samples = mu_k(x) + N(0, NOISE_SD^2), 5 per (prompt, arm), clipped to [20, 40]

so each arm is best near its own anchors and the per-prompt best arm varies smoothly with the embedding.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Any

import numpy as np

from bench.cli import documented_parser
from bench.embedding_cache import embed_prompts
from replay_dataset.files import write_dataset

BALROG_ARMS = ("sim-sana", "sim-lcm", "sim-unidiffuser", "sim-sdxl-turbo", "sim-ssd-1b", "sim-koala")
BALROG_BASE = (32.0, 31.6, 31.2, 30.8, 30.4, 30.0)
BALROG_USD_PER_CALL = (0.004, 0.002, 0.001, 0.0005, 0.003, 0.001)
BALROG_AMPLITUDE = 1.0
BALROG_NOISE_SD = 1.5
BALROG_TAU = 0.05
BALROG_ANCHORS = 3
BALROG_SAMPLES = 5
BALROG_RANGE = (20.0, 40.0)


def linear_dataset(
    directory: str | Path,
    n_prompts: int = 60,
    n_models: int = 3,
    dim: int = 8,
    samples: int = 1,
    noise: float = 0.1,
    seed: int = 0,
) -> Path:
    """Write the ``linear`` set (see module docstring) into ``directory``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_prompts, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    theta = rng.standard_normal((n_models, dim))
    theta /= np.linalg.norm(theta, axis=1, keepdims=True)
    means = 0.5 + 0.4 * x @ theta.T
    draws = np.clip(means[:, :, None] + noise * rng.standard_normal((n_prompts, n_models, samples)), 0, 1)
    names = [f"model-{k}" for k in range(n_models)]
    models = [
        {"name": name, "usd_per_mtok_in": 0.0, "usd_per_mtok_out": 0.0, "usd_per_call": 0.001 * (k + 1)}
        for k, name in enumerate(names)
    ]
    rows = []
    for p in range(n_prompts):
        rewards = {
            name: (
                round(float(draws[p, k, 0]), 6) if samples == 1 else [round(float(v), 6) for v in draws[p, k]]
            )
            for k, name in enumerate(names)
        }
        rows.append(
            {
                "id": f"linear-{p}",
                "prompt": f"synthetic prompt {p}",
                "rewards": rewards,
                "tokens_in": dict.fromkeys(names, 0),
                "tokens_out": dict.fromkeys(names, 0),
                "context": [round(float(v), 6) for v in x[p]],
            }
        )
    description = f"synthetic linear: {n_prompts} prompts, {n_models} models, d={dim}, seed {seed}"
    return write_dataset(directory, models, rows, (0.0, 1.0), description)


def mmlu_stems(data_dir: Path, limit: int, seed: int) -> list[str]:
    """Distinct MMLU question stems (the text before the answer options), ``limit`` drawn at random."""
    stems: list[str] = []
    seen: set[str] = set()
    for path in sorted((data_dir / "routellm" / "mmlu").glob("mmlu_*.csv")):
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                stem = row["prompt"].split("\nA.")[0].strip()
                if stem and stem not in seen:
                    seen.add(stem)
                    stems.append(stem)
    if not stems:
        raise ValueError(f"no MMLU csv under {data_dir / 'routellm' / 'mmlu'}")
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(len(stems), size=min(limit, len(stems)), replace=False))
    return [stems[i] for i in chosen]


def balrog_means(embeddings: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(P, 6) true means mu_k(x) of the module docstring, and the (6, ANCHORS) anchor prompt indices."""
    n = embeddings.shape[0]
    anchors = rng.choice(n, size=(len(BALROG_ARMS), BALROG_ANCHORS), replace=False)
    cos = embeddings @ embeddings[anchors.reshape(-1)].T  # (P, 6 * ANCHORS)
    cos = cos.reshape(n, len(BALROG_ARMS), BALROG_ANCHORS) / BALROG_TAU
    peak = cos.max(axis=2, keepdims=True)
    smooth_max = BALROG_TAU * (peak[..., 0] + np.log(np.exp(cos - peak).sum(axis=2)))
    z = (smooth_max - smooth_max.mean(axis=0)) / smooth_max.std(axis=0)
    return np.asarray(BALROG_BASE)[None, :] + BALROG_AMPLITUDE * z, anchors


def balrog_dataset(
    directory: str | Path,
    data_dir: Path,
    n_prompts: int = 2000,
    seed: int = 0,
    embedder: str = "minilm",
    cache_dir: Path | None = None,
) -> Path:
    """Write the ``balrog`` set (see module docstring) into ``directory``."""
    prompts = mmlu_stems(data_dir, n_prompts, seed)
    embeddings = embed_prompts(prompts, embedder, cache_dir=cache_dir).astype(np.float64)
    rng = np.random.default_rng([seed, 2])
    means, anchors = balrog_means(embeddings, rng)
    noise = BALROG_NOISE_SD * rng.standard_normal((*means.shape, BALROG_SAMPLES))
    draws = np.clip(means[..., None] + noise, *BALROG_RANGE)
    models = [
        {"name": name, "usd_per_mtok_in": 0.0, "usd_per_mtok_out": 0.0, "usd_per_call": price}
        for name, price in zip(BALROG_ARMS, BALROG_USD_PER_CALL, strict=True)
    ]
    rows = [
        {
            "id": f"balrog-{p}",
            "prompt": prompt,
            "rewards": {
                name: [round(float(v), 4) for v in draws[p, k]] for k, name in enumerate(BALROG_ARMS)
            },
            "tokens_in": dict.fromkeys(BALROG_ARMS, 0),
            "tokens_out": dict.fromkeys(BALROG_ARMS, 0),
        }
        for p, prompt in enumerate(prompts)
    ]
    description = (
        f"synthetic BALROG-like: {len(prompts)} MMLU stems, 6 simulated generators, CLIPScore-like rewards "
        f"(seed {seed}, embedder {embedder}; parameters: bench synth --help)"
    )
    extra: dict[str, Any] = {"anchors": {name: anchors[k].tolist() for k, name in enumerate(BALROG_ARMS)}}
    return write_dataset(directory, models, rows, BALROG_RANGE, description, generator=extra)


def synth_main(args: argparse.Namespace) -> int:
    if args.kind == "linear":
        out = linear_dataset(
            args.out, args.prompts, args.models, args.dim, args.samples, args.noise, args.seed
        )
    else:
        out = balrog_dataset(
            args.out, Path(args.data), args.prompts, args.seed, args.embedder, args.cache_dir
        )
    print(f"wrote {out}")
    return 0


def add_subcommand(subparsers: Any) -> None:
    parser = documented_parser(subparsers, "synth", "generate a synthetic replay dataset", __doc__)
    parser.add_argument("kind", choices=("linear", "balrog"))
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--prompts", type=int, default=None, help="prompts (linear 60, balrog 2000)")
    parser.add_argument("--models", type=int, default=3, help="linear: number of models")
    parser.add_argument("--dim", type=int, default=8, help="linear: context dimension")
    parser.add_argument("--samples", type=int, default=1, help="linear: reward samples per (prompt, model)")
    parser.add_argument("--noise", type=float, default=0.1, help="linear: reward noise sd")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--data",
        default="../shared/data",
        help="balrog: data directory holding routellm/ (default ../shared/data)",
    )
    parser.add_argument("--embedder", default="minilm", help="balrog: embedder for the anchors")
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="balrog: embedding cache folder (as bench run)"
    )
    parser.set_defaults(handler=_with_defaults)


def _with_defaults(args: argparse.Namespace) -> int:
    if args.prompts is None:
        args.prompts = 60 if args.kind == "linear" else 2000
    return synth_main(args)
