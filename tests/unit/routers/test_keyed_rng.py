"""A decision's generator built on the first draw (``KeyedRng``) decides exactly as one built up front."""

from __future__ import annotations

import numpy as np

from routers.base import Context, KeyedRng, Observation, decision_rng, encode_state
from routers.registry import POLICIES, build_policy

MEANS = {"a": 0.7, "b": 0.3, "c": 0.5}


def _play(name: str, lazy: bool, rounds: int = 40) -> tuple[list[tuple[list[str], list[str]]], bytes, int]:
    """``rounds`` selects and updates of policy ``name``, each decision's generator keyed by its round:
    the decisions (arms, queries), the final state, and how many decisions built their generator."""
    hyper = {"model": "a"} if name == "always" else {}
    policy = build_policy(name, list(MEANS), seed=3, hyperparameters=hyper)
    rng = np.random.default_rng(0)
    decisions = []
    built = 0
    for t in range(rounds):
        x = rng.normal(size=4).astype(np.float32)
        x /= np.linalg.norm(x)
        keyed = KeyedRng(11, t)
        context = Context(
            embedding=x,
            costs=dict.fromkeys(MEANS, 0.01),
            rng=keyed if lazy else decision_rng(11, t),
            decision_key=str(t),
        )
        decision = policy.select(context)
        built += keyed.built
        decisions.append((list(decision.arms), list(decision.query)))
        for arm in decision.arms[:1] + decision.query:
            reward = float(rng.random() < MEANS[arm])
            kind = "bandit" if arm in decision.arms else "query"
            policy.update(
                Observation(
                    embedding=x,
                    arm=arm,
                    reward=reward,
                    cost=0.01,
                    output_embedding=x,
                    kind=kind,
                    decision_key=str(t),
                )
            )
    return decisions, encode_state(policy.state_dict()), built


def test_every_policy_decides_and_learns_the_same_with_a_generator_built_on_first_draw() -> None:
    for name in POLICIES:
        eager, eager_state, _ = _play(name, lazy=False)
        lazy, lazy_state, _ = _play(name, lazy=True)
        assert lazy == eager, name
        assert lazy_state == eager_state, name


def test_a_select_that_draws_nothing_builds_no_generator() -> None:
    # `always` never draws while its model is a candidate
    assert _play("always", lazy=True)[2] == 0
    # kNN-UCB draws only on ties of its index: the first selects (every arm unexplored, index +inf)
    # tie, the later ones do not
    built = _play("knn-ucb", lazy=True, rounds=60)[2]
    assert 0 < built < 20, built


def test_a_keyed_generator_is_built_once_and_draws_what_the_eager_one_draws() -> None:
    keyed = KeyedRng(5, "d" * 32)
    assert not keyed.built
    first = keyed().random(2)
    assert keyed.built
    assert keyed() is keyed()
    eager = decision_rng(5, "d" * 32)
    assert np.array_equal(first, eager.random(2))
    assert np.array_equal(keyed().random(3), eager.random(3))  # the same stream, continued
