"""Two gateway processes on the same Postgres and Redis: feedback sent to one changes the other, and
they play the same cost multiplier and incumbent fallbacks at equal event watermarks."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.conftest import Stack, admin_headers, bearer, unique
from tests.integration.processes import gateway_process, provision


def test_feedback_to_one_process_changes_the_others_scores(pg_stack: Stack) -> None:
    stream = unique("bg:test-stream")
    with (
        gateway_process(pg_stack.database_url, stream) as a,
        gateway_process(pg_stack.database_url, stream) as b,
    ):
        p = provision(a, "linucb")
        arm, key = p.arm, p.key
        prompt = {"prompt": "the same question, asked of both replicas"}
        before = httpx.post(f"{b}/route", json=prompt, headers=bearer(key)).json()["scores"][arm]
        decision = httpx.post(f"{a}/route", json=prompt, headers=bearer(key)).json()
        sent = time.monotonic()
        ack = httpx.post(
            f"{a}/feedback", json={"decision_id": decision["decision_id"], "reward": 1.0}, headers=bearer(key)
        )
        assert ack.status_code == 202
        while True:
            after = httpx.post(f"{b}/route", json=prompt, headers=bearer(key)).json()["scores"][arm]
            if after["n"] == 1.0:
                break
            assert time.monotonic() - sent < 10, "replica B did not fold the event within 10 s"
            time.sleep(0.05)
        assert after["estimate"] > before["estimate"] and after["bonus"] < before["bonus"]
        # B's own decision on the same prompt can be fed back to it, and A learns it too.
        d2 = httpx.post(f"{b}/route", json=prompt, headers=bearer(key)).json()
        httpx.post(
            f"{b}/feedback", json={"decision_id": d2["decision_id"], "reward": 0.0}, headers=bearer(key)
        )
        deadline = time.monotonic() + 10
        while httpx.post(f"{a}/route", json=prompt, headers=bearer(key)).json()["scores"][arm]["n"] != 2.0:
            assert time.monotonic() < deadline, "replica A did not fold B's event within 10 s"
            time.sleep(0.05)


def _stats_trusted(url: str, tenant: str, router: str) -> dict[str, Any]:
    response = httpx.get(
        f"{url}/admin/tenants/{tenant}/routers/{router}/stats", headers=admin_headers(), timeout=10
    )
    response.raise_for_status()
    trusted: dict[str, Any] = response.json()["trusted"]
    return trusted


def _at_watermark(urls: list[str], tenant: str, router: str, event_id: int) -> list[dict[str, Any]]:
    """Each replica's trusted figures once it has folded up to ``event_id`` (and nothing newer exists)."""
    deadline = time.monotonic() + 10
    while True:
        figures = [_stats_trusted(u, tenant, router) for u in urls]
        if all(f["last_event_id"] == event_id for f in figures):
            return figures
        assert time.monotonic() < deadline, f"replicas did not reach event {event_id}: {figures}"
        time.sleep(0.05)


def _probe(url: str, key: str, router: str, seed: int) -> tuple[str, bool, float | None]:
    body = {"router": router, "prompt": f"probe prompt {seed}", "seed": seed}
    info = httpx.post(f"{url}/route", json=body, headers=bearer(key)).json()["info"]
    return info.get("proposed", ""), info["incumbent_forced"], info.get("conservative_margin")


@pytest.mark.slow
def test_two_replicas_play_the_same_lambda_and_incumbent_fallbacks_at_equal_watermarks(
    pg_stack: Stack,
) -> None:
    """A cost_target router and a conservative one (Thompson sampling over three priced models), driven
    through two gateway processes with interleaved /route + /feedback: at each of two equal event
    watermarks both replicas report the same lambda_t, spend and margins, and the same seeded prompt
    gets the same choice and the same forced / not-forced verdict on both."""
    stream = unique("bg:test-stream")
    with (
        gateway_process(pg_stack.database_url, stream) as a,
        gateway_process(pg_stack.database_url, stream) as b,
    ):
        h = admin_headers()
        tenant, arms = unique("t"), [unique(f"m{i}") for i in range(3)]
        httpx.post(f"{a}/admin/tenants", json={"name": tenant}, headers=h).raise_for_status()
        prices = {arm: 0.001 * (i + 1) for i, arm in enumerate(arms)}
        for arm in arms:
            body = {"name": arm, "base_url": "http://127.0.0.1:9/v1", "usd_per_call": prices[arm]}
            httpx.post(f"{a}/admin/backends", json=body, headers=h).raise_for_status()
        key = httpx.post(f"{a}/admin/tenants/{tenant}/keys", json={}, headers=h).json()["key"]
        routers = {
            "paced": {"cost_target": 0.0015, "pacing_rate": 0.2},
            "safe": {"incumbent": arms[2], "max_loss": 0.2},
        }
        for name, hp in routers.items():
            body = {"name": name, "policy": "thompson", "arms": arms, "hyperparameters": hp}
            httpx.post(f"{a}/admin/tenants/{tenant}/routers", json=body, headers=h).raise_for_status()
        success = {arms[0]: 0.0, arms[1]: 1.0, arms[2]: 1.0}  # the dearest is the incumbent

        last = {name: 0 for name in routers}
        verdicts: list[tuple[str, bool, float | None]] = []
        for stage, rounds in enumerate((8, 40)):
            for i in range(rounds):
                url = (a, b)[i % 2]
                for name in routers:
                    decision = httpx.post(
                        f"{url}/route", json={"router": name, "prompt": f"s{stage} q{i}"}, headers=bearer(key)
                    ).json()
                    model = decision["model"]
                    body = {
                        "decision_id": decision["decision_id"],
                        "reward": success[model],
                        "cost": prices[model],
                    }
                    ack = httpx.post(f"{(b, a)[i % 2]}/feedback", json=body, headers=bearer(key))
                    assert ack.status_code == 202, ack.text
                    last[name] = max(last[name], int(ack.json()["event_id"]))
            paced = _at_watermark([a, b], tenant, "paced", last["paced"])
            assert paced[0]["pacing"] == paced[1]["pacing"]
            assert paced[0]["pacing"]["requests"] == 8 + 40 * stage
            safe = _at_watermark([a, b], tenant, "safe", last["safe"])
            assert safe[0]["safety"] == safe[1]["safety"]
            for seed in range(8):
                on_a, on_b = _probe(a, key, "safe", seed), _probe(b, key, "safe", seed)
                assert on_a == on_b
                verdicts.append(on_a)
        lam = _stats_trusted(a, tenant, "paced")["pacing"]["cost_multiplier"]
        assert lam > 0  # the pacer moved: the run overspent its target at some point
        forced = [v[1] for v in verdicts]
        assert any(forced) and not all(forced), verdicts  # the check both bound and let through
