"""The replay dataset's two files, read and written: the format's one reader and one writer.

A replay dataset is a directory with ``models.json`` ``{"models": [{"name", "usd_per_mtok_in",
"usd_per_mtok_out", "usd_per_call", "default_tokens_out"?}], "reward_range": [lo, hi], "description"?,
"budget"?, "notes"?}`` and ``rows.jsonl``, one row a line: ``{"id"?, "prompt", "rewards": {model: value
or [samples]}, "tokens_in"?: {model: n}, "tokens_out"?: {model: n}, "responses"?: {model: text},
"context"?: [numbers], "group"?}`` (docs/datasets.md has every field).

``read_dataset`` checks both files (a ``DatasetError`` names the file, the line and the problem) and
returns the usable rows: a row that lacks a usable reward for some model is dropped and counted, never
repaired. ``bench run`` turns them into arrays (bench/dataset.py); the replay backends serve them
(app/replay_backends.py); ``bench split`` and the generators write with ``write_dataset``.

Absent token counts are estimated as ``ReplayRow.token_counts`` says: input = prompt characters / 4,
output = the model's response characters / 4, else the model's ``default_tokens_out``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

from routers.prices import DEFAULT_TOKENS_OUT, call_cost, estimated_tokens

# How an absent token count was estimated (the benchmark counts and reports each).
IN_FROM_PROMPT = "tokens_in from prompt characters / 4"
OUT_FROM_RESPONSE = "tokens_out from response characters / 4"
OUT_DEFAULT = "tokens_out = default_tokens_out"
NO_REWARD = "missing or invalid reward"


class DatasetError(ValueError):
    """The dataset directory is malformed (the message names the file and the problem)."""


@dataclass(frozen=True)
class ModelPrice:
    """One model's prices: USD per million input / output tokens and per call."""

    name: str
    usd_per_mtok_in: float = 0.0
    usd_per_mtok_out: float = 0.0
    usd_per_call: float = 0.0
    default_tokens_out: float = DEFAULT_TOKENS_OUT

    def call_cost(self, tokens_in: float, tokens_out: float) -> float:
        return call_cost(self, tokens_in, tokens_out)


@dataclass(frozen=True)
class ModelsFile:
    """``models.json``: the models in order, the reward range, the free-text fields, and the object as
    read (``fields``, unknown keys included, so that a copy keeps them)."""

    models: list[ModelPrice]
    reward_range: tuple[float, float]
    description: str = ""
    budget: float | None = None
    notes: str = ""
    fields: Mapping[str, Any] = field(default_factory=dict)


class TokenCounts(NamedTuple):
    """One call's token counts; ``*_estimate`` says how an absent count was estimated (None: logged)."""

    tokens_in: float
    tokens_out: float
    in_estimate: str | None
    out_estimate: str | None


@dataclass(frozen=True)
class ReplayRow:
    """One usable row of ``rows.jsonl``: every model of ``models.json`` has its reward samples.
    ``tokens_in`` / ``tokens_out`` hold the logged counts only; ``fields`` is the row object as read."""

    line: int
    id: str
    prompt: str
    group: str | None
    rewards: dict[str, list[float]]
    tokens_in: dict[str, float]
    tokens_out: dict[str, float]
    responses: dict[str, str]
    context: list[float] | None
    fields: Mapping[str, Any]

    def token_counts(self, model: ModelPrice) -> TokenCounts:
        """The logged counts of ``model`` on this prompt, else estimates: input = prompt characters / 4,
        output = the response's characters / 4, else ``default_tokens_out`` (not rounded: expectations)."""
        t_in = self.tokens_in.get(model.name)
        in_estimate = None
        if t_in is None:
            t_in, in_estimate = estimated_tokens(len(self.prompt)), IN_FROM_PROMPT
        t_out = self.tokens_out.get(model.name)
        out_estimate = None
        if t_out is None:
            response = self.responses.get(model.name)
            if response is not None:
                t_out, out_estimate = estimated_tokens(len(response)), OUT_FROM_RESPONSE
            else:
                t_out, out_estimate = model.default_tokens_out, OUT_DEFAULT
        return TokenCounts(t_in, t_out, in_estimate, out_estimate)


@dataclass(frozen=True)
class ReplayData:
    """A replay dataset as read: its ``models.json``, its usable rows in file order, and the rows
    dropped (``dropped``; ``dropped_reasons``: ``no reward for <model>`` -> rows)."""

    path: Path
    meta: ModelsFile
    rows: list[ReplayRow]
    dropped: int = 0
    dropped_reasons: dict[str, int] = field(default_factory=dict)


def number(value: Any) -> float | None:
    """A finite number (not a bool) as a float, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def read_models(path: Path) -> ModelsFile:
    """Read and check ``models.json``; a DatasetError names the file and the problem."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: {exc}") from exc
    entries = meta.get("models") if isinstance(meta, dict) else None
    if not isinstance(entries, list) or not entries:
        raise DatasetError(f"{path}: 'models' must be a non-empty list")
    models = []
    for entry in entries:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise DatasetError(f"{path}: every model needs a string 'name', got {entry!r}")
        prices = {}
        for key in ("usd_per_mtok_in", "usd_per_mtok_out", "usd_per_call"):
            value = number(entry.get(key, 0.0))
            if value is None or value < 0:
                raise DatasetError(f"{path}: model {entry['name']!r}: {key} must be a number >= 0")
            prices[key] = value
        default_out = number(entry.get("default_tokens_out", DEFAULT_TOKENS_OUT))
        if default_out is None or default_out < 0:
            raise DatasetError(f"{path}: model {entry['name']!r}: default_tokens_out must be >= 0")
        models.append(ModelPrice(name=entry["name"], default_tokens_out=default_out, **prices))
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise DatasetError(f"{path}: model names must be distinct, got {names}")
    bounds = meta.get("reward_range")
    if (
        not isinstance(bounds, list)
        or len(bounds) != 2
        or any(number(b) is None for b in bounds)
        or not float(bounds[0]) < float(bounds[1])
    ):
        raise DatasetError(f"{path}: 'reward_range' must be [lo, hi] with lo < hi, got {bounds!r}")
    budget = meta.get("budget")
    if budget is not None and (number(budget) is None or float(budget) < 0):
        raise DatasetError(f"{path}: 'budget' must be a number >= 0 when present, got {budget!r}")
    return ModelsFile(
        models,
        (float(bounds[0]), float(bounds[1])),
        str(meta.get("description", "")),
        None if budget is None else float(budget),
        str(meta.get("notes", "")),
        meta,
    )


def json_objects(handle: IO[bytes], path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-empty line of a JSONL file opened in binary mode (so that
    ``handle.tell()`` stays usable between lines); a DatasetError names the line that is not a JSON
    object."""
    for line_no, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{line_no}: {exc}") from exc
        if not isinstance(row, dict):
            raise DatasetError(f"{path}:{line_no}: a row must be a JSON object")
        yield line_no, row


def _reward_samples(value: Any) -> list[float] | None:
    """A reward field as a non-empty list of finite numbers, or None when unusable."""
    if isinstance(value, list):
        numbers = [number(v) for v in value]
        if not numbers or any(v is None for v in numbers):
            return None
        return [float(v) for v in numbers if v is not None]
    single = number(value)
    return None if single is None else [single]


def _per_model(row: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """A per-model object field (``{}`` when absent); a DatasetError when it is something else."""
    value = row.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DatasetError(f"{where}: {key!r} must be an object {{model: value}}, got {value!r}")
    return value


def _row(line_no: int, raw: dict[str, Any], names: Sequence[str], where: str) -> ReplayRow | list[str]:
    """The row, or the models it has no usable reward for (the row is then dropped)."""
    if not isinstance(raw.get("prompt"), str):
        raise DatasetError(f"{where}: a row must be an object with a string 'prompt'")
    rewards = raw.get("rewards")
    given = rewards if isinstance(rewards, dict) else {}
    samples = {name: _reward_samples(given.get(name)) for name in names}
    missing = [name for name, s in samples.items() if s is None]
    if missing:
        return missing
    counts: dict[str, dict[str, float]] = {}
    for key in ("tokens_in", "tokens_out"):
        logged = {m: number(v) for m, v in _per_model(raw, key, where).items()}
        counts[key] = {m: v for m, v in logged.items() if v is not None}
    context = raw.get("context")
    if context is not None and (
        not isinstance(context, list) or not context or any(number(v) is None for v in context)
    ):
        raise DatasetError(f"{where}: 'context' must be a non-empty list of numbers")
    group = raw.get("group")
    return ReplayRow(
        line=line_no,
        id=str(raw.get("id", line_no)),
        prompt=raw["prompt"],
        group=None if group is None else str(group),
        rewards={name: s for name, s in samples.items() if s is not None},
        tokens_in=counts["tokens_in"],
        tokens_out=counts["tokens_out"],
        responses={m: v for m, v in _per_model(raw, "responses", where).items() if isinstance(v, str)},
        context=context,
        fields=raw,
    )


def read_dataset(directory: str | Path) -> ReplayData:
    """Read and check ``directory``'s ``models.json`` and ``rows.jsonl`` (see the module docstring)."""
    root = Path(directory)
    meta = read_models(root / "models.json")
    names = [m.name for m in meta.models]
    path = root / "rows.jsonl"
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    rows: list[ReplayRow] = []
    dropped = 0
    reasons: Counter[str] = Counter()
    seen: set[str] = set()
    with path.open("rb") as handle:
        for line_no, raw in json_objects(handle, path):
            row = _row(line_no, raw, names, f"{path}:{line_no}")
            row_id = str(raw.get("id", line_no))
            if row_id in seen:
                raise DatasetError(f"{path}:{line_no}: duplicate id {row_id!r}")
            seen.add(row_id)
            if isinstance(row, list):
                dropped += 1
                reasons.update(f"no reward for {name}" for name in row)
            else:
                rows.append(row)
    if not rows:
        raise DatasetError(f"{path}: no usable row ({dropped} dropped)")
    contexts = [row.context for row in rows]
    if any(c is not None for c in contexts):
        if any(c is None for c in contexts):
            raise DatasetError(f"{path}: 'context' must be present in every row or in none")
        dims = {len(c) for c in contexts if c is not None}
        if len(dims) != 1:
            raise DatasetError(f"{path}: 'context' vectors have different lengths {sorted(dims)}")
    return ReplayData(root, meta, rows, dropped, dict(reasons))


def write_dataset(
    directory: str | Path,
    models: Sequence[Mapping[str, Any]],
    rows: Iterable[Mapping[str, Any]],
    reward_range: tuple[float, float],
    description: str,
    **extra: Any,
) -> Path:
    """Write ``models.json`` (``models``, ``reward_range``, ``description`` and the ``extra`` keys) and
    ``rows.jsonl`` (one row a line) into ``directory``, created if needed."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    meta = {"models": list(models), "reward_range": list(reward_range), "description": description, **extra}
    (root / "models.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    with (root / "rows.jsonl").open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, separators=(",", ":")) + "\n")
    return root
