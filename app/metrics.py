"""Prometheus metrics: HTTP latency and errors per route template, embedder and backend latency,
decisions and feedback per tenant and router. ``GET /metrics`` serves them in the text format.

Hooks for the rest of the app (call them, never the collectors directly):

- ``count_decision(tenant, router)`` and ``count_feedback(tenant, router, kind)`` from the request path;
- ``count_shadow_refused(tenant, router, reason)`` when a shadow call is refused (``concurrency``: the
  process runs ``shadow_concurrency`` already; ``budget``: the router's ``shadow_usd_per_day`` is spent);
- ``time_embedding()`` around the embedder call;
- ``time_backend(backend)`` around a call to a model backend (for the forwarding code), or
  ``observe_backend(backend, seconds, outcome)`` when the caller measures the time itself. ``outcome``
  is ``ok``, ``error`` or ``timeout``.

Several worker processes: each process counts for itself and ``/metrics`` answers from the process
that got the scrape. For totals across workers, set ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory
before the workers start (prometheus-client's multiprocess mode): every process then writes its values
there and ``/metrics`` sums them. Without it, scrape a single-worker deployment per port.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

HTTP_SECONDS = Histogram(
    "banditgate_http_request_duration_seconds",
    "Time to answer an HTTP request, by method and route template.",
    ["method", "route"],
    buckets=LATENCY_BUCKETS,
)
HTTP_RESPONSES = Counter(
    "banditgate_http_responses_total",
    "HTTP responses by method, route template and status class (2xx, 4xx, 5xx, ...).",
    ["method", "route", "status_class"],
)
HTTP_ERRORS = Counter(
    "banditgate_http_errors_total",
    "HTTP error responses by route template and kind (the status class: 4xx or 5xx).",
    ["route", "kind"],
)
EMBED_SECONDS = Histogram(
    "banditgate_embedding_duration_seconds",
    "Time to embed one prompt (cache hits included).",
    buckets=LATENCY_BUCKETS,
)
BACKEND_SECONDS = Histogram(
    "banditgate_backend_duration_seconds",
    "Time of one call to a model backend, by backend and outcome (ok, error, timeout).",
    ["backend", "outcome"],
    buckets=LATENCY_BUCKETS,
)
DECISIONS = Counter("banditgate_decisions_total", "Routing decisions.", ["tenant", "router"])
FEEDBACK = Counter(
    "banditgate_feedback_total",
    "Feedback events recorded (duplicates not counted).",
    ["tenant", "router", "kind"],
)

SHADOW_REFUSED = Counter(
    "banditgate_shadow_refused_total",
    "Shadow calls refused, by tenant, router and reason (concurrency, budget).",
    ["tenant", "router", "reason"],
)

UNMATCHED_ROUTE = "<unmatched>"


def status_class(code: int) -> str:
    return f"{code // 100}xx"


def observe_request(method: str, route: str, status_code: int, seconds: float) -> None:
    HTTP_SECONDS.labels(method, route).observe(seconds)
    kind = status_class(status_code)
    HTTP_RESPONSES.labels(method, route, kind).inc()
    if status_code >= 400:
        HTTP_ERRORS.labels(route, kind).inc()


def count_decision(tenant: str, router: str) -> None:
    DECISIONS.labels(tenant, router).inc()


def count_feedback(tenant: str, router: str, kind: str) -> None:
    FEEDBACK.labels(tenant, router, kind).inc()


def count_shadow_refused(tenant: str, router: str, reason: str) -> None:
    SHADOW_REFUSED.labels(tenant, router, reason).inc()


@contextmanager
def time_embedding() -> Iterator[None]:
    with EMBED_SECONDS.time():
        yield


def observe_backend(backend: str, seconds: float, outcome: str = "ok") -> None:
    BACKEND_SECONDS.labels(backend, outcome).observe(seconds)


@contextmanager
def time_backend(backend: str) -> Iterator[None]:
    """Times the block; outcome ``timeout`` for a TimeoutError, ``error`` for any other exception."""
    start = time.perf_counter()
    outcome = "ok"
    try:
        yield
    except TimeoutError:
        outcome = "timeout"
        raise
    except Exception as exc:
        outcome = "timeout" if "Timeout" in type(exc).__name__ else "error"
        raise
    finally:
        observe_backend(backend, time.perf_counter() - start, outcome)


def exposition() -> tuple[bytes, str]:
    """The metrics in Prometheus' text format, and its content type."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
