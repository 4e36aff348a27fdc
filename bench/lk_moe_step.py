#!/usr/bin/env python3
"""lk_moe's CPU part of one decode step, per verified tokens (1 + depth), three ways:
inside a CUDA graph (cpu_decode captured on the stream, what depth-aware graphs give
every depth), eager cpu_decode (the fork's eager decode path with our lk_moe patch), and
the eager _cpu_prefill path (stream synchronize and host copies per layer: what a
shorter-depth step ran before). Then the predicted tok/s per policy and phase from
bench/depth_sim.py on the measured curves, at the acceptance of a profile `measure`
wrote (--profile, default bench/depth_sim.py's) and --gpu-ms for the rest of a step
(default 0: the CPU part alone; measure's own default is the RTX 5090's 28.5).

DeepSeek-V4-Flash's shape: 43 MoE layers a step, 256 routed experts, top-6, one request.
Its experts are FP4; this uses MOE_BF16 with hidden 2048 / intermediate 1024, whose bytes
per expert (12.6 MB) equal one FP4 expert of hidden 4096 / intermediate 2048, so memory
traffic per expert matches. One layer (3.2 GiB) is called 43 times a step with fresh
random routing each call, so experts come from DRAM as they would across 43 layers.

Needs a CUDA GPU, torch and lk_moe (cp312). Usage: python -m bench.lk_moe_step [--steps 20] [--gpu-ms MS]
[--profile FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from bench import depth_sim

LAYERS, EXPERTS, TOP_K, HIDDEN, INTER = 43, 256, 6, 2048, 1024


def engine():
    import lk_moe

    from engine.lk_moe_check import config

    cfg = config(EXPERTS, TOP_K, HIDDEN, INTER, max_tokens=64)
    w13 = (torch.randn(EXPERTS, 2 * INTER, HIDDEN) / HIDDEN**0.5).bfloat16()
    w2 = (torch.randn(EXPERTS, HIDDEN, INTER) / INTER**0.5).bfloat16()
    return lk_moe.MOE_BF16(cfg, w13.data_ptr(), w2.data_ptr(), 0, 0, 0, 0), (w13, w2)


class Step:
    """43 routed calls for `tokens` tokens, inputs on the GPU as in the engine."""

    def __init__(self, moe, tokens: int) -> None:
        self.moe, self.n = moe, tokens
        dev = "cuda"
        self.x = torch.randn(tokens, HIDDEN, device=dev).bfloat16()
        self.ids = torch.zeros(LAYERS, tokens, TOP_K, dtype=torch.int32, device=dev)
        self.weights = torch.full((LAYERS, tokens, TOP_K), 1 / TOP_K, device=dev)
        self.out = torch.zeros(64, HIDDEN, device=dev)

    def reroute(self) -> None:
        self.ids.copy_(torch.rand(LAYERS * self.n, EXPERTS, device="cuda").topk(TOP_K).indices.int()
                       .view(LAYERS, self.n, TOP_K))

    def decode(self) -> None:
        stream = torch.cuda.current_stream().cuda_stream
        for layer in range(LAYERS):
            self.moe.cpu_decode(stream, self.n, TOP_K, self.x.data_ptr(), self.ids[layer].data_ptr(),
                                self.weights[layer].data_ptr(), self.out.data_ptr())

    def prefill_path(self) -> None:
        """What routed_experts._cpu_prefill does per layer."""
        for layer in range(LAYERS):
            ids = self.ids[layer].to("cpu", non_blocking=True)
            weights = self.weights[layer].to("cpu", non_blocking=True)
            x = self.x.to("cpu", non_blocking=True)
            out = torch.empty(self.n, HIDDEN)
            torch.cuda.current_stream().synchronize()
            self.moe.cpu_prefill(self.n, TOP_K, ids.data_ptr(), weights.data_ptr(), x.data_ptr(), out.data_ptr())
            self.out[: self.n].copy_(out, non_blocking=True)


def timed(run, reroute, steps: int) -> float:
    samples = []
    for _ in range(steps + 2):
        reroute()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - t0)
    return 1000 * statistics.median(samples[2:])


def measure(steps: int) -> dict[str, list[float]]:
    moe, _weights = engine()
    curves: dict[str, list[float]] = {"in a CUDA graph": [], "eager cpu_decode": [], "eager _cpu_prefill": []}
    for tokens in range(1, depth_sim.K_MAX + 2):
        step = Step(moe, tokens)
        step.reroute()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            step.decode()  # warm-up outside capture
            torch.cuda.synchronize()
            with torch.cuda.graph(graph, stream=stream):
                step.decode()
        curves["in a CUDA graph"].append(timed(graph.replay, step.reroute, steps))
        curves["eager cpu_decode"].append(timed(step.decode, step.reroute, steps))
        curves["eager _cpu_prefill"].append(timed(step.prefill_path, step.reroute, steps))
    return curves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--gpu-ms", type=float, default=0.0, help="the rest of a step, ms (default 0)")
    parser.add_argument("--profile", type=Path, default=depth_sim.DEFAULT_PROFILE,
                        help="a profile `measure` wrote: its acceptance per phase")
    args = parser.parse_args()
    print(f"lk_moe CPU part of a step: {LAYERS} layers, {EXPERTS} experts, top-{TOP_K}, "
          f"LK_THREADS={os.environ.get('LK_THREADS', 'lk_moe default')}, median of {args.steps} steps")
    curves = measure(args.steps)
    print(f"{'ms per step':<20}" + "".join(f"{f'{n} token(s)':>12}" for n in range(1, depth_sim.K_MAX + 2)))
    for name, ms in curves.items():
        print(f"{name:<20}" + "".join(f"{v:12.1f}" for v in ms))
    baseline = curves["eager _cpu_prefill"]
    for name in ("in a CUDA graph", "eager cpu_decode"):
        print(f"{name} vs eager _cpu_prefill: " + ", ".join(f"{b / v:.2f}x" for v, b in zip(curves[name], baseline)))
    tokens = {"reasoning": 3000, "answer": 800}
    acceptance = depth_sim.measured(args.profile)["acceptance"]
    depth_sim.compare_graph_and_eager(curves["in a CUDA graph"], baseline, tokens, args.seeds, acceptance, args.gpu_ms)


if __name__ == "__main__":
    main()
