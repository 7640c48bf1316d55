"""Two gateway processes on the same Postgres and Redis: feedback sent to one changes the other."""

from __future__ import annotations

import time

import httpx

from tests.conftest import Stack, bearer, unique
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
