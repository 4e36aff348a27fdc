# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Trace-driven simulation of decode under each draft-depth policy.

For the requests of a batch as the scheduler runs them.

Each request decodes a reasoning section, then its answer; the batch's requests
share a phase. Each step verifies the deepest depth any request chose (rounded up
to a graph depth, as cut_to_batch_depth does), 1 + d tokens each; each draft is
accepted with its phase's conditional acceptance (a rejected draft ends that
request's accepted prefix), and the step costs what the given profile says for
that depth at this batch size. The policies are the real DepthPolicy; adaptive
learns the step costs from the simulated timings as the engine does live. Used by
bench/depth_sim.py, by ``measure`` on a measured curve, and by the end-to-end
benchmark (bench/e2e_decode.py) to be held to what the engine does.

A step's cost with CPU-GPU overlap (#20) comes from the same measured curve: see
``Overlap``, ``step_ms`` and ``overlap_report`` below (bench/depth_sim.py
``--overlap``, ``plan --measure --overlap``). So does its cost with lk_moe's GPU expert
pool at a hit rate (#57): see ``Pool`` and ``call_ms`` (bench/depth_sim.py
``--pool-hit-rate``, bench/e2e_pool.py).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from vllm_ds4x.depth import policy as dd
from vllm_ds4x.depth.named_policies import AdaptiveStart, named_policies

PHASES = ("reasoning", "answer")
THINK, END_THINK, TEXT = 1, 2, 5


def conditional(acceptance: float, k: int) -> float:
    """Per-position acceptance p whose mean accepted/drafted at depth k is
    `acceptance` (accepted = p + p^2 + ... + p^k)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        lo, hi = (p, hi) if sum(p**i for i in range(1, k + 1)) / k < acceptance else (lo, p)
    return (lo + hi) / 2


def policies(k: int, start: AdaptiveStart | None = None) -> dict[str, dict[str, Any] | None]:
    """The draft_depth objects of the named policies (named_policies), by name (`start`: adaptive's)."""
    return {name: policy.draft_depth for name, policy in named_policies(k, start).items()}


def prompt(phase: str) -> list[int]:
    """A simulated request's prompt that starts it in `phase`."""
    return [TEXT, THINK] if phase == "reasoning" else [TEXT, THINK, END_THINK]


def accepted_prefix(depth: int, p: float, rng: random.Random) -> int:
    """Drafts accepted of `depth`, each at conditional acceptance p until the first rejection."""
    accepted = 0
    while accepted < depth and rng.random() < p:
        accepted += 1
    return accepted


def depth_policy(config: Mapping[str, Any] | None, k: int, lag: int = 1) -> dd.DepthPolicy:
    """The real DepthPolicy for `config`, reading a simulated request's phase from THINK / END_THINK."""
    return dd.DepthPolicy(dd.parse_draft_depth(config, k), k, dd.PhaseTracker([[THINK]], [[END_THINK]]), lag)


def simulate(policy_config: dict[str, Any] | None, costs: Sequence[float], acceptance: dict[str, float],
             tokens: dict[str, int], rng: random.Random, requests: int = 1,
             phases: Sequence[str] = PHASES) -> dict[str, float]:
    """Tokens per second in each of `phases` (in order; the requests start in the
    first) for a batch of `requests`, all together; costs[d]: seconds of a step of
    that batch verifying 1 + d tokens a request (d = 0..K). A phase ends when its
    requests made tokens[phase] each."""
    k = len(costs) - 1
    policy = depth_policy(policy_config, k)
    names = [f"req{i}" for i in range(requests)]
    states = [policy.add(name, prompt(phases[0]), None) for name in names]
    done = {phase: [0, 0.0] for phase in phases}
    for phase in phases:
        p = conditional(acceptance[phase], k)
        while done[phase][0] < tokens[phase] * requests:
            depth = policy.batch_depth[max(state.depth for state in states)]
            policy.costs.observe(depth + 1, costs[depth], requests)
            sampled = [1 + accepted_prefix(depth, p, rng) for _ in names]
            done[phase][0] += sum(sampled)
            # what the scheduler hands the strategy after a step (its text tokens hold no marker)
            policy.strategy.learn(names, {name: [TEXT] * depth for name in names} if depth else {}, sampled,
                                  depth or None)
            done[phase][1] += costs[depth]
            policy.strategy.step_ended(None)
        if phase == "reasoning":
            for state in states:
                policy.track_phase(state, [END_THINK], [END_THINK])
    return {phase: n / s for phase, (n, s) in done.items()}


def compare(costs: Sequence[float], acceptance: dict[str, float], tokens: dict[str, int],
            seeds: int, requests: int = 1, phases: Sequence[str] = PHASES,
            start: AdaptiveStart | None = None) -> dict[str, dict[str, float]]:
    """Mean tok/s per phase of every policy, over `seeds` runs (costs: for a
    batch of `requests`; see simulate; `start`: adaptive's, see policies)."""
    results = {}
    for name, config in policies(len(costs) - 1, start).items():
        runs = [simulate(config, costs, acceptance, tokens, random.Random(seed), requests, phases)
                for seed in range(seeds)]
        results[name] = {phase: sum(r[phase] for r in runs) / seeds for phase in phases}
    return results


def table(results: dict[str, dict[str, float]]) -> list[str]:
    """One line per policy: tok/s per phase, and the ratio to the best fixed depth."""
    best = {phase: max(r[phase] for name, r in results.items() if name.startswith("fixed")) for phase in PHASES}
    lines = [f"{'policy':<10} {'reasoning tok/s':>16} {'answer tok/s':>13}   vs best fixed (reasoning, answer)"]
    for name, r in results.items():
        lines.append(f"{name:<10} {r['reasoning']:16.2f} {r['answer']:13.2f}   "
                     f"{r['reasoning'] / best['reasoning']:.3f}, {r['answer'] / best['answer']:.3f}")
    return lines


# ---- a decode step with CPU-GPU overlap (LVLLM_MOE_OVERLAP, #20)

OUTSIDE_MS = 0.57
"""Default ms a step that overlaps nothing: the drafter, the scheduler and the
handoffs outside the decode graph, 0.55-0.58 ms a step with speculation in the
H200 end-to-end profile (bench/results/h200-e2e/timeline.txt, column outside)."""

ONE_REQUEST = ("1 running request: no micro-batches (ubatch splits a step of 2 or more); `shared` hides at most "
               "the shared expert (measured on the H200: no gain), so the model predicts no change")


@dataclass(frozen=True, kw_only=True)
class Overlap:
    """How a decode step's CPU experts and the rest of it overlap."""

    mode: Literal["off", "ubatch"] = "off"
    """off: the CPU experts, then the rest, one after the other (today's model).
    ubatch: a step of 2 or more requests runs as two micro-batches (see step_ms)."""
    outside_ms: float = OUTSIDE_MS
    """ms of the rest of a step that cannot overlap (outside the layers: drafter,
    scheduler, handoffs); everything else of the rest overlaps."""
    ubatch_gpu: float = 1.0
    """One micro-batch's GPU part as a fraction of the whole batch's overlappable
    rest. 1.0: a micro-batch costs the GPU what the batch does, as the GPU side of a
    decode step hardly grows with its requests (H200 stand-in, main stream busy:
    1.81 ms at 1 request, 1.96 at 2) and as measure uses one --gpu-ms at every batch
    size; 0.5: splitting adds no GPU work."""
    max_tokens: int | None = None
    """LVLLM_MOE_UBATCH_TOKENS: a step splits only where a micro-batch holds at
    most this many tokens. None: as measure advises it, from the curve and the
    step's GPU part a layer (ubatch_tokens)."""

    def split_limit(self, curve: Mapping[int, float], hidden_ms: float) -> int:
        """max_tokens, or where it is None what ubatch_tokens advises for a layer's GPU part hidden_ms."""
        return ubatch_tokens(curve, hidden_ms) if self.max_tokens is None else self.max_tokens


def hidden_ms(rest_ms: float, layers: int, outside_ms: float = OUTSIDE_MS) -> float:
    """A layer's share of the rest of a step that can overlap: the GPU work a split may hide."""
    return max(rest_ms - outside_ms, 0.0) / layers


def bound_step_ms(cpu_ms: float, rest_ms: float, fraction: float, outside_ms: float = 0.0) -> float:
    """The issue's target arithmetic: overlap hides `fraction` of the smaller of
    the two parts, the CPU experts or the rest that can overlap."""
    return cpu_ms + rest_ms - fraction * min(cpu_ms, max(rest_ms - outside_ms, 0.0))


def ubatch_tokens(curve: Mapping[int, float], hidden_ms: float) -> int:
    """LVLLM_MOE_UBATCH_TOKENS for a curve of one layer's cpu_decode by tokens:
    the most tokens n a micro-batch may hold while two calls of n cost less than
    one of 2n plus hidden_ms (a layer's GPU work, the most a split hides); 0
    where no split pays. lk_moe's curve is not linear: on the H200 two calls of
    1 token cost less than one of 2, two of 3 more than one of 6."""
    best = 0
    for n in sorted(t for t in curve if 2 * t in curve):
        if 2 * curve[n] >= curve[2 * n] + hidden_ms:
            break
        best = n
    return best


def no_split(hidden_ms: float) -> str:
    """What measure and plan say where ubatch_tokens is 0."""
    return ("two micro-batches do not pay on this curve: two lk_moe calls of n tokens cost more than one of 2n "
            f"plus a layer's GPU part ({hidden_ms:.2f} ms); leave LVLLM_MOE_OVERLAP off")


def pipeline_ms(cpu_ms: Sequence[float], gpu_ms: Sequence[float]) -> float:
    """Two micro-batches A, B through the layers, parts in the order A1 B1 A2 B2 ...
    (part i is micro-batch i % 2's): each part's GPU work gpu_ms[i] on the compute
    stream, then its CPU experts cpu_ms[i] on one side stream. A part starts when
    its stream is free and its micro-batch's previous part is done; the time the
    last CPU part ends. For equal layers: max(sum CPU, sum GPU) + one layer's smaller part."""
    gpu_free = cpu_free = 0.0
    done = [0.0, 0.0]
    for i, (cpu, gpu) in enumerate(zip(cpu_ms, gpu_ms)):
        gpu_free = max(gpu_free, done[i % 2]) + gpu
        cpu_free = max(cpu_free, gpu_free) + cpu
        done[i % 2] = cpu_free
    return cpu_free


# ---- a decode step with lk_moe's GPU expert pool (LK_POOL_SLOTS, #57)

POOL_ROWS = 2
"""vllm_ds4x.moe.pool.POOL_ROWS (depth sits beside moe, importing neither; a test holds them equal)"""

EXPERTS, TOP_K = 256, 6
"""DeepSeek-V4-Flash's routed experts a layer and experts a token (the stand-ins' too)."""


def random_distinct(tokens: int, experts: int = EXPERTS, top_k: int = TOP_K) -> float:
    """Expected distinct experts of a call of `tokens` rows under uniform random routing (each row
    top_k distinct of `experts`): what measure's calls are routed by (6.0 / 11.86 / 17.58 at 1 / 2 / 3
    rows; measure recorded 6.0 / 11.85 / 17.68 on the H200)."""
    return experts * (1 - (1 - top_k / experts) ** tokens)


@dataclass(frozen=True, kw_only=True)
class Pool:
    """lk_moe's GPU expert pool as the step-cost model sees it (call_ms)."""

    hit_rate: float = 0.0
    """The share of a call's distinct experts found in the pool's slots (lk_moe's hit_rate); the GPU
    computes those on a side stream, taken as free beside the CPU. 0: no pool."""
    distinct: Mapping[int, float] | None = None
    """The curve's x axis: distinct experts of measure's calls by tokens (its cases' "distinct"; see
    measured_distinct). None, or a count missing: random_distinct."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.hit_rate <= 1.0:  # NaN fails this too
            raise ValueError(f"pool hit rate {self.hit_rate}: expected a number in [0, 1]")

    def distinct_at(self, tokens: int) -> float:
        """Distinct experts of measure's call of `tokens` rows."""
        found = (self.distinct or {}).get(tokens)
        return float(found) if found is not None else random_distinct(tokens)


NO_POOL = Pool()


def by_distinct(curve: Mapping[int, float], pool: Pool, distinct: float) -> float:
    """ms of a call whose CPU computes `distinct` experts: the curve read by distinct experts (its
    points at pool.distinct_at(tokens)), linear between points, proportional from the origin below
    the first (a call of no CPU experts reads no expert bytes)."""
    points = sorted((pool.distinct_at(t), ms) for t, ms in curve.items())
    x0, y0 = 0.0, 0.0
    for x1, y1 in points:
        if distinct <= x1:
            return y0 + (y1 - y0) * (distinct - x0) / (x1 - x0) if x1 > x0 else y1
        x0, y0 = x1, y1
    raise ValueError(f"{distinct:.1f} distinct experts: beyond the curve's {x0:.1f}")


def call_ms(curve: Mapping[int, float], rows: int, pool: Pool = NO_POOL) -> float:
    """ms of one lk_moe layer's CPU experts for a call of `rows` rows with the pool at its hit rate.

    The curve's x axis is tokens in a call, but a call costs what its distinct experts cost (memory
    traffic, docs: "CPU expert cost grows with distinct experts"): measure routes each token to top-6
    at random, so its 2-token call reads ~11.9 distinct experts, not 12, and its 1-token call 6. A
    call of r <= POOL_ROWS rows at hit rate h leaves the CPU (1 - h) of the call's distinct experts
    (the pool's hits run on the GPU's side stream, roughly free beside the CPU), and costs what the
    curve says for that many distinct experts: interpolated along the curve by distinct experts, not
    scaled. Why interpolated: lk_moe's MXFP4 curve is not proportional (1.82 ms at 6 experts, 4.00 at
    11.9 on the H200: a 2-row call at h = 0.5 costs about the 1-row call, not half the 2-row one), and
    a straight line's fixed part fitted through it is below zero at no experts, so the segment below
    one token runs to the origin (no fixed part: this credits the pool fully at depth 0, where the
    engine's figures may show less). From 3 rows on the CPU computes every expert: curve[rows].
    At h = 0 every call is curve[rows], as it was before the pool."""
    if pool.hit_rate == 0 or rows > POOL_ROWS:
        return curve[rows]
    return by_distinct(curve, pool, (1 - pool.hit_rate) * pool.distinct_at(rows))


def pooled_seconds(seconds: Sequence[float], curve: Mapping[int, float], layers: int, requests: int,
                   pool: Pool) -> list[float]:
    """Measured step seconds by depth (1 + d tokens a request) less what the pool takes off the
    CPU experts of `layers` lk_moe layers: unchanged at h = 0 and for steps of 3+ rows."""
    out = []
    for d, s in enumerate(seconds):
        rows = requests * (d + 1)
        out.append(s - layers * (curve[rows] - call_ms(curve, rows, pool)) / 1000 if rows <= POOL_ROWS else s)
    return out


def measured_distinct(measured: Mapping[str, Any]) -> dict[int, float]:
    """From the `measured` object of a profile measure wrote: the distinct experts of its calls by
    tokens at its LK_THREADS, where it recorded them (profiles before 2026-12 did not)."""
    runs = [run for run in measured["runs"] if run["threads"] == measured["lk_threads"]]
    return {int(case["tokens"]): float(case["distinct"]) for run in runs[:1] for case in run["cases"]
            if "distinct" in case}


def step_ms(curve: Mapping[int, float], layers: int, rest_ms: float, requests: int, tokens: int,
            overlap: Overlap, pool: Pool = NO_POOL) -> float:
    """ms of a step of `requests` verifying `tokens` each; curve: ms of one
    layer's CPU experts by tokens in the call. Off (or one request): one call for
    all the step's tokens a layer, plus the rest. ubatch: each micro-batch (half
    the requests) calls with its own tokens, one call after the other on the side
    stream, while the GPU runs the other's part (pipeline_ms); the rest but
    outside_ms is spread over the layers, ubatch_gpu of it a micro-batch. Each
    call of 1 or 2 rows costs the CPU less with the pool (call_ms)."""
    halves = ((requests + 1) // 2 * tokens, requests // 2 * tokens)
    hidden = hidden_ms(rest_ms, layers, overlap.outside_ms)
    if overlap.mode == "off" or requests < 2 or halves[0] > overlap.split_limit(curve, hidden):
        return call_ms(curve, requests * tokens, pool) * layers + rest_ms
    cpu = [call_ms(curve, halves[i % 2], pool) for i in range(2 * layers)]
    return pipeline_ms(cpu, [hidden * overlap.ubatch_gpu] * (2 * layers)) + rest_ms - hidden * layers


def step_seconds(curve: Mapping[int, float], layers: int, rest_ms: Sequence[float], requests: int, k: int,
                 overlap: Overlap, pool: Pool = NO_POOL) -> list[float]:
    """Seconds a step verifying 1..K+1 tokens a request (depth 0..K); rest_ms:
    one figure for every depth or one per depth (as measure takes --gpu-ms)."""
    rest = per_depth(rest_ms, k)
    return [step_ms(curve, layers, rest[d], requests, d + 1, overlap, pool) / 1000 for d in range(k + 1)]


def per_depth(rest_ms: Sequence[float], k: int) -> list[float]:
    """--gpu-ms as measure takes it: one figure for every depth 0..K, or one per depth."""
    return list(rest_ms) if len(rest_ms) == k + 1 else [rest_ms[0]] * (k + 1)


def run_curve(run: Mapping[str, Any]) -> dict[int, float]:
    """ms of one layer's cpu_decode by tokens, from one LK_THREADS run of measure."""
    return {int(case["tokens"]): float(case["ms"]) for case in run["cases"]}


def measured_curve(measured: Mapping[str, Any]) -> dict[int, float]:
    """From the `measured` object of a profile measure wrote: ms a layer call by
    tokens at its LK_THREADS (the one it advised)."""
    runs = [run for run in measured["runs"] if run["threads"] == measured["lk_threads"]]
    if not runs:
        raise ValueError(f"no run at lk_threads {measured['lk_threads']} in the profile")
    return run_curve(runs[0])


def profile_curve(measured: Mapping[str, Any]) -> tuple[dict[int, float], int]:
    """measured_curve, and the MoE layers the profile's step_seconds count."""
    curve = measured_curve(measured)
    layers = round((measured["step_seconds"][0] * 1000 - measured["gpu_ms"][0]) / curve[1])
    return curve, layers


def step_lines(curve: Mapping[int, float], layers: int, rest_ms: Sequence[float], requests: int, k: int,
               overlap: Overlap, pool: Pool = NO_POOL) -> list[str]:
    """Per depth: the step off, with two micro-batches, and the issue's bound at
    full and 70% overlap (fraction x min(CPU experts, rest that can overlap))."""
    lines = []
    for d, rest in enumerate(per_depth(rest_ms, k)):
        cpu = call_ms(curve, requests * (d + 1), pool) * layers
        off = step_ms(curve, layers, rest, requests, d + 1, Overlap(), pool)
        on = step_ms(curve, layers, rest, requests, d + 1, overlap, pool)
        full, most = (bound_step_ms(cpu, rest, f, overlap.outside_ms) for f in (1.0, 0.7))
        lines.append(f"depth {d}: CPU experts {cpu:.1f} + rest {rest:.1f} = {off:.1f} ms off; two micro-batches "
                     f"{on:.1f} ms (x{off / on:.2f}); bound: full x{off / full:.2f}, 70% x{off / most:.2f}")
    return lines


def overlap_table(off: dict[str, dict[str, float]], on: dict[str, dict[str, float]]) -> list[str]:
    """One line per policy: tok/s per phase off, with overlap, and their ratio."""
    lines = [f"{'policy':<10} {'reasoning off':>14} {'overlap':>8} {'ratio':>6}   "
             f"{'answer off':>11} {'overlap':>8} {'ratio':>6}"]
    for name, r in off.items():
        o = on[name]
        lines.append(f"{name:<10} {r['reasoning']:14.2f} {o['reasoning']:8.2f} "
                     f"{o['reasoning'] / r['reasoning']:6.3f}   {r['answer']:11.2f} {o['answer']:8.2f} "
                     f"{o['answer'] / r['answer']:6.3f}")
    return lines


def overlap_report(curve: Mapping[int, float], layers: int, rest_ms: Sequence[float], requests: int, k: int,
                   acceptance: dict[str, float], tokens: dict[str, int], seeds: int, overlap: Overlap,
                   start: AdaptiveStart | None = None, pool: Pool = NO_POOL) -> list[str]:
    """Steps and tok/s per policy and phase at `requests`, off against `overlap`
    (the micro-batch model; the per-depth lines add the issue's bound; `start`:
    adaptive's, see policies; `pool`: both at its hit rate)."""
    if requests < 2:
        return [ONE_REQUEST]
    hidden = hidden_ms(rest_ms[0], layers, overlap.outside_ms)
    limit = overlap.split_limit(curve, hidden)
    if limit < 1:
        return [no_split(hidden)]
    overlap = replace(overlap, max_tokens=limit)  # every depth modelled at the limit the first line states
    lines = [f"{requests} running requests, LVLLM_MOE_OVERLAP={overlap.mode} LVLLM_MOE_UBATCH_TOKENS={limit} "
             f"(outside the layers {overlap.outside_ms} ms, a micro-batch's GPU part {overlap.ubatch_gpu} of the "
             "batch's):"]
    lines += step_lines(curve, layers, rest_ms, requests, k, overlap, pool)
    results = [compare(step_seconds(curve, layers, rest_ms, requests, k, o, pool), acceptance, tokens, seeds, requests,
                       start=start) for o in (Overlap(), overlap)]
    return lines + overlap_table(*results)
