"""An environment ds4x cannot work in gets one error and a hint, never a traceback:
no git, a Python without ds4x's dependencies, a copy of the package without its checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(python: str | Path, build: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), str(build), *args], capture_output=True, text=True, env=env, timeout=120)


def test_no_git_on_path() -> None:
    done = run(sys.executable, ROOT / "build.py", "fetch", "--target", "vllm", env={**os.environ, "PATH": "/nonexistent"})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "error: git is needed" in done.stderr and "hint: install git" in done.stderr


def test_a_python_without_the_dependencies(tmp_path: Path) -> None:
    venv.create(tmp_path / "bare", with_pip=False)
    done = run(tmp_path / "bare" / "bin" / "python", ROOT / "build.py", "wheel", "--target", "vllm")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "a dependency of ds4x is missing: No module named" in done.stderr and "pip install -e ." in done.stderr


def test_the_package_without_its_checkout(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "ds4x", tmp_path / "ds4x", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "build.py", tmp_path)
    for command in (["check"], ["plan"], ["wheel", "--target", "vllm"]):
        done = run(sys.executable, tmp_path / "build.py", *command)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"error: {command[0]} needs the ds4x checkout; not found: " in done.stderr
    standalone = run(sys.executable, tmp_path / "build.py", "provenance")  # needs only the package
    assert standalone.stdout == "no ds4x wheel is installed here\n" and "checkout" not in standalone.stderr
