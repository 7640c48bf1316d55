"""Embedding pool benchmark: prompts/s through ``banditgate worker embed`` against the raw model's
batched throughput on the same machine, and the latency the pool adds to one request at low load.

It starts one embedding worker process on the given Redis (``banditgate worker embed``) and talks to it
with the pool's wire protocol (documented in ``app/embedding.py``; reimplemented here in a few lines
because bench/ never imports app/): XADD a request, BLPOP its reply key.

    nice -n 10 python -m experiments.embed_pool --redis redis://127.0.0.1:6379/0 --data /work/shared/data

Prints one JSON object. Loopback only; run with nice on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from redis.asyncio import Redis

from embeddings.registry import load_embedder
from experiments.prompts import DEFAULT_DATA, mmlu_prompts


def raw_throughput(embedder: Any, prompts: list[str], batch: int) -> float:
    """Prompts/s of the in-process model embedding ``prompts`` in batches of ``batch``."""
    started = time.perf_counter()
    for i in range(0, len(prompts), batch):
        embedder.embed(prompts[i : i + batch])
    return len(prompts) / (time.perf_counter() - started)


class PoolClient:
    def __init__(self, redis: Any, stream: str, model: str) -> None:
        self.redis = redis
        self.stream = stream
        self.model = model

    async def embed(self, text: str, timeout_s: float = 60) -> np.ndarray:
        reply = f"{self.stream}:reply:{uuid.uuid4().hex}"
        await self.redis.xadd(self.stream, {"text": text, "model": self.model, "reply": reply})
        answer = await self.redis.blpop([reply], timeout=timeout_s)
        if answer is None or answer[1][:1] != b"\x00":
            raise RuntimeError(f"pool failed: {answer!r}")
        return np.frombuffer(answer[1][1:], dtype=np.float32)


async def pool_throughput(client: PoolClient, prompts: list[str], concurrency: int) -> float:
    todo = list(reversed(prompts))

    async def one_client() -> None:
        while todo:
            await client.embed(todo.pop())

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(concurrency)))
    return len(prompts) / (time.perf_counter() - started)


async def measure(args: argparse.Namespace, embedder: Any, prompts: list[str]) -> dict[str, Any]:
    """Raw and pool rounds alternate (raw, pool, raw, pool, ...) with the worker idle during raw rounds,
    so a change in the machine's load hits both alike; the single-request latencies are paired too."""
    redis: Any = Redis.from_url(args.redis, socket_timeout=130, max_connections=args.concurrency + 8)
    stream = f"bench:embed:{uuid.uuid4().hex[:8]}"
    env = dict(os.environ) | {
        "BANDITGATE_REDIS_URL": args.redis,
        "BANDITGATE_EMBEDDER": args.embedder,
        "BANDITGATE_EMBED_STREAM": stream,
        "BANDITGATE_EMBED_BATCH_MAX": str(args.batch),
        "BANDITGATE_EMBED_BATCH_WAIT_MS": str(args.wait_ms),
        "BANDITGATE_EMBED_TIMEOUT_S": "120",
        "BANDITGATE_LOG_LEVEL": "WARNING",
    }
    worker = subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "embed"], env=env)
    try:
        client = PoolClient(redis, stream, embedder.name)
        await client.embed("warm-up: the worker loads its model first", timeout_s=120)
        raw_rates, pool_rates = [], []
        for _ in range(args.repeats):
            raw_rates.append(raw_throughput(embedder, prompts, args.batch))
            pool_rates.append(await pool_throughput(client, prompts, args.concurrency))
        raw_ms, pool_ms = [], []
        for p in prompts[: args.single]:
            started = time.perf_counter()
            embedder.embed([p])
            raw_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            await client.embed(p)
            pool_ms.append((time.perf_counter() - started) * 1000)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        await redis.delete(stream)
        await redis.aclose()
    raw, pool = statistics.median(raw_rates), statistics.median(pool_rates)
    return {
        "raw_prompts_per_s": round(raw, 1),
        "pool_prompts_per_s": round(pool, 1),
        "ratio": round(pool / raw, 3),
        "ratio_per_round": [round(p / r, 3) for r, p in zip(raw_rates, pool_rates, strict=True)],
        "raw_single_ms": round(statistics.median(raw_ms), 2),
        "pool_single_ms": round(statistics.median(pool_ms), 2),
        "added_latency_ms": round(statistics.median(p - r for r, p in zip(raw_ms, pool_ms, strict=True)), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="data directory holding routellm/ (default ../shared/data)",
    )
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64, help="worker batch max = raw batch size")
    parser.add_argument("--wait-ms", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=128, help="requests in flight through the pool")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--single", type=int, default=50, help="sequential requests for the latency figure")
    args = parser.parse_args(argv)

    prompts = mmlu_prompts(args.data, args.prompts)
    embedder = load_embedder(args.embedder)
    embedder.embed(prompts[:8])  # warm-up
    result = {
        "embedder": args.embedder,
        "prompts": len(prompts),
        "batch": args.batch,
        "wait_ms": args.wait_ms,
        "concurrency": args.concurrency,
        "repeats": args.repeats,
    } | asyncio.run(measure(args, embedder, prompts))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
