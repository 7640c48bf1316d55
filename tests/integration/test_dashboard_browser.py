"""The dashboard in a real browser: headless Chromium (Debian's package) driven by Playwright against a
real uvicorn process on SQLite, fed with routes and feedback through the API.

Checks: sign-in with the admin key, every chart plots exactly what the stats API returns for the same
range, the latest decisions and their explanation show, and a hyperparameter edited on the page is
persisted (read back through the admin API), and a router with a cost target and an incumbent shows
the stats API's trusted-routing figures in its panel, and its logged (warm-start) rows per model in
another (both hidden for a router without them). A screenshot is written to the test's tmp dir, and to
``$BANDITGATE_DASHBOARD_SCREENSHOT`` when that is set (how docs/img/dashboard.png is made).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, sync_playwright

from app.api.dashboard import CONTENT_SECURITY_POLICY
from app.store.migrate import upgrade
from tests.conftest import ADMIN_KEY, admin_headers, bearer
from tests.debian import installed
from tests.integration.processes import wait_until_ready
from tests.querying_policy import NAME
from tests.served import free_port

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOPICS = {
    "math": ["Prove that the square root of {} is irrational.", "Integrate x^{} dx from zero to one."],
    "poem": ["Write a short poem about the colour {}.", "Compose a haiku about {} autumn leaves."],
}


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium; installed with apt-get when absent."""
    return installed("chromium", CHROMIUM)


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A real uvicorn process on a fresh SQLite file; yields (base URL, database file)."""
    db_file = tmp_path / "dashboard.db"
    upgrade(f"sqlite+aiosqlite:///{db_file}")
    port = free_port()
    env = os.environ | {
        "BANDITGATE_DATABASE_URL": f"sqlite+aiosqlite:///{db_file}",
        "BANDITGATE_ADMIN_KEY": ADMIN_KEY,
        "BANDITGATE_EMBEDDER": "hashing",
        "BANDITGATE_READ_YOUR_WRITES_TIMEOUT_S": "0",
    }
    env.pop("BANDITGATE_REDIS_URL", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "uvicorn", "--factory", "tests.querying_policy:create_app"]
    proc = subprocess.Popen(
        [*cmd, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"], env=env, cwd=REPO
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(proc, url)
        yield url, str(db_file)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def feed_traffic(url: str, db_file: str, n: int = 48) -> dict[str, Any]:
    """A tenant, two backends and a querying LinUCB router; ``n`` routed prompts on two topics with
    rewards that favour one backend per topic (and query feedback when asked), then the decisions are
    spread over the last 48 minutes (the API stamps them 'now'), so the charts have several buckets."""
    h = admin_headers()
    with httpx.Client(base_url=url, timeout=30) as client:
        assert client.post("/admin/tenants", json={"name": "acme"}, headers=h).status_code == 201
        for name, price in (("small-model", 0.5), ("large-model", 5.0)):
            body = {"name": name, "base_url": "http://127.0.0.1:9/v1", "usd_per_mtok_in": price}
            assert client.post("/admin/backends", json=body, headers=h).status_code == 201
        router = {
            "name": "support",
            "policy": NAME,  # LinUCB that queries every 4th decision, 10 query rounds in all
            "hyperparameters": {"alpha": 0.5, "budget": 0.25, "horizon": 40},
            "arms": ["small-model", "large-model"],
            "is_default": True,
        }
        assert client.post("/admin/tenants/acme/routers", json=router, headers=h).status_code == 201
        key = client.post("/admin/tenants/acme/keys", json={}, headers=h).json()["key"]
        ids: list[str] = []
        for i in range(n):
            topic = "math" if i % 2 else "poem"
            prompt = TOPICS[topic][i % 4 // 2].format(i)
            d = client.post("/route", json={"prompt": prompt}, headers=bearer(key)).json()
            ids.append(d["decision_id"])
            events = [{"model": d["model"], "kind": "bandit"}] + [
                {"model": m, "kind": "query"} for m in d["query"]
            ]
            for event in events:
                good = (topic == "math") == (event["model"] == "large-model")
                cost = 0.004 if event["model"] == "large-model" else 0.0005
                body = event | {"decision_id": d["decision_id"], "reward": 1.0 if good else 0.2, "cost": cost}
                assert client.post("/feedback", json=body, headers=bearer(key)).status_code == 202
    now = datetime.now(UTC)
    with sqlite3.connect(db_file) as conn:
        for i, decision_id in enumerate(ids):
            when = now - timedelta(minutes=48) + timedelta(minutes=i * 48 / n)
            stamp = when.strftime("%Y-%m-%d %H:%M:%S.%f")
            conn.execute("UPDATE decisions SET created_at = ? WHERE id = ?", (stamp, decision_id))
            conn.execute("UPDATE feedback SET created_at = ? WHERE decision_id = ?", (stamp, decision_id))
    return {"tenant": "acme", "router": "support", "decisions": ids}


def feed_guarded(url: str, n: int = 24) -> None:
    """A second router of the tenant with a cost target and an incumbent, three offline rows (logs), and
    ``n`` routed prompts with reward and cost feedback (the cheap model answers the poems well, the dear one everything)."""
    h = admin_headers()
    with httpx.Client(base_url=url, timeout=30) as client:
        router = {
            "name": "guarded",
            "policy": "thompson",
            "hyperparameters": {"cost_target": 0.002, "incumbent": "large-model", "max_loss": 0.05},
            "arms": ["small-model", "large-model"],
        }
        assert client.post("/admin/tenants/acme/routers", json=router, headers=h).status_code == 201
        # three logged outcomes (a warm start): small-model at 1.0 and 0.5, large-model at 1.0
        logs = [
            {
                "id": f"log-{i}",
                "prompt": TOPICS["poem"][0].format(100 + i),
                "model": m,
                "reward": r,
                "cost": c,
            }
            for i, (m, r, c) in enumerate(
                [("small-model", 1.0, 0.0005), ("small-model", 0.5, 0.0005), ("large-model", 1.0, 0.004)]
            )
        ]
        uploaded = client.post("/admin/tenants/acme/routers/guarded/observations", json=logs, headers=h)
        assert uploaded.status_code == 200, uploaded.text
        key = client.post("/admin/tenants/acme/keys", json={}, headers=h).json()["key"]
        for i in range(n):
            topic = "math" if i % 2 else "poem"
            body = {"router": "guarded", "prompt": TOPICS[topic][0].format(i)}
            d = client.post("/route", json=body, headers=bearer(key)).json()
            large = d["model"] == "large-model"
            reward = 1.0 if large or topic == "poem" else 0.2
            cost = 0.004 if large else 0.0005
            feedback = {"decision_id": d["decision_id"], "reward": reward, "cost": cost}
            assert client.post("/feedback", json=feedback, headers=bearer(key)).status_code == 202


def expected_charts(stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What each chart must plot, derived from the stats API's answer."""
    buckets = stats["buckets"]
    x = [datetime.fromisoformat(b["start"]).timestamp() for b in buckets]
    models = list(dict.fromkeys(m for b in buckets for m in b["models"]))
    queries: dict[str, list[Any]] = {"query rounds (cumulative)": [b["queries_cumulative"] for b in buckets]}
    if stats["query_budget"] is not None:
        queries["budget"] = [stats["query_budget"]] * len(buckets)
    elif stats["query_budget_ratio"] is not None:
        ratio = stats["query_budget_ratio"]
        queries["allowed by the ratio"] = [ratio * b["decisions_cumulative"] for b in buckets]
    return {
        "traffic": {"x": x, "series": {m: [b["models"][m]["share"] for b in buckets] for m in models}},
        "reward": {
            "x": x,
            "series": {
                "mean reward": [b["reward_mean"] for b in buckets],
                "running regret": [b["regret_running"] for b in buckets],
            },
        },
        "cost": {
            "x": x,
            "series": {
                "total per bucket": [b["cost_total"] for b in buckets],
                "mean per call": [b["cost_mean"] for b in buckets],
            },
        },
        "queries": {"x": x, "series": queries},
    }


def wait_ready(page: Page) -> None:
    page.wait_for_function("() => window.__dashboard && window.__dashboard.state === 'ready'", timeout=20_000)


def test_dashboard_in_chromium(chromium: str, gateway: tuple[str, str], tmp_path: Path) -> None:
    url, db_file = gateway
    fed = feed_traffic(url, db_file)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 1180})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            # a Content-Security-Policy violation is reported on the console (and the script or style
            # it blocked would be missing): none may happen
            page.on(
                "console",
                lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
            )
            loaded = page.goto(f"{url}/dashboard")
            assert page.url == f"{url}/dashboard/" and loaded is not None
            assert loaded.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
            assert loaded.headers["x-frame-options"] == "DENY"
            assert loaded.headers["x-content-type-options"] == "nosniff"
            script = httpx.get(f"{url}/dashboard/dashboard.js")
            assert script.headers["content-security-policy"] == CONTENT_SECURITY_POLICY

            page.fill("#admin-key", "not-the-key")
            page.click("#signin-form button")
            page.wait_for_selector("#signin-error:has-text('not the admin key')")

            page.fill("#admin-key", ADMIN_KEY)
            page.click("#signin-form button")
            page.wait_for_selector("#board:not([hidden])")
            wait_ready(page)
            page.select_option("#range", "3600")
            page.select_option("#bucket", "5m")
            wait_ready(page)
            query = page.evaluate("window.__statsQuery")
            assert (query["tenant"], query["router"], query["bucket"]) == ("acme", "support", "5m")

            # Each chart plots exactly what the stats API returns for the same range.
            params = {k: query[k] for k in ("since", "until", "bucket")}
            stats = httpx.get(
                f"{url}/admin/tenants/acme/routers/support/stats", params=params, headers=admin_headers()
            ).json()
            assert stats["decisions"] == len(fed["decisions"]) and stats["queries_total"] == 10
            assert stats["feedback"] == len(fed["decisions"]) + 10 and stats["query_budget"] == 10
            assert stats["regret_mean"] is not None
            assert len(stats["buckets"]) >= 10
            plotted = page.evaluate("window.__charts")
            assert plotted == expected_charts(stats)
            # ...and uPlot holds those arrays (x first, then each series in order).
            for name, chart in plotted.items():
                data = page.evaluate(f"window.__uplot[{name!r}].data")
                assert data == [chart["x"], *chart["series"].values()], name
            assert set(plotted["traffic"]["series"]) == {"small-model", "large-model"}
            assert page.is_hidden("#trusted") and page.evaluate("window.__trusted") is None
            assert page.is_hidden("#warm-start") and page.evaluate("window.__warmStart") is None

            # The latest decisions, newest first, and one decision's explanation.
            rows = page.locator("#decisions tbody tr[data-id]")
            assert rows.count() == 15
            assert rows.first.get_attribute("data-id") == fed["decisions"][-1]
            rows.first.click()
            page.wait_for_selector("#decision-detail table")
            assert page.locator("#decision-detail tbody tr").count() == 2
            assert "bandit" in page.inner_text("#decision-detail ul")

            page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
            if os.environ.get("BANDITGATE_DASHBOARD_SCREENSHOT"):
                page.screenshot(path=os.environ["BANDITGATE_DASHBOARD_SCREENSHOT"], full_page=True)

            # Editing a hyperparameter persists.
            page.fill("#cfg-hyperparameters", '{"alpha": 0.25, "budget": 0.25, "horizon": 40}')
            page.click("#cfg-save")
            page.wait_for_function("() => window.__dashboard.saved === 2 || window.__dashboard.saveError")
            saved = httpx.get(f"{url}/admin/tenants/acme/routers/support", headers=admin_headers()).json()
            assert (
                saved["hyperparameters"] == {"alpha": 0.25, "budget": 0.25, "horizon": 40}
                and saved["version"] == 2
            )
            assert saved["arms"] == ["small-model", "large-model"] and saved["is_default"] is True

            # A bad value is refused with the API's reason, and nothing changes.
            page.fill("#cfg-hyperparameters", '{"alpha": -1}')
            page.click("#cfg-save")
            page.wait_for_selector("#cfg-result.error:has-text('hyperparameter alpha')")
            again = httpx.get(f"{url}/admin/tenants/acme/routers/support", headers=admin_headers()).json()
            assert again["hyperparameters"]["alpha"] == 0.25 and again["version"] == 2

            # The key survives a reload (sessionStorage) and the page shows the saved value.
            page.reload()
            wait_ready(page)
            assert '"alpha": 0.25' in page.input_value("#cfg-hyperparameters")

            # A router with a cost target and an incumbent: the panel shows the API's figures.
            feed_guarded(url)
            page.reload()  # the router list is read at sign-in
            wait_ready(page)
            page.select_option("#router", "guarded")
            wait_ready(page)
            query = page.evaluate("window.__statsQuery")
            assert query["router"] == "guarded"
            params = {k: query[k] for k in ("since", "until", "bucket")}
            guarded = httpx.get(
                f"{url}/admin/tenants/acme/routers/guarded/stats", params=params, headers=admin_headers()
            ).json()
            trusted = guarded["trusted"]
            assert page.evaluate("window.__trusted") == trusted
            assert trusted["pacing"]["requests"] == 24 and trusted["safety"]["checked"] == 24
            rows = page.locator("#trusted-figures tbody tr")
            assert rows.count() == 17  # pacing 6, safety 9, conflict 2
            for i in range(rows.count()):
                group, field = str(rows.nth(i).get_attribute("data-field")).split(".")
                assert json.loads(str(rows.nth(i).get_attribute("data-value"))) == trusted[group][field]
            assert "large-model" in page.inner_text("#trusted-figures")
            # the floor against the cost target: in words when it holds the spend over it, else not shown
            conflict = trusted["conflict"]
            assert conflict is not None and conflict["cost_target"] == 0.002
            if conflict["floor_over_target"]:
                assert page.inner_text("#trusted-conflict") == conflict["message"]
            else:
                assert page.is_hidden("#trusted-conflict") and conflict["message"] is None
            note = page.inner_text("#trusted-note")
            assert f"event {trusted['last_event_id']}" in note and "24 decisions checked" in note
            # ...and the warm-start panel the logged rows, per model
            warm = guarded["warm_start"]
            assert page.evaluate("window.__warmStart") == warm
            assert (warm["stored"], warm["folded"], warm["pending"]) == (3, 3, 0)
            cells = {
                str(r.get_attribute("data-model")): [c.strip() for c in r.locator("td").all_inner_texts()]
                for r in page.locator("#warm-start-models tbody tr").all()
            }
            assert cells == {
                "large-model": ["large-model", "1", "1", "0", "1"],
                "small-model": ["small-model", "2", "2", "0", "0.75"],
            }
            assert "3 offline observations logged, 3 learned" in page.inner_text("#warm-start-note")
            page.screenshot(path=str(tmp_path / "dashboard-trusted.png"), full_page=True)
            assert errors == []
        finally:
            browser.close()
