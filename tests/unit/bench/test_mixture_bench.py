"""The mixture benchmark end to end on a tiny Gaussian set, the dataset format, and the JSON fields."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench import mixture
from bench.mixture_datasets import (
    MixtureDataset,
    gaussian_dataset,
    load_mixture_dataset,
    project_dataset,
    read_texts_jsonl,
    texts_dataset,
)
from bench.mixture_summary import summarize


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mix") / "gauss.npz"
    assert (
        mixture.main(
            [
                "make-gaussian",
                "--out",
                str(path),
                "--pool-size",
                "300",
                "--reference-size",
                "200",
                "--dim",
                "3",
            ]
        )
        == 0
    )
    return path


def test_dataset_round_trip_and_known_optimum(tiny: Path) -> None:
    data = load_mixture_dataset(tiny)
    assert data.arms == ["mode-x", "mode-y", "mode-z", "broad"]
    assert data.dim == 3 and all(x.shape == (300, 3) for x in data.pools.values())
    assert data.reference is not None and data.reference.shape == (200, 3)
    known = data.meta["known_optimum"]
    assert known["kid"] == {"mode-x": 0.4, "mode-y": 0.3, "mode-z": 0.3, "broad": 0.0}
    assert sum(known["rke"].values()) == pytest.approx(1.0)


def test_known_rke_optimum_matches_a_large_sample_estimate() -> None:
    from routers.diversity import build_objective
    from routers.mixture import optimal_mixture

    data = gaussian_dataset(pool_size=3000, reference_size=10, dim=3, seed=1, bandwidth=2.0)
    objective = build_objective("rke", bandwidth=2.0, max_samples_per_arm=None)
    for arm, pool in data.pools.items():
        objective.observe_many(arm, pool[:1500])
    estimate = optimal_mixture(objective)
    for arm, weight in data.meta["known_optimum"]["rke"].items():
        assert estimate[arm] == pytest.approx(weight, abs=0.03)


def test_bad_dataset_files_are_rejected(tmp_path: Path) -> None:
    np.savez(tmp_path / "empty.npz", reference=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="arm:"):
        load_mixture_dataset(tmp_path / "empty.npz")
    np.savez(tmp_path / "ragged.npz", **{"arm:a": np.zeros((2, 2)), "arm:b": np.zeros((2, 3))})
    with pytest.raises(ValueError, match="same d"):
        load_mixture_dataset(tmp_path / "ragged.npz")


def test_texts_jsonl_conversion_with_hashing_embedder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BANDITGATE_CACHE_DIR", str(tmp_path / "cache"))
    rows = [
        {"arm": "a", "text": "red apples"},
        {"arm": "b", "text": "blue sky"},
        {"arm": "a", "text": "green"},
        {"reference": True, "text": "the sky is blue"},
    ]
    src = tmp_path / "rows.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    arms, reference = read_texts_jsonl(src)
    assert arms == {"a": ["red apples", "green"], "b": ["blue sky"]} and reference == ["the sky is blue"]
    data = texts_dataset(arms, reference, "hashing:16")
    assert data.pools["a"].shape == (2, 16) and data.reference is not None
    assert list((tmp_path / "cache" / "embeddings" / "hashing_16").glob("*.npz"))  # bench run's cache
    again = texts_dataset(arms, reference, "hashing:16")
    np.testing.assert_array_equal(again.pools["a"], data.pools["a"])
    small = project_dataset(data, 2)
    assert small.dim == 2 and small.meta["pca_dim"] == 2
    assert isinstance(small, MixtureDataset)


def test_benchmark_end_to_end_json_fields(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    code = mixture.main(
        [
            "run",
            "--dataset",
            str(tiny),
            "--objective",
            "kid",
            "--rounds",
            "60",
            "--seeds",
            "2",
            "--checkpoints",
            "4",
            "--oracle-samples",
            "200",
            "--init-pulls",
            "3",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    for key in (
        "dataset",
        "objective",
        "score_name",
        "higher_is_better",
        "rounds",
        "seeds",
        "checkpoints",
        "references",
        "policies",
        "options",
        "hyperparameters",
    ):
        assert key in report
    assert report["checkpoints"] == [15, 30, 45, 60] and report["seeds"] == [0, 1]
    refs = report["references"]
    assert set(refs) >= {"oracle_mixture", "best_single_arm", "known_optimum"}
    assert sum(refs["oracle_mixture"]["weights"].values()) == pytest.approx(1.0)
    assert refs["oracle_mixture"]["loss"] <= refs["best_single_arm"]["loss"]
    assert set(report["policies"]) == {*mixture.POLICY_NAMES, *mixture.ORACLE_NAMES}
    for row in report["policies"].values():
        assert row["final"]["low"] <= row["final"]["mean"] <= row["final"]["high"]
        assert [c["round"] for c in row["checkpoints"]] == [15, 30, 45, 60]
        assert sum(row["weights"].values()) == pytest.approx(1.0)
    assert report["policies"]["one-arm-oracle"]["weights"][refs["best_single_arm"]["arm"]] == 1.0
    table = summarize(report)
    assert "| mixture-greedy |" in table and "gap closed" in table
    png = out.with_suffix(".png")
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_vendi_run_covers_every_policy(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "vendi.json"
    mixture.main(
        [
            "run",
            "--dataset",
            str(tiny),
            "--objective",
            "vendi",
            "--rounds",
            "30",
            "--seeds",
            "1",
            "--checkpoints",
            "2",
            "--oracle-samples",
            "100",
            "--rff-dim",
            "8",
            "--out",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert set(report["policies"]) == {*mixture.POLICY_NAMES, *mixture.ORACLE_NAMES}
    assert report["score_name"] == "vendi" and report["higher_is_better"] is True
