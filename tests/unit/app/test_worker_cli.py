"""`banditgate worker ...` wiring and the guarded CLIP loader (no GPU, no weights needed)."""

from __future__ import annotations

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
