#!/usr/bin/env bash
# Usage: bash scripts/run.sh [--keep]
# Install into .venv, migrate the embedded default (SQLite, ./banditgate.db), create the demo's backends,
# tenant and router, print the demo API key, the admin key and commands to try, and serve on
# 127.0.0.1:$PORT. Every run starts the demo tenant afresh with the same keys (kept in .banditgate/);
# --keep keeps what it learned in an earlier run. Other options go to `banditgate demo`.
#
# Environment:
#   PORT              the port to serve on (default 8000)
#   TORCH_INDEX_URL   where to install torch from (default: pip's configured indexes)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h | --help)
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
    exit 0
    ;;
esac
bash scripts/install.sh
exec .venv/bin/banditgate demo --host 127.0.0.1 --port "${PORT:-8000}" "$@"
