"""Prompt embeddings for replay, cached on disk by content hash.

The cache lives outside the dataset (which may be read-only): ``$BANDITGATE_CACHE_DIR/embeddings`` or
``~/.cache/banditgate/embeddings``. Under it, one folder per embedder name holds shard files
``<hash>.npz``, each with ``keys`` (sha256 of the text embedded, hex) and ``vectors`` (float32 rows). A
lookup reads every shard of the embedder, embeds only the texts that no shard holds (in batches, with a
progress bar) and writes them as one new shard, so subsets and supersets of a dataset share their work.

What is embedded for a prompt is decided by an ``embeddings.prompt_text.EmbedText`` rule (``--embed-text``;
the gateway applies the same rule per router). The key is the hash of the text the model reads *after*
the rule, so a vector is never served for a text it was not made from: changing the strategy or the
budget re-embeds exactly the prompts whose embedded text changes (those longer than the budget) and reuses
the rest, including shards written before rules existed (whose key was the raw prompt, which is what the
rule embeds for a prompt within the budget). ``chunk-mean`` caches each chunk and pools on lookup.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from embeddings.prompt_text import EmbedText, embedding_texts, pool
from embeddings.registry import load_embedder, load_tokenizer

BATCH = 256


def default_cache_dir() -> Path:
    root = os.environ.get("BANDITGATE_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "banditgate"
    return base / "embeddings"


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _folder(cache_dir: Path, embedder: str) -> Path:
    return cache_dir / re.sub(r"[^A-Za-z0-9_.-]", "_", embedder)


def _read_shards(folder: Path) -> dict[str, np.ndarray]:
    found: dict[str, np.ndarray] = {}
    for shard in sorted(folder.glob("*.npz")):
        try:
            with np.load(shard, allow_pickle=False) as data:
                keys, vectors = data["keys"], data["vectors"]
        except (OSError, ValueError, KeyError):
            continue  # a torn or foreign file: ignore it, the prompts get embedded again
        found.update(zip(keys.tolist(), vectors, strict=True))
    return found


def embed_prompts(
    prompts: Sequence[str],
    embedder: str = "minilm",
    cache_dir: Path | None = None,
    progress: bool = True,
    rule: EmbedText | None = None,
) -> np.ndarray:
    """(len(prompts), dim) float32 unit rows for ``prompts`` under ``rule`` (default ``EmbedText()``);
    each distinct text is embedded once."""
    rule = rule or EmbedText()
    tokenizer = load_tokenizer(embedder)
    per_prompt = [embedding_texts(p, rule, tokenizer) for p in prompts]
    vectors = embed_texts([t for texts in per_prompt for t in texts], embedder, cache_dir, progress)
    rows, start = [], 0
    for texts in per_prompt:
        rows.append(pool(vectors[start : start + len(texts)]))
        start += len(texts)
    return np.stack(rows).astype(np.float32, copy=False) if rows else vectors


def embed_texts(
    texts: Sequence[str], embedder: str = "minilm", cache_dir: Path | None = None, progress: bool = True
) -> np.ndarray:
    """(len(texts), dim) float32 unit rows, each text embedded as it is (no rule), cached by its hash."""
    folder = _folder(cache_dir or default_cache_dir(), embedder)
    keys = [text_key(t) for t in texts]
    cached = _read_shards(folder) if folder.is_dir() else {}
    missing: dict[str, str] = {}
    for key, text in zip(keys, texts, strict=True):
        if key not in cached:
            missing.setdefault(key, text)
    if missing:
        model = load_embedder(embedder)
        todo = list(missing.values())
        chunks = []
        for start in tqdm(
            range(0, len(todo), BATCH), desc=f"embedding ({embedder})", unit="batch", disable=not progress
        ):
            chunks.append(np.asarray(model.embed(todo[start : start + BATCH]), dtype=np.float32))
        vectors = np.concatenate(chunks)
        new_keys = np.array(list(missing), dtype="<U64")
        folder.mkdir(parents=True, exist_ok=True)
        shard = folder / f"{hashlib.sha256(''.join(new_keys.tolist()).encode()).hexdigest()[:32]}.npz"
        tmp = shard.with_name(f".{shard.stem}.{os.getpid()}.tmp.npz")
        np.savez(tmp, keys=new_keys, vectors=vectors)
        tmp.replace(shard)
        cached.update(zip(new_keys.tolist(), vectors, strict=True))
    if not keys:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack([cached[k] for k in keys]).astype(np.float32, copy=False)
