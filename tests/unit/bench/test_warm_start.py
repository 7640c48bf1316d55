"""``bench run --warm-start F``: the warm prompts are folded as offline observations before round 0, the
online rounds play only the other prompts, and a warm start pays on a learnable set."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.cli import main
from bench.dataset import Dataset, load_dataset
from bench.policy_spec import parse_spec
from bench.result_schema import validate_report
from bench.run_command import replay
from bench.synthetic import linear_dataset
from bench.warm_start import WARM_STREAM, WarmStart
from replay_dataset.files import write_dataset
from routers.base import Decision
from tests.unit.bench.scripted_policy import ScriptedPolicy, always, register

MODELS = [{"name": "A", "usd_per_call": 0.01}, {"name": "B", "usd_per_call": 0.02}]
N = 10


@pytest.fixture
def dataset(tmp_path: Path) -> Dataset:
    rows = [
        {"id": f"p{i}", "prompt": f"q{i}", "rewards": {"A": i % 2, "B": 1}, "context": [1.0, float(i)]}
        for i in range(N)
    ]
    return load_dataset(write_dataset(tmp_path / "d", MODELS, rows, (0, 1), "d"))


def _prompt_of(dataset: Dataset, embedding: np.ndarray) -> int:
    assert dataset.contexts is not None
    return int(np.argmin(((dataset.contexts - embedding) ** 2).sum(axis=1)))


@pytest.mark.parametrize("logged_model", [None, "B"])
def test_warm_prompts_are_folded_first_and_never_played_online(
    monkeypatch: pytest.MonkeyPatch, dataset: Dataset, logged_model: str | None
) -> None:
    register(monkeypatch, "always-a", always(lambda: Decision(arms=["A"])))
    warm = WarmStart(0.3, logged_model)
    result = replay(
        dataset, dataset.contexts, [parse_spec("always-a")], None, seeds=3, progress=False, warm_start=warm
    )
    assert result.report["horizon"] == N - 3
    assert result.report["warm_start"] == {
        "fraction": 0.3,
        "logged_model": logged_model,
        "logged_models": "one" if logged_model else "all",
        "warm_prompts": 3,
        "online_pool": 7,
    }
    models = ["A", "B"] if logged_model is None else [logged_model]
    for seed, policy in enumerate(ScriptedPolicy.instances[-3:]):
        expected_warm = np.random.default_rng([seed, WARM_STREAM]).permutation(N)[:3].tolist()
        offline = [o for o in policy.observations if o.kind == "offline"]
        # folded before round 0, in split order, each warm prompt's logged models in models.json order
        assert policy.observations[: len(offline)] == offline
        assert [(_prompt_of(dataset, o.embedding), o.arm) for o in offline] == [
            (p, m) for p in expected_warm for m in models
        ]
        assert [o.decision_key for o in offline] == [f"p{p}/{m}" for p in expected_warm for m in models]
        for o in offline:
            p = _prompt_of(dataset, o.embedding)
            assert o.reward == (1.0 if o.arm == "B" else p % 2)
            assert o.cost == pytest.approx(0.01 if o.arm == "A" else 0.02)
        played = [_prompt_of(dataset, c.embedding) for c in policy.contexts]
        assert sorted(played) == sorted(set(range(N)) - set(expected_warm))


def test_the_references_are_judged_on_the_online_prompts_only(dataset: Dataset) -> None:
    report = replay(dataset, dataset.contexts, [], None, 4, progress=False, warm_start=WarmStart(0.5))
    # best single is B (reward 1 everywhere) and the oracle earns 1 on every online prompt
    assert report.report["reference"]["oracle"]["mean_reward"] == 1.0
    assert report.report["horizon"] == 5


def test_warm_start_zero_is_the_cold_run(dataset: Dataset) -> None:
    cold = replay(dataset, dataset.contexts, [parse_spec("knn-ucb")], None, 2, progress=False).report
    zero = replay(
        dataset, dataset.contexts, [parse_spec("knn-ucb")], None, 2, progress=False, warm_start=WarmStart(0.0)
    ).report
    assert zero["policies"][0]["mean_reward"] == cold["policies"][0]["mean_reward"]
    assert cold["warm_start"] is None and zero["warm_start"]["warm_prompts"] == 0


def test_half_the_prompts_as_logs_beat_a_cold_start_on_a_learnable_set(tmp_path: Path) -> None:
    data = load_dataset(linear_dataset(tmp_path / "lin", n_prompts=400, n_models=3, dim=4, seed=0))
    specs = [parse_spec("knn-ucb")]
    warm = replay(data, data.contexts, specs, None, 4, progress=False, warm_start=WarmStart(0.5)).report
    cold = replay(data, data.contexts, specs, None, 4, progress=False).report
    warm_regret = warm["policies"][0]["mean_regret"]
    cold_regret = cold["policies"][0]["mean_regret"]
    # regret per round to each run's own oracle: the warm run's online rounds lose less than half as much
    assert warm_regret < 0.5 * cold_regret
    assert warm["policies"][0]["mean_reward"] > cold["policies"][0]["mean_reward"]


def test_the_cli_records_the_warm_start_and_refuses_an_unknown_logged_model(
    dataset: Dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["run", "--dataset", str(dataset.path), "--policy", "linucb", "--quiet", "--seeds", "2"]
    out = tmp_path / "r.json"
    assert main([*args, "--warm-start", "0.5", "--warm-start-logged-model", "A", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["warm_start"]["logged_model"] == "A"
    assert "warm start: 5 prompts folded as offline logs of A" in capsys.readouterr().out
    assert main([*args, "--warm-start", "0.5", "--warm-start-logged-model", "Z"]) == 2
    assert "--warm-start-logged-model 'Z' is not a model" in capsys.readouterr().err
    assert main([*args, "--warm-start", "1.0"]) == 2
    assert main([*args, "--warm-start-logged-model", "A"]) == 2


def test_the_report_with_a_warm_start_follows_the_json_contract(dataset: Dataset) -> None:
    report = replay(
        dataset,
        dataset.contexts,
        [parse_spec("linucb")],
        None,
        2,
        progress=False,
        warm_start=WarmStart(0.5, "A"),
    ).report
    validate_report(json.loads(json.dumps(report)))
    validate_report(
        json.loads(json.dumps(replay(dataset, dataset.contexts, [], None, 1, progress=False).report))
    )
