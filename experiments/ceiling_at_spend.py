"""Does a policy earn within ``--tolerance`` (0.01) of the ``knn-ceiling`` swept to the same cost?
(docs/benchmarks.md, "Trusted routing: safety floor and cost target".)

Reads a ``bench frontier`` report (its ``knn_ceiling`` points, one per lambda, exact on all prompts) and
one or more ``bench run`` reports on the same dataset, and prints per policy of those runs its mean
reward (± the run's 95% interval) and spend, the ceiling's reward at that spend, the gap and met / not
met. The ceiling at spend s is read on the upper-left convex hull of its (cost, reward) points
(``bench.frontier.mixing_frontier``: calling the lambda_i router with probability q and the lambda_j one
otherwise earns the chord between their points, so the hull is what the ceiling reaches at each spend),
linearly between hull points; above the dearest hull point it stays at the hull's highest reward (more
spend buys nothing there). The ceiling is exact (T = N: every seed plays every prompt), so the gap's
interval is the policy's.

    python -m experiments.ceiling_at_spend --frontier OUT/frontier.json --run RUN.json [--run RUN2.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.references_at import hull_reward_at


def ceiling_at(points: list[dict[str, Any]], spend: float) -> float:
    """The knn-ceiling's reward at ``spend`` on the hull of its per-lambda points (module doc)."""
    reward = hull_reward_at([(float(p["cost"]), float(p["reward"])) for p in points], spend)
    if reward is None:
        raise ValueError(f"spend {spend} is below the ceiling's cheapest point")
    return reward


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frontier", required=True, type=Path, help="a bench frontier report")
    parser.add_argument(
        "--run", action="append", required=True, type=Path, help="bench run --json; repeatable"
    )
    parser.add_argument("--tolerance", type=float, default=0.01)
    args = parser.parse_args()
    frontier = json.loads(args.frontier.read_text())
    points = frontier["knn_ceiling"]
    for path in args.run:
        run = json.loads(path.read_text())
        if Path(run["dataset"]).resolve() != Path(frontier["dataset"]).resolve():
            raise ValueError(f"{path} is on {run['dataset']}, the frontier on {frontier['dataset']}")
        for policy in run["policies"]:
            reward, ci, spend = policy["mean_reward"], policy["ci95"], policy["mean_cost"]
            ceiling = ceiling_at(points, spend)
            gap = reward - ceiling
            verdict = "met" if gap >= -args.tolerance else "not met"
            print(
                f"{policy['spec']}: reward {reward:.4f} ± {ci:.4f} at {spend:.6f} $/prompt; knn-ceiling there "
                f"{ceiling:.4f}; gap {gap:+.4f} ± {ci:.4f} (>= -{args.tolerance}: {verdict})"
            )


if __name__ == "__main__":
    main()
