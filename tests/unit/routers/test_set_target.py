"""``cost_target`` on the set policies: rho = target / scale, the scale fixed (routers/set_target.py)."""

from __future__ import annotations

import numpy as np
import pytest

from routers.base import Context, PolicyConfigError, decode_state, encode_state
from routers.registry import build_policy, restore_policy

X = np.array([1.0, 0.0], dtype=np.float32)
PRICES = {"a": 0.01, "b": 0.004, "c": 0.001}


@pytest.mark.parametrize("name", ["c2mab-v", "cucb", "eps-greedy-set", "thompson-set"])
def test_target_sets_the_budget_in_units_of_the_priciest_price(name: str) -> None:
    policy = build_policy(
        name, list(PRICES), seed=0, hyperparameters={"prices": PRICES, "cost_target": 0.002}
    )
    decision = policy.select(Context(embedding=X, costs=PRICES))
    # scale = max price = 0.01 USD; rho = 0.002 / 0.01 = 0.2 normalised units; declared USD = 0.002
    assert decision.info["budget"] == pytest.approx(0.2, abs=1e-15)
    assert decision.info["cost_scale"] == 0.01
    restored = restore_policy(decode_state(encode_state(policy.state_dict())))
    assert restored.budget == policy.budget  # type: ignore[attr-defined]


def test_the_usd_budget_survives_the_priciest_model_leaving() -> None:
    policy = build_policy(
        "c2mab-v", list(PRICES), seed=0, hyperparameters={"prices": PRICES, "cost_target": 0.002}
    )
    policy.remove_arm("a")
    decision = policy.select(Context(embedding=X, costs={k: v for k, v in PRICES.items() if k != "a"}))
    assert decision.info["budget"] * decision.info["cost_scale"] == pytest.approx(0.002, abs=1e-15)


def test_explicit_scale_and_usd_costs() -> None:
    scaled = build_policy(
        "c2mab-v", list(PRICES), hyperparameters={"cost_scale": 0.008, "cost_target": 0.002}
    )
    assert scaled.budget == 0.25  # type: ignore[attr-defined]
    usd = build_policy(
        "c2mab-v", list(PRICES), hyperparameters={"cost_normalization": "none", "cost_target": 0.002}
    )
    assert usd.budget == 0.002  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("hyper", "message"),
    [
        ({"cost_target": 0.002}, "needs prices or cost_scale"),
        ({"cost_target": 0.002, "prices": PRICES, "budget": 0.3}, "not both"),
        ({"cost_target": -1.0, "prices": PRICES}, "cost_target"),
    ],
)
def test_bad_targets_are_config_errors(hyper: dict, message: str) -> None:
    with pytest.raises(PolicyConfigError, match=message):
        build_policy("c2mab-v", list(PRICES), hyperparameters=hyper)


def test_without_a_target_the_set_policy_is_unchanged() -> None:
    policy = build_policy("c2mab-v", list(PRICES), seed=0)
    assert policy.budget == 0.45 and policy.cost_scale is None  # type: ignore[attr-defined]
