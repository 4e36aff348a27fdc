"""ci/fork-gpu/report.py, the GPU harness's verdict, on case results written here:
it fails closed. A case asked for that crashed, never reported or verified only K
at low acceptance fails it, and so do lk_moe and drafter counters that show the
graphs did not do what they must."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from bench.counters import HarnessCounters
from tests.scripts import load_script

TOKENS = [[7, 8, 9], [7, 7, 7]]


def load() -> ModuleType:
    return load_script("ci/fork-gpu/report.py")


def case(graph: dict[str, int], drafter_after: dict[str, int] | None = None, **changes: Any) -> dict[str, Any]:
    """A passing MoE case on model runner v2 that replayed these query lengths."""
    result = {"ok": True, "tokens": TOKENS, "wall_s": 10, "init_s": 5,
              "graphs": {"ModelCudaGraphManager": ["t1:r1:q1", "t2:r1:q2", "t3:r1:q3"]},
              "replays": {"ModelCudaGraphManager": graph}, "decode_steps": {"graph": graph, "eager": {}},
              "drafter_after": drafter_after if drafter_after is not None else dict(graph),
              "lk_moe": {"_cpu_decode (capturing)": 6, "_cpu_prefill (prefill)": 2}, "spec_metrics": {}}
    return {**result, **changes}


def write(resdir: Path, results: dict[str, dict[str, Any]], asked: list[str]) -> Path:
    for name, result in results.items():
        (resdir / f"{name}.json").write_text(json.dumps(result))
    (resdir / "asked").write_text(" ".join(asked) + "\n")
    return resdir


@pytest.fixture
def passing() -> dict[str, dict[str, Any]]:
    return {"moe-eager": {"ok": True, "tokens": TOKENS, "lk_moe": {"_cpu_decode (decode)": 40}},
            "moe-phase02": case({"1": 20, "3": 5}),
            "moe-adaptivelow": case({"1": 3, "3": 30})}


def test_cases_that_did_what_they_must_pass(passing: dict[str, dict[str, Any]], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert load().main(write(tmp_path, passing, list(passing))) == 0
    assert "3/3 cases pass" in capsys.readouterr().out


@pytest.mark.parametrize(("how", "message"), [
    ("crashed", "moe-phase02: ok=False"),
    ("never reported", "no result: crashed, killed by its time limit, or skipped for the budget"),
    ("only K at low acceptance", "adaptive verified only K at low acceptance"),
    ("tokens differ", "greedy tokens differ from the eager run: 1/2 equal"),
    ("eager decode step", "eager decode steps {'3': 1}"),
    ("_cpu_prefill in decode", "_cpu_prefill ran in 4 decode calls"),
    ("cpu_decode not captured", "cpu_decode captured 0 times for 3 decode graphs"),
    ("no drafter graphs after depth 0", "the drafter replayed no graph after a depth-0 step"),
])
def test_the_report_fails_closed(passing: dict[str, dict[str, Any]], how: str, message: str, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    results, asked = copy.deepcopy(passing), list(passing)
    if how == "crashed":
        results["moe-phase02"] = {"ok": False, "error": "RuntimeError('CUDA error')"}
        message = "failed: RuntimeError('CUDA error')"
    elif how == "never reported":
        del results["moe-phase02"]
    elif how == "only K at low acceptance":
        results["moe-adaptivelow"] = case({"3": 33})
    elif how == "tokens differ":
        results["moe-phase02"]["tokens"] = [[7, 8, 9], [7, 7, 6]]
    elif how == "eager decode step":
        results["moe-phase02"]["decode_steps"]["eager"] = {"3": 1}
    elif how == "_cpu_prefill in decode":
        results["moe-phase02"]["lk_moe"]["_cpu_prefill (decode)"] = 4
    elif how == "cpu_decode not captured":
        results["moe-phase02"]["lk_moe"] = {}
    elif how == "no drafter graphs after depth 0":
        results["moe-phase02"]["drafter_after"] = {"3": 5}
    assert load().main(write(tmp_path, results, asked)) == 1
    out = capsys.readouterr().out
    assert message in out and "FAIL" in out


def test_no_list_of_cases_asked_for_fails(passing: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    write(tmp_path, passing, list(passing))
    (tmp_path / "asked").unlink()
    assert load().main(tmp_path) == 1


def test_a_dflash_case_must_replay_the_drafters_own_graphs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """DSpark's family keeps its drafter in DFlashCudaGraphManager's graphs: none replayed fails."""
    replayed = case({"1": 3, "3": 30}, lk_moe={})
    replayed["replays"]["DFlashCudaGraphManager"] = {"3": 33}
    results = {"dflash-eager": {"ok": True, "tokens": TOKENS}, "dflash-adaptivelow": replayed}
    assert load().main(write(tmp_path, results, list(results))) == 0
    replayed["replays"]["DFlashCudaGraphManager"] = {}
    assert load().main(write(tmp_path, results, list(results))) == 1
    assert "the DFlash-family drafter replayed none of its own graphs" in capsys.readouterr().out


def av_case() -> dict[str, Any]:
    """A passing adaptive-verification DFlash case: every step scheduled at 1 + K, its variable-length
    target graphs (key "None") and DFlash's own replayed."""
    result = case({"3": 30}, lk_moe={})
    result["replays"] = {"ModelCudaGraphManager": {"None": 30}, "DFlashCudaGraphManager": {"None": 30}}
    return result


@pytest.mark.parametrize(("how", "message"), [
    ("passes", ""),
    ("eager decode step", "eager decode steps {'3': 2}"),
    ("a step below 1 + K", "decode steps at query lengths ['1', '3']: expected only 3"),
    ("no variable-length graph", "adaptive verification's variable-length target graphs never replayed"),
])
def test_an_adaptive_verification_case_is_held_to_its_own_graphs(how: str, message: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """dflash-av (vLLM's adaptive verification, TARGET=vllm) has no depth of ours to replay: it must run
    every decode step on its variable-length graphs, none eagerly."""
    av = av_case()
    if how == "eager decode step":
        av["decode_steps"]["eager"] = {"3": 2}
    elif how == "a step below 1 + K":
        av["decode_steps"]["graph"] = {"1": 2, "3": 28}
    elif how == "no variable-length graph":
        av["replays"]["ModelCudaGraphManager"] = {"3": 30}
    results = {"dflash-eager": {"ok": True, "tokens": TOKENS}, "dflash-av": av}
    assert load().main(write(tmp_path, results, list(results))) == (0 if how == "passes" else 1)
    assert message in capsys.readouterr().out


def test_splits_are_reported_at_ubatch_only(passing: dict[str, dict[str, Any]], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """At LVLLM_MOE_OVERLAP=ubatch a case's split graphs and split steps are printed; at off, nothing."""
    split = {"level": "ubatch", "tokens": "3", "split_graphs": ["t2:r2", "t6:r2"], "split_steps": {"3": 9}}
    passing["moe-phase02"]["ubatch"] = split
    passing["moe-adaptivelow"]["ubatch"] = {**split, "level": "off", "split_graphs": [], "split_steps": {}}
    assert load().main(write(tmp_path, passing, list(passing))) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "LVLLM_MOE_OVERLAP" in line]
    assert lines == ['   LVLLM_MOE_OVERLAP: ' + json.dumps(split)]


@pytest.mark.parametrize("run, cases", [("h200-dsv4-harness/res", 6), ("h200-dsv4-harness/ubatch-3/res", 4),
                                        ("h200-dsv4-harness-resident/res", 2),
                                        ("h200-dsv4-harness-resident/policies/res", 5),
                                        ("h200-dsv4-harness-resident/ubatch-3/res", 5),
                                        ("h200-dsv4-harness-rest/res", 5),
                                        ("h200-dsv4-harness-rest/ubatch-3/res", 3)])
def test_the_committed_deepseek_v4_runs_pass_every_case(run: str, cases: int,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h200-dsv4-harness*: the DeepSeek-V4 + DSpark cases their READMEs quote, at
    LVLLM_MOE_OVERLAP=ubatch too (every two-request graph split in two micro-batches), and with the
    user's resident layers 0,1 on the fork's Marlin MXFP4 MoE, each request verifying its own depth."""
    res = Path(__file__).resolve().parents[2] / "bench/results" / run
    assert load().main(res) == 0
    out = capsys.readouterr().out
    assert f"{cases}/{cases} cases pass" in out and out.count("PASS: tokens equal eager") == cases - 1


def test_the_committed_dflash_run_on_0340_passes_under_adaptive_verification(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h200-upstream-0.34.0-harness-dflash: DFlash on upstream 0.34.0 under vLLM's adaptive
    verification and our phase 0/2, tokens equal eager, on its variable-length graphs."""
    res = Path(__file__).resolve().parents[2] / "bench/results/h200-upstream-0.34.0-harness-dflash/res"
    assert load().main(res) == 0
    out = capsys.readouterr().out
    assert out.startswith("target: vllm") and "3/3 cases pass" in out
    assert out == (res.parent / "report.txt").read_text()


def test_a_per_request_case_must_have_masked_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """phase02own (each request verifying its own depth) proves nothing unless some decode step had a
    request below the batch's depth: none counted fails it."""
    own = case({"1": 20, "3": 5}, own_depth_steps={"3": 4})
    results = {"moe-eager": {"ok": True, "tokens": TOKENS, "lk_moe": {"_cpu_decode (decode)": 40}}, "moe-phase02own": own}
    assert load().main(write(tmp_path, results, list(results))) == 0
    own["own_depth_steps"] = {}
    assert load().main(write(tmp_path, results, list(results))) == 1
    assert "no decode step had a request verifying less than the batch (no row masked)" in capsys.readouterr().out


def resident_case(**moe_layers: Any) -> dict[str, Any]:
    """A passing dsv4 case at LVLLM_GPU_RESIDENT_MOE_LAYERS=0,1: layers 0-1 on the GPU (Marlin), 2 on lk_moe."""
    placed = {"resident": [0, 1], "lk_moe": [2], "draft_resident": [], "draft_lk_moe": [3], "marlin_calls": 8,
              "asked": "0,1", **moe_layers}
    result = case({"3": 33}, lk_moe={"_cpu_decode (capturing)": 3})
    result["replays"]["DFlashCudaGraphManager"] = {"2": 33}
    return {**result, "moe_layers": placed,
            "kernels": {"MXFP4 MoE backend": "MARLIN (MarlinExperts): the fork's select_deepseek_v4_mxfp4_moe_backend"}}


@pytest.mark.parametrize(("change", "message"), [
    ({}, None),
    ({"resident": [0]}, "resident target layers [0], asked for 0,1"),
    ({"lk_moe": []}, "no target MoE layer on lk_moe"),
    ({"marlin_calls": 0}, "the resident layers never called fused_marlin_moe"),
    ({"lk_moe": [2, 3, 4]}, "cpu_decode captured 3 times for 3 decode graphs of 3 MoE layers"),
    ({"asked": "none", "resident": [], "lk_moe": [0, 1, 2]}, "cpu_decode captured 3 times"),
])
def test_resident_dsv4_layers_are_checked_against_what_was_asked(
        change: dict[str, Any], message: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """cpu_decode is counted only for the target's lk_moe layers the case names; the resident ones must be
    those asked for, and must have run the fork's Marlin MoE."""
    results = {"dsv4-eager": {"ok": True, "tokens": TOKENS, "lk_moe": {"_cpu_decode (decode)": 40}},
               "dsv4-fixed": resident_case(**change)}
    assert load().main(write(tmp_path, results, list(results))) == (0 if message is None else 1)
    out = capsys.readouterr().out
    assert ("2/2 cases pass" in out) if message is None else (message in out)
    assert 'MoE layers: {"resident": ' in out


def test_resident_layers_on_another_backend_than_marlin_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fixed = resident_case()
    fixed["kernels"]["MXFP4 MoE backend"] = "TRITON_UNFUSED (UnfusedOAITritonExperts)"
    results = {"dsv4-eager": {"ok": True, "tokens": TOKENS}, "dsv4-fixed": fixed}
    assert load().main(write(tmp_path, results, list(results))) == 1
    assert "resident MXFP4 layers on TRITON_UNFUSED (UnfusedOAITritonExperts), not Marlin" in capsys.readouterr().out


def test_the_resident_run_masked_rows_and_ran_marlin() -> None:
    """bench/results/h200-dsv4-harness-resident: layers 0,1 on the fork's Marlin MoE, layer 2 on lk_moe,
    and the per-request case had decode steps with a request below the batch's depth."""
    res = Path(__file__).resolve().parents[2] / "bench/results/h200-dsv4-harness-resident/res"
    own = json.loads((res / "dsv4-phase02own.json").read_text())
    assert sum(own["own_depth_steps"].values()) > 0 and not own["decode_steps"]["eager"]
    assert "MARLIN" in own["kernels"]["MXFP4 MoE backend"] and "target layers [0, 1]" in own["kernels"]["resident MoE layers"]


def test_dspark_rested_after_the_depth_0_steps_of_the_committed_run() -> None:
    """bench/results/h200-dsv4-harness-rest: phase 0/2 rested DSpark whole after each of its depth-0
    steps (none of its graphs replayed after them) and kept the eager run's tokens; beside an
    answering request (verify "request") only the reasoning request's query rows rested."""
    res = Path(__file__).resolve().parents[2] / "bench/results/h200-dsv4-harness-rest/res"
    phase02 = HarnessCounters.read(json.loads((res / "dsv4-phase02.json").read_text()))
    assert phase02.drafter_rested == {"1": phase02.graph_steps["1"]} and not phase02.drafter_after.get("1")
    own = HarnessCounters.read(json.loads((res / "dsv4-phase02own.json").read_text()))
    assert own.drafter_rested_rows.get("3") and own.drafter_rested.get("1")
