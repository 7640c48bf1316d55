"""Gateway-driven cascades: a router with a judge calls the next model until an answer passes."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.conftest import Stack, admin_headers, bearer, running, unique
from tests.fake_backend import FakeBackends
from tests.integration.test_forwarding import (
    PROMPT,
    USAGE_COST,
    add_backend,
    add_tenant,
    events_of,
    gateway_app,
    openai_client,
    prefer,
)
from tests.served import served


def judge_app(passing_model: list[str], seen: list[dict[str, Any]], garbage: bool = False) -> FastAPI:
    app = FastAPI()

    @app.post("/judge")
    async def judge(request: Request) -> Any:
        body = await request.json()
        seen.append(body)
        if garbage:
            return {"verdict": "maybe"}
        return {"pass": body["model"] in passing_model}

    return app


async def test_the_gateway_runs_the_cascade_until_the_judge_passes(stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(stack)
    seen: list[dict[str, Any]] = []
    passing: list[str] = []
    async with served(judge_app(passing, seen)) as judge, running(app) as client:
        first, second = await add_backend(client, fake, "ok"), await add_backend(client, fake, "ok")
        tenant = unique("t")
        key = await add_tenant(client, [first, second], tenant=tenant)
        patch = {"judge": {"url": f"{judge}/judge", "threshold": 0.5}}
        made = await client.patch(
            f"/admin/tenants/{tenant}/routers/main", json=patch, headers=admin_headers()
        )
        assert made.status_code == 200 and made.json()["judge"]["url"] == f"{judge}/judge"
        await prefer(client, key, first)  # the greedy router calls `first` first
        passing.append(second)

        body = {
            "prompt": PROMPT,
            "forward": True,
            "request": {"messages": [{"role": "user", "content": PROMPT}]},
        }
        response = await client.post("/route", json=body, headers=bearer(key))
        assert response.status_code == 200, response.text
        done = response.json()
        assert [(s["model"], s["score"], s["passed"]) for s in done["judged"]] == [
            (first, 0.0, False),
            (second, 1.0, True),
        ]
        assert done["backend"] == second and done["cost"] == pytest.approx(2 * USAGE_COST)
        assert [b["model"] for b in seen] == [first, second] and seen[0]["prompt"] == PROMPT
        assert seen[0]["answer"] == done["response"]["choices"][0]["message"]["content"]
        # the failed step is learned at once; the served answer's reward is the client's to post
        events = [(e.model, e.kind, e.reward) for e in await events_of(app, done["decision_id"])]
        assert events == [(first, "cost", None), (first, "cascade-step", 0.0), (second, "cost", None)]


async def test_a_failing_judge_returns_the_answer_as_it_is(sqlite_stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(sqlite_stack)
    seen: list[dict[str, Any]] = []
    async with served(judge_app([], seen, garbage=True)) as judge, running(app) as client:
        only = await add_backend(client, fake, "ok")
        tenant = unique("t")
        key = await add_tenant(client, [only, await add_backend(client, fake, "ok")], tenant=tenant)
        await client.patch(
            f"/admin/tenants/{tenant}/routers/main",
            json={"judge": {"url": f"{judge}/judge"}},
            headers=admin_headers(),
        )
        body = {
            "prompt": PROMPT,
            "forward": True,
            "request": {"messages": [{"role": "user", "content": PROMPT}]},
        }
        done = (await client.post("/route", json=body, headers=bearer(key))).json()
        assert len(done["judged"]) == 1 and done["judged"][0]["score"] is None
        assert len(seen) == 1
        bad = await client.patch(
            f"/admin/tenants/{tenant}/routers/main",
            json={"judge": {"url": "ftp://nope"}},
            headers=admin_headers(),
        )
        assert bad.status_code == 422


async def test_a_streamed_request_gets_the_judged_cascades_accepted_answer(
    stack: Stack, fake: FakeBackends
) -> None:
    """A judged cascade needs whole answers to judge: with ``stream: true`` the gateway runs it and streams
    the accepted answer (the openai client reads it as any stream), every step's cost recorded."""
    app = gateway_app(stack)
    seen: list[dict[str, Any]] = []
    async with served(judge_app([], seen)) as judge, running(app) as client:
        first, second = await add_backend(client, fake, "nousage"), await add_backend(client, fake, "ok")
        tenant = unique("t")
        key = await add_tenant(client, [first, second], tenant=tenant)
        patch = {"judge": {"url": f"{judge}/judge", "threshold": 0.5}}
        await client.patch(f"/admin/tenants/{tenant}/routers/main", json=patch, headers=admin_headers())
        await prefer(client, key, first)
        seen.clear()
        raw = await openai_client(app, key).chat.completions.with_raw_response.create(
            model="router",
            messages=[{"role": "user", "content": PROMPT}],
            stream=True,
            stream_options={"include_usage": True},
        )
        assert raw.headers["content-type"].startswith("text/event-stream")
        chunks = [chunk async for chunk in raw.parse()]
        # the judge fails both: the cascade ends on the last model it called, whose answer is streamed
        assert [b["model"] for b in seen] == [first, second]
        assert raw.headers["x-banditgate-model"] == second and chunks[0].model == second
        assert chunks[0].choices[0].delta.content == "answer from ok"
        assert chunks[0].choices[0].finish_reason == "stop"
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        events = await events_of(app, raw.headers["x-banditgate-decision-id"])
        assert [(e.model, e.kind, e.reward) for e in events] == [
            (first, "cost", None),
            (first, "cascade-step", 0.0),
            (second, "cost", None),
        ]


async def test_a_failed_backend_mid_cascade_falls_back_to_an_untried_model(
    stack: Stack, fake: FakeBackends
) -> None:
    """The judge fails the first answer; the policy's next model is down; the fallback skips the model the
    cascade already called and goes to the third, whose answer passes."""
    app = gateway_app(stack)
    seen: list[dict[str, Any]] = []
    passing: list[str] = []
    async with served(judge_app(passing, seen)) as judge, running(app) as client:
        first = await add_backend(client, fake, "ok")
        down = await add_backend(client, fake, "status-500")
        third = await add_backend(client, fake, "nousage")
        tenant = unique("t")
        key = await add_tenant(client, [first, down, third], tenant=tenant)
        patch = {"judge": {"url": f"{judge}/judge"}}
        await client.patch(f"/admin/tenants/{tenant}/routers/main", json=patch, headers=admin_headers())
        for arm, reward in ((first, 1.0), (down, 0.8), (third, 0.5)):  # greedy order: first, down, third
            await prefer(client, key, arm, reward=reward)
        passing.append(third)
        body = {"model": "router", "messages": [{"role": "user", "content": PROMPT}]}
        response = await client.post("/v1/chat/completions", json=body, headers=bearer(key))
        assert response.status_code == 200, response.text
        assert [b["model"] for b in seen] == [first, third]
        assert response.headers["x-banditgate-model"] == third
        assert response.json()["choices"][0]["message"]["content"] == "answer from nousage"


def failing_judge_app(status_code: int, answer: Any) -> FastAPI:
    app = FastAPI()

    @app.post("/judge")
    async def judge() -> Any:
        return JSONResponse(answer, status_code=status_code)

    return app


URL_PASSWORD = "hunter2-judge-password"
URL_TOKEN = "judge-query-token-value"
ECHOED_KEY = "sk-ABCDEFGHIJKLMNOPQRSTUVWX"


@pytest.mark.parametrize(
    ("status_code", "answer"),
    [
        (500, {"detail": "down"}),  # httpx's error names the judge's URL, credentials and all
        # An answer of the wrong shape echoing a key that the old 200-character cut split in two
        # (a fragment too short to look like a key, left unredacted).
        (200, {"verdict": "x" * 180 + " " + ECHOED_KEY}),
    ],
)
async def test_a_failing_judge_is_logged_redacted(
    sqlite_stack: Stack, fake: FakeBackends, caplog: pytest.LogCaptureFixture, status_code: int, answer: Any
) -> None:
    app = gateway_app(sqlite_stack)
    async with served(failing_judge_app(status_code, answer)) as judge, running(app) as client:
        arms = [await add_backend(client, fake, "ok"), await add_backend(client, fake, "ok")]
        tenant = unique("t")
        key = await add_tenant(client, arms, tenant=tenant)
        url = judge.replace("http://", f"http://judge:{URL_PASSWORD}@") + f"/judge?token={URL_TOKEN}"
        patched = await client.patch(
            f"/admin/tenants/{tenant}/routers/main", json={"judge": {"url": url}}, headers=admin_headers()
        )
        assert patched.status_code == 200, patched.text
        body = {
            "prompt": PROMPT,
            "forward": True,
            "request": {"messages": [{"role": "user", "content": PROMPT}]},
        }
        with caplog.at_level(logging.WARNING, logger="app.routing.judge"):
            done = (await client.post("/route", json=body, headers=bearer(key))).json()
        assert done["judged"][0]["score"] is None
        logged = [r.getMessage() for r in caplog.records if r.name == "app.routing.judge"]
        assert len(logged) == 1 and "judge of router" in logged[0]
        assert "[REDACTED]" in logged[0]
        for secret in (URL_PASSWORD, URL_TOKEN, ECHOED_KEY[:5]):
            assert secret not in logged[0], logged[0]
