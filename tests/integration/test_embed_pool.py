"""The embedding worker pool over Redis: dynamic batches, replies, fallback, cache, stale requests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest
from redis.asyncio import Redis

from app.embedding import EmbeddingPoolClient, EmbeddingService, LruEmbeddingCache
from app.main import create_app
from embeddings.hashing import HashingEmbedder
from tests.conftest import REDIS_URL, Stack, bearer, make_tenancy, running, unique
from workers.embed_worker import EmbedWorker

TEXTS = [f"prompt number {i} about {w}" for i, w in enumerate(["tax", "verse", "proof", "cells"] * 10)]


@contextlib.asynccontextmanager
async def worker_running(stream: str, batch_max: int = 16, wait_ms: float = 20) -> AsyncIterator[EmbedWorker]:
    redis = Redis.from_url(REDIS_URL)
    worker = EmbedWorker(redis, HashingEmbedder(), stream, batch_max, wait_ms, stale_after_s=5)
    await worker.ensure_group()
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        # A stop flag, then a bounded wait: a CI run once hung here for the whole test timeout, in the
        # event loop with nothing left to run, after cancelling the worker inside a blocked read.
        worker.stop()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=5)
        await redis.delete(stream)
        await redis.aclose()


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    client = Redis.from_url(REDIS_URL)
    yield client
    await client.aclose()


async def test_the_pool_answers_concurrent_requests_in_dynamic_batches(redis: Redis) -> None:
    stream = unique("bg:test-embed")
    client = EmbeddingPoolClient(redis, stream, "hashing", timeout_s=5)
    async with worker_running(stream, batch_max=16, wait_ms=30) as worker:
        vectors = await asyncio.gather(*(client.embed(t) for t in TEXTS))
    expected = HashingEmbedder().embed(TEXTS)
    np.testing.assert_array_equal(np.stack(vectors), expected)
    assert sum(worker.stats.sizes) == len(TEXTS) == worker.stats.requests
    assert max(worker.stats.sizes) <= 16
    assert worker.stats.batches < len(TEXTS) / 2  # 40 concurrent requests were batched, not served one by one


async def test_a_lone_request_waits_at_most_the_batch_wait(redis: Redis) -> None:
    stream = unique("bg:test-embed")
    client = EmbeddingPoolClient(redis, stream, "hashing", timeout_s=5)
    async with worker_running(stream, batch_max=64, wait_ms=50) as worker:
        await client.embed("warm up")
        started = time.monotonic()
        await client.embed("alone")
        took = time.monotonic() - started
    assert worker.stats.sizes == [1, 1]
    assert 0.05 <= took < 1.0


async def test_without_a_worker_the_gateway_embeds_in_process_after_the_timeout(redis: Redis) -> None:
    stream = unique("bg:test-embed")
    service = EmbeddingService(
        HashingEmbedder(), LruEmbeddingCache(10), EmbeddingPoolClient(redis, stream, "hashing", 0.2)
    )
    started = time.monotonic()
    vector, _ = await service.embed("nobody is listening")
    assert time.monotonic() - started >= 0.2
    np.testing.assert_array_equal(vector, HashingEmbedder().embed(["nobody is listening"])[0])
    assert service.pool_fallbacks == 1
    await redis.delete(stream)


async def test_cached_prompts_skip_the_pool_and_a_wrong_model_falls_back(redis: Redis) -> None:
    stream = unique("bg:test-embed")
    async with worker_running(stream) as worker:
        service = EmbeddingService(
            HashingEmbedder(), LruEmbeddingCache(10), EmbeddingPoolClient(redis, stream, "hashing", 5)
        )
        first, _ = await service.embed("the same prompt")
        again, _ = await service.embed("the same prompt")
        np.testing.assert_array_equal(first, again)
        assert worker.stats.requests == 1 and service.pool_fallbacks == 0

        other = EmbeddingService(
            HashingEmbedder(), LruEmbeddingCache(10), EmbeddingPoolClient(redis, stream, "minilm", 5)
        )
        vector, _ = await other.embed("asks for another model")
        assert other.pool_fallbacks == 1 and worker.stats.requests == 1
        np.testing.assert_array_equal(vector, HashingEmbedder().embed(["asks for another model"])[0])


async def test_requests_older_than_the_timeout_are_dropped_unanswered(redis: Redis) -> None:
    stream = unique("bg:test-embed")
    old_ms = int(time.time() * 1000) - 60_000
    await redis.xadd(stream, {"text": "stale", "model": "hashing", "reply": f"{stream}:r1"}, id=f"{old_ms}-0")
    async with worker_running(stream) as worker:
        deadline = time.monotonic() + 5
        while worker.stats.dropped_stale == 0:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        assert await redis.llen(f"{stream}:r1") == 0 and worker.stats.requests == 0


async def test_the_gateway_routes_through_the_pool(pg_stack: Stack) -> None:
    stream = unique("bg:test-embed")
    async with worker_running(stream) as worker:
        app = create_app(pg_stack.settings(embed_pool=True, embed_stream=stream, embed_timeout_s=5))
        async with running(app) as client:
            t = await make_tenancy(client)
            prompt = {"prompt": unique("a prompt only the pool has seen")}
            assert (await client.post("/route", json=prompt, headers=bearer(t.key))).status_code == 200
            assert (await client.post("/route", json=prompt, headers=bearer(t.key))).status_code == 200
            assert worker.stats.requests == 1  # the second time came from the Redis cache
            assert app.state.ctx.embeddings.pool_fallbacks == 0


async def test_past_the_in_flight_bound_requests_fall_back_at_once() -> None:
    stream = unique("bg:test-embed")
    one_connection = Redis.from_url(REDIS_URL, max_connections=1)
    service = EmbeddingService(
        HashingEmbedder(), LruEmbeddingCache(10), EmbeddingPoolClient(one_connection, stream, "hashing", 1.0)
    )

    async def timed(text: str) -> float:
        started = time.monotonic()
        await service.embed(text)
        return time.monotonic() - started

    waited, rejected = sorted(await asyncio.gather(timed("first"), timed("second")), reverse=True)
    assert waited >= 1.0 and rejected < 0.5 and service.pool_fallbacks == 2
    await one_connection.delete(stream)
    await one_connection.aclose()
