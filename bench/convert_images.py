"""``bench convert agiqa3k|tifa160``: the text-to-image rating sets -> the replay format.

Reads ``<data>/images/...`` (default ``../shared/data``; see its README) and writes ``models.json`` +
``rows.jsonl`` into ``--out``. One row per prompt, one model per generator (setting); the prompt text is
what an image router embeds. Prices come from ``bench/data/image_prices.json`` (``--prices`` for another):
per image, ``usd_per_call = steps x params_b x usd_per_step_per_billion_params``, no per-token price, so a
call's cost is its ``usd_per_call`` exactly (docs/datasets.md, "Image sets", gives every number's source).

- AGIQA-3K (``images/agiqa3k/data.csv``): 300 prompts x 10 settings, the setting being the file name minus
  ``_NNN.jpg`` and NNN the prompt. The prompt text is the non-empty fields ``prompt``, ``adj1``, ``adj2``,
  ``style`` joined by ", ". Reward = ``mos_align`` / 5 (text alignment, a 0-5 mean opinion score), or
  ``mos_quality`` / 5 with ``--reward quality``. Only prompts rated under every setting are kept (287);
  the dropped ones are listed in the dataset's ``notes``.
- TIFA160 (``images/tifa160/human_annotations.json``): 160 prompts x 5 generators, the generator being
  ``image_path`` minus the ``<text_id>_`` prefix and ``.jpg``. Reward = (``human_avg`` - 1) / 4 (the mean
  of two 1-5 ratings, mapped onto [0, 1]).
"""

from __future__ import annotations

import csv
import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from replay_dataset.files import write_dataset

IMAGE_SETS = ("agiqa3k", "tifa160")
AGIQA_REWARDS = {"align": "mos_align", "quality": "mos_quality"}
AGIQA_MOS_MAX = 5.0
TIFA_SCALE = (1.0, 5.0)
_AGIQA_NAME = re.compile(r"^(?P<setting>.+)_(?P<prompt>\d+)\.jpg$")


@dataclass(frozen=True)
class ImagePrices:
    """The price rule's unit (USD per sampling step per billion parameters) and, per set, each
    generator's ``{"params_b", "steps"}``."""

    unit: float
    sets: dict[str, dict[str, dict[str, float]]]

    def per_image(self, image_set: str, model: str) -> float:
        """USD per image: steps x params_b x unit."""
        entry = self.sets[image_set][model]
        return float(entry["steps"]) * float(entry["params_b"]) * self.unit

    def models(self, image_set: str) -> list[str]:
        return list(self.sets.get(image_set, {}))


def load_image_prices(path: Path | None = None) -> ImagePrices:
    text = (
        path.read_text() if path else resources.files("bench").joinpath("data/image_prices.json").read_text()
    )
    meta = json.loads(text)
    return ImagePrices(unit=float(meta["usd_per_step_per_billion_params"]), sets=meta["sets"])


def image_model_entries(image_set: str, names: Sequence[str], prices: ImagePrices) -> list[dict[str, Any]]:
    """``models.json`` entries: a per-image price and nothing per token (no output tokens either)."""
    known = set(prices.models(image_set))
    missing = [n for n in names if n not in known]
    if missing:
        raise ValueError(f"no prices for {image_set} generators {missing}; add them to the prices file")
    return [
        {
            "name": name,
            "usd_per_mtok_in": 0.0,
            "usd_per_mtok_out": 0.0,
            "usd_per_call": prices.per_image(image_set, name),
            "default_tokens_out": 0,
        }
        for name in names
    ]


def agiqa_prompt(record: Mapping[str, str]) -> str:
    """The prompt text: the non-empty fields prompt, adj1, adj2, style joined by ", "."""
    parts = (record.get(key, "").strip() for key in ("prompt", "adj1", "adj2", "style"))
    return ", ".join(p for p in parts if p)


def _agiqa_reward(value: str, column: str) -> float:
    mos = float(value)
    if not 0.0 <= mos <= AGIQA_MOS_MAX:
        raise ValueError(f"AGIQA-3K {column} {mos} outside [0, {AGIQA_MOS_MAX}]")
    return mos / AGIQA_MOS_MAX


@dataclass(frozen=True)
class ImageRows:
    """Converted rows, the generators in the prices file's order, and the prompts dropped (id -> the
    generators that have no rating for it)."""

    rows: list[dict[str, Any]]
    models: list[str]
    dropped: dict[str, list[str]]


def _complete_rows(
    by_prompt: Mapping[str, dict[str, float]],
    texts: Mapping[str, str],
    groups: Mapping[str, str],
    models: Sequence[str],
    prefix: str,
) -> ImageRows:
    rows, dropped = [], {}
    for key in sorted(by_prompt):
        rewards = by_prompt[key]
        missing = [m for m in models if m not in rewards]
        if missing:
            dropped[f"{prefix}/{key}"] = missing
            continue
        rows.append(
            {
                "id": f"{prefix}/{key}",
                "prompt": texts[key],
                "rewards": {m: rewards[m] for m in models},
                "group": groups[key],
            }
        )
    return ImageRows(rows=rows, models=list(models), dropped=dropped)


def agiqa_rows(data_dir: Path, models: Sequence[str], reward: str = "align") -> ImageRows:
    """One row per prompt rated under every setting of ``models`` (see the module doc)."""
    column = AGIQA_REWARDS[reward]
    path = data_dir / "images" / "agiqa3k" / "data.csv"
    by_prompt: dict[str, dict[str, float]] = defaultdict(dict)
    texts: dict[str, str] = {}
    groups: dict[str, str] = {}
    with path.open(newline="") as handle:
        for record in csv.DictReader(handle):
            name = _AGIQA_NAME.match(record["name"])
            if not name:
                raise ValueError(f"{path}: unexpected image name {record['name']!r}")
            key, setting = name["prompt"], name["setting"]
            if setting not in models:
                raise ValueError(f"{path}: setting {setting!r} has no price")
            text = agiqa_prompt(record)
            if texts.setdefault(key, text) != text:
                raise ValueError(f"{path}: prompt {key} has two texts: {texts[key]!r}, {text!r}")
            if setting in by_prompt[key]:
                raise ValueError(f"{path}: {record['name']} appears twice")
            by_prompt[key][setting] = _agiqa_reward(record[column], column)
            groups[key] = record.get("style", "").strip() or "no style"
    return _complete_rows(by_prompt, texts, groups, models, "agiqa3k")


def tifa_rows(data_dir: Path, models: Sequence[str]) -> ImageRows:
    """One row per TIFA160 prompt rated for every generator of ``models`` (see the module doc)."""
    path = data_dir / "images" / "tifa160" / "human_annotations.json"
    lo, hi = TIFA_SCALE
    by_prompt: dict[str, dict[str, float]] = defaultdict(dict)
    texts: dict[str, str] = {}
    groups: dict[str, str] = {}
    for entry in json.loads(path.read_text()).values():
        key = entry["text_id"]
        generator = entry["image_path"].removeprefix(f"{key}_").removesuffix(".jpg")
        if generator not in models:
            raise ValueError(f"{path}: generator {generator!r} has no price")
        score = float(entry["human_avg"])
        if not lo <= score <= hi:
            raise ValueError(f"{path}: human_avg {score} outside [{lo}, {hi}]")
        if texts.setdefault(key, entry["text"]) != entry["text"]:
            raise ValueError(f"{path}: prompt {key} has two texts")
        by_prompt[key][generator] = (score - lo) / (hi - lo)
        groups[key] = key.split("_", 1)[0]
    return _complete_rows(by_prompt, texts, groups, models, "tifa160")


def _dropped_note(dropped: Mapping[str, Sequence[str]]) -> str:
    if not dropped:
        return ""
    listed = "; ".join(f"{key} (no {', '.join(missing)})" for key, missing in dropped.items())
    return f"{len(dropped)} prompts dropped, not rated under every setting: {listed}"


def convert_images_main(args: Any) -> int:
    """``bench convert agiqa3k|tifa160`` (the parser is ``bench.convert_command``)."""
    data_dir = Path(args.data)
    prices = load_image_prices(Path(args.prices) if args.prices else None)
    names = prices.models(args.set)
    if args.set == "agiqa3k":
        converted = agiqa_rows(data_dir, names, args.reward)
        what = f"AGIQA-3K, reward = {AGIQA_REWARDS[args.reward]} / 5"
    else:
        if args.reward != "align":
            raise ValueError("--reward quality is an AGIQA-3K option (TIFA160 has one human rating)")
        converted = tifa_rows(data_dir, names)
        what = "TIFA160, reward = (human_avg - 1) / 4"
    total = len(converted.rows) + len(converted.dropped)
    notes = "; ".join(
        filter(
            None,
            [
                "cost per image = usd_per_call = steps x params x unit (bench/data/image_prices.json); "
                "no per-token price, so token estimates do not enter the cost",
                _dropped_note(converted.dropped),
            ],
        )
    )
    description = f"{what}: {len(converted.rows)} of {total} prompts x {len(names)} generators"
    models = image_model_entries(args.set, names, prices)
    out = write_dataset(args.out, models, converted.rows, (0.0, 1.0), description, notes=notes)
    print(
        f"wrote {len(converted.rows)} rows to {out}"
        + (
            f" ({len(converted.dropped)} prompts dropped: not rated under every setting)"
            if converted.dropped
            else ""
        )
    )
    return 0
