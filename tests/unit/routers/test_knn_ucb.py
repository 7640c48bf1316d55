"""kNN-UCB: eqs. 3-6 on a hand-computed toy history, scale-freeness, learning, arms, state round trip."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from routers.base import Context, Observation, PolicyConfigError, decode_state, encode_state
from routers.knn_ucb import KnnUCB, Variogram
from routers.registry import build_policy, restore_policy


def _pt(cos: float) -> np.ndarray:
    """A unit vector in 2-d at cosine distance 1 - cos from (1, 0)."""
    return np.array([cos, math.sqrt(1.0 - cos * cos)], dtype=np.float32)


X0 = np.array([1.0, 0.0], dtype=np.float32)


def _toy(policy: KnnUCB) -> None:
    """History of arm a: distances 0, 0.1, 0.5 from X0 with rewards 1, 0, 1."""
    for cos, y in ((1.0, 1.0), (0.9, 0.0), (0.5, 1.0)):
        policy.update(Observation(embedding=_pt(cos), arm="a", reward=y))


# An inner product of unit vectors stored in float16 moves by at most 2^-11 (routers/neighbors.py), so a
# distance r_k does too, and U(k) by phi(t) times that.
HALF_ULP = 2.0**-11
PRECISIONS = [("float32", 0.0), ("float16", HALF_ULP)]


@pytest.mark.parametrize(("precision", "drift"), PRECISIONS)
def test_paper_index_hand_computed(precision: str, drift: float) -> None:
    policy = KnnUCB(arms=["a", "b"], preset="paper", precision=precision)
    _toy(policy)
    policy.t = 9  # the next select is round t = 10: phi(t) = ln 10
    decision = policy.select(Context(embedding=X0))
    a = decision.scores["a"]
    # U_k = sqrt(1 * ln 3 / k) + ln(10) * r_k with r = (0, 0.1, 0.5):
    u = [math.sqrt(math.log(3) / 1) + 0.0, math.sqrt(math.log(3) / 2) + math.log(10) * 0.1]
    u.append(math.sqrt(math.log(3) / 3) + math.log(10) * 0.5)
    assert u[1] < u[0] < u[2]  # 0.9714 < 1.0481 < 1.7564: k = 2
    assert a["k"] == 2
    assert a["estimate"] == pytest.approx(0.5)  # (1 + 0) / 2, eq. 3
    tolerance = 1e-6 + math.log(10) * drift
    assert a["bonus"] == pytest.approx(u[1], abs=tolerance)  # eq. 4 at k (eq. 5)
    assert a["index"] == pytest.approx(0.5 + u[1], abs=tolerance)  # eq. 6
    assert decision.scores["b"]["index"] == math.inf  # cold arm
    assert decision.arms == ["b"]  # +inf wins (eq. 7)


@pytest.mark.parametrize(("precision", "drift"), PRECISIONS)
def test_log_t_flag_and_phi_schedules(precision: str, drift: float) -> None:
    policy = KnnUCB(arms=["a"], preset="paper", log_of="t", phi_t="sqrtlog", precision=precision)
    _toy(policy)
    policy.t = 19
    a = policy.select(Context(embedding=X0)).scores["a"]
    curve = [
        math.sqrt(math.log(20) / k) + math.sqrt(math.log(20)) * r for k, r in ((1, 0.0), (2, 0.1), (3, 0.5))
    ]
    assert a["bonus"] == pytest.approx(min(curve), abs=1e-6 + math.sqrt(math.log(20)) * drift)
    assert a["k"] == 1 + int(np.argmin(curve))


def test_variogram_fit_hand_computed() -> None:
    v = Variogram()
    for _ in range(5):
        v.add_pair(0.0, math.sqrt(0.02))  # (rho^2, dy^2) = (0, 0.02)
        v.add_pair(1.0, math.sqrt(0.12))  # (1, 0.12)
    a, b = v.fit()
    assert a == pytest.approx(0.02) and b == pytest.approx(0.10)  # intercept 2 sigma^2, slope lambda^2
    policy = KnnUCB(arms=["a"], min_pairs=2)
    policy.variogram = v
    s, lam = policy.scales()
    assert s == pytest.approx(0.1) and lam == pytest.approx(math.sqrt(0.1))
    w = Variogram()
    w.add_pair(0.0, 1.0)
    w.add_pair(1.0, 0.0)  # decreasing: slope clipped to 0, intercept = mean
    assert w.fit() == (pytest.approx(0.5), 0.0)


def _stream(seed: int, n: int, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        x = rng.normal(size=3).astype(np.float32)
        x /= np.linalg.norm(x)
        p = {"a": 0.9 if x[0] > 0 else 0.1, "b": 0.5, "c": 0.4}
        yield x, {arm: scale * float(rng.random() < q) for arm, q in p.items()}


def _run(policy, stream) -> list[str]:
    picks = []
    for x, rewards in stream:
        arm = policy.select(Context(embedding=x)).arms[0]
        picks.append(arm)
        policy.update(Observation(embedding=x, arm=arm, reward=rewards[arm]))
    return picks


def test_scale_free_default_does_not_depend_on_the_reward_scale() -> None:
    one = _run(KnnUCB(arms=["a", "b"], seed=3), _stream(0, 300))
    hundred = _run(KnnUCB(arms=["a", "b"], seed=3), _stream(0, 300, scale=100.0))
    assert one == hundred
    paper_one = _run(KnnUCB(arms=["a", "b"], seed=3, preset="paper"), _stream(0, 300))
    paper_hundred = _run(KnnUCB(arms=["a", "b"], seed=3, preset="paper"), _stream(0, 300, scale=100.0))
    assert paper_one != paper_hundred  # the published rule is not scale-free


def test_knn_ucb_beats_uniform_random_on_a_learnable_problem() -> None:
    # best arm: a where x[0] > 0 (p = 0.9), else b (p = 0.5); oracle mean 0.7, random 0.5
    gains = []
    for seed in range(4):
        rng = np.random.default_rng(100 + seed)
        policy = KnnUCB(arms=["a", "b"], seed=seed)
        total = rand = 0.0
        for x, rewards in _stream(seed, 600):
            arm = policy.select(Context(embedding=x)).arms[0]
            total += rewards[arm]
            rand += rewards[["a", "b"][int(rng.integers(2))]]
            policy.update(Observation(embedding=x, arm=arm, reward=rewards[arm]))
        gains.append((total - rand) / 600)
    # random's mean over 4 x 600 rounds has sd ~ 0.5 / sqrt(2400) ~ 0.01; require > 5 sd
    assert np.mean(gains) > 0.05


def test_add_and_remove_arms() -> None:
    policy = KnnUCB(arms=["a", "b"], seed=0)
    _run(policy, _stream(1, 50))
    policy.add_arm("c")
    x = X0
    assert policy.select(Context(embedding=np.array([1, 0, 0], dtype=np.float32))).arms == ["c"]
    policy.remove_arm("a")
    for x, _ in _stream(2, 30):
        assert policy.select(Context(embedding=x)).arms[0] in ("b", "c")
    assert policy.size("a") == 0 and "a" not in policy.arms
    policy.add_arm("a")  # comes back cold
    assert policy.select(Context(embedding=x)).scores["a"]["index"] == math.inf


@pytest.mark.parametrize(
    "hyper", [{}, {"preset": "paper"}, {"hnsw_at": 40, "window": 100, "memory": "reservoir"}]
)
def test_state_round_trip_reproduces_selections(hyper: dict) -> None:
    policy = build_policy("knn-ucb", ["a", "b", "c"], seed=5, hyperparameters=hyper)
    stream = list(_stream(7, 400))
    _run(policy, stream[:250])
    restored = restore_policy(decode_state(encode_state(policy.state_dict())))
    assert _run(policy, stream[250:]) == _run(restored, stream[250:])


def test_bad_hyperparameters_name_the_argument() -> None:
    for bad, word in (({"theta": -1}, "theta"), ({"preset": "x"}, "preset"), ({"k_max": 0}, "k_max")):
        with pytest.raises(PolicyConfigError, match=word):
            build_policy("knn-ucb", ["a"], hyperparameters=bad)


def _context_free_share_of_worse(seed: int, rounds: int = 8000, **hyper: Any) -> float:
    """Two arms whose Bernoulli rewards ignore the prompt (0.80 and 0.72), 16-d random prompts."""
    rng = np.random.default_rng(seed)
    policy = KnnUCB(arms=["good", "bad"], seed=seed, **hyper)
    means = {"good": 0.80, "bad": 0.72}
    worse = 0
    for _ in range(rounds):
        x = rng.normal(size=16).astype(np.float32)
        x /= np.linalg.norm(x)
        arm = policy.select(Context(embedding=x)).arms[0]
        worse += arm == "bad"
        policy.update(Observation(embedding=x, arm=arm, reward=float(rng.random() < means[arm])))
    return worse / rounds


def test_context_free_arms_stop_exploring_the_worse_one() -> None:
    """With l ~ 0 both arms' k sits at the cap K, so once both are past K points the worse arm wins a
    round when f_bad - f_good > U_good - U_bad ~ 0: the k-NN means have sds sqrt(0.8 * 0.2 / K) and
    sqrt(0.72 * 0.28 / K), so it does with probability Phi(-0.08 / sqrt(0.3616 / K)): 23% at K = 32
    (the cap k_max = 32), 1.7% at K = 256. The default cap max(32, ceil(N / 2))
    reaches 256 at 512 points, and the worse arm's smaller K keeps its bonus larger only while it holds
    few points (UCB's retries, at K = N / 2 instead of N). Add the warm-up rounds: the share stays below
    10% with a cap that grows linearly in N, and cannot at K = 32 or with max(32, ceil(sqrt N))
    (experiments/knn_cap.py)."""
    share = np.mean([_context_free_share_of_worse(seed) for seed in (0, 1)])
    assert share < 0.10


def test_k_grows_with_the_arms_history_up_to_the_work_cap() -> None:
    """l = 0 (fewer than min_pairs variogram pairs): U(k) = s sqrt(theta ln t / k) falls with k, so k is
    the cap min(N, k_max, max(32, ceil(N / 2))) and f is the mean reward of those k nearest points (eq. 3):
    the whole history up to 32 points, then the nearest 32, then the nearest half, then k_max."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = (rng.random(2000) < 0.5).astype(np.float64)
    q = x[0]
    order = np.argsort(1.0 - x.astype(np.float64) @ q.astype(np.float64), kind="stable")
    cases = ((20, 256, 20), (64, 256, 32), (101, 256, 51), (300, 256, 150), (2000, 256, 256), (600, 32, 32))
    for n, k_max, k in cases:
        policy = KnnUCB(arms=["a"], min_pairs=10**6, k_max=k_max)
        policy.warm_start(x[:n], ["a"] * n, y[:n])
        policy.t = 999  # round 1000: log t > 0, so the bonus falls strictly with k
        a = policy.select(Context(embedding=q)).scores["a"]
        assert a["k"] == k
        near = order[order < n][:k]
        assert a["estimate"] == pytest.approx(float(y[near].mean()))


def test_the_paper_preset_lets_k_reach_the_whole_history() -> None:
    """Eq. 5 as written: k <= N_g (under the work cap k_max)."""
    paper = KnnUCB(arms=["a"], preset="paper")
    assert [paper.k_cap(n) for n in (20, 100, 600, 2000)] == [32, 100, 256, 256]


def test_a_reselect_with_tried_keeps_the_round() -> None:
    policy = KnnUCB(arms=["a", "b", "c"], seed=0)
    _run(policy, _stream(1, 30))
    assert policy.t == 30
    d = policy.select(Context(embedding=X0 @ np.eye(2, 3, dtype=np.float32), tried=["a"]))
    assert d.info["t"] == 30 and policy.t == 30 and d.arms[0] != "a"
    assert policy.select(Context(embedding=np.array([1, 0, 0], dtype=np.float32))).info["t"] == 31
