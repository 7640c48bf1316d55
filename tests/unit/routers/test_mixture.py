"""Mixture policies: warm-up, the decision each round makes, a mixture beating every single arm, arms
coming and going, and state round trips through encode/decode and the registry."""

from __future__ import annotations

import numpy as np
import pytest

from routers.base import Context, Observation, PolicyConfigError, decode_state, encode_state
from routers.diversity import build_objective
from routers.mixture import MixtureUCBOGD, best_single_arm, optimal_mixture
from routers.registry import POLICIES, build_policy, restore_policy
from routers.simplex import solve_simplex_qp

NAMES = ("mixture-ucb-cab", "mixture-ucb-ogd", "mixture-greedy", "vanilla-ucb")
CENTRES = {"a": np.array([0.0, 0.0]), "b": np.array([3.0, 0.0]), "c": np.array([0.0, 3.0])}
STDS = {"a": 0.3, "b": 0.3, "c": 1.0}
CTX = Context(embedding=np.zeros(2, dtype=np.float32))


@pytest.fixture(autouse=True, scope="module")
def _single_blas_thread():
    """Tiny eigendecompositions run ~70x slower with multi-threaded OpenBLAS on a busy machine."""
    try:
        from threadpoolctl import threadpool_limits  # installed with scikit-learn
    except ImportError:  # pragma: no cover
        yield
        return
    with threadpool_limits(limits=1):
        yield


def _draw(arm: str, rng: np.random.Generator) -> np.ndarray:
    return CENTRES[arm] + STDS[arm] * rng.normal(size=2)


def _run(policy, rounds: int, seed: int = 0, start: int = 0) -> list[str]:
    rng = np.random.default_rng(seed + 1000 * start)
    chosen = []
    for _ in range(rounds):
        arm = policy.select(CTX).arms[0]
        chosen.append(arm)
        policy.update(Observation(embedding=CTX.embedding, arm=arm, output_embedding=_draw(arm, rng)))
    return chosen


def test_registry_names() -> None:
    for name in NAMES:
        assert name in POLICIES
        assert build_policy(name, ["a"], hyperparameters={"objective": "rke"}).name == name


@pytest.mark.parametrize("name", NAMES)
def test_warm_up_is_round_robin_then_mixture_decision(name: str) -> None:
    policy = build_policy(name, list(CENTRES), seed=3, hyperparameters={"init_pulls": 2, "bandwidth": 1.0})
    assert _run(policy, 6) == ["a", "b", "c", "a", "b", "c"]
    decision = policy.select(CTX)
    assert decision.mode == "mixture" and len(decision.arms) == 1
    weights = decision.info["weights"]
    assert set(weights) == set(CENTRES) and sum(weights.values()) == pytest.approx(1.0)
    assert all(w >= 0 for w in weights.values())


def test_output_embedding_is_the_feedback() -> None:
    policy = build_policy("mixture-greedy", ["a", "b"], hyperparameters={"init_pulls": 1})
    policy.update(Observation(embedding=np.zeros(2), arm="a", reward=1.0))  # no output: ignored
    policy.update(Observation(embedding=np.zeros(2), arm="zzz", output_embedding=np.ones(2)))  # unknown arm
    assert policy.objective.counts.tolist() == [0, 0]
    policy.update(Observation(embedding=np.zeros(2), arm="b", output_embedding=np.ones(2)))
    assert policy.objective.counts.tolist() == [0, 1]
    assert policy.select(CTX).arms == ["a"]  # the arm still without a sample


@pytest.mark.parametrize("name", NAMES)
def test_an_arm_that_never_returns_an_output_is_given_up_after_the_bound(name: str) -> None:
    # default bound: 2 x init_pulls = 4 feedbacks without an output embedding
    policy = build_policy(name, list(CENTRES), seed=0, hyperparameters={"init_pulls": 2, "bandwidth": 1.0})
    rng = np.random.default_rng(0)
    chosen = []
    for _ in range(30):
        decision = policy.select(CTX)
        arm = decision.arms[0]
        chosen.append(arm)
        output = None if arm == "c" else _draw(arm, rng)
        policy.update(Observation(embedding=CTX.embedding, arm=arm, reward=1.0, output_embedding=output))
    assert chosen[:8] == ["a", "b", "c", "c", "c", "c", "a", "b"]
    assert "c" not in chosen[8:]
    assert decision.info["without_output"] == ["c"] and "c" not in decision.info["weights"]
    restored = restore_policy(decode_state(encode_state(policy.state_dict())))
    assert restored.select(CTX).info["without_output"] == ["c"]


def test_the_missing_output_bound_is_a_hyperparameter_and_all_silent_arms_get_uniform_weights() -> None:
    policy = build_policy("mixture-greedy", ["a", "b"], seed=0, hyperparameters={"max_missing_outputs": 1})
    chosen = []
    for _ in range(2):
        arm = policy.select(CTX).arms[0]
        chosen.append(arm)
        policy.update(Observation(embedding=CTX.embedding, arm=arm, reward=0.5))
    assert chosen == ["a", "b"]
    decision = policy.select(CTX)
    assert decision.info["phase"] == "no-output" and decision.info["weights"] == {"a": 0.5, "b": 0.5}
    with pytest.raises(PolicyConfigError, match="max_missing_outputs"):
        build_policy("mixture-greedy", ["a"], hyperparameters={"max_missing_outputs": 0})


def test_cab_weights_are_the_qp_with_bonus_subtracted() -> None:
    policy = build_policy(
        "mixture-ucb-cab", list(CENTRES), hyperparameters={"bandwidth": 1.0, "delta_l": 0.3}
    )
    _run(policy, 40)
    idx = policy.objective.indices(list(CENTRES))
    k, f = policy.objective.quadratic_terms(idx)
    n = policy.objective.counts.astype(float)
    eps = 0.3 * np.sqrt(np.log(n.sum()) / (2 * n))
    expected = solve_simplex_qp(k, f - eps)
    got = policy.select(CTX).info["weights"]
    np.testing.assert_allclose([got[a] for a in CENTRES], expected, atol=1e-9)


def test_ogd_index_subtracts_both_bonuses() -> None:
    ref = np.random.default_rng(9).normal(size=(20, 2)) * 2
    policy = MixtureUCBOGD(
        arms=list(CENTRES),
        bandwidth=1.0,
        reference=ref,
        quality="precision",
        quality_weight=0.5,
        quality_k=2,
        delta_l=0.6,
        delta_g=0.4,
    )
    _run(policy, 30)
    obj = policy.objective
    idx = obj.indices(list(CENTRES))
    k = obj.pair_sums / np.outer(obj.counts, obj.counts)
    n = obj.counts.astype(float)
    qbar = obj.quality_sums / n
    eps = 0.6 * np.sqrt(np.log(n.sum()) / (2 * n)) + 0.5 * 0.4 / n
    h = 2 * k @ n / n.sum() - 0.5 * qbar - eps
    decision = policy.select(CTX)
    np.testing.assert_allclose([decision.scores[a]["index"] for a in CENTRES], h, rtol=1e-10)
    assert decision.arms == [list(CENTRES)[int(np.argmin(h))]]
    assert idx.tolist() == [0, 1, 2]


def _pooled_rke(policy) -> float:
    return policy.objective.score(policy.objective.pooled_loss())


def test_mixture_beats_every_single_arm_on_a_constructed_case() -> None:
    # offline: three clusters; the RKE-optimal mixture is interior and strictly better than any arm
    rng = np.random.default_rng(0)
    offline = build_objective("rke", bandwidth=1.0, max_samples_per_arm=None)
    for arm in CENTRES:
        offline.observe_many(arm, np.stack([_draw(arm, rng) for _ in range(300)]))
    weights = optimal_mixture(offline)
    best_arm, best_loss = best_single_arm(offline)
    alpha = np.array([weights[a] for a in CENTRES])
    assert alpha.min() > 0.1
    assert best_arm == "c"
    assert 1 / offline.loss(alpha) > 1.3 / best_loss  # the mixture's RKE beats the best arm's by > 30%
    # online: after 600 rounds every mixture policy collects a set whose RKE beats the best single arm
    # and Vanilla-UCB (which converges to one arm) does not come close
    final = {}
    for name in NAMES:
        policy = build_policy(name, list(CENTRES), seed=1, hyperparameters={"bandwidth": 1.0})
        _run(policy, 600, seed=1)
        final[name] = _pooled_rke(policy)
    for name in ("mixture-ucb-cab", "mixture-ucb-ogd", "mixture-greedy"):
        assert final[name] > 1.2 / best_loss, final
        assert final[name] > 1.2 * final["vanilla-ucb"], final


@pytest.mark.parametrize("objective", ["vendi", "fd"])
def test_greedy_on_smooth_objectives_learns_the_oracle_mixture(objective: str) -> None:
    rng = np.random.default_rng(4)
    ref = np.vstack([_draw(a, rng) for a in CENTRES for _ in range(100)])
    options = {
        "objective": objective,
        "reference": ref.tolist(),
        "feature": "rff",
        "rff_dim": 32,
        "bandwidth": 1.0,
    }
    offline = build_objective(objective, bandwidth=1.0, reference=ref, feature="rff", rff_dim=32)
    for arm in CENTRES:
        offline.observe_many(arm, np.stack([_draw(arm, rng) for _ in range(300)]))
    oracle = optimal_mixture(offline)
    policy = build_policy("mixture-greedy", list(CENTRES), seed=2, hyperparameters=options)
    _run(policy, 300, seed=2)
    learned = policy.select(CTX).info["weights"]
    assert max(abs(learned[a] - oracle[a]) for a in CENTRES) < 0.12, (learned, oracle)


@pytest.mark.parametrize("name", NAMES)
def test_state_round_trip_reproduces_selections(name: str) -> None:
    ref = np.random.default_rng(9).normal(size=(20, 2)) * 2
    hp = {
        "objective": "kid",
        "reference": ref.tolist(),
        "bandwidth": 1.0,
        "max_samples_per_arm": 16,
        "init_pulls": 2,
    }
    if name in ("mixture-greedy", "mixture-ucb-cab"):
        hp = {**hp, "objective": "vendi", "feature": "rff", "rff_dim": 8}
    policy = build_policy(name, list(CENTRES), seed=5, hyperparameters=hp)
    _run(policy, 40, seed=5)
    clone = restore_policy(decode_state(encode_state(policy.state_dict())))
    assert type(clone) is type(policy) and clone.config == policy.config
    assert _run(clone, 30, seed=6, start=1) == _run(policy, 30, seed=6, start=1)


def test_selection_uses_the_context_generator() -> None:
    policy = build_policy("mixture-greedy", list(CENTRES), hyperparameters={"bandwidth": 1.0})
    _run(policy, 60)
    picks = [
        policy.select(Context(embedding=CTX.embedding, rng=np.random.default_rng(123))).arms[0]
        for _ in range(5)
    ]
    assert len(set(picks)) == 1  # same generator state -> same draw, whatever the policy's own rng did


@pytest.mark.parametrize("name", NAMES)
def test_arms_come_and_go(name: str) -> None:
    policy = build_policy(name, ["a", "b"], seed=0, hyperparameters={"bandwidth": 1.0, "init_pulls": 2})
    _run(policy, 10)
    policy.add_arm("c")
    assert _run(policy, 2) == ["c", "c"]  # the newcomer warms up first
    policy.remove_arm("a")
    assert policy.objective.arms == ["b", "c"]
    chosen = _run(policy, 20)
    assert set(chosen) <= {"b", "c"}
    restricted = policy.select(Context(embedding=CTX.embedding, arms=["c"]))
    assert restricted.arms == ["c"] and restricted.info["weights"] == {"c": 1.0}


def test_bad_hyperparameters_are_named() -> None:
    with pytest.raises(PolicyConfigError, match="objective"):
        build_policy("mixture-ucb-cab", ["a"], hyperparameters={"objective": "entropy"})
    with pytest.raises(PolicyConfigError, match="delta_l"):
        build_policy("mixture-ucb-ogd", ["a"], hyperparameters={"delta_l": -1})
    with pytest.raises(PolicyConfigError, match="solver"):
        build_policy("mixture-greedy", ["a"], hyperparameters={"solver": "magic"})
    with pytest.raises(PolicyConfigError, match="init_pulls"):
        build_policy("vanilla-ucb", ["a"], hyperparameters={"init_pulls": 0})
    with pytest.raises(PolicyConfigError, match=r"unknown hyperparameter 'nonsense'; known: objective"):
        build_policy("mixture-greedy", ["a"], hyperparameters={"nonsense": 1})


def test_ucb_on_smooth_objectives_generalises_the_quadratic_rules() -> None:
    hp = {"objective": "vendi", "feature": "rff", "rff_dim": 16, "bandwidth": 1.0, "init_pulls": 3}
    cab0 = build_policy("mixture-ucb-cab", list(CENTRES), seed=1, hyperparameters={**hp, "delta_l": 0.0})
    greedy = build_policy("mixture-greedy", list(CENTRES), seed=1, hyperparameters=hp)
    ogd = build_policy("mixture-ucb-ogd", list(CENTRES), seed=1, hyperparameters=hp)
    for policy in (cab0, greedy, ogd):
        _run(policy, 30, seed=3)
    # no bonus: CAB's optimistic problem is Greedy's problem
    w_cab, w_greedy = cab0.select(CTX).info["weights"], greedy.select(CTX).info["weights"]
    assert max(abs(w_cab[a] - w_greedy[a]) for a in CENTRES) < 1e-3
    # OGD: h = grad L(n / t) - eps
    obj = ogd.objective
    n = obj.counts.astype(float)
    _, grad = obj.loss_and_gradient(n / n.sum())
    h = grad - 0.6 * np.sqrt(np.log(n.sum()) / (2 * n))
    decision = ogd.select(CTX)
    np.testing.assert_allclose([decision.scores[a]["index"] for a in CENTRES], h, rtol=1e-10)


def test_greedy_eg_solver_approaches_the_exact_solution() -> None:
    hp = {"bandwidth": 1.0, "init_pulls": 10}
    exact = build_policy("mixture-greedy", list(CENTRES), seed=0, hyperparameters=hp)
    eg = build_policy(
        "mixture-greedy",
        list(CENTRES),
        seed=0,
        hyperparameters={**hp, "solver": "eg", "eg_steps": 300, "eg_eta": 20.0},
    )
    few = build_policy(
        "mixture-greedy",
        list(CENTRES),
        seed=0,
        hyperparameters={**hp, "solver": "eg", "eg_steps": 1, "eg_eta": 0.01},
    )
    for policy in (exact, eg, few):
        _run(policy, 30, seed=8)  # same outputs: warm-up only
    w_exact = exact.select(CTX).info["weights"]
    w_eg = eg.select(CTX).info["weights"]
    w_few = few.select(CTX).info["weights"]
    assert max(abs(w_eg[a] - w_exact[a]) for a in CENTRES) < 0.02
    # one tiny step stays at the proportions n / t = 1/3 each (the code's "tilt of the proportions")
    assert max(abs(w_few[a] - 1 / 3) for a in CENTRES) < 0.01
