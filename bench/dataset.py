"""A replay dataset as numpy arrays, for the simulator: what ``replay_dataset.files.read_dataset`` reads
(the format's one reader; docs/datasets.md), with each (prompt, model)'s reward samples, token counts and
cost laid out P x K. The cost of one call is

    cost = tokens_in * usd_per_mtok_in / 1e6 + tokens_out * usd_per_mtok_out / 1e6 + usd_per_call

with absent token counts estimated as ``len(prompt) / 4`` (input) and ``len(response) / 4`` (output), or
the model's ``default_tokens_out`` (256 unless set) when there is no response either. The loader counts
every estimate so that reports can say how costs were made. Rows that lack a usable reward for some model
are dropped by the reader and counted here, never silently repaired.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from replay_dataset.files import ModelPrice, read_dataset


@dataclass
class Dataset:
    """A replay dataset as arrays; P prompts x K models, model order = ``models.json`` order.

    ``samples[offsets[p, k] : offsets[p, k] + counts[p, k]]`` are the reward samples of model k on prompt
    p; ``mean_reward[p, k]`` is their mean (the true mean the oracle uses). ``cost[p, k]`` is the USD cost
    of one call. ``contexts`` (P x d, unit rows) is set when the rows carry ``context`` vectors.
    """

    path: Path
    description: str
    models: list[ModelPrice]
    reward_range: tuple[float, float]
    ids: list[str]
    prompts: list[str]
    groups: list[str | None]
    mean_reward: np.ndarray
    samples: np.ndarray
    offsets: np.ndarray
    counts: np.ndarray
    tokens_in: np.ndarray
    tokens_out: np.ndarray
    cost: np.ndarray
    contexts: np.ndarray | None
    responses: list[dict[str, str]]
    dropped: int = 0
    dropped_reasons: dict[str, int] = field(default_factory=dict)
    token_estimates: dict[str, int] = field(default_factory=dict)
    budget: float | None = None
    notes: str = ""

    @property
    def model_names(self) -> list[str]:
        return [m.name for m in self.models]

    @property
    def n_prompts(self) -> int:
        return len(self.ids)

    def draw_reward(self, prompt: int, model: int, uniform: float) -> float:
        """The sample of (prompt, model) that a uniform draw in [0, 1) picks."""
        n = int(self.counts[prompt, model])
        return float(self.samples[int(self.offsets[prompt, model]) + min(int(uniform * n), n - 1)])


def load_dataset(directory: str | Path) -> Dataset:
    """A replay dataset's files (``replay_dataset.files.read_dataset``) as arrays; see the module
    docstring."""
    data = read_dataset(directory)
    meta, rows = data.meta, data.rows
    models = meta.models
    estimates: Counter[str] = Counter()
    token_rows: list[tuple[list[float], list[float]]] = []
    for row in rows:
        counts = [row.token_counts(model) for model in models]
        estimates.update(c.in_estimate for c in counts if c.in_estimate is not None)
        estimates.update(c.out_estimate for c in counts if c.out_estimate is not None)
        token_rows.append(([c.tokens_in for c in counts], [c.tokens_out for c in counts]))

    n_prompts, n_models = len(rows), len(models)
    reward_lists = [[row.rewards[m.name] for m in models] for row in rows]
    counts_arr = np.array([[len(s) for s in row] for row in reward_lists], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts_arr.reshape(-1))[:-1]]).reshape(n_prompts, n_models)
    flat = np.fromiter(
        (v for row in reward_lists for s in row for v in s), dtype=np.float64, count=int(counts_arr.sum())
    )
    mean_reward = np.add.reduceat(flat, offsets.reshape(-1)).reshape(n_prompts, n_models) / counts_arr
    tokens_in_arr = np.array([t[0] for t in token_rows], dtype=np.float64)
    tokens_out_arr = np.array([t[1] for t in token_rows], dtype=np.float64)
    price_in = np.array([m.usd_per_mtok_in for m in models]) / 1e6
    price_out = np.array([m.usd_per_mtok_out for m in models]) / 1e6
    per_call = np.array([m.usd_per_call for m in models])
    cost = tokens_in_arr * price_in + tokens_out_arr * price_out + per_call

    context_arr: np.ndarray | None = None
    if rows[0].context is not None:  # read_dataset: every row has one, all of one length, or none has
        raw = np.array([row.context for row in rows], dtype=np.float32)
        norms = np.linalg.norm(raw, axis=1, keepdims=True)
        context_arr = raw / np.where(norms > 0, norms, 1.0)

    return Dataset(
        path=data.path,
        description=meta.description,
        models=models,
        reward_range=meta.reward_range,
        ids=[row.id for row in rows],
        prompts=[row.prompt for row in rows],
        groups=[row.group for row in rows],
        mean_reward=mean_reward,
        samples=flat,
        offsets=offsets,
        counts=counts_arr,
        tokens_in=tokens_in_arr,
        tokens_out=tokens_out_arr,
        cost=cost,
        contexts=context_arr,
        responses=[dict(row.responses) for row in rows],
        dropped=data.dropped,
        dropped_reasons=dict(data.dropped_reasons),
        token_estimates=dict(estimates),
        budget=meta.budget,
        notes=meta.notes,
    )
