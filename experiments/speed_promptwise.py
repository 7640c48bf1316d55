"""PromptWise's online logistic update against the exact refit: decision agreement and time per step.

A synthetic stream: contexts are unit vectors near 16 cluster centres in R^d; arm a succeeds with
probability sigma(x^T theta*_a), theta*_a a random combination of the centres (logits spread over about
+-3); five arms priced like PromptWise's Table 2 (0.75, 1.37, 1.60, 5.50, 12.50 per call), lambda 0.05,
tau_max 5. The online policy (Laplace step + geometric exact refits) runs the cascades. At each
checkpoint an exact twin (every arm refit to convergence on its full history) and the online policy
decide the first call for the same probe prompts; the script reports how often they agree, the largest
gap in optimistic success probability q, and the median times of ``select``, ``update`` and one exact
refit (what an exact-every-observation policy pays per update).

    OPENBLAS_NUM_THREADS=1 python -m experiments.speed_promptwise [--steps 20000] [--dim 384] [--checks 5]
"""

from __future__ import annotations

import argparse
import copy
import os
import time

import numpy as np
from scipy.special import expit

from routers.base import Context, Observation
from routers.logistic_fit import LinearLogisticArm, fit_logistic
from routers.logistic_ucb import PromptWise

PRICES = {"m-0.75": 0.75, "m-1.37": 1.37, "m-1.60": 1.60, "m-5.50": 5.50, "m-12.5": 12.50}


def make_world(dim: int, seed: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(16, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    thetas = {a: 3.0 * rng.normal(size=16) @ centres + 0.4 * i for i, a in enumerate(PRICES)}
    return centres, thetas


def draw_context(rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    x = centres[int(rng.integers(len(centres)))] + 0.3 * rng.normal(size=centres.shape[1]) / np.sqrt(
        centres.shape[1]
    )
    return (x / np.linalg.norm(x)).astype(np.float32)


def exact_twin(policy: PromptWise) -> tuple[PromptWise, list[float]]:
    """A copy whose arms are refit to convergence on their whole history (theta only; V is exact), and
    the seconds each refit took (the copy itself is not timed)."""
    twin = copy.deepcopy(policy)
    seconds = []
    for model in twin._models.values():
        assert isinstance(model, LinearLogisticArm) and model.history_complete
        if model.n:
            x = np.asarray(model.xs, dtype=np.float64)
            t0 = time.perf_counter()
            model.theta = fit_logistic(x, np.asarray(model.rs), model.gamma, None)
            seconds.append(time.perf_counter() - t0)
    return twin, seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--checks", type=int, default=5)
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    centres, thetas = make_world(args.dim, args.seed)
    policy = PromptWise(list(PRICES), seed=args.seed, prices=PRICES, max_history=10**7)
    checkpoints = set(np.unique(np.geomspace(100, args.steps, args.checks).astype(int)).tolist())
    select_t: list[float] = []
    update_t: list[float] = []
    print(
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}",
        f"d={args.dim} arms={len(PRICES)}",
    )
    print("step  observations  agree(first call)  max|q_online-q_exact|  exact refit ms (median over arms)")
    for step in range(1, args.steps + 1):
        x = draw_context(rng, centres)
        tried: list[str] = []
        while True:
            t0 = time.perf_counter()
            decision = policy.select(Context(embedding=x, tried=tuple(tried)))
            select_t.append(time.perf_counter() - t0)
            if not decision.arms:
                break
            arm = decision.arms[0]
            reward = float(rng.random() < expit(float(x @ thetas[arm])))
            t0 = time.perf_counter()
            policy.update(Observation(embedding=x, arm=arm, reward=reward, kind="cascade-step"))
            update_t.append(time.perf_counter() - t0)
            tried.append(arm)
            if reward == 1.0:
                break
        if step in checkpoints:
            twin, seconds = exact_twin(policy)
            refit_ms = 1e3 * float(np.median(seconds))
            agree, gap = 0, 0.0
            for _ in range(args.probes):
                probe = draw_context(rng, centres)
                a = policy.select(Context(embedding=probe, rng=np.random.default_rng(0)))
                b = twin.select(Context(embedding=probe, rng=np.random.default_rng(0)))
                agree += a.arms == b.arms
                for arm in a.scores:
                    gap = max(gap, abs(a.scores[arm]["q"] - b.scores[arm]["q"]))
            n_obs = sum(m.n for m in policy._models.values())
            print(f"{step:5d}  {n_obs:12d}  {agree / args.probes:17.3f}  {gap:21.4f}  {refit_ms:10.1f}")
    print(
        f"median select {1e3 * np.median(select_t):.3f} ms, "
        f"median update {1e3 * np.median(update_t):.3f} ms, "
        f"mean update {1e3 * np.mean(update_t):.3f} ms (includes the scheduled refits), "
        f"refits per arm {[getattr(m, 'refits', 0) for m in policy._models.values()]}"
    )


if __name__ == "__main__":
    main()
