"""On the H200: two micro-batches' lk_moe `cpu_decode` calls on one side stream, queued from
two threads into one CUDA graph (#20 item 2's premises, engine/lk_moe_overlap_check.py),
give the serial run's output bit for bit and hide the GPU part behind the CPU experts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def test_two_micro_batches_overlap_cpu_decode_inside_one_graph() -> None:
    pytest.importorskip("lk_moe", reason="ci/gpu installs the carried lk_moe wheel")
    done = subprocess.run([sys.executable, "-m", "engine.lk_moe_overlap_check"], cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=300)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["q"] for r in results] == [1, 3]
    for r in results:
        print(f"q {r['q']}: cpu {r['cpu_ms']:.2f} ms + gpu {r['gpu_sleep_ms']:.2f} ms; serial graph "
              f"{r['serial_ms']:.2f} ms, overlapped graph {r['overlapped_ms']:.2f} ms")
        assert r["serial_equal"] and r["overlapped_equal"], r
        # serial is about cpu + gpu; overlapped should approach the larger of the two
        assert r["overlapped_ms"] < 0.85 * r["serial_ms"], r
