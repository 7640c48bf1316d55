"""``banditgate worker embed``: a pool worker that embeds prompts for the gateways, in dynamic batches.

It reads embedding requests from a Redis stream as one consumer of a consumer group (so several workers
share the load; each request goes to one of them), gathers a batch — up to ``embed_batch_max`` requests,
waiting at most ``embed_batch_wait_ms`` after the first one for more to arrive — embeds the batch in one
call, and pushes each vector onto its request's reply key (the protocol is in ``app/embedding.py``).

Requests older than the gateways' ``embed_timeout_s`` are acknowledged and dropped unanswered: their
gateway has already embedded in-process. So a worker that crashes with requests in flight costs those
requests one timeout each, and nothing else; pending entries are never re-delivered.

The embedder is ``embedder`` (default minilm) on ``embedder_device``; ``auto`` picks CUDA when torch sees
a GPU. ``clip:<architecture>`` loads an OpenCLIP text tower from ``clip_weights`` (a local file; the
``gpu`` extra installs open_clip), never from the network.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from app.embedding import REPLY_ERROR, REPLY_OK, REPLY_TTL_S
from app.settings import Settings
from embeddings.base import Embedder
from embeddings.registry import load_embedder

log = logging.getLogger("banditgate.embed_worker")

GROUP = "embedders"


SIZES_KEPT = 1000


@dataclass
class BatchStats:
    batches: int = 0
    requests: int = 0
    dropped_stale: int = 0
    sizes: list[int] = field(default_factory=list)  # the last SIZES_KEPT batch sizes


class EmbedWorker:
    def __init__(
        self,
        redis: Redis,
        embedder: Embedder,
        stream: str,
        batch_max: int,
        batch_wait_ms: float,
        stale_after_s: float,
        consumer: str | None = None,
    ) -> None:
        self.redis: Any = redis
        self.embedder = embedder
        self.stream = stream
        self.batch_max = batch_max
        self.batch_wait_ms = batch_wait_ms
        self.stale_after_s = stale_after_s
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.stats = BatchStats()
        self._stopping = False

    async def ensure_group(self) -> None:
        """Create the consumer group from the stream's start: requests sent before any worker existed are
        served if still fresh (served entries are deleted; stale ones are dropped by age)."""
        try:
            await self.redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _read(self, count: int, block_ms: int) -> list[tuple[bytes, dict[bytes, bytes]]]:
        replies = await self.redis.xreadgroup(
            GROUP, self.consumer, {self.stream: ">"}, count=count, block=max(block_ms, 1)
        )
        return [entry for _stream, entries in replies or [] for entry in entries]

    async def next_batch(self, idle_block_ms: int = 1000) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """Block until one request arrives, then gather more until the batch is full or the wait is up."""
        batch = await self._read(self.batch_max, idle_block_ms)
        if not batch:
            return batch
        deadline = time.monotonic() + self.batch_wait_ms / 1000
        while len(batch) < self.batch_max:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                break
            more = await self._read(self.batch_max - len(batch), left_ms)
            if not more:
                break
            batch += more
        return batch

    async def serve_batch(self, batch: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        now_ms = time.time() * 1000
        live: list[tuple[bytes, bytes, str]] = []  # entry id, reply key, text
        errors: list[tuple[bytes, bytes]] = []
        for entry_id, fields in batch:
            if now_ms - int(entry_id.split(b"-")[0]) > self.stale_after_s * 1000:
                self.stats.dropped_stale += 1
                continue
            model = fields.get(b"model", b"").decode()
            if model and model != self.embedder.name:
                message = f"worker embeds with {self.embedder.name!r}, request asks for {model!r}"
                errors.append((fields[b"reply"], REPLY_ERROR + message.encode()))
                continue
            live.append((entry_id, fields[b"reply"], fields[b"text"].decode("utf-8")))
        replies = list(errors)
        if live:
            vectors = await asyncio.to_thread(self.embedder.embed, [text for _, _, text in live])
            replies += [
                (reply, REPLY_OK + np.asarray(v, np.float32).tobytes())
                for (_, reply, _), v in zip(live, vectors, strict=True)
            ]
        pipe = self.redis.pipeline(transaction=False)
        for reply, payload in replies:
            pipe.rpush(reply, payload)
            pipe.expire(reply, REPLY_TTL_S)
        ids = [entry_id for entry_id, _ in batch]
        pipe.xack(self.stream, GROUP, *ids)
        pipe.xdel(self.stream, *ids)
        self.stats.batches += 1
        self.stats.requests += len(live)
        self.stats.sizes.append(len(live))
        del self.stats.sizes[:-SIZES_KEPT]  # a long-lived worker keeps only the recent batch sizes
        await pipe.execute()

    async def run(self) -> None:
        await self.ensure_group()
        log.info(
            "embedding worker %s on %s: %s, batches of <= %s, wait <= %s ms",
            self.consumer,
            self.stream,
            self.embedder.name,
            self.batch_max,
            self.batch_wait_ms,
        )
        backoff = 0.1
        while not self._stopping:
            try:
                batch = await self.next_batch()
                if batch:
                    await self.serve_batch(batch)
                backoff = 0.1
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                log.warning("embedding worker: Redis error (%s); retrying", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                with contextlib.suppress(RedisError, OSError):
                    await self.ensure_group()  # Redis may have restarted empty

    def stop(self) -> None:
        """Return from ``run`` after the batch in hand (a read blocks for at most a second): a clean stop
        that does not rely on cancelling a blocked Redis read."""
        self._stopping = True


def resolve_device(device: str) -> str:
    """``auto``: ``cuda`` when torch sees a GPU, else ``cpu``; anything else as given."""
    if device != "auto":
        return device
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="banditgate worker embed",
        description="Embed prompts for the gateways in batches, read from a Redis stream (set "
        "BANDITGATE_EMBED_POOL=true on the gateways). Several workers share the load; a request a worker "
        "does not answer within BANDITGATE_EMBED_TIMEOUT_S is embedded by its gateway instead.",
    )
    parser.add_argument("--device", default=None, help="torch device (default: BANDITGATE_EMBEDDER_DEVICE)")
    args = parser.parse_args(argv)
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not settings.redis_url:
        parser.error("the embedding pool needs BANDITGATE_REDIS_URL")
    device = resolve_device(args.device or settings.embedder_device)
    embedder = load_embedder(settings.embedder, device, weights=settings.clip_weights)

    async def serve() -> None:
        redis = Redis.from_url(settings.redis_url or "", socket_timeout=10)
        worker = EmbedWorker(
            redis,
            embedder,
            settings.embed_stream,
            settings.embed_batch_max,
            settings.embed_batch_wait_ms,
            stale_after_s=settings.embed_timeout_s,
        )
        try:
            await worker.run()
        finally:
            await redis.aclose()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
