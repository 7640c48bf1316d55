"""LinUCB against hand-computed values, and its state round trip."""

from __future__ import annotations

import math

import numpy as np
import pytest

from routers.base import Context, Observation, PolicyConfigError, decode_state, encode_state
from routers.linear import LinUCB
from routers.registry import build_policy, restore_policy


def test_index_matches_hand_computation() -> None:
    # d = 2, ridge 1, alpha 2. Arm "a" saw x1 = (1, 0) with reward 1 and x2 = (0, 1) with reward 0.5.
    # A = I + x1 x1^T + x2 x2^T = 2 I, A^-1 = I / 2, b = (1, 0.5), theta = (0.5, 0.25).
    # For x = (0.6, 0.8): estimate = 0.3 + 0.2 = 0.5; x^T A^-1 x = 0.5; bonus = 2 * sqrt(0.5).
    policy = LinUCB(arms=["a", "b"], alpha=2.0, ridge=1.0, dim=2)
    policy.update(Observation(embedding=np.array([1.0, 0.0]), arm="a", reward=1.0))
    policy.update(Observation(embedding=np.array([0.0, 1.0]), arm="a", reward=0.5))
    scores = policy.explain("a", np.array([0.6, 0.8]))
    assert scores["estimate"] == pytest.approx(0.5, abs=1e-12)
    assert scores["bonus"] == pytest.approx(2 * math.sqrt(0.5), abs=1e-12)
    # Untouched arm "b": A = I, estimate 0, bonus = alpha * ||x|| = 2.
    assert policy.explain("b", np.array([0.6, 0.8]))["bonus"] == pytest.approx(2.0)
    decision = policy.select(Context(embedding=np.array([0.6, 0.8], dtype=np.float32)))
    assert decision.arms == ["b"]  # 2.0 > 0.5 + 1.414


def test_sherman_morrison_equals_direct_inverse() -> None:
    rng = np.random.default_rng(0)
    policy = LinUCB(arms=["a"], ridge=0.5, dim=5)
    xs = rng.normal(size=(40, 5))
    for x in xs:
        policy.update(Observation(embedding=x, arm="a", reward=float(rng.random())))
    direct = np.linalg.inv(0.5 * np.eye(5) + xs.T @ xs)
    assert np.allclose(policy._a_inv["a"], direct, atol=1e-10)


def test_learns_a_linear_problem() -> None:
    rng = np.random.default_rng(1)
    theta = {"a": np.array([1.0, 0.0, 0.0]), "b": np.array([0.0, 1.0, 0.0])}
    policy = LinUCB(arms=["a", "b"], alpha=0.5, seed=1)
    correct = 0
    for t in range(600):
        x = rng.normal(size=3)
        x /= np.linalg.norm(x)
        arm = policy.select(Context(embedding=x)).arms[0]
        best = max(theta, key=lambda a: float(theta[a] @ x))
        correct += int(t >= 300 and arm == best)
        policy.update(Observation(embedding=x, arm=arm, reward=float(theta[arm] @ x + rng.normal(0, 0.05))))
    assert correct / 300 > 0.85


def test_state_round_trip_reproduces_selections() -> None:
    rng = np.random.default_rng(2)
    policy = build_policy("linucb", ["a", "b", "c"], seed=3, hyperparameters={"alpha": 0.7})
    for _ in range(50):
        x = rng.normal(size=4).astype(np.float32)
        arm = policy.select(Context(embedding=x)).arms[0]
        policy.update(Observation(embedding=x, arm=arm, reward=float(x[0] > 0)))
    restored = restore_policy(decode_state(encode_state(policy.state_dict())))
    for _ in range(30):
        x = rng.normal(size=4).astype(np.float32)
        a, b = policy.select(Context(embedding=x)), restored.select(Context(embedding=x))
        assert a.arms == b.arms and a.scores == b.scores


def test_arms_come_and_go() -> None:
    policy = LinUCB(arms=["a"], dim=2)
    policy.add_arm("b")
    assert policy.select(Context(embedding=np.array([1.0, 0.0]), arms=["b"])).arms == ["b"]
    policy.remove_arm("a")
    assert policy.arms == ["b"]
    assert policy.select(Context(embedding=np.array([1.0, 0.0]), tried=["b"])).arms == []


@pytest.mark.parametrize("bad", [{"alpha": -1}, {"ridge": 0}, {"dim": 0}, {"nope": 1}])
def test_bad_hyperparameters_are_named(bad: dict[str, float]) -> None:
    with pytest.raises(PolicyConfigError) as info:
        build_policy("linucb", ["a"], 0, bad)
    assert next(iter(bad)) in str(info.value)
