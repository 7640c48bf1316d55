"""Tune the scale-free kNN-UCB / BALROG defaults on development data (RouteLLM MMLU, GSM8K) and a
synthetic set whose best arm per prompt is known.

A run draws T prompts uniformly with replacement (seeded), asks the policy, credits the chosen model's
reward (Remark 5.1: on query rounds too), and reports the chosen model's reward plus, when the policy
queries, the other models' rewards as ``query`` observations. Reported: mean reward over the run and its
95% interval over seeds, beside the best single model, the per-prompt oracle and uniform random.

    python -m experiments.tune_knn --data ../shared/data --sets synthetic,mmlu,gsm8k --seeds 10 --T 2000
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from experiments.routellm_rewards import DEFAULT_DATA, load_table
from routers.base import Context, Observation, Policy
from routers.registry import build_policy


def synthetic_table(n: int = 4000, dim: int = 384, arms: int = 8, clusters: int = 16, seed: int = 0):
    """Unit vectors around ``clusters`` centres; arm g's success probability depends on the cluster
    (a different best arm per cluster) and drifts linearly along one direction inside it. Rewards are
    Bernoulli draws fixed per prompt (so the table is a replay like RouteLLM's)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    label = rng.integers(clusters, size=n)
    x = centres[label] + 0.6 * rng.normal(size=(n, dim)) / np.sqrt(dim)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    base = rng.uniform(0.3, 0.7, size=(clusters, arms))
    base[np.arange(clusters), rng.integers(arms, size=clusters)] = 0.85
    direction = rng.normal(size=(arms, dim)) / np.sqrt(dim)
    mean = np.clip(base[label] + 0.1 * np.tanh(x @ direction.T * 3), 0, 1)
    rewards = (rng.random((n, arms)) < mean).astype(np.float64)
    return x.astype(np.float32), rewards, mean


def replay(
    policy: Policy, emb: np.ndarray, rewards: np.ndarray, models: Sequence[str], T: int, seed: int
) -> dict[str, float]:
    """One run; returns the mean credited reward and the fraction of rounds with a query."""
    rng = np.random.default_rng(10_000 + seed)
    order = rng.integers(emb.shape[0], size=T)
    total = 0.0
    queries = 0
    col = {m: j for j, m in enumerate(models)}
    for i in order:
        x = emb[i]
        decision = policy.select(Context(embedding=x))
        arm = decision.arms[0]
        y = float(rewards[i, col[arm]])
        total += y
        policy.update(Observation(embedding=x, arm=arm, reward=y))
        if decision.query:
            queries += 1
            for other in decision.query:
                policy.update(
                    Observation(embedding=x, arm=other, reward=float(rewards[i, col[other]]), kind="query")
                )
    return {"reward": total / T, "query_rate": queries / T}


def reference_rows(rewards: np.ndarray) -> dict[str, float]:
    return {
        "best single": float(rewards.mean(axis=0).max()),
        "oracle": float(rewards.max(axis=1).mean()),
        "random": float(rewards.mean()),
    }


def evaluate(
    make: Callable[[int], Policy],
    emb: np.ndarray,
    rewards: np.ndarray,
    models: Sequence[str],
    T: int,
    seeds: int,
) -> dict[str, float]:
    runs = [replay(make(s), emb, rewards, models, T, s) for s in range(seeds)]
    r = np.array([run["reward"] for run in runs])
    half = 1.96 * r.std(ddof=1) / np.sqrt(len(r)) if len(r) > 1 else 0.0
    return {
        "mean": float(r.mean()),
        "ci95": float(half),
        "query_rate": float(np.mean([x["query_rate"] for x in runs])),
    }


def load_set(name: str, data: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    if name == "synthetic":
        x, y, _ = synthetic_table()
        return x, y, [f"m{j}" for j in range(y.shape[1])]
    table = load_table(name, data)
    return table.embeddings, table.rewards, list(table.models)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="data directory holding routellm/ (default ../shared/data)",
    )
    parser.add_argument("--sets", default="synthetic,mmlu,gsm8k")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--T", type=int, default=2000)
    parser.add_argument(
        "--grid",
        default='{"knn-ucb": [{"preset": "paper"}, {}]}',
        help="JSON: policy -> list of hyperparameter dicts, or policy -> {name: [values]} for a product",
    )
    parser.add_argument("--out", type=Path, default=None, help="append JSON lines here")
    args = parser.parse_args(argv)
    grid: dict[str, Any] = json.loads(args.grid)
    configs: list[tuple[str, dict[str, Any]]] = []
    for policy, spec in grid.items():
        if isinstance(spec, dict):
            keys = list(spec)
            configs += [
                (policy, dict(zip(keys, vals, strict=True))) for vals in itertools.product(*spec.values())
            ]
        else:
            configs += [(policy, dict(h)) for h in spec]
    for name in args.sets.split(","):
        emb, rewards, models = load_set(name, args.data)
        refs = reference_rows(rewards)
        if name == "synthetic":  # the right answer is known: the arm with the largest true mean
            _, _, mean = synthetic_table()
            refs["oracle by true mean"] = float(rewards[np.arange(len(rewards)), mean.argmax(axis=1)].mean())
        print(f"== {name}: n={len(emb)} T={args.T} seeds={args.seeds}", json.dumps(refs))
        for policy, hyper in tqdm(configs, desc=name):
            start = time.perf_counter()

            def make(s: int, p: str = policy, h: dict[str, Any] = hyper, m: list[str] = models) -> Policy:
                return build_policy(p, m, seed=s, hyperparameters=h)

            res = evaluate(
                make,
                emb,
                rewards,
                models,
                args.T,
                args.seeds,
            )
            row = {"set": name, "policy": policy, "hyper": hyper, **res, "secs": time.perf_counter() - start}
            tqdm.write(json.dumps(row))
            if args.out:
                with args.out.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
