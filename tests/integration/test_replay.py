"""Replay backends and the replay evaluator: the demo's synthetic dataset served over real HTTP, the
gateway forwarding to it, and the router learning which model suits which topic."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import httpx2
import openai
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from app.api.http_limits import HttpLimits
from app.demo import set_up_demo
from app.demo_dataset import TOPICS, write_demo_dataset
from app.main import create_app
from app.replay_backends import ReplayDataset, replay_app
from app.replay_evaluator import run_evaluator
from app.settings import Settings
from app.store.migrate import upgrade
from app.store.models import FeedbackEvent, Probe
from routers.registry import POLICIES
from tests.conftest import Stack, admin_headers, bearer, running
from tests.querying_policy import NAME as QUERYING
from tests.querying_policy import QueryingLinUCB
from tests.served import served

REPLAY_KEY = "rpl_test-replay-key"
LIMITS = HttpLimits.of(Settings(max_body_bytes=64 * 1024))


def replay_backends(directory: Path) -> FastAPI:
    return replay_app(ReplayDataset.read(directory), REPLAY_KEY, LIMITS)


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_dataset(tmp_path_factory.mktemp("replay") / "demo", n=200, seed=0)


@pytest.fixture
def fresh_db(tmp_path: Path) -> str:
    """A fresh catalog: these backends carry the dataset's model names, which are global."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'gw.db'}"
    upgrade(url)
    return url


def replay_client(directory: Path, model: str, api_key: str = REPLAY_KEY) -> openai.AsyncOpenAI:
    transport = httpx2.ASGITransport(app=replay_backends(directory))
    return openai.AsyncOpenAI(
        base_url=f"http://replay/{model}/v1",
        api_key=api_key,
        http_client=httpx2.AsyncClient(transport=transport),
    )


async def test_replay_backend_answers_with_the_logged_response_and_usage(dataset_dir: Path) -> None:
    row = json.loads((dataset_dir / "rows.jsonl").read_text().splitlines()[0])
    llm = replay_client(dataset_dir, "demo-large")
    answer = await llm.chat.completions.create(
        model="x", messages=[{"role": "user", "content": row["prompt"]}]
    )
    text = row["responses"]["demo-large"]
    assert answer.model == "demo-large" and answer.choices[0].message.content == text
    assert answer.usage is not None
    # the prompt's tokens estimated (characters / 4), the answer's as logged
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (-(-len(row["prompt"]) // 4), 200)
    # Streaming: the same text in pieces, the usage chunk when asked for.
    stream = await llm.chat.completions.create(
        model="x",
        messages=[{"role": "user", "content": row["prompt"]}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 200
    # An unknown prompt gets a placeholder; an unknown model a 404.
    other = await llm.chat.completions.create(model="x", messages=[{"role": "user", "content": "hello?"}])
    assert "replay placeholder" in (other.choices[0].message.content or "")
    assert other.usage is not None and other.usage.completion_tokens == 200  # default_tokens_out
    with pytest.raises(openai.NotFoundError):
        await replay_client(dataset_dir, "gpt-9").chat.completions.create(
            model="x", messages=[{"role": "user", "content": "hi"}]
        )


async def test_the_router_learns_the_demo_topics_through_the_gateway(
    dataset_dir: Path, fresh_db: str
) -> None:
    """LinUCB (alpha 0.5) over the two replay backends, fed the logged rewards by the evaluator. Best per
    topic: maths -> demo-large (0.9 vs 0.3), writing -> demo-small (0.95 vs 0.6)."""
    rows = {r.id: r.fields for r in ReplayDataset.read(dataset_dir).rows}
    async with served(replay_backends(dataset_dir)) as replay_url:
        app = create_app(Stack("sqlite", fresh_db, None).settings())
        async with running(app) as client:
            for name in ("demo-small", "demo-large"):
                backend = {
                    "name": name,
                    "base_url": f"{replay_url}/{name}/v1",
                    "usd_per_mtok_in": 1.0,
                    "api_key": REPLAY_KEY,
                }
                assert (
                    await client.post("/admin/backends", json=backend, headers=admin_headers())
                ).status_code == 201
            assert (
                await client.post("/admin/tenants", json={"name": "demo"}, headers=admin_headers())
            ).status_code == 201
            key = (await client.post("/admin/tenants/demo/keys", json={}, headers=admin_headers())).json()[
                "key"
            ]
            router = {
                "name": "demo",
                "policy": "linucb",
                "hyperparameters": {"alpha": 0.5},
                "arms": ["demo-small", "demo-large"],
                "is_default": True,
            }
            assert (
                await client.post("/admin/tenants/demo/routers", json=router, headers=admin_headers())
            ).status_code == 201
            printed: list[str] = []
            summary = await run_evaluator(
                client, key, ReplayDataset.read(dataset_dir), limit=200, block=50, seed=1, echo=printed.append
            )
    assert summary.errors == 0 and len(printed) == 4 and sum(summary.models.values()) == 200
    best = {topic: max(p, key=p.__getitem__) for topic, (p, _) in TOPICS.items()}
    right = [model == best[rows[row_id]["topic"]] for row_id, model in summary.choices]
    # Measured (seed 1, hashing embedder): 38 of the first 50 rows and 46 of the last 50 routed to the
    # better model; a router that had not learned would be near 50%.
    assert sum(right[-50:]) / 50 >= 0.85, printed


async def test_model_names_with_slashes_and_logged_token_counts(tmp_path: Path) -> None:
    model = "mistralai/Mixtral-8x7B-Instruct-v0.1"
    (tmp_path / "models.json").write_text(json.dumps({"models": [{"name": model}], "reward_range": [0, 1]}))
    row = {
        "id": "r1",
        "prompt": "2+2?",
        "rewards": {model: 1.0},
        "tokens_in": {model: 11},
        "tokens_out": {model: 3},
    }
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    answer = await replay_client(tmp_path, model).chat.completions.create(
        model="x", messages=[{"role": "user", "content": "2+2?"}]
    )
    assert answer.model == model and answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (11, 3)
    assert answer.choices[0].message.content == f"[{model}] replayed answer to row r1"


async def test_the_evaluator_answers_active_learning_queries(
    dataset_dir: Path, fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A policy that asks for the other arm's reward on every 4th decision: the gateway names it in
    ``x-banditgate-query`` and the evaluator posts its logged reward as ``query`` feedback. The gateway
    also probes that arm (app/routing/probes.py): its cost is recorded and the evaluator's query reward marks the
    probe answered, so none is left pending."""
    monkeypatch.setitem(POLICIES, QUERYING, QueryingLinUCB)
    async with served(replay_backends(dataset_dir)) as replay_url:
        app = create_app(Stack("sqlite", fresh_db, None).settings())
        async with running(app) as client:
            for name in ("demo-small", "demo-large"):
                backend = {"name": name, "base_url": f"{replay_url}/{name}/v1", "api_key": REPLAY_KEY}
                assert (
                    await client.post("/admin/backends", json=backend, headers=admin_headers())
                ).status_code == 201
            assert (
                await client.post("/admin/tenants", json={"name": "q"}, headers=admin_headers())
            ).status_code == 201
            key = (await client.post("/admin/tenants/q/keys", json={}, headers=admin_headers())).json()["key"]
            router = {
                "name": "q",
                "policy": QUERYING,
                "arms": ["demo-small", "demo-large"],
                "is_default": True,
            }
            assert (
                await client.post("/admin/tenants/q/routers", json=router, headers=admin_headers())
            ).status_code == 201
            summary = await run_evaluator(
                client, key, ReplayDataset.read(dataset_dir), limit=20, echo=lambda _: None
            )
            await app.state.ctx.probes.drain()
            async with app.state.ctx.sessionmaker() as session:
                kinds = Counter((await session.scalars(select(FeedbackEvent.kind))).all())
                statuses = Counter((await session.scalars(select(Probe.status))).all())
            pending = (
                await client.get("/feedback/pending", headers={"Authorization": f"Bearer {key}"})
            ).json()
    # every=4: decisions 4, 8, ..., 20 ask about the arm not chosen; each is probed (5 more costs).
    assert summary.queries == 5 and kinds == {"bandit": 20, "cost": 25, "query": 5}
    assert statuses == {"answered": 5} and pending["probes"] == []


async def test_replay_backends_need_their_key_and_bound_their_bodies(dataset_dir: Path) -> None:
    transport = httpx2.ASGITransport(app=replay_backends(dataset_dir))
    async with httpx2.AsyncClient(transport=transport, base_url="http://replay") as client:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        url = "/demo-small/v1/chat/completions"
        assert (await client.post(url, json=body)).status_code == 401
        wrong = await client.post(url, json=body, headers={"Authorization": "Bearer rpl_wrong"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
        assert (
            await client.get("/demo-small/v1/models", headers={"Authorization": "Bearer x"})
        ).status_code == 401
        right = {"Authorization": f"Bearer {REPLAY_KEY}"}
        assert (await client.post(url, json=body, headers=right)).status_code == 200
        big = {"messages": [{"role": "user", "content": "x" * (64 * 1024)}]}
        too_big = await client.post(url, json=big, headers=right)
        assert too_big.status_code == 413 and "larger than 65536 bytes" in too_big.text


async def test_the_demo_set_up_registers_the_replay_key_with_its_backends(
    dataset_dir: Path, fresh_db: str
) -> None:
    """What ``banditgate demo`` serves: the gateway with its replay mount and the demo's backends, which
    carry the replay key; a tenant's forwarded request is answered by the replay backend. Idempotent: a
    second run keeps the same key; a reset run drops what was added to the demo tenant (the walk-through's
    router) so that creating it again is a 201, not a 409, and the key still works."""
    settings = Stack("sqlite", fresh_db, None).settings(
        replay_dataset=str(dataset_dir), replay_api_key=REPLAY_KEY
    )
    key = "bg_demo-key-kept-by-the-cli"
    app = create_app(settings)
    async with served(app) as url:
        demo = await set_up_demo(settings, f"{url}/replay", key)
        again = await set_up_demo(settings, f"{url}/replay", key)
        assert demo == again and demo.api_key == key
        async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
            # the mount refuses callers without the key
            unkeyed = await client.post("/replay/demo-small/v1/chat/completions", json={"messages": []})
            assert unkeyed.status_code == 401
            body = {"model": "router", "messages": [{"role": "user", "content": "hello"}]}
            answer = await client.post("/v1/chat/completions", json=body, headers=bearer(key))
            assert answer.status_code == 200, answer.text
            assert "replay placeholder" in answer.json()["choices"][0]["message"]["content"]
            keys = (await client.get("/admin/tenants/demo/keys", headers=admin_headers())).json()
            assert len(keys) == 1
            # the demo's router: the default policy, held to 95 % of the dearer model's reward
            router = (await client.get("/admin/tenants/demo/routers/demo", headers=admin_headers())).json()
            assert (router["policy"], router["is_default"]) == ("knn-ucb", True)
            assert router["hyperparameters"] == {
                "incumbent": "demo-large",
                "max_loss": 0.05,
                "objective": "savings",
            }

            qa = {"name": "qa", "policy": "linucb", "arms": ["demo-small", "demo-large"]}
            created = await client.post("/admin/tenants/demo/routers", json=qa, headers=admin_headers())
            assert created.status_code == 201
            await set_up_demo(settings, f"{url}/replay", key)  # kept: the walk-through's router is there
            again_qa = await client.post("/admin/tenants/demo/routers", json=qa, headers=admin_headers())
            assert again_qa.status_code == 409

            await set_up_demo(settings, f"{url}/replay", key, reset=True)
            fresh = await client.post("/admin/tenants/demo/routers", json=qa, headers=admin_headers())
            assert fresh.status_code == 201, fresh.text
            routers = (await client.get("/admin/tenants/demo/routers", headers=admin_headers())).json()
            assert sorted(r["name"] for r in routers) == ["demo", "qa"]
            answer = await client.post("/v1/chat/completions", json=body, headers=bearer(key))
            assert answer.status_code == 200, answer.text
