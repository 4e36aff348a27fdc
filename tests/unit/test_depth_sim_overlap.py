"""depth_sim's decode step with CPU-GPU overlap (#20 item 4): the issue's bound arithmetic, the
two-micro-batch pipeline against its closed form, one request unchanged, off equal to measure's
own step costs, and the reports of bench/depth_sim.py --overlap and plan --measure --overlap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import depth_sim as bench_sim
from ds4x.deploy import plan
from vllm_ds4x.depth import sim
from vllm_ds4x.measure import analysis

# DeepSeek-V4-Flash's MXFP4 layer through cpu_decode on the H200 at LK_THREADS=12, ms a layer call
# by tokens (README; the issue's 157.5 ms is 43 x the 2-token call); 4 and 6 tokens made up, steeper
H200 = {1: 1.69, 2: 157.5 / 43, 3: 5.18, 4: 7.9, 6: 11.2}
UBATCH = sim.Overlap(mode="ubatch")
ACCEPTANCE = {"reasoning": 0.39, "answer": 0.89}


@pytest.mark.parametrize(("fraction", "outside", "ratio"), [(1.0, 0.0, 1.18), (0.7, 0.0, 1.12),
                                                            (1.0, sim.OUTSIDE_MS, 1.18), (0.7, sim.OUTSIDE_MS, 1.12)])
def test_the_issues_worked_example(fraction: float, outside: float, ratio: float) -> None:
    """Two requests at depth 0 on the H200's curve: 157.5 ms CPU + 28.5 ms rest; full overlap of the
    rest gives 1.18x, 70% of it 1.12x (save = fraction x min(CPU, rest))."""
    assert sim.bound_step_ms(157.5, 28.5, fraction, 0.0) == pytest.approx(186 - fraction * 28.5)
    assert round(186 / sim.bound_step_ms(157.5, 28.5, fraction, outside), 2) == ratio


def test_the_bound_hides_the_smaller_part_and_never_what_cannot_overlap() -> None:
    assert sim.bound_step_ms(10.0, 28.5, 1.0) == 28.5  # CPU the smaller part: all of it hidden
    assert sim.bound_step_ms(10.0, 2.0, 1.0, 0.5) == 10.5  # the 0.5 ms outside stays
    assert sim.bound_step_ms(10.0, 0.3, 1.0, 0.5) == 10.3  # less rest than outside: nothing to hide


@pytest.mark.parametrize(("cpu", "gpu"), [(1.69, 0.65), (0.65, 1.69), (1.0, 1.0), (2.0, 0.0)])
def test_pipeline_of_equal_layers_is_the_larger_sum_plus_one_layers_smaller_part(cpu: float, gpu: float) -> None:
    parts = 2 * 43
    assert sim.pipeline_ms([cpu] * parts, [gpu] * parts) == pytest.approx(parts * max(cpu, gpu) + min(cpu, gpu))


def test_pipeline_waits_for_the_same_micro_batchs_cpu_part() -> None:
    # A1's CPU part ends at 11: A2's GPU part (part 2) starts then, not when the GPU is free at 2
    assert sim.pipeline_ms([10.0, 1.0, 1.0, 1.0], [1.0, 1.0, 5.0, 5.0]) == 22.0
    assert sim.pipeline_ms([1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 10.0, 1.0]) == 14.0  # a slow GPU part delays its CPU part


def test_two_micro_batches_on_the_h200_curve() -> None:
    """Depth 0: two 1-token calls a layer (2 x 1.69 ms) one after the other on the CPU, the GPU
    part (28.5 - 0.57 ms a micro-batch, spread over 43 layers) beside them, plus the pipeline
    fill (one layer's smaller part) and what is outside the layers."""
    gpu = (28.5 - sim.OUTSIDE_MS) / 43
    expected = 2 * 43 * 1.69 + min(1.69, gpu) + sim.OUTSIDE_MS
    assert sim.step_ms(H200, 43, 28.5, 2, 1, UBATCH) == pytest.approx(expected)
    assert 186 / expected == pytest.approx(1.269, abs=1e-3)  # above the bound: two 1-token calls cost less CPU
    # GPU-bound: twice the GPU part (each micro-batch costs the batch's) makes it slower than off
    assert sim.step_ms(H200, 43, 400.0, 2, 1, UBATCH) > sim.step_ms(H200, 43, 400.0, 2, 1, sim.Overlap())
    halved = sim.Overlap(mode="ubatch", ubatch_gpu=0.5)
    assert sim.step_ms(H200, 43, 400.0, 2, 1, halved) < sim.step_ms(H200, 43, 400.0, 2, 1, sim.Overlap())


# the H200 stand-in's bf16 layer at LK_THREADS=12 (bench/results/h200-e2e/measure.json), rounded
STAND_IN = {1: 1.18, 2: 2.60, 3: 3.52, 4: 4.53, 6: 6.30}


@pytest.mark.parametrize(("curve", "hidden", "tokens"), [
    (STAND_IN, 0.0, 1),  # 2 x 1.18 < 2.60, but 2 x 2.60 > 4.53
    (STAND_IN, 0.7, 2),  # a heavier GPU part a layer pays for the second split
    (H200, 0.0, 3),
    ({1: 1.0, 2: 1.5}, 0.4, 0),  # lk_moe nearly free for a second token: no split pays
    ({1: 1.0, 2: 3.0, 3: 3.5, 4: 5.0}, 0.0, 1),  # the first loss ends the advice
])
def test_ubatch_tokens_is_where_two_calls_cost_less_than_one(curve: dict[int, float], hidden: float,
                                                             tokens: int) -> None:
    assert sim.ubatch_tokens(curve, hidden) == tokens


def test_a_step_splits_only_up_to_the_advised_tokens() -> None:
    """The H200 stand-in at two requests: depth 0 splits (two 1-token calls), depth 2 runs whole,
    as the engine does at LVLLM_MOE_UBATCH_TOKENS=1."""
    ubatch = sim.Overlap(mode="ubatch", outside_ms=0.5)
    assert sim.step_ms(STAND_IN, 12, 2.5, 2, 1, ubatch) < sim.step_ms(STAND_IN, 12, 2.5, 2, 1, sim.Overlap())
    assert sim.step_ms(STAND_IN, 12, 2.5, 2, 3, ubatch) == sim.step_ms(STAND_IN, 12, 2.5, 2, 3, sim.Overlap())
    forced = sim.Overlap(mode="ubatch", outside_ms=0.5, max_tokens=3)  # what the engine did before: slower
    assert sim.step_ms(STAND_IN, 12, 2.5, 2, 3, forced) > sim.step_ms(STAND_IN, 12, 2.5, 2, 3, sim.Overlap())


def test_report_says_when_no_split_pays() -> None:
    lines = sim.overlap_report({1: 1.0, 2: 1.5}, 12, [2.0], 2, 1, ACCEPTANCE, {"reasoning": 20, "answer": 20}, 1,
                               UBATCH)
    assert len(lines) == 1 and lines[0].endswith("leave LVLLM_MOE_OVERLAP off")


def test_measure_advises_the_variable_from_its_curve() -> None:
    run = {"cases": [{"tokens": n, "ms": ms} for n, ms in STAND_IN.items()]}
    assert analysis.ubatch_advice(run, 0.0, 12).endswith("LVLLM_MOE_OVERLAP=ubatch LVLLM_MOE_UBATCH_TOKENS=1")
    assert analysis.ubatch_advice(run, sim.OUTSIDE_MS + 12 * 0.7, 12).endswith("LVLLM_MOE_UBATCH_TOKENS=2")
    flat = {"cases": [{"tokens": 1, "ms": 1.0}, {"tokens": 2, "ms": 1.5}]}
    assert analysis.ubatch_advice(flat, 0.0, 12).endswith("leave LVLLM_MOE_OVERLAP off")


def test_three_requests_split_two_and_one() -> None:
    step = sim.step_ms(H200, 2, 0.0, 3, 1, sim.Overlap(mode="ubatch", outside_ms=0.0))
    assert step == pytest.approx(2 * (H200[2] + H200[1]))


@pytest.mark.parametrize("requests", [1, 2])
def test_off_is_measures_step_cost_and_one_request_never_changes(requests: int) -> None:
    run = {"cases": [{"tokens": n, "ms": ms} for n, ms in H200.items()]}
    expected = analysis.step_seconds(run, 2, 43, [28.5, 29.0, 30.0], requests)
    assert sim.step_seconds(H200, 43, [28.5, 29.0, 30.0], requests, 2, sim.Overlap()) == pytest.approx(expected)
    assert (sim.step_seconds(H200, 43, [28.5], 1, 2, UBATCH)
            == sim.step_seconds(H200, 43, [28.5], 1, 2, sim.Overlap()))


def profile(rest: float = 28.5) -> dict[str, object]:
    """The `measured` object measure writes, for H200's curve at 43 layers."""
    seconds = [(H200[d + 1] * 43 + rest) / 1000 for d in range(3)]
    runs = [{"threads": 4, "cases": [{"tokens": 1, "ms": 9.0}]},
            {"threads": 12, "cases": [{"tokens": n, "ms": ms} for n, ms in H200.items()]}]
    return {"lk_threads": 12, "runs": runs, "step_seconds": seconds, "gpu_ms": [rest], "acceptance": ACCEPTANCE}


def test_profile_curve_is_the_best_runs_and_the_layers_its_steps_count() -> None:
    assert sim.profile_curve(profile()) == (H200, 43)
    curve, layers = sim.profile_curve(bench_sim.measured())  # the committed H200 stand-in: 12 layers
    assert layers == 12 and sorted(curve) == [1, 2, 3, 4, 6]
    with pytest.raises(ValueError, match="no run at lk_threads 12"):
        sim.profile_curve({**profile(), "runs": profile()["runs"][:1]})  # type: ignore[index]


def test_report_compares_every_policy_and_says_one_request_is_unchanged() -> None:
    tokens = {"reasoning": 60, "answer": 30}
    assert sim.overlap_report(H200, 43, [28.5], 1, 2, ACCEPTANCE, tokens, 2, UBATCH) == [sim.ONE_REQUEST]
    lines = sim.overlap_report(H200, 43, [28.5], 2, 2, ACCEPTANCE, tokens, 2, UBATCH)
    assert lines[1].startswith("depth 0: CPU experts 157.5 + rest 28.5 = 186.0 ms off; two micro-batches 146.6 ms "
                               "(x1.27); bound: full x1.18, 70% x1.12")
    rows = {line.split("  ")[0].strip(): line.split() for line in lines[5:]}
    assert set(rows) == set(sim.policies(2))
    assert float(rows["fixed 0"][-1]) == pytest.approx(1.269, abs=1e-3)  # fixed 0: every step at depth 0


def test_bench_prints_both_and_refuses_a_profile_without_the_batch(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.json").write_text(json.dumps({"measured": profile()}))
    short = ["--profile", str(tmp_path / "p.json"), "--seeds", "1", "--reasoning-tokens", "40",
             "--answer-tokens", "20"]
    bench_sim.main([*short, "--overlap", "ubatch"])
    out = capsys.readouterr().out
    assert "(two micro-batches; depth_sim.step_ms), 2 running requests" in out and "bound: full x1.18" in out
    bench_sim.main(short)
    assert "micro-batches" not in capsys.readouterr().out  # off: today's output
    with pytest.raises(SystemExit, match="no timing for 9 tokens: measure with --max-num-seqs 3"):
        bench_sim.main([*short, "--overlap", "ubatch", "--requests", "3"])


def test_plan_reports_at_max_num_seqs_with_measures_inputs() -> None:
    overlap = sim.Overlap(mode="ubatch", outside_ms=0.0, ubatch_gpu=1.0)
    written = {"draft_depth": {"policy": "adaptive", "step_cost": [1.0, 2.17, 3.06]}, "measured": profile()}

    def lines_at(requests: int) -> list[str]:
        return plan.overlap_lines(written, overlap, gpu_ms=[28.5], max_num_seqs=requests, k_max=2,
                                  acceptance=(0.39, 0.89))

    lines = lines_at(2)
    assert lines[0] == ("predicted with CPU-GPU overlap (two micro-batches, depth_sim.step_ms), 2 running requests, "
                        "LVLLM_MOE_OVERLAP=ubatch LVLLM_MOE_UBATCH_TOKENS=3 (outside the layers 0.0 ms, a micro-batch's GPU part 1.0 of the "
                        "batch's):")
    assert "fixed 0" in lines[-6] and "adaptive" in lines[-1]
    assert lines_at(1) == [
        "predicted with CPU-GPU overlap (two micro-batches, depth_sim.step_ms), " + sim.ONE_REQUEST]
