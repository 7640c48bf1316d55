"""app.metrics: the backend-call hook's outcomes, and totals across processes in multiprocess mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import metrics

REPO = Path(__file__).resolve().parents[3]


def count(name: str, **labels: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels)
    return value or 0.0


def test_time_backend_records_outcomes() -> None:
    name = "banditgate_backend_duration_seconds_count"
    before = {o: count(name, backend="unit-b", outcome=o) for o in ("ok", "error", "timeout")}
    with metrics.time_backend("unit-b"):
        pass
    with pytest.raises(ValueError), metrics.time_backend("unit-b"):
        raise ValueError("upstream said no")
    with pytest.raises(TimeoutError), metrics.time_backend("unit-b"):
        raise TimeoutError
    metrics.observe_backend("unit-b", 0.25, "timeout")
    after = {o: count(name, backend="unit-b", outcome=o) for o in ("ok", "error", "timeout")}
    assert {o: after[o] - before[o] for o in after} == {"ok": 1, "error": 1, "timeout": 2}


def test_multiprocess_mode_sums_the_workers(tmp_path: Path) -> None:
    """Two 'workers' count decisions; a third process's exposition reports their sum."""
    env = os.environ | {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    worker = "from app import metrics; metrics.count_decision('acme', 'support')"
    for _ in range(2):
        subprocess.run([sys.executable, "-c", worker], env=env, check=True)
    scrape = "from app import metrics; print(metrics.exposition()[0].decode())"
    text = subprocess.run([sys.executable, "-c", scrape], env=env, check=True, capture_output=True, text=True)
    assert 'banditgate_decisions_total{router="support",tenant="acme"} 2.0' in text.stdout
