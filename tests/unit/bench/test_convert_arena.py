"""``bench convert arena-bench`` on the committed cut tests/data/arena-bench (see its README), with the
committed prices bench/data/arena_prices.json. Expected rewards and costs are computed by hand from the
fixture's lines (question and answer lengths in characters, grades) and the prices file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.convert_arena import arena_score
from bench.dataset import load_dataset

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data"
FIRST = "arena-bench/66c00ddde3dc4128a14d6afd5e899342"


def _convert(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "out"
    assert main(["convert", *args, "--data", str(DATA), "--out", str(out)]) == 0
    return out


def test_arena_rows_rewards_and_dropped_questions(tmp_path: Path) -> None:
    data = load_dataset(_convert(tmp_path, "arena-bench"))
    assert len(data.model_names) == 16
    assert data.model_names[:3] == ["gpt-4-0314", "gpt-4-1106-preview", "gpt-3.5-turbo"]
    # 7 questions in the cut; 042dff3d... (llama-13b, Mistral-7B, palm-2 ungraded) and f450bd52... (Mixtral
    # ungraded) are dropped by the converter, not by the loader
    assert data.n_prompts == 5 and data.dropped == 0
    assert data.ids[0] == FIRST and data.ids[-1] == "arena-bench/c91cf9ad7ca6471293a249513aa7422a"
    assert "2 questions dropped" in data.notes
    assert (
        "arena-bench/042dff3d83d74a30820826451d9085b7 (no grade from palm-2-chat-bison-001, llama-13b, "
        "mistralai/Mistral-7B-Instruct-v0.1)" in data.notes
    )
    assert "arena-bench/f450bd5261c6488294077c217876f32e (no grade from mistralai/Mixtral" in data.notes
    assert "characters / 4" in data.notes
    assert data.reward_range == (0.1, 1.0)
    col = {name: k for k, name in enumerate(data.model_names)}
    # score / 10, first and fifth question
    got = [
        data.mean_reward[0, col[m]] for m in ("gpt-4-0314", "llama-13b", "mistralai/Mistral-7B-Instruct-v0.1")
    ]
    assert got == [1.0, 0.1, 0.7]
    got = [data.mean_reward[4, col[m]] for m in ("gpt-4-1106-preview", "openchat_3.5", "gpt-3.5-turbo")]
    assert got == [0.4, 1.0, pytest.approx(0.3, abs=1e-15)]
    assert data.prompts[0].startswith("What is the  equation of straight line passing through (2, 3)")


def test_arena_costs_from_character_estimates_and_committed_prices(tmp_path: Path) -> None:
    data = load_dataset(_convert(tmp_path, "arena-bench"))
    col = {name: k for k, name in enumerate(data.model_names)}
    # first question: 107 characters -> 26.75 tokens in; answers 1235 (gpt-4-0314), 1938 (gpt-4-1106),
    # 10 (llama-13b), 1028 (Mixtral, stripped) characters -> / 4 tokens out
    expected = {
        "gpt-4-0314": 26.75 * 30 / 1e6 + 308.75 * 60 / 1e6,
        "gpt-4-1106-preview": 26.75 * 10 / 1e6 + 484.5 * 30 / 1e6,
        "llama-13b": (26.75 + 2.5) * 0.3 / 1e6,
        "mistralai/Mixtral-8x7B-Instruct-v0.1": (26.75 + 257.0) * 0.6 / 1e6,
    }
    for model, cost in expected.items():
        assert data.cost[0, col[model]] == pytest.approx(cost, rel=1e-12), model
    assert data.cost[0, col["gpt-4-0314"]] == pytest.approx(0.0193275, rel=1e-12)
    assert data.token_estimates == {
        "tokens_in from prompt characters / 4": 5 * 16,
        "tokens_out from response characters / 4": 5 * 16,
    }


def test_arena_limit_keeps_a_seeded_subsample_of_complete_questions(tmp_path: Path) -> None:
    data = load_dataset(_convert(tmp_path, "arena-bench", "--limit", "3", "--seed", "1"))
    assert data.n_prompts == 3
    assert "3 of 7 questions" in data.description


def test_arena_refuses_a_judged_model_without_a_price(tmp_path: Path) -> None:
    prices = json.loads((ROOT / "bench" / "data" / "arena_prices.json").read_text())
    del prices["models"]["llama-13b"]
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(prices))
    argv = [
        "convert",
        "arena-bench",
        "--data",
        str(DATA),
        "--prices",
        str(path),
        "--out",
        str(tmp_path / "x"),
    ]
    assert main(argv) == 2


def test_arena_score_parses_numbers_and_numeric_strings() -> None:
    assert arena_score(7) == 7.0
    assert arena_score("7") == 7.0
    assert arena_score(9.0) == 9.0
    assert arena_score(None) is None
    assert arena_score("$ERROR$") is None
    with pytest.raises(ValueError, match="outside"):
        arena_score(11)
