"""GET /admin/tenants/{t}/routers/{r}/stats on both stacks: hand-computed buckets over rows written with
known times, query rounds against the budget, regret on query rounds, and every 422."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI

from app.main import create_app
from routers.registry import POLICIES
from tests.conftest import Stack, admin_headers, bearer, error_text, make_tenancy, running
from tests.integration.history import Row, write_rows
from tests.querying_policy import NAME, QueryingLinUCB


def at(hour: int, minute: int) -> datetime:
    """A time on 2026-01-01 (UTC); hour -1 is 23:00 the day before."""
    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=hour, minutes=minute)


async def write_history(app: FastAPI, tenant_id: int, router_id: int, a: str, b: str) -> None:
    """Decisions and feedback with known times (see the expected values in the test)."""
    rows = [
        Row(uuid.uuid4().hex, at(-1, 0), [b], [a]),  # before the window: one earlier query round
        Row(uuid.uuid4().hex, at(0, 10), [a], [], [(a, "bandit", 1.0, 0.02)]),
        Row(uuid.uuid4().hex, at(0, 20), [b], [a], [(b, "bandit", 0.25, 0.01), (a, "query", 0.75, 0.03)]),
        Row(uuid.uuid4().hex, at(0, 30), [], []),  # declined
        Row(uuid.uuid4().hex, at(2, 5), [a], [b], [(a, "bandit", 0.5, 0.02), (b, "query", 0.5, None)]),
        Row(uuid.uuid4().hex, at(3, 0), [a], [], [(a, "bandit", 0.0, 1.0)]),  # at `until`: outside
    ]
    await write_rows(app, tenant_id, router_id, rows)


async def test_stats_buckets_are_hand_computed(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(POLICIES, NAME, QueryingLinUCB)
    app = create_app(stack.settings())
    async with running(app) as client:
        h = admin_headers()
        hp: dict[str, object] = {"budget": 0.5, "horizon": 20}
        t = await make_tenancy(client, policy=NAME, hyperparameters=hp)
        a, b = t.arms
        tenant_id = (await client.get(f"/admin/tenants/{t.tenant}", headers=h)).json()["id"]
        router_id = (await client.get(f"/admin/tenants/{t.tenant}/routers/main", headers=h)).json()["id"]
        await write_history(app, tenant_id, router_id, a, b)

        response = await client.get(
            f"/admin/tenants/{t.tenant}/routers/main/stats",
            params={"since": "2026-01-01T00:00:00Z", "until": "2026-01-01T03:00:00Z", "bucket": "1h"},
            headers=h,
        )
        assert response.status_code == 200, response.text
        s = response.json()
        assert (s["bucket_s"], s["query_budget"], s["query_budget_ratio"]) == (3600, 10, 0.5)
        assert s["query_budget_key"] == "budget * horizon"
        assert (s["queries_before"], s["queries_total"], s["decisions"], s["feedback"]) == (1, 3, 4, 5)
        assert s["feedback_by_kind"] == {"bandit": 3, "query": 2}
        assert s["decisions_before"] == 1
        assert [b["decisions_cumulative"] for b in s["buckets"]] == [4, 4, 5]
        assert s["reward_mean"] == pytest.approx((1.0 + 0.25 + 0.5) / 3)
        assert s["cost_total"] == pytest.approx(0.08) and s["regret_mean"] == pytest.approx(0.25)
        b0, b1, b2 = s["buckets"]
        assert [x["start"][:19] for x in s["buckets"]] == [
            "2026-01-01T00:00:00",
            "2026-01-01T01:00:00",
            "2026-01-01T02:00:00",
        ]

        assert (b0["decisions"], b0["declined"], b0["queries"], b0["queries_cumulative"]) == (3, 1, 1, 2)
        assert b0["feedback"] == 3 and b0["reward_mean"] == pytest.approx(0.625)
        assert b0["cost_total"] == pytest.approx(0.06) and b0["cost_mean"] == pytest.approx(0.02)
        assert b0["models"][a] == {
            "decisions": 1,
            "share": pytest.approx(1 / 3),
            "feedback": 2,
            "reward_mean": 1.0,
        }
        assert b0["models"][b] == {
            "decisions": 1,
            "share": pytest.approx(1 / 3),
            "feedback": 1,
            "reward_mean": 0.25,
        }
        assert (b0["regret_rounds"], b0["regret_mean"], b0["regret_running"]) == (1, 0.5, 0.5)

        assert (b1["decisions"], b1["feedback"], b1["queries_cumulative"], b1["cost_total"]) == (0, 0, 2, 0.0)
        assert b1["reward_mean"] is None and b1["models"][a]["share"] is None
        assert (b1["regret_rounds"], b1["regret_mean"], b1["regret_running"]) == (0, None, 0.5)

        assert (b2["decisions"], b2["queries"], b2["queries_cumulative"], b2["feedback"]) == (1, 1, 3, 2)
        assert (
            b2["reward_mean"] == 0.5 and b2["cost_total"] == pytest.approx(0.02) and b2["cost_mean"] == 0.02
        )
        assert b2["models"][a] == {"decisions": 1, "share": 1.0, "feedback": 1, "reward_mean": 0.5}
        assert b2["models"][b] == {"decisions": 0, "share": 0.0, "feedback": 1, "reward_mean": None}
        assert (b2["regret_rounds"], b2["regret_mean"], b2["regret_running"]) == (1, 0.0, 0.25)

        # 30-minute buckets split the first hour: 00:00 holds d1 and d2, 00:30 the declined d3.
        half = (
            await client.get(
                f"/admin/tenants/{t.tenant}/routers/main/stats",
                params={"since": "2026-01-01T00:00:00", "until": "2026-01-01T01:00:00", "bucket": "30m"},
                headers=h,
            )
        ).json()
        assert [(x["decisions"], x["declined"]) for x in half["buckets"]] == [(2, 0), (1, 1)]


async def test_stats_follow_live_traffic(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        for i in range(4):
            d = (await client.post("/route", json={"prompt": f"q {i}"}, headers=bearer(t.key))).json()
            if i < 3:
                body = {"decision_id": d["decision_id"], "reward": 1.0 if i else 0.0, "cost": 0.5}
                assert (await client.post("/feedback", json=body, headers=bearer(t.key))).status_code == 202
        s = (
            await client.get(
                f"/admin/tenants/{t.tenant}/routers/main/stats?bucket=1d", headers=admin_headers()
            )
        ).json()
        assert (s["decisions"], s["feedback"], s["cost_total"], s["query_budget"]) == (4, 3, 1.5, None)
        assert (s["query_budget_ratio"], s["query_budget_key"]) == (None, None)
        assert s["reward_mean"] == pytest.approx(2 / 3) and s["regret_mean"] is None
        assert sum(sum(m["decisions"] for m in x["models"].values()) for x in s["buckets"]) == 4


async def test_cost_records_are_counted_apart_from_feedback(stack: Stack) -> None:
    """The gateway's ``cost`` records of the calls it made are not feedback: ``feedback`` (total, per
    bucket, per model) counts the caller's events only, ``feedback_by_kind`` every kind; the cost total
    has both."""
    app = create_app(stack.settings())
    async with running(app) as client:
        h = admin_headers()
        t = await make_tenancy(client)
        a, b = t.arms
        tenant_id = (await client.get(f"/admin/tenants/{t.tenant}", headers=h)).json()["id"]
        router_id = (await client.get(f"/admin/tenants/{t.tenant}/routers/main", headers=h)).json()["id"]
        rows = [
            Row(uuid.uuid4().hex, at(0, 5), [a], [], [(a, "cost", None, 0.5), (a, "bandit", 1.0, None)]),
            Row(uuid.uuid4().hex, at(0, 6), [b], [a], [(b, "cost", None, 0.25), (a, "cost", None, 0.5)]),
            Row(uuid.uuid4().hex, at(0, 7), [b], [], [(b, "bandit", 0.0, 0.125)]),
        ]
        await write_rows(app, tenant_id, router_id, rows)
        window = {"since": "2026-01-01T00:00:00Z", "until": "2026-01-01T01:00:00Z", "bucket": "1h"}
        stats = await client.get(f"/admin/tenants/{t.tenant}/routers/main/stats", params=window, headers=h)
        s = stats.json()
        assert (s["decisions"], s["feedback"], s["feedback_by_kind"]) == (3, 2, {"bandit": 2, "cost": 3})
        assert s["cost_total"] == pytest.approx(1.375) and s["reward_mean"] == pytest.approx(0.5)
        (bucket,) = s["buckets"]
        assert bucket["feedback"] == 2
        assert (bucket["models"][a]["feedback"], bucket["models"][b]["feedback"]) == (1, 1)


@pytest.mark.parametrize(
    ("hyperparameters", "total", "ratio", "source"),
    [
        ({"max_queries": 7}, 7, 0.2, "max_queries"),
        ({"budget": 0.1, "horizon": 55}, 5, 0.1, "budget * horizon"),
        ({}, None, 0.2, "budget"),  # the policy's default ratio, no total
    ],
)
async def test_query_budget_from_the_policy_config(
    monkeypatch: pytest.MonkeyPatch,
    sqlite_stack: Stack,
    hyperparameters: dict[str, Any],
    total: int | None,
    ratio: float,
    source: str,
) -> None:
    monkeypatch.setitem(POLICIES, NAME, QueryingLinUCB)
    async with running(create_app(sqlite_stack.settings())) as client:
        t = await make_tenancy(client, policy=NAME, hyperparameters=hyperparameters)
        url = f"/admin/tenants/{t.tenant}/routers/main/stats"
        s = (await client.get(url, headers=admin_headers())).json()
        assert (s["query_budget"], s["query_budget_ratio"], s["query_budget_key"]) == (total, ratio, source)


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"bucket": "abc"}, "bucket='abc'"),
        ({"bucket": "0m"}, "at least one second"),
        ({"since": "yesterday"}, "since='yesterday' is not an ISO 8601 time"),
        ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "must be earlier than until"),
        ({"bucket": "1s"}, "buckets of 1 s between since and until; the limit is 2000"),
    ],
)
async def test_stats_validation(stack: Stack, params: dict[str, str], says: str) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        url = f"/admin/tenants/{t.tenant}/routers/main/stats"
        response = await client.get(url, params=params, headers=admin_headers())
        assert response.status_code == 422 and says in error_text(response), response.text
        assert (await client.get(url, headers=bearer(t.key))).status_code == 403
        missing = await client.get(f"/admin/tenants/{t.tenant}/routers/nope/stats", headers=admin_headers())
        assert missing.status_code == 404
