"""Policy specs: parsing, --lambda reaching cost-aware policies as cost_weight, and the run's horizon
reaching policies that take one."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, ClassVar

import pytest

from bench.dataset import load_dataset
from bench.policy_spec import build_from_spec, hyperparameters, parse_spec
from bench.run_command import replay
from replay_dataset.files import write_dataset
from routers.base import Decision, PolicyConfigError
from routers.kernel_ucb import PakUCB
from routers.registry import POLICIES
from routers.retry import retrying
from tests.unit.bench.scripted_policy import CostAwareScripted, always, register


def test_values_parse_as_json_numbers_and_booleans_else_strings() -> None:
    spec = parse_spec("knn-ucb:k=10,alpha=0.5,eps=1e-3,query=true,off=false,none=null,mode=delta,tag=0.5x")
    assert spec.name == "knn-ucb"
    assert spec.params == {
        "k": 10,
        "alpha": 0.5,
        "eps": 0.001,
        "query": True,
        "off": False,
        "none": None,
        "mode": "delta",
        "tag": "0.5x",
    }
    assert isinstance(spec.params["k"], int)
    assert spec.text == "knn-ucb:k=10,alpha=0.5,eps=1e-3,query=true,off=false,none=null,mode=delta,tag=0.5x"


def test_bare_name_and_bad_items() -> None:
    assert parse_spec("linucb").params == {}
    assert parse_spec("linucb:").params == {}
    for bad in ("linucb:alpha", ":alpha=1", "linucb:alpha=1,alpha=2", "linucb:=3"):
        with pytest.raises(PolicyConfigError):
            parse_spec(bad)


def test_lambda_goes_to_cost_aware_policies_only_and_never_over_their_spec(monkeypatch) -> None:
    register(monkeypatch, "aware", always(lambda: Decision(arms=[])), cls=CostAwareScripted)
    assert hyperparameters(parse_spec("aware"), 20.0) == {"cost_weight": 20.0}
    assert hyperparameters(parse_spec("aware:cost_weight=3"), 20.0) == {"cost_weight": 3}
    assert hyperparameters(parse_spec("aware:lambda=3"), 20.0) == {"cost_weight": 3}
    assert hyperparameters(parse_spec("linucb:alpha=2"), 20.0) == {"alpha": 2}
    policy = build_from_spec(parse_spec("aware"), ["a", "b"], 3, 7.0)
    assert policy.config == {"cost_weight": 7.0}
    assert policy.seed == 3


def test_unknown_policy_and_bad_hyperparameters_are_config_errors() -> None:
    with pytest.raises(PolicyConfigError, match="unknown policy"):
        build_from_spec(parse_spec("nope"), ["a"], 0, None)
    with pytest.raises(PolicyConfigError, match="alpha"):
        build_from_spec(parse_spec("linucb:alpha=-1"), ["a"], 0, None)


class _RecordedPak(PakUCB):
    """PAK-UCB that keeps every instance the harness builds (the registry's retrying factory over it)."""

    built: ClassVar[list[PakUCB]] = []
    __signature__ = inspect.signature(PakUCB)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _RecordedPak.built.append(self)


def test_bench_run_builds_pak_ucb_with_the_runs_horizon(monkeypatch, tmp_path: Path) -> None:
    models = [{"name": m, "usd_per_call": 0.01} for m in ("a", "b", "c")]
    rows = [
        {"id": f"p{i}", "prompt": f"p{i}", "rewards": {"a": 1, "b": 0, "c": 0}, "context": [1.0, float(i)]}
        for i in range(8)
    ]
    dataset = load_dataset(write_dataset(tmp_path / "d", models, rows, (0.0, 1.0), "eight prompts"))
    monkeypatch.setitem(POLICIES, "pak-ucb", retrying(_RecordedPak))
    _RecordedPak.built.clear()
    replay(dataset, dataset.contexts, [parse_spec("pak-ucb")], horizon=4, seeds=1, progress=False)
    assert {p.horizon for p in _RecordedPak.built} == {4}
    # eta = sqrt(2 ln(2 T G / 0.05)) with T = 4, G = 3: sqrt(2 ln 480) = sqrt(12.3475722) = 3.5139112
    assert _RecordedPak.built[-1].bonus_weight(3) == pytest.approx(3.5139112, abs=1e-7)


def test_horizon_reaches_policies_that_take_one_and_never_over_their_spec() -> None:
    assert hyperparameters(parse_spec("pak-ucb"), None, horizon=300) == {"horizon": 300}
    assert hyperparameters(parse_spec("pak-ucb:horizon=50"), None, horizon=300) == {"horizon": 50}
    assert hyperparameters(parse_spec("c2mab-v"), None, horizon=300)["horizon"] == 300
    assert "horizon" not in hyperparameters(parse_spec("linucb"), None, horizon=300)
    assert hyperparameters(parse_spec("pak-ucb"), None) == {}  # no run length known: the policy's default
    assert build_from_spec(parse_spec("pak-ucb"), ["a", "b"], 0, None).config["horizon"] == 10_000
