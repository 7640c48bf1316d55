"""The full-information leave-one-out kNN ceiling on hand-computed datasets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.arm_schedule import build_schedule, parse_arm_event
from bench.dataset import Dataset, load_dataset
from bench.knn_ceiling import candidate_ks, knn_ceiling
from bench.replay_env import ReplayEnv
from bench.run_command import replay
from replay_dataset.files import write_dataset

MODELS = [{"name": "X", "usd_per_call": 0.01}, {"name": "Y", "usd_per_call": 0.02}]
X, Y = 0, 1

# Two clusters of three. Cluster a: X answers a1 and a2, only Y answers a0; cluster b: only Y answers.
# k = 2: each prompt's neighbours are the two others of its cluster, so a0 -> X (its neighbours' mean
# reward: X 1, Y 0) and gets 0; a1 -> neighbours a0, a2: X 1/2, Y 1/2, a tie -> the cheaper X, reward 1;
# a2 likewise X, 1; b* -> Y, 1. Mean reward 5/6.
# k = 5 (every other prompt): mean X = (2 - X_p) / 5 < mean Y = (4 - Y_p) / 5 for every p: always Y,
# the best single model, reward 4/6. So the reported k is 2.
CLUSTERS = [
    ("a0", [1.0, 0.0], {"X": 0, "Y": 1}),
    ("a1", [0.99, 0.14], {"X": 1, "Y": 0}),
    ("a2", [0.98, 0.2], {"X": 1, "Y": 0}),
    ("b0", [0.0, 1.0], {"X": 0, "Y": 1}),
    ("b1", [0.14, 0.99], {"X": 0, "Y": 1}),
    ("b2", [0.2, 0.98], {"X": 0, "Y": 1}),
]


def _dataset(
    tmp_path: Path, rows: list[tuple[str, list[float], dict]], texts: list[str] | None = None
) -> Dataset:
    texts = texts or [name for name, _, _ in rows]
    records = [
        {"id": name, "prompt": text, "rewards": rewards, "context": vec}
        for (name, vec, rewards), text in zip(rows, texts, strict=True)
    ]
    return load_dataset(write_dataset(tmp_path / "d", MODELS, records, (0.0, 1.0), "hand"))


def _env(data: Dataset, events=(), lam: float = 0.0) -> ReplayEnv:
    schedule = build_schedule(data.model_names, list(events), data.n_prompts)
    return ReplayEnv(data, data.contexts, schedule, lam, 0.5)


def test_each_prompt_gets_its_neighbours_best_model(tmp_path: Path) -> None:
    ceiling = knn_ceiling(_env(_dataset(tmp_path, CLUSTERS)), ks=(2,))
    assert ceiling.k == 2
    assert ceiling.choice.tolist() == [[X, X, X, Y, Y, Y]]


def test_the_reported_k_is_the_one_of_highest_utility(tmp_path: Path) -> None:
    env = _env(_dataset(tmp_path, CLUSTERS))
    assert knn_ceiling(env, ks=(5,)).choice.tolist() == [[Y] * 6]
    ceiling = knn_ceiling(env, ks=(2, 5))
    assert (ceiling.k, ceiling.name) == (2, "knn-ceiling k=2")


def test_prompts_of_the_same_text_are_not_neighbours(tmp_path: Path) -> None:
    # d0 and d1 are one text under two ids (same vector): X answers both. c sits near them, only Y
    # answers it; f is far and only X answers it. k = 1, without its copy: d0's nearest is c -> Y
    # (reward 0), likewise d1; c's nearest is d0 or d1 -> X (reward 0); f's nearest is c -> Y (reward 0).
    # Were the copy a neighbour, d0 and d1 would see each other at distance 0 and play X (reward 1).
    rows = [
        ("d0", [1.0, 0.0], {"X": 1, "Y": 0}),
        ("d1", [1.0, 0.0], {"X": 1, "Y": 0}),
        ("c", [0.9, 0.436], {"X": 0, "Y": 1}),
        ("f", [0.0, 1.0], {"X": 1, "Y": 0}),
    ]
    data = _dataset(tmp_path, rows, texts=["same", "same", "near", "far"])
    ceiling = knn_ceiling(_env(data), ks=(1,))
    assert ceiling.choice.tolist() == [[Y, Y, X, Y]]
    report = replay(
        data, data.contexts, [], None, seeds=2, progress=False, draws="without-replacement"
    ).report
    row = report["reference"]["knn_ceiling"]
    # default k in {10, 25, 50, 100} is none below N = 4: k = 3, the other-text prompts only (at most 2
    # for d0 and d1: c and f, X 1/2 Y 1/2 -> X, reward 1; c: d0, d1, f -> X 1, reward 0; f: d0, d1, c ->
    # X, reward 1). Every seed plays all four: mean reward 3/4, cost 0.01.
    assert row["k"] == 3 and row["name"] == "knn-ceiling k=3"
    assert row["mean_reward"] == pytest.approx(0.75)
    assert row["mean_cost"] == pytest.approx(0.01)
    assert report["repeat_share"] == pytest.approx(0.25)


def test_the_report_row_averages_over_the_prompts_each_seed_plays(tmp_path: Path) -> None:
    data = _dataset(tmp_path, CLUSTERS)
    report = replay(data, data.contexts, [], 2, seeds=4, progress=False).report
    row = report["reference"]["knn_ceiling"]
    # k = 5 (the only default k below N = 6): always Y; each seed's mean over its 2 prompts (.5, 1, 1, .5)
    reward_y = np.array([r["Y"] for _, _, r in CLUSTERS], dtype=float)
    assert row["k"] == 5
    per_seed = [reward_y[np.random.default_rng(s).permutation(6)[:2]].mean() for s in range(4)]
    assert row["mean_reward"] == pytest.approx(np.mean(per_seed)) == pytest.approx(0.75)
    assert np.mean(per_seed) != pytest.approx(reward_y.mean())  # not the all-prompt mean


def test_utility_uses_lambda_and_follows_the_arm_schedule(tmp_path: Path) -> None:
    data = _dataset(tmp_path, CLUSTERS)
    # lambda = 50: u = reward - 0.5 (X) or - 1 (Y). k = 2: a0 sees X .5, Y -1; a1, a2 see X 0, Y -.5;
    # cluster b sees X -.5, Y 0: the same picks as at lambda = 0
    assert knn_ceiling(_env(data, lam=50.0), ks=(2,)).choice.tolist() == [[X, X, X, Y, Y, Y]]
    # lambda = 200: u = reward - 2 (X) or - 4 (Y): cluster b sees X -2 > Y -3: X everywhere
    assert knn_ceiling(_env(data, lam=200.0), ks=(2,)).choice.tolist() == [[X] * 6]
    # Y removed at round 2: segment 1 can only play X
    env = _env(data, events=[parse_arm_event("Y@2", "remove")])
    assert knn_ceiling(env, ks=(2,)).choice.tolist() == [[X, X, X, Y, Y, Y], [X] * 6]


def test_candidate_ks_stay_below_n() -> None:
    assert candidate_ks(14042) == [10, 25, 50, 100]
    assert candidate_ks(60) == [10, 25, 50]
    assert candidate_ks(6) == [5]
    assert candidate_ks(1) == [1]
