"""The trusted-routing figures of GET .../stats on both stacks: lambda_t, the pacer's spend, the
conservative margins (folded from the event log), the forced / chosen / off-incumbent shares and the
cost saved (from the decisions and feedback tables), hand-computed from rows written with known values;
and the same figures end to end through /route and /feedback."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.main import create_app
from tests.conftest import Stack, admin_headers, bearer, make_tenancy, running
from tests.integration.history import Event, Row, write_rows

WHEN = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = {"since": "2026-01-01T00:00:00Z", "until": "2026-01-01T01:00:00Z", "bucket": "1h"}


def rows(items: list[tuple[list[str], dict[str, Any], int, list[Event]]]) -> list[Row]:
    """(models, info, prompt characters, events) one minute apart inside the hour."""
    return [
        Row(uuid.uuid4().hex, WHEN + timedelta(minutes=i + 1), m, [], ev, info, chars, "greedy")
        for i, (m, info, chars, ev) in enumerate(items)
    ]


async def test_trusted_figures_are_hand_computed(stack: Stack) -> None:
    """Router greedy over a, b with cost_target 0.25, pacing_rate 0.0625 (eta = 1, lambda_0 = 0),
    incumbent b, max_loss 0.5, delta = e^-1 (L = 1); b costs $0.5 per call plus $2 per M input tokens.

    d1 b chosen (reward 1, cost 0.5); d2 b forced (reward 0, cost 0.5); d3 a (reward 1, cost 0.25);
    d4 a (cost 0.125, no reward, 1000 characters); d5 unchecked (no prices), no events.
    lambda: 0.5-0.25 = 0.25; +0.25 = 0.5; +0 = 0.5; -0.125 = 0.375; 4 requests, $1.375.
    Rounds: b played 2 (R_0 = 1, n_0 = 2, m_0 = 0.5), a 1 (R_S = 1, n_a = 1); UCB_0 = min(1, 0.5 +
    sqrt(1/4)) = 1, LCB_a = 1 - sqrt(1/2). floor B = R_S + 0.5 R_0 - 0.5 |S| UCB_0 = 1; a's gain
    LCB_a - 0.5 UCB_0 < 0 (exploratory, |S| = 1): margin = B + gain - 0.5 sqrt(1 / 2) = 1.5 - 1.5 sqrt(0.5). Cost: b's own calls 0.5 + 0.5, and for d3, d4 (1000 characters each) b's price
    2 (0.5 + 250 x 2 / 1e6) = 1.001: reference 2.001, actual 1.375, saved 0.626."""
    app = create_app(stack.settings())
    async with running(app) as client:
        h = admin_headers()
        hp: dict[str, object] = {
            "cost_target": 0.25,
            "pacing_rate": 0.0625,
            "incumbent": None,
            "max_loss": 0.5,
            "delta": math.exp(-1),
        }
        t = await make_tenancy(client, policy="greedy", hyperparameters=hp)
        a, b = t.arms
        hp["incumbent"] = b
        base = f"/admin/tenants/{t.tenant}/routers/main"
        assert (await client.patch(base, json={"hyperparameters": hp}, headers=h)).status_code == 200
        price = {"usd_per_call": 0.5, "usd_per_mtok_in": 2.0, "usd_per_mtok_out": 0.0}
        assert (await client.patch(f"/admin/backends/{b}", json=price, headers=h)).status_code == 200
        tenant_id = (await client.get(f"/admin/tenants/{t.tenant}", headers=h)).json()["id"]
        router_id = (await client.get(base, headers=h)).json()["id"]
        checked = {"incumbent": b, "incumbent_forced": False}
        await write_rows(
            app,
            tenant_id,
            router_id,
            rows(
                [
                    ([b], checked, 10, [(b, "cost", None, 0.5), (b, "bandit", 1.0, None)]),
                    (
                        [b],
                        {**checked, "incumbent_forced": True, "proposed": a},
                        10,
                        [(b, "cost", None, 0.5), (b, "bandit", 0.0, None)],
                    ),
                    ([a], checked, 1000, [(a, "cost", None, 0.25), (a, "bandit", 1.0, None)]),
                    ([a], checked, 1000, [(a, "cost", None, 0.125)]),
                    ([a], {"conservative": "no incumbent (no prices)", "incumbent_forced": False}, 10, []),
                ]
            ),
        )
        response = await client.get(f"{base}/stats", params=HOUR, headers=h)
        assert response.status_code == 200, response.text
        trusted = response.json()["trusted"]
        assert trusted["events_folded"] == 7
        pacing = trusted["pacing"]
        assert pacing["cost_multiplier"] == pytest.approx(0.375)
        assert (pacing["cost_weight"], pacing["cost_target"], pacing["requests"]) == (0.0, 0.25, 4)
        assert pacing["spent"] == pytest.approx(1.375)
        assert pacing["spend_per_request"] == pytest.approx(0.34375)
        assert pacing["spend_vs_target"] == pytest.approx(1.375)
        safety = trusted["safety"]
        assert (safety["incumbent"], safety["max_loss"]) == (b, 0.5)
        assert safety["margin"] == pytest.approx(1.5 - 1.5 * math.sqrt(0.5), abs=1e-12)
        assert safety["floor_margin"] == pytest.approx(1.0, abs=1e-12)
        assert (safety["incumbent_rounds"], safety["other_rounds"]) == (2, 1)
        counts = [safety[k] for k in ("checked", "forced", "chosen", "off_incumbent")]
        assert counts == [4, 1, 1, 2]
        shares = [safety[k] for k in ("forced_share", "chosen_share", "off_share")]
        assert shares == [0.25, 0.25, 0.5]
        assert safety["cost"] == pytest.approx(1.375)
        assert safety["incumbent_cost"] == pytest.approx(2.001)
        assert safety["cost_saved"] == pytest.approx(0.626)
        assert safety["cost_saved_share"] == pytest.approx(0.626 / 2.001)

        plain = await client.patch(base, json={"policy": "linucb", "hyperparameters": {}}, headers=h)
        assert plain.status_code == 200
        assert (await client.get(f"{base}/stats", params=HOUR, headers=h)).json()["trusted"] is None


async def test_a_router_created_with_the_keys_reports_them_end_to_end(stack: Stack) -> None:
    """Through the admin API and /route + /feedback: the decisions' info says whether the incumbent was
    forced, and the stats count exactly those; with nothing banked and nothing known of the other arm
    every decision is forced or chosen on the incumbent."""
    app = create_app(stack.settings())
    async with running(app) as client:
        h = admin_headers()
        t = await make_tenancy(client, policy="thompson", hyperparameters={"cost_target": 0.001})
        b = t.arms[1]
        base = f"/admin/tenants/{t.tenant}/routers/main"
        hp = {"cost_target": 0.001, "incumbent": b, "max_loss": 0.02}
        assert (await client.patch(base, json={"hyperparameters": hp}, headers=h)).status_code == 200
        forced = 0
        for i in range(6):
            d = (await client.post("/route", json={"prompt": f"question {i}"}, headers=bearer(t.key))).json()
            assert d["model"] == b and d["info"]["incumbent"] == b
            forced += d["info"]["incumbent_forced"]
            if i < 3:  # rewards for the first three only: costs none, so no request for the pacer
                body = {"decision_id": d["decision_id"], "reward": 1.0}
                assert (await client.post("/feedback", json=body, headers=bearer(t.key))).status_code == 202
        now = datetime.now(UTC)
        window = {
            "since": (now - timedelta(hours=1)).isoformat(),
            "until": (now + timedelta(minutes=1)).isoformat(),
        }
        stats = (await client.get(f"{base}/stats", params={**window, "bucket": "1h"}, headers=h)).json()
        safety = stats["trusted"]["safety"]
        assert (safety["checked"], safety["forced"], safety["off_incumbent"]) == (6, forced, 0)
        assert safety["forced"] + safety["chosen"] == 6 and safety["incumbent_rounds"] == 3
        assert safety["cost"] is None and safety["cost_saved"] is None  # no costs reported
        pacing = stats["trusted"]["pacing"]
        assert (pacing["cost_target"], pacing["requests"], pacing["spend_per_request"]) == (0.001, 0, None)
        assert stats["trusted"]["last_event_id"] > 0
