"""Admin: the decision and feedback logs, filtered and paged newest first with an opaque cursor.

Decisions are ordered by ``(created_at, id)`` descending, feedback by its event id descending; a cursor
encodes where the previous page stopped (keyset paging: pages stay stable while new rows arrive).
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any, TypeVar

from fastapi import APIRouter, HTTPException, Query, status
from sqlalchemy import Select, and_, or_, select

from app.admin_views import DecisionDetail, DecisionItem, DecisionPage, FeedbackItem, FeedbackPage
from app.deps import AdminOnly, Ctx, Session
from app.store.models import DecisionRow, FeedbackEvent, Router, Tenant
from app.timewindow import as_utc, optional_window, unprocessable

router = APIRouter(prefix="/admin", tags=["admin: logs"], dependencies=[AdminOnly])


def encode_cursor(values: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, keys: tuple[str, ...]) -> dict[str, Any]:
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise unprocessable("cursor is not one this API returned") from exc
    if not isinstance(values, dict) or set(values) != set(keys):
        raise unprocessable("cursor is not one this API returned")
    return values


DEFAULT_PAGE = 50


def page_limit(ctx: Ctx, limit: int | None) -> int:
    """The page size: ``limit``, default 50 (or the largest page when that is smaller)."""
    most = ctx.settings.admin_page_max
    if limit is None:
        return min(DEFAULT_PAGE, most)
    if limit > most:
        raise unprocessable(f"limit={limit} is above the largest page, {most}")
    return limit


SelectT = TypeVar("SelectT", bound=Select)  # type: ignore[type-arg]


def filtered(
    query: SelectT,
    table: type[DecisionRow] | type[FeedbackEvent],
    tenant: str | None,
    router_name: str | None,
    since: str | None,
    until: str | None,
) -> SelectT:
    if router_name is not None and tenant is None:
        raise unprocessable("filtering by router needs tenant as well (router names are per tenant)")
    if tenant is not None:
        query = query.where(Tenant.name == tenant)
    if router_name is not None:
        query = query.where(Router.name == router_name)
    start, end = optional_window(since, until)
    if start is not None:
        query = query.where(table.created_at >= start)
    if end is not None:
        query = query.where(table.created_at < end)
    return query


def decision_item(row: DecisionRow, tenant: str, router_name: str | None) -> dict[str, Any]:
    return {
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
        "metadata": row.request_metadata,
        "created_at": as_utc(row.created_at),
    }


def feedback_item(row: FeedbackEvent, tenant: str, router_name: str | None) -> FeedbackItem:
    return FeedbackItem(
        id=row.id,
        decision_id=row.decision_id,
        tenant=tenant,
        router=router_name,
        model=row.model,
        kind=row.kind,
        reward=row.reward,
        cost=row.cost,
        payload=row.payload,
        created_at=as_utc(row.created_at),
    )


@router.get("/decisions", response_model=DecisionPage)
async def list_decisions(
    ctx: Ctx,
    session: Session,
    tenant: str | None = None,
    router_name: str | None = Query(None, alias="router"),
    model: str | None = Query(None, description="decisions whose first model is this one"),
    since: str | None = Query(None, description="ISO 8601, inclusive"),
    until: str | None = Query(None, description="ISO 8601, exclusive"),
    cursor: str | None = None,
    limit: int | None = Query(None, ge=1, description="page size; default 50"),
) -> DecisionPage:
    """Decisions, newest first, with the scores that explained each."""
    size = page_limit(ctx, limit)
    D = DecisionRow
    query = select(D, Tenant.name, Router.name).join(Tenant, Tenant.id == D.tenant_id)
    query = filtered(query.outerjoin(Router, Router.id == D.router_id), D, tenant, router_name, since, until)
    if model is not None:
        query = query.where(D.models[0].as_string() == model)
    if cursor is not None:
        at = decode_cursor(cursor, ("t", "id"))
        try:
            moment = as_utc(datetime.fromisoformat(str(at["t"])))
        except ValueError as exc:
            raise unprocessable("cursor is not one this API returned") from exc
        query = query.where(or_(D.created_at < moment, and_(D.created_at == moment, D.id < str(at["id"]))))
    rows = (await session.execute(query.order_by(D.created_at.desc(), D.id.desc()).limit(size + 1))).all()
    items = [DecisionItem(**decision_item(d, t, r)) for d, t, r in rows[:size]]
    next_cursor = None
    if len(rows) > size:
        last = rows[size - 1][0]
        next_cursor = encode_cursor({"t": as_utc(last.created_at).isoformat(), "id": last.id})
    return DecisionPage(items=items, next_cursor=next_cursor)


@router.get("/decisions/{decision_id}", response_model=DecisionDetail)
async def read_decision(decision_id: str, session: Session) -> DecisionDetail:
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
    events = await session.scalars(
        select(FeedbackEvent).where(FeedbackEvent.decision_id == decision_id).order_by(FeedbackEvent.id)
    )
    return DecisionDetail(
        **decision_item(decision, tenant, router_name),
        feedback=[feedback_item(e, tenant, router_name) for e in events],
    )


@router.get("/feedback", response_model=FeedbackPage)
async def list_feedback(
    ctx: Ctx,
    session: Session,
    tenant: str | None = None,
    router_name: str | None = Query(None, alias="router"),
    model: str | None = Query(None, description="events about this model"),
    since: str | None = Query(None, description="ISO 8601, inclusive"),
    until: str | None = Query(None, description="ISO 8601, exclusive"),
    cursor: str | None = None,
    limit: int | None = Query(None, ge=1, description="page size; default 50"),
) -> FeedbackPage:
    """Feedback events, newest first."""
    size = page_limit(ctx, limit)
    F = FeedbackEvent
    query = select(F, Tenant.name, Router.name).join(Tenant, Tenant.id == F.tenant_id)
    query = filtered(query.outerjoin(Router, Router.id == F.router_id), F, tenant, router_name, since, until)
    if model is not None:
        query = query.where(F.model == model)
    if cursor is not None:
        at = decode_cursor(cursor, ("id",))
        if not isinstance(at["id"], int):
            raise unprocessable("cursor is not one this API returned")
        query = query.where(F.id < at["id"])
    rows = (await session.execute(query.order_by(F.id.desc()).limit(size + 1))).all()
    items = [feedback_item(f, t, r) for f, t, r in rows[:size]]
    next_cursor = encode_cursor({"id": rows[size - 1][0].id}) if len(rows) > size else None
    return FeedbackPage(items=items, next_cursor=next_cursor)
