"""End-to-end replay through the real gateway over HTTP.

Starts ``banditgate serve`` on a fresh SQLite database with the dataset mounted as replay backends
(``BANDITGATE_REPLAY_DATASET``), registers every model of the dataset as a backend at
``/replay/<model>/v1`` with its prices, creates a tenant and a default router, runs the replay evaluator
(prompts through ``/v1/chat/completions``, logged rewards to ``/feedback``) and stops the server.

    PYTHONPATH=. .venv/bin/python scripts/e2e_replay.py --dataset DIR [--limit N] [--policy linucb]
        [--hyperparameters '{"alpha": 0.5}'] [--embedder minilm] [--block 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from app.replay_backends import load_dataset
from app.replay_evaluator import run_evaluator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the gateway at {url} did not become ready in {timeout_s} s")


def set_up(url: str, admin: str, dataset_dir: Path, policy: str, hyperparameters: dict[str, object]) -> str:
    dataset = load_dataset(dataset_dir)
    headers = {"Authorization": f"Bearer {admin}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for model in dataset.models:
            backend = {
                "name": model.name,
                "base_url": f"{url}/replay/{model.name}/v1",
                "usd_per_mtok_in": model.usd_per_mtok_in,
                "usd_per_mtok_out": model.usd_per_mtok_out,
                "usd_per_call": model.usd_per_call,
                "default_tokens_out": model.default_tokens_out,
            }
            client.post("/admin/backends", json=backend).raise_for_status()
        client.post("/admin/tenants", json={"name": "e2e"}).raise_for_status()
        key = str(client.post("/admin/tenants/e2e/keys", json={}).json()["key"])
        router = {
            "name": "e2e",
            "policy": policy,
            "hyperparameters": hyperparameters,
            "arms": dataset.names,
            "reward_range": list(dataset.reward_range),
            "is_default": True,
        }
        client.post("/admin/tenants/e2e/routers", json=router).raise_for_status()
    return key


def measure_overhead(url: str, key: str, dataset_dir: Path, n: int) -> None:
    """The gateway's own cost per request: ``/v1/chat/completions`` through the router (embed, select,
    log the decision, forward, record the cost event) against the same request sent straight to the
    replay backend the router picked, on the same server. Pairs alternate, prompts repeat (cached
    embeddings after the first pass), and medians are reported."""
    import statistics

    dataset = load_dataset(dataset_dir)
    prompts = [str(row["prompt"]) for row in dataset.rows[: min(50, len(dataset.rows))]]
    via, direct = [], []
    with httpx.Client(base_url=url, timeout=60) as client:
        for i in range(n + len(prompts)):  # the first pass only warms the embedding cache
            body = {"messages": [{"role": "user", "content": prompts[i % len(prompts)]}]}
            t0 = time.perf_counter()
            r = client.post(
                "/v1/chat/completions",
                json={**body, "model": "router"},
                headers={"Authorization": f"Bearer {key}"},
            )
            t1 = time.perf_counter()
            r.raise_for_status()
            model = r.json()["model"]
            t2 = time.perf_counter()
            client.post(
                f"/replay/{model}/v1/chat/completions", json={**body, "model": model}
            ).raise_for_status()
            t3 = time.perf_counter()
            if i >= len(prompts):
                via.append((t1 - t0) * 1000)
                direct.append((t3 - t2) * 1000)
    g, d = statistics.median(via), statistics.median(direct)
    print(
        f"{n} pairs: through the gateway p50 {g:.1f} ms, straight to the backend p50 {d:.1f} ms, "
        f"overhead {g - d:.1f} ms per request, ratio {g / d:.1f}x"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", required=True, type=Path)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--policy", default="linucb")
    parser.add_argument("--hyperparameters", default='{"alpha": 0.5}')
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--block", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--overhead",
        type=int,
        default=0,
        metavar="N",
        help="instead of the replay: N paired requests, through the gateway and straight to a replay backend",
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="banditgate-e2e-"))
    port, admin = free_port(), "adm_" + secrets.token_urlsafe(16)
    env = {
        **os.environ,
        "BANDITGATE_DATABASE_URL": f"sqlite+aiosqlite:///{work / 'gateway.db'}",
        "BANDITGATE_ADMIN_KEY": admin,
        "BANDITGATE_EMBEDDER": args.embedder,
        "BANDITGATE_REPLAY_DATASET": str(args.dataset.resolve()),
        "BANDITGATE_LOG_LEVEL": "WARNING",
    }
    subprocess.run(
        [sys.executable, "-m", "app.cli", "migrate"], env=env, check=True, stdout=subprocess.DEVNULL
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below: stop the server
    server = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url)
        key = set_up(url, admin, args.dataset, args.policy, json.loads(args.hyperparameters))

        async def evaluate() -> None:
            async with httpx.AsyncClient(base_url=url, timeout=120) as client:
                start = time.perf_counter()
                summary = await run_evaluator(
                    client,
                    key,
                    load_dataset(args.dataset),
                    limit=args.limit,
                    block=args.block,
                    seed=args.seed,
                )
                elapsed = time.perf_counter() - start
            print(
                f"{summary.rows} rows in {elapsed:.0f} s ({elapsed / summary.rows * 1000:.0f} ms per row), "
                f"mean reward {summary.mean_reward:.4f}, errors {summary.errors}, calls {dict(summary.models)}"
            )

        if args.overhead:
            measure_overhead(url, key, args.dataset, args.overhead)
        else:
            asyncio.run(evaluate())
    finally:
        server.terminate()
        server.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
