"""The rules the gateway and the replay benchmark share (routers/replay_format.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.replay_backends import load_dataset as gateway_load
from bench.dataset import load_dataset as bench_load
from routers.replay_format import DatasetError, ModelPrice, call_cost, decision_key, whole_tokens


def test_call_cost_is_tokens_times_prices_plus_the_call_price() -> None:
    prices = ModelPrice("m", usd_per_mtok_in=2.0, usd_per_mtok_out=8.0, usd_per_call=0.001)
    # 1000 * 2 / 1e6 + 500 * 8 / 1e6 + 0.001 = 0.002 + 0.004 + 0.001
    assert call_cost(prices, 1000, 500) == pytest.approx(0.007)
    assert prices.call_cost(1000, 500) == call_cost(prices, 1000, 500)


def test_whole_tokens_round_characters_over_four_up() -> None:
    assert [whole_tokens(c) for c in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_decision_key_is_the_request_seed_or_the_ids_first_64_bits() -> None:
    assert decision_key("00000000000000ff" + "0" * 16) == 255
    assert decision_key("ffffffffffffffff" + "1" * 16) == 2**64 - 1
    assert decision_key("00000000000000ff" + "0" * 16, request_seed=7) == 7


def write(root: Path, meta: dict[str, object], rows: list[dict[str, object]]) -> Path:
    root.mkdir()
    (root / "models.json").write_text(json.dumps(meta))
    (root / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return root


def test_the_gateway_and_the_bench_read_a_dataset_alike(tmp_path: Path) -> None:
    meta = {
        "models": [{"name": "a", "usd_per_mtok_in": 1.0, "default_tokens_out": 100}],
        "reward_range": [0, 1],
    }
    root = write(tmp_path / "ok", meta, [{"id": "r1", "prompt": "hi", "rewards": {"a": 1.0}}])
    served, replayed = gateway_load(root), bench_load(root)
    assert served.models == replayed.models == [ModelPrice("a", 1.0, 0.0, 0.0, 100)]
    assert served.reward_range == replayed.reward_range == (0.0, 1.0)


def test_the_gateway_refuses_what_the_bench_refuses(tmp_path: Path) -> None:
    """A ``models.json`` without ``reward_range`` (the gateway's loader used to assume [0, 1])."""
    meta = {"models": [{"name": "a"}]}
    root = write(tmp_path / "bad", meta, [{"prompt": "hi", "rewards": {"a": 1.0}}])
    for load in (gateway_load, bench_load):
        with pytest.raises(DatasetError, match="reward_range"):
            load(root)
