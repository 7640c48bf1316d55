"""Cut the small arena-bench fixture the test suite reads (``tests/data/arena-bench/``) from the full set.

    python -m experiments.make_arena_fixture --data ../shared/data --out tests/data/arena-bench

Deterministic; run twice, it writes the same bytes. Kept: the first ``FIRST`` questions of
``question.jsonl`` and the first ``INCOMPLETE`` questions that some model has no usable grade for (so the
converter's dropping is exercised), in ``question.jsonl`` order. Every kept line of ``question.jsonl`` and
of each of the sixteen ``model_judgment/<model>.jsonl`` is copied byte for byte; the licence is copied
beside them.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from bench.convert_arena import ARENA_SET, arena_score

FIRST = 5
INCOMPLETE = 2


def _lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines(keepends=True) if line.strip()]


def kept_questions(source: Path) -> list[str]:
    """The question ids kept (see the module doc), in ``question.jsonl`` order."""
    order = [json.loads(line)["question_id"] for line in _lines(source / "question.jsonl")]
    ungraded: set[str] = set()
    for path in sorted((source / "model_judgment").glob("*.jsonl")):
        for line in _lines(path):
            record = json.loads(line)
            if arena_score(record.get("score")) is None:
                ungraded.add(record["question_id"])
    incomplete = [q for q in order if q in ungraded][:INCOMPLETE]
    wanted = set(order[:FIRST]) | set(incomplete)
    return [q for q in order if q in wanted]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data",
        type=Path,
        required=True,
        help="the full data directory, holding arena-bench/ (../shared/data)",
    )
    parser.add_argument("--out", type=Path, required=True, help="where to write (tests/data/arena-bench)")
    args = parser.parse_args(argv)
    source = args.data / ARENA_SET
    kept = set(kept_questions(source))
    shutil.rmtree(args.out / "model_judgment", ignore_errors=True)
    (args.out / "model_judgment").mkdir(parents=True)
    for relative in [
        "question.jsonl",
        *(f"model_judgment/{p.name}" for p in sorted((source / "model_judgment").glob("*.jsonl"))),
    ]:
        lines = [line for line in _lines(source / relative) if json.loads(line)["question_id"] in kept]
        (args.out / relative).write_bytes(b"".join(lines))
    shutil.copyfile(source / "LICENSE", args.out / "LICENSE")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
