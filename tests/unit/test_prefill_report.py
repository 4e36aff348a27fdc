"""bench/prefill.py, the prefill benchmark's report, on results written here: a complete run prints its
tables and exits 0; every missing or failed part, a missing prompt length or concurrent measurement,
the wrong prefill path, unequal greedy tokens and a layer off the CPU's fail it (exit 1), each named."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bench import prefill

LENGTHS = [4096, 16384, 65536]
TOKENS = list(range(10, 42))


def arm(name: str, tok_s: dict[int, float], while_tok_s: float) -> dict[str, Any]:
    gpu = name != "cpu"
    return {"arm": name, "ok": True, "lengths": LENGTHS, "continuation": 32, "concurrent_asked": 16384,
            "prompts": {str(n): {"prompt_tokens": n, "ttft_s": n / tok_s[n], "prefill_tok_s": tok_s[n],
                                 "prefill_steps_s": [0.5], "tokens": TOKENS, "decode_tok_s": 40.0,
                                 "logprobs": [-0.0105 if gpu else -0.01] * len(TOKENS)} for n in LENGTHS},
            "concurrent": {"prompt_tokens": 16384, "alone_tok_s": 40.0, "while_prefill_tok_s": while_tok_s,
                           "while_prefill_tokens": 3, "other_ttft_s": 1.0},
            "calls": {prefill.ENGINE[name]: 30} if gpu else {},
            "lk_moe_calls": {"_gpu_prefill (prefill)": 30} if gpu else {"_cpu_prefill (prefill)": 30},
            "moe_layers": {"lk_moe": [0, 1, 2], "resident": []}, "lk_moe_info": {"device_bytes": 3 << 30},
            "gpu_peak_bytes": 5 << 30}


LAYER = {"ok": True, "engine": "cutlass", "lk_threads": "12", "raw_gpu_prefill_writes": "fp32",
         "device_bytes_after": 1 << 30,
         "sizes": {str(n): {"cpu_ms": n / 10, "gpu_ms": 30.0, "rel_diff": 4e-3, "finite": True}
                   for n in (128, 256, 512, 1024, 2048)}}


def run(tmp_path: Path, parts: dict[str, Any], asked: str = "layer cpu gpu") -> Path:
    (tmp_path / "asked").write_text(asked + "\n")
    for name, result in parts.items():
        (tmp_path / f"prefill-{name}.json").write_text(json.dumps(result))
    return tmp_path


def complete() -> dict[str, Any]:
    return {"layer": copy.deepcopy(LAYER), "cpu": arm("cpu", {4096: 900, 16384: 800, 65536: 700}, 2.0),
            "gpu": arm("gpu", {4096: 2000, 16384: 3200, 65536: 3500}, 6.0)}


def test_a_complete_run_prints_its_tables_and_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert prefill.main([str(run(tmp_path, complete()))]) == 0
    out = capsys.readouterr().out
    assert "GPU/CPU prefill at 16384 tokens: gpu 4.00x (target >= 3x: met)" in out
    assert "decode while prefilling, gpu against cpu: 6.00 against 2.00 tok/s (target no worse: met)" in out
    assert "crossover chunk size: GPU faster from 512 rows" in out  # 512 rows: CPU 51.2 ms, GPU 30 ms
    assert "lk_moe's raw gpu_prefill writes: fp32" in out
    assert "  16384 gpu        5.120         3200.0   4.00         40.00          yes     5.00e-04" in out
    assert "gpu: 3 MoE layers on lk_moe, 9600 layer-tok/s at 16384 tokens (bound on 41 lk_moe layers: 234 tok/s)" in out
    assert out.rstrip().endswith("prefill report: ok (layer, cpu, gpu)")


def test_targets_not_met_are_reported_not_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parts = complete()
    parts["gpu"] = arm("gpu", {4096: 1000, 16384: 1600, 65536: 2000}, 1.0)
    parts["layer"]["sizes"] = {"1024": {"cpu_ms": 10.0, "gpu_ms": 30.0, "rel_diff": 0.0, "finite": True}}
    assert prefill.main([str(run(tmp_path, parts))]) == 0
    out = capsys.readouterr().out
    assert "gpu 2.00x (target >= 3x: NOT met)" in out and "(target no worse: NOT met)" in out
    assert "the GPU is not faster at the largest size" in out


def broken(parts: dict[str, Any], how: str) -> str:
    """Breaks a complete run one way; returns the failure the report must name."""
    gpu, cpu, layer = parts["gpu"], parts["cpu"], parts["layer"]
    if how == "missing":
        del parts["gpu"]
        return "gpu: no result"
    if how == "crashed":
        parts["gpu"] = {"ok": False, "error": "RuntimeError('CUDA error: illegal memory access')"}
        return "gpu: failed: RuntimeError('CUDA error: illegal memory access')"
    if how == "length":
        del gpu["prompts"]["65536"]
        return "gpu: no result for 65536 prompt tokens"
    if how == "concurrent":
        del gpu["concurrent"]
        return "gpu: no decode-while-prefill measurement (16384 prompt tokens asked)"
    if how == "tokens":
        gpu["prompts"]["16384"]["tokens"] = [*TOKENS[:5], 99, *TOKENS[6:]]
        return "gpu: greedy tokens after 16384 prompt tokens differ from CPU prefill's first at token 5 of 32, 1 differ"
    if how == "gpu never ran":
        gpu["calls"] = {}
        return "gpu: lk_moe's cutlass GPU prefill never ran"
    if how == "cpu ran gpu":
        cpu["lk_moe_calls"]["_gpu_prefill (prefill)"] = 2
        return "cpu: ran a GPU prefill"
    if how == "cpu never ran":
        cpu["lk_moe_calls"] = {}
        return "cpu: lk_moe's cpu_prefill never ran"
    if how == "layer off":
        layer["sizes"]["1024"]["rel_diff"] = 0.9
        return "layer: GPU prefill of 1024 rows off the CPU's by 0.9"
    if how == "layer nan":
        layer["sizes"]["2048"]["finite"] = False
        return "layer: GPU prefill of 2048 rows off the CPU's"
    if how == "layer crashed":
        parts["layer"] = {"ok": False, "error": "AttributeError('MOE_MXFP4')"}
        return "layer: failed: AttributeError"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["missing", "crashed", "length", "concurrent", "tokens", "gpu never ran",
                                 "cpu ran gpu", "cpu never ran", "layer off", "layer nan", "layer crashed"])
def test_each_failure_fails_the_run_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str) -> None:
    parts = complete()
    expected = broken(parts, how)
    assert prefill.main([str(run(tmp_path, parts))]) == 1
    out = capsys.readouterr().out
    assert any(line.startswith("FAIL " + expected) for line in out.splitlines()), out
    assert out.rstrip().endswith("prefill report: FAILED (layer, cpu, gpu)")


def test_an_arm_allowed_to_differ_prints_the_difference_and_passes(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    parts = complete()
    broken(parts, "tokens")
    assert prefill.main([str(run(tmp_path, parts)), "--allow-differ", "gpu"]) == 0
    assert "(allowed) gpu: greedy tokens after 16384 prompt tokens differ" in capsys.readouterr().out


def test_a_folder_without_asked_and_an_arm_without_cpu_fail(tmp_path: Path) -> None:
    assert prefill.main([str(tmp_path)]) == 1
    parts = complete()
    del parts["cpu"]
    assert prefill.check(*prefill.load(run(tmp_path, parts, "gpu"))) == [
        "cpu: not asked for; the GPU arms have nothing to be compared with"]
    (tmp_path / "prefill-gpu.json").write_text("{")
    assert prefill.check(*prefill.load(tmp_path))[0].startswith("gpu: failed: unreadable")


def test_the_logprob_gap_covers_the_tokens_both_arms_chose_alike() -> None:
    ref = {"tokens": [1, 2, 3, 4], "logprobs": [-0.1, -0.2, -0.3, -0.4]}
    assert prefill.logprob_gap({"tokens": [1, 2, 9, 4], "logprobs": [-0.1, -0.25, -5.0, -0.4]}, ref) == pytest.approx(0.05)
    assert prefill.logprob_gap({"tokens": [1, 2, 3, 4], "logprobs": None}, ref) is None


def test_crossover_is_the_smallest_size_from_which_the_gpu_stays_faster() -> None:
    sizes: dict[str, dict[str, float]] = {"128": {"cpu_ms": 1, "gpu_ms": 0.5}, "256": {"cpu_ms": 2, "gpu_ms": 3},
             "512": {"cpu_ms": 4, "gpu_ms": 3}, "1024": {"cpu_ms": 8, "gpu_ms": 3}}
    assert prefill.crossover(sizes)[0] == 512
    assert prefill.crossover({"128": {"cpu_ms": 1, "gpu_ms": 2}})[0] is None


def test_certain_tokens_say_their_logprobs_cannot_show_a_gap() -> None:
    """bench/results/h100-dsv4-prefill: the stand-in's greedy tokens had logprob 0 in every arm."""
    zero = {"tokens": [1, 2], "logprobs": [0.0, 0.0]}
    assert prefill.certain(zero, zero) and not prefill.certain({"tokens": [1, 2], "logprobs": [0.0, -0.01]}, zero)
    assert not prefill.certain({"tokens": [1, 2], "logprobs": None}, zero)
    results = {"cpu": {"prompts": {"4096": {**zero, "prefill_tok_s": 1.0}}},
               "gpu": {"prompts": {"4096": {**zero, "prefill_tok_s": 9.0}}}}
    lines = prefill.report(["cpu", "gpu"], results)
    row = next(line for line in lines if line.lstrip().startswith("4096 gpu"))
    assert row.endswith(prefill.CERTAIN) and any(line.startswith(f"{prefill.CERTAIN}: every greedy") for line in lines)


def test_each_engines_layer_probe_is_its_own_part(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """layer (cutlass) and layer-triton: each printed with its engine, each held to the tolerance, and a
    layer part is never taken for an arm."""
    parts = complete()
    parts["layer-triton"] = {**copy.deepcopy(LAYER), "engine": "triton", "raw_gpu_prefill_writes": "not asked (triton)"}
    parts["layer-triton"]["sizes"]["2048"]["rel_diff"] = 1e-6
    assert prefill.main([str(run(tmp_path, parts, "layer layer-triton cpu gpu"))]) == 0
    out = capsys.readouterr().out
    assert "(cutlass engine, LK_THREADS=12)" in out and "(triton engine, LK_THREADS=12)" in out
    assert "  2048    204.80     30.00     0.15   1.0e-06" in out and "layer-triton:" not in out
    parts["layer-triton"]["sizes"]["512"]["rel_diff"] = 0.5
    assert prefill.main([str(run(tmp_path, parts, "layer layer-triton cpu gpu"))]) == 1
    assert "FAIL layer-triton: GPU prefill of 512 rows off the CPU's by 0.5" in capsys.readouterr().out
