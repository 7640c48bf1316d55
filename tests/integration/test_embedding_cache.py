"""Embeddings are cached by prompt hash: in Redis when configured (shared by replicas), else in-process."""

from __future__ import annotations

import numpy as np
import redis.asyncio as aioredis

from app.embedding import LruEmbeddingCache, prompt_hash
from app.main import create_app
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
        raw = await r.get(f"bg:emb:hashing:{prompt_hash(prompt)}")
        ttl = await r.ttl(f"bg:emb:hashing:{prompt_hash(prompt)}")
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
