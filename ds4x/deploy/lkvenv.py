"""A Python for lk_moe (cp312 wheels only): a 3.12 venv with it, kept in the ds4x
cache, for `plan --measure` and the tests. CPython 3.12 is found on PATH or
through pyenv, never at a hard-coded path."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ds4x.errors import Ds4xError

LK_MOE = "lk-moe==2.7.4"  # the fork target's (patches/lvllmds4-x: requirements/cuda.txt)
LK_MOE_PACKAGES = [LK_MOE, "numpy", "ml_dtypes"]
HOW = ("install CPython 3.12 (e.g. pyenv install 3.12), or give --python with lk-moe installed: "
       f"python3.12 -m venv V && V/bin/pip install {LK_MOE} numpy")


def python312() -> tuple[list[str], dict[str, str]] | None:
    """A command and environment that start CPython 3.12."""
    env = dict(os.environ)
    if shutil.which("python3.12") and subprocess.run(["python3.12", "-V"], capture_output=True).returncode == 0:
        return ["python3.12"], env
    if shutil.which("pyenv"):
        bare = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True).stdout.split()
        for version in (v for v in bare if v.startswith("3.12")):
            env["PYENV_VERSION"] = version
            if subprocess.run(["python3.12", "-V"], env=env, capture_output=True).returncode == 0:
                return ["python3.12"], env
    return None


def ensure(cache: Path) -> Path | None:
    """The cached venv's python, made (or remade) when it cannot import lk_moe;
    None when no CPython 3.12 is to be found."""
    venv = cache / "venvs" / LK_MOE.replace("==", "-")
    python = venv / "bin" / "python"
    if python.exists() and subprocess.run([python, "-c", "import lk_moe"], capture_output=True).returncode == 0:
        return python
    found = python312()
    if found is None:
        return None
    command, env = found
    shutil.rmtree(venv, ignore_errors=True)
    try:
        subprocess.run([*command, "-m", "venv", str(venv)], env=env, check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *LK_MOE_PACKAGES], check=True)
    except subprocess.CalledProcessError as e:
        shutil.rmtree(venv, ignore_errors=True)  # no half-made venv for the next run to trust
        raise Ds4xError(f"making the lk_moe venv in {venv} failed ({e})", HOW) from None
    return python
