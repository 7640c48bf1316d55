"""``banditgate demo`` as a newcomer runs it, then its dashboard in a real browser.

The demo runs as its own process in an empty directory (SQLite, the hashing embedder for speed); the
commands it prints are run as printed by ``bash`` with a PATH that holds no virtualenv: the ``curl`` to
try, and the replay evaluator that feeds it the demo's 240 rows ("watch it learn"). Then headless
Chromium (Debian's package, never installed by this test: it fails when ``chromium`` is missing, as CI
must have it) signs in to the dashboard on the last 5 minutes in 5-second buckets, and every figure it
shows of the learned state is checked against the stats and decisions APIs: the summary (decisions,
feedback by kind, cost records apart, savings against the incumbent, the floor's margin), the charts,
the incumbent panel and the decisions with their reward and cost. A second run of the demo on the same
directory keeps its key and starts the tenant afresh, so the README walk-through's step 1 (creating a
router) is a 201 again. ``/docs`` renders its operations with every request off the gateway refused.

Screenshots go to the test's tmp dir, and to ``$BANDITGATE_DEMO_SCREENSHOT`` when that is set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page, Route, sync_playwright

from tests.integration.processes import wait_until_ready
from tests.integration.test_dashboard_browser import CHROMIUM_ARGS, expected_charts, wait_ready
from tests.served import free_port

REPO = Path(__file__).resolve().parents[2]
ROWS = 240  # the demo dataset's rows: what the printed evaluator command sends


@dataclass
class Demo:
    url: str
    directory: Path
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def printed(self, label: str) -> str:
        """The value after ``label`` on the demo's banner (``API key``, ``admin key``)."""
        for line in self.lines:
            found = re.match(rf"\s+{label}\s+(\S+)", line)
            if found:
                return found.group(1)
        raise AssertionError(f"no {label!r} line in the demo's output: {self.lines}")

    def command_after(self, heading: str) -> str:
        """The shell command printed under ``heading`` (continuation lines joined)."""
        start = next(i for i, line in enumerate(self.lines) if line.startswith(heading)) + 1
        command = []
        for line in self.lines[start:]:
            command.append(line.strip())
            if not line.rstrip().endswith("\\"):
                break
        return " ".join(c.removesuffix("\\").strip() for c in command)


def shell_env(directory: Path) -> dict[str, str]:
    """A fresh shell's environment: no virtualenv on PATH; PYTHONPATH kept only because this checkout
    may not be installed into that virtualenv (CI's scripts/test.sh installs it)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(directory), "LANG": "C.UTF-8"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def start_demo(directory: Path, port: int, *extra: str) -> Demo:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BANDITGATE_")}
    env |= {
        "BANDITGATE_DATABASE_URL": f"sqlite+aiosqlite:///{directory / 'demo.db'}",
        "BANDITGATE_EMBEDDER": "hashing",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "demo", "--port", str(port), *extra],
        cwd=directory,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    demo = Demo(f"http://127.0.0.1:{port}", directory, process)
    assert process.stdout is not None
    stdout = process.stdout
    threading.Thread(target=lambda: demo.lines.extend(iter(stdout.readline, "")), daemon=True).start()
    try:
        wait_until_ready(process, demo.url, 90)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the demo printed: {demo.lines}") from exc
    return demo


def stop(demo: Demo) -> None:
    demo.process.terminate()
    demo.process.wait(timeout=30)


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium")
    assert found, (
        "chromium is missing: apt-get install -y chromium (Debian's package; the test installs nothing)"
    )
    return found


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Demo, str]]:
    """The demo after its printed commands ran; yields it and what the evaluator printed."""
    directory = tmp_path_factory.mktemp("demo")
    demo = start_demo(directory, free_port())
    try:
        env = shell_env(directory)
        tried = subprocess.run(
            ["bash", "-c", demo.command_after("Try it:")], env=env, capture_output=True, text=True, timeout=60
        )
        assert tried.returncode == 0, tried.stderr
        assert json.loads(tried.stdout)["model"] in ("demo-small", "demo-large")
        watch = demo.command_after("Watch it learn")
        assert not watch.startswith("banditgate "), "a command on no PATH of a fresh shell"
        evaluated = subprocess.run(
            ["bash", "-c", watch], env=env, capture_output=True, text=True, timeout=600
        )
        assert evaluated.returncode == 0, evaluated.stderr
        yield demo, evaluated.stdout
    finally:
        stop(demo)


def api(demo: Demo, path: str, **params: str) -> Any:
    headers = {"Authorization": f"Bearer {demo.printed('admin key')}"}
    response = httpx.get(f"{demo.url}{path}", params=params, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def card_values(page: Page) -> dict[str, Any]:
    cards = page.locator("#summary > div[data-field]")
    return {
        str(cards.nth(i).get_attribute("data-field")): json.loads(
            str(cards.nth(i).get_attribute("data-value"))
        )
        for i in range(cards.count())
    }


def stats_value(stats: dict[str, Any], path: str) -> Any:
    value: Any = stats
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def test_the_dashboard_shows_what_the_demo_learned(
    chromium: str, learned: tuple[Demo, str], tmp_path: Path
) -> None:
    demo, evaluated = learned
    last = evaluated.strip().splitlines()[-1]
    assert re.fullmatch(rf"{ROWS} rows, mean reward 0\.\d+, errors 0", last), evaluated
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 1400})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            dashboard = demo.command_after("and on the dashboard")  # as the demo prints it
            assert "range=router" in dashboard
            page.goto(dashboard)
            page.fill("#admin-key", demo.printed("admin key"))
            page.click("#signin-form button")
            page.wait_for_selector("#board:not([hidden])")
            assert page.is_checked("#live")  # ?live=1
            page.uncheck("#live")  # the figures below are compared with one stats answer
            wait_ready(page)
            query = page.evaluate("window.__statsQuery")
            # since the router was created, "auto" buckets: 5 seconds on the demo's minute or two
            assert (query["tenant"], query["router"], query["bucket"]) == ("demo", "demo", "5s")
            router = api(demo, "/admin/tenants/demo/routers/demo")
            created = datetime.fromisoformat(router["created_at"])
            assert abs((datetime.fromisoformat(query["since"]) - created).total_seconds()) < 1
            params = {k: query[k] for k in ("since", "until", "bucket")}
            stats = api(demo, "/admin/tenants/demo/routers/demo/stats", **params)

            # what the demo learned: every row and the tried prompt decided, each row's reward fed back,
            # each forwarded call's cost recorded by the gateway (not counted as feedback)
            kinds = stats["feedback_by_kind"]
            assert stats["decisions"] == ROWS + 1 and kinds["bandit"] == ROWS
            assert stats["feedback"] == sum(n for kind, n in kinds.items() if kind != "cost")
            assert kinds["cost"] >= ROWS
            safety = stats["trusted"]["safety"]
            assert (safety["incumbent"], safety["max_loss"]) == ("demo-large", 0.05)
            assert safety["checked"] == ROWS + 1 and safety["floor_margin"] is not None
            assert safety["off_incumbent"] > 0 and safety["cost_saved"] > 0, safety

            shown = card_values(page)
            for path, value in shown.items():
                assert value == stats_value(stats, path), path
            assert set(shown) >= {
                "decisions",
                "feedback",
                "feedback_by_kind.cost",
                "trusted.safety.cost_saved_share",
                "trusted.safety.off_share",
                "trusted.safety.floor_margin",
            }
            assert page.evaluate("window.__charts") == expected_charts(stats)
            assert len(stats["buckets"]) >= 2
            assert page.evaluate("window.__trusted") == stats["trusted"]
            assert page.is_visible("#trusted")

            # the latest decisions with the reward and cost the API reports for each
            listed = api(demo, "/admin/decisions", tenant="demo", router="demo", limit="15")["items"]
            rows = page.locator("#decisions tbody tr[data-id]")
            assert rows.count() == 15
            for i, item in enumerate(listed):
                row = rows.nth(i)
                assert row.get_attribute("data-id") == item["id"]
                reward = json.loads(str(row.get_attribute("data-reward")))
                cost = json.loads(str(row.get_attribute("data-cost")))
                assert (reward, cost) == (item["reward"], item["cost"])
            assert all(item["reward"] is not None and item["cost"] > 0 for item in listed)
            rows.first.click()
            page.wait_for_selector("#decision-detail table")
            assert "characters" in page.inner_text("#decision-detail")

            page.screenshot(path=str(tmp_path / "demo-dashboard.png"), full_page=True)
            if os.environ.get("BANDITGATE_DEMO_SCREENSHOT"):
                page.screenshot(path=os.environ["BANDITGATE_DEMO_SCREENSHOT"], full_page=True)
            # live: the page asks the API again by itself every 5 seconds
            before = page.evaluate("window.__dashboard.generation")
            page.check("#live")
            page.wait_for_function(f"() => window.__dashboard.generation > {before}", timeout=15_000)
            assert errors == []
        finally:
            browser.close()


def test_docs_render_with_nothing_but_the_gateway(chromium: str, learned: tuple[Demo, str]) -> None:
    demo, _ = learned
    outside: list[str] = []

    def only_the_gateway(route: Route) -> None:
        if urlsplit(route.request.url).netloc == urlsplit(demo.url).netloc:
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.route("**/*", only_the_gateway)
            page.goto(f"{demo.url}/docs")
            page.wait_for_selector(".opblock", timeout=30_000)
            assert page.locator(".opblock").count() >= 20
            assert "banditgate" in page.inner_text(".info")
            assert outside == []
        finally:
            browser.close()


def test_a_second_run_keeps_the_key_and_starts_afresh(tmp_path: Path) -> None:
    port = free_port()
    first = start_demo(tmp_path, port)
    try:
        key, admin = first.printed("API key"), first.printed("admin key")
        headers = {"Authorization": f"Bearer {admin}"}
        step_1 = {"name": "qa", "policy": "linucb", "arms": ["demo-small", "demo-large"]}
        created = httpx.post(f"{first.url}/admin/tenants/demo/routers", json=step_1, headers=headers)
        assert created.status_code == 201, created.text
    finally:
        stop(first)
    second = start_demo(tmp_path, port)
    try:
        assert (second.printed("API key"), second.printed("admin key")) == (key, admin)
        assert "started afresh" in "".join(second.lines)
        again = httpx.post(f"{second.url}/admin/tenants/demo/routers", json=step_1, headers=headers)
        assert again.status_code == 201, again.text
        routed = httpx.post(
            f"{second.url}/route", json={"prompt": "hi"}, headers={"Authorization": f"Bearer {key}"}
        )
        assert routed.status_code == 200, routed.text
        env_file = (tmp_path / ".banditgate" / "demo.env").read_text()
        assert f"export KEY={key}\n" in env_file
    finally:
        stop(second)
