"""depth_sim with lk_moe's GPU expert pool at a hit rate (#57): h = 0 is today's model to the bit,
steps of 3+ rows are unchanged, a higher hit rate never costs more, the curve is read by distinct
experts, and a hit rate out of [0, 1] is refused (sim.Pool, bench/depth_sim.py --pool-hit-rate)."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path

import pytest

from bench import depth_sim as bench_sim
from vllm_ds4x.depth import sim

ROOT = Path(__file__).resolve().parents[2]
RESIDENT = ROOT / "bench" / "results" / "h200-dsv4-e2e-resident" / "measure.json"
# the H200's MXFP4 layer through cpu_decode at LK_THREADS=12, ms a layer call by tokens (that run's measure.json)
CURVE = {1: 1.8229, 2: 4.0018, 3: 5.5876, 4: 7.0220, 6: 9.9047}
ACCEPTANCE = {"reasoning": 0.39, "answer": 0.89}
RATES = [0.0, 0.05, 0.1, 0.2, 0.38, 0.5, 0.75, 0.9, 1.0]


@pytest.mark.parametrize("overlap", [sim.Overlap(), sim.Overlap(mode="ubatch")])
@pytest.mark.parametrize(("requests", "tokens"), [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2)])
def test_no_hits_is_todays_step_exactly(overlap: sim.Overlap, requests: int, tokens: int) -> None:
    zero = sim.Pool(hit_rate=0.0, distinct={1: 6.0, 2: 11.85})
    assert sim.step_ms(CURVE, 8, 12.0, requests, tokens, overlap, zero) == sim.step_ms(CURVE, 8, 12.0, requests,
                                                                                       tokens, overlap)
    assert sim.step_seconds(CURVE, 8, [12.0], requests, 2, overlap, zero) == sim.step_seconds(CURVE, 8, [12.0],
                                                                                              requests, 2, overlap)


def test_no_hits_leaves_a_profiles_step_seconds_as_they_are() -> None:
    seconds = [0.018228890000102638, 0.040018459999942024, 0.05587626499988119]
    assert sim.pooled_seconds(seconds, CURVE, 10, 1, sim.Pool()) == seconds


def test_the_cli_at_hit_rate_0_prints_what_it_printed_without(capsys: pytest.CaptureFixture[str]) -> None:
    for extra in ([], ["--overlap", "ubatch"]):
        assert bench_sim.main(["--seeds", "2", "--profile", str(RESIDENT), *extra]) == 0
        before = capsys.readouterr().out
        assert bench_sim.main(["--seeds", "2", "--profile", str(RESIDENT), "--pool-hit-rate", "0", *extra]) == 0
        assert capsys.readouterr().out == before


@pytest.mark.parametrize("rate", RATES)
def test_three_rows_and_more_are_unchanged(rate: float) -> None:
    """lk_moe 2.7.4 computes every expert on the CPU from 3 rows on: depth 2 of one request, depth 1 of two."""
    pool = sim.Pool(hit_rate=rate)
    for rows in (3, 4, 6):
        assert sim.call_ms(CURVE, rows, pool) == CURVE[rows]
    assert sim.step_ms(CURVE, 8, 12.0, 1, 3, sim.Overlap(), pool) == sim.step_ms(CURVE, 8, 12.0, 1, 3, sim.Overlap())
    assert sim.step_ms(CURVE, 8, 12.0, 2, 2, sim.Overlap(), pool) == sim.step_ms(CURVE, 8, 12.0, 2, 2, sim.Overlap())
    seconds = sim.step_seconds(CURVE, 8, [12.0], 1, 2, sim.Overlap())
    assert sim.pooled_seconds(seconds, CURVE, 8, 1, pool)[2] == seconds[2]


@pytest.mark.parametrize("rows", [1, 2])
def test_more_hits_never_cost_more_and_all_hits_leave_the_cpu_nothing(rows: int) -> None:
    costs = [sim.call_ms(CURVE, rows, sim.Pool(hit_rate=h)) for h in RATES]
    assert costs[0] == CURVE[rows]
    assert all(a > b for a, b in itertools.pairwise(costs))  # strictly: every hit rate here saves something more
    assert costs[-1] == 0.0


def test_the_curve_is_read_by_distinct_experts_not_scaled() -> None:
    """A 2-row call reads ~11.86 distinct experts; at the hit rate that leaves the CPU 6 of them it
    costs the 1-token call, not (1 - h) of the 2-token one; halfway to 6 it costs half the 1-token call."""
    distinct = {1: 6.0, 2: 11.85, 3: 17.68}
    pool = sim.Pool(hit_rate=1 - 6.0 / 11.85, distinct=distinct)
    assert sim.call_ms(CURVE, 2, pool) == pytest.approx(CURVE[1])
    # the MXFP4 call's second token costs more than its first: scaling the 2-row call would credit the pool less
    assert sim.call_ms(CURVE, 2, pool) < (1 - pool.hit_rate) * CURVE[2]
    assert sim.call_ms(CURVE, 1, sim.Pool(hit_rate=0.5, distinct=distinct)) == pytest.approx(CURVE[1] / 2)
    halfway = sim.Pool(hit_rate=1 - 8.925 / 11.85, distinct=distinct)  # 8.925: halfway from 6 to 11.85
    assert sim.call_ms(CURVE, 2, halfway) == pytest.approx((CURVE[1] + CURVE[2]) / 2)


def test_without_recorded_counts_the_axis_is_random_routings() -> None:
    assert [round(sim.random_distinct(t), 2) for t in (1, 2, 3)] == [6.0, 11.86, 17.58]
    assert sim.Pool().distinct_at(2) == sim.random_distinct(2)
    assert sim.Pool(distinct={1: 6.0}).distinct_at(2) == sim.random_distinct(2)


def test_a_profile_gives_its_recorded_distinct_experts() -> None:
    distinct = sim.measured_distinct(bench_sim.measured(RESIDENT))
    assert sorted(distinct) == [1, 2, 3, 4, 6]
    assert distinct[1] == 6.0 and 11.8 < distinct[2] < 11.9
    assert sim.measured_distinct({"lk_threads": 12, "runs": [{"threads": 12, "cases": [{"tokens": 1, "ms": 2.0}]}]}) == {}


def test_the_pool_speeds_up_depth_0_and_1_and_never_fixed_2() -> None:
    seconds = sim.step_seconds(CURVE, 8, [15.0], 1, 2, sim.Overlap())
    tokens = {"reasoning": 300, "answer": 300}
    by_rate = []
    for rate in (0.0, 0.2, 0.4):
        costs = sim.pooled_seconds(seconds, CURVE, 8, 1, sim.Pool(hit_rate=rate))
        by_rate.append({name: sim.simulate(config, costs, ACCEPTANCE, tokens, random.Random(0))
                        for name, config in sim.policies(2).items()})
    for a, b in itertools.pairwise(by_rate):
        assert b["fixed 0"]["reasoning"] > a["fixed 0"]["reasoning"]
        assert b["fixed 1"]["answer"] > a["fixed 1"]["answer"]
        assert b["fixed 2"] == a["fixed 2"]  # one request at depth 2: 3 rows, no pool



@pytest.mark.parametrize("rate", [-0.01, 1.01, math.nan, math.inf])
def test_a_hit_rate_out_of_range_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="pool hit rate"):
        sim.Pool(hit_rate=rate)


@pytest.mark.parametrize("value", ["1.5", "-0.2", "nan", "lots"])
def test_the_cli_refuses_a_hit_rate_out_of_range_in_one_line(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench_sim.main(["--pool-hit-rate", value])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert "error: argument --pool-hit-rate" in error and "expected a number in [0, 1]" in error


def test_the_cli_refuses_the_pool_with_mixed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench_sim.main(["--pool-hit-rate", "0.2", "--mixed"])
    assert exit_.value.code == 2
    assert "--mixed prediction does not model the pool" in capsys.readouterr().err


def test_the_cli_predicts_faster_depth_0_with_hits(capsys: pytest.CaptureFixture[str]) -> None:
    rates = {}
    for rate in ("0", "0.3"):
        assert bench_sim.main(["--seeds", "2", "--profile", str(RESIDENT), "--pool-hit-rate", rate]) == 0
        out = capsys.readouterr().out
        fixed = {line.split()[1]: line.split() for line in out.splitlines() if line.startswith("fixed ")}
        rates[rate] = {depth: float(row[2]) for depth, row in fixed.items()}
    assert rates["0.3"]["0"] > rates["0"]["0"] and rates["0.3"]["1"] > rates["0"]["1"]
    assert rates["0.3"]["2"] == rates["0"]["2"]


def test_the_pool_rows_are_lk_moes() -> None:
    from vllm_ds4x.moe import pool

    assert sim.POOL_ROWS == pool.POOL_ROWS
