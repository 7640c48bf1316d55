"""BALROG's active learning: each trigger, the running-quantile calibration, the budget, partial queries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from routers.base import Context, Observation, PolicyConfigError, decode_state, encode_state
from routers.knn_ucb import Balrog
from routers.registry import build_policy, restore_policy

ARMS = ["a", "b", "c"]


def _x(rng: np.random.Generator) -> np.ndarray:
    x = rng.normal(size=3).astype(np.float32)
    return x / np.linalg.norm(x)


def _reward(arm: str, x: np.ndarray, rng: np.random.Generator) -> float:
    p = {"a": 0.9 if x[0] > 0 else 0.1, "b": 0.5, "c": 0.3}[arm]
    return float(rng.random() < p)


def _play(policy: Balrog, rounds: int, seed: int = 0) -> list[tuple[str, list[str]]]:
    """Select, report g_t as bandit feedback and the queried models as query feedback."""
    rng = np.random.default_rng(seed)
    log = []
    for _ in range(rounds):
        x = _x(rng)
        d = policy.select(Context(embedding=x))
        log.append((d.arms[0], list(d.query)))
        policy.update(Observation(embedding=x, arm=d.arms[0], reward=_reward(d.arms[0], x, rng)))
        for other in d.query:
            policy.update(Observation(embedding=x, arm=other, reward=_reward(other, x, rng), kind="query"))
    return log


def test_knn_ucb_never_queries_and_balrog_defaults() -> None:
    knn = build_policy("knn-ucb", ARMS)
    assert not hasattr(knn, "budget") and getattr(knn, "trigger", "none") == "none"
    balrog = build_policy("balrog", ARMS)
    assert balrog.config["trigger"] == "delta" and balrog.config["budget"] == 0.2


def test_delta_trigger_fixed_threshold_fires_below() -> None:
    policy = Balrog(arms=["a", "b"], threshold=0.3, budget=1.0, max_queries=100)
    x = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    for arm, y in (("a", 1.0), ("b", 1.0)):
        policy.update(Observation(embedding=x, arm=arm, reward=y))
    d = policy.select(Context(embedding=x))  # both arms: one point at distance 0, same reward: gap 0
    assert d.info["trigger_value"] == pytest.approx(0.0)
    assert d.query == ["b" if d.arms == ["a"] else "a"]  # the other model, never g_t itself
    policy.update(Observation(embedding=x, arm="b", reward=0.0))
    policy.update(Observation(embedding=x, arm="a", reward=1.0))
    d = policy.select(Context(embedding=x))
    gap = abs(d.scores["a"]["index"] - d.scores["b"]["index"])
    assert d.info["trigger_value"] == pytest.approx(gap)
    assert (d.query != []) == (gap < 0.3)


def test_delta_gap_of_estimates_flag() -> None:
    policy = Balrog(arms=["a", "b"], gap="estimate", threshold=0.3, budget=1.0, max_queries=10)
    x = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    for arm, y in (("a", 1.0), ("a", 1.0), ("b", 0.0)):
        policy.update(Observation(embedding=x, arm=arm, reward=y))
    d = policy.select(Context(embedding=x))
    assert d.info["trigger_value"] == pytest.approx(1.0)  # f_a - f_b = 1 - 0
    assert d.query == []


def test_no_delta_query_while_fewer_than_two_arms_are_warm() -> None:
    policy = Balrog(arms=ARMS, threshold=1e9, budget=1.0, max_queries=100)
    x = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    policy.update(Observation(embedding=x, arm="a", reward=1.0))
    d = policy.select(Context(embedding=x))
    assert d.info["trigger_value"] is None and d.query == []


def test_running_quantile_thresholds() -> None:
    rng = np.random.default_rng(0)
    for trigger, value, expect in (
        ("delta", 20.0, True),
        ("delta", 21.0, False),
        ("ucb", 81.0, True),
        ("ucb", 80.0, False),
    ):
        policy = Balrog(arms=ARMS, trigger=trigger, budget=0.2)
        policy._values = [float(v) for v in range(1, 101)]
        policy.t, policy.queries = 101, 20  # on budget: q = 2 * 0.2 - 20 / 100 = 0.2
        # 0.2-quantile of 1..100 is 20.8 (delta fires below), 0.8-quantile 80.2 (ucb fires above)
        assert policy.fires(value, rng) is expect
    policy = Balrog(arms=ARMS, budget=0.2)
    policy._values = [5.0] * 9
    assert policy.fires(1e6, rng)  # fewer than 10 values seen: fires (the budget still caps it)
    policy._values = [float(v) for v in range(1, 101)]
    policy.t, policy.queries = 101, 10  # behind budget: q = 0.4 - 0.1 = 0.3 (quantile 30.7)
    assert policy.quantile_level() == pytest.approx(0.3) and policy.fires(30.0, rng)


def test_delta_calibration_hits_the_budget_rate() -> None:
    policy = Balrog(arms=ARMS, budget=0.2, seed=1)
    log = _play(policy, 500)
    rate = sum(bool(q) for _, q in log) / 500
    assert 0.12 <= rate <= 0.2  # running budget-quantile: about 20% of rounds, never above the rate cap


def test_rate_cap_without_horizon_and_hard_cap_with_it() -> None:
    policy = Balrog(arms=ARMS, trigger="random", budget=0.5, seed=2)
    rng = np.random.default_rng(0)
    for t in range(1, 201):
        policy.select(Context(embedding=_x(rng)))  # no feedback: the budget is consumed at decision time
        assert policy.queries <= 0.5 * t
    assert policy.queries >= 80
    capped = Balrog(arms=ARMS, trigger="random", budget=0.5, horizon=40, seed=2)
    for _ in range(200):
        capped.select(Context(embedding=_x(rng)))
    assert capped.queries == 20  # floor(0.5 * 40)


def test_warm_start_trigger_front_loads_the_budget() -> None:
    policy = Balrog(arms=ARMS, trigger="warm", max_queries=5)
    log = _play(policy, 30)
    assert [bool(q) for _, q in log] == [True] * 5 + [False] * 25
    with pytest.raises(PolicyConfigError, match="warm"):
        Balrog(arms=ARMS, trigger="warm")


def test_random_trigger_rate() -> None:
    policy = Balrog(arms=ARMS, trigger="random", budget=0.1, max_queries=10_000, seed=3)
    log = _play(policy, 1000)
    rate = sum(bool(q) for _, q in log) / 1000
    assert abs(rate - 0.1) < 0.03  # binomial sd 0.0095: 3 sd


def test_variance_trigger_uses_the_chosen_arms_neighbours() -> None:
    policy = Balrog(arms=["a"], trigger="variance", threshold=0.2, budget=1.0, max_queries=10, preset="paper")
    x = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    for y in (0.0, 1.0, 0.0, 1.0):
        policy.update(Observation(embedding=x, arm="a", reward=y))
    d = policy.select(Context(embedding=x))
    k = int(d.scores["a"]["k"])
    assert k == 4  # all at distance 0; U decreasing in k
    assert d.info["trigger_value"] == pytest.approx(0.25)  # var(0, 1, 0, 1), ddof = 0
    assert d.query == []  # one arm: nothing else to ask


def test_ucb_trigger_value_is_the_largest_warm_bonus() -> None:
    policy = Balrog(arms=ARMS, trigger="ucb", threshold=0.0, budget=1.0, max_queries=10)
    _play(policy, 20)
    d = policy.select(Context(embedding=np.array([0.0, 1.0, 0.0], dtype=np.float32)))
    assert d.info["trigger_value"] == pytest.approx(max(s["bonus"] for s in d.scores.values()))


def test_partial_queries_reveal_k_models() -> None:
    policy = Balrog(arms=["a", "b", "c", "d"], trigger="warm", max_queries=50, query_k=2)
    log = _play_four(policy)
    assert all(len(q) == 1 and q[0] != g for g, q in log[:50])


def _play_four(policy: Balrog) -> list[tuple[str, list[str]]]:
    rng = np.random.default_rng(0)
    log = []
    for _ in range(60):
        x = _x(rng)
        d = policy.select(Context(embedding=x))
        log.append((d.arms[0], d.query))
        policy.update(Observation(embedding=x, arm=d.arms[0], reward=float(rng.random())))
        for other in d.query:
            policy.update(Observation(embedding=x, arm=other, reward=float(rng.random()), kind="query"))
    return log


def test_queries_feed_every_revealed_arm() -> None:
    policy = Balrog(arms=ARMS, trigger="warm", max_queries=10)
    _play(policy, 10)
    assert sum(policy.size(a) for a in ARMS) == 30  # 10 rounds x 3 revealed rewards, g_t stored once


def test_state_round_trip_reproduces_selections_and_queries() -> None:
    policy = build_policy("balrog", ARMS, seed=4, hyperparameters={"hnsw_at": 50})
    _play(policy, 150, seed=1)
    restored = restore_policy(decode_state(encode_state(policy.state_dict())))
    assert isinstance(restored, Balrog) and restored.queries == policy.queries
    assert _play(policy, 60, seed=2) == _play(restored, 60, seed=2)
    assert math.isfinite(restored.t) and restored.t == policy.t


def test_the_callers_counts_set_t_and_the_spent_budget() -> None:
    """With ``Context.decisions_before`` / ``query_rounds_before`` (the gateway's log) the round t and
    the budget spent are the loaded state's plus those counts, whatever this object selected before."""
    policy = Balrog(arms=["a", "b"], trigger="warm", max_queries=3)
    x = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    d = policy.select(Context(embedding=x, decisions_before=41, query_rounds_before=2))
    assert d.info["t"] == 42 and d.query and d.info["queries"] == 3
    d = policy.select(Context(embedding=x, decisions_before=42, query_rounds_before=3))
    assert d.info["t"] == 43 and d.query == [] and d.info["queries"] == 3  # the cap of 3 is spent
    # a state taken at t = 43 and 3 queries (an export) is the base the counts add to after an import
    restored = restore_policy(decode_state(encode_state(policy.state_dict())))
    d = restored.select(Context(embedding=x, decisions_before=0, query_rounds_before=0))
    assert d.info["t"] == 44 and d.query == []
    # without the counts the policy counts its own selects (the simulator)
    fresh = Balrog(arms=["a", "b"], trigger="warm", max_queries=1)
    assert [fresh.select(Context(embedding=x)).info["t"] for _ in range(3)] == [1, 2, 3]
    assert fresh.queries == 1


def test_a_reselect_with_tried_is_not_a_new_decision() -> None:
    """A cascade's next step (``Context.tried`` non-empty) advances neither t, nor the query budget, nor
    the trigger's calibration values, and asks for no query."""
    policy = Balrog(arms=ARMS, seed=0, max_queries=100)
    _play(policy, 40)
    t, queries, values = policy.t, policy.queries, list(policy._values)
    x = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    for tried in (["a"], ["a", "b"], ["c"]):
        d = policy.select(Context(embedding=x, tried=tried))
        assert d.info["t"] == t and d.query == [] and d.arms[0] not in tried
    assert (policy.t, policy.queries, policy._values) == (t, queries, values)
    assert policy.select(Context(embedding=x)).info["t"] == t + 1  # the next prompt is round t + 1
    # with the caller's counts, a re-select is scored at its decision's round and sets no counter
    t, queries, values = policy.t, policy.queries, list(policy._values)
    d = policy.select(Context(embedding=x, tried=["a"], decisions_before=7, query_rounds_before=5))
    assert d.info["t"] == 8 and d.query == []
    assert (policy.t, policy.queries, policy._values) == (t, queries, values)


def test_a_warm_trigger_does_not_spend_its_budget_on_reselects() -> None:
    policy = Balrog(arms=ARMS, seed=0, trigger="warm", max_queries=2)
    x = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    first = policy.select(Context(embedding=x))
    assert first.query and policy.queries == 1
    for _ in range(3):
        assert policy.select(Context(embedding=x, tried=first.arms)).query == []
    assert policy.queries == 1
    assert policy.select(Context(embedding=x)).query  # the second query of the budget is still there
