"""Requests while an admin changes their router under them: ``python -m experiments.admin_chaos``.

One gateway in this process on a fresh SQLite database, or ``--replicas`` gateways on one Postgres
database (``--database-url``, a fresh one) with Redis, each with the hashing embedder and a backend
client that answers from an ``httpx.MockTransport`` (chat, streams, and a judge that passes half its
answers). ``--clients`` clients send chat completions (plain and streamed), decisions with single and
batch feedback, forwarded decisions and ``GET /feedback/pending`` to the replicas in turn, while an admin
loop, every 0.05-0.2 s, deletes and recreates the router, changes its arms among three backends,
resets, exports and imports its state, reads its stats, uploads logged rows, declares priors or patches
its hyperparameters. After ``--seconds`` it prints the answers' statuses by kind, every 5xx, and how
often a write was sent again after Postgres aborted it for a conflict (the ledger's and the admin
API's; app/store/db.py, app/store/ledger_postgres.py).

``POLICY`` is a policy name with optional hyperparameters, ``name:key=value,...``; ``judge=1`` gives the
router a judge (a cascade). Declines (a 503 ``model_declined``) are a policy's choice, not a failure:
the set policies' default budget cannot pay for any set most rounds when every backend costs the same.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import sys
import tempfile
import time
from collections import Counter
from typing import Any

import httpx

from app.backends import CookielessClient
from app.main import create_app
from app.settings import Settings
from app.store.migrate import upgrade
from experiments.forward_cpu import ADMIN, COMPLETION

ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}


def upstream(request: httpx.Request) -> httpx.Response:
    """The backends and the judge: a fixed completion, a two-event stream, a coin-flip verdict."""
    body = json.loads(request.content)
    if request.url.path.endswith("/judge"):
        return httpx.Response(200, json={"pass": random.random() < 0.5})
    if body.get("stream"):
        delta = {"index": 0, "delta": {"content": "hi"}, "finish_reason": None}
        chunk = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": body["model"]}
        events = f"data: {json.dumps(chunk | {'choices': [delta]})}\n\ndata: [DONE]\n\n".encode()
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=events)
    return httpx.Response(200, json=COMPLETION)


class Retries(logging.Handler):
    """Counts the log lines of a write sent again after a conflict."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "aborted for a conflict" in message:
            self.counts[record.name] += 1


def parse_policy(spec: str) -> tuple[str, dict[str, Any], bool]:
    """(policy, hyperparameters, whether the router has a judge) from ``name:key=value,...``."""
    name, _, given = spec.partition(":")
    hyperparameters: dict[str, Any] = {}
    for pair in filter(None, given.split(",")):
        key, _, value = pair.partition("=")
        hyperparameters[key] = json.loads(value) if value[:1].isdigit() else value
    judge = bool(hyperparameters.pop("judge", False))
    return name, hyperparameters, judge


class Chaos:
    """The run's tenant, router and tallies."""

    def __init__(self, clients: list[httpx.AsyncClient], policy: str, seed: int) -> None:
        self.clients = clients
        self.policy, self.hyperparameters, self.judge = parse_policy(policy)
        self.rng = random.Random(seed)
        self.codes: Counter[tuple[str, int]] = Counter()
        self.failures: dict[tuple[str, int], str] = {}
        self.stop = False
        self.tenant = f"chaos-{time.monotonic_ns()}"
        self.backends = [f"up-{n}-{self.tenant}" for n in range(3)]
        self.headers: dict[str, str] = {}
        self.state: dict[str, Any] | None = None

    @property
    def router(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": "main",
            "policy": self.policy,
            "hyperparameters": self.hyperparameters,
            "arms": self.backends[:2],
            "is_default": True,
        }
        if self.judge:
            body["judge"] = {"url": "http://judge/judge", "threshold": 0.5}
        return body

    async def setup(self) -> None:
        admin = self.clients[0]
        for name in self.backends:
            backend = {"name": name, "base_url": "http://upstream/v1", "usd_per_mtok_in": 1.0}
            (await admin.post("/admin/backends", json=backend, headers=ADMIN_HEADERS)).raise_for_status()
        made = await admin.post("/admin/tenants", json={"name": self.tenant}, headers=ADMIN_HEADERS)
        made.raise_for_status()
        key = await admin.post(f"/admin/tenants/{self.tenant}/keys", json={}, headers=ADMIN_HEADERS)
        self.headers = {"Authorization": f"Bearer {key.json()['key']}"}
        routers = f"/admin/tenants/{self.tenant}/routers"
        (await admin.post(routers, json=self.router, headers=ADMIN_HEADERS)).raise_for_status()

    def note(self, kind: str, status: int, text: str) -> None:
        self.codes[(kind, status)] += 1
        if status >= 500 and (kind, status) not in self.failures:
            self.failures[(kind, status)] = text[:300]

    async def user(self, number: int) -> None:
        client = self.clients[number % len(self.clients)]
        while not self.stop:
            await asyncio.sleep(0)
            prompt = f"question {number} {self.rng.random()}"
            messages = [{"role": "user", "content": prompt}]
            body: dict[str, Any]
            draw = self.rng.random()
            if draw < 0.3:
                body = {"model": "router", "messages": messages}
                answer = await client.post("/v1/chat/completions", json=body, headers=self.headers)
                self.note("chat", answer.status_code, answer.text)
            elif draw < 0.45:
                body = {"model": "router", "messages": messages, "stream": True}
                async with client.stream(
                    "POST", "/v1/chat/completions", json=body, headers=self.headers
                ) as r:
                    text = (await r.aread()).decode(errors="replace")
                    self.note("stream", r.status_code, text)
            elif draw < 0.7:
                decided = await client.post("/route", json={"prompt": prompt}, headers=self.headers)
                self.note("route", decided.status_code, decided.text)
                if decided.status_code == 200:
                    await self.feedback(client, decided.json())
            elif draw < 0.85:
                body = {"prompt": prompt, "forward": True, "request": {"messages": messages}}
                forwarded = await client.post("/route", json=body, headers=self.headers)
                self.note("forward", forwarded.status_code, forwarded.text)
            else:
                pending = await client.get("/feedback/pending", headers=self.headers)
                self.note("pending", pending.status_code, pending.text)

    async def feedback(self, client: httpx.AsyncClient, decided: dict[str, Any]) -> None:
        decision = decided["decision_id"]
        if self.rng.random() < 0.5:
            one = {"decision_id": decision, "reward": self.rng.random()}
            sent = await client.post("/feedback", json=one, headers=self.headers)
            self.note("feedback", sent.status_code, sent.text)
            return
        events = [{"decision_id": decision, "reward": 1.0}]
        if decided.get("model"):
            events.append({"decision_id": decision, "reward": 0.0, "model": decided["model"]})
        sent = await client.post("/feedback/batch", json={"events": events}, headers=self.headers)
        self.note("batch", sent.status_code, sent.text)

    async def admin(self) -> None:
        routers = f"/admin/tenants/{self.tenant}/routers"
        main = f"{routers}/main"
        while not self.stop:
            await asyncio.sleep(self.rng.uniform(0.05, 0.2))
            client = self.rng.choice(self.clients)
            draw = self.rng.random()
            answers: list[tuple[str, httpx.Response]] = []
            if draw < 0.2:
                answers.append(("delete", await client.delete(main, headers=ADMIN_HEADERS)))
                answers.append(
                    ("create", await client.post(routers, json=self.router, headers=ADMIN_HEADERS))
                )
            elif draw < 0.4:
                arms = self.rng.sample(self.backends, self.rng.choice([1, 2, 3]))
                answers.append(("arms", await client.patch(main, json={"arms": arms}, headers=ADMIN_HEADERS)))
            elif draw < 0.5:
                answers.append(("reset", await client.delete(f"{main}/state", headers=ADMIN_HEADERS)))
            elif draw < 0.6:
                exported = await client.get(f"{main}/state", headers=ADMIN_HEADERS)
                answers.append(("export", exported))
                if exported.status_code == 200:
                    self.state = exported.json()
            elif draw < 0.7 and self.state is not None:
                imported = await client.post(f"{main}/state", json=self.state, headers=ADMIN_HEADERS)
                answers.append(("import", imported))
            elif draw < 0.8:
                answers.append(("stats", await client.get(f"{main}/stats", headers=ADMIN_HEADERS)))
            elif draw < 0.9:
                answers.append(("logs", await self.upload_logs(client, main)))
            elif draw < 0.95:
                prior = {"priors": {self.rng.choice(self.backends): {"mean": 0.7, "weight": 5}}}
                answers.append(
                    ("priors", await client.put(f"{main}/priors", json=prior, headers=ADMIN_HEADERS))
                )
            else:
                patch = {"hyperparameters": self.hyperparameters}
                answers.append(("patch", await client.patch(main, json=patch, headers=ADMIN_HEADERS)))
            for kind, answer in answers:
                self.note(f"admin {kind}", answer.status_code, answer.text)

    async def upload_logs(self, client: httpx.AsyncClient, main: str) -> httpx.Response:
        rows = [
            {
                "id": f"log-{self.rng.random()}",
                "prompt": f"logged {self.rng.random()}",
                "model": self.rng.choice(self.backends),
                "reward": self.rng.random(),
                "cost": 0.001,
            }
            for _ in range(20)
        ]
        body = "\n".join(json.dumps(row) for row in rows)
        headers = ADMIN_HEADERS | {"Content-Type": "application/x-ndjson"}
        return await client.post(f"{main}/observations", content=body, headers=headers)


async def run(
    policy: str,
    database_url: str,
    redis_url: str,
    replicas: int,
    clients: int,
    seconds: float,
    seed: int,
) -> Chaos:
    redis = redis_url if "postgres" in database_url else None
    await asyncio.to_thread(upgrade, database_url)
    settings = Settings(database_url=database_url, admin_key=ADMIN, embedder="hashing", redis_url=redis)
    apps = [create_app(settings) for _ in range(replicas)]
    async with contextlib.AsyncExitStack() as stack:
        gateways = []
        for app in apps:
            await stack.enter_async_context(app.router.lifespan_context(app))
            app.state.ctx.backends.http = CookielessClient(transport=httpx.MockTransport(upstream))
            transport = httpx.ASGITransport(app=app)
            client = httpx.AsyncClient(transport=transport, base_url="http://gateway", timeout=60)
            gateways.append(await stack.enter_async_context(client))
        chaos = Chaos(gateways, policy, seed)
        await chaos.setup()
        tasks = [asyncio.create_task(chaos.user(n)) for n in range(clients)]
        tasks.append(asyncio.create_task(chaos.admin()))
        await asyncio.sleep(seconds)
        chaos.stop = True
        await asyncio.gather(*tasks)
    return chaos


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m experiments.admin_chaos", description=__doc__)
    parser.add_argument("policy", nargs="?", default="knn-ucb", help="name[:key=value,...] (default knn-ucb)")
    parser.add_argument("--database-url", help="a fresh Postgres database (default: a fresh SQLite file)")
    parser.add_argument(
        "--replicas", type=int, help="gateways on one Postgres database (default 2; SQLite: always 1)"
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="with Postgres (the default)")
    parser.add_argument("--clients", type=int, default=12, help="concurrent clients (default 12)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long (default 20)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    url = args.database_url or f"sqlite+aiosqlite:///{tempfile.mkdtemp()}/banditgate.db"
    # the embedded SQLite default is one process
    replicas = 1 if url.startswith("sqlite") else (args.replicas or 2)
    logging.basicConfig(level=logging.WARNING)
    retries = Retries()
    logging.getLogger("app.store").addHandler(retries)
    logging.getLogger("app.store").setLevel(logging.INFO)
    chaos = asyncio.run(
        run(args.policy, url, args.redis_url, replicas, args.clients, args.seconds, args.seed)
    )
    served = sum(n for (kind, _), n in chaos.codes.items() if not kind.startswith("admin"))
    failures = {f"{kind} {status}": n for (kind, status), n in chaos.codes.items() if status >= 500}
    print(f"{args.policy} on {'postgres' if 'postgres' in url else 'sqlite'} x{replicas}: {served} requests")
    print(
        "statuses: " + ", ".join(f"{kind} {status}: {n}" for (kind, status), n in sorted(chaos.codes.items()))
    )
    print(f"5xx: {failures or 'none'}")
    for (kind, status), text in chaos.failures.items():
        print(f"  {kind} {status}: {text}")
    print(f"sent again after a conflict: {dict(retries.counts) or 'none'}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
