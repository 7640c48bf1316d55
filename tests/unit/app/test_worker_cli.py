"""`banditgate worker ...` wiring and the guarded embedder loaders (no GPU, no weights needed): a missing
optional piece fails with a message that says what to install."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.cli import main
from embeddings.registry import load_embedder


def test_worker_without_a_known_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker"]) == 2
    assert main(["worker", "nonsense"]) == 2
    assert "snapshot" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["snapshot", "embed"])
def test_each_worker_has_its_own_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["worker", name, "--help"])
    assert exited.value.code == 0
    assert f"banditgate worker {name}" in capsys.readouterr().out


def test_clip_needs_local_weights() -> None:
    with pytest.raises(ValueError, match="local weights"):
        load_embedder("clip:ViT-B-32")
    with pytest.raises(FileNotFoundError, match="not found"):
        load_embedder("clip:ViT-B-32", weights="/nonexistent/open_clip_model.safetensors")


def test_clip_without_open_clip_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    weights = tmp_path / "open_clip_model.safetensors"
    weights.write_bytes(b"")
    monkeypatch.setitem(sys.modules, "open_clip", None)  # as if open_clip_torch were not installed
    with pytest.raises(ImportError, match=r"pip install 'banditgate\[gpu\]'"):
        load_embedder("clip:ViT-B-32", weights=str(weights))


@pytest.mark.parametrize("name", ["minilm", "clip:ViT-B-32"])
def test_a_cuda_device_without_a_gpu_says_what_to_install(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    weights = tmp_path / "open_clip_model.safetensors"
    weights.write_bytes(b"")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CPU build, or no GPU
    with pytest.raises(RuntimeError, match=r"CUDA build of torch.*BANDITGATE_EMBEDDER_DEVICE=cpu"):
        load_embedder(name, "cuda:0", weights=str(weights))
