"""Applying a configuration file: make the catalog what the file declares, and say what changed.

Every object the file declares is made equal to what the admin API would create from the same body
(a field left out takes the API's default). An object that already is so is not written at all, so
applying a file twice changes nothing the second time. Nothing the file leaves out is removed unless
the file says ``prune: true`` (or the caller passes ``prune``).

Everything runs in the caller's session, through the admin API's own domain functions
(app/catalog_admin.py): the file is refused with the message the API would give, and either all of it is
applied (the caller commits) or none of it (a refusal raises ``ConfigError`` before the caller commits;
a dry run rolls back). A router keeps what it learned unless its policy or its arms change: then its
learned state is reset, and the plan says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app import catalog_admin
from app.auth import hash_key
from app.backend_keys import SecretKeyMissing, decrypt_key, fernet_for
from app.catalog_admin import Announcements, already_exists, router_fields
from app.declared_config.schema import ConfigFile, DeclaredBackend, DeclaredTenant
from app.declared_config.source import ConfigError, Path_, Source
from app.jsonable import readable_text
from app.routing.errors import GatewayError, Invalid
from app.schemas import (
    BackendCreate,
    BackendUpdate,
    EmbedTextConfig,
    JudgeConfig,
    RouterCreate,
    RouterUpdate,
)
from app.settings import Settings
from app.store.models import ApiKey, Backend, Router, Tenant
from routers.default import resolve_named

# The backend fields a file declares, compared one by one with the stored row.
BACKEND_FIELDS = tuple(f for f in BackendCreate.model_fields if f not in ("name", "api_key"))


@dataclass(frozen=True)
class Step:
    """One change of the plan: ``action`` (create, update, reset, revoke, delete) of ``what``
    (``router 'acme/main'``), and the fields it changes."""

    action: str
    what: str
    fields: tuple[str, ...] = ()

    def line(self) -> str:
        changed = f": {', '.join(self.fields)}" if self.fields else ""
        return f"{self.action} {self.what}{changed}"


@dataclass
class Plan:
    """What applying the file does (or did), in order, and how many declared objects were already so."""

    steps: list[Step] = field(default_factory=list)
    unchanged: int = 0
    news: Announcements = field(default_factory=Announcements)

    @property
    def reset(self) -> list[str]:
        """The routers whose learned state is reset."""
        return [s.what for s in self.steps if s.action == "reset"]

    def summary(self, source: str, dry_run: bool) -> str:
        if not self.steps:
            return f"{source}: nothing to change ({self.unchanged} objects as declared)"
        made = "to make (dry run: nothing written)" if dry_run else "made"
        lines = [f"{source}: {len(self.steps)} changes {made}, {self.unchanged} objects already as declared"]
        lines += [f"  {s.line()}" for s in self.steps]
        if self.reset:
            lines.append(
                f"routers whose learned state {'would be' if dry_run else 'was'} reset: {', '.join(self.reset)}"
            )
        return "\n".join(lines)


def _api_field(exc: GatewayError) -> tuple[str, ...]:
    """The body field a domain error names (``body.hyperparameters`` -> ``("hyperparameters",)``)."""
    if not exc.param:
        return ()
    return tuple(p for p in exc.param.split(".") if p != "body")


class Applier:
    """One application of a file in one session (``apply_config``)."""

    def __init__(
        self,
        session: AsyncSession,
        settings: Settings,
        source: Source,
        embedding_dim: int,
        env: Mapping[str, str],
    ) -> None:
        self.session = session
        self.settings = settings
        self.source = source
        self.dim = embedding_dim
        self.env = env
        self.plan = Plan()

    # --- checks of the file as a whole, before anything is written ---------------------------------

    def refuse(self, path: Path_, exc: GatewayError | str) -> ConfigError:
        if isinstance(exc, str):
            return self.source.error(path, exc)
        return self.source.error((*path, *_api_field(exc)), readable_text(exc.message))

    def check_unique(self, items: list[Any], path: Path_, kind: str) -> None:
        """The API refuses a second object of the same name; so does the file."""
        seen: set[str] = set()
        for index, item in enumerate(items):
            if item.name in seen:
                raise self.refuse((*path, index, "name"), already_exists(kind, item.name))
            seen.add(item.name)

    def secret(self, path: Path_, variable: str | None) -> str | None:
        if variable is None:
            return None
        value = self.env.get(variable)
        if value is None:
            raise self.source.error(path, f"the environment variable {variable} is not set")
        return value

    def backend_body(self, index: int, declared: DeclaredBackend) -> BackendCreate:
        """The body ``POST /admin/backends`` would get, its API key read from the environment."""
        path: Path_ = ("backends", index, "api_key_env")
        fields = declared.model_dump(exclude={"api_key", "api_key_env"})
        try:
            return BackendCreate(**fields, api_key=self.secret(path, declared.api_key_env))
        except ValidationError as exc:
            error = exc.errors()[0]
            raise self.source.error(path, f"{declared.api_key_env}: {error['msg']}") from exc

    def check_file(self, config: ConfigFile) -> list[BackendCreate]:
        self.check_unique(config.backends, ("backends",), "backend")
        self.check_unique(config.tenants, ("tenants",), "tenant")
        for t, tenant in enumerate(config.tenants):
            self.check_unique(tenant.routers, ("tenants", t, "routers"), "router")
            self.check_unique(tenant.keys, ("tenants", t, "keys"), "key")
            defaults = [r for r, router in enumerate(tenant.routers) if router.is_default]
            if len(defaults) > 1:
                path: Path_ = ("tenants", t, "routers", defaults[1], "is_default")
                raise self.source.error(path, "a tenant has one default router; the file marks several")
            for k, key in enumerate(tenant.keys):
                self.secret(("tenants", t, "keys", k, "value_env"), key.value_env)
        return [self.backend_body(i, b) for i, b in enumerate(config.backends)]

    # --- backends -------------------------------------------------------------------------------------

    def stored_key(self, backend: Backend) -> str | None:
        """The backend's API key in clear; a key that no longer decrypts is one to replace."""
        try:
            return decrypt_key(fernet_for(self.settings.secret_key), backend.api_key_secret)
        except SecretKeyMissing:
            return "\x00undecryptable"

    async def backend(self, index: int, body: BackendCreate) -> None:
        path: Path_ = ("backends", index)
        what = f"backend {body.name!r}"
        row = await self.session.scalar(select(Backend).where(Backend.name == body.name))
        try:
            if row is None:
                await catalog_admin.create_backend(self.session, self.settings, body, self.plan.news)
                self.plan.steps.append(Step("create", what))
                return
            changes = {f: getattr(body, f) for f in BACKEND_FIELDS if getattr(row, f) != getattr(body, f)}
            if self.stored_key(row) != body.api_key:
                changes["api_key"] = body.api_key
            if not changes:
                self.plan.unchanged += 1
                return
            update = BackendUpdate(**changes)
            catalog_admin.update_backend(self.settings, row, update, self.plan.news)
            await self.session.flush()
        except GatewayError as exc:
            raise self.refuse(path, exc) from exc
        self.plan.steps.append(Step("update", what, tuple(sorted(changes))))

    # --- tenants, their limits, keys and routers -----------------------------------------------------

    async def tenant(self, index: int, declared: DeclaredTenant, prune: bool) -> None:
        path: Path_ = ("tenants", index)
        row = await self.session.scalar(select(Tenant).where(Tenant.name == declared.name))
        what = f"tenant {declared.name!r}"
        try:
            created = row is None
            if row is None:
                row = await catalog_admin.create_tenant(self.session, declared.name)
                self.plan.steps.append(Step("create", what))
            limits = catalog_admin.configured_limits(row) != declared.limits
            if limits:
                catalog_admin.set_limits(row, declared.limits, self.plan.news)
                await self.session.flush()
            if limits and not created:
                self.plan.steps.append(Step("update", what, ("limits",)))
            elif not created:
                self.plan.unchanged += 1
        except GatewayError as exc:
            raise self.refuse(path, exc) from exc
        await self.keys(path, row, declared, prune)
        for r, router in enumerate(declared.routers):
            await self.router((*path, "routers", r), row, router)
        if prune:
            kept = {r.name for r in declared.routers}
            for stale in await self.session.scalars(select(Router).where(Router.tenant_id == row.id)):
                if stale.name not in kept:
                    await catalog_admin.delete_router(self.session, stale, self.plan.news)
                    self.plan.steps.append(Step("delete", f"router '{row.name}/{stale.name}'"))

    async def keys(self, path: Path_, tenant: Tenant, declared: DeclaredTenant, prune: bool) -> None:
        """Each declared key is issued once (by its value's hash); a new value under a declared name
        revokes the key that name had. With ``prune``, the tenant's other keys are revoked."""
        active = list(
            await self.session.scalars(
                select(ApiKey).where(ApiKey.tenant_id == tenant.id, ApiKey.revoked_at.is_(None))
            )
        )
        wanted: set[str] = set()
        for k, key in enumerate(declared.keys):
            key_path: Path_ = (*path, "keys", k)
            value = self.env[key.value_env]
            digest = hash_key(value)
            if digest in wanted:
                raise self.source.error(
                    (*key_path, "value_env"), f"{key.value_env} holds another declared key's value"
                )
            wanted.add(digest)
            what = f"key '{tenant.name}/{key.name}'"
            row = await self.session.scalar(select(ApiKey).where(ApiKey.key_hash == digest))
            if row is not None and (row.tenant_id != tenant.id or row.revoked_at is not None):
                state = "revoked" if row.tenant_id == tenant.id else "a key of another tenant"
                raise self.source.error((*key_path, "value_env"), f"the value of {key.value_env} is {state}")
            if row is not None:
                if row.name == key.name:
                    self.plan.unchanged += 1
                    continue
                row.name = key.name
                self.plan.steps.append(Step("update", what, ("name",)))
                continue
            for old in active:
                if old.name == key.name and old.revoked_at is None:
                    catalog_admin.revoke_key(old, self.plan.news)
                    self.plan.steps.append(
                        Step("revoke", f"key '{tenant.name}/{old.name}' ({old.prefix}...)")
                    )
            try:
                await catalog_admin.issue_key(self.session, tenant, key.name, value)
            except GatewayError as exc:
                raise self.refuse((*key_path, "value_env"), exc) from exc
            self.plan.steps.append(Step("create", what))
        if prune:
            for old in active:
                if old.key_hash not in wanted and old.revoked_at is None:
                    catalog_admin.revoke_key(old, self.plan.news)
                    self.plan.steps.append(
                        Step("revoke", f"key '{tenant.name}/{old.name}' ({old.prefix}...)")
                    )
        await self.session.flush()

    async def router(self, path: Path_, tenant: Tenant, body: RouterCreate) -> None:
        what = f"router '{tenant.name}/{body.name}'"
        row = await self.session.scalar(
            select(Router).where(Router.tenant_id == tenant.id, Router.name == body.name)
        )
        try:
            if row is None:
                await catalog_admin.create_router(self.session, tenant, body, self.dim, self.plan.news)
                self.plan.steps.append(Step("create", what))
                return
            update, changed = router_changes(row, body)
            if not changed:
                self.plan.unchanged += 1
                return
            relearn = "policy" in changed or "arms" in changed
            await catalog_admin.update_router(self.session, tenant, row, update, self.dim, self.plan.news)
            if relearn:
                await catalog_admin.reset_state(self.session, row, self.plan.news)
        except GatewayError as exc:
            raise self.refuse(path, exc) from exc
        self.plan.steps.append(Step("reset" if relearn else "update", what, changed))

    # --- pruning --------------------------------------------------------------------------------------

    async def prune(self, config: ConfigFile) -> None:
        """Delete the tenants and then the backends the file does not declare."""
        tenants = {t.name for t in config.tenants}
        for stale in await self.session.scalars(select(Tenant).order_by(Tenant.id)):
            if stale.name not in tenants:
                await catalog_admin.delete_tenant(self.session, stale, self.plan.news)
                self.plan.steps.append(Step("delete", f"tenant {stale.name!r}"))
        backends = {b.name for b in config.backends}
        for backend in await self.session.scalars(select(Backend).order_by(Backend.id)):
            if backend.name not in backends:
                try:
                    await catalog_admin.delete_backend(self.session, backend, self.plan.news)
                except GatewayError as exc:
                    raise self.refuse(("backends",), exc) from exc
                self.plan.steps.append(Step("delete", f"backend {backend.name!r}"))

    async def run(self, config: ConfigFile, prune: bool) -> Plan:
        prune = prune or config.prune
        bodies = self.check_file(config)
        for index, body in enumerate(bodies):
            await self.backend(index, body)
        for index, tenant in enumerate(config.tenants):
            await self.tenant(index, tenant, prune)
        if prune:
            await self.prune(config)
        await self.session.flush()
        return self.plan


def router_changes(row: Router, body: RouterCreate) -> tuple[RouterUpdate, tuple[str, ...]]:
    """The ``PATCH`` that makes ``row`` what ``body`` would create, and the fields it changes. A change of
    policy, hyperparameters, arms or seed sends all four, so they are checked together as on creation."""
    policy, hyperparameters = resolve_named(body.policy, body.hyperparameters)
    embed_text = body.embed_text or EmbedTextConfig()
    current = router_fields(row)
    wanted: dict[str, Any] = {
        "policy": policy,
        "hyperparameters": hyperparameters,
        "arms": body.arms,
        "seed": body.seed,
        "reward_range": body.reward_range,
        "is_default": body.is_default,
        "judge": None if body.judge is None or body.judge.empty else body.judge,
        "embed_text": embed_text,
    }
    changed = tuple(k for k in wanted if wanted[k] != current[k])
    patch: dict[str, Any] = {k: wanted[k] for k in changed}
    if {"policy", "hyperparameters", "arms", "seed"} & set(changed):
        patch.update(policy=policy, hyperparameters=hyperparameters, arms=body.arms, seed=body.seed)
    if "judge" in patch and patch["judge"] is None:
        patch["judge"] = JudgeConfig()  # PATCH's way of removing it
    return RouterUpdate(**patch), changed


async def apply_config(
    session: AsyncSession,
    settings: Settings,
    source: Source,
    config: ConfigFile,
    embedding_dim: int,
    env: Mapping[str, str],
    prune: bool = False,
) -> Plan:
    """Apply ``config`` (read from ``source``) in ``session`` without committing; ``ConfigError`` when
    the file is refused (roll back then: part of it may have been written in the session)."""
    try:
        return await Applier(session, settings, source, embedding_dim, env).run(config, prune)
    except Invalid as exc:  # a refusal not tied to an object of the file
        raise source.error((), exc.message) from exc
