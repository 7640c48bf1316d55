"""Typed dependencies: the app context, a DB session, the caller's tenant (rate-limited), the admin check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth import hash_key, is_admin_key
from app.context import AppContext
from app.ratelimit.limits import key_limits
from app.store.db import close_if_used
from app.store.models import Tenant


async def get_ctx(request: Request) -> AppContext:
    """The app context. ``async`` so FastAPI calls it on the loop: a plain ``def`` dependency runs in
    its thread pool, a hand-off to a worker thread on every request (a profiled cost)."""
    ctx: AppContext = request.app.state.ctx
    return ctx


Ctx = Annotated[AppContext, Depends(get_ctx)]


async def get_session(ctx: Ctx) -> AsyncIterator[AsyncSession]:
    """A session for the request, closed after it unless the request never used it (``close_if_used``)."""
    session = ctx.sessionmaker()
    try:
        yield session
    finally:
        await close_if_used(session)


Session = Annotated[AsyncSession, Depends(get_session)]

_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}

# How a key is sent (``Authorization: Bearer <key>``), as the OpenAPI document's security schemes: each
# operation lists the kind of key it needs. ``auto_error=False``: a missing key is answered below, in the
# gateway's error shape.
TENANT_KEY = HTTPBearer(
    scheme_name="tenantKey",
    description="A tenant API key (issued by POST /admin/tenants/{tenant}/keys)",
    auto_error=False,
)
ADMIN_KEY = HTTPBearer(scheme_name="adminKey", description="BANDITGATE_ADMIN_KEY", auto_error=False)
Credentials = HTTPAuthorizationCredentials | None


def bearer_or_401(credentials: Credentials, what: str) -> str:
    token = credentials.credentials.strip() if credentials is not None else ""
    if not token:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            f"missing {what}: send 'Authorization: Bearer <key>'",
            headers=_UNAUTHORIZED,
        )
    return token


def client_address(request: Request) -> str:
    """The caller's address, the key of the failed-auth limit. Behind a reverse proxy this is the
    proxy's address unless the proxy is one of ``BANDITGATE_TRUSTED_PROXIES`` (app/main.py then takes
    the client's from its ``X-Forwarded-For``)."""
    return request.client.host if request.client is not None else "unknown"


async def admitted_address(request: Request, ctx: AppContext) -> str:
    """The caller's address, once it is within its failed-auth limit (else 429): every check of a
    presented key (tenant, admin, metrics) starts here and counts a wrong key against it
    (``ctx.limiter.count_failure``)."""
    address = client_address(request)
    await ctx.limiter.check_address(address)
    return address


async def looked_up_tenant(request: Request, ctx: AppContext, token: str, key_hash: str) -> Tenant:
    """The tenant of ``token`` (hashed to ``key_hash``) read through the catalog, once the caller's address is within its
    failed-auth limit (checked first, so a guessing address cannot make the gateway read the
    database); a wrong key counts against that limit (401), the admin key is refused (403)."""
    address = await admitted_address(request, ctx)
    admin_key = ctx.settings.admin_key.get_secret_value() if ctx.settings.admin_key else None
    if is_admin_key(token, admin_key):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, "this endpoint needs a tenant API key, not the admin key"
        )
    tenant = await ctx.catalog.tenant_for_hash(key_hash)
    if tenant is None:
        await ctx.limiter.count_failure(address)
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid or revoked API key", headers=_UNAUTHORIZED)
    return tenant


async def current_tenant(
    request: Request, ctx: Ctx, credentials: Annotated[Credentials, Security(TENANT_KEY)]
) -> AsyncIterator[Tenant]:
    """The tenant of the bearer key (cached: app/catalog.py, so a revocation reaches every replica
    over the bus, within ``catalog_ttl_s`` at worst), admitted by the rate limiter (app/ratelimit/):
    every tenant endpoint (``/route``, ``/feedback``, ``/v1/*``, routed or direct) passes here once per
    request. A client address over its failed-auth limit gets 429 before its key is read from the
    database (a key this process holds is checked with its admission, one Redis round trip); the
    key's in-flight slot is held until the response has been sent (a stream's last byte included)."""
    token = bearer_or_401(credentials, "API key")
    key_hash = hash_key(token)
    tenant = ctx.catalog.cached_tenant(key_hash)
    if tenant is not None:  # a key known here: the address check and the admission in one step
        limits = key_limits(tenant, ctx.settings)
        slot = await ctx.limiter.admit_from(client_address(request), key_hash, limits)
    else:
        tenant = await looked_up_tenant(request, ctx, token, key_hash)
        slot = await ctx.limiter.admit(key_hash, key_limits(tenant, ctx.settings))
    try:
        yield tenant
    finally:
        await ctx.limiter.release(slot)


CurrentTenant = Annotated[Tenant, Depends(current_tenant)]


async def require_admin(
    request: Request, ctx: Ctx, credentials: Annotated[Credentials, Security(ADMIN_KEY)]
) -> None:
    """The admin key; a wrong key counts against the caller's failed-auth limit like a tenant's."""
    token = bearer_or_401(credentials, "admin key")
    if ctx.settings.admin_key is None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "the admin API is disabled: set BANDITGATE_ADMIN_KEY")
    address = await admitted_address(request, ctx)
    if is_admin_key(token, ctx.settings.admin_key.get_secret_value()):
        return
    if await ctx.catalog.tenant_for_key(token) is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "admin endpoints need the admin key, not a tenant key")
    await ctx.limiter.count_failure(address)
    raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid admin key", headers=_UNAUTHORIZED)


AdminOnly = Depends(require_admin)
