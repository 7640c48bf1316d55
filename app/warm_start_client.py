"""``banditgate warm-start``: a client of the gateway's admin endpoint that uploads logged outcomes as a
router's warm start (``POST /admin/tenants/{t}/routers/{r}/observations``, app/routing/offline.py).

Rows ``{id, prompt | embedding, model, reward, cost?}`` are sent as NDJSON in batches of at most
``batch_size`` rows and ``batch_bytes`` bytes, read lazily from their source so a large file is never
held in memory, with a progress bar. A batch the gateway refuses as too large (413: over its
``max_offline_batch`` rows or ``max_offline_body_bytes`` bytes) is halved and each half sent again, so
the defaults work against a gateway configured with smaller limits; a single row refused so stops the
run. Connection errors and 5xx answers are retried ``retries`` times with exponential backoff
(``backoff_s`` x 2^attempt); any other 4xx stops the run. Uploads are idempotent by row id, so a run
that stopped (a lost connection, a killed process) is resumed by running the same command again: the
rows already uploaded come back as duplicates and are not learned twice. A JSONL line without an ``id``
gets the digest of its content, so the same file always yields the same ids. Rows about a model that is
not an arm of the router are skipped here and counted (the gateway would refuse their batch).

Declared priors (``--prior MODEL=MEAN:WEIGHT``, repeatable) are sent first, in one ``PUT .../priors``
that replaces the router's priors: each counts as WEIGHT observations of reward MEAN of that model. A
model that is not an arm, or a spec that does not parse, stops the run before anything is sent; a
refusal by the gateway (any 4xx but 413) is a ``GatewayRefused``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from replay_dataset.files import DatasetError, json_objects
from routers.base import PolicyConfigError
from routers.priors import prior_from_text

Row = dict[str, Any]
ROW_FIELDS = ("prompt", "embedding", "model", "reward", "cost")  # what a JSONL line may carry besides its id
# The CLI's defaults (banditgate warm-start --retries, --backoff-s, --batch-bytes).
RETRIES = 4  # per request, on connection errors and 5xx answers (then the run stops; rerun it to resume)
BACKOFF_S = 0.5  # the first retry's wait; each next one waits twice as long
BATCH_BYTES = 32 * 1024 * 1024  # half the gateway's default max_offline_body_bytes
JSON_HEADERS = {"Content-Type": "application/json"}


class WarmStartError(RuntimeError):
    """The gateway refused a batch or could not be reached; the message says which and why."""


class BatchTooLarge(WarmStartError):
    """The gateway answered 413: the batch has more rows or bytes than it takes."""


class GatewayRefused(WarmStartError):
    """The gateway refused the request as the user's error (a 4xx other than 413): a bad key, an unknown
    tenant or router, a row or a prior it does not take."""


class PriorSpecError(ValueError):
    """A ``--prior`` that is not ``MODEL=MEAN:WEIGHT`` with a finite MEAN and a WEIGHT > 0."""


def parse_prior(spec: str) -> tuple[str, dict[str, float]]:
    """``MODEL=MEAN:WEIGHT`` -> (MODEL, {"mean": MEAN, "weight": WEIGHT}) (``routers.priors.prior_from_text``)."""
    try:
        model, prior = prior_from_text(spec)
    except PolicyConfigError as exc:
        raise PriorSpecError(f"--prior {exc}") from None
    return model, {"mean": prior["mean"], "weight": prior["weight"]}


def parse_priors(specs: Iterable[str]) -> dict[str, dict[str, float]]:
    """Every ``--prior`` as ``{model: {mean, weight}}``; a model given twice is an error."""
    priors: dict[str, dict[str, float]] = {}
    for spec in specs:
        model, prior = parse_prior(spec)
        if model in priors:
            raise PriorSpecError(f"--prior: {model!r} is given twice")
        priors[model] = prior
    return priors


def refusal(response: httpx.Response) -> str:
    """A refusal's message: the ``detail`` of the gateway's error body, else its text."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return response.text
    if isinstance(detail, list):
        return "; ".join(str(e.get("msg", e)) if isinstance(e, dict) else str(e) for e in detail)
    return str(detail) if detail is not None else response.text


@dataclass
class UploadSummary:
    rows: int = 0
    new: int = 0
    duplicates: int = 0
    skipped: int = 0  # not an arm of the router

    def line(self) -> str:
        return (
            f"{self.rows} rows sent: {self.new} new, {self.duplicates} already held (not learned again); "
            f"{self.skipped} skipped (model not an arm of the router)"
        )


def content_id(row: Row) -> str:
    """The id of a JSONL line that has none: the digest of its canonical JSON."""
    blob = json.dumps(row, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()[:32]


def jsonl_rows(path: Path, id_prefix: str = "") -> Iterator[tuple[Row, int]]:
    """(row, bytes read so far) for each non-empty line of a JSONL file of
    ``{id?, prompt | embedding, model, reward, cost?}``; ``id`` defaults to ``content_id``."""
    with path.open("rb") as handle:
        try:
            for _, raw in json_objects(handle, path):
                row: Row = {k: raw[k] for k in ROW_FIELDS if k in raw}
                row["id"] = id_prefix + str(raw["id"] if raw.get("id") is not None else content_id(raw))
                yield row, handle.tell()
        except DatasetError as exc:
            raise WarmStartError(str(exc)) from exc


class Gateway:
    """The admin endpoints of one router."""

    def __init__(
        self,
        client: httpx.Client,
        tenant: str,
        router: str,
        retries: int = RETRIES,
        backoff_s: float = BACKOFF_S,
    ) -> None:
        self.client = client
        self.base = f"/admin/tenants/{tenant}/routers/{router}"
        self.retries = retries
        self.backoff_s = backoff_s

    def arms(self) -> list[str]:
        response = self._send("GET", self.base)
        return [str(a) for a in response.json()["arms"]]

    def set_priors(self, priors: dict[str, dict[str, float]]) -> dict[str, Any]:
        """Replace the router's declared priors (``PUT .../priors``); the router as the gateway stores it."""
        answer: dict[str, Any] = self._send(
            "PUT", f"{self.base}/priors", json.dumps({"priors": priors}).encode(), JSON_HEADERS
        ).json()
        return answer

    def upload(self, lines: list[bytes]) -> dict[str, Any]:
        """Send NDJSON ``lines`` (each ends with a newline) as one upload; ``BatchTooLarge`` on a 413."""
        headers = {"Content-Type": "application/x-ndjson"}
        answer: dict[str, Any] = self._send(
            "POST", f"{self.base}/observations", b"".join(lines), headers
        ).json()
        return answer

    def import_direct_calls(self, after: int, limit: int) -> dict[str, Any]:
        params = {"after": after, "limit": limit}
        url = f"{self.base}/observations/from-direct-calls"
        answer: dict[str, Any] = self._send("POST", url, params=params).json()
        return answer

    def _send(
        self,
        method: str,
        url: str,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, Any] | None = None,
    ) -> httpx.Response:
        """The request, retried with backoff on connection errors and 5xx; a 4xx stops the run."""
        for attempt in range(self.retries + 1):
            try:
                response = self.client.request(method, url, content=content, headers=headers, params=params)
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise WarmStartError(f"{method} {url}: {exc}; rerun the command to resume") from exc
            else:
                if response.status_code < 500:
                    if response.status_code == 413:
                        raise BatchTooLarge(f"{method} {url}: 413 {response.text}")
                    if response.status_code >= 400:
                        raise GatewayRefused(f"{method} {url}: {response.status_code} {refusal(response)}")
                    return response
                if attempt == self.retries:
                    raise WarmStartError(
                        f"{method} {url}: {response.status_code} {response.text}; rerun the command to resume"
                    )
            time.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")


def send_priors(gateway: Gateway, priors: dict[str, dict[str, float]]) -> str:
    """Set the router's priors after checking that each names an arm; the line that says what was set."""
    arms = gateway.arms()
    strangers = [m for m in priors if m not in arms]
    if strangers:
        raise PriorSpecError(f"--prior names {strangers}, not arms of the router; its arms: {arms}")
    gateway.set_priors(priors)
    listed = ", ".join(f"{m} {p['mean']:g} x {p['weight']:g}" for m, p in priors.items())
    return f"priors set (mean x weight): {listed}"


def ndjson_line(row: Row) -> bytes:
    return (json.dumps(row, separators=(",", ":")) + "\n").encode()


def send_batch(gateway: Gateway, lines: list[bytes], summary: UploadSummary) -> None:
    """Upload ``lines``; a batch the gateway finds too large is halved and each half sent (a single
    row too large stops the run)."""
    try:
        answer = gateway.upload(lines)
    except BatchTooLarge as exc:
        if len(lines) == 1:
            raise WarmStartError(f"{exc} (a single row of {len(lines[0])} bytes)") from exc
        half = len(lines) // 2
        send_batch(gateway, lines[:half], summary)
        send_batch(gateway, lines[half:], summary)
        return
    summary.rows += int(answer["rows"])
    summary.new += int(answer["new"])
    summary.duplicates += int(answer["duplicates"])


def upload_rows(
    gateway: Gateway,
    rows: Iterable[tuple[Row, int]],
    batch_size: int,
    advance: Callable[[int], object] = lambda n: None,
    batch_bytes: int = BATCH_BYTES,
) -> UploadSummary:
    """Send ``rows`` in batches of at most ``batch_size`` rows and ``batch_bytes`` bytes (a row larger
    than that goes alone); ``advance(n)`` moves the progress bar by the position each row reports (its
    byte offset in a file, or 1 per row). Rows of models that are not arms are skipped."""
    arms = set(gateway.arms())
    summary = UploadSummary()
    batch: list[bytes] = []
    size = 0
    position = 0

    def flush() -> None:
        nonlocal size
        if batch:
            send_batch(gateway, batch, summary)
        batch.clear()
        size = 0

    for row, at in rows:
        if row.get("model") in arms:
            line = ndjson_line(row)
            if batch and size + len(line) > batch_bytes:
                flush()
            batch.append(line)
            size += len(line)
        else:
            summary.skipped += 1
        if len(batch) >= batch_size:
            flush()
        advance(at - position)
        position = at
    flush()
    return summary


def import_direct_calls(
    gateway: Gateway, batch_size: int, advance: Callable[[int], object] = lambda n: None
) -> UploadSummary:
    """Every page of the tenant's direct calls' rewarded outcomes, as offline rows of the router."""
    summary, after = UploadSummary(), 0
    while True:
        page = gateway.import_direct_calls(after, batch_size)
        summary.rows += int(page["scanned"])
        summary.new += int(page["new"])
        summary.duplicates += int(page["duplicates"])
        summary.skipped += int(page["skipped"])
        advance(int(page["scanned"]))
        if page["next_after"] is None:
            return summary
        after = int(page["next_after"])
