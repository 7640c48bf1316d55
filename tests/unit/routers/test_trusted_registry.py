"""The trusted-routing keys reach every single-choice policy through the registry and bench specs."""

from __future__ import annotations

import numpy as np
import pytest

from bench.policy_spec import build_from_spec, parse_spec, takes_horizon
from routers.base import Context, Observation, PolicyConfigError, decode_state, encode_state
from routers.conservative import Conservative
from routers.cost_aware import CostAware
from routers.registry import build_policy, restore_policy

INDEXED = ("linucb", "knn-ucb", "balrog", "pak-ucb", "greedy", "eps-greedy", "thompson")
X = np.array([0.6, 0.8], dtype=np.float32)
PRICES = {"a": 0.01, "b": 0.002}


@pytest.mark.parametrize("name", INDEXED)
def test_every_indexed_policy_takes_both_wrappers_and_round_trips(name: str) -> None:
    hyper = {"cost_target": 0.005, "incumbent": "a", "max_loss": 0.1}
    policy = build_policy(name, ["a", "b"], seed=1, hyperparameters=hyper)
    assert isinstance(policy, Conservative) and isinstance(policy.inner, CostAware)
    assert policy.name == name
    rng = np.random.default_rng(0)
    for t in range(30):
        decision = policy.select(Context(embedding=X, costs=PRICES, rng=np.random.default_rng(t)))
        arm = decision.arms[0]
        assert "conservative_margin" in decision.info
        policy.update(Observation(embedding=X, arm=arm, reward=float(rng.random() < 0.5), cost=PRICES[arm]))
    restored = restore_policy(decode_state(encode_state(policy.state_dict())))
    assert restored.state_dict()["conservative"] == policy.state_dict()["conservative"]
    assert restored.state_dict()["inner"]["cost"] == policy.state_dict()["inner"]["cost"]
    context = Context(embedding=X, costs=PRICES, rng=np.random.default_rng(99))
    assert restored.select(context).arms == policy.select(context).arms


@pytest.mark.parametrize("name", ["random", "always"])
def test_policies_without_an_index_still_take_the_conservative_wrapper(name: str) -> None:
    hyper = {"incumbent": "a", **({"model": "b"} if name == "always" else {})}
    policy = build_policy(name, ["a", "b"], seed=0, hyperparameters=hyper)
    decision = policy.select(Context(embedding=X, costs=PRICES))
    assert decision.arms == ["a"] and "conservative_margin" in decision.info


def test_without_the_keys_the_plain_policy_and_state_are_unchanged() -> None:
    policy = build_policy("knn-ucb", ["a", "b"], seed=0, hyperparameters={"cost_weight": 0})
    assert not isinstance(policy, CostAware | Conservative)
    assert "cost" not in policy.state_dict()


def test_bench_specs_build_the_wrapped_policies() -> None:
    policy = build_from_spec(parse_spec("knn-ucb:cost_target=0.002"), ["a", "b"], 0, None)
    assert isinstance(policy, CostAware) and policy.pacer is not None and policy.pacer.target == 0.002
    safe = build_from_spec(parse_spec("linucb:incumbent=a,max_loss=0.05,lambda=2"), ["a", "b"], 0, None)
    assert isinstance(safe, Conservative) and safe.alpha == 0.05 and safe.incumbent == "a"
    assert isinstance(safe.inner, CostAware) and safe.inner.multiplier == 2.0
    assert takes_horizon("pak-ucb") and takes_horizon("balrog")  # horizon still reaches wrapped classes
    paced = build_from_spec(parse_spec("pak-ucb:cost_target=0.01"), ["a", "b"], 0, None, horizon=500)
    assert isinstance(paced, CostAware) and paced.inner.config["horizon"] == 500  # type: ignore[attr-defined]


def test_a_lone_wrapper_key_applies_its_wrapper_and_is_validated() -> None:
    with pytest.raises(PolicyConfigError, match="delta"):
        build_policy("greedy", ["a", "b"], hyperparameters={"delta": 2.0})
    with pytest.raises(PolicyConfigError, match="cost_confidence"):
        build_policy("greedy", ["a", "b"], hyperparameters={"cost_confidence": -1.0})
    safe = build_policy("greedy", ["a", "b"], hyperparameters={"max_loss": 0.05, "incumbent": None})
    assert isinstance(safe, Conservative) and safe.incumbent is None


def test_a_wrapped_state_carries_the_routers_hyperparameters_and_seed_where_a_plain_one_does() -> None:
    """An imported state sets the router's hyperparameters from state["config"]: rebuilt from them, the
    router has the same wrappers and settings."""
    hyper = {"cost_target": 0.005, "incumbent": "a", "k_max": 8}
    policy = build_policy("balrog", ["a", "b"], seed=7, hyperparameters=hyper)
    state = policy.state_dict()
    assert state["seed"] == 7
    assert state["config"]["cost_target"] == 0.005 and state["config"]["incumbent"] == "a"
    assert state["config"]["k_max"] == 8 and "max_queries" in state["config"]  # the inner's, defaults filled
    rebuilt = build_policy("balrog", ["a", "b"], seed=state["seed"], hyperparameters=state["config"])
    assert isinstance(rebuilt, Conservative) and isinstance(rebuilt.inner, CostAware)
    assert rebuilt.config == policy.config
