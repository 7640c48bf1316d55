"""The floor that reads evidence, the savings objective and declared priors (routers/conservative.py,
routers/priors.py): margins by hand, logs and priors that pay from the first round, the cheapest
good-enough model, the conflict with a cost target, state round trips, and the floor held on a learnable
problem while the router leaves the incumbent on a good share of rounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.policy_spec import parse_spec
from routers.base import Context, Observation, Policy, PolicyConfigError, decode_state, encode_state
from routers.conservative import Conservative
from routers.registry import build_policy, restore_policy
from routers.simple import Greedy, Thompson
from tests.unit.routers.trusted_sim import X

L2 = {"delta": math.exp(-2)}  # L = ln(1 / delta) = 2


def _fold(policy: Policy, arm: str, reward: float, kind: str = "bandit", key: str | None = None) -> None:
    policy.update(Observation(embedding=X, arm=arm, reward=reward, cost=0.01, kind=kind, decision_key=key))  # type: ignore[arg-type]


def test_priors_are_pseudo_observations_of_the_floor_by_hand() -> None:
    """inc: 4 played rounds (1, 1, 0, 1) + prior 0.5 x 96: n_0 = 100, m_0 = 51 / 100, UCB_0 = 0.51 +
    sqrt(2 / 200) = 0.61. x: 1 played round (1) + prior 0.9 x 49: n = 50, m = 45.1 / 50 = 0.902, LCB_x =
    0.902 - sqrt(2 / 100). gain = LCB_x - 0.9 UCB_0 >= 0: a proven round, no deviation term.
    B = R_S + 0.1 R_0 - 0.9 C_S = 1 + 0.3 - 0.9 * 0.61."""
    priors = {"inc": {"mean": 0.5, "weight": 96}, "x": {"mean": 0.9, "weight": 49}}
    hyper = {"incumbent": "inc", "max_loss": 0.1, "priors": priors, **L2}
    policy = build_policy("greedy", ["inc", "x"], seed=0, hyperparameters=hyper)
    for reward in (1.0, 1.0, 0.0, 1.0):
        _fold(policy, "inc", reward)
    _fold(policy, "x", 1.0)
    assert isinstance(policy, Conservative)
    assert policy.model_bounds("inc") == pytest.approx((0.41, 0.61), abs=1e-12)
    lcb_x = 0.902 - math.sqrt(0.02)
    assert policy.model_bounds("x")[0] == pytest.approx(lcb_x, abs=1e-12)
    decision = policy.select(Context(embedding=X, costs={"inc": 0.01, "x": 0.01}))
    assert decision.arms == ["x"]
    banked = 1.0 + 0.3 - 0.9 * 0.61
    assert policy.floor_margin("inc") == pytest.approx(banked, abs=1e-12)
    assert decision.info["conservative_margin"] == pytest.approx(banked + lcb_x - 0.9 * 0.61, abs=1e-12)
    # the greedy policy itself reads the priors: x's mean is 45.1 / 50
    assert isinstance(policy.inner, Greedy)
    assert policy.inner.mean("x") == pytest.approx(0.902, abs=1e-12)


def test_a_prior_that_shows_a_better_model_is_played_from_the_first_round() -> None:
    priors = {"inc": {"mean": 0.6, "weight": 500}, "x": {"mean": 0.9, "weight": 500}}
    policy = build_policy(
        "thompson",
        ["inc", "x"],
        seed=0,
        hyperparameters={"incumbent": "inc", "max_loss": 0.02, "priors": priors},
    )
    decision = policy.select(Context(embedding=X, costs={"inc": 0.01, "x": 0.01}))
    assert decision.arms == ["x"] and decision.info["incumbent_forced"] is False
    assert decision.info["conservative_margin"] >= 0


def _clusters(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n unit vectors around two directions (cluster 0 and 1, alternating) in 8 dimensions."""
    rng = np.random.default_rng(seed)
    centres = np.eye(8)[:2]
    which = np.arange(n) % 2
    x = centres[which] + 0.05 * rng.normal(size=(n, 8))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), which


def test_logs_that_show_a_model_beats_the_incumbent_make_it_played_from_the_first_round() -> None:
    """kNN-UCB warm-started by offline rows (better: 0.95, inc: 0.5, Bernoulli): the very first decision
    plays the better model, not forced, though no round has been played (R_0 = R_S = 0); and the logs
    count in no realised sum."""
    x, _ = _clusters(400, 1)
    rng = np.random.default_rng(2)
    policy = build_policy(
        "knn-ucb", ["inc", "better"], seed=0, hyperparameters={"incumbent": "inc", "max_loss": 0.05}
    )
    for i in range(400):
        for arm, p in (("inc", 0.5), ("better", 0.95)):
            reward = float(rng.random() < p)
            policy.update(
                Observation(embedding=x[i], arm=arm, reward=reward, kind="offline", decision_key=f"log{i}")
            )
    assert isinstance(policy, Conservative)
    assert policy.rounds("inc") == (0, 0) and policy.floor_margin("inc") == 0.0
    decision = policy.select(Context(embedding=x[0], costs={"inc": 0.01, "better": 0.01}, decision_key="0"))
    assert decision.arms == ["better"]
    assert decision.info["incumbent_forced"] is False
    assert decision.info["conservative_margin"] > 0
    # without the logs the same decision is the incumbent (nothing banked, nothing known)
    cold = build_policy(
        "knn-ucb", ["inc", "better"], seed=0, hyperparameters={"incumbent": "inc", "max_loss": 0.05}
    )
    assert cold.select(Context(embedding=x[0], costs={"inc": 0.01, "better": 0.01})).arms == ["inc"]


SAVINGS_PRICES = {"cheap": 0.001, "mid": 0.005, "dear": 0.01, "best": 0.02}


def _savings(**extra: object) -> Policy:
    """Priors of weight 1000 (width sqrt(2 / 2000) = sqrt(0.001) with L = 2): cheap 0.3, mid 0.9, dear (the
    incumbent) 0.8, best 0.95."""
    priors = {
        "cheap": {"mean": 0.3, "weight": 1000},
        "mid": {"mean": 0.9, "weight": 1000},
        "dear": {"mean": 0.8, "weight": 1000},
        "best": {"mean": 0.95, "weight": 1000},
    }
    hyper = {"incumbent": "dear", "max_loss": 0.05, "priors": priors, **L2, **extra}
    return build_policy("greedy", list(SAVINGS_PRICES), seed=0, hyperparameters=hyper)


def test_savings_picks_the_cheapest_model_the_evidence_says_is_good_enough() -> None:
    """The bar: 0.95 x the largest UCB among dear and the cheaper models, mid's 0.9 + w. cheap: UCB 0.3 + w
    below it: ruled out. mid: LCB 0.9 - w >= 0.95 UCB_dear = 0.95 (0.8 + w): proven, margin = 0 + (0.9 - w)
    - 0.95 (0.8 + w). The reward objective plays what greedy wants (best, dearer than the incumbent)."""
    w = math.sqrt(0.001)
    decision = _savings(objective="savings").select(Context(embedding=X, costs=SAVINGS_PRICES))
    assert decision.arms == ["mid"]
    assert decision.info["objective"] == "savings" and decision.info["proposed"] == "best"
    assert decision.info["conservative_margin"] == pytest.approx((0.9 - w) - 0.95 * (0.8 + w), abs=1e-12)
    assert _savings().select(Context(embedding=X, costs=SAVINGS_PRICES)).arms == ["best"]
    # without mid, nothing cheaper is good enough: the incumbent
    without_mid = {k: v for k, v in SAVINGS_PRICES.items() if k != "mid"}
    assert _savings(objective="savings").select(Context(embedding=X, costs=without_mid)).arms == ["dear"]


def test_the_floor_over_a_cost_target_is_said_in_the_decision() -> None:
    """Target $0.004, three requests on dear at $0.01: the pacer's spend per request is 0.01 > target; the
    cost-aware choice (cheap, untried) is forced back to dear by the floor (B = 0.02 * 3, cheap unknown)."""
    policy = build_policy(
        "greedy", ["cheap", "dear"], seed=0, hyperparameters={"incumbent": "dear", "cost_target": 0.004}
    )
    for key in ("0", "1", "2"):
        _fold(policy, "dear", 1.0, key=key)
    decision = policy.select(Context(embedding=X, costs={"cheap": 0.001, "dear": 0.01}))
    assert decision.arms == ["dear"] and decision.info["proposed"] == "cheap"
    assert decision.info["floor_over_target"] is True
    assert decision.info["spend_per_request"] == pytest.approx(0.01)
    assert decision.info["cost_target"] == 0.004
    plain = build_policy("greedy", ["cheap", "dear"], seed=0, hyperparameters={"incumbent": "dear"})
    assert (
        "floor_over_target"
        not in plain.select(Context(embedding=X, costs={"cheap": 0.001, "dear": 0.01})).info
    )


def test_the_new_state_round_trips() -> None:
    """Savings, priors and kNN-UCB's fold-time charge survive encode / decode: same choices, same state."""
    x, which = _clusters(300, 3)
    priors = {"cheap": {"mean": 0.7, "weight": 20}}
    hyper = {"incumbent": "dear", "max_loss": 0.05, "objective": "savings", "priors": priors}
    policy = build_policy("knn-ucb", ["cheap", "dear"], seed=0, hyperparameters=hyper)
    prices = {"cheap": 0.001, "dear": 0.01}
    rng = np.random.default_rng(0)
    for t in range(300):
        arm = policy.select(Context(embedding=x[t], costs=prices, decision_key=str(t))).arms[0]
        p = 0.9 if arm == "dear" else (0.9 if which[t] == 0 else 0.2)
        policy.update(
            Observation(embedding=x[t], arm=arm, reward=float(rng.random() < p), decision_key=str(t))
        )
    assert isinstance(policy, Conservative)
    assert policy.charged[0] > 0  # rounds off dear charged at kNN-UCB's per-context bound
    state = policy.state_dict()
    restored = restore_policy(decode_state(encode_state(state)))
    assert isinstance(restored, Conservative)
    assert restored.state_dict()["conservative"] == state["conservative"]
    assert restored.priors == policy.priors and restored.objective == "savings"
    for t in range(20):
        context = Context(embedding=x[t], costs=prices, decision_key=f"r{t}", rng=np.random.default_rng(t))
        one, two = policy.select(context), restored.select(context)
        assert one.arms == two.arms
        assert one.info["conservative_margin"] == pytest.approx(two.info["conservative_margin"], abs=1e-9)


def test_priors_on_a_plain_policy_round_trip_and_move_its_means() -> None:
    priors = {"a": {"mean": 0.2, "weight": 4}}
    policy = build_policy("thompson", ["a", "b"], seed=0, hyperparameters={"priors": priors, "prior": "beta"})
    assert isinstance(policy, Thompson)
    policy.update(Observation(embedding=X, arm="a", reward=1.0))
    assert policy.evidence("a") == pytest.approx((5.0, 1.8))
    restored = restore_policy(decode_state(encode_state(policy.state_dict())))
    assert isinstance(restored, Thompson) and restored.evidence("a") == pytest.approx((5.0, 1.8))
    assert restored.state_dict()["config"]["priors"] == {"a": {"mean": 0.2, "weight": 4.0}}


def test_priors_written_as_a_bench_spec_are_the_same_priors() -> None:
    spec = parse_spec("greedy:priors=a=0.2:4;llama3:8b=0.9:2.5")
    policy = build_policy(spec.name, ["a", "llama3:8b"], hyperparameters=spec.params)
    assert isinstance(policy, Greedy)
    assert policy.evidence("a") == pytest.approx((4.0, 0.8))
    assert policy.evidence("llama3:8b") == pytest.approx((2.5, 2.25))


@pytest.mark.parametrize(
    "priors",
    [
        {"a": {"mean": 0.5, "weight": 0}},
        {"a": {"mean": 0.5}},
        {"a": {"mean": "high", "weight": 1}},
        [1, 2],
        "a=0.5",
        "a=x:1",
        "a=0.5:0",
        "a=0.1:1;a=0.2:1",
    ],
)
def test_bad_priors_are_config_errors(priors: object) -> None:
    with pytest.raises(PolicyConfigError, match="priors"):
        build_policy("greedy", ["a", "b"], hyperparameters={"priors": priors})


def test_the_evidence_incumbent_is_the_model_of_highest_lower_bound() -> None:
    priors = {
        "a": {"mean": 0.5, "weight": 100},
        "b": {"mean": 0.8, "weight": 100},
        "c": {"mean": 0.9, "weight": 2},
    }
    policy = build_policy(
        "greedy", ["a", "b", "c"], seed=0, hyperparameters={"incumbent_by": "evidence", "priors": priors}
    )
    decision = policy.select(Context(embedding=X, costs={"a": 0.01, "b": 0.001, "c": 0.001}))
    assert decision.info["incumbent"] == "b"  # c's mean is higher, its lower bound is not
    nothing = build_policy("greedy", ["a", "b"], seed=0, hyperparameters={"incumbent_by": "evidence"})
    assert nothing.select(Context(embedding=X)).info["conservative"] == "no incumbent (no evidence yet)"


def test_savings_keeps_the_floor_on_a_learnable_problem_while_leaving_the_incumbent() -> None:
    """Two prompt clusters; the incumbent earns 0.85 on cluster 0 and 0.95 on cluster 1, the cheap model
    0.95 on cluster 0 and 0.3 on cluster 1 (Bernoulli). kNN-UCB under savings, alpha = 0.05, T = 1500, seeds 0-4: on every seed the
    realised cumulative reward stays >= 0.95 x the incumbent's on the same prompts at every round t >= 100,
    and the router leaves the incumbent on >= 20% of rounds, almost all of them on cluster 0."""
    prices = {"cheap": 0.001, "dear": 0.01}
    for seed in range(5):
        x, which = _clusters(1500, seed)
        rng = np.random.default_rng([seed, 7])
        policy = build_policy(
            "knn-ucb",
            ["cheap", "dear"],
            seed=seed,
            hyperparameters={"incumbent": "dear", "max_loss": 0.05, "objective": "savings"},
        )
        mine, theirs, off, off_on_good = [], [], 0, 0
        for t in range(1500):
            arm = policy.select(Context(embedding=x[t], costs=prices, decision_key=str(t))).arms[0]
            p = {"dear": 0.85 if which[t] == 0 else 0.95, "cheap": 0.95 if which[t] == 0 else 0.3}
            draws = {a: float(rng.random() < q) for a, q in p.items()}
            policy.update(
                Observation(embedding=x[t], arm=arm, reward=draws[arm], cost=prices[arm], decision_key=str(t))
            )
            mine.append(draws[arm])
            theirs.append(draws["dear"])
            off += arm != "dear"
            off_on_good += arm != "dear" and which[t] == 0
        ratio = np.cumsum(mine)[99:] / np.cumsum(theirs)[99:]
        assert ratio.min() >= 0.95, (seed, ratio.min())
        assert off >= 0.2 * 1500, (seed, off)
        assert off_on_good >= 0.9 * off, (seed, off_on_good, off)


def _log(policy: Policy, arm: str, x: np.ndarray, reward: float, kind: str = "offline") -> None:
    policy.update(Observation(embedding=x, arm=arm, reward=reward, kind=kind))  # type: ignore[arg-type]


def test_the_per_context_interval_is_hoeffding_on_the_evidence_neighbourhood_by_hand() -> None:
    """evidence_k = 8, L = 2 (width sqrt(2 / 16) = sqrt(1 / 8)). x: 8 logged rewards of 0.6 at e0 and 4 of
    0.0 at e1. At e0 its 8 nearest are the 0.6s: 0.6 -/+ sqrt(1 / 8). At e1 the 4 zeros and 4 of the 0.6s:
    0.3 -/+ sqrt(1 / 8), clipped at 0. Per model: 12 rewards, mean 0.4, width sqrt(2 / 24). inc: 8 rewards of
    0.5 at e0, so UCB_0(e0) = 0.5 + sqrt(1 / 8); y, with 5 rewards (< k), keeps its per-model interval.
    A played round of x at e0 charges C_S that UCB_0(e0) when it is folded."""
    e0, e1 = np.eye(8, dtype=np.float32)[0], np.eye(8, dtype=np.float32)[1]
    hyper = {"incumbent": "inc", "max_loss": 0.1, "evidence_k": 8, **L2}
    policy = build_policy("knn-ucb", ["inc", "x", "y"], seed=0, hyperparameters=hyper)
    for _ in range(8):
        _log(policy, "x", e0, 0.6)
        _log(policy, "inc", e0, 0.5)
    for _ in range(4):
        _log(policy, "x", e1, 0.0)
    for _ in range(5):
        _log(policy, "y", e0, 1.0)
    assert isinstance(policy, Conservative)
    w = math.sqrt(1 / 8)
    assert policy.neighbourhood("x", e0) == (pytest.approx(0.6), 8)
    assert policy.context_bounds("x", e0) == pytest.approx((0.6 - w, 0.6 + w), abs=1e-6)
    assert policy.context_bounds("x", e1) == pytest.approx((0.0, 0.3 + w), abs=1e-6)
    assert policy.model_bounds("x") == pytest.approx((0.4 - math.sqrt(2 / 24), 0.4 + math.sqrt(2 / 24)))
    assert policy.neighbourhood("y", e0) is None
    assert (
        policy.context_bounds("y", e0) == policy.model_bounds("y") == (pytest.approx(1 - math.sqrt(0.2)), 1.0)
    )
    ucb0 = 0.5 + w
    # g_x(e0): this prompt's gain 0.6 - w - 0.9 UCB_0(e0) beats the per-model one
    here = 0.6 - w - 0.9 * ucb0
    assert policy.gain("inc", "x", e0) == pytest.approx(here, abs=1e-6)
    assert policy.gain("inc", "x") == pytest.approx(
        policy.model_bounds("x")[0] - 0.9 * policy.model_bounds("inc")[1], abs=1e-12
    )
    _log(policy, "x", e0, 1.0, kind="bandit")
    assert policy.charged == pytest.approx([1.0, ucb0], abs=1e-6)
    # a policy that stores no prompts keeps the per-model interval
    greedy = build_policy("greedy", ["inc", "x"], seed=0, hyperparameters=hyper)
    for _ in range(8):
        _log(greedy, "x", e0, 0.6)
    assert isinstance(greedy, Conservative)
    assert greedy.neighbourhood("x", e0) is None
    assert greedy.context_bounds("x", e0) == greedy.model_bounds("x")


def test_logs_that_show_a_cheap_model_better_on_one_cluster_make_savings_play_it_there_only() -> None:
    """Logs of 200 prompts (two clusters) for both models: cheap earns 0.95 on cluster 0 and 0.2 on
    cluster 1, dear (the incumbent) 0.5 and 0.9 (Bernoulli). Per model cheap is the worse (about 0.58 vs
    0.7): its per-model gain is negative. Its neighbourhood on cluster 0 proves it (LCB_cheap(x) >= 0.95
    UCB_dear(x)), so from the first round, with nothing banked, savings plays cheap on cluster 0 prompts and
    dear on cluster 1 prompts."""
    x, which = _clusters(240, 4)
    rng = np.random.default_rng(5)
    policy = build_policy(
        "knn-ucb",
        ["cheap", "dear"],
        seed=0,
        hyperparameters={"incumbent": "dear", "max_loss": 0.05, "objective": "savings"},
    )
    p = {"cheap": (0.95, 0.2), "dear": (0.5, 0.9)}
    for i in range(200):
        for arm, (q0, q1) in p.items():
            _log(policy, arm, x[i], float(rng.random() < (q0 if which[i] == 0 else q1)))
    assert isinstance(policy, Conservative)
    assert policy.floor_margin("dear") == 0.0 and policy.gain("dear", "cheap") < 0
    prices = {"cheap": 0.001, "dear": 0.01}
    for i in range(200, 240):
        decision = policy.select(Context(embedding=x[i], costs=prices, decision_key=str(i)))
        assert decision.arms == (["cheap"] if which[i] == 0 else ["dear"]), (i, which[i])
        if which[i] == 0:
            assert policy.gain("dear", "cheap", x[i]) >= 0  # a proven round: no slack needed
