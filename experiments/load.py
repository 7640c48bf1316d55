"""Load benchmark of the gateway on Postgres + Redis: ``/route`` throughput and p50/p99 latency with
1, 2 and 4 uvicorn worker processes, embeddings uncached and cached, and the ``/feedback`` ingest rate.

For each worker count it creates a fresh database, migrates it (``banditgate migrate``), starts
``banditgate serve --workers N`` on a loopback port, creates a tenant and a LinUCB router through the
admin API, then drives it with an asyncio httpx client holding ``--concurrency`` requests in flight:

- uncached: ``--requests`` /route calls on prompts never seen (the embedder runs for each);
- cached: ``--requests`` /route calls over 32 prompts embedded beforehand (Redis embedding cache hits);
- feedback: one /feedback per cached decision (insert, commit, publish, wait for the own fold).

With ``--pool`` an embedding worker (``banditgate worker embed``) runs beside the gateway and the gateway
sends its cache misses to it.

    nice -n 10 python -m experiments.load --workers 1 2 4 --requests 400 --data /work/shared/data

Loopback only; bounded request counts. Prints one JSON line per worker count. bench/ never imports app/:
the gateway runs as a subprocess (``python -m app.cli``).
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

import asyncpg
import httpx
import numpy as np

from experiments.prompts import DEFAULT_DATA, mmlu_prompts


async def drive(
    client: httpx.AsyncClient, calls: list[tuple[str, dict[str, Any]]], concurrency: int
) -> tuple[float, list[float], list[Any]]:
    """POST every (path, body) with ``concurrency`` in flight; returns (requests/s, latencies ms, bodies)."""
    todo = list(enumerate(calls))
    todo.reverse()
    latencies: list[float] = []
    bodies: list[Any] = [None] * len(calls)

    async def worker() -> None:
        while todo:
            i, (path, body) = todo.pop()
            started = time.perf_counter()
            response = await client.post(path, json=body)
            latencies.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
            bodies[i] = response.json()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(calls) / (time.perf_counter() - started), latencies, bodies


def summary(rate: float, latencies: list[float]) -> dict[str, float]:
    return {
        "per_s": round(rate, 1),
        "p50_ms": round(statistics.median(latencies), 1),
        "p99_ms": round(float(np.percentile(latencies, 99)), 1),
    }


async def admin_sql(server: str, statement: str) -> None:
    conn = await asyncpg.connect(server + "/postgres")
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def wait_ready(url: str, proc: subprocess.Popen[bytes], within_s: float = 300) -> None:
    deadline = time.monotonic() + within_s
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError("the gateway exited during start-up")
        if time.monotonic() > deadline:
            raise RuntimeError("the gateway did not become ready")
        time.sleep(0.5)


async def measure(url: str, admin_key: str, prompts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    admin = {"Authorization": f"Bearer {admin_key}"}
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        tenant = f"load-{uuid.uuid4().hex[:6]}"
        arms = [f"{tenant}-small", f"{tenant}-large"]
        (await client.post("/admin/tenants", json={"name": tenant}, headers=admin)).raise_for_status()
        for arm in arms:
            body = {"name": arm, "base_url": "http://127.0.0.1:9/v1"}
            (await client.post("/admin/backends", json=body, headers=admin)).raise_for_status()
        key = (await client.post(f"/admin/tenants/{tenant}/keys", json={}, headers=admin)).json()["key"]
        router = {"name": "main", "policy": "linucb", "arms": arms, "is_default": True}
        (await client.post(f"/admin/tenants/{tenant}/routers", json=router, headers=admin)).raise_for_status()
        client.headers["Authorization"] = f"Bearer {key}"

        run = uuid.uuid4().hex[:6]
        hot = [f"[{run}] {p}" for p in prompts[:32]]
        await drive(client, [("/route", {"prompt": p}) for p in hot], 4)  # warm: embed and cache them
        n = args.requests
        uncached = [("/route", {"prompt": f"[{run}:{i}] {prompts[i % len(prompts)]}"}) for i in range(n)]
        rate_u, lat_u, _ = await drive(client, uncached, args.concurrency)
        cached = [("/route", {"prompt": hot[i % len(hot)]}) for i in range(n)]
        rate_c, lat_c, decisions = await drive(client, cached, args.concurrency)
        feedback = [
            ("/feedback", {"decision_id": d["decision_id"], "reward": float(i % 2)})
            for i, d in enumerate(decisions)
        ]
        rate_f, lat_f, _ = await drive(client, feedback, args.concurrency)
    return {
        "route_uncached": summary(rate_u, lat_u),
        "route_cached": summary(rate_c, lat_c),
        "feedback": summary(rate_f, lat_f),
    }


def run_one(workers: int, prompts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    db = f"bg_load_{uuid.uuid4().hex[:8]}"
    asyncio.run(admin_sql(args.pg, f'CREATE DATABASE "{db}"'))
    admin_key = uuid.uuid4().hex
    port = args.port
    env = dict(os.environ) | {
        "BANDITGATE_DATABASE_URL": f"{args.pg}/{db}",
        "BANDITGATE_REDIS_URL": args.redis,
        "BANDITGATE_ADMIN_KEY": admin_key,
        "BANDITGATE_EMBEDDER": args.embedder,
        "BANDITGATE_EVENT_STREAM": f"bench:events:{db}",
        "BANDITGATE_LOG_LEVEL": "WARNING",
    }
    proc: subprocess.Popen[bytes] | None = None
    pool: subprocess.Popen[bytes] | None = None
    if args.pool:  # one embedding worker; the gateways send their cache misses to it
        env |= {"BANDITGATE_EMBED_POOL": "true", "BANDITGATE_EMBED_STREAM": f"bench:embed:{db}"}
        env["BANDITGATE_EMBED_TIMEOUT_S"] = "10"
        pool = subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "embed"], env=env)
    try:
        subprocess.run([sys.executable, "-m", "app.cli", "migrate"], env=env, check=True, capture_output=True)
        cmd = [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", str(workers)]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, proc)
        result = asyncio.run(measure(url, admin_key, prompts, args))
        return {
            "workers": workers,
            "embedder": args.embedder,
            "pool": args.pool,
            "requests": args.requests,
        } | result
    finally:
        for child in (proc, pool):
            if child is not None:
                child.terminate()
                child.wait(timeout=60)
        asyncio.run(admin_sql(args.pg, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--pg", default="postgresql://postgres@127.0.0.1:5432", help="server URL, no database"
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--requests", type=int, default=400, help="requests per measurement")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--port", type=int, default=18080)
    parser.add_argument("--pool", action="store_true", help="embed cache misses in one embedding worker")
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="data directory holding routellm/ (default ../shared/data)",
    )
    args = parser.parse_args(argv)
    prompts = mmlu_prompts(args.data, max(args.requests, 64))
    for workers in args.workers:
        print(json.dumps(run_one(workers, prompts, args)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
