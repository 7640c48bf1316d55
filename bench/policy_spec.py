"""Policy specs on the command line: ``name[:key=value,...]``, built through the registry.

Values parse as JSON numbers or booleans (``1``, ``0.5``, ``1e-3``, ``true``, ``null``), anything else is
kept as a string. The harness's ``--lambda L`` (reward units per USD) reaches a policy as the
hyperparameter ``cost_weight`` when the policy class declares ``cost_aware = True`` and the spec sets
neither ``cost_weight`` nor ``lambda``; a spec's own ``lambda=...`` is renamed to ``cost_weight``.
Likewise the run's length T reaches a policy as ``horizon`` when its hyperparameter model has a
``horizon`` field (PAK-UCB's bonus weight, C2MAB-V's and CUCB's delta = 1 / T, BALROG's total query
budget B = beta T) and neither the spec nor a preset sets one; where T is unknown (the gateway) the
policy keeps its configured ``horizon``.

Every spec is validated as a router's hyperparameters are at creation (``routers.registry``: typed
values, known keys, an ``always`` model or ``incumbent`` among the run's arms), so a bad spec is a
``PolicyConfigError`` naming the key before any simulation starts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from routers.base import Policy, PolicyConfigError
from routers.registry import POLICIES, build_policy, check_router, hyperparameter_model

COST_WEIGHT = "cost_weight"
HORIZON = "horizon"


@dataclass(frozen=True)
class PolicySpec:
    """A parsed spec; ``text`` is echoed verbatim in reports."""

    text: str
    name: str
    params: dict[str, Any] = field(default_factory=dict)


def _value(raw: str) -> Any:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return raw
    return value if value is None or isinstance(value, bool | int | float) else raw


def parse_spec(text: str, what: str = "policy") -> PolicySpec:
    """``linucb:alpha=0.5,ridge=1`` -> PolicySpec('linucb', {'alpha': 0.5, 'ridge': 1}). ``what`` names the
    kind of spec in error messages (``bench.judge`` parses judge specs with the same syntax)."""
    name, _, rest = text.partition(":")
    name = name.strip()
    if not name:
        raise PolicyConfigError(f"{what} spec {text!r} has no {what} name")
    params: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise PolicyConfigError(f"{what} spec {text!r}: {item!r} is not key=value")
        if key in params:
            raise PolicyConfigError(f"{what} spec {text!r}: {key!r} given twice")
        params[key] = _value(raw.strip())
    return PolicySpec(text=text, name=name, params=params)


def policy_class(name: str) -> Any:
    """The class behind a registered factory: presets are ``functools.partial`` over it, ``retrying``
    factories name it in ``policy_class``; None for an unknown name."""
    factory = POLICIES.get(name)
    factory = getattr(factory, "func", factory)
    return getattr(factory, "policy_class", factory)


def is_cost_aware(name: str) -> bool:
    """Whether the registered factory's class declares ``cost_aware = True``."""
    return bool(getattr(policy_class(name), "cost_aware", False))


def takes_horizon(name: str) -> bool:
    """Whether policy ``name`` has a ``horizon`` hyperparameter."""
    return name in POLICIES and HORIZON in hyperparameter_model(name).model_fields


def hyperparameters(
    spec: PolicySpec, cost_weight: float | None, horizon: int | None = None
) -> dict[str, Any]:
    """The keyword arguments for the factory: the spec's, plus ``cost_weight`` from ``--lambda`` and
    ``horizon`` from the run's length T (see the module doc)."""
    params = dict(spec.params)
    if "lambda" in params:
        if COST_WEIGHT in params:
            raise PolicyConfigError(f"policy spec {spec.text!r} sets both lambda and {COST_WEIGHT}")
        params[COST_WEIGHT] = params.pop("lambda")
    factory = POLICIES.get(spec.name)
    preset = dict(getattr(factory, "keywords", None) or {})
    absent = COST_WEIGHT not in params and COST_WEIGHT not in preset
    if cost_weight is not None and absent and is_cost_aware(spec.name):
        params[COST_WEIGHT] = cost_weight
    if horizon is not None and HORIZON not in params and HORIZON not in preset and takes_horizon(spec.name):
        params[HORIZON] = int(horizon)
    return params


def build_from_spec(
    spec: PolicySpec, arms: Sequence[str], seed: int, cost_weight: float | None, horizon: int | None = None
) -> Policy:
    return build_policy(spec.name, arms, seed, hyperparameters(spec, cost_weight, horizon))


def check_specs(
    specs: Sequence[PolicySpec],
    arms: Sequence[str],
    cost_weight: float | None,
    models: Sequence[str] | None = None,
) -> None:
    """Check and build each policy once so that a bad spec fails before any simulation starts. A
    hyperparameter naming a model must name one of ``models`` (default: ``arms``): every model of the
    run, one added in a later round included."""
    for spec in specs:
        check_router(spec.name, arms if models is None else models, hyperparameters(spec, cost_weight))
        build_from_spec(spec, arms, 0, cost_weight)
