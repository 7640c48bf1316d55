"""Policy specs: parsing, and --lambda reaching cost-aware policies as cost_weight."""

from __future__ import annotations

import pytest

from bench.policy_spec import build_from_spec, hyperparameters, parse_spec
from routers.base import Decision, PolicyConfigError
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
