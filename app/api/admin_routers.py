"""Admin: a tenant's routers (policy, hyperparameters, arms) and their learned state."""

from __future__ import annotations

import json

from fastapi import APIRouter, HTTPException, status
from sqlalchemy import select

from app import catalog_admin
from app.api.contract import documented
from app.api.deps import AdminOnly, Ctx, Session
from app.catalog_admin import Announcements, deliver, get_router, get_tenant, router_fields
from app.input_types import Text
from app.jsonable import jsonable
from app.schemas import (
    RouterCreate,
    RouterOut,
    RouterPriors,
    RouterStateImport,
    RouterStateOut,
    RouterUpdate,
)
from app.store.db import transaction
from app.store.models import Router, Tenant
from routers.base import PolicyConfigError, decode_state, encode_state
from routers.registry import policy_dim, restore_policy

router = APIRouter(
    prefix="/admin/tenants/{tenant}/routers", tags=["admin: routers"], dependencies=[AdminOnly]
)

UNPROCESSABLE = status.HTTP_422_UNPROCESSABLE_CONTENT
PRIORS = "priors"  # the hyperparameter of declared priors, {model: {"mean", "weight"}}


def router_out(r: Router, tenant: Tenant) -> RouterOut:
    return RouterOut(
        id=r.id,
        tenant=tenant.name,
        version=r.version,
        created_at=r.created_at,
        updated_at=r.updated_at,
        **router_fields(r),
    )


@router.post("", status_code=status.HTTP_201_CREATED, response_model=RouterOut, responses=documented(409))
async def create_router(tenant: Text, body: RouterCreate, ctx: Ctx, session: Session) -> RouterOut:
    owner = await get_tenant(session, tenant)
    news = Announcements()
    row = await catalog_admin.create_router(session, owner, body, ctx.embeddings.dim, news)
    await session.commit()
    await deliver(ctx, news)
    return router_out(row, owner)


@router.get("", response_model=list[RouterOut])
async def list_routers(tenant: Text, session: Session) -> list[RouterOut]:
    owner = await get_tenant(session, tenant)
    rows = await session.scalars(select(Router).where(Router.tenant_id == owner.id).order_by(Router.id))
    return [router_out(r, owner) for r in rows]


@router.get("/{name}", response_model=RouterOut)
async def read_router(tenant: Text, name: Text, session: Session) -> RouterOut:
    owner = await get_tenant(session, tenant)
    return router_out(await get_router(session, owner, name), owner)


@router.patch("/{name}", response_model=RouterOut)
async def update_router(
    tenant: Text, name: Text, body: RouterUpdate, ctx: Ctx, session: Session
) -> RouterOut:
    """Change a router. New arms join the learned state as cold arms and removed ones leave it; a new
    policy, hyperparameters or seed relearn from the log since the last reset or import. ``policy:
    "default"`` stores the default's concrete policy and hyperparameters (with the given ones on top)."""
    owner = await get_tenant(session, tenant)
    row = await get_router(session, owner, name)
    news = Announcements()
    await catalog_admin.update_router(session, owner, row, body, ctx.embeddings.dim, news)
    await session.commit()
    await deliver(ctx, news)
    return router_out(row, owner)


@router.put("/{name}/priors", response_model=RouterOut)
async def set_priors(tenant: Text, name: Text, body: RouterPriors, ctx: Ctx, session: Session) -> RouterOut:
    """Declare the router's prior quality per model (a team's own eval, a public leaderboard): each
    ``{mean, weight}`` counts as ``weight`` observations of reward ``mean`` of that arm, read as evidence
    by the incumbent check (the floor), the default's choice and every policy that keeps per-model
    statistics (docs/policies/trusted-routing.md). Replaces the ``priors`` hyperparameter; ``{}``
    removes it. Like any change of hyperparameters, the policy relearns from the log since the last
    reset or import. 422 (naming the field) for a model that is not an arm, a mean outside the router's
    ``reward_range``, a weight <= 0, or a policy that takes no priors."""
    owner = await get_tenant(session, tenant)
    row = await get_router(session, owner, name)
    news = Announcements()
    priors = {model: prior.model_dump() for model, prior in body.priors.items()}
    await catalog_admin.set_priors(session, row, priors, ctx.embeddings.dim, news)
    await session.commit()
    await deliver(ctx, news)
    return router_out(row, owner)


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_router(tenant: Text, name: Text, ctx: Ctx, session: Session) -> None:
    """Deletes the router with its decisions, feedback and snapshots."""
    news = Announcements()

    async def delete() -> None:
        owner = await get_tenant(session, tenant)
        await catalog_admin.delete_router(session, await get_router(session, owner, name), news)

    await transaction(session, delete)
    await deliver(ctx, news)


@router.get("/{name}/state", response_model=RouterStateOut)
async def export_state(tenant: Text, name: Text, ctx: Ctx, session: Session) -> RouterStateOut:
    """The policy's learned state as this process holds it (snapshot plus folded events)."""
    owner = await get_tenant(session, tenant)
    row = await get_router(session, owner, name)
    runtime = await ctx.states.get(row)
    return RouterStateOut(
        router=row.name,
        policy=row.policy,
        version=row.version,
        watermark=runtime.watermark,
        events_folded=runtime.events_folded,
        last_event_id=runtime.last_event_id,
        state=json.loads(encode_state(runtime.policy.state_dict())),
    )


@router.post("/{name}/state", response_model=RouterOut)
async def import_state(
    tenant: Text, name: Text, body: RouterStateImport, ctx: Ctx, session: Session
) -> RouterOut:
    """Replace the learned state (warm start from offline logs or another router's export). The router
    takes the state's policy, hyperparameters and seed; events up to now are not folded on top."""
    owner = await get_tenant(session, tenant)
    row = await get_router(session, owner, name)
    try:
        decoded = decode_state(json.dumps(jsonable(body.state)))
        policy = restore_policy(decoded)
    except (PolicyConfigError, KeyError, TypeError, ValueError) as exc:
        raise HTTPException(UNPROCESSABLE, f"state cannot be restored: {exc}") from exc
    dim = policy_dim(policy)
    if dim is not None and dim != ctx.embeddings.dim:
        raise HTTPException(
            UNPROCESSABLE,
            f"state cannot be restored: its dim is {dim}, this gateway's embedder gives {ctx.embeddings.dim}",
        )
    state = policy.state_dict()
    row.policy = str(state["policy"])
    row.hyperparameters = jsonable(state.get("config", {}))
    if state.get("seed") is not None:
        row.seed = int(state["seed"])
    news = Announcements()
    await catalog_admin.replace_state(session, row, "import", encode_state(state), news)
    await session.commit()
    await deliver(ctx, news)
    return router_out(row, owner)


@router.delete("/{name}/state", response_model=RouterOut)
async def reset_state(tenant: Text, name: Text, ctx: Ctx, session: Session) -> RouterOut:
    """Forget everything learned: the policy starts fresh from the next event."""
    news = Announcements()

    async def reset() -> RouterOut:
        owner = await get_tenant(session, tenant)
        row = await get_router(session, owner, name)
        await catalog_admin.reset_state(session, row, news)
        return router_out(row, owner)

    done = await transaction(session, reset)
    await deliver(ctx, news)
    return done
