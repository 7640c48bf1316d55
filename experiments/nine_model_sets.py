"""Set policies on C2MAB-V's nine-model environment, simulated from the assumed per-model rewards.

Models, prices and reward distributions as ``bench.synth_c2mabv`` (Table 3 prices; the assumed P(correct)).
Each round draws input tokens U[200, 600] and, per called model, output tokens U[200, 600]; a call costs
(tokens in + out) x price / 1000 USD. The policy gets ``Context.costs`` with 400 expected output tokens,
so its normalisation scale is the expected cost of GPT-4 (spec 5.4, H1). AWC calls the set in order and
stops at the first reward 0.5. Reported per round: the expected reward r(S; mu) of the chosen set under
the true means, the violation V(T) = [mean normalised spend - rho]^+ averaged over rounds (the paper's
Eq. 1 at every horizon), and the mean normalised spend.

    python -m experiments.nine_model_sets [--rounds 2000] [--seeds 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.synth_c2mabv import P_CORRECT, USD_PER_1K_TOKENS, draw_reward, expected_reward
from experiments.table1_cascades import parse_spec
from routers.base import Context, Observation, Policy
from routers.registry import build_policy
from routers.relaxation import direct_enumerate

ARMS = list(USD_PER_1K_TOKENS)
MU = {a: expected_reward(P_CORRECT[a]) for a in ARMS}
SCALE = 800 * USD_PER_1K_TOKENS["gpt-4"] / 1000  # GPT-4's mean cost per call, USD
POLICIES = (
    "c2mab-v",
    "c2mab-v:alpha_reward=0.3",
    "c2mab-v:direct=true",
    "c2mab-v:batch_size=50",
    "cucb",
    "eps-greedy-set",
    "thompson-set",
)


def set_reward(model: str, chosen: list[str]) -> float:
    mu = np.array([MU[a] for a in chosen])
    if model == "awc":
        return float(1 - np.prod(1 - mu))
    if model == "suc":
        return float(mu.sum())
    return float(np.prod(mu)) if chosen else 0.0


def best_set(model: str, budget: float, size: int = 4) -> tuple[list[str], float]:
    """The best set under the true means and mean normalised costs (C2MAB-V-Direct's enumeration)."""
    mu = np.array([MU[a] for a in ARMS])
    costs = np.array([USD_PER_1K_TOKENS[a] for a in ARMS]) / USD_PER_1K_TOKENS["gpt-4"]
    z, _ = direct_enumerate(model, mu, costs, size, budget)
    chosen = [ARMS[i] for i in np.flatnonzero(z)]
    return chosen, set_reward(model, chosen)


def run_sets(policy: Policy, model: str, budget: float, rounds: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    x = np.zeros(1, dtype=np.float32)
    reward = spend = violation = 0.0
    for t in range(1, rounds + 1):
        tokens_in = int(rng.integers(200, 601))
        expected = {a: (tokens_in + 400) * USD_PER_1K_TOKENS[a] / 1000 for a in ARMS}
        decision = policy.select(Context(embedding=x, costs=expected))
        reward += set_reward(model, decision.arms)
        for arm in decision.arms:
            cost = (tokens_in + int(rng.integers(200, 601))) * USD_PER_1K_TOKENS[arm] / 1000
            r = draw_reward(rng, P_CORRECT[arm])
            spend += cost / SCALE
            policy.update(Observation(embedding=x, arm=arm, reward=r, cost=cost))
            if model == "awc" and r >= 0.5:
                break
        violation += max(spend / t - budget, 0.0)
    return {"reward": reward / rounds, "violation": violation / rounds, "spend": spend / rounds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rewards", nargs="+", default=["awc", "suc", "aic"])
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    args = parser.parse_args(argv)
    for model in args.rewards:
        print(f"\nreward model {model}")
        default_budget = float(getattr(build_policy("c2mab-v", ARMS, 0, {"reward": model}), "budget", 0.0))
        chosen, value = best_set(model, default_budget)
        print(f"best feasible set under the true means (rho {default_budget}): {chosen}, reward {value:.4f}")
        print(f"{'policy':28s} {'reward':>7s} {'violation':>10s} {'spend':>6s} {'rho':>5s} {'s/run':>6s}")
        for spec in args.policies:
            name, hyper = parse_spec(spec)
            hyper["reward"] = model
            runs = []
            t0 = time.perf_counter()
            budget = 0.0
            for seed in range(args.seeds):
                policy = build_policy(name, ARMS, seed=seed, hyperparameters=hyper)
                budget = float(getattr(policy, "budget", 0.0))
                runs.append(run_sets(policy, model, budget, args.rounds, 100 + seed))
            elapsed = (time.perf_counter() - t0) / args.seeds
            mean = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
            print(
                f"{spec:28s} {mean['reward']:7.3f} {mean['violation']:10.4f} {mean['spend']:6.3f}",
                f"{budget:5.2f} {elapsed:6.1f}",
            )


if __name__ == "__main__":
    main()
