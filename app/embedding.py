"""Prompt -> unit vector for the request path, cached by prompt hash.

The cache is Redis when configured (shared by every replica, with a TTL) and an in-process LRU
otherwise. The embedder itself runs in a worker thread so the event loop keeps serving. (The scale-out
work adds a pool of embedding workers in front of the in-process embedder.)
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from typing import Any, Protocol

import anyio
import numpy as np
from redis.asyncio import Redis
from redis.exceptions import RedisError

from embeddings.base import Embedder

log = logging.getLogger(__name__)


def prompt_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache(Protocol):
    async def get(self, key: str) -> np.ndarray | None: ...

    async def put(self, key: str, vector: np.ndarray) -> None: ...


class LruEmbeddingCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()

    async def get(self, key: str) -> np.ndarray | None:
        vector = self._items.get(key)
        if vector is not None:
            self._items.move_to_end(key)
        return vector

    async def put(self, key: str, vector: np.ndarray) -> None:
        if self.capacity <= 0:
            return
        self._items[key] = vector
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)


class RedisEmbeddingCache:
    """float32 bytes under ``bg:emb:<embedder>:<sha256>``; a Redis outage degrades to no cache."""

    def __init__(self, redis: Redis, ttl_s: int) -> None:
        self.redis: Any = redis
        self.ttl_s = ttl_s

    async def get(self, key: str) -> np.ndarray | None:
        try:
            raw = await self.redis.get(f"bg:emb:{key}")
        except (RedisError, OSError) as exc:
            log.warning("embedding cache read failed: %s", exc)
            return None
        return None if raw is None else np.frombuffer(raw, dtype=np.float32).copy()

    async def put(self, key: str, vector: np.ndarray) -> None:
        try:
            await self.redis.set(f"bg:emb:{key}", np.asarray(vector, np.float32).tobytes(), ex=self.ttl_s)
        except (RedisError, OSError) as exc:
            log.warning("embedding cache write failed: %s", exc)


class EmbeddingService:
    def __init__(self, embedder: Embedder, cache: EmbeddingCache) -> None:
        self.embedder = embedder
        self.cache = cache

    @property
    def dim(self) -> int:
        return int(self.embedder.dim)

    async def embed(self, text: str) -> tuple[np.ndarray, str]:
        """The prompt's unit embedding and its sha256 hex digest."""
        digest = prompt_hash(text)
        key = f"{self.embedder.name}:{digest}"
        cached = await self.cache.get(key)
        if cached is not None:
            return cached, digest
        vector = (await anyio.to_thread.run_sync(self.embedder.embed, [text]))[0]
        await self.cache.put(key, vector)
        return vector, digest
