"""Per-round cost of the mixture policies against the number of samples already collected:
``python -m experiments.speed_mixture [--sizes 1000,10000,100000] [--dim 64] [--arms 4] [--rounds 30]``.

For each configuration and history size n, a policy's objective is primed with n samples (n / m per arm,
Gaussian data), then ``--rounds`` rounds of ``select`` + ``update`` (one new output each) are timed; the
median milliseconds per round is reported, and the ratio between the largest and smallest n.

Priming: Vendi and FD statistics are exact sums, filled in bulk (``observe_many``). For the kernel
objectives (rke, kid) an exact fill costs O(n^2 d), so the bench writes the state a run would have
reached: each arm's stored samples (its reservoir: min(n_i, cap) rows), its count n_i, and pair sums
estimated from 256-row subsamples scaled by n_i n_j. A round's cost depends only on these shapes (one
kernel row against every stored sample, a QP over m arms), not on the values.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.mixture import limit_blas_threads
from routers.base import Context, Observation
from routers.diversity import KernelQuadraticObjective
from routers.registry import build_policy

CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "cab-rke-cap4096": ("mixture-ucb-cab", {"objective": "rke", "max_samples_per_arm": 4096}),
    "cab-rke-cap1024": ("mixture-ucb-cab", {"objective": "rke", "max_samples_per_arm": 1024}),
    "cab-rke-uncapped": ("mixture-ucb-cab", {"objective": "rke", "max_samples_per_arm": None}),
    "ogd-rke-cap4096": ("mixture-ucb-ogd", {"objective": "rke", "max_samples_per_arm": 4096}),
    "greedy-kid-cap4096": ("mixture-greedy", {"objective": "kid", "max_samples_per_arm": 4096}),
    "greedy-vendi-rff64": ("mixture-greedy", {"objective": "vendi", "feature": "rff", "rff_dim": 64}),
    "greedy-fd": ("mixture-greedy", {"objective": "fd"}),
}


def prime_kernel_statistics(
    objective: KernelQuadraticObjective, data: dict[str, np.ndarray], seed: int
) -> None:
    """Write the state of a kernel objective after observing ``data`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    arms = list(data)
    for arm in arms:
        objective.add_arm(arm)
    d = next(iter(data.values())).shape[1]
    objective.dim = d
    cap = objective.cap
    objective.samples = [
        np.array(data[a][: (len(data[a]) if cap is None else cap)], dtype=np.float64) for a in arms
    ]
    objective.stored = np.array([len(s) for s in objective.samples], dtype=np.int64)
    objective.counts = np.array([len(data[a]) for a in arms], dtype=np.int64)
    objective.quality_sums = np.zeros(len(arms))
    subs = [data[a][rng.permutation(len(data[a]))[:256]].astype(np.float64) for a in arms]
    m = len(arms)
    sums = np.zeros((m, m))
    for i in range(m):
        for j in range(m):
            sums[i, j] = (
                float(np.mean(objective.kappa(subs[i], subs[j]))) * objective.counts[i] * objective.counts[j]
            )
    objective.pair_sums = sums
    objective.f_sums = np.array(
        [sum(objective.f_value(x) for x in subs[i][:32]) / 32 * objective.counts[i] for i in range(m)]
    )


def measure(config: str, n: int, dim: int, arms: int, rounds: int, seed: int) -> float:
    """Median seconds per round (select + update) with ``n`` samples already collected."""
    name, options = CONFIGS[config]
    rng = np.random.default_rng(seed)
    centres = 2.0 * rng.normal(size=(arms, dim))
    names = [f"g{i}" for i in range(arms)]
    reference = rng.normal(size=(500, dim)) * 1.5
    hp = {**options, "bandwidth": float(np.sqrt(dim)), "init_pulls": 1}
    if options["objective"] in ("kid", "fd"):
        hp["reference"] = reference.tolist()
    policy = build_policy(name, names, seed=seed, hyperparameters=hp)
    per_arm = max(1, n // arms)
    data = {a: centres[i] + rng.normal(size=(per_arm, dim)) for i, a in enumerate(names)}
    objective = policy.objective  # type: ignore[attr-defined]
    if isinstance(objective, KernelQuadraticObjective):
        prime_kernel_statistics(objective, data, seed)
    else:
        for a, xs in data.items():
            objective.observe_many(a, xs)
    context = Context(embedding=np.zeros(1, dtype=np.float32))
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        arm = policy.select(context).arms[0]
        x = centres[names.index(arm)] + rng.normal(size=dim)
        policy.update(Observation(embedding=context.embedding, arm=arm, output_embedding=x))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _measure_all(
    configs: list[str], sizes: list[int], args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    from tqdm import tqdm

    results: dict[str, dict[str, float]] = {}
    with tqdm(total=len(sizes) * len(configs), desc="speed", file=sys.stderr) as bar:
        for config in configs:
            results[config] = {}
            for n in sizes:
                results[config][str(n)] = measure(config, n, args.dim, args.arms, args.rounds, args.seed)
                bar.update(1)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.speed_mixture", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--arms", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON path")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    configs = [c for c in args.configs.split(",") if c]
    limits = limit_blas_threads()
    try:
        results = _measure_all(configs, sizes, args)
    finally:
        if limits is not None:
            limits.restore_original_limits()
    header = (
        "| config | "
        + " | ".join(f"n = {n:,} (ms/round)" for n in sizes)
        + f" | ratio {sizes[-1]:,} / {sizes[0]:,} |"
    )
    print(header)
    print("|" + "---|" * (len(sizes) + 2))
    for config, row in results.items():
        values = [row[str(n)] for n in sizes]
        cells = " | ".join(f"{1e3 * v:.2f}" for v in values)
        print(f"| {config} | {cells} | {values[-1] / values[0]:.1f} |")
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {"dim": args.dim, "arms": args.arms, "rounds": args.rounds, "seconds_per_round": results},
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
