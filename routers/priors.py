"""Declared priors: a team's prior quality per model, folded in as pseudo-observations.

A router's hyperparameter ``priors`` = {model: {"mean": m, "weight": w}} (w > 0) says "before any data,
count model as if it had been observed w times with mean reward m" (a team's own eval, a public
leaderboard). Every per-model statistic that reads it adds the pseudo-observations to the real ones:

    n_a = N_a + w_a          mean_a = (S_a + w_a m_a) / n_a

with N_a the rewards folded for a (every kind) and S_a their sum; a model without a prior has w_a = 0.
The readers: the conservative floor's confidence bounds and its evidence-chosen incumbent
(``routers.conservative``) and the context-free policies' per-arm means (``routers.simple``: greedy,
epsilon-greedy, Thompson sampling). Per-prompt policies (kNN-UCB, LinUCB, ...) hold no per-model
statistic and ignore it.

``hoeffding_bounds`` is the per-model confidence interval both the floor and its reports use:

    mean_a -/+ D sqrt(L / (2 n_a)),  clipped to [r_min, r_max];   (r_min, r_max) while n_a = 0

(Hoeffding's inequality for n_a rewards in a range D = r_max - r_min, L = ln(1 / delta): each side holds
with probability >= 1 - delta when the n_a observations are independent draws of the model's reward; a
prior counts as that many draws, so a prior that is wrong moves the bound by as much as that many wrong
observations would.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from typing_extensions import TypedDict

from routers.base import PolicyConfigError
from routers.hyperparameters import MAX_NAME, Finite, Hyperparameters, Positive, _none_as_empty


class Prior(TypedDict):
    """One model's declared prior: its mean reward and its weight in pseudo-observations (> 0)."""

    mean: Finite
    weight: Positive


EXAMPLE = "gpt-4o=0.8:20"


def prior_from_text(text: str) -> tuple[str, Prior]:
    """``MODEL=MEAN:WEIGHT`` -> (MODEL, {"mean": MEAN, "weight": WEIGHT}); MODEL is everything before the
    last ``=`` (a model name may hold ``:`` and ``=``). A ``PolicyConfigError`` says what is wrong."""
    model, eq, value = text.rpartition("=")
    mean_text, colon, weight_text = value.partition(":")
    if not eq or not model or not colon:
        raise PolicyConfigError(f"{text!r}: expected MODEL=MEAN:WEIGHT, for example {EXAMPLE}")
    try:
        mean, weight = float(mean_text), float(weight_text)
    except ValueError:
        raise PolicyConfigError(f"{text!r}: MEAN and WEIGHT must be numbers") from None
    if not math.isfinite(mean) or not (math.isfinite(weight) and weight > 0):
        raise PolicyConfigError(f"{text!r}: MEAN must be finite and WEIGHT a finite number > 0")
    return model, Prior(mean=mean, weight=weight)


def priors_from_text(text: str) -> dict[str, Prior]:
    """``MODEL=MEAN:WEIGHT;MODEL=MEAN:WEIGHT...`` (the form a ``bench run --policy`` spec can carry, where
    a JSON object cannot) as ``{model: Prior}``; a model given twice is an error."""
    priors: dict[str, Prior] = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        model, prior = prior_from_text(item)
        if model in priors:
            raise PolicyConfigError(f"priors: {model!r} is given twice")
        priors[model] = prior
    return priors


def _priors_value(value: Any) -> Any:
    """null reads as {}; a string is the ``priors_from_text`` form."""
    return priors_from_text(value) if isinstance(value, str) else _none_as_empty(value)


Priors = Annotated[
    dict[Annotated[str, Field(min_length=1, max_length=MAX_NAME)], Prior], BeforeValidator(_priors_value)
]


class PriorHyperparameters(Hyperparameters):
    """The ``priors`` key every single-choice policy accepts (``routers.trusted``)."""

    priors: Priors = Field(
        default_factory=dict,
        description=(
            "{model: {mean, weight}}: a prior reward per model, as weight pseudo-observations; also written "
            "MODEL=MEAN:WEIGHT;MODEL=MEAN:WEIGHT (a bench spec's form)"
        ),
    )


PRIOR_KEYS: tuple[str, ...] = tuple(PriorHyperparameters.model_fields)


def parse_priors(value: Any) -> dict[str, Prior]:
    """``priors`` validated (a ``PolicyConfigError`` naming the bad key otherwise); None reads as {}."""
    parsed = PriorHyperparameters.parse({"priors": value}).priors
    return {str(a): Prior(mean=float(p["mean"]), weight=float(p["weight"])) for a, p in parsed.items()}


def with_prior(priors: Mapping[str, Prior], arm: str, count: float, total: float) -> tuple[float, float]:
    """(n_a, S_a + w_a m_a): the folded count and sum with the arm's pseudo-observations added."""
    prior = priors.get(arm)
    if prior is None:
        return count, total
    return count + prior["weight"], total + prior["weight"] * prior["mean"]


def hoeffding_bounds(
    count: float, total: float, log_term: float, reward_min: float, reward_max: float
) -> tuple[float, float]:
    """(LCB, UCB) of the module docstring for ``count`` rewards summing to ``total``."""
    if count <= 0:
        return reward_min, reward_max
    mean = total / count
    width = (reward_max - reward_min) * math.sqrt(log_term / (2.0 * count))
    return max(reward_min, mean - width), min(reward_max, mean + width)
