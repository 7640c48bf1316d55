"""``bench frontier`` on a 6-prompt, 2-model set whose points are computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.cli import main
from bench.frontier import lambda_grid, mixing_frontier
from tests.unit.bench.tiny_two_model_set import write_tiny_set


def lambda_grid_for_tiny() -> list[float]:
    """0, then 0.01 and 100 over the largest mean cost 0.004 (3 points)."""
    return [0.0, 0.01 / 0.004, 100 / 0.004]


@pytest.fixture
def tiny_set(tmp_path: Path) -> Path:
    return write_tiny_set(tmp_path / "tiny")


def test_frontier_points_are_the_hand_computed_ones(tiny_set: Path, tmp_path: Path) -> None:
    out = tmp_path / "frontier"
    argv = ["frontier", "--dataset", str(tiny_set), "--policy", "linucb", "--fractions", "0.5,1"]
    assert main([*argv, "--seeds", "2", "--lambda-points", "3", "--out", str(out), "--quiet"]) == 0
    report = json.loads((out / "frontier.json").read_text())
    assert (out / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    a, b = report["models"]
    assert (a["model"], a["reward"], a["cost"]) == ("A", pytest.approx(2.5 / 6), pytest.approx(0.001))
    assert (b["model"], b["reward"], b["cost"]) == ("B", pytest.approx(4 / 6), pytest.approx(0.004))
    assert report["random"] == {"reward": pytest.approx(6.5 / 12), "cost": pytest.approx(0.0025)}
    assert report["mixing_frontier"] == [
        {"cost": pytest.approx(0.001), "reward": pytest.approx(2.5 / 6)},
        {"cost": pytest.approx(0.004), "reward": pytest.approx(4 / 6)},
    ]
    # oracle at lambda = 0: A on p0 (a tie, the cheaper), p2 (a tie), p3; B on p1, p4, p5
    oracle0 = report["oracle"][0]
    assert oracle0 == {"lambda": 0.0, "reward": pytest.approx(5 / 6), "cost": pytest.approx(0.0025)}
    # the largest lambda (100 / 0.004 per USD) makes cost decide: oracle and ceiling both call A alone
    assert report["oracle"][-1]["lambda"] == pytest.approx(100 / 0.004)
    for key in ("oracle", "knn_ceiling"):
        last = report[key][-1]
        assert (last["reward"], last["cost"]) == (pytest.approx(2.5 / 6), pytest.approx(0.001))
    assert [p["lambda"] for p in report["knn_ceiling"]] == pytest.approx(lambda_grid_for_tiny())

    # cost_target = 0.5 and 1 x the best single model's (B's) mean cost, after the policy as given
    curve = report["policies"]["linucb"]
    assert [p["cost_target"] for p in curve] == [None, pytest.approx(0.002), pytest.approx(0.004)]
    assert [p["spec"] for p in curve] == ["linucb", "linucb:cost_target=0.002", "linucb:cost_target=0.004"]
    for point in curve:
        assert 0.001 - 1e-12 <= point["cost"] <= 0.004 + 1e-12
        assert 0.0 <= point["reward"] <= 1.0
        assert point["reward_ci95"] >= 0 and point["cost_ci95"] >= 0


def test_lambda_grid() -> None:
    assert lambda_grid(np.array([[0.001, 0.004]]), 3) == pytest.approx(lambda_grid_for_tiny())


def test_mixing_frontier_keeps_the_upper_left_hull() -> None:
    points = [(1.0, 0.2), (2.0, 0.3), (3.0, 0.8), (4.0, 0.5), (2.0, 0.1), (5.0, 0.9), (6.0, 0.9)]
    # (2, 0.3) lies below the chord from (1, 0.2) to (3, 0.8); (4, 0.5) below (3, 0.8)-(5, 0.9);
    # (6, 0.9) costs more than (5, 0.9) for the same reward
    assert mixing_frontier(points) == [(1.0, 0.2), (3.0, 0.8), (5.0, 0.9)]


def test_frontier_refuses_a_spec_that_sets_the_swept_key(tiny_set: Path, tmp_path: Path) -> None:
    argv = ["frontier", "--dataset", str(tiny_set), "--policy", "linucb:cost_target=0.003", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "f")]) == 2


def test_frontier_sweeps_judge_quality_one_curve_per_judge(tiny_set: Path, tmp_path: Path) -> None:
    argv = ["frontier", "--dataset", str(tiny_set), "--policy", "greedy-till-succeed", "--fractions", "0.5"]
    argv += ["--seeds", "2", "--lambda-points", "2", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "plain")]) == 0
    perfect, wrong = "verdict:model=A", "verdict:tpr=0,tnr=0,model=A"
    judged = [*argv, "--judge", perfect, "--judge", wrong, "--out", str(tmp_path / "judged")]
    assert main(judged) == 0
    plain = json.loads((tmp_path / "plain" / "frontier.json").read_text())["policies"]
    report = json.loads((tmp_path / "judged" / "frontier.json").read_text())
    assert [j["spec"] for j in report["judges"]] == [perfect, wrong]
    curves = report["policies"]
    assert sorted(curves) == sorted(f"greedy-till-succeed | judge {j}" for j in (perfect, wrong))
    # a perfect judge plays the labels' rounds and pays A's 0.001 per judged answer on top
    graded_curve = curves[f"greedy-till-succeed | judge {perfect}"]
    for bare, graded in zip(plain["greedy-till-succeed"], graded_curve, strict=True):
        assert graded["judge"] == perfect
        assert graded["reward"] == pytest.approx(bare["reward"])
        assert graded["cost"] >= bare["cost"] + 0.001 - 1e-12
    # a judge that is always wrong passes the first answer whatever it is: one call per round
    for point in curves[f"greedy-till-succeed | judge {wrong}"]:
        assert 0.001 + 0.001 - 1e-12 <= point["cost"] <= 0.004 + 0.001 + 1e-12
