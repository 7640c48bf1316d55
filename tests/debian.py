"""Debian packages a test needs on its machine: installed with apt-get when absent (the test machines
run as root; .ci/run installs nothing of these itself)."""

from __future__ import annotations

import os
import shutil
import subprocess


def installed(package: str, executable: str) -> str:
    """The path of ``executable``, after ``apt-get install package`` if it was not on the machine."""
    if shutil.which(executable) is None:
        env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", package], check=True, env=env)
    found = shutil.which(executable)
    assert found, f"{executable} is missing after apt-get install {package}"
    return found
