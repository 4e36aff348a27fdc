#!/usr/bin/env python3
"""Trace-driven simulation of decode with per-request draft depth.

One request decodes a reasoning section, then its answer. Each step verifies
1 + d tokens; each draft is accepted with the phase's conditional acceptance
(a rejected draft ends the step's accepted prefix). A step costs:

  cpu profile:  t_fixed + cpu_layers * E[distinct experts](1+d) * expert_bytes / RAM bandwidth
  gpu profile:  experts resident on the GPU: t0 * (1 + 0.05 * (1+d))

E[distinct experts] and the DeepSeek-V4-Flash shape come from the fork overlay
(moe_placement.py); the policies are the overlay's own DepthPolicy, adaptive
learning step costs from the simulated step timings as the engine does live.
The cpu profile is calibrated so that fixed depth 2 gives the user's figures:
11.9 tok/s while reasoning (39% draft acceptance) and ~17.7 in the answer (89%).

    python bench/depth_sim.py [--reasoning-tokens 3000 --answer-tokens 800 --seeds 20]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ds4x.overlay import load_module  # noqa: E402

dd = load_module("vllm-common/vllm/ds4x/draft_depth.py")
mp = load_module("lvllmds4-x/vllm/ds4x/moe_placement.py")
CONFIG = Path(__file__).resolve().parent.parent / "examples/deepseek-v4-flash/config.json"

K_MAX = 2
USER = {"reasoning": (0.39, 11.9), "answer": (0.89, 17.7)}  # draft acceptance, tok/s at fixed depth 2
THINK, END_THINK, TEXT = 1, 2, 5


def conditional(acceptance: float, k: int = K_MAX) -> float:
    """Per-position acceptance p with mean accepted/drafted = acceptance at depth k
    (accepted = p + p^2 + ... + p^k)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        lo, hi = (p, hi) if sum(p ** i for i in range(1, k + 1)) / k < acceptance else (lo, p)
    return (lo + hi) / 2


def cpu_profile(resident: int = 2, bandwidth: float = 89.6e9) -> list[float]:
    """Seconds per step verifying 1..K_MAX+1 tokens, calibrated to the user's fixed-2 figures."""
    import json

    shape = mp.model_shape(json.loads(CONFIG.read_text()))
    uniform = [1 / shape.n_routed_experts] * shape.n_routed_experts
    cpu_layers = len(shape.moe_layers) - resident

    def experts_s(tokens: int) -> float:
        return cpu_layers * mp.expected_distinct(uniform, tokens, shape.top_k) * shape.expert_bytes / bandwidth

    steps = [(1 + sum(conditional(a) ** i for i in range(1, K_MAX + 1))) / rate for a, rate in USER.values()]
    fixed = sum(steps) / len(steps) - experts_s(K_MAX + 1)  # attention, dense, launch: measured-away rest
    return [fixed + experts_s(n) for n in range(1, K_MAX + 2)]


def gpu_profile(t0: float = 0.012) -> list[float]:
    return [t0 * (1 + 0.05 * n) for n in range(1, K_MAX + 2)]


def simulate(policy_config: dict | None, costs: list[float], tokens: dict[str, int], rng: random.Random) -> dict:
    """Seconds and tokens per phase for one request under one policy."""
    config = dd.DraftDepthConfig.from_dict(policy_config, K_MAX)
    policy = dd.DepthPolicy(config, K_MAX, dd.PhaseTracker([[THINK]], [[END_THINK]]))
    policy.add("req", [TEXT, THINK], None)
    done = {"reasoning": [0, 0.0], "answer": [0, 0.0]}
    for phase in ("reasoning", "answer"):
        p = conditional(USER[phase][0])
        while done[phase][0] < tokens[phase]:
            depth = policy.depth("req")
            accepted = 0
            while accepted < depth and rng.random() < p:
                accepted += 1
            seconds = costs[depth]  # 1 + depth tokens verified
            policy.costs.observe(depth + 1, seconds)
            policy.on_verified("req", depth, accepted)
            done[phase][0] += 1 + accepted
            done[phase][1] += seconds
            policy.on_tokens("req", [TEXT] * (1 + accepted))
        if phase == "reasoning":
            policy.on_tokens("req", [END_THINK])
    return {phase: n / s for phase, (n, s) in done.items()}


POLICIES = {
    "fixed 1": {"policy": "phase", "reasoning_depth": 1, "answer_depth": 1},
    "fixed 2": None,
    "phase 1/2": {"policy": "phase", "reasoning_depth": 1, "answer_depth": 2},
    "adaptive": {"policy": "adaptive"},
}


def run(profile: str, costs: list[float], tokens: dict[str, int], seeds: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    for name, config in POLICIES.items():
        rates = [simulate(config, costs, tokens, random.Random(seed)) for seed in range(seeds)]
        results[name] = {phase: sum(r[phase] for r in rates) / seeds for phase in ("reasoning", "answer")}
    print(f"\n{profile} profile: step seconds by tokens verified {[round(c, 4) for c in costs]}")
    print(f"{'policy':<10} {'reasoning tok/s':>16} {'answer tok/s':>13}   vs best fixed (reasoning, answer)")
    best = {phase: max(results[f"fixed {d}"][phase] for d in (1, 2)) for phase in ("reasoning", "answer")}
    for name, r in results.items():
        print(f"{name:<10} {r['reasoning']:16.2f} {r['answer']:13.2f}   "
              f"{r['reasoning'] / best['reasoning']:.3f}, {r['answer'] / best['answer']:.3f}")
    gain = results["adaptive"]["reasoning"] / results["fixed 2"]["reasoning"] - 1
    print(f"adaptive vs fixed 2 while reasoning: {gain:+.1%}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reasoning-tokens", type=int, default=3000)
    parser.add_argument("--answer-tokens", type=int, default=800)
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    tokens = {"reasoning": args.reasoning_tokens, "answer": args.answer_tokens}
    for phase, (acceptance, rate) in USER.items():
        print(f"user {phase}: draft acceptance {acceptance:.0%} -> per-position {conditional(acceptance):.3f}; "
              f"fixed 2 measured {rate} tok/s")
    run("cpu (2 resident layers, DDR5-5600 x2)", cpu_profile(), tokens, args.seeds)
    run("gpu (all experts resident)", gpu_profile(), tokens, args.seeds)


if __name__ == "__main__":
    main()
