"""The catalog declared in a file on both stacks: applied idempotently (a second apply writes nothing and
announces nothing), refused with the admin API's own messages (nothing applied), exported and applied
again to an empty database to the same catalog, and announced to running replicas over the bus."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from redis.asyncio import Redis
from sqlalchemy import event, select
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession

from app.declared_config.apply import Plan
from app.declared_config.run import apply_file, export_text
from app.declared_config.source import ConfigError
from app.main import create_app
from app.store.db import make_engine, make_sessionmaker
from app.store.models import Snapshot
from tests.conftest import (
    TEST_STREAM,
    Stack,
    admin_headers,
    bearer,
    error_text,
    own_database,
    running,
    unique,
)

BACKEND_KEY = "sk-upstream-secret"


@pytest.fixture(params=["sqlite", "postgres"])
def empty_stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    """Prune and round trips start from nothing."""
    with own_database(request.param, tmp_path / "empty") as stack:
        yield stack


@pytest.fixture
def second_empty(empty_stack: Stack, tmp_path: Path) -> Iterator[Stack]:
    """Another empty database of ``empty_stack``'s kind: a round trip's destination."""
    with own_database(empty_stack.name, tmp_path / "second") as stack:
        yield stack


def catalog(tenant: str, backends: list[str], **router: Any) -> dict[str, Any]:
    """A file declaring ``backends`` (the first with an API key) and ``tenant`` with a key and a default
    router over them (``router`` overrides its fields)."""
    return {
        "version": 1,
        "backends": [
            {
                "name": name,
                "base_url": "http://127.0.0.1:9/v1",
                "usd_per_mtok_in": 1.0 + i,
                **({"api_key_env": "TEST_BACKEND_KEY"} if i == 0 else {}),
            }
            for i, name in enumerate(backends)
        ],
        "tenants": [
            {
                "name": tenant,
                "limits": {"rate_limit_rps": 20, "rate_limit_burst": 40},
                "keys": [{"name": "ci", "value_env": "TEST_TENANT_KEY"}],
                "routers": [
                    {
                        "name": "main",
                        "policy": "linucb",
                        "hyperparameters": {"alpha": 0.5},
                        "arms": backends,
                        "is_default": True,
                        **router,
                    }
                ],
            }
        ],
    }


def write(tmp_path: Path, data: dict[str, Any], name: str = "banditgate.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def env_for(key: str) -> dict[str, str]:
    return {"TEST_BACKEND_KEY": BACKEND_KEY, "TEST_TENANT_KEY": key}


class Writes:
    """Counts the INSERT, UPDATE and DELETE statements every engine in this process sends."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().split(" ", 1)[0].upper() in ("INSERT", "UPDATE", "DELETE"):
            self.count += 1


@pytest.fixture
def writes() -> Iterator[Writes]:
    counter = Writes()
    event.listen(Engine, "before_cursor_execute", counter)
    yield counter
    event.remove(Engine, "before_cursor_execute", counter)


async def stream_length(stack: Stack) -> int:
    if stack.redis_url is None:
        return 0
    redis = Redis.from_url(stack.redis_url)
    try:
        return int(await redis.xlen(TEST_STREAM))
    finally:
        await redis.aclose()


async def in_session(stack: Stack) -> AsyncIterator[AsyncSession]:
    engine = make_engine(stack.database_url)
    try:
        async with make_sessionmaker(engine)() as session:
            yield session
    finally:
        await engine.dispose()


def lines(plan: Plan) -> list[str]:
    return [s.line() for s in plan.steps]


# --- idempotence --------------------------------------------------------------------------------------


async def test_applying_the_same_file_twice_writes_and_announces_nothing_the_second_time(
    stack: Stack, tmp_path: Path, writes: Writes
) -> None:
    tenant, arms, key = unique("idem"), [unique("a"), unique("b")], "bg_" + unique("idem-key")
    path = write(tmp_path, catalog(tenant, arms))
    first = await apply_file(stack.settings(), path, env_for(key))
    assert lines(first) == [
        f"create backend {arms[0]!r}",
        f"create backend {arms[1]!r}",
        f"create tenant {tenant!r}",
        f"create key '{tenant}/ci'",
        f"create router '{tenant}/main'",
    ]
    writes.count = 0
    published = await stream_length(stack)
    second = await apply_file(stack.settings(), path, env_for(key))
    assert second.steps == [] and second.unchanged == 5 and not second.news
    assert writes.count == 0
    assert await stream_length(stack) == published
    # what was applied works: the declared key routes through the declared router
    async with running(create_app(stack.settings())) as client:
        routed = await client.post("/route", json={"prompt": "hello"}, headers=bearer(key))
        assert routed.status_code == 200 and routed.json()["model"] in arms
        limits = (await client.get(f"/admin/tenants/{tenant}/limits", headers=admin_headers())).json()
        assert limits["configured"] == {
            "rate_limit_rps": 20.0,
            "rate_limit_burst": 40,
            "rate_limit_concurrency": None,
        }
        backend = (await client.get(f"/admin/backends/{arms[0]}", headers=admin_headers())).json()
        assert backend["has_api_key"] is True


async def test_a_changed_field_updates_its_object_and_a_new_policy_or_arm_set_resets_the_router(
    stack: Stack, tmp_path: Path
) -> None:
    tenant, arms, key = unique("chg"), [unique("a"), unique("b"), unique("c")], "bg_" + unique("chg-key")
    # without a bus (SQLite) a running app sees a revoked key once its cache expires: no cache here
    settings = stack.settings(catalog_ttl_s=0)
    await apply_file(settings, write(tmp_path, catalog(tenant, arms[:2])), env_for(key))
    state_url = f"/admin/tenants/{tenant}/routers/main/state"
    async with running(create_app(settings)) as client:
        decision = (await client.post("/route", json={"prompt": "p"}, headers=bearer(key))).json()
        fed = await client.post(
            "/feedback", json={"decision_id": decision["decision_id"], "reward": 1.0}, headers=bearer(key)
        )
        assert fed.status_code == 202, fed.text

        # hyperparameters changed: the router is updated and relearns from its log (the event is kept)
        changed = catalog(tenant, arms[:2], hyperparameters={"alpha": 0.25})
        plan = await apply_file(settings, write(tmp_path, changed), env_for(key))
        assert lines(plan) == [f"update router '{tenant}/main': hyperparameters"] and plan.reset == []
        state = (await client.get(state_url, headers=admin_headers())).json()
        assert state["events_folded"] + state["watermark"] >= 1
        assert state["state"]["config"]["alpha"] == 0.25

        # arms changed: the learned state is reset, and the plan says so
        plan = await apply_file(settings, write(tmp_path, catalog(tenant, arms)), env_for(key))
        assert lines(plan) == [
            f"create backend {arms[2]!r}",
            f"reset router '{tenant}/main': hyperparameters, arms",
        ]
        assert plan.reset == [f"router '{tenant}/main'"]
        router = (await client.get(f"/admin/tenants/{tenant}/routers/main", headers=admin_headers())).json()
        assert router["arms"] == arms and router["hyperparameters"] == {"alpha": 0.5}
        state = (await client.get(state_url, headers=admin_headers())).json()
        assert state["events_folded"] == 0 and state["watermark"] >= 1
        async for session in in_session(stack):
            kinds = list(
                await session.scalars(select(Snapshot.kind).where(Snapshot.router_id == router["id"]))
            )
            assert "reset" in kinds

        # a new key value under the same name replaces (revokes) the old key
        new_key = "bg_" + unique("rotated")
        plan = await apply_file(settings, write(tmp_path, catalog(tenant, arms)), env_for(new_key))
        assert lines(plan)[-1] == f"create key '{tenant}/ci'" and lines(plan)[0].startswith(
            f"revoke key '{tenant}/ci'"
        )
        assert (await client.post("/route", json={"prompt": "p"}, headers=bearer(key))).status_code == 401
        assert (await client.post("/route", json={"prompt": "p"}, headers=bearer(new_key))).status_code == 200


async def test_nothing_is_deleted_unless_the_file_or_the_flag_says_prune(
    empty_stack: Stack, tmp_path: Path
) -> None:
    settings = empty_stack.settings()
    tenant, arms, key = "acme", ["small", "large"], "bg_prune-key-0001"
    full = catalog(tenant, arms)
    full["tenants"].append({"name": "other", "keys": [{"name": "k", "value_env": "OTHER_KEY"}]})
    env = {**env_for(key), "OTHER_KEY": "bg_other-key-0001"}
    await apply_file(settings, write(tmp_path, full), env)
    smaller = catalog(tenant, arms[:1])  # 'other', backend 'large' and other's key left out
    smaller["tenants"][0]["routers"][0]["arms"] = ["small"]
    path = write(tmp_path, smaller)
    kept = await apply_file(settings, path, env)
    assert lines(kept) == [f"reset router '{tenant}/main': arms"]
    planned = await apply_file(settings, path, env, prune=True, dry_run=True)
    assert lines(planned) == ["delete tenant 'other'", "delete backend 'large'"]
    assert "- name: other" in await export_text(settings)  # a dry run writes nothing
    smaller["prune"] = True
    pruned = await apply_file(settings, write(tmp_path, smaller), env)
    assert lines(pruned) == lines(planned)
    exported = yaml.safe_load(await export_text(settings))
    assert [t["name"] for t in exported["tenants"]] == [tenant]
    assert [b["name"] for b in exported["backends"]] == ["small"]


async def test_a_dry_run_prints_the_plan_and_writes_nothing(
    empty_stack: Stack, tmp_path: Path, writes: Writes
) -> None:
    path = write(tmp_path, catalog("acme", ["small"]))
    plan = await apply_file(empty_stack.settings(), path, env_for("bg_dry-run-key-1"), dry_run=True)
    assert len(plan.steps) == 4
    summary = plan.summary(str(path), dry_run=True)
    assert (
        summary.splitlines()[0]
        == f"{path}: 4 changes to make (dry run: nothing written), 0 objects already as declared"
    )
    assert "  create router 'acme/main'" in summary.splitlines()
    exported = yaml.safe_load(await export_text(empty_stack.settings()))
    assert exported == {"version": 1}


# --- validation parity with the admin API ---------------------------------------------------------------


async def test_a_file_the_api_refuses_is_refused_with_the_apis_message_and_nothing_applied(
    stack: Stack, tmp_path: Path
) -> None:
    arms = [unique("pa"), unique("pb")]
    key = "bg_" + unique("parity")
    async with running(create_app(stack.settings())) as client:
        h = admin_headers()
        for arm in arms:
            body = {"name": arm, "base_url": "http://127.0.0.1:9/v1"}
            assert (await client.post("/admin/backends", json=body, headers=h)).status_code == 201
        api_tenant = unique("api")
        assert (await client.post("/admin/tenants", json={"name": api_tenant}, headers=h)).status_code == 201
        routers = f"/admin/tenants/{api_tenant}/routers"
        good = {"name": "main", "policy": "linucb", "arms": arms}
        assert (await client.post(routers, json=good, headers=h)).status_code == 201

        # (the file's router or backend, the path of the field, the API call that refuses the same body)
        cases: list[tuple[str, dict[str, Any], str, str, dict[str, Any], int]] = [
            (
                "router",
                {"policy": "no-such-policy"},
                "policy",
                routers,
                {**good, "policy": "no-such-policy"},
                422,
            ),
            (
                "router",
                {"hyperparameters": {"alpha": -2}},
                "hyperparameters",
                routers,
                {**good, "hyperparameters": {"alpha": -2}},
                422,
            ),
            (
                "router",
                {"hyperparameters": {"gamma": 1}},
                "hyperparameters",
                routers,
                {**good, "hyperparameters": {"gamma": 1}},
                422,
            ),
            (
                "router",
                {"arms": [arms[0], "ghost"]},
                "arms",
                routers,
                {**good, "arms": [arms[0], "ghost"]},
                422,
            ),
            (
                "router",
                {"reward_range": [1, 0]},
                "reward_range",
                routers,
                {**good, "reward_range": [1, 0]},
                422,
            ),
            ("router", {}, "name", routers, good, 409),  # the same name twice
            (
                "backend",
                {"base_url": "ftp://x"},
                "base_url",
                "/admin/backends",
                {"name": unique("u"), "base_url": "ftp://x"},
                422,
            ),
            # a backend declared twice (the API: created twice)
            (
                "backend",
                {"name": arms[0]},
                "name",
                "/admin/backends",
                {"name": arms[0], "base_url": "http://x"},
                409,
            ),
        ]
        for kind, change, field, url, body, status in cases:
            api = await client.post(url, json=body, headers=h)
            assert api.status_code == status, (change, api.text)
            message = error_text(api)
            tenant = unique("file")
            data = catalog(tenant, arms)
            data["backends"] = [{"name": a, "base_url": "http://127.0.0.1:9/v1"} for a in arms]
            declared_router = data["tenants"][0]["routers"][0]
            if kind == "router" and field == "name":
                data["tenants"][0]["routers"].append(dict(declared_router, is_default=False))
            elif kind == "router":
                declared_router.update(change)
            else:
                data["backends"].append({"name": unique("u"), "base_url": "http://127.0.0.1:9/v1", **change})
            path = write(tmp_path, data)
            with pytest.raises(ConfigError) as refused:
                await apply_file(stack.settings(), path, env_for(key))
            text = str(refused.value)
            obj = (
                f"tenant {tenant!r} router 'main'"
                if kind == "router"
                else f"backend {data['backends'][-1]['name']!r}"
            )
            assert text.startswith(f"{path}:") and f": {obj}: {field}" in text, text
            assert text.endswith(message), (text, message)
            line = int(text.split(":")[1])
            assert (
                yaml.safe_dump(data, sort_keys=False)
                .splitlines()[line - 1]
                .strip()
                .startswith(f"{field}:" if field != "name" else "- name:")
            ), (line, text)
            # nothing of the refused file was applied
            assert (await client.get(f"/admin/tenants/{tenant}", headers=h)).status_code == 404


async def test_a_secret_written_in_the_file_is_refused(sqlite_stack: Stack, tmp_path: Path) -> None:
    data = catalog("acme", ["small"])
    data["backends"][0]["api_key"] = "sk-in-the-file"
    with pytest.raises(ConfigError, match="api_key: Value error, a secret is never written in the file"):
        await apply_file(sqlite_stack.settings(), write(tmp_path, data), env_for("bg_x-0000001"))
    data = catalog("acme", ["small"])
    data["tenants"][0]["keys"].append({"name": "again", "value_env": "TEST_TENANT_KEY"})
    with pytest.raises(
        ConfigError, match=r"key 'again': value_env: TEST_TENANT_KEY holds another declared key's value"
    ):
        await apply_file(sqlite_stack.settings(), write(tmp_path, data), env_for("bg_x-0000002"))
    data = catalog("acme", ["small"])
    with pytest.raises(ConfigError, match="value_env: the environment variable TEST_TENANT_KEY is not set"):
        await apply_file(sqlite_stack.settings(), write(tmp_path, data), {"TEST_BACKEND_KEY": "k"})


# --- export, and the round trip to an empty database ------------------------------------------------


async def test_export_then_apply_on_an_empty_database_reproduces_the_catalog(
    empty_stack: Stack, second_empty: Stack, tmp_path: Path
) -> None:
    """A catalog made through the admin API, exported, applied to a second empty database: the second
    exports the same file, its keys work and its backend key is the same."""
    source = empty_stack.settings()
    async with running(create_app(source)) as client:
        h = admin_headers()
        for name, extra in (
            ("openai/gpt-4o", {"api_key": BACKEND_KEY, "upstream_model": "gpt-4o"}),
            ("small", {"kind": "chat", "usd_per_call": 0.01, "timeout_s": 5}),
        ):
            body = {"name": name, "base_url": "http://127.0.0.1:9/v1", **extra}
            assert (await client.post("/admin/backends", json=body, headers=h)).status_code == 201
        for tenant in ("acme", "beta"):
            assert (await client.post("/admin/tenants", json={"name": tenant}, headers=h)).status_code == 201
        limits = {"rate_limit_rps": 3.5, "rate_limit_concurrency": 2}
        assert (await client.put("/admin/tenants/acme/limits", json=limits, headers=h)).status_code == 200
        web = await client.post("/admin/tenants/acme/keys", json={"name": "web"}, headers=h)
        unnamed = (await client.post("/admin/tenants/beta/keys", json={}, headers=h)).json()
        keys = {
            "BANDITGATE_KEY_ACME_WEB": web.json()["key"],
            f"BANDITGATE_KEY_BETA_KEY_{unnamed['id']}": unnamed["key"],  # exported as key-<id>
        }
        routers = [
            {  # the default policy
                "name": "main",
                "arms": ["openai/gpt-4o", "small"],
                "is_default": True,
                "judge": {"backend": "small", "rubric": "answers the question", "threshold": 0.6},
            },
            {
                "name": "safe",
                "policy": "linucb",
                "hyperparameters": {"alpha": 0.2, "incumbent": "small", "max_loss": 0.1, "cost_target": 0.01},
                "arms": ["openai/gpt-4o", "small"],
                "reward_range": [-1, 1],
                "seed": 7,
                "judge": {"url": "http://127.0.0.1:9/judge", "threshold": 0.7},
                "embed_text": {"strategy": "last-user-first", "max_tokens": 64},
            },
        ]
        for router in routers:
            made = await client.post("/admin/tenants/acme/routers", json=router, headers=h)
            assert made.status_code == 201, made.text
    exported = await export_text(source)
    assert BACKEND_KEY not in exported and keys["BANDITGATE_KEY_ACME_WEB"] not in exported
    path = tmp_path / "exported.yaml"
    path.write_text(exported)
    env = {"BANDITGATE_BACKEND_KEY_OPENAI_GPT_4O": BACKEND_KEY, **keys}
    # the same database is as declared, but for the name the unnamed key is given
    again = await apply_file(source, path, env)
    assert lines(again) == [f"update key 'beta/key-{unnamed['id']}': name"]

    target = second_empty.settings()
    plan = await apply_file(target, path, env)
    assert len(plan.steps) == 2 + 2 + 2 + 2  # backends, tenants, keys, routers
    reexported = await export_text(target)
    assert reexported == exported
    app = create_app(target)
    async with running(app) as client:
        for key in keys.values():
            routed = await client.post("/route", json={"prompt": "x"}, headers=bearer(key))
            assert routed.status_code == (200 if key == web.json()["key"] else 404), routed.text
        listed = (await client.get("/admin/tenants/acme/keys", headers=admin_headers())).json()
        assert [k["name"] for k in listed] == ["web"]
        called = await app.state.ctx.catalog.target("openai/gpt-4o")
        assert called is not None and called.api_key == BACKEND_KEY


# --- replicas -----------------------------------------------------------------------------------------


async def test_applying_a_file_reaches_every_running_replica_over_the_bus(
    pg_stack: Stack, tmp_path: Path
) -> None:
    """Two replicas that cached a key and a router; a file applied beside them revokes the key and
    changes the router: both see it at once (their cache TTL is an hour: only the bus can tell them)."""
    settings = pg_stack.settings(catalog_ttl_s=3600)
    tenant, arms, key = unique("rep"), [unique("a"), unique("b")], "bg_" + unique("replica")
    await apply_file(settings, write(tmp_path, catalog(tenant, arms)), env_for(key))
    async with running(create_app(settings)) as one, running(create_app(settings)) as two:
        for client in (one, two):
            assert (await client.post("/route", json={"prompt": "x"}, headers=bearer(key))).status_code == 200
        changed = catalog(tenant, arms, policy="thompson", hyperparameters={})
        new_key = "bg_" + unique("replica-new")
        plan = await apply_file(settings, write(tmp_path, changed), env_for(new_key))
        assert plan.reset == [f"router '{tenant}/main'"]

        async def refused(client: httpx.AsyncClient) -> bool:
            for _ in range(100):
                answer = await client.post("/route", json={"prompt": "x"}, headers=bearer(key))
                if answer.status_code == 401:
                    return True
                await asyncio.sleep(0.05)
            return False

        assert await refused(one) and await refused(two)
        for client in (one, two):
            routed = await client.post("/route", json={"prompt": "x"}, headers=bearer(new_key))
            assert routed.status_code == 200 and routed.json()["policy"] == "thompson"
