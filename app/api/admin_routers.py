"""Admin: a tenant's routers (policy, hyperparameters, arms) and their learned state."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import APIRouter, HTTPException, status
from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from app.api.admin_tenants import get_tenant
from app.api.contract import documented
from app.api.deps import AdminOnly, Ctx, Session
from app.api.errors import InvalidParam
from app.events import RouterChanged
from app.input_types import Text
from app.jsonable import jsonable
from app.schemas import (
    EmbedTextConfig,
    RouterCreate,
    RouterOut,
    RouterPriors,
    RouterStateImport,
    RouterStateOut,
    RouterUpdate,
)
from app.state import fresh_policy
from app.store.eventlog import max_event_id, snapshot_row
from app.store.models import Backend, Router, RouterCounter, Tenant
from routers.base import PolicyConfigError, decode_state, encode_state
from routers.default import resolve_named
from routers.registry import POLICIES, build_policy, check_router, policy_dim, restore_policy

router = APIRouter(
    prefix="/admin/tenants/{tenant}/routers", tags=["admin: routers"], dependencies=[AdminOnly]
)

UNPROCESSABLE = status.HTTP_422_UNPROCESSABLE_CONTENT
PRIORS = "priors"  # the hyperparameter of declared priors, {model: {"mean", "weight"}}


def router_out(r: Router, tenant: Tenant) -> RouterOut:
    return RouterOut(
        id=r.id,
        tenant=tenant.name,
        name=r.name,
        policy=r.policy,
        hyperparameters=r.hyperparameters,
        arms=list(r.arms),
        reward_range=[r.reward_lo, r.reward_hi],
        seed=r.seed,
        is_default=r.is_default,
        version=r.version,
        judge_url=r.judge_url,
        judge_threshold=r.judge_threshold,
        embed_text=EmbedTextConfig.model_validate(r.embed_text or {}),
        created_at=r.created_at,
        updated_at=r.updated_at,
    )


async def get_router(session: Session, tenant: Tenant, name: str) -> Router:
    row = await session.scalar(select(Router).where(Router.tenant_id == tenant.id, Router.name == name))
    if row is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"router {name!r} not found for tenant {tenant.name!r}"
        )
    return row


async def validate(
    session: Session,
    policy: str,
    arms: list[str],
    seed: int,
    hp: dict[str, Any],
    embedding_dim: int,
    arm_references: bool = True,
) -> None:
    """422 unless every arm is a known backend and the registry checks and builds the policy: typed
    hyperparameters, a ``dim`` equal to the embedder's and, with ``arm_references``, hyperparameters
    that name an arm (``always``'s ``model``, ``incumbent``) naming one of ``arms``."""
    if len(set(arms)) != len(arms):
        raise InvalidParam("body.arms", f"arms must be distinct, got {arms}")
    known = set(await session.scalars(select(Backend.name).where(Backend.name.in_(arms))))
    missing = [a for a in arms if a not in known]
    if missing:
        raise InvalidParam("body.arms", f"arms {missing} are not backends; create them under /admin/backends")
    if policy not in POLICIES:
        raise InvalidParam("body.policy", f"unknown policy {policy!r}; known: {', '.join(sorted(POLICIES))}")
    if arm_references:
        check_prior_models(hp.get(PRIORS), arms, f"body.hyperparameters.{PRIORS}")
    try:
        check_router(policy, arms, hp, embedding_dim, arm_references)
        build_policy(policy, arms, seed, hp)
    except PolicyConfigError as exc:
        raise InvalidParam("body.hyperparameters", str(exc)) from exc


def check_prior_models(priors: Any, arms: Sequence[str], param: str) -> None:
    """422 naming ``param`` when declared priors name a model that is not one of ``arms`` (a prior of
    a model the router never calls would be evidence about nothing it can play)."""
    if not isinstance(priors, Mapping):
        return
    strangers = [str(m) for m in priors if m not in arms]
    if strangers:
        raise InvalidParam(
            param, f"priors name {strangers}, which are not arms of the router; its arms: {list(arms)}"
        )


async def clear_other_defaults(session: Session, tenant: Tenant, keep: Router) -> None:
    await session.execute(
        update(Router).where(Router.tenant_id == tenant.id, Router.id != keep.id).values(is_default=False)
    )


async def announce(ctx: Ctx, row: Router) -> None:
    """Tell every replica (this one included) that the router changed, so they reload it."""
    ctx.states.drop(row.id)
    ctx.catalog.clear()
    ctx.round_counts.forget()
    # If the bus is down, replicas still notice the new version on their next request for this router.
    with contextlib.suppress(Exception):
        await ctx.bus.publish(RouterChanged(router_id=row.id, version=row.version))


@router.post("", status_code=status.HTTP_201_CREATED, response_model=RouterOut, responses=documented(409))
async def create_router(tenant: Text, body: RouterCreate, ctx: Ctx, session: Session) -> RouterOut:
    owner = await get_tenant(session, tenant)
    # a router without a policy gets the default, stored resolved: a later default does not change it
    policy, hyperparameters = resolve_named(body.policy, body.hyperparameters)
    await validate(session, policy, body.arms, body.seed, hyperparameters, ctx.embeddings.dim)
    row = Router(
        tenant_id=owner.id,
        name=body.name,
        policy=policy,
        hyperparameters=hyperparameters,
        arms=body.arms,
        reward_lo=body.reward_range[0],
        reward_hi=body.reward_range[1],
        seed=body.seed,
        is_default=body.is_default,
        judge_url=body.judge_url,
        judge_threshold=body.judge_threshold,
        embed_text=None if body.embed_text is None else body.embed_text.model_dump(),
        version=1,
    )
    session.add(row)
    try:
        await session.flush()
    except IntegrityError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, f"router {body.name!r} already exists") from exc
    if body.is_default:
        await clear_other_defaults(session, owner, row)
    await session.commit()
    if body.is_default:  # another router was the default: cached copies of it are stale
        await ctx.catalog.announce(ctx.bus, f"router {row.id} is the default")
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
    policy = body.policy or row.policy
    arms = body.arms if body.arms is not None else list(row.arms)
    seed = body.seed if body.seed is not None else row.seed
    if body.hyperparameters is not None:
        hp = body.hyperparameters
    else:
        hp = row.hyperparameters if policy == row.policy else {}
    policy, hp = resolve_named(policy, hp)  # "default" is stored resolved, as on creation
    # An arm that a hyperparameter names may leave the router (the policy falls back); a new policy or
    # new hyperparameters must name current arms.
    reconfigured = body.hyperparameters is not None or policy != row.policy
    await validate(session, policy, arms, seed, hp, ctx.embeddings.dim, arm_references=reconfigured)
    row.policy, row.arms, row.seed, row.hyperparameters = policy, arms, seed, hp
    if body.reward_range is not None:
        row.reward_lo, row.reward_hi = body.reward_range
    if body.judge_url is not None:
        row.judge_url = body.judge_url or None
    if body.judge_threshold is not None:
        row.judge_threshold = body.judge_threshold
    # new decisions embed by the new rule; the learned state keeps its vectors
    if body.embed_text is not None:
        row.embed_text = body.embed_text.model_dump()
    if body.is_default is not None:
        row.is_default = body.is_default
        if body.is_default:
            await clear_other_defaults(session, owner, row)
    row.version += 1
    await session.commit()
    await announce(ctx, row)
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
    arms = list(row.arms)
    check_prior_models(body.priors, arms, f"body.{PRIORS}")
    for model, prior in body.priors.items():
        if not row.reward_lo <= prior.mean <= row.reward_hi:
            raise InvalidParam(  # the field is named up to "priors": a model name may hold dots
                f"body.{PRIORS}",
                f"prior mean {prior.mean} of {model!r} is outside the router's reward_range "
                f"[{row.reward_lo}, {row.reward_hi}]",
            )
    hp = {k: v for k, v in (row.hyperparameters or {}).items() if k != PRIORS}
    if body.priors:
        hp[PRIORS] = {model: prior.model_dump() for model, prior in body.priors.items()}
    try:
        # the other hyperparameters were accepted before: an arm they name may have left since
        await validate(session, row.policy, arms, row.seed, hp, ctx.embeddings.dim, arm_references=False)
    except InvalidParam as exc:
        raise InvalidParam(
            f"body.{PRIORS}", f"policy {row.policy!r} refuses these priors: {exc.detail}"
        ) from exc
    row.hyperparameters = hp
    row.version += 1
    await session.commit()
    await announce(ctx, row)
    return router_out(row, owner)


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_router(tenant: Text, name: Text, ctx: Ctx, session: Session) -> None:
    """Deletes the router with its decisions, feedback and snapshots."""
    owner = await get_tenant(session, tenant)
    row = await get_router(session, owner, name)
    await session.delete(row)
    await session.commit()
    row.version += 1_000_000
    await announce(ctx, row)


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


async def _replace_state(ctx: Ctx, session: Session, row: Router, kind: str, state: bytes) -> None:
    watermark = await max_event_id(session, row.id)
    session.add(snapshot_row(row, kind, watermark, 0, state))
    # the new state carries its own counts (t, queries); the gateway's count starts again from it
    await session.execute(delete(RouterCounter).where(RouterCounter.router_id == row.id))
    row.version += 1
    await session.commit()
    await announce(ctx, row)


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
    await _replace_state(ctx, session, row, "import", encode_state(state))
    return router_out(row, owner)


@router.delete("/{name}/state", response_model=RouterOut)
async def reset_state(tenant: Text, name: Text, ctx: Ctx, session: Session) -> RouterOut:
    """Forget everything learned: the policy starts fresh from the next event."""
    owner = await get_tenant(session, tenant)
    row = await get_router(session, owner, name)
    await _replace_state(ctx, session, row, "reset", encode_state(fresh_policy(row).state_dict()))
    return router_out(row, owner)
