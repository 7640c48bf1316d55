"""Prompt -> unit vector for the request path, cached by prompt hash.

The cache is an in-process LRU, in front of Redis when Redis is configured (shared by every replica,
with a TTL), so a prompt this process has seen costs no round trip. The embedder itself runs in a
worker thread so the event loop keeps serving. With ``embed_pool`` set, cache misses go to the pool of
embedding workers (``banditgate worker embed``) over a Redis stream, and fall back to the in-process
embedder when the pool does not answer in time.

The pool's wire protocol (the worker is ``workers/embed_worker.py``):

- request: ``XADD <embed_stream> * text <prompt> model <embedder name> reply <reply key>``;
- reply: the worker ``RPUSH``es one item on ``<reply key>`` (expiring after ``REPLY_TTL_S``):
  ``b"\x00"`` + the float32 vector's bytes, or ``b"\x01"`` + an error message;
- the gateway waits on the reply key with ``BLPOP`` for at most ``embed_timeout_s``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections import OrderedDict
from typing import Any, Protocol

import numpy as np
from redis.asyncio import Redis
from redis.exceptions import RedisError

from embeddings.base import Embedder
from embeddings.prompt_text import EmbedText, PieceTokenizer, Prompt, embedding_texts, pool
from embeddings.registry import load_tokenizer

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
    """float32 bytes under ``bg:emb:<embedder>:<dim>:<sha256>``; a Redis outage degrades to no cache."""

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


class TieredEmbeddingCache:
    """This process's LRU in front of a shared cache (Redis): a hit here costs no round trip, a hit
    there is kept here too, and a vector put goes to both. A vector depends only on its key (the
    embedder, its dimension and the text's digest), so the two tiers can never disagree."""

    def __init__(self, near: LruEmbeddingCache, far: EmbeddingCache) -> None:
        self.near = near
        self.far = far

    async def get(self, key: str) -> np.ndarray | None:
        vector = await self.near.get(key)
        if vector is None:
            vector = await self.far.get(key)
            if vector is not None:
                await self.near.put(key, vector)
        return vector

    async def put(self, key: str, vector: np.ndarray) -> None:
        await self.near.put(key, vector)
        await self.far.put(key, vector)


REPLY_OK = b"\x00"
REPLY_ERROR = b"\x01"
REPLY_TTL_S = 30


class EmbeddingPoolError(RuntimeError):
    """The pool did not answer in time, or answered with an error."""


class EmbeddingPoolClient:
    """Sends one prompt to the embedding workers and waits for its vector (protocol above).

    Each waiting request holds one Redis connection (BLPOP), so the client should have its own Redis
    client whose pool size bounds the requests in flight (``embed_max_in_flight``); past it, requests
    fail fast with "Too many connections" and the service embeds them in-process.
    """

    def __init__(
        self, redis: Redis, stream: str, model: str, timeout_s: float, maxlen: int = 100_000
    ) -> None:
        self.redis: Any = redis
        self.stream = stream
        self.model = model
        self.timeout_s = timeout_s
        self.maxlen = maxlen

    async def embed(self, text: str) -> np.ndarray:
        reply_key = f"{self.stream}:reply:{uuid.uuid4().hex}"
        try:
            await self.redis.xadd(
                self.stream,
                {"text": text, "model": self.model, "reply": reply_key},
                maxlen=self.maxlen,
                approximate=True,
            )
            answer = await self.redis.blpop([reply_key], timeout=self.timeout_s)
        except (RedisError, OSError) as exc:
            raise EmbeddingPoolError(f"embedding pool unreachable: {exc}") from exc
        if answer is None:
            raise EmbeddingPoolError(f"no embedding worker answered within {self.timeout_s} s")
        raw: bytes = answer[1]
        if raw[:1] != REPLY_OK:
            raise EmbeddingPoolError(raw[1:].decode("utf-8", "replace"))
        return np.frombuffer(raw[1:], dtype=np.float32).copy()

    async def close(self) -> None:
        await self.redis.aclose()


# Prompts up to this many characters are split for the embed-text rule on the event loop (about 1 us
# per character with minilm's tokenizer, which holds the GIL in a thread as well); longer ones in a
# worker thread, where the interpreter's switch interval lets the loop serve other requests meanwhile.
INLINE_TOKENIZE_CHARS = 1000


class EmbeddingService:
    def __init__(
        self,
        embedder: Embedder,
        cache: EmbeddingCache,
        pool: EmbeddingPoolClient | None = None,
        tokenizer: PieceTokenizer | None = None,
        inline_chars: int = INLINE_TOKENIZE_CHARS,
    ) -> None:
        self.embedder = embedder
        self.inline_chars = inline_chars
        self.cache = cache
        self.pool = pool
        # the embedder's word pieces, for the embed-text rule (embeddings.registry.load_tokenizer)
        self.tokenizer = tokenizer or load_tokenizer(embedder.name)
        self.pool_fallbacks = 0  # cache misses the pool did not answer (embedded in-process instead)

    @property
    def dim(self) -> int:
        return int(self.embedder.dim)

    async def embed_prompt(self, prompt: Prompt, rule: EmbedText) -> np.ndarray:
        """The prompt's unit embedding under a router's embed-text rule: the text(s) the rule picks
        (embeddings.prompt_text, as the bench does), each embedded through the cache, pooled. A prompt
        of at most ``inline_chars`` characters is split on the event loop (the hand-off to a thread
        costs more than that), a longer one in a worker thread."""
        chars = len(prompt) if isinstance(prompt, str) else sum(len(text) for _, text in prompt)
        if chars <= self.inline_chars:
            texts = embedding_texts(prompt, rule, self.tokenizer)
        else:
            texts = await asyncio.to_thread(embedding_texts, prompt, rule, self.tokenizer)
        vectors = [(await self.embed(text))[0] for text in texts]
        return pool(np.stack(vectors))

    async def embed(self, text: str) -> tuple[np.ndarray, str]:
        """The text's unit embedding (the text as it is) and its sha256 hex digest; cached by the
        embedder's name and dimension and the digest of exactly this text (one embedder name, such as
        ``hashing``, serves several dimensions, and deployments may share one Redis). A cached vector
        of another shape is a miss."""
        digest = prompt_hash(text)
        key = f"{self.embedder.name}:{self.dim}:{digest}"
        cached = await self.cache.get(key)
        if cached is not None and cached.shape == (self.dim,):
            return cached, digest
        vector = await self._embed_uncached(text)
        await self.cache.put(key, vector)
        return vector, digest

    async def _embed_uncached(self, text: str) -> np.ndarray:
        if self.pool is not None:
            try:
                pooled = await self.pool.embed(text)
                if pooled.shape == (self.dim,):
                    return pooled
                raise EmbeddingPoolError(f"the pool answered a {pooled.shape} vector; expected ({self.dim},)")
            except EmbeddingPoolError as exc:
                self.pool_fallbacks += 1
                log.warning("embedding pool failed (%s); embedding in-process", exc)
        # asyncio's executor rather than anyio's worker threads: anyio binds its threads to a "root task"
        # and reuses them after that task ends when one event loop outlives it (pytest's session loop),
        # which hangs the call.
        vector: np.ndarray = (await asyncio.to_thread(self.embedder.embed, [text]))[0]
        return vector
