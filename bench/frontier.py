"""``bench frontier``: reward against cost per request, for the references and each policy swept over its
cost knob (the form of RouteLLM's cost/quality plots).

On one dataset (P prompts, K models; rewards ``mean_reward[p, k]``, USD costs ``cost[p, k]``) it computes

- **single models**: each model's point (mean_p mean_reward[p, k], mean_p cost[p, k]) over all prompts;
- **uniform random mixing**: calling model i with probability q and j with 1 - q lands on the segment
  between their points, so the mixtures of models fill the convex hull of the single points; the line
  drawn is the hull's upper-left boundary (``mixing_frontier``: the most reward any random mix of models
  earns at each cost), and ``random`` is the uniform mix of all K;
- **per-prompt oracle** swept over lambda (reward units per USD): per prompt the model of highest
  mean_reward - lambda cost (ties to the cheaper), its mean reward and cost; lambda = 0 is the plain oracle;
- **knn-ceiling** swept over lambda: ``bench.knn_ceiling`` with the utility u = mean_reward - lambda cost
  (its k chosen per lambda), the full-information leave-one-out kNN router, as a point per lambda;
- **each policy** swept over ``cost_target`` (USD per request; default a grid of fractions of the best
  single model's mean cost) or ``cost_weight`` (lambda), plus the policy as given (no cost key): each
  point is the mean over seeds 0..S-1 of the per-seed mean reward and mean cost, with 95% intervals
  (1.96 sd / sqrt(S)), on the same draws as ``bench run`` (T prompts without repeats by default);
- with ``--judge SPEC`` (repeatable, e.g. ``verdict:tpr=0.95,tnr=0.95`` then ``verdict:tpr=0.7,tnr=0.7``)
  each policy is played once per judge, its cascades graded by that simulated judge and paying for it
  (``bench.judge``): a sweep of judge quality, one curve per (policy, judge).

The lambda grid is 0 and ``--lambda-points`` - 1 values geometric in [0.01, 100] / c_max, where c_max is
the largest mean cost of a model (``replay_env.normalisation_scale``): from "cost barely matters" to "cost
decides". References are computed on all P prompts, exactly; policies on the seeds' draws.

Writes ``frontier.json`` (every point) and ``frontier.png`` (``bench.frontier_plot``) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from bench.arm_schedule import build_schedule
from bench.cli import documented_parser
from bench.dataset import Dataset, load_dataset
from bench.judge import Judge, parse_judge
from bench.knn_ceiling import knn_ceiling
from bench.metrics import ci95
from bench.policy_spec import PolicySpec, build_from_spec, check_specs, parse_spec
from bench.replay_env import Draws, ReplayEnv, normalisation_scale, oracle_table, resolve_horizon
from bench.run_command import add_replay_arguments, dataset_embeddings
from bench.simulator import run_policy

SWEEPS = ("cost_target", "cost_weight")
DEFAULT_FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0)
DEFAULT_LAMBDA_POINTS = 25
LAMBDA_SPAN = (0.01, 100.0)


def single_points(dataset: Dataset) -> list[dict[str, Any]]:
    """Each model's mean reward and mean cost over all prompts."""
    reward, cost = dataset.mean_reward.mean(axis=0), dataset.cost.mean(axis=0)
    return [
        {"model": name, "reward": float(r), "cost": float(c)}
        for name, r, c in zip(dataset.model_names, reward, cost, strict=True)
    ]


def choice_point(dataset: Dataset, choice: np.ndarray) -> tuple[float, float]:
    """(mean reward, mean cost) of calling model ``choice[p]`` on every prompt p."""
    rows = np.arange(dataset.n_prompts)
    return float(dataset.mean_reward[rows, choice].mean()), float(dataset.cost[rows, choice].mean())


def oracle_point(dataset: Dataset, lam: float) -> tuple[float, float]:
    """The per-prompt oracle of utility mean_reward - lam cost (ties to the cheaper)."""
    everything = np.ones(len(dataset.models), dtype=bool)
    table = oracle_table(dataset.mean_reward - lam * dataset.cost, dataset.cost, everything)
    return choice_point(dataset, table.choice)


def mixing_frontier(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The upper-left boundary of the convex hull of (cost, reward) points, cheapest first, ending at the
    point of highest reward (the cheapest such): what random mixing of the models earns at best per cost."""
    ordered = sorted(set(points), key=lambda p: (p[0], -p[1]))
    hull: list[tuple[float, float]] = []
    for cost, reward in ordered:
        if hull and cost == hull[-1][0]:
            continue  # same cost, lower reward: below the hull
        while len(hull) >= 2:
            (c1, r1), (c2, r2) = hull[-2], hull[-1]
            # drop the middle point when it lies on or below the chord from hull[-2] to the new point
            if (r2 - r1) * (cost - c1) <= (reward - r1) * (c2 - c1):
                hull.pop()
            else:
                break
        hull.append((cost, reward))
    top = max(range(len(hull)), key=lambda i: (hull[i][1], -hull[i][0]))
    return hull[: top + 1]


def lambda_grid(cost: np.ndarray, points: int = DEFAULT_LAMBDA_POINTS) -> list[float]:
    """0, then ``points`` - 1 values geometric in ``LAMBDA_SPAN`` / c_max (module doc)."""
    if points < 1:
        raise ValueError(f"--lambda-points must be >= 1, got {points}")
    scale = normalisation_scale(cost)
    lo, hi = LAMBDA_SPAN
    return [0.0, *(float(v) / scale for v in np.geomspace(lo, hi, points - 1))] if points > 1 else [0.0]


def sweep_spec(base: PolicySpec, key: str, value: float) -> PolicySpec:
    """``base`` with ``key=value`` added (``knn-ucb`` -> ``knn-ucb:cost_target=0.002``)."""
    if key in base.params:
        raise ValueError(f"policy spec {base.text!r} already sets {key}, which the frontier sweeps")
    return parse_spec(f"{base.text}{',' if base.params else ':'}{key}={value:.6g}")


def sweep_values(args: argparse.Namespace, dataset: Dataset) -> list[float]:
    """The swept values: ``--values``, else for cost_target the ``--fractions`` of the best single model's
    mean cost, for cost_weight the lambda grid without 0 (the plain policy is the lambda = 0 point)."""
    if args.values:
        return [float(v) for v in args.values.split(",")]
    if args.sweep == "cost_target":
        best = int(np.argmax(dataset.mean_reward.mean(axis=0)))
        base = float(dataset.cost[:, best].mean())
        return [float(f) * base for f in args.fractions.split(",")]
    return lambda_grid(dataset.cost, args.lambda_points)[1:]


def reference_curves(
    dataset: Dataset,
    embeddings: np.ndarray,
    lambdas: Sequence[float],
    draws: Draws,
    progress: bool = True,
) -> dict[str, Any]:
    """Single models, mixing frontier, uniform random, and the oracle and knn-ceiling per lambda."""
    singles = single_points(dataset)
    schedule = build_schedule(dataset.model_names, [], dataset.n_prompts)
    lo, hi = dataset.reward_range
    ceiling, oracle = [], []
    for lam in tqdm(lambdas, desc="knn-ceiling per lambda", disable=not progress, file=sys.stderr):
        env = ReplayEnv(dataset, embeddings, schedule, lam, (lo + hi) / 2, draws=draws)
        found = knn_ceiling(env)
        reward, cost = choice_point(dataset, found.choice[0])
        ceiling.append({"lambda": lam, "k": found.k, "reward": reward, "cost": cost})
        o_reward, o_cost = oracle_point(dataset, lam)
        oracle.append({"lambda": lam, "reward": o_reward, "cost": o_cost})
    hull = mixing_frontier([(p["cost"], p["reward"]) for p in singles])
    return {
        "models": singles,
        "mixing_frontier": [{"cost": c, "reward": r} for c, r in hull],
        "random": {
            "reward": float(dataset.mean_reward.mean()),
            "cost": float(dataset.cost.mean()),
        },
        "oracle": oracle,
        "knn_ceiling": ceiling,
    }


def policy_curves(
    dataset: Dataset,
    embeddings: np.ndarray,
    specs: Sequence[PolicySpec],
    sweep: str,
    values: Sequence[float],
    horizon: int,
    seeds: int,
    draws: Draws,
    progress: bool = True,
    judges: Sequence[Judge] = (),
) -> dict[str, list[dict[str, Any]]]:
    """Per base spec: one point per swept value and one for the spec as given (``value`` None). With
    ``judges`` (``--judge``, repeatable) each base spec is played once per judge, as the curve
    ``"<spec> | judge <judge spec>"``, its cascades graded by that judge (``bench.judge``)."""
    schedule = build_schedule(dataset.model_names, [], horizon)
    lo, hi = dataset.reward_range
    env = ReplayEnv(dataset, embeddings, schedule, 0.0, (lo + hi) / 2, draws=draws)
    graders: list[Judge | None] = list(judges) or [None]
    runs = {
        curve_name(base, judge): (judge, [(None, base)] + [(v, sweep_spec(base, sweep, v)) for v in values])
        for base in specs
        for judge in graders
    }
    every = [(name, spec) for name, (_, points) in runs.items() for _, spec in points]
    check_specs([spec for _, spec in every], schedule.initial, None)
    per_seed: dict[tuple[str, str], list[tuple[float, float]]] = {(n, s.text): [] for n, s in every}
    bar = tqdm(total=len(every) * seeds * horizon, unit="round", disable=not progress, file=sys.stderr)
    for seed in range(seeds):
        seed_draws = env.draw(seed)
        for name, spec in every:
            bar.set_description(f"{name} seed {seed}")
            policy = build_from_spec(spec, schedule.initial, seed, None, horizon)
            trace = run_policy(policy, env, seed_draws, progress=bar.update, judge=runs[name][0])
            per_seed[name, spec.text].append((float(trace.reward.mean()), float(trace.cost.mean())))
    bar.close()
    curves: dict[str, list[dict[str, Any]]] = {}
    for name, (judge, points) in runs.items():
        rows = []
        for value, spec in points:
            reward, cost = (np.array(v) for v in zip(*per_seed[name, spec.text], strict=True))
            rows.append(
                {
                    "spec": spec.text,
                    sweep: value,
                    "judge": None if judge is None else judge.spec.text,
                    "reward": float(reward.mean()),
                    "reward_ci95": ci95(reward),
                    "cost": float(cost.mean()),
                    "cost_ci95": ci95(cost),
                }
            )
        curves[name] = rows
    return curves


def curve_name(base: PolicySpec, judge: Judge | None) -> str:
    """A curve's key: the base spec, plus ``| judge <spec>`` when a judge grades it."""
    return base.text if judge is None else f"{base.text} | judge {judge.spec.text}"


def frontier_main(args: argparse.Namespace) -> int:
    if args.lam != 0.0:
        raise ValueError("bench frontier sweeps lambda itself; --lambda does not apply")
    dataset = load_dataset(args.dataset)
    horizon = resolve_horizon(args.horizon, dataset.n_prompts, args.draws)
    specs = [parse_spec(text) for text in args.policy]
    values = sweep_values(args, dataset)
    # fail on a bad spec before the (possibly long) embedding
    check_specs([sweep_spec(s, args.sweep, v) for s in specs for v in values[:1]], dataset.model_names, None)
    judges = [Judge(parse_judge(text), dataset) for text in args.judge]
    embeddings = dataset_embeddings(
        dataset, args.embedder, args.cache_dir, progress=not args.quiet, rule=args.embed_text
    )
    lambdas = lambda_grid(dataset.cost, args.lambda_points)
    report: dict[str, Any] = {
        "dataset": str(dataset.path),
        "description": dataset.description,
        "n_prompts": dataset.n_prompts,
        "horizon": horizon,
        "seeds": args.seeds,
        "draws": args.draws,
        "sweep": args.sweep,
        "values": values,
        "embedder": "context" if dataset.contexts is not None else args.embedder,
        **reference_curves(dataset, embeddings, lambdas, args.draws, progress=not args.quiet),
        "policies": policy_curves(
            dataset,
            embeddings,
            specs,
            args.sweep,
            values,
            horizon,
            args.seeds,
            args.draws,
            progress=not args.quiet,
            judges=judges,
        ),
        "judges": [judge.report() for judge in judges],
    }
    if dataset.contexts is None:
        report["embed_text"] = args.embed_text.config()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "frontier.json").write_text(json.dumps(report, indent=2) + "\n")
    from bench.frontier_plot import plot_frontier

    title = f"{Path(dataset.path).name}: T={horizon}, {args.seeds} seeds, {args.sweep} swept"
    plot_frontier(report, out / "frontier.png", title, log_cost=args.log_cost)
    print(f"wrote {out / 'frontier.json'} and {out / 'frontier.png'}")
    return 0


def add_subcommand(subparsers: Any) -> None:
    parser = documented_parser(
        subparsers,
        "frontier",
        "plot reward against cost per request: models, oracle, mixing, knn-ceiling, policies",
        __doc__,
    )
    add_replay_arguments(parser, seeds=10)
    parser.add_argument("--out", required=True, help="directory for frontier.json and frontier.png")
    parser.add_argument("--sweep", choices=SWEEPS, default="cost_target", help="the policies' knob")
    parser.add_argument(
        "--values", default=None, help="comma-separated swept values (USD per request, or lambda)"
    )
    parser.add_argument(
        "--fractions",
        default=",".join(str(f) for f in DEFAULT_FRACTIONS),
        help="cost_target without --values: these fractions of the best single model's mean cost",
    )
    parser.add_argument(
        "--lambda-points",
        type=int,
        default=DEFAULT_LAMBDA_POINTS,
        help=f"lambdas of the oracle and knn-ceiling curves (default {DEFAULT_LAMBDA_POINTS})",
    )
    parser.add_argument(
        "--judge",
        action="append",
        default=[],
        metavar="SPEC",
        help="play each policy once per judge (repeatable: a sweep of judge quality), its cascades graded by "
        "that simulated judge at its price; SPEC as bench run's --judge (bench/judge.py)",
    )
    parser.add_argument("--log-cost", action="store_true", help="logarithmic cost axis")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(handler=frontier_main)
