"""The configuration file's models. Every object is the admin API's request body, so a file is checked
by the same validators and refused with the same messages: a backend is ``POST /admin/backends``'s
body, a router ``POST /admin/tenants/{tenant}/routers``'s, a tenant's ``limits`` ``PUT
/admin/tenants/{tenant}/limits``'s. Secrets are never written in the file: a backend's API key and a
tenant's API keys are named by the environment variable that holds them.

New kinds of objects join as new optional top-level lists (``version`` stays 1 while old files still
mean the same); unknown keys are refused, so a misspelt one is never silently ignored.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, field_validator
from pydantic.json_schema import SkipJsonSchema

from app.input_types import KEY_NAME_CHARS
from app.schemas import BackendCreate, RouterCreate, Strict, TenantCreate, TenantLimits

EnvVar = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=200)]
"""The name of an environment variable (POSIX: letters, digits and underscores, not a digit first)."""


def refuse_secret(instead: str) -> Callable[[Any], None]:
    """A validator refusing a secret's value written in the file (the field ``instead`` names its variable)."""

    def refuse(value: Any) -> None:
        if value is not None:
            raise ValueError(
                f"a secret is never written in the file: put it in an environment variable and name that in {instead}"
            )

    return refuse


class DeclaredBackend(BackendCreate):
    """A backend as ``POST /admin/backends`` takes it; its API key comes from ``api_key_env``."""

    api_key: SkipJsonSchema[None] = Field(None, exclude=True)
    api_key_env: EnvVar | None = Field(
        None, description="the environment variable holding the backend's API key (none: no key)"
    )

    _no_secret = field_validator("api_key", mode="before")(refuse_secret("api_key_env"))


class DeclaredKey(Strict):
    """A tenant API key: the gateway stores the hash of the value ``value_env`` holds."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=KEY_NAME_CHARS)] = Field(
        description="unique among the tenant's declared keys; a new value under the same name replaces "
        "(revokes) the key it had"
    )
    value_env: EnvVar = Field(description="the environment variable holding the key")
    key: SkipJsonSchema[None] = Field(None, exclude=True)

    _no_secret = field_validator("key", mode="before")(refuse_secret("value_env"))


class DeclaredTenant(TenantCreate):
    """A tenant (``POST /admin/tenants``) with its rate limits, API keys and routers."""

    limits: TenantLimits = Field(
        default_factory=TenantLimits, description="each key's rate limits; left out = the server's defaults"
    )
    keys: list[DeclaredKey] = Field(default_factory=list)
    routers: list[RouterCreate] = Field(
        default_factory=list, description="each as POST /admin/tenants/{tenant}/routers takes it"
    )


class ConfigFile(Strict):
    """A banditgate configuration file (YAML or JSON)."""

    version: Literal[1] = Field(1, description="the file format's version")
    prune: bool = Field(
        False,
        description="delete the tenants, routers and backends and revoke the keys the file does not "
        "declare (a tenant's keys and routers only when the tenant is declared); off: nothing is removed",
    )
    backends: list[DeclaredBackend] = Field(default_factory=list)
    tenants: list[DeclaredTenant] = Field(default_factory=list)


def config_schema() -> dict[str, Any]:
    """The file's JSON schema (``banditgate config-schema``)."""
    schema = ConfigFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "banditgate configuration"
    return schema


def config_schema_text() -> str:
    return json.dumps(config_schema(), indent=2, sort_keys=True) + "\n"
