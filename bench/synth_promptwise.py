"""A Sudoku-like replay set from PromptWise's Table 1 (Hu et al., 2025; spec section 6.1).

Three models with the printed set prices as per-call prices (USD): GPT-4o-mini 0.75, o3-mini 5.50,
Deepseek-Chat 1.37; three difficulty levels with the printed pass@1 rates. Each prompt is a random valid
9x9 board with n blanks (Easy 5-15, Medium 16-25, Hard 26-30; the paper's overlapping edges resolved
upward), its context the one-hot difficulty level, and, per model, ``trials`` logged 0/1 outcomes drawn
Bernoulli(pass rate), as the paper logged ten trials per prompt; a pull draws one of them. The paper's
settings are recorded: tau_max = 5 (``max_calls``), lambda = 0.05.

    python -m bench.synth_promptwise --out DIR [--prompts 600] [--trials 10] [--seed 0]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from replay_dataset.files import write_dataset
from routers.base import Context, Observation, Policy

PRICES = {"gpt-4o-mini": 0.75, "o3-mini": 5.50, "deepseek-chat": 1.37}
LEVELS = ("easy", "medium", "hard")
BLANKS = {"easy": (5, 15), "medium": (16, 25), "hard": (26, 30)}
PASS_RATE = {  # Table 1, pass@1 over ten trials
    "gpt-4o-mini": {"easy": 0.7520, "medium": 0.2346, "hard": 0.0681},
    "o3-mini": {"easy": 0.8706, "medium": 0.7578, "hard": 0.6085},
    "deepseek-chat": {"easy": 0.9348, "medium": 0.6184, "hard": 0.2745},
}
MAX_CALLS = 5
COST_WEIGHT = 0.05
ARMS = list(PRICES)
EYE = np.eye(len(LEVELS), dtype=np.float32)  # a prompt's context: its level, one-hot


def random_board(rng: np.random.Generator, blanks: int) -> str:
    """A valid solved board (the shifted-pattern construction, digits/rows/columns permuted) with
    ``blanks`` cells replaced by '.', as 81 characters."""
    base = [[(3 * (r % 3) + r // 3 + c) % 9 for c in range(9)] for r in range(9)]
    bands = rng.permutation(3)
    rows = [3 * b + r for b in bands for r in rng.permutation(3)]
    stacks = rng.permutation(3)
    cols = [3 * s + c for s in stacks for c in rng.permutation(3)]
    digits = rng.permutation(9) + 1
    cells = [str(digits[base[r][c]]) for r in rows for c in cols]
    for i in rng.choice(81, size=blanks, replace=False):
        cells[int(i)] = "."
    return "".join(cells)


def rows(prompts: int, trials: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(prompts):
        level = int(rng.integers(len(LEVELS)))
        name = LEVELS[level]
        lo, hi = BLANKS[name]
        blanks = int(rng.integers(lo, hi + 1))
        board = random_board(rng, blanks)
        rewards = {m: [int(v) for v in rng.random(trials) < PASS_RATE[m][name]] for m in PRICES}
        out.append(
            {
                "id": f"sudoku-{i:05d}",
                "prompt": f"Solve this 9x9 Sudoku ('.' = blank), rows left to right: {board}",
                "rewards": rewards,
                "context": [1.0 if j == level else 0.0 for j in range(len(LEVELS))],
                "group": name,
            }
        )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=600)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    models = [
        {"name": m, "usd_per_mtok_in": 0.0, "usd_per_mtok_out": 0.0, "usd_per_call": p}
        for m, p in PRICES.items()
    ]
    written = list(rows(args.prompts, args.trials, args.seed))
    write_dataset(
        args.out,
        models,
        written,
        (0.0, 1.0),
        "Sudoku-like set from PromptWise Table 1: printed pass@1 per difficulty, set prices as per-call USD; "
        "context = one-hot difficulty (easy, medium, hard); reward 1 = solved. Paper settings: "
        "max_calls (tau_max) = 5, lambda = 0.05.",
        settings={
            "max_calls": MAX_CALLS,
            "lambda": COST_WEIGHT,
            "levels": list(LEVELS),
            "pass_rate": PASS_RATE,
        },
    )
    print(f"wrote {len(written)} prompts to {args.out}")


if __name__ == "__main__":
    main()


def run_cascades(policy: Policy, steps: int, seed: int, cost_weight: float = COST_WEIGHT) -> dict[str, float]:
    """Play ``steps`` prompts of the Table 1 environment live (no replay). Mean utility, cost (USD) and success rate per prompt over ``steps`` prompts."""
    rng = np.random.default_rng(seed)
    utility = cost = success = 0.0
    for t in range(steps):
        level = int(rng.integers(len(LEVELS)))
        x = EYE[level]
        tried: list[str] = []
        while True:
            decision = policy.select(
                Context(embedding=x, tried=tuple(tried), costs=PRICES, decision_key=str(t))
            )
            if not decision.arms:
                break
            arm = decision.arms[0]
            reward = float(rng.random() < PASS_RATE[arm][LEVELS[level]])
            cost += PRICES[arm]
            utility -= cost_weight * PRICES[arm]
            tried.append(arm)
            policy.update(
                Observation(
                    embedding=x,
                    arm=arm,
                    reward=reward,
                    cost=PRICES[arm],
                    kind="cascade-step",
                    decision_key=str(t),
                )
            )
            if reward == 1.0:
                utility += 1.0
                success += 1.0
                break
            if not decision.adaptive:
                break
    return {"utility": utility / steps, "cost": cost / steps, "success": success / steps}
