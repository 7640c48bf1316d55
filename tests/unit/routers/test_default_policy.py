"""``default`` in the registry builds exactly what a router created without a policy stores."""

from __future__ import annotations

import numpy as np
import pytest

from bench.policy_spec import build_from_spec, parse_spec
from routers import default
from routers.base import Context, Observation, PolicyConfigError
from routers.registry import build_policy, restore_policy

ARMS = ["cheap", "dear"]
COSTS = {"cheap": 0.001, "dear": 0.01}


def _play(policy, rounds: int = 60) -> list[str]:
    rng = np.random.default_rng(0)
    picks = []
    for _ in range(rounds):
        x = rng.normal(size=4)
        arm = policy.select(Context(embedding=x, costs=COSTS)).arms[0]
        picks.append(arm)
        reward = float(rng.random() < (0.8 if arm == "dear" else 0.7))
        policy.update(Observation(embedding=x, arm=arm, reward=reward, cost=COSTS[arm]))
    return picks


@pytest.mark.parametrize("given", [{}, {"cost_target": 0.004}, {"max_loss": 0.05, "incumbent": "dear"}])
def test_default_is_the_resolved_policy(given) -> None:
    name, hyper = default.resolve(given)
    assert name == default.POLICY and hyper == {**default.HYPERPARAMETERS, **given}
    built, concrete = build_policy("default", ARMS, 3, given), build_policy(name, ARMS, 3, hyper)
    assert built.state_dict()["policy"] == default.POLICY
    assert built.state_dict()["config"] == concrete.state_dict()["config"]
    assert _play(built) == _play(concrete)
    restored = restore_policy(built.state_dict())
    assert _play(restored, 20) == _play(built, 20)


def test_bench_spec_default_builds_the_same_policy_as_a_new_router() -> None:
    spec = build_from_spec(parse_spec("default:cost_target=0.004"), ARMS, 2, None, 500)
    name, hyper = default.resolve({"cost_target": 0.004})
    assert spec.state_dict()["config"] == build_policy(name, ARMS, 2, hyper).state_dict()["config"]


def test_a_null_drops_the_defaults_key_and_other_names_are_kept() -> None:
    assert default.resolve({k: None for k in default.HYPERPARAMETERS}) == (default.POLICY, {})
    assert default.resolve_named(None, {}) == default.resolve({})
    assert default.resolve_named("default", {"cost_target": 1.0}) == default.resolve({"cost_target": 1.0})
    assert default.resolve_named("linucb", {"alpha": 2}) == ("linucb", {"alpha": 2})


def test_bad_overrides_are_config_errors() -> None:
    with pytest.raises(PolicyConfigError, match="max_loss"):
        build_policy("default", ARMS, 0, {"max_loss": 1.5})
