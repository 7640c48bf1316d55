"""Typed hyperparameters: every policy and wrapper declares its own as a ``Hyperparameters`` model.

A policy class names its model in ``hyperparameters`` (a ``ClassVar``); its constructor takes
``(arms, seed, **hyperparameters)`` and validates them with ``Model.parse`` before anything else, so a bad
value is a ``PolicyConfigError`` whose message names the key: a value of the wrong type (``{"alpha":
[1, 2]}``), out of its range (``"dim": 2147483648``), not finite, or a key the policy does not know
(the message lists the known ones). The models are strict: no string is read as a number, no number as a
bool, no float with a zero fraction as an int; JSON numbers, booleans, strings, lists and objects are
what they say. numpy arrays and scalars are accepted as the lists and numbers they hold.

The registry composes models (a policy's own, plus its wrappers' keys: ``routers.trusted``,
``routers.retry``, ``routers.set_target``) and publishes each registered name's JSON schema
(``routers.registry.hyperparameter_schema``), which the admin API serves at ``GET /admin/policies``.

Two kinds of checks need more than the values and are done where that is known, at router creation
(``routers.registry.check_router``): a field marked ``arm`` (``always``'s ``model``, the conservative
``incumbent``) must name one of the router's arms, and ``dim`` must equal the embedder's dimension. A
policy rebuilt later (a restart, a state restore) is not held to the first one: an arm removed since then
keeps the policy's documented fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Self, cast, get_args

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model

from routers.base import Policy, PolicyConfigError

MAX_DIM = 16_384  # the largest embedding dimension a policy accepts (CLIP ViT-bigG: 1280; OpenAI: 3072)
MAX_COUNT = 2**31 - 1  # counts reach FAISS and numpy as C ints
MAX_NAME = (
    200  # an arm name (a backend's name): the one bound of it, and the width of the columns holding one
)
ARM = {"arm": True}  # json_schema_extra of a field that names one of the router's arms

NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
PositiveCount = Annotated[int, Field(ge=1, le=MAX_COUNT)]
Dim = Annotated[int, Field(ge=1, le=MAX_DIM)]
ArmName = Annotated[str, Field(min_length=1, max_length=MAX_NAME, json_schema_extra=ARM)]


def _none_as_empty(value: Any) -> Any:
    return {} if value is None else value


# {model: USD per call}; null reads as {}
Prices = Annotated[
    dict[Annotated[str, Field(max_length=MAX_NAME)], NonNegative], BeforeValidator(_none_as_empty)
]

DIM_DESCRIPTION = "context (embedding) dimension; null: taken from the first context"


class Hyperparameters(BaseModel):
    """Base of every hyperparameter model: unknown keys are refused, values are not coerced."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> Self:
        """Validate ``values``; a ``PolicyConfigError`` naming each bad key otherwise."""
        if not isinstance(values, Mapping):
            raise PolicyConfigError(f"hyperparameters must be an object, got {type(values).__name__}")
        try:
            return cls.model_validate({str(k): plain(v) for k, v in values.items()})
        except ValidationError as exc:
            raise PolicyConfigError(describe(exc, cls)) from None

    def resolved(self) -> Self:
        """The values a policy runs with: defaults that depend on other values filled in (none here)."""
        return self

    def config(self) -> dict[str, Any]:
        """Every hyperparameter with its value (defaults filled in): a policy's ``config``."""
        return self.model_dump()

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The default of every optional hyperparameter."""
        return {
            k: f.get_default(call_default_factory=True)
            for k, f in cls.model_fields.items()
            if not f.is_required()
        }

    @classmethod
    def arm_fields(cls) -> tuple[str, ...]:
        """The hyperparameters that name one of the router's arms."""
        return tuple(
            k
            for k, f in cls.model_fields.items()
            if f.json_schema_extra == ARM or _names_an_arm(f.annotation)
        )


class NoHyperparameters(Hyperparameters):
    """A policy without hyperparameters."""


def _names_an_arm(annotation: Any) -> bool:
    """Whether ``annotation`` is ``ArmName`` or holds it (``ArmName | None``)."""
    return annotation == ArmName or any(_names_an_arm(a) for a in get_args(annotation))


def plain(value: Any) -> Any:
    """numpy arrays and scalars as the lists and numbers they hold; tuples as lists."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def describe(exc: ValidationError, model: type[Hyperparameters]) -> str:
    """One sentence per error, each naming its hyperparameter (and the known ones for an unknown key)."""
    known = ", ".join(model.model_fields)
    parts: list[str] = []
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            parts.append(f"unknown hyperparameter {loc[0]!r}; known: {known}")
        elif loc:
            path = str(loc[0]) + "".join(f"[{p!r}]" for p in loc[1:])
            got = "" if error["type"] == "missing" else f", got {_shown(error['input'])}"
            parts.append(f"hyperparameter {path}: {message}{got}")
        else:
            parts.append(message)
    return "; ".join(parts)


def combine(name: str, *models: type[Hyperparameters]) -> type[Hyperparameters]:
    """One model with the fields (in this order) and validators of ``models``, which share no key."""
    if len(models) == 1:
        return models[0]
    keys = [k for m in models for k in m.model_fields]
    shared = sorted({k for k in keys if keys.count(k) > 1})
    if shared:
        raise PolicyConfigError(f"{name}: hyperparameters {shared} are declared twice")
    # pydantic lists the fields of the last base first
    return cast(type[Hyperparameters], create_model(name, __base__=tuple(reversed(models))))


def model_of(factory: Any) -> type[Hyperparameters]:
    """The hyperparameter model of a policy class or registry factory (a preset: its class's)."""
    target = getattr(factory, "func", factory)  # a preset is a functools.partial over a class
    model = getattr(target, "hyperparameters", None)
    if not (isinstance(model, type) and issubclass(model, Hyperparameters)):
        raise PolicyConfigError(f"{getattr(target, '__name__', target)!r} declares no hyperparameter model")
    return model


def registry_factory(
    build: Callable[..., Policy],
    *,
    prefix: str,
    wraps: Any,
    model: type[Hyperparameters],
    from_state: Callable[[Mapping[str, Any]], Policy],
    policy_class: Any = None,
    keywords: Mapping[str, Any] | None = None,
) -> Callable[..., Policy]:
    """``build`` with what the registry reads off a factory: ``from_state``, ``policy_class`` (the concrete
    class; by default ``wraps``), ``hyperparameters`` (``model_of``), ``__name__`` (``<prefix>_<wraps' name>``) and, given,
    ``keywords`` (a preset's fixed values, as on a ``functools.partial``)."""
    factory: Any = build
    factory.from_state = from_state
    factory.policy_class = wraps if policy_class is None else policy_class
    factory.hyperparameters = model
    if keywords is not None:
        factory.keywords = dict(keywords)
    factory.__name__ = f"{prefix}_{getattr(wraps, '__name__', 'policy')}"
    return build
