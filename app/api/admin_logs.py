"""Admin: the decision and feedback logs, filtered and paged newest first with an opaque cursor.

Decisions are ordered by ``(created_at, id)`` descending, feedback by its event id descending; a cursor
encodes where the previous page stopped (keyset paging: pages stay stable while new rows arrive).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, HTTPException, Query, status
from sqlalchemy import Select, and_, or_, select

from app.admin_views import DecisionDetail, DecisionItem, DecisionPage, FeedbackItem, FeedbackPage
from app.api.deps import AdminOnly, Ctx, Session
from app.input_types import BIGINT_MAX, DECISION_ID_BOUND, DecisionId, Text, current_limits
from app.jsonable import readable
from app.store.models import DecisionRow, FeedbackEvent, Router, Tenant
from app.store.stats import SERVED_KINDS
from app.timewindow import as_utc, in_range, optional_window, unprocessable

router = APIRouter(prefix="/admin", tags=["admin: logs"], dependencies=[AdminOnly])


def encode_cursor(values: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


NOT_OURS = "cursor is not one this API returned"


def decode_cursor(cursor: str, keys: tuple[str, ...]) -> dict[str, Any]:
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise unprocessable(NOT_OURS, "cursor") from exc
    if not isinstance(values, dict) or set(values) != set(keys):
        raise unprocessable(NOT_OURS, "cursor")
    return values


def decision_cursor(cursor: str) -> tuple[datetime, str]:
    """(created_at, id) of the last decision of the previous page."""
    at = decode_cursor(cursor, ("t", "id"))
    moment, last = at["t"], at["id"]
    if not isinstance(moment, str) or not isinstance(last, str) or not 0 < len(last) <= DECISION_ID_BOUND:
        raise unprocessable(NOT_OURS, "cursor")
    try:
        return in_range("cursor", as_utc(datetime.fromisoformat(moment))), last
    except (ValueError, OverflowError) as exc:
        raise unprocessable(NOT_OURS, "cursor") from exc


def feedback_cursor(cursor: str) -> int:
    """The event id of the last event of the previous page (a bool is not one: JSON ``true``)."""
    last = decode_cursor(cursor, ("id",))["id"]
    if type(last) is not int or not 0 <= last <= BIGINT_MAX:
        raise unprocessable(NOT_OURS, "cursor")
    return last


DEFAULT_PAGE = 50


def page_limit(ctx: Ctx, limit: int | None) -> int:
    """The page size: ``limit``, default 50 (or the largest page when that is smaller)."""
    most = ctx.settings.admin_page_max
    if limit is None:
        return min(DEFAULT_PAGE, most)
    if limit > most:
        raise unprocessable(f"limit={limit} is above the largest page, {most}", "limit")
    return limit


@dataclass(frozen=True)
class LogQuery:
    """The filters and page of a log listing (the query parameters both listings share)."""

    tenant: str | None
    router_name: str | None
    model: str | None
    since: str | None
    until: str | None
    cursor: str | None
    size: int


def log_query(
    ctx: Ctx,
    tenant: Text | None = None,
    router_name: Text | None = Query(None, alias="router", description="needs tenant as well"),
    model: Text | None = Query(None, description="decisions whose first model is this one; events about it"),
    since: Text | None = Query(None, description="ISO 8601, inclusive"),
    until: Text | None = Query(None, description="ISO 8601, exclusive"),
    cursor: Text | None = Query(None, description="next_cursor of the previous page"),
    limit: int | None = Query(None, ge=1, le=BIGINT_MAX, description="page size; default 50"),
) -> LogQuery:
    return LogQuery(tenant, router_name, model, since, until, cursor, page_limit(ctx, limit))


Logs = Annotated[LogQuery, Depends(log_query)]

SelectT = TypeVar("SelectT", bound=Select)  # type: ignore[type-arg]


def filtered(query: SelectT, table: type[DecisionRow] | type[FeedbackEvent], logs: LogQuery) -> SelectT:
    if logs.router_name is not None and logs.tenant is None:
        raise unprocessable(
            "filtering by router needs tenant as well (router names are per tenant)", "router"
        )
    if logs.tenant is not None:
        query = query.where(Tenant.name == logs.tenant)
    if logs.router_name is not None:
        query = query.where(Router.name == logs.router_name)
    start, end = optional_window(logs.since, logs.until)
    if start is not None:
        query = query.where(table.created_at >= start)
    if end is not None:
        query = query.where(table.created_at < end)
    return query


def outcome(first_model: str | None, events: Iterable[FeedbackEvent]) -> dict[str, float | None]:
    """A decision's ``reward``, the mean of the bandit/cascade-step rewards reported about its first model
    (the answer the caller got), and ``cost``, the sum of every cost reported about it (probes and cost
    records included); each null while none is reported."""
    rewards, costs = [], []
    for event in events:
        if event.kind in SERVED_KINDS and event.model == first_model and event.reward is not None:
            rewards.append(event.reward)
        if event.cost is not None:
            costs.append(event.cost)
    return {
        "reward": sum(rewards) / len(rewards) if rewards else None,
        "cost": sum(costs) if costs else None,
    }


def decision_item(
    row: DecisionRow, tenant: str, router_name: str | None, events: Iterable[FeedbackEvent] = ()
) -> dict[str, Any]:
    return {
        **outcome(row.models[0] if row.models else None, events),
        "id": row.id,
        "tenant": tenant,
        "router": router_name,
        "router_version": row.router_version,
        "policy": row.policy,
        "model": row.models[0] if row.models else None,
        "models": list(row.models),
        "query": list(row.query),
        "scores": row.scores,
        "info": row.info,
        "prompt_chars": row.prompt_chars,
        "metadata": readable(row.request_metadata, current_limits().json_max_depth),
        "created_at": as_utc(row.created_at),
    }


def feedback_item(row: FeedbackEvent, tenant: str, router_name: str | None) -> FeedbackItem:
    return FeedbackItem(
        id=row.id,
        decision_id=row.decision_id,
        row_id=row.row_id,
        tenant=tenant,
        router=router_name,
        model=row.model,
        kind=row.kind,
        reward=row.reward,
        cost=row.cost,
        payload=readable(row.payload, current_limits().json_max_depth),
        created_at=as_utc(row.created_at),
    )


@router.get("/decisions", response_model=DecisionPage)
async def list_decisions(session: Session, logs: Logs) -> DecisionPage:
    """Decisions, newest first, with the scores that explained each."""
    size = logs.size
    D = DecisionRow
    query = select(D, Tenant.name, Router.name).join(Tenant, Tenant.id == D.tenant_id)
    query = filtered(query.outerjoin(Router, Router.id == D.router_id), D, logs)
    if logs.model is not None:
        query = query.where(D.models[0].as_string() == logs.model)
    if logs.cursor is not None:
        moment, last_id = decision_cursor(logs.cursor)
        query = query.where(or_(D.created_at < moment, and_(D.created_at == moment, D.id < last_id)))
    rows = (await session.execute(query.order_by(D.created_at.desc(), D.id.desc()).limit(size + 1))).all()
    page = rows[:size]
    events: dict[str, list[FeedbackEvent]] = {}
    if page:
        ids = [d.id for d, _, _ in page]
        for event in await session.scalars(select(FeedbackEvent).where(FeedbackEvent.decision_id.in_(ids))):
            events.setdefault(str(event.decision_id), []).append(event)
    items = [DecisionItem(**decision_item(d, t, r, events.get(d.id, ()))) for d, t, r in page]
    next_cursor = None
    if len(rows) > size:
        last = rows[size - 1][0]
        next_cursor = encode_cursor({"t": as_utc(last.created_at).isoformat(), "id": last.id})
    return DecisionPage(items=items, next_cursor=next_cursor)


@router.get("/decisions/{decision_id}", response_model=DecisionDetail)
async def read_decision(decision_id: DecisionId, session: Session) -> DecisionDetail:
    """One decision: its scores (the explanation of the choice) and every feedback event about it."""
    found = (
        await session.execute(
            select(DecisionRow, Tenant.name, Router.name)
            .join(Tenant, Tenant.id == DecisionRow.tenant_id)
            .outerjoin(Router, Router.id == DecisionRow.router_id)
            .where(DecisionRow.id == decision_id)
        )
    ).first()
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"decision {decision_id!r} not found")
    decision, tenant, router_name = found
    events = list(
        await session.scalars(
            select(FeedbackEvent).where(FeedbackEvent.decision_id == decision_id).order_by(FeedbackEvent.id)
        )
    )
    return DecisionDetail(
        **decision_item(decision, tenant, router_name, events),
        feedback=[feedback_item(e, tenant, router_name) for e in events],
    )


@router.get("/feedback", response_model=FeedbackPage)
async def list_feedback(session: Session, logs: Logs) -> FeedbackPage:
    """Feedback events, newest first."""
    size = logs.size
    F = FeedbackEvent
    query = select(F, Tenant.name, Router.name).join(Tenant, Tenant.id == F.tenant_id)
    query = filtered(query.outerjoin(Router, Router.id == F.router_id), F, logs)
    if logs.model is not None:
        query = query.where(F.model == logs.model)
    if logs.cursor is not None:
        query = query.where(F.id < feedback_cursor(logs.cursor))
    rows = (await session.execute(query.order_by(F.id.desc()).limit(size + 1))).all()
    items = [feedback_item(f, t, r) for f, t, r in rows[:size]]
    next_cursor = encode_cursor({"id": rows[size - 1][0].id}) if len(rows) > size else None
    return FeedbackPage(items=items, next_cursor=next_cursor)
