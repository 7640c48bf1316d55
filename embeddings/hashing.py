"""A dependency-free bag-of-words embedder: token and bigram feature hashing, unit-normalised.

Useful where loading a neural model is too slow (unit tests of the plumbing, tiny demos). Deterministic
across processes: it uses blake2b, not Python's salted ``hash``.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence

import numpy as np

from embeddings.base import normalize_rows

_TOKEN = re.compile(r"[a-z0-9]+")


class HashingEmbedder:
    name = "hashing"

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim

    def _bucket(self, token: str) -> tuple[int, float]:
        digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dim, 1.0 if (value >> 63) & 1 else -1.0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            tokens = _TOKEN.findall(text.lower())
            for token in tokens + [f"{a} {b}" for a, b in itertools.pairwise(tokens)]:
                index, sign = self._bucket(token)
                out[row, index] += sign
        return normalize_rows(out)
