"""The GPU harness's upstream stand-ins (TARGET=vllm in ci/fork-gpu), prepared on the CPU for both
upstream releases: 0.32.0 (the CPU engine's target, which the committed upstream GPU runs used) and
0.34.0 (the series' own target). prepare_fork.py's stand-ins and edits go on the pinned sdist with our
series, then cpu_check.py imports the GPU path under a forced CUDA platform and takes a dense case's
LLM(...) (and that of DFlash under vLLM's adaptive verification) up to the engine: what would fail
first on the GPU machine fails here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ds4x.cli import main
from tests.integration.conftest import harness_cpu_check


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("target, release", [("vllm-cpu-engine", "0.32.0"), ("vllm", "0.34.0")])
def test_the_upstream_cases_configure_on_a_forced_cuda_platform(target: str, release: str, engine_python: Path,
                                                                tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    assert main(["apply", "--target", target, "--dir", str(tree), "-q"]) == 0
    shutil.rmtree(tree / ".git")  # prepare_fork edits a plain tree, as make_carry.sh packs it
    out = harness_cpu_check(engine_python, tree, tmp_path, ("tiny_models.py", "."), ["dense-phase02", "dflash-av"],
                            target="vllm")
    assert f"vllm {release} from {tree}" in out
    assert "ok   dense-phase02 v2 FULL_DECODE_ONLY TRITON_ATTN query lengths [1, 3]" in out
    # vLLM's adaptive verification on DFlash, its drafter's attention named (case.py: DFLASH_ATTENTION)
    assert "ok   dflash-av v2 FULL_DECODE_ONLY TRITON_ATTN query lengths None drafter TRITON_ATTN adaptive verification" in out
