"""A cost target under an incumbent check, on both stacks: ``GET .../stats`` says in ``trusted.conflict``
when the target cannot be met under the floor (the floor wins) and with what spend, hand-computed from
rows written with known values (with and without the decisions' own ``floor_over_target`` record), and
end to end through /route + /feedback."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.main import create_app
from tests.conftest import Stack, admin_headers, bearer, make_tenancy, running
from tests.integration.history import write_rows
from tests.integration.test_trusted_stats import HOUR, rows

B_PRICE = {"usd_per_call": 0.5, "usd_per_mtok_in": 2.0, "usd_per_mtok_out": 0.0}


async def test_the_conflict_is_hand_computed_from_forced_or_flagged_decisions(stack: Stack) -> None:
    """Routers greedy over a, b, incumbent b (max_loss 0.5), cost_target 0.25 (pacing_rate 0.0625).

    ``forced`` (no decision records floor_over_target): d1 b chosen (cost 0.5), d2 b forced (cost 0.5),
    d3 a (0.25), d4 a (0.125): the pacer's spend 1.375 / 4 = 0.34375 > 0.25, one forced decision: the
    floor holds the spend at 137.5% of the target; held 1 of 4 checked, held cost 0.5.
    ``flagged`` (the decisions record it): d1 b (0.5, false), d2 b forced (0.5, true), d3 a (0.25,
    false), d4 b forced (0.5, false: forced, but not over the target): spend 1.75 / 4 = 0.4375; held 1
    (the flag, not the 2 forced), held cost 0.5.
    ``roomy``: the rows of ``forced`` under a target of 10: spend below it, no conflict."""
    app = create_app(stack.settings())
    async with running(app) as client:
        h = admin_headers()
        t = await make_tenancy(client, policy="greedy")
        a, b = t.arms
        hp: dict[str, Any] = {
            "cost_target": 0.25,
            "pacing_rate": 0.0625,
            "incumbent": b,
            "max_loss": 0.5,
            "delta": math.exp(-1),
        }
        url = f"/admin/tenants/{t.tenant}/routers"
        assert (await client.patch(f"{url}/main", json={"hyperparameters": hp}, headers=h)).status_code == 200
        assert (await client.patch(f"/admin/backends/{b}", json=B_PRICE, headers=h)).status_code == 200
        tenant_id = (await client.get(f"/admin/tenants/{t.tenant}", headers=h)).json()["id"]
        ids = {"main": (await client.get(f"{url}/main", headers=h)).json()["id"]}
        for name, target in (("flagged", 0.25), ("roomy", 10.0), ("unchecked", 0.25)):
            body = {
                "name": name,
                "policy": "greedy",
                "arms": t.arms,
                "hyperparameters": {**hp, "cost_target": target},
            }
            if name == "unchecked":
                body["hyperparameters"] = {"cost_target": target}
            created = await client.post(url, json=body, headers=h)
            assert created.status_code == 201, created.text
            ids[name] = created.json()["id"]

        on_b = {"incumbent": b, "incumbent_forced": False}
        forced = {**on_b, "incumbent_forced": True, "proposed": a}
        rewarded = [(b, "cost", None, 0.5), (b, "bandit", 1.0, None)]
        forced_rows = [
            ([b], on_b, 10, rewarded),
            ([b], forced, 10, [(b, "cost", None, 0.5), (b, "bandit", 0.0, None)]),
            ([a], on_b, 1000, [(a, "cost", None, 0.25), (a, "bandit", 1.0, None)]),
            ([a], on_b, 1000, [(a, "cost", None, 0.125)]),
        ]
        flag = {"floor_over_target": False, "spend_per_request": 0.3, "cost_target": 0.25}
        flagged_rows = [
            ([b], {**on_b, **flag}, 10, rewarded),
            ([b], {**forced, **flag, "floor_over_target": True}, 10, [(b, "cost", None, 0.5)]),
            ([a], {**on_b, **flag}, 10, [(a, "cost", None, 0.25), (a, "bandit", 1.0, None)]),
            ([b], {**forced, **flag}, 10, [(b, "cost", None, 0.5)]),
        ]
        for name, items in (
            ("main", forced_rows),
            ("flagged", flagged_rows),
            ("roomy", forced_rows),
            ("unchecked", forced_rows),
        ):
            await write_rows(app, tenant_id, ids[name], rows(items))

        async def conflict(name: str) -> dict[str, Any] | None:
            response = await client.get(f"{url}/{name}/stats", params=HOUR, headers=h)
            assert response.status_code == 200, response.text
            found: dict[str, Any] | None = response.json()["trusted"]["conflict"]
            return found

        got = await conflict("main")
        assert got is not None
        assert got == {
            "floor_over_target": True,
            "cost_target": 0.25,
            "spend_per_request": pytest.approx(0.34375),
            "spend_vs_target": pytest.approx(1.375),
            "held": 1,
            "held_share": 0.25,
            "held_cost": pytest.approx(0.5),
            "evidence": "incumbent_forced",
            "message": "the cost target 0.25 USD per request cannot be met under the floor: it holds the "
            "spend at 0.34375 USD per request (138% of the target; decisions held on the incumbent: 1); "
            "the floor wins",
        }

        got = await conflict("flagged")
        assert got is not None
        assert (got["floor_over_target"], got["held"], got["evidence"]) == (True, 1, "floor_over_target")
        assert got["spend_per_request"] == pytest.approx(0.4375) and got["held_cost"] == pytest.approx(0.5)
        assert got["held_share"] == 0.25 and "(175% of the target;" in str(got["message"])

        got = await conflict("roomy")
        assert got is not None
        assert (got["floor_over_target"], got["held"], got["message"]) == (False, 1, None)
        assert got["spend_vs_target"] == pytest.approx(0.034375)

        assert await conflict("unchecked") is None  # a target without a floor: nothing to conflict with


async def test_a_target_below_what_the_floor_holds_is_reported_end_to_end(stack: Stack) -> None:
    """Through /route + /feedback: thompson over a, b with incumbent b (max_loss 0.02) and a cost target
    of 0.001 USD; every answer costs 0.01. a is never played, so thompson keeps proposing it and the check
    keeps forcing b: the spend stays at 0.01 per request, ten times the target, and the stats count the
    held decisions as the decisions' own records say."""
    app = create_app(stack.settings())
    async with running(app) as client:
        h = admin_headers()
        t = await make_tenancy(client, policy="thompson")
        b = t.arms[1]
        base = f"/admin/tenants/{t.tenant}/routers/main"
        hp = {"cost_target": 0.001, "incumbent": b, "max_loss": 0.02}
        assert (await client.patch(base, json={"hyperparameters": hp}, headers=h)).status_code == 200
        infos = []
        for i in range(8):
            d = (await client.post("/route", json={"prompt": f"question {i}"}, headers=bearer(t.key))).json()
            assert d["model"] == b
            infos.append(d["info"])
            body = {"decision_id": d["decision_id"], "reward": 1.0, "cost": 0.01}
            assert (await client.post("/feedback", json=body, headers=bearer(t.key))).status_code == 202
        recorded = any("floor_over_target" in info for info in infos)
        key = "floor_over_target" if recorded else "incumbent_forced"
        held = sum(bool(info.get(key)) for info in infos)
        assert held >= 7  # every decision after the first: b is rewarded, a untried
        now = datetime.now(UTC)
        window = {
            "since": (now - timedelta(hours=1)).isoformat(),
            "until": (now + timedelta(minutes=1)).isoformat(),
            "bucket": "1h",
        }
        stats = (await client.get(f"{base}/stats", params=window, headers=h)).json()
        conflict = stats["trusted"]["conflict"]
        assert conflict["floor_over_target"] is True and conflict["evidence"] == key
        assert (conflict["held"], conflict["held_share"]) == (held, held / 8)
        assert conflict["spend_per_request"] == pytest.approx(0.01)
        assert conflict["spend_vs_target"] == pytest.approx(10.0)
        assert conflict["held_cost"] == pytest.approx(0.01 * held)
        assert "(1000% of the target;" in conflict["message"] and conflict["message"].endswith(
            "the floor wins"
        )
