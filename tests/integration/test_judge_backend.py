"""A judge inside the gateway: a router's ``judge`` names a catalog backend and a rubric, and the gateway
asks that backend (the replay backends' ``replay-judge``, which answers an answer's logged grade) to grade
each answer of a judged cascade and each pending probe. The judge's calls are attempts of the decision
and their cost is in the judged call's cost event; a judge that fails never fails the client."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from sqlalchemy import update

from app.api.http_limits import HttpLimits
from app.judge_prompt import TEMPLATE, render
from app.replay_backends import REPLAY_JUDGE, ReplayDataset, replay_app
from app.settings import Settings
from app.store.models import Router
from tests.conftest import Stack, admin_headers, bearer, running, unique
from tests.fake_backend import FakeBackends
from tests.integration.test_forwarding import add_tenant, attempts_of, events_of, gateway_app, prefer
from tests.integration.test_probes import drain, probes_of
from tests.served import served

KEY = "rpl_judge-test-key"
RUBRIC = "The answer is correct and complete."
HARD, EASY = "What is the 10th Fibonacci number?", "What is 2 + 2?"
# (model, prompt) -> (logged reward, logged answer)
LOGGED = {
    ("cheap", HARD): (0.2, "It is 34."),
    ("dear", HARD): (0.9, "F(10) = 55."),
    ("cheap", EASY): (0.8, "4"),
    ("dear", EASY): (1.0, "2 + 2 = 4"),
}
PRICES = {"cheap": (0.5, 1.0), "dear": (10.0, 30.0), REPLAY_JUDGE: (1.0, 2.0)}  # USD per M tokens in/out


def write_dataset(directory: Path) -> Path:
    models = [{"name": m, "usd_per_mtok_in": i, "usd_per_mtok_out": o} for m, (i, o) in PRICES.items()]
    (directory / "models.json").write_text(json.dumps({"models": models[:2], "reward_range": [0, 1]}))
    rows = []
    for n, prompt in enumerate((HARD, EASY)):
        rows.append(
            {
                "id": f"r{n}",
                "prompt": prompt,
                "rewards": {m: LOGGED[(m, prompt)][0] for m in ("cheap", "dear")},
                "responses": {m: LOGGED[(m, prompt)][1] for m in ("cheap", "dear")},
            }
        )
    (directory / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return directory


def replay(directory: Path) -> FastAPI:
    return replay_app(ReplayDataset.read(directory), KEY, HttpLimits.of(Settings(max_body_bytes=64 * 1024)))


def tokens(chars: int) -> int:
    return math.ceil(chars / 4)


def answer_cost(model: str, prompt: str) -> float:
    price_in, price_out = PRICES[model]
    return (tokens(len(prompt)) * price_in + tokens(len(LOGGED[(model, prompt)][1])) * price_out) / 1e6


def judge_cost(prompt: str, answer: str, reply: str) -> float:
    """The replay judge's usage: its message and reply in characters / 4, at its prices."""
    message = render(TEMPLATE, prompt, answer, RUBRIC)
    price_in, price_out = PRICES[REPLAY_JUDGE]
    return (tokens(len(message)) * price_in + tokens(len(reply)) * price_out) / 1e6


async def add(client: httpx.AsyncClient, base_url: str, model: str, **fields: object) -> str:
    price_in, price_out = PRICES.get(model, (1.0, 2.0))
    body = {
        "name": unique(model),
        "base_url": base_url,
        "usd_per_mtok_in": price_in,
        "usd_per_mtok_out": price_out,
        "api_key": KEY,
        "timeout_s": 2.0,
        **fields,
    }
    made = await client.post("/admin/backends", json=body, headers=admin_headers())
    assert made.status_code == 201, made.text
    return str(body["name"])


async def judged_tenant(
    client: httpx.AsyncClient, url: str, judge: str, **router: Any
) -> tuple[str, str, str]:
    """A greedy router over cheap and dear (cheap first on both prompts) judged by ``judge``: its key,
    cheap's and dear's backend names, its tenant."""
    cheap, dear = await add(client, f"{url}/cheap/v1", "cheap"), await add(client, f"{url}/dear/v1", "dear")
    tenant = unique("t")
    key = await add_tenant(client, [cheap, dear], tenant=tenant, **router)
    patch = {"judge": {"backend": judge, "rubric": RUBRIC, "threshold": 0.5}}
    made = await client.patch(f"/admin/tenants/{tenant}/routers/main", json=patch, headers=admin_headers())
    assert made.status_code == 200, made.text
    assert made.json()["judge"] == {
        "backend": judge,
        "rubric": RUBRIC,
        "threshold": 0.5,
        "url": None,
        "template": None,
    }
    for prompt in (HARD, EASY):
        await prefer(client, key, cheap, prompt=prompt)
    return key, cheap, dear, tenant


def chat(prompt: str) -> dict[str, Any]:
    return {"prompt": prompt, "forward": True, "request": {"messages": [{"role": "user", "content": prompt}]}}


async def test_the_cascade_stops_on_the_backend_judges_score(stack: Stack, tmp_path: Path) -> None:
    app = gateway_app(stack)
    async with served(replay(write_dataset(tmp_path))) as url, running(app) as client:
        judge = await add(client, f"{url}/{REPLAY_JUDGE}/v1", REPLAY_JUDGE)
        key, cheap, dear, _ = await judged_tenant(client, url, judge)

        # cheap's logged grade on the hard prompt is 0.2 < 0.5: the judge fails it, dear's 0.9 passes
        hard = await client.post("/route", json=chat(HARD), headers=bearer(key))
        assert hard.status_code == 200, hard.text
        done = hard.json()
        assert [(s["model"], s["score"], s["passed"]) for s in done["judged"]] == [
            (cheap, 0.2, False),
            (dear, 0.9, True),
        ]
        assert (
            done["backend"] == dear and done["response"]["choices"][0]["message"]["content"] == "F(10) = 55."
        )
        judged = [
            judge_cost(HARD, "It is 34.", '{"score": 0.2}'),
            judge_cost(HARD, "F(10) = 55.", '{"score": 0.9}'),
        ]
        assert [s["judge_cost"] for s in done["judged"]] == pytest.approx(judged)
        step_costs = [answer_cost("cheap", HARD) + judged[0], answer_cost("dear", HARD) + judged[1]]
        assert [s["cost"] for s in done["judged"]] == pytest.approx(step_costs)
        assert done["cost"] == pytest.approx(sum(step_costs))

        decision_id = done["decision_id"]
        assert await attempts_of(app, decision_id) == [
            (cheap, "ok", 200),
            (judge, "ok", 200),
            (dear, "ok", 200),
            (judge, "ok", 200),
        ]
        # each call's cost event carries its judge's; the failed step, which the client never saw, is
        # learned at once (its reward the score in the router's range); the served answer's is the client's
        events = [(e.model, e.kind, e.reward, e.cost) for e in await events_of(app, decision_id)]
        assert events == [
            (cheap, "cost", None, pytest.approx(step_costs[0])),
            (cheap, "cascade-step", 0.2, None),
            (dear, "cost", None, pytest.approx(step_costs[1])),
        ]

        easy = (await client.post("/route", json=chat(EASY), headers=bearer(key))).json()
        assert [(s["model"], s["score"], s["passed"]) for s in easy["judged"]] == [(cheap, 0.8, True)]
        assert easy["backend"] == cheap


@pytest.mark.parametrize(
    ("behaviour", "outcome"),
    [("status-500", "http_error"), ("ok", "ok"), ("hang", "timeout")],  # "ok" answers text with no score
)
async def test_a_failing_judge_backend_does_not_fail_the_client(
    sqlite_stack: Stack, fake: FakeBackends, tmp_path: Path, behaviour: str, outcome: str
) -> None:
    app = gateway_app(sqlite_stack, judge_timeout_s=0.3)
    async with served(replay(write_dataset(tmp_path))) as url, running(app) as client:
        judge = await add(client, fake.url(behaviour), "judge")
        key, cheap, _, _ = await judged_tenant(client, url, judge)
        response = await client.post("/route", json=chat(HARD), headers=bearer(key))
        assert response.status_code == 200, response.text
        done = response.json()
        assert [(s["model"], s["score"], s["passed"]) for s in done["judged"]] == [(cheap, None, False)]
        assert done["backend"] == cheap  # the cascade stops on a failed judge and serves what it has
        attempts = await attempts_of(app, done["decision_id"])
        assert attempts[0] == (cheap, "ok", 200)
        assert {a[0] for a in attempts[1:]} == {judge} and attempts[-1][1] == outcome
        kinds = [(e.model, e.kind) for e in await events_of(app, done["decision_id"])]
        assert kinds == [(cheap, "cost")]  # no reward from a failed judge


async def test_a_pending_probe_is_graded_by_the_routers_judge(stack: Stack, tmp_path: Path) -> None:
    """BALROG queries the other arm on every round; its stored answer is graded by the judge at once: the
    grade is the probe's query reward (the probe is answered, no longer pending) and the judge's cost is
    in the probe's cost event."""
    app = gateway_app(stack)
    async with served(replay(write_dataset(tmp_path))) as url, running(app) as client:
        judge = await add(client, f"{url}/{REPLAY_JUDGE}/v1", REPLAY_JUDGE)
        key, cheap, dear, _ = await judged_tenant(
            client, url, judge, policy="balrog", hyperparameters={"trigger": "random", "budget": 1.0}
        )
        done = (await client.post("/route", json=chat(EASY), headers=bearer(key))).json()
        served_model = done["backend"]
        other = dear if served_model == cheap else cheap
        assert done["query"] == [other]
        await drain(app)
        probes = await probes_of(app, done["decision_id"])
        assert probes[other].status == "answered"
        events = {(e.model, e.kind): e for e in await events_of(app, done["decision_id"])}
        name = "dear" if other == dear else "cheap"
        reward, answer = LOGGED[(name, EASY)]
        assert events[(other, "query")].reward == reward
        reply = json.dumps({"score": reward})
        assert events[(other, "cost")].cost == pytest.approx(
            answer_cost(name, EASY) + judge_cost(EASY, answer, reply)
        )
        assert (await client.get("/feedback/pending", headers=bearer(key))).json()["probes"] == []


async def test_a_shadow_answer_is_graded_by_the_routers_judge(stack: Stack, tmp_path: Path) -> None:
    """A router that shadows every decision: the shadow call's stored answer is graded by the judge at
    once, as a ``shadow`` reward (evidence, never the served answer's), and is no longer pending."""
    app = gateway_app(stack)
    async with served(replay(write_dataset(tmp_path))) as url, running(app) as client:
        judge = await add(client, f"{url}/{REPLAY_JUDGE}/v1", REPLAY_JUDGE)
        key, cheap, dear, _ = await judged_tenant(
            client, url, judge, policy="greedy", hyperparameters={"shadow": 1.0}
        )
        done = (await client.post("/route", json=chat(EASY), headers=bearer(key))).json()
        other = dear if done["backend"] == cheap else cheap
        await drain(app)
        probes = await probes_of(app, done["decision_id"])
        assert (probes[other].kind, probes[other].status) == ("shadow", "answered")
        events = {(e.model, e.kind): e for e in await events_of(app, done["decision_id"])}
        name = "dear" if other == dear else "cheap"
        reward, answer = LOGGED[(name, EASY)]
        assert events[(other, "shadow")].reward == reward
        assert (other, "bandit") not in events and (other, "query") not in events
        reply = json.dumps({"score": reward})
        assert events[(other, "cost")].cost == pytest.approx(
            answer_cost(name, EASY) + judge_cost(EASY, answer, reply)
        )
        assert (await client.get("/feedback/pending", headers=bearer(key))).json()["probes"] == []


async def test_judge_configuration_is_checked(sqlite_stack: Stack, fake: FakeBackends) -> None:
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        chat_arm = await add(client, fake.url("ok"), "arm")
        image_arm = await add(client, fake.url("ok"), "img", kind="image")
        tenant = unique("t")
        await add_tenant(client, [chat_arm], tenant=tenant)
        routers = f"/admin/tenants/{tenant}/routers"

        async def patch(body: dict[str, Any]) -> httpx.Response:
            return await client.patch(f"{routers}/main", json=body, headers=admin_headers())

        refused = {
            "unknown backend": {"judge": {"backend": "nope", "rubric": "r"}},
            "image judge": {"judge": {"backend": image_arm, "rubric": "r"}},
            "threshold": {"judge": {"backend": chat_arm, "rubric": "r", "threshold": 1.5}},
            "no rubric": {"judge": {"backend": chat_arm}},
            "long rubric": {"judge": {"backend": chat_arm, "rubric": "x" * 4001}},
            "template": {"judge": {"backend": chat_arm, "rubric": "r", "template": "grade {answer}"}},
            "both": {"judge": {"backend": chat_arm, "rubric": "r", "url": "http://127.0.0.1:9/j"}},
            "url threshold": {"judge": {"url": "http://127.0.0.1:9/j", "threshold": 2}},
        }
        for why, body in refused.items():
            assert (await patch(body)).status_code == 422, why
        old = await patch({"judge_url": "http://127.0.0.1:9/j", "judge_threshold": 0.5})
        assert old.status_code == 422
        assert (
            '{"judge": {"url": <judge_url>, "threshold": <judge_threshold>}}'
            in old.json()["detail"][0]["msg"]
        )

        template = 'Rubric: {rubric}\nQ: {prompt}\nA: {answer}\nReply {"score": x}.'
        ok = await patch({"judge": {"backend": chat_arm, "rubric": "r", "template": template}})
        assert ok.status_code == 200 and ok.json()["judge"]["template"] == template
        busy = await client.delete(f"/admin/backends/{chat_arm}", headers=admin_headers())
        assert busy.status_code == 409
        removed = await patch({"judge": {}})
        assert removed.status_code == 200 and removed.json()["judge"] is None

        image = {
            "name": "pics",
            "policy": "linucb",
            "arms": [image_arm],
            "judge": {"backend": chat_arm, "rubric": "r"},
        }
        made = await client.post(routers, json=image, headers=admin_headers())
        assert made.status_code == 422 and "image router" in made.text


async def test_an_admin_measures_the_judge_on_labels(stack: Stack, tmp_path: Path) -> None:
    """Labels whose true reward departs from the logged grade once (a false pass) and one answer the
    judge cannot grade: TPR 2/2, TNR 1/2, the Pearson correlation over the scored four; kept in the
    router's stats, read again by a fresh process."""
    app = gateway_app(stack)
    labels = [
        (HARD, "It is 34.", 0.2),  # judged 0.2: a fail, truly a failure
        (HARD, "F(10) = 55.", 0.9),  # judged 0.9: a pass, truly a success
        (EASY, "4", 0.3),  # judged 0.8: a pass, truly a failure
        (EASY, "2 + 2 = 4", 1.0),  # judged 1.0: a pass, truly a success
        (EASY, "no such answer", 1.0),  # no logged grade: no score
    ]
    async with served(replay(write_dataset(tmp_path))) as url, running(app) as client:
        judge = await add(client, f"{url}/{REPLAY_JUDGE}/v1", REPLAY_JUDGE)
        _, _, _, tenant = await judged_tenant(client, url, judge)
        path = f"/admin/tenants/{tenant}/routers/main"
        body = {"labels": [{"prompt": p, "answer": a, "reward": r} for p, a, r in labels]}
        response = await client.post(f"{path}/judge/labels", json=body, headers=admin_headers())
        assert response.status_code == 200, response.text
        measured = response.json()
        assert (measured["labels"], measured["failed"], measured["successes"], measured["failures"]) == (
            5,
            1,
            2,
            2,
        )
        assert (measured["tpr"], measured["tnr"]) == (1.0, 0.5)
        judged, truth = [0.2, 0.9, 0.8, 1.0], [0.2, 0.9, 0.3, 1.0]
        assert measured["pearson"] == pytest.approx(float(np.corrcoef(judged, truth)[0, 1]))
        replies = [
            '{"score": 0.2}',
            '{"score": 0.9}',
            '{"score": 0.8}',
            '{"score": 1.0}',
            "no logged answer to grade",
        ]
        costs = [judge_cost(p, a, reply) for (p, a, _), reply in zip(labels, replies, strict=True)]
        assert measured["cost"] == pytest.approx(sum(costs))
        assert measured["judge"]["backend"] == judge

        stats = await client.get(f"{path}/stats", headers=admin_headers())
        assert stats.status_code == 200 and stats.json()["judge"] == measured

        # the measured rates as PromptWise's Bayes correction: refused by a policy without one
        apply = body | {"apply": True}
        refused = await client.post(f"{path}/judge/labels", json=apply, headers=admin_headers())
        assert refused.status_code == 422 and "cannot take the measured rates" in refused.text
        changed = await client.patch(path, json={"policy": "promptwise"}, headers=admin_headers())
        assert changed.status_code == 200, changed.text
        applied = await client.post(f"{path}/judge/labels", json=apply, headers=admin_headers())
        assert applied.status_code == 200, applied.text
        shown = (await client.get(path, headers=admin_headers())).json()["hyperparameters"]
        assert (shown["judge_tpr"], shown["judge_tnr"]) == (1.0, 0.5)
        measured = applied.json()

        bad = {
            "reward outside the range": {"labels": [{"prompt": HARD, "answer": "x", "reward": 2.0}]},
            "no labels": {"labels": []},
            "too many": {"labels": [{"prompt": HARD, "answer": "x", "reward": 0.5}] * 501},
            "no reward": {"labels": [{"prompt": HARD, "answer": "x"}]},
        }
        for why, refused in bad.items():
            answered = await client.post(f"{path}/judge/labels", json=refused, headers=admin_headers())
            assert answered.status_code == 422, why
        missing = await client.post(
            f"/admin/tenants/{tenant}/routers/nope/judge/labels", json=body, headers=admin_headers()
        )
        assert missing.status_code == 404
        await client.patch(path, json={"judge": {}}, headers=admin_headers())
        unjudged = await client.post(f"{path}/judge/labels", json=body, headers=admin_headers())
        assert unjudged.status_code == 422 and "has no judge" in unjudged.text

    async with running(gateway_app(stack)) as client:  # another process reads what this one measured
        again = await client.get(f"{path}/stats", headers=admin_headers())
        assert again.json()["judge"] == measured


async def test_a_bad_stored_judge_url_fails_its_verdicts_not_the_request(
    sqlite_stack: Stack, fake: FakeBackends
) -> None:
    """A judge url the checks refuse, stored before them: the router reads as it is stored, and each
    answer's verdict fails (the answer is served)."""
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        arms = [await add(client, fake.url("ok"), "arm"), await add(client, fake.url("ok"), "arm")]
        tenant = unique("t")
        key = await add_tenant(client, arms, tenant=tenant)
        async with app.state.ctx.sessionmaker() as session:  # as a row written before the check
            judge = {"url": "http://\nfile:///etc/passwd", "threshold": 0.5}
            await session.execute(update(Router).where(Router.name == "main").values(judge=judge))
            await session.commit()
        app.state.ctx.catalog.clear()
        shown = await client.get(f"/admin/tenants/{tenant}/routers/main", headers=admin_headers())
        assert shown.status_code == 200 and shown.json()["judge"]["url"] == judge["url"]
        done = await client.post("/route", json=chat(HARD), headers=bearer(key))
        assert done.status_code == 200, done.text
        assert [s["score"] for s in done.json()["judged"]] == [None]
