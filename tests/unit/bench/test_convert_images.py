"""``bench convert agiqa3k|tifa160`` on the hand-written fixtures of tests/data/images (see its README):
rewards, prompt texts, dropped prompts and per-image prices, each computed by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.cli import main
from bench.convert_images import agiqa_prompt, load_image_prices
from bench.dataset import load_dataset

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data"
PRICES = DATA / "images" / "prices.json"


def _convert(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "out"
    argv = ["convert", *args, "--data", str(DATA), "--prices", str(PRICES), "--out", str(out)]
    assert main(argv) == 0
    return out


def test_agiqa_alignment_rewards_prices_and_dropped_prompt(tmp_path: Path) -> None:
    data = load_dataset(_convert(tmp_path, "agiqa3k"))
    assert data.model_names == ["sd1.5_normal", "sd1.5_lowstep", "midjourney_normal"]
    # prompt 002 has no midjourney_normal image: dropped, and named in the notes
    assert data.ids == ["agiqa3k/000", "agiqa3k/001"]
    assert "agiqa3k/002 (no midjourney_normal)" in data.notes
    assert data.prompts == ["a red bicycle", "an old lighthouse, warm color, anime style"]
    assert data.groups == ["no style", "anime style"]
    # mos_align / 5
    np.testing.assert_allclose(data.mean_reward, [[0.8, 0.6, 1.0], [0.5, 0.2, 0.0]], rtol=0, atol=1e-15)
    assert data.reward_range == (0.0, 1.0)
    # steps x params_b x 0.001: 40 x 0.5, 8 x 0.5, 25 x 2.0 (thousandths of a USD)
    np.testing.assert_allclose(data.cost, [[0.02, 0.004, 0.05]] * 2, rtol=1e-12, atol=0)


def test_agiqa_quality_reward(tmp_path: Path) -> None:
    data = load_dataset(_convert(tmp_path, "agiqa3k", "--reward", "quality"))
    np.testing.assert_allclose(data.mean_reward, [[0.5, 0.2, 0.9], [0.4, 0.1, 0.6]], rtol=0, atol=1e-15)


def test_tifa_rewards_and_prices(tmp_path: Path) -> None:
    data = load_dataset(_convert(tmp_path, "tifa160"))
    assert data.model_names == ["mini_dalle", "stable_diffusion_v2_1"]
    assert data.ids == ["tifa160/coco_1", "tifa160/drawbench_7"]
    assert data.prompts == ["A kite above a beach", "A blue cube on top of a green sphere"]
    assert data.groups == ["coco", "drawbench"]
    # (human_avg - 1) / 4: 2.5 -> 0.375, 5 -> 1, 1 -> 0, 3.5 -> 0.625
    np.testing.assert_allclose(data.mean_reward, [[0.375, 1.0], [0.0, 0.625]], rtol=0, atol=1e-15)
    np.testing.assert_allclose(data.cost, [[0.15, 0.03]] * 2, rtol=1e-12, atol=0)


def test_tifa_refuses_the_quality_reward(tmp_path: Path) -> None:
    argv = ["convert", "tifa160", "--reward", "quality", "--data", str(DATA), "--prices", str(PRICES)]
    assert main([*argv, "--out", str(tmp_path / "x")]) == 2


def test_agiqa_prompt_joins_the_non_empty_fields() -> None:
    record = {"prompt": "a cat", "adj1": "", "adj2": "top view", "style": "baroque style"}
    assert agiqa_prompt(record) == "a cat, top view, baroque style"


def test_committed_image_prices_follow_the_rule() -> None:
    """bench/data/image_prices.json: steps x params (billions) x 5e-5 USD, per image."""
    prices = load_image_prices()
    assert prices.unit == 5e-5
    expected = {
        ("agiqa3k", "AttnGAN_normal"): 1 * 0.05,
        ("agiqa3k", "glide_normal"): 100 * 0.3,
        ("agiqa3k", "DALLE2_normal"): 250 * 3.5,
        ("agiqa3k", "xl2.2_normal"): 50 * 2.6,
        ("agiqa3k", "sd1.5_normal"): 50 * 0.86,
        ("agiqa3k", "sd1.5_highcorr"): 50 * 0.86,
        ("agiqa3k", "sd1.5_lowcorr"): 50 * 0.86,
        ("agiqa3k", "sd1.5_lowstep"): 10 * 0.86,
        ("agiqa3k", "midjourney_normal"): 50 * 2.6,
        ("agiqa3k", "midjourney_lowstep"): 10 * 2.6,
        ("tifa160", "mini_dalle"): 256 * 1.3,
        ("tifa160", "vq_diffusion"): 100 * 0.518,
        ("tifa160", "stable_diffusion_v1_1"): 50 * 0.86,
        ("tifa160", "stable_diffusion_v1_5"): 50 * 0.86,
        ("tifa160", "stable_diffusion_v2_1"): 50 * 0.865,
    }
    got = {(s, m): prices.per_image(s, m) for s in prices.sets for m in prices.models(s)}
    assert got.keys() == expected.keys()
    for key, step_billions in expected.items():
        assert got[key] == pytest.approx(step_billions * 5e-5, rel=1e-12), key
    assert got[("agiqa3k", "sd1.5_normal")] == pytest.approx(0.00215, rel=1e-12)
