"""``bench gateway --load-client wrk``: wrk posts the bodies it is given, once each when told not to
repeat them (ending early when they run out), reports its own count and time, and fails loudly on a
non-2xx answer."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from bench.cli import main
from bench.gateway_bench import System, feedback_system, wrk_bodies
from bench.local_server import serving
from bench.wrk_load import LoadError, load_client, lua_string, run_wrk, script
from tests.debian import installed


@pytest.fixture(scope="module")
def wrk() -> str:
    """Debian's wrk; installed with apt-get when absent."""
    return installed("wrk", "wrk")


def recorder(seen: list[dict[str, Any]], keys: list[str]) -> FastAPI:
    app = FastAPI()

    @app.post("/feedback")
    async def feedback(request: Request) -> JSONResponse:
        keys.append(request.headers.get("authorization", ""))
        seen.append(await request.json())
        return JSONResponse({"ok": True})

    @app.post("/broken")
    async def broken() -> JSONResponse:
        return JSONResponse({"error": "no"}, status_code=500)

    return app


def test_a_lua_literal_never_ends_inside_its_text() -> None:
    assert lua_string("plain") == "[[plain]]"
    assert lua_string("a]]b") == "[=[a]]b]=]"
    assert lua_string("a]]b]=]c") == "[==[a]]b]=]c]==]"
    text = script(Path("/tmp/b.jsonl"), "/feedback", {"Authorization": "Bearer k]]"}, cycle=False)
    assert "[ [[Authorization]] ] = [=[Bearer k]]]=]" in text and "local cycle = false" in text


async def test_bodies_that_must_not_repeat_are_each_sent_once_and_the_run_ends_early(wrk: str) -> None:
    seen: list[dict[str, Any]] = []
    keys: list[str] = []
    bodies = [json.dumps({"decision_id": f"d{i}", "reward": 1.0}) for i in range(60)]
    async with serving(recorder(seen, keys)) as url:
        result = await asyncio.to_thread(
            run_wrk, url, "/feedback", {"Authorization": "Bearer k1"}, bodies, 5, 4, False
        )
    counts = Counter(body["decision_id"] for body in seen)
    assert set(counts) == {f"d{i}" for i in range(60)}  # every body arrived
    assert all(counts[f"d{i}"] == 1 for i in range(59))  # none but the last one repeated
    assert counts["d59"] <= 4  # at most the in-flight requests repeat the last body
    assert result.ran_out
    assert 60 - 3 <= result.requests <= 60  # answered before the stop; 3 others may be in flight then
    assert 0 < result.seconds < 4  # ended when the bodies ran out, not at -d 5s
    assert set(keys) == {"Bearer k1"}


async def test_cycling_bodies_runs_the_whole_duration_and_counts_what_was_answered(wrk: str) -> None:
    seen: list[dict[str, Any]] = []
    keys: list[str] = []
    bodies = [json.dumps({"n": i}) for i in range(3)]
    async with serving(recorder(seen, keys)) as url:
        result = await asyncio.to_thread(run_wrk, url, "/feedback", {}, bodies, 1, 2, True)
    assert not result.ran_out
    assert 0.9 <= result.seconds <= 3  # -d 1s, and the threads' join
    assert 0 < result.requests <= len(seen)
    assert {body["n"] for body in seen} == {0, 1, 2}  # in turn, round and round


async def test_a_non_2xx_answer_fails_the_run(wrk: str) -> None:
    async with serving(recorder([], [])) as url:
        with pytest.raises(LoadError, match="status"):
            await asyncio.to_thread(run_wrk, url, "/broken", {}, ["{}"], 1, 2, True)


def test_a_body_spanning_lines_is_refused_before_wrk_starts() -> None:
    with pytest.raises(LoadError, match="spans lines"):
        run_wrk("http://127.0.0.1:1", "/x", {}, ['{"a":\n1}'], 1, 1)


def test_wrk_posts_each_prompt_in_turn_or_each_decision_once() -> None:
    prompts = ["p0", "p1"]
    forwarded = System("gw", "http://x", 0)
    bodies, cycle = wrk_bodies(forwarded, prompts)
    assert cycle and [json.loads(b)["messages"][0]["content"] for b in bodies] == prompts
    rewards = feedback_system("gw feedback", "http://x", 0, {})
    assert rewards.decisions is not None
    rewards.decisions.extend(["a", "b", "c"])
    bodies, cycle = wrk_bodies(rewards, prompts)
    assert not cycle
    assert sorted(json.loads(b)["decision_id"] for b in bodies) == ["a", "b", "c"]
    assert rewards.decisions == []  # taken from the pool, as the Python client takes them


def test_without_wrk_the_command_fails_at_once_with_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["gateway", "--load-client", "wrk", "--stacks", "sqlite"]) == 2
    assert "apt-get install wrk" in capsys.readouterr().err


def test_the_default_load_client_is_wrk_where_installed_else_httpx(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert load_client("auto") == "httpx"
    assert load_client("wrk") == "wrk"  # named: kept, and refused later if missing
    fake = tmp_path / "wrk"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert load_client("auto") == "wrk"
    assert load_client("httpx") == "httpx"
