"""Embedders by name: ``minilm`` (default, offline all-MiniLM-L6-v2), ``hashing`` (no model) and
``clip:<architecture>`` (OpenCLIP text tower from local weights; the optional ``gpu`` extra)."""

from __future__ import annotations

from embeddings.base import Embedder
from embeddings.prompt_text import CharPieces, PieceTokenizer


def require_device(device: str) -> None:
    """A ``cuda`` device needs a CUDA build of torch that sees a GPU: say so, and what to install."""
    if not device.startswith("cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            f"embedder device {device!r}: torch {torch.__version__} sees no CUDA GPU. Run on a GPU machine "
            "with a CUDA build of torch 2.13.0 (on Linux, PyPI's wheel: pip install torch==2.13.0), or set "
            "BANDITGATE_EMBEDDER_DEVICE=cpu"
        )


def load_embedder(name: str, device: str = "cpu", weights: str | None = None) -> Embedder:
    """``weights``: a local checkpoint, used by ``clip:<architecture>`` only (never downloaded)."""
    if name == "minilm" or name.startswith("clip:"):
        require_device(device)
    if name == "minilm":
        from embeddings.minilm import load_minilm

        return load_minilm(device)
    if name.startswith("hashing"):
        from embeddings.hashing import HashingEmbedder

        _, _, dim = name.partition(":")
        return HashingEmbedder(int(dim) if dim else 384)
    if name.startswith("clip:"):
        from embeddings.clip import ClipTextEmbedder

        if not weights:
            raise ValueError("the clip embedder needs a local weights file (BANDITGATE_CLIP_WEIGHTS)")
        return ClipTextEmbedder(name.removeprefix("clip:"), weights, device)
    raise ValueError(f"unknown embedder {name!r}; known: minilm, hashing[:dim], clip:<architecture>")


def load_tokenizer(name: str) -> PieceTokenizer:
    """The word pieces the embedder ``name`` counts: MiniLM's own tokenizer; for the others (no tokenizer
    here) ``CharPieces``, 4 characters a piece (``embeddings.prompt_text``)."""
    if name == "minilm":
        from embeddings.minilm import load_wordpieces

        return load_wordpieces()
    return CharPieces()
