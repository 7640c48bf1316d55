"""The RouteLLM pair with its prices swapped (bench/data/prices_swapped.json) against the real prices
(bench/data/prices.json), on the committed MMLU cut of tests/data/routellm; costs checked by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.cli import main
from bench.dataset import load_dataset

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data"
SWAPPED = ROOT / "bench" / "data" / "prices_swapped.json"


def _convert(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "out"
    assert main(["convert", *args, "--data", str(DATA), "--out", str(out)]) == 0
    return out


def test_routellm_prices_swapped_give_each_model_the_others_cost(tmp_path: Path) -> None:
    """The same MMLU cut under bench/data/prices.json and bench/data/prices_swapped.json: same rewards,
    each model's cost column is the other's (token estimates are per prompt, not per model)."""
    real = load_dataset(_convert(tmp_path / "real", "mmlu", "--limit", "20"))
    swapped = load_dataset(_convert(tmp_path / "swapped", "mmlu", "--limit", "20", "--prices", str(SWAPPED)))
    assert (
        swapped.model_names
        == real.model_names
        == ["mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"]
    )
    np.testing.assert_array_equal(swapped.mean_reward, real.mean_reward)
    np.testing.assert_allclose(swapped.cost, real.cost[:, ::-1], rtol=1e-12, atol=0)
    # by hand: Mixtral now 10 / 30 USD per million tokens in / out, 256 tokens out (MMLU has no responses)
    tokens_in = len(swapped.prompts[0]) / 4
    assert swapped.cost[0, 0] == pytest.approx(tokens_in * 10 / 1e6 + 256 * 30 / 1e6, rel=1e-12)
    assert swapped.cost[0, 1] == pytest.approx((tokens_in + 256) * 0.6 / 1e6, rel=1e-12)
