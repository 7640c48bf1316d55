"""Calling OpenAI-compatible backends: one pooled httpx client, per-backend timeouts, retries.

``BackendClient`` holds one ``httpx.AsyncClient`` for the whole process (opened and closed by the app
lifespan), so connections to each backend are pooled and reused. One call to a backend is up to
``1 + forward_max_retries`` attempts: 429, 5xx, timeouts, broken connections and unparseable answers are
retried after a jittered exponential backoff ``base * 2^k * U(0.5, 1.5)``, or after the answer's
``Retry-After`` seconds when that is longer (longer than ``forward_max_retry_after_s``: not retried, so the
gateway falls back at once); other 4xx answers are not retried (the request itself is wrong, or the
backend's key is). Every attempt is appended to the caller's list,
so the gateway can store it and fall back to another backend when this one gives up.

An answer is parsed by orjson, which takes JSON as RFC 8259 defines it and no more: ``NaN``,
``Infinity``, a number past a double's range or a lone surrogate escape make an answer "invalid JSON"
(retried, then the next backend), where Python's json would take them and the gateway could then not
write its own answer. An integer past 64 bits is read as the nearest double.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import httpx
import orjson

from app.input_types import url_problem
from app.redaction import redacted_excerpt
from app.settings import Settings
from app.store.models import Backend
from routers.prices import call_cost

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
    url_problem: str | None = None  # why ``base_url`` cannot be called (``input_types.url_problem``)

    @classmethod
    def of(cls, backend: Backend, api_key: str | None) -> Target:
        """The backend's target, its stored URL checked again (``url_problem``): a stored URL the admin
        API would refuse fails its calls (a 502 naming it), never the request (a 500)."""
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
            url_problem=url_problem(backend.base_url),
        )

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return call_cost(self, tokens_in, tokens_out)


@dataclass
class AttemptRecord:
    """One attempt. ``error`` is the short reason a tenant may read; ``upstream`` the redacted excerpt of
    what the backend answered (or the connection error), for the log and ``attempts.error`` only."""

    model: str
    number: int
    outcome: str  # ok | http_error | timeout | connection | bad_response | cancelled | unusable
    http_status: int | None
    latency_ms: float
    error: str | None = None
    upstream: str | None = None

    def row(self) -> dict[str, Any]:
        """The columns of its ``attempts`` row: ``error`` is the reason and the redacted excerpt."""
        return {
            "model": self.model,
            "number": self.number,
            "outcome": self.outcome,
            "http_status": self.http_status,
            "latency_ms": self.latency_ms,
            "error": with_upstream(self.error, self.upstream),
        }


class BackendFailure(Exception):
    """A backend gave up (after its retries); ``outcome`` is the last attempt's (``timeout``, ...).

    ``str()`` is the sanitised reason the tenant gets (the backend's name, the status, what went wrong,
    never the backend's own words); ``upstream`` is the redacted excerpt of what the backend answered,
    for the server log and ``attempts.error`` (app/redaction.py)."""

    def __init__(
        self,
        backend: str,
        outcome: str,
        message: str,
        retryable: bool = True,
        http_status: int | None = None,
        retry_after: float | None = None,
        upstream: str | None = None,
    ) -> None:
        super().__init__(f"backend {backend!r} {message}")
        self.backend = backend
        self.outcome = outcome
        self.retryable = retryable
        self.http_status = http_status
        self.retry_after = retry_after
        self.upstream = upstream

    def logged(self) -> str:
        """The reason and the redacted excerpt, as the log and the attempts table hold them."""
        return str(with_upstream(str(self), self.upstream))


def with_upstream(reason: str | None, upstream: str | None) -> str | None:
    """A reason followed by the redacted excerpt of what the backend said, when there is one."""
    return reason if not upstream else f"{reason}; upstream: {upstream}"


def status_phrase(status: int) -> str:
    """``401 Unauthorized``: the status and its standard reason phrase (the backend's own is not used)."""
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


# backend URLs (and timeouts) a client keeps parsed, least recently used dropped first: far more than a
# catalog holds. Both are immutable; parsing the URL on every call was about 12 us of its CPU
# (``python -m experiments.backend_request``).
PARSED_URLS = 4096


class NoCookies(httpx.Cookies):
    """A cookie store that keeps and sends nothing."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class CookielessClient(httpx.AsyncClient):
    """The backends' HTTP client, with no cookie jar. One client serves every tenant, so a cookie that
    one backend answer sets (a load balancer's or a bot filter's, say) must not ride along on the next
    request, another tenant's; and keeping none skips parsing every answer's headers for cookies."""

    @property
    def cookies(self) -> httpx.Cookies:
        return NoCookies()

    @cookies.setter
    def cookies(self, cookies: object) -> None:
        raise TypeError("the backends' client keeps no cookies")


class BackendClient:
    def __init__(self, settings: Settings, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.max_retries = settings.forward_max_retries
        self.backoff_s = settings.forward_backoff_s
        self.max_retry_after_s = settings.forward_max_retry_after_s
        limits = httpx.Limits(
            max_connections=settings.forward_max_connections,
            max_keepalive_connections=settings.forward_max_connections,
        )
        self.http = CookielessClient(limits=limits, transport=transport, follow_redirects=False)
        self._url = functools.lru_cache(maxsize=PARSED_URLS)(httpx.URL)
        self._timeout = functools.lru_cache(maxsize=PARSED_URLS)(httpx.Timeout)
        # every secret an upstream answer could echo: the gateway's own, and each backend key it sent
        self.secrets: set[str] = {
            s.get_secret_value()
            for s in (
                settings.admin_key,
                settings.secret_key,
                settings.metrics_token,
                settings.replay_api_key,
            )
            if s is not None
        }

    def excerpt(self, text: str) -> str:
        """``text`` as the log may hold it: redacted (app/redaction.py) and cut to ``EXCERPT_CHARS``."""
        return redacted_excerpt(text, EXCERPT_CHARS, self.secrets)

    async def aclose(self) -> None:
        await self.http.aclose()

    def _request(self, target: Target, path: str, body: dict[str, Any]) -> httpx.Request:
        headers = {"Accept": "application/json, text/event-stream"}
        if target.api_key:
            self.secrets.add(target.api_key)
            headers["Authorization"] = f"Bearer {target.api_key}"
        return self.http.build_request(
            "POST",
            self._url(target.base_url + path),
            json={**body, "model": target.upstream_model},
            headers=headers,
            timeout=self._timeout(target.timeout_s),
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
                # a deadline on the whole attempt (httpx's timeouts bound each read, not the total);
                # asyncio.timeout, unlike wait_for on Python 3.11, runs it without a task of its own
                async with asyncio.timeout(target.timeout_s):
                    response, payload = await self._one(target, path, body, stream)
                status = response.status_code
            except TimeoutError:
                failure = BackendFailure(target.name, "timeout", f"timed out after {target.timeout_s:g} s")
            except httpx.TimeoutException:
                failure = BackendFailure(target.name, "timeout", f"timed out after {target.timeout_s:g} s")
            except httpx.HTTPError as exc:
                failure = BackendFailure(
                    target.name,
                    "connection",
                    f"connection failed: {type(exc).__name__}",
                    upstream=self.excerpt(str(exc)),
                )
            except BackendFailure as exc:
                failure = exc
                status = exc.http_status
            else:
                attempts.append(AttemptRecord(target.name, len(attempts) + 1, "ok", status, _ms(start)))
                return response, payload
            attempts.append(
                AttemptRecord(
                    target.name,
                    len(attempts) + 1,
                    failure.outcome,
                    status,
                    _ms(start),
                    str(failure),
                    failure.upstream,
                )
            )
            log.warning("attempt %d on %s failed: %s", number + 1, target.name, failure.logged())
            if not failure.retryable or (failure.retry_after or 0.0) > self.max_retry_after_s:
                break  # refused for good, or asked to wait longer than we will: fall back instead
        assert failure is not None
        raise failure

    async def _one(
        self, target: Target, path: str, body: dict[str, Any], stream: bool
    ) -> tuple[httpx.Response, Any]:
        if target.url_problem is not None:
            raise BackendFailure(
                target.name, "connection", f"cannot be called: its base_url {target.url_problem}", False
            )
        try:
            request = self._request(target, path, body)
        except httpx.InvalidURL as exc:
            raise BackendFailure(
                target.name, "connection", f"cannot be called: its base_url is invalid ({exc})", False
            ) from exc
        response = await self.http.send(request, stream=stream)
        status = response.status_code
        if status >= 400 or (stream and "text/event-stream" not in response.headers.get("content-type", "")):
            text = (await response.aread()).decode("utf-8", "replace")
            await response.aclose()
            if status >= 400:
                retryable = status >= 500 or status in RETRYABLE_STATUS
                raise BackendFailure(
                    target.name,
                    "http_error",
                    f"answered {status_phrase(status)}",
                    retryable,
                    status,
                    retry_after_seconds(response.headers.get("retry-after")),
                    self.excerpt(text),
                )
            raise BackendFailure(
                target.name,
                "bad_response",
                "answered a non-stream body",
                True,
                status,
                upstream=self.excerpt(text),
            )
        if stream:
            return response, None
        try:
            # RFC 8259 JSON only: NaN, Infinity, a number past a double's range and a lone surrogate are
            # invalid here (Python's json takes them, and the answer could then not be written back)
            payload = orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise BackendFailure(
                target.name,
                "bad_response",
                "answered invalid JSON",
                True,
                status,
                upstream=self.excerpt(response.text),
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
