"""OpenCLIP text embeddings (for routing image-generation prompts), from local weights only.

Needs the optional ``gpu`` extra (``open_clip_torch``). ``weights`` is a local checkpoint file for the
architecture named (for example ``ViT-B-32``); nothing is ever downloaded. Runs on CUDA when the device
says so. NOTE: this path has not been run in this repository's CI or benchmarks (no GPU, no weights
there); it is written to the open_clip 3.x API.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embeddings.base import normalize_rows


class ClipTextEmbedder:
    def __init__(self, architecture: str, weights: str, device: str = "cpu", batch_size: int = 256) -> None:
        path = Path(weights)
        if not path.is_file():
            raise FileNotFoundError(
                f"CLIP weights {path} not found (set BANDITGATE_CLIP_WEIGHTS to a local file)"
            )
        try:
            import open_clip
            import torch
        except ImportError as exc:  # pragma: no cover - depends on the optional extra
            raise ImportError(
                "the clip embedder needs open_clip_torch: pip install 'banditgate[gpu]' "
                "(or pip install open_clip_torch==3.3.0)"
            ) from exc
        self._torch: Any = torch
        model, _, _ = open_clip.create_model_and_transforms(architecture, pretrained=str(path), device=device)
        self._model: Any = model.eval()
        self._tokenizer: Any = open_clip.get_tokenizer(architecture)
        self.name = f"clip:{architecture}"
        self.device = device
        self.batch_size = batch_size
        self.dim = int(model.text_projection.shape[1])
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows = []
        with self._lock, self._torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                tokens = self._tokenizer(list(texts[start : start + self.batch_size])).to(self.device)
                rows.append(self._model.encode_text(tokens).float().cpu().numpy())
        return normalize_rows(np.concatenate(rows))
