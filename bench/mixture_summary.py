"""Markdown tables from mixture benchmark reports: ``python -m bench.mixture_summary report.json ...``.

Per report: the final score of every policy (mean and 95% interval over seeds), the gap closed between
the best single arm and the oracle mixture, the L1 distance between the final proportions and the oracle
weights, and the score at a few early checkpoints (the convergence comparison).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def summarize(report: dict[str, Any], early: Sequence[float] = (0.05, 0.1, 0.25, 0.5)) -> str:
    refs = report["references"]
    best, oracle = refs["best_single_arm"], refs["oracle_mixture"]
    sign = 1.0 if report["higher_is_better"] else -1.0
    lines = [
        f"**{report['dataset_name']} / {report['objective']}** ({report['score_name']}, "
        f"{'higher' if report['higher_is_better'] else 'lower'} is better; T = {report['rounds']}, "
        f"{len(report['seeds'])} seeds). Offline: oracle mixture {_fmt(oracle['score'])} "
        f"({', '.join(f'{a} {w:.2f}' for a, w in oracle['weights'].items())}); best single arm "
        f"{best['arm']} {_fmt(best['score'])}.",
        "",
    ]
    checkpoints = report["checkpoints"]
    picks = sorted(
        {
            min(range(len(checkpoints)), key=lambda k: abs(checkpoints[k] - f * report["rounds"]))
            for f in early
        }
    )
    head = " | ".join(f"t = {checkpoints[k]}" for k in picks)
    lines.append(f"| policy | final (95% CI) | gap closed | L1 to oracle weights | {head} | ms/round |")
    lines.append("|---|---|---|---|" + "---|" * len(picks) + "---|")
    span = sign * (oracle["score"] - best["score"])
    for name, row in report["policies"].items():
        f = row["final"]
        closed = sign * (f["mean"] - best["score"]) / span if span > 0 else float("nan")
        l1 = sum(abs(row["weights"][a] - oracle["weights"][a]) for a in oracle["weights"])
        early_cells = " | ".join(_fmt(row["checkpoints"][k]["mean"]) for k in picks)
        lines.append(
            f"| {name} | {_fmt(f['mean'])} [{_fmt(f['low'])}, {_fmt(f['high'])}] | {closed:.0%} | {l1:.2f} | "
            f"{early_cells} | {1e3 * row['seconds_per_round']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    paths = list(sys.argv[1:] if argv is None else argv)
    for path in paths:
        print(summarize(json.loads(Path(path).read_text())))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
