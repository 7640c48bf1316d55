"""Benchmark of the diversity-aware mixture policies: ``banditgate bench mixture ...`` (or
``python -m bench.mixture ...``).

Subcommands:

- ``make-gaussian --out PATH``: Gaussian generators with known optimal mixtures (``bench.mixture_datasets``).
- ``make-mmlu --out PATH [--pca-dim K]``: generators over real text (MMLU prompts, minilm embeddings).
- ``convert-texts --input rows.jsonl --out PATH``: any ``{"arm", "text"}`` JSONL to the dataset format.
- ``run --dataset PATH --objective rke|kid|vendi|fd ...``: every policy (and the two oracles) for
  ``--rounds`` rounds on ``--seeds`` seeds. Each round the policy picks an arm and receives the next
  output of that arm's pool (pools are shuffled per seed and read without replacement, then with
  replacement once exhausted). The score of *all outputs so far* is evaluated at checkpoints with an
  exact (uncapped) copy of the objective. Writes a JSON report and a PNG of score over rounds with 95%
  bands.

References: the offline optimum (``oracle_mixture``: weights minimising the objective on up to
``--oracle-samples`` outputs per arm) and the best single arm on the same samples; and two online
reference runs, ``mixture-oracle`` (draws arms i.i.d. from the offline weights) and ``one-arm-oracle``
(always the best arm), which carry the same finite-sample bias as the policies.
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
from scipy import stats

from bench.cli import documented_parser
from bench.mixture_datasets import (
    MixtureDataset,
    gaussian_dataset,
    load_mixture_dataset,
    mmlu_dataset,
    project_dataset,
    read_texts_jsonl,
    texts_dataset,
)
from routers.base import Context, Observation
from routers.diversity import MixtureObjective, build_objective
from routers.mixture import best_single_arm, optimal_mixture
from routers.registry import build_policy

POLICY_NAMES: tuple[str, ...] = ("mixture-ucb-cab", "mixture-ucb-ogd", "mixture-greedy", "vanilla-ucb")
ORACLE_NAMES: tuple[str, ...] = ("mixture-oracle", "one-arm-oracle")


def limit_blas_threads() -> Any:
    """Small eigendecompositions are ~70x slower with multi-threaded OpenBLAS on a shared machine."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        return None
    return threadpool_limits(limits=1)


class ArmSampler:
    """Per-seed shuffled pools, read in order; with replacement once an arm's pool is exhausted."""

    def __init__(self, pools: dict[str, np.ndarray], seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.pools = {a: x[self.rng.permutation(len(x))] for a, x in pools.items()}
        self.next = dict.fromkeys(pools, 0)

    def draw(self, arm: str) -> np.ndarray:
        pool, k = self.pools[arm], self.next[arm]
        self.next[arm] = k + 1
        return pool[k] if k < len(pool) else pool[int(self.rng.integers(len(pool)))]


def objective_options(args: argparse.Namespace, dataset: MixtureDataset) -> dict[str, Any]:
    """The objective's options, shared by the policies, the evaluator and the oracle."""
    bandwidth = args.bandwidth if args.bandwidth is not None else float(dataset.meta.get("bandwidth", 1.0))
    needs_reference = args.objective in ("kid", "fd") or args.quality is not None
    if needs_reference and dataset.reference is None:
        raise SystemExit(
            f"objective {args.objective!r} (or a quality term) needs a dataset with a reference set"
        )
    return {
        "objective": args.objective,
        "bandwidth": bandwidth,
        "reference": dataset.reference if needs_reference else None,
        "quality": args.quality,
        "quality_weight": args.quality_weight,
        "quality_k": args.quality_k,
        "feature": args.feature,
        "rff_dim": args.rff_dim,
        "fd_eps": args.fd_eps,
    }


def policy_hyperparameters(name: str, args: argparse.Namespace, options: dict[str, Any]) -> dict[str, Any]:
    hp: dict[str, Any] = {
        **options,
        "reference": None if options["reference"] is None else np.asarray(options["reference"]).tolist(),
        "init_pulls": args.init_pulls,
        "max_samples_per_arm": args.max_samples_per_arm,
    }
    if name == "mixture-greedy":
        hp.update({"solver": args.solver, "eg_steps": args.eg_steps, "eg_eta": args.eg_eta})
    else:
        hp.update(
            {
                "delta_l": args.delta_l,
                "beta": args.beta,
                "delta_kappa": args.delta_kappa,
                "delta_g": args.delta_g,
            }
        )
    return hp


def offline_references(
    dataset: MixtureDataset, options: dict[str, Any], per_arm: int, seed: int
) -> dict[str, Any]:
    """Oracle mixture and best single arm on up to ``per_arm`` outputs of each arm."""
    rng = np.random.default_rng(seed + 7919)
    objective = build_objective(**options, max_samples_per_arm=None)
    for arm, pool in dataset.pools.items():
        objective.observe_many(arm, pool[rng.permutation(len(pool))[:per_arm]])
    weights = optimal_mixture(objective)
    alpha = np.array([weights[a] for a in objective.arms])
    mix_loss = objective.loss(alpha)
    arm, arm_loss = best_single_arm(objective)
    return {
        "samples_per_arm": int(min(per_arm, min(len(p) for p in dataset.pools.values()))),
        "oracle_mixture": {"weights": weights, "loss": mix_loss, "score": objective.score(mix_loss)},
        "best_single_arm": {"arm": arm, "loss": arm_loss, "score": objective.score(arm_loss)},
        "single_arms": {
            a: objective.score(objective.loss(np.ones(1), objective.indices([a]))) for a in objective.arms
        },
        "score_name": objective.score_name,
        "higher_is_better": objective.higher_is_better,
        "known_optimum": dataset.meta.get("known_optimum", {}).get(options["objective"]),
    }


def run_one(
    name: str,
    dataset: MixtureDataset,
    args: argparse.Namespace,
    options: dict[str, Any],
    refs: dict[str, Any],
    seed: int,
    checkpoints: Sequence[int],
) -> dict[str, Any]:
    """One policy (or oracle) on one seed: scores at the checkpoints, final proportions, last weights."""
    arms = dataset.arms
    sampler = ArmSampler(dataset.pools, seed)
    evaluator: MixtureObjective = build_objective(**options, max_samples_per_arm=None)
    for arm in arms:
        evaluator.add_arm(arm)
    rng = np.random.default_rng(seed + 104729)
    oracle_alpha = np.array([refs["oracle_mixture"]["weights"][a] for a in arms])
    policy = None
    if name not in ORACLE_NAMES:
        policy = build_policy(
            name, arms, seed=seed, hyperparameters=policy_hyperparameters(name, args, options)
        )
    context = Context(embedding=np.zeros(1, dtype=np.float32))
    wanted = set(checkpoints)
    scores: list[float] = []
    last_weights: dict[str, float] = {}
    policy_seconds = 0.0
    for t in range(1, args.rounds + 1):
        if name == "mixture-oracle":
            arm = arms[int(rng.choice(len(arms), p=oracle_alpha))]
        elif name == "one-arm-oracle":
            arm = refs["best_single_arm"]["arm"]
        else:
            assert policy is not None
            start = time.perf_counter()
            decision = policy.select(context)
            arm = decision.arms[0]
            x = sampler.draw(arm)
            policy.update(Observation(embedding=context.embedding, arm=arm, output_embedding=x))
            policy_seconds += time.perf_counter() - start
            last_weights = decision.info.get("weights", last_weights)
            evaluator.observe(arm, x)
            if t in wanted:
                scores.append(evaluator.score(evaluator.pooled_loss()))
            continue
        evaluator.observe(arm, sampler.draw(arm))
        if t in wanted:
            scores.append(evaluator.score(evaluator.pooled_loss()))
    counts = evaluator.counts.astype(np.float64)
    return {
        "scores": scores,
        "proportions": dict(zip(evaluator.arms, (counts / counts.sum()).tolist(), strict=True)),
        "last_weights": last_weights,
        "seconds_per_round": policy_seconds / args.rounds,
    }


def interval(values: Sequence[float] | np.ndarray) -> dict[str, float]:
    """Mean and 95% t-interval over seeds (a zero-width interval for one seed)."""
    v = np.asarray(values, dtype=np.float64)
    mean = float(v.mean())
    if v.size < 2:
        return {"mean": mean, "low": mean, "high": mean}
    half = float(stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return {"mean": mean, "low": mean - half, "high": mean + half}


def checkpoint_rounds(rounds: int, count: int) -> list[int]:
    return sorted({round(x) for x in np.linspace(rounds / count, rounds, count)} | {rounds})


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Run every requested policy on every seed; the report as a JSON-able dict."""
    dataset = load_mixture_dataset(args.dataset)
    options = objective_options(args, dataset)
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    unknown = set(names) - set(POLICY_NAMES) - set(ORACLE_NAMES)
    if unknown:
        raise SystemExit(f"unknown policies {sorted(unknown)}; known: {[*POLICY_NAMES, *ORACLE_NAMES]}")
    seeds = list(range(args.seed, args.seed + args.seeds))
    checkpoints = checkpoint_rounds(args.rounds, args.checkpoints)
    refs = offline_references(dataset, options, args.oracle_samples, args.seed)
    from tqdm import tqdm

    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    with tqdm(total=len(names) * len(seeds), desc=f"mixture {args.objective}", file=sys.stderr) as bar:
        for seed in seeds:
            for name in names:
                runs[name].append(run_one(name, dataset, args, options, refs, seed, checkpoints))
                bar.update(1)
    policies: dict[str, Any] = {}
    for name, per_seed in runs.items():
        curves = np.array([r["scores"] for r in per_seed])
        policies[name] = {
            "final": interval(curves[:, -1]),
            "checkpoints": [{"round": c, **interval(curves[:, k])} for k, c in enumerate(checkpoints)],
            "weights": {a: float(np.mean([r["proportions"][a] for r in per_seed])) for a in dataset.arms},
            "last_weights": {
                a: float(np.mean([r["last_weights"].get(a, 0.0) for r in per_seed])) for a in dataset.arms
            },
            "seconds_per_round": float(np.median([r["seconds_per_round"] for r in per_seed])),
        }
    options_out = {k: v for k, v in options.items() if k != "reference"}
    return {
        "dataset": str(args.dataset),
        "dataset_name": dataset.meta.get("name"),
        "arms": dataset.arms,
        "dim": dataset.dim,
        "objective": args.objective,
        "score_name": refs["score_name"],
        "higher_is_better": refs["higher_is_better"],
        "rounds": args.rounds,
        "seeds": seeds,
        "checkpoints": checkpoints,
        "options": options_out,
        "hyperparameters": {
            "init_pulls": args.init_pulls,
            "max_samples_per_arm": args.max_samples_per_arm,
            "delta_l": args.delta_l,
            "beta": args.beta,
            "delta_kappa": args.delta_kappa,
            "delta_g": args.delta_g,
            "solver": args.solver,
            "eg_steps": args.eg_steps,
            "eg_eta": args.eg_eta,
        },
        "references": {
            k: refs[k]
            for k in ("oracle_mixture", "best_single_arm", "single_arms", "known_optimum", "samples_per_arm")
        },
        "policies": policies,
    }


# --- CLI ---------------------------------------------------------------------------------------------------


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dataset", required=True, help="mixture dataset .npz (docs/datasets.md, 'Mixture datasets')"
    )
    p.add_argument("--objective", choices=("rke", "kid", "vendi", "fd"), default="rke")
    p.add_argument("--policies", default=",".join([*POLICY_NAMES, *ORACLE_NAMES]), help="comma-separated")
    p.add_argument("--rounds", type=int, default=1000)
    p.add_argument("--seeds", type=int, default=5, help="number of seeds (seed, seed+1, ...)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoints", type=int, default=20)
    p.add_argument(
        "--bandwidth", type=float, default=None, help="Gaussian sigma (default: the dataset's meta)"
    )
    p.add_argument("--feature", choices=("cosine", "rff"), default="rff", help="Vendi feature map")
    p.add_argument("--rff-dim", type=int, default=64)
    p.add_argument("--quality", choices=("precision", "density"), default=None)
    p.add_argument("--quality-weight", type=float, default=0.0)
    p.add_argument("--quality-k", type=int, default=5)
    p.add_argument("--fd-eps", type=float, default=1e-6)
    p.add_argument("--init-pulls", type=int, default=5)
    p.add_argument("--max-samples-per-arm", type=int, default=4096)
    p.add_argument("--delta-l", type=float, default=0.6)
    p.add_argument("--beta", type=float, default=1.0)
    p.add_argument("--delta-kappa", type=float, default=0.0)
    p.add_argument("--delta-g", type=float, default=0.4)
    p.add_argument("--solver", choices=("exact", "eg"), default="exact", help="Mixture-Greedy's solver")
    p.add_argument("--eg-steps", type=int, default=10)
    p.add_argument("--eg-eta", type=float, default=0.1)
    p.add_argument("--oracle-samples", type=int, default=2000, help="outputs per arm for the offline oracle")
    p.add_argument("--out", default="mixture-report.json", help="JSON report path")
    p.add_argument("--plot", default=None, help="PNG path (default: the JSON path with .png)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Subcommands of the mixture benchmark (wired as ``banditgate bench mixture``)."""
    sub = parser.add_subparsers(dest="mixture_command", required=True)
    run_p = sub.add_parser("run", help="run the policies on a mixture dataset")
    _add_run_arguments(run_p)
    gauss = sub.add_parser("make-gaussian", help="write the Gaussian-generator dataset")
    gauss.add_argument("--out", required=True)
    gauss.add_argument("--pool-size", type=int, default=4000)
    gauss.add_argument("--reference-size", type=int, default=2000)
    gauss.add_argument("--dim", type=int, default=8)
    gauss.add_argument("--bandwidth", type=float, default=2.0)
    gauss.add_argument("--seed", type=int, default=0)
    mmlu = sub.add_parser("make-mmlu", help="write the MMLU-prompts dataset (minilm embeddings, cached)")
    mmlu.add_argument("--out", required=True)
    mmlu.add_argument(
        "--data-dir",
        default="../shared/data",
        help="data directory holding routellm/ (default ../shared/data)",
    )
    mmlu.add_argument("--per-arm", type=int, default=600)
    mmlu.add_argument("--reference-size", type=int, default=1000)
    mmlu.add_argument("--pca-dim", type=int, default=0, help="project to K dims by PCA (0: keep 384)")
    mmlu.add_argument("--embedder", default="minilm")
    mmlu.add_argument("--seed", type=int, default=0)
    replot = sub.add_parser("plot", help="redraw the PNG of a JSON report")
    replot.add_argument("--report", required=True)
    replot.add_argument("--out", required=True)
    texts = sub.add_parser("convert-texts", help="JSONL of {arm, text[, reference]} rows to a dataset")
    texts.add_argument("--input", required=True)
    texts.add_argument("--out", required=True)
    texts.add_argument("--embedder", default="minilm")
    texts.add_argument("--pca-dim", type=int, default=0)


def _write_dataset(dataset: MixtureDataset, out: str, pca_dim: int = 0) -> int:
    if pca_dim:
        dataset = project_dataset(dataset, pca_dim)
    path = dataset.save(out)
    sizes = {a: len(x) for a, x in dataset.pools.items()}
    ref = 0 if dataset.reference is None else len(dataset.reference)
    print(f"wrote {path}: arms {sizes}, reference {ref}, dim {dataset.dim}")
    return 0


def run(args: argparse.Namespace) -> int:
    command = args.mixture_command
    if command == "make-gaussian":
        return _write_dataset(
            gaussian_dataset(args.pool_size, args.reference_size, args.dim, args.seed, args.bandwidth),
            args.out,
        )
    if command == "make-mmlu":
        dataset = mmlu_dataset(
            args.data_dir, None, args.per_arm, args.reference_size, args.seed, args.embedder
        )
        return _write_dataset(dataset, args.out, args.pca_dim)
    if command == "plot":
        from bench.mixture_plot import plot_report

        print(plot_report(json.loads(Path(args.report).read_text()), args.out))
        return 0
    if command == "convert-texts":
        arms, reference = read_texts_jsonl(args.input)
        dataset = texts_dataset(arms, reference, args.embedder, {"name": Path(args.input).stem})
        return _write_dataset(dataset, args.out, args.pca_dim)
    limits = limit_blas_threads()
    try:
        report = benchmark(args)
    finally:
        if limits is not None:
            limits.restore_original_limits()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    from bench.mixture_plot import plot_report

    plot_path = Path(args.plot) if args.plot else out.with_suffix(".png")
    plot_report(report, plot_path)
    _print_summary(report)
    print(f"wrote {out} and {plot_path}")
    return 0


def _print_summary(report: dict[str, Any]) -> None:
    refs = report["references"]
    name = report["score_name"]
    print(
        f"{report['dataset_name']} / {report['objective']} ({name}), "
        f"T={report['rounds']}, seeds={len(report['seeds'])}"
    )
    print(
        f"  offline oracle mixture {refs['oracle_mixture']['score']:.4f}  best single arm "
        f"{refs['best_single_arm']['arm']} {refs['best_single_arm']['score']:.4f}"
    )
    for policy, row in report["policies"].items():
        f = row["final"]
        print(
            f"  {policy:16s} {f['mean']:.4f} [{f['low']:.4f}, {f['high']:.4f}]  "
            f"{1e3 * row['seconds_per_round']:.2f} ms/round"
        )


def add_subcommand(subparsers: Any) -> None:
    """``banditgate bench mixture ...`` (registered in bench/cli.py)."""
    parser = documented_parser(
        subparsers, "mixture", "diversity-aware mixture policies on a pool-of-outputs dataset", __doc__
    )
    add_arguments(parser)
    parser.set_defaults(handler=run)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mixture", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
