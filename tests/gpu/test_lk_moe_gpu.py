"""On the H200: lk_moe `cpu_decode` fed from CUDA tensors on a CUDA stream
agrees with a GPU reference of the same layer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def test_cpu_decode_on_a_cuda_stream_matches_gpu_reference() -> None:
    pytest.importorskip("lk_moe", reason="ci/gpu installs the carried lk_moe wheel")
    done = subprocess.run([sys.executable, "-m", "engine.lk_moe_check", "gpu"], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == 8
    for r in results:
        print(f"top_k {r['top_k']} tokens {r['tokens']:>2}: rel_err {r['rel_err']:.2e} cosine {r['cosine']:.7f}")
        assert r["rel_err"] < 1e-2, r
        assert r["cosine"] > 0.9999, r
