"""``banditgate bench e2e``: the command line of ``bench.e2e`` (the comparison table, the plot, the JSON
report, ``--overhead``)."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.dataset import Dataset, load_dataset
from bench.e2e import Comparison, Gateway, compare, measure_overhead, spawn_gateway
from bench.policy_spec import PolicySpec, check_specs, parse_spec
from bench.replay_env import resolve_horizon


def format_comparison(results: Sequence[Comparison]) -> str:
    lines = [
        "policy            what    offline mean ± 95%        service mean    per seed (offline / service)",
    ]
    for result in results:
        summary = result.summary()
        for what, fmt in (("reward", "{:.4f}"), ("cost", "{:.6f}")):
            s = summary[what]
            pairs = "  ".join(
                f"{fmt.format(o)}/{fmt.format(v)}"
                for o, v in zip(s["offline_per_seed"], s["service_per_seed"], strict=True)
            )
            verdict = "inside" if s["within"] else "OUTSIDE"
            lines.append(
                f"{result.policy:<17} {what:<7} {fmt.format(s['offline_mean'])} ± {fmt.format(s['offline_ci95'])}"
                f"  {fmt.format(s['service_mean'])} {verdict:<8} {pairs}"
            )
        lines.append(
            f"{'':<17} service {summary['service_ms_per_round']:.1f} ms per round, repeat share "
            f"{summary['repeat_share']:.3f}, "
            f"{summary['service_calls_per_round']:.2f} calls per round, {summary['rounds_differing']} of "
            f"{summary['rounds']} rounds with another reward than offline, declined "
            f"{summary['declined']}, answered by {summary['models']}"
        )
        if summary["service_judge_cost_per_round"]:
            lines.append(
                f"{'':<17} judge (a backend, not in the cost above) "
                f"{summary['service_judge_cost_per_round']:.6f} USD per round"
            )
    return "\n".join(lines)


def write_plot(results: Sequence[Comparison], path: Path) -> None:
    """Per policy, reward and cost per seed: offline (circles) against the service (crosses), with the
    offline mean and its 95% band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(10, 3.2 * len(results)), squeeze=False)
    for row, result in zip(axes, results, strict=True):
        summary = result.summary()
        for ax, what in zip(row, ("reward", "cost"), strict=True):
            s = summary[what]
            x = np.arange(len(result.seeds))
            ax.axhspan(
                s["offline_mean"] - s["offline_ci95"], s["offline_mean"] + s["offline_ci95"], alpha=0.2
            )
            ax.axhline(s["offline_mean"], lw=1, label="offline mean ± 95%")
            ax.axhline(s["service_mean"], lw=1, ls="--", color="C3", label="service mean")
            ax.plot(x, s["offline_per_seed"], "o", label="offline, per seed")
            ax.plot(x, s["service_per_seed"], "x", color="C3", label="service, per seed")
            ax.set_xticks(x, [str(seed) for seed in result.seeds])
            ax.set_xlabel("seed")
            ax.set_title(f"{result.policy}: mean {what} per round" + (" (USD)" if what == "cost" else ""))
        row[0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


async def _drive(
    args: argparse.Namespace,
    dataset: Dataset,
    specs: list[PolicySpec],
    embeddings: np.ndarray,
    url: str,
    admin: str,
    backends_key: str | None,
) -> list[Comparison] | dict[str, float]:
    backends_url = args.backends_url or f"{url}/replay"
    gateway = Gateway(url, admin, backends_url, args.embed_text.config(), backends_key)
    try:
        if args.overhead:
            return await measure_overhead(gateway, dataset, specs[0], args.overhead, args.lam)
        return await compare(
            gateway,
            dataset,
            embeddings,
            specs,
            args.horizon,
            list(range(args.seeds)),
            args.lam,
            args.success_threshold,
            progress=not args.quiet,
            seeded=not args.unseeded,
            draws=args.draws,
            judge_backend=args.judge_backend,
        )
    finally:
        await gateway.close()


def e2e_main(args: argparse.Namespace) -> int:
    from bench.run_command import dataset_embeddings

    dataset = load_dataset(args.dataset)
    specs = [parse_spec(text) for text in args.policy]
    check_specs(specs, dataset.model_names, args.lam)  # a bad spec fails before minutes of embedding
    if not args.overhead:
        args.horizon = resolve_horizon(args.horizon, dataset.n_prompts, args.draws)
    embeddings = (
        np.empty((0, 0))
        if args.overhead
        else dataset_embeddings(
            dataset, args.embedder, args.cache_dir, progress=not args.quiet, rule=args.embed_text
        )
    )
    if args.gateway:
        if not args.admin_key:
            raise ValueError("--gateway needs --admin-key")
        drive = _drive(args, dataset, specs, embeddings, args.gateway, args.admin_key, args.backends_key)
        outcome = asyncio.run(drive)
    else:
        spawned = spawn_gateway(Path(args.dataset), args.embedder, len(dataset.model_names))
        with spawned as (url, admin, replay_key):
            outcome = asyncio.run(_drive(args, dataset, specs, embeddings, url, admin, replay_key))
    if isinstance(outcome, dict):
        print(
            f"{outcome['pairs']} pairs: through the gateway p50 {outcome['gateway_p50_ms']:.1f} ms, straight "
            f"to the backend p50 {outcome['backend_p50_ms']:.1f} ms, overhead {outcome['overhead_ms']:.1f} ms "
            f"per request, ratio {outcome['ratio']:.1f}x"
        )
        report: dict[str, Any] = {"dataset": str(dataset.path), "policy": args.policy[0], **outcome}
    else:
        print(format_comparison(outcome))
        report = {
            "dataset": str(dataset.path),
            "horizon": args.horizon,
            "seeds": args.seeds,
            "draws": args.draws,
            "repeat_share": float(np.mean([r.repeat_share for r in outcome])) if outcome else 0.0,
            "lambda": args.lam,
            "embedder": args.embedder,
            "seeded": not args.unseeded,
            "policies": [r.summary() for r in outcome],
        }
        if args.plot:
            write_plot(outcome, Path(args.plot))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if isinstance(outcome, dict):
        return 0
    inside = all(r.summary()[w]["within"] for r in outcome for w in ("reward", "cost"))
    return 0 if inside else 1


def add_subcommand(subparsers: Any) -> None:
    from bench.run_command import add_replay_arguments

    parser = subparsers.add_parser(
        "e2e",
        help="replay policies offline and through a gateway over HTTP on the same draws; compare",
        description=(
            "For each policy and seeds 0..S-1: the offline replay (bench run; by default T = N prompts without "
            "repeats) and the same prompts and reward draws through a gateway (route, forward to replay backends, feedback or a judge for cascades). "
            "Prints each policy's mean reward and cost per round both ways and whether the service lies in "
            "the offline 95% interval (exit 1 if not). Without --gateway it starts one (SQLite, the "
            "dataset mounted as replay backends)."
        ),
    )
    add_replay_arguments(parser, seeds=5)  # the embedder: the spawned gateway's too
    parser.add_argument("--gateway", help="a running gateway's URL (default: start one)")
    parser.add_argument("--admin-key", help="its admin key")
    parser.add_argument(
        "--backends-url", help="where the dataset's models are served (default <gateway>/replay)"
    )
    parser.add_argument(
        "--backends-key",
        help="the Bearer key the backends at --backends-url demand (the gateway's BANDITGATE_REPLAY_API_KEY "
        "for its /replay mount); registered with each backend, so the gateway needs BANDITGATE_SECRET_KEY",
    )
    parser.add_argument("--json", help="write the comparison here")
    parser.add_argument("--plot", help="write a PNG of per-seed reward and cost, offline vs service")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--overhead",
        type=int,
        default=0,
        metavar="N",
        help="instead: N paired requests through a router of the first policy and straight to the replay "
        "backend it picked; medians and their ratio",
    )
    parser.add_argument(
        "--unseeded",
        action="store_true",
        help="requests without 'seed': the gateway draws each decision's randomness from its id, the "
        "simulator from the policy's own generator (the same policy, not the same coin flips)",
    )
    parser.add_argument(
        "--judge-backend",
        action="store_true",
        help="cascades judged inside the gateway by the replay backends' replay-judge (a backend judge of "
        "logged grades) instead of this command's url judge; the judge's cost is reported apart "
        "(service_judge_cost_per_round), not in the compared cost",
    )
    parser.set_defaults(handler=e2e_main)
