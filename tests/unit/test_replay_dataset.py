"""The replay format's one reader and writer (replay_dataset/files.py), the cost rule (routers/prices.py)
and a decision's generator key (routers/base.py): what the gateway and the replay benchmark share."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from app.cli import main as cli_main
from app.replay_backends import ReplayDataset, replay_answer
from bench.dataset import load_dataset as bench_load
from replay_dataset.files import (
    IN_FROM_PROMPT,
    OUT_DEFAULT,
    OUT_FROM_RESPONSE,
    DatasetError,
    ModelPrice,
    read_dataset,
    write_dataset,
)
from routers.base import generator_key
from routers.prices import call_cost, whole_tokens


def test_call_cost_is_tokens_times_prices_plus_the_call_price() -> None:
    prices = ModelPrice("m", usd_per_mtok_in=2.0, usd_per_mtok_out=8.0, usd_per_call=0.001)
    # 1000 * 2 / 1e6 + 500 * 8 / 1e6 + 0.001 = 0.002 + 0.004 + 0.001
    assert call_cost(prices, 1000, 500) == pytest.approx(0.007)
    assert prices.call_cost(1000, 500) == call_cost(prices, 1000, 500)


def test_whole_tokens_round_characters_over_four_up() -> None:
    assert [whole_tokens(c) for c in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_generator_key_is_the_request_seed_or_the_ids_first_64_bits() -> None:
    assert generator_key("00000000000000ff" + "0" * 16) == 255
    assert generator_key("ffffffffffffffff" + "1" * 16) == 2**64 - 1
    assert generator_key("00000000000000ff" + "0" * 16, request_seed=7) == 7


def write(root: Path, meta: dict[str, object], rows: list[dict[str, object]]) -> Path:
    root.mkdir()
    (root / "models.json").write_text(json.dumps(meta))
    (root / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return root


def test_the_writer_and_the_reader_round_trip(tmp_path: Path) -> None:
    models = [{"name": "a", "usd_per_call": 0.5}, {"name": "b/c", "default_tokens_out": 10}]
    rows: list[dict[str, Any]] = [
        {"id": "x", "prompt": "hi", "rewards": {"a": 1, "b/c": [0, 1]}, "topic": "t", "group": 3},
        {"prompt": "yo", "rewards": {"a": 0.5, "b/c": 0.25}, "tokens_in": {"a": 7}},
    ]
    data = read_dataset(write_dataset(tmp_path / "d", models, rows, (0.0, 2.0), "two", budget=1.5, seed=4))
    assert data.meta.models == [ModelPrice("a", usd_per_call=0.5), ModelPrice("b/c", default_tokens_out=10)]
    assert (data.meta.reward_range, data.meta.description, data.meta.budget) == ((0.0, 2.0), "two", 1.5)
    assert data.meta.fields["seed"] == 4  # unknown keys are kept for a copy
    first, second = data.rows
    assert (first.id, first.line, first.group, first.rewards) == (
        "x",
        1,
        "3",
        {"a": [1.0], "b/c": [0.0, 1.0]},
    )
    assert first.fields["topic"] == "t"
    assert (second.id, second.tokens_in, second.tokens_out) == ("2", {"a": 7.0}, {})  # id: the line number


def test_token_counts_are_logged_else_estimated_from_characters(tmp_path: Path) -> None:
    meta = {"models": [{"name": "a"}, {"name": "b", "default_tokens_out": 9}], "reward_range": [0, 1]}
    row: dict[str, object] = {
        "prompt": "x" * 10,
        "rewards": {"a": 1, "b": 0},
        "tokens_in": {"a": 3},
        "tokens_out": {"a": 4},
        "responses": {"b": "y" * 6},
    }
    data = read_dataset(write(tmp_path / "d", meta, [row]))
    (only,) = data.rows
    a, b = data.meta.models
    assert only.token_counts(a) == (3.0, 4.0, None, None)
    # b: 10 / 4 = 2.5 input tokens, 6 / 4 = 1.5 output tokens from the response
    assert only.token_counts(b) == (2.5, 1.5, IN_FROM_PROMPT, OUT_FROM_RESPONSE)
    # the replay backends answer the same counts in whole tokens: 3, 2
    served = ReplayDataset.read(data.path)
    assert replay_answer(served, b, "x" * 10) == ("y" * 6, 3, 2)
    no_response = ModelPrice("b", default_tokens_out=9)
    bare = read_dataset(write(tmp_path / "e", meta, [{"prompt": "p", "rewards": {"a": 1, "b": 1}}]))
    assert bare.rows[0].token_counts(no_response) == (0.25, 9, IN_FROM_PROMPT, OUT_DEFAULT)


def test_the_gateway_and_the_bench_read_a_dataset_alike(tmp_path: Path) -> None:
    meta = {
        "models": [{"name": "a", "usd_per_mtok_in": 1.0, "default_tokens_out": 100}],
        "reward_range": [0, 1],
    }
    rows: list[dict[str, object]] = [
        {"id": "r1", "prompt": "hi", "rewards": {"a": 1.0}},
        {"id": "r2", "prompt": "no reward"},
    ]
    root = write(tmp_path / "ok", meta, rows)
    served, replayed = ReplayDataset.read(root), bench_load(root)
    assert served.models == replayed.models == [ModelPrice("a", 1.0, 0.0, 0.0, 100)]
    assert served.reward_range == replayed.reward_range == (0.0, 1.0)
    assert [r.id for r in served.rows] == replayed.ids == ["r1"]  # both drop the row without a reward
    assert replayed.dropped == 1


@pytest.mark.parametrize(
    ("meta", "rows", "message"),
    [
        ({"models": [{"name": "a"}]}, [{"prompt": "hi", "rewards": {"a": 1}}], "reward_range"),
        (None, [{"prompt": "hi", "rewards": {"a": 1}, "tokens_in": 3}], r"rows.jsonl:1: 'tokens_in' must be"),
        (None, [{"prompt": "hi", "rewards": {"a": 1}, "responses": ["x"]}], "'responses' must be an object"),
        (None, [{"id": 1, "prompt": "a", "rewards": {"a": 1}}, {"id": 1, "prompt": "b"}], "duplicate id '1'"),
        (None, [{"prompt": 5, "rewards": {"a": 1}}], "string 'prompt'"),
        (
            None,
            [{"prompt": "a", "rewards": {"a": 1}, "context": [1, 2]}, {"prompt": "b", "rewards": {"a": 1}}],
            "every row or in none",
        ),
        (None, [{"prompt": "a", "rewards": {"b": 1}}], r"no usable row \(1 dropped\)"),
    ],
)
def test_the_gateway_refuses_what_the_bench_refuses(
    tmp_path: Path, meta: dict[str, object] | None, rows: list[dict[str, object]], message: str
) -> None:
    root = write(tmp_path / "bad", meta or {"models": [{"name": "a"}], "reward_range": [0, 1]}, rows)
    for load in (ReplayDataset.read, bench_load):
        with pytest.raises(DatasetError, match=message):
            load(root)


def test_an_unknown_prompt_gets_a_placeholder_billed_in_whole_tokens(tmp_path: Path) -> None:
    meta = {"models": [{"name": "a", "default_tokens_out": 7.5}], "reward_range": [0, 1]}
    served = ReplayDataset.read(write(tmp_path / "d", meta, [{"prompt": "known", "rewards": {"a": 1}}]))
    text, tokens_in, tokens_out = replay_answer(served, served.models[0], "12345")
    assert "no logged answer" in text and (tokens_in, tokens_out) == (2, math.ceil(7.5))


@pytest.mark.parametrize(
    "command", [["replay-backends", "--api-key", "k"], ["replay-evaluator", "--api-key", "k"]]
)
def test_the_cli_refuses_a_malformed_dataset_in_one_line(
    tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    root = write(tmp_path / "d", {"models": [{"name": "a"}], "reward_range": [1, 0]}, [])
    extra = ["--gateway", "http://127.0.0.1:9"] if command[0] == "replay-evaluator" else []
    assert cli_main([*command, *extra, "--dataset", str(root)]) == 2
    assert (
        capsys.readouterr().err
        == f"error: {root / 'models.json'}: 'reward_range' must be [lo, hi] with lo < hi, got [1, 0]\n"
    )
