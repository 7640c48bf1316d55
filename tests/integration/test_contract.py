"""The contract: schemathesis fuzzes every operation of the OpenAPI document against a real gateway
(uvicorn, real sockets), on the SQLite default and on Postgres + Redis, once with a tenant key and once
with the admin key, and checks each answer: no 5xx, a documented status, a body that matches the
documented schema (times with their zone included) and a documented content type.

This is the regression suite for the 55 (SQLite) and 77 (Postgres) requests that answered 500 before the
issue's fixes. Each stack gets its own database, backends (tests/fake_backend.py) and two tenancies, one
per role, so the admin run cannot break the tenant run's key, router or backends.

Run it (``-s`` prints the cases per operation and the time of each run)::

    python -m pytest -s -p no:cacheprovider -m contract tests/integration/test_contract.py
"""

from __future__ import annotations

import time
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.main import create_app
from tests.conftest import ADMIN_KEY, Stack, admin_headers, bearer, own_database, unique
from tests.fake_backend import FakeBackends
from tests.served import served_in_thread

pytestmark = pytest.mark.contract

IMAGE_ROUTER = "images"  # each tenancy's second router, over an image backend
SEED = 14
EXAMPLES = 50  # generated cases per operation (schemathesis' fuzzing phase; its other phases add some)
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance, content_type_conformance]

# Operations whose path parameters keep what schemathesis generated (almost always a name that does not
# exist: a 404) in the admin run, instead of being aimed at the run's own tenancy half of the time: they
# would delete it, and every later case of the run would only see 404s. Deleting a tenant or a router is
# covered by tests/integration/test_admin.py.
DESTRUCTIVE = {("DELETE", "/admin/tenants/{tenant}"), ("DELETE", "/admin/tenants/{tenant}/routers/{name}")}


@dataclass
class Tenancy:
    """What a run owns: a tenant, its key, its default router over its own chat backends, an image router,
    one decision."""

    tenant: str
    key: str
    router: str
    backends: list[str]
    decision_id: str


@dataclass
class Gateway:
    stack: str
    url: str
    tenancies: dict[str, Tenancy]
    runs: dict[str, Fuzzed] = field(default_factory=dict)

    def report(self) -> str:
        return "\n".join(run.report() for run in self.runs.values())


@dataclass
class Fuzzed:
    """One run: the key it sends and the values its path parameters are aimed at."""

    stack: str
    role: str
    url: str
    key: str
    tenancy: Tenancy
    cases: Counter[str] = field(default_factory=Counter)
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    seconds: float = 0.0

    def report(self) -> str:
        fewest = min(self.cases.items(), key=lambda item: item[1], default=("-", 0))
        answered = {label for label, status in self.statuses if status < 300}
        never = sorted(set(self.cases) - answered)
        by_status = Counter[int]()
        for (_, status), n in self.statuses.items():
            by_status[status] += n
        return (
            f"contract {self.stack}/{self.role}: {sum(self.cases.values())} cases over {len(self.cases)} "
            f"operations in {self.seconds:.1f} s (fewest: {fewest[1]}, {fewest[0]}); statuses "
            f"{dict(sorted(by_status.items()))}; never a 2xx ({len(never)}): {', '.join(never)}"
        )

    def aim(self, case: schemathesis.Case) -> None:
        """Half of the cases (chosen by a hash of the generated value, so a replay aims the same ones)
        name an existing tenant, router, backend, decision or model in place of the generated one, in the
        path and in the body's fields that name one, so that the fuzz reaches past the lookup into what
        the operation does: a feedback event about a real decision, a /v1 call the router forwards to a
        backend (with whatever else the fuzz put in the body, ``stream`` and ``metadata`` included)."""
        path = case.operation.path
        t = self.tenancy
        if (case.method.upper(), path) not in DESTRUCTIVE:
            existing = {
                "tenant": t.tenant,
                "name": t.backends[0] if path.startswith("/admin/backends") else t.router,
                "decision_id": t.decision_id,
                "model_id": "router",
            }
            for parameter, value in list((case.path_parameters or {}).items()):
                if parameter in existing and chosen(value):
                    case.path_parameters[parameter] = existing[parameter]
        if not chosen(case.body):
            return
        fields: dict[str, object] = {
            "decision_id": t.decision_id,
            "model": t.backends[0],
            "arms": t.backends,
            "policy": "linucb",
        }
        if path == "/v1/chat/completions":
            fields = {"model": "router", "messages": [{"role": "user", "content": "what is 2 + 2?"}]}
        elif path == "/v1/images/generations":
            fields = {"model": f"router/{IMAGE_ROUTER}", "prompt": "a cat"}
        for item in bodies(case.body):
            for name, value in fields.items():
                if name in item or path.startswith("/v1/"):
                    item[name] = value


def chosen(value: object) -> bool:
    """Whether a case is aimed: a stable hash of the generated value (not Python's, which is salted)."""
    return zlib.crc32(repr(value).encode()) % 2 == 0


def bodies(body: object) -> list[dict[str, object]]:
    """The objects of a body whose fields may name something: the body, a list's items, a batch's
    events."""
    items = body if isinstance(body, list) else [body]
    found = [item for item in items if isinstance(item, dict)]
    for item in list(found):
        events = item.get("events")
        if isinstance(events, list):
            found.extend(e for e in events if isinstance(e, dict))
    return found


def provision(client: httpx.Client, fake: FakeBackends, role: str) -> Tenancy:
    tenant = unique(f"fuzz-{role}")
    backends = [unique(f"{role}-ok"), unique(f"{role}-nousage")]
    h = admin_headers()
    assert client.post("/admin/tenants", json={"name": tenant}, headers=h).status_code == 201
    for name, behaviour in zip(backends, ("ok", "nousage"), strict=True):
        body = {"name": name, "base_url": fake.url(behaviour), "usd_per_mtok_in": 1.0, "timeout_s": 5}
        assert client.post("/admin/backends", json=body, headers=h).status_code == 201
    key = client.post(f"/admin/tenants/{tenant}/keys", json={}, headers=h).json()["key"]
    router = {"name": "main", "policy": "linucb", "arms": backends, "is_default": True}
    created = client.post(f"/admin/tenants/{tenant}/routers", json=router, headers=h)
    assert created.status_code == 201, created.text
    painter = unique(f"{role}-image")
    body = {"name": painter, "kind": "image", "base_url": fake.url("ok"), "usd_per_call": 0.01}
    assert client.post("/admin/backends", json=body, headers=h).status_code == 201
    router = {"name": IMAGE_ROUTER, "policy": "linucb", "arms": [painter]}
    created = client.post(f"/admin/tenants/{tenant}/routers", json=router, headers=h)
    assert created.status_code == 201, created.text
    decided = client.post("/route", json={"prompt": "what is 2 + 2?"}, headers=bearer(key))
    assert decided.status_code == 200, decided.text
    return Tenancy(tenant, key, "main", backends, decided.json()["decision_id"])


@pytest.fixture(scope="module")
def fake_backends() -> Iterator[FakeBackends]:
    server = FakeBackends().start()
    yield server
    server.stop()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, fake_backends: FakeBackends
) -> Iterator[Gateway]:
    start = time.perf_counter()
    with own_database(request.param, tmp_path_factory.mktemp("contract")) as stack:
        # The default rate limits (1000/s per key) are far above what the fuzz sends; set high anyway so
        # that a faster machine cannot turn the run into 429s. Every case carries the run's key except
        # schemathesis' own missing-key cases (401s that do not count); the failed-authentication limit is
        # raised too, so that no case can lock the run's address out.
        limits = {"rate_limit_rps": 100_000, "rate_limit_burst": 100_000, "auth_failure_limit": 1_000_000}
        app = create_app(stack.settings(**limits))
        with served_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:
            tenancies = {role: provision(client, fake_backends, role) for role in ("tenant", "admin")}
            gateway = Gateway(stack.name, url, tenancies)
            yield gateway
    seconds = time.perf_counter() - start
    print(
        f"\n{gateway.report()}\ncontract {gateway.stack}: {seconds:.1f} s in all (database, gateway, both runs)"
    )


@pytest.fixture(params=["tenant", "admin"])
def fuzzed(request: pytest.FixtureRequest, gateway: Gateway) -> Iterator[Fuzzed]:
    """The run of one role on one stack; each operation's test adds its cases and time to it."""
    role = request.param
    run = gateway.runs.get(role)
    if run is None:
        tenancy = gateway.tenancies[role]
        key = tenancy.key if role == "tenant" else ADMIN_KEY
        run = gateway.runs[role] = Fuzzed(gateway.stack, role, gateway.url, key, tenancy)
    start = time.perf_counter()
    yield run
    run.seconds += time.perf_counter() - start


def contract_document() -> dict[str, Any]:
    """The OpenAPI document the gateway serves (it depends on no setting the runs change)."""
    return create_app(Stack("sqlite", "sqlite+aiosqlite://", None).settings()).openapi()


schema = schemathesis.openapi.from_dict(
    contract_document(),
    config=SchemathesisConfig.from_dict(
        {"seed": SEED, "generation": {"max-examples": EXAMPLES, "deterministic": True}}
    ),
)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_contract(case: schemathesis.Case, fuzzed: Fuzzed) -> None:
    fuzzed.aim(case)
    fuzzed.cases[case.operation.label] += 1
    response = case.call(base_url=fuzzed.url, headers={"Authorization": f"Bearer {fuzzed.key}"})
    fuzzed.statuses[case.operation.label, response.status_code] += 1
    case.validate_response(response, checks=CHECKS)


def test_served_document_is_the_tested_one(gateway: Gateway) -> None:
    """The fuzz validates answers against ``contract_document()``: it is what the gateway serves."""
    served = httpx.get(f"{gateway.url}/openapi.json", timeout=30)
    assert served.status_code == 200
    assert served.json() == contract_document()
