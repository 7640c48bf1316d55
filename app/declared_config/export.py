"""The catalog written as a configuration file: ``banditgate export``. Applying the export to an empty
database (with the environment variables it names set) reproduces the catalog: its tenants with their
limits, active keys and routers, and the backends.

Secrets are never written: a backend's API key is ``api_key_env: BANDITGATE_BACKEND_KEY_<NAME>`` and a
tenant's key ``value_env: BANDITGATE_KEY_<TENANT>_<NAME>`` (names upper-cased, every other character
``_``), the variables to set before applying it. A key without a name is exported as ``key-<id>``.
Fields at the API's default are left out.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.catalog_admin import configured_limits, router_fields
from app.declared_config.schema import ConfigFile, DeclaredBackend, DeclaredKey, DeclaredTenant
from app.schemas import EmbedTextConfig, RouterCreate
from app.store.models import ApiKey, Backend, Router, Tenant

HEADER = """\
# banditgate configuration, written by `banditgate export`. Secrets are environment variables
# (api_key_env, value_env): set them, review with `banditgate apply --dry-run FILE`, then apply.
"""


def env_name(*parts: str) -> str:
    """An environment variable name made of ``parts`` (``openai/gpt-4o`` -> ``OPENAI_GPT_4O``)."""
    return "_".join(re.sub(r"[^A-Za-z0-9]+", "_", p).strip("_").upper() for p in parts)


def backend_of(row: Backend) -> DeclaredBackend:
    fields = {f: getattr(row, f) for f in DeclaredBackend.model_fields if f not in ("api_key", "api_key_env")}
    key_env = env_name("BANDITGATE_BACKEND_KEY", row.name) if row.api_key_secret is not None else None
    return DeclaredBackend(**fields, api_key_env=key_env)


def router_of(row: Router) -> RouterCreate:
    fields = router_fields(row)
    if fields["embed_text"] == EmbedTextConfig():
        fields["embed_text"] = None  # the default rule, left out
    return RouterCreate(**fields)


async def export_config(session: AsyncSession) -> ConfigFile:
    backends = [backend_of(b) for b in await session.scalars(select(Backend).order_by(Backend.id))]
    tenants: list[DeclaredTenant] = []
    for tenant in await session.scalars(select(Tenant).order_by(Tenant.id)):
        keys = await session.scalars(
            select(ApiKey)
            .where(ApiKey.tenant_id == tenant.id, ApiKey.revoked_at.is_(None))
            .order_by(ApiKey.id)
        )
        declared_keys: list[DeclaredKey] = []
        for key in keys:
            name = (
                key.name if key.name and key.name not in {k.name for k in declared_keys} else f"key-{key.id}"
            )
            declared_keys.append(
                DeclaredKey(name=name, value_env=env_name("BANDITGATE_KEY", tenant.name, name))
            )
        routers = await session.scalars(
            select(Router).where(Router.tenant_id == tenant.id).order_by(Router.id)
        )
        tenants.append(
            DeclaredTenant(
                name=tenant.name,
                limits=configured_limits(tenant),
                keys=declared_keys,
                routers=[router_of(r) for r in routers],
            )
        )
    return ConfigFile(backends=backends, tenants=tenants)


def as_yaml(config: ConfigFile) -> str:
    """The file's text: fields at their defaults left out, keys in the models' order."""
    data: dict[str, Any] = {
        "version": config.version,
        **config.model_dump(mode="json", exclude_defaults=True),
    }
    return HEADER + yaml.safe_dump(_name_first(data), sort_keys=False, allow_unicode=True, width=100)


def _name_first(value: Any) -> Any:
    """Each object with its ``name`` first, as people write them."""
    if isinstance(value, dict):
        ordered = {"name": value["name"]} if "name" in value else {}
        return ordered | {k: _name_first(v) for k, v in value.items() if k != "name"}
    if isinstance(value, list):
        return [_name_first(v) for v in value]
    return value
