"""Embedders by name: ``minilm`` (default, offline all-MiniLM-L6-v2) and ``hashing`` (no model)."""

from __future__ import annotations

from embeddings.base import Embedder


def load_embedder(name: str, device: str = "cpu") -> Embedder:
    if name == "minilm":
        from embeddings.minilm import load_minilm

        return load_minilm(device)
    if name.startswith("hashing"):
        from embeddings.hashing import HashingEmbedder

        _, _, dim = name.partition(":")
        return HashingEmbedder(int(dim) if dim else 384)
    raise ValueError(f"unknown embedder {name!r}; known: minilm, hashing[:dim]")
