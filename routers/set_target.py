"""``cost_target`` for the set policies (C2MAB-V and its baselines): the budget rho from a USD target.

A set policy's own cost term is its per-round budget rho, a constraint on the expected cost of the set
in its relaxation (C2MAB-V, Dai et al. 2024, Eq. 3-5: sum_k z_k cbar_k <= rho), in normalised cost units
(one unit = ``cost_scale`` USD, by default the priciest current model's reference cost). A USD target per
request therefore maps onto it directly, with no multiplier:

    rho = cost_target / scale,    scale = ``cost_scale`` if given, else max_k ``prices[k]``

and the scale is fixed at that value (``cost_scale`` is set), so the budget stays ``cost_target`` USD
when the priciest model leaves or a pricier one is added (the default scale follows the current arms and
would rescale a USD target). With ``cost_normalization="none"`` costs are USD already and
rho = cost_target. Without ``prices`` or ``cost_scale`` the scale is unknown at construction: a
``PolicyConfigError`` asks for one. ``budget`` and ``cost_target`` together are refused (two answers to
one question). The built policy is the plain set policy with ``budget`` and ``cost_scale`` filled in,
so its state and restore are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import Field

from routers.base import Policy, PolicyConfigError, require
from routers.hyperparameters import Hyperparameters, Positive, combine, model_of, registry_factory
from routers.pacing import finite_number


def budget_for_target(hyper: Mapping[str, Any]) -> dict[str, Any]:
    """The set policy's hyperparameters with ``cost_target`` replaced by ``budget`` and ``cost_scale``."""
    params = dict(hyper)
    target = params.pop("cost_target", None)
    if target is None:
        return params
    require(finite_number(target) and target > 0, f"cost_target must be a number > 0 (USD), got {target!r}")
    if params.get("budget") is not None:
        raise PolicyConfigError("set either budget (normalised units) or cost_target (USD), not both")
    if params.get("cost_normalization") == "none":
        params["budget"] = float(target)
        return params
    scale = params.get("cost_scale")
    if scale is None:
        prices = dict(params.get("prices") or {})
        if not prices:
            raise PolicyConfigError(
                "cost_target on a set policy needs prices or cost_scale (the USD of one normalised cost unit)"
            )
        scale = max(float(p) for p in prices.values())
    require(finite_number(scale) and scale > 0, f"cost_scale must be a number > 0, got {scale!r}")
    params["cost_scale"] = float(scale)
    params["budget"] = float(target) / float(scale)
    return params


class TargetHyperparameters(Hyperparameters):
    """The key ``targeted`` adds to a set policy's own."""

    cost_target: Positive | None = Field(None, description="USD per request; sets budget and cost_scale")


def targeted(policy_cls: Any) -> Callable[..., Policy]:
    """A registry factory for a set policy class that also accepts ``cost_target``."""
    model = combine(
        f"{policy_cls.__name__}TargetHyperparameters", model_of(policy_cls), TargetHyperparameters
    )

    def build(arms: Sequence[str] = (), seed: int | None = 0, **hyper: Any) -> Policy:
        model.parse(hyper)
        built: Policy = policy_cls(arms=arms, seed=seed, **budget_for_target(hyper))
        return built

    return registry_factory(
        build,
        prefix="targeted",
        wraps=policy_cls,
        model=model,
        from_state=policy_cls.from_state,
    )
