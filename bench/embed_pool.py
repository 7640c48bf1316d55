"""Embedding pool benchmark: prompts/s through ``banditgate worker embed`` against the raw model's
batched throughput on the same machine, and the latency the pool adds to one request at low load.

It starts one embedding worker process on the given Redis (``banditgate worker embed``) and talks to it
with the pool's wire protocol (documented in ``app/embedding.py``; reimplemented here in a few lines
because bench/ never imports app/): XADD a request, BLPOP its reply key.

    nice -n 10 python -m bench.embed_pool --redis redis://127.0.0.1:6379/0 --data /work/shared/data

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

from bench.prompts import DEFAULT_DATA, mmlu_prompts
from embeddings.registry import load_embedder


def raw_throughput(embedder: Any, prompts: list[str], batch: int, repeats: int) -> float:
    """Median prompts/s of the in-process model embedding ``prompts`` in batches of ``batch``."""
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        for i in range(0, len(prompts), batch):
            embedder.embed(prompts[i : i + batch])
        rates.append(len(prompts) / (time.perf_counter() - started))
    return statistics.median(rates)


def raw_single_latency_ms(embedder: Any, prompts: list[str]) -> float:
    times = []
    for p in prompts:
        started = time.perf_counter()
        embedder.embed([p])
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


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


async def pool_single_latency_ms(client: PoolClient, prompts: list[str]) -> float:
    times = []
    for p in prompts:
        started = time.perf_counter()
        await client.embed(p)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def run_pool(args: argparse.Namespace, prompts: list[str], model: str) -> dict[str, float]:
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
        client = PoolClient(redis, stream, model)
        await client.embed("warm-up: the worker loads its model first", timeout_s=120)
        await client.embed("warm-up again")
        rates = [await pool_throughput(client, prompts, args.concurrency) for _ in range(args.repeats)]
        single = await pool_single_latency_ms(client, prompts[: args.single])
        return {"pool_prompts_per_s": statistics.median(rates), "pool_single_ms": single}
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        await redis.delete(stream)
        await redis.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
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
    raw = raw_throughput(embedder, prompts, args.batch, args.repeats)
    raw_single = raw_single_latency_ms(embedder, prompts[: args.single])
    pool = asyncio.run(run_pool(args, prompts, embedder.name))
    result = {
        "embedder": args.embedder,
        "prompts": len(prompts),
        "batch": args.batch,
        "wait_ms": args.wait_ms,
        "concurrency": args.concurrency,
        "raw_prompts_per_s": round(raw, 1),
        "pool_prompts_per_s": round(pool["pool_prompts_per_s"], 1),
        "ratio": round(pool["pool_prompts_per_s"] / raw, 3),
        "raw_single_ms": round(raw_single, 2),
        "pool_single_ms": round(pool["pool_single_ms"], 2),
        "added_latency_ms": round(pool["pool_single_ms"] - raw_single, 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
