"""The PNG of a ``bench frontier`` report: reward against mean cost per request.

Single models are labelled points, uniform random a cross, the mixing frontier a grey line (straight in
linear cost, drawn densely so that a log axis bends it correctly), the oracle and the knn-ceiling dashed
/ dotted curves over lambda (their segments drawn the same way), each policy a solid curve over its swept
knob with 95% error bars in both reward and cost (its unswept point, the policy as given, a hollow
marker).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

MIX_SAMPLES = 64


def mixed(points: Sequence[Mapping[str, float]]) -> tuple[list[float], list[float]]:
    """(costs, rewards) along the segments between consecutive points, MIX_SAMPLES per segment: a random
    mix of two routers earns the straight line between them in linear cost, which a log axis bends."""
    if len(points) < 2:
        return [p["cost"] for p in points], [p["reward"] for p in points]
    costs: list[float] = []
    rewards: list[float] = []
    for start, end in pairwise(points):
        share = np.linspace(0.0, 1.0, MIX_SAMPLES)
        costs.extend(start["cost"] + share * (end["cost"] - start["cost"]))
        rewards.extend(start["reward"] + share * (end["reward"] - start["reward"]))
    return costs, rewards


def plot_frontier(report: dict[str, Any], path: Path, title: str, log_cost: bool = False) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10.0, 5.0))
    for model in report["models"]:
        ax.plot(model["cost"], model["reward"], "o", color="black", markersize=4)
        ax.annotate(
            model["model"],
            (model["cost"], model["reward"]),
            fontsize=7,
            xytext=(3, 3),
            textcoords="offset points",
        )
    cost, reward = mixed(report["mixing_frontier"])
    ax.plot(cost, reward, "-", color="grey", linewidth=1, label="random mixing of models (best)")
    ax.plot(report["random"]["cost"], report["random"]["reward"], "x", color="grey", label="uniform random")
    for key, style, label in (
        ("oracle", "--", "per-prompt oracle (over lambda)"),
        ("knn_ceiling", ":", "knn-ceiling (over lambda)"),
    ):
        curve = sorted(report[key], key=lambda p: p["cost"])
        (line,) = ax.plot(*mixed(curve), style, linewidth=1.4, label=label)
        ax.plot([p["cost"] for p in curve], [p["reward"] for p in curve], ".", color=line.get_color())
    sweep = report["sweep"]
    for name, points in report["policies"].items():
        swept = sorted((p for p in points if p[sweep] is not None), key=lambda p: p["cost"])
        bars = ax.errorbar(
            [p["cost"] for p in swept],
            [p["reward"] for p in swept],
            xerr=[p["cost_ci95"] for p in swept],
            yerr=[p["reward_ci95"] for p in swept],
            fmt="-o",
            markersize=3,
            linewidth=1.4,
            capsize=2,
            label=f"{name} ({sweep} swept)",
        )
        color = bars.lines[0].get_color()
        for p in points:
            if p[sweep] is None:
                ax.errorbar(
                    p["cost"],
                    p["reward"],
                    xerr=p["cost_ci95"],
                    yerr=p["reward_ci95"],
                    fmt="o",
                    mfc="none",
                    color=color,
                    capsize=2,
                    label=f"{name} (no {sweep})",
                )
    if log_cost:
        ax.set_xscale("log")
    ax.set_xlabel("mean cost per request (USD)")
    ax.set_ylabel("mean reward")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
