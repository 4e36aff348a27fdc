"""bench/e2e_mixed.py through bench/e2e_decode.py: a run whose engines planned mixed batches (one
reasoning and one answering request) prints their tok/s over the batch and per phase, their step by
verified depth and depth_mixed's prediction against them; a missing, crashed or unmeasured mixed
cell, tokens that differ and a policy at another depth than the deepest chosen fail it, each named."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bench import e2e_decisions, e2e_decode, e2e_mixed, mixed_pairs
from tests.unit.test_e2e_report import CPU_MS, LAYERS, REST_MS, SET, engine, write
from vllm_ds4x.depth import mixed as depth_mixed
from vllm_ds4x.depth.named_policies import PER_REQUEST, named_policies

K = 2
TODAY = {"no speculation": 0, "fixed 0": 0, "fixed 1": 1, "fixed 2": 2, "phase 1/2": 2, "phase 0/2": 2, "adaptive": 2}
STEPS = 40  # decode steps in a mixed cell's window


def mixed_cell(policy: str, round_: int, slower: float = 1.0) -> dict[str, Any]:
    """A mixed cell of 2 that verified what today's fork verifies, each request making its
    phase's expected tokens a step (`slower`: the step that much longer than the model's)."""
    depth = TODAY[policy]
    step = LAYERS * CPU_MS[2 * (depth + 1)] + REST_MS[depth]
    made = [STEPS * depth_mixed.tokens_by_depth(SET[phase], K)[depth] for phase in depth_mixed.mix(2)]
    window_s = STEPS * step * slower / 1000
    return {"round": round_, "phase": "mixed", "requests": 2, "policy": policy, "mix": ["reasoning", "answer"],
            "tok_s": sum(made) / window_s, "window_tokens": sum(made), "window_tokens_by_request": made,
            "window_s": window_s, "tokens": [[11] * 8, [12] * 8],
            "steps": {str(depth): {"n": STEPS, "median_ms": step * slower}}, "draft_tokens": 0, "accepted_tokens": 0}


def runs_with_mixed() -> tuple[dict[str, Any], dict[str, Any]]:
    nospec, spec = engine("nospec", ["no speculation"]), engine("spec", list(TODAY)[1:])
    for run in (nospec, spec):
        policies = sorted({c["policy"] for c in run["cells"]})
        run["mixed"] = [2]
        run["cells"] += [mixed_cell(p, r) for r in range(2) for p in policies]
    return nospec, spec


def report(tmp_path: Path, runs: tuple[dict[str, Any], dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    done = e2e_decode.main([str(write(tmp_path, *runs)), "--seeds", "2"])
    return done, capsys.readouterr().out


def row(out: str, start: str, heading: str) -> list[str]:
    section = out.split(heading, 1)[1]
    return next(line for line in section.splitlines() if line.startswith(start)).split()


def test_a_run_with_mixed_batches_prints_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    done, out = report(tmp_path, runs_with_mixed(), capsys)
    assert done == 0 and "FAIL" not in out
    heading = "mixed, 2 running requests (reasoning + answer): steady decode tok/s over the batch, and per phase"
    cell = mixed_cell("phase 0/2", 0)
    got = row(out, "phase 0/2", heading)
    assert got[2] == f"{cell['tok_s']:.2f}" and got[4] == "1.000"  # verifies 2 + 2 today: as fixed 2
    assert got[5:7] == [f"{e2e_mixed.phase_rate(cell, p):.2f}" for p in ("reasoning", "answer")]
    assert got[-2:] == ["2:", f"{LAYERS * CPU_MS[6] + REST_MS[2]:.1f}"]
    assert row(out, "no speculation", heading)[-2:] == ["0:", f"{LAYERS * CPU_MS[2] + REST_MS[0]:.1f}"]
    # fed the mixed cells' own steps, the batch-uniform prediction is the measurement; per request
    # phase 0/2 verifies 0 + 2: 4 tokens a layer call instead of 6, the rest at depth 2 as measured
    predicted = row(out, "phase 0/2", "depth_mixed against the engine, mixed x2")
    assert predicted[2:5] == [f"{cell['tok_s']:.2f}", f"{cell['tok_s']:.2f}", "+0.0%"]
    gains = {p: depth_mixed.tokens_by_depth(a, K) for p, a in SET.items()}
    own = (gains["reasoning"][0] + gains["answer"][2]) / ((LAYERS * CPU_MS[4] + REST_MS[2]) / 1000)
    assert predicted[5:] == [f"{own:.2f}", "0+2", f"{own / cell['tok_s']:.3f}"]
    assert "(5 tokens interpolated)" in out
    assert not [line for line in out.splitlines() if line.startswith("  mixed x2")]  # no miss


def test_a_prediction_off_by_more_than_the_slack_is_a_miss(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nospec, spec = runs_with_mixed()
    for i, cell in enumerate(spec["cells"]):
        if cell["phase"] == "mixed" and cell["policy"] == "phase 0/2":
            spec["cells"][i] = {**mixed_cell("phase 0/2", cell["round"], slower=1.25),
                                "steps": cell["steps"]}  # the step as fixed 2's, the rate 20% lower
    done, out = report(tmp_path, (nospec, spec), capsys)
    assert done == 0  # a miss is reported, not failed: it is the measurement
    assert "  mixed x2 phase 0/2: predicted" in out and "(+25.0%)" in out
    assert "simulator within 10% and the same best policy (within the noise floor): no" in out


def broken(how: str) -> tuple[dict[str, Any], dict[str, Any]]:
    nospec, spec = copy.deepcopy(runs_with_mixed())
    mixed = [c for c in spec["cells"] if c["phase"] == "mixed"]
    first = {c["policy"]: c for c in reversed(mixed)}  # each policy's round-0 cell
    if how == "missing":
        spec["cells"].remove(next(c for c in mixed if c["policy"] == "adaptive" and c["round"] == 1))
    elif how == "crashed":
        first["fixed 0"]["tok_s"] = None
    elif how == "no phase split":
        del first["fixed 1"]["window_tokens_by_request"]
    elif how == "tokens":
        first["fixed 2"]["tokens"][1][-1] += 1
    elif how == "depth":
        for c in mixed:
            if c["policy"] == "phase 0/2":
                c["steps"] = {"0": c["steps"]["2"]}
    elif how == "none measured":
        spec["cells"] = [c for c in spec["cells"] if c["phase"] != "mixed"]
    elif how == "baseline missing":
        nospec["cells"] = [c for c in nospec["cells"] if c["phase"] != "mixed"]
    return nospec, spec


@pytest.mark.parametrize(("how", "message"), [
    ("missing", "mixed x2 adaptive: 1 of 2 rounds measured"),
    ("crashed", "mixed x2 fixed 0: 1 of 2 rounds measured"),
    ("no phase split", "mixed x2 fixed 1: 1 of 2 rounds measured"),
    ("tokens", "mixed x2: greedy tokens differ between cells (2 variants)"),
    ("depth", "mixed x2 phase 0/2 round 0: steps at depths ['0'], expected only 2 (the deepest its requests chose)"),
    ("none measured", "mixed x2 phase 1/2: 0 of 2 rounds measured"),
    ("baseline missing", "mixed x2 no speculation: 0 of 2 rounds measured"),
])
def test_mixed_cells_fail_closed(how: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    done, out = report(tmp_path, broken(how), capsys)
    assert done == 1
    assert f"FAIL: {message}" in out.splitlines()
    assert "mixed, 2 running requests" not in out  # no tables from a failed run


def test_a_run_that_planned_no_mixed_batch_prints_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """E2E_MIXED=0: the engines record "mixed": [] and run none; older runs have no record at all."""
    nospec, spec = broken("none measured")
    nospec["cells"] = [c for c in nospec["cells"] if c["phase"] != "mixed"]
    records: list[list[int] | None] = [[], None]
    for record in records:
        for run in (nospec, spec):
            run.pop("mixed", None)
            if record is not None:
                run["mixed"] = record
        done, out = report(tmp_path, (nospec, spec), capsys)
        assert done == 0 and "mixed" not in out


@pytest.mark.parametrize(("policy", "depth"), [("no speculation", "0"), ("fixed 1", "1"), ("phase 1/2", "2"),
                                               ("phase 0/2", "2"), ("adaptive", None)])
def test_a_mixed_batch_verifies_the_deepest_choice_today(policy: str, depth: str | None) -> None:
    assert e2e_mixed.expected_depth(policy, K) == depth


def per_request_cell(round_: int) -> dict[str, Any]:
    """phase 0/2's per-request twin as the model prices it: the batch's depth-2 graph, the reasoning
    request verifying 0 drafts (its rows masked: 4 tokens a layer call, not 6), the answer 2."""
    step = LAYERS * CPU_MS[4] + REST_MS[2]
    made = [STEPS * depth_mixed.tokens_by_depth(SET[phase], K)[depth] for phase, depth in (("reasoning", 0),
                                                                                          ("answer", 2))]
    window_s = STEPS * step / 1000
    return {**mixed_cell("phase 0/2", round_), "policy": "phase 0/2 per request", "tok_s": sum(made) / window_s,
            "window_tokens": sum(made), "window_tokens_by_request": made, "window_s": window_s,
            "steps": {"2": {"n": STEPS, "median_ms": step}}}


def runs_with_twins() -> tuple[dict[str, Any], dict[str, Any]]:
    nospec, spec = runs_with_mixed()
    spec["mixed_per_request"] = ["phase 0/2 per request"]
    spec["cells"] += [per_request_cell(r) for r in range(2)]
    return nospec, spec


def test_a_per_request_twin_is_held_to_its_prediction_and_paired_with_its_batch_twin(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    done, out = report(tmp_path, runs_with_twins(), capsys)
    assert done == 0 and "FAIL" not in out
    twin, base = per_request_cell(0), mixed_cell("phase 0/2", 0)
    heading = "mixed, 2 running requests (reasoning + answer): steady decode tok/s over the batch, and per phase"
    got = row(out, "phase 0/2 per request", heading)
    assert [got[4], got[6]] == [f"{twin['tok_s']:.2f}", f"{twin['tok_s'] / base['tok_s']:.3f}"]  # fixed 2 = 2 + 2
    measured = row(out, "phase 0/2 per request", "depth_mixed against the engine, mixed x2")
    assert measured[4:7] == [f"{twin['tok_s']:.2f}", f"{twin['tok_s']:.2f}", "+0.0%"]  # the model's price of what ran
    gains = row(out, "phase 0/2 per request", "each request verifying its own depth against the batch's")
    ratio = twin["tok_s"] / base["tok_s"]
    assert gains[4:10] == ["vs", "phase", "0/2:", "batch", f"{ratio:.3f}", f"[{ratio:.3f}-{ratio:.3f}],"]
    assert ratio > 1.1  # the model's gain on this curve


def test_the_steps_each_request_verified_print_where_the_cells_counted_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run whose cells counted steps by the depth each request verified gets them printed over the
    rounds, the most first; a run from before prints no such section."""
    heading = "steps by the depth each request verified, mixed x2 (all rounds)"
    runs = runs_with_twins()
    assert heading not in report(tmp_path, runs, capsys)[1]
    for cell in runs[1]["cells"]:
        if cell.get("policy") == "phase 0/2 per request":
            cell["steps_by_request_depths"] = {"0+2": 9, "2+2": 1} if cell["round"] else {"0+2": 10}
    out = report(tmp_path, runs, capsys)[1].splitlines()
    assert out[out.index(heading) + 1] == "phase 0/2 per request: 0+2 95%, 2+2 5%"
    assert out[out.index(heading) + 2] == ""  # no other policy counted them


def test_a_planned_per_request_twin_that_did_not_run_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nospec, spec = runs_with_twins()
    spec["cells"] = [c for c in spec["cells"] if not (c["policy"] == "phase 0/2 per request" and c["round"] == 1)]
    done, out = report(tmp_path, (nospec, spec), capsys)
    assert done == 1 and "FAIL: mixed x2 phase 0/2 per request: 1 of 2 rounds measured" in out.splitlines()


def test_a_per_request_twin_verifies_its_batch_twin_s_graph_depth() -> None:
    assert e2e_mixed.expected_depth("phase 0/2 per request", K) == "2"
    assert e2e_mixed.expected_depth("adaptive per request", K) is None


def target_line(out: str, policy: str) -> str:
    return next(line for line in out.splitlines() if f"{policy} per request >= {e2e_mixed.MIXED_TARGET}x" in line)


def scaled(runs: tuple[dict[str, Any], dict[str, Any]], policy: str, factor: float) -> None:
    """A policy's mixed cells measured `factor` times as fast, every round."""
    for cell in runs[1]["cells"]:
        if cell["phase"] == "mixed" and cell["policy"] == policy:
            cell["tok_s"] *= factor


def test_the_mixed_target_is_missed_beside_the_cells_floor_and_the_curve_s_bound(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = runs_with_twins()
    scaled(runs, "phase 1/2", 1 / 1.04)  # today's depth 2 for both, as fixed 2 and phase 0/2
    done, out = report(tmp_path, runs, capsys)
    assert done == 0 and "FAIL" not in out
    assert ("noise floor of these cells (the largest difference in a round between policies whose batch verifies the "
            "same depth today): 4.0%") in out
    ratio = per_request_cell(0)["tok_s"] / mixed_cell("phase 0/2", 0)["tok_s"]
    assert ratio < e2e_mixed.MIXED_TARGET
    bound = e2e_mixed.curve_bound(2, K, {p: e2e_decode.acceptance(e2e_decode.Results(tmp_path).cells, p) or 0.0
                                         for p in ("reasoning", "answer")}, CPU_MS, LAYERS, "phase 0/2")
    assert bound is not None and bound > ratio  # the rest of a step, paid at depth 2 either way, dilutes the gain
    assert target_line(out, "phase 0/2") == (f"MISSED mixed x2: phase 0/2 per request >= 1.15x phase 0/2: {ratio:.3f} "
                                             "(by less than these cells' noise floor, 4.0%); "
                                             f"on the curve alone, the rest of a step free: {bound:.3f}")
    assert "adaptive per request >=" not in out  # its twin did not run


def test_a_twin_at_the_target_is_met(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = runs_with_twins()
    ratio = per_request_cell(0)["tok_s"] / mixed_cell("phase 0/2", 0)["tok_s"]
    scaled(runs, "phase 0/2 per request", 1.2 / ratio)
    done, out = report(tmp_path, runs, capsys)
    assert done == 0 and target_line(out, "phase 0/2").startswith("MET    mixed x2: phase 0/2 per request >= 1.15x "
                                                                  "phase 0/2: 1.200; on the curve alone, the rest of a step free: ")


def test_a_meet_by_less_than_the_cells_floor_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = runs_with_twins()
    ratio = per_request_cell(0)["tok_s"] / mixed_cell("phase 0/2", 0)["tok_s"]
    scaled(runs, "phase 0/2 per request", 1.16 / ratio)
    scaled(runs, "fixed 2", 1.02)  # these cells cannot tell 2% apart
    done, out = report(tmp_path, (runs[0], runs[1]), capsys)
    assert done == 0 and target_line(out, "phase 0/2").startswith(
        "MET    mixed x2: phase 0/2 per request >= 1.15x phase 0/2: 1.160 (by less than these cells' noise floor, 2.0%)")


def test_a_mixed_miss_by_less_than_the_cells_floor_says_so(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    runs = runs_with_twins()
    ratio = per_request_cell(0)["tok_s"] / mixed_cell("phase 0/2", 0)["tok_s"]
    scaled(runs, "phase 0/2 per request", 0.99 * e2e_mixed.MIXED_TARGET / ratio)  # 0.99 of the target
    scaled(runs, "fixed 2", 1.02)  # 2% above the phase policies, which verify what it does
    done, out = report(tmp_path, runs, capsys)
    assert done == 0
    assert target_line(out, "phase 0/2").startswith(
        "MISSED mixed x2: phase 0/2 per request >= 1.15x phase 0/2: 1.138 (by less than these cells' noise floor, 2.0%)")


def test_the_mixed_floor_is_the_largest_difference_in_a_round_and_needs_two_policies_at_one_depth() -> None:
    nospec, spec = runs_with_twins()
    cells = e2e_mixed.mixed_cells([nospec, spec])
    for cell in cells[2, "phase 1/2"]:  # 5% slower in round 0 only: the median of the rounds would hide half
        cell["tok_s"] /= 1.05 if cell["round"] == 0 else 1.0
    assert e2e_mixed.noise_floor(cells, 2, K) == pytest.approx(0.05)  # phase 0/2 over phase 1/2 in round 0
    alone = {key: v for key, v in cells.items() if key[1] not in ("phase 1/2", "phase 0/2")}
    assert e2e_mixed.noise_floor(alone, 2, K) is None  # fixed 2 verifies depth 2 alone


def test_the_curve_bound_is_the_gain_with_the_rest_of_a_step_free() -> None:
    bound = e2e_mixed.curve_bound(2, K, SET, CPU_MS, LAYERS, "phase 0/2")
    free = depth_mixed.compare(named_policies(K)["phase 0/2"].draft_depth, depth_mixed.mix(2), SET, K,
                               [LAYERS * CPU_MS[2 * (d + 1)] / 1000 for d in range(K + 1)],
                               depth_mixed.curve_cost(CPU_MS, LAYERS, [0.0], K))
    assert free.uniform.depths == (2, 2) and free.per_request.depths == (0, 2)
    assert bound == free.gain == pytest.approx(
        (1 + depth_mixed.tokens_by_depth(SET["answer"], K)[2]) / sum(depth_mixed.tokens_by_depth(SET[p], K)[2]
                                                                    for p in ("reasoning", "answer"))
        * CPU_MS[6] / CPU_MS[4])  # the tokens kept over the CPU experts paid: 6 tokens' layer against 4
    for rest in (0.5, 5.0):
        seconds = [(LAYERS * CPU_MS[2 * (d + 1)] + rest) / 1000 for d in range(K + 1)]
        cost = depth_mixed.curve_cost(CPU_MS, LAYERS, [rest], K)
        gain = depth_mixed.compare(named_policies(K)["phase 0/2"].draft_depth, depth_mixed.mix(2), SET, K, seconds,
                                   cost).gain
        assert 1 < gain < bound
    assert e2e_mixed.curve_bound(2, K, SET, {1: 2.0, 2: 3.6}, LAYERS, "phase 0/2") is None  # no 4 or 6 tokens timed
    assert e2e_mixed.curve_bound(2, K, SET, CPU_MS, LAYERS, "adaptive") is None  # its depths move with the costs


def with_draws(runs: tuple[dict[str, Any], dict[str, Any]], draws: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The runs as e2e.py writes them under E2E_MIXED_DRAWS: each round's mixed cells `draws` times,
    each tagged by its draw; draw d's cells d + 1 times as long (other draws, other windows)."""
    runs = copy.deepcopy(runs)
    for run in runs:
        run["mixed_draws"] = draws
        mixed = [c for c in run["cells"] if c["phase"] == "mixed"]
        run["cells"] = [c for c in run["cells"] if c["phase"] != "mixed"]
        for draw in range(draws):
            run["cells"] += [{**c, "draw": draw, "tok_s": c["tok_s"] / (draw + 1), "window_s": c["window_s"] * (draw + 1)}
                             for c in mixed]
    return runs


def test_mixed_draws_pair_by_round_and_draw_and_each_planned_one_must_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Paired by round alone, a twin's cells would meet its batch twin's of other draws (ratios 0.5x to
    2x here); by round and draw each pair holds the same ratio. A draw that did not run fails the run."""
    runs = with_draws(runs_with_twins(), 3)
    done, out = report(tmp_path, runs, capsys)
    assert done == 0 and "FAIL" not in out
    ratio = per_request_cell(0)["tok_s"] / mixed_cell("phase 0/2", 0)["tok_s"]
    gains = row(out, "phase 0/2 per request", "each request verifying its own depth against the batch's")
    assert gains[8:10] == [f"{ratio:.3f}", f"[{ratio:.3f}-{ratio:.3f}],"]
    runs[1]["cells"] = [c for c in runs[1]["cells"]
                        if not (c["policy"] == "adaptive" and c["phase"] == "mixed" and c.get("draw") == 2)]
    done, out = report(tmp_path, runs, capsys)
    assert done == 1 and "FAIL: mixed x2 adaptive: 4 of 6 rounds x 3 draws measured" in out.splitlines()


def test_the_mixed_draws_run_holds_what_its_readme_says(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h100-e2e-mixed-draws: every policy and twin's mixed pair on all three draws of its
    round, nothing amiss in them (the report, as the machine printed it, FAILs only for the policies the
    run left out and one round's acceptance), the twins' ratios by draw, today's reasoning request drawing
    more or fewer tokens in each, and the decision log headed by draw."""
    resdir = Path(e2e_mixed.__file__).parent / "results/h100-e2e-mixed-draws"
    assert e2e_decode.main([str(resdir), "--spec-only"]) == 1
    report = capsys.readouterr().out
    assert report == (resdir / "report.txt").read_text()
    assert all(line.startswith("FAIL: ") and "mixed" not in line for line in report.splitlines())
    run = json.loads((resdir / "e2e-spec.json").read_text())
    cells = e2e_mixed.mixed_cells([run])
    assert run["mixed_draws"] == 3 and not e2e_mixed.problems([run], K)
    assert {policy: sorted(map(e2e_mixed.occasion, cs)) for (_, policy), cs in cells.items()} == {
        policy: [(0, 0), (0, 1), (0, 2)] for policy in ("fixed 2", "phase 0/2", "adaptive", "phase 0/2 per request",
                                                       "adaptive per request")}
    ratios = {p: [round(r, 3) for r in e2e_mixed.paired(cells, 2, p + PER_REQUEST, p)] for p in ("phase 0/2", "adaptive")}
    assert sorted(ratios["phase 0/2"]) == [1.063, 1.118, 1.19] and sorted(ratios["adaptive"]) == [1.015, 1.12, 1.172]
    assert [c["window_tokens_by_request"][0] for c in sorted(cells[2, "fixed 2"], key=e2e_mixed.occasion)] == [35, 33, 26]
    assert run["decode_steps"]["eager"] == {}
    headings = [line for line in e2e_decisions.lines(resdir, "adaptive per request", "mixed") if line.startswith("round")]
    assert [h.split(" mixed")[0] for h in headings] == ["round 0 draw 0", "round 0 draw 1", "round 0 draw 2"]


def set_acceptance_line(resdir: Path, policy: str) -> str:
    """bench.mixed_pairs' figure at the set acceptance for `policy`'s twin."""
    out = mixed_pairs.lines(resdir)
    section = out[out.index(f"{policy} per request against {policy}, mixed x2:"):]
    return next(line for line in section if line.startswith("  at the set acceptance"))


@pytest.mark.parametrize("run, ratios, at_set, floor", [
    ("h200-dsv4-e2e-draws", {"phase 0/2": "1.085 [1.025-1.188]", "adaptive": "0.945 [0.873-1.229]"},
     {"phase 0/2": "1.114 [1.045-1.168]", "adaptive": "1.093 [1.025-1.126]"}, "5.8%"),
    ("h200-e2e-draws", {"phase 0/2": "1.094 [0.956-1.212]", "adaptive": "1.081 [0.924-1.246]"},
     {"phase 0/2": "1.143 [0.992-1.177]", "adaptive": "1.082 [0.976-1.199]"}, "17.1%"),
])
def test_the_h200_draws_runs_hold_what_their_readmes_say(run: str, ratios: dict[str, str], at_set: dict[str, str],
                                                          floor: str, capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h200-{dsv4-,}e2e-draws: every policy on 2 rounds x 3 draws, the report passes (and
    reprints byte for byte), graphs only; each twin's mixed pair as measured and at the set acceptance."""
    resdir = Path(e2e_mixed.__file__).parent / "results" / run
    assert e2e_decode.main([str(resdir), "--spec-only"]) == 0
    report = capsys.readouterr().out
    assert report == (resdir / "report.txt").read_text()
    spec = json.loads((resdir / "e2e-spec.json").read_text())
    assert spec["mixed_draws"] == 3 and spec["decode_steps"]["eager"] == {} and len(spec["cells"]) == 90
    for policy, ratio in ratios.items():
        assert f"{policy} per request".ljust(22) + f" vs {policy}: batch {ratio}," in report
        assert set_acceptance_line(resdir, policy).endswith(f"median [range]: {at_set[policy]}")
    assert f"noise floor of these cells (the largest difference in a round between policies whose batch verifies the same depth today): {floor}" in report


def test_adaptive_per_request_went_the_wrong_way_on_a_stale_cost_in_the_dsv4_draws_run() -> None:
    """bench/results/h200-dsv4-e2e-draws, round 1: the answering request set 1 on arrival and the
    reasoning one 2 (1 + 2 in every step of each draw, the reasoning request making nearly all the
    answer's tokens), on 0 + 2 priced at 81.41 ms above 1 + 2 at 74.34."""
    resdir = Path(e2e_mixed.__file__).parent / "results/h200-dsv4-e2e-draws"
    cells = [c for c in json.loads((resdir / "e2e-spec.json").read_text())["cells"]
             if c["phase"] == "mixed" and c["policy"] == "adaptive per request" and c["round"] == 1]
    assert [c["steps_by_request_depths"] for c in cells] == [{"1+2": 23}] * 3
    assert [c["window_tokens_by_request"] for c in cells] == [[43, 47], [47, 46], [47, 47]]
    lines = e2e_decisions.lines(resdir, "adaptive per request", "mixed")
    round_1 = lines[next(i for i, line in enumerate(lines) if line.startswith("round 1 draw 0")):]
    arrivals = [line.split() for line in round_1[1:4]]
    assert [(a[3], a[5]) for a in arrivals] == [("reasoning", "0"), ("answer", "1"), ("reasoning", "2")]
    assert "'3,4': 81.41, '3,5': 74.34" in round_1[2]


def test_the_adjacent_pairs_run_fails_closed_and_holds_what_its_readme_says(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h100-dsv4-e2e-adjacent-pairs: out of device time in round 1, the report FAILs; round 0
    lossless on all four draws, graphs only, each twin's cell next to its policy's, and its pairs' ratios."""
    resdir = Path(e2e_mixed.__file__).parent / "results/h100-dsv4-e2e-adjacent-pairs"
    assert e2e_decode.main([str(resdir), "--spec-only"]) == 1
    out = capsys.readouterr().out
    assert out == (resdir / "report.txt").read_text() and "FAIL: e2e-spec.json: the engine did not finish" in out
    run = json.loads((resdir / "e2e-spec.json").read_text())
    assert run["decode_steps"]["eager"] == {} and run["mixed_draws"] == 4
    round_0 = [c for c in run["cells"] if c["round"] == 0]
    for occasion in {(c["phase"], c.get("draw")) for c in round_0}:
        ran = [c for c in round_0 if (c["phase"], c.get("draw")) == occasion]
        assert len({json.dumps(c["tokens"]) for c in ran}) == 1
        order = [c["policy"] for c in ran]
        for twin in (p for p in order if p.endswith(PER_REQUEST)):
            assert abs(order.index(twin) - order.index(twin.removesuffix(PER_REQUEST))) == 1
    cells = e2e_mixed.mixed_cells([run])
    ratios = {p: [round(r, 3) for r in e2e_mixed.paired(cells, 2, p + PER_REQUEST, p)] for p in ("phase 0/2", "adaptive")}
    assert ratios == {"phase 0/2": [1.03, 1.185, 1.359, 1.108], "adaptive": [1.034, 1.008, 1.189, 1.203]}
    assert set_acceptance_line(resdir, "phase 0/2").endswith("median [range]: 1.143 [1.044-1.247]")
    assert set_acceptance_line(resdir, "adaptive").endswith("median [range]: 1.070 [1.035-1.112]")
