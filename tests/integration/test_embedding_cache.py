"""Embeddings are cached by prompt hash: in-process, and in Redis when configured (shared by replicas)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import redis.asyncio as aioredis

from app.embedding import (
    EmbeddingService,
    LruEmbeddingCache,
    RedisEmbeddingCache,
    TieredEmbeddingCache,
    prompt_hash,
)
from app.main import create_app
from embeddings.hashing import HashingEmbedder
from tests.conftest import REDIS_URL, Stack, bearer, make_tenancy, running


async def test_redis_cache_holds_the_prompt_embedding(pg_stack: Stack) -> None:
    prompt = "a prompt whose embedding should land in redis " + np.random.default_rng().bytes(4).hex()
    async with running(create_app(pg_stack.settings())) as client:
        t = await make_tenancy(client)
        assert (
            await client.post("/route", json={"prompt": prompt}, headers=bearer(t.key))
        ).status_code == 200
        ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
        expected = ctx.embeddings.embedder.embed([prompt])[0]
    r = aioredis.Redis.from_url(REDIS_URL)
    try:
        key = f"bg:emb:hashing:{ctx.embeddings.dim}:{prompt_hash(prompt)}"
        raw = await r.get(key)
        ttl = await r.ttl(key)
    finally:
        await r.aclose()
    assert raw is not None and 0 < ttl <= 7 * 24 * 3600
    assert np.array_equal(np.frombuffer(raw, dtype=np.float32), expected)


async def test_lru_cache_evicts_least_recently_used() -> None:
    cache = LruEmbeddingCache(capacity=2)
    for key in ("a", "b"):
        await cache.put(key, np.array([1.0], dtype=np.float32))
    assert await cache.get("a") is not None  # "a" is now most recent
    await cache.put("c", np.array([2.0], dtype=np.float32))
    assert (
        await cache.get("b") is None and await cache.get("a") is not None and await cache.get("c") is not None
    )


async def test_embedders_of_one_name_and_two_dimensions_share_redis_without_mixing() -> None:
    """``hashing:64`` and ``hashing:32`` have one embedder name: a vector cached by one is never served to
    the other (that was a 500 on every ``/route`` of a 64-d router after a 384-d run cached the prompt),
    and a cached vector of the wrong shape, from an older key layout, is a miss."""
    prompt = "one prompt, two embedders " + np.random.default_rng().bytes(4).hex()
    r = aioredis.Redis.from_url(REDIS_URL)
    try:
        cache = RedisEmbeddingCache(r, ttl_s=60)
        wide = EmbeddingService(HashingEmbedder(dim=64), cache)
        narrow = EmbeddingService(HashingEmbedder(dim=32), cache)
        assert (await wide.embed(prompt))[0].shape == (64,)
        assert (await narrow.embed(prompt))[0].shape == (32,)
        assert (await wide.embed(prompt))[0].shape == (64,)
        stale = np.ones(7, dtype=np.float32)
        await cache.put(f"hashing:32:{prompt_hash(prompt + '!')}", stale)
        vector, _ = await narrow.embed(prompt + "!")
        assert vector.shape == (32,) and np.array_equal(vector, narrow.embedder.embed([prompt + "!"])[0])
    finally:
        await r.aclose()


class CountingEmbedder(HashingEmbedder):
    def __init__(self, dim: int) -> None:
        super().__init__(dim=dim)
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += texts
        return super().embed(texts)


async def test_the_process_lru_sits_in_front_of_redis() -> None:
    """A vector another replica cached in Redis is served from there once and from this process's LRU
    after (Redis emptied, it is still served, and nothing is embedded again); one embedded here goes to
    both tiers."""
    seen = "seen by another replica " + np.random.default_rng().bytes(4).hex()
    fresh = "first seen here " + np.random.default_rng().bytes(4).hex()
    r = aioredis.Redis.from_url(REDIS_URL)
    try:
        other = EmbeddingService(HashingEmbedder(dim=16), RedisEmbeddingCache(r, ttl_s=60))
        expected, _ = await other.embed(seen)
        embedder = CountingEmbedder(dim=16)
        near = LruEmbeddingCache(capacity=8)
        service = EmbeddingService(embedder, TieredEmbeddingCache(near, RedisEmbeddingCache(r, ttl_s=60)))
        assert np.array_equal((await service.embed(seen))[0], expected) and embedder.texts == []
        key = f"hashing:16:{prompt_hash(seen)}"
        assert await near.get(key) is not None
        await r.delete(f"bg:emb:{key}")
        assert np.array_equal((await service.embed(seen))[0], expected) and embedder.texts == []

        vector, digest = await service.embed(fresh)
        assert embedder.texts == [fresh]
        raw = await r.get(f"bg:emb:hashing:16:{digest}")
        assert raw is not None and np.array_equal(np.frombuffer(raw, dtype=np.float32), vector)
        assert np.array_equal((await service.embed(fresh))[0], vector) and embedder.texts == [fresh]
    finally:
        await r.aclose()
