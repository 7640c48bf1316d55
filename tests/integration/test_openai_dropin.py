"""The OpenAI drop-in, driven by the official ``openai`` client: errors in OpenAI's shape (the client shows
the reason), ``models.list()``/``retrieve``, direct calls of a backend by name, request fields passed
through, usage in streams, and the decision id in the answer's body for feedback."""

from __future__ import annotations

import math
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from app.store.models import DecisionRow
from routers.registry import POLICIES
from tests.conftest import ADMIN_KEY, Stack, admin_headers, bearer, error_text, running, unique
from tests.fake_backend import USAGE, FakeBackends
from tests.integration.test_forwarding import (
    PRICE_IN,
    PRICE_OUT,
    PROMPT,
    USAGE_COST,
    Everyone,
    add_backend,
    add_tenant,
    attempts_of,
    events_of,
    gateway_app,
    openai_client,
)

MESSAGES: list[Any] = [{"role": "user", "content": PROMPT}]


async def decision_row(app: FastAPI, decision_id: str) -> DecisionRow:
    async with app.state.ctx.sessionmaker() as session:
        row = await session.scalar(select(DecisionRow).where(DecisionRow.id == decision_id))
    assert row is not None
    return row


async def add_router(client: httpx.AsyncClient, tenant: str, name: str, arms: list[str]) -> None:
    body = {"name": name, "policy": "linucb", "hyperparameters": {"alpha": 0.0}, "arms": arms}
    response = await client.post(f"/admin/tenants/{tenant}/routers", json=body, headers=admin_headers())
    assert response.status_code == 201, response.text


# --- errors ---------------------------------------------------------------------------------------------


async def test_errors_on_v1_carry_their_reason_in_openai_shape(
    sqlite_stack: Stack, fake: FakeBackends
) -> None:
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        ok = await add_backend(client, fake, "ok")
        failing = await add_backend(client, fake, "status-500", timeout_s=0.3)
        key = await add_tenant(client, [ok])
        other = await add_tenant(client, [failing])
        llm = openai_client(app, key)

        with pytest.raises(openai.AuthenticationError) as bad_key:
            await openai_client(app, "bg_not-a-key").chat.completions.create(
                model="router", messages=MESSAGES
            )
        assert "invalid or revoked API key" in str(bad_key.value)
        assert bad_key.value.type == "authentication_error" and bad_key.value.code == "invalid_api_key"

        with pytest.raises(openai.PermissionDeniedError) as admin:
            await openai_client(app, ADMIN_KEY).models.list()
        assert "needs a tenant API key" in admin.value.message

        with pytest.raises(openai.NotFoundError) as unknown_model:
            await llm.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        assert "'gpt-4o' does not exist" in unknown_model.value.message
        assert (unknown_model.value.param, unknown_model.value.code) == ("model", "model_not_found")

        with pytest.raises(openai.NotFoundError) as no_router:
            await llm.chat.completions.create(model="router/missing", messages=MESSAGES)
        assert "router 'missing' not found" in no_router.value.message

        # Invalid bodies are OpenAI's 400 invalid_request_error, naming the field.
        with pytest.raises(openai.BadRequestError) as empty:
            await llm.chat.completions.create(model="router", messages=[])
        assert "'messages' must be a non-empty list" in empty.value.message
        assert (empty.value.param, empty.value.type) == ("messages", "invalid_request_error")
        with pytest.raises(openai.BadRequestError) as negative_seed:
            await llm.chat.completions.create(model="router", messages=MESSAGES, seed=-1)
        assert (
            negative_seed.value.param == "seed"
            and "greater than or equal to 0" in negative_seed.value.message
        )
        with pytest.raises(openai.BadRequestError) as no_prompt:
            await llm.images.generate(model="router", prompt=None)  # type: ignore[arg-type]
        assert no_prompt.value.param == "prompt"

        # A backend that fails: 502 naming it, in the client's exception.
        with pytest.raises(openai.InternalServerError) as upstream:
            await openai_client(app, other).chat.completions.create(model="router", messages=MESSAGES)
        assert upstream.value.status_code == 502 and failing in upstream.value.message
        assert "answered 500" in upstream.value.message and upstream.value.code == "bad_gateway"

        # FastAPI's own errors under /v1 too: an unknown path, a body that is not an object.
        missing = await client.get("/v1/embeddings", headers=bearer(key))
        assert missing.status_code == 404
        assert missing.json() == {
            "error": {
                "message": "Not Found",
                "type": "invalid_request_error",
                "param": None,
                "code": "not_found",
            }
        }
        listed = await client.post("/v1/chat/completions", json=[1, 2], headers=bearer(key))
        assert listed.status_code == 400 and listed.json()["error"]["type"] == "invalid_request_error"
        assert "valid dictionary" in listed.json()["error"]["message"]
        unauthenticated = await client.get("/v1/models")
        assert unauthenticated.status_code == 401 and unauthenticated.headers["www-authenticate"] == "Bearer"

        # Everything else keeps FastAPI's {"detail": ...} and its 422.
        assert (await client.post("/route", json={"prompt": "x"}, headers=bearer("bg_x"))).json() == {
            "detail": "invalid or revoked API key"
        }
        invalid = await client.post("/feedback", json={"decision_id": ""}, headers=bearer(key))
        assert invalid.status_code == 422 and invalid.json()["detail"][0]["loc"] == ["body", "decision_id"]


# --- models ---------------------------------------------------------------------------------------------


async def test_models_list_and_retrieve(stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(stack)
    async with running(app) as client:
        first = await add_backend(client, fake, "ok")
        slashed = f"org-{unique('x')}/Mixtral-8x7B-Instruct-v0.1"
        body = {"name": slashed, "base_url": fake.url("ok")}
        assert (await client.post("/admin/backends", json=body, headers=admin_headers())).status_code == 201
        second = await add_backend(client, fake, "ok")
        foreign = await add_backend(client, fake, "ok")
        tenant = unique("t")
        key = await add_tenant(client, [first, slashed], tenant=tenant)
        await add_router(client, tenant, "second", [first, second])
        await add_tenant(client, [foreign])  # another tenant's backend: not listed, not callable
        llm = openai_client(app, key)

        page = await llm.models.list()
        ids = [m.id for m in page.data]
        assert ids == ["router", "router/main", "router/second", *sorted([first, second, slashed])]
        assert {(m.object, m.owned_by) for m in page.data if m.id.startswith("router")} == {("model", tenant)}
        assert {m.owned_by for m in page.data if not m.id.startswith("router")} == {"banditgate"}
        assert all(isinstance(m.created, int) and m.created > 1_700_000_000 for m in page.data)

        fetched = await llm.models.retrieve(slashed)
        assert (fetched.id, fetched.object, fetched.owned_by) == (slashed, "model", "banditgate")
        assert (await llm.models.retrieve("router/second")).owned_by == tenant
        with pytest.raises(openai.NotFoundError) as missing:
            await llm.models.retrieve(foreign)
        assert f"'{foreign}' does not exist" in missing.value.message


# --- direct calls ---------------------------------------------------------------------------------------


async def test_a_backend_called_by_name_is_a_direct_decision(stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(stack)
    async with running(app) as client:
        routed = await add_backend(client, fake, "ok", usd_per_call=0.5)
        direct = await add_backend(client, fake, "ok", usd_per_call=0.001)
        tenant = unique("t")
        key = await add_tenant(client, [routed, direct], tenant=tenant)
        llm = openai_client(app, key)

        raw = await llm.chat.completions.with_raw_response.create(model=direct, messages=MESSAGES, seed=11)
        completion = raw.parse()
        decision_id = raw.headers["x-banditgate-decision-id"]
        assert completion.model == direct and raw.headers["x-banditgate-model"] == direct
        assert completion.model_extra is not None
        assert completion.model_extra["banditgate"] == {
            "decision_id": decision_id,
            "router": None,
            "mode": "direct",
            "model": direct,
        }
        row = await decision_row(app, decision_id)
        assert (row.router_id, row.policy, row.models, row.info) == (
            None,
            "direct",
            [direct],
            {"mode": "direct", "seed": 11, "answered_by": direct},
        )
        assert fake.seen("ok")[-1].body["seed"] == 11

        # Costed like a routed call (the same cost event), stored with no router.
        events = await events_of(app, decision_id)
        assert [(e.model, e.kind, e.router_id) for e in events] == [(direct, "cost", None)]
        assert events[0].cost == pytest.approx(USAGE_COST + 0.001)
        assert float(raw.headers["x-banditgate-cost-usd"]) == pytest.approx(USAGE_COST + 0.001)

        # Its feedback is stored and trains nothing: the router has still never seen `direct`.
        reward = await client.post(
            "/feedback", json={"decision_id": decision_id, "reward": 1.0}, headers=bearer(key)
        )
        assert reward.status_code == 202 and reward.json()["model"] == direct
        again = await client.post(
            "/feedback", json={"decision_id": decision_id, "reward": 1.0}, headers=bearer(key)
        )
        assert again.json()["duplicate"] is True
        assert [(e.kind, e.reward, e.router_id) for e in await events_of(app, decision_id)] == [
            ("cost", None, None),
            ("bandit", 1.0, None),
        ]
        wrong = await client.post(
            "/feedback",
            json={"decision_id": decision_id, "model": routed, "reward": 1.0},
            headers=bearer(key),
        )
        assert wrong.status_code == 422 and "not the backend this direct call called" in error_text(wrong)
        state = (await client.post("/route", json={"prompt": PROMPT}, headers=bearer(key))).json()
        assert state["scores"][direct]["n"] == 0 and state["scores"][routed]["n"] == 0

        # No cascade to walk: there is no policy to ask for a next model.
        walked = await client.post(f"/route/{decision_id}/next", json={}, headers=bearer(key))
        assert walked.status_code == 200 and walked.json()["stop"] is True

        # The admin logs show it, of no router: the data to import as logged outcomes later.
        logged = (await client.get(f"/admin/decisions/{decision_id}", headers=admin_headers())).json()
        assert (logged["router"], logged["policy"], logged["models"]) == (None, "direct", [direct])
        assert [(f["kind"], f["router"]) for f in logged["feedback"]] == [("cost", None), ("bandit", None)]
        page = await client.get("/admin/feedback", params={"tenant": tenant}, headers=admin_headers())
        assert [(f["decision_id"], f["kind"]) for f in page.json()["items"]][:2] == [
            (decision_id, "bandit"),
            (decision_id, "cost"),
        ]

        # Streamed, the same decision kind; the first chunk names it.
        stream = await llm.chat.completions.create(model=direct, messages=MESSAGES, stream=True)
        chunks = [c async for c in stream]
        tagged = chunks[0].model_extra or {}
        assert tagged["banditgate"]["mode"] == "direct" and tagged["banditgate"]["model"] == direct
        streamed_row = await decision_row(app, tagged["banditgate"]["decision_id"])
        assert streamed_row.router_id is None and streamed_row.models == [direct]


async def test_direct_calls_are_fallback_free_and_limited_to_the_tenants_arms(
    stack: Stack, fake: FakeBackends
) -> None:
    app = gateway_app(stack)
    async with running(app) as client:
        ok = await add_backend(client, fake, "ok")
        failing = await add_backend(client, fake, "status-500", timeout_s=0.3)
        painter = await add_backend(client, fake, "ok", kind="image", usd_per_call=0.04)
        elsewhere = await add_backend(client, fake, "ok")
        tenant = unique("t")
        key = await add_tenant(client, [failing, ok], tenant=tenant)
        await add_router(client, tenant, "images", [painter])
        llm = openai_client(app, key)

        calls_to_ok = fake.counts["ok"]
        with pytest.raises(openai.InternalServerError) as failed:
            await llm.chat.completions.with_raw_response.create(model=failing, messages=MESSAGES)
        assert failed.value.status_code == 502 and failing in failed.value.message
        decision_id = failed.value.response.headers["x-banditgate-decision-id"]
        assert await attempts_of(app, decision_id) == [
            (failing, "http_error", 500),
            (failing, "http_error", 500),
        ]
        assert fake.counts["ok"] == calls_to_ok  # the other arm was not tried

        # A backend in the catalog but not an arm of this tenant's routers is not found for it.
        with pytest.raises(openai.NotFoundError) as hidden:
            await llm.chat.completions.create(model=elsewhere, messages=MESSAGES)
        assert f"'{elsewhere}' does not exist" in hidden.value.message and hidden.value.param == "model"

        # Images too: the image backend by name, its per-call price recorded.
        raw = await llm.images.with_raw_response.generate(model=painter, prompt="a lighthouse at dusk")
        images = raw.parse()
        assert images.data is not None and images.data[0].url == "http://img/ok.png"
        assert (images.model_extra or {})["banditgate"]["mode"] == "direct"
        events = await events_of(app, raw.headers["x-banditgate-decision-id"])
        assert [(e.model, e.kind, e.cost) for e in events] == [(painter, "cost", pytest.approx(0.04))]


# --- pass-through and usage ----------------------------------------------------------------------------


async def test_request_fields_pass_through_untouched(sqlite_stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        echo = await add_backend(client, fake, "echo")
        key = await add_tenant(client, [echo])
        llm = openai_client(app, key)
        tools: Any = [
            {
                "type": "function",
                "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
            }
        ]
        sent = {
            "tools": tools,
            "tool_choice": "auto",
            "response_format": {"type": "json_object"},
            "n": 2,
            "user": "user-42",
            "seed": 7,
            "temperature": 0.25,
        }
        for model in ("router", echo):
            raw = await llm.chat.completions.with_raw_response.create(
                model=model, messages=MESSAGES, extra_body={"top_k": 5, "vendor": {"x": [1, 2]}}, **sent
            )
            received = fake.seen("echo")[-1].body
            assert received == {
                **sent,
                "model": echo,
                "messages": MESSAGES,
                "top_k": 5,
                "vendor": {"x": [1, 2]},
            }
            # the backend's own extra fields reach the client too
            assert (raw.parse().model_extra or {})["received"] == received
            # the seed also keys the decision's randomness
            assert (await decision_row(app, raw.headers["x-banditgate-decision-id"])).info["seed"] == 7


@pytest.mark.parametrize("behaviour", ["ok", "nousage"])
async def test_streamed_usage_when_asked(sqlite_stack: Stack, fake: FakeBackends, behaviour: str) -> None:
    """With ``stream_options.include_usage`` the last chunk before [DONE] carries usage: the backend's
    when it sent one, else characters / 4, marked ``banditgate.usage_estimated``; without it, no usage."""
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        backend = await add_backend(client, fake, behaviour)
        key = await add_tenant(client, [backend])
        llm = openai_client(app, key)
        raw = await llm.chat.completions.with_raw_response.create(
            model="router", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        decision_id = raw.headers["x-banditgate-decision-id"]
        chunks = [c async for c in raw.parse()]
        assert fake.seen(behaviour)[-1].body["stream_options"] == {"include_usage": True}
        assert (chunks[0].model_extra or {})["banditgate"]["decision_id"] == decision_id
        assert [c.usage is not None for c in chunks] == [False] * (len(chunks) - 1) + [True]
        last = chunks[-1]
        assert last.usage is not None and last.choices == []
        answer = "part0 part1 part2 "
        if behaviour == "ok":
            expected = (USAGE["prompt_tokens"], USAGE["completion_tokens"])
            assert "usage_estimated" not in (last.model_extra or {}).get("banditgate", {})
        else:
            expected = (math.ceil(len(PROMPT) / 4), math.ceil(len(answer) / 4))
            assert (last.model_extra or {})["banditgate"] == {
                "decision_id": decision_id,
                "router": "main",
                "mode": "single",
                "model": backend,
                "usage_estimated": True,
            }
        assert (last.usage.prompt_tokens, last.usage.completion_tokens) == expected
        assert last.usage.total_tokens == sum(expected)
        events = await events_of(app, decision_id)
        assert [e.cost for e in events] == [
            pytest.approx((expected[0] * PRICE_IN + expected[1] * PRICE_OUT) / 1e6)
        ]

        plain = await llm.chat.completions.create(model="router", messages=MESSAGES, stream=True)
        assert all(c.usage is None for c in [c async for c in plain])


async def test_a_streamed_ensemble_without_usage_gets_the_estimate(
    sqlite_stack: Stack, fake: FakeBackends, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ensemble is answered whole, then streamed; with no member's usage, the usage chunk the client
    asked for is characters / 4 over the prompt and every member's answer, marked estimated."""
    monkeypatch.setitem(POLICIES, "test-everyone", Everyone)
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        members = [await add_backend(client, fake, "nousage") for _ in range(2)]
        key = await add_tenant(client, members, policy="test-everyone")
        stream = await openai_client(app, key).chat.completions.create(
            model="router", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        chunks = [c async for c in stream]
        assert [c.choices[0].delta.content for c in chunks[:-1]] == ["answer from nousage"] * 2
        field = (chunks[0].model_extra or {})["banditgate"]
        assert (field["mode"], field["model"], field["usage_estimated"]) == ("set", ",".join(members), True)
        usage = chunks[-1].usage
        assert usage is not None and chunks[-1].choices == []
        answers = 2 * len("answer from nousage")
        assert (usage.prompt_tokens, usage.completion_tokens) == (
            math.ceil(len(PROMPT) / 4),
            math.ceil(answers / 4),
        )


# --- feedback without leaving the client ----------------------------------------------------------------


async def test_readme_feedback_snippet(stack: Stack, fake: FakeBackends) -> None:
    """docs/guide.md's snippet: the decision id from the completion's ``banditgate`` field, then one POST."""
    app = gateway_app(stack)
    async with running(app) as http:
        ok = await add_backend(client=http, fake=fake, behaviour="ok")
        key = await add_tenant(http, [ok])
        client = openai_client(app, key)

        completion = await client.chat.completions.create(model="router", messages=MESSAGES)
        decision_id = completion.model_extra["banditgate"]["decision_id"]  # type: ignore[index]
        feedback = await http.post(
            "/feedback",
            headers={"Authorization": f"Bearer {key}"},
            json={"decision_id": decision_id, "reward": 1.0},
        )

        assert feedback.status_code == 202 and feedback.json()["model"] == ok
        assert completion.to_dict()["banditgate"] == {
            "decision_id": decision_id,
            "router": "main",
            "mode": "single",
            "model": ok,
        }
        events = await events_of(app, decision_id)
        assert [(e.kind, e.reward) for e in events] == [("cost", None), ("bandit", 1.0)]
