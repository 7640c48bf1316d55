"""``bench convert arena-bench``: sixteen chat models graded by GPT-4 -> the replay format.

(The ``convert`` parser is ``bench.convert_command``.)

Reads ``<data>/arena-bench/`` (default ``../shared/data``; see its README): ``question.jsonl`` (one prompt a
line, ``turns[0]`` is the prompt) and ``model_judgment/<model>.jsonl`` (per model and question, GPT-4's
single-answer grade ``score`` 1-10 against a reference answer, and ``user_prompt``, the judge's input,
which holds the model's answer). Writes ``models.json`` + ``rows.jsonl`` into ``--out``.

- One row per question, id ``arena-bench/<question_id>``, in ``question.jsonl`` order; the models are the
  prices file's, in its order (default ``bench/data/arena_prices.json``; every judged model needs a price).
- Reward = score / 10, ``reward_range`` [0.1, 1]. A grade that is not a number (it failed to parse
  upstream) is dropped; the replay format needs every model's reward on a row, so a question without a
  grade from every model is dropped and listed in the dataset's ``notes`` (30 of 300: 270 are kept).
- Tokens are estimated, never counted: input = the question's characters / 4 (the loader's rule), output =
  the model's answer, read out of the judge's ``user_prompt``, characters / 4 (kept as ``responses``).
  The ``notes`` say so, and the report's token-estimate lines count them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.convert_routellm import _subsample, judged_answers, load_prices, model_entries
from replay_dataset.files import write_dataset

ARENA_SET = "arena-bench"
ARENA_PRICES = "data/arena_prices.json"
ARENA_SCORE_RANGE = (1.0, 10.0)
ARENA_SCORE_SCALE = 10.0


def arena_score(value: Any) -> float | None:
    """A grade as a number in [1, 10] (a number or a numeric string), or None when it failed to parse."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        score = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(score):
        return None
    lo, hi = ARENA_SCORE_RANGE
    if not lo <= score <= hi:
        raise ValueError(f"arena-bench score {score} outside [{lo:g}, {hi:g}]")
    return score


@dataclass(frozen=True)
class ArenaRows:
    """Converted rows (complete ones only), the models, and the questions dropped (id -> the models
    without a usable grade for it)."""

    rows: list[dict[str, Any]]
    models: list[str]
    dropped: dict[str, list[str]]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def read_judgments(folder: Path, models: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """model -> question_id -> judgment record, from every ``model_judgment/*.jsonl`` (the ``model``
    field names the model); refuses a model without a price, a priced model without a file, and a
    question judged twice for one model."""
    judged: dict[str, dict[str, dict[str, Any]]] = {}
    paths = sorted(folder.glob("*.jsonl"))
    if not paths:
        raise ValueError(f"no judgment files under {folder}")
    for path in paths:
        for record in _read_jsonl(path):
            model = str(record["model"])
            if model not in models:
                raise ValueError(f"{path}: model {model!r} has no price; add it to the prices file")
            per_question = judged.setdefault(model, {})
            qid = str(record["question_id"])
            if qid in per_question:
                raise ValueError(f"{path}: question {qid} judged twice for {model}")
            per_question[qid] = record
    unjudged = [m for m in models if m not in judged]
    if unjudged:
        raise ValueError(f"no judgments under {folder} for priced models {unjudged}")
    return judged


def arena_rows(data_dir: Path, models: Sequence[str]) -> ArenaRows:
    """One row per question graded by every model of ``models`` (see the module doc)."""
    folder = data_dir / ARENA_SET
    questions = _read_jsonl(folder / "question.jsonl")
    judged = read_judgments(folder / "model_judgment", models)
    rows, dropped = [], {}
    for question in questions:
        qid = str(question["question_id"])
        row_id = f"{ARENA_SET}/{qid}"
        rewards, answers, missing = {}, {}, []
        for model in models:
            record = judged[model].get(qid)
            score = None if record is None else arena_score(record.get("score"))
            if record is None or score is None:
                missing.append(model)
                continue
            rewards[model] = score / ARENA_SCORE_SCALE
            answers[model] = judged_answers(str(record["user_prompt"]), 1)[0]
        if missing:
            dropped[row_id] = missing
            continue
        rows.append(
            {
                "id": row_id,
                "prompt": question["turns"][0],
                "rewards": rewards,
                "responses": answers,
                "group": question.get("category", ARENA_SET),
            }
        )
    return ArenaRows(rows=rows, models=list(models), dropped=dropped)


def _dropped_note(dropped: Mapping[str, Sequence[str]]) -> str:
    if not dropped:
        return ""
    listed = "; ".join(f"{key} (no grade from {', '.join(missing)})" for key, missing in dropped.items())
    return f"{len(dropped)} questions dropped, not graded by every model: {listed}"


def convert_arena_main(args: Any) -> int:
    """``bench convert arena-bench`` (the parser is ``bench.convert_command``)."""
    prices = load_prices(Path(args.prices) if args.prices else None, default=ARENA_PRICES)
    prices_name = Path(args.prices).name if args.prices else Path(ARENA_PRICES).name
    names = list(prices)
    converted = arena_rows(Path(args.data), names)
    total = len(converted.rows) + len(converted.dropped)
    rows = _subsample(converted.rows, args.limit, args.seed)
    notes = "; ".join(
        filter(
            None,
            [
                f"prices: {prices_name} (approximate list prices of late 2023, not billed amounts); "
                "tokens estimated as characters / 4: tokens_in from the question, tokens_out from the "
                "model's answer as quoted in the judge's user_prompt",
                _dropped_note(converted.dropped),
            ],
        )
    )
    description = (
        f"arena-bench (GPT-4 grade / 10): {len(rows)} of {total} questions x {len(names)} models"
        + (
            f" (uniform subsample of the {len(converted.rows)} complete, seed {args.seed})"
            if len(rows) < len(converted.rows)
            else ""
        )
    )
    models = model_entries(names, prices, args.default_tokens_out)
    low = ARENA_SCORE_RANGE[0] / ARENA_SCORE_SCALE
    out = write_dataset(args.out, models, rows, (low, 1.0), description, notes=notes)
    print(
        f"wrote {len(rows)} rows to {out}"
        + (
            f" ({len(converted.dropped)} questions dropped: not graded by every model)"
            if converted.dropped
            else ""
        )
        + "; token counts estimated as characters / 4"
    )
    return 0
