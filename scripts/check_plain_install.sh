#!/usr/bin/env bash
# `pip install .` with no extras gives a working gateway and bench on a CPU machine. In a fresh
# temporary directory: a new venv, torch==2.13.0 first (as scripts/install.sh: from $TORCH_INDEX_URL
# when set, e.g. https://download.pytorch.org/whl/cpu, else pip's configured indexes), then
# `pip install` of a copy of this checkout (not editable, no extras); then `banditgate demo` (SQLite,
# MiniLM, the replay backends) on a free port: GET /healthz and POST /route must answer 200, and
# `banditgate bench run` replays kNN-UCB (faiss) on the demo dataset. Prints what it checks; exits
# non-zero on the first failure. Installs from scratch: minutes, so not part of .ci/run.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
py=${PYTHON:-$(command -v python3.11 || command -v python3)}
work="$(mktemp -d)"
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

bash "$src/scripts/copy_checkout.sh" "$work/src"
"$py" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip)
echo "== pip install torch==2.13.0 ${TORCH_INDEX_URL:+--index-url $TORCH_INDEX_URL}"
"${pip[@]}" install -q --upgrade pip
"${pip[@]}" install -q torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
echo "== pip install . (no extras)"
"${pip[@]}" install -q "$work/src"
"$work/venv/bin/python" -c "import faiss, torch; print('torch', torch.__version__, '| faiss', faiss.__version__)"

port=$("$work/venv/bin/python" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
mkdir "$work/run"
cd "$work/run"
echo "== banditgate demo --host 127.0.0.1 --port $port"
"$work/venv/bin/banditgate" demo --host 127.0.0.1 --port "$port" >demo.log 2>&1 &
server=$!
for _ in $(seq 1 180); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat demo.log; echo "ERROR: banditgate demo exited" >&2; exit 1; }
  sleep 1
done
# shellcheck disable=SC1091
source .banditgate/demo.env
echo "GET /healthz -> $(curl -fsS "$GW/healthz")"
echo "POST /route -> $(curl -fsS "$GW/route" -H "Authorization: Bearer $KEY" \
  -H 'Content-Type: application/json' -d '{"prompt": "Prove that sqrt(2) is irrational."}')"
echo "== banditgate bench run --policy knn-ucb (demo dataset)"
"$work/venv/bin/banditgate" bench run --dataset .banditgate/demo-dataset --policy knn-ucb --horizon 40 \
  --seeds 1 --embedder hashing --quiet
echo "OK: pip install . (no extras) serves the demo and runs the bench"
