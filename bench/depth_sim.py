#!/usr/bin/env python3
"""Trace-driven simulation of decode with per-request draft depth on a measured step-cost curve, and with overlap.

One request decodes a reasoning section, then its answer. Each step verifies
1 + d tokens; each draft is accepted with the phase's conditional acceptance
(a rejected draft ends the step's accepted prefix); a step costs what the
profile's `measured.step_seconds` says for 1 + d tokens, and each phase's
acceptance at depth K is the profile's `measured.acceptance`.

The profile is one `measure` wrote (`python -m vllm_ds4x measure`, `plan --measure`,
`bash ci/fork-gpu/measure`); by default the committed one of the H200 end-to-end run,
bench/results/h200-e2e/measure.json: the stand-in's bf16 layer through cpu_decode at
LK_THREADS=12, with no GPU side (`gpu_ms` 0), at measure's default acceptance. No
profile of DeepSeek-V4-Flash's MXFP4 layer is committed, so none is the default.

The simulation is the overlay's own (vllm_ds4x/depth/sim.py: the real DepthPolicy,
adaptive learning step costs from the simulated timings as the engine does live), as
`measure` runs it on a machine's own curve.

With `--overlap ubatch` it also predicts CPU-GPU overlap (#20) on the profile's
curve at `--requests` (default 2): a step as two micro-batches whose CPU experts run
one after the other on a side stream while the GPU runs the other's part
(depth_sim.step_ms), against the same step without overlap, per depth (with the
issue's bound, fraction x min(CPU experts, rest), at full and 70% overlap) and
tok/s per policy and phase. The rest of a step is the profile's `gpu_ms` unless
`--gpu-ms` gives it (28.5: the RTX 5090's GPU side of DeepSeek-V4-Flash).

With `--mixed` it also predicts a mixed batch of `--requests` (2: one reasoning and one
answering request; 4: two of each) on the profile's curve, at the profile's acceptance:
every policy as the fork runs it today (the batch verifies the deepest depth any request
chose) against each request verifying its own (one lk_moe call a layer for the step's
tokens), by vllm_ds4x.depth.mixed; the rest of a step as for --overlap.

With `--pool-hit-rate H` (#57) every prediction but --mixed's is made with lk_moe's GPU expert
pool at hit rate H on every lk_moe layer the profile counts: a call of 1 or 2 rows leaves the CPU
(1 - H) of its distinct experts and costs what the curve says for that many (depth_sim.call_ms);
calls of 3+ rows are unchanged, as lk_moe 2.7.4 computes every expert there. 0 (the default) is
the prediction without the pool, unchanged.

    python -m bench.depth_sim [--profile FILE] [--reasoning-tokens 3000 --answer-tokens 800 --seeds 20]
    python -m bench.depth_sim --pool-hit-rate 0.2 [--overlap ubatch]
    python -m bench.depth_sim --overlap ubatch [--requests 2] [--gpu-ms MS ...] [--outside-ms MS] [--ubatch-gpu F]
    python -m bench.depth_sim --mixed [--requests 2] [--gpu-ms MS ...]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import printed
from vllm_ds4x import bounded
from vllm_ds4x.depth import mixed as depth_mixed
from vllm_ds4x.depth import sim

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PROFILE = ROOT / "bench" / "results" / "h200-e2e" / "measure.json"
K_MAX = 2
MAX_K, MAX_GPU_MS = 16, 60000  # measure's bounds (vllm_ds4x.measure.request): depths and ms of a step


def measured(path: Path = DEFAULT_PROFILE) -> dict[str, Any]:
    """The `measured` object of a profile `measure` wrote, its step seconds and acceptance checked
    (ValueError names the file and why)."""
    profile = printed.read_json(path)
    found = profile.get("measured") if isinstance(profile, dict) else None
    if not isinstance(found, dict):
        raise ValueError(f"{path.name}: no \"measured\" object: not a profile plan --measure wrote")
    seconds, acceptance = found.get("step_seconds"), found.get("acceptance")
    if not isinstance(seconds, list) or not 2 <= len(seconds) <= MAX_K + 1 or not all(
            isinstance(s, (int, float)) and not isinstance(s, bool) and s > 0 for s in seconds):
        raise ValueError(f"{path.name}: measured.step_seconds {str(seconds)[:60]}: expected 2..{MAX_K + 1} times "
                         f"above 0")
    if not isinstance(acceptance, dict) or not all(
            isinstance(acceptance.get(p), (int, float)) and 0 < acceptance[p] < 1 for p in sim.PHASES):
        raise ValueError(f"{path.name}: measured.acceptance {str(acceptance)[:60]}: expected rates in (0, 1) for "
                         f"{' and '.join(sim.PHASES)}")
    return dict(found)


def cpu_profile(graph_below_k: bool, in_graph_ms: Sequence[float], eager_ms: Sequence[float],
                gpu_ms: float) -> list[float]:
    """Seconds per step verifying 1..K+1 tokens, from measured CPU curves (ms per
    step) plus `gpu_ms` for the rest of a step. Without graphs below K the shorter
    steps run eagerly: the eager curve, the rest counted as in a graph (a lower
    bound: eager launches come on top)."""
    k = len(in_graph_ms) - 1
    cpu = [in_graph_ms[n] if graph_below_k or n == k else eager_ms[n] for n in range(k + 1)]
    return [(ms + gpu_ms) / 1000 for ms in cpu]


def compare_graph_and_eager(in_graph_ms: Sequence[float], eager_ms: Sequence[float], tokens: dict[str, int],
                            seeds: int, acceptance: dict[str, float], gpu_ms: float) -> None:
    """Policies on a measured CPU curve with a graph at every depth, and eager below K
    (bench/lk_moe_step.py measures both curves)."""
    graph = run("cpu, graph at every depth", cpu_profile(True, in_graph_ms, eager_ms, gpu_ms), tokens, seeds,
                acceptance)
    eager = run("cpu, eager below K", cpu_profile(False, in_graph_ms, eager_ms, gpu_ms), tokens, seeds, acceptance)
    print("\ngraph at every depth vs eager below K, reasoning tok/s:")
    for name in graph:
        print(f"  {name:<10} {graph[name]['reasoning'] / eager[name]['reasoning']:.3f}")


def run(profile: str, costs: list[float], tokens: dict[str, int], seeds: int,
        acceptance: dict[str, float]) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = sim.compare(costs, acceptance, tokens, seeds)
    print(f"\n{profile} profile: step seconds by tokens verified {[round(c, 4) for c in costs]}, "
          f"acceptance at depth {len(costs) - 1} {acceptance}")
    print("\n".join(sim.table(results)))
    k = len(costs) - 1
    gain = results["adaptive"]["reasoning"] / results[f"fixed {k}"]["reasoning"] - 1
    print(f"adaptive vs fixed {k} while reasoning: {gain:+.1%}")
    return results


def overlap(profile: dict[str, Any], args: argparse.Namespace, tokens: dict[str, int]) -> list[str]:
    """depth_sim's overlap report on the profile's curve (see the module's doc)."""
    curve, layers = sim.profile_curve(profile)
    rest = args.gpu_ms or profile["gpu_ms"]
    k = len(profile["step_seconds"]) - 1
    config = sim.Overlap(mode=args.overlap, outside_ms=args.outside_ms, ubatch_gpu=args.ubatch_gpu)
    lines: list[str] = sim.overlap_report(curve, layers, rest, args.requests, k, profile["acceptance"], tokens,
                                          args.seeds, config, pool=pool(profile, args))
    return lines


def pool(profile: dict[str, Any], args: argparse.Namespace) -> sim.Pool:
    """--pool-hit-rate on the profile's curve, read by the distinct experts measure recorded."""
    return sim.Pool(hit_rate=args.pool_hit_rate, distinct=sim.measured_distinct(profile))


def pooled(profile: dict[str, Any], args: argparse.Namespace) -> list[float]:
    """The profile's step seconds (one request), less what the pool at --pool-hit-rate takes off its CPU experts."""
    seconds: list[float] = profile["step_seconds"]
    if not args.pool_hit_rate:
        return seconds
    curve, layers = sim.profile_curve(profile)
    return sim.pooled_seconds(seconds, curve, layers, 1, pool(profile, args))


def mixed(profile: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """depth_mixed's report of a mixed batch of --requests on the profile's curve (see the module's doc)."""
    curve, layers = sim.profile_curve(profile)
    k = len(profile["step_seconds"]) - 1
    lines: list[str] = depth_mixed.report(curve, layers, args.gpu_ms or profile["gpu_ms"], args.requests, k,
                                          profile["acceptance"], sim.policies(k))
    return lines


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reasoning-tokens", type=bounded.count(1, printed.MAX_COUNT), default=3000)
    p.add_argument("--answer-tokens", type=bounded.count(1, printed.MAX_COUNT), default=800)
    p.add_argument("--seeds", type=bounded.count(1, printed.MAX_SEEDS), default=20)
    p.add_argument("--profile", type=Path, default=DEFAULT_PROFILE,
                   help="a profile written by `plan --measure` / `python -m vllm_ds4x measure` "
                        f"(default: {DEFAULT_PROFILE.relative_to(ROOT)})")
    p.add_argument("--overlap", choices=["off", "ubatch"], default="off",
                   help="also predict LVLLM_MOE_OVERLAP=ubatch against off (default off: no overlap lines)")
    p.add_argument("--mixed", action="store_true",
                   help="also predict a mixed batch of --requests, each request's own depth against the deepest")
    p.add_argument("--requests", type=bounded.count(1, printed.MAX_ROUNDS), default=2,
                   help="running requests of the overlap and mixed predictions (default 2)")
    p.add_argument("--gpu-ms", type=bounded.fraction(0, MAX_GPU_MS), nargs="+", metavar="MS",
                   help="the rest of a step for the overlap prediction, one figure or one per depth "
                        "(default: the profile's gpu_ms)")
    p.add_argument("--outside-ms", type=bounded.fraction(0, MAX_GPU_MS), default=sim.OUTSIDE_MS,
                   help=f"ms of the rest that cannot overlap (default {sim.OUTSIDE_MS}: the drafter and the rest "
                        f"outside the decode graph, H200 profile)")
    p.add_argument("--ubatch-gpu", type=bounded.fraction(0.001, 1), default=1.0,
                   help="one micro-batch's GPU part as a fraction of the batch's (default 1.0; 0.5: splitting adds "
                        "no GPU work)")
    p.add_argument("--pool-hit-rate", type=bounded.fraction(0, 1), default=0.0, metavar="H",
                   help="predict with lk_moe's GPU expert pool at this hit rate on every lk_moe layer: calls of 1 or "
                        "2 rows leave the CPU (1 - H) of their distinct experts (default 0: no pool; not --mixed)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.mixed and args.pool_hit_rate:
        p.error("--pool-hit-rate: the --mixed prediction does not model the pool; leave one out")
    try:
        report(args)
    except printed.READ_ERRORS as e:
        return printed.failed(args.profile, e)
    return 0


def report(args: argparse.Namespace) -> None:
    """main's report on --profile; raises one of printed.READ_ERRORS on a profile of another shape."""
    tokens = {"reasoning": args.reasoning_tokens, "answer": args.answer_tokens}
    profile = measured(args.profile)
    print(f"profile: {args.profile} ({profile.get('format')} layer, {profile.get('path')}, "
          f"LK_THREADS={profile.get('lk_threads')}, rest of a step {profile.get('gpu_ms')} ms)")
    try:
        lines = overlap(profile, args, tokens) if args.overlap != "off" else []
        mix = mixed(profile, args) if args.mixed else []
        seconds = pooled(profile, args)
    except KeyError as e:
        raise SystemExit(f"error: {args.profile} has no timing for {e} tokens: measure with --max-num-seqs "
                         f"{args.requests}") from None
    except ValueError as e:
        raise SystemExit(f"error: {args.profile}: {e}") from None
    name = f"measured ({args.profile.name})"
    if args.pool_hit_rate:
        name += f" with the pool at hit rate {args.pool_hit_rate:g} (steps of 1-{sim.POOL_ROWS} rows)"
    run(name, seconds, tokens, args.seeds, profile["acceptance"])
    if lines:
        pooled_at = f" with the pool at hit rate {args.pool_hit_rate:g}" if args.pool_hit_rate else ""
        print(f"\npredicted with CPU-GPU overlap (two micro-batches; depth_sim.step_ms){pooled_at}, " + "\n".join(lines))
    if mix:
        print("\npredicted, " + "\n".join(mix))


if __name__ == "__main__":
    sys.exit(main())
