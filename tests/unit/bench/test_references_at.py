"""``bench references``: the kNN router and the mixing line read at a spend, on hand-computed cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.references_at import hull_reward_at
from tests.unit.bench.tiny_two_model_set import write_tiny_set


@pytest.fixture
def tiny_set(tmp_path: Path) -> Path:
    return write_tiny_set(tmp_path / "tiny")


def test_hull_reading_interpolates_the_upper_concave_hull() -> None:
    points = [(1.0, 0.2), (2.0, 0.3), (3.0, 0.8), (4.0, 0.5), (5.0, 0.9), (6.0, 0.9)]
    assert hull_reward_at(points, 0.5) is None  # cheaper than any point
    assert hull_reward_at(points, 1.0) == pytest.approx(0.2)
    # (2, 0.3) is under the chord (1, 0.2)-(3, 0.8): mixing those two earns 0.5 at cost 2
    assert hull_reward_at(points, 2.0) == pytest.approx(0.5)
    assert hull_reward_at(points, 4.0) == pytest.approx(0.85)
    assert hull_reward_at(points, 5.0) == pytest.approx(0.9)
    assert hull_reward_at(points, 7.0) == pytest.approx(0.9)  # past the best point: its reward
    assert hull_reward_at([(2.0, 0.4)], 3.0) == pytest.approx(0.4)


def test_references_read_at_spends_and_at_a_runs_rows(
    tiny_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_json = tmp_path / "run.json"
    run = ["run", "--dataset", str(tiny_set), "--policy", "lowest-cost", "--seeds", "1", "--quiet"]
    assert main([*run, "--json", str(run_json)]) == 0
    out = tmp_path / "refs.json"
    argv = ["references", "--report", str(run_json), "--lambda-points", "3", "--quiet"]
    argv += ["--spend", "0.0005", "--spend", "0.002", "--spend", "0.005", "--json", str(out)]
    assert main(argv) == 0
    assert "best single B: reward 0.6667 at $0.004000" in capsys.readouterr().out
    report = json.loads(out.read_text())
    # k = 5 (the only k below 6 prompts): every prompt's neighbours are the 5 others, whose mean reward
    # favours B on every prompt at lambda 0 and 0.01 / 0.004 (gap >= 0.1 > 0.003 x 2.5), and cost decides
    # at 100 / 0.004: the kNN points are B's (0.004, 4/6) and A's (0.001, 2.5/6)
    assert sorted((p["cost"], p["reward"]) for p in report["knn_ceiling"]) == [
        (pytest.approx(0.001), pytest.approx(2.5 / 6)),
        (pytest.approx(0.004), pytest.approx(4 / 6)),
        (pytest.approx(0.004), pytest.approx(4 / 6)),
    ]
    at = [(row["spec"], row["spend"], row["knn"], row["mixing"]) for row in report["at"]]
    assert at == [
        (None, 0.0005, None, None),
        # a third of the way from A's point to B's: 2.5/6 + (1.5/6) / 3
        (None, 0.002, pytest.approx(3 / 6), pytest.approx(3 / 6)),
        (None, 0.005, pytest.approx(4 / 6), pytest.approx(4 / 6)),
        ("lowest-cost", pytest.approx(0.001), pytest.approx(2.5 / 6), pytest.approx(2.5 / 6)),
    ]


def test_references_need_one_dataset(tiny_set: Path, tmp_path: Path) -> None:
    assert main(["references", "--dataset", str(tiny_set), "--quiet"]) == 2  # nothing to read
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"dataset": str(tmp_path / "elsewhere"), "policies": []}))
    argv = ["references", "--dataset", str(tiny_set), "--report", str(other), "--spend", "0.002"]
    assert main([*argv, "--quiet"]) == 2
