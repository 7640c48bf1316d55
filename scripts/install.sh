#!/usr/bin/env bash
# Create .venv (Python 3.11+) and install banditgate (editable) with the extras named in $1, comma
# separated (default none: the gateway and the bench, faiss-cpu included; `dev` adds the test tools).
# torch==2.13.0 goes in first, so that nothing that depends on it pulls another build: from
# $TORCH_INDEX_URL when set (https://download.pytorch.org/whl/cpu for the CPU wheel where pip would take
# PyPI's multi-GB CUDA one), else from pip's configured indexes.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1-}
py=${PYTHON:-$(command -v python3.11 || command -v python3)}
[ -x .venv/bin/python ] || "$py" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
.venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
.venv/bin/python -c "import torch, sys; v = torch.__version__; sys.exit(0 if v.startswith('2.13.0') else f'torch {v} replaced 2.13.0')"
