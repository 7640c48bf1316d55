"""CPU of one forwarded request (or ``--endpoint feedback``: one ``POST /feedback``) inside the gateway,
in process: ``python -m experiments.forward_cpu``.

The app runs in this process on a fresh SQLite database (or ``--database-url``), driven through
httpx's ASGI transport (no sockets, no HTTP parser), and its backend client answers from an
``httpx.MockTransport`` with a fixed completion (no upstream). So the process CPU per request of
``--requests`` sequential ``POST /v1/chat/completions`` is the gateway's own work (routing, the
database writes, the JSON) plus the in-process client's, with none of the noise of other processes
sharing the two cores. Medians over ``--runs`` runs; compare versions by running it in each checkout
one after the other. The server-level figures stay with ``banditgate bench gateway``.

``--stages`` adds one more run that times, in wall milliseconds, the awaited steps of each measured
request (the admission, the upstream call, the ledger's reads and writes, the bus's sends, the wait for
the fold, the slot's release) and the request itself, and prints each one's median: where a request
waits, which process CPU does not show.

experiments/ is not packaged and may import app/.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import json
import pstats
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from app.backends import CookielessClient
from app.main import create_app
from app.settings import RATE_LIMIT_MAX, Settings
from app.store.migrate import upgrade

CHECKOUT = f"{Path(__file__).resolve().parents[1]}/"  # profiled files are named from here
ADMIN = "experiment-admin-key-0123456789abcdef"
COMPLETION = {
    "id": "c",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14},
}
PROMPT = "What is the capital of France? Be brief."
BODY = {"model": "router", "messages": [{"role": "user", "content": PROMPT}]}


def upstream(_: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=COMPLETION)


Stages = defaultdict[str, list[float]]  # wall milliseconds of each awaited step, by step

# (the context's attribute, its method): the steps ``--stages`` times
STAGES = [
    ("limiter", "admit_from"),
    ("limiter", "release"),
    ("backends", "call_json"),
    ("ledger", "decisions"),
    ("ledger", "write"),
    ("bus", "publish"),
    ("bus", "publish_soon"),
    ("states", "wait_folded"),
]


def timed(stages: Stages, name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def step(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await method(*args, **kwargs)
        finally:
            stages[name].append((time.perf_counter() - start) * 1000)

    return step


def timed_sync(stages: Stages, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``timed`` for a function that is not a coroutine."""

    @functools.wraps(function)
    def part(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            stages[name].append((time.perf_counter() - start) * 1000)

    return part


async def one_run(
    database_url: str,
    policy: str,
    embedder: str,
    requests: int,
    redis_url: str | None = None,
    endpoint: str = "chat",
    profiler: cProfile.Profile | None = None,
    stages: Stages | None = None,
    rewards: int = 0,
    hyperparameters: dict[str, Any] | None = None,
) -> float:
    """Process CPU milliseconds per request after a 50-request warm-up: a forwarded
    ``POST /v1/chat/completions``, or (``endpoint="feedback"``) a ``POST /feedback`` reward for a
    decision made by ``POST /route`` beforehand (not counted). ``profiler`` profiles the measured
    requests only; ``stages`` collects the wall times of their steps (``STAGES``) and of each request;
    ``rewards`` decisions with a reward each (distinct prompts) are made first, outside the count, so a
    learning policy routes from a memory of that size; ``hyperparameters`` go to the router."""
    settings = Settings(
        database_url=database_url,
        admin_key=ADMIN,
        embedder=embedder,
        redis_url=redis_url,
        # the per-key rate out of the way, as `bench gateway` sets it: the memory fill and the measured
        # requests come faster than the default's 1,000 a second (each request still pays its admission)
        rate_limit_rps=RATE_LIMIT_MAX,
        rate_limit_burst=RATE_LIMIT_MAX,
    )
    await asyncio.to_thread(upgrade, database_url)
    app = create_app(settings)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    async with app.router.lifespan_context(app):
        ctx = app.state.ctx
        # the app's own client class (no cookie jar), on a transport that answers in process
        ctx.backends.http = CookielessClient(transport=httpx.MockTransport(upstream))
        if stages is not None:
            for owner_name, method in STAGES:
                owner = getattr(ctx, owner_name)
                if hasattr(owner, method):
                    setattr(owner, method, timed(stages, f"{owner_name}.{method}", getattr(owner, method)))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            tenant = f"t{time.monotonic_ns()}"
            backend = {"name": f"up-{tenant}", "base_url": "http://upstream/v1", "usd_per_mtok_in": 1.0}
            await client.post("/admin/backends", json=backend, headers=admin)
            await client.post("/admin/tenants", json={"name": tenant}, headers=admin)
            key = (await client.post(f"/admin/tenants/{tenant}/keys", json={}, headers=admin)).json()["key"]
            given: dict[str, Any] = {"model": backend["name"]} if policy == "always" else {}
            router = {
                "name": "main",
                "policy": policy,
                "hyperparameters": {**given, **(hyperparameters or {})},
                "arms": [backend["name"]],
                "is_default": True,
            }
            created = await client.post(f"/admin/tenants/{tenant}/routers", json=router, headers=admin)
            created.raise_for_status()
            headers = {"Authorization": f"Bearer {key}"}
            for i in range(rewards):  # a memory for the policy: distinct prompts, a reward each
                routed = await client.post("/route", json={"prompt": f"{PROMPT} #{i}"}, headers=headers)
                routed.raise_for_status()
                reward = {"decision_id": routed.json()["decision_id"], "reward": float(i % 3 == 0)}
                (await client.post("/feedback", json=reward, headers=headers)).raise_for_status()
            if endpoint == "feedback":
                prompt = {"prompt": PROMPT}
                decisions = [
                    (await client.post("/route", json=prompt, headers=headers)).json()["decision_id"]
                    for _ in range(50 + requests)
                ]
                bodies = [{"decision_id": d, "reward": 1.0} for d in decisions]
                path = "/feedback"
            else:
                bodies = [BODY] * (50 + requests)
                path = "/v1/chat/completions"
            for body in bodies[:50]:
                (await client.post(path, json=body, headers=headers)).raise_for_status()
            if stages is not None:
                stages.clear()
            start = time.process_time()
            if profiler is not None:
                profiler.enable()
            for body in bodies[50:]:
                began = time.perf_counter()
                answered = await client.post(path, json=body, headers=headers)
                answered.raise_for_status()  # a refused request costs less and would flatter the figure
                if stages is not None:
                    stages["request"].append((time.perf_counter() - began) * 1000)
            if profiler is not None:
                profiler.disable()
            return (time.process_time() - start) * 1000 / requests


def owner(filename: str, function: str) -> str:
    """Who a profiled function belongs to: a package of the environment, a stdlib module, a file of
    this project, or a builtin."""
    if "site-packages/" in filename:
        return filename.split("site-packages/")[1].split("/")[0]
    if filename == "~":
        return f"builtin {function}"
    if "/lib/python3" in filename:
        return "stdlib " + filename.split("/lib/python3")[1].split("/", 1)[1].split("/")[0]
    return filename.removeprefix(CHECKOUT)


def print_profile(profiler: cProfile.Profile, requests: int, top: int) -> None:
    """Self time by owner (``top`` of them, shares of the profiled total), and two counts per request:
    Redis commands sent and SQLAlchemy's greenlet hand-offs (one per session operation)."""
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    by_owner: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for (filename, _line, function), (_cc, ncalls, tottime, _ct, _callers) in stats.items():
        by_owner[owner(filename, function)] += tottime
        if function == "pack_command" and "redis/" in filename:
            calls["Redis commands"] += ncalls
        if function == "greenlet_spawn":
            calls["SQLAlchemy greenlet hand-offs"] += ncalls
    total = sum(by_owner.values())
    for name, seconds in by_owner.most_common(top):
        print(f"  {seconds / total:6.1%}  {name}")
    for name in ("Redis commands", "SQLAlchemy greenlet hand-offs"):
        print(f"  {name} per request: {calls[name] / requests:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policy", default="always")
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--database-url", help="default: a fresh SQLite file per run")
    parser.add_argument("--redis-url", help="default: none (the in-process bus and cache)")
    parser.add_argument("--endpoint", choices=["chat", "feedback"], default="chat")
    parser.add_argument(
        "--profile", type=int, metavar="TOP", help="then one run under cProfile: its TOP owners of self time"
    )
    parser.add_argument(
        "--rewards",
        type=int,
        default=0,
        help="decisions rewarded before the run (distinct prompts): the policy's memory size",
    )
    parser.add_argument(
        "--hyperparameters",
        type=json.loads,
        default={},
        help='the router\'s hyperparameters as JSON, e.g. \'{"precision": "float32"}\'',
    )
    parser.add_argument(
        "--stages", action="store_true", help="then one run timing each awaited step (wall ms, medians)"
    )
    args = parser.parse_args()

    def run(profiler: cProfile.Profile | None = None, stages: Stages | None = None) -> float:
        """One run of the requested endpoint, on ``--database-url`` or a fresh SQLite file."""
        url = args.database_url or f"sqlite+aiosqlite:///{tempfile.mkdtemp()}/banditgate.db"
        return asyncio.run(
            one_run(
                url,
                args.policy,
                args.embedder,
                args.requests,
                args.redis_url,
                args.endpoint,
                profiler=profiler,
                stages=stages,
                rewards=args.rewards,
                hyperparameters=args.hyperparameters,
            )
        )

    figures = [run() for _ in range(args.runs)]
    if figures:
        runs = ", ".join(f"{f:.2f}" for f in figures)
        median = statistics.median(figures)
        print(f"{args.policy}, {args.endpoint}: process CPU per request {median:.2f} ms (runs: {runs})")
    if args.profile:
        profiler = cProfile.Profile()
        run(profiler=profiler)
        print("one more run, under cProfile (not in the figures above):")
        print_profile(profiler, args.requests, args.profile)
    if args.stages:
        stages: Stages = defaultdict(list)
        run(stages=stages)
        print("one more run, each awaited step's wall time (median ms; the count is per measured request):")
        for name, times in stages.items():
            print(f"  {name:22s} {statistics.median(times):7.3f} ms  x{len(times) / args.requests:.2f}")


if __name__ == "__main__":
    main()
