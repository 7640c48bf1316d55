"""Admin: the backend catalog (models, prices, endpoints). Backend API keys are write-only."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from app.api.contract import documented
from app.api.deps import AdminOnly, Ctx, Session
from app.backend_keys import SecretKeyMissing, encrypt_key, fernet_for
from app.input_types import Text
from app.schemas import BackendCreate, BackendOut, BackendUpdate
from app.store.models import Backend, Router

router = APIRouter(prefix="/admin/backends", tags=["admin: backends"], dependencies=[AdminOnly])


def backend_out(b: Backend) -> BackendOut:
    return BackendOut(
        id=b.id,
        name=b.name,
        kind=b.kind,
        base_url=b.base_url,
        upstream_model=b.upstream_model,
        usd_per_mtok_in=b.usd_per_mtok_in,
        usd_per_mtok_out=b.usd_per_mtok_out,
        usd_per_call=b.usd_per_call,
        default_tokens_out=b.default_tokens_out,
        timeout_s=b.timeout_s,
        has_api_key=b.api_key_secret is not None,
        created_at=b.created_at,
        updated_at=b.updated_at,
    )


def sealed_key(ctx: Ctx, api_key: str | None) -> str | None:
    """The API key encrypted for storage; 422 when no BANDITGATE_SECRET_KEY is configured."""
    if api_key is None:
        return None
    try:
        return encrypt_key(fernet_for(ctx.settings.secret_key), api_key)
    except SecretKeyMissing as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc


async def get_backend(session: Session, name: str) -> Backend:
    backend = await session.scalar(select(Backend).where(Backend.name == name))
    if backend is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"backend {name!r} not found")
    return backend


@router.post("", status_code=status.HTTP_201_CREATED, response_model=BackendOut, responses=documented(409))
async def create_backend(body: BackendCreate, session: Session, ctx: Ctx) -> BackendOut:
    fields = body.model_dump(exclude={"api_key"})
    backend = Backend(**fields, api_key_secret=sealed_key(ctx, body.api_key))
    session.add(backend)
    try:
        await session.commit()
    except IntegrityError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, f"backend {body.name!r} already exists") from exc
    await ctx.catalog.announce(ctx.bus, f"backend {body.name} created")
    return backend_out(backend)


@router.get("", response_model=list[BackendOut])
async def list_backends(session: Session) -> list[BackendOut]:
    return [backend_out(b) for b in await session.scalars(select(Backend).order_by(Backend.id))]


@router.get("/{name:path}", response_model=BackendOut)
async def read_backend(name: Text, session: Session) -> BackendOut:
    return backend_out(await get_backend(session, name))


@router.patch("/{name:path}", response_model=BackendOut)
async def update_backend(name: Text, body: BackendUpdate, session: Session, ctx: Ctx) -> BackendOut:
    backend = await get_backend(session, name)
    changes = body.model_dump(exclude_unset=True)
    if "api_key" in changes:
        backend.api_key_secret = sealed_key(ctx, changes.pop("api_key"))
    for field, value in changes.items():
        if value is None and field != "upstream_model":
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"{field} cannot be null")
        setattr(backend, field, value)
    await session.commit()
    await ctx.catalog.announce(ctx.bus, f"backend {name} changed")
    return backend_out(backend)


@router.delete("/{name:path}", status_code=status.HTTP_204_NO_CONTENT, responses=documented(409))
async def delete_backend(name: Text, session: Session, ctx: Ctx) -> None:
    """409 while a router still lists the backend as an arm."""
    backend = await get_backend(session, name)
    users = [r.name for r in await session.scalars(select(Router)) if name in (r.arms or [])]
    if users:
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"backend {name!r} is an arm of routers {sorted(users)}"
        )
    await session.delete(backend)
    await session.commit()
    await ctx.catalog.announce(ctx.bus, f"backend {name} deleted")
