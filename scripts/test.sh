#!/usr/bin/env bash
# Usage: bash scripts/test.sh [--quick] [pytest arguments]
# Install into .venv, make sure Postgres and Redis run, then ruff, mypy and pytest.
#   (default)  the whole suite, the slow and contract tests included (ten minutes and more on 2 cores)
#   --quick    ruff, mypy and the quick subset: the tests marked neither slow nor contract, on the SQLite
#              stack only (pytest -k "not postgres"), less the long ones listed in tests/quick_excluded.txt
#              (the browser tests and the long statistical ones); the whole suite runs them all
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi
bash scripts/install.sh dev
bash scripts/services.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check . && ruff format --check .
echo "== mypy"; mypy
selection=()
if [ "$quick" = 1 ]; then
  selection=(-m "not slow and not contract" -k "not postgres")
  while read -r id; do
    selection+=(--deselect "$id")
  done < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' tests/quick_excluded.txt)
fi
echo "== pytest${selection:+ (quick subset)}"
set +e
python -m pytest -q -p no:cacheprovider "${selection[@]}" "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then echo "ERROR: pytest collected no tests" >&2; exit 1; fi
exit "$code"
