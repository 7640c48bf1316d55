"""The replay dataset loader: dropped rows, sample lists, cost estimation (hand-computed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.dataset import load_dataset
from replay_dataset.files import DatasetError, write_dataset

MODELS = [
    {"name": "small", "usd_per_mtok_in": 1.0, "usd_per_mtok_out": 2.0, "usd_per_call": 0.0},
    {
        "name": "big",
        "usd_per_mtok_in": 10.0,
        "usd_per_mtok_out": 30.0,
        "usd_per_call": 0.5,
        "default_tokens_out": 100,
    },
]


def _write(tmp_path: Path, rows: list[dict], models: list[dict] = MODELS) -> Path:
    return write_dataset(tmp_path / "set", models, rows, (0.0, 1.0), "test set")


def test_rows_without_a_reward_for_every_model_are_dropped_and_counted(tmp_path: Path) -> None:
    rows = [
        {"id": "ok", "prompt": "p", "rewards": {"small": 1, "big": 0}},
        {"id": "no-big", "prompt": "p", "rewards": {"small": 1}},
        {"id": "empty-list", "prompt": "p", "rewards": {"small": [], "big": 1}},
        {"id": "text", "prompt": "p", "rewards": {"small": "yes", "big": 1}},
        {"id": "bool", "prompt": "p", "rewards": {"small": True, "big": 1}},
        {"id": "ok2", "prompt": "q", "rewards": {"small": 0.5, "big": [0.25, 0.75]}},
    ]
    data = load_dataset(_write(tmp_path, rows))
    assert data.ids == ["ok", "ok2"]
    assert data.dropped == 4
    assert data.dropped_reasons == {"no reward for big": 1, "no reward for small": 3}


def test_sample_lists_give_their_mean_and_each_pull_draws_one_sample(tmp_path: Path) -> None:
    rows = [{"id": "a", "prompt": "p", "rewards": {"small": [0.0, 0.2, 1.0], "big": 0.4}}]
    data = load_dataset(_write(tmp_path, rows))
    np.testing.assert_allclose(data.mean_reward, [[0.4, 0.4]])
    assert [data.draw_reward(0, 0, u) for u in (0.0, 0.33, 0.34, 0.66, 0.67, 0.999)] == [
        0.0,
        0.0,
        0.2,
        0.2,
        1.0,
        1.0,
    ]
    assert data.draw_reward(0, 1, 0.9) == 0.4


def test_cost_uses_token_counts_when_given_and_estimates_otherwise(tmp_path: Path) -> None:
    prompt = "x" * 400  # 100 estimated input tokens
    rows = [
        {
            "id": "given",
            "prompt": prompt,
            "rewards": {"small": 1, "big": 1},
            "tokens_in": {"small": 1000, "big": 2000},
            "tokens_out": {"small": 500, "big": 10},
        },
        {
            "id": "response",
            "prompt": prompt,
            "rewards": {"small": 1, "big": 1},
            "responses": {"small": "y" * 80, "big": "z" * 8},
        },
        {"id": "default", "prompt": prompt, "rewards": {"small": 1, "big": 1}},
    ]
    data = load_dataset(_write(tmp_path, rows))
    # given: small 1000*1e-6 + 500*2e-6 = 0.002; big 2000*10e-6 + 10*30e-6 + 0.5 = 0.5203
    # response: small 100*1e-6 + 20*2e-6 = 0.00014; big 100*10e-6 + 2*30e-6 + 0.5 = 0.50106
    # default: small 100*1e-6 + 256*2e-6 = 0.000612; big 100*10e-6 + 100*30e-6 + 0.5 = 0.504
    np.testing.assert_allclose(
        data.cost, [[0.002, 0.5203], [0.00014, 0.50106], [0.000612, 0.504]], rtol=1e-12
    )
    assert data.token_estimates == {
        "tokens_in from prompt characters / 4": 4,
        "tokens_out from response characters / 4": 2,
        "tokens_out = default_tokens_out": 2,
    }


def test_context_vectors_are_normalised_and_must_be_in_every_row(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "prompt": "p", "rewards": {"small": 1, "big": 0}, "context": [3.0, 4.0]},
        {"id": "b", "prompt": "q", "rewards": {"small": 1, "big": 0}, "context": [0.0, 2.0]},
    ]
    data = load_dataset(_write(tmp_path, rows))
    assert data.contexts is not None
    np.testing.assert_allclose(data.contexts, [[0.6, 0.8], [0.0, 1.0]], rtol=1e-6)
    del rows[1]["context"]
    with pytest.raises(DatasetError, match="every row or in none"):
        load_dataset(_write(tmp_path, rows))


def test_repeated_prompts_are_kept_but_ids_must_be_unique(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "prompt": "same", "rewards": {"small": 1, "big": 0}},
        {"id": "b", "prompt": "same", "rewards": {"small": 0, "big": 1}},
    ]
    assert load_dataset(_write(tmp_path, rows)).prompts == ["same", "same"]
    rows[1]["id"] = "a"
    with pytest.raises(DatasetError, match="duplicate id"):
        load_dataset(_write(tmp_path, rows))


def test_models_json_is_validated(tmp_path: Path) -> None:
    root = _write(tmp_path, [{"id": "a", "prompt": "p", "rewards": {"small": 1, "big": 0}}])
    meta = json.loads((root / "models.json").read_text())
    meta["reward_range"] = [1, 0]
    (root / "models.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="reward_range"):
        load_dataset(root)
