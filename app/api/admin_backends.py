"""Admin: the backend catalog (models, prices, endpoints). Backend API keys are write-only."""

from __future__ import annotations

from fastapi import APIRouter, status
from sqlalchemy import select

from app import catalog_admin
from app.api.contract import documented
from app.api.deps import AdminOnly, Ctx, Session
from app.catalog_admin import Announcements, deliver, get_backend
from app.input_types import Text
from app.schemas import BackendCreate, BackendOut, BackendUpdate
from app.store.models import Backend

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


@router.post("", status_code=status.HTTP_201_CREATED, response_model=BackendOut, responses=documented(409))
async def create_backend(body: BackendCreate, session: Session, ctx: Ctx) -> BackendOut:
    news = Announcements()
    backend = await catalog_admin.create_backend(session, ctx.settings, body, news)
    await session.commit()
    await deliver(ctx, news)
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
    news = Announcements()
    catalog_admin.update_backend(ctx.settings, backend, body, news)
    await session.commit()
    await deliver(ctx, news)
    return backend_out(backend)


@router.delete("/{name:path}", status_code=status.HTTP_204_NO_CONTENT, responses=documented(409))
async def delete_backend(name: Text, session: Session, ctx: Ctx) -> None:
    """409 while a router still lists the backend as an arm."""
    news = Announcements()
    await catalog_admin.delete_backend(session, await get_backend(session, name), news)
    await session.commit()
    await deliver(ctx, news)
