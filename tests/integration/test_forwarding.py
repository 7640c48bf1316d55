"""Forwarding to real (local) backends: the official ``openai`` client against the gateway, which calls
the servers of tests/fake_backend.py. Misbehaving backends must never take the gateway down."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI
from sqlalchemy import event, select
from sqlalchemy.ext.asyncio import session as async_session_module

from app.backend_keys import decrypt_key, fernet_for
from app.main import create_app
from app.store.models import Attempt, Backend, DecisionRow, FeedbackEvent, RouterCounter
from routers.base import Context, Decision, candidate_arms
from routers.linear import LinUCB
from routers.registry import POLICIES
from tests.conftest import Stack, admin_headers, bearer, running, unique
from tests.fake_backend import USAGE, FakeBackends
from tests.served import served

PROMPT = "Prove that sqrt(2) is irrational."
PRICE_IN, PRICE_OUT = 1.0, 2.0  # USD per million tokens
USAGE_COST = USAGE["prompt_tokens"] * PRICE_IN / 1e6 + USAGE["completion_tokens"] * PRICE_OUT / 1e6


def gateway_app(stack: Stack, **overrides: object) -> FastAPI:
    settings = {"forward_max_retries": 1, "forward_backoff_s": 0.01, **overrides}
    return create_app(stack.settings(**settings))


async def add_backend(client: httpx.AsyncClient, fake: FakeBackends, behaviour: str, **fields: object) -> str:
    name = unique(behaviour)
    body = {
        "name": name,
        "base_url": fake.url(behaviour),
        "usd_per_mtok_in": PRICE_IN,
        "usd_per_mtok_out": PRICE_OUT,
        "timeout_s": 0.5,
        **fields,
    }
    response = await client.post("/admin/backends", json=body, headers=admin_headers())
    assert response.status_code == 201, response.text
    return str(body["name"])  # ``fields`` may name it


async def add_tenant(
    client: httpx.AsyncClient,
    arms: list[str],
    router: str = "main",
    policy: str = "linucb",
    hyperparameters: dict[str, object] | None = None,
    tenant: str | None = None,
) -> str:
    """A tenant (``tenant``, else a new name) whose default router is ``policy`` (LinUCB: alpha 0, greedy)
    over ``arms``; returns its key."""
    tenant = tenant or unique("t")
    assert (
        await client.post("/admin/tenants", json={"name": tenant}, headers=admin_headers())
    ).status_code == 201
    key = (await client.post(f"/admin/tenants/{tenant}/keys", json={}, headers=admin_headers())).json()["key"]
    body = {
        "name": router,
        "policy": policy,
        "hyperparameters": {"alpha": 0.0} if hyperparameters is None else hyperparameters,
        "arms": arms,
        "is_default": True,
    }
    response = await client.post(f"/admin/tenants/{tenant}/routers", json=body, headers=admin_headers())
    assert response.status_code == 201, response.text
    return key


async def prefer(
    client: httpx.AsyncClient, key: str, arm: str, prompt: str = PROMPT, reward: float = 1.0
) -> None:
    """Teach the greedy router that ``arm`` earns ``reward`` on ``prompt`` (1.0: it is chosen first)."""
    decision = (
        await client.post("/route", json={"prompt": prompt, "candidates": [arm]}, headers=bearer(key))
    ).json()
    feedback = {"decision_id": decision["decision_id"], "reward": reward}
    assert (await client.post("/feedback", json=feedback, headers=bearer(key))).status_code == 202


def openai_client(app: FastAPI, key: str) -> openai.AsyncOpenAI:
    transport = httpx2.ASGITransport(app=app)
    return openai.AsyncOpenAI(
        base_url="http://gateway/v1",
        api_key=key,
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=transport, base_url="http://gateway"),
    )


async def events_of(app: FastAPI, decision_id: str) -> list[FeedbackEvent]:
    async with app.state.ctx.sessionmaker() as session:
        query = (
            select(FeedbackEvent).where(FeedbackEvent.decision_id == decision_id).order_by(FeedbackEvent.id)
        )
        return list(await session.scalars(query))


async def attempts_of(app: FastAPI, decision_id: str) -> list[tuple[str, str, int | None]]:
    async with app.state.ctx.sessionmaker() as session:
        query = select(Attempt).where(Attempt.decision_id == decision_id).order_by(Attempt.id)
        return [(a.model, a.outcome, a.http_status) for a in await session.scalars(query)]


async def test_openai_client_chat_cost_and_feedback(stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(stack)
    async with running(app) as client:
        ok = await add_backend(client, fake, "ok", api_key="sk-upstream-secret", usd_per_call=0.001)
        key = await add_tenant(client, [ok])
        llm = openai_client(app, key)
        raw = await llm.chat.completions.with_raw_response.create(
            model="router", messages=[{"role": "user", "content": PROMPT}], max_tokens=5
        )
        completion = raw.parse()
        decision_id = raw.headers["x-banditgate-decision-id"]
        assert completion.model == ok and completion.choices[0].message.content == "answer from ok"
        assert float(raw.headers["x-banditgate-cost-usd"]) == pytest.approx(USAGE_COST + 0.001)

        # Upstream got the backend's key as a bearer token and its own model name, the rest untouched.
        seen = fake.seen("ok")[-1]
        assert seen.headers["authorization"] == "Bearer sk-upstream-secret"
        assert seen.body["model"] == ok and seen.body["max_tokens"] == 5

        # The key is encrypted at rest and never returned.
        async with app.state.ctx.sessionmaker() as session:
            row = await session.scalar(select(Backend).where(Backend.name == ok))
        assert row is not None and row.api_key_secret is not None and "sk-upstream" not in row.api_key_secret
        assert (
            decrypt_key(fernet_for(app.state.ctx.settings.secret_key), row.api_key_secret)
            == "sk-upstream-secret"
        )
        listed = (await client.get(f"/admin/backends/{ok}", headers=admin_headers())).text
        assert "sk-upstream" not in listed and row.api_key_secret not in listed

        # The cost is a feedback event; the client's reward (no model named) is a separate event.
        events = await events_of(app, decision_id)
        assert [(e.model, e.kind, e.reward) for e in events] == [(ok, "cost", None)]
        assert events[0].cost == pytest.approx(USAGE_COST + 0.001)
        reward = await client.post(
            "/feedback", json={"decision_id": decision_id, "reward": 0.9}, headers=bearer(key)
        )
        assert (
            reward.status_code == 202 and reward.json()["duplicate"] is False and reward.json()["model"] == ok
        )
        assert await attempts_of(app, decision_id) == [(ok, "ok", 200)]

        # /route with forward: the same call through the gateway's own API.
        body = {"forward": True, "request": {"messages": [{"role": "user", "content": PROMPT}]}}
        routed = await client.post("/route", json=body, headers=bearer(key))
        assert routed.status_code == 200, routed.text
        answer = routed.json()
        assert answer["backend"] == ok and answer["model"] == ok
        assert answer["response"]["choices"][0]["message"]["content"] == "answer from ok"
        assert answer["cost"] == pytest.approx(USAGE_COST + 0.001)
        assert [a["outcome"] for a in answer["attempts"]] == ["ok"]
        streamed = {
            "forward": True,
            "request": {"stream": True, "messages": [{"role": "user", "content": PROMPT}]},
        }
        assert (await client.post("/route", json=streamed, headers=bearer(key))).status_code == 422
        unforwarded = {"prompt": PROMPT, "request": {"messages": []}}
        assert (await client.post("/route", json=unforwarded, headers=bearer(key))).status_code == 422


async def test_streaming_passes_events_through_and_accounts_usage(
    sqlite_stack: Stack, fake: FakeBackends
) -> None:
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        ok = await add_backend(client, fake, "ok")
        key = await add_tenant(client, [ok], router="chat")
        llm = openai_client(app, key)
        raw = await llm.chat.completions.with_raw_response.create(
            model="router/chat", messages=[{"role": "user", "content": PROMPT}], stream=True
        )
        decision_id = raw.headers["x-banditgate-decision-id"]
        chunks = [chunk async for chunk in raw.parse()]
        # The gateway asked upstream for usage itself; the client, which did not, never sees that chunk.
        assert all(chunk.choices for chunk in chunks) and {c.model for c in chunks} == {ok}
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == "part0 part1 part2 "
        assert fake.seen("ok")[-1].body["stream_options"] == {"include_usage": True}
        events = await events_of(app, decision_id)
        assert [(e.kind, e.cost) for e in events] == [("cost", pytest.approx(USAGE_COST))]

        # A client that asks for usage gets the usage chunk.
        stream = await llm.chat.completions.create(
            model="router/chat",
            messages=[{"role": "user", "content": PROMPT}],
            stream=True,
            stream_options={"include_usage": True},
        )
        usages = [c.usage for c in [c async for c in stream] if c.usage is not None]
        assert [u.completion_tokens for u in usages] == [USAGE["completion_tokens"]]


async def test_fallback_to_the_policys_next_choice(sqlite_stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        hang = await add_backend(client, fake, "hang", timeout_s=0.3)
        ok = await add_backend(client, fake, "ok")
        key = await add_tenant(client, [hang, ok])
        await prefer(client, key, hang)
        llm = openai_client(app, key)
        raw = await llm.chat.completions.with_raw_response.create(
            model="router", messages=[{"role": "user", "content": PROMPT}]
        )
        assert raw.parse().model == ok
        decision_id = raw.headers["x-banditgate-decision-id"]
        # hang: first try and one retry timed out; then the policy's next choice answered.
        assert await attempts_of(app, decision_id) == [
            (hang, "timeout", None),
            (hang, "timeout", None),
            (ok, "ok", 200),
        ]
        assert fake.counts["hang"] == 2
        # Feedback without a model is about the backend that answered.
        reward = await client.post(
            "/feedback", json={"decision_id": decision_id, "reward": 0.5}, headers=bearer(key)
        )
        assert reward.json()["model"] == ok


@pytest.mark.parametrize(
    ("behaviour", "code", "calls", "says"),
    [
        ("hang", 504, 2, "timed out after 0.3 s"),
        ("garbage", 502, 2, "invalid JSON"),
        ("nan", 502, 2, "invalid JSON"),  # NaN is not JSON: never passed on (or a 500 on the way out)
        ("surrogate", 502, 2, "invalid JSON"),  # nor is text that is no Unicode
        ("close", 502, 2, "connection failed"),
        ("status-500", 502, 2, "answered 500"),
        ("status-400", 502, 1, "answered 400"),  # not retried: the request itself is refused
    ],
)
async def test_a_misbehaving_backend_gets_a_clear_error(
    sqlite_stack: Stack, fake: FakeBackends, behaviour: str, code: int, calls: int, says: str
) -> None:
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        bad = await add_backend(client, fake, behaviour, timeout_s=0.3)
        key = await add_tenant(client, [bad])
        body = {"model": "router", "messages": [{"role": "user", "content": PROMPT}]}
        response = await client.post("/v1/chat/completions", json=body, headers=bearer(key))
        assert response.status_code == code, response.text
        detail = response.json()["error"]["message"]
        assert bad in detail and says in detail and response.headers["x-banditgate-decision-id"] in detail
        assert fake.counts[behaviour] == calls
        # The gateway is still up and serving.
        assert (await client.get("/healthz")).status_code == 200
        llm = openai_client(app, key)
        with pytest.raises(openai.APIStatusError) as raised:
            await llm.chat.completions.create(model="router", messages=[{"role": "user", "content": PROMPT}])
        assert raised.value.status_code == code


async def test_retry_after_a_transient_error(sqlite_stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        flaky = await add_backend(client, fake, "flaky-1")
        key = await add_tenant(client, [flaky])
        body = {"forward": True, "request": {"messages": [{"role": "user", "content": PROMPT}]}}
        answer = (await client.post("/route", json=body, headers=bearer(key))).json()
        assert [(a["outcome"], a["http_status"]) for a in answer["attempts"]] == [
            ("http_error", 503),
            ("ok", 200),
        ]
        assert answer["response"]["choices"][0]["message"]["content"] == "answer from flaky-1"


async def test_a_cookie_a_backend_sets_is_never_sent_again(sqlite_stack: Stack, fake: FakeBackends) -> None:
    """One HTTP client serves every tenant: a cookie from one answer must not ride on the next request
    (another tenant's here) to that backend."""
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        backend = await add_backend(client, fake, "setcookie")
        keys = [await add_tenant(client, [backend]) for _ in range(2)]
        body = {"model": "router", "messages": [{"role": "user", "content": PROMPT}]}
        for key in keys:
            answer = await client.post("/v1/chat/completions", json=body, headers=bearer(key))
            assert answer.status_code == 200, answer.text
        seen = fake.seen("setcookie")
        assert len(seen) == 2
        assert "cookie" not in seen[1].headers


async def test_a_broken_stream_ends_with_an_error_event(sqlite_stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        broken = await add_backend(client, fake, "breakstream")
        key = await add_tenant(client, [broken])
        body = {"model": "router", "stream": True, "messages": [{"role": "user", "content": PROMPT}]}
        response = await client.post("/v1/chat/completions", json=body, headers=bearer(key))
        assert response.status_code == 200
        data = [line for line in response.text.splitlines() if line.startswith("data:")]
        # The chunk that arrived, then an error event naming the backend; no [DONE], no cost recorded.
        assert len(data) == 2 and "part0" in data[0] and "data: [DONE]" not in response.text
        assert f"backend '{broken}' closed the stream before [DONE]" in data[1]
        decision_id = response.headers["x-banditgate-decision-id"]
        assert await attempts_of(app, decision_id) == [(broken, "ok", 200), (broken, "connection", None)]
        assert await events_of(app, decision_id) == []
        assert (await client.get("/healthz")).status_code == 200


async def test_images_cost_the_per_call_price(sqlite_stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        painter = await add_backend(client, fake, "ok", kind="image", usd_per_call=0.04)
        key = await add_tenant(client, [painter])
        llm = openai_client(app, key)
        raw = await llm.images.with_raw_response.generate(model="router", prompt="a lighthouse at dusk")
        images = raw.parse()
        assert images.data is not None and images.data[0].url == "http://img/ok.png"
        assert float(raw.headers["x-banditgate-cost-usd"]) == pytest.approx(0.04)
        # A chat request cannot be sent to a router of image backends: refused before any decision.
        body = {"model": "router", "messages": [{"role": "user", "content": PROMPT}]}
        refused = await client.post("/v1/chat/completions", json=body, headers=bearer(key))
        assert refused.status_code == 400
        assert "cannot serve chat completions" in refused.json()["error"]["message"]


async def test_bad_model_names_and_missing_secret_key(sqlite_stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(sqlite_stack, secret_key=None)
    async with running(app) as client:
        body = {"name": unique("k"), "base_url": fake.url("ok"), "api_key": "sk-x"}
        refused = await client.post("/admin/backends", json=body, headers=admin_headers())
        assert refused.status_code == 422 and "BANDITGATE_SECRET_KEY" in refused.text
        ok = await add_backend(client, fake, "ok")
        key = await add_tenant(client, [ok])
        for model in ("gpt-4o", "router/", "router/missing"):
            chat = {"model": model, "messages": [{"role": "user", "content": PROMPT}]}
            response = await client.post("/v1/chat/completions", json=chat, headers=bearer(key))
            assert response.status_code == (400 if model == "router/" else 404), (model, response.text)


async def test_a_client_that_disconnects_cancels_the_upstream_call(
    sqlite_stack: Stack, fake: FakeBackends
) -> None:
    app = gateway_app(sqlite_stack)
    async with served(app) as url, httpx.AsyncClient(base_url=url) as client:
        slow = await add_backend(client, fake, "slowstream", timeout_s=5)
        key = await add_tenant(client, [slow])
        body = {"model": "router", "stream": True, "messages": [{"role": "user", "content": PROMPT}]}
        async with client.stream("POST", "/v1/chat/completions", json=body, headers=bearer(key)) as response:
            decision_id = response.headers["x-banditgate-decision-id"]
            async for line in response.aiter_lines():
                if "part1" in line:
                    break  # leave after two of the 50 chunks
        for _ in range(50):
            if fake.disconnected.get("slowstream"):
                break
            await asyncio.sleep(0.1)
        assert fake.disconnected["slowstream"] is True
        for _ in range(50):
            if (await attempts_of(app, decision_id))[-1:] == [(slow, "cancelled", None)]:
                break
            await asyncio.sleep(0.1)
        assert await attempts_of(app, decision_id) == [(slow, "ok", 200), (slow, "cancelled", None)]


# --- client-driven cascades and ensembles --------------------------------------------------------------


class FixedCascade(LinUCB):
    """Test policy: every arm not yet tried, as a fixed (non-adaptive) cascade in the arms' order."""

    name: ClassVar[str] = "test-fixed-cascade"

    def select(self, context: Context) -> Decision:
        return Decision(arms=candidate_arms(self.arms, context), mode="cascade")


class Everyone(LinUCB):
    """Test policy: every arm, as a set (an ensemble)."""

    name: ClassVar[str] = "test-everyone"

    def select(self, context: Context) -> Decision:
        return Decision(arms=candidate_arms(self.arms, context), mode="set")


async def test_next_step_of_a_single_decision_reasks_the_policy(
    sqlite_stack: Stack, fake: FakeBackends
) -> None:
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        first, second = await add_backend(client, fake, "ok"), await add_backend(client, fake, "ok")
        key = await add_tenant(client, [first, second])
        await prefer(client, key, first)
        decision = (await client.post("/route", json={"prompt": PROMPT}, headers=bearer(key))).json()
        assert decision["model"] == first
        decision_id = decision["decision_id"]
        step = await client.post(f"/route/{decision_id}/next", json={"reward": 0.1}, headers=bearer(key))
        assert step.status_code == 200, step.text
        assert (
            step.json()["model"] == second
            and step.json()["stop"] is False
            and step.json()["tried"] == [first]
        )
        assert second in step.json()["scores"]
        # The next report names no model: it is about `second`, the model just offered. Nothing is left.
        done = (
            await client.post(f"/route/{decision_id}/next", json={"reward": 0.2}, headers=bearer(key))
        ).json()
        assert done == {
            "decision_id": decision_id,
            "model": None,
            "stop": True,
            "tried": [first, second],
            "scores": {},
        }
        events = await events_of(app, decision_id)
        assert [(e.model, e.kind, e.reward) for e in events] == [
            (first, "cascade-step", 0.1),
            (second, "cascade-step", 0.2),
        ]
        # Errors: a reward outside the range, a decision that does not exist.
        bad = await client.post(f"/route/{decision_id}/next", json={"reward": 7.0}, headers=bearer(key))
        assert bad.status_code == 422 and "outside the router's reward range" in bad.text
        missing = await client.post("/route/" + "0" * 32 + "/next", json={}, headers=bearer(key))
        assert missing.status_code == 404


async def test_next_step_of_a_fixed_cascade_follows_its_order(
    sqlite_stack: Stack, fake: FakeBackends, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(POLICIES, "test-fixed-cascade", FixedCascade)
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        arms = [await add_backend(client, fake, "ok") for _ in range(3)]
        key = await add_tenant(client, arms, policy="test-fixed-cascade")
        decision = (await client.post("/route", json={"prompt": PROMPT}, headers=bearer(key))).json()
        assert decision["mode"] == "cascade" and decision["models"] == arms
        url = f"/route/{decision['decision_id']}/next"
        offered = [(await client.post(url, json={}, headers=bearer(key))).json()["model"] for _ in range(3)]
        assert offered == [arms[1], arms[2], None]


async def test_a_set_decision_is_an_ensemble(
    sqlite_stack: Stack, fake: FakeBackends, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(POLICIES, "test-everyone", Everyone)
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        good = await add_backend(client, fake, "ok")
        plain = await add_backend(client, fake, "nousage")
        broken = await add_backend(client, fake, "status-500")
        key = await add_tenant(client, [good, plain, broken], policy="test-everyone")
        llm = openai_client(app, key)
        raw = await llm.chat.completions.with_raw_response.create(
            model="router", messages=[{"role": "user", "content": PROMPT}]
        )
        completion = raw.parse()
        assert completion.model == f"{good},{plain}"
        contents = [c.message.content for c in completion.choices]
        assert contents == ["answer from ok", "answer from nousage"] and [
            c.index for c in completion.choices
        ] == [0, 1]
        # Costs: usage for `ok`; characters / 4 for `nousage` (prompt 33 chars -> 9 tokens, answer 19 -> 5).
        plain_cost = 9 * PRICE_IN / 1e6 + 5 * PRICE_OUT / 1e6
        assert float(raw.headers["x-banditgate-cost-usd"]) == pytest.approx(USAGE_COST + plain_cost)
        decision_id = raw.headers["x-banditgate-decision-id"]
        events = await events_of(app, decision_id)
        assert sorted((e.model, e.kind) for e in events) == sorted([(good, "cost"), (plain, "cost")])
        outcomes = sorted((m, o) for m, o, _ in await attempts_of(app, decision_id))
        assert outcomes == sorted(
            [(good, "ok"), (plain, "ok"), (broken, "http_error"), (broken, "http_error")]
        )

        # Streamed, the ensemble's answers come as one chunk each, tagged with the member's model.
        raw_stream = await llm.chat.completions.with_raw_response.create(
            model="router", messages=[{"role": "user", "content": PROMPT}], stream=True
        )
        assert raw_stream.headers["x-banditgate-model"] == f"{good},{plain}"
        chunks = [chunk async for chunk in raw_stream.parse()]
        assert [(c.choices[0].index, c.choices[0].delta.content) for c in chunks] == [
            (0, "answer from ok"),
            (1, "answer from nousage"),
        ]
        assert [c.choices[0].model_extra["model"] for c in chunks] == [good, plain]

        body = {"forward": True, "request": {"messages": [{"role": "user", "content": PROMPT}]}}
        routed = (await client.post("/route", json=body, headers=bearer(key))).json()
        members = {m["backend"]: m for m in routed["ensemble"]}
        assert routed["backend"] == good and set(members) == {good, plain, broken}
        assert members[broken]["response"] is None and "answered 500" in members[broken]["error"]


async def test_no_database_connection_is_held_during_an_upstream_call(
    pg_stack: Stack, fake: FakeBackends
) -> None:
    app = gateway_app(pg_stack, forward_max_retries=0)
    async with running(app) as client:
        slow = await add_backend(client, fake, "hang", timeout_s=1.0)
        key = await add_tenant(client, [slow])
        body = {"model": "router", "messages": [{"role": "user", "content": PROMPT}]}
        call = asyncio.create_task(client.post("/v1/chat/completions", json=body, headers=bearer(key)))
        while not fake.seen("hang"):
            await asyncio.sleep(0.02)
        # The backend has the request and is not answering: the gateway holds no pooled connection.
        assert app.state.ctx.engine.pool.checkedout() == 0
        assert (await call).status_code == 504


async def test_forwarded_requests_in_flight_with_no_catalog_cache_all_answer(
    sqlite_stack: Stack, fake: FakeBackends
) -> None:
    """32 forwarded requests in flight, every catalog read a database read (``catalog_ttl_s=0``): a
    request's writes (decision, attempts, cost) never wait on another pooled connection while holding
    SQLite's write lock, so none times out on the pool or the lock, and every decision is logged."""
    app = gateway_app(sqlite_stack, catalog_ttl_s=0)
    async with running(app) as client:
        # The backend's own timeout is not under test: on a loaded CI box 32 requests sharing one event
        # loop with the client can take longer than the helper's 0.5 s to reach the fake backend.
        slow = await add_backend(client, fake, "delay-0.05", timeout_s=30.0)
        key = await add_tenant(client, [slow])
        body = {"model": "router", "messages": [{"role": "user", "content": PROMPT}]}
        answers = await asyncio.gather(
            *(client.post("/v1/chat/completions", json=body, headers=bearer(key)) for _ in range(32))
        )
        assert [a.status_code for a in answers] == [200] * 32
        for answer in answers:
            assert await attempts_of(app, answer.headers["x-banditgate-decision-id"]) == [(slow, "ok", 200)]


async def test_mixture_routers_learn_from_the_forwarded_answer(
    sqlite_stack: Stack, fake: FakeBackends
) -> None:
    """The gateway embeds what the generator answered and folds it into the mixture policy: the cost
    event carries the answer's embedding, streaming or not, with no feedback from the client."""
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        arms = [await add_backend(client, fake, "ok"), await add_backend(client, fake, "ok")]
        tenant = unique("t")
        await client.post("/admin/tenants", json={"name": tenant}, headers=admin_headers())
        key = (await client.post(f"/admin/tenants/{tenant}/keys", json={}, headers=admin_headers())).json()[
            "key"
        ]
        router = {"name": "mix", "policy": "mixture-greedy", "arms": arms, "is_default": True}
        assert (
            await client.post(f"/admin/tenants/{tenant}/routers", json=router, headers=admin_headers())
        ).status_code == 201
        llm = openai_client(app, key)
        plain = await llm.chat.completions.with_raw_response.create(
            model="router/mix", messages=[{"role": "user", "content": PROMPT}]
        )
        answer = plain.parse().choices[0].message.content
        streamed = await llm.chat.completions.with_raw_response.create(
            model="router/mix", messages=[{"role": "user", "content": PROMPT}], stream=True
        )
        streamed_text = "".join([c.choices[0].delta.content or "" async for c in streamed.parse()])
        embedder = app.state.ctx.embeddings.embedder
        for raw, text in ((plain, answer), (streamed, streamed_text)):
            events = await events_of(app, raw.headers["x-banditgate-decision-id"])
            assert [e.kind for e in events] == ["cost"]
            got = events[0].payload["output_embedding"]
            assert got == pytest.approx([float(v) for v in embedder.embed([text])[0]], abs=1e-6)
        decision = (await client.post("/route", json={"prompt": PROMPT}, headers=bearer(key))).json()
        assert sum(decision["scores"][arm]["n"] for arm in arms) == 2


async def test_a_declined_decision_is_a_503_that_says_so(sqlite_stack: Stack, fake: FakeBackends) -> None:
    """PromptWise stops before the first call when no model is worth its cost (max_a q_a - lambda c_a <= 0):
    the client gets a 503 naming the router, marked declined, with the decision id for feedback."""
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        ok = await add_backend(client, fake, "ok")
        tenant = unique("t")
        await client.post("/admin/tenants", json={"name": tenant}, headers=admin_headers())
        key = (await client.post(f"/admin/tenants/{tenant}/keys", json={}, headers=admin_headers())).json()[
            "key"
        ]
        stingy = {
            "name": "stingy",
            "policy": "promptwise",
            "hyperparameters": {"cost_weight": 1e9, "tau_exp": 0},
            "arms": [ok],
            "is_default": True,
        }
        made = await client.post(f"/admin/tenants/{tenant}/routers", json=stingy, headers=admin_headers())
        assert made.status_code == 201, made.text
        body = {"model": "router/stingy", "messages": [{"role": "user", "content": PROMPT}]}
        response = await client.post("/v1/chat/completions", json=body, headers=bearer(key))
        assert response.status_code == 503
        error = response.json()["error"]
        assert "'stingy' declined to choose a model" in error["message"] and error["code"] == "model_declined"
        assert response.headers["x-banditgate-declined"] == "true"
        decision_id = response.headers["x-banditgate-decision-id"]
        assert await attempts_of(app, decision_id) == []  # no backend was called


async def test_seeded_requests_get_the_same_decisions(sqlite_stack: Stack, fake: FakeBackends) -> None:
    """With OpenAI's ``seed`` a decision draws from (router seed, request seed): the uniformly random policy
    makes the same choices for the same seeds, other choices for others, on /v1 and on /route alike."""
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        arms = [await add_backend(client, fake, "ok") for _ in range(4)]
        key = await add_tenant(client, arms, policy="random", hyperparameters={})

        async def choices(seeds: range) -> list[str]:
            out = []
            for seed in seeds:
                body = {"model": "router", "seed": seed, "messages": [{"role": "user", "content": PROMPT}]}
                response = await client.post("/v1/chat/completions", json=body, headers=bearer(key))
                assert response.status_code == 200, response.text
                out.append(response.headers["x-banditgate-model"])
            return out

        first = await choices(range(20))
        assert first == await choices(range(20))
        assert first != await choices(range(20, 40))
        assert len(set(first)) > 1
        routed = await client.post("/route", json={"prompt": PROMPT, "seed": 3}, headers=bearer(key))
        assert routed.json()["model"] == first[3]
        bad = await client.post("/route", json={"prompt": PROMPT, "seed": -1}, headers=bearer(key))
        assert bad.status_code == 422 and "seed" in bad.text


class WriteCommits:
    """Counts the commits of transactions that wrote something (an INSERT, UPDATE or DELETE), on the
    app's engine and by its ledger (app/store/ledger.py): what a request costs in WAL flushes on
    Postgres and write-lock turns on SQLite."""

    def __init__(self, app: FastAPI) -> None:
        self.engine = app.state.ctx.engine.sync_engine
        self.ledger = app.state.ctx.ledger
        self.count = 0
        self._ledger_before = 0

    def _statement(self, conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        if statement.lstrip().split(None, 1)[0].upper() in {"INSERT", "UPDATE", "DELETE"}:
            conn.info["wrote"] = True

    def _commit(self, conn) -> None:  # type: ignore[no-untyped-def]
        if conn.info.pop("wrote", False):
            self.count += 1

    def _rollback(self, conn) -> None:  # type: ignore[no-untyped-def]
        conn.info.pop("wrote", None)

    def __enter__(self) -> WriteCommits:
        event.listen(self.engine, "before_cursor_execute", self._statement)
        event.listen(self.engine, "commit", self._commit)
        event.listen(self.engine, "rollback", self._rollback)
        self._ledger_before = self.ledger.commits
        return self

    def __exit__(self, *_: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._statement)
        event.remove(self.engine, "commit", self._commit)
        event.remove(self.engine, "rollback", self._rollback)
        self.count += self.ledger.commits - self._ledger_before


class SessionHandOffs:
    """Counts the AsyncSession operations that hand work to SQLAlchemy's greenlet, but the session's
    close (a statement, a flush, a commit, a rollback): what a request costs in session machinery."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        spawn = async_session_module.greenlet_spawn

        async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(fn, "__name__", "") != "close":
                self.count += 1
            return await spawn(fn, *args, **kwargs)

        monkeypatch.setattr(async_session_module, "greenlet_spawn", counted)


async def test_a_forwarded_request_and_its_feedback_served_from_the_caches_use_no_session_operation(
    stack: Stack, fake: FakeBackends, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the catalog holds the key, router and backend, a forwarded request (kNN-UCB: its counter
    read through the ledger) and a POST /feedback (its decision read through the ledger) make no
    statement or commit on the request's session (each would be a greenlet hand-off)."""
    app = gateway_app(stack)
    async with running(app) as client:
        backend = await add_backend(client, fake, "plain")
        key = await add_tenant(client, [backend], policy="knn-ucb", hyperparameters={})
        body = {"model": "router", "messages": [{"role": "user", "content": PROMPT}]}
        warm = await client.post("/v1/chat/completions", json=body, headers=bearer(key))
        assert warm.status_code == 200, warm.text
        handoffs = SessionHandOffs(monkeypatch)
        answer = await client.post("/v1/chat/completions", json=body, headers=bearer(key))
        assert answer.status_code == 200, answer.text
        assert handoffs.count == 0
        decision = answer.headers["x-banditgate-decision-id"]
        feedback = {"decision_id": decision, "reward": 1.0}
        accepted = await client.post("/feedback", json=feedback, headers=bearer(key))
        assert accepted.status_code == 202 and accepted.json()["model"] == backend
        assert handoffs.count == 0
        foreign = await client.post(
            "/feedback", json={"decision_id": "not-a-decision", "reward": 1.0}, headers=bearer(key)
        )
        assert foreign.status_code == 404


@pytest.mark.parametrize(
    ("policy", "hyperparameters", "commits"),
    [("linucb", {"alpha": 0.0}, 1), ("knn-ucb", {}, 1), ("balrog", {"trigger": "none"}, 2)],
)
async def test_a_forwarded_decision_commits_once_unless_its_policy_spends_a_budget(
    stack: Stack, fake: FakeBackends, policy: str, hyperparameters: dict[str, object], commits: int
) -> None:
    """The decision, its attempts, its cost event and its router's counter are one write transaction
    after the call; only a policy whose counter is a budget (BALROG's queries: ``counter_use`` ``exact``)
    also counts itself, committed alone, before the call. Every decision is counted either way, and
    kNN-UCB's round t still follows the written decisions."""
    app = gateway_app(stack)
    async with running(app) as client:
        backend = await add_backend(client, fake, "plain")
        key = await add_tenant(client, [backend], policy=policy, hyperparameters=hyperparameters)
        body = {"model": "router", "messages": [{"role": "user", "content": PROMPT}]}
        ids = []
        for _ in range(3):
            with WriteCommits(app) as writes:
                answer = await client.post("/v1/chat/completions", json=body, headers=bearer(key))
            assert answer.status_code == 200, answer.text
            assert writes.count == commits
            ids.append(answer.headers["x-banditgate-decision-id"])
        async with app.state.ctx.sessionmaker() as session:
            decisions = {
                d.id: d for d in await session.scalars(select(DecisionRow).where(DecisionRow.id.in_(ids)))
            }
            counted = await session.scalar(
                select(RouterCounter.decisions).where(RouterCounter.router_id == decisions[ids[0]].router_id)
            )
        assert counted == 3
        if policy != "linucb":
            assert [decisions[i].info["t"] for i in ids] == [1, 2, 3]
