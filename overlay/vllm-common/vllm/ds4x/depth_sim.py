# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Trace-driven simulation of one request's decode under each draft-depth policy.

The request decodes a reasoning section, then its answer. Each step verifies
1 + d tokens; each draft is accepted with its phase's conditional acceptance (a
rejected draft ends the step's accepted prefix), and the step costs what the
given profile says for 1 + d tokens. The policies are the real DepthPolicy;
adaptive learns the step costs from the simulated timings as the engine does
live. Used by bench/depth_sim.py and by ``measure`` on a measured curve.
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
             tokens: dict[str, int], rng: random.Random) -> dict[str, float]:
    """Tokens per second in each phase for one request; costs[d]: seconds of a
    step verifying 1 + d tokens (d = 0..K)."""
    k = len(costs) - 1
    policy = dd.DepthPolicy(dd.DraftDepthConfig.from_dict(policy_config, k), k,
                            dd.PhaseTracker([[THINK]], [[END_THINK]]))
    policy.add("req", [TEXT, THINK], None)
    done = {phase: [0, 0.0] for phase in PHASES}
    for phase in PHASES:
        p = conditional(acceptance[phase], k)
        while done[phase][0] < tokens[phase]:
            depth = policy.depth("req")
            accepted = 0
            while accepted < depth and rng.random() < p:
                accepted += 1
            policy.costs.observe(depth + 1, costs[depth])
            policy.on_verified("req", depth, accepted)
            done[phase][0] += 1 + accepted
            done[phase][1] += costs[depth]
            policy.on_tokens("req", [TEXT] * (1 + accepted))
            policy.step()
        if phase == "reasoning":
            policy.on_tokens("req", [END_THINK])
    return {phase: n / s for phase, (n, s) in done.items()}


def compare(costs: Sequence[float], acceptance: dict[str, float], tokens: dict[str, int],
            seeds: int) -> dict[str, dict[str, float]]:
    """Mean tok/s per phase of every policy, over `seeds` runs."""
    results = {}
    for name, config in policies(len(costs) - 1).items():
        runs = [simulate(config, costs, acceptance, tokens, random.Random(seed)) for seed in range(seeds)]
        results[name] = {phase: sum(r[phase] for r in runs) / seeds for phase in PHASES}
    return results


def table(results: dict[str, dict[str, float]]) -> list[str]:
    """One line per policy: tok/s per phase, and the ratio to the best fixed depth."""
    best = {phase: max(r[phase] for name, r in results.items() if name.startswith("fixed")) for phase in PHASES}
    lines = [f"{'policy':<10} {'reasoning tok/s':>16} {'answer tok/s':>13}   vs best fixed (reasoning, answer)"]
    for name, r in results.items():
        lines.append(f"{name:<10} {r['reasoning']:16.2f} {r['answer']:13.2f}   "
                     f"{r['reasoning'] / best['reasoning']:.3f}, {r['answer'] / best['answer']:.3f}")
    return lines
