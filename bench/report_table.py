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


BUDGET_COLUMNS = ("violation", "reward/viol")
# bench.incumbent_check: worst seed's min over t >= 100 of cumulative reward / the incumbent's, the share of
# rounds off the incumbent, the cost saved against calling it always
INCUMBENT_COLUMNS = ("floor ratio", "off inc", "cost saved")
# shadow calls / served requests (``bench.metrics.shadow_share``), shown when some policy made shadow calls
SHADOW_COLUMNS = ("shadow",)


def _incumbent_cells(row: Mapping[str, Any]) -> list[str]:
    block = row.get("incumbent")
    if block is None:
        return ["-", "-", "-"]
    ratio, saved = block["min_floor_ratio"], block["cost_saved_share"]
    return [
        "-" if ratio is None else f"{ratio:.4f}",
        f"{block['off_incumbent_share']:.3f}",
        "-" if saved is None else f"{saved:.1%}",
    ]


def _budget_cells(row: Mapping[str, Any]) -> list[str]:
    if "violation" not in row:
        return ["-", "-"]
    ratio = row.get("reward_per_violation")
    return [f"{row['violation']:.6f}", "inf" if ratio is None else f"{ratio:.1f}"]


def _has_budget(report: Mapping[str, Any]) -> bool:
    rows = list(report["reference"].values()) + list(report["policies"])
    return any("violation" in row for row in rows)


def _cells(
    label: str, row: Mapping[str, Any], budget: bool = False, incumbent: bool = False, shadow: bool = False
) -> list[str]:
    def opt(key: str, fmt: str) -> str:
        return fmt.format(row[key]) if key in row else "-"

    cells = [
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
    ] + (_budget_cells(row) if budget else [])
    cells += _incumbent_cells(row) if incumbent else []
    return cells + ([opt("shadow_share", "{:.3f}")] if shadow else [])


def format_table(report: Mapping[str, Any]) -> str:
    """A line saying how prompts were drawn (``draws``, ``repeat_share``), then a fixed-width table of
    ``report["reference"]`` then ``report["policies"]`` (plus violation and reward per violation in USD
    when some row was judged against a budget, the comparison with the incumbent when some policy row
    has one, and the shadow share when some policy made shadow calls)."""
    budget = _has_budget(report)
    incumbent = any("incumbent" in row for row in report["policies"])
    shadow = any(row.get("shadow_calls", 0) > 0 for row in report["policies"])
    header = list(COLUMNS) + (list(BUDGET_COLUMNS) if budget else [])
    header += list(INCUMBENT_COLUMNS) if incumbent else []
    lines = [header + (list(SHADOW_COLUMNS) if shadow else [])]
    for key, row in report["reference"].items():
        lines.append(_cells(f"{key} ({row['name']})", row, budget, incumbent, shadow))
    for row in report["policies"]:
        lines.append(_cells(row["spec"], row, budget, incumbent, shadow))
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    rendered = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in lines]
    rendered.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([draws_line(report), *rendered])


def draws_line(report: Mapping[str, Any]) -> str:
    """``T=..., S seeds, draws <how>, repeat share <share of rounds whose text was played before>``."""
    return (
        f"T={report['horizon']}, {report['seeds']} seeds, draws {report.get('draws', '-')}, "
        f"repeat share {report.get('repeat_share', 0.0):.4f}"
    )
