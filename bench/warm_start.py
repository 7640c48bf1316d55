"""``bench run --warm-start F``: a policy learns a random fraction F of the prompts from logs first, then
plays the other prompts online (the offline half of the gateway's warm start).

For seed s, ``np.random.default_rng([s, WARM_STREAM])`` (a stream of its own, so the online draws of a
seed are those of a cold run on the same prompt pool) permutes the N prompts; the first
``round(F x N)`` are the warm prompts, the rest the online pool. Before round 0 the policy folds one
``Observation(kind="offline")`` per warm prompt and logged model, in permutation order and models in
``models.json`` order: every model's outcome (full information) or, with ``--warm-start-logged-model M``,
only M's (the log of a team that always called M). The outcome is one reward sample of the pair (drawn
with a uniform of the same stream, as the online rounds draw theirs) and the pair's cost;
``decision_key`` is the row id the gateway would give the row, ``<prompt id>/<model>``
(``offline_row_id``). Only the models available at round 0 are logged (a policy does not know the others
yet). The online run then draws its T prompts from the pool alone (``ReplayEnv.draw``), so no prompt seen
in the warm start is played online, and every reference (oracle, best single, knn-ceiling) is computed on
those online prompts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from bench.dataset import Dataset
from routers.base import Observation, Policy

WARM_STREAM = 0x5741524D  # "WARM": the second entropy word of the warm-start split's generator


def offline_row_id(prompt_id: str, model: str) -> str:
    """The id of one logged (prompt, model) outcome uploaded as a warm start: ``<prompt id>/<model>``.
    ``banditgate warm-start --dataset`` (which uploads ``dataset_rows``) and ``bench run --warm-start``
    name rows by it; the gateway keeps one offline event per (router, row id), so uploading a dataset
    twice learns it once."""
    return f"{prompt_id}/{model}"


@dataclass(frozen=True)
class WarmStart:
    """``--warm-start F`` and ``--warm-start-logged-model M`` (None: every model's outcome)."""

    fraction: float
    logged_model: str | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.fraction < 1.0:
            raise ValueError(f"--warm-start must lie in [0, 1), got {self.fraction!r}")

    def count(self, n_prompts: int) -> int:
        """How many prompts are logs: round(F x N)."""
        return round(self.fraction * n_prompts)

    def online_count(self, n_prompts: int) -> int:
        return n_prompts - self.count(n_prompts)

    def check(self, models: Sequence[str]) -> None:
        if self.logged_model is not None and self.logged_model not in models:
            raise ValueError(
                f"--warm-start-logged-model {self.logged_model!r} is not a model of {list(models)}"
            )

    def report(self, n_prompts: int) -> dict[str, object]:
        """The settings as the JSON report records them."""
        return {
            "fraction": self.fraction,
            "logged_model": self.logged_model,
            "logged_models": "one" if self.logged_model is not None else "all",
            "warm_prompts": self.count(n_prompts),
            "online_pool": self.online_count(n_prompts),
        }


@dataclass(frozen=True)
class WarmSplit:
    """One seed's split: the warm prompts (in fold order), the online pool, and the reward uniforms of
    the warm (prompt, model) pairs (``uniforms[i, k]`` for ``warm[i]`` and model k)."""

    warm: np.ndarray
    online: np.ndarray
    uniforms: np.ndarray


def split(warm_start: WarmStart, seed: int, n_prompts: int, n_models: int) -> WarmSplit:
    """The warm prompts and the online pool of ``seed`` (see the module doc)."""
    rng = np.random.default_rng([seed, WARM_STREAM])
    order = rng.permutation(n_prompts)
    n_warm = warm_start.count(n_prompts)
    return WarmSplit(order[:n_warm], np.sort(order[n_warm:]), rng.random((n_warm, n_models)))


def observations(
    dataset: Dataset,
    embeddings: np.ndarray,
    warm_start: WarmStart,
    seed_split: WarmSplit,
    arms: Sequence[str],
) -> Iterator[Observation]:
    """The offline observations of one seed's warm prompts, in fold order (see the module doc)."""
    logged = [
        (k, name)
        for k, name in enumerate(dataset.model_names)
        if name in arms and warm_start.logged_model in (None, name)
    ]
    for i, p in enumerate(seed_split.warm.tolist()):
        for k, name in logged:
            yield Observation(
                embedding=embeddings[p],
                arm=name,
                reward=dataset.draw_reward(p, k, float(seed_split.uniforms[i, k])),
                cost=float(dataset.cost[p, k]),
                kind="offline",
                decision_key=offline_row_id(dataset.ids[p], name),
            )


def fold_warm_start(policy: Policy, observations: Iterator[Observation]) -> int:
    """Fold the offline observations into ``policy`` through its ordinary ``update``; returns how many."""
    folded = 0
    for observation in observations:
        policy.update(observation)
        folded += 1
    return folded


def dataset_rows(dataset: Dataset, id_prefix: str = "") -> Iterator[tuple[dict[str, object], int]]:
    """A replay dataset as warm-start upload rows (``banditgate warm-start --dataset``), with a running
    count: one row per (prompt, model), id ``<prefix><prompt id>/<model>``, the prompt (or the row's
    ``context`` vector as ``embedding`` when the dataset has them), the model's mean logged reward and
    the cost of its call."""
    count = 0
    for p, prompt_id in enumerate(dataset.ids):
        context: dict[str, object] = (
            {"prompt": dataset.prompts[p]}
            if dataset.contexts is None
            else {"embedding": [float(v) for v in dataset.contexts[p]]}
        )
        for k, model in enumerate(dataset.model_names):
            count += 1
            row = {
                "id": id_prefix + offline_row_id(prompt_id, model),
                **context,
                "model": model,
                "reward": float(dataset.mean_reward[p, k]),
                "cost": float(dataset.cost[p, k]),
            }
            yield row, count
