"""The GPU harness's upstream stand-ins (TARGET=vllm in ci/fork-gpu), prepared on the CPU for both
upstream releases: 0.32.0 (the CPU engine's target, which the committed upstream GPU runs used) and
0.34.0 (the series' own target). prepare_fork.py's stand-ins and edits go on the pinned sdist with our
series, then cpu_check.py imports the GPU path under a forced CUDA platform and takes a dense case's
LLM(...) up to the engine: what would fail first on the GPU machine fails here."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ds4x.cli import main

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "ci" / "fork-gpu"


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("target, release", [("vllm-cpu-engine", "0.32.0"), ("vllm", "0.34.0")])
def test_the_upstream_cases_configure_on_a_forced_cuda_platform(target: str, release: str, engine_python: Path,
                                                                tmp_path: Path) -> None:
    tree, site, models = tmp_path / "tree", tmp_path / "site", tmp_path / "models"
    assert main(["apply", "--target", target, "--dir", str(tree), "-q"]) == 0
    shutil.rmtree(tree / ".git")  # prepare_fork edits a plain tree, as make_carry.sh packs it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (HARNESS, ROOT)))}
    subprocess.run([engine_python, HARNESS / "prepare_fork.py", tree, site, "vllm"], check=True, env=env)
    subprocess.run([engine_python, HARNESS / "tiny_models.py", models], check=True, env=env, capture_output=True)
    env.update(PYTHONPATH=os.pathsep.join(map(str, (tree, site, ROOT, HARNESS))), DS4X_GPU_TARGET="vllm")
    done = subprocess.run([engine_python, HARNESS / "cpu_check.py", models, "dense-phase02"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"vllm {release} from {tree}" in done.stdout
    assert "ok   dense-phase02 v2 FULL_DECODE_ONLY TRITON_ATTN query lengths [1, 3]" in done.stdout
