"""Executing decisions: cascades, adaptive cascades, sets (awc/suc/aic), queries, declines, budgets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.dataset import load_dataset
from bench.policy_spec import parse_spec
from replay_dataset.files import write_dataset
from routers.base import Context, Decision
from tests.unit.bench.scripted_policy import ScriptedPolicy, always, register, replay_with_repeats

# One prompt; success threshold 0.5 (midpoint of [0, 1]).
# model:  cheap  mid   pricey  weak
# reward: 0      1     1       0.4
# cost:   .001   .01   .1      .002
MODELS = [
    {"name": "cheap", "usd_per_call": 0.001},
    {"name": "mid", "usd_per_call": 0.01},
    {"name": "pricey", "usd_per_call": 0.1},
    {"name": "weak", "usd_per_call": 0.002},
]
ROWS = [
    {
        "id": "only",
        "prompt": "p",
        "rewards": {"cheap": 0, "mid": 1, "pricey": 1, "weak": 0.4},
        "context": [1.0, 0.0],
    }
]
HORIZON = 5


@pytest.fixture
def dataset(tmp_path: Path):
    return load_dataset(write_dataset(tmp_path / "d", MODELS, ROWS, (0.0, 1.0), "one prompt"))


def _run(monkeypatch, dataset, script, **kwargs):
    register(monkeypatch, "scripted", script)
    result = replay_with_repeats(dataset, [parse_spec("scripted")], horizon=HORIZON, seeds=1, **kwargs)
    return result.report["policies"][0], result.runs["scripted"][0], ScriptedPolicy.instances[-1]


def _per_round(policy: ScriptedPolicy) -> list[list[tuple[str, str, int, bool, bool]]]:
    rounds: dict[int, list] = {}
    for o in policy.observations:
        rounds.setdefault(o.extra["round"], []).append(
            (o.arm, o.kind, o.extra["step"], o.extra["success"], o.extra["final"])
        )
    return [rounds[t] for t in sorted(rounds)]


def test_cascade_stops_at_the_first_success_and_pays_for_every_step(monkeypatch, dataset) -> None:
    row, trace, policy = _run(
        monkeypatch,
        dataset,
        always(lambda: Decision(arms=["cheap", "weak", "mid", "pricey"], mode="cascade")),
    )
    assert _per_round(policy)[0] == [
        ("cheap", "cascade-step", 0, False, False),
        ("weak", "cascade-step", 1, False, False),
        ("mid", "cascade-step", 2, True, True),
    ]
    np.testing.assert_allclose(trace.cost, 0.001 + 0.002 + 0.01)
    np.testing.assert_allclose(trace.reward, 1.0)
    assert row["calls_per_round"] == 3
    assert row["success_rate"] == 1.0
    o = policy.observations[1]
    assert (o.reward, o.cost) == (0.4, 0.002)


def test_failed_cascade_delivers_the_best_reward_seen(monkeypatch, dataset) -> None:
    row, trace, _ = _run(
        monkeypatch, dataset, always(lambda: Decision(arms=["cheap", "weak"], mode="cascade"))
    )
    np.testing.assert_allclose(trace.reward, 0.4)
    assert row["success_rate"] == 0.0
    assert row["opr"] == 0.0


def test_adaptive_cascade_selects_again_with_the_tried_models(monkeypatch, dataset) -> None:
    order = ["cheap", "weak", "mid", "pricey"]

    def script(policy: ScriptedPolicy, context: Context) -> Decision:
        remaining = [a for a in order if a not in context.tried]
        return Decision(arms=remaining[:1], mode="cascade", adaptive=True)

    row, trace, policy = _run(monkeypatch, dataset, script)
    assert [tuple(c.tried) for c in policy.contexts[:3]] == [(), ("cheap",), ("cheap", "weak")]
    assert len(policy.contexts) == 3 * HORIZON
    assert [o[0] for o in _per_round(policy)[0]] == ["cheap", "weak", "mid"]
    assert all(o[1] == "cascade-step" for o in _per_round(policy)[0])
    np.testing.assert_allclose(trace.cost, 0.013)
    assert row["calls_per_round"] == 3

    row, trace, policy = _run(monkeypatch, dataset, script, max_calls=2)
    assert [o[0] for o in _per_round(policy)[0]] == ["cheap", "weak"]
    assert _per_round(policy)[0][-1][4] is True  # the bound makes the second call final
    assert policy.contexts[0].constraints == {"max_calls": 2}
    np.testing.assert_allclose(trace.reward, 0.4)


@pytest.mark.parametrize(
    ("reward_model", "called", "reward", "cost", "success"),
    [
        ("awc", ["cheap", "mid"], 1.0, 0.011, 1.0),
        ("suc", ["cheap", "mid", "weak"], 1.4, 0.013, 1.0),
        ("aic", ["cheap", "mid", "weak"], 0.0, 0.013, 0.0),
    ],
)
def test_set_rewards_combine_by_reward_model(
    monkeypatch, dataset, reward_model, called, reward, cost, success
):
    row, trace, policy = _run(
        monkeypatch,
        dataset,
        always(
            lambda: Decision(arms=["cheap", "mid", "weak"], mode="set", info={"reward_model": reward_model})
        ),
    )
    assert [o[0] for o in _per_round(policy)[0]] == called
    assert {o[1] for o in _per_round(policy)[0]} == {"bandit"}
    np.testing.assert_allclose(trace.reward, reward)
    np.testing.assert_allclose(trace.cost, cost)
    assert row["success_rate"] == success


def test_aic_of_successful_calls_multiplies(monkeypatch, dataset) -> None:
    _, trace, _ = _run(
        monkeypatch,
        dataset,
        always(lambda: Decision(arms=["mid", "pricey"], mode="set", info={"reward_model": "aic"})),
    )
    np.testing.assert_allclose(trace.reward, 1.0)


def test_query_calls_are_paid_reported_and_counted_but_not_rewarded(monkeypatch, dataset) -> None:
    def script(policy: ScriptedPolicy, context: Context) -> Decision:
        first = len(policy.contexts) == 1
        return Decision(arms=["weak"], query=["weak", "cheap", "pricey"] if first else [])

    row, trace, policy = _run(monkeypatch, dataset, script)
    assert _per_round(policy)[0] == [
        ("weak", "bandit", 0, False, False),
        ("cheap", "query", 0, False, False),
        ("pricey", "query", 1, True, True),
    ]
    assert trace.cost[0] == pytest.approx(0.002 + 0.001 + 0.1)
    np.testing.assert_allclose(trace.cost[1:], 0.002)
    np.testing.assert_allclose(trace.reward, 0.4)
    assert row["queries"] == 1 and row["query_calls"] == 2
    assert row["calls_per_round"] == pytest.approx((3 + 4) / 5)


def test_shadow_calls_are_paid_reported_and_counted_but_never_served(monkeypatch, dataset) -> None:
    def script(policy: ScriptedPolicy, context: Context) -> Decision:
        t = len(policy.contexts) - 1
        if t == 0:  # a model both queried and shadowed is called once, as the query
            return Decision(arms=["weak"], query=["cheap"], shadow=["cheap", "mid"])
        return Decision(arms=["weak"], shadow=["mid"] if t == 3 else [])

    row, trace, policy = _run(monkeypatch, dataset, script)
    rounds = _per_round(policy)
    assert rounds[0] == [
        ("weak", "bandit", 0, False, False),
        ("cheap", "query", 0, False, False),
        ("mid", "shadow", 1, True, True),
    ]
    assert rounds[3] == [("weak", "bandit", 0, False, False), ("mid", "shadow", 0, True, True)]
    assert trace.cost[0] == pytest.approx(0.002 + 0.001 + 0.01)
    assert trace.cost[3] == pytest.approx(0.002 + 0.01)
    np.testing.assert_allclose(trace.reward, 0.4)  # the served answer's, never the better shadow's
    assert trace.shadow_calls == 2 and trace.query_calls == 1
    assert row["shadow_calls"] == 2 and row["shadow_share"] == pytest.approx(2 / HORIZON)
    # the incumbent (pricey, the dearest) is compared on served rewards, and shadow spend counts
    assert row["incumbent"]["spend_share"] == pytest.approx((5 * 0.002 + 0.001 + 2 * 0.01) / (5 * 0.1))


def test_declined_prompts_get_the_low_reward_and_cost_nothing(monkeypatch, dataset) -> None:
    row, trace, policy = _run(monkeypatch, dataset, always(lambda: Decision(arms=[])))
    assert policy.observations == []
    np.testing.assert_allclose(trace.reward, 0.0)
    np.testing.assert_allclose(trace.cost, 0.0)
    assert row["declined_rate"] == 1.0 and row["calls_per_round"] == 0.0 and row["opr"] == 0.0


def test_budget_in_decision_info_gives_violation_per_eq_1(monkeypatch, dataset) -> None:
    row, _, _ = _run(
        monkeypatch,
        dataset,
        always(
            lambda: Decision(arms=["mid", "pricey"], mode="set", info={"reward_model": "suc", "budget": 0.05})
        ),
    )
    # spend 0.11 per round against rho 0.05: V(tau) = 0.06 for every tau
    assert row["budget"] == 0.05
    assert row["violation"] == pytest.approx(0.06)
    assert row["reward_per_violation"] == pytest.approx(2.0 / 0.06)
    row, _, _ = _run(monkeypatch, dataset, always(lambda: Decision(arms=["cheap"], info={"budget": 0.05})))
    assert row["violation"] == 0.0 and row["reward_per_violation"] is None


def test_a_policy_choosing_an_unavailable_model_is_an_error(monkeypatch, dataset) -> None:
    from bench.simulator import SimulationError

    with pytest.raises(SimulationError, match="'ghost'"):
        _run(monkeypatch, dataset, always(lambda: Decision(arms=["ghost"])))


def test_context_carries_each_models_cost_on_this_prompt(monkeypatch, dataset) -> None:
    _, _, policy = _run(monkeypatch, dataset, always(lambda: Decision(arms=["cheap"])))
    assert dict(policy.contexts[0].costs) == {"cheap": 0.001, "mid": 0.01, "pricey": 0.1, "weak": 0.002}
    assert policy.contexts[0].arms is None


def test_dataset_budget_applies_to_policies_and_references(tmp_path: Path, monkeypatch) -> None:
    root = write_dataset(tmp_path / "b", MODELS, ROWS, (0.0, 1.0), "budget", budget=0.004)
    data = load_dataset(root)
    register(monkeypatch, "scripted", always(lambda: Decision(arms=["mid"])))
    report = replay_with_repeats(data, [parse_spec("scripted")], horizon=4, seeds=1).report
    assert report["policies"][0]["violation"] == pytest.approx(0.01 - 0.004)
    # the oracle calls mid (reward 1, cheaper than pricey): the same spend
    assert report["reference"]["oracle"]["violation"] == pytest.approx(0.006)


def test_round_rng_gives_every_select_of_a_round_a_fresh_keyed_generator(monkeypatch, dataset) -> None:
    """``round_rng``: each select of round t (the adaptive cascade's re-selects too) gets a new
    ``round_rng(t)``, as the gateway rebuilds a seeded decision's generator for each cascade step."""
    from functools import partial

    from bench.arm_schedule import build_schedule
    from bench.replay_env import ReplayEnv
    from bench.simulator import run_policy
    from routers.base import decision_rng

    def script(policy: ScriptedPolicy, context: Context) -> Decision:
        remaining = [a for a in ["cheap", "weak", "mid"] if a not in context.tried]
        return Decision(arms=remaining[:1], mode="cascade", adaptive=True)

    register(monkeypatch, "scripted", script)
    env = ReplayEnv(
        dataset,
        dataset.contexts,
        build_schedule(dataset.model_names, [], HORIZON),
        0.0,
        0.5,
        draws="with-replacement",
    )
    policy = ScriptedPolicy(dataset.model_names, script=script)
    run_policy(policy, env, env.draw(0), round_rng=partial(decision_rng, 7))
    draws = [float(c.rng.random()) for c in policy.contexts]  # type: ignore[union-attr]
    per_round = [draws[3 * t : 3 * t + 3] for t in range(HORIZON)]
    for t, steps in enumerate(per_round):
        assert steps == [float(decision_rng(7, t).random())] * 3
    assert len({steps[0] for steps in per_round}) == HORIZON
    plain = ScriptedPolicy(dataset.model_names, script=script)
    run_policy(plain, env, env.draw(0))
    assert all(c.rng is None for c in plain.contexts)
