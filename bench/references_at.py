"""``bench references``: the full-information kNN router and the mixing line, read at given spends.

A policy's reward is judged against what a reference earns at the same cost per request. On one dataset
(all P prompts, exactly, as ``bench frontier`` computes its references) the full-information kNN router
(``bench.knn_ceiling``) is swept over ``--lambda-points`` lambdas (``bench.frontier.lambda_grid``, default
41), each lambda a point (mean cost, mean reward). At a spend x (USD per request) the reading is

    R(x) = the upper concave hull of the points, linear between its vertices, at x;
           its highest reward for x beyond the vertex of highest reward; none for x below the cheapest point

which is what a random mix of two lambdas' routers earns at mean cost x (router i with probability q and j
with 1 - q lands on the chord between their points). The same reading of the single models' points is the
mixing line (``bench.frontier.mixing_frontier``).

Spends come from ``--spend`` (USD, repeatable) and from ``--report FILE`` (a ``bench run --json`` report,
repeatable): each policy row's ``mean_cost`` (a judge's price included when the run had one), read against
that report's dataset. Prints one line per spend; ``--json`` writes them with the curves.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.cli import documented_parser
from bench.dataset import load_dataset
from bench.frontier import lambda_grid, mixing_frontier, reference_curves
from bench.replay_env import WITHOUT_REPLACEMENT
from bench.run_command import add_embedding_arguments, dataset_embeddings

DEFAULT_LAMBDA_POINTS = 41


def hull_reward_at(points: Sequence[tuple[float, float]], spend: float) -> float | None:
    """R(spend) of the module doc for (cost, reward) points: None below the cheapest point."""
    hull = mixing_frontier(points)
    if not hull or spend < hull[0][0]:
        return None
    for (c0, r0), (c1, r1) in itertools.pairwise(hull):
        if spend <= c1:
            return r0 + (r1 - r0) * (spend - c0) / (c1 - c0)
    return hull[-1][1]


def readings(curves: dict[str, Any], spends: Sequence[float]) -> list[dict[str, Any]]:
    """Per spend, the kNN router's and the mixing line's reward at it (``reference_curves``' output)."""
    knn = [(p["cost"], p["reward"]) for p in curves["knn_ceiling"]]
    mixing = [(p["cost"], p["reward"]) for p in curves["mixing_frontier"]]
    return [{"spend": x, "knn": hull_reward_at(knn, x), "mixing": hull_reward_at(mixing, x)} for x in spends]


def report_spends(path: Path) -> tuple[str, list[tuple[str, float, float]]]:
    """(the report's dataset, [(spec, mean reward, mean cost) per policy row]) of a ``bench run`` report."""
    report = json.loads(path.read_text())
    rows = [(row["spec"], float(row["mean_reward"]), float(row["mean_cost"])) for row in report["policies"]]
    return str(report["dataset"]), rows


def references_main(args: argparse.Namespace) -> int:
    rows: list[tuple[str, str, float | None, float]] = [("--spend", "", None, float(x)) for x in args.spend]
    datasets = {args.dataset} if args.dataset else set()
    for path in args.report:
        source, found = report_spends(Path(path))
        datasets.add(source)
        rows += [(Path(path).name, spec, reward, cost) for spec, reward, cost in found]
    if len({str(Path(d).resolve()) for d in datasets}) != 1:
        raise ValueError(f"give one dataset (--dataset, or reports of one dataset); got {sorted(datasets)}")
    if not rows:
        raise ValueError("nothing to read: give --spend or --report")
    dataset = load_dataset(next(iter(datasets)))
    embeddings = dataset_embeddings(
        dataset, args.embedder, args.cache_dir, progress=not args.quiet, rule=args.embed_text
    )
    lambdas = lambda_grid(dataset.cost, args.lambda_points)
    curves = reference_curves(dataset, embeddings, lambdas, WITHOUT_REPLACEMENT, progress=not args.quiet)
    best = max(curves["models"], key=lambda m: m["reward"])
    read = readings(curves, [cost for *_, cost in rows])
    print(f"best single {best['model']}: reward {best['reward']:.4f} at ${best['cost']:.6f}")
    print("source | row | reward | spend $ (of best single) | knn full-info | mixing line")
    out = []
    for (source, spec, reward, cost), got in zip(rows, read, strict=True):
        cells = [
            source,
            spec or "-",
            "-" if reward is None else f"{reward:.4f}",
            f"{cost:.6f} ({cost / best['cost']:.1%})",
            *("-" if got[k] is None else f"{got[k]:.4f}" for k in ("knn", "mixing")),
        ]
        print(" | ".join(cells))
        out.append({"source": source, "spec": spec or None, "reward": reward, **got})
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        report = {"dataset": str(dataset.path), "lambdas": lambdas, "best": best, **curves, "at": out}
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


def add_subcommand(subparsers: Any) -> None:
    parser = documented_parser(
        subparsers,
        "references",
        "the full-information kNN router and the mixing line read at given spends (or a run's rows' costs)",
        __doc__,
    )
    parser.add_argument("--dataset", default=None, help="the dataset (default: the reports' dataset)")
    parser.add_argument(
        "--spend", type=float, action="append", default=[], metavar="USD", help="a spend; repeatable"
    )
    parser.add_argument(
        "--report",
        action="append",
        default=[],
        metavar="FILE",
        help="a bench run --json report: read at each policy row's mean cost; repeatable",
    )
    parser.add_argument(
        "--lambda-points",
        type=int,
        default=DEFAULT_LAMBDA_POINTS,
        help=f"lambdas of the kNN router's sweep (default {DEFAULT_LAMBDA_POINTS})",
    )
    add_embedding_arguments(parser)
    parser.add_argument("--json", help="write the readings and the curves here")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(handler=references_main)
