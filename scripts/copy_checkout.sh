#!/usr/bin/env bash
# Copy this checkout's working tree into DEST (created if absent): what git would commit, i.e. tracked
# files and untracked ones git does not ignore, never .venv, .git, caches or build output. Outside git,
# everything but .venv and .git. Usage: bash scripts/copy_checkout.sh DEST
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:?usage: copy_checkout.sh DEST}"
mkdir -p "$dest"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # --ignore-failed-read: a tracked file deleted in the working tree is left out, as in a commit.
  git -C "$src" ls-files -z --cached --others --exclude-standard \
    | tar -C "$src" --null -T - --ignore-failed-read -cf - | tar -C "$dest" -xf -
else
  tar -C "$src" --exclude=./.venv --exclude=./.git -cf - . | tar -C "$dest" -xf -
fi
