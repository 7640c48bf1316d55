"""The policy a router gets when it names none: ``default`` in the registry (its factory:
``routers.registry.DefaultFactory``).

The default is data: a registered policy name and its hyperparameters, chosen on the tuning halves of the
dev sets (the rule and the table that chose it: docs/policies/default.md): plain kNN-UCB, no floor, no
cost term. Without a named incumbent there is nothing the team runs today to hold a floor against, and the
two stand-ins measured lose to the plain policy where price does not follow quality: a floor against the
dearest model (``max_loss=0.01``, ``incumbent_by=price``) fell to 0.76 x the best single model on GSM8K
with the two prices swapped, and one against the model of highest lower bound so far
(``incumbent_by=evidence``) locked onto whichever model was seen first (0.47 x on arena-bench). Name an
incumbent to get the floor: ``default:incumbent=M`` applies it at max_loss 0.02,
``default:incumbent=M,max_loss=0.05,objective=savings`` minimises cost under it.

``resolve(hyperparameters)`` gives the concrete (policy, hyperparameters) with the given ones on top of
the default's, so that

- ``bench run --policy default`` and ``--policy default:cost_target=0.002`` build exactly what a router
  created without ``policy`` (and with those ``hyperparameters``) gets; a key given as null drops the
  default's value (the policy's own default applies);
- the admin API stores the *resolved* policy and hyperparameters on the router, not the name
  ``default``: a router keeps its behaviour when a later release changes the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

NAME = "default"
POLICY = "knn-ucb"
HYPERPARAMETERS: Mapping[str, Any] = MappingProxyType({})


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
