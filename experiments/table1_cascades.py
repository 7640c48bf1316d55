"""Cascade policies on PromptWise's Table 1 environment, simulated from the true pass rates.

Each prompt draws a difficulty level uniformly (context = its one-hot vector); a call to model a succeeds
with probability PASS_RATE[a][level] (Table 1), costs PRICES[a] (the set price, per call) and the utility
of a prompt is 1[some call succeeded] - lambda * sum(costs) (PromptWise Eq. 1), lambda = 0.05, tau_max = 5.
The oracle is the budget-limited cascade DP (``routers.cascade_oracle``) on the true rates, averaged over
the three levels. (The replay harness runs the same policies on ``bench.synth_promptwise`` data sets.)

    python -m experiments.table1_cascades [--steps 300] [--seeds 5] [--allow-repeat]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.synth_promptwise import ARMS, COST_WEIGHT, LEVELS, MAX_CALLS, PASS_RATE, PRICES, run_cascades
from routers.cascade_oracle import best_cascade
from routers.registry import build_policy

POLICIES = (
    "promptwise",
    "promptwise:update=exact",
    "promptwise:per_step_update=true",
    "promptwise-rbf",
    "random-till-succeed",
    "greedy-till-succeed",
    "lowest-cost",
    "highest-cost",
)


def oracle_utility(allow_repeat: bool) -> float:
    values = [
        best_cascade(
            [PASS_RATE[a][lv] for a in ARMS], [PRICES[a] for a in ARMS], COST_WEIGHT, MAX_CALLS, allow_repeat
        )[0]
        for lv in LEVELS
    ]
    return float(np.mean(values))


def parse_spec(spec: str) -> tuple[str, dict[str, object]]:
    """``name:key=value,...`` with JSON-ish values (true/false, numbers, strings)."""
    name, _, rest = spec.partition(":")
    hyper: dict[str, object] = {}
    for item in filter(None, rest.split(",")):
        key, _, raw = item.partition("=")
        lowered = raw.lower()
        value: object = raw
        if lowered in ("true", "false"):
            value = lowered == "true"
        else:
            try:
                value = float(raw) if "." in raw else int(raw)
            except ValueError:
                value = raw
        hyper[key] = value
    return name, hyper


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--allow-repeat", action="store_true")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    args = parser.parse_args(argv)
    print(
        f"oracle utility (tau_max {MAX_CALLS}, repeats {args.allow_repeat}):",
        f"{oracle_utility(args.allow_repeat):.3f}",
    )
    print(f"{'policy':34s} {'utility':>8s} {'+-sd':>6s} {'cost':>6s} {'success':>8s} {'s/run':>6s}")
    for spec in args.policies:
        name, hyper = parse_spec(spec)
        hyper.setdefault("cost_weight", COST_WEIGHT)
        hyper.setdefault("max_calls", MAX_CALLS)
        hyper["allow_repeat"] = args.allow_repeat
        runs = []
        t0 = time.perf_counter()
        for seed in range(args.seeds):
            policy = build_policy(name, ARMS, seed=seed, hyperparameters=hyper)
            runs.append(run_cascades(policy, args.steps, 100 + seed))
        elapsed = (time.perf_counter() - t0) / args.seeds
        u = np.array([r["utility"] for r in runs])
        c = np.mean([r["cost"] for r in runs])
        s = np.mean([r["success"] for r in runs])
        print(f"{spec:34s} {u.mean():8.3f} {u.std(ddof=1):6.3f} {c:6.2f} {s:8.3f} {elapsed:6.1f}")


if __name__ == "__main__":
    main()
