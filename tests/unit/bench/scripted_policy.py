"""A test double of a policy: its decisions come from a script, and it records every call it gets."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import pytest
from pydantic import ConfigDict

from bench.dataset import Dataset
from bench.policy_spec import PolicySpec
from bench.run_command import ReplayResult, replay
from routers.base import Context, Decision, Observation
from routers.hyperparameters import Hyperparameters
from routers.registry import POLICIES

Script = Callable[["ScriptedPolicy", Context], Decision]


class ScriptedHyperparameters(Hyperparameters):
    """Whatever a test's spec sets: the double records it in ``config``."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)


class ScriptedPolicy:
    name: ClassVar[str] = "scripted"
    hyperparameters: ClassVar[type[Hyperparameters]] = ScriptedHyperparameters
    instances: ClassVar[list[ScriptedPolicy]] = []

    def __init__(
        self, arms: Sequence[str] = (), seed: int | None = 0, script: Script | None = None, **config: Any
    ) -> None:
        self._arms = list(arms)
        self.seed = seed
        self.script = script
        self.config = config
        self.contexts: list[Context] = []
        self.observations: list[Observation] = []
        self.arm_log: list[tuple[str, str]] = []
        ScriptedPolicy.instances.append(self)

    @property
    def arms(self) -> list[str]:
        return list(self._arms)

    def select(self, context: Context) -> Decision:
        self.contexts.append(context)
        assert self.script is not None
        return self.script(self, context)

    def update(self, observation: Observation) -> None:
        self.observations.append(observation)

    def add_arm(self, arm: str) -> None:
        self._arms.append(arm)
        self.arm_log.append(("add", arm))

    def remove_arm(self, arm: str) -> None:
        self._arms.remove(arm)
        self.arm_log.append(("remove", arm))

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.name, "arms": self.arms}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ScriptedPolicy:
        return cls(arms=state["arms"])


class CostAwareScripted(ScriptedPolicy):
    cost_aware: ClassVar[bool] = True


def register(monkeypatch: pytest.MonkeyPatch, name: str, script: Script, cls: type = ScriptedPolicy) -> None:
    """Register ``name`` -> a scripted policy for this test only; ``cls.instances`` is reset."""
    ScriptedPolicy.instances.clear()
    monkeypatch.setitem(POLICIES, name, functools.partial(cls, script=script))


def always(decision: Callable[[], Decision]) -> Script:
    return lambda policy, context: decision()


def replay_with_repeats(dataset: Dataset, specs: Sequence[PolicySpec], **options: Any) -> ReplayResult:
    """``bench run``'s replay on the dataset's own context vectors, prompts drawn with replacement (the
    protocol these tests' hand-computed figures assume), without a progress bar."""
    assert dataset.contexts is not None, "these tests replay datasets with context vectors"
    return replay(dataset, dataset.contexts, specs, progress=False, draws="with-replacement", **options)
