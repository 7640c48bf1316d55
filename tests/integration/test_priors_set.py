"""Declared priors accepted: ``PUT .../priors`` (both stacks) and ``banditgate warm-start --prior``
(against a gateway process) store them in the router's ``priors`` hyperparameter, replace and clear
them, and the policy reads them as evidence at once (greedy, which keeps per-model means
m_a = (S_a + w_a mean_a) / (N_a + w_a), routes to the model the priors favour from the first request).
The refusals are tests/integration/test_priors_refused.py."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from app.main import create_app
from tests.conftest import ADMIN_KEY, Stack, admin_headers, bearer, make_tenancy, running, unique
from tests.integration.processes import gateway_process, make_remote_tenancy
from tests.integration.test_warm_start import run_cli


def priors_of(low: str, high: str) -> dict[str, dict[str, float]]:
    return {low: {"mean": 0.2, "weight": 10.0}, high: {"mean": 0.9, "weight": 10.0}}


async def test_priors_are_set_replaced_and_cleared_and_steer_the_first_choice(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client, policy="greedy")
        h = admin_headers()
        router_url = f"/admin/tenants/{t.tenant}/routers/main"
        first, second = t.arms
        version = (await client.get(router_url, headers=h)).json()["version"]

        async def routed() -> str:
            response = await client.post("/route", json={"prompt": "hello"}, headers=bearer(t.key))
            assert response.status_code == 200, response.text
            return str(response.json()["model"])

        response = await client.put(
            f"{router_url}/priors", json={"priors": priors_of(first, second)}, headers=h
        )
        assert response.status_code == 200, response.text
        assert response.json()["hyperparameters"] == {"priors": priors_of(first, second)}
        assert response.json()["version"] == version + 1
        assert {await routed() for _ in range(3)} == {second}  # 0.9 > 0.2, before any feedback

        swapped = await client.put(
            f"{router_url}/priors", json={"priors": priors_of(second, first)}, headers=h
        )
        assert swapped.status_code == 200 and swapped.json()["hyperparameters"]["priors"] == priors_of(
            second, first
        )
        assert await routed() == first

        cleared = await client.put(f"{router_url}/priors", json={"priors": {}}, headers=h)
        assert cleared.status_code == 200 and cleared.json()["hyperparameters"] == {}
        assert cleared.json()["version"] == version + 3

        # The same key through PATCH's hyperparameters.
        patched = await client.patch(
            router_url, json={"hyperparameters": {"priors": priors_of(first, second)}}, headers=h
        )
        assert patched.status_code == 200, patched.text
        assert await routed() == second


def test_cli_sends_priors_alone_and_before_logs(pg_stack: Stack, tmp_path: Path) -> None:
    with gateway_process(pg_stack.database_url, unique("bg:test-stream")) as url:
        remote = make_remote_tenancy(url, policy="greedy")
        first, second = remote.arms
        common = ["--gateway", url, "--admin-key", ADMIN_KEY, "--tenant", remote.tenant, "--router", "main"]
        router_url = f"{url}/admin/tenants/{remote.tenant}/routers/main"

        alone = run_cli(*common, "--prior", f"{first}=0.2:10", "--prior", f"{second}=0.9:10")
        assert alone.returncode == 0, alone.stderr
        assert alone.stdout.strip() == f"priors set (mean x weight): {first} 0.2 x 10, {second} 0.9 x 10"
        stored = httpx.get(router_url, headers=admin_headers()).json()["hyperparameters"]
        assert stored == {"priors": priors_of(first, second)}
        decision = httpx.post(f"{url}/route", json={"prompt": "hello"}, headers=bearer(remote.key))
        assert decision.json()["model"] == second

        # With logs: the priors are replaced first, then the rows are uploaded and learned on top of them.
        jsonl = tmp_path / "rows.jsonl"
        rows = [{"prompt": f"question {i}", "model": second, "reward": 0.0} for i in range(40)]
        jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows))
        both = run_cli(*common, "--prior", f"{first}=0.5:2", "--jsonl", str(jsonl))
        assert both.returncode == 0, both.stderr
        assert both.stdout.splitlines() == [
            f"priors set (mean x weight): {first} 0.5 x 2",
            "40 rows sent: 40 new, 0 already held (not learned again); 0 skipped (model not an arm of the router)",
        ]
        stored = httpx.get(router_url, headers=admin_headers()).json()["hyperparameters"]
        assert stored == {"priors": {first: {"mean": 0.5, "weight": 2.0}}}
        # second: 40 rewards of 0 (mean 0); first: its prior alone (mean 0.5)
        decision = httpx.post(f"{url}/route", json={"prompt": "hello"}, headers=bearer(remote.key))
        assert decision.json()["model"] == first
