"""Warm start from logs: rows uploaded to ``POST .../observations`` become offline
events that the router's policy learns at once, once per row id, that survive a restart (a replay of
the log and a snapshot rebuild), and that a second replica folds too. Both stacks."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from app.main import create_app
from app.store.models import FeedbackEvent
from replay_dataset.files import write_dataset
from routers.base import decode_state
from tests.conftest import ADMIN_KEY, Stack, Tenancy, admin_headers, bearer, make_tenancy, running, unique
from tests.fake_backend import FakeBackends
from tests.integration.processes import gateway_process, make_remote_tenancy
from tests.integration.test_forwarding import add_backend, add_tenant, gateway_app, openai_client
from workers.snapshotter import snapshot_router

PER_TOPIC = 12


def topic_prompt(topic: str, i: int) -> str:
    """Prompts of one topic share most words, so the hashing embedder puts them close together."""
    return f"{topic} {topic} {topic} {topic} question number {i}"


def split_rows(arms: list[str], prefix: str = "r") -> list[dict[str, Any]]:
    """A learnable split: arms[0] earns 1 on 'alpha' prompts and 0 on 'beta' ones, arms[1] the reverse;
    every model's outcome is logged (2 x PER_TOPIC prompts x 2 models)."""
    rows = []
    for topic, best in (("alpha", arms[0]), ("beta", arms[1])):
        for i in range(PER_TOPIC):
            for arm in arms:
                rows.append(
                    {
                        "id": f"{prefix}-{topic}-{i}/{arm}",
                        "prompt": topic_prompt(topic, i),
                        "model": arm,
                        "reward": 1.0 if arm == best else 0.0,
                        "cost": 0.001,
                    }
                )
    return rows


def observations_url(t: Tenancy) -> str:
    return f"/admin/tenants/{t.tenant}/routers/{t.router}/observations"


async def upload(client: httpx.AsyncClient, t: Tenancy, rows: list[dict[str, Any]]) -> httpx.Response:
    return await client.post(observations_url(t), json=rows, headers=admin_headers())


async def scores(client: httpx.AsyncClient, t: Tenancy, prompt: str) -> dict[str, Any]:
    response = await client.post("/route", json={"prompt": prompt}, headers=bearer(t.key))
    assert response.status_code == 200, response.text
    decision: dict[str, Any] = response.json()
    return decision


async def events_folded(client: httpx.AsyncClient, t: Tenancy) -> int:
    state = await client.get(f"/admin/tenants/{t.tenant}/routers/{t.router}/state", headers=admin_headers())
    return int(state.json()["events_folded"])


async def test_a_warm_start_routes_the_split_at_once_and_a_retry_is_learned_once(stack: Stack) -> None:
    app = create_app(stack.settings())
    async with running(app) as client:
        t = await make_tenancy(client, "knn-ucb")
        rows = split_rows(t.arms)
        first = await upload(client, t, rows)
        assert first.status_code == 200, first.text
        assert first.json() | {"last_event_id": None} == {
            "rows": 48,
            "new": 48,
            "duplicates": 0,
            "last_event_id": None,
        }
        # the very first decisions, on prompts never uploaded, go to each topic's best model
        alpha = await scores(client, t, topic_prompt("alpha", 99))
        beta = await scores(client, t, topic_prompt("beta", 99))
        assert (alpha["model"], beta["model"]) == (t.arms[0], t.arms[1])
        assert {arm: alpha["scores"][arm]["n"] for arm in t.arms} == {t.arms[0]: 24.0, t.arms[1]: 24.0}
        assert await events_folded(client, t) == 48

        # a retried upload (and a resumed one that overlaps) writes and teaches nothing new
        again = await upload(client, t, rows)
        assert (again.json()["new"], again.json()["duplicates"]) == (0, 48)
        extra = [{**rows[0], "id": "fresh-row"}]
        overlap = await upload(client, t, rows[:5] + extra + extra)
        assert (overlap.json()["new"], overlap.json()["duplicates"]) == (1, 6)
        assert await events_folded(client, t) == 49
        after = await scores(client, t, topic_prompt("alpha", 99))
        assert {arm: after["scores"][arm]["n"] for arm in t.arms} == {t.arms[0]: 25.0, t.arms[1]: 24.0}

        # the log holds one offline event per row id, of no decision, with its own embedding
        async with app.state.ctx.sessionmaker() as session:
            stored = list(await session.scalars(select(FeedbackEvent).where(FeedbackEvent.kind == "offline")))
        mine = [e for e in stored if e.row_id is not None and e.model in t.arms]
        assert len(mine) == 49 and all(e.decision_id is None and e.embedding for e in mine)
        listed = await client.get(f"/admin/feedback?tenant={t.tenant}&limit=1", headers=admin_headers())
        assert listed.json()["items"][0] | {"id": 0, "created_at": None} == {
            "id": 0,
            "decision_id": None,
            "row_id": "fresh-row",
            "tenant": t.tenant,
            "router": "main",
            "model": t.arms[0],
            "kind": "offline",
            "reward": 1.0,
            "cost": 0.001,
            "payload": {},
            "created_at": None,
        }


async def warm_stats(client: httpx.AsyncClient, t: Tenancy) -> dict[str, Any]:
    response = await client.get(
        f"/admin/tenants/{t.tenant}/routers/{t.router}/stats", headers=admin_headers()
    )
    assert response.status_code == 200, response.text
    warm: dict[str, Any] = response.json()["warm_start"]
    return warm


async def test_stats_report_the_offline_observations_per_model(stack: Stack) -> None:
    """stats.warm_start: per model the rows stored, learned and pending, and their mean reward; a reset
    keeps them stored but no longer learned, and a later row is learned after it."""
    app = create_app(stack.settings())
    async with running(app) as client:
        t = await make_tenancy(client, "knn-ucb")
        first = await client.get(f"/admin/tenants/{t.tenant}/routers/main/stats", headers=admin_headers())
        assert first.json()["warm_start"] is None  # no offline event: nothing to show
        rows = split_rows(t.arms)
        await upload(client, t, [*rows, {**rows[0], "id": "fresh-row"}])
        await upload(client, t, rows[:3])  # a retry: stored and learned once
        warm = await warm_stats(client, t)
        # arms[0]: 12 alpha rows at 1, 12 beta rows at 0, the fresh row at 1; arms[1] the reverse, 24 rows
        assert warm | {"last_event_id": 0} == {
            "last_event_id": 0,
            "learned_after": 0,
            "stored": 49,
            "folded": 49,
            "pending": 0,
            "models": {
                t.arms[0]: {"stored": 25, "folded": 25, "pending": 0, "reward_mean": 13 / 25},
                t.arms[1]: {"stored": 24, "folded": 24, "pending": 0, "reward_mean": 0.5},
            },
        }
        assert warm["last_event_id"] >= 49

        reset = await client.delete(f"/admin/tenants/{t.tenant}/routers/main/state", headers=admin_headers())
        assert reset.status_code == 200, reset.text
        await upload(client, t, [{**rows[1], "id": "after-reset"}])  # arms[1] on alpha: reward 0
        after = await warm_stats(client, t)
        assert after["learned_after"] == warm["last_event_id"]
        assert (after["stored"], after["folded"], after["pending"]) == (50, 1, 0)
        assert after["models"][t.arms[1]] == {"stored": 25, "folded": 1, "pending": 0, "reward_mean": 12 / 25}
        assert after["models"][t.arms[0]] == {"stored": 25, "folded": 0, "pending": 0, "reward_mean": 13 / 25}


async def test_rows_by_embedding_and_ndjson_stream(stack: Stack) -> None:
    app = create_app(stack.settings())
    async with running(app) as client:
        t = await make_tenancy(client, "knn-ucb")
        e0 = [1.0] + [0.0] * 383
        lines = [
            {"id": "a", "embedding": [2.0] + [0.0] * 383, "model": t.arms[0], "reward": 1.0},
            {"id": "b", "embedding": e0, "model": t.arms[1], "reward": 0.25},
        ]
        body = "\n".join(json.dumps(line) for line in lines) + "\n"
        headers = admin_headers() | {"Content-Type": "application/x-ndjson"}
        response = await client.post(observations_url(t), content=body, headers=headers)
        assert response.status_code == 200, response.text
        assert (response.json()["new"], response.json()["duplicates"]) == (2, 0)
        state = await client.get(f"/admin/tenants/{t.tenant}/routers/main/state", headers=admin_headers())
        stores = decode_state(json.dumps(state.json()["state"]))["learned"]["stores"]
        assert {arm: stores[arm]["rewards"].tolist() for arm in t.arms} == {
            t.arms[0]: [1.0],
            t.arms[1]: [0.25],
        }
        # an embedding row is stored unit-norm, as the gateway's own embeddings are
        async with app.state.ctx.sessionmaker() as session:
            blob = await session.scalar(
                select(FeedbackEvent.embedding).where(FeedbackEvent.model == t.arms[0])
            )
        assert blob is not None and np.frombuffer(blob, np.float32).tolist() == e0


@pytest.mark.parametrize(
    ("change", "status", "message"),
    [
        ({"model": "not-an-arm"}, 422, "is not an arm of router 'main'"),
        ({"reward": 2.0}, 422, "outside the router's reward range"),
        ({"embedding": [1.0, 0.0]}, 422, "exactly one of 'prompt' or 'embedding'"),
        ({"prompt": None, "embedding": [1.0, 0.0]}, 422, "dimension 2"),
        ({"id": ""}, 422, "row 3: id"),
    ],
)
async def test_a_bad_row_refuses_the_whole_upload(
    sqlite_stack: Stack, change: dict[str, Any], status: int, message: str
) -> None:
    async with running(create_app(sqlite_stack.settings())) as client:
        t = await make_tenancy(client, "knn-ucb")
        rows = split_rows(t.arms)[:4]
        rows[3] = {k: v for k, v in (rows[3] | change).items() if v is not None}
        response = await upload(client, t, rows)
        assert response.status_code == status and message in response.text, response.text
        assert await events_folded(client, t) == 0


async def test_uploads_above_the_batch_limit_are_refused(sqlite_stack: Stack) -> None:
    async with running(create_app(sqlite_stack.settings(max_offline_batch=3))) as client:
        t = await make_tenancy(client, "knn-ucb")
        rows = split_rows(t.arms)[:4]
        assert (await upload(client, t, rows)).status_code == 413
        ndjson = "\n".join(json.dumps(r) for r in rows)
        headers = admin_headers() | {"Content-Type": "application/x-ndjson"}
        response = await client.post(observations_url(t), content=ndjson, headers=headers)
        assert response.status_code == 413 and "more than 3 rows" in response.text
        assert (await upload(client, t, rows[:3])).json()["new"] == 3
        tenant_key = await client.post(observations_url(t), json=rows[:1], headers=bearer(t.key))
        assert tenant_key.status_code in (401, 403)


async def router_id(app: FastAPI, client: httpx.AsyncClient, t: Tenancy) -> int:
    response = await client.get(f"/admin/tenants/{t.tenant}/routers/{t.router}", headers=admin_headers())
    return int(response.json()["id"])


async def test_offline_events_survive_a_restart_from_the_log_and_from_a_snapshot(stack: Stack) -> None:
    settings = stack.settings()
    first = create_app(settings)
    async with running(first) as client:
        t = await make_tenancy(client, "knn-ucb")
        rows = split_rows(t.arms)
        await upload(client, t, rows[:20])
        # a periodic snapshot claims the first 20 rows; the other 28 stay in the log after it
        taken = await snapshot_router(first.state.ctx.sessionmaker, await router_id(first, client, t), 0.0, 3)
        assert taken is not None and taken.events_folded == 20
        await upload(client, t, rows[20:])
        before = await client.get(f"/admin/tenants/{t.tenant}/routers/main/state", headers=admin_headers())
    async with running(create_app(settings)) as client:  # a new process on the same database
        after = await client.get(f"/admin/tenants/{t.tenant}/routers/main/state", headers=admin_headers())
        assert after.json()["events_folded"] == 48
        assert after.json()["state"]["learned"] == before.json()["state"]["learned"]
        assert (await upload(client, t, rows)).json()["new"] == 0
        alpha = await scores(client, t, topic_prompt("alpha", 99))
        assert alpha["model"] == t.arms[0]
        assert {arm: alpha["scores"][arm]["n"] for arm in t.arms} == {t.arms[0]: 24.0, t.arms[1]: 24.0}


async def test_direct_calls_outcomes_become_offline_rows_once(stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(stack)
    async with running(app) as client:
        arms = [await add_backend(client, fake, "ok", usd_per_call=0.001)]
        # A backend name of 200 characters: "direct:<id>/<name>" (240) would not fit the row id column
        # (a 500 on Postgres); the row id holds a digest of the name instead.
        long_name = unique("long") + "-" + "n" * (200 - len(unique("long")) - 1)
        assert len(long_name) == 200
        arms.append(await add_backend(client, fake, "ok", usd_per_call=0.001, name=long_name))
        outsider = await add_backend(client, fake, "ok", usd_per_call=0.002)
        tenant = unique("t")
        key = await add_tenant(client, [*arms, outsider], router="other", tenant=tenant)
        body = {"name": "main", "policy": "knn-ucb", "arms": arms}
        created = await client.post(f"/admin/tenants/{tenant}/routers", json=body, headers=admin_headers())
        assert created.status_code == 201, created.text
        llm = openai_client(app, key)
        messages: list[Any] = [{"role": "user", "content": topic_prompt("alpha", 1)}]
        rewarded = []
        for model, reward in ((arms[0], 1.0), (arms[1], 0.0), (outsider, 1.0)):
            raw = await llm.chat.completions.with_raw_response.create(model=model, messages=messages)
            decision_id = raw.headers["x-banditgate-decision-id"]
            feedback = {"decision_id": decision_id, "reward": reward}
            assert (await client.post("/feedback", json=feedback, headers=bearer(key))).status_code == 202
            rewarded.append(decision_id)
        url = f"/admin/tenants/{tenant}/routers/main/observations/from-direct-calls"
        page = await client.post(url, params={"limit": 2}, headers=admin_headers())
        assert page.json() | {"next_after": 0} == {
            "scanned": 2,
            "new": 2,
            "duplicates": 0,
            "skipped": 0,
            "next_after": 0,
        }
        rest = await client.post(url, params={"after": page.json()["next_after"]}, headers=admin_headers())
        assert rest.json() == {"scanned": 1, "new": 0, "duplicates": 0, "skipped": 1, "next_after": None}
        again = await client.post(url, headers=admin_headers())
        assert (again.json()["new"], again.json()["duplicates"], again.json()["skipped"]) == (0, 2, 1)
        async with app.state.ctx.sessionmaker() as session:
            offline = list(
                await session.scalars(
                    select(FeedbackEvent).where(
                        FeedbackEvent.kind == "offline", FeedbackEvent.model.in_(arms)
                    )
                )
            )

        def row_id(decision_id: str, model: str) -> str:
            return f"direct:{decision_id}/{hashlib.sha256(model.encode()).hexdigest()[:16]}"

        assert sorted((e.row_id, e.reward) for e in offline) == sorted(
            [(row_id(rewarded[0], arms[0]), 1.0), (row_id(rewarded[1], arms[1]), 0.0)]
        )
        assert all(len(e.row_id) == 56 for e in offline)
        assert all(e.cost is not None and e.cost > 0 for e in offline)  # the call's recorded cost
        state = await client.get(f"/admin/tenants/{tenant}/routers/main/state", headers=admin_headers())
        assert state.json()["events_folded"] == 2


def test_two_replicas_both_fold_an_upload(pg_stack: Stack) -> None:
    stream = unique("bg:test-stream")
    with (
        gateway_process(pg_stack.database_url, stream) as a,
        gateway_process(pg_stack.database_url, stream) as b,
    ):
        remote = make_remote_tenancy(a, policy="knn-ucb")
        t = Tenancy(remote.tenant, remote.key, "main", remote.arms)
        prompt = {"prompt": topic_prompt("beta", 99)}
        assert httpx.post(f"{b}/route", json=prompt, headers=bearer(t.key)).status_code == 200  # B loads it
        rows = split_rows(t.arms)
        sent = httpx.post(f"{a}{observations_url(t)}", json=rows, headers=admin_headers(), timeout=60)
        assert sent.json()["new"] == 48
        deadline = time.monotonic() + 10
        while True:
            decision = httpx.post(f"{b}/route", json=prompt, headers=bearer(t.key)).json()
            if all(decision["scores"][arm]["n"] == 24.0 for arm in t.arms):
                break
            assert time.monotonic() < deadline, "replica B did not fold the upload within 10 s"
            time.sleep(0.05)
        assert decision["model"] == t.arms[1]
        again = httpx.post(f"{b}{observations_url(t)}", json=rows, headers=admin_headers(), timeout=60)
        assert (again.json()["new"], again.json()["duplicates"]) == (0, 48)
        # both replicas, having folded the same events, report the same warm start in their stats
        stats_path = f"/admin/tenants/{t.tenant}/routers/main/stats"
        warm = [httpx.get(f"{g}{stats_path}", headers=admin_headers()).json()["warm_start"] for g in (a, b)]
        assert warm[0] == warm[1]
        assert (warm[0]["stored"], warm[0]["folded"], warm[0]["pending"]) == (48, 48, 0)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "warm-start", *args, "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


OFFLINE_BYTES = 700  # about four rows of the CLI test: its batches of 7 and 10 rows are 413s, halved


def test_cli_round_trip_against_a_gateway_process(pg_stack: Stack, tmp_path: Path) -> None:
    """``banditgate warm-start`` uploads a replay dataset and a JSONL file through a real gateway, skips
    models that are not arms, and a rerun (a resumed upload) learns nothing twice."""
    stream = unique("bg:test-stream")
    limits = {"BANDITGATE_MAX_OFFLINE_BATCH": "10", "BANDITGATE_MAX_OFFLINE_BODY_BYTES": str(OFFLINE_BYTES)}
    with gateway_process(pg_stack.database_url, stream, **limits) as url:
        remote = make_remote_tenancy(url, policy="knn-ucb")
        arms = remote.arms
        common = ["--gateway", url, "--admin-key", ADMIN_KEY, "--tenant", remote.tenant, "--router", "main"]
        models = [{"name": arm, "usd_per_call": 0.001} for arm in [*arms, "not-an-arm"]]
        rows = [
            {"id": f"{topic}-{i}", "prompt": topic_prompt(topic, i), "rewards": {**rewards, "not-an-arm": 1}}
            for topic, rewards in (("alpha", {arms[0]: 1, arms[1]: 0}), ("beta", {arms[0]: 0, arms[1]: 1}))
            for i in range(PER_TOPIC)
        ]
        dataset = write_dataset(tmp_path / "logs", models, rows, (0, 1), "logs")
        first = run_cli(*common, "--dataset", str(dataset), "--batch-size", "7")
        assert first.returncode == 0, first.stderr
        assert "48 rows sent: 48 new, 0 already held (not learned again); 24 skipped" in first.stdout
        again = run_cli(*common, "--dataset", str(dataset), "--batch-size", "10")
        assert "48 rows sent: 0 new, 48 already held" in again.stdout

        lines = [{"prompt": topic_prompt("alpha", 50 + i), "model": arms[0], "reward": 1.0} for i in range(3)]
        jsonl = tmp_path / "more.jsonl"
        jsonl.write_text("".join(json.dumps(line) + "\n" for line in lines))
        assert "3 rows sent: 3 new, 0 already held" in run_cli(*common, "--jsonl", str(jsonl)).stdout
        # the admin key from the environment (kept out of the process list)
        no_key = [arg for arg in common if arg not in ("--admin-key", ADMIN_KEY)]
        env = {k: v for k, v in os.environ.items() if k != "BANDITGATE_ADMIN_KEY"}
        assert (
            "--admin-key or set BANDITGATE_ADMIN_KEY"
            in run_cli(*no_key, "--jsonl", str(jsonl), env=env).stderr
        )
        from_env = run_cli(*no_key, "--jsonl", str(jsonl), env=env | {"BANDITGATE_ADMIN_KEY": ADMIN_KEY})
        assert "3 rows sent: 0 new, 3 already held" in from_env.stdout, from_env.stderr
        direct = run_cli(*common, "--from-direct-calls", "--batch-size", "10")
        assert direct.returncode == 0 and "0 rows sent: 0 new" in direct.stdout

        state = httpx.get(f"{url}/admin/tenants/{remote.tenant}/routers/main/state", headers=admin_headers())
        assert state.json()["events_folded"] == 51
        for topic, best in (("alpha", arms[0]), ("beta", arms[1])):
            decision = httpx.post(
                f"{url}/route", json={"prompt": topic_prompt(topic, 99)}, headers=bearer(remote.key)
            )
            assert decision.json()["model"] == best

        # A batch above the gateway's max_offline_batch (10 rows here) or max_offline_body_bytes is a 413:
        # the client halves it and sends each half (it stopped at the first 413 before).
        halved = run_cli(*common, "--dataset", str(dataset), "--batch-size", "11", "--id-prefix", "x:")
        assert halved.returncode == 0, halved.stderr
        assert "48 rows sent: 48 new, 0 already held" in halved.stdout
