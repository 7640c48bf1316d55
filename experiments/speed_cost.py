"""Per-decision time of the cost-aware policies at 8 and 25 models, measured side by side.

For each model count K, the policies are warmed up on the same synthetic stream (PromptWise: ``--warm``
cascades on d-dimensional unit contexts; C2MAB-V: ``--warm`` rounds with Bernoulli-graded rewards and
noisy costs, every model observed), then ``--rounds`` decisions are timed with the policies interleaved
round by round, so machine load hits them alike. A C2MAB-V decision includes the bounds, the relaxed
problem (AWC: vertex enumeration or continuous greedy; SUC/AIC: the HiGHS LP) and the rounding.

    OPENBLAS_NUM_THREADS=1 python -m experiments.speed_cost [--rounds 200] [--warm 300] [--dim 384]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

from routers.base import Context, Observation, Policy
from routers.combinatorial import C2MABV
from routers.logistic_ucb import PromptWise


def arms_and_prices(k: int, rng: np.random.Generator) -> tuple[list[str], dict[str, float], np.ndarray]:
    arms = [f"model-{i:02d}" for i in range(k)]
    prices = {a: float(p) for a, p in zip(arms, np.round(rng.uniform(0.2, 12.5, k), 2), strict=True)}
    return arms, prices, rng.uniform(0.05, 0.5, k)


def warm_promptwise(
    policy: PromptWise, arms: list[str], steps: int, dim: int, rng: np.random.Generator
) -> None:
    thetas = {a: 2.0 * rng.normal(size=dim) / np.sqrt(dim) * 3 for a in arms}
    for _ in range(steps):
        x = rng.normal(size=dim)
        x = (x / np.linalg.norm(x)).astype(np.float32)
        tried: list[str] = []
        while True:
            d = policy.select(Context(embedding=x, tried=tuple(tried)))
            if not d.arms:
                break
            r = float(rng.random() < 1 / (1 + np.exp(-float(x @ thetas[d.arms[0]]))))
            policy.update(Observation(embedding=x, arm=d.arms[0], reward=r, kind="cascade-step"))
            tried.append(d.arms[0])
            if r == 1.0:
                break


def warm_set(
    policy: C2MABV, arms: list[str], prices: dict[str, float], mu: np.ndarray, rounds: int, rng
) -> None:
    x = np.zeros(1, dtype=np.float32)
    for _ in range(rounds):
        for i, arm in enumerate(arms):  # every model observed each warm-up round
            reward = 0.5 if rng.random() < mu[i] else 0.0
            cost = prices[arm] * rng.uniform(0.5, 1.5)
            policy.update(Observation(embedding=x, arm=arm, reward=reward, cost=cost))
        policy.round += 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warm", type=int, default=300)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 25])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')} d={args.dim}")
    for k in args.sizes:
        rng = np.random.default_rng(args.seed + k)
        arms, prices, mu = arms_and_prices(k, rng)
        policies: dict[str, Policy] = {
            "promptwise": PromptWise(arms, seed=0, prices=prices),
            "promptwise-rbf": PromptWise(arms, seed=0, prices=prices, kernel="rbf"),
        }
        for name in ("promptwise", "promptwise-rbf"):
            pw = policies[name]
            assert isinstance(pw, PromptWise)
            warm_promptwise(pw, arms, args.warm, args.dim, np.random.default_rng(1))
        for reward in ("awc", "suc", "aic"):
            sp = C2MABV(arms, seed=0, reward=reward, prices=prices)
            warm_set(sp, arms, prices, mu, 20, np.random.default_rng(2))
            policies[f"c2mab-v {reward} ({'auto' if reward == 'awc' else 'lp'})"] = sp
        awc_enum = C2MABV(arms, seed=0, reward="awc", prices=prices, solver="enumerate")
        warm_set(awc_enum, arms, prices, mu, 20, np.random.default_rng(2))
        policies["c2mab-v awc (enumerate)"] = awc_enum
        times: dict[str, list[float]] = {name: [] for name in policies}
        solvers: dict[str, str] = {}
        ctx_rng = np.random.default_rng(3)
        for _ in range(args.rounds):
            x = ctx_rng.normal(size=args.dim)
            x = (x / np.linalg.norm(x)).astype(np.float32)
            for name, policy in policies.items():
                select: Callable[[Context], object] = policy.select
                t0 = time.perf_counter()
                decision = select(Context(embedding=x))
                times[name].append(time.perf_counter() - t0)
                solvers[name] = str(getattr(decision, "info", {}).get("solver", "-"))
        print(f"\nK = {k} models ({args.rounds} interleaved decisions)")
        print(f"{'policy':28s} {'median ms':>10s} {'p90 ms':>8s}  solver")
        for name, values in times.items():
            ms = 1e3 * np.asarray(values)
            print(f"{name:28s} {np.median(ms):10.3f} {np.percentile(ms, 90):8.3f}  {solvers[name]}")


if __name__ == "__main__":
    main()
