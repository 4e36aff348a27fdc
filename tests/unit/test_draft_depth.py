"""Per-request draft depth: config, phase tracking, policies, hysteresis.

The modules under test are the overlay's, shipped in both vLLM wheels; tests
name requests by id through tests/unit/depth_by_id.py."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest

from tests.unit.depth_by_id import ById
from vllm_ds4x.depth import clock as depth_clock
from vllm_ds4x.depth import estimates as est
from vllm_ds4x.depth import outcomes as depth_outcomes
from vllm_ds4x.depth import policy as dd
from vllm_ds4x.depth import tally

THINK, END_THINK = 1, 2
TOOL_MARKER = (7, 8, 9)  # e.g. "<｜DSML｜tool_calls>" as three tokens


def tracker() -> Any:
    return dd.PhaseTracker([[THINK]], [[END_THINK], list(TOOL_MARKER)])


@pytest.mark.parametrize(
    ("prompt", "phase"),
    [
        ([5, 6, THINK], "reasoning"),  # template opened thinking
        ([5, 6], "reasoning"),  # R1-style: the model thinks first, no <think> shown
        ([5, THINK, END_THINK], "answer"),  # thinking disabled: section already closed
        ([THINK, 3, END_THINK, 4, THINK, 5], "reasoning"),  # multi-turn: last marker wins
        ([THINK, 3, *TOOL_MARKER, 4], "answer"),
    ],
)
def test_phase_from_the_prompt(prompt: list[int], phase: str) -> None:
    assert tracker().initial(prompt) == phase


def test_phase_over_a_token_stream_with_reentry() -> None:
    t = tracker()
    history = [10, THINK]
    phase = t.initial(history)
    seen = []
    for chunk in ([11, 12], [13, END_THINK, 14], [15, THINK], [16], [7, 8], [9, 17]):  # marker split across steps
        history += chunk
        phase = t.feed(phase, history, len(chunk))
        seen.append(phase)
    assert seen == ["reasoning", "answer", "reasoning", "reasoning", "reasoning", "answer"]


def test_partial_marker_does_not_end_reasoning() -> None:
    t = tracker()
    assert t.feed("reasoning", [7, 8, 5, 9], 4) == "reasoning"
    assert t.feed("reasoning", [7, 8, 9, 5], 1) == "reasoning"  # the marker ended before these new tokens


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"policy": "greedy"}, "speculative_config.draft_depth.policy='greedy': expected one of fixed, phase, adaptive"),
        ({"policy": "phase", "reasoning_depth": 3}, "speculative_config.draft_depth.reasoning_depth=3: expected 0..2"),
        ({"policy": "phase", "answer_depth": -1}, "speculative_config.draft_depth.answer_depth=-1: expected 0..2"),
        ({"depth": 1}, "speculative_config.draft_depth: unknown field(s) ['depth']"),
        ({"policy": "adaptive", "step_cost": [1, 2]}, "speculative_config.draft_depth.step_cost: expected 3 positive costs"),
    ],
)
def test_config_errors_name_the_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(dd.DraftDepthError) as caught:
        dd.DraftDepthConfig.from_dict(raw, k_max=2)
    assert str(caught.value).startswith(message)


def test_phase_policy_needs_a_reasoning_parser() -> None:
    config = dd.DraftDepthConfig.from_dict({"policy": "phase"}, 2)
    with pytest.raises(dd.DraftDepthError, match="start vLLM with --reasoning-parser"):
        dd.DepthPolicy(config, 2, tracker=None)


def by_id(raw: dict[str, Any] | None, lag: int = 1) -> ById:
    return ById(dd.DepthPolicy(dd.DraftDepthConfig.from_dict(raw, 2), 2, tracker(), lag))


def clock(policy: ById) -> Any:
    """adaptive's decision clock"""
    return policy.policy.strategy.clock


def test_fixed_is_k_max_everywhere() -> None:
    policy = by_id(None)
    policy.add("a", [THINK], None)
    assert policy.depth("a") == 2
    policy.on_tokens("a", [END_THINK])
    policy.on_verified("a", 2, 0)
    assert policy.depth("a") == 2


def test_phase_policy_follows_the_phase() -> None:
    policy = by_id({"policy": "phase"})
    policy.add("r", [THINK], None)
    policy.add("a", [THINK, END_THINK], None)
    assert (policy.depth("r"), policy.depth("a")) == (1, 2)
    policy.on_tokens("r", [5, END_THINK])
    assert policy.depth("r") == 2
    policy.on_tokens("r", [THINK])  # agentic loop re-enters thinking
    assert policy.depth("r") == 1
    assert policy.depth("unknown") == 2  # never seen: vLLM's behaviour


def test_request_override_and_its_validation() -> None:
    policy = by_id({"policy": "phase"})
    policy.add("x", [THINK], {"draft_depth": 0})
    assert policy.depth("x") == 0
    for bad in (3, -1, "1", True, 1.0):
        with pytest.raises(dd.DraftDepthError, match=r"extra_args.draft_depth=.*: expected an integer in 0..2"):
            dd.request_depth({"draft_depth": bad}, 2)
    assert dd.request_depth({"other": 1}, 2) is None


def test_expected_tokens() -> None:
    assert est.expected_tokens([0.4, 0.4], 0) == 1
    assert est.expected_tokens([0.4, 0.4], 1) == pytest.approx(1.4)
    assert est.expected_tokens([0.4, 0.4], 2) == pytest.approx(1.56)


def test_batched_acceptance_update() -> None:
    """Warming up (fewer than 1/smoothing observations) a position's rate is the
    mean of what it has seen, the starting rate counting as PRIOR_SAMPLES; then
    each verification moves it by `smoothing`, a batch of n alike exactly n of
    them; a position never reached fades its weight."""
    fresh = est.Acceptance([0.5, 0.5], 0.1)
    fresh.observe_outcomes([0] * 7 + [1, 0])  # drafted 2, accepted 1: code 2 * 3 + 1
    assert fresh.rates == pytest.approx([(0.5 * 4 + 1) / 5, 0.5 * 4 / 5]) and fresh.counts == [1, 1]

    def warm() -> Any:
        return est.Acceptance([0.5, 0.5], 0.1, weights=[1.0, 1.0], counts=[10, 10])

    one = warm()
    one.observe_outcomes([0] * 7 + [1, 0])
    assert one.rates == pytest.approx([0.55, 0.45])
    batch = warm()
    outcomes = [0] * 9
    outcomes[2 * 3 + 2] = 7  # drafted 2, both accepted, 7 times
    batch.observe_outcomes(outcomes)
    assert batch.rates == pytest.approx([1 - 0.5 * 0.9**7] * 2)
    assert outcomes == [0] * 9  # consumed
    shallow = warm()
    shallow.observe_outcomes([0, 0, 0, 5, 0, 0, 0, 0, 0])  # drafted 1, rejected, 5 times: position 2 unseen
    assert shallow.rates[1] == 0.5 and shallow.weights[1] == pytest.approx(0.9**5)
    assert shallow.estimate()[1] == pytest.approx(0.9**5 * 0.5 + (1 - 0.9**5) * shallow.rates[0])


def test_tally_codes_round_trip() -> None:
    """Every (phase, chosen, drafted, accepted) packs to its own code and back, from
    the outcome and from the tokens sampled (accepted + 1); the codes fill the tally."""
    codec = tally.TallyCodec(2)
    seen = set()
    for phase, chosen, drafted in itertools.product(("reasoning", "answer"), range(3), range(3)):
        for accepted in range(drafted + 1):
            code = codec.slot(phase, chosen) + codec.sampled_base(drafted) + accepted + 1
            assert code == codec.slot(phase, chosen) + codec.outcome(drafted, accepted) < codec.size
            assert codec.unpack(code) == (phase, chosen, drafted, accepted)
            seen.add(code)
    assert len(seen) == 2 * 3 * (1 + 2 + 3)
    assert list(codec.tallies({codec.slot("answer", 1) + codec.outcome(2, 1): 3})) == [("answer", 1, 2, 3, 3)]
    assert tally.positions_seen(2) == ((3, 1, 0), (4, 1, 1), (6, 1, 0), (7, 2, 1), (8, 2, 2))


@pytest.mark.parametrize("steps", [2, 3, 9, 270])  # flushed step by step, by column, and full (MAX_LOGGED_STEPS 256)
def test_outcome_log_counts_what_a_pass_a_step_would(steps: int) -> None:
    """Logged steps reach each table as a pass over the batch every step would count
    them: a table read early (take) gets its share then and not again at the flush;
    nothing sampled (0) counts nowhere."""
    import random

    outcomes = depth_outcomes
    rng = random.Random(steps)
    ids = [f"r{i}" for i in range(5)]
    tables, expected = [[0] * 9 for _ in ids], [[0] * 9 for _ in ids]
    log = outcomes.OutcomeLog(2)
    log.batch(ids, tables)
    base = tally.TallyCodec(2).sampled_base(2)
    for step in range(steps):
        sampled = [rng.choice([0, 1, 2, 3]) for _ in ids]
        log.add(base, sampled)
        for table, n in zip(expected, sampled):
            table[base + n] += n > 0
        if step % 2:  # r1 is read every other step, r3 once
            log.take("r1", tables[1])
            assert tables[1] == expected[1]
        if step == steps // 2:
            log.take("r3", tables[3])
            assert tables[3] == expected[3]
    log.take("r0", [0] * 9)  # not r0's table: it takes nothing
    log.batch(["other"], [[0] * 9])  # a new batch: the old one's steps are all counted
    assert tables == expected


@pytest.mark.parametrize("seed", range(6))
def test_outcome_log_across_draft_changes_and_reordered_batches(seed: int) -> None:
    """Steps whose drafts change (another sampled_base: the log flushes) and batches that come
    back reordered (a new batch) count as a pass every step would."""
    import random

    outcomes = depth_outcomes
    rng = random.Random(seed)
    codec = tally.TallyCodec(3)
    tables = {f"r{i}": [0] * codec.outcomes for i in range(4)}
    expected = {name: [0] * codec.outcomes for name in tables}
    log = outcomes.OutcomeLog(3)
    ids = list(tables)
    log.batch(ids, [tables[i] for i in ids])
    for _ in range(60):
        if rng.random() < 0.1:
            rng.shuffle(ids)
            log.batch(ids, [tables[i] for i in ids])
        drafted = rng.choice([1, 2, 3])
        base = codec.sampled_base(drafted)
        sampled = [rng.randint(0, drafted + 1) for _ in ids]
        log.add(base, sampled)
        for name, n in zip(ids, sampled):
            expected[name][base + n] += n > 0
        if rng.random() < 0.3:
            name = rng.choice(ids)
            log.take(name, tables[name])
            assert tables[name] == expected[name]
    log.flush()
    assert tables == expected


CPU_COST = [1.0, 1.75, 2.44]  # DESIGN.md: lk_moe cost by tokens verified


def adaptive(**extra: object) -> ById:
    # explore_steps 0: the step costs are given, nothing to time first
    return by_id({"policy": "adaptive", "step_cost": CPU_COST, "explore_steps": 0, **extra})


def feed(policy: ById, rid: str, acceptance: float, steps: int, rng_seed: int = 0) -> list[int]:
    import random

    rng = random.Random(rng_seed)
    depths = []
    for _ in range(steps):
        depth = policy.depth(rid)
        depths.append(depth)
        accepted = 0
        while accepted < depth and rng.random() < acceptance:
            accepted += 1
        policy.on_verified(rid, depth, accepted)
        policy.on_tokens(rid, [5] * (accepted + 1))  # the step's new tokens, as the scheduler reports them
        policy.step()
    return depths


def test_adaptive_picks_the_best_depth_for_each_regime() -> None:
    """On the CPU cost profile no speculation beats speculation at 39%; at 90%
    two drafts beat one, by 2.3% (a near tie: a few holds pass before the
    estimate is sure of it); with a flat (GPU) cost, K_max wins."""
    policy = adaptive()
    policy.add("low", [THINK], None)
    low = feed(policy, "low", 0.39, 200)[-50:]
    assert low.count(0) >= 45 and set(low) == {0, 1}  # depth 0, and a one-step probe at 1 now and then
    policy.add("high", [THINK, END_THINK], None)
    tail = feed(policy, "high", 0.9, 400)[-100:]
    rates = {d: est.expected_tokens([0.9, 0.9], d) / CPU_COST[d] for d in range(3)}
    assert max(set(tail), key=tail.count) == max(rates, key=lambda d: rates[d])
    flat = by_id({"policy": "adaptive", "explore_steps": 0})
    flat.add("g", [THINK, END_THINK], None)
    assert feed(flat, "g", 0.6, 100)[-20:] == [2] * 20


def near_tie(hold_steps: int, hysteresis: float) -> list[int]:
    """Acceptance 0.62 on costs where depths 1 and 2 are within 2.3% of each other."""
    policy = by_id({"policy": "adaptive", "step_cost": [1.0, 1.5, 1.9], "explore_steps": 0,
                    "hold_steps": hold_steps, "hysteresis": hysteresis})
    policy.add("x", [THINK, END_THINK], None)
    return feed(policy, "x", 0.62, 2000, rng_seed=3)


def test_hysteresis_prevents_flapping_and_stays_near_the_best() -> None:
    def switches(depths: list[int]) -> int:
        return sum(a != b for a, b in itertools.pairwise(depths))

    steady, loose = near_tie(4, 0.01), near_tie(0, 0.0)
    assert switches(steady) * 2 < switches(loose)
    rate = {d: est.expected_tokens([0.62, 0.62], d) / [1.0, 1.5, 1.9][d] for d in range(3)}
    achieved = sum(rate[d] for d in steady) / len(steady)
    assert achieved >= 0.99 * max(rate.values())


def test_adaptive_keeps_separate_estimates_per_phase() -> None:
    policy = adaptive()
    policy.add("x", [THINK], None)
    feed(policy, "x", 0.2, 100)
    reasoning_depth = policy.depth("x")
    policy.on_tokens("x", [END_THINK])
    feed(policy, "x", 0.95, 100)
    answer_depth = policy.depth("x")
    policy.on_tokens("x", [THINK])
    assert policy.depth("x") == reasoning_depth  # picks up its reasoning estimate at once
    assert answer_depth > reasoning_depth


def test_adaptive_times_untimed_depths_then_uses_the_timings() -> None:
    """From a flat prior (no step_cost given), it spends a few steps at each
    untimed depth; with CPU-like timings it then settles on the cheap depth."""
    policy = by_id({"policy": "adaptive"})
    policy.add("x", [THINK], None)
    depths = []
    for step in range(300):
        depth = policy.depth("x")
        depths.append(depth)
        policy.policy.costs.observe(depth + 1, CPU_COST[depth])  # what the scheduler's step timer reports
        accepted = min(depth, 1 if step % 2 else 0)  # ~40-50% acceptance at position 1, never at 2
        policy.on_verified("x", depth, accepted)
        policy.on_tokens("x", [5] * (1 + accepted))
        policy.step()
    assert policy.policy.costs.unmeasured() == []
    assert {0, 1, 2} <= set(depths[:80])  # each depth timed early
    assert depths[-50:].count(0) + depths[-50:].count(1) >= 45  # then the cheap depths win


H200_STEP_S = {1: [0.0161, 0.0337, 0.0455], 2: [0.0352, 0.0558, 0.0801]}  # bench/results/h200-e2e, by requests


def test_adaptive_prices_one_request_with_one_request_timings() -> None:
    """The H200 benchmark's case: two requests, where depth 1 is best, then one, where
    depth 0 is. Timings of two-request steps at depth 0 must not make depth 1 look
    cheaper than depth 0 with one request (per position acceptance 0.62)."""
    policy = by_id({"policy": "adaptive"})
    names = ["x", "y"]
    for name in names:
        policy.add(name, [THINK], None)
    depths = []
    for step in range(600):
        if step == 300:
            policy.forget("y")
            names = ["x"]
        depth = max(policy.depth(n) for n in names)
        depths.append(depth)
        policy.policy.costs.observe(depth + 1, H200_STEP_S[len(names)][depth], len(names))
        for i, name in enumerate(names):
            accepted = sum(itertools.accumulate(((step * 7 + i * 3 + j) % 50 < 31 for j in range(depth)),
                                                lambda a, b: a and b))  # ~0.62 a position, in order
            policy.on_verified(name, depth, accepted)
            policy.on_tokens(name, [5] * (1 + accepted))
        policy.step()
    assert depths[200:300].count(1) >= 80  # two requests: depth 1
    assert depths[500:].count(0) >= 90  # one request: depth 0


def test_live_step_costs_replace_the_prior() -> None:
    costs = est.StepCosts(prior=[1.0, 1.0, 1.0])
    for seconds in (0.010, 0.011, 0.500):  # one stray slow step
        costs.observe(1, seconds)
    assert costs.relative() == pytest.approx([0.011, 0.011, 0.011])  # median; the rest scaled from the prior
    for seconds in (0.030, 0.029, 0.031):
        costs.observe(3, seconds)
    assert costs.relative() == pytest.approx([0.011, 0.0205, 0.030])
    assert costs.unmeasured() == [2]
    for _ in range(600):
        costs.observe(1, 0.010)
    assert costs.unmeasured() == [2, 3]  # 3 tokens not timed for 600 steps: stale


def test_a_masked_step_is_timed_by_its_shape_and_prices_only_its_own_shape() -> None:
    """verify "request": a step of two requests verifying 3 and 1 tokens is timed as (3, 4) and
    prices that shape; uniform lengths keep their own timings, the untimed one is scaled from the
    prior by every timed shape, and an untimed shape lies between the uniform lengths around it."""
    costs = est.StepCosts(prior=[1.0, 2.0, 3.0])
    for _ in range(3):
        costs.observe(1, 0.020, requests=2)
        costs.observe(3, 0.060, requests=2)
        costs.observe_step([3, 1], 0.035)
    assert costs.step_cost((3, 4), 2) == pytest.approx(0.035)
    assert costs.step_cost((3, 6), 2) == pytest.approx(0.060)  # uniform: the same as relative's
    scale = (0.020 / 1.0 + 0.060 / 3.0 + 0.035 / 2.0) / 3  # (3, 4): 2 tokens a request, prior 2.0
    assert costs.relative() == pytest.approx([0.020, 2.0 * scale, 0.060])
    assert costs.step_cost((2, 3), 2) == pytest.approx((0.020 + 2.0 * scale) / 2)  # 1.5 a request
    assert costs.unmeasured() == [2]  # the masked shape times no uniform length


def test_a_step_costs_no_more_than_a_timed_step_that_holds_it() -> None:
    """The H200 DeepSeek-V4 run's round 1 (bench/results/h200-dsv4-e2e-draws): 0 + 2 (3, 4), last
    timed in a dear spell at 81.41 ms, priced above 1 + 2 (3, 5) at 74.34; the answering request,
    deciding beside a reasoning one at 0, went to depth 1, and the reasoning one, beside it, to 2.
    A shape is priced at no more than a timed shape as long with as many tokens or more: there the
    answer keeps depth 2; shapes that hold no dearer one keep their own medians."""
    costs = est.StepCosts(prior=[1.0, 2.0, 3.0])
    for shape, ms in {(1, 2): 43.08, (2, 3): 62.0, (2, 4): 76.43, (3, 4): 81.41, (3, 5): 74.34}.items():
        for _ in range(3):
            costs.observe_step([shape[0], shape[1] - shape[0]], ms / 1000)
    assert costs.step_cost((3, 4), 2) == pytest.approx(0.07434)  # held by (3, 5)
    assert costs.step_cost((2, 3), 2) == pytest.approx(0.0620)  # its own: nothing holding it is cheaper
    assert costs.step_cost((2, 4), 2) == pytest.approx(0.07434)  # held by (3, 5) too
    assert costs.step_cost((3, 5), 2) == pytest.approx(0.07434)
    reasoning_at_0 = est.Beside(requests=1, expected=1.0, verified=1, longest=1)
    best, rates = est.best_in_batch([0.916, 0.934], costs, [0, 1, 2], reasoning_at_0)
    assert best == 2 and rates[2] > rates[1] * 1.05


def test_a_uniform_length_costs_no_more_than_a_longer_one() -> None:
    """Under verify "batch" too (best_depth prices on relative): depth 0, last timed in a dear spell
    above depth 1, is priced at depth 1's cost, so a request whose drafts are never accepted stays at 0
    (the shallower on a tie) rather than verify a draft because a stale depth 0 looked dearer."""
    costs = est.StepCosts(prior=[1.0, 2.0, 3.0])
    for tokens, seconds in ((1, 0.050), (2, 0.040), (3, 0.060)):
        for _ in range(3):
            costs.observe(tokens, seconds, requests=2)
    assert costs.relative() == pytest.approx([0.040, 0.040, 0.060])
    assert est.best_depth([0.0, 0.0], costs.relative(), [0, 1, 2])[0] == 0


def test_a_mixed_pair_arriving_on_a_stale_dear_0_plus_2_keeps_the_answer_deep() -> None:
    """The same round through the policy: a reasoning and an answering request arrive together on those
    costs; the answer is set to 2 and the reasoning request to 0 or 1, never the reverse."""
    policy = by_id({"policy": "adaptive", "verify": "request", "explore_steps": 0,
                    "step_cost": {"1": [1.0, 2.2996, 3.1998], "2": [1.0, 1.7678, 2.5088]},  # the run's measure
                    "prior_acceptance": {"reasoning": 0.515, "answer": 0.925}})
    for tokens, ms in (([1, 1], 43.08), ([2, 1], 62.0), ([2, 2], 76.43), ([3, 1], 81.41), ([3, 2], 74.34)):
        for _ in range(3):
            policy.policy.costs.observe_step(tokens, ms / 1000)
    policy.add("r", [THINK])
    policy.add("a", [THINK, 5, END_THINK])
    policy.step({"r", "a"})
    assert policy.depth("a") == 2 and policy.depth("r") in (0, 1)


def test_relative_answers_for_the_batch_asked() -> None:
    """A request priced in a batch of two before any two-request step ran gets two requests'
    prior shape, not the one-request timings of the latest step."""
    costs = est.StepCosts(prior=[1.0, 2.3, 3.1], by_batch={1: [1.0, 2.3, 3.1], 2: [1.0, 1.77, 2.5]})
    for _ in range(3):
        costs.observe(1, 0.016)
    assert costs.relative() == pytest.approx([0.016, 0.0368, 0.0496])
    assert costs.relative(2) == pytest.approx([1.0, 1.77, 2.5])
    assert costs.relative(1) == costs.relative()


def test_a_request_is_priced_beside_those_that_ran_and_those_that_arrived() -> None:
    """verify "request": the batch a depth is priced in holds the requests of the last step and
    those that arrived since, not one that waits (w: held, but not run)."""
    policy = by_id({"policy": "adaptive", "verify": "request"})
    for name in ("a", "b", "w"):
        policy.add(name, [THINK])
    policy.step({"a", "b"})
    beside = policy.policy.strategy._beside
    new = policy.add("n", [THINK])
    assert beside(new).requests == 2  # a and b
    policy.add("m", [THINK])
    assert beside(new).requests == 3  # m arrived in the same step
    policy.step({"a", "b", "n", "m"})
    assert beside(new).requests == 3
    policy.step(None)  # the engine-less simulations: every request held runs
    assert beside(new).requests == 4


TWO_REQUESTS = [1.0, 1.77, 2.5]
PROFILE = {"step_cost": {"1": [1.0, 2.3, 3.1], "2": TWO_REQUESTS},
           "prior_acceptance": {"reasoning": 0.5, "answer": 0.925}}


@pytest.mark.parametrize("verify", ["batch", "request"])
def test_arrivals_of_one_step_are_priced_together_and_keep_deciding(verify: str) -> None:
    """Two answering requests arrive in one step: the first, priced alone on one request's profile,
    starts at 0; once the step ends it is priced again beside the second (2), keeps 2 at its first
    decision, and goes on deciding: when its drafts stop being accepted it comes down to 0."""
    policy = by_id({"policy": "adaptive", "verify": verify, "explore_steps": 0, **PROFILE})
    prompt = [THINK, 5, END_THINK]
    policy.add("a", prompt)
    assert policy.depth("a") == 0
    policy.add("b", prompt)
    assert policy.depth("b") == 2
    policy.step({"a", "b"})  # the prefill
    assert policy.depth("a") == 2
    for step in range(400):
        drafts = {name: policy.depth(name) for name in ("a", "b")}
        if verify == "batch":
            drafts = dict.fromkeys(drafts, max(drafts.values()))
        tokens = [1 + d for d in drafts.values()]  # a step costs its tokens, on the profile's shape
        policy.policy.costs.observe_step(tokens, 0.035 * est.between(TWO_REQUESTS, (max(tokens), sum(tokens)), 2))
        for name, drafted in drafts.items():
            policy.on_verified(name, drafted, 0 if name == "a" and step >= 40 else drafted)
        policy.step({"a", "b"})
        if step == 39:
            assert policy.depth("a") == 2  # its first decision kept it
    assert policy.depth("a") == 0


@pytest.mark.parametrize("verify", ["batch", "request"])
def test_arrivals_while_a_step_runs_are_priced_with_each_other_under_async_scheduling(verify: str) -> None:
    """Async scheduling: two answering requests arrive while x's step runs, and the step that ends
    next is x's alone (theirs is already scheduled). On a profile where three requests make depth 2
    cheap and two do not, the first, priced beside x only (0), is priced again beside x and the
    second (2)."""
    profile = {"step_cost": {"1": [1.0, 2.3, 3.1], "2": [1.0, 1.77, 2.5], "3": [1.0, 1.2, 1.4]},
               "prior_acceptance": {"reasoning": 0.5, "answer": 0.6}}
    policy = by_id({"policy": "adaptive", "verify": verify, "explore_steps": 0, **profile}, lag=2)
    policy.add("x", [THINK])
    policy.step({"x"})
    for name in ("a", "b"):
        policy.add(name, [THINK, 5, END_THINK])
    assert (policy.depth("a"), policy.depth("b")) == (0, 2)
    policy.step({"x"})
    assert policy.depth("a") == 2


def test_a_stale_median_is_forgotten() -> None:
    """Three dear steps at 3 tokens (timed while the engine warmed up) price that length
    until they are stale; then the prior, scaled by the fresh timings, prices it again."""
    costs = est.StepCosts(prior=[1.0, 2.0, 3.0])
    for _ in range(3):
        costs.observe(3, 0.105)
    for _ in range(costs.stale_after):
        costs.observe(1, 0.034)
    assert costs.unmeasured() == [2]
    assert costs.relative()[2] == pytest.approx(0.105)
    costs.observe(1, 0.034)
    assert costs.relative()[2] == pytest.approx(0.034 * 3.0)
    assert costs.unmeasured() == [2, 3]
    for _ in range(2):
        costs.observe(3, 0.075)
    assert costs.unmeasured() == [2, 3]  # timed afresh: the dear three are gone, two are not enough
    costs.observe(3, 0.075)
    assert costs.relative()[2] == pytest.approx(0.075)


def test_a_stale_batch_size_lends_nothing() -> None:
    """Without priors by batch size an untimed batch borrows the nearest timed one's
    medians, but never stale ones."""
    costs = est.StepCosts(prior=[1.0, 2.0, 3.0])
    for _ in range(3):
        costs.observe(1, 0.5, requests=2)
    for _ in range(costs.stale_after + 1):
        costs.observe(2, 0.03, requests=1)
    costs.observe(1, 0.9, requests=4)  # one timing: four requests borrow the nearest timed batch's
    assert costs.relative() == pytest.approx([0.015, 0.03, 0.045])  # one request's, not two's stale 0.5


def test_step_costs_are_per_batch_size() -> None:
    """Timings of two-request steps price two-request steps only; a batch size
    not timed yet borrows the nearest one's and is untimed (explored)."""
    costs = est.StepCosts(prior=[1.0, 1.0, 1.0])
    for _ in range(3):
        costs.observe(1, 0.016)
        costs.observe(2, 0.034)
        costs.observe(3, 0.045)
    assert costs.relative() == pytest.approx([0.016, 0.034, 0.045])
    for _ in range(3):
        costs.observe(1, 0.035, requests=2)  # depth 0 with two requests costs more than depth 1 with one
    assert costs.relative() == pytest.approx([0.035, 0.035, 0.035])  # the rest from the (flat) prior
    assert costs.unmeasured() == [2, 3]
    costs.observe(2, 0.034)  # one request again: its own timings, untouched by the two-request ones
    assert costs.relative() == pytest.approx([0.016, 0.034, 0.045])
    assert costs.unmeasured() == []
    costs.observe(1, 0.070, requests=4)  # 4: fewer than min_samples, so the nearest timed batch (2) answers
    assert costs.relative()[0] == pytest.approx(0.035)
    assert costs.unmeasured() == [1, 2, 3]


# measure's step costs by running requests on the H200 stand-in (its 12-layer curve at
# LK_THREADS=12): the shape changes with the batch
MEASURED_COST = {"1": [1.0, 2.0529, 2.8258], "2": [1.0, 1.6217, 2.1638]}
H200_RUN_S = {1: [0.0167, 0.0349, 0.0475], 2: [0.0344, 0.0557, 0.0745]}  # the same run's steps by depth


def answering_two(policy: Any, steps: int = 200, dear: int = 0) -> list[int]:
    """`steps` steps of two answering requests (acceptance ~0.93 a position, ~0.88 at K=2), timed
    as the H200 run timed them, but for the first `dear` steps at depth 2, at 105 ms."""
    for name in ("x", "y"):
        policy.add(name, [THINK, END_THINK], None)
    depths = []
    for step in range(steps):
        depth = max(policy.depth(n) for n in ("x", "y"))
        depths.append(depth)
        seconds = 0.105 if depth == 2 and depths.count(2) <= dear else H200_RUN_S[2][depth]
        policy.policy.costs.observe(depth + 1, seconds, 2)
        for i, name in enumerate(("x", "y")):
            accepted = sum(itertools.accumulate(((step * 7 + i * 3 + j) % 50 < 47 for j in range(depth)),
                                                lambda a, b: a and b))
            policy.on_verified(name, depth, accepted)
            policy.on_tokens(name, [5] * (1 + accepted))
        policy.step()
    return depths


def test_a_start_by_batch_size_prices_two_requests_as_two() -> None:
    """The H200 rerun's defect: adaptive started from one request's step costs (depth 2 at
    2.83x depth 0) answered two requests at depths 0 and 1, 0.84x fixed 2, where two requests
    cost 2.16x. Started from measure's costs by batch size it answers at depth 2 once its first two
    holds end (depths 0, then 1). No exploration (explore_steps 0), so the start alone prices depth 2."""
    by_batch = answering_two(by_id({"policy": "adaptive", "step_cost": MEASURED_COST, "explore_steps": 0}))
    assert by_batch[40:].count(2) == 160
    one_list = answering_two(by_id({"policy": "adaptive", "step_cost": MEASURED_COST["1"], "explore_steps": 0}))
    assert one_list.count(2) == 0


def test_depth_2_timed_dear_while_warming_up_is_timed_again_and_chosen() -> None:
    """The H200 run's other defect: depth 2 timed at 105 ms on its first few steps (a fresh
    engine) kept two answering requests off it for good: once stale, the timings were only
    refreshed by a step of exploration each, and their median stayed dear. Now stale
    timings are forgotten, the prior prices depth 2 again, and it is chosen and re-timed."""
    depths = answering_two(by_id({"policy": "adaptive", "step_cost": MEASURED_COST}), steps=900, dear=4)
    assert depths[:500].count(2) <= 10  # it tried depth 2, timed it dear and left it
    assert depths[600:].count(2) >= 290


def test_step_cost_by_batch_size_is_read_and_checked() -> None:
    config = dd.DraftDepthConfig.from_dict({"policy": "adaptive", "step_cost": MEASURED_COST}, 2)
    assert config.step_costs() == {1: (1.0, 2.0529, 2.8258), 2: (1.0, 1.6217, 2.1638)}
    assert dd.DraftDepthConfig.from_dict({"policy": "adaptive", "step_cost": [1, 2, 3]}, 2).step_costs() == {
        0: (1.0, 2.0, 3.0)}
    costs = est.StepCosts(prior=[1.0, 2.0, 3.0], by_batch={1: [1.0, 2.0, 3.0], 2: [1.0, 1.6, 2.2]})
    for _ in range(3):
        costs.observe(1, 0.016)
    assert costs.relative() == pytest.approx([0.016, 0.032, 0.048])  # one request: its prior, scaled
    costs.observe(1, 0.034, requests=2)
    assert costs.relative() == pytest.approx([1.0, 1.6, 2.2])  # two: its own prior, not one request's timings
    costs.observe(1, 0.050, requests=3)
    assert costs.relative() == pytest.approx([1.0, 1.6, 2.2])  # three, not given: the nearest given shape


@pytest.mark.parametrize(("step_cost", "message"), [
    ({"2": [1, 2]}, "step_cost[2]: expected 3 positive costs"),
    ({"0": [1, 2, 3]}, "step_cost: keys ['0'] must be running requests, 1 or more"),
    ({}, "step_cost: keys [] must be running requests, 1 or more"),
    ({"two": [1, 2, 3]}, "step_cost: expected a list of costs or {\"REQUESTS\": [costs]}"),
])
def test_a_bad_step_cost_by_batch_size_is_named(step_cost: Any, message: str) -> None:
    with pytest.raises(dd.DraftDepthError, match=re.escape(f"speculative_config.draft_depth.{message}")):
        dd.DraftDepthConfig.from_dict({"policy": "adaptive", "step_cost": step_cost}, 2)


@pytest.mark.parametrize(
    ("raw", "depths", "table"),
    [
        (None, (2,), (2, 2, 2)),  # fixed: vLLM's one graph set; any choice verifies K_max
        ({"policy": "phase"}, (1, 2), (1, 1, 2)),
        ({"policy": "phase", "reasoning_depth": 0}, (0, 2), (0, 2, 2)),
        ({"policy": "phase", "reasoning_depth": 1, "answer_depth": 1}, (1, 2), (1, 1, 2)),
        ({"policy": "adaptive"}, (0, 1, 2), (0, 1, 2)),
        ({"policy": "adaptive", "min_depth": 1}, (1, 2), (1, 1, 2)),
        ({"graph_depths": [2, 0]}, (0, 2), (0, 2, 2)),
    ],
)
def test_verify_depths_and_batch_depth(raw: dict[str, Any] | None, depths: tuple[int, ...], table: tuple[int, ...]) -> None:
    config = dd.DraftDepthConfig.from_dict(raw, 2)
    assert config.verify_depths(2) == depths
    assert dd.batch_depth_table(depths, 2) == table


@pytest.mark.parametrize("bad", [[1], [0, 3], [-1, 2]])
def test_graph_depths_must_include_k_max(bad: list[int]) -> None:
    with pytest.raises(dd.DraftDepthError, match=r"graph_depths=.*: expected depths in 0..2 that include 2"):
        dd.DraftDepthConfig.from_dict({"graph_depths": bad}, 2)


def test_policy_exposes_the_batch_depth_table() -> None:
    policy = by_id({"policy": "phase", "reasoning_depth": 0})
    policy.add("r", [5, THINK], None)
    policy.add("o", [5, THINK], {"draft_depth": 1})  # a client's own depth: no graph at 1
    chosen = max(policy.depth("r"), policy.depth("o"))
    assert (policy.depth("r"), chosen, policy.policy.batch_depth[chosen]) == (0, 1, 2)


def test_groups_follow_each_request_s_phase_and_depth() -> None:
    """The scheduler counts a step by phase from these groups (all but the largest read one by one)."""
    policy = ById(dd.DepthPolicy(dd.PhaseDepth(), 2, dd.PhaseTracker([[1]], [[2]])))
    reasoning, answer = policy.add("r", [5, 1], None), policy.add("a", [1, 2], None)
    assert reasoning.slot != answer.slot
    assert policy.policy.groups == {reasoning.slot: {reasoning}, answer.slot: {answer}}
    policy.on_tokens("r", [2])  # r closes its reasoning: its depth and group are a's now
    assert policy.policy.groups == {answer.slot: {reasoning, answer}}
    policy.forget("a")
    policy.forget("r")
    assert policy.policy.groups == {} and reasoning.slot == -1 and policy.policy.requests == {}


def run_steps(policy: ById, steps: int, watched: Any) -> tuple[list[int], list[int]]:
    """Every request verifies one accepted draft of two each step: how many
    requests decided at the end of each step, and the steps `watched` did."""
    decided, watched_at, ticks = [], [], clock(policy)
    for _ in range(steps):
        for state in policy.policy.requests.values():
            policy.verified(state, 2, 1)
        due = ticks.wakes.get(ticks.steps + 1, [])
        decided.append(sum(state.wake_at == ticks.steps + 1 for state in due))
        before = watched.wake_at
        policy.step()
        if watched.wake_at != before:
            watched_at.append(ticks.steps)
    return decided, watched_at


def test_adaptive_spreads_decisions_and_holds_longer_while_a_choice_holds() -> None:
    """32 requests arriving together decide two a step, not all on one step;
    a request whose choice holds waits 16, 32, then 64 steps; a phase change
    decides at once and brings the wait back to 16."""
    policy = adaptive(step_cost=[1.0, 1.0, 1.0])  # flat: depth 2 wins and stays
    for i in range(32):
        policy.add(f"r{i}", [THINK, END_THINK], None)
    state = policy.policy.requests["r0"]
    decided, watched_at = run_steps(policy, 200, state)
    assert decided[:16] == [2] * 16
    assert state.depth == 2 and watched_at == [16, 48, 112, 176]
    policy.on_tokens("r0", [THINK])  # back to reasoning: decided now, next after 16
    assert state.hold == 16 and state.wake_at == clock(policy).steps + 16
    # untimed depths: some explore a step and decide again, still spread (not 64 on one step)
    exploring = by_id({"policy": "adaptive"})
    for i in range(64):
        exploring.add(f"r{i}", [THINK], None)
    assert max(run_steps(exploring, 200, exploring.policy.requests["r0"])[0]) <= 64 // 4


def test_exploration_allowance_refills_by_engine_steps_not_verifications() -> None:
    """A batch times one verify length a step: with 64 requests verifying
    every step, 64 steps earn 4 exploring steps (one per 16), as with one
    request, on top of the 16 the first arrivals spend."""
    policy = by_id({"policy": "adaptive"})
    for i in range(64):
        policy.add(f"r{i}", [THINK], None)
    states = policy.policy.requests.values()
    explored = sum(state.exploring for state in states)
    for _ in range(64):
        for state in states:
            policy.verified(state, 2, 1)
        policy.step()
        explored += sum(state.exploring for state in states)
    assert explored + clock(policy).explore_left == 16 + 4  # nothing times the untimed depths: refills are spent


def wakes_of(policy: ById, state: Any, steps: int, ran: Any = None) -> int:
    """How many times `state` was looked at in `steps` steps (nothing verified)."""
    looked = 0
    for _ in range(steps):
        before = state.wake_at
        policy.step(ran)
        looked += state.wake_at != before
    return looked


def test_a_request_that_does_not_run_spends_nothing_and_is_seldom_looked_at() -> None:
    """Waiting or preempted (not in the step's output): no exploring step is
    spent on it, and it is looked at once a hold, not every step, even at
    depth 0 where a running request would be probed."""
    explorer = by_id({"policy": "adaptive"})
    waiting = explorer.add("w", [THINK], None)  # untimed depths: it would explore if it ran
    assert not waiting.exploring and clock(explorer).explore_left == 16  # nor while it prefills
    assert wakes_of(explorer, waiting, 160, ran=set()) <= 160 // 16 and clock(explorer).explore_left == 16
    shallow = adaptive(prior_acceptance=0.1)  # CPU costs: depth 0 wins
    idle = shallow.add("i", [THINK], None)
    assert idle.depth == 0
    assert wakes_of(shallow, idle, 160, ran=set()) <= 160 // 8 and idle.depth == 0 and not idle.probing


@pytest.mark.parametrize(("costs", "accepted", "wait"), [
    ([1.0, 2.05, 2.83], 0.42, 63),  # the H200 stand-in, one request reasoning: a probe loses 0.63 of a step
    ([1.0, 1.62, 2.16], 0.42, 20),  # two requests: it loses 0.2 of a step
    ([1.0, 2.05, 2.83], 0.95, 10),  # acceptance rising: probes come sooner
    ([1.0, 1.0, 1.0], 0.3, 8),  # a probe that loses nothing: every probe_interval steps
    ([1.0, 4.0, 6.0], 0.1, 64),  # never later than a steady choice's longest hold (4 x 16)
])
def test_probes_at_depth_0_lose_at_most_one_percent(costs: list[float], accepted: float, wait: int) -> None:
    assert depth_clock.DecisionClock(16, 16, 8).probe_wait(costs, accepted) == wait


def test_probes_wait_for_their_step_under_async_scheduling() -> None:
    """With async scheduling a depth takes effect two steps after it is set; a
    probe at depth 0 must still see its own verification."""
    policy = ById(dd.DepthPolicy(adaptive(prior_acceptance=0.1).policy.config, 2, tracker(), lag=2))
    state = policy.add("a", [THINK], None)
    scheduled = [state.depth, state.depth]  # the two steps already scheduled
    probes = 0
    for _ in range(400):
        depth = scheduled.pop(0)
        probes += depth == 1
        policy.verified(state, depth, 0)  # drafts always rejected: depth 0 stays best
        policy.step()
        scheduled.append(state.depth)
    assert probes >= 4
    assert state.acceptance["reasoning"].counts[0] >= probes - 1  # every probe verified and learned from (the last maybe not yet)
    assert state.depth == 0


def test_acceptance_priors_by_phase_start_an_answering_request_deep_on_a_cheap_depth_0() -> None:
    """bench/results/h200-dsv4-e2e-rest: with DSpark resting, a depth-0 step cost 22.3 ms against 53.8 at
    depth 2 (timed live). At one prior (0.7) for both phases, depth 2 does not pay there for a new answering
    request, which then probes one draft at a time and never learns the second; measure's priors by phase
    (0.39 / 0.89 at depth 2 given, 0.515 / 0.925 a position) start it at depth 2 and a reasoning request at
    depth 0. On that run's measure profile alone (its CPU experts' curve, no GPU rest: depth 2 at 3.18x
    depth 0) depth 0 still wins at 0.925, until depth 2 is timed."""
    costs = [1.0, 42.9 / 22.3, 53.8 / 22.3]
    one = adaptive(step_cost=costs)
    priors = {"reasoning": 0.515, "answer": 0.925}
    by_phase = adaptive(step_cost=costs, prior_acceptance=priors)
    assert one.add("a", [THINK, END_THINK], None).depth == 0
    assert by_phase.add("a", [THINK, END_THINK], None).depth == 2
    assert by_phase.add("r", [THINK], None).depth == 0
    profile_only = adaptive(step_cost=[1.0, 2.275, 3.1775], prior_acceptance=priors)
    assert profile_only.add("a", [THINK, END_THINK], None).depth == 0
