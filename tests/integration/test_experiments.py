"""Every script under experiments/ runs, on a tiny input: each reproduces a figure a doc cites, and a
script that no longer runs would leave that figure without its command.

The scripts run as the docs run them (``python -m experiments.<name>``, in a subprocess: no test imports
experiments/), with a throw-away embedding cache, the hashing embedder where a script takes one, and
counts small enough for seconds; a test checks the exit status and the line that carries the figure,
not the figure (a timing on a shared machine proves nothing)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import main as bench
from bench.convert_routellm import ROUTELLM_MODELS, mmlu_rows
from bench.local_server import free_port
from replay_dataset.files import write_dataset
from tests.conftest import PG_SERVER, REDIS_URL, TEST_DATA

ROOT = Path(__file__).resolve().parents[2]
SUBJECTS = ("high_school_biology", "us_foreign_policy", "high_school_mathematics", "world_religions")


def run(tmp_path: Path, module: str, *args: object, timeout: float = 300) -> str:
    """``python -m experiments.<module> args`` from the repository root; its stdout."""
    env = dict(os.environ) | {
        "PYTHONPATH": str(ROOT),
        "BANDITGATE_CACHE_DIR": str(tmp_path / "cache"),
        "OPENBLAS_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", f"experiments.{module}", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture
def replay_set(tmp_path: Path) -> Path:
    """The committed MMLU cut's 13 rows of four subjects (the ones embed_text_prefix_probe reads), as
    ``bench convert mmlu`` writes them."""
    models = [{"name": m, "usd_per_mtok_in": 1.0 + i} for i, m in enumerate(ROUTELLM_MODELS)]
    rows = mmlu_rows(TEST_DATA, SUBJECTS)
    return write_dataset(tmp_path / "set", models, rows, (0.0, 1.0), "experiment smoke set")


def test_backend_request(tmp_path: Path) -> None:
    assert run(tmp_path, "backend_request", "--calls", 20, "--rounds", 1).count("per request built") == 2


def test_ceiling_at_spend(tmp_path: Path, replay_set: Path) -> None:
    replay = [
        "--dataset",
        str(replay_set),
        "--embedder",
        "hashing:16",
        "--seeds",
        "1",
        "--cache-dir",
        str(tmp_path),
    ]
    frontier, report = tmp_path / "frontier", tmp_path / "run.json"
    assert (
        bench(
            [
                "frontier",
                *replay,
                "--policy",
                "linucb",
                "--lambda-points",
                "3",
                "--out",
                str(frontier),
                "--quiet",
            ]
        )
        == 0
    )
    assert bench(["run", *replay, "--policy", "linucb", "--json", str(report), "--quiet"]) == 0
    out = run(tmp_path, "ceiling_at_spend", "--frontier", frontier / "frontier.json", "--run", report)
    assert out.startswith("linucb: reward") and "knn-ceiling there" in out


@pytest.mark.slow
def test_embed_pool(tmp_path: Path) -> None:
    pool = [
        "--redis",
        REDIS_URL,
        "--embedder",
        "hashing:16",
        "--batch",
        4,
        "--concurrency",
        2,
        "--repeats",
        1,
    ]
    result = json.loads(
        run(tmp_path, "embed_pool", *pool, "--data", TEST_DATA, "--prompts", 8, "--single", 2)
    )
    assert result["prompts"] == 8 and result["pool_prompts_per_s"] > 0


def test_embed_text_distinct(tmp_path: Path, replay_set: Path) -> None:
    out = run(tmp_path, "embed_text_distinct", replay_set)
    assert out.splitlines()[1].startswith(f"| {replay_set} | 13 | 13 |")


def test_embed_text_prefix_probe(tmp_path: Path, replay_set: Path) -> None:
    out = run(tmp_path, "embed_text_prefix_probe", replay_set, "--embedder", "hashing:16")
    assert out.startswith("| rule |") and len(out.splitlines()) == 6  # the header and five rules


def test_forward_cpu(tmp_path: Path) -> None:
    out = run(tmp_path, "forward_cpu", "--requests", 5, "--runs", 1, "--embedder", "hashing:16")
    assert out.startswith("always, chat: process CPU per request")


def test_admin_chaos(tmp_path: Path) -> None:
    out = run(tmp_path, "admin_chaos", "greedy:judge=1", "--seconds", 2, "--clients", 3)
    lines = out.splitlines()
    assert lines[0].startswith("greedy:judge=1 on sqlite x1: ")
    assert lines[1].startswith("statuses: ") and "chat 200" in lines[1]
    assert any(line.startswith("5xx: ") for line in lines)
    assert lines[-1].startswith("sent again after a conflict: ")


def test_harness_overhead(tmp_path: Path) -> None:
    out = run(tmp_path, "harness_overhead", "--models", 3, "--prompts", 40, "--dim", 8, "--horizon", 50)
    assert "linucb" in out


@pytest.fixture
def routellm_data(tmp_path: Path) -> Path:
    """The committed MMLU cut beside a 20-row GSM8K file: the layout ``RealPrompts`` reads."""
    root = tmp_path / "data" / "routellm"
    root.mkdir(parents=True)
    (root / "mmlu").symlink_to(TEST_DATA / "routellm" / "mmlu")
    (root / "gsm8k").mkdir()
    with (root / "gsm8k" / "gsm8k_responses.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["prompt", *ROUTELLM_MODELS, *(f"{m}_response" for m in ROUTELLM_MODELS)])
        writer.writerows([f"What is {i} + {i}?", i % 2 == 0, True, "?", str(2 * i)] for i in range(20))
    return tmp_path / "data"


def test_index_kinds(tmp_path: Path, routellm_data: Path) -> None:
    out = run(
        tmp_path,
        "index_kinds",
        *("--data", routellm_data, "--embedder", "hashing:32", "--arms", 1, "--k", 8, "--queries", 5),
        *("--hnsw-m", 8, "--ef", 16, "--nlist", 4, "--nprobe", 2, "--json", tmp_path / "rows.json"),
    )
    assert "| 1 | " in out and [
        row["index"] for row in json.loads((tmp_path / "rows.json").read_text())["rows"]
    ] == [
        "flat",
        "hnsw M8/ef16",
        "ivf 4/2",
    ]


def test_knn_cap(tmp_path: Path) -> None:
    out = run(tmp_path, "knn_cap", "--seeds", 0, "--rounds", 60)
    assert out.count("\n| ") == 5  # the five caps' rows


def test_lean_routes(tmp_path: Path) -> None:
    assert run(tmp_path, "lean_routes", "--requests", 10, "--rounds", 1).count("us of CPU per request") == 4


@pytest.mark.slow
def test_load(tmp_path: Path) -> None:
    out = run(
        tmp_path,
        "load",
        *("--workers", 1, "--requests", 8, "--concurrency", 2, "--embedder", "hashing:16"),
        *("--port", free_port(), "--data", TEST_DATA, "--pg", PG_SERVER, "--redis", REDIS_URL),
    )
    result = json.loads(out)
    assert result["workers"] == 1 and set(result) >= {"route_uncached", "route_cached", "feedback"}


def test_make_test_fixture(tmp_path: Path) -> None:
    run(tmp_path, "make_test_fixture", "--data", TEST_DATA, "--out", tmp_path / "cut")
    for name in ("LICENSE", "mmlu/mmlu_anatomy.csv", "topics/mmlu_world_religions.csv"):
        assert (tmp_path / "cut" / name).is_file(), name


def test_make_arena_fixture(tmp_path: Path) -> None:
    """The committed cut is a fixed point: cut again from itself, every file is byte for byte the same."""
    run(tmp_path, "make_arena_fixture", "--data", TEST_DATA, "--out", tmp_path / "cut")
    committed = TEST_DATA / "arena-bench"
    written = sorted(p.relative_to(tmp_path / "cut") for p in (tmp_path / "cut").rglob("*") if p.is_file())
    assert len(written) == 18  # question.jsonl, LICENSE and sixteen models' judgments
    for name in written:
        assert (tmp_path / "cut" / name).read_bytes() == (committed / name).read_bytes(), name


def test_nine_model_sets(tmp_path: Path) -> None:
    assert run(tmp_path, "nine_model_sets", "--rounds", 20, "--seeds", 1).strip()


def test_speed_cost(tmp_path: Path) -> None:
    assert run(tmp_path, "speed_cost", "--rounds", 3, "--warm", 10, "--dim", 8, "--sizes", 3).strip()


def test_speed_knn(tmp_path: Path) -> None:
    args = ("--sizes", 200, "--arms", 2, "--dim", 8, "--clusters", 4, "--queries", 5, "--updates", 5)
    out = run(tmp_path, "speed_knn", *args, "--out", tmp_path / "rows.json")
    assert "command: python -m experiments.speed_knn --sizes 200" in out
    assert [row["N"] for row in json.loads((tmp_path / "rows.json").read_text())] == [200]


def test_speed_mixture(tmp_path: Path) -> None:
    args = ("--sizes", 50, "--dim", 4, "--arms", 2, "--rounds", 2, "--configs", "greedy-fd")
    assert run(tmp_path, "speed_mixture", *args, "--out", tmp_path / "speed.json").strip()
    assert json.loads((tmp_path / "speed.json").read_text())


def test_speed_promptwise(tmp_path: Path) -> None:
    assert run(tmp_path, "speed_promptwise", "--steps", 50, "--dim", 8, "--checks", 1, "--probes", 5).strip()


def test_stats_timing(tmp_path: Path) -> None:
    out = run(tmp_path, "stats_timing", f"sqlite+aiosqlite:///{tmp_path / 'stats.db'}", 50)
    assert out.startswith("sqlite+aiosqlite: 50 decisions, 24 x 1 h buckets: median")


def test_table1_cascades(tmp_path: Path) -> None:
    assert run(tmp_path, "table1_cascades", "--steps", 20, "--seeds", 1).strip()


def test_warm_start_gap(tmp_path: Path, replay_set: Path) -> None:
    out = run(tmp_path, "warm_start_gap", "--dataset", replay_set, "--seeds", 2, "--embedder", "hashing:16")
    assert "gap to knn-ceiling" in out and "per seed" in out


def test_every_script_is_cited_or_imported() -> None:
    """A script stays only while a doc (README, docs/, a docstring under app/ or bench/) cites it as the
    command for a figure, or another script imports it: the rest go (git keeps them)."""
    cited = "\n".join(
        p.read_text(encoding="utf-8")
        for pattern in ("README.md", "docs/**/*.md", "app/**/*.py", "bench/**/*.py", "tests/data/**/*.md")
        for p in ROOT.glob(pattern)
    )
    scripts = sorted(p.stem for p in (ROOT / "experiments").glob("*.py") if p.stem != "__init__")
    sources = {s: (ROOT / "experiments" / f"{s}.py").read_text(encoding="utf-8") for s in scripts}
    orphans = [
        s
        for s in scripts
        if f"experiments.{s}" not in cited
        and f"experiments/{s}.py" not in cited
        and not any(
            f"experiments.{s} import" in src or f"from experiments import {s}" in src
            for src in sources.values()
        )
    ]
    assert orphans == []
