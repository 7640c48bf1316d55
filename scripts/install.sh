#!/usr/bin/env bash
# Create .venv (Python 3.11+) and install banditgate with its extras. torch 2.13.0 (CPU) goes in first,
# so that nothing that depends on it pulls a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-cpu,dev}
py=${PYTHON:-$(command -v python3.11 || command -v python3)}
[ -x .venv/bin/python ] || "$py" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[${extras}]"
.venv/bin/python -c "import torch, sys; v = torch.__version__; sys.exit(0 if v.startswith('2.13.0') else f'torch {v} replaced 2.13.0')"
