"""bench/e2e_decode.py, the GPU benchmark's report, on results written here: a
complete run gives the tables and exit 0; a missing or failed engine or cell,
greedy tokens that differ, an eager decode step or acceptance off its set figure
fail it (exit 1), each named."""

from __future__ import annotations

import copy
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from bench import e2e_decode, e2e_mixed
from ds4x.deploy import launch
from vllm_ds4x.depth import sim

LAYERS, CPU_MS = 4, {1: 2.0, 2: 3.6, 3: 5.0, 4: 6.4, 6: 9.0}  # layer ms by tokens
REST_MS = [3.0, 3.4, 3.8]  # the rest of a step by verified depth
DEPTHS = {"fixed 0": 0, "fixed 1": 1, "fixed 2": 2, "phase 1/2": 1, "phase 0/2": 0, "adaptive": 0}
SET = {"reasoning": 0.4, "answer": 0.9}


def cell(phase: str, n: int, policy: str, round_: int) -> dict[str, Any]:
    depth = 0 if policy == "no speculation" else 2 if phase == "answer" and "fixed" not in policy else DEPTHS[policy]
    step = LAYERS * CPU_MS[n * (depth + 1)] + REST_MS[depth] - (0.5 if policy == "no speculation" else 0)
    rate = SET[phase] * 2 if depth == 2 else 0
    drafted = 100 * depth
    return {"round": round_, "phase": phase, "requests": n, "policy": policy,
            "tok_s": n * 1000 / step * (1 + (rate if depth == 2 else 0)), "window_tokens": 100, "window_s": 1.0,
            "tokens": [[10 + i] * 8 for i in range(n)],
            "steps": {str(depth): {"n": 50, "median_ms": step}},
            "draft_tokens": drafted, "accepted_tokens": drafted * SET[phase]}


def engine(mode: str, policies: list[str]) -> dict[str, Any]:
    cells = [cell(phase, n, p, r) for r in range(2) for phase in ("reasoning", "answer") for n in (1, 2)
             for p in policies]
    return {"ok": True, "mode": mode, "init_s": 30.0, "tokens_per_request": 64, "async_scheduling": True,
            "acceptance_set": SET, "lk_threads": "12", "layers": LAYERS, "cells": cells,
            "decode_steps": {"graph": {"1": 10, "2": 10, "3": 10}, "eager": {}},
            "drafter_after": {"1": 10}, "lk_moe": {"_cpu_decode (capturing)": 24}}


def write(resdir: Path, nospec: dict[str, Any], spec: dict[str, Any]) -> Path:
    runs = [{"threads": 12, "cases": [{"tokens": t, "ms": ms} for t, ms in CPU_MS.items()]}]
    (resdir / "measure.json").write_text(json.dumps({"measured": {"lk_threads": 12, "runs": runs}}))
    (resdir / "e2e-nospec.json").write_text(json.dumps(nospec))
    (resdir / "e2e-spec.json").write_text(json.dumps(spec))
    return resdir


@pytest.fixture
def runs() -> tuple[dict[str, Any], dict[str, Any]]:
    return engine("nospec", ["no speculation"]), engine("spec", list(DEPTHS))


def test_a_complete_run_prints_every_table(runs: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert e2e_decode.main([str(write(tmp_path, *runs)), "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out
    for heading in ("reasoning, 2 running request(s): steady decode tok/s", "step time by verified depth",
                    "depth_sim against the engine, x2", "noise floor of this run", "x1 answer: adaptive within 3% of fixed 2"):
        assert heading in out
    # the split: fixed 2 at two requests is 4 layers x 9.0 ms of CPU experts and 3.8 ms of the rest
    assert any(line.split() == ["2", "39.8", "39.8", "39.8", "36.0", "3.8"] for line in out.splitlines())


def broken(runs: tuple[dict[str, Any], dict[str, Any]], how: str) -> tuple[dict[str, Any], dict[str, Any]]:
    nospec, spec = copy.deepcopy(runs)
    if how == "missing cell":
        spec["cells"] = [c for c in spec["cells"] if not (c["policy"] == "adaptive" and c["round"] == 1)]
    elif how == "crashed engine":
        spec.update(ok=False, error="RuntimeError('CUDA error')")
    elif how == "tokens differ":
        spec["cells"][3]["tokens"][0][-1] += 1
    elif how == "eager decode step":
        spec["decode_steps"]["eager"] = {"2": 1}
    elif how == "acceptance off":
        for c in spec["cells"]:
            c["accepted_tokens"] *= 0.5
    elif how == "no drafter graphs at depth 0":
        spec["drafter_after"] = {}
    elif how == "policy swap did not take":
        for c in spec["cells"]:
            if c["policy"] == "fixed 1":
                c["steps"] = {"2": c["steps"]["1"]}
    elif how == "no-speculation baseline ran eagerly":
        nospec["decode_steps"]["eager"] = {"1": 3}
    return nospec, spec


@pytest.mark.parametrize(("how", "message"), [
    ("missing cell", "adaptive: 1 of 2 rounds measured"),
    ("crashed engine", "e2e-spec.json: the engine did not finish: RuntimeError('CUDA error')"),
    ("tokens differ", "greedy tokens differ between cells"),
    ("eager decode step", "eager decode steps"),
    ("acceptance off", "reasoning: acceptance at depth 2 measured 0.2"),
    ("no drafter graphs at depth 0", "the drafter replayed no graph after depth-0 steps"),
    ("policy swap did not take", "reasoning x1 fixed 1 round 0: steps at depths ['2'], expected only 1"),
    ("no-speculation baseline ran eagerly", "nospec: eager decode steps"),
])
def test_the_report_fails_closed(runs: tuple[dict[str, Any], dict[str, Any]], how: str, message: str,
                                 tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert e2e_decode.main([str(write(tmp_path, *broken(runs, how))), "--seeds", "2"]) == 1
    out = capsys.readouterr().out
    assert f"FAIL: {message}" in out or any(line.startswith("FAIL: ") and message in line for line in out.splitlines())


def test_a_missing_file_fails(runs: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, *runs)
    (tmp_path / "e2e-spec.json").unlink()
    assert e2e_decode.main([str(tmp_path)]) == 1
    assert "FAIL: e2e-spec.json" in capsys.readouterr().out


def test_a_spec_only_run_reports_without_the_baseline(runs: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """--spec-only: a run of the speculative engine alone; without the flag it fails closed."""
    write(tmp_path, *runs)
    (tmp_path / "e2e-nospec.json").unlink()
    assert e2e_decode.main([str(tmp_path), "--seeds", "2"]) == 1
    assert e2e_decode.main([str(tmp_path), "--seeds", "2", "--spec-only"]) == 0
    out = capsys.readouterr().out.split("FAIL: e2e-nospec.json")[-1]
    assert "adaptive" in out and "no speculation" not in out and "FAIL" not in out


def test_the_committed_h200_runs_pass_their_checks(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results: the runs docs/measured-on-gpu.md quotes; their tables come out of them again."""
    results = Path(e2e_decode.__file__).parent / "results"
    assert e2e_decode.main([str(results / "h200-e2e"), "--seeds", "4"]) == 0
    out = capsys.readouterr().out
    assert "acceptance at depth 2 (vLLM's metrics): reasoning 0.414 (set 0.4), answer 0.898 (set 0.9)" in out
    assert any(line.startswith("phase 0/2") and "58.31 [57.55-60.68]" in line and line.endswith("1.473")
               for line in out.splitlines())
    assert e2e_decode.main([str(results / "h200-e2e-adaptive"), "--seeds", "4", "--spec-only"]) == 0
    out = capsys.readouterr().out
    assert any(line.startswith("adaptive") and "71.90 [69.35-74.45]" in line for line in out.splitlines())
    # after a warm-up round, with stale step costs forgotten and probes held to 1%: adaptive
    # answers two requests at 0.986x fixed 2 (0.842x before); misses inside the noise say so
    assert e2e_decode.main([str(results / "h200-e2e-warm"), "--seeds", "4", "--spec-only"]) == 0
    out = capsys.readouterr().out
    assert "3 rounds after 1 unrecorded" in out
    assert "MET    x2 answer: adaptive within 3% of fixed 2: 0.986" in out
    assert ("MISSED x1 reasoning: adaptive within 3% of the best fixed depth: 0.931 (by less than this run's "
            "noise floor, 7.0%)") in out
    assert "1.255 (by less than this run's noise floor, 4.6%); the best fixed depth reached 1.257" in out


def test_a_miss_beyond_the_noise_floor_is_a_plain_miss() -> None:
    assert e2e_decode.within(0.90, 0.97, 0.05) == ""
    assert e2e_decode.within(0.93, 0.97, 0.05) == " (by less than this run's noise floor, 5.0%)"
    assert e2e_decode.within(0.98, 0.97, 0.05) == ""  # met


def test_adaptive_is_simulated_as_the_engine_started_it(runs: tuple[dict[str, Any], dict[str, Any]],
                                                        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run whose adaptive started from measure's step costs (e2e.py: adaptive_step_cost) is
    predicted with the same start; the report says which start it was."""
    predicted = {}
    for start in (None, [1.0, 2.2, 2.98]):
        nospec, spec = copy.deepcopy(runs)
        spec["adaptive_step_cost"] = start
        write(tmp_path, nospec, spec)
        assert e2e_decode.main([str(tmp_path), "--seeds", "2"]) == 0
        out = capsys.readouterr().out
        said = "step_cost [1.0, 2.2, 2.98]" if start else "no step costs (it timed them itself)"
        assert f"adaptive started from {'the run' + chr(39) + 's measure profile: ' if start else ''}{said}" in out
        predicted[bool(start)] = [line.split()[3] for line in out.splitlines() if line.startswith("adaptive ")
                                  and len(line.split()) > 4 and line.split()[1] in ("reasoning", "answer")]
    assert predicted[True] != predicted[False]  # the start changes adaptive's prediction


def test_policies_give_adaptive_its_start() -> None:
    assert sim.policies(2)["adaptive"] == {"policy": "adaptive", "min_depth": 0}  # no step_cost: a flat start
    assert sim.policies(2, {"step_cost": [1.0, 2.0, 3.0]})["adaptive"] == {"policy": "adaptive", "min_depth": 0,
                                                            "step_cost": [1.0, 2.0, 3.0]}
    assert sim.policies(2, {"step_cost": [1.0, 2.0, 3.0]})["fixed 1"] == sim.policies(2)["fixed 1"]


def test_the_committed_deepseek_v4_run_fails_closed_on_its_acceptance(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h200-dsv4-e2e: DSpark's answer acceptance (0.828) is outside the slack of the
    0.9 set, so the report prints no tables; relaxed, it names the run's MXFP4 experts."""
    run = Path(e2e_decode.__file__).parent / "results/h200-dsv4-e2e"
    assert e2e_decode.main([str(run), "--seeds", "2", "--spec-only"]) == 1
    assert capsys.readouterr().out.startswith("FAIL: answer: acceptance at depth 2 measured 0.8279")


@pytest.mark.parametrize("run", ["h200-e2e-start", "h200-e2e-warm", "h200-dsv4-e2e", "h200-dsv4-e2e-omp1",
                                 "h200-dsv4-e2e-10-layers", "h200-dsv4-e2e-mixed-per-request",
                                 "h200-dsv4-e2e-resident", "h200-dsv4-e2e-rest", "h200-dsv4-e2e-rest-x2",
                                 "h200-dsv4-e2e-priors", "h200-dsv4-e2e-priors-x2", "h200-e2e-mixed-per-request",
                                 "h200-e2e-mixed-per-request-again", "h200-e2e-mixed-per-request-crn",
                                 "h200-e2e-mixed-in-batch", "h200-dsv4-e2e-mixed-in-batch", "h100-dsv4-e2e"])
def test_a_committed_report_reprints_byte_for_byte_from_its_run(run: str, capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/*/report.txt is what the machine printed (ci/fork-gpu/e2e, speculative engine
    alone, the default seeds); the report read again from the committed files gives the same bytes."""
    resdir = Path(e2e_decode.__file__).parent / "results" / run
    e2e_decode.main([str(resdir), "--spec-only"])
    assert capsys.readouterr().out == (resdir / "report.txt").read_text()


def median_step_ms(run: str, requests: int, depth: str) -> float:
    """The median over a committed run's fixed-depth cells of their median step at `depth`."""
    cells = json.loads((Path(e2e_decode.__file__).parent / "results" / run / "e2e-spec.json").read_text())["cells"]
    return float(statistics.median(c["steps"][depth]["median_ms"] for c in cells
                                   if c["policy"] == f"fixed {depth}" and c["requests"] == requests))


def test_the_deepseek_v4_runs_pass_and_torch_threads_were_what_slowed_two_requests() -> None:
    """The second and third DeepSeek-V4 runs pass the report; with torch's CPU threads at 1 the
    two-request step at depth 0 fell from ~92 ms to ~23 (the first run against the second)."""
    for run in ("h200-dsv4-e2e-omp1", "h200-dsv4-e2e-10-layers", "h200-dsv4-e2e-mixed-per-request"):
        assert e2e_decode.main([str(Path(e2e_decode.__file__).parent / "results" / run), "--spec-only"]) == 0
    before, after = median_step_ms("h200-dsv4-e2e", 2, "0"), median_step_ms("h200-dsv4-e2e-omp1", 2, "0")
    assert before > 3 * after
    assert f"step {before:.1f} ms against {after:.1f} at 1 thread" in launch.OMP_MEASURED  # --check-launch cites them


def test_the_resident_run_passes_with_the_users_layers_on_the_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h200-dsv4-e2e-resident: the user's LVLLM_GPU_RESIDENT_MOE_LAYERS=0,1 end to end, the
    report passing with 8 of the 10 target layers on lk_moe, and a depth-0 step cheaper than a depth-2 one
    by less than every layer on lk_moe made it (the CPU share a shallower depth saves is smaller)."""
    assert e2e_decode.main([str(Path(e2e_decode.__file__).parent / "results/h200-dsv4-e2e-resident"), "--spec-only"]) == 0
    assert capsys.readouterr().out.startswith("stand-in: 8 MoE layers on lk_moe (GPU-resident: [0, 1])")
    ratio = {run: median_step_ms(run, 1, "2") / median_step_ms(run, 1, "0")
             for run in ("h200-dsv4-e2e-resident", "h200-dsv4-e2e-10-layers")}
    assert ratio["h200-dsv4-e2e-resident"] < ratio["h200-dsv4-e2e-10-layers"]


def test_dspark_resting_at_depth_0_cut_the_depth_0_step_and_kept_the_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h200-dsv4-e2e-rest, the resident run's command once DSpark rests while its drafts
    will not be verified: the report passes (tokens equal in every cell, 0 eager decode steps), DSpark
    rested after every depth-0 step at one request but those where a request was due to decide or its
    phase changed, the depth-0 step fell by more than a fifth against the resident run before it, and
    the reasoning targets of #33 read as met (phase 0/2 at least 1.3x fixed 2)."""
    run = Path(e2e_decode.__file__).parent / "results/h200-dsv4-e2e-rest"
    assert e2e_decode.main([str(run), "--spec-only"]) == 0
    out = capsys.readouterr().out
    assert "MET    x1 reasoning: best of phase 0/2 and adaptive >= 1.3x fixed 2" in out
    spec = json.loads((run / "e2e-spec.json").read_text())
    rested, depth_0 = spec["drafter_rested"].get("1", 0), spec["decode_steps"]["graph"]["1"]
    assert rested >= 0.9 * depth_0 and not spec["drafter_rested_rows"]  # one request: it rests whole
    assert median_step_ms("h200-dsv4-e2e-rest", 1, "0") < 0.8 * median_step_ms("h200-dsv4-e2e-resident", 1, "0")


def test_two_requests_with_dspark_resting_pass_and_rest_its_rows_in_mixed_batches(
        capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h200-dsv4-e2e-rest-x2: two requests, the mixed cells and their per-request twins,
    DSpark resting: the report passes with every simulator prediction within 10%; DSpark rested whole
    after depth-0 steps and, in mixed batches where each request verifies its own depth, rested only
    the reasoning request's query rows; the greedy tokens of every mixed cell are one."""
    run = Path(e2e_decode.__file__).parent / "results/h200-dsv4-e2e-rest-x2"
    assert e2e_decode.main([str(run), "--spec-only"]) == 0
    out = capsys.readouterr().out
    assert "MET    x2 reasoning: best of phase 0/2 and adaptive >= 1.3x fixed 2" in out
    assert "simulator within 10% and the same best policy (within the noise floor): yes" in out
    spec = json.loads((run / "e2e-spec.json").read_text())
    assert spec["drafter_rested"].get("1") and spec["drafter_rested_rows"].get("3")
    mixed = [c for c in spec["cells"] if c["phase"] == "mixed"]
    assert len({json.dumps(c["tokens"]) for c in mixed}) == 1


def test_per_request_verify_depths_cut_the_mixed_step_and_keep_the_tokens() -> None:
    """bench/results/h200-dsv4-e2e-mixed-per-request: in the mixed cells each request verifying its
    own depth gave the same greedy tokens as every other policy, and the depth-2 step of phase 0/2
    (0 + 2 drafts verified, the reasoning request's rows masked) cost what 4 tokens' experts cost,
    not 6: at least a fifth less than today's 2 + 2, in each round."""
    cells = json.loads((Path(e2e_decode.__file__).parent / "results/h200-dsv4-e2e-mixed-per-request/e2e-spec.json")
                       .read_text())["cells"]
    mixed = [c for c in cells if c["phase"] == "mixed"]
    assert len({json.dumps(c["tokens"]) for c in mixed}) == 1
    for round_ in (0, 1):
        step = {c["policy"]: c["steps"]["2"]["median_ms"] for c in mixed if c["round"] == round_ and "2" in c["steps"]}
        assert step["phase 0/2 per request"] < 0.8 * step["phase 0/2"]
        assert step["phase 1/2 per request"] < step["phase 1/2"]


def with_uniform_twins(runs: tuple[dict[str, Any], dict[str, Any]], slower: float = 1.0
                       ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run with phase 0/2's per-request twin in the phase-pure cells of two requests, `slower`
    times the batch twin's step (its requests agree there: the same depth, the same tokens); and a
    noise floor of 3% (fixed 0 reasoning, which verifies what phase 0/2 does there, 3% faster)."""
    nospec, spec = copy.deepcopy(runs)
    for c in spec["cells"]:
        if c["policy"] == "fixed 0" and c["phase"] == "reasoning" and c["requests"] == 2:
            c["tok_s"] *= 1.03
        c["tok_s"] *= 1 + 0.3 * c["round"]  # a faster round, every policy: only pairs by round give one ratio
    spec["uniform_per_request"] = {"requests": [2], "policies": ["phase 0/2 per request"]}
    for c in [c for c in spec["cells"] if c["policy"] == "phase 0/2" and c["requests"] == 2]:
        spec["cells"].append({**copy.deepcopy(c), "policy": "phase 0/2 per request", "tok_s": c["tok_s"] / slower})
    return nospec, spec


@pytest.mark.parametrize(("slower", "verdict"), [(1.0, "MET   "), (1.02, "MET   "), (1.3, "MISSED")])
def test_per_request_verify_in_uniform_batches_is_held_to_no_slower(
        runs: tuple[dict[str, Any], dict[str, Any]], slower: float, verdict: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """#38: per-request verify, where a batch's requests agree, no slower than today within the noise
    floor (a difference inside it is a tie); the twins are paired with their batch twins by round."""
    assert e2e_decode.main([str(write(tmp_path, *with_uniform_twins(runs, slower))), "--seeds", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    ratio = f"{1 / slower:.3f}"
    for phase in ("reasoning", "answer"):
        line = next(x for x in lines if x.startswith(f"{verdict} x2 {phase}: phase 0/2 per request no slower"))
        assert "within the noise floor (3.0%)" in line
        assert line.endswith(f": {ratio} [{ratio}-{ratio}]")


def test_a_planned_uniform_twin_that_did_not_run_fails(runs: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    nospec, spec = with_uniform_twins(runs)
    spec["cells"] = [c for c in spec["cells"] if not (c["policy"].endswith("per request") and c["phase"] == "answer")]
    assert e2e_decode.main([str(write(tmp_path, nospec, spec)), "--seeds", "2"]) == 1
    assert "FAIL: answer x2 phase 0/2 per request: 0 of 2 rounds measured" in capsys.readouterr().out


def test_a_uniform_twin_in_one_round_twice_or_with_other_tokens_fails(
        runs: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nospec, spec = with_uniform_twins(runs)
    twin = [c for c in spec["cells"] if c["policy"].endswith("per request") and c["phase"] == "answer"]
    twin[1]["round"] = twin[0]["round"]
    assert e2e_decode.main([str(write(tmp_path, nospec, spec)), "--seeds", "2"]) == 1
    assert "FAIL: answer x2 phase 0/2 per request: 1 of 2 rounds measured" in capsys.readouterr().out
    nospec, spec = with_uniform_twins(runs)
    next(c for c in spec["cells"] if c["policy"].endswith("per request"))["tokens"][0][-1] += 1
    assert e2e_decode.main([str(write(tmp_path, nospec, spec)), "--seeds", "2"]) == 1
    assert "greedy tokens differ between cells" in capsys.readouterr().out


def test_adaptive_s_priors_by_phase_tie_fixed_2_while_answering(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h200-dsv4-e2e-priors: the resident run's command once adaptive starts each phase
    from measure's acceptance (0.515 / 0.925 a position): it passes, the answer targets of #33 read met
    for both phase 0/2 and adaptive (0.860x fixed 2 with one prior of 0.7, h200-dsv4-e2e-rest), the
    reasoning one too, and every simulator prediction is within 10%."""
    run = Path(e2e_decode.__file__).parent / "results/h200-dsv4-e2e-priors"
    assert e2e_decode.main([str(run), "--spec-only"]) == 0
    out = capsys.readouterr().out
    for target in ("x1 reasoning: best of phase 0/2 and adaptive >= 1.3x fixed 2", "x1 answer: phase 0/2 within 3%",
                   "x1 answer: adaptive within 3% of fixed 2"):
        assert f"MET    {target}" in out
    assert "simulator within 10% and the same best policy (within the noise floor): yes" in out
    assert json.loads((run / "e2e-spec.json").read_text())["adaptive_prior_acceptance"] == {
        "reasoning": 0.515, "answer": 0.925}


def test_two_requests_run_per_request_twins_in_uniform_batches_too(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h200-dsv4-e2e-priors-x2: every per-request twin ran in the phase-pure cells of two
    requests as well as the mixed ones, with the same greedy tokens; the report passes and holds each
    uniform twin to no slower than today within the floor (five of six met; phase 0/2's answering twin
    missed, 0.940x, where it does what phase 1/2's does, and that one ran 1.038x)."""
    run = Path(e2e_decode.__file__).parent / "results/h200-dsv4-e2e-priors-x2"
    assert e2e_decode.main([str(run), "--spec-only"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if " per request no slower than " in x]
    assert len(lines) == 6 and sum(x.startswith("MET") for x in lines) == 5
    assert any(x.startswith("MISSED x2 answer: phase 0/2 per request") for x in lines)
    cells = json.loads((run / "e2e-spec.json").read_text())["cells"]
    for phase in ("reasoning", "answer", "mixed"):
        ran = [c for c in cells if c["phase"] == phase]
        assert {c["policy"] for c in ran} >= {"phase 0/2 per request", "adaptive per request"}
        assert len({json.dumps(c["tokens"]) for c in ran}) == 1


@pytest.mark.parametrize("run", ["h200-e2e-mixed-per-request", "h200-e2e-mixed-per-request-again",
                                 "h200-e2e-mixed-per-request-crn"])
def test_the_eagle_stand_in_runs_per_request_twins_losslessly(run: str, capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h200-e2e-mixed-per-request(-again): the Qwen2-MoE stand-in with EAGLE, two requests,
    each twin beside today's policies: the report passes (tokens equal in every phase and mixed cell,
    graphs only), the six uniform twins are within the floor, and both mixed targets are printed."""
    resdir = Path(e2e_decode.__file__).parent / "results" / run
    assert e2e_decode.main([str(resdir), "--spec-only"]) == 0
    out = capsys.readouterr().out
    assert sum(x.startswith("MET") and " per request no slower than " in x for x in out.splitlines()) == 6
    assert sum(" per request >= 1.15x " in x for x in out.splitlines()) == 2
    spec = json.loads((resdir / "e2e-spec.json").read_text())
    assert spec["decode_steps"]["eager"] == {} and spec["own_depth_steps"]  # steps with masked rows ran


def test_common_draws_give_the_policies_of_a_round_the_same_acceptance() -> None:
    """bench/results/h200-e2e-mixed-per-request-crn (drafts keyed by position): in each round the mixed
    cells that verify 2 + 2 made the same tokens a request in the same steps, and the per-request twin's
    answering request (depth 2 as theirs) the same; the run before, one seeded stream, did not."""
    def windows(run: str, policies: tuple[str, ...]) -> dict[int, set[str]]:
        cells = json.loads((Path(e2e_decode.__file__).parent / "results" / run / "e2e-spec.json").read_text())["cells"]
        out: dict[int, set[str]] = {}
        for c in cells:
            if c["phase"] == "mixed" and c["policy"] in policies:
                steps = sum(s["n"] for s in c["steps"].values())
                out.setdefault(c["round"], set()).add(json.dumps([c["window_tokens_by_request"][1], steps]))
        return out

    same_work = ("fixed 2", "phase 1/2", "phase 0/2", "phase 0/2 per request")
    assert all(len(v) == 1 for v in windows("h200-e2e-mixed-per-request-crn", same_work).values())
    assert any(len(v) > 1 for v in windows("h200-e2e-mixed-per-request", same_work).values())


def test_adaptive_priced_in_its_batch_still_verified_depth_1_on_the_gpu() -> None:
    """bench/results/*-mixed-in-batch (adaptive priced in its batch, probes priced in their step): per
    request it ran a request at depth 1 where phase 0/2's twin verifies 0 + 2. The stand-in's mixed
    cells verified 0 + 1 and 1 + 1 only, its two answering requests 1 + 1 in every step after the
    first round; on DeepSeek-V4 the first mixed cell ran 1 + 2, the second 0 + 2 in 24 of 26 steps,
    and one of two answering requests sat at 1 (1 + 2) in every step of both rounds."""
    def steps(run: str, phase: str, policy: str = "adaptive per request") -> list[dict[str, int]]:
        cells = json.loads((Path(e2e_decode.__file__).parent / "results" / run / "e2e-spec.json").read_text())["cells"]
        return [c["steps_by_request_depths"] for c in sorted(cells, key=lambda c: c["round"])
                if c["policy"] == policy and c["phase"] == phase]

    stand_in, dsv4 = "h200-e2e-mixed-in-batch", "h200-dsv4-e2e-mixed-in-batch"
    assert [set(cell) for cell in steps(stand_in, "mixed", "phase 0/2 per request")] == [{"0+2"}] * 3
    assert len(steps(stand_in, "mixed")) == 3 and all(set(cell) <= {"0+1", "1+1"} for cell in steps(stand_in, "mixed"))
    assert [set(cell) for cell in steps(stand_in, "answer")[1:]] == [{"1+1"}, {"1+1"}]
    assert [set(cell) for cell in steps(dsv4, "mixed", "phase 0/2 per request")] == [{"0+2"}] * 2
    assert steps(dsv4, "mixed") == [{"1+2": 26}, {"0+2": 24, "1+2": 2}]
    assert [set(cell) for cell in steps(dsv4, "answer")] == [{"1+2"}, {"1+2"}]


def test_the_h100_deepseek_v4_run_holds_what_its_readme_says(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h100-dsv4-e2e: every policy and twin, the report passing (lossless, graphs only) and
    both mixed targets MISSED; the rounds' pair ratios apart, by the reasoning request's draws (48 tokens
    in round 0's 20-step window, 38 in round 1's) and more by the same shapes' step times; 0 + 2 steps
    0.79 of 2 + 2, near 1 + 1."""
    resdir = Path(e2e_decode.__file__).parent / "results/h100-dsv4-e2e"
    assert e2e_decode.main([str(resdir), "--spec-only", "--seeds", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sum(x.startswith("MISSED mixed x2: ") for x in out) == 2
    run = json.loads((resdir / "e2e-spec.json").read_text())
    assert run["decode_steps"]["eager"] == {} and sum(run["own_depth_steps"].values()) == 172
    cells = e2e_mixed.mixed_cells([run])
    drew = {c["round"]: c["window_tokens_by_request"][0] for c in cells[2, "fixed 2"]}
    assert drew == {0: 48, 1: 38}
    for policy in ("phase 0/2", "adaptive"):
        ratios = {c["round"]: c["tok_s"] / b["tok_s"]
                  for c, b in e2e_mixed.same_round(cells[2, policy + " per request"], cells[2, policy])}
        assert ratios[0] < 0.85 < 1.1 < ratios[1]
    # a pair's ratio is its tokens' over its windows': both moved, the windows (step times) more
    pairs = e2e_mixed.same_round(cells[2, "phase 0/2 per request"], cells[2, "phase 0/2"])
    assert [round(c["window_tokens"] / b["window_tokens"], 3) for c, b in pairs] == [0.766, 0.842]
    assert [round(c["window_s"] / b["window_s"], 3) for c, b in pairs] == [0.914, 0.701]
    assert [(round(c["steps"]["2"]["median_ms"], 1), round(b["steps"]["2"]["median_ms"], 1)) for c, b in pairs] == [
        (80.1, 89.8), (67.0, 97.0)]
    per_request = e2e_mixed.step_ms(cells, 2, "phase 0/2 per request", "2")
    assert 0.78 < per_request / e2e_mixed.step_ms(cells, 2, "phase 0/2", "2") < 0.8  # its 2 + 2 twin
    assert 1 < per_request / e2e_mixed.step_ms(cells, 2, "fixed 1", "1") < 1.06  # 4 tokens either way


def test_the_cut_short_h100_run_fails_closed_and_holds_what_its_readme_says(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h100-e2e-cut-short: the engine out of time in round 2, the report FAILs as the machine
    printed it; its first two rounds lossless, graphs only, and their mixed pairs' ratios as the README says."""
    resdir = Path(e2e_decode.__file__).parent / "results/h100-e2e-cut-short"
    assert e2e_decode.main([str(resdir), "--spec-only"]) == 1
    out = capsys.readouterr().out
    assert out == (resdir / "report.txt").read_text() and "FAIL: e2e-spec.json: the engine did not finish" in out
    run = json.loads((resdir / "e2e-spec.json").read_text())
    assert run["decode_steps"]["eager"] == {}
    for round_ in (0, 1):
        for phase in ("reasoning", "answer", "mixed"):
            ran = [c for c in run["cells"] if (c["round"], c["phase"]) == (round_, phase)]
            assert len(ran) == 9 and len({json.dumps(c["tokens"]) for c in ran}) == 1
    cells = e2e_mixed.mixed_cells([run])
    ratios = {p: [round(r, 3) for r in e2e_mixed.paired(cells, 2, p + " per request", p)] for p in ("phase 0/2", "adaptive")}
    assert ratios == {"phase 0/2": [1.068, 1.091], "adaptive": [1.114, 1.05]}
