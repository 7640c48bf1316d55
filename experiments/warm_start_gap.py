"""Warm start against the knn-ceiling, paired per seed (docs/benchmarks.md, "Warm start from logs").

Runs ``bench run``'s replay with ``--warm-start F`` for one or more policies (``--policy``, repeatable;
default ``knn-ucb``) and prints the references on the online prompts (best single, oracle, knn-ceiling:
mean reward and cost over the seeds), then per policy its mean reward and cost and, per seed, its mean
reward on the online prompts minus the ``knn-ceiling``'s on the same prompts, with the mean, the normal
95% half-width over the seeds (``bench.metrics.ci95``), the median and the range.

    nice -n 10 python -m experiments.warm_start_gap --dataset /tmp/ws/gsm8k-halves/report --fraction 0.5
    nice -n 10 python -m experiments.warm_start_gap --dataset ... --policy knn-ucb --policy default
    nice -n 10 python -m experiments.warm_start_gap --dataset ... --logged-model gpt-4-1106-preview
"""

from __future__ import annotations

import argparse

import numpy as np

from bench.dataset import load_dataset
from bench.metrics import ci95
from bench.policy_spec import parse_spec
from bench.run_command import dataset_embeddings, replay
from bench.trace import Trace
from bench.warm_start import WarmStart

SHOWN_REFERENCES = ("best_single", "oracle", "knn_ceiling")


def summary(name: str, traces: list[Trace]) -> str:
    """``name reward ± ci95, cost $/round`` over the seeds' traces."""
    reward = np.array([t.reward.mean() for t in traces])
    cost = np.array([t.cost.mean() for t in traces])
    return f"{name}: reward {reward.mean():.4f} ± {ci95(reward):.4f}, cost {cost.mean():.6f} $/round"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--policy", action="append", default=None, help="repeatable (default knn-ucb)")
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--logged-model", default=None)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--embedder", default="minilm")
    args = parser.parse_args()
    data = load_dataset(args.dataset)
    embeddings = dataset_embeddings(data, args.embedder, progress=False)
    specs = [parse_spec(text) for text in args.policy or ["knn-ucb"]]
    warm = WarmStart(args.fraction, args.logged_model)
    result = replay(data, embeddings, specs, None, args.seeds, progress=False, warm_start=warm)
    for key in SHOWN_REFERENCES:
        print(summary(key, result.references[key]))
    ceiling = np.array([t.reward.mean() for t in result.references["knn_ceiling"]])
    for spec in specs:
        traces = result.runs[spec.text]
        gap = np.array([t.reward.mean() for t in traces]) - ceiling
        print(summary(spec.text, traces))
        print(
            f"  gap to knn-ceiling: mean {gap.mean():+.4f} ± {ci95(gap):.4f}, median {np.median(gap):+.4f}, "
            f"min {gap.min():+.4f}, max {gap.max():+.4f}"
        )
        print("  per seed", [round(float(g), 4) for g in gap])


if __name__ == "__main__":
    main()
