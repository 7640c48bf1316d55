"""Admin: tenants and their API keys."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from app.auth import display_prefix, hash_key, new_api_key
from app.deps import AdminOnly, Ctx, Session
from app.schemas import KeyCreate, KeyCreated, KeyOut, TenantCreate, TenantOut
from app.store.models import ApiKey, Tenant, utcnow

router = APIRouter(prefix="/admin/tenants", tags=["admin: tenants"], dependencies=[AdminOnly])


async def get_tenant(session: Session, name: str) -> Tenant:
    tenant = await session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"tenant {name!r} not found")
    return tenant


def tenant_out(tenant: Tenant) -> TenantOut:
    return TenantOut(id=tenant.id, name=tenant.name, created_at=tenant.created_at)


def key_out(key: ApiKey) -> KeyOut:
    return KeyOut(
        id=key.id, prefix=key.prefix, name=key.name, created_at=key.created_at, revoked_at=key.revoked_at
    )


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TenantOut)
async def create_tenant(body: TenantCreate, session: Session) -> TenantOut:
    tenant = Tenant(name=body.name)
    session.add(tenant)
    try:
        await session.commit()
    except IntegrityError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, f"tenant {body.name!r} already exists") from exc
    return tenant_out(tenant)


@router.get("", response_model=list[TenantOut])
async def list_tenants(session: Session) -> list[TenantOut]:
    return [tenant_out(t) for t in await session.scalars(select(Tenant).order_by(Tenant.id))]


@router.get("/{tenant}", response_model=TenantOut)
async def read_tenant(tenant: str, session: Session) -> TenantOut:
    return tenant_out(await get_tenant(session, tenant))


@router.delete("/{tenant}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_tenant(tenant: str, ctx: Ctx, session: Session) -> None:
    """Deletes the tenant with its keys, routers, decisions and feedback."""
    await session.delete(await get_tenant(session, tenant))
    await session.commit()
    await ctx.catalog.announce(ctx.bus, f"tenant {tenant} deleted")


@router.post("/{tenant}/keys", status_code=status.HTTP_201_CREATED, response_model=KeyCreated)
async def issue_key(tenant: str, body: KeyCreate, session: Session) -> KeyCreated:
    """Issue an API key. The key is in this response only; the service stores its hash."""
    owner = await get_tenant(session, tenant)
    key = new_api_key()
    row = ApiKey(tenant_id=owner.id, key_hash=hash_key(key), prefix=display_prefix(key), name=body.name)
    session.add(row)
    await session.commit()
    return KeyCreated(**key_out(row).model_dump(), key=key)


@router.get("/{tenant}/keys", response_model=list[KeyOut])
async def list_keys(tenant: str, session: Session) -> list[KeyOut]:
    owner = await get_tenant(session, tenant)
    rows = await session.scalars(select(ApiKey).where(ApiKey.tenant_id == owner.id).order_by(ApiKey.id))
    return [key_out(k) for k in rows]


@router.delete("/{tenant}/keys/{key_id}", response_model=KeyOut)
async def revoke_key(tenant: str, key_id: int, ctx: Ctx, session: Session) -> KeyOut:
    """Revoke a key: every replica refuses it once the bus delivers the change (``catalog_ttl_s`` at
    worst, when the bus is down)."""
    owner = await get_tenant(session, tenant)
    key = await session.scalar(select(ApiKey).where(ApiKey.id == key_id, ApiKey.tenant_id == owner.id))
    if key is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"key {key_id} not found for tenant {tenant!r}")
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        await session.commit()
        await ctx.catalog.announce(ctx.bus, f"key {key_id} revoked")
    return key_out(key)
