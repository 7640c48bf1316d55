"""Shadow evaluation: the sampled rate and its determinism, the model chosen on a hand-built case, shadow
rewards kept out of the floor's realised sums, state round trips, and every policy taking a shadow
observation."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from routers.base import (
    Context,
    Decision,
    KeyedRng,
    Observation,
    ObservationKind,
    Policy,
    PolicyConfigError,
    decision_rng,
    decode_state,
    encode_state,
)
from routers.conservative import Conservative
from routers.logistic_ucb import PromptWise
from routers.registry import POLICIES, build_policy, restore_policy
from routers.shadow import Shadow, shadow_draw
from tests.unit.routers.trusted_sim import X

ARMS = ["inc", "w", "d", "e", "f"]
# inc dearest; d cheaper than inc; e dearer than inc
PRICES = {"inc": 0.01, "w": 0.001, "d": 0.002, "e": 0.02, "f": 0.003}


def _fold(policy: Policy, arm: str, reward: float, n: int, kind: ObservationKind = "offline") -> None:
    for _ in range(n):
        policy.update(Observation(embedding=X, arm=arm, reward=reward, cost=0.0, kind=kind))


def _hand_case(prices: dict[str, float]) -> tuple[Shadow, Context]:
    """Greedy under a floor against ``inc`` (alpha = 0.1, delta = e^-2 so L = 2, rewards in [0, 1]): every
    bound is per model, mean -/+ sqrt(L / (2 n)) = mean -/+ 1 / sqrt(n), clipped to [0, 1].

    inc: n = 400, mean 0.75 -> [0.70, 0.80]   the reference: LCB_0 = 0.70, (1 - alpha) mean_0 = 0.675
    w:   n = 4,   mean 0.10 -> [0.00, 0.60]   widest (0.6), UCB below both bars: not eligible
    d:   n = 16,  mean 0.44 -> [0.19, 0.69]   width 0.5; UCB in [0.675, 0.70): eligible only if cheaper
    e:   n = 25,  mean 0.49 -> [0.29, 0.69]   width 0.4; the same UCB, dearer than inc: not eligible
    f:   n = 100, mean 0.70 -> [0.60, 0.80]   width 0.2; UCB >= LCB_0: eligible
    """
    policy = build_policy(
        "greedy",
        ARMS,
        seed=0,
        hyperparameters={"incumbent": "inc", "max_loss": 0.1, "delta": math.exp(-2), "shadow": 1.0},
    )
    for arm, mean, n in (
        ("inc", 0.75, 400),
        ("w", 0.1, 4),
        ("d", 0.44, 16),
        ("e", 0.49, 25),
        ("f", 0.7, 100),
    ):
        _fold(policy, arm, mean, n)
    assert isinstance(policy, Shadow)
    return policy, Context(embedding=X, costs=prices, decision_key="7")


def test_the_widest_eligible_interval_is_chosen_by_hand() -> None:
    policy, context = _hand_case(PRICES)
    decision = policy.select(context)
    assert decision.arms == ["inc"]  # greedy: the highest mean
    assert decision.shadow == ["d"]  # w is wider but could neither beat inc nor match it cheaper


def test_a_model_no_cheaper_must_be_able_to_beat_the_reference() -> None:
    policy, context = _hand_case({**PRICES, "d": 0.05})  # d now dearer than inc: only f is eligible
    assert policy.select(context).shadow == ["f"]


@pytest.mark.parametrize(("objective", "shadow"), [("reward", "dear"), ("savings", "cheap")])
def test_under_savings_a_model_dearer_than_the_incumbent_is_never_shadowed(
    objective: str, shadow: str
) -> None:
    """L = 2, alpha = 0.1: inc n = 400, mean 0.75 -> [0.70, 0.80]; dear n = 4, mean 0.8 -> [0.30, 1.00]
    (width 0.7, could beat inc); cheap n = 100, mean 0.7 -> [0.60, 0.80] (width 0.2). Both objectives serve
    inc (no slack banked for an exploratory round); only the reward objective could ever serve dear."""
    hyper = {
        "incumbent": "inc",
        "max_loss": 0.1,
        "delta": math.exp(-2),
        "objective": objective,
        "shadow": 1.0,
    }
    policy = build_policy("greedy", ["inc", "dear", "cheap"], seed=0, hyperparameters=hyper)
    for arm, mean, n in (("inc", 0.75, 400), ("dear", 0.8, 4), ("cheap", 0.7, 100)):
        _fold(policy, arm, mean, n)
    prices = {"inc": 0.01, "dear": 0.1, "cheap": 0.001}
    decision = policy.select(Context(embedding=X, costs=prices, decision_key="0"))
    assert decision.arms == ["inc"]
    assert decision.shadow == [shadow]


def test_models_served_or_queried_are_never_shadowed() -> None:
    policy, context = _hand_case(PRICES)
    decision = Decision(arms=["inc"], query=["d"])
    assert policy.choose(context, decision, np.random.default_rng(0)) == ["f"]
    assert policy.choose(context, Decision(arms=["inc"], query=["d", "f"]), np.random.default_rng(0)) == []


def test_without_a_floor_the_policy_scores_bound_the_interval() -> None:
    policy = build_policy("linucb", ["a", "b", "c"], seed=0, hyperparameters={"shadow": 1.0})
    assert isinstance(policy, Shadow)
    scores = {
        "a": {"estimate": 0.8, "bonus": 0.1},  # served: [0.7, 0.9]
        "b": {"estimate": 0.3, "bonus": 0.5},  # [-0.2, 0.8]: width 1.0, could beat a
        "c": {"estimate": 0.0, "bonus": 0.6},  # [-0.6, 0.6]: width 1.2, cannot
    }
    decision = Decision(arms=["a"], scores=scores)
    context = Context(embedding=X)
    assert policy.bounds(context, decision, ["a", "b", "c"])["b"] == pytest.approx((-0.2, 0.8))
    assert policy.choose(context, decision, np.random.default_rng(0)) == ["b"]


def test_without_a_floor_or_bonus_the_folded_rewards_bound_the_interval() -> None:
    policy = build_policy("thompson", ["a", "b"], seed=0, hyperparameters={"shadow": 1.0})
    assert isinstance(policy, Shadow)
    _fold(policy, "a", 1.0, 8, kind="bandit")
    _fold(policy, "b", 0.5, 2, kind="query")
    bounds = policy.bounds(Context(embedding=X), Decision(arms=["a"]), ["a", "b"])
    w = math.sqrt(math.log(100.0) / 2.0)  # delta = 0.01
    assert bounds["a"] == pytest.approx((max(0.0, 1.0 - w / math.sqrt(8)), 1.0))
    assert bounds["b"] == pytest.approx((max(0.0, 0.5 - w / math.sqrt(2)), min(1.0, 0.5 + w / math.sqrt(2))))


def _sampled(policy: Policy, keys: range) -> list[bool]:
    out = []
    for t in keys:
        decision = policy.select(Context(embedding=X, costs={"a": 0.01, "b": 0.001}, decision_key=str(t)))
        out.append(decision.info["shadow_sampled"])
    return out


def test_the_sampled_rate_is_s_and_a_function_of_the_seed_and_key() -> None:
    n, rate = 4000, 0.1
    policy = build_policy("knn-ucb", ["a", "b"], seed=5, hyperparameters={"shadow": rate})
    first = _sampled(policy, range(n))
    assert abs(sum(first) - n * rate) <= 4 * math.sqrt(n * rate * (1 - rate))  # Binomial(n, S), 4 sd
    # u_t: the first 64 bits of BLAKE2b("5:t:shadow") over 2^64
    digest = [hashlib.blake2b(f"5:{t}:shadow".encode(), digest_size=8).digest() for t in range(n)]
    assert first == [int.from_bytes(d, "big") / 2**64 < rate for d in digest]
    # a replica that served other decisions first samples the same ones
    other = build_policy("knn-ucb", ["a", "b"], seed=5, hyperparameters={"shadow": rate})
    _sampled(other, range(n, n + 50))
    assert _sampled(other, range(200)) == first[:200]


def test_a_gateway_generator_key_samples_what_the_simulators_round_key_does() -> None:
    """The gateway passes KeyedRng(seed, request seed t); the simulator decision_key str(t)."""
    policy = build_policy("knn-ucb", ["a", "b"], seed=5, hyperparameters={"shadow": 0.3})
    assert isinstance(policy, Shadow)
    for t in range(50):
        gateway = Context(embedding=X, rng=KeyedRng(11, t), decision_key=f"decision-{t}")
        assert policy.draw(gateway)[0] == policy.draw(Context(embedding=X, decision_key=str(t)))[0]
        assert policy.draw(gateway)[0] == shadow_draw(5, t)


def test_the_wrapper_leaves_the_policys_own_draws_alone() -> None:
    plain = build_policy("thompson", ["a", "b", "c"], seed=1)
    shadowed = build_policy("thompson", ["a", "b", "c"], seed=1, hyperparameters={"shadow": 1.0})
    for t in range(100):
        context = Context(embedding=X, rng=decision_rng(9, t), decision_key=str(t))
        served = plain.select(context)
        decision = shadowed.select(Context(embedding=X, rng=decision_rng(9, t), decision_key=str(t)))
        assert decision.arms == served.arms
        assert decision.shadow and decision.shadow[0] not in decision.arms
        for policy in (plain, shadowed):
            policy.update(Observation(embedding=X, arm=served.arms[0], reward=float(t % 3 == 0)))


def test_a_shadow_reward_never_reaches_the_realised_sums() -> None:
    policy = build_policy("greedy", ["inc", "x"], seed=0, hyperparameters={"incumbent": "inc", "shadow": 0.5})
    conservative = next(p for p in (policy, getattr(policy, "inner", None)) if isinstance(p, Conservative))
    _fold(policy, "inc", 1.0, 3, kind="bandit")
    _fold(policy, "x", 0.0, 1, kind="bandit")
    before = conservative.floor_margin("inc"), conservative.rounds("inc")
    played = {a: list(s) for a, s in conservative.played.items()}
    _fold(policy, "x", 1.0, 50, kind="shadow")
    _fold(policy, "inc", 0.0, 50, kind="shadow")
    assert conservative.played == played
    assert conservative.rounds("inc") == before[1] == (3, 1)
    assert conservative.seen["x"] == [51.0, 50.0]  # evidence: it moves the bounds
    # R_S + alpha R_0 unchanged; only C_S's UCB_0 may move (the shadow zeros lower it)
    r0, rounds_s, reward_s = conservative._sums("inc")
    assert (r0, rounds_s, reward_s) == (3.0, 1, 0.0)
    assert policy.shadow_calls == 100  # type: ignore[attr-defined]


def test_a_shadow_cost_is_spend_for_the_pacer() -> None:
    policy = build_policy("knn-ucb", ["a", "b"], seed=0, hyperparameters={"cost_target": 0.01, "shadow": 1.0})
    policy.update(Observation(embedding=X, arm="a", reward=1.0, cost=0.01, decision_key="0"))
    policy.update(Observation(embedding=X, arm="b", reward=1.0, cost=0.03, kind="shadow", decision_key="0"))
    pacer = policy.inner.pacer  # type: ignore[attr-defined]
    assert (pacer.requests, pacer.spent) == (1, pytest.approx(0.04))


def test_state_round_trip_keeps_decisions_and_counts() -> None:
    hyper = {
        "incumbent": "a",
        "max_loss": 0.05,
        "objective": "savings",
        "shadow": 0.5,
        "shadow_usd_per_day": 2.0,
    }
    policy = build_policy("default", ["a", "b", "c"], seed=3, hyperparameters=hyper)
    rng = np.random.default_rng(0)
    prices = {"a": 0.03, "b": 0.01, "c": 0.02}

    def step(p: Policy, t: int, x: np.ndarray, r: np.ndarray) -> Decision:
        decision = p.select(Context(embedding=x, costs=prices, decision_key=None if t % 2 else str(t)))
        p.update(Observation(embedding=x, arm=decision.arms[0], reward=float(r[0]), cost=0.01))
        for arm in decision.shadow:
            p.update(Observation(embedding=x, arm=arm, reward=float(r[1]), cost=0.01, kind="shadow"))
        return decision

    draws = [(rng.normal(size=6).astype(np.float32), rng.random(2)) for _ in range(120)]
    for t, (x, r) in enumerate(draws[:80]):
        step(policy, t, x / np.linalg.norm(x), r)
    restored = restore_policy(decode_state(encode_state(policy.state_dict())))
    assert isinstance(restored, Shadow) and isinstance(policy, Shadow)
    assert restored.config == policy.config and restored.config["shadow_usd_per_day"] == 2.0
    assert encode_state(restored.state_dict()) == encode_state(policy.state_dict())
    for t, (x, r) in enumerate(draws[80:], start=80):
        a, b = step(policy, t, x / np.linalg.norm(x), r), step(restored, t, x / np.linalg.norm(x), r)
        assert (a.arms, a.shadow) == (b.arms, b.shadow)
    assert restored.shadow_calls == policy.shadow_calls > 0  # type: ignore[attr-defined]


def test_every_registered_policy_takes_a_shadow_observation() -> None:
    rng = np.random.default_rng(0)
    for name in POLICIES:
        hyper = {"model": "a"} if name == "always" else {}
        policy = build_policy(name, ["a", "b", "c"], seed=0, hyperparameters=hyper)
        for t in range(5):
            x = rng.normal(size=4).astype(np.float32)
            x /= np.linalg.norm(x)
            decision = policy.select(
                Context(embedding=x, costs={"a": 0.01, "b": 0.02, "c": 0.03}, decision_key=str(t))
            )
            out = np.ones(4, dtype=np.float32) / 2.0
            for arm in ["c", *decision.arms[:1]]:
                kind: ObservationKind = "shadow" if arm == "c" else "bandit"
                policy.update(
                    Observation(
                        embedding=x,
                        arm=arm,
                        reward=0.5,
                        cost=0.01,
                        kind=kind,
                        output_embedding=out,
                        decision_key=str(t),
                    )
                )
        restore_policy(decode_state(encode_state(policy.state_dict())))


def test_a_shadow_answer_is_no_step_of_a_promptwise_cascade() -> None:
    policy = build_policy("promptwise", ["a", "b", "c"], seed=0)
    assert isinstance(policy, PromptWise)
    decision = policy.select(Context(embedding=X, decision_key="0"))
    policy.update(
        Observation(embedding=X, arm=decision.arms[0], reward=0.0, kind="cascade-step", decision_key="0")
    )
    policy.update(Observation(embedding=X, arm="c", reward=1.0, kind="shadow", decision_key="0"))
    assert policy._steps["0"].calls == 1


@pytest.mark.parametrize(
    ("hyper", "message"),
    [
        ({"shadow": 1.5}, "shadow"),
        ({"shadow": -0.1}, "shadow"),
        ({"shadow_usd_per_day": -1.0}, "shadow_usd_per_day"),
    ],
)
def test_bad_shadow_hyperparameters_are_config_errors(hyper: dict, message: str) -> None:
    with pytest.raises(PolicyConfigError, match=message):
        build_policy("knn-ucb", ["a", "b"], seed=0, hyperparameters=hyper)


def test_shadow_zero_is_the_plain_policy() -> None:
    assert not isinstance(build_policy("knn-ucb", ["a", "b"], hyperparameters={"shadow": 0.0}), Shadow)
    assert isinstance(
        build_policy("knn-ucb", ["a", "b"], hyperparameters={"shadow_usd_per_day": 1.0}), Shadow
    )
