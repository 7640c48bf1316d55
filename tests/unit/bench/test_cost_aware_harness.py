"""The issue-4 policies through ``bench run``: budgets in USD, declared success thresholds, the set and
cascade oracles, spec validation before embedding, and PromptWise / C2MAB-V end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench import run_command
from bench.cli import main
from bench.dataset import load_dataset
from bench.metrics import converged_round, violation_curve
from bench.policy_spec import parse_spec
from bench.result_schema import validate_report
from bench.run_command import replay
from bench.trace import Trace
from replay_dataset.files import write_dataset
from routers.base import Decision
from tests.unit.bench.scripted_policy import always, register

# Per-call prices (USD): A 0.001, B 0.002, C 0.01 -> the most expensive mean cost is 0.01 (H1 scale).
# Rewards (0/1): p0 only A succeeds, p1 only B, p2 only C.
MODELS = [
    {"name": "A", "usd_per_call": 0.001},
    {"name": "B", "usd_per_call": 0.002},
    {"name": "C", "usd_per_call": 0.01},
]
ROWS = [
    {"id": "p0", "prompt": "alpha beta", "rewards": {"A": 1, "B": 0, "C": 0}, "context": [1, 0, 0]},
    {"id": "p1", "prompt": "gamma delta", "rewards": {"A": 0, "B": 1, "C": 0}, "context": [0, 1, 0]},
    {"id": "p2", "prompt": "epsilon zeta", "rewards": {"A": 0, "B": 0, "C": 1}, "context": [0, 0, 1]},
]
T, SEEDS = 60, 2


@pytest.fixture
def dataset(tmp_path: Path):
    return load_dataset(write_dataset(tmp_path / "d", MODELS, ROWS, (0.0, 1.0), "three"))


def prompts(seed: int) -> np.ndarray:
    """The prompt draws of ``ReplayEnv.draw`` (the first draw of default_rng(seed))."""
    return np.random.default_rng(seed).integers(len(ROWS), size=T)


def test_a_normalised_declared_budget_is_judged_in_usd(monkeypatch, dataset) -> None:
    # rho 0.5 in units of 0.004 USD -> 0.002 USD per round; always C spends 0.01 -> V(T) = 0.008
    decision = Decision(arms=["C"], info={"budget": 0.5, "cost_scale": 0.004})
    register(monkeypatch, "scripted", always(lambda: decision))
    report = replay(
        dataset,
        dataset.contexts,
        [parse_spec("scripted")],
        T,
        SEEDS,
        progress=False,
        draws="with-replacement",
    ).report
    row = report["policies"][0]
    assert row["budget"] == pytest.approx(0.002)
    assert row["violation"] == pytest.approx(0.008)
    # V(tau) = 0.008 for every tau, so reward per violation = mean reward / 0.008
    assert row["reward_per_violation"] == pytest.approx(row["mean_reward"] / 0.008)
    # the references declare nothing and there is no run budget: no violation fields
    assert "violation" not in report["reference"]["oracle"]


def test_cucb_violates_the_budget_c2mabv_keeps_and_both_share_one_usd_rho(dataset) -> None:
    specs = [parse_spec("c2mab-v:max_models=2"), parse_spec("cucb:max_models=2")]
    report = replay(
        dataset, dataset.contexts, specs, 400, SEEDS, progress=False, draws="with-replacement"
    ).report
    c2, cucb = report["policies"]
    # rho 0.45 x the running mean of the largest Context cost (constant 0.01 here) = 0.0045 USD
    assert c2["budget"] == pytest.approx(0.0045) and cucb["budget"] == pytest.approx(0.0045)
    # the references and non-declaring rows get the same rho (the first set policy's)
    assert report["run_budget"] == {
        "usd": pytest.approx(0.0045),
        "rho": pytest.approx(0.45),
        "source": "set policy",
    }
    assert report["reference"]["random"]["budget"] == pytest.approx(0.0045)
    # CUCB learns that the top 2 include C (all three means are 1/3) and spends ~ above rho; C2MAB-V far less
    assert cucb["violation"] > 0.0005
    assert c2["violation"] < cucb["violation"] / 4


def test_budget_flag_sets_the_run_rho_for_the_references(dataset) -> None:
    # --budget 0.1 -> 0.1 x 0.01 USD; always-C oracle-like rows pay 0.001 / 0.002 / 0.01
    report = replay(
        dataset,
        dataset.contexts,
        [parse_spec("lowest-cost")],
        T,
        SEEDS,
        progress=False,
        budget=0.1,
        draws="with-replacement",
    ).report
    assert report["run_budget"]["usd"] == pytest.approx(0.001)
    oracle = report["reference"]["oracle"]
    spend = np.mean([np.array([0.001, 0.002, 0.01])[prompts(s)].mean() for s in range(SEEDS)])
    assert oracle["violation"] == pytest.approx(spend - 0.001)
    # a single-call policy without --max-calls and without a set policy: no extra references
    assert set(report["reference"]) == {"best_single", "oracle", "random", "knn_ceiling"}
    # lowest-cost calls A only and spends exactly rho: no violation
    assert report["policies"][0]["violation"] == pytest.approx(0.0)


def test_a_declared_success_threshold_decides_when_a_set_cascade_stops(monkeypatch, tmp_path) -> None:
    rows = [{"id": "p", "prompt": "x", "rewards": {"A": 0.6, "B": 1.0, "C": 0.0}, "context": [1.0]}]
    data = load_dataset(write_dataset(tmp_path / "t", MODELS, rows, (0.0, 1.0), "one"))
    info = {"reward_model": "awc"}
    register(monkeypatch, "harness-default", always(lambda: Decision(arms=["A", "B"], mode="set", info=info)))
    default = replay(
        data, data.contexts, [parse_spec("harness-default")], 5, 1, progress=False, draws="with-replacement"
    ).report
    # midpoint 0.5: A's 0.6 succeeds, one call
    assert default["policies"][0]["calls_per_round"] == 1.0
    assert default["policies"][0]["success_threshold"] == 0.5
    strict = {"reward_model": "awc", "success_threshold": 0.9}
    register(monkeypatch, "declared", always(lambda: Decision(arms=["A", "B"], mode="set", info=strict)))
    # the Decision's 0.9 wins over --success-threshold 0.5: A fails, B is called, reward 1
    report = replay(
        data,
        data.contexts,
        [parse_spec("declared")],
        5,
        1,
        success_threshold=0.5,
        progress=False,
        draws="with-replacement",
    ).report
    row = report["policies"][0]
    assert (row["calls_per_round"], row["mean_reward"], row["mean_cost"]) == pytest.approx((2.0, 1.0, 0.003))
    assert row["success_threshold"] == 0.9
    assert report["success_threshold"] == 0.5


def test_oracle_set_is_the_best_affordable_set_by_enumeration(dataset) -> None:
    # rho 0.35 x 0.01 = 0.0035 USD: affordable {A}, {B}, {A,B} (C alone costs 0.01). AWC values:
    # {A,B} wins 2/3 of the prompts. Played on the draws: p0 A (1, 0.001), p1 A,B (1, 0.003), p2 A,B (0, 0.003)
    spec = parse_spec("c2mab-v:reward=awc,max_models=2,budget=0.35")
    report = replay(
        dataset, dataset.contexts, [spec], T, SEEDS, progress=False, draws="with-replacement"
    ).report
    row = report["reference"]["oracle_set"]
    assert row["name"] == "awc {A,B}"
    reward = np.mean([np.array([1.0, 1.0, 0.0])[prompts(s)].mean() for s in range(SEEDS)])
    cost = np.mean([np.array([0.001, 0.003, 0.003])[prompts(s)].mean() for s in range(SEEDS)])
    assert row["mean_reward"] == pytest.approx(reward)
    assert row["mean_cost"] == pytest.approx(cost)
    assert row["budget"] == pytest.approx(0.0035)
    assert row["violation"] == pytest.approx(0.0)
    # the per-prompt oracle is unchanged
    assert report["reference"]["oracle"]["mean_reward"] == pytest.approx(1.0)


def test_oracle_set_suc_takes_exactly_n_and_falls_back_to_the_cheapest_when_none_is_affordable(
    dataset,
) -> None:
    spec = parse_spec("c2mab-v:reward=suc,max_models=2,budget=0.01")
    row = replay(dataset, dataset.contexts, [spec], T, 1, progress=False, draws="with-replacement").report[
        "reference"
    ]["oracle_set"]
    assert row["name"] == "suc {A,B} (no affordable set)"
    assert row["calls_per_round"] == 2.0


def test_one_set_oracle_per_distinct_set_problem(dataset) -> None:
    specs = [
        parse_spec("c2mab-v:reward=awc,max_models=2,budget=0.35"),
        parse_spec("cucb:reward=awc,max_models=2,budget=0.35"),
        parse_spec("c2mab-v:reward=suc,max_models=2,budget=0.35"),
    ]
    refs = replay(dataset, dataset.contexts, specs, T, 1, progress=False, draws="with-replacement").report[
        "reference"
    ]
    assert [k for k in refs if k.startswith("oracle_set")] == ["oracle_set", "oracle_set_suc"]
    # SUC with exactly 2 models within 0.0035 USD: only {A, B}, both called every round
    assert refs["oracle_set_suc"]["name"] == "suc {A,B}"
    assert refs["oracle_set_suc"]["calls_per_round"] == 2.0


@pytest.mark.parametrize(
    ("lam", "reward", "cost", "declined_prompt"),
    [
        # lambda 10: every prompt's plan is its one succeeding model (1 - 10 c > 0)
        (10.0, [1.0, 1.0, 1.0], [0.001, 0.002, 0.01], None),
        # lambda 200: C's 1 - 2 < 0, so p2 is declined (reward 0, no cost)
        (200.0, [1.0, 1.0, 0.0], [0.001, 0.002, 0.0], 2),
    ],
)
def test_oracle_cascade_plays_the_dp_plan_per_prompt(dataset, lam, reward, cost, declined_prompt) -> None:
    report = replay(
        dataset,
        dataset.contexts,
        [parse_spec("lowest-cost")],
        T,
        SEEDS,
        cost_weight=lam,
        max_calls=2,
        progress=False,
        draws="with-replacement",
    ).report
    row = report["reference"]["oracle_cascade"]
    expect_r = np.mean([np.array(reward)[prompts(s)].mean() for s in range(SEEDS)])
    expect_c = np.mean([np.array(cost)[prompts(s)].mean() for s in range(SEEDS)])
    assert row["mean_reward"] == pytest.approx(expect_r)
    assert row["mean_cost"] == pytest.approx(expect_c)
    assert row["calls_per_round"] == pytest.approx(
        np.mean([(np.array(cost)[prompts(s)] > 0).mean() for s in range(SEEDS)])
    )
    assert report["max_calls"] == 2
    declined = np.mean([(prompts(s) == declined_prompt).mean() for s in range(SEEDS)])
    assert row["declined_rate"] == pytest.approx(declined)


def test_converged_round_is_the_first_round_the_running_reward_stays_within_2_percent() -> None:
    # running means of [0, 1, 1, 1, 1]: 0, .5, .667, .75, .8 -> within 2% of .8 only from round 5;
    # of [1] * 5: from round 1
    trace = Trace(*(np.array([0.0, 1, 1, 1, 1]),) * 2, *(np.zeros(5),) * 4)
    assert converged_round([trace]) == 5
    flat = Trace(np.ones(5), np.ones(5), *(np.zeros(5),) * 4)
    assert converged_round([flat]) == 1
    # seeds are averaged before the running mean: [0,1,...] and [1,0,...] average to 0.5 every round
    a = Trace(np.array([0.0, 1, 0, 1]), np.zeros(4), *(np.zeros(4),) * 4)
    b = Trace(np.array([1.0, 0, 1, 0]), np.zeros(4), *(np.zeros(4),) * 4)
    assert converged_round([a, b]) == 1


def test_violation_curve_is_eq1_at_every_horizon() -> None:
    curve = violation_curve(np.array([0.3, 0.0, 0.3]), 0.1)
    assert curve == pytest.approx([0.2, 0.05, 0.1])


def test_a_bad_spec_fails_before_any_embedding(tmp_path: Path, monkeypatch, capsys) -> None:
    rows = [{k: v for k, v in row.items() if k != "context"} for row in ROWS]
    root = write_dataset(tmp_path / "e", MODELS, rows, (0.0, 1.0), "no contexts")

    def forbidden(*args, **kwargs):
        raise AssertionError("embedded before the specs were checked")

    monkeypatch.setattr(run_command, "embed_prompts", forbidden)
    args = ["run", "--dataset", str(root), "--horizon", "3", "--quiet"]
    assert main([*args, "--policy", "promptwise", "--policy", "c2mab-v:budgett=0.3"]) == 2
    assert "budgett" in capsys.readouterr().err
    assert main([*args, "--policy", "no-such-policy"]) == 2


def test_promptwise_and_c2mabv_end_to_end_follow_the_contract(tmp_path: Path) -> None:
    rows = [
        {
            "id": f"q{i}",
            "prompt": f"question {i} about topic {i % 3}",
            "rewards": {"A": i % 2, "B": 1, "C": 1},
        }
        for i in range(12)
    ]
    root = write_dataset(tmp_path / "h", MODELS, rows, (0.0, 1.0), "hashing embedder")
    out = tmp_path / "report.json"
    code = main(
        [
            "run",
            "--dataset",
            str(root),
            "--embedder",
            "hashing",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--policy",
            "promptwise",
            "--policy",
            "promptwise:per_step_update=true",
            "--policy",
            "c2mab-v",
            "--policy",
            "cucb",
            "--horizon",
            "30",
            "--draws",
            "with-replacement",
            "--seeds",
            "2",
            "--lambda",
            "20",
            "--max-calls",
            "2",
            "--quiet",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    validate_report(report)
    assert set(report["reference"]) == {
        "best_single",
        "oracle",
        "random",
        "knn_ceiling",
        "oracle_set",
        "oracle_cascade",
    }
    rows_by_spec = {row["spec"]: row for row in report["policies"]}
    assert rows_by_spec["promptwise"]["calls_per_round"] <= 2.0
    assert rows_by_spec["c2mab-v"]["success_threshold"] == 0.5
    assert rows_by_spec["cucb"]["budget"] == pytest.approx(0.45 * 0.01)
    assert report["embedder"] == "hashing"
