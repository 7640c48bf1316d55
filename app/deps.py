"""Typed dependencies: the app context, a DB session, the caller's tenant, the admin check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request, status
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth import bearer_token, is_admin_key
from app.context import AppContext
from app.store.models import Tenant


def get_ctx(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


Ctx = Annotated[AppContext, Depends(get_ctx)]


async def get_session(ctx: Ctx) -> AsyncIterator[AsyncSession]:
    async with ctx.sessionmaker() as session:
        yield session


Session = Annotated[AsyncSession, Depends(get_session)]

_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


def _bearer_or_401(authorization: str | None, what: str) -> str:
    token = bearer_token(authorization)
    if token is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            f"missing {what}: send 'Authorization: Bearer <key>'",
            headers=_UNAUTHORIZED,
        )
    return token


async def current_tenant(ctx: Ctx, authorization: Annotated[str | None, Header()] = None) -> Tenant:
    """The tenant of the bearer key (cached: app/catalog.py, so a revocation reaches every replica
    over the bus, within ``catalog_ttl_s`` at worst)."""
    token = _bearer_or_401(authorization, "API key")
    admin_key = ctx.settings.admin_key.get_secret_value() if ctx.settings.admin_key else None
    if is_admin_key(token, admin_key):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, "this endpoint needs a tenant API key, not the admin key"
        )
    tenant = await ctx.catalog.tenant_for_key(token)
    if tenant is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid or revoked API key", headers=_UNAUTHORIZED)
    return tenant


CurrentTenant = Annotated[Tenant, Depends(current_tenant)]


async def require_admin(ctx: Ctx, authorization: Annotated[str | None, Header()] = None) -> None:
    token = _bearer_or_401(authorization, "admin key")
    if ctx.settings.admin_key is None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "the admin API is disabled: set BANDITGATE_ADMIN_KEY")
    if is_admin_key(token, ctx.settings.admin_key.get_secret_value()):
        return
    if await ctx.catalog.tenant_for_key(token) is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "admin endpoints need the admin key, not a tenant key")
    raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid admin key", headers=_UNAUTHORIZED)


AdminOnly = Depends(require_admin)
