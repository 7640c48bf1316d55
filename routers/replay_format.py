"""What the gateway and the replay benchmark share: the cost of a call, the token estimate, a decision's
random key, and the replay dataset's files. ``app/`` and ``bench/`` both import this module (``bench``
never imports ``app``), so each rule has one home.

The cost of one call (docs/datasets.md):

    cost = tokens_in * usd_per_mtok_in / 1e6 + tokens_out * usd_per_mtok_out / 1e6 + usd_per_call

with absent token counts estimated as characters / ``CHARS_PER_TOKEN``, and a model's
``default_tokens_out`` (256 unless set) for an answer not seen yet.

A replay dataset is a directory with ``models.json`` ``{"models": [{"name", "usd_per_mtok_in",
"usd_per_mtok_out", "usd_per_call", "default_tokens_out"?}], "reward_range": [lo, hi], "description"?,
"budget"?, "notes"?}`` and ``rows.jsonl``, one JSON object a line with at least a string ``prompt``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

CHARS_PER_TOKEN = 4
DEFAULT_TOKENS_OUT = 256


class Prices(Protocol):
    @property
    def usd_per_mtok_in(self) -> float: ...

    @property
    def usd_per_mtok_out(self) -> float: ...

    @property
    def usd_per_call(self) -> float: ...


def call_cost(prices: Prices, tokens_in: float, tokens_out: float) -> float:
    """USD for one call: tokens x price per million tokens, plus the per-call price."""
    return (
        tokens_in * prices.usd_per_mtok_in / 1e6
        + tokens_out * prices.usd_per_mtok_out / 1e6
        + prices.usd_per_call
    )


def estimated_tokens(chars: int) -> float:
    """An expected token count from characters (not rounded: an expectation)."""
    return chars / CHARS_PER_TOKEN


def whole_tokens(chars: int) -> int:
    """A token count from characters, rounded up, as a backend that reports no usage is billed."""
    return math.ceil(chars / CHARS_PER_TOKEN)


def decision_key(decision_id: str, request_seed: int | None = None) -> int:
    """The key of a decision's generator (``routers.base.decision_rng(seed, key)``): the client's
    request ``seed`` when it sent one, else the decision id's first 64 bits. ``bench e2e`` sends round t
    as the seed, so the gateway draws what the simulator's ``round_rng(t)`` draws."""
    return int(request_seed) if request_seed is not None else int(decision_id[:16], 16)


def offline_row_id(prompt_id: str, model: str) -> str:
    """The id of one logged (prompt, model) outcome uploaded as a warm start: ``<prompt id>/<model>``.
    ``banditgate warm-start --dataset`` and ``bench run --warm-start`` name rows by it; the gateway keeps
    one offline event per (router, row id), so uploading a dataset twice learns it once."""
    return f"{prompt_id}/{model}"


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
    """``models.json``: the models in order, the reward range, and the free-text fields."""

    models: list[ModelPrice]
    reward_range: tuple[float, float]
    description: str = ""
    budget: float | None = None
    notes: str = ""


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


def read_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, row)`` for each non-empty line of ``rows.jsonl``; every row is an object with a
    string ``prompt`` (a DatasetError names the line otherwise)."""
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    with path.open("rb") as handle:
        for line_no, row in json_objects(handle, path):
            if not isinstance(row.get("prompt"), str):
                raise DatasetError(f"{path}:{line_no}: a row must be an object with a string 'prompt'")
            yield line_no, row
