"""Writing a replay data set in the bench format (the synthetic generators' shared output step).

``<dir>/models.json``: ``{"models": [{"name", "usd_per_mtok_in", "usd_per_mtok_out", "usd_per_call",
"default_tokens_out"?}], "reward_range": [lo, hi], "description", "settings"?}``;
``<dir>/rows.jsonl``: one prompt per line, ``{"id", "prompt", "rewards": {model: value or [samples]},
"tokens_in"?, "tokens_out"?, "context"?, "group"?}``. The cost of a call is tokens x prices per million
plus the per-call price; a list of reward samples means each pull draws one uniformly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any


def write_dataset(
    out: Path,
    models: Sequence[Mapping[str, Any]],
    rows: Iterable[Mapping[str, Any]],
    reward_range: tuple[float, float],
    description: str,
    settings: Mapping[str, Any] | None = None,
) -> int:
    """Write models.json and rows.jsonl under ``out`` (created); returns the number of rows."""
    out.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {
        "models": list(models),
        "reward_range": list(reward_range),
        "description": description,
    }
    if settings:
        meta["settings"] = dict(settings)
    (out / "models.json").write_text(json.dumps(meta, indent=2) + "\n")
    count = 0
    with (out / "rows.jsonl").open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row, separators=(",", ":")) + "\n")
            count += 1
    return count
