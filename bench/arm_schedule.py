"""Models that join or leave during a replay: ``--add-model NAME@ROUND`` / ``--remove-model NAME@ROUND``.

Rounds count from 0; an event at round r takes effect before round r is served. A model whose first event
is an addition is absent before it. The schedule gives, for every round, the mask of available models,
which the policy (through ``add_arm`` / ``remove_arm``) and the references (oracle, best single, random)
all use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

ArmAction = Literal["add", "remove"]


@dataclass(frozen=True)
class ArmEvent:
    round: int
    model: str
    action: ArmAction


def parse_arm_event(text: str, action: ArmAction) -> ArmEvent:
    """``NAME@ROUND`` (the last ``@`` splits, so model names may contain one)."""
    model, sep, raw = text.rpartition("@")
    if not sep or not model:
        raise ValueError(f"--{action}-model expects NAME@ROUND, got {text!r}")
    try:
        when = int(raw)
    except ValueError as exc:
        raise ValueError(f"--{action}-model {text!r}: ROUND must be an integer") from exc
    if when < 0:
        raise ValueError(f"--{action}-model {text!r}: ROUND must be >= 0")
    return ArmEvent(round=when, model=model, action=action)


@dataclass
class ArmSchedule:
    """``masks[i]`` is the availability (bool per model) of segment i; ``segment[t]`` the segment of
    round t; ``events[t]`` the events applied before round t."""

    models: list[str]
    initial: list[str]
    masks: np.ndarray
    segment: np.ndarray
    events: dict[int, list[ArmEvent]]


def build_schedule(models: Sequence[str], events: Sequence[ArmEvent], horizon: int) -> ArmSchedule:
    index = {m: k for k, m in enumerate(models)}
    for event in events:
        if event.model not in index:
            raise ValueError(f"--{event.action}-model: unknown model {event.model!r}; known: {list(models)}")
    ordered = sorted(events, key=lambda e: e.round)
    first_action: dict[str, ArmAction] = {}
    for event in ordered:
        first_action.setdefault(event.model, event.action)
    mask = np.array([first_action.get(m) != "add" for m in models])
    initial = [m for m, on in zip(models, mask, strict=True) if on]
    by_round: dict[int, list[ArmEvent]] = {}
    for event in ordered:
        by_round.setdefault(event.round, []).append(event)
    masks = [mask.copy()]
    segment = np.zeros(horizon, dtype=np.int64)
    for when in sorted(by_round):
        for event in by_round[when]:
            mask[index[event.model]] = event.action == "add"
        if when < horizon:
            masks.append(mask.copy())
            segment[when:] = len(masks) - 1
    stacked = np.array(masks)
    used = np.unique(segment)
    if not stacked[used].any(axis=1).all():
        raise ValueError("the model schedule leaves some round with no model available")
    return ArmSchedule(models=list(models), initial=initial, masks=stacked, segment=segment, events=by_round)
