"""Admin: tenants, their API keys and their rate limits."""

from __future__ import annotations

from fastapi import APIRouter, status
from sqlalchemy import select

from app import catalog_admin
from app.api.contract import documented
from app.api.deps import AdminOnly, Ctx, Session
from app.catalog_admin import Announcements, configured_limits, deliver, get_tenant
from app.input_types import DbInt, Text
from app.ratelimit.limits import key_limits
from app.schemas import (
    EffectiveLimits,
    KeyCreate,
    KeyCreated,
    KeyOut,
    TenantCreate,
    TenantLimits,
    TenantLimitsOut,
    TenantOut,
)
from app.store.db import transaction
from app.store.models import ApiKey, Tenant

router = APIRouter(prefix="/admin/tenants", tags=["admin: tenants"], dependencies=[AdminOnly])


def tenant_out(tenant: Tenant) -> TenantOut:
    return TenantOut(
        id=tenant.id, name=tenant.name, created_at=tenant.created_at, limits=configured_limits(tenant)
    )


def limits_out(tenant: Tenant, ctx: Ctx) -> TenantLimitsOut:
    effective = key_limits(tenant, ctx.settings)
    return TenantLimitsOut(
        configured=configured_limits(tenant),
        effective=EffectiveLimits(
            rate_limit_rps=effective.rate,
            rate_limit_burst=effective.burst,
            rate_limit_concurrency=effective.concurrency,
        ),
    )


def key_out(key: ApiKey) -> KeyOut:
    return KeyOut(
        id=key.id, prefix=key.prefix, name=key.name, created_at=key.created_at, revoked_at=key.revoked_at
    )


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TenantOut, responses=documented(409))
async def create_tenant(body: TenantCreate, session: Session) -> TenantOut:
    tenant = await catalog_admin.create_tenant(session, body.name)
    await session.commit()
    return tenant_out(tenant)


@router.get("", response_model=list[TenantOut])
async def list_tenants(session: Session) -> list[TenantOut]:
    return [tenant_out(t) for t in await session.scalars(select(Tenant).order_by(Tenant.id))]


@router.get("/{tenant}", response_model=TenantOut)
async def read_tenant(tenant: Text, session: Session) -> TenantOut:
    return tenant_out(await get_tenant(session, tenant))


@router.get("/{tenant}/limits", response_model=TenantLimitsOut)
async def read_limits(tenant: Text, ctx: Ctx, session: Session) -> TenantLimitsOut:
    return limits_out(await get_tenant(session, tenant), ctx)


@router.put("/{tenant}/limits", response_model=TenantLimitsOut)
async def set_limits(tenant: Text, body: TenantLimits, ctx: Ctx, session: Session) -> TenantLimitsOut:
    """Replace the rate limits of each of the tenant's keys; a field left out or null falls back to the
    server's default. Every replica applies them once the bus delivers the change (``catalog_ttl_s``
    at worst); a key's bucket keeps its tokens, capped at the new burst."""
    owner = await get_tenant(session, tenant)
    news = Announcements()
    catalog_admin.set_limits(owner, body, news)
    await session.commit()
    await deliver(ctx, news)
    return limits_out(owner, ctx)


@router.delete("/{tenant}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_tenant(tenant: Text, ctx: Ctx, session: Session) -> None:
    """Deletes the tenant with its keys, routers, decisions and feedback."""
    news = Announcements()

    async def delete() -> None:
        await catalog_admin.delete_tenant(session, await get_tenant(session, tenant), news)

    await transaction(session, delete)
    await deliver(ctx, news)


@router.post("/{tenant}/keys", status_code=status.HTTP_201_CREATED, response_model=KeyCreated)
async def issue_key(tenant: Text, body: KeyCreate, session: Session) -> KeyCreated:
    """Issue an API key. The key is in this response only; the service stores its hash."""
    row, key = await catalog_admin.issue_key(session, await get_tenant(session, tenant), body.name)
    await session.commit()
    return KeyCreated(**key_out(row).model_dump(), key=key)


@router.get("/{tenant}/keys", response_model=list[KeyOut])
async def list_keys(tenant: Text, session: Session) -> list[KeyOut]:
    owner = await get_tenant(session, tenant)
    rows = await session.scalars(select(ApiKey).where(ApiKey.tenant_id == owner.id).order_by(ApiKey.id))
    return [key_out(k) for k in rows]


@router.delete("/{tenant}/keys/{key_id}", response_model=KeyOut)
async def revoke_key(tenant: Text, key_id: DbInt, ctx: Ctx, session: Session) -> KeyOut:
    """Revoke a key: every replica refuses it once the bus delivers the change (``catalog_ttl_s`` at
    worst, when the bus is down)."""
    key = await catalog_admin.get_key(session, await get_tenant(session, tenant), key_id)
    news = Announcements()
    catalog_admin.revoke_key(key, news)
    if news:
        await session.commit()
        await deliver(ctx, news)
    return key_out(key)
