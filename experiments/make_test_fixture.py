"""Cut the small RouteLLM MMLU fixture the test suite reads (``tests/data/routellm/``) from the full set.

    python -m experiments.make_test_fixture --data ../shared/data --out tests/data/routellm

Deterministic (no clock, no unseeded randomness); run twice, it writes the same bytes. Two parts:

- ``mmlu/mmlu_<subject>.csv``: the rows ``bench convert mmlu --limit 300 --seed 0`` draws from all 57
  subjects (uniform, seed 0, file order kept), so ``bench convert mmlu --data tests/data`` gives the same
  300 prompts and outcomes as that command on the full set (the end-to-end bench test).
- ``topics/mmlu_<subject>.csv``: the first 160 rows of four subjects, two maths and two humanities (the
  learning test takes the first 300 distinct questions of each pair: 151 rows of each file), and the
  first 80 rows of two more (biology, law) from which the embed-text test builds its long few-shot
  prefixes.

Every kept row is copied verbatim (prompt and both models' True/False columns). The RouteLLM licence is
copied beside them; the README names the source commit.
"""

from __future__ import annotations

import argparse
import csv
import shutil
from collections import defaultdict
from pathlib import Path

from bench.convert_routellm import _subsample, mmlu_rows

SAMPLE_SIZE = 300
SAMPLE_SEED = 0
TOPIC_SUBJECTS = ("elementary_mathematics", "high_school_mathematics", "prehistory", "world_religions")
TOPIC_ROWS = 160
PREFIX_SUBJECTS = ("high_school_biology", "professional_law")
PREFIX_ROWS = 80


def read_subject(mmlu_dir: Path, subject: str) -> tuple[list[str], list[list[str]]]:
    with (mmlu_dir / f"mmlu_{subject}.csv").open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        return header, list(reader)


def write_subject(path: Path, header: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def sampled_indices(data: Path) -> dict[str, list[int]]:
    """Per subject, the row numbers ``bench convert mmlu --limit 300 --seed 0`` keeps (ids mmlu/<s>/<i>)."""
    kept: dict[str, list[int]] = defaultdict(list)
    for row in _subsample(mmlu_rows(data), SAMPLE_SIZE, SAMPLE_SEED):
        _, subject, index = row["id"].split("/")
        kept[subject].append(int(index))
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", type=Path, required=True, help="the full data directory, holding routellm/ (../shared/data)"
    )
    parser.add_argument("--out", type=Path, required=True, help="where to write (tests/data/routellm)")
    args = parser.parse_args(argv)
    mmlu_dir = args.data / "routellm" / "mmlu"
    for part in ("mmlu", "topics"):
        shutil.rmtree(args.out / part, ignore_errors=True)
    for subject, indices in sorted(sampled_indices(args.data).items()):
        header, rows = read_subject(mmlu_dir, subject)
        write_subject(args.out / "mmlu" / f"mmlu_{subject}.csv", header, [rows[i] for i in indices])
    for subjects, n in ((TOPIC_SUBJECTS, TOPIC_ROWS), (PREFIX_SUBJECTS, PREFIX_ROWS)):
        for subject in subjects:
            header, rows = read_subject(mmlu_dir, subject)
            write_subject(args.out / "topics" / f"mmlu_{subject}.csv", header, rows[:n])
    shutil.copyfile(args.data / "routellm" / "LICENSE", args.out / "LICENSE")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
