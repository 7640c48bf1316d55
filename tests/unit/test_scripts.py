"""scripts/: run.sh's help, and image.sh's control flow with stand-ins for buildah, curl and mmdebstrap
(the real build takes minutes and the network): it builds, smoke-tests the demo it runs in the image, and removes the unnamed
images its build left (the build stage's, gigabytes), and only those; ``KEEP_BUILD_CACHE=1`` keeps them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# buildah: images and removals recorded under $FAKE_STATE; `bud` leaves two unnamed images.
FAKE_BUILDAH = r"""#!/usr/bin/env bash
set -eu
state=$FAKE_STATE
case "$1" in
  inspect) exit 0 ;;
  images)
    case "$*" in
      *dangling=true*) cat "$state/unnamed" ;;
      *) echo "2.16 GB" ;;
    esac ;;
  bud) printf 'bbb222\naaa111\n' >>"$state/unnamed"; echo "built" ;;
  from) echo "container-1" ;;
  run) echo "  API key      bg_fake-key   (saved in /x)"; exec sleep 120 ;;
  rm) exit 0 ;;
  rmi)
    shift
    for id in "$@"; do echo "$id" >>"$state/removed"; grep -vx "$id" "$state/unnamed" >"$state/u" || true
      mv "$state/u" "$state/unnamed"; done ;;
  *) echo "fake buildah: unexpected $*" >&2; exit 3 ;;
esac
"""
FAKE_CURL = r"""#!/usr/bin/env bash
for arg in "$@"; do case "$arg" in http*) url=$arg ;; esac; done
case "$url" in
  */healthz) echo '{"status": "ok"}' ;;
  */route) echo '{"model": "demo-small", "policy": "knn-ucb", "decision_id": "d1"}' ;;
  */v1/chat/completions) echo '{"model": "demo-large", "choices": [{"message": {"content": "hello"}}]}' ;;
  *) exit 22 ;;
esac
"""
# python3: the real one, except that `pip download` (of a torch wheel) finds nothing
FAKE_PYTHON3 = f"""#!/usr/bin/env bash
[ "$1 $2" = "-m pip" ] && exit 1
exec {sys.executable} "$@"
"""


def run_image_script(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    checkout, bin_dir, state = tmp_path / "checkout", tmp_path / "bin", tmp_path / "state"
    for folder in (checkout / "scripts", bin_dir, state):
        folder.mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "image.sh", checkout / "scripts" / "image.sh")
    fakes = {
        "buildah": FAKE_BUILDAH,
        "curl": FAKE_CURL,
        "python3": FAKE_PYTHON3,
        "mmdebstrap": "#!/bin/sh\nexit 3\n",
        "id": "#!/bin/sh\necho 0\n",
    }
    for name, text in fakes.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (state / "unnamed").write_text("zzz999\n")  # someone else's unnamed image: never removed
    variables = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_STATE": str(state), "HOME": str(tmp_path), **env}
    done = subprocess.run(
        ["bash", str(checkout / "scripts" / "image.sh")],
        env=variables,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, state


def test_the_build_removes_the_unnamed_images_it_left(tmp_path: Path) -> None:
    done, state = run_image_script(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "removing the 2 unnamed image(s) the build left" in done.stderr
    assert sorted((state / "removed").read_text().split()) == ["aaa111", "bbb222"]
    assert (state / "unnamed").read_text().split() == ["zzz999"]
    assert "/route                ok  knn-ucb chose demo-small" in done.stdout
    assert "size        2.16 GB" in done.stdout


def test_keep_build_cache_keeps_them(tmp_path: Path) -> None:
    done, state = run_image_script(tmp_path, KEEP_BUILD_CACHE="1")
    assert done.returncode == 0, done.stderr
    assert not (state / "removed").exists() and "removing" not in done.stderr
    assert sorted((state / "unnamed").read_text().split()) == ["aaa111", "bbb222", "zzz999"]


def test_run_sh_help_documents_port_and_installs_nothing(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "run.sh", checkout / "scripts" / "run.sh")  # no install.sh beside it
    done = subprocess.run(
        ["bash", str(checkout / "scripts" / "run.sh"), "--help"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: bash scripts/run.sh [--keep]\n")
    assert "PORT              the port to serve on (default 8000)" in done.stdout
    assert "set -euo" not in done.stdout and not (checkout / ".venv").exists()


def test_every_test_left_out_of_the_quick_subset_exists() -> None:
    """scripts/test.sh --quick deselects these; pytest ignores an id that matches nothing, so a renamed
    test would silently come back: each must name a test module and, after ``::``, a test in it."""
    listed = [
        line.split("#")[0].strip()
        for line in (REPO / "tests" / "quick_excluded.txt").read_text().splitlines()
        if line.split("#")[0].strip()
    ]
    assert listed
    for node in listed:
        path, _, name = node.partition("::")
        module = REPO / path
        assert module.is_file() and module.name.startswith("test_"), node
        if name:
            assert re.search(rf"^(async )?def {re.escape(name)}\(", module.read_text(), re.MULTILINE), node
    assert "quick_excluded.txt" in (REPO / "scripts" / "test.sh").read_text()
