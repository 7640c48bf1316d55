"""RouteLLM development sets as (embeddings, reward table) for tuning routing policies offline.

Reads ``routellm/mmlu/*.csv`` and ``routellm/gsm8k/gsm8k_responses.csv`` under a data directory (default
``../shared/data`` relative to the repository root), embeds the prompts once with an embedder from
``embeddings.registry`` and caches them under ``.banditgate/cache/`` (git-ignored). The reward of model g
on prompt p is 1.0 if g answered correctly, else 0.0 (the csv's boolean columns).
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embeddings.registry import load_embedder

MODELS: tuple[str, ...] = ("mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview")
DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
CACHE_DIR = Path(__file__).resolve().parent.parent / ".banditgate" / "cache"


@dataclass(frozen=True)
class RewardTable:
    """``embeddings`` (n, d) unit float32, ``rewards`` (n, G) float64, ``models`` the G column names."""

    name: str
    embeddings: np.ndarray
    rewards: np.ndarray
    models: tuple[str, ...]


def _read_rows(path: Path) -> list[tuple[str, list[float]]]:
    rows: list[tuple[str, list[float]]] = []
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        for row in reader:
            rows.append((row["prompt"], [1.0 if row[m] == "True" else 0.0 for m in MODELS]))
    return rows


def read_prompts(dataset: str, data_dir: Path = DEFAULT_DATA) -> list[tuple[str, list[float]]]:
    """(prompt, [reward per model]) rows of ``mmlu`` (all subjects, file order) or ``gsm8k``."""
    root = data_dir / "routellm"
    if dataset == "mmlu":
        rows: list[tuple[str, list[float]]] = []
        for path in sorted((root / "mmlu").glob("mmlu_*.csv")):
            rows.extend(_read_rows(path))
        return rows
    if dataset == "gsm8k":
        return _read_rows(root / "gsm8k" / "gsm8k_responses.csv")
    raise ValueError(f"unknown dataset {dataset!r}; known: mmlu, gsm8k")


def load_table(dataset: str, data_dir: Path = DEFAULT_DATA, embedder: str = "minilm") -> RewardTable:
    """The dataset's reward table with cached prompt embeddings (computed on first use)."""
    rows = read_prompts(dataset, data_dir)
    digest = hashlib.sha256("\x00".join(p for p, _ in rows).encode("utf-8")).hexdigest()[:16]
    cache = CACHE_DIR / f"routellm-{dataset}-{embedder.replace(':', '_')}-{digest}.npy"
    if cache.exists():
        emb = np.load(cache)
    else:
        emb = load_embedder(embedder).embed([p for p, _ in rows]).astype(np.float32)
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, emb)
    rewards = np.array([r for _, r in rows], dtype=np.float64)
    return RewardTable(name=dataset, embeddings=emb, rewards=rewards, models=MODELS)


if __name__ == "__main__":  # pragma: no cover - warms the cache
    import argparse

    parser = argparse.ArgumentParser(description="Embed and cache the RouteLLM development sets.")
    parser.add_argument("datasets", nargs="*", default=["gsm8k", "mmlu"])
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="data directory holding routellm/ (default ../shared/data)",
    )
    args = parser.parse_args()
    for name in args.datasets:
        table = load_table(name, args.data)
        print(name, table.embeddings.shape, table.rewards.mean(axis=0))
