"""State round trips: encode_state / decode_state then registry.restore_policy reproduces selections."""

import numpy as np
import pytest

from bench.synth_promptwise import ARMS, PRICES
from routers.base import Context, Observation, decode_state, encode_state
from routers.linear import LinUCB
from routers.registry import POLICIES, build_policy, restore_policy
from routers.retry import retrying

CASCADE = [
    ("promptwise", {"prices": PRICES}),
    ("promptwise", {"prices": PRICES, "per_step_update": True, "allow_repeat": True}),
    ("promptwise", {"prices": PRICES, "update": "exact", "bias": True}),
    ("promptwise-rbf", {"prices": PRICES}),
    ("random-till-succeed", {}),
    ("greedy-till-succeed", {"prices": PRICES}),
    ("lowest-cost", {"prices": PRICES}),
    ("highest-cost", {"prices": PRICES}),
]
SETS = [
    ("c2mab-v", {"prices": PRICES}),
    ("c2mab-v", {"prices": PRICES, "reward": "suc", "batch_size": 3}),
    ("c2mab-v", {"prices": PRICES, "reward": "aic", "direct": True}),
    ("c2mab-v", {"reward": "awc", "solver": "greedy", "rounding": "pairwise"}),
    ("cucb", {"prices": PRICES}),
    ("eps-greedy-set", {"prices": PRICES, "reward": "suc"}),
    ("thompson-set", {"prices": PRICES}),
]


def _contexts(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(n, 3)).astype(np.float32)
    return list(xs / np.linalg.norm(xs, axis=1, keepdims=True))


def _drive(policy, xs, rng, costs=None) -> list[list[str]]:
    """Run cascades/sets on xs with deterministic outcomes; return every decision's arms."""
    out = []
    for x in xs:
        tried: list[str] = []
        for _ in range(5):
            decision = policy.select(Context(embedding=x, tried=tuple(tried), costs=costs))
            out.append(list(decision.arms))
            if not decision.arms:
                break
            for arm in decision.arms if decision.mode == "set" else decision.arms[:1]:
                reward = float(rng.random() < 0.4)
                policy.update(
                    Observation(embedding=x, arm=arm, reward=reward, cost=0.01, kind="cascade-step")
                )
            if decision.mode != "cascade" or not decision.adaptive:
                break
            tried.append(decision.arms[0])
    return out


@pytest.mark.parametrize(("name", "hyper"), CASCADE + SETS)
def test_round_trip_reproduces_selections(name, hyper):
    policy = build_policy(name, ARMS, seed=3, hyperparameters=hyper)
    _drive(policy, _contexts(12, 0), np.random.default_rng(0), costs=PRICES)
    restored = restore_policy(decode_state(encode_state(policy.state_dict())))
    later = _contexts(8, 1)
    assert _drive(restored, later, np.random.default_rng(5), PRICES) == _drive(
        policy, later, np.random.default_rng(5), PRICES
    )


def test_retry_wrapper_cascades_without_repeats_and_round_trips(monkeypatch):
    factory = retrying(LinUCB)
    monkeypatch.setitem(POLICIES, "linucb", factory)  # how pak-ucb is to be wired: retrying(PAKUCB)
    plain = factory(arms=ARMS, seed=0)
    assert isinstance(plain, LinUCB)
    policy = factory(arms=ARMS, seed=0, retry=True, max_calls=2)
    x = _contexts(1, 2)[0]
    first = policy.select(Context(embedding=x))
    assert first.mode == "cascade" and first.adaptive and len(first.arms) == 1
    policy.update(Observation(embedding=x, arm=first.arms[0], reward=0.0, kind="cascade-step"))
    second = policy.select(Context(embedding=x, tried=tuple(first.arms)))
    assert second.arms and second.arms[0] != first.arms[0]
    assert policy.select(Context(embedding=x, tried=(first.arms[0], second.arms[0]))).arms == []
    state = decode_state(encode_state(policy.state_dict()))
    restored = restore_policy(state)
    assert isinstance(restore_policy(decode_state(encode_state(plain.state_dict()))), LinUCB)
    xs = _contexts(6, 3)
    assert _drive(restored, xs, np.random.default_rng(1)) == _drive(policy, xs, np.random.default_rng(1))


def test_retry_state_has_config_and_seed_on_top_and_old_states_load(monkeypatch):
    """A retry cascade's state is a PolicyWrapper's: ``config`` (the inner config with retry and
    max_calls, so an imported state rebuilds the cascade) and ``seed`` where a plain policy has them; a
    state saved before (``{"policy", "retry": {"max_calls"}, "inner"}``) still restores."""
    policy = build_policy("pak-ucb", ARMS, seed=4, hyperparameters={"retry": True, "max_calls": 2})
    x = _contexts(1, 2)[0]
    first = policy.select(Context(embedding=x))
    policy.update(Observation(embedding=x, arm=first.arms[0], reward=0.0, kind="cascade-step"))
    state = decode_state(encode_state(policy.state_dict()))
    assert state["seed"] == 4 and state["config"]["retry"] is True and state["config"]["max_calls"] == 2
    assert state["retry"]["config"] == {"retry": True, "max_calls": 2}
    rebuilt = build_policy("pak-ucb", ARMS, seed=state["seed"], hyperparameters=state["config"])
    assert type(rebuilt) is type(policy) and rebuilt.max_calls == 2  # type: ignore[attr-defined]
    legacy = {"policy": "pak-ucb", "retry": {"max_calls": 2}, "inner": state["inner"]}
    restored = [restore_policy(decode_state(encode_state(saved))) for saved in (state, legacy)]
    assert [r.max_calls for r in restored] == [2, 2]  # type: ignore[attr-defined]
    xs = _contexts(6, 3)
    played = _drive(policy, xs, np.random.default_rng(1))
    assert [_drive(r, xs, np.random.default_rng(1)) for r in restored] == [played, played]
