"""The synthetic generators: shapes, scales and the smooth, arm-specific structure of the BALROG-like set."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from bench.dataset import load_dataset
from bench.synthetic import BALROG_ARMS, BALROG_BASE, balrog_dataset, balrog_means, linear_dataset


def _fake_mmlu(root: Path, n: int) -> Path:
    folder = root / "routellm" / "mmlu"
    folder.mkdir(parents=True)
    words = ["cell", "star", "law", "price", "gene", "orbit", "court", "market", "atom", "river"]
    with (folder / "mmlu_mixed.csv").open("w", newline="") as handle:
        w = csv.writer(handle)
        w.writerow(["prompt", "m1", "m2"])
        for i in range(n):
            stem = f"What about the {words[i % 10]} and the {words[(i * 3) % 10]} number {i}?"
            w.writerow([f"{stem}\nA. one\nB. two\nAnswer:", "True", "False"])
    return root


def test_balrog_set_has_six_arms_on_a_clipscore_like_scale(tmp_path: Path) -> None:
    data_dir = _fake_mmlu(tmp_path / "shared", 60)
    out = balrog_dataset(
        tmp_path / "b", data_dir, n_prompts=50, embedder="hashing", cache_dir=tmp_path / "cache"
    )
    data = load_dataset(out)
    assert data.model_names == list(BALROG_ARMS)
    assert data.n_prompts == 50 and data.reward_range == (20.0, 40.0)
    assert (data.counts == 5).all()
    assert data.samples.min() >= 20 and data.samples.max() <= 40
    assert not any("\nA." in p for p in data.prompts)
    # per-arm averages sit near BASE (z is standardised; noise sd 1.5 / sqrt(250) = 0.1)
    np.testing.assert_allclose(data.mean_reward.mean(axis=0), BALROG_BASE, atol=0.4)
    assert len(set(data.mean_reward.argmax(axis=1).tolist())) >= 3


def test_balrog_means_favour_each_arm_at_its_own_anchors() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 16))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    means, anchors = balrog_means(x, np.random.default_rng(1))
    z = means - np.asarray(BALROG_BASE)
    for k in range(len(BALROG_ARMS)):
        # at its own anchors an arm's bonus z_k is far above its average (0) and above other arms' there
        assert z[anchors[k], k].mean() > 2.0
        others = np.delete(z[anchors[k]], k, axis=1)
        assert z[anchors[k], k].mean() > others.mean() + 1.5
    np.testing.assert_allclose(z.mean(axis=0), 0, atol=1e-9)
    np.testing.assert_allclose(z.std(axis=0), 1, atol=1e-9)


def test_linear_set_rewards_follow_the_context(tmp_path: Path) -> None:
    data = load_dataset(linear_dataset(tmp_path / "l", n_prompts=200, n_models=2, dim=4, noise=0.0))
    assert data.contexts is not None
    # noise 0: rewards are exactly 0.5 + 0.4 <x, theta_k>, so a least-squares fit recovers them
    for k in range(2):
        coef, *_ = np.linalg.lstsq(data.contexts, data.mean_reward[:, k] - 0.5, rcond=None)
        np.testing.assert_allclose(data.contexts @ coef, data.mean_reward[:, k] - 0.5, atol=2e-6)
        np.testing.assert_allclose(np.linalg.norm(coef), 0.4, atol=1e-4)
