"""Cost as an objective: the cost-adjusted index, the pacing multiplier, its
replica consistency, and pacing to a target on a synthetic three-arm problem."""

from __future__ import annotations

import math

import numpy as np
import pytest

from routers.base import Context, Observation, PolicyConfigError, decode_state, encode_state
from routers.cost_aware import CostAware
from routers.pacing import CostEstimates, DualPacer
from routers.registry import build_policy, restore_policy
from tests.unit.routers.trusted_sim import X, play


def _obs(arm: str, reward: float | None, cost: float | None, kind: str = "bandit") -> Observation:
    return Observation(embedding=X, arm=arm, reward=reward, cost=cost, kind=kind)  # type: ignore[arg-type]


def test_multiplier_first_three_steps_follow_the_projected_dual_step() -> None:
    # target 0.25, pacing_rate 0.0625: eta = 0.0625 / 0.25^2 = 1, so lambda <- max(0, lambda + (c - 0.25)).
    pacer = DualPacer(target=0.25, pacing_rate=0.0625)
    assert pacer.eta == 1.0
    seen = []
    for cost in (0.75, 0.0, 0.125):
        pacer.update(_obs("a", 1.0, cost))
        seen.append(pacer.multiplier)
    assert seen == [0.5, 0.25, 0.125]  # 0 + 0.5; 0.5 - 0.25; 0.25 - 0.125
    pacer.update(_obs("a", 1.0, 0.0))  # 0.125 - 0.25 < 0: projected onto the floor
    assert pacer.multiplier == 0.0
    pacer.update(_obs("b", 1.0, 0.5, kind="query"))  # more spend of a counted request: + eta c
    assert pacer.multiplier == 0.5
    pacer.update(_obs("a", 1.0, None))  # no cost: no step
    assert (pacer.multiplier, pacer.requests, pacer.spent) == (0.5, 4, 1.375)


def test_cost_weight_is_the_initial_value_and_floor_of_the_multiplier() -> None:
    pacer = DualPacer(target=0.25, pacing_rate=0.0625, floor=0.375)
    assert pacer.multiplier == 0.375
    pacer.update(_obs("a", 1.0, 0.75))
    assert pacer.multiplier == 0.875
    for _ in range(3):
        pacer.update(_obs("a", 1.0, 0.0))
    assert pacer.multiplier == 0.375  # 0.875 - 0.25 - 0.25 = 0.375, then floored


def test_the_wrapper_plays_the_multiplier_it_folded() -> None:
    policy = build_policy(
        "greedy", ["a", "b"], seed=0, hyperparameters={"cost_target": 0.25, "pacing_rate": 0.0625}
    )
    for cost in (0.75, 0.0, 0.125):
        policy.update(_obs("a", 1.0, cost))
    decision = policy.select(Context(embedding=X, costs={"a": 0.5, "b": 0.5}))
    assert decision.info["cost_multiplier"] == 0.125


def test_adjusted_index_is_the_index_minus_lambda_times_the_price() -> None:
    policy = build_policy("greedy", ["cheap", "dear"], seed=0, hyperparameters={"cost_weight": 10.0})
    for arm, reward in (("cheap", 1.0), ("cheap", 0.0), ("dear", 1.0), ("dear", 1.0)):
        policy.update(_obs(arm, reward, None))
    decision = policy.select(Context(embedding=X, costs={"cheap": 0.01, "dear": 0.08}))
    # cheap: 0.5 - 10 * 0.01 = 0.4; dear: 1.0 - 10 * 0.08 = 0.2; greedy alone would pick dear
    assert decision.arms == ["cheap"]
    assert decision.scores["cheap"]["cost_term"] == pytest.approx(0.1, abs=1e-15)
    assert decision.scores["cheap"]["adjusted_index"] == pytest.approx(0.4, abs=1e-15)
    assert decision.scores["dear"]["adjusted_index"] == pytest.approx(0.2, abs=1e-15)
    assert decision.scores["dear"]["index"] == 1.0
    assert decision.info["cost_multiplier"] == 10.0
    cheaper_dear = policy.select(Context(embedding=X, costs={"cheap": 0.01, "dear": 0.05}))
    assert cheaper_dear.arms == ["dear"]  # 1.0 - 0.5 = 0.5 > 0.4


def test_an_unpriced_arm_costs_its_optimistic_lower_bound() -> None:
    estimates = CostEstimates(confidence=1.0)
    assert estimates.lower_bound("a") == 0.0
    estimates.update(_obs("a", None, 0.25))
    assert estimates.lower_bound("a") == 0.0  # one cost: no spread yet, optimistic 0
    estimates.update(_obs("a", None, 0.75))
    # mean 0.5, sample sd sqrt(0.125), sd / sqrt(2) = 0.25: LCB = 0.5 - 1 * 0.25
    assert estimates.lower_bound("a") == pytest.approx(0.25, abs=1e-15)
    policy = build_policy(
        "greedy", ["a", "b"], seed=0, hyperparameters={"cost_weight": 1.0, "cost_confidence": 1.0}
    )
    for cost in (0.25, 0.75):
        policy.update(_obs("a", 1.0, cost))
    policy.update(_obs("b", 0.9, 0.0))
    decision = policy.select(Context(embedding=X, costs={"b": 0.0}))  # a has no price in this context
    assert decision.scores["a"]["cost"] == pytest.approx(0.25, abs=1e-15)
    assert decision.arms == ["b"]  # a: 1 - 0.25 = 0.75 < b: 0.9


def test_ties_of_the_adjusted_index_are_broken_with_the_contexts_generator() -> None:
    policy = build_policy("greedy", ["a", "b"], seed=0, hyperparameters={"cost_weight": 1.0})
    policy.update(_obs("a", 1.0, None))
    policy.update(_obs("b", 0.5, None))
    picks = {
        policy.select(Context(embedding=X, costs={"a": 0.5, "b": 0.0}, rng=np.random.default_rng(s))).arms[0]
        for s in range(20)
    }
    assert picks == {"a", "b"}  # both adjusted indexes are 0.5


def test_state_round_trip_plays_the_same_multiplier_and_choices() -> None:
    hyper = {"cost_target": 0.004, "alpha": 0.5}
    policy = build_policy("linucb", ["cheap", "dear"], seed=3, hyperparameters=hyper)
    prices = {"cheap": 0.001, "dear": 0.01}
    play(policy, {"cheap": 0.5, "dear": 0.8}, prices, 200, seed=1)
    policy.update(_obs("dear", 1.0, 0.01))  # an overspend: lambda > 0 whatever it was
    restored = restore_policy(decode_state(encode_state(policy.state_dict())))
    assert isinstance(restored, CostAware)
    assert restored.multiplier == policy.multiplier > 0  # type: ignore[attr-defined]
    for s in range(10):
        context = Context(embedding=X, costs=prices, rng=np.random.default_rng(s))
        assert restored.select(context).arms == policy.select(context).arms


def test_replicas_that_served_different_selects_play_the_same_multiplier() -> None:
    prices = {"cheap": 0.001, "dear": 0.01}
    one = build_policy("thompson", list(prices), seed=0, hyperparameters={"cost_target": 0.004})
    two = build_policy("thompson", list(prices), seed=0, hyperparameters={"cost_target": 0.004})
    rng = np.random.default_rng(0)
    for t in range(50):
        for _ in range(t % 3):  # replica one serves extra decisions that another replica's events answer
            one.select(Context(embedding=X, costs=prices))
        arm = "dear" if t % 4 == 0 else "cheap"
        observation = _obs(arm, float(rng.random() < 0.6), prices[arm])
        one.update(observation)
        two.update(observation)
        assert one.multiplier == two.multiplier  # type: ignore[attr-defined]
    assert one.state_dict()["cost"] == two.state_dict()["cost"]
    assert one.multiplier > 0  # type: ignore[attr-defined]


MEANS = {"cheap": 0.5, "mid": 0.55, "dear": 0.85}
PRICES = {"cheap": 0.001, "mid": 0.006, "dear": 0.01}
TARGET = 0.004


def test_pacing_holds_the_target_and_beats_the_cheap_and_random_mixes() -> None:
    """Cheap weak arm, a dominated middle arm, a dear strong arm; target 0.004 USD per request.

    The best mix at the target plays dear a third of the time: reward 0.5 + 0.35 / 3 = 0.6167. The
    cheapest arm alone earns 0.5 (cost 0.001); uniform random over the three arms costs 0.017 / 3, so
    mixed with the cheapest arm down to the target (weight v = 0.003 / (0.017/3 - 0.001) = 0.643) it
    earns 0.5 + v (1.9/3 - 0.5) = 0.5857. Thompson sampling (Beta prior) under the pacer must spend the
    target within 5% and earn more than that mix (by 0.01) and than the cheapest arm (by 0.05).
    """
    uniform_cost = sum(PRICES.values()) / 3
    weight = (TARGET - PRICES["cheap"]) / (uniform_cost - PRICES["cheap"])
    random_mix = MEANS["cheap"] + weight * (sum(MEANS.values()) / 3 - MEANS["cheap"])
    assert random_mix == pytest.approx(0.5857, abs=1e-4)
    for seed in range(3):
        policy = build_policy(
            "thompson", list(MEANS), seed=seed, hyperparameters={"prior": "beta", "cost_target": TARGET}
        )
        run = play(policy, MEANS, PRICES, 5000, seed)
        spend = float(run.cost.mean())
        assert abs(spend - TARGET) <= 0.05 * TARGET, (seed, spend)
        assert float(run.reward.mean()) > random_mix + 0.01, (seed, run.reward.mean())
        assert float(run.reward.mean()) > MEANS["cheap"] + 0.05


def test_refuses_policies_without_an_index_and_cascades() -> None:
    with pytest.raises(PolicyConfigError, match="no per-arm index"):
        build_policy("random", ["a", "b"], hyperparameters={"cost_target": 0.01})
    with pytest.raises(PolicyConfigError, match="no per-arm index"):
        build_policy("always", ["a", "b"], hyperparameters={"model": "a", "cost_weight": 1.0})
    with pytest.raises(PolicyConfigError, match="cascade"):
        build_policy("pak-ucb", ["a", "b"], hyperparameters={"retry": True, "cost_weight": 1.0})


@pytest.mark.parametrize(
    ("hyper", "message"),
    [
        ({"cost_target": -0.01}, "cost_target"),
        ({"cost_target": 0.0}, "cost_target"),
        ({"cost_weight": -1.0}, "cost_weight"),
        ({"cost_weight": math.inf}, "cost_weight"),
        ({"cost_target": 0.01, "pacing_rate": 0}, "pacing_rate"),
        ({"cost_weight": 1.0, "cost_confidence": -1}, "cost_confidence"),
        ({"cost_target": 0.01, "theta": -1.0}, "theta"),  # the policy's own validation still runs
    ],
)
def test_bad_cost_hyperparameters_are_config_errors(hyper: dict[str, float], message: str) -> None:
    with pytest.raises(PolicyConfigError, match=message):
        build_policy("knn-ucb", ["a", "b"], hyperparameters=hyper)


def test_epsilon_greedy_exploration_steps_are_kept_as_they_are() -> None:
    policy = build_policy("eps-greedy", ["a", "b"], seed=0, hyperparameters={"eps": 1.0, "cost_weight": 5.0})
    decision = policy.select(Context(embedding=X, costs={"a": 1.0, "b": 0.0}))
    assert decision.info["explore"] is True
    assert decision.info["cost_adjusted"] is False


def test_balrog_queries_do_not_repeat_the_chosen_arm() -> None:
    policy = build_policy(
        "balrog",
        ["a", "b", "c"],
        seed=0,
        hyperparameters={"trigger": "warm", "max_queries": 10, "cost_weight": 100.0},
    )
    prices = {"a": 0.01, "b": 0.001, "c": 0.02}
    for arm in prices:
        policy.update(_obs(arm, 1.0, prices[arm]))
    decision = policy.select(Context(embedding=X, costs=prices))
    assert decision.arms == ["b"]  # equal rewards: the cheapest (BALROG alone picks c, queries a and b)
    assert decision.query == ["a"]


def test_a_gateway_style_cost_event_and_reward_event_count_one_request() -> None:
    """The gateway folds a call's cost as a reward-less bandit observation and the client's reward as a
    cost-less one: one request, one dual step."""
    pacer = DualPacer(target=0.25, pacing_rate=0.0625)
    pacer.update(_obs("a", None, 0.75))
    pacer.update(_obs("a", 1.0, None))
    assert (pacer.requests, pacer.multiplier) == (1, 0.5)


def test_a_fixed_cost_weight_does_not_move() -> None:
    policy = build_policy("greedy", ["a", "b"], seed=0, hyperparameters={"cost_weight": 3.0})
    for cost in (0.75, 0.0, 0.125):
        policy.update(_obs("a", 1.0, cost))
    assert policy.multiplier == 3.0  # type: ignore[attr-defined]
    assert policy.select(Context(embedding=X, costs={"a": 0.1, "b": 0.1})).info["cost_multiplier"] == 3.0


def _keyed(arm: str, cost: float | None, key: str, kind: str = "bandit") -> Observation:
    return Observation(embedding=X, arm=arm, reward=None, cost=cost, kind=kind, decision_key=key)  # type: ignore[arg-type]


def test_a_request_is_a_decision_key_whatever_the_kind_of_its_costs() -> None:
    """The gateway folds a BALROG probe's cost as a ``bandit`` observation of the same decision; a
    cascade's later steps share the key too. Target 0.25, eta 1: decision d1 costs 0.75 (answer), then
    0.25 (probe, kind bandit) and 0.125 (a cascade step): one request, lambda = 0.5 + 0.25 + 0.125."""
    pacer = DualPacer(target=0.25, pacing_rate=0.0625)
    pacer.update(_keyed("a", 0.75, "d1"))
    pacer.update(_keyed("b", 0.25, "d1"))
    pacer.update(_keyed("c", 0.125, "d1", kind="cascade-step"))
    assert (pacer.requests, pacer.multiplier, pacer.spent) == (1, 0.875, 1.125)
    pacer.update(_keyed("b", 0.0, "d2", kind="cascade-step"))  # a new key opens a request, any kind
    assert (pacer.requests, pacer.multiplier) == (2, 0.625)
    assert pacer.spend_per_request == 1.125 / 2


def test_the_remembered_keys_are_bounded_and_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("routers.pacing.REQUEST_MEMORY", 2)
    pacer = DualPacer(target=0.25, pacing_rate=0.0625)
    for key in ("d1", "d2", "d3"):
        pacer.update(_keyed("a", 0.25, key))
    assert list(pacer.recent) == ["d2", "d3"]
    copy = DualPacer(target=0.25, pacing_rate=0.0625)
    copy.load(pacer.state())
    copy.update(_keyed("a", 0.25, "d3"))  # still remembered: more spend, no request
    copy.update(_keyed("a", 0.25, "d1"))  # forgotten: counted again (the documented limit)
    assert (copy.requests, copy.multiplier) == (4, 0.25)
    legacy = {"multiplier": 0.5, "requests": 3, "spent": 1.0}  # a state saved before keys
    old = DualPacer(target=0.25, pacing_rate=0.0625)
    old.load(legacy)
    assert (old.multiplier, old.requests, list(old.recent)) == (0.5, 3, [])


def test_offline_log_rows_teach_the_cost_estimate_but_are_not_spend() -> None:
    """A warm-start row's cost was paid before the router existed: no dual step, no request, but the
    per-arm cost estimate learns it (mean 0.5, sd 0 over two rows: LCB = 0.5)."""
    pacer = DualPacer(target=0.25, pacing_rate=0.0625)
    estimates = CostEstimates()
    for _ in range(2):
        offline = _obs("a", 1.0, 0.5, kind="offline")
        pacer.update(offline)
        estimates.update(offline)
    assert (pacer.multiplier, pacer.requests, pacer.spent) == (0.0, 0, 0.0)
    assert estimates.lower_bound("a") == 0.5
