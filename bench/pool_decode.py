#!/usr/bin/env python3
"""lk_moe's GPU expert pool against the CPU alone, on one DeepSeek-V4-Flash routed-expert layer.

Two lk_moe 2.7 engines over the same random MXFP4 layer (256 experts, top-6, hidden 4096,
intermediate 2048, distinct weights and scales per expert): `cpu`, no pool, and `pool`, built and
driven by vllm_ds4x.hooks.moe_pool as the fork's engine builds and drives it (LK_POOL_SLOTS slots,
the GPU half on lk_moe's Triton kernels beside cpu_decode). Each step is one request's verify
batch of 1, 2 or 3 rows (depths 0, 1, 2 in turn; every 7th step of 3 rows has its last row masked
to expert -1, as per-request verify masks it), routed by engine.locality's Router at each
locality. Both engines run every step on the same inputs, in alternating order, each timed from
launch to its stream's end (the pool's GPU half included), then --gap-ms idle (the time the model's
other layers take, in which lk_moe's pump copies experts). The pool's GPU half runs for steps of at
most 2 rows (moe_pool.POOL_ROWS), so depth 2's ratio is the CPU alone's against itself.

Checks, each a line `check NAME: ok|FAILED ...`; any failure exits 1:
  empty     the pool's first step, before any slot landed, equals the CPU's exactly
  agree     every step within fp32 tolerance of the CPU's (the GPU half sums in another order)
  masked    a masked row's output is exactly zero on both engines
  once      lk_moe's own exactly-once counters: cover_miss and cover_dup stay 0
  graph     the pool's call captured in a CUDA graph (the DMA worker parked) and replayed with
            new routing agrees with the CPU's as well
Figures per locality: the router's measured reuse and distinct experts per step, the pool's hit
rate and pumps (lk_moe's pool_stats), and ms per step for each engine with quartiles, and the
ratio pool/cpu per depth (paired by step); `again` times the CPU engine twice on the same steps,
the run's noise floor.

Runs in the Python with lk_moe >= 2.7, torch and Triton, on a GPU, from the checkout root:
  LK_THREADS=12 python -m bench.pool_decode [--slots 12] [--steps 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from types import SimpleNamespace
from typing import Any

import numpy as np

from engine.locality import Router, measured

EXPERTS, TOP_K, HIDDEN, INTER, GROUP = 256, 6, 4096, 2048, 32
MAX_ROWS = 8
LOCALITIES = {"random": (0.0, 0.0), "r0.38": (0.38, 0.8), "r0.6": (0.6, 0.8)}  # (reuse, Zipf skew)
AGREE = 1e-2  # max |pool - cpu| / max |cpu| per step: lk_moe's CPU and GPU halves round differently


def weights(seed: int) -> tuple[np.ndarray, ...]:
    """MXFP4 codes and e8m0 scales, distinct per expert (a wrong slot or scale shows)."""
    rng = np.random.default_rng(seed)
    w13 = rng.integers(0, 256, (EXPERTS, 2 * INTER, HIDDEN // 2), np.uint8)
    w2 = rng.integers(0, 256, (EXPERTS, HIDDEN, INTER // 2), np.uint8)
    s13 = rng.integers(116, 121, (EXPERTS, 2 * INTER, HIDDEN // GROUP), np.uint8)
    s2 = rng.integers(116, 121, (EXPERTS, HIDDEN, INTER // GROUP), np.uint8)
    return w13, w2, s13, s2


def config() -> Any:
    import lk_moe

    cfg = lk_moe.MOEConfigV2()  # the fields Lvllmds4-x's routed_experts.py sets, as it sets them
    cfg.num_processes, cfg.process_id, cfg.gpu_id = 1, 0, 0
    cfg.has_gate_proj, cfg.expert_num, cfg.top_k = True, EXPERTS, TOP_K
    cfg.hidden_size, cfg.intermediate_size = HIDDEN, INTER
    cfg.max_num_seqs, cfg.max_batch_size = MAX_ROWS, 8192
    cfg.stride, cfg.group_min_len, cfg.group_max_len = 32, 10, 4224
    cfg.groupN, cfg.groupK = 1, GROUP
    cfg.activation_type, cfg.use_gpu_prefill = 0, False
    return cfg


def engines(arrays: tuple[np.ndarray, ...]) -> tuple[SimpleNamespace, SimpleNamespace]:
    """(cpu, pool): the same layer twice, the second through moe_pool as the fork's layer 1."""
    import lk_moe

    from vllm_ds4x.hooks import moe_pool

    ptrs = [a.ctypes.data for a in arrays]
    cpu = SimpleNamespace(lk_moe=lk_moe.MOE_MXFP4(config(), *ptrs, 0, 0), layer_name="model.layers.0.ffn.experts")
    cfg = config()
    moe_pool.configure(cfg, "model.layers.1.ffn.experts", is_draft=False)
    pool = SimpleNamespace(lk_moe=lk_moe.MOE_MXFP4(cfg, *ptrs, 0, 0), lk_moe_config=cfg,
                           layer_name="model.layers.1.ffn.experts")
    moe_pool.attach(pool, is_draft=False)
    return cpu, pool


class Step:
    """One step's inputs on the GPU and each engine's output rows."""

    def __init__(self, ids: np.ndarray, rng: np.random.Generator) -> None:
        import torch

        rows = ids.shape[0]
        w = rng.random(ids.shape).astype(np.float32)
        w = np.where(ids >= 0, w / w.sum(1, keepdims=True), 0.0).astype(np.float32)
        self.ids = torch.from_numpy(ids).cuda()
        self.w = torch.from_numpy(w).cuda()
        self.x = (torch.randn(rows, HIDDEN) * 0.5).bfloat16().cuda()


def call(engine: SimpleNamespace, step: Step, out: Any, stream: Any) -> float:
    """ms from launch to the stream's end; `out` holds the rows."""
    import torch

    from vllm_ds4x.hooks import moe_pool

    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.cuda.stream(stream):
        moe_pool.cpu_decode(engine, stream, step.x, step.ids, step.w, out[: step.x.size(0)])
    stream.synchronize()
    return (time.perf_counter() - start) * 1e3


def rel(a: Any, b: Any) -> float:
    scale = float(b.abs().max())
    return float((a - b).abs().max()) / scale if scale else float((a - b).abs().max())


def quartiles(values: list[float]) -> list[float]:
    return [round(float(q), 3) for q in np.percentile(values, [25, 50, 75])] if values else []


def locality_run(cpu: SimpleNamespace, pool: SimpleNamespace, name: str, steps: int, warm: int, gap_ms: float,
                 checks: dict[str, list[str]]) -> dict[str, Any]:
    import lk_moe
    import torch

    reuse, skew = LOCALITIES[name]
    router = Router(EXPERTS, TOP_K, skew=skew, reuse=reuse, seed=7)
    rng = np.random.default_rng(11)
    stream = torch.cuda.Stream()
    out_cpu = torch.zeros(MAX_ROWS, HIDDEN, device="cuda")
    out_pool = torch.zeros(MAX_ROWS, HIDDEN, device="cuda")
    out_again = torch.zeros(MAX_ROWS, HIDDEN, device="cuda")
    ms: dict[str, dict[int, list[float]]] = {k: {} for k in ("cpu", "pool", "again")}
    routed, worst = [], 0.0
    before = lk_moe.pool_stats()
    for i in range(warm + steps):
        if i == warm:
            before = lk_moe.pool_stats()  # the figures count the timed steps; `once` counts all
        rows = 1 + i % 3
        ids = router.step(rows)
        if rows == 3 and i % 7 == 0:
            ids[2] = -1
        step = Step(ids, rng)
        order = [("cpu", cpu, out_cpu), ("pool", pool, out_pool), ("again", cpu, out_again)]
        if i % 2:
            order = [order[1], order[0], order[2]]
        timed = {label: call(engine, step, out, stream) for label, engine, out in order}
        time.sleep(gap_ms / 1e3)
        a, b = out_cpu[:rows], out_pool[:rows]
        if i == 0 and name == "random" and not torch.equal(a, b):
            checks["empty"].append(f"step 0: max |pool - cpu| {float((a - b).abs().max()):.3g}")
        worst = max(worst, rel(b, a))
        if rows == 3 and i % 7 == 0 and (a[2].abs().max() != 0 or b[2].abs().max() != 0):
            checks["masked"].append(f"{name} step {i}: a masked row is not zero")
        if i >= warm:
            routed.append(ids)
            for label, value in timed.items():
                ms[label].setdefault(rows - 1, []).append(value)
    if worst > AGREE:
        checks["agree"].append(f"{name}: max relative difference {worst:.3g} > {AGREE}")
    after = lk_moe.pool_stats()
    if float(after["cover_miss"]) or float(after["cover_dup"]):
        checks["once"].append(f"after {name}: cover_miss {after['cover_miss']}, cover_dup {after['cover_dup']}")
    delta = {k: float(after[k]) - float(before[k]) for k in ("hits", "misses", "pumps", "cover_miss", "cover_dup")}
    looked = delta["hits"] + delta["misses"]
    return {"locality": name, "reuse_asked": reuse, "skew": skew, "router": measured(routed),
            "hit_rate": delta["hits"] / looked if looked else 0.0, **delta, "max_rel_diff": worst,
            "ms": {label: {d: quartiles(v) for d, v in by.items()} for label, by in ms.items()},
            "ratio": {d: round(float(np.median(np.array(ms["pool"][d]) / np.array(ms["cpu"][d]))), 3)
                      for d in ms["cpu"]},
            "floor": {d: round(float(np.median(np.array(ms["again"][d]) / np.array(ms["cpu"][d]))), 3)
                      for d in ms["cpu"]}}


def graph_check(cpu: SimpleNamespace, pool: SimpleNamespace, checks: dict[str, list[str]]) -> float:
    """The pool's call for 2 rows captured once (inside moe_pool.capture) and replayed on new routing."""
    import torch

    from vllm_ds4x.hooks import moe_pool

    router = Router(EXPERTS, TOP_K, skew=0.8, reuse=0.6, seed=3)
    rng = np.random.default_rng(5)
    first = Step(router.step(2), rng)
    ids, w, x = first.ids.clone(), first.w.clone(), first.x.clone()
    out = torch.zeros(MAX_ROWS, HIDDEN, device="cuda")
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with moe_pool.capture(), torch.cuda.graph(graph, stream=stream):
        moe_pool.cpu_decode(pool, torch.cuda.current_stream(), x, ids, w, out[:2])
    ref = torch.zeros(MAX_ROWS, HIDDEN, device="cuda")
    worst = 0.0
    for _ in range(100):
        step = Step(router.step(2), rng)
        ids.copy_(step.ids), w.copy_(step.w), x.copy_(step.x)
        graph.replay()
        torch.cuda.synchronize()
        call(cpu, step, ref, stream)
        worst = max(worst, rel(out[:2], ref[:2]))
    if worst > AGREE:
        checks["graph"].append(f"max relative difference {worst:.3g} > {AGREE}")
    return worst


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pool_decode", description=__doc__.split("\n\n")[0])
    p.add_argument("--slots", type=int, default=12, help="LK_POOL_SLOTS (default 12: the user's ratio)")
    p.add_argument("--steps", type=int, default=300, help="timed steps per locality (default 300)")
    p.add_argument("--warm", type=int, default=60, help="untimed steps first, per locality (default 60)")
    p.add_argument("--gap-ms", type=float, default=20.0,
                   help="idle ms between steps, as the model's other layers leave the pump (default 20)")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    if args.steps < 3 or args.warm < 0 or not 0 <= args.gap_ms <= 1000:
        p.error("--steps at least 3, --warm at least 0, --gap-ms 0 to 1000")
    os.environ["LK_POOL_SLOTS"] = str(args.slots)
    import lk_moe
    import torch

    if not torch.cuda.is_available():
        print("error: bench.pool_decode needs a GPU (the pool's GPU half)", file=sys.stderr)
        return 2
    from vllm_ds4x.hooks import moe_pool

    torch.manual_seed(0)
    cpu, pool = engines(weights(1))
    checks: dict[str, list[str]] = {k: [] for k in ("empty", "agree", "masked", "once", "graph")}
    print(f"lk_moe {getattr(lk_moe, '__version__', '?')}, {torch.cuda.get_device_name(0)}, "
          f"LK_THREADS={os.environ.get('LK_THREADS', '?')}, {args.slots} slots, {args.gap_ms:g} ms between steps, "
          f"pool VRAM {moe_pool.stats()['device_bytes'] / 2**20:.0f} MiB")
    runs = [locality_run(cpu, pool, name, args.steps, args.warm, args.gap_ms, checks) for name in LOCALITIES]
    graph = graph_check(cpu, pool, checks)
    for r in runs:
        print(json.dumps(r))
    print(json.dumps({"graph_max_rel_diff": graph, "stats": moe_pool.stats()}))
    for name, failures in checks.items():
        print(f"check {name}: " + ("ok" if not failures else "FAILED " + "; ".join(failures)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"slots": args.slots, "runs": runs, "graph_max_rel_diff": graph, "checks": checks}, f, indent=1)
    return 1 if any(checks.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
