"""Admin: warm-start a router from logs (``POST .../observations``) and from direct calls' outcomes.

The body of an upload is a JSON array of rows or NDJSON (``Content-Type: application/x-ndjson``, one row
a line, read as it streams in); at most ``max_offline_batch`` rows and ``max_offline_body_bytes`` bytes
(413 above either; the bytes are counted by app/api/http_limits.py). The domain rules are in app/routing/offline.py.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from app.api.deps import AdminOnly, Ctx, Session
from app.catalog_admin import get_router, get_tenant
from app.input_types import DbInt, Text
from app.routing.errors import TooLarge
from app.routing.offline import import_direct_calls, record_offline
from app.schemas import DirectCallsImported, ObservationsAccepted, OfflineRow

router = APIRouter(
    prefix="/admin/tenants/{tenant}/routers/{name}/observations",
    tags=["admin: routers"],
    dependencies=[AdminOnly],
)

NDJSON_TYPES = ("application/x-ndjson", "application/jsonl", "application/ndjson")


def _row(raw: Any, position: int) -> OfflineRow:
    try:
        return OfflineRow.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'row'}: {e['msg']}" for e in exc.errors())
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"row {position}: {problems}") from exc


def _json_line(line: bytes | bytearray, position: int) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:  # not JSON, or not UTF-8 (a UnicodeDecodeError)
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"row {position}: not JSON ({exc})"
        ) from exc
    except RecursionError as exc:  # ``[[[[...`` nested deeper than the parser's recursion limit
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"row {position}: JSON nested too deep to parse"
        ) from exc


async def read_uploaded_rows(request: Request, max_rows: int) -> list[OfflineRow]:
    """The upload's rows, validated; NDJSON is parsed line by line as the body streams in. (The body's
    size limit, ``max_offline_body_bytes``, is the request limits middleware's: app/api/http_limits.py.)"""
    ndjson = request.headers.get("content-type", "").split(";")[0].strip() in NDJSON_TYPES
    rows: list[OfflineRow] = []

    def add_line(line: bytes | bytearray) -> None:
        if len(rows) >= max_rows:
            raise TooLarge(f"more than {max_rows} rows in one upload; send them in batches")
        rows.append(_row(_json_line(line, len(rows)), len(rows)))

    # Appended in place, and only a chunk with a newline splits what it completes: linear in the body
    # (``bytes +=`` copies the whole buffer per chunk, re-splitting it scans it again).
    buffer = bytearray()
    async for chunk in request.stream():
        end = chunk.rfind(b"\n") if ndjson else -1
        if end < 0:
            buffer += chunk
            continue
        buffer += chunk[:end]
        lines = buffer.split(b"\n")
        buffer = bytearray(chunk[end + 1 :])
        for line in lines:
            if line.strip():
                add_line(line)
    if ndjson:
        if buffer.strip():
            add_line(buffer)
        return rows
    body = _json_line(buffer, 0)
    if not isinstance(body, list):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, "the body must be a JSON array of rows (or NDJSON)"
        )
    if len(body) > max_rows:
        raise TooLarge(f"{len(body)} rows in one upload; the limit is {max_rows}")
    return [_row(raw, i) for i, raw in enumerate(body)]


UPLOAD_BODY = {
    "required": True,
    "description": "a JSON array of rows, or NDJSON (`Content-Type: application/x-ndjson`, one row a line)",
    "content": {"application/json": {"schema": {"type": "array", "items": OfflineRow.model_json_schema()}}},
}


@router.post("", response_model=ObservationsAccepted, openapi_extra={"requestBody": UPLOAD_BODY})
async def upload_observations(
    tenant: Text, name: Text, request: Request, ctx: Ctx, session: Session
) -> ObservationsAccepted:
    """Write logged outcomes ``{id, prompt | embedding, model, reward, cost?}`` as offline events of the
    router: every replica learns them, and a replay of the log rebuilds them. Idempotent per row id: a
    retried or resumed upload reports the rows already held as ``duplicates`` and learns them once. A row
    about a model that is not an arm of the router, or with a reward outside its range, refuses the whole
    upload (422, nothing written)."""
    owner = await get_tenant(session, tenant)
    row = await get_router(session, owner, name)
    rows = await read_uploaded_rows(request, ctx.settings.max_offline_batch)
    return await record_offline(ctx, session, owner, row, rows)


@router.post("/from-direct-calls", response_model=DirectCallsImported)
async def import_from_direct_calls(
    tenant: Text,
    name: Text,
    ctx: Ctx,
    session: Session,
    after: Annotated[  # the bounds of DbInt hold only in this form, not with ``= Query(0)``
        DbInt, Query(description="feedback event id to start after (next_after of the last page)")
    ] = 0,
    limit: int = Query(
        500,
        ge=1,
        description="most direct-call events read in this page (at most BANDITGATE_MAX_OFFLINE_BATCH)",
    ),
) -> DirectCallsImported:
    """One page of the tenant's direct calls' rewarded outcomes (``model: "<backend>"`` on ``/v1``, then
    ``POST /feedback``) written as offline events of this router; loop on ``next_after`` until null.
    Idempotent: events imported before count as ``duplicates``."""
    most = ctx.settings.max_offline_batch
    if limit > most:  # a setting: not expressible as the parameter's static bound
        message = f"Input should be less than or equal to {most} (BANDITGATE_MAX_OFFLINE_BATCH)"
        error = {"type": "less_than_equal", "loc": ("query", "limit"), "msg": message, "input": limit}
        raise RequestValidationError([error])
    owner = await get_tenant(session, tenant)
    row = await get_router(session, owner, name)
    return await import_direct_calls(ctx, session, owner, row, after, limit)
