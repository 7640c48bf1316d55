"""What the HTTP layer costs per request: ``python -m experiments.http_overhead``.

- ``parser``: server CPU per request of uvicorn's h11 and httptools parsers in front of a trivial app
  (bench/gateway_bench.py's fake upstream, no delay), ``--requests`` sequential keep-alive POSTs per
  round, the parsers alternating over ``--rounds`` rounds; medians. CPU is read from /proc, so the
  figure holds on a loaded machine where latencies do not.
- ``middleware``: microseconds per request the app's own ASGI middlewares (``RequestLimits``,
  ``AnswerServerErrors``) add in front of a trivial endpoint, called in process (no server), medians
  of ``--rounds`` runs.

experiments/ is not packaged and may import app/ and bench/.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from contextlib import ExitStack

import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import AnswerServerErrors
from app.api.http_limits import HttpLimits, RequestLimits
from app.settings import Settings
from bench.gateway_bench import process, tree_cpu_seconds, uvicorn_cmd
from bench.local_server import free_port

PARSERS = ("h11", "httptools")
BODY = {"model": "router", "messages": [{"role": "user", "content": "benchmark prompt 1: which model?"}]}
HEADERS = {"Authorization": "Bearer bg_" + "x" * 43}


async def drive(url: str, count: int) -> None:
    async with httpx.AsyncClient(base_url=url, headers=HEADERS) as client:
        for _ in range(count):
            (await client.post("/v1/chat/completions", json=BODY)).raise_for_status()


def parser_cpu(rounds: int, requests: int) -> dict[str, list[float]]:
    """Server CPU microseconds per request, per parser, one figure per round."""
    env = dict(os.environ) | {"BENCH_UPSTREAM_DELAY_MS": "0"}
    found: dict[str, list[float]] = {http: [] for http in PARSERS}
    with ExitStack() as stack:
        servers: dict[str, tuple[str, int]] = {}
        for http in PARSERS:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            cmd = uvicorn_cmd("bench.gateway_bench:upstream_app", port, http)
            servers[http] = (url, stack.enter_context(process(cmd, env, url, "/docs")).pid)
            asyncio.run(drive(url, 300))  # warm-up
        for r in range(rounds):
            order = list(servers.items()) if r % 2 == 0 else list(reversed(servers.items()))
            for http, (url, pid) in order:
                before = tree_cpu_seconds(pid)
                asyncio.run(drive(url, requests))
                found[http].append((tree_cpu_seconds(pid) - before) / requests * 1e6)
    return found


async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    await receive()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": b"{}"})


SCOPE: Scope = {
    "type": "http",
    "method": "POST",
    "path": "/v1/chat/completions",
    "headers": [
        (b"host", b"gw"),
        (b"content-type", b"application/json"),
        (b"content-length", b"100"),
        (b"authorization", HEADERS["Authorization"].encode()),
        *[(b"x-h%d" % i, b"v") for i in range(6)],
    ],
}


async def one_body() -> Message:
    return {"type": "http.request", "body": b"x" * 100, "more_body": False}


async def sink(message: Message) -> None:
    return None


async def per_call_us(app: ASGIApp, count: int) -> float:
    for _ in range(count // 10):
        await app(SCOPE, one_body, sink)
    started = time.perf_counter()
    for _ in range(count):
        await app(SCOPE, one_body, sink)
    return (time.perf_counter() - started) / count * 1e6


async def middleware_us(count: int, rounds: int) -> dict[str, list[float]]:
    limits = HttpLimits.of(Settings())
    apps: dict[str, ASGIApp] = {
        "endpoint alone": endpoint,
        "RequestLimits": RequestLimits(endpoint, limits),
        "AnswerServerErrors": AnswerServerErrors(endpoint),
        "both": AnswerServerErrors(RequestLimits(endpoint, limits)),
    }
    found: dict[str, list[float]] = {name: [] for name in apps}
    for _ in range(rounds):
        for name, app in apps.items():
            found[name].append(await per_call_us(app, count))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("parser", "middleware"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--requests",
        type=int,
        default=None,
        help="per round (default: 3,000 for parser, 20,000 for middleware)",
    )
    args = parser.parse_args()
    if args.what == "parser":
        results = parser_cpu(args.rounds, args.requests or 3000)
        unit = "us server CPU per request"
    else:
        import uvloop  # the loop uvicorn runs the gateway on

        results = uvloop.run(middleware_us(args.requests or 20_000, args.rounds))
        unit = "us per request in process"
    for name, values in results.items():
        print(
            f"{name}: {statistics.median(values):.1f} {unit} (median; runs: {[round(v, 1) for v in values]})"
        )


if __name__ == "__main__":
    main()
