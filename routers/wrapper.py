"""The shared shape of the policy wrappers of ``routers.trusted`` (composition, like ``retry``).

A wrapper holds an inner single-choice policy and answers to its name; arms come and go on the inner
policy; ``update`` folds the observation into the wrapper's own sums (``_fold``) and then into the inner
policy. ``settings`` are the wrapper's own hyperparameters; ``config`` is the inner policy's config with
them on top: the router's hyperparameters with defaults filled in, as for a plain policy. Its state is
``{"policy": inner name, "config": config, "seed": inner seed, <key>: {"config": settings, own learned
part}, "inner": inner state}``: the registry factory finds the inner policy by name, ``restore`` rebuilds
the wrapper around the restored inner policy, and ``config`` / ``seed`` sit where a plain policy's are
(an imported state sets the router's hyperparameters from them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Self

from routers.base import Context, CounterUse, Observation, Policy, PolicyConfigError, RngSource, counter_use


class PolicyWrapper:
    """Base of ``CostAware``, ``Conservative``, ``Shadow``, ``PacedCascade`` and ``RetryCascade``; subclasses
    set ``key`` and ``settings`` and implement ``select``, ``_fold``, ``_state`` and ``_load``."""

    key: ClassVar[str] = "wrapper"
    cost_aware: ClassVar[bool] = False
    makes_cascade: ClassVar[bool] = False  # ``RetryCascade``: the wrapped policy becomes a cascade
    single_choice_only: ClassVar[bool] = True  # refuses an inner policy that ``makes_cascade``

    def __init__(self, inner: Policy, keys: str) -> None:
        if self.single_choice_only and getattr(inner, "makes_cascade", False):
            raise PolicyConfigError(f"{keys} need a single-choice policy, not a cascade (retry=true)")
        self.inner = inner
        self.name = inner.name
        self.settings: dict[str, Any] = {}

    @property
    def config(self) -> dict[str, Any]:
        """The inner policy's config with this wrapper's settings on top."""
        return {**dict(getattr(self.inner, "config", {})), **self.settings}

    @property
    def arms(self) -> list[str]:
        return self.inner.arms

    def _draws(self, context: Context) -> RngSource:
        """The generator the wrapper's own tie-break draws from, built only on a tie: the caller's
        (``Context.rng``), else the inner policy's own, as ``PolicyBase._draws``."""
        rng = context.rng if context.rng is not None else getattr(self.inner, "rng", None)
        if rng is None:  # pragma: no cover - every wrapped policy is a PolicyBase with its own generator
            raise PolicyConfigError(f"{self.name!r} has no random generator for ties")
        return rng

    @property
    def counter_use(self) -> CounterUse:
        """The inner policy's: a wrapper reads no counts of its own."""
        return counter_use(self.inner)

    def add_arm(self, arm: str) -> None:
        self.inner.add_arm(arm)

    def remove_arm(self, arm: str) -> None:
        self.inner.remove_arm(arm)

    def update(self, observation: Observation) -> None:
        """The wrapper's own fold first, then the inner policy's."""
        self._fold(observation)
        self.inner.update(observation)

    def _fold(self, observation: Observation) -> None:  # pragma: no cover - every wrapper folds
        pass

    def _state(self) -> dict[str, Any]:
        return {}

    def _load(self, state: Mapping[str, Any]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        inner = self.inner.state_dict()
        return {
            "policy": self.inner.name,
            "config": self.config,
            "seed": inner.get("seed"),
            self.key: {"config": dict(self.settings), **self._state()},
            "inner": inner,
        }

    @classmethod
    def restore(cls, inner: Policy, state: Mapping[str, Any]) -> Self:
        """The wrapper of ``state[cls.key]`` around an already restored ``inner``."""
        wrapper = cls(inner, **dict(state["config"]))
        wrapper._load(state)
        return wrapper

    @classmethod
    def restore_around(
        cls, state: Mapping[str, Any], restore_inner: Callable[[Mapping[str, Any]], Policy]
    ) -> Policy:
        """``state`` restored: this wrapper around ``restore_inner(state["inner"])`` where the state has
        the wrapper's key, else the plain policy ``restore_inner(state)``."""
        if cls.key not in state:
            return restore_inner(state)
        return cls.restore(restore_inner(state["inner"]), state[cls.key])  # type: ignore[return-value]

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Policy:  # pragma: no cover - use the registry
        raise PolicyConfigError(f"restore a {cls.key} wrapper through its registry factory")


def layers(policy: Any) -> Iterator[Any]:
    """The policy and every wrapped policy under it, outermost first."""
    while policy is not None:
        yield policy
        policy = getattr(policy, "inner", None)
