"""bench/e2e_overlap.py, the overlap benchmark's report (#20), on results written here: off
against shared gives the step table and exit 0; differing tokens, a missing cell or level, an
eager decode step or an engine that ran another level fail it (exit 1), each named."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bench import e2e_overlap
from vllm_ds4x.depth import sim as depth_sim

STEP = {"off": {1: 16.0, 2: 33.0}, "shared": {1: 15.6, 2: 32.5}}


def run(level: str, mode: str = "spec") -> dict[str, Any]:
    cells = [{"round": r, "phase": phase, "requests": n, "policy": policy, "tok_s": 1000 * n / STEP[level][n],
              "tokens": [[7 + i] * 4 for i in range(n)], "steps": {depth: {"n": 9, "median_ms": STEP[level][n]}}}
             for r in range(2) for phase in ("reasoning", "answer") for n in (1, 2)
             for policy, depth in (("fixed 0", "0"), ("fixed 2", "2"))]
    return {"ok": True, "mode": mode, "overlap": level, "init_s": 60.0, "cells": cells,
            "decode_steps": {"graph": {"1": 20, "3": 20}, "eager": {}}, "lk_moe": {}, "replays": {}}


def write(resdir: Path, runs: dict[str, dict[str, Any]]) -> Path:
    for name, data in runs.items():
        (resdir / f"e2e-spec-{name}.json").write_text(json.dumps(data))
    return resdir


def test_off_against_shared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert e2e_overlap.main([str(write(tmp_path, {"off": run("off"), "shared": run("shared")}))]) == 0
    out = capsys.readouterr().out
    assert "fixed 2                 2     2     33.00     32.50      0.50     1.5%" in out
    assert "fixed 0                 1     0     16.00     15.60      0.40     2.5%" in out
    assert "tokens equal to off in every cell, graphs only: yes" in out


def mutated(change: str) -> dict[str, dict[str, Any]]:
    shared = run("shared")
    if change == "tokens":
        shared["cells"][3]["tokens"] = [[1], [2]]
    elif change == "cell":
        del shared["cells"][0]
    elif change == "eager":
        shared["decode_steps"]["eager"] = {"3": 1}
    elif change == "level":
        shared["overlap"] = "off"
    elif change == "graphs":
        shared["decode_steps"]["graph"] = {"1": 40}
    elif change == "draws":
        shared["mixed_draws"] = 2
    return {"off": run("off"), "shared": shared}


@pytest.mark.parametrize(("change", "message"), [
    ("tokens", "FAIL: spec shared: cell ('reasoning', 2, 'fixed 2', 0): greedy tokens differ from off"),
    ("cell", "FAIL: spec shared: cell ('reasoning', 1, 'fixed 0', 0) not measured"),
    ("eager", "FAIL: spec shared: eager decode steps {'3': 1}"),
    ("level", "FAIL: spec shared: the engine ran LVLLM_MOE_OVERLAP=off"),
    ("graphs", "FAIL: spec shared: graphs replayed at query lengths ['1'], off at ['1', '3']"),
    ("draws", "FAIL: spec shared: E2E_MIXED_DRAWS=2; this comparison pairs cells by round"),
])
def test_each_problem_fails_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str,
                                    message: str) -> None:
    assert e2e_overlap.main([str(write(tmp_path, mutated(change)))]) == 1
    assert message in capsys.readouterr().out.splitlines()


def test_a_run_without_off_or_with_off_alone_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert e2e_overlap.main([str(write(tmp_path, {"shared": run("shared")}))]) == 1
    assert "FAIL: spec: no run at level off to compare with" in capsys.readouterr().out
    (tmp_path / "e2e-spec-shared.json").unlink()
    assert e2e_overlap.main([str(write(tmp_path, {"off": copy.deepcopy(run("off"))}))]) == 1
    assert "FAIL: spec: only level off ran" in capsys.readouterr().out


def test_an_unfinished_engine_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shared = {**run("shared"), "ok": False, "error": "RuntimeError('capture')"}
    assert e2e_overlap.main([str(write(tmp_path, {"off": run("off"), "shared": shared}))]) == 1
    assert "FAIL: e2e-spec-shared.json: the engine did not finish: RuntimeError('capture')" in capsys.readouterr().out


def test_the_committed_h200_run_passes_its_checks(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h200-overlap-shared: the run docs/measured-on-gpu.md quotes (off against
    shared, spec engine); its table comes out of it again."""
    results = Path(e2e_overlap.__file__).parent / "results" / "h200-overlap-shared"
    assert e2e_overlap.main([str(results)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split() == ["fixed", "0", "1", "0", "19.24", "20.10", "-0.86", "-4.5%"] for line in lines)
    assert "tokens equal to off in every cell, graphs only: yes" in lines


def write_measure(resdir: Path, curve: dict[int, float]) -> None:
    """A measure.json of one layer (13 ms a 1-token step, 3 of them the rest) with this curve at LK_THREADS=12."""
    cases = [{"tokens": n, "ms": ms} for n, ms in curve.items()]
    measured = {"lk_threads": 12, "step_seconds": [0.0130], "gpu_ms": [3.0], "runs": [{"threads": 12, "cases": cases}]}
    (resdir / "measure.json").write_text(json.dumps({"measured": measured}))


def test_the_model_is_held_to_the_measured_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """measure.json beside the runs: depth_sim.step_ms on its curve and the rest measured at off,
    against each other level's measured step, split as the engine's LVLLM_MOE_UBATCH_TOKENS says.
    One layer, curve 10 / 18 ms for 1 / 2 tokens: at 2 requests and depth 0 the step splits, so
    the rest at off (33 - 18) less outside_ms runs once a micro-batch, then one 1-token CPU part."""
    write_measure(tmp_path, {1: 10.0, 2: 18.0, 3: 26.0, 6: 56.0})
    off, ubatch = run("off"), {**run("shared"), "overlap": "ubatch", "ubatch_tokens": "1"}
    assert e2e_overlap.main([str(write(tmp_path, {"off": off, "ubatch": ubatch}))]) == 0
    lines = capsys.readouterr().out.splitlines()
    outside = depth_sim.OUTSIDE_MS
    split = 2 * (33.0 - 18.0 - outside) + 10.0 + outside
    assert any(line.split() == ["ubatch", "fixed", "0", "2", "0", "32.50", f"{split:.2f}", f"{split / 32.5 - 1:+.1%}"]
               for line in lines)
    assert any(line.split() == ["ubatch", "fixed", "2", "2", "2", "32.50", "33.00", "+1.5%"] for line in lines)  # whole
    assert not any(line.startswith("off ") for line in lines)  # off's rest is derived from off itself
    assert f"model within 10%: 3 of 4 (largest error {split / 32.5 - 1:.1%})" in lines


def test_without_measure_the_model_is_said_not_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert e2e_overlap.main([str(write(tmp_path, {"off": run("off"), "shared": run("shared")}))]) == 0
    assert f"model: not checked, no readable measure.json in {tmp_path}" in capsys.readouterr().out.splitlines()


def test_the_committed_ubatch_run_passes_and_its_model_holds(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h200-overlap-ubatch: off against ubatch (LVLLM_MOE_UBATCH_TOKENS=1) with measure
    in the same run; two requests at depth 0 split and save 17%, the rest run whole."""
    results = Path(e2e_overlap.__file__).parent / "results" / "h200-overlap-ubatch"
    assert e2e_overlap.main([str(results)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split() == ["fixed", "0", "2", "0", "35.91", "29.71", "6.20", "17.3%"] for line in lines)
    assert "model within 10%: 6 of 6 (largest error 5.4%)" in lines


def test_the_model_says_what_it_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A token count measure did not time is named, not a crash; a run with problems is not modelled."""
    write_measure(tmp_path, {1: 10.0, 2: 18.0})
    ubatch = {**run("shared"), "overlap": "ubatch", "ubatch_tokens": "1"}
    assert e2e_overlap.main([str(write(tmp_path, {"off": run("off"), "ubatch": ubatch}))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:5] == ["ubatch", "fixed", "2", "2", "2"] and line.endswith("did not time 6 tokens")
               for line in lines)
    ubatch["cells"][3]["tokens"] = [[1], [2]]
    assert e2e_overlap.main([str(write(tmp_path, {"off": run("off"), "ubatch": ubatch}))]) == 1
    assert "model: not checked (the problems below)" in capsys.readouterr().out.splitlines()
