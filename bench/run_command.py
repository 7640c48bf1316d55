"""``bench run``: replay policies on a dataset, print a table, write the JSON report and plots.

``replay(...)`` is the programmatic entry (tests and other subcommands use it); ``add_subcommand``
registers the CLI. Seeds are 0..S-1; see ``bench.replay_env`` for the draws (by default each seed plays
T <= N prompts without repeats, T = N unless ``--horizon``) and ``bench.metrics`` for the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from bench.arm_schedule import ArmEvent, build_schedule, parse_arm_event
from bench.cascade_reference import cascade_plans, oracle_cascade_trace
from bench.dataset import Dataset, load_dataset
from bench.embedding_cache import embed_prompts
from bench.judge import Judge, judge_note, parse_judge
from bench.knn_ceiling import knn_ceiling
from bench.metrics import summarise_policy, summarise_reference
from bench.policy_spec import PolicySpec, build_from_spec, check_specs, parse_spec
from bench.replay_env import (
    DRAWS,
    WITHOUT_REPLACEMENT,
    Draws,
    ReplayEnv,
    normalisation_scale,
    resolve_horizon,
)
from bench.report_table import format_table
from bench.set_oracle import SetProblem, oracle_set_trace, set_problem
from bench.simulator import run_policy
from bench.trace import Trace, reference_traces
from bench.warm_start import WarmStart, fold_warm_start, observations
from embeddings.prompt_text import DEFAULT_STRATEGY, STRATEGIES, EmbedText
from routers.base import Policy
from routers.cascade_baselines import GreedyTillSucceed, RandomTillSucceed
from routers.combinatorial import SetBandit
from routers.logistic_ucb import PromptWise
from routers.paced_cascade import PacedCascade
from routers.retry import RetryCascade

REFERENCES = ("best_single", "oracle", "random", "knn_ceiling")
# the policies that call several models per round in a cascade (lowest-cost / highest-cost call one)
CASCADE_POLICIES = (PromptWise, RandomTillSucceed, GreedyTillSucceed, RetryCascade, PacedCascade)


@dataclass
class ReplayResult:
    report: dict[str, Any]
    runs: dict[str, list[Trace]] = field(default_factory=dict)
    references: dict[str, list[Trace]] = field(default_factory=dict)


def dataset_embeddings(
    dataset: Dataset,
    embedder: str,
    cache_dir: Path | None = None,
    progress: bool = True,
    rule: EmbedText | None = None,
) -> np.ndarray:
    """The rows' ``context`` vectors when present, else the cached embeddings of the prompts under the
    embed-text ``rule`` (``--embed-text``; the gateway's default when None)."""
    if dataset.contexts is not None:
        return dataset.contexts
    return embed_prompts(dataset.prompts, embedder, cache_dir=cache_dir, progress=progress, rule=rule)


def replay(
    dataset: Dataset,
    embeddings: np.ndarray,
    specs: Sequence[PolicySpec],
    horizon: int | None,
    seeds: int,
    cost_weight: float = 0.0,
    success_threshold: float | None = None,
    events: Sequence[ArmEvent] = (),
    max_calls: int | None = None,
    progress: bool = True,
    embedder: str = "",
    output_embeddings: np.ndarray | None = None,
    budget: float | None = None,
    draws: Draws = WITHOUT_REPLACEMENT,
    warm_start: WarmStart | None = None,
    judge: Judge | None = None,
) -> ReplayResult:
    """Run every spec on seeds 0..seeds-1 and the references on the same draws; build the report.

    ``output_embeddings`` (P, K, d), when given, is sent with each call's Observation (output-aware
    policies such as mixtures). ``budget`` (``--budget``) is the run's rho in normalised cost units (the
    most expensive model's mean cost = 1, C2MAB-V spec 5.4 H1); see ``run_budget`` for the precedence.
    ``horizon`` None plays every prompt once per seed; ``draws`` see ``bench.replay_env``. ``warm_start``
    (``--warm-start``) folds each seed's warm prompts into every policy before its online run, which plays
    (and is judged on) the other prompts only; see ``bench.warm_start``. ``judge`` (``--judge``) grades
    the rounds that stop on success in place of the labels, at its price (``bench.judge``); the report
    records it under ``judge`` and per policy."""
    if seeds < 1:
        raise ValueError("seeds must be >= 1")
    if warm_start is not None:
        warm_start.check(dataset.model_names)
    horizon = resolve_horizon(horizon, online_pool(dataset, warm_start), draws)
    lo, hi = dataset.reward_range
    threshold = (lo + hi) / 2 if success_threshold is None else float(success_threshold)
    schedule = build_schedule(dataset.model_names, events, horizon)
    probes = [build_from_spec(spec, schedule.initial, 0, cost_weight, horizon) for spec in specs]
    scale = normalisation_scale(dataset.cost)
    problems = [set_problem(p, len(schedule.initial), scale) for p in probes if isinstance(p, SetBandit)]
    usd, source = run_budget(budget, scale, dataset.budget, problems)
    env = ReplayEnv(
        dataset, embeddings, schedule, cost_weight, threshold, output_embeddings, usd, draws, warm_start
    )
    ceiling = knn_ceiling(env)
    set_refs = set_reference_keys(problems)
    extra_refs = list(set_refs)
    plans: list[list[list[int]]] = []
    if max_calls is not None or any(is_cascade(p) for p in probes):
        extra_refs.append("oracle_cascade")
        plans = cascade_plans(env, max_calls)
    keys = REFERENCES + tuple(extra_refs)
    runs: dict[str, list[Trace]] = {spec.text: [] for spec in specs}
    refs: dict[str, list[Trace]] = {key: [] for key in keys}
    ref_names: dict[str, set[str]] = {key: set() for key in keys}
    wall = dict.fromkeys(runs, 0.0)
    repeats: list[float] = []
    bar = tqdm(total=len(specs) * seeds * horizon, unit="round", disable=not progress, file=sys.stderr)
    for seed in range(seeds):
        seed_draws = env.draw(seed)
        repeats.append(seed_draws.repeat_share)
        for key, (name, trace) in reference_traces(env, seed_draws).items():
            refs[key].append(trace)
            ref_names[key].add(name)
        refs["knn_ceiling"].append(ceiling.trace(env, seed_draws))
        ref_names["knn_ceiling"].add(ceiling.name)
        for key, problem in set_refs.items():
            name, trace = oracle_set_trace(env, seed_draws, problem)
            refs[key].append(trace)
            ref_names[key].add(name)
        if "oracle_cascade" in refs:
            refs["oracle_cascade"].append(oracle_cascade_trace(env, seed_draws, plans))
            ref_names["oracle_cascade"].add("oracle cascade")
        for spec in specs:
            bar.set_description(f"{spec.text} seed {seed}")
            policy = build_from_spec(spec, schedule.initial, seed, cost_weight, horizon)
            if warm_start is not None and seed_draws.warm is not None:
                logs = observations(dataset, embeddings, warm_start, seed_draws.warm, schedule.initial)
                fold_warm_start(policy, logs)
            start = time.perf_counter()
            trace = run_policy(policy, env, seed_draws, max_calls=max_calls, progress=bar.update, judge=judge)
            runs[spec.text].append(trace)
            wall[spec.text] += time.perf_counter() - start
    bar.close()
    oracles = refs["oracle"]
    report: dict[str, Any] = {
        "dataset": str(dataset.path),
        "description": dataset.description,
        "horizon": horizon,
        "seeds": seeds,
        "draws": env.draws,
        "repeat_share": float(np.mean(repeats)),
        "lambda": float(cost_weight),
        "success_threshold": threshold,
        "embedder": "context" if dataset.contexts is not None else embedder,
        "models": dataset.model_names,
        "n_prompts": dataset.n_prompts,
        "dropped_rows": dataset.dropped,
        "token_estimates": dataset.token_estimates,
        "arm_events": [{"model": e.model, "round": e.round, "action": e.action} for e in events],
        "cost_scale_usd": scale,
        "run_budget": {
            "usd": usd,
            "rho": None if usd is None else usd / scale,
            "source": source,
        },
        "max_calls": max_calls,
        "reference": {
            key: summarise_reference("+".join(sorted(ref_names[key])), refs[key], oracles, cost_weight)
            for key in keys
        },
        "policies": [
            {
                **summarise_policy(spec.text, runs[spec.text], oracles, cost_weight),
                "wall_s": wall[spec.text],
                "success_threshold": _last_threshold(runs[spec.text], threshold),
            }
            for spec in specs
        ],
    }
    report["reference"]["knn_ceiling"]["k"] = ceiling.k
    report["warm_start"] = None if warm_start is None else warm_start.report(dataset.n_prompts)
    report["judge"] = None if judge is None else judge.report()
    if dataset.notes:
        report["notes"] = dataset.notes
    return ReplayResult(report=report, runs=runs, references=refs)


def online_pool(dataset: Dataset, warm_start: WarmStart | None) -> int:
    """How many prompts a seed may play online: N, or N minus the warm prompts."""
    return dataset.n_prompts if warm_start is None else warm_start.online_count(dataset.n_prompts)


def run_budget(
    rho: float | None, scale: float, dataset_budget: float | None, problems: list[SetProblem]
) -> tuple[float | None, str]:
    """(per-round budget in USD for the rows that declare none, where it came from): ``--budget`` rho
    times the dataset's scale, else the dataset's ``budget`` (USD), else the first set policy's rho in USD
    (so that the references and the non-set baselines are judged against the same budget), else none."""
    if rho is not None:
        if not rho >= 0:
            raise ValueError(f"--budget must be >= 0, got {rho!r}")
        return float(rho) * scale, "--budget"
    if dataset_budget is not None:
        return float(dataset_budget), "dataset"
    if problems:
        return problems[0].budget_usd, "set policy"
    return None, "none"


def set_reference_keys(problems: Sequence[SetProblem]) -> dict[str, SetProblem]:
    """One set-oracle row per distinct set problem of the run: ``oracle_set`` for the first set policy's,
    ``oracle_set_<reward model>`` (then ``_2``, ``_3``, ...) for each different one after it."""
    keys: dict[str, SetProblem] = {}
    for problem in problems:
        if problem in keys.values():
            continue
        key = "oracle_set" if not keys else f"oracle_set_{problem.reward_model}"
        base, n = key, 2
        while key in keys:
            key, n = f"{base}_{n}", n + 1
        keys[key] = problem
    return keys


def is_cascade(policy: Policy) -> bool:
    """Whether a policy plays a cascade (then the report adds the cascade oracle)."""
    return isinstance(policy, CASCADE_POLICIES)


def _last_threshold(traces: Sequence[Trace], default: float) -> float:
    values = [t.success_threshold for t in traces if t.success_threshold is not None]
    return float(values[-1]) if values else default


def _events(args: argparse.Namespace) -> list[ArmEvent]:
    return [parse_arm_event(text, "add") for text in args.add_model] + [
        parse_arm_event(text, "remove") for text in args.remove_model
    ]


def run_main(args: argparse.Namespace) -> int:
    dataset = load_dataset(args.dataset)
    if dataset.dropped:
        print(f"dropped {dataset.dropped} rows without a reward for every model", file=sys.stderr)
    specs = [parse_spec(text) for text in args.policy]
    judge = None if args.judge is None else Judge(parse_judge(args.judge), dataset)
    warm_start = warm_start_of(args)
    if warm_start is not None:
        warm_start.check(dataset.model_names)
    # check T, and build every policy once, before the (possibly minutes long) embedding: fail at once
    horizon = resolve_horizon(args.horizon, online_pool(dataset, warm_start), args.draws)
    schedule = build_schedule(dataset.model_names, _events(args), horizon)
    check_specs(specs, schedule.initial, args.lam, models=dataset.model_names)
    embeddings = dataset_embeddings(
        dataset, args.embedder, args.cache_dir, progress=not args.quiet, rule=args.embed_text
    )
    result = replay(
        dataset,
        embeddings,
        specs,
        horizon=horizon,
        seeds=args.seeds,
        cost_weight=args.lam,
        success_threshold=args.success_threshold,
        events=_events(args),
        max_calls=args.max_calls,
        progress=not args.quiet,
        embedder=args.embedder,
        budget=args.budget,
        draws=args.draws,
        warm_start=warm_start,
        judge=judge,
    )
    report = result.report
    if dataset.contexts is None:
        report["embed_text"] = args.embed_text.config()
    print(format_table(report))
    for line in floor_conflicts(report):
        print(line)
    if warm_start is not None:
        settings = warm_start.report(dataset.n_prompts)
        print(
            f"warm start: {settings['warm_prompts']} prompts folded as offline logs of "
            f"{warm_start.logged_model or 'every model'} per seed; online rounds drawn from the other "
            f"{settings['online_pool']}"
        )
    if report["judge"] is not None:
        print(f"note: {judge_note(report['judge'])}")
        for row in report["policies"]:
            judged = row["judge"]
            if judged["calls_per_round"] > 0:
                print(
                    f"judge on {row['spec']}: {judged['calls_per_round']:.2f} judged calls per round, "
                    f"{judged['false_pass_share']:.3f} false passes and {judged['false_fail_share']:.3f} "
                    f"false fails of them, ${judged['cost_per_round']:.6f} per round (in the cost column)"
                )
    for note, count in sorted(dataset.token_estimates.items()):
        print(f"note: {count} (prompt, model) token counts estimated: {note}")
    if dataset.notes:
        print(f"note: {dataset.notes}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if args.plots:
        from bench.plots import write_plots

        title = f"{Path(dataset.path).name}: T={horizon}, {args.seeds} seeds, lambda={args.lam}"
        write_plots(
            Path(args.plots), result.runs, result.references, result.references["oracle"], args.lam, title
        )
    return 0


def floor_conflicts(report: dict[str, Any]) -> list[str]:
    """One line per policy row whose floor held its spend above its cost target on some rounds
    (``floor_over_target``, routers/conservative.py): the share of such rounds and the spend it held."""
    lines = []
    for row in report["policies"]:
        block = row.get("incumbent") or {}
        share, target = block.get("floor_over_target_share", 0.0), block.get("cost_target")
        if share > 0 and target:
            lines.append(
                f"conflict: {row['spec']}: the floor held the spend above the cost target on {share:.1%} of "
                f"rounds; spend {row['mean_cost']:.6g} USD/request = {row['mean_cost'] / target:.0%} of the "
                f"target {target:.6g} (the floor wins)"
            )
    return lines


def warm_start_of(args: argparse.Namespace) -> WarmStart | None:
    """``--warm-start F`` / ``--warm-start-logged-model M`` as a WarmStart (None: a cold start)."""
    if args.warm_start is None:
        if args.warm_start_logged_model is not None:
            raise ValueError("--warm-start-logged-model needs --warm-start F")
        return None
    return WarmStart(args.warm_start, args.warm_start_logged_model)


def add_replay_arguments(parser: argparse.ArgumentParser, seeds: int) -> None:
    """What every replay command takes: the dataset, the policies, T, how prompts are drawn, the seeds,
    lambda, the success threshold and the embedder."""
    parser.add_argument("--dataset", required=True, help="directory with models.json and rows.jsonl")
    parser.add_argument(
        "--policy", action="append", required=True, metavar="SPEC", help="name[:key=value,...]; repeatable"
    )
    parser.add_argument(
        "--horizon",
        type=int,
        default=None,
        help="rounds per seed (T; default the dataset's prompt count N; without replacement T <= N)",
    )
    parser.add_argument(
        "--draws",
        choices=DRAWS,
        default=WITHOUT_REPLACEMENT,
        help="how each seed picks its prompts: a random order without repeats (default), or uniform draws "
        "with replacement (the papers' protocols, e.g. BALROG's; a repeat shows a policy its own answer)",
    )
    parser.add_argument("--seeds", type=int, default=seeds, help=f"seeds 0..S-1 (default {seeds})")
    parser.add_argument(
        "--lambda",
        dest="lam",
        type=float,
        default=0.0,
        help="reward units per USD (utility = reward - lambda * cost); cost-aware policies: cost_weight",
    )
    add_embedding_arguments(parser)
    parser.add_argument(
        "--success-threshold",
        type=float,
        default=None,
        help="a call succeeds at this reward (default midpoint); a Decision's info['success_threshold'] wins",
    )


def add_embedding_arguments(parser: argparse.ArgumentParser) -> None:
    """How the prompts are embedded: the embedder, its cache folder and the embed-text rule."""
    parser.add_argument("--embedder", default="minilm", help="embedder name (default minilm)")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="embedding cache folder (default $BANDITGATE_CACHE_DIR/embeddings, else ~/.cache/banditgate/embeddings)",
    )
    parser.add_argument(
        "--embed-text",
        type=EmbedText.parse,
        default=EmbedText(),
        metavar="STRATEGY[:MAX_TOKENS]",
        help=f"what of each prompt is embedded: {', '.join(STRATEGIES)} (default {DEFAULT_STRATEGY}, the "
        "embedder's whole budget; the gateway's router default); see embeddings/prompt_text.py",
    )


def add_subcommand(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="replay policies on a dataset and report reward, cost, regret",
        description=(
            "Replay each policy on seeds 0..S-1 (T prompts in a random order without repeats unless --draws "
            "with-replacement, the same draws for every policy) against the best single model, the "
            "per-prompt oracle, uniform random and the full-information kNN ceiling. "
            "Definitions and the JSON contract: docs/bench-report.md."
        ),
    )
    add_replay_arguments(parser, seeds=10)
    parser.add_argument("--json", help="write the JSON report here")
    parser.add_argument("--plots", help="write regret.png, opr.png, cost.png into this directory")
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="RHO",
        help="per-round budget rho for rows that declare none, as a fraction of the most expensive model's "
        "mean cost (default: the dataset's budget, else the first set policy's rho)",
    )
    parser.add_argument("--max-calls", type=int, default=None, help="bound on calls of an adaptive cascade")
    parser.add_argument(
        "--judge",
        default=None,
        metavar="SPEC",
        help="grade cascade (and set/awc) rounds with a simulated judge instead of the labels, at its price: "
        "verdict[:tpr=T,tnr=N] or score[:sigma=S], both [,model=NAME] (default the cheapest judge); see "
        "bench/judge.py",
    )
    parser.add_argument("--add-model", action="append", default=[], metavar="NAME@ROUND")
    parser.add_argument("--remove-model", action="append", default=[], metavar="NAME@ROUND")
    parser.add_argument(
        "--warm-start",
        type=float,
        default=None,
        metavar="F",
        help="per seed, fold a random fraction F of the prompts as offline logs before the online run, "
        "which plays only the other prompts (see bench/warm_start.py)",
    )
    parser.add_argument(
        "--warm-start-logged-model",
        default=None,
        metavar="M",
        help="the logs hold only model M's outcomes (default: every model's)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(handler=run_main)
