"""The plain-text table ``bench run`` prints (and docs quote): one line per reference and policy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

COLUMNS = (
    "row",
    "reward",
    "cost $/round",
    "utility",
    "regret",
    "opr",
    "success",
    "calls",
    "queries",
    "select ms",
)


def _cells(label: str, row: Mapping[str, Any]) -> list[str]:
    def opt(key: str, fmt: str) -> str:
        return fmt.format(row[key]) if key in row else "-"

    return [
        label,
        f"{row['mean_reward']:.4f} ± {row['ci95']:.4f}",
        f"{row['mean_cost']:.6f}",
        f"{row['mean_utility']:.4f}",
        f"{row['mean_regret']:.4f}",
        f"{row['opr']:.3f}",
        f"{row['success_rate']:.3f}",
        f"{row['calls_per_round']:.2f}",
        opt("queries", "{:.1f}"),
        opt("select_ms_p50", "{:.3f}"),
    ]


def format_table(report: Mapping[str, Any]) -> str:
    """Fixed-width table of ``report["reference"]`` then ``report["policies"]``."""
    lines = [list(COLUMNS)]
    for key, row in report["reference"].items():
        lines.append(_cells(f"{key} ({row['name']})", row))
    for row in report["policies"]:
        lines.append(_cells(row["spec"], row))
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    rendered = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in lines]
    rendered.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(rendered)


def format_markdown(report: Mapping[str, Any]) -> str:
    """The same table as GitHub markdown (for docs)."""
    header = list(COLUMNS)
    rows = [_cells(f"{key} ({row['name']})", row) for key, row in report["reference"].items()]
    rows += [_cells(f"`{row['spec']}`", row) for row in report["policies"]]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)
