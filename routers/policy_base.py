"""``PolicyBase``: the plumbing every policy class shares (the arm list, the seeded generator, typed
hyperparameters and the state envelope). It sits apart from ``routers.base`` (the contract) because it
needs the typed hyperparameter models (``routers.hyperparameters``), which in turn raise the contract's
``PolicyConfigError``: the imports run one way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

from routers.base import (
    Context,
    CounterUse,
    PolicyConfigError,
    RngSource,
    make_rng,
    require,
    resolve_rng,
    rng_from_state,
    rng_state,
)
from routers.hyperparameters import Hyperparameters

H = TypeVar("H", bound=Hyperparameters)


class PolicyBase:
    """Shared plumbing for policies: the arm list, the seeded generator and the state envelope.

    Subclasses set ``name`` and ``hyperparameters`` (their typed model, ``routers.hyperparameters``),
    validate their keyword arguments with it first thing in ``__init__`` (a ``PolicyConfigError``
    naming the key otherwise), record the validated values in ``self.config`` and implement ``select``,
    ``update``, ``_on_add_arm``, ``_on_remove_arm``, ``_state`` and ``_load``. ``from_state`` rebuilds
    ``cls(arms=..., seed=..., **config)``, through the same validation, and then loads the learned part.
    """

    name: ClassVar[str] = "base"
    counter_use: ClassVar[CounterUse] = "none"  # reads no select-time counts (see ``CounterUse``)
    hyperparameters: ClassVar[type[Hyperparameters]]
    params: Hyperparameters  # the validated hyperparameters (``_configure``)
    dim: int | None = None  # the context dimension, for policies that need it (see _ensure_dim)

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0) -> None:
        if len(set(arms)) != len(arms):
            raise PolicyConfigError(f"arms must be distinct, got {list(arms)}")
        self._arms: list[str] = list(arms)
        self.seed = seed
        self.rng = make_rng(seed)
        self.config: dict[str, Any] = {}

    @property
    def arms(self) -> list[str]:
        return list(self._arms)

    def _configure(self, hyperparameters: Mapping[str, Any], model: type[H]) -> H:
        """Validate ``hyperparameters`` with the class's model (``model`` or one extending it), resolve
        the defaults that depend on other values, keep the result in ``params`` and its values in
        ``config``."""
        params = self.hyperparameters.parse(hyperparameters).resolved()
        if not isinstance(params, model):
            raise PolicyConfigError(f"{type(self).__name__}.hyperparameters must extend {model.__name__}")
        self.params = params
        self.config = params.config()
        return params

    def _ensure_dim(self, x: np.ndarray) -> None:
        """Fix the context dimension on first use (allocating per-arm state through ``_on_add_arm``) and
        reject a context of another dimension."""
        dim = self.dim
        if dim is None:
            dim = int(x.shape[0])
            self.dim = dim
            self.config["dim"] = dim
            for arm in self._arms:
                self._on_add_arm(arm)
        require(x.shape == (dim,), f"context has dimension {x.shape}, expected ({dim},)")

    def _rng(self, context: Context) -> np.random.Generator:
        """The generator this select draws from: the caller's (``Context.rng``), else the policy's own."""
        return resolve_rng(self._draws(context))

    def _draws(self, context: Context) -> RngSource:
        """``_rng`` not yet built: for a select that draws only sometimes (a tie)."""
        return context.rng if context.rng is not None else self.rng

    def add_arm(self, arm: str) -> None:
        if arm in self._arms:
            return
        self._arms.append(arm)
        self._on_add_arm(arm)

    def remove_arm(self, arm: str) -> None:
        if arm not in self._arms:
            return
        self._arms.remove(arm)
        self._on_remove_arm(arm)

    def _on_add_arm(self, arm: str) -> None:  # pragma: no cover - default: nothing to allocate
        pass

    def _on_remove_arm(self, arm: str) -> None:  # pragma: no cover
        pass

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "config": dict(self.config),
            "arms": list(self._arms),
            "seed": self.seed,
            "rng": rng_state(self.rng),
            "learned": self._state(),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Any:
        if state.get("policy") != cls.name:
            raise PolicyConfigError(f"state is for policy {state.get('policy')!r}, not {cls.name!r}")
        policy = cls(arms=list(state["arms"]), seed=state.get("seed"), **dict(state.get("config", {})))
        policy.rng = rng_from_state(state["rng"])
        policy._load(state.get("learned", {}))
        return policy

    def _state(self) -> dict[str, Any]:
        return {}

    def _load(self, learned: Mapping[str, Any]) -> None:
        pass
