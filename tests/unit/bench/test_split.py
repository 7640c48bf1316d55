"""``bench split``: disjoint parts by prompt text, reproducible, same-text rows together."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.cli import main
from bench.dataset import load_dataset
from bench.split import split_rows
from replay_dataset.files import write_dataset

MODELS = [{"name": "a"}, {"name": "b"}]


def _rows(texts: list[str]) -> list[dict]:
    return [{"id": f"r{i}", "prompt": t, "rewards": {"a": 1, "b": 0}} for i, t in enumerate(texts)]


def test_parts_follow_the_seeded_permutation_of_distinct_texts() -> None:
    rows = _rows(["p0", "p1", "p2", "p1", "p3"])  # 4 distinct texts; p1 twice (rows 1 and 3)
    tune, report = split_rows(rows, 0.5, seed=7)
    chosen = set(np.random.default_rng(7).permutation(4)[:2].tolist())  # text groups in first-seen order
    group = {"p0": 0, "p1": 1, "p2": 2, "p3": 3}
    assert tune == [i for i, r in enumerate(rows) if group[r["prompt"]] in chosen]
    assert sorted(tune + report) == list(range(5)) and not set(tune) & set(report)
    assert (1 in tune) == (3 in tune)  # the repeated text never straddles the parts


def test_a_split_that_leaves_a_part_empty_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be split"):
        split_rows(_rows(["only"]), 0.5, seed=0)
    with pytest.raises(ValueError, match="strictly between"):
        split_rows(_rows(["a", "b"]), 1.0, seed=0)


def test_the_command_writes_two_loadable_datasets(tmp_path: Path) -> None:
    source = write_dataset(tmp_path / "set", MODELS, _rows([f"q{i}" for i in range(10)]), (0.0, 1.0), "t")
    assert main(["split", "--dataset", str(source), "--out", str(tmp_path / "halves"), "--seed", "3"]) == 0
    tune, report = load_dataset(tmp_path / "halves" / "tune"), load_dataset(tmp_path / "halves" / "report")
    assert tune.n_prompts == report.n_prompts == 5
    assert sorted(tune.ids + report.ids) == sorted(f"r{i}" for i in range(10))
    assert main(["split", "--dataset", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")]) == 2
