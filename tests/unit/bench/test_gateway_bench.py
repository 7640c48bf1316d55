"""``bench gateway``'s arithmetic (medians over rounds, overhead net of the upstream, ratios to the bare
proxy) and how it starts its LiteLLM peer."""

from __future__ import annotations

import logging
import logging.config
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi import FastAPI

from app.settings import RATE_LIMIT_MAX, Settings
from bench.gateway_bench import (
    GATEWAY_ENV,
    LITELLM_LOGGING,
    System,
    drop_stream,
    interleaved_sequential,
    litellm_cmd,
    litellm_config,
    percentile,
    summarise,
    tree_cpu_seconds,
)
from bench.local_server import serving
from tests.conftest import REDIS_URL


def test_overheads_are_medians_net_of_the_upstream_and_ratios_are_against_the_bare_proxy() -> None:
    rounds = [
        {
            "up": {"p50_ms": 1.0, "req_per_s": 900, "cpu_ms_per_req": 0.3},
            "bare": {"p50_ms": 3.0, "req_per_s": 600, "cpu_ms_per_req": 1.0},
            "gw": {"p50_ms": 9.0, "req_per_s": 100, "cpu_ms_per_req": 9.0, "p99_ms": 30.0, "max_ms": 400.0},
        },
        {
            "up": {"p50_ms": 2.0, "req_per_s": 800, "cpu_ms_per_req": 0.4},
            "bare": {"p50_ms": 4.0, "req_per_s": 500, "cpu_ms_per_req": 1.2},
            "gw": {"p50_ms": 7.0, "req_per_s": 200, "cpu_ms_per_req": 7.0, "p99_ms": 20.0, "max_ms": 25.0},
        },
        {
            "up": {"p50_ms": 1.5, "req_per_s": 700, "cpu_ms_per_req": 0.2},
            "bare": {"p50_ms": 3.5, "req_per_s": 400, "cpu_ms_per_req": 1.1},
            "gw": {"p50_ms": 11.5, "req_per_s": 150, "cpu_ms_per_req": 8.0, "p99_ms": 40.0, "max_ms": 41.0},
        },
    ]
    out = summarise(rounds, "up", {"gw": "bare"})  # the gateway against the bare proxy of its parser
    assert out["bare"]["overhead_p50_ms"] == 2.0  # per round 2, 2, 2
    assert out["gw"]["overhead_p50_ms"] == 8.0  # per round 8, 5, 10 -> median 8
    assert out["gw"]["overhead_x_bare"] == 4.0
    assert out["gw"]["req_per_s"] == 150 and out["gw"]["req_per_s_x_bare"] == pytest.approx(150 / 500)
    assert out["gw"]["cpu_ms_per_req"] == 8.0
    assert out["gw"]["p99_ms"] == 40.0 and out["gw"]["max_ms"] == 400.0  # the worst round's tail


def test_the_gateways_run_with_the_largest_per_key_rate_their_settings_accept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The limiter still admits every request, but a throughput run above the default 1,000 requests
    per second per key is not refused with 429s (one was, 1,470 times, before this)."""
    for name, value in GATEWAY_ENV.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.rate_limit_rps == RATE_LIMIT_MAX
    assert settings.rate_limit_burst == RATE_LIMIT_MAX


def test_the_p99_is_an_observed_latency_by_nearest_rank() -> None:
    latencies = [float(i) for i in range(1, 201)]  # 1..200 ms
    assert percentile(latencies, 99) == 198.0  # rank ceil(0.99 * 200) = 198
    assert percentile(latencies, 50) == 100.0
    assert percentile([5.0, 350.0, 4.0], 99) == 350.0  # one stop of the loop is the tail of three


def test_tree_cpu_counts_this_process() -> None:
    before = tree_cpu_seconds(os.getpid())
    sum(i * i for i in range(2_000_000))  # burn some CPU
    assert tree_cpu_seconds(os.getpid()) > before


def test_the_litellm_peer_forwards_router_to_the_upstream_with_no_access_log() -> None:
    """The peer gets ``model: router`` and sends it to the upstream as an OpenAI model, logs no access
    line (uvicorn's access logger is off under its logging config) and runs one worker."""
    config = litellm_config("http://127.0.0.1:9999")
    (model,) = config["model_list"]
    assert model["model_name"] == "router"
    assert model["litellm_params"]["api_base"] == "http://127.0.0.1:9999/v1"
    assert model["litellm_params"]["model"].startswith("openai/")
    assert config["litellm_settings"]["callbacks"] == [] == config["litellm_settings"]["success_callback"]
    access = logging.getLogger("uvicorn.access")
    before = (access.level, access.propagate, list(access.handlers))
    try:
        logging.config.dictConfig(LITELLM_LOGGING)
        assert not access.isEnabledFor(logging.INFO)
        assert access.isEnabledFor(logging.WARNING)
    finally:
        access.setLevel(before[0])
        access.propagate = before[1]
        access.handlers = before[2]
    cmd = litellm_cmd("/venv/bin/litellm", Path("c.json"), Path("l.json"), 4000)
    assert cmd[0] == "/venv/bin/litellm"
    assert cmd[cmd.index("--num_workers") + 1] == "1"
    assert cmd[cmd.index("--log_config") + 1] == "l.json"
    assert cmd[cmd.index("--port") + 1] == "4000"


async def test_interleaved_sequential_requests_take_turns_in_blocks() -> None:
    arrivals: list[tuple[str, str]] = []

    def recorder(name: str) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def answer(body: dict[str, Any]) -> dict[str, str]:
            arrivals.append((name, body["messages"][0]["content"]))
            return {"ok": name}

        return app

    async with serving(recorder("a")) as a, serving(recorder("b")) as b:
        systems = [System("a", a, 0), System("b", b, 0)]
        latencies = await interleaved_sequential(systems, ["p0", "p1", "p2"], n=7, block=3)
    # blocks of 3 taking turns, the last one short; each system's requests walk the prompts in order
    expected = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]
    expected += [("a", 3), ("a", 4), ("a", 5), ("b", 3), ("b", 4), ("b", 5), ("a", 6), ("b", 6)]
    assert arrivals == [(name, f"p{i % 3}") for name, i in expected]
    assert [len(latencies["a"]), len(latencies["b"])] == [7, 7]
    assert all(ms > 0 for ms in latencies["a"] + latencies["b"])


def test_a_run_s_event_stream_is_dropped_from_redis() -> None:
    """The stream a Postgres gateway of the run wrote to is gone afterwards; other keys stay."""
    client = redis.Redis.from_url(REDIS_URL)
    stream, other = f"bench:events:test-{uuid.uuid4().hex}", f"bench:other:test-{uuid.uuid4().hex}"
    try:
        client.xadd(stream, {"m": b"x"})
        client.set(other, b"kept")
        drop_stream(REDIS_URL, stream)
        assert client.exists(stream) == 0 and client.get(other) == b"kept"
        drop_stream(REDIS_URL, stream)  # a stream never written (or gone already) is no error
    finally:
        client.delete(stream, other)
        client.close()
