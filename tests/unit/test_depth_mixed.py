"""vllm_ds4x.depth.mixed, the mixed-batch model: the batches it prices, the curve between timed
token counts, a request's expected tokens, a worked example by hand (today's deepest depth
against each request's own), adaptive-like choices on curves whose answer is known, and the
report's refusals."""

from __future__ import annotations

import itertools
import json
import random
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from bench import depth_sim as bench_sim
from ds4x.cli import main
from tests.doc_figures import assert_quotes, row
from vllm_ds4x.depth import mixed, sim
from vllm_ds4x.depth.estimates import between
from vllm_ds4x.depth.named_policies import any_policy
from vllm_ds4x.measure import cli as measure_cli

K = 2
CURVE = {1: 1.0, 2: 2.0, 3: 3.0, 4: 3.6, 6: 5.0}  # ms a layer call by tokens
LAYERS = 10
# conditional rates 0.5 and 0.9: accepted / drafted at depth 2 = (p + p^2) / 2
ACCEPTANCE = {"reasoning": (0.5 + 0.25) / 2, "answer": (0.9 + 0.81) / 2}


def test_the_batches_it_prices() -> None:
    assert mixed.mix(2) == ("reasoning", "answer")
    assert mixed.mix(4) == ("reasoning", "reasoning", "answer", "answer")
    assert mixed.mix(3) == ("reasoning", "answer", "answer")
    with pytest.raises(ValueError, match="a mixed batch needs 2 or more requests, got 1"):
        mixed.mix(1)
    assert mixed.mixed_batches(1) == []
    assert mixed.mixed_batches(2) == [2]
    assert mixed.mixed_batches(3) == [2]
    assert mixed.mixed_batches(16) == [2, 4]


def test_the_curve_is_read_as_timed_and_linear_between() -> None:
    assert mixed.curve_ms(CURVE, 4) == 3.6
    assert mixed.curve_ms(CURVE, 5) == pytest.approx(4.3)
    assert mixed.curve_ms({2: 1.0, 6: 3.0}, 3) == pytest.approx(1.5)
    for outside in (0, 7):
        with pytest.raises(ValueError, match=f"no timing for {outside} tokens: the curve has \\[1, 2, 3, 4, 6\\]"):
            mixed.curve_ms(CURVE, outside)
    assert mixed.interpolated(CURVE, range(2, 7)) == [5]


@pytest.mark.parametrize("acceptance", [0.2, 0.39, 0.9, 1.0])
def test_a_requests_tokens_by_depth_give_back_its_acceptance(acceptance: float) -> None:
    tokens = mixed.tokens_by_depth(acceptance, K)
    assert tokens[0] == 1.0
    assert (tokens[K] - 1) / K == pytest.approx(acceptance, abs=1e-9)  # vLLM's accepted / drafted at depth K
    assert tokens[0] < tokens[1] < tokens[2]


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_an_acceptance_outside_a_fraction_is_refused_by_value(bad: float) -> None:
    with pytest.raises(ValueError, match=f"acceptance {bad}: expected a fraction in \\(0, 1\\]"):
        mixed.tokens_by_depth(bad, K)


def seconds(rest: list[float], requests: int = 2, curve: dict[int, float] = CURVE) -> list[float]:
    return sim.step_seconds(curve, LAYERS, rest, requests, K, sim.Overlap())


def test_phase_0_2_by_hand() -> None:
    """Today both verify 2 drafts (6 tokens: 10 x 5.0 + 1 ms); per request 0 + 2 (4 tokens:
    10 x 3.6 + the rest at depth 2, 1 ms); tokens 1 + 0.5 + 0.25 and 1 + 0.9 + 0.81."""
    got = mixed.compare(sim.policies(K)["phase 0/2"], mixed.mix(2), ACCEPTANCE, K, seconds([1.0]),
                        mixed.curve_cost(CURVE, LAYERS, [1.0], K))
    assert got.uniform.depths == (2, 2) and got.per_request.depths == (0, 2)
    assert got.uniform.tok_s == pytest.approx((1.75 + 2.71) / 0.051, rel=1e-6)
    assert got.per_request.tok_s == pytest.approx((1.0 + 2.71) / 0.037, rel=1e-6)
    assert got.gain == pytest.approx((3.71 / 0.037) / (4.46 / 0.051), rel=1e-6)
    assert got.per_request.phase_tok_s("reasoning") == pytest.approx(1.0 / 0.037, rel=1e-6)
    assert got.per_request.phase_tok_s("answer") == pytest.approx(2.71 / 0.037, rel=1e-6)


def test_per_request_pays_the_rest_of_its_deepest_depth() -> None:
    cost = mixed.curve_cost(CURVE, LAYERS, [1.0, 2.0, 3.0], K)
    assert cost((0, 2)) == pytest.approx((36 + 3.0) / 1000)
    assert cost((0, 1)) == pytest.approx((30 + 2.0) / 1000)
    assert cost((1, 2)) == pytest.approx((43 + 3.0) / 1000)  # 5 tokens, interpolated


@pytest.mark.parametrize("name", ["fixed 0", "fixed 1", "fixed 2"])
def test_a_fixed_depth_is_the_same_batch_either_way(name: str) -> None:
    """Both prices agree where the depths are uniform: the curve path and depth_sim's steps."""
    curve = {**CURVE, 8: 6.5, 12: 9.0}
    got = mixed.compare(sim.policies(K)[name], mixed.mix(4), ACCEPTANCE, K, seconds([1.0, 2.0, 3.0], 4, curve),
                        mixed.curve_cost(curve, LAYERS, [1.0, 2.0, 3.0], K))
    assert got.uniform.depths == got.per_request.depths == (int(name[-1]),) * 4
    assert got.gain == pytest.approx(1.0)


def test_phase_1_2_rounds_to_its_graph_depths() -> None:
    """A phase policy whose graphs are only 0 and 2 verifies 2 for a request that chose 1."""
    config = {"policy": "phase", "reasoning_depth": 1, "answer_depth": 2, "graph_depths": [0, 2]}
    got = mixed.compare(config, mixed.mix(2), ACCEPTANCE, K, seconds([1.0]), mixed.curve_cost(CURVE, LAYERS, [1.0], K))
    assert got.per_request.depths == (2, 2) and got.gain == pytest.approx(1.0)


@pytest.mark.parametrize(("curve", "today", "own"), [
    ({2: 5.0, 3: 5.0, 4: 5.0, 5: 5.0, 6: 5.0}, (2, 2), (2, 2)),  # drafts cost nothing: verify them all
    ({2: 1.0, 3: 9.0, 4: 9.5, 5: 10.0, 6: 10.5}, (0, 0), (0, 0)),  # any draft costs a lot: none
    (CURVE, (2, 2), (0, 2)),  # the case: the reasoning request verifies nothing on its own
])
def test_adaptive_like_choices_on_curves_whose_answer_is_known(curve: dict[int, float], today: tuple[int, ...],
                                                                own: tuple[int, ...]) -> None:
    cost = mixed.curve_cost(curve, LAYERS, [0.0], K)
    uniform = [cost((d, d)) for d in range(K + 1)]
    got = mixed.compare(sim.policies(K)["adaptive"], mixed.mix(2), ACCEPTANCE, K, uniform, cost)
    assert got.uniform.depths == today and got.per_request.depths == own
    gains = {p: mixed.tokens_by_depth(a, K) for p, a in ACCEPTANCE.items()}
    every = [mixed.batch(mixed.mix(2), d, gains, cost).tok_s for d in itertools.product(range(K + 1), repeat=2)]
    assert got.per_request.tok_s == pytest.approx(max(every))


def test_adaptive_today_verifies_the_deepest_own_choice_even_where_a_shallower_batch_is_faster() -> None:
    """On CURVE with no rest, 0+0 makes more tokens a second than 2+2, but each request chooses
    on its own, the answer chooses 2, and today's batch verifies 2 for both."""
    cost = mixed.curve_cost(CURVE, LAYERS, [0.0], K)
    uniform = [cost((d, d)) for d in range(K + 1)]
    got = mixed.compare(sim.policies(K)["adaptive"], mixed.mix(2), ACCEPTANCE, K, uniform, cost)
    today, own = mixed.best_batches(mixed.mix(2), ACCEPTANCE, K, uniform, cost)
    assert today.depths == (0, 0) and today.tok_s > got.uniform.tok_s
    assert own.depths == got.per_request.depths == (0, 2)


def test_the_report_prices_every_policy_and_names_what_it_interpolated() -> None:
    lines = mixed.report(CURVE, LAYERS, [1.0], 2, K, ACCEPTANCE, sim.policies(K))
    assert lines[0].startswith("mixed batch of 2: 1 reasoning (acceptance 38% at depth 2), 1 answer (acceptance 86%")
    rows = {line[:10].strip(): line[10:].split() for line in lines[2:8]}
    assert set(rows) == set(sim.policies(K))
    assert rows["phase 0/2"][:5] == ["2+2", f"{4.46 / 0.051:.2f}", "0+2", f"{3.71 / 0.037:.2f}",
                                     f"{(3.71 / 0.037) / (4.46 / 0.051):.3f}"]
    assert lines[-2].endswith("; 5 tokens interpolated on the curve")
    assert not mixed.report({**CURVE, 5: 4.3}, LAYERS, [1.0], 2, K, ACCEPTANCE, sim.policies(K))[-2].endswith(
        "interpolated on the curve")


def test_the_report_simulates_adaptive_itself_without_a_step_cost_profile() -> None:
    """Adaptive from a flat step cost (no profile): per request it times the steps its batch would
    make at each of its depths (exploring them), so it finds the reasoning request's depth 0 beside
    the answer's 2; today's batch verifies the answer's 2 for both."""
    line = mixed.report(CURVE, LAYERS, [1.0], 2, K, ACCEPTANCE, sim.policies(K))[-1]
    got = re.fullmatch(r"adaptive itself, simulated \(4 runs of 400 steps\): today ([\d.]+) tok/s \((\S+) in \d+% "
                       r"of steps\); per request ([\d.]+) tok/s \((\S+) in (\d+)% of steps; ([\d.]+)x\)", line)
    assert got is not None, line
    today, today_most, own, own_most, share, gain = got.groups()
    assert (today_most, own_most) == ("2+2", "0+2") and int(share) >= 60
    assert float(gain) == pytest.approx(float(own) / float(today), abs=1e-3) and float(gain) > 1.05


def test_the_report_refuses_a_curve_without_the_batchs_uniform_steps() -> None:
    with pytest.raises(ValueError, match=r"no timing for \[8, 12\] tokens: measure with --max-num-seqs 4"):
        mixed.report(CURVE, LAYERS, [1.0], 4, K, ACCEPTANCE, sim.policies(K))


SMALL = {"num_hidden_layers": 4, "hidden_size": 512, "moe_intermediate_size": 256, "n_routed_experts": 16,
         "num_experts_per_tok": 2, "vocab_size": 1000, "num_attention_heads": 4, "head_dim": 64,
         "expert_dtype": "fp4"}


def timed(spec: dict[str, Any], threads: list[int], *_: object) -> list[dict[str, Any]]:
    """measure's workers, faked: CURVE-like timings for every token count measure asks for."""
    return [{"threads": t, "ram_gbs": 50.0, "path": "cpu_decode",
             "cases": [{"tokens": n, "ms": 1.0 + 0.8 * (n - 1), "calls": 3, "distinct": 2.0 * n}
                       for n in spec["tokens"]]} for t in threads]


@pytest.mark.parametrize("seqs", [1, 2, 4])
def test_plan_measure_prints_the_mixed_case_from_two_requests(seqs: int, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    module = measure_cli
    monkeypatch.setattr(module, "run_workers", timed)
    monkeypatch.setattr(module, "check_python", lambda python: None)
    (tmp_path / "c.json").write_text(json.dumps(SMALL))
    assert main(["plan", "--measure", "--config", str(tmp_path / "c.json"), "--python", sys.executable,
                 "--threads", "1", "--budget", "1", "--gpu-ms", "2", "--max-num-seqs", str(seqs),
                 "--profile-out", str(tmp_path / "p.json"), "--prefill-budget", "0"]) == 0
    out = capsys.readouterr().out
    if seqs < 2:
        assert "mixed batch" not in out
        return
    curve = {n: 1.0 + 0.8 * (n - 1) for n in range(1, 3 * seqs + 1)}
    want = mixed.report(curve, 4, [2.0], seqs, K, {"reasoning": 0.39, "answer": 0.89}, sim.policies(K))
    assert f"predicted, mixed batch of {seqs}: {seqs // 2} reasoning" in out
    assert "\n".join(want[1:-1]) in out  # a linear curve: nothing interpolated changes the figures


def test_depths_print_per_request_up_to_four_and_by_runs_beyond() -> None:
    assert mixed.depths_text((0, 2)) == "0+2"
    assert mixed.depths_text((0, 0, 2, 2)) == "0+0+2+2"
    assert mixed.depths_text((0,) * 3 + (2,) * 5) == "3x0+5x2"


def test_requests_of_one_phase_choose_alike_so_a_large_batch_stays_cheap() -> None:
    """64 requests, 32 of each phase: 3 ** 2 choices weighed, not 3 ** 64."""
    calls: list[tuple[int, ...]] = []
    base = mixed.curve_cost({n: 1.0 + 0.8 * (n - 1) for n in range(1, 193)}, LAYERS, [1.0], K)

    def cost(depths: Sequence[int]) -> float:
        calls.append(tuple(depths))
        return base(depths)

    phases = mixed.mix(64)
    gains = {p: mixed.tokens_by_depth(a, K) for p, a in ACCEPTANCE.items()}
    got = mixed.best_combination(phases, gains, cost, range(K + 1))
    assert len(calls) == 9
    assert got == (got[0],) * 32 + (got[-1],) * 32


def test_bench_depth_sim_mixed_on_the_committed_h200_profile(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/depth_sim.py --mixed: phase 0/2 today verifies 2 + 2 drafts (6 tokens a layer call), per
    request 0 + 2 (4 tokens), on the committed curve, no rest; the figures by hand from the profile."""
    bench_sim.main(["--mixed", "--seeds", "1", "--reasoning-tokens", "20", "--answer-tokens", "20"])
    out = capsys.readouterr().out
    measured = bench_sim.measured()
    curve, layers = sim.profile_curve(measured)
    tokens = {}
    for phase, rate in measured["acceptance"].items():
        p = sim.conditional(rate, K)
        tokens[phase] = 1 + p + p * p
    today = (tokens["reasoning"] + tokens["answer"]) / (layers * curve[6] / 1000)
    own = (1 + tokens["answer"]) / (layers * curve[4] / 1000)
    row = next(line for line in out.splitlines() if line.startswith("phase 0/2 ") and "+" in line)
    assert row.split()[2:7] == ["2+2", f"{today:.2f}", "0+2", f"{own:.2f}", f"{own / today:.3f}"]


@pytest.mark.parametrize(("requests", "message"), [
    ("4", "no timing for [8, 12] tokens: measure with --max-num-seqs 4"),
    ("1", "a mixed batch needs 2 or more requests, got 1"),
])
def test_bench_depth_sim_mixed_refuses_a_batch_the_profile_cannot_price(requests: str, message: str) -> None:
    with pytest.raises(SystemExit) as caught:
        bench_sim.main(["--mixed", "--requests", requests])
    assert str(caught.value).endswith(f"measure.json: {message}")


def test_the_docs_quote_the_model_on_the_committed_profile() -> None:
    """docs/mixed-batches.md's predicted table is depth_mixed on bench/results/h200-e2e/measure.json, with
    no rest of a step and with 3 ms: each policy's row holds the model's depths, tok/s and gain."""
    doc = Path(mixed.__file__).parents[2] / "docs" / "mixed-batches.md"
    measured = bench_sim.measured()
    curve, layers = sim.profile_curve(measured)
    for rest in (0.0, 3.0):
        results = mixed.compare_policies(sim.policies(K), mixed.mix(2), measured["acceptance"], K,
                                         sim.step_seconds(curve, layers, [rest], 2, K, sim.Overlap()),
                                         mixed.curve_cost(curve, layers, [rest], K))
        fixed = [results[f"fixed {k}"].uniform for k in range(K + 1)]
        assert_quotes(" ".join(row(doc, "fixed 0 / 1 / 2", f"{rest:g} ms", column="gain")[2:]),
                      [x for u in fixed for x in (*u.depths, u.tok_s)] + [1.0])
        for name in ("phase 1/2", "phase 0/2", "adaptive"):
            c = results[name]
            quoted = row(doc, "adaptive-like" if name == "adaptive" else name, f"{rest:g} ms", column="gain")[2:]
            assert_quotes(" ".join(quoted), [*c.uniform.depths, c.uniform.tok_s, *c.per_request.depths,
                                             c.per_request.tok_s, c.gain])


# bench/results/h200-dsv4-e2e-priors-x2: the mixed cells' uniform steps by depth, the
# acceptance measured, and the profile adaptive started from
DSV4_STEPS_MS = [40.3, 70.9, 90.8]
DSV4_ACCEPTANCE = {"reasoning": 0.411, "answer": 0.907}
DSV4_START = {"step_cost": {"1": [1.0, 2.298, 3.1062], "2": [1.0, 1.7661, 2.4989]},
              "prior_acceptance": {"reasoning": 0.515, "answer": 0.925}}


def dsv4_cost(depths: Sequence[int]) -> float:
    """A step's seconds: a uniform one as measured, a mixed one between them by its tokens
    (a request's own depth costs its rows: 0 + 2 as 1 + 1)."""
    tokens = [1 + d for d in depths]
    return between(DSV4_STEPS_MS, (max(tokens), sum(tokens)), len(tokens)) / 1000


def simulated(name: str, steps: int, phases: Sequence[str] = ("reasoning", "answer"),
              seeds: int = 12) -> tuple[float, dict[tuple[int, ...], float]]:
    """A named policy's mean tok/s over runs of a batch of `phases` (requests in that order), and
    its share of steps by the depths each request verified."""
    config = any_policy(name, K, DSV4_START).draft_depth
    tok_s, counts = mixed.simulate_seeds(config, phases, DSV4_ACCEPTANCE, K, dsv4_cost, steps, seeds)
    return tok_s, {d: n / counts.total() for d, n in counts.items()}


@pytest.mark.parametrize("phases", [("reasoning", "answer"), ("answer", "reasoning")])
def test_adaptive_per_request_prices_its_depth_in_the_batch_it_runs_in(phases: tuple[str, str]) -> None:
    """A mixed cell as short as the benchmark's (26 steps), adaptive starting from the H200 profile:
    per request, the answering request verifies 2 beside the reasoning one at 0 from the start,
    whichever arrived first (priced in the batch of two, not on the one-request profile of the last
    timed step, which kept both at depth 0 for a whole hold), so it gains what phase 0/2 per
    request gains."""
    phase, _ = simulated("phase 0/2 per request", 26, phases)
    rate, share = simulated("adaptive per request", 26, phases)
    assert share[tuple(2 if p == "answer" else 0 for p in phases)] >= 0.85, share
    assert rate >= 0.97 * phase


def test_adaptive_prices_a_new_request_in_the_batch_it_joins() -> None:
    """Batch-uniform adaptive too: two answering requests arriving together price their first depth
    on two requests' step costs (depth 2), not on the one-request profile of the last timed step
    (depth 0 there), which held the batch at 0 for a whole hold."""
    _, share = simulated("adaptive", 26, ("answer", "answer"))
    assert share[(2, 2)] >= 0.7, share


@pytest.mark.parametrize("phase", ["reasoning", "answer"])
def test_adaptive_per_request_costs_a_uniform_batch_nothing(phase: str) -> None:
    """Two requests of one phase, each pricing its depth beside the other: no slower than the
    batch-uniform choice in steady decode."""
    today, _ = simulated("adaptive", 300, (phase, phase), seeds=6)
    mine, _ = simulated("adaptive per request", 300, (phase, phase), seeds=6)
    assert mine >= 0.99 * today


def test_the_simulation_times_what_it_runs() -> None:
    """Every step of a run is counted by the depths it verified, and a batch-uniform policy's steps
    all verify one depth."""
    run = mixed.simulate(sim.policies(K)["phase 0/2"], mixed.mix(2), DSV4_ACCEPTANCE, K, dsv4_cost, 30,
                         random.Random(0))
    assert run.steps == {(2, 2): 30}
    assert run.seconds == pytest.approx(30 * DSV4_STEPS_MS[2] / 1000)
    assert run.tokens["reasoning"] >= 30 and run.tokens["answer"] >= 30
