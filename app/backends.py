"""Calling OpenAI-compatible backends: one pooled httpx client, per-backend timeouts, retries.

``BackendClient`` holds one ``httpx.AsyncClient`` for the whole process (opened and closed by the app
lifespan), so connections to each backend are pooled and reused. One call to a backend is up to
``1 + forward_max_retries`` attempts: 429, 5xx, timeouts, broken connections and unparseable answers are
retried after a jittered exponential backoff ``base * 2^k * U(0.5, 1.5)``, or after the answer's
``Retry-After`` seconds when that is longer (longer than ``forward_max_retry_after_s``: not retried, so the
gateway falls back at once); other 4xx answers are not retried (the request itself is wrong, or the
backend's key is). Every attempt is appended to the caller's list,
so the gateway can store it and fall back to another backend when this one gives up.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx

from app.settings import Settings
from app.store.models import Backend
from routers.replay_format import call_cost

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 429})
EXCERPT_CHARS = 300


@dataclass(frozen=True)
class Target:
    """What a call needs to know about one backend, detached from the database session."""

    name: str
    kind: str
    base_url: str
    upstream_model: str
    api_key: str | None
    timeout_s: float
    usd_per_mtok_in: float
    usd_per_mtok_out: float
    usd_per_call: float

    @classmethod
    def of(cls, backend: Backend, api_key: str | None) -> Target:
        return cls(
            name=backend.name,
            kind=backend.kind,
            base_url=backend.base_url.rstrip("/"),
            upstream_model=backend.upstream_model or backend.name,
            api_key=api_key,
            timeout_s=backend.timeout_s,
            usd_per_mtok_in=backend.usd_per_mtok_in,
            usd_per_mtok_out=backend.usd_per_mtok_out,
            usd_per_call=backend.usd_per_call,
        )

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return call_cost(self, tokens_in, tokens_out)


@dataclass
class AttemptRecord:
    model: str
    number: int
    outcome: str  # ok | http_error | timeout | connection | bad_response | cancelled
    http_status: int | None
    latency_ms: float
    error: str | None = None


class BackendFailure(Exception):
    """A backend gave up (after its retries); ``outcome`` is the last attempt's (``timeout``, ...)."""

    def __init__(
        self,
        backend: str,
        outcome: str,
        message: str,
        retryable: bool = True,
        http_status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"backend {backend!r} {message}")
        self.backend = backend
        self.outcome = outcome
        self.retryable = retryable
        self.http_status = http_status
        self.retry_after = retry_after


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "..."


class BackendClient:
    def __init__(self, settings: Settings, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.max_retries = settings.forward_max_retries
        self.backoff_s = settings.forward_backoff_s
        self.max_retry_after_s = settings.forward_max_retry_after_s
        limits = httpx.Limits(
            max_connections=settings.forward_max_connections,
            max_keepalive_connections=settings.forward_max_connections,
        )
        self.http = httpx.AsyncClient(limits=limits, transport=transport, follow_redirects=False)

    async def aclose(self) -> None:
        await self.http.aclose()

    def _request(self, target: Target, path: str, body: dict[str, Any]) -> httpx.Request:
        headers = {"Accept": "application/json, text/event-stream"}
        if target.api_key:
            headers["Authorization"] = f"Bearer {target.api_key}"
        return self.http.build_request(
            "POST",
            f"{target.base_url}{path}",
            json={**body, "model": target.upstream_model},
            headers=headers,
            timeout=httpx.Timeout(target.timeout_s),
        )

    async def _backoff(self, number: int, retry_after: float | None) -> None:
        """Before retry ``number + 1``: the jittered backoff, or the backend's ``Retry-After`` if longer."""
        await asyncio.sleep(max(self.backoff_s * 2**number * random.uniform(0.5, 1.5), retry_after or 0.0))

    async def _attempts(
        self, target: Target, path: str, body: dict[str, Any], attempts: list[AttemptRecord], stream: bool
    ) -> tuple[httpx.Response, Any]:
        """Try until one attempt succeeds; returns the response (open when streaming) and, when not
        streaming, its parsed JSON. Raises BackendFailure when the retries are spent."""
        failure: BackendFailure | None = None
        for number in range(self.max_retries + 1):
            if number:
                await self._backoff(number - 1, failure.retry_after if failure is not None else None)
            start = time.perf_counter()
            status: int | None = None
            try:
                response, payload = await asyncio.wait_for(
                    self._one(target, path, body, stream), target.timeout_s
                )
                status = response.status_code
            except TimeoutError:
                failure = BackendFailure(target.name, "timeout", f"timed out after {target.timeout_s:g} s")
            except httpx.TimeoutException:
                failure = BackendFailure(target.name, "timeout", f"timed out after {target.timeout_s:g} s")
            except httpx.HTTPError as exc:
                failure = BackendFailure(
                    target.name, "connection", f"connection failed: {type(exc).__name__}: {exc}"
                )
            except BackendFailure as exc:
                failure = exc
                status = exc.http_status
            else:
                attempts.append(AttemptRecord(target.name, len(attempts) + 1, "ok", status, _ms(start)))
                return response, payload
            attempts.append(
                AttemptRecord(
                    target.name, len(attempts) + 1, failure.outcome, status, _ms(start), str(failure)
                )
            )
            log.warning("attempt %d on %s failed: %s", number + 1, target.name, failure)
            if not failure.retryable or (failure.retry_after or 0.0) > self.max_retry_after_s:
                break  # refused for good, or asked to wait longer than we will: fall back instead
        assert failure is not None
        raise failure

    async def _one(
        self, target: Target, path: str, body: dict[str, Any], stream: bool
    ) -> tuple[httpx.Response, Any]:
        response = await self.http.send(self._request(target, path, body), stream=stream)
        status = response.status_code
        if status >= 400 or (stream and "text/event-stream" not in response.headers.get("content-type", "")):
            text = (await response.aread()).decode("utf-8", "replace")
            await response.aclose()
            if status >= 400:
                retryable = status >= 500 or status in RETRYABLE_STATUS
                raise BackendFailure(
                    target.name,
                    "http_error",
                    f"answered {status}: {_excerpt(text)}",
                    retryable,
                    status,
                    retry_after_seconds(response.headers.get("retry-after")),
                )
            raise BackendFailure(
                target.name, "bad_response", f"answered a non-stream body: {_excerpt(text)}", True, status
            )
        if stream:
            return response, None
        try:
            payload = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BackendFailure(
                target.name, "bad_response", f"answered invalid JSON: {_excerpt(response.text)}", True, status
            ) from exc
        if not isinstance(payload, dict):
            raise BackendFailure(target.name, "bad_response", "answered JSON that is not an object")
        return response, payload

    async def call_json(
        self, target: Target, path: str, body: dict[str, Any], attempts: list[AttemptRecord]
    ) -> dict[str, Any]:
        """POST ``body`` to ``target`` and return its JSON answer (retrying as the module says)."""
        _, payload = await self._attempts(target, path, body, attempts, stream=False)
        return dict(payload)

    async def open_stream(
        self, target: Target, path: str, body: dict[str, Any], attempts: list[AttemptRecord]
    ) -> httpx.Response:
        """POST a streaming request; retries happen only before the first byte of the event stream.
        The caller reads ``aiter_lines()`` and must ``aclose()`` the response."""
        response, _ = await self._attempts(target, path, body, attempts, stream=True)
        return response


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` in seconds (the delta-seconds form; an HTTP date is ignored)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 and seconds == seconds else None


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)
