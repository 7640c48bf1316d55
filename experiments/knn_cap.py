"""Share of pulls on the worse of two prompt-independent arms (Bernoulli 0.80 vs 0.72) under three caps
on kNN-UCB's k: k_max 32 (the old default), k_max 256 (the default) and k <= max(32, ceil(sqrt N_g))
(a cap growing with the arm's history, capped at 256). 16-d random unit prompts, T = 8000 rounds.

    nice -n 10 python -m experiments.knn_cap --seeds 0,1
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import numpy as np

from routers.base import Context, Observation
from routers.knn_ucb import KnnUCB
from routers.neighbors import KChoice, adaptive_k


class SqrtCapKnnUCB(KnnUCB):
    """k <= min(N_g, k_max, max(32, ceil(sqrt N_g)))."""

    def choose_k(self, arm: str, x: np.ndarray, t: int, scales: tuple[float, float] | None = None) -> KChoice:
        store = self._stores[arm]
        stat, geo = self.coefficients(len(store), t, scales)
        cap = min(self.k_max, max(32, math.ceil(math.sqrt(len(store)))))
        return adaptive_k(store, x, stat, geo, cap, self.k_init)


def share_of_worse(policy: KnnUCB, seed: int, rounds: int) -> tuple[float, int]:
    rng = np.random.default_rng(seed)
    means = {"good": 0.80, "bad": 0.72}
    worse = 0
    k = 0
    for _ in range(rounds):
        x = rng.normal(size=16).astype(np.float32)
        x /= np.linalg.norm(x)
        decision = policy.select(Context(embedding=x))
        arm = decision.arms[0]
        worse += arm == "bad"
        k = int(decision.scores["good"]["k"])
        policy.update(Observation(embedding=x, arm=arm, reward=float(rng.random() < means[arm])))
    return worse / rounds, k


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--rounds", type=int, default=8000)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = {
        "k_max 32": lambda s: KnnUCB(["good", "bad"], seed=s, k_max=32),
        "k_max 256": lambda s: KnnUCB(["good", "bad"], seed=s, k_max=256),
        "max(32, ceil(sqrt N)), <= 256": lambda s: SqrtCapKnnUCB(["good", "bad"], seed=s, k_max=256),
    }
    print("| cap on k | share on the worse arm per seed | mean | good arm's k at the end |")
    print("|---|---|---|---|")
    for name, make in variants.items():
        runs = [share_of_worse(make(s), s, args.rounds) for s in seeds]
        shares = ", ".join(f"{v:.3f}" for v, _ in runs)
        ks = ", ".join(str(k) for _, k in runs)
        print(f"| {name} | {shares} | {np.mean([v for v, _ in runs]):.3f} | {ks} |", flush=True)


if __name__ == "__main__":
    main()
