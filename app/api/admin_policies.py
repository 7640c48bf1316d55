"""Admin: the policies a router may use, with their hyperparameters' JSON schemas and defaults."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app.api.deps import AdminOnly, Ctx
from routers.registry import POLICIES, hyperparameter_defaults, hyperparameter_schema

router = APIRouter(prefix="/admin/policies", tags=["admin: policies"], dependencies=[AdminOnly])


class PolicyOut(BaseModel):
    name: str = Field(description="the value of a router's `policy`")
    hyperparameters: dict[str, Any] = Field(
        description="JSON schema of the router's `hyperparameters` for this policy (unknown keys are refused)"
    )
    defaults: dict[str, Any] = Field(description="every optional hyperparameter with its default")


class PoliciesOut(BaseModel):
    embedding_dim: int = Field(description="this gateway's embedder dimension: the only `dim` accepted")
    policies: list[PolicyOut]


@router.get("", response_model=PoliciesOut)
async def list_policies(ctx: Ctx) -> PoliciesOut:
    """Every registered policy (routers/registry.py) and its typed hyperparameters."""
    return PoliciesOut(
        embedding_dim=ctx.embeddings.dim,
        policies=[
            PolicyOut(name=n, hyperparameters=hyperparameter_schema(n), defaults=hyperparameter_defaults(n))
            for n in sorted(POLICIES)
        ],
    )
