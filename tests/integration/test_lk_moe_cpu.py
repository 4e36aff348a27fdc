"""lk_moe 2.3.3 `cpu_prefill` on a tiny random BF16 MoE layer equals a plain
reference of the same layer (the GPU-resident path's math), on CPU.

lk_moe ships cp312 wheels only: the check runs in a Python 3.12 venv kept in
the ds4x cache, found through PATH or pyenv (never a hard-coded path)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ds4x import sources

pytestmark = [pytest.mark.network, pytest.mark.slow]
CHECK = Path(__file__).resolve().parents[1] / "kernels" / "lk_moe_check.py"
PACKAGES = ["lk-moe==2.3.3", "numpy", "ml_dtypes"]


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


@pytest.fixture(scope="module")
def lk_python() -> Path:
    venv = sources.default_cache() / "venvs" / "lk-moe-2.3.3"
    python = venv / "bin" / "python"
    if python.exists() and subprocess.run([python, "-c", "import lk_moe"], capture_output=True).returncode == 0:
        return python
    found = python312()
    if found is None:
        pytest.skip(reason="lk_moe needs CPython 3.12 (cp312 wheels only); none on PATH or in pyenv")
    command, env = found
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([*command, "-m", "venv", str(venv)], env=env, check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", *PACKAGES], check=True)
    return python


def test_cpu_prefill_matches_the_reference(lk_python: Path) -> None:
    done = subprocess.run([lk_python, CHECK, "cpu"], capture_output=True, text=True, check=True)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert {(r["top_k"], r["tokens"]) for r in results} == {(k, n) for k in (2, 6) for n in (1, 3, 8, 33)}
    for r in results:
        assert r["rel_err"] < 1e-2, r  # bf16 weights and activations: ~2e-3 seen
        assert r["cosine"] > 0.9999, r
