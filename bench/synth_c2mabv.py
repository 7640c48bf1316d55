"""A SciQ-like replay set for C2MAB-V (Dai et al., 2024): nine models with the paper's Table 3 prices.

Prices: Table 3's USD per 1k tokens, charged on input and output tokens alike (usd_per_mtok_in =
usd_per_mtok_out = 1000 x the printed price). The paper gives no per-model rewards (spec 5.3); this set
uses exactly these probabilities of a correct answer (graded reward 0.5): ChatGLM2 0.35, GPT-3.5 0.62,
Claude 2 0.70, ERNIE 0.55, Llama 2-7B 0.30, Llama 2-13B 0.40, Llama 2-70B 0.58, Mixtral 0.60, GPT-4 0.80;
otherwise the reward is 0.3 with probability 0.5, 0.1 with probability 0.1, else 0 (so
E[reward] = 0.5 p + 0.16 (1 - p)). Each row is one question with one realised reward per model. Tokens:
input uniform on [200, 600] per question, output uniform on [200, 600] per model and question (invented;
the paper states none). A cascade (AWC) counts a reward of 0.5 as a success.

    python -m bench.synth_c2mabv --out DIR [--prompts 5000] [--seed 0]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from replay_dataset.files import write_dataset

USD_PER_1K_TOKENS = {  # Table 3
    "chatglm2-6b-32k": 0.005,
    "gpt-3.5": 0.02,
    "claude-2": 0.08,
    "ernie-3.5-8k": 0.015,
    "llama-2-7b": 0.005,
    "llama-2-13b": 0.008,
    "llama-2-70b": 0.05,
    "mixtral-8x7b": 0.05,
    "gpt-4": 0.12,
}
P_CORRECT = {  # assumed (the paper reports none); see the module doc
    "chatglm2-6b-32k": 0.35,
    "gpt-3.5": 0.62,
    "claude-2": 0.70,
    "ernie-3.5-8k": 0.55,
    "llama-2-7b": 0.30,
    "llama-2-13b": 0.40,
    "llama-2-70b": 0.58,
    "mixtral-8x7b": 0.60,
    "gpt-4": 0.80,
}
BUDGETS = {"awc": 0.45, "suc": 0.5, "aic": 0.3}


def expected_reward(p_correct: float) -> float:
    """E[X] = 0.5 p + (1 - p)(0.3 * 0.5 + 0.1 * 0.1)."""
    return 0.5 * p_correct + (1.0 - p_correct) * 0.16


def draw_reward(rng: np.random.Generator, p_correct: float) -> float:
    if rng.random() < p_correct:
        return 0.5
    u = rng.random()
    return 0.3 if u < 0.5 else (0.1 if u < 0.6 else 0.0)


def rows(prompts: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(prompts):
        tokens_in = int(rng.integers(200, 601))
        out.append(
            {
                "id": f"sciq-{i:05d}",
                "prompt": f"SciQ-like multiple-choice science question #{i}",
                "rewards": {m: draw_reward(rng, p) for m, p in P_CORRECT.items()},
                "tokens_in": dict.fromkeys(P_CORRECT, tokens_in),
                "tokens_out": {m: int(rng.integers(200, 601)) for m in P_CORRECT},
            }
        )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    models = [
        {
            "name": m,
            "usd_per_mtok_in": 1000.0 * price,
            "usd_per_mtok_out": 1000.0 * price,
            "usd_per_call": 0.0,
            "default_tokens_out": 400,
        }
        for m, price in USD_PER_1K_TOKENS.items()
    ]
    written = list(rows(args.prompts, args.seed))
    write_dataset(
        args.out,
        models,
        written,
        (0.0, 0.5),
        "C2MAB-V nine-model set: Table 3 prices (USD/1k tokens, input and output); assumed P(correct) per "
        "model (reward 0.5), else 0.3 w.p. 0.5, 0.1 w.p. 0.1, 0 otherwise. AWC success = reward 0.5. "
        "Budgets (normalised by the most expensive model's mean cost): AWC 0.45, SUC 0.5, AIC 0.3; N = 4.",
        settings={
            "success_threshold": 0.5,
            "max_models": 4,
            "budgets": BUDGETS,
            "p_correct": P_CORRECT,
            "expected_reward": {m: expected_reward(p) for m, p in P_CORRECT.items()},
        },
    )
    print(f"wrote {len(written)} prompts to {args.out}")


if __name__ == "__main__":
    main()
