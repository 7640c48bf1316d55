"""The floor against the incumbent on the simulator's trace (bench/incumbent_check.py), by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.dataset import load_dataset
from bench.incumbent_check import floor_ratio, incumbent_comparison
from bench.policy_spec import parse_spec
from bench.report_table import format_table
from bench.result_schema import validate_report
from bench.run_command import floor_conflicts
from replay_dataset.files import write_dataset
from routers.base import Context, Decision
from tests.unit.bench.scripted_policy import Script, ScriptedPolicy, register, replay_with_repeats

# One prompt, success threshold 0.5. model: mid (reward 1, $0.01), pricey (1, $0.1), weak (0.4, $0.002).
MODELS = [
    {"name": "mid", "usd_per_call": 0.01},
    {"name": "pricey", "usd_per_call": 0.1},
    {"name": "weak", "usd_per_call": 0.002},
]
ROWS = [{"id": "only", "prompt": "p", "rewards": {"mid": 1, "pricey": 1, "weak": 0.4}, "context": [1.0]}]


def test_floor_ratio_is_the_minimum_of_the_cumulative_ratio_from_the_start_round() -> None:
    # cumulative: router 1, 1, 2, 3; incumbent 1, 2, 3, 3 -> ratios 1, 1/2, 2/3, 1
    reward, incumbent = np.array([1.0, 0.0, 1.0, 1.0]), np.array([1.0, 1.0, 1.0, 0.0])
    assert floor_ratio(reward, incumbent, start=1) == pytest.approx(0.5)
    assert floor_ratio(reward, incumbent, start=3) == pytest.approx(2 / 3)
    # rounds whose incumbent sum is 0 are skipped; none left -> None
    assert floor_ratio(np.array([0.0, 1.0]), np.array([0.0, 2.0]), start=1) == pytest.approx(0.5)
    assert floor_ratio(np.array([1.0, 1.0]), np.zeros(2), start=1) is None
    assert floor_ratio(np.ones(5), np.ones(5), start=100) is None  # fewer rounds than the start


def test_comparison_counts_rounds_off_the_incumbent_and_the_cost_saved() -> None:
    figures = incumbent_comparison(
        reward=np.array([1.0, 0.0, 1.0, 1.0]),
        cost=np.array([0.1, 0.01, 0.01, 0.0]),
        delivered=np.array([0, 1, 1, -1]),  # the last round declined: off the incumbent
        incumbent=np.array([0, 0, 0, 0]),
        incumbent_reward=np.array([1.0, 1.0, 1.0, 0.0]),
        incumbent_cost=np.full(4, 0.1),
        start=2,
    )
    assert figures == {
        "floor_ratio": pytest.approx(0.5),
        "off_incumbent_share": 0.75,
        "cost_saved_share": pytest.approx(1 - 0.12 / 0.4),
        "spend_share": pytest.approx(0.12 / 0.4),
        "cost_saved_usd": pytest.approx(0.28 / 4),
        "incumbent_reward": 0.75,
        "floor_over_target_share": 0.0,
    }


def _alternate(info: dict) -> Script:
    """mid in even rounds, weak in odd ones (round = the decision key)."""

    def script(policy: ScriptedPolicy, context: Context) -> Decision:
        arm = "mid" if int(str(context.decision_key)) % 2 == 0 else "weak"
        return Decision(arms=[arm], info=dict(info))

    return script


@pytest.mark.parametrize(
    ("info", "ratio", "off", "saved", "saved_usd"),
    [
        # no incumbent named: the highest-priced model, pricey (reward 1, $0.1). Cumulative reward after
        # round t (1-based) is 0.7 t for even t, 0.7 t + 0.3 for odd t; the incumbent's is t.
        ({}, 0.7, 1.0, 1 - 0.006 / 0.1, 0.094),
        # the decision names mid (reward 1, $0.01): half the rounds are on it
        ({"incumbent": "mid"}, 0.7, 0.5, 1 - 0.006 / 0.01, 0.004),
    ],
)
def test_the_report_checks_the_floor_on_the_simulators_trace(
    monkeypatch, tmp_path: Path, info, ratio, off, saved, saved_usd
) -> None:
    dataset = load_dataset(write_dataset(tmp_path / "d", MODELS, ROWS, (0.0, 1.0), "one prompt"))
    register(monkeypatch, "scripted", _alternate(info))
    assert dataset.contexts is not None
    result = replay_with_repeats(dataset, [parse_spec("scripted")], horizon=300, seeds=2)
    block = result.report["policies"][0]["incumbent"]
    assert block["floor_from_round"] == 100
    assert len(block["per_seed"]) == 2
    for seed in block["per_seed"]:
        assert seed["floor_ratio"] == pytest.approx(ratio)
        assert seed["off_incumbent_share"] == pytest.approx(off)
        assert seed["cost_saved_share"] == pytest.approx(saved)
        assert seed["cost_saved_usd"] == pytest.approx(saved_usd)
    assert block["min_floor_ratio"] == pytest.approx(ratio)
    validate_report(result.report)
    assert "floor ratio" in format_table(result.report)
    assert f"{ratio:.4f}" in format_table(result.report)


def test_the_floor_ratio_counts_served_rewards_only_and_spend_counts_shadow_calls(
    monkeypatch, tmp_path: Path
) -> None:
    """As the alternating case against pricey (ratio 0.7), with every weak round also shadowing pricey
    (reward 1, $0.1): the ratio is unchanged, the spend is (0.01 + 0.002 + 0.1) / 2 per round, and the
    shadow share (shadow calls / served requests) is 1/2."""

    def script(policy: ScriptedPolicy, context: Context) -> Decision:
        even = int(str(context.decision_key)) % 2 == 0
        return Decision(arms=["mid" if even else "weak"], shadow=[] if even else ["pricey"])

    dataset = load_dataset(write_dataset(tmp_path / "d", MODELS, ROWS, (0.0, 1.0), "one prompt"))
    register(monkeypatch, "scripted", script)
    result = replay_with_repeats(dataset, [parse_spec("scripted")], horizon=300, seeds=2)
    row = result.report["policies"][0]
    assert row["incumbent"]["min_floor_ratio"] == pytest.approx(0.7)
    assert row["incumbent"]["spend_share"] == pytest.approx(0.056 / 0.1)
    assert row["shadow_calls"] == 150 and row["shadow_share"] == pytest.approx(0.5)
    validate_report(result.report)
    table = format_table(result.report).splitlines()
    assert table[1].split()[-1] == "shadow" and table[-1].split()[-1] == "0.500"


def test_the_report_counts_the_rounds_the_floor_held_over_a_cost_target(monkeypatch, tmp_path: Path) -> None:
    """A policy whose even rounds say ``floor_over_target`` (mid, $0.01) under a $0.004 target and whose odd
    rounds do not (weak, $0.002): half the rounds are over target, the spend held is 0.006 = 150% of it,
    and ``bench run`` prints one ``conflict:`` line saying so."""

    def script(policy: ScriptedPolicy, context: Context) -> Decision:
        even = int(str(context.decision_key)) % 2 == 0
        info = {"incumbent": "mid", "floor_over_target": even, "cost_target": 0.004}
        return Decision(arms=["mid" if even else "weak"], info=info)

    dataset = load_dataset(write_dataset(tmp_path / "d", MODELS, ROWS, (0.0, 1.0), "one prompt"))
    register(monkeypatch, "scripted", script)
    result = replay_with_repeats(dataset, [parse_spec("scripted")], horizon=200, seeds=2)
    block = result.report["policies"][0]["incumbent"]
    assert block["floor_over_target_share"] == pytest.approx(0.5)
    assert block["cost_target"] == 0.004
    assert block["spend_share"] == pytest.approx(0.006 / 0.01)
    validate_report(result.report)
    (line,) = floor_conflicts(result.report)
    assert "50.0% of rounds" in line and "150% of the target 0.004" in line
