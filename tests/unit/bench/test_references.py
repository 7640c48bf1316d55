"""Oracle, best single, regret and opr on a hand-computed 2-model, 3-prompt dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.dataset import load_dataset
from bench.policy_spec import parse_spec
from replay_dataset.files import write_dataset
from routers.base import Decision
from tests.unit.bench.scripted_policy import always, register, replay_with_repeats

# A costs 0.01 USD a call, B 0.03. Rewards (mean): p0 A=1 B=1; p1 A=0 B=1; p2 A=0.5 (samples) B=0.
# lambda = 10: utilities p0 A .9 B .7 | p1 A -.1 B .7 | p2 A .4 B -.3 -> oracle A, B, A; best single A
#   (mean u: A .4, B .3667); always-B regret per prompt .2, 0, .7; optimal only on p1.
# lambda = 0: p0 is a tie (oracle takes the cheaper A, B counts as optimal too); oracle A|B, B, A;
#   best single B (mean reward A .5, B .6667); always-B regret 0, 0, .5; optimal on p0 and p1.
MODELS = [
    {"name": "A", "usd_per_call": 0.01},
    {"name": "B", "usd_per_call": 0.03},
]
ROWS = [
    {"id": "p0", "prompt": "zero", "rewards": {"A": 1, "B": 1}, "context": [1, 0]},
    {"id": "p1", "prompt": "one", "rewards": {"A": 0, "B": 1}, "context": [0, 1]},
    {"id": "p2", "prompt": "two", "rewards": {"A": [0.5, 0.5], "B": 0}, "context": [1, 1]},
]


@pytest.fixture
def dataset(tmp_path: Path):
    return load_dataset(write_dataset(tmp_path / "d", MODELS, ROWS, (0.0, 1.0), "hand"))


@pytest.mark.parametrize(
    ("lam", "oracle_reward", "oracle_cost", "best_single", "regret_b", "optimal_b"),
    [
        (10.0, [1, 1, 0.5], [0.01, 0.03, 0.01], "A", [0.2, 0.0, 0.7], [0, 1, 0]),
        (0.0, [1, 1, 0.5], [0.01, 0.03, 0.01], "B", [0.0, 0.0, 0.5], [1, 1, 0]),
    ],
)
def test_references_regret_and_opr_match_hand_computation(
    monkeypatch, dataset, lam, oracle_reward, oracle_cost, best_single, regret_b, optimal_b
) -> None:
    register(monkeypatch, "always-b", always(lambda: Decision(arms=["B"])))
    result = replay_with_repeats(dataset, [parse_spec("always-b")], horizon=40, seeds=3, cost_weight=lam)
    counts = np.array(
        [np.bincount(np.random.default_rng(s).integers(3, size=40), minlength=3) for s in range(3)]
    ).sum(axis=0)
    share = counts / counts.sum()
    ref = result.report["reference"]
    assert ref["oracle"]["mean_reward"] == pytest.approx(share @ oracle_reward)
    assert ref["oracle"]["mean_cost"] == pytest.approx(share @ oracle_cost)
    assert ref["oracle"]["mean_regret"] == 0.0
    assert ref["oracle"]["opr"] == 1.0
    assert ref["best_single"]["name"] == best_single
    row = result.report["policies"][0]
    assert row["spec"] == "always-b"
    assert row["mean_regret"] == pytest.approx(share @ regret_b)
    assert row["opr"] == pytest.approx(share @ optimal_b)
    assert row["mean_cost"] == pytest.approx(0.03)
    assert row["mean_utility"] == pytest.approx(share @ [1, 1, 0] - lam * 0.03)
    assert ref["oracle"]["mean_utility"] - row["mean_utility"] == pytest.approx(row["mean_regret"])


def test_random_reference_picks_each_model_about_half_the_time(dataset) -> None:
    result = replay_with_repeats(dataset, [], horizon=2000, seeds=2)
    # E[cost] = (0.01 + 0.03) / 2 = 0.02; sd of the mean of 4000 fair picks of +-0.01 is 0.00016
    assert result.report["reference"]["random"]["mean_cost"] == pytest.approx(0.02, abs=0.0008)


def test_ci95_is_196_sd_over_sqrt_seeds_of_per_seed_means(monkeypatch, dataset) -> None:
    register(monkeypatch, "always-b", always(lambda: Decision(arms=["B"])))
    result = replay_with_repeats(dataset, [parse_spec("always-b")], horizon=30, seeds=4)
    per_seed = [trace.reward.mean() for trace in result.runs["always-b"]]
    expected = 1.96 * np.std(per_seed, ddof=1) / 2.0
    assert expected > 0
    assert result.report["policies"][0]["ci95"] == pytest.approx(expected)


def test_schedule_restricts_the_oracle_and_tells_the_policy(monkeypatch, dataset) -> None:
    from bench.arm_schedule import parse_arm_event

    events = [parse_arm_event("B@10", "add"), parse_arm_event("A@20", "remove")]
    register(monkeypatch, "first", lambda policy, context: Decision(arms=[next(iter(context.costs))]))
    result = replay_with_repeats(dataset, [parse_spec("first")], horizon=30, seeds=1, events=events)
    from tests.unit.bench.scripted_policy import ScriptedPolicy

    policy = ScriptedPolicy.instances[-1]
    assert policy.arm_log == [("add", "B"), ("remove", "A")]
    assert [sorted(c.costs) for c in policy.contexts[9:11]] == [["A"], ["A", "B"]]
    assert sorted(policy.contexts[20].costs) == ["B"]
    oracle = result.references["oracle"][0]
    # before round 10 only A exists: the oracle (and the policy) call A, which costs 0.01
    np.testing.assert_allclose(oracle.cost[:10], 0.01)
    np.testing.assert_allclose(result.runs["first"][0].cost[20:], 0.03)
    assert result.runs["first"][0].optimal[:10].all()


def test_every_policy_sees_the_same_prompts_and_reward_draws(monkeypatch, dataset) -> None:
    from tests.unit.bench.scripted_policy import ScriptedPolicy

    register(monkeypatch, "always-a", always(lambda: Decision(arms=["A"])))
    result = replay_with_repeats(
        dataset, [parse_spec("always-a"), parse_spec("always-a:x=1")], horizon=25, seeds=2
    )
    first, second = ScriptedPolicy.instances[-4], ScriptedPolicy.instances[-3]  # seed 0 of each spec
    assert [p.seed for p in (first, second)] == [0, 0]
    assert [c.embedding.tolist() for c in first.contexts] == [c.embedding.tolist() for c in second.contexts]
    for a, b in zip(result.runs["always-a"], result.runs["always-a:x=1"], strict=True):
        np.testing.assert_array_equal(a.reward, b.reward)
    seed0, seed1 = result.runs["always-a"]
    assert not np.array_equal(seed0.reward, seed1.reward)
