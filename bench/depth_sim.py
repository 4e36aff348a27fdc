#!/usr/bin/env python3
"""Trace-driven simulation of decode with per-request draft depth.

One request decodes a reasoning section, then its answer. Each step verifies
1 + d tokens; each draft is accepted with the phase's conditional acceptance
(a rejected draft ends the step's accepted prefix). Step cost by tokens verified:

  cpu profiles: lk_moe's CPU part of a DeepSeek-V4-Flash decode step as measured on
                the H200 host (43 layers, FP4-sized experts, LK_THREADS=12 of 16), in a
                CUDA graph (cpu_decode) and eagerly (_cpu_prefill), plus the GPU side
                the user's fixed-2 step leaves (~153.5 ms - 125.0 ms). "graph at every
                depth" is this patch series; "eager below K" is the fork before it,
                where only 1 + K_max had a graph.
  gpu profile:  experts resident on the GPU: t0 * (1 + 0.05 * (1+d))

The simulation is the overlay's own (vllm/ds4x/depth_sim.py: the real DepthPolicy,
adaptive learning step costs from the simulated timings as the engine does live), as
`measure` runs it on a machine's own curve (--profile reads its file). The graph profile reproduces
the user's fixed-2 figures: 11.9 tok/s reasoning (39% acceptance), ~17.7 answering (89%).

    python bench/depth_sim.py [--reasoning-tokens 3000 --answer-tokens 800 --seeds 20] [--profile FILE]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from ds4x.overlay import load_module

sim = load_module("vllm-common/vllm/ds4x/depth_sim.py")

K_MAX = 2
USER = {"reasoning": (0.39, 11.9), "answer": (0.89, 17.7)}  # draft acceptance, tok/s at fixed depth 2
ACCEPTANCE = {phase: a for phase, (a, _) in USER.items()}

# ms per step of lk_moe's CPU part, 1 / 2 / 3 verified tokens (../DESIGN facts: H200 host, median)
CPU_IN_GRAPH_MS = (41.8, 86.9, 125.0)
CPU_EAGER_PREFILL_MS = (55.1, 92.1, 132.2)
GPU_SIDE_MS = 153.5 - CPU_IN_GRAPH_MS[K_MAX]  # the rest of the user's reported K=2 step (151-156 ms)


def cpu_profile(graph_below_k: bool, in_graph_ms: Sequence[float] = CPU_IN_GRAPH_MS,
                eager_ms: Sequence[float] = CPU_EAGER_PREFILL_MS, gpu_ms: float = GPU_SIDE_MS) -> list[float]:
    """Seconds per step verifying 1..K+1 tokens. Without graphs below K the
    shorter steps run eagerly: _cpu_prefill's curve, GPU side counted as in a
    graph (a lower bound: eager launches come on top)."""
    k = len(in_graph_ms) - 1
    cpu = [in_graph_ms[n] if graph_below_k or n == k else eager_ms[n] for n in range(k + 1)]
    return [(ms + gpu_ms) / 1000 for ms in cpu]


def gpu_profile(t0: float = 0.012) -> list[float]:
    return [t0 * (1 + 0.05 * n) for n in range(1, K_MAX + 2)]


def run(profile: str, costs: list[float], tokens: dict[str, int], seeds: int,
        acceptance: dict[str, float] = ACCEPTANCE) -> dict[str, dict[str, float]]:
    results = sim.compare(costs, acceptance, tokens, seeds)
    print(f"\n{profile} profile: step seconds by tokens verified {[round(c, 4) for c in costs]}")
    print("\n".join(sim.table(results)))
    k = len(costs) - 1
    gain = results["adaptive"]["reasoning"] / results[f"fixed {k}"]["reasoning"] - 1
    print(f"adaptive vs fixed {k} while reasoning: {gain:+.1%}")
    return results


def compare_graph_and_eager(in_graph_ms: Sequence[float], eager_ms: Sequence[float], tokens: dict[str, int],
                            seeds: int) -> None:
    """Policies on a CPU curve with a graph at every depth, and eager below K."""
    graph = run("cpu, graph at every depth", cpu_profile(True, in_graph_ms, eager_ms), tokens, seeds)
    eager = run("cpu, eager below K", cpu_profile(False, in_graph_ms, eager_ms), tokens, seeds)
    print("\ngraph at every depth vs eager below K, reasoning tok/s:")
    for name in graph:
        print(f"  {name:<10} {graph[name]['reasoning'] / eager[name]['reasoning']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reasoning-tokens", type=int, default=3000)
    parser.add_argument("--answer-tokens", type=int, default=800)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--profile", type=Path,
                        help="a profile written by `plan --measure` / `python -m vllm.ds4x measure`: "
                             "its measured step costs instead of the H200 curve")
    args = parser.parse_args()
    tokens = {"reasoning": args.reasoning_tokens, "answer": args.answer_tokens}
    if args.profile:
        measured = json.loads(args.profile.read_text())["measured"]
        acceptance = measured["acceptance"]
        run(f"measured ({args.profile.name})", measured["step_seconds"], tokens, args.seeds, acceptance)
        return
    for phase, (acceptance, rate) in USER.items():
        print(f"user {phase}: draft acceptance {acceptance:.0%} -> per-position "
              f"{sim.conditional(acceptance, K_MAX):.3f}; fixed 2 measured {rate} tok/s")
    compare_graph_and_eager(CPU_IN_GRAPH_MS, CPU_EAGER_PREFILL_MS, tokens, args.seeds)
    run("gpu (all experts resident)", gpu_profile(), tokens, args.seeds)


if __name__ == "__main__":
    main()
