"""``bench gateway``: what the gateway costs per request, side by side with a bare proxy in one run.

Started as subprocesses on loopback, each under uvicorn with its default (auto) loop and no access
log; the bare proxy and the gateways under the HTTP parser ``--http`` names (several: each system once
per parser, each gateway's ratios against the bare proxy on the same parser), the upstream under
uvicorn's default:

- ``upstream``: a fake OpenAI backend that answers ``POST /v1/chat/completions`` with a fixed completion
  (``--upstream-delay-ms``, default 0.7 ms, like a fast model server's own overhead);
- ``bare-proxy``: a FastAPI pass-through with one pooled httpx client (the floor a Python gateway can
  reach); the gateway systems: ``banditgate serve`` on the embedded SQLite default, or on Postgres (a
  fresh database) + Redis, with an ``always`` or a ``knn-ucb`` router over one backend (the upstream).

For every system, in alternation (round r measures each system once before round r + 1 starts):

- sequential: ``--sequential`` requests one at a time on a keep-alive client, after a warm-up; the p50
  latency and the *overhead* p50 = that p50 minus the upstream's own p50 measured in the same round.
  With ``--interleave B`` (default 25) the systems take turns in blocks of B back-to-back requests (the
  upstream's own among them), so each system's p50 and the upstream's come from the same stretch of
  time and a slow spell of a shared machine weighs on all of them alike; ``--interleave 0`` runs each
  system's requests all at once, one system after another. Within a
  block requests still follow each other at once, so work a server does after answering still meets
  the next request;
- throughput: ``--seconds`` seconds at ``--concurrency`` requests in flight; requests per second. The
  load comes from ``--load-client``: ``httpx``, the Python client of the sequential runs, or ``wrk``
  (bench/wrk_load.py), a C client that spends microseconds per request where httpx tops out near 300
  requests per second on a 2-core machine (Debian: ``apt-get install wrk``); ``auto`` (default) takes
  wrk where it is installed and says so when it falls back to httpx. The report names the one used;
- server CPU per request: user + system CPU of the server's process tree during the throughput run
  (``/proc/<pid>/stat``), divided by the requests it answered;
- the tail of the sequential run: its p99 (nearest rank) and its slowest request, the request's own
  latency (not net of the upstream), the worst round's; a stop of the server's event loop (a full
  garbage collection, say) shows here and not in a median: run ``--sequential`` in thousands to see one.

With ``--route-only`` each gateway is also measured on ``POST /route`` (no forwarding); with
``--feedback`` on ``POST /feedback``, a reward for a fresh decision per request (made through ``/route``
before the run, outside its timing and CPU count).

With ``--litellm PATH`` (never required) a peer gateway is measured in the same rounds: the LiteLLM
proxy whose ``litellm`` executable PATH names, installed in a virtualenv of its own (``pip install
'litellm[proxy]==1.80.0'``: its dependencies would clash with this project's), with one worker, no
database, no callbacks, no access log and its bundled model cost map (``LITELLM_LOCAL_MODEL_COST_MAP``:
it reads nothing from the network), forwarding ``model: router`` to the upstream as an OpenAI model. It
runs under its own uvicorn and HTTP parser; its ratios are against the bare proxy on the first ``--http``.

Every gateway runs with its input limits and rate limiter on; only the per-key rate is set out of the
way (``GATEWAY_ENV``: ``BANDITGATE_RATE_LIMIT_RPS`` and ``_BURST`` at their maximum), so each request
still pays the limiter's admission while a throughput run is not refused: the default, 1,000 requests
per second per key, binds on ``/route`` (one round here was refused 1,470 times).

Reported: medians over rounds, and ratios against the bare proxy. Prompts are ``--prompts`` fixed
texts, embedded once in the warm-up, so kNN routing runs on cached embeddings. The table names the
durability settings in force (they are never changed here): Postgres ``fsync`` and ``synchronous_commit``
as the server reports them, SQLite ``journal_mode=WAL, synchronous=NORMAL`` as app/store/db.py sets them.

    banditgate bench gateway --rounds 3 --json /tmp/gw.json

The gateway runs as ``python -m app.cli serve`` from the working directory. Loopback only; every loop
is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any, TypeVar

import httpx
import redis
from fastapi import FastAPI, Request
from fastapi.responses import Response

from bench.cli import documented_parser
from bench.local_server import free_port
from bench.wrk_load import load_client, run_wrk, wrk_executable

T = TypeVar("T")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
ADMIN_KEY = "bench-gateway-admin-key"
# The per-key rate limit at its largest value (app/settings.py's RATE_LIMIT_MAX): admitted, never refused.
GATEWAY_ENV = {"BANDITGATE_RATE_LIMIT_RPS": "1000000", "BANDITGATE_RATE_LIMIT_BURST": "1000000"}
SQLITE_SETTINGS = "journal_mode=WAL, synchronous=NORMAL (app/store/db.py)"


def upstream_app() -> FastAPI:
    """The fake backend: a fixed chat completion after ``BENCH_UPSTREAM_DELAY_MS`` of sleep."""
    delay = float(os.environ.get("BENCH_UPSTREAM_DELAY_MS", "0.7")) / 1000
    body = json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 0,
            "model": "bench-upstream",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
        }
    ).encode()
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> Response:
        await request.body()
        if delay:
            await asyncio.sleep(delay)
        return Response(body, media_type="application/json")

    return app


def bare_proxy_app() -> FastAPI:
    """A pass-through to ``BENCH_UPSTREAM_URL`` with one pooled client: what a minimal proxy costs."""
    upstream = os.environ["BENCH_UPSTREAM_URL"]
    app = FastAPI()
    client = httpx.AsyncClient(base_url=upstream, timeout=30, limits=httpx.Limits(max_connections=200))

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> Response:
        answer = await client.post(
            "/v1/chat/completions", content=await request.body(), headers={"content-type": "application/json"}
        )
        return Response(answer.content, status_code=answer.status_code, media_type="application/json")

    return app


@dataclass
class System:
    """One thing under measurement: its URL, the request it answers, and the pid whose tree serves it."""

    name: str
    url: str
    pid: int
    path: str = "/v1/chat/completions"
    headers: dict[str, str] = field(default_factory=dict)
    body: Callable[[str], dict[str, Any]] = lambda prompt: {
        "model": "router",
        "messages": [{"role": "user", "content": prompt}],
    }
    decisions: list[str] | None = None  # a feedback system: the decisions left to post a reward for
    http: str = ""  # the HTTP parser it runs under ("": uvicorn's default)


def feedback_system(name: str, url: str, pid: int, headers: dict[str, str], http: str = "") -> System:
    """``POST /feedback``, each request a reward for a decision of its own (made beforehand through
    ``/route``, see ``make_decisions``): a retry of one would be answered as a duplicate, cheaper."""
    pool: list[str] = []
    return System(
        name, url, pid, "/feedback", headers, lambda _: {"decision_id": pool.pop(), "reward": 1.0}, pool, http
    )


async def make_decisions(system: System, prompts: list[str], count: int, concurrency: int = 16) -> None:
    """Fill a feedback system's pool with ``count`` fresh decisions."""
    assert system.decisions is not None
    pool = system.decisions
    async with httpx.AsyncClient(base_url=system.url, headers=system.headers, timeout=60) as client:

        async def worker(offset: int) -> None:
            for i in range(offset, count, concurrency):
                response = await client.post("/route", json={"prompt": prompts[i % len(prompts)]})
                response.raise_for_status()
                pool.append(response.json()["decision_id"])

        await asyncio.gather(*(worker(k) for k in range(concurrency)))


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root`` and every descendant process (Linux /proc)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        times[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += times.get(pid, 0.0)
        stack.extend(child for child, parent in parents.items() if parent == pid)
    return total


def wait_ready(url: str, proc: subprocess.Popen[bytes], path: str, within_s: float = 180) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited during start-up (code {proc.returncode})")
        try:
            if httpx.get(url + path, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} did not answer {path} within {within_s} s")


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


@contextmanager
def process(
    cmd: list[str],
    env: dict[str, str],
    url: str,
    ready_path: str,
    profiled: bool = False,
    cwd: str | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``cmd`` (in ``cwd``), wait until it answers, stop it on exit. ``profiled``: ``cmd`` is
    ``py-spy record -- server``; the server is stopped first, so py-spy writes its profile and exits."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_ready(url, proc, ready_path)
        yield proc
    finally:
        if profiled:
            for child in children(proc.pid):
                os.kill(child, signal.SIGTERM)
        else:
            proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def profile_cmd(out: Path, cmd: list[str]) -> list[str]:
    """``cmd`` under py-spy, sampling every thread of it and its workers into collapsed stacks."""
    beside = Path(sys.executable).parent / "py-spy"  # installed in the same environment (dev extra)
    spy = str(beside) if beside.exists() else "py-spy"
    return [
        spy,
        "record",
        "--format",
        "raw",
        "--rate",
        "100",
        "--nonblocking",
        "--subprocesses",
        "-o",
        str(out),
        "--",
        *cmd,
    ]


# Stacks that serve requests: the HTTP cycle, the bus tailer (folding the events requests made), the
# SQLite connection's thread running a statement. Start-up (imports, model loading) and the SQLite
# thread's wait for work are left out.
REQUEST_FRAMES = ("RequestResponseCycle.run_asgi", "_tail (app/bus.py", "Connection._execute (aiosqlite")


def profile_tops(
    raw: Path, top: int = 15, within: tuple[str, ...] = REQUEST_FRAMES
) -> dict[str, list[tuple[str, float]]]:
    """Top frames of a collapsed-stack profile, among the samples whose stack holds one of ``within``:
    by self time (the frame on top of the stack) and by cumulative time (the frame anywhere below the
    marker), as percentages of those samples. py-spy samples threads holding the GIL only (``--gil``),
    so idle waits are not counted."""
    own: Counter[str] = Counter()
    cumulative: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f]
        start = next((i for i, f in enumerate(frames) if any(m in f for m in within)), None)
        if start is None:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames[start + 1 :]):  # below the marker: its callers are in every sample
            cumulative[frame] += count

    def share(c: Counter[str]) -> list[tuple[str, float]]:
        return [(frame, round(100 * n / max(total, 1), 1)) for frame, n in c.most_common(top)]

    return {"self": share(own), "cumulative": share(cumulative), "samples": [("total", float(total))]}


def uvicorn_cmd(target: str, port: int, http: str = "") -> list[str]:
    return [
        sys.executable,
        "-m",
        "uvicorn",
        target,
        "--factory",
        "--port",
        str(port),
        "--no-access-log",
        "--log-level",
        "warning",
        *(["--http", http] if http else []),
    ]


LITELLM = "litellm (peer)"


def litellm_config(upstream: str) -> dict[str, Any]:
    """The LiteLLM proxy's config: ``model: router`` forwarded to ``upstream`` as an OpenAI model, with
    no callbacks and no telemetry (no database: none is configured)."""
    return {
        "model_list": [
            {
                "model_name": "router",
                "litellm_params": {"model": "openai/bench", "api_base": upstream + "/v1", "api_key": "bench"},
            }
        ],
        "litellm_settings": {"telemetry": False, "callbacks": [], "success_callback": []},
    }


# uvicorn's logging as a dictConfig with the access log off (``--log_config``; LiteLLM has no flag for it)
LITELLM_LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {
        "uvicorn": {"handlers": ["stderr"], "level": "WARNING"},
        "uvicorn.access": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
    },
}


def litellm_cmd(executable: str, config: Path, logging_config: Path, port: int) -> list[str]:
    return [
        executable,
        "--config",
        str(config),
        "--port",
        str(port),
        "--num_workers",
        "1",
        "--telemetry",
        "False",
        "--log_config",
        str(logging_config),
    ]


def start_litellm(
    stack: ExitStack, executable: str, tmp: Path, base_env: dict[str, str], upstream: System, http: str
) -> System:
    """The LiteLLM proxy in front of the upstream, running until ``stack`` closes."""
    config, logging_config = tmp / "litellm.json", tmp / "litellm-logging.json"
    config.write_text(json.dumps(litellm_config(upstream.url)))  # YAML is a superset of JSON
    logging_config.write_text(json.dumps(LITELLM_LOGGING))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = base_env | {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    cmd = litellm_cmd(executable, config, logging_config, port)
    proc = stack.enter_context(process(cmd, env, url, "/health/liveliness", cwd=str(tmp)))
    return System(LITELLM, url, proc.pid, http=http)


def admin_setup(url: str, upstream: str, policy: str) -> str:
    """A tenant, one backend (the upstream) and a default router; returns the tenant's API key."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    tenant, backend = f"bench-{uuid.uuid4().hex[:6]}", f"up-{uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=url, headers=admin, timeout=60) as client:
        client.post("/admin/tenants", json={"name": tenant}).raise_for_status()
        backend_body = {
            "name": backend,
            "base_url": upstream + "/v1",
            "usd_per_mtok_in": 1.0,
            "usd_per_mtok_out": 2.0,
        }
        client.post("/admin/backends", json=backend_body).raise_for_status()
        hyper = {"model": backend} if policy == "always" else {}
        router = {
            "name": "main",
            "policy": policy,
            "hyperparameters": hyper,
            "arms": [backend],
            "is_default": True,
        }
        client.post(f"/admin/tenants/{tenant}/routers", json=router).raise_for_status()
        key: str = client.post(f"/admin/tenants/{tenant}/keys", json={}).json()["key"]
    return key


async def _timed(
    client: httpx.AsyncClient, system: System, prompts: list[str], numbers: range
) -> list[float]:
    """Request ``numbers`` (their prompts) to ``system`` one after another: each one's latency, ms."""
    latencies = []
    for i in numbers:
        started = time.perf_counter()
        response = await client.post(system.path, json=system.body(prompts[i % len(prompts)]))
        latencies.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    return latencies


async def _sequential(system: System, prompts: list[str], n: int) -> list[float]:
    async with httpx.AsyncClient(base_url=system.url, headers=system.headers, timeout=60) as client:
        return await _timed(client, system, prompts, range(n))


async def interleaved_sequential(
    systems: list[System], prompts: list[str], n: int, block: int
) -> dict[str, list[float]]:
    """``n`` sequential requests to each of ``systems``, one keep-alive client each, taking turns in
    blocks of ``block``: the first ``block`` to the first system, then to the second, ..., then the next
    ``block`` to the first again. Each system's latencies, in order."""
    latencies: dict[str, list[float]] = {s.name: [] for s in systems}
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=60))
            for s in systems
        ]
        for start in range(0, n, block):
            for system, client in zip(systems, clients, strict=True):
                latencies[system.name] += await _timed(
                    client, system, prompts, range(start, min(start + block, n))
                )
    return latencies


async def _throughput(
    system: System, prompts: list[str], seconds: float, concurrency: int
) -> tuple[int, float]:
    done = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=system.url, headers=system.headers, timeout=60, limits=limits
    ) as client:
        started = time.perf_counter()
        deadline = started + seconds

        async def worker(offset: int) -> None:
            nonlocal done
            i = offset
            while time.perf_counter() < deadline:
                try:
                    body = system.body(prompts[i % len(prompts)])
                except IndexError:  # a feedback system's decisions ran out: the run ends early
                    break
                response = await client.post(system.path, json=body)
                response.raise_for_status()
                done += 1
                i += concurrency

        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        return done, time.perf_counter() - started


def wrk_bodies(system: System, prompts: list[str]) -> tuple[list[str], bool]:
    """The JSON bodies wrk posts, and whether it may repeat them: one per prompt, in turn; a feedback
    system's, one per decision left in its pool (which this empties), never repeated."""
    if system.decisions is None:
        return [json.dumps(system.body(p)) for p in prompts], True
    bodies = []
    while system.decisions:
        bodies.append(json.dumps(system.body("")))
    return bodies, False


def throughput(system: System, prompts: list[str], args: argparse.Namespace) -> tuple[int, float]:
    """Requests answered and seconds taken in one throughput run, by ``--load-client``."""
    if args.load_client == "wrk":
        bodies, cycle = wrk_bodies(system, prompts)
        done = run_wrk(system.url, system.path, system.headers, bodies, args.seconds, args.concurrency, cycle)
        return done.requests, done.seconds
    return asyncio.run(_throughput(system, prompts, args.seconds, args.concurrency))


def fill_decisions(system: System, prompts: list[str], args: argparse.Namespace) -> None:
    """A feedback system's decisions for one round: its sequential requests' and its throughput run's."""
    if system.decisions is not None:
        system.decisions.clear()
        count = args.sequential + int(args.seconds * args.feedback_pool_rate)
        asyncio.run(make_decisions(system, prompts, count))


def measure(
    system: System, prompts: list[str], args: argparse.Namespace, latencies: list[float] | None = None
) -> dict[str, float]:
    """One round's figures of ``system``: its sequential run (unless ``latencies`` brings them, from
    ``interleaved_sequential``), then its throughput run and the server CPU that run took."""
    if latencies is None:
        fill_decisions(system, prompts, args)
        latencies = asyncio.run(_sequential(system, prompts, args.sequential))
    cpu_before = tree_cpu_seconds(system.pid)
    count, elapsed = throughput(system, prompts, args)
    cpu = tree_cpu_seconds(system.pid) - cpu_before
    return {
        "p50_ms": statistics.median(latencies),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
        "req_per_s": count / elapsed,
        "seconds": elapsed,  # short of --seconds where a feedback run's decisions ran out
        "cpu_ms_per_req": 1000 * cpu / max(count, 1),
    }


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile, nearest rank (an observed value: a stop of the event loop shows as it was)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def on_postgres(server: str, work: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``work(connection)`` on the server's ``postgres`` database, in a fresh event loop."""
    import asyncpg

    async def run() -> T:
        conn = await asyncpg.connect(server + "/postgres")
        try:
            return await work(conn)
        finally:
            await conn.close()

    return asyncio.run(run())


def postgres_settings(server: str) -> dict[str, str]:
    async def read(conn: Any) -> dict[str, str]:
        return {name: str(await conn.fetchval(f"SHOW {name}")) for name in ("fsync", "synchronous_commit")}

    return on_postgres(server, read)


def admin_sql(server: str, statement: str) -> None:
    on_postgres(server, lambda conn: conn.execute(statement))


def drop_stream(url: str, stream: str) -> None:
    """Delete a gateway's event stream from Redis once its run is over (a run's stream holds tens of MB,
    and nothing else reads it)."""
    client = redis.Redis.from_url(url)
    try:
        client.delete(stream)
    finally:
        client.close()


def gateway_specs(args: argparse.Namespace) -> list[tuple[str, str, str, int]]:
    """(name, stack, policy, workers) of each gateway system asked for."""
    specs = []
    for stack in args.stacks:
        for workers in args.workers:
            if stack == "sqlite" and workers > 1:
                continue  # the embedded default is one process
            for policy in args.policies:
                specs.append((f"gateway {stack} {policy} w{workers}", stack, policy, workers))
    return specs


def start_systems(stack: ExitStack, args: argparse.Namespace, tmp: Path) -> tuple[System, list[System]]:
    base_env = dict(os.environ) | {"BENCH_UPSTREAM_DELAY_MS": str(args.upstream_delay_ms)}
    up_port = free_port()
    upstream_url = f"http://127.0.0.1:{up_port}"
    up = stack.enter_context(
        process(uvicorn_cmd("bench.gateway_bench:upstream_app", up_port), base_env, upstream_url, "/docs")
    )
    upstream = System(
        "upstream (direct)",
        upstream_url,
        up.pid,
        body=lambda p: {"model": "x", "messages": [{"role": "user", "content": p}]},
    )
    systems: list[System] = []
    for http in args.http:
        systems.extend(start_for_parser(stack, args, tmp, base_env, upstream, http))
    if args.litellm:
        systems.append(start_litellm(stack, args.litellm, tmp, base_env, upstream, args.http[0]))
    return upstream, systems


def labelled(name: str, http: str, args: argparse.Namespace) -> str:
    """A system's name, with its HTTP parser when the run compares several."""
    return f"{name} [{http}]" if len(args.http) > 1 else name


def start_for_parser(
    stack: ExitStack,
    args: argparse.Namespace,
    tmp: Path,
    base_env: dict[str, str],
    upstream: System,
    http: str,
) -> list[System]:
    """The bare proxy and every gateway asked for, under the HTTP parser ``http``."""
    upstream_url = upstream.url
    systems: list[System] = []
    bare_port = free_port()
    bare_url = f"http://127.0.0.1:{bare_port}"
    bare_env = base_env | {"BENCH_UPSTREAM_URL": upstream_url}
    bare = stack.enter_context(
        process(
            uvicorn_cmd("bench.gateway_bench:bare_proxy_app", bare_port, http), bare_env, bare_url, "/docs"
        )
    )
    systems.append(
        System(labelled("bare-proxy", http, args), bare_url, bare.pid, body=upstream.body, http=http)
    )
    checkouts: list[tuple[str, str | None]] = [("", None)]
    if args.before and http == args.before_http:
        checkouts.append((" before", args.before))
    for (spec_name, kind, policy, workers), (suffix, cwd) in product(gateway_specs(args), checkouts):
        name = labelled(spec_name + suffix, http, args)
        env = base_env | {
            "BANDITGATE_ADMIN_KEY": ADMIN_KEY,
            "BANDITGATE_EMBEDDER": args.embedder,
            "BANDITGATE_LOG_LEVEL": "WARNING",
            "BANDITGATE_HTTP_PARSER": http,
            **GATEWAY_ENV,
        }
        if kind == "sqlite":
            env |= {"BANDITGATE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / (uuid.uuid4().hex + '.db')}"}
        else:
            db = f"bg_gwbench_{uuid.uuid4().hex[:8]}"
            admin_sql(args.pg, f'CREATE DATABASE "{db}"')
            stack.callback(admin_sql, args.pg, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            stream = f"bench:events:{db}"
            stack.callback(drop_stream, args.redis, stream)
            env |= {
                "BANDITGATE_DATABASE_URL": args.pg.replace("postgresql://", "postgresql+asyncpg://")
                + f"/{db}",
                "BANDITGATE_REDIS_URL": args.redis,
                "BANDITGATE_EVENT_STREAM": stream,
            }
        subprocess.run(
            [sys.executable, "-m", "app.cli", "migrate"], env=env, cwd=cwd, check=True, capture_output=True
        )
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [
            sys.executable,
            "-m",
            "app.cli",
            "serve",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--no-access-log",
        ]
        profiled = args.profile is not None
        if profiled:
            Path(args.profile).mkdir(parents=True, exist_ok=True)
            cmd = profile_cmd(profile_path(args.profile, name), cmd)
        proc = stack.enter_context(process(cmd, env, url, "/readyz", profiled, cwd))
        key = admin_setup(url, upstream_url, policy)
        headers = {"Authorization": f"Bearer {key}"}
        systems.append(System(name, url, proc.pid, headers=headers, http=http))
        if args.feedback:
            feedback = feedback_system(
                labelled(f"feedback {kind} {policy} w{workers}{suffix}", http, args),
                url,
                proc.pid,
                headers,
                http,
            )
            systems.append(feedback)
        if args.route_only:
            systems.append(
                System(
                    labelled(f"route-only {kind} {policy} w{workers}{suffix}", http, args),
                    url,
                    proc.pid,
                    "/route",
                    headers,
                    lambda p: {"prompt": p},
                    http=http,
                )
            )
    return systems


def profile_path(folder: str, system: str) -> Path:
    return Path(folder) / (system.replace(" ", "_") + ".txt")


def summarise(
    rounds: list[dict[str, dict[str, float]]], upstream: str, bare_of: dict[str, str]
) -> dict[str, dict[str, float]]:
    """Medians over rounds; each system's ratios against ``bare_of[name]``, the bare proxy under its
    HTTP parser."""
    names = list(rounds[0])
    out: dict[str, dict[str, float]] = {}
    for name in names:
        overheads = [r[name]["p50_ms"] - r[upstream]["p50_ms"] for r in rounds]
        out[name] = {
            "overhead_p50_ms": statistics.median(overheads),
            "req_per_s": statistics.median(r[name]["req_per_s"] for r in rounds),
            "cpu_ms_per_req": statistics.median(r[name]["cpu_ms_per_req"] for r in rounds),
            # the tail is the request's own latency (not net of the upstream): the worst round's
            "p99_ms": max(r[name].get("p99_ms", float("nan")) for r in rounds),
            "max_ms": max(r[name].get("max_ms", float("nan")) for r in rounds),
        }
    for name, row in out.items():
        base = out[bare_of.get(name, name)]
        row["overhead_x_bare"] = (
            row["overhead_p50_ms"] / base["overhead_p50_ms"] if base["overhead_p50_ms"] > 0 else float("nan")
        )
        row["req_per_s_x_bare"] = row["req_per_s"] / base["req_per_s"]
    return out


def format_table(summary: dict[str, dict[str, float]], settings: dict[str, str]) -> str:
    lines = [
        "| system | overhead p50 ms | x bare | req/s | x bare | server CPU ms/req | p99 ms | max ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in summary.items():
        lines.append(
            f"| {name} | {row['overhead_p50_ms']:.2f} | {row['overhead_x_bare']:.2f} | {row['req_per_s']:.0f} | "
            f"{row['req_per_s_x_bare']:.2f} | {row['cpu_ms_per_req']:.2f} | {row['p99_ms']:.1f} | "
            f"{row['max_ms']:.1f} |"
        )
    lines.append("")
    lines.append("durability: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    return "\n".join(lines)


def gateway_main(args: argparse.Namespace) -> int:
    if args.interleave < 0:
        raise ValueError(f"--interleave must be 0 (off) or a block length, got {args.interleave}")
    if args.before and args.before_http not in args.http:
        raise ValueError(
            f"--before runs its gateways under --before-http {args.before_http}, which --http "
            f"({' '.join(args.http)}) must name: add it to --http or pass --before-http {args.http[0]}"
        )
    chosen = load_client(args.load_client)
    if args.load_client == "auto" and chosen == "httpx" and not args.quiet:
        print(
            "load client: httpx (no wrk on PATH: `apt-get install wrk` for more than ~300 req/s)",
            file=sys.stderr,
        )
    args.load_client = chosen  # the report's args name the client used
    if args.load_client == "wrk":
        wrk_executable()  # before minutes of start-up, not after
    prompts = [
        f"benchmark prompt {i}: which model should answer this question about topic {i % 7}?"
        for i in range(args.prompts)
    ]
    settings = {"sqlite": SQLITE_SETTINGS}
    if "postgres" in args.stacks:
        settings |= {f"postgres {k}": v for k, v in postgres_settings(args.pg).items()}
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        upstream, systems = start_systems(stack, args, Path(tmp))
        for system in [upstream, *systems]:  # warm-up: connections, embeddings, caches
            warm = max(args.prompts, 20)
            if system.decisions is not None:
                asyncio.run(make_decisions(system, prompts, warm))
            asyncio.run(_sequential(system, prompts, warm))
        rounds = []
        for r in range(args.rounds):
            order = systems if r % 2 == 0 else list(reversed(systems))
            sequential: dict[str, list[float]] = {}
            if args.interleave:
                for system in order:
                    fill_decisions(system, prompts, args)
                sequential = asyncio.run(
                    interleaved_sequential([upstream, *order], prompts, args.sequential, args.interleave)
                )
            result = {upstream.name: measure(upstream, prompts, args, sequential.get(upstream.name))}
            for system in order:
                result[system.name] = measure(system, prompts, args, sequential.get(system.name))
                if not args.quiet:
                    print(
                        f"round {r + 1}/{args.rounds} {system.name}: {result[system.name]}", file=sys.stderr
                    )
            rounds.append(result)
    bares = {s.http: s.name for s in systems if s.name.startswith("bare-proxy")}
    summary = summarise(rounds, upstream.name, {s.name: bares[s.http] for s in systems})
    profiles = {}
    if args.profile is not None:
        for name, *_ in gateway_specs(args):
            profiles[name] = profile_tops(profile_path(args.profile, name))
    report = {
        "command": "bench gateway",
        "args": {k: v for k, v in vars(args).items() if k != "handler"},
        "durability": settings,
        "rounds": rounds,
        "summary": summary,
        **({"profiles": profiles} if profiles else {}),
    }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    print(format_table(summary, settings))
    print(f"load client: {args.load_client}, {args.concurrency} in flight for {args.seconds:g} s a round")
    for name, tops in profiles.items():
        print(
            f"\nprofile of {name} ({tops['samples'][0][1]:.0f} samples): top self | top cumulative, % of samples"
        )
        for (own, own_pct), (cum, cum_pct) in zip(tops["self"], tops["cumulative"], strict=False):
            print(f"  {own_pct:5.1f} {own[:70]:70} | {cum_pct:5.1f} {cum[:70]}")
    return 0


def add_subcommand(subparsers: Any) -> None:
    parser = documented_parser(
        subparsers,
        "gateway",
        "the gateway's own cost per request against a bare proxy, side by side",
        __doc__,
    )
    parser.add_argument("--stacks", nargs="+", choices=("sqlite", "postgres"), default=["sqlite", "postgres"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2], help="gateway worker processes")
    parser.add_argument("--policies", nargs="+", default=["always", "knn-ucb"], help="router policies")
    parser.add_argument("--route-only", action="store_true", help="also measure POST /route (no forwarding)")
    parser.add_argument(
        "--feedback", action="store_true", help="also measure POST /feedback (a reward per fresh decision)"
    )
    parser.add_argument(
        "--feedback-pool-rate",
        type=float,
        default=300.0,
        help="decisions made per second of --seconds before each feedback run (it stops when they run out)",
    )
    parser.add_argument(
        "--http",
        nargs="+",
        choices=("httptools", "h11"),
        default=["httptools"],
        help="HTTP parser of the bare proxy and the gateways (BANDITGATE_HTTP_PARSER); several: each one",
    )
    parser.add_argument(
        "--before",
        default=None,
        metavar="DIR",
        help="also run every gateway from the checkout at DIR (an earlier version), labelled 'before', "
        "in the same rounds",
    )
    parser.add_argument(
        "--before-http",
        choices=("httptools", "h11"),
        default="h11",
        help="the HTTP parser the --before checkout's serve runs (it may not read BANDITGATE_HTTP_PARSER); "
        "its gateways are compared with the bare proxy on that parser, which --http must name",
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians over them)")
    parser.add_argument("--sequential", type=int, default=300, help="sequential requests per round")
    parser.add_argument(
        "--interleave",
        type=int,
        default=25,
        metavar="B",
        help="the systems' sequential requests take turns in blocks of B (0: each system's all at once, "
        "one system after another)",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="throughput run length per round")
    parser.add_argument(
        "--concurrency", type=int, default=16, help="requests in flight in the throughput run"
    )
    parser.add_argument(
        "--load-client",
        choices=("auto", "httpx", "wrk"),
        default="auto",
        help="the throughput run's client: httpx (Python, ~300 req/s ceiling on 2 cores), wrk (C; "
        "apt-get install wrk) or auto (wrk where installed, else httpx)",
    )
    parser.add_argument("--prompts", type=int, default=32, help="distinct prompts (embedded in the warm-up)")
    parser.add_argument("--upstream-delay-ms", type=float, default=0.7)
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument(
        "--pg", default="postgresql://postgres@127.0.0.1:5432", help="server URL, no database"
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--json", default=None, help="write the JSON report here")
    parser.add_argument(
        "--profile",
        default=None,
        metavar="DIR",
        help="run each gateway under py-spy (dev extra); collapsed stacks and their top frames go to DIR "
        "(the profiler's own CPU counts in that run's figures: use it for profiles, not for the table)",
    )
    parser.add_argument(
        "--litellm",
        default=None,
        metavar="PATH",
        help="also measure the LiteLLM proxy whose `litellm` executable this is (its own virtualenv: "
        "pip install 'litellm[proxy]==1.80.0'), as a peer gateway",
    )
    parser.add_argument("--quiet", action="store_true")
    parser.set_defaults(handler=gateway_main)
