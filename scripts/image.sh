#!/usr/bin/env bash
# Build the CPU container image with buildah (no Docker engine, no image registry) and smoke-test it:
#   1. a local base image: Debian bookworm (mmdebstrap --variant=minbase) + python3.11 + venv, imported
#      into buildah, passed to the Dockerfile as PYTHON_IMAGE;
#   2. torch's CPU wheel copied into .wheels/ (git-ignored, part of the build context), passed as
#      TORCH_WHEEL_DIR; without one the build installs torch from the public PyTorch CPU index;
#   3. `buildah bud` of the Dockerfile (timed), the image's size;
#   4. the image's `banditgate demo` (embedded SQLite, the MiniLM embedder, the built-in replay backends)
#      run with `buildah run`, and GET /healthz, POST /route and POST /v1/chat/completions checked.
# Needs root, buildah and mmdebstrap (apt-get install buildah mmdebstrap), and network access to Debian's
# package mirror and PyPI. Not part of the default CI run (minutes). docs/deploy.md.
#
# Environment:
#   IMAGE          the tag built (default localhost/banditgate:local)
#   BASE_IMAGE     the local base's tag (default localhost/banditgate-base:bookworm); built when missing
#   REBUILD_BASE   1 = rebuild the base even if it exists
#   NO_CACHE       1 = build the image without buildah's layer cache (the build time of a cold build)
#   DEBIAN_MIRROR  mirror for mmdebstrap (default: mmdebstrap's, deb.debian.org)
#   EXTRA_CA_DIR   *.crt added to the base's trust store (default /usr/local/share/ca-certificates, the
#                  host's local CAs, so a TLS-intercepting egress proxy works inside the build;
#                  the image then trusts them too: EXTRA_CA_DIR= REBUILD_BASE=1 for one that does not)
#   TORCH_WHEEL    a torch-2.13.0+cpu wheel for Python 3.11 (default: `pip download 'torch==2.13.0+cpu'`
#                  from pip's configured sources; none found = the build uses the public CPU index)
#   PORT           the port the smoke test serves on, host network (default: a free one)
#   KEEP_BUILD_CACHE  1 = keep the unnamed images the build leaves (the build stage's, gigabytes with
#                  torch): the layer cache of the next build; default: removed once the image is built
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/banditgate:local}
BASE_IMAGE=${BASE_IMAGE:-localhost/banditgate-base:bookworm}
EXTRA_CA_DIR=${EXTRA_CA_DIR-/usr/local/share/ca-certificates}
WHEEL_DIR=.wheels
ISOLATION=(--isolation chroot)

log() { printf '==> %s\n' "$*" >&2; }
die() {
    printf 'image.sh: %s\n' "$*" >&2
    exit 1
}

for tool in buildah mmdebstrap curl python3; do
    command -v "$tool" >/dev/null || die "$tool not found (apt-get install buildah mmdebstrap curl python3)"
done
[ "$(id -u)" = 0 ] || die "run as root (mmdebstrap and buildah --isolation chroot need it)"

work=$(mktemp -d)
container=""
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill -TERM -- "-$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    [ -z "$container" ] || buildah rm "$container" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

# 1. The base: what python:3.11-slim-bookworm gives the Dockerfile, from Debian's packages.
if [ "${REBUILD_BASE:-0}" = 1 ] || ! buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
    log "building the base $BASE_IMAGE (mmdebstrap bookworm minbase + python3.11 + venv)"
    base_start=$(date +%s)
    hooks=()
    if [ -n "$EXTRA_CA_DIR" ] && compgen -G "$EXTRA_CA_DIR/*.crt" >/dev/null; then
        hooks+=(--customize-hook="cp $EXTRA_CA_DIR/*.crt \"\$1/usr/local/share/ca-certificates/\"")
    fi
    hooks+=(--customize-hook='chroot "$1" update-ca-certificates >/dev/null 2>&1')
    mmdebstrap --quiet --variant=minbase \
        --include=python3,python3-venv,python-is-python3,ca-certificates \
        "${hooks[@]}" bookworm "$work/rootfs.tar" ${DEBIAN_MIRROR:+"$DEBIAN_MIRROR"}
    # pip and requests use their own CA bundles unless told to use the system's (which has EXTRA_CA_DIR's).
    cat >"$work/Containerfile" <<'EOF'
FROM scratch
ADD rootfs.tar /
ENV LANG=C.UTF-8 \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
CMD ["python3"]
EOF
    buildah bud "${ISOLATION[@]}" --quiet -f "$work/Containerfile" -t "$BASE_IMAGE" "$work" >/dev/null
    rm -f "$work/rootfs.tar"
    base_built="built in $(($(date +%s) - base_start)) s"
fi

# 2. torch's CPU wheel into the build context.
build_args=(--build-arg "PYTHON_IMAGE=$BASE_IMAGE")
mkdir -p "$WHEEL_DIR"
if ! compgen -G "$WHEEL_DIR/torch-2.13.0+cpu-*.whl" >/dev/null; then
    if [ -n "${TORCH_WHEEL:-}" ]; then
        cp "$TORCH_WHEEL" "$WHEEL_DIR/"
    else
        # The local version `+cpu` is never on PyPI, so this cannot fetch the multi-GB CUDA build.
        python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
            --dest "$WHEEL_DIR" 'torch==2.13.0+cpu' >/dev/null 2>&1 || true
    fi
fi
if compgen -G "$WHEEL_DIR/torch-2.13.0+cpu-*.whl" >/dev/null; then
    log "torch from $(ls "$WHEEL_DIR"/torch-2.13.0+cpu-*.whl)"
    build_args+=(--build-arg "TORCH_WHEEL_DIR=$WHEEL_DIR")
else
    log "no torch-2.13.0+cpu wheel found: the build installs torch from the public PyTorch CPU index"
fi

# 3. The image (docker format keeps the HEALTHCHECK, which OCI images cannot carry).
log "building $IMAGE"
unnamed() { buildah images --all --noheading --filter dangling=true --format '{{.ID}}' | sort -u; }
unnamed_before=$(unnamed)
start=$(date +%s)
cache=(--layers) cache_note="layer cache on"
[ "${NO_CACHE:-0}" != 1 ] || cache=(--no-cache) cache_note="no cache"
buildah bud "${ISOLATION[@]}" --network host --format docker "${cache[@]}" "${build_args[@]}" -t "$IMAGE" .
build_s=$(($(date +%s) - start))
if [ "${KEEP_BUILD_CACHE:-0}" != 1 ]; then
    # only the unnamed images this build made (the build stage's and the cached layers): not others'
    left=$(comm -13 <(printf '%s\n' "$unnamed_before") <(unnamed) | sed '/^$/d')
    if [ -n "$left" ]; then
        log "removing the $(wc -l <<<"$left") unnamed image(s) the build left (KEEP_BUILD_CACHE=1 keeps them)"
        xargs buildah rmi >/dev/null <<<"$left"
    fi
fi
size=$(buildah images --format '{{.Size}}' "$IMAGE" | head -n 1)

# 4. Run the demo in the image on the host network and check it from the host.
port=${PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
gw="http://127.0.0.1:$port"
container=$(buildah from --quiet "$IMAGE")
log "running \`banditgate demo\` in $container on $gw"
setsid buildah run "${ISOLATION[@]}" --network host \
    --env BANDITGATE_EMBEDDER=minilm "$container" -- \
    banditgate demo --host 127.0.0.1 --port "$port" >"$work/demo.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 180); do
    curl -fsS "$gw/healthz" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || {
        cat "$work/demo.log" >&2
        die "the demo exited before serving"
    }
    sleep 1
done
health=$(curl -fsS "$gw/healthz") || {
    cat "$work/demo.log" >&2
    die "/healthz did not answer in 180 s"
}
key=$(sed -n 's/^ *API key *\([^ ]*\).*/\1/p' "$work/demo.log" | head -n 1)
[ -n "$key" ] || die "no API key in the demo's output: $(cat "$work/demo.log")"

post() { curl -fsS "$gw$1" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' -d "$2"; }
route=$(post /route '{"prompt": "Prove that sqrt(2) is irrational."}') || die "/route failed: $(tail -n 20 "$work/demo.log")"
chat=$(post /v1/chat/completions \
    '{"model": "router", "messages": [{"role": "user", "content": "Write a thank-you note."}]}') ||
    die "/v1/chat/completions failed: $(tail -n 20 "$work/demo.log")"

summary=$(
    HEALTH=$health ROUTE=$route CHAT=$chat python3 - <<'EOF'
import json, os
health, route, chat = (json.loads(os.environ[k]) for k in ("HEALTH", "ROUTE", "CHAT"))
demo = ("demo-small", "demo-large")
assert health == {"status": "ok"}, health
print(f"/healthz              ok  {json.dumps(health)}")
assert route["model"] in demo, route
print(f"/route                ok  {route['policy']} chose {route['model']} (decision {route['decision_id']})")
message = chat["choices"][0]["message"]["content"]
assert chat["model"] in demo and message, chat
print(f"/v1/chat/completions  ok  {chat['model']} answered {message[:50]!r}")
EOF
) || die "unexpected answers: healthz=$health route=$route chat=$chat"

echo
echo "image       $IMAGE"
echo "base        $BASE_IMAGE (${base_built:-existing}; size $(buildah images --format '{{.Size}}' "$BASE_IMAGE" | head -n 1))"
echo "size        $size"
echo "build time  ${build_s} s (buildah bud, ${cache_note}; the base not included)"
echo "$summary"
