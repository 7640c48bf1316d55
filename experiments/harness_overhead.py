"""How much time the replay harness itself takes per round: ``python -m experiments.harness_overhead``.

Builds a synthetic table of the largest size the harness must handle (default 20 models, 3,000 prompts,
384-d contexts), then replays a null policy (always the first model: select and update do nothing) and
``linucb`` through the same simulator. The null policy's time per round is the harness's own overhead.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np

from bench.arm_schedule import build_schedule
from bench.dataset import Dataset
from bench.replay_env import WITH_REPLACEMENT, ReplayEnv
from bench.simulator import run_policy
from replay_dataset.files import ModelPrice
from routers.base import Context, Decision, Observation
from routers.policy_base import PolicyBase
from routers.registry import build_policy


class FirstArm(PolicyBase):
    """Calls its first arm; learns nothing (the timing baseline)."""

    name: ClassVar[str] = "first-arm"

    def select(self, context: Context) -> Decision:
        return Decision(arms=self._arms[:1])

    def update(self, observation: Observation) -> None:
        return None


def synthetic_env(models: int, prompts: int, dim: int, horizon: int, seed: int = 0) -> ReplayEnv:
    rng = np.random.default_rng(seed)
    names = [f"m{k}" for k in range(models)]
    x = rng.standard_normal((prompts, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    rewards = (rng.random((prompts, models)) < 0.7).astype(np.float64)
    tokens = np.full((prompts, models), 300.0)
    data = Dataset(
        path=Path("synthetic"),
        description="overhead probe",
        models=[ModelPrice(n, 1.0, 2.0) for n in names],
        reward_range=(0.0, 1.0),
        ids=[str(i) for i in range(prompts)],
        prompts=[str(i) for i in range(prompts)],
        groups=[None] * prompts,
        mean_reward=rewards,
        samples=rewards.reshape(-1),
        offsets=np.arange(prompts * models).reshape(prompts, models),
        counts=np.ones((prompts, models), dtype=np.int64),
        tokens_in=tokens,
        tokens_out=tokens,
        cost=tokens * 3e-6,
        contexts=x,
        responses=[{} for _ in range(prompts)],
    )
    # a timing probe at T > N (the documented 3,000 prompts, T = 5000): the old draws with repeats
    return ReplayEnv(data, x, build_schedule(names, [], horizon), 0.0, 0.5, draws=WITH_REPLACEMENT)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=3000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--horizon", type=int, default=5000)
    args = parser.parse_args(argv)
    env = synthetic_env(args.models, args.prompts, args.dim, args.horizon)
    start = time.perf_counter()
    draws = env.draw(0)
    draw_s = time.perf_counter() - start
    names = env.models
    print(
        f"{args.models} models, {args.prompts} prompts, d={args.dim}, T={args.horizon}; draws {draw_s:.3f} s"
    )
    for label, policy in (
        ("first-arm (harness only)", FirstArm(names)),
        ("linucb", build_policy("linucb", names)),
    ):
        start = time.perf_counter()
        trace = run_policy(policy, env, draws)
        wall = time.perf_counter() - start
        select_us = float(np.median(trace.select_ns)) / 1e3
        print(
            f"{label:26s} {wall / args.horizon * 1e6:8.1f} us/round  "
            f"select p50 {select_us:8.1f} us  {wall:.2f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
