"""Safe exploration against the incumbent: the conservative check by hand, the
floor on an adversarial set, learning under the floor, the default incumbent, state and replicas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from routers.base import (
    Context,
    Observation,
    ObservationKind,
    Policy,
    PolicyConfigError,
    decode_state,
    encode_state,
)
from routers.conservative import Conservative
from routers.cost_aware import CostAware
from routers.registry import build_policy, restore_policy
from tests.unit.routers.trusted_sim import Run, X, play

PRICES = {"inc": 0.01, "x": 0.01}


def _fold(policy: Policy, arm: str, reward: float, kind: ObservationKind = "bandit") -> None:
    policy.update(Observation(embedding=X, arm=arm, reward=reward, cost=0.01, kind=kind))


def _small_case(max_loss: float) -> Policy:
    """Incumbent played 4 rounds (1, 1, 0, 1): R_0 = 3, n_0 = 4, m_0 = 0.75; x played once (1):
    R_S = 1, |S| = 1. delta = e^-2, so L = 2; rewards in [0, 1] (D = 1)."""
    policy = build_policy(
        "greedy",
        ["inc", "x"],
        seed=0,
        hyperparameters={"incumbent": "inc", "max_loss": max_loss, "delta": math.exp(-2)},
    )
    for reward in (1.0, 1.0, 0.0, 1.0):
        _fold(policy, "inc", reward)
    _fold(policy, "x", 1.0)
    return policy


# The small case by hand (greedy reports no bonus, so every bound is per model; L = 2, D = 1):
# incumbent n_0 = 4, m_0 = 0.75: UCB_0 = min(1, 0.75 + sqrt(2 / 8)) = 1; x n = 1, m = 1: LCB_x = 1 - 1 = 0.
# C_S = |S| UCB_0 = 1 (greedy scores no prompt at fold time). B = R_S + alpha R_0 - (1 - alpha) C_S.
# x's gain LCB_x - (1 - alpha) UCB_0 < 0: an exploratory round, also charged the realised deviation of the
# incumbent's reward on the |S| = 1 round off it, (1 - alpha) sqrt(|S| L / 2) = (1 - alpha).


def test_conservative_check_by_hand_forces_the_incumbent() -> None:
    # alpha = 0.1: B = 1 + 0.3 - 0.9 = 0.4; margin = 0.4 + (0 - 0.9) - 0.9 = -1.4
    decision = _small_case(0.1).select(Context(embedding=X, costs=PRICES))
    assert decision.info["proposed"] == "x"  # greedy prefers x (mean 1 > 0.75)
    assert decision.arms == ["inc"]
    assert decision.info["incumbent_forced"] is True
    assert decision.info["conservative_margin"] == pytest.approx(-1.4, abs=1e-12)


def test_conservative_check_by_hand_lets_a_safe_choice_through() -> None:
    # alpha = 0.5: B = 1 + 1.5 - 0.5 = 2; margin = 2 + (0 - 0.5) - 0.5 = 1
    decision = _small_case(0.5).select(Context(embedding=X, costs=PRICES))
    assert decision.arms == ["x"]
    assert decision.info["incumbent_forced"] is False
    assert decision.info["conservative_margin"] == pytest.approx(1.0, abs=1e-12)


def test_margin_when_the_policy_picks_the_incumbent_itself() -> None:
    policy = _small_case(0.1)
    _fold(policy, "x", 0.0)
    _fold(policy, "x", 0.0)  # x: mean 1/3 < 0.75, greedy picks inc
    decision = policy.select(Context(embedding=X, costs=PRICES))
    # |S| = 3, R_S = 1, C_S = 3 UCB_0 = 3: margin(a_0) = B = 1 + 0.3 - 0.9 * 3
    assert decision.arms == ["inc"]
    assert decision.info["incumbent_forced"] is False
    assert decision.info["conservative_margin"] == pytest.approx(1.3 - 2.7, abs=1e-12)


def test_query_and_offline_rewards_are_evidence_but_not_rounds() -> None:
    """Non-served kinds move the bounds (n_0, m_0, LCB_x) and never R_0, R_S or |S|."""
    policy = _small_case(0.5)
    _fold(policy, "inc", 0.0, kind="query")  # n_0 = 5, m_0 = 0.6: UCB_0 = min(1, 0.6 + sqrt(2 / 10)) = 1
    _fold(policy, "x", 1.0, kind="offline")  # n_x = 2, m_x = 1: LCB_x = 1 - sqrt(2 / 4)
    assert isinstance(policy, Conservative)
    assert policy.rounds("inc") == (4, 1)
    assert policy.model_bounds("x") == pytest.approx((1 - math.sqrt(0.5), 1.0), abs=1e-12)
    decision = policy.select(Context(embedding=X, costs=PRICES))
    # B = 1 + 1.5 - 0.5 = 2 (unchanged); gain = 1 - sqrt(0.5) - 0.5 < 0; margin = 2 + gain - 0.5
    expected = 2.0 + (1.0 - math.sqrt(0.5) - 0.5) - 0.5
    assert decision.info["conservative_margin"] == pytest.approx(expected, abs=1e-12)


def test_the_first_decisions_play_the_incumbent() -> None:
    policy = build_policy("thompson", ["inc", "x"], seed=0, hyperparameters={"incumbent": "inc"})
    decision = policy.select(Context(embedding=X, costs=PRICES))
    assert decision.arms == ["inc"]
    # nothing known: LCB = 0, UCB_0 = 1, B = 0: margin(x) = 0 - 0.98 < 0
    assert decision.info["conservative_margin"] <= 0


def test_default_incumbent_is_the_highest_priced_candidate() -> None:
    policy = build_policy("greedy", ["a", "b", "c"], seed=0, hyperparameters={"max_loss": 0.02})
    costs = {"a": 0.002, "b": 0.03, "c": 0.001}
    decision = policy.select(Context(embedding=X, costs=costs))
    assert decision.arms == ["b"]
    assert decision.info["incumbent"] == "b"
    restricted = policy.select(Context(embedding=X, costs=costs, arms=["a", "c"]))
    assert restricted.info["incumbent"] == "a"
    unpriced = policy.select(Context(embedding=X))
    assert unpriced.info["conservative"] == "no incumbent (no prices)"


# Terrible arms the wrapped policy wants to try first: with a better arm than the incumbent, and without.
BETTER_ARM = {"inc": 0.7, "good": 0.8, **{f"bad{i}": 0.05 for i in range(4)}}
NO_BETTER_ARM = {"inc": 0.7, "second": 0.6, **{f"bad{i}": 0.05 for i in range(8)}}
SPECS = [("thompson", {"prior": "beta"}), ("linucb", {})]


def _floor_kept(run: Run) -> bool:
    """router's cumulative reward >= 0.98 x the incumbent's (column 0) on the same prompts, t >= 100."""
    router, incumbent = np.cumsum(run.reward), np.cumsum(run.rewards[:, 0])
    return bool(np.all(router[99:] >= 0.98 * incumbent[99:]))


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("means", [BETTER_ARM, NO_BETTER_ARM], ids=["better-arm", "no-better-arm"])
def test_never_breaks_the_floor_on_an_adversarial_set(
    spec: tuple[str, dict], means: dict[str, float]
) -> None:
    """At every round t >= 100 of every seed: reward >= (1 - 0.02) x the incumbent's on the same prompts."""
    name, hyper = spec
    for seed in range(10):
        policy = build_policy(
            name, list(means), seed=seed, hyperparameters={**hyper, "incumbent": "inc", "max_loss": 0.02}
        )
        run = play(policy, means, dict.fromkeys(means, 0.01), 2000, seed)
        assert _floor_kept(run), (name, seed)
        assert run.forced.any()  # the check did bind: the policy proposed arms it was not allowed


def test_the_unwrapped_policy_breaks_that_floor() -> None:
    """The set is adversarial: without the wrapper, Thompson sampling falls below the floor on every seed."""
    for seed in range(10):
        policy = build_policy("thompson", list(NO_BETTER_ARM), seed=seed, hyperparameters={"prior": "beta"})
        run = play(policy, NO_BETTER_ARM, dict.fromkeys(NO_BETTER_ARM, 0.01), 300, seed)
        assert not _floor_kept(run), seed


def test_still_learns_the_better_arm_under_the_floor() -> None:
    """Thompson sampling under the check ends on the better arm (> 90% of the last 500 rounds) on at least
    9 of 10 seeds, rarely forced by then, and keeps the floor throughout."""
    ends_on_good = 0
    for seed in range(10):
        policy = build_policy(
            "thompson", list(BETTER_ARM), seed=seed, hyperparameters={"prior": "beta", "incumbent": "inc"}
        )
        run = play(policy, BETTER_ARM, dict.fromkeys(BETTER_ARM, 0.01), 4000, seed)
        assert _floor_kept(run), seed
        ends_on_good += np.mean(np.array(run.picks[-500:]) == "good") > 0.9
        assert run.forced[-500:].mean() < 0.05, seed
    assert ends_on_good >= 9


def test_composes_with_cost_and_round_trips() -> None:
    hyper = {"cost_target": 0.004, "incumbent": "dear", "max_loss": 0.05}
    means, prices = {"cheap": 0.6, "dear": 0.7}, {"cheap": 0.001, "dear": 0.01}
    policy = build_policy("linucb", list(means), seed=0, hyperparameters=hyper)
    assert isinstance(policy, Conservative) and isinstance(policy.inner, CostAware)
    play(policy, means, prices, 300, seed=2)
    restored = restore_policy(decode_state(encode_state(policy.state_dict())))
    assert isinstance(restored, Conservative) and isinstance(restored.inner, CostAware)
    assert restored.inner.multiplier == policy.inner.multiplier
    for s in range(10):
        context = Context(embedding=X, costs=prices, rng=np.random.default_rng(s))
        one, two = policy.select(context), restored.select(context)
        assert (one.arms, one.info["conservative_margin"]) == (two.arms, two.info["conservative_margin"])


def test_replicas_folding_the_same_events_force_alike() -> None:
    one = _small_case(0.1)
    two = _small_case(0.1)
    for _ in range(7):
        one.select(Context(embedding=X, costs=PRICES))  # extra selects on one replica change nothing
    context = Context(embedding=X, costs=PRICES, rng=np.random.default_rng(0))
    a, b = one.select(context), two.select(context)
    assert (a.arms, a.info["conservative_margin"]) == (b.arms, b.info["conservative_margin"])
    assert one.state_dict()["conservative"] == two.state_dict()["conservative"]


@pytest.mark.parametrize(
    ("hyper", "message"),
    [
        ({"max_loss": 1.0}, "max_loss"),
        ({"max_loss": -0.1}, "max_loss"),
        ({"incumbent": ""}, "incumbent"),
        ({"incumbent": "a", "delta": 0}, "delta"),
        ({"incumbent": "a", "reward_min": 1.0}, "reward_min"),
        ({"incumbent": "a", "evidence_k": 0}, "evidence_k"),
        ({"incumbent": "a", "evidence_k": 2.5}, "evidence_k"),
    ],
)
def test_bad_conservative_hyperparameters_are_config_errors(hyper: dict, message: str) -> None:
    with pytest.raises(PolicyConfigError, match=message):
        build_policy("greedy", ["a", "b"], hyperparameters=hyper)


def test_refuses_a_cascade() -> None:
    with pytest.raises(PolicyConfigError, match="cascade"):
        build_policy("pak-ucb", ["a", "b"], hyperparameters={"retry": True, "incumbent": "a"})


def test_gateway_style_cost_events_are_not_rounds() -> None:
    """A reward-less bandit observation (the gateway's cost event) changes no sum of the check."""
    policy = _small_case(0.5)
    before = policy.state_dict()["conservative"]
    policy.update(Observation(embedding=X, arm="x", reward=None, cost=0.01))
    assert policy.state_dict()["conservative"] == before


def test_an_incumbent_that_is_not_a_candidate_is_reported_not_enforced() -> None:
    """Not an error at construction: a router whose incumbent backend was removed must still load (from
    its hyperparameters or a snapshot); its decisions say that they were not checked."""
    policy = build_policy("greedy", ["a", "b"], seed=0, hyperparameters={"incumbent": "gpt-4"})
    decision = policy.select(Context(embedding=X, costs={"a": 0.1, "b": 0.2}))
    assert decision.info["conservative"] == "incumbent not a candidate"
    assert decision.info["incumbent_forced"] is False
