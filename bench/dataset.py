"""Replay datasets: ``<dir>/models.json`` + ``<dir>/rows.jsonl``, loaded into numpy arrays.

The format is documented in docs/datasets.md. In short, a row holds one prompt and, for every model, its
reward (a number, or a list of samples of which each pull draws one uniformly), optional token counts,
responses and a ``context`` vector that replaces the prompt's embedding. The cost of one call is

    cost = tokens_in * usd_per_mtok_in / 1e6 + tokens_out * usd_per_mtok_out / 1e6 + usd_per_call

with absent token counts estimated as ``len(prompt) / 4`` (input) and ``len(response) / 4`` (output), or
the model's ``default_tokens_out`` (256 unless set) when there is no response either. The loader counts
every estimate so that reports can say how costs were made.

Rows that lack a usable reward for some model are dropped and counted, never silently repaired.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# The format's rules live in routers/replay_format.py (the gateway reads the same files); re-exported.
from routers.replay_format import CHARS_PER_TOKEN as CHARS_PER_TOKEN
from routers.replay_format import DEFAULT_TOKENS_OUT as DEFAULT_TOKENS_OUT
from routers.replay_format import DatasetError as DatasetError
from routers.replay_format import ModelPrice as ModelPrice
from routers.replay_format import estimated_tokens, number, read_models, read_rows


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


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _reward_samples(value: Any) -> list[float] | None:
    """A reward field as a non-empty list of finite numbers, or None when unusable."""
    if isinstance(value, list):
        numbers = [number(v) for v in value]
        if not numbers or any(v is None for v in numbers):
            return None
        return [float(v) for v in numbers if v is not None]
    single = number(value)
    return None if single is None else [single]


def load_dataset(directory: str | Path) -> Dataset:
    """Read ``models.json`` and ``rows.jsonl`` from ``directory``; see the module docstring."""
    root = Path(directory)
    meta = read_models(root / "models.json")
    models, reward_range = meta.models, meta.reward_range
    description, budget, notes = meta.description, meta.budget, meta.notes
    names = [m.name for m in models]
    rows_path = root / "rows.jsonl"

    ids: list[str] = []
    prompts: list[str] = []
    groups: list[str | None] = []
    reward_lists: list[list[list[float]]] = []
    token_rows: list[tuple[list[float], list[float]]] = []
    contexts: list[list[float] | None] = []
    responses: list[dict[str, str]] = []
    dropped: Counter[str] = Counter()
    estimates: Counter[str] = Counter()
    seen: set[str] = set()

    for line_no, row in read_rows(rows_path):
        row_id = str(row.get("id", line_no))
        if row_id in seen:
            raise DatasetError(f"{rows_path}:{line_no}: duplicate id {row_id!r}")
        seen.add(row_id)
        rewards = _mapping(row.get("rewards"))
        samples = [_reward_samples(rewards.get(name)) for name in names]
        if any(s is None for s in samples):
            missing = [n for n, s in zip(names, samples, strict=True) if s is None]
            dropped["missing or invalid reward"] += 1
            dropped.update(f"no reward for {n}" for n in missing)
            continue
        prompt = row["prompt"]
        row_responses = _mapping(row.get("responses"))
        given_in = _mapping(row.get("tokens_in"))
        given_out = _mapping(row.get("tokens_out"))
        tokens_in, tokens_out = [], []
        for model in models:
            t_in = number(given_in.get(model.name))
            if t_in is None:
                t_in = estimated_tokens(len(prompt))
                estimates["tokens_in from prompt characters / 4"] += 1
            t_out = number(given_out.get(model.name))
            if t_out is None:
                response = row_responses.get(model.name)
                if isinstance(response, str):
                    t_out = estimated_tokens(len(response))
                    estimates["tokens_out from response characters / 4"] += 1
                else:
                    t_out = model.default_tokens_out
                    estimates["tokens_out = default_tokens_out"] += 1
            tokens_in.append(t_in)
            tokens_out.append(t_out)
        context = row.get("context")
        if context is not None and (
            not isinstance(context, list) or not context or any(number(v) is None for v in context)
        ):
            raise DatasetError(f"{rows_path}:{line_no}: 'context' must be a non-empty list of numbers")
        ids.append(row_id)
        prompts.append(prompt)
        group = row.get("group")
        groups.append(None if group is None else str(group))
        reward_lists.append([s for s in samples if s is not None])
        token_rows.append((tokens_in, tokens_out))
        contexts.append(context)
        responses.append({k: v for k, v in row_responses.items() if isinstance(v, str)})

    if not ids:
        raise DatasetError(f"{rows_path}: no usable row ({sum(dropped.values())} dropped)")
    n_prompts, n_models = len(ids), len(names)
    counts = np.array([[len(s) for s in row] for row in reward_lists], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts.reshape(-1))[:-1]]).reshape(n_prompts, n_models)
    flat = np.fromiter(
        (v for row in reward_lists for s in row for v in s), dtype=np.float64, count=int(counts.sum())
    )
    mean_reward = np.add.reduceat(flat, offsets.reshape(-1)).reshape(n_prompts, n_models) / counts
    tokens_in_arr = np.array([t[0] for t in token_rows], dtype=np.float64)
    tokens_out_arr = np.array([t[1] for t in token_rows], dtype=np.float64)
    price_in = np.array([m.usd_per_mtok_in for m in models]) / 1e6
    price_out = np.array([m.usd_per_mtok_out for m in models]) / 1e6
    per_call = np.array([m.usd_per_call for m in models])
    cost = tokens_in_arr * price_in + tokens_out_arr * price_out + per_call

    given = [c is not None for c in contexts]
    context_arr: np.ndarray | None = None
    if any(given):
        if not all(given):
            raise DatasetError(f"{rows_path}: 'context' must be present in every row or in none")
        dims = {len(c) for c in contexts if c is not None}
        if len(dims) != 1:
            raise DatasetError(f"{rows_path}: 'context' vectors have different lengths {sorted(dims)}")
        raw = np.array(contexts, dtype=np.float32)
        norms = np.linalg.norm(raw, axis=1, keepdims=True)
        context_arr = raw / np.where(norms > 0, norms, 1.0)

    return Dataset(
        path=root,
        description=description,
        models=models,
        reward_range=reward_range,
        ids=ids,
        prompts=prompts,
        groups=groups,
        mean_reward=mean_reward,
        samples=flat,
        offsets=offsets,
        counts=counts,
        tokens_in=tokens_in_arr,
        tokens_out=tokens_out_arr,
        cost=cost,
        contexts=context_arr,
        responses=responses,
        dropped=int(dropped["missing or invalid reward"]),
        dropped_reasons={k: v for k, v in dropped.items() if k != "missing or invalid reward"},
        token_estimates=dict(estimates),
        budget=budget,
        notes=notes,
    )


def write_dataset(
    directory: str | Path,
    models: Sequence[Mapping[str, Any]],
    rows: Iterable[Mapping[str, Any]],
    reward_range: tuple[float, float],
    description: str,
    **extra: Any,
) -> Path:
    """Write ``models.json`` and ``rows.jsonl`` (the converters' and generators' common output)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    meta = {"models": list(models), "reward_range": list(reward_range), "description": description, **extra}
    (root / "models.json").write_text(json.dumps(meta, indent=2) + "\n")
    with (root / "rows.jsonl").open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row, separators=(",", ":")) + "\n")
    return root
