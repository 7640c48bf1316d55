"""``bench convert mmlu|gsm8k|mt-bench``: the RouteLLM evaluation files -> the replay format.

(The ``convert`` parser is ``bench.convert_command``; the image sets are ``bench.convert_images``.)

Reads ``<data>/routellm/...`` (default ``../shared/data``; see its README) and writes ``models.json`` +
``rows.jsonl`` into ``--out``. Prices come from a JSON file (default ``bench/data/prices.json``).

- MMLU: one row per CSV row of every subject (or ``--subjects``), id ``mmlu/<subject>/<row>``, reward 1.0
  if the model answered correctly else 0.0. Repeated prompts keep their own ids. ``--limit N`` keeps N rows
  drawn uniformly at random (``--seed``), in file order. No token counts: the harness estimates them.
- GSM8K: reward 1.0 / 0.0; the models' responses are kept, so output tokens are estimated from them.
- MT-bench: two rows per question (``mt-bench/<id>/turn1|2``), reward = GPT-4 judge score / 10, reward
  range [0.1, 1]. The responses are read back from the judge prompts. A turn-2 prompt is the user's two
  turns; its input tokens per model are estimated here as (turn-1 question + that model's turn-1 answer +
  turn-2 question) characters / 4, which the dataset's ``notes`` say.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from replay_dataset.files import write_dataset
from routers.prices import CHARS_PER_TOKEN

ROUTELLM_MODELS = ("mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview")


def load_prices(path: Path | None = None, default: str = "data/prices.json") -> dict[str, dict[str, float]]:
    """The ``models`` of a prices file: ``path``, else the packaged ``bench/<default>``."""
    text = path.read_text() if path else resources.files("bench").joinpath(default).read_text()
    models: dict[str, dict[str, float]] = json.loads(text)["models"]
    return models


def model_entries(
    names: Sequence[str], prices: Mapping[str, Mapping[str, float]], default_tokens_out: float | None
) -> list[dict[str, Any]]:
    missing = [n for n in names if n not in prices]
    if missing:
        raise ValueError(f"no prices for {missing}; add them to the prices file")
    entries = []
    for name in names:
        entry: dict[str, Any] = {"name": name, **prices[name]}
        if default_tokens_out is not None:
            entry["default_tokens_out"] = default_tokens_out
        entries.append(entry)
    return entries


def _flag(value: str) -> float:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected True/False, got {value!r}")
    return 1.0 if lowered == "true" else 0.0


def _subsample(rows: list[dict[str, Any]], limit: int | None, seed: int) -> list[dict[str, Any]]:
    if limit is None or limit >= len(rows):
        return rows
    keep = np.sort(np.random.default_rng(seed).choice(len(rows), size=limit, replace=False))
    return [rows[i] for i in keep]


def mmlu_rows(data_dir: Path, subjects: Sequence[str] | None = None) -> list[dict[str, Any]]:
    folder = data_dir / "routellm" / "mmlu"
    paths = sorted(folder.glob("mmlu_*.csv"))
    if subjects:
        wanted = {f"mmlu_{s}.csv" for s in subjects}
        unknown = wanted - {p.name for p in paths}
        if unknown:
            raise ValueError(f"unknown MMLU subjects: {sorted(s[5:-4] for s in unknown)}")
        paths = [p for p in paths if p.name in wanted]
    if not paths:
        raise ValueError(f"no MMLU csv under {folder}")
    rows = []
    for path in paths:
        subject = path.stem.removeprefix("mmlu_")
        with path.open(newline="") as handle:
            for i, record in enumerate(csv.DictReader(handle)):
                rows.append(
                    {
                        "id": f"mmlu/{subject}/{i}",
                        "prompt": record["prompt"],
                        "rewards": {m: _flag(record[m]) for m in ROUTELLM_MODELS},
                        "group": subject,
                    }
                )
    return rows


def gsm8k_rows(data_dir: Path) -> list[dict[str, Any]]:
    path = data_dir / "routellm" / "gsm8k" / "gsm8k_responses.csv"
    rows = []
    with path.open(newline="") as handle:
        for i, record in enumerate(csv.DictReader(handle)):
            rows.append(
                {
                    "id": f"gsm8k/{i}",
                    "prompt": record["prompt"],
                    "rewards": {m: _flag(record[m]) for m in ROUTELLM_MODELS},
                    "responses": {m: record[f"{m}_response"] for m in ROUTELLM_MODELS},
                    "group": "gsm8k",
                }
            )
    return rows


_CONVERSATION = re.compile(
    r"<\|The Start of Assistant A's Conversation with User\|>(.*)<\|The End of Assistant A's Conversation",
    re.S,
)
_SINGLE_ANSWER = re.compile(
    r"\[The Start of Assistant's Answer\]\n(.*)\n\[The End of Assistant's Answer\]", re.S
)


def judged_answers(user_prompt: str, turn: int) -> list[str]:
    """The assistant's answers that a judge prompt shows: [turn-1 answer] or [turn-1, turn-2 answers]."""
    if turn == 1:
        found = _SINGLE_ANSWER.search(user_prompt)
        if not found:
            raise ValueError("turn-1 judge prompt without an answer block")
        return [found.group(1).strip()]
    found = _CONVERSATION.search(user_prompt)
    if not found:
        raise ValueError("turn-2 judge prompt without a conversation block")
    parts = re.split(r"\n### (?:User|Assistant A):\n", found.group(1))
    # parts: [preamble, user1, answer1, user2, answer2]
    return [parts[2].strip(), parts[4].strip()]


def mt_bench_rows(data_dir: Path) -> list[dict[str, Any]]:
    folder = data_dir / "routellm" / "mt_bench"
    questions = {}
    with (folder / "question.jsonl").open() as handle:
        for line in handle:
            if line.strip():
                q = json.loads(line)
                questions[q["question_id"]] = q
    judged: dict[tuple[int, int], dict[str, dict[str, Any]]] = defaultdict(dict)
    with (folder / "judgements.jsonl").open() as handle:
        for line in handle:
            if line.strip():
                j = json.loads(line)
                judged[(j["question_id"], j["turn"])][j["model"]] = j
    rows = []
    for qid in sorted(questions):
        turns = questions[qid]["turns"]
        for turn in (1, 2):
            entries = judged[(qid, turn)]
            rewards = {
                m: j["score"] / 10 for m, j in entries.items() if m in ROUTELLM_MODELS and j["score"] >= 1
            }
            answers = {m: judged_answers(j["user_prompt"], turn)[-1] for m, j in entries.items()}
            row: dict[str, Any] = {
                "id": f"mt-bench/{qid}/turn{turn}",
                "prompt": turns[0] if turn == 1 else f"{turns[0]}\n\n{turns[1]}",
                "rewards": rewards,
                "responses": answers,
                "group": questions[qid].get("category", "mt-bench"),
            }
            if turn == 2:
                row["tokens_in"] = {
                    m: (len(turns[0]) + len(judged_answers(j["user_prompt"], 2)[0]) + len(turns[1]))
                    / CHARS_PER_TOKEN
                    for m, j in entries.items()
                }
            rows.append(row)
    return rows


def convert_main(args: argparse.Namespace) -> int:
    data_dir = Path(args.data)
    prices = load_prices(Path(args.prices) if args.prices else None)
    models = model_entries(ROUTELLM_MODELS, prices, args.default_tokens_out)
    notes = ""
    if args.set == "mmlu":
        subjects = [s.strip() for s in args.subjects.split(",")] if args.subjects else None
        rows, reward_range = mmlu_rows(data_dir, subjects), (0.0, 1.0)
        what = f"RouteLLM MMLU ({', '.join(subjects) if subjects else 'all 57 subjects'})"
    elif args.set == "gsm8k":
        rows, reward_range, what = gsm8k_rows(data_dir), (0.0, 1.0), "RouteLLM GSM8K"
    else:
        rows, reward_range, what = mt_bench_rows(data_dir), (0.1, 1.0), "RouteLLM MT-bench (judge score / 10)"
        notes = (
            "turn-2 tokens_in estimated by the converter as (turn-1 question + the model's turn-1 answer + "
            "turn-2 question) characters / 4"
        )
    total = len(rows)
    rows = _subsample(rows, args.limit, args.seed)
    description = f"{what}: {len(rows)} of {total} prompts" + (
        f" (uniform subsample, seed {args.seed})" if len(rows) < total else ""
    )
    extra = {"notes": notes} if notes else {}
    out = write_dataset(args.out, models, rows, reward_range, description, **extra)
    print(f"wrote {len(rows)} rows to {out}")
    return 0
