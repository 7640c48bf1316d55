"""Plot of a mixture benchmark report: score of all outputs so far vs round, mean and 95% band over seeds,
with the offline oracle mixture and best single arm as dashed lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

STYLES = {
    "mixture-ucb-cab": ("tab:blue", "-"),
    "mixture-ucb-ogd": ("tab:orange", "-"),
    "mixture-greedy": ("tab:green", "-"),
    "vanilla-ucb": ("tab:red", "-"),
    "mixture-oracle": ("black", ":"),
    "one-arm-oracle": ("tab:gray", ":"),
}


def plot_report(report: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.0, 3.8), dpi=90)
    refs = report["references"]
    means = [c["mean"] for row in report["policies"].values() for c in row["checkpoints"]]
    log_scale = (
        not report["higher_is_better"] and min(means, default=0.0) > 0 and refs["oracle_mixture"]["score"] > 0
    )
    floor = 0.3 * min(means, default=1.0)
    for name, row in report["policies"].items():
        color, style = STYLES.get(name, (None, "-"))
        rounds = [c["round"] for c in row["checkpoints"]]
        lows = [max(c["low"], floor) if log_scale else c["low"] for c in row["checkpoints"]]
        ax.plot(rounds, [c["mean"] for c in row["checkpoints"]], style, color=color, label=name, lw=1.5)
        ax.fill_between(rounds, lows, [c["high"] for c in row["checkpoints"]], color=color, alpha=0.18, lw=0)
    if log_scale:
        ax.set_yscale("log")  # distances (KID, FD) fall over orders of magnitude; bands clipped for the log
    ax.axhline(
        refs["oracle_mixture"]["score"], color="black", ls="--", lw=0.8, label="oracle mixture (offline)"
    )
    best = refs["best_single_arm"]
    ax.axhline(best["score"], color="tab:gray", ls="--", lw=0.8, label=f"best arm {best['arm']} (offline)")
    arrow = "higher is better" if report["higher_is_better"] else "lower is better"
    ax.set_xlabel("round (outputs collected)")
    ax.set_ylabel(f"{report['score_name']} ({arrow})")
    ax.set_title(
        f"{report['dataset_name']}: {report['objective']}, {len(report['seeds'])} seeds", fontsize=10
    )
    ax.legend(fontsize=6, loc="best", ncol=2, framealpha=0.7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
