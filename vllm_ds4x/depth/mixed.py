# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""A mixed decode batch on a step-cost curve: each request verifying its own depth against today's deepest for all.

Today a decode batch verifies one depth, the deepest any of its requests chose
(rounded up to a graph depth), so a reasoning request beside an answering one
verifies the answer's drafts, and lk_moe pays the experts of every one of them.
Per request, each verifies what it chose: the step's tokens are the sum of
1 + d over its requests. Both are priced here by expectation: a request's
tokens a step are depth_estimates' expected accepted prefix (plus the bonus
token) at its phase's conditional acceptance (depth_sim.conditional), and the
steady rate is the batch's expected tokens over the step's seconds.

Step costs: `uniform_cost` prices today's batch from the seconds of a uniform
step by depth (as measured, or depth_sim.step_seconds on a curve); `curve_cost`
prices per-request depths as one lk_moe call a layer for all the step's tokens
(the curve, linearly interpolated between timed token counts) plus the rest of
the step at the deepest depth (the GPU runs the full query length when
unverified slots are masked; variable-length graphs would cost less there).

Choices: a phase policy's depth by phase (its parsed config, rounded up to its
graph depths); adaptive-like, today: each request's own best depth on the
uniform step costs of its batch size (depth_estimates.best_depth, as adaptive
decides without its hysteresis and probes), the batch then verifying the
deepest; per request: the combination of depths with the most expected tokens
a second (what a decider of the whole batch's budget would choose). Used by
bench/depth_sim.py --mixed, measure (plan --measure) and bench/e2e_decode.py.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllm_ds4x.depth import policy as dd
from vllm_ds4x.depth.config import parse_draft_depth
from vllm_ds4x.depth.estimates import best_depth, expected_tokens_by_depth
from vllm_ds4x.depth.phase_tracker import ANSWER, PHASES, REASONING
from vllm_ds4x.depth.policy import batch_depth_table
from vllm_ds4x.depth.sim import (
    TEXT,
    Overlap,
    accepted_prefix,
    conditional,
    depth_policy,
    per_depth,
    prompt,
    step_seconds,
)

MIXED_BATCHES = (2, 4)
"""the mixed batches the benchmark runs: one reasoning and one answering request, and two of each"""

Cost = Callable[[Sequence[int]], float]
"""seconds of a decode step whose requests verify these depths (one per request)"""


def mixed_batches(max_num_seqs: int) -> list[int]:
    """The mixed batch sizes that fit --max-num-seqs (none below 2)."""
    return [n for n in MIXED_BATCHES if n <= max_num_seqs]


def mix(requests: int) -> tuple[str, ...]:
    """The phases of a mixed batch of `requests`: half reasoning (rounded down), the rest answering."""
    if requests < 2:
        raise ValueError(f"a mixed batch needs 2 or more requests, got {requests}")
    return (REASONING,) * (requests // 2) + (ANSWER,) * (requests - requests // 2)


def positions(acceptance: float, k: int) -> list[float]:
    """Conditional acceptance at each of k draft positions for vLLM's accepted / drafted
    `acceptance` at depth k (one rate at every position, as depth_sim draws it)."""
    if not 0.0 < acceptance <= 1.0:
        raise ValueError(f"acceptance {acceptance}: expected a fraction in (0, 1]")
    return [conditional(acceptance, k)] * k


def tokens_by_depth(acceptance: float, k: int) -> list[float]:
    """A request's expected tokens a step at each depth 0..k (bonus token and accepted prefix)."""
    return expected_tokens_by_depth(positions(acceptance, k), k)


def curve_ms(curve: Mapping[int, float], tokens: int) -> float:
    """ms of one layer's lk_moe call for `tokens`: the curve's own timing, or linear between
    the nearest timed counts around it; outside the timed range a ValueError naming it."""
    if tokens in curve:
        return float(curve[tokens])
    below = [t for t in curve if t < tokens]
    above = [t for t in curve if t > tokens]
    if not below or not above:
        raise ValueError(f"no timing for {tokens} tokens: the curve has {sorted(curve)}")
    lo, hi = max(below), min(above)
    return curve[lo] + (curve[hi] - curve[lo]) * (tokens - lo) / (hi - lo)


def interpolated(curve: Mapping[int, float], tokens: Sequence[int]) -> list[int]:
    """Which of these token counts curve_ms interpolates (not timed), ascending."""
    return sorted({t for t in tokens if t not in curve})


def uniform_cost(seconds: Sequence[float]) -> Cost:
    """Today's batch: every request verifies the deepest depth; seconds[d]: a uniform step at depth d."""
    return lambda depths: seconds[max(depths)]


def curve_cost(curve: Mapping[int, float], layers: int, rest_ms: Sequence[float], k: int) -> Cost:
    """Per-request depths: one call a layer for all the step's tokens (sum of 1 + d), plus the
    rest of the step (one figure, or one per depth 0..k) at the deepest depth."""
    rest = per_depth(rest_ms, k)
    return lambda depths: (curve_ms(curve, sum(1 + d for d in depths)) * layers + rest[max(depths)]) / 1000


@dataclass(frozen=True, kw_only=True)
class Batch:
    """One way to run a mixed batch: the depth each request verifies, and its steady rates."""

    phases: tuple[str, ...]
    depths: tuple[int, ...]
    tokens: tuple[float, ...]
    """expected tokens a step, per request"""
    step_s: float

    @property
    def tok_s(self) -> float:
        """Steady decode tok/s summed over the batch."""
        return sum(self.tokens) / self.step_s

    def phase_tok_s(self, phase: str) -> float:
        """Steady tok/s of the batch's requests in `phase`, together."""
        return sum(t for p, t in zip(self.phases, self.tokens) if p == phase) / self.step_s


def batch(phases: Sequence[str], depths: Sequence[int], gains: Mapping[str, Sequence[float]], cost: Cost) -> Batch:
    """The batch verifying `depths` (one per request), `gains[phase]` a request's tokens by depth."""
    tokens = tuple(gains[p][d] for p, d in zip(phases, depths))
    return Batch(phases=tuple(phases), depths=tuple(depths), tokens=tokens, step_s=cost(depths))


def best_combination(phases: Sequence[str], gains: Mapping[str, Sequence[float]], cost: Cost,
                     candidates: Sequence[int]) -> tuple[int, ...]:
    """Per-request depths with the most expected tokens a second, each one of `candidates`;
    requests of one phase (one acceptance) choose alike, so a batch of any size weighs
    len(candidates) ** phases choices. The shallower on a tie (candidates ascending)."""
    kinds = list(dict.fromkeys(phases))
    best, rate = tuple(candidates[0] for _ in phases), -1.0
    for choice in itertools.product(candidates, repeat=len(kinds)):
        depth = dict(zip(kinds, choice))
        depths = tuple(depth[p] for p in phases)
        got = sum(gains[p][d] for p, d in zip(phases, depths)) / cost(depths)
        if got > rate:
            best, rate = depths, got
    return best


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """A policy on a mixed batch: today's batch-uniform depth against each request's own."""

    uniform: Batch
    per_request: Batch

    @property
    def gain(self) -> float:
        return self.per_request.tok_s / self.uniform.tok_s


def compare(config: Mapping[str, Any] | None, phases: Sequence[str], acceptance: Mapping[str, float], k: int,
            seconds: Sequence[float], per_request: Cost) -> Comparison:
    """One policy on a mixed batch of `phases`: today (each request's choice, rounded up to the
    policy's graph depths; the batch verifies the deepest, uniform steps `seconds` by depth)
    against per request (`per_request` prices its depths). Adaptive-like: today each request's
    best depth on `seconds`, per request the best combination of its graph depths."""
    parsed = parse_draft_depth(config, k)
    graphs = parsed.verify_depths(k)
    rates = {p: positions(acceptance[p], k) for p in set(phases)}
    gains = {p: expected_tokens_by_depth(r, k) for p, r in rates.items()}
    fixed = [parsed.phase_depth(p, k) for p in phases]
    if None in fixed:  # adaptive: each request's own estimate decides
        own = [best_depth(rates[p], seconds, graphs)[0] for p in phases]
        mine = best_combination(phases, gains, per_request, graphs)
    else:
        rounded = batch_depth_table(graphs, k)
        own = [rounded[d] for d in fixed if d is not None]
        mine = tuple(own)
    today = batch(phases, [max(own)] * len(phases), gains, uniform_cost(seconds))
    return Comparison(uniform=today, per_request=batch(phases, mine, gains, per_request))


def compare_policies(policies: Mapping[str, Mapping[str, Any] | None], phases: Sequence[str],
                     acceptance: Mapping[str, float], k: int, seconds: Sequence[float],
                     per_request: Cost) -> dict[str, Comparison]:
    """compare for every named policy (name -> draft_depth object), in order."""
    return {name: compare(config, phases, acceptance, k, seconds, per_request) for name, config in policies.items()}


def table(results: Mapping[str, Comparison]) -> list[str]:
    """One line per policy: depths and tok/s today and per request, the gain, and per request each phase's tok/s."""
    lines = [f"{'policy':<10} {'today':>7} {'tok/s':>7}   {'own':>7} {'tok/s':>7} {'gain':>6}   "
             f"{'reasoning':>9} {'answer':>7}"]
    for name, c in results.items():
        today, own = c.uniform, c.per_request
        lines.append(f"{name:<10} {depths_text(today.depths):>7} {today.tok_s:7.2f}   {depths_text(own.depths):>7} "
                     f"{own.tok_s:7.2f} {c.gain:6.3f}   {own.phase_tok_s(REASONING):9.2f} "
                     f"{own.phase_tok_s(ANSWER):7.2f}")
    return lines


def depths_text(depths: Sequence[int]) -> str:
    """Depths per request as the tables print them: 0+2, 0+0+2+2; beyond 4 requests by runs, 3x0+5x2."""
    if len(depths) <= 4:
        return "+".join(map(str, depths))
    return "+".join(f"{len(list(run))}x{d}" for d, run in itertools.groupby(depths))


def heading(phases: Sequence[str], acceptance: Mapping[str, float], k: int) -> str:
    """What a mixed table prices: the batch and each phase's acceptance at depth k."""
    counts = ", ".join(f"{phases.count(p)} {p} (acceptance {acceptance[p]:.0%} at depth {k})" for p in PHASES)
    return (f"mixed batch of {len(phases)}: {counts}; depths per request today (the deepest, for all) and "
            "each request's own (per request), steady tok/s summed over the batch")


def best_batches(phases: Sequence[str], acceptance: Mapping[str, float], k: int, seconds: Sequence[float],
                 per_request: Cost) -> tuple[Batch, Batch]:
    """The bounds of any policy: the best one depth for the whole batch (today), and the best
    combination of per-request depths, over depths 0..k."""
    gains = {p: tokens_by_depth(acceptance[p], k) for p in set(phases)}
    uniform = uniform_cost(seconds)
    depth = max(range(k + 1), key=lambda d: batch(phases, [d] * len(phases), gains, uniform).tok_s)
    own = best_combination(phases, gains, per_request, range(k + 1))
    return batch(phases, [depth] * len(phases), gains, uniform), batch(phases, own, gains, per_request)


def report(curve: Mapping[int, float], layers: int, rest_ms: Sequence[float], requests: int, k: int,
           acceptance: Mapping[str, float], policies: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """The mixed batch of `requests` on a curve (ms a layer call by tokens; `layers` calls a step,
    plus `rest_ms`): every policy today and per request, and the best of each (prediction)."""
    phases = mix(requests)
    if missing := sorted({requests * (d + 1) for d in range(k + 1)} - set(curve)):
        raise ValueError(f"no timing for {missing} tokens: measure with --max-num-seqs {requests}")
    seconds = step_seconds(curve, layers, rest_ms, requests, k, Overlap())
    cost = curve_cost(curve, layers, rest_ms, k)
    results = compare_policies(policies, phases, acceptance, k, seconds, cost)
    today, own = best_batches(phases, acceptance, k, seconds, cost)
    guessed = interpolated(curve, range(requests, requests * (k + 1) + 1))
    return [heading(phases, acceptance, k), *table(results),
            f"best one depth for the batch {depths_text(today.depths)}: {today.tok_s:.2f} tok/s; best depths per "
            f"request {depths_text(own.depths)}: {own.tok_s:.2f} tok/s ({own.tok_s / today.tok_s:.3f}x)",
            "per request: one lk_moe call a layer for the step's tokens, the rest at the deepest depth"
            + (f"; {', '.join(map(str, guessed))} tokens interpolated on the curve" if guessed else ""),
            *([adaptive_simulated(policies["adaptive"], phases, acceptance, k, seconds, cost)]
              if "adaptive" in policies else [])]


@dataclass(frozen=True, kw_only=True)
class Run:
    """A simulated mixed batch: tokens made and seconds spent, and the steps by depths verified."""

    tokens: dict[str, int]
    """by phase"""
    seconds: float
    steps: Counter[tuple[int, ...]]

    @property
    def tok_s(self) -> float:
        return sum(self.tokens.values()) / self.seconds


def simulate(config: Mapping[str, Any] | None, phases: Sequence[str], acceptance: Mapping[str, float], k: int,
             cost: Cost, steps: int, rng: random.Random) -> Run:
    """A mixed batch of `phases` (one request each, in that phase throughout) for `steps` decode
    steps under the real DepthPolicy: each request verifies its own rounded depth (draft_depth
    verify "request") or the batch's deepest; each draft accepted at its phase's conditional
    acceptance at depth k; a step costs `cost` of the depths verified, and the policy's step
    costs time every step by the tokens each request verified (the scheduler, StepTimer, skips
    a step that admitted a request)."""
    policy = depth_policy(config, k)
    names = [f"req{i}" for i in range(len(phases))]
    states = [policy.add(name, prompt(phase), None) for name, phase in zip(names, phases)]
    rates = {p: conditional(acceptance[p], k) for p in set(phases)}
    made, seconds = dict.fromkeys(PHASES, 0), 0.0
    counts: Counter[tuple[int, ...]] = Counter()
    for _ in range(steps):
        depths = verified_depths(policy, [state.depth for state in states])
        sampled, step_s = verify_step(policy, names, [rates[p] for p in phases], depths, cost, rng)
        for phase, n in zip(phases, sampled):
            made[phase] += n
        seconds += step_s
        counts[depths] += 1
        policy.strategy.step_ended(None)
    return Run(tokens=made, seconds=seconds, steps=counts)


def verified_depths(policy: dd.DepthPolicy, chosen: Sequence[int]) -> tuple[int, ...]:
    """The drafts each request verifies in a step, from the depths its requests chose: each rounded to
    a graph depth, then each its own (draft_depth verify "request") or all the deepest (today)."""
    own = [policy.batch_depth[d] for d in chosen]
    return tuple(own) if policy.config.verify == "request" else (max(own),) * len(own)


def verify_step(policy: dd.DepthPolicy, names: Sequence[str], rates: Sequence[float],
                depths: tuple[int, ...], cost: Cost, rng: random.Random,
                room: Sequence[int] | None = None) -> tuple[list[int], float]:
    """One decode step of requests `names` verifying `depths` drafts each, as the scheduler shows it
    to `policy`: timed by the tokens each verified, each request's accepted prefix drawn at its
    conditional `rates` (no more tokens than its `room` left under max_tokens), then learned. The
    tokens each sampled, and the step's seconds."""
    seconds = cost(depths)
    policy.costs.observe_step([1 + d for d in depths], seconds)
    sampled = [1 + accepted_prefix(d, r, rng) for d, r in zip(depths, rates)]
    if room is not None:
        sampled = [min(n, left) for n, left in zip(sampled, room)]
    drafted = depths[0] if len(set(depths)) == 1 and depths[0] else None  # a uniform step drafted for all
    policy.strategy.learn(names, {n: [TEXT] * d for n, d in zip(names, depths) if d}, sampled, drafted)
    return sampled, seconds


def simulate_seeds(config: Mapping[str, Any] | None, phases: Sequence[str], acceptance: Mapping[str, float],
                   k: int, cost: Cost, steps: int, seeds: int) -> tuple[float, Counter[tuple[int, ...]]]:
    """simulate with seeds 0..seeds-1: the mean tok/s, and all their steps by the depths verified."""
    runs = [simulate(config, phases, acceptance, k, cost, steps, random.Random(seed)) for seed in range(seeds)]
    return sum(run.tok_s for run in runs) / seeds, sum((run.steps for run in runs), Counter())


SIMULATED_STEPS, SIMULATED_RUNS = 400, 4
"""adaptive_simulated's runs: steps each (its decisions settle within a few holds), and how many"""


def adaptive_simulated(config: Mapping[str, Any] | None, phases: Sequence[str], acceptance: Mapping[str, float],
                       k: int, seconds: Sequence[float], per_request: Cost) -> str:
    """The adaptive policy itself (its holds, probes and live step costs) on the mixed batch, today
    and with verify "request" (simulate; uniform steps `seconds` by depth, mixed ones `per_request`):
    steady tok/s over SIMULATED_RUNS runs, and the depths it ran most."""
    def cost(depths: Sequence[int]) -> float:
        return seconds[depths[0]] if len(set(depths)) == 1 else per_request(depths)

    def runs(verify: str) -> tuple[float, str]:
        tok_s, steps = simulate_seeds({**(config or {}), "verify": verify}, phases, acceptance, k, cost,
                                      SIMULATED_STEPS, SIMULATED_RUNS)
        (most, n), = steps.most_common(1)
        return tok_s, f"{depths_text(most)} in {n / steps.total():.0%} of steps"

    (today, today_most), (own, own_most) = runs("batch"), runs("request")
    return (f"adaptive itself, simulated ({SIMULATED_RUNS} runs of {SIMULATED_STEPS} steps): today {today:.2f} tok/s "
            f"({today_most}); per request {own:.2f} tok/s ({own_most}; {own / today:.3f}x)")
