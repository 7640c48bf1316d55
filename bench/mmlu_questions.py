"""MMLU question stems by subject, read from a RouteLLM folder of ``mmlu_<subject>.csv`` files, and
few-shot prefixes made of them: the real sentences of the learning and embed-text tests (the committed
fixture ``tests/data/routellm/topics``) and of ``experiments/knn_cap.py``'s topic-split set."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from embeddings.minilm import load_wordpieces


def mmlu_questions(folder: Path, subjects: Sequence[str], n: int) -> list[str]:
    """The first ``n`` distinct questions (stem only, without the options) over ``subjects``, in turn."""
    per_subject: list[list[str]] = []
    for subject in subjects:
        with (folder / f"mmlu_{subject}.csv").open(newline="", encoding="utf-8") as handle:
            per_subject.append([row["prompt"].split("\nA.")[0].strip() for row in csv.DictReader(handle)])
    out: list[str] = []
    seen: set[str] = set()
    for i in range(max(len(p) for p in per_subject)):
        for questions in per_subject:
            if i < len(questions) and questions[i] not in seen:
                seen.add(questions[i])
                out.append(questions[i])
            if len(out) == n:
                return out
    raise ValueError(f"only {len(out)} distinct questions in {list(subjects)}")


def few_shot_prefix(folder: Path, subject: str, title: str, pieces: int) -> str:
    """A few-shot template of at least ``pieces`` MiniLM word pieces from one MMLU subject's questions."""
    tokenizer = load_wordpieces()
    prefix = f"The following are questions (with answers) about {title}.\n\n"
    for question in mmlu_questions(folder, [subject], 80):
        if len(tokenizer.spans(prefix)) >= pieces:
            return prefix
        prefix += question + "\nAnswer: A\n\n"
    raise ValueError(f"{subject}'s first 80 questions are too short for a {pieces}-piece prefix")
