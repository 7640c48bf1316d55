#!/usr/bin/env bash
# The whole suite: install, make sure Postgres and Redis run, then ruff, mypy and pytest (slow tests too).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh dev
bash scripts/services.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check . && ruff format --check .
echo "== mypy"; mypy
echo "== pytest"
set +e
python -m pytest -q -p no:cacheprovider "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then echo "ERROR: pytest collected no tests" >&2; exit 1; fi
exit "$code"
