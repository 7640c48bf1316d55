#!/usr/bin/env bash
# Install, migrate the embedded default (SQLite), create the demo tenant and router, and serve on
# 127.0.0.1:8000. Prints the demo API key and a curl line to try.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/banditgate demo --host 127.0.0.1 --port "${PORT:-8000}"
