"""Declared priors that the gateway must refuse, through the admin API (``PUT .../priors``, and
``priors`` in the hyperparameters of a PATCH) on both stacks, and through ``banditgate warm-start
--prior``: each is a 422 (exit 2 for the CLI) that names the field, and the router is left unchanged.
What accepted priors do is tests/integration/test_priors_set.py."""

from __future__ import annotations

from typing import Any

import httpx

from app.main import create_app
from tests.conftest import ADMIN_KEY, Stack, admin_headers, error_text, make_tenancy, running, unique
from tests.integration.processes import gateway_process, make_remote_tenancy
from tests.integration.test_warm_start import run_cli


def priors_url(tenant: str, router: str = "main") -> str:
    return f"/admin/tenants/{tenant}/routers/{router}/priors"


async def test_bad_priors_are_422s_naming_the_field_and_change_nothing(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client, policy="greedy", reward_range=(0.0, 1.0))
        h = admin_headers()
        router_url = f"/admin/tenants/{t.tenant}/routers/main"
        before = (await client.get(router_url, headers=h)).json()
        first, second = t.arms
        good = {"mean": 0.5, "weight": 10}
        cases: list[tuple[dict[str, Any], list[str], str]] = [
            (
                {"not-an-arm": good},
                ["body", "priors"],
                f"priors name ['not-an-arm'], which are not arms of the router; its arms: {t.arms}",
            ),
            (
                {first: {"mean": 1.5, "weight": 10}},
                ["body", "priors"],
                f"prior mean 1.5 of '{first}' is outside the router's reward_range [0.0, 1.0]",
            ),
            ({first: {"mean": 0.5, "weight": 0}}, ["body", "priors", first, "weight"], "greater than 0"),
            ({first: {"mean": "0.5", "weight": 1}}, ["body", "priors", first, "mean"], "valid number"),
            ({first: {"mean": 0.5}}, ["body", "priors", first, "weight"], "Field required"),
            ({first: {**good, "std": 1}}, ["body", "priors", first, "std"], "Extra inputs"),
        ]
        for priors, loc, needle in cases:
            response = await client.put(priors_url(t.tenant), json={"priors": priors}, headers=h)
            assert response.status_code == 422, (priors, response.text)
            assert needle in error_text(response), (needle, response.text)
            assert response.json()["detail"][0]["loc"] == loc, response.text

        # A PATCH whose hyperparameters declare a prior of a model that is not an arm: the same refusal.
        patch = {"hyperparameters": {"priors": {"not-an-arm": good, second: good}}}
        response = await client.patch(router_url, json=patch, headers=h)
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", "hyperparameters", "priors"]
        assert "not arms of the router" in error_text(response)

        # A policy that keeps no per-model statistic of a single choice (a set policy) takes no priors.
        set_router = {"name": "sets", "policy": "c2mab-v", "arms": t.arms, "hyperparameters": {}}
        created = await client.post(f"/admin/tenants/{t.tenant}/routers", json=set_router, headers=h)
        assert created.status_code == 201, created.text
        response = await client.put(priors_url(t.tenant, "sets"), json={"priors": {first: good}}, headers=h)
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", "priors"]
        assert "policy 'c2mab-v' refuses these priors" in error_text(response)

        unknown = await client.put(priors_url(t.tenant, "nope"), json={"priors": {}}, headers=h)
        assert unknown.status_code == 404
        after = (await client.get(router_url, headers=h)).json()
        assert (after["version"], after["hyperparameters"]) == (before["version"], before["hyperparameters"])


def test_cli_refuses_bad_priors_with_exit_2_and_one_line(pg_stack: Stack) -> None:
    """Specs that do not parse stop before any request; a model that is not an arm stops before the
    PUT; a prior the gateway refuses (its mean outside the reward range) is the gateway's message."""
    with gateway_process(pg_stack.database_url, unique("bg:test-stream")) as url:
        remote = make_remote_tenancy(url, policy="greedy")
        arm = remote.arms[0]
        common = ["--gateway", url, "--admin-key", ADMIN_KEY, "--tenant", remote.tenant, "--router", "main"]
        cases = [
            ([f"{arm}=0.8"], "expected MODEL=MEAN:WEIGHT"),
            ([f"{arm}=high:20"], "MEAN and WEIGHT must be numbers"),
            ([f"{arm}=0.8:0"], "WEIGHT a finite number > 0"),
            ([f"{arm}=0.8:2", f"{arm}=0.7:3"], f"'{arm}' is given twice"),
            (["not-an-arm=0.8:2"], "--prior names ['not-an-arm'], not arms of the router"),
            ([f"{arm}=1.5:2"], f"prior mean 1.5 of '{arm}' is outside the router's reward_range"),
        ]
        for specs, needle in cases:
            done = run_cli(*common, *(arg for spec in specs for arg in ("--prior", spec)))
            assert done.returncode == 2, (specs, done.stdout, done.stderr)
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], done.stderr
        nothing = run_cli(*common)
        assert nothing.returncode == 2
        assert "pass --dataset, --jsonl, --from-direct-calls or --prior" in nothing.stderr
        router = httpx.get(f"{url}/admin/tenants/{remote.tenant}/routers/main", headers=admin_headers())
        assert "priors" not in router.json()["hyperparameters"]
