"""Typed dependencies: the app context, a DB session, the caller's tenant, the admin check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request, status
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth import bearer_token, hash_key, is_admin_key
from app.context import AppContext
from app.store.models import ApiKey, Tenant


def get_ctx(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


Ctx = Annotated[AppContext, Depends(get_ctx)]


async def get_session(ctx: Ctx) -> AsyncIterator[AsyncSession]:
    async with ctx.sessionmaker() as session:
        yield session


Session = Annotated[AsyncSession, Depends(get_session)]

_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


async def _tenant_for_key(session: AsyncSession, token: str) -> Tenant | None:
    row = await session.execute(
        select(Tenant)
        .join(ApiKey, ApiKey.tenant_id == Tenant.id)
        .where(ApiKey.key_hash == hash_key(token), ApiKey.revoked_at.is_(None))
    )
    return row.scalar_one_or_none()


def _bearer_or_401(authorization: str | None, what: str) -> str:
    token = bearer_token(authorization)
    if token is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            f"missing {what}: send 'Authorization: Bearer <key>'",
            headers=_UNAUTHORIZED,
        )
    return token


async def current_tenant(
    ctx: Ctx, session: Session, authorization: Annotated[str | None, Header()] = None
) -> Tenant:
    token = _bearer_or_401(authorization, "API key")
    admin_key = ctx.settings.admin_key.get_secret_value() if ctx.settings.admin_key else None
    if is_admin_key(token, admin_key):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, "this endpoint needs a tenant API key, not the admin key"
        )
    tenant = await _tenant_for_key(session, token)
    if tenant is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid or revoked API key", headers=_UNAUTHORIZED)
    return tenant


CurrentTenant = Annotated[Tenant, Depends(current_tenant)]


async def require_admin(
    ctx: Ctx, session: Session, authorization: Annotated[str | None, Header()] = None
) -> None:
    token = _bearer_or_401(authorization, "admin key")
    if ctx.settings.admin_key is None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "the admin API is disabled: set BANDITGATE_ADMIN_KEY")
    if is_admin_key(token, ctx.settings.admin_key.get_secret_value()):
        return
    if await _tenant_for_key(session, token) is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "admin endpoints need the admin key, not a tenant key")
    raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid admin key", headers=_UNAUTHORIZED)


AdminOnly = Depends(require_admin)
