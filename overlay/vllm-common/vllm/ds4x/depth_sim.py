# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Trace-driven simulation of decode under each draft-depth policy.

For the requests of a batch as the scheduler runs them.

Each request decodes a reasoning section, then its answer; the batch's requests
share a phase. Each step verifies the deepest depth any request chose (rounded up
to a graph depth, as uniform_depth does), 1 + d tokens each; each draft is
accepted with its phase's conditional acceptance (a rejected draft ends that
request's accepted prefix), and the step costs what the given profile says for
that depth at this batch size. The policies are the real DepthPolicy; adaptive
learns the step costs from the simulated timings as the engine does live. Used by
bench/depth_sim.py, by ``measure`` on a measured curve, and by the end-to-end
benchmark (bench/e2e_decode.py) to be held to what the engine does.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from . import draft_depth as dd

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


def policies(k: int) -> dict[str, dict[str, Any] | None]:
    """fixed 0..K, phase 1/K and 0/K, adaptive: the draft_depth objects."""
    named: dict[str, dict[str, Any] | None] = {
        f"fixed {d}": {"policy": "phase", "reasoning_depth": d, "answer_depth": d} for d in range(k)
    }
    named[f"fixed {k}"] = None
    named[f"phase 1/{k}"] = {"policy": "phase", "reasoning_depth": 1, "answer_depth": k}
    named[f"phase 0/{k}"] = {"policy": "phase", "reasoning_depth": 0, "answer_depth": k}
    named["adaptive"] = {"policy": "adaptive", "min_depth": 0}
    return named


def simulate(policy_config: dict[str, Any] | None, costs: Sequence[float], acceptance: dict[str, float],
             tokens: dict[str, int], rng: random.Random, requests: int = 1,
             phases: Sequence[str] = PHASES) -> dict[str, float]:
    """Tokens per second in each of `phases` (in order; the requests start in the
    first) for a batch of `requests`, all together; costs[d]: seconds of a step of
    that batch verifying 1 + d tokens a request (d = 0..K). A phase ends when its
    requests made tokens[phase] each."""
    k = len(costs) - 1
    policy = dd.DepthPolicy(dd.DraftDepthConfig.from_dict(policy_config, k), k,
                            dd.PhaseTracker([[THINK]], [[END_THINK]]))
    names = [f"req{i}" for i in range(requests)]
    prompt = [TEXT, THINK] if phases[0] == "reasoning" else [TEXT, THINK, END_THINK]
    states = [policy.add(name, prompt, None) for name in names]
    done = {phase: [0, 0.0] for phase in phases}
    for phase in phases:
        p = conditional(acceptance[phase], k)
        while done[phase][0] < tokens[phase] * requests:
            depth = policy.batch_depth[max(state.depth for state in states)]
            policy.costs.observe(depth + 1, costs[depth], requests)
            sampled = []
            for _ in names:
                accepted = 0
                while accepted < depth and rng.random() < p:
                    accepted += 1
                sampled.append(1 + accepted)
            done[phase][0] += sum(sampled)
            # what the scheduler hands the strategy after a step (its text tokens hold no marker)
            policy.strategy.learn(names, {name: [TEXT] * depth for name in names} if depth else {}, sampled,
                                  depth or None)
            done[phase][1] += costs[depth]
            policy.strategy.step_ended(None)
        if phase == "reasoning":
            for state in states:
                policy.tokens(state, [END_THINK], [END_THINK])
    return {phase: n / s for phase, (n, s) in done.items()}


def compare(costs: Sequence[float], acceptance: dict[str, float], tokens: dict[str, int],
            seeds: int, requests: int = 1, phases: Sequence[str] = PHASES) -> dict[str, dict[str, float]]:
    """Mean tok/s per phase of every policy, over `seeds` runs (costs: for a
    batch of `requests`; see simulate)."""
    results = {}
    for name, config in policies(len(costs) - 1).items():
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
