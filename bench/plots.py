"""PNG plots of a replay run: cumulative regret, optimal-pick ratio and cumulative cost over rounds.

Each curve is the mean across seeds with a 95% band (mean +- 1.96 sd / sqrt(S)); references are dashed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from bench.metrics import Z95, regret_per_round
from bench.trace import Trace

Curve = Callable[[Trace, Trace], np.ndarray]


def _band(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mean = curves.mean(axis=0)
    if curves.shape[0] < 2:
        return mean, mean, mean
    half = Z95 * curves.std(axis=0, ddof=1) / np.sqrt(curves.shape[0])
    return mean, mean - half, mean + half


def write_plots(
    out_dir: Path,
    runs: Mapping[str, Sequence[Trace]],
    references: Mapping[str, Sequence[Trace]],
    oracles: Sequence[Trace],
    cost_weight: float,
    title: str,
) -> list[Path]:
    """Write ``regret.png``, ``opr.png`` and ``cost.png`` into ``out_dir``; return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    panels: list[tuple[str, str, Curve]] = [
        (
            "regret.png",
            "cumulative regret (utility)",
            lambda t, o: np.cumsum(regret_per_round(t, o, cost_weight)),
        ),
        (
            "opr.png",
            "optimal-pick ratio so far",
            lambda t, o: np.cumsum(t.optimal) / np.arange(1, t.optimal.size + 1),
        ),
        ("cost.png", "cumulative cost (USD)", lambda t, o: np.cumsum(t.cost)),
    ]
    written = []
    for filename, ylabel, curve in panels:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label, traces, style in [
            *((name, traces, "--") for name, traces in references.items()),
            *((name, traces, "-") for name, traces in runs.items()),
        ]:
            curves = np.stack([curve(t, o) for t, o in zip(traces, oracles, strict=True)])
            mean, low, high = _band(curves)
            rounds = np.arange(1, mean.size + 1)
            (line,) = ax.plot(rounds, mean, style, label=label, linewidth=1.4)
            ax.fill_between(rounds, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_xlabel("round")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / filename
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written
