"""The changes an operator makes to the catalog (tenants, their API keys and rate limits, backends,
routers and their learned state), each checked once here: the admin API's endpoints and a configuration
file's ``apply`` (app/declared_config/) both call these, so a change either would refuse is refused by
both with the same message.

Each operation works in the caller's session and never commits: an endpoint commits its one change,
``apply`` a whole file in one transaction. What other replicas must hear is noted in an
``Announcements`` and delivered after the commit (``deliver`` inside an app, ``publish`` from a
process without one). Refusals are domain errors (app/routing/errors.py): ``Invalid`` (422, ``param``
naming the body field), ``NotFound`` (404) and ``Conflict`` (409).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth import display_prefix, hash_key, new_api_key
from app.backend_keys import SecretKeyMissing, encrypt_key, fernet_for
from app.bus import EventBus
from app.events import CatalogChanged, Message, RouterChanged
from app.routing.errors import Conflict, Invalid, NotFound
from app.schemas import (
    BackendCreate,
    BackendUpdate,
    EmbedTextConfig,
    JudgeConfig,
    RouterCreate,
    RouterUpdate,
    TenantLimits,
)
from app.settings import Settings
from app.state import fresh_policy
from app.store.db import lock_routers
from app.store.eventlog import max_event_id, snapshot_row
from app.store.models import ApiKey, Backend, Router, RouterCounter, Tenant, utcnow
from routers.base import PolicyConfigError, encode_state
from routers.default import resolve_named
from routers.registry import POLICIES, build_policy, check_router

PRIORS = "priors"  # the hyperparameter of declared priors, {model: {"mean", "weight"}}

if TYPE_CHECKING:
    from app.context import AppContext


@dataclass
class Announcements:
    """What to tell the replicas once the change is committed: catalog changes (keys, tenants, backends,
    a new default router) and routers whose configuration or state changed (they reload them)."""

    catalog: list[str] = field(default_factory=list)
    routers: dict[int, int] = field(default_factory=dict)  # router id -> its version after the change

    def messages(self) -> list[Message]:
        found: list[Message] = [CatalogChanged(what) for what in self.catalog]
        return found + [RouterChanged(router_id=i, version=v) for i, v in self.routers.items()]

    def __bool__(self) -> bool:
        return bool(self.catalog or self.routers)


async def deliver(ctx: AppContext, news: Announcements) -> None:
    """In an app, after the commit: forget this process's cached copies and tell every replica. If the
    bus is down, the others catch up within ``catalog_ttl_s`` (and a router on its new version)."""
    for router_id in news.routers:
        ctx.states.drop(router_id)
    if news.routers:
        ctx.round_counts.forget()
    ctx.catalog.clear()
    await publish(ctx.bus, news)


async def publish(bus: EventBus, news: Announcements) -> None:
    """Send the announcements on ``bus`` (a process that holds no caches of its own: ``apply``)."""
    for message in news.messages():
        with contextlib.suppress(Exception):
            await bus.publish(message)


def already_exists(kind: str, name: str) -> Conflict:
    return Conflict(f"{kind} {name!r} already exists")


# --- tenants, keys and rate limits ------------------------------------------------------------------


async def get_tenant(session: AsyncSession, name: str) -> Tenant:
    tenant = await session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        raise NotFound(f"tenant {name!r} not found")
    return tenant


async def create_tenant(session: AsyncSession, name: str) -> Tenant:
    tenant = Tenant(name=name)
    session.add(tenant)
    try:
        await session.flush()
    except IntegrityError as exc:
        raise already_exists("tenant", name) from exc
    return tenant


def set_limits(tenant: Tenant, limits: TenantLimits, news: Announcements) -> None:
    """Replace the tenant's rate limits (a field left null: the server's default)."""
    tenant.rate_limit_rps = limits.rate_limit_rps
    tenant.rate_limit_burst = limits.rate_limit_burst
    tenant.rate_limit_concurrency = limits.rate_limit_concurrency
    news.catalog.append(f"tenant {tenant.name} limits changed")


def configured_limits(tenant: Tenant) -> TenantLimits:
    return TenantLimits(
        rate_limit_rps=tenant.rate_limit_rps,
        rate_limit_burst=tenant.rate_limit_burst,
        rate_limit_concurrency=tenant.rate_limit_concurrency,
    )


async def delete_tenant(session: AsyncSession, tenant: Tenant, news: Announcements) -> None:
    """The tenant with its keys, routers, decisions and feedback."""
    await lock_routers(
        session, list(await session.scalars(select(Router.id).where(Router.tenant_id == tenant.id)))
    )
    await session.delete(tenant)
    await session.flush()
    news.catalog.append(f"tenant {tenant.name} deleted")


async def issue_key(
    session: AsyncSession, tenant: Tenant, name: str, key: str | None = None
) -> tuple[ApiKey, str]:
    """A new API key of the tenant (random unless ``key`` is given), stored as its hash; the key itself
    is returned, and nowhere kept."""
    key = key if key is not None else new_api_key()
    if await session.scalar(select(ApiKey.id).where(ApiKey.key_hash == hash_key(key))) is not None:
        raise already_exists("key", display_prefix(key) + "...")
    row = ApiKey(tenant_id=tenant.id, key_hash=hash_key(key), prefix=display_prefix(key), name=name)
    session.add(row)
    await session.flush()
    return row, key


async def get_key(session: AsyncSession, tenant: Tenant, key_id: int) -> ApiKey:
    key = await session.scalar(select(ApiKey).where(ApiKey.id == key_id, ApiKey.tenant_id == tenant.id))
    if key is None:
        raise NotFound(f"key {key_id} not found for tenant {tenant.name!r}")
    return key


def revoke_key(key: ApiKey, news: Announcements) -> None:
    """Every replica refuses the key once the bus delivers the change (``catalog_ttl_s`` at worst)."""
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        news.catalog.append(f"key {key.id} revoked")


# --- backends ---------------------------------------------------------------------------------------


def sealed_key(settings: Settings, api_key: str | None) -> str | None:
    """The API key encrypted for storage; ``Invalid`` when no BANDITGATE_SECRET_KEY is configured."""
    if api_key is None:
        return None
    try:
        return encrypt_key(fernet_for(settings.secret_key), api_key)
    except SecretKeyMissing as exc:
        raise Invalid(str(exc)) from exc


async def get_backend(session: AsyncSession, name: str) -> Backend:
    backend = await session.scalar(select(Backend).where(Backend.name == name))
    if backend is None:
        raise NotFound(f"backend {name!r} not found")
    return backend


async def create_backend(
    session: AsyncSession, settings: Settings, body: BackendCreate, news: Announcements
) -> Backend:
    fields = body.model_dump(exclude={"api_key"})
    backend = Backend(**fields, api_key_secret=sealed_key(settings, body.api_key))
    session.add(backend)
    try:
        await session.flush()
    except IntegrityError as exc:
        raise already_exists("backend", body.name) from exc
    news.catalog.append(f"backend {body.name} created")
    return backend


def update_backend(settings: Settings, backend: Backend, body: BackendUpdate, news: Announcements) -> None:
    """Set the fields ``body`` holds (``api_key`` null removes the key; no other field may be null but
    ``upstream_model``)."""
    changes = body.model_dump(exclude_unset=True)
    if "api_key" in changes:
        backend.api_key_secret = sealed_key(settings, changes.pop("api_key"))
    for name, value in changes.items():
        if value is None and name != "upstream_model":
            raise Invalid(f"{name} cannot be null")
        setattr(backend, name, value)
    news.catalog.append(f"backend {backend.name} changed")


async def delete_backend(session: AsyncSession, backend: Backend, news: Announcements) -> None:
    """``Conflict`` while a router still lists the backend as an arm."""
    routers = list(await session.scalars(select(Router)))
    users = [r.name for r in routers if backend.name in (r.arms or [])]
    if users:
        raise Conflict(f"backend {backend.name!r} is an arm of routers {sorted(users)}")
    judged = [r.name for r in routers if (r.judge or {}).get("backend") == backend.name]
    if judged:
        raise Conflict(f"backend {backend.name!r} is the judge of routers {sorted(judged)}")
    await session.delete(backend)
    await session.flush()
    news.catalog.append(f"backend {backend.name} deleted")


# --- routers ----------------------------------------------------------------------------------------


async def get_router(session: AsyncSession, tenant: Tenant, name: str) -> Router:
    row = await session.scalar(select(Router).where(Router.tenant_id == tenant.id, Router.name == name))
    if row is None:
        raise NotFound(f"router {name!r} not found for tenant {tenant.name!r}")
    return row


def router_fields(row: Router) -> dict[str, Any]:
    """The router's configuration as its create body names it (what the API shows and a file declares)."""
    return {
        "name": row.name,
        "policy": row.policy,
        "hyperparameters": row.hyperparameters,
        "arms": list(row.arms),
        "reward_range": [row.reward_lo, row.reward_hi],
        "seed": row.seed,
        "is_default": row.is_default,
        "judge": stored_judge(row),
        "embed_text": EmbedTextConfig.model_validate(row.embed_text or {}),
    }


def stored_judge(row: Router) -> JudgeConfig | None:
    """The router's judge as stored; one the checks would refuse now (a url stored before they existed,
    written into the database directly) is shown as it is: its calls fail, reading it does not."""
    if not row.judge:
        return None
    try:
        return JudgeConfig.model_validate(row.judge)
    except ValidationError:
        values: dict[str, Any] = {k: v for k, v in row.judge.items() if k in JudgeConfig.model_fields}
        return JudgeConfig.model_construct(**values)


async def validate_router(
    session: AsyncSession,
    policy: str,
    arms: list[str],
    seed: int,
    hp: dict[str, Any],
    embedding_dim: int,
    arm_references: bool = True,
) -> None:
    """``Invalid`` unless every arm is a known backend and the registry checks and builds the policy:
    typed hyperparameters, a ``dim`` equal to the embedder's and, with ``arm_references``,
    hyperparameters that name an arm (``always``'s ``model``, ``incumbent``) naming one of ``arms``."""
    if len(set(arms)) != len(arms):
        raise Invalid(f"arms must be distinct, got {arms}", param="body.arms")
    known = set(await session.scalars(select(Backend.name).where(Backend.name.in_(arms))))
    missing = [a for a in arms if a not in known]
    if missing:
        raise Invalid(
            f"arms {missing} are not backends; create them under /admin/backends", param="body.arms"
        )
    if policy not in POLICIES:
        raise Invalid(f"unknown policy {policy!r}; known: {', '.join(sorted(POLICIES))}", param="body.policy")
    if arm_references:
        check_prior_models(hp.get(PRIORS), arms, f"body.hyperparameters.{PRIORS}")
    try:
        check_router(policy, arms, hp, embedding_dim, arm_references)
        build_policy(policy, arms, seed, hp)
    except PolicyConfigError as exc:
        raise Invalid(str(exc), param="body.hyperparameters") from exc


async def check_judge(
    session: AsyncSession, judge: JudgeConfig | None, arms: Sequence[str], reward_range: Sequence[float]
) -> dict[str, Any] | None:
    """The judge's stored form (None: no judge), or ``Invalid``: a judge needs a router with a chat arm
    (answers it can read); a backend judge names a chat backend of the catalog and a threshold in
    [0, 1] (its score's range); a url judge's threshold lies in the router's reward range (its scores'
    units)."""
    if judge is None or judge.empty:
        return None
    kinds = set(await session.scalars(select(Backend.kind).where(Backend.name.in_(list(arms)))))
    if "chat" not in kinds:
        raise Invalid("an image router has no judge: a judge grades chat answers", param="body.judge")
    lo, hi = reward_range
    if judge.backend is not None:
        kind = await session.scalar(select(Backend.kind).where(Backend.name == judge.backend))
        if kind is None:
            raise Invalid(
                f"judge backend {judge.backend!r} is not a backend; create it under /admin/backends",
                param="body.judge.backend",
            )
        if kind != "chat":
            raise Invalid(
                f"judge backend {judge.backend!r} is a {kind} backend, not chat", param="body.judge"
            )
        lo, hi = 0.0, 1.0
    if not lo <= judge.threshold <= hi:
        raise Invalid(
            f"judge threshold {judge.threshold} is outside [{lo}, {hi}]", param="body.judge.threshold"
        )
    return judge.stored()


def check_prior_models(priors: Any, arms: Sequence[str], param: str) -> None:
    """``Invalid`` naming ``param`` when declared priors name a model that is not one of ``arms`` (a
    prior of a model the router never calls would be evidence about nothing it can play)."""
    if not isinstance(priors, Mapping):
        return
    strangers = [str(m) for m in priors if m not in arms]
    if strangers:
        raise Invalid(
            f"priors name {strangers}, which are not arms of the router; its arms: {list(arms)}", param=param
        )


async def set_priors(
    session: AsyncSession,
    row: Router,
    priors: Mapping[str, Mapping[str, float]],
    embedding_dim: int,
    news: Announcements,
) -> None:
    """Replace the router's ``priors`` hyperparameter ({model: {mean, weight}}; empty removes it): each
    model must be an arm, each mean within the router's reward range, and the policy must take priors.
    The policy relearns from the log, as after any change of hyperparameters."""
    arms = list(row.arms)
    check_prior_models(priors, arms, f"body.{PRIORS}")
    for model, prior in priors.items():
        if not row.reward_lo <= prior["mean"] <= row.reward_hi:
            raise Invalid(  # the field is named up to "priors": a model name may hold dots
                f"prior mean {prior['mean']} of {model!r} is outside the router's reward_range "
                f"[{row.reward_lo}, {row.reward_hi}]",
                param=f"body.{PRIORS}",
            )
    hp = {k: v for k, v in (row.hyperparameters or {}).items() if k != PRIORS}
    if priors:
        hp[PRIORS] = {model: dict(prior) for model, prior in priors.items()}
    try:
        # the other hyperparameters were accepted before: an arm they name may have left since
        await validate_router(session, row.policy, arms, row.seed, hp, embedding_dim, arm_references=False)
    except Invalid as exc:
        raise Invalid(
            f"policy {row.policy!r} refuses these priors: {exc.message}", param=f"body.{PRIORS}"
        ) from exc
    row.hyperparameters = hp
    row.version += 1
    await session.flush()
    news.routers[row.id] = row.version


JUDGE_RATES = ("judge_tpr", "judge_tnr")


async def set_judge_rates(
    session: AsyncSession,
    row: Router,
    tpr: float | None,
    tnr: float | None,
    embedding_dim: int,
    news: Announcements,
) -> None:
    """Set the router's ``judge_tpr`` / ``judge_tnr`` hyperparameters to a judge's measured rates (the
    Bayes correction of routers/logistic_ucb.py). 422 when a rate could not be measured (the labels
    held no success, or no failure) or the policy takes no such hyperparameter. The policy relearns
    from the log, as after any change of hyperparameters."""
    if tpr is None or tnr is None:
        raise Invalid(
            "the labels need both a success and a failure the judge scored to measure TPR and TNR",
            param="body.apply",
        )
    hp = {**(row.hyperparameters or {}), JUDGE_RATES[0]: tpr, JUDGE_RATES[1]: tnr}
    try:
        await validate_router(
            session, row.policy, list(row.arms), row.seed, hp, embedding_dim, arm_references=False
        )
    except Invalid as exc:
        raise Invalid(
            f"policy {row.policy!r} cannot take the measured rates: {exc.message}", param="body.apply"
        ) from exc
    row.hyperparameters = hp
    row.version += 1
    await session.flush()
    news.routers[row.id] = row.version


async def clear_other_defaults(session: AsyncSession, tenant: Tenant, keep: Router) -> None:
    await session.execute(
        update(Router).where(Router.tenant_id == tenant.id, Router.id != keep.id).values(is_default=False)
    )


async def create_router(
    session: AsyncSession, tenant: Tenant, body: RouterCreate, embedding_dim: int, news: Announcements
) -> Router:
    # a router without a policy gets the default, stored resolved: a later default does not change it
    policy, hyperparameters = resolve_named(body.policy, body.hyperparameters)
    await validate_router(session, policy, body.arms, body.seed, hyperparameters, embedding_dim)
    judge = await check_judge(session, body.judge, body.arms, body.reward_range)
    row = Router(
        tenant_id=tenant.id,
        name=body.name,
        policy=policy,
        hyperparameters=hyperparameters,
        arms=body.arms,
        reward_lo=body.reward_range[0],
        reward_hi=body.reward_range[1],
        seed=body.seed,
        is_default=body.is_default,
        judge=judge,
        embed_text=None if body.embed_text is None else body.embed_text.model_dump(),
        version=1,
    )
    session.add(row)
    try:
        await session.flush()
    except IntegrityError as exc:
        raise already_exists("router", body.name) from exc
    if body.is_default:  # another router was the default: cached copies of it are stale
        await clear_other_defaults(session, tenant, row)
        news.catalog.append(f"router {row.id} is the default")
    return row


async def update_router(
    session: AsyncSession,
    tenant: Tenant,
    row: Router,
    body: RouterUpdate,
    embedding_dim: int,
    news: Announcements,
) -> None:
    """Change a router. New arms join the learned state as cold arms and removed ones leave it; a new
    policy, hyperparameters or seed relearn from the log since the last reset or import. ``policy:
    "default"`` stores the default's concrete policy and hyperparameters (with the given ones on top)."""
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
    await validate_router(session, policy, arms, seed, hp, embedding_dim, arm_references=reconfigured)
    row.policy, row.arms, row.seed, row.hyperparameters = policy, arms, seed, hp
    if body.reward_range is not None:
        row.reward_lo, row.reward_hi = body.reward_range
    if body.judge is not None or body.arms is not None or body.reward_range is not None:
        judge = body.judge if body.judge is not None else router_fields(row)["judge"]
        row.judge = await check_judge(session, judge, arms, [row.reward_lo, row.reward_hi])
    # new decisions embed by the new rule; the learned state keeps its vectors
    if body.embed_text is not None:
        row.embed_text = body.embed_text.model_dump()
    if body.is_default is not None:
        row.is_default = body.is_default
        if body.is_default:
            await clear_other_defaults(session, tenant, row)
    row.version += 1
    await session.flush()
    news.routers[row.id] = row.version


async def delete_router(session: AsyncSession, row: Router, news: Announcements) -> None:
    """The router with its decisions, feedback and snapshots."""
    await lock_routers(session, [row.id])
    await session.delete(row)
    await session.flush()
    news.routers[row.id] = row.version + 1_000_000


async def replace_state(
    session: AsyncSession, row: Router, kind: str, state: bytes, news: Announcements
) -> None:
    """Start the router from ``state`` (``kind``: import or reset); events up to now are not folded on top."""
    await lock_routers(session, [row.id])
    watermark = await max_event_id(session, row.id)
    session.add(snapshot_row(row, kind, watermark, 0, state))
    # the new state carries its own counts (t, queries); the gateway's count starts again from it
    await session.execute(delete(RouterCounter).where(RouterCounter.router_id == row.id))
    row.version += 1
    await session.flush()
    news.routers[row.id] = row.version


async def reset_state(session: AsyncSession, row: Router, news: Announcements) -> None:
    """Forget everything learned: the policy starts fresh from the next event."""
    await replace_state(session, row, "reset", encode_state(fresh_policy(row).state_dict()), news)
