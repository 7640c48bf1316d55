"""A router or tenant deleted while one of its requests waits on a backend or a judge: the answer
that came back is served, nothing of it is kept (the deletion removed the rest), and nothing is a 500."""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from sqlalchemy import func, select

from app.store.models import DecisionRow, FeedbackEvent
from tests.conftest import Stack, admin_headers, bearer, running, unique
from tests.fake_backend import FakeBackends
from tests.integration.test_forwarding import PROMPT, add_backend, add_tenant, gateway_app
from tests.served import served

CHAT = {"model": "router", "messages": [{"role": "user", "content": PROMPT}]}


class Held:
    """A chat backend and a judge that each wait, once a request arrived, until the test releases
    them: the window in which the test deletes what the request belongs to."""

    def __init__(self) -> None:
        self.arrived, self.release = asyncio.Event(), asyncio.Event()
        self.hold_judge = False

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Any:
            body = await request.json()
            if not self.hold_judge:
                await self.wait()
            message = {"role": "assistant", "content": f"held by {body['model']}"}
            return {
                "id": "x",
                "object": "chat.completion",
                "created": 1,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
            }

        @app.post("/judge")
        async def judge(request: Request) -> Any:
            await self.wait()
            return {"pass": False}

        return app

    async def wait(self) -> None:
        self.arrived.set()
        await self.release.wait()


async def add_held_backend(client: httpx.AsyncClient, url: str) -> str:
    name = unique("held")
    body = {"name": name, "base_url": f"{url}/v1", "usd_per_mtok_in": 1.0, "timeout_s": 30}
    assert (await client.post("/admin/backends", json=body, headers=admin_headers())).status_code == 201
    return name


async def decisions_of(app: FastAPI, decision_id: str) -> int:
    async with app.state.ctx.sessionmaker() as session:
        rows = await session.scalar(select(func.count()).where(DecisionRow.id == decision_id))
        events = await session.scalar(select(func.count()).where(FeedbackEvent.decision_id == decision_id))
        return int(rows or 0) + int(events or 0)


@pytest.mark.parametrize("deleted", ["router", "tenant"])
async def test_an_answer_whose_router_was_deleted_during_the_call_is_served_and_not_kept(
    stack: Stack, deleted: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = gateway_app(stack)
    held = Held()
    async with served(held.app()) as url, running(app) as client:
        model = await add_held_backend(client, url)
        tenant = unique("t")
        key = await add_tenant(client, [model], tenant=tenant)
        call = asyncio.create_task(client.post("/v1/chat/completions", json=CHAT, headers=bearer(key)))
        await asyncio.wait_for(held.arrived.wait(), 30)
        where = f"/admin/tenants/{tenant}" + ("/routers/main" if deleted == "router" else "")
        assert (await client.delete(where, headers=admin_headers())).status_code == 204
        with caplog.at_level(logging.WARNING, logger="app.routing.costs"):
            held.release.set()
            response = await call
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["message"]["content"] == f"held by {model}"
        decision_id = response.headers["x-banditgate-decision-id"]
        assert await decisions_of(app, decision_id) == 0
        assert f"decision {decision_id}" in caplog.text and "deleted during the call" in caplog.text
        if deleted == "router":  # the tenant's key still works: its feedback finds no decision
            feedback = {"decision_id": decision_id, "reward": 1.0}
            late = await client.post("/feedback", json=feedback, headers=bearer(key))
            assert late.status_code == 404 and "not found" in late.text


async def test_a_judged_cascade_whose_router_is_deleted_while_judging_serves_its_answer(
    sqlite_stack: Stack,
) -> None:
    app = gateway_app(sqlite_stack)
    held = Held()
    held.hold_judge = True
    async with served(held.app()) as url, running(app) as client:
        first, second = await add_held_backend(client, url), await add_held_backend(client, url)
        tenant = unique("t")
        key = await add_tenant(client, [first, second], tenant=tenant)
        patch = {"judge": {"url": f"{url}/judge", "threshold": 0.5}}
        made = await client.patch(
            f"/admin/tenants/{tenant}/routers/main", json=patch, headers=admin_headers()
        )
        assert made.status_code == 200, made.text
        body = {"prompt": PROMPT, "forward": True, "request": {"messages": CHAT["messages"]}}
        call = asyncio.create_task(client.post("/route", json=body, headers=bearer(key)))
        await asyncio.wait_for(held.arrived.wait(), 30)
        gone = await client.delete(f"/admin/tenants/{tenant}/routers/main", headers=admin_headers())
        assert gone.status_code == 204
        held.release.set()
        response = await call
        assert response.status_code == 200, response.text
        done = response.json()
        # the judge failed the first answer, but there is no cascade left to go on with
        assert [(s["model"], s["passed"]) for s in done["judged"]] == [(done["backend"], False)]
        assert done["response"]["choices"][0]["message"]["content"] == f"held by {done['backend']}"
        assert await decisions_of(app, done["decision_id"]) == 0


@pytest.mark.parametrize("policy", ["linucb", "balrog"])
async def test_a_decision_for_a_router_another_replica_deleted_is_a_404(
    sqlite_stack: Stack, fake: FakeBackends, policy: str
) -> None:
    """Replica B still holds the router in its catalog cache when A deletes it: B's decision (written
    before any call; BALROG's under the counter's lock) is refused by the database, and B answers 404."""
    a, b = gateway_app(sqlite_stack), gateway_app(sqlite_stack, catalog_ttl_s=600.0)
    async with running(a) as admin, running(b) as client:
        tenant = unique("t")
        arms = [await add_backend(admin, fake, "ok"), await add_backend(admin, fake, "ok")]
        key = await add_tenant(admin, arms, tenant=tenant, policy=policy, hyperparameters={})
        route = {"prompt": PROMPT}
        assert (await client.post("/route", json=route, headers=bearer(key))).status_code == 200
        gone = await admin.delete(f"/admin/tenants/{tenant}/routers/main", headers=admin_headers())
        assert gone.status_code == 204
        late = await client.post("/route", json=route, headers=bearer(key))
        assert late.status_code == 404, late.text
        assert "router 'main' was deleted while this request was being routed" in late.text


@pytest.mark.parametrize(
    ("policy", "hyperparameters"),
    [("knn-ucb", {}), ("balrog", {}), ("promptwise", {"tau_exp": 0}), ("default", {"shadow": 0.5})],
)
async def test_requests_while_routers_are_deleted_recreated_and_reset_get_no_5xx(
    stack: Stack, fake: FakeBackends, policy: str, hyperparameters: dict[str, object]
) -> None:
    """Chat completions, decisions with feedback and forwarded decisions from eight clients while the
    router is deleted and recreated, its arms changed, patched and reset: every answer is a 2xx or a
    404, none a 5xx (on Postgres the deletions' cascades deadlock with the ledger's writes now and
    then: those are sent again; an admin change may give up with a 503 after its tries, at most one in
    ten here). PromptWise prices every arm it may choose (an arm added meanwhile included); a shadow
    call whose arm was removed meanwhile is still recorded."""
    app = gateway_app(stack)
    codes: Counter[int] = Counter()
    errors: list[str] = []
    stop = asyncio.Event()
    rng = random.Random(7)
    admin_conflicts: list[bool] = []
    async with running(app) as client:
        backends = [await add_backend(client, fake, "ok") for _ in range(3)]
        arms = backends[:2]
        tenant = unique("t")
        key = await add_tenant(client, arms, tenant=tenant, policy=policy, hyperparameters=hyperparameters)
        router = {
            "name": "main",
            "policy": policy,
            "hyperparameters": hyperparameters,
            "arms": arms,
            "is_default": True,
        }
        where = f"/admin/tenants/{tenant}/routers"

        async def user(number: int) -> None:
            while not stop.is_set():
                prompt = f"{PROMPT} {number} {rng.random()}"
                draw = rng.random()
                if draw < 0.5:
                    body = {"model": "router", "messages": [{"role": "user", "content": prompt}]}
                    answer = await client.post("/v1/chat/completions", json=body, headers=bearer(key))
                elif draw < 0.8:
                    answer = await client.post("/route", json={"prompt": prompt}, headers=bearer(key))
                    if answer.status_code == 200:
                        feedback = {"decision_id": answer.json()["decision_id"], "reward": 1.0}
                        answer = await client.post("/feedback", json=feedback, headers=bearer(key))
                else:
                    request = {"messages": [{"role": "user", "content": prompt}]}
                    body = {"prompt": prompt, "forward": True, "request": request}
                    answer = await client.post("/route", json=body, headers=bearer(key))
                codes[answer.status_code] += 1
                if answer.status_code >= 500:
                    errors.append(answer.text[:300])

        async def admin() -> None:
            for _ in range(30):
                await asyncio.sleep(rng.uniform(0.02, 0.1))
                draw = rng.random()
                if draw < 0.4:
                    changes = [
                        await client.delete(f"{where}/main", headers=admin_headers()),
                        await client.post(where, json=router, headers=admin_headers()),
                    ]
                elif draw < 0.6:
                    patch = {"arms": rng.sample(backends, rng.choice([1, 2, 3]))}
                    changes = [await client.patch(f"{where}/main", json=patch, headers=admin_headers())]
                elif draw < 0.8:
                    patch = {"hyperparameters": hyperparameters}
                    changes = [await client.patch(f"{where}/main", json=patch, headers=admin_headers())]
                else:
                    changes = [await client.delete(f"{where}/main/state", headers=admin_headers())]
                for change in changes:
                    # a deletion that kept meeting the requests' writes in a deadlock may give up
                    # with the documented 503 (nothing deleted): the operator retries it
                    conflict = change.status_code == 503 and "conflict" in change.text
                    assert change.status_code in (200, 201, 204, 404) or conflict, change.text
                    admin_conflicts.append(conflict)
            stop.set()

        await asyncio.gather(admin(), *(user(n) for n in range(8)))
    assert errors == [] and all(code < 500 for code in codes), codes
    assert codes[200] > 50 and codes[404] > 0, codes
    assert sum(admin_conflicts) <= len(admin_conflicts) // 10, admin_conflicts
