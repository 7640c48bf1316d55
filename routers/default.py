"""The policy a router gets when it names none: ``default`` in the registry (its factory:
``routers.registry.DefaultFactory``).

The default is data: a registered policy name and its hyperparameters, chosen on the tuning halves of the
dev sets (the table that chose it: docs/policies/default.md): kNN-UCB under the conservative floor with
max_loss = 0.01 against the highest-priced model (no incumbent named), lambda = 0 and no cost target, the
candidate that kept its reward within 0.005 of the best single model on every tuning half and, among
those, learned most with the best reward. ``resolve(hyperparameters)`` gives the
concrete (policy, hyperparameters) with the given ones on top of the default's, so that

- ``bench run --policy default`` and ``--policy default:cost_target=0.002`` build exactly what a router
  created without ``policy`` (and with those ``hyperparameters``) gets; a key given as null drops the
  default's value (``default:max_loss=null`` is the plain policy, without the floor);
- the admin API stores the *resolved* policy and hyperparameters on the router, not the name
  ``default``: a router keeps its behaviour when a later release changes the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

NAME = "default"
POLICY = "knn-ucb"
HYPERPARAMETERS: Mapping[str, Any] = MappingProxyType({"max_loss": 0.01})


def resolve(hyperparameters: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """(the default's policy name, its hyperparameters overridden by ``hyperparameters``); a key whose
    given value is None is dropped (the policy's own default applies)."""
    merged = {**HYPERPARAMETERS, **dict(hyperparameters or {})}
    return POLICY, {k: v for k, v in merged.items() if v is not None}


def resolve_named(policy: str | None, hyperparameters: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """What a router stores for a requested ``policy``: ``None`` or ``"default"`` resolve to the
    default (``resolve``); any other name is kept with its hyperparameters as given."""
    if policy is None or policy == NAME:
        return resolve(hyperparameters)
    return policy, dict(hyperparameters)
