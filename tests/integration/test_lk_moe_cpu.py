"""lk_moe `cpu_prefill` on a tiny random BF16 MoE layer equals a plain
reference of the same layer (the GPU-resident path's math), on CPU.

lk_moe ships cp312 wheels only: the check runs in a Python 3.12 venv kept in
the ds4x cache (the lk_python fixture)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.network, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_cpu_prefill_matches_the_reference(lk_python: Path) -> None:
    done = subprocess.run([lk_python, "-m", "engine.lk_moe_check", "cpu"], capture_output=True, text=True, check=True,
                          cwd=ROOT)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert {(r["top_k"], r["tokens"]) for r in results} == {(k, n) for k in (2, 6) for n in (1, 3, 8, 33)}
    for r in results:
        assert r["rel_err"] < 1e-2, r  # bf16 weights and activations: ~2e-3 seen
        assert r["cosine"] > 0.9999, r
