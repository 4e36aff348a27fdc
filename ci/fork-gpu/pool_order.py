"""Which order of the pool's two halves computes every expert once: the same steps under each order,
each step's output against the CPU alone's, mismatching steps counted (a missing or doubled expert
moves a row by its share, far above rounding). Diagnostic for vllm_ds4x.hooks.moe_pool, on the GPU:
  PYTHONPATH=<lk_moe site>:. LK_POOL_SLOTS=12 python ci/fork-gpu/pool_order.py
orders:
  gpu-first     the GPU half queued, then cpu_decode (its host part runs while the GPU half reads)
  cpu-first     cpu_decode queued, the GPU half after it on the pool stream (reads after the CPU)
  det-gpu-first lk_moe's deterministic split (claimed slots published, the GPU half waits on the
                layer's copy fence), GPU half first
  det-cpu-first the same, cpu_decode first
"""

import json
import os
import time

import lk_moe
import numpy as np
import torch

from bench import pool_decode
from bench.pool_decode import AGREE, HIDDEN, MAX_ROWS, Step, engines, rel, weights
from engine.locality import Router
from vllm_ds4x.hooks import moe_pool

LAYER = 1  # bench.pool_decode builds its pooled layer as model.layers.1
_config = pool_decode.config


def config():
    """GROUP_MIN: lk_moe's group_min_len (the fork's 10), to see whether its grouped path is the one that differs."""
    cfg = _config()
    cfg.group_min_len = int(os.environ.get("GROUP_MIN", cfg.group_min_len))
    return cfg


pool_decode.config = config


def pooled(pool, stream, step, out, order):
    half, moe = pool.ds4x_pool, pool.lk_moe
    det = order.startswith("det")
    aux = moe_pool.pool_stream()
    rows = step.x.size(0)
    out = out[:rows]

    def gpu():
        if det:
            aux.wait_stream(stream)
            lk_moe.pool_wait_fence(LAYER, aux.cuda_stream)
        got = half.launch(stream, step.x, step.ids, step.w)
        moe.pool_record_aux(aux.cuda_stream)
        return got

    def cpu():
        extra = (rows,) if os.environ.get("REAL_TOKENS") else ()
        moe.cpu_decode(stream.cuda_stream, rows, step.ids.size(1), step.x.data_ptr(), step.ids.data_ptr(),
                       step.w.data_ptr(), out.data_ptr(), *extra)

    if order.endswith("gpu-first"):
        got = gpu()
        cpu()
    else:
        cpu()
        got = gpu()
    stream.wait_stream(aux)
    out.add_(got)
    return got


def main():
    torch.manual_seed(0)
    cpu_engine, pool = engines(weights(1))
    stream = torch.cuda.Stream()
    ref = torch.zeros(MAX_ROWS, HIDDEN, device="cuda")
    got = torch.zeros(MAX_ROWS, HIDDEN, device="cuda")
    for order in os.environ.get("ORDERS", "gpu-first,cpu-first,det-gpu-first,det-cpu-first").split(","):
        lk_moe.pool_set_det_split(order.startswith("det"))
        router = Router(256, 6, skew=0.8, reuse=0.6, seed=7)
        rng = np.random.default_rng(11)
        bad, ms, before = [], [], lk_moe.pool_stats()
        for i in range(int(os.environ.get("STEPS", "300"))):
            rows = 1 + i % int(os.environ.get("MAX_STEP_ROWS", "3"))
            step = Step(router.step(rows), rng)
            torch.cuda.synchronize()
            with torch.cuda.stream(stream):
                moe_pool.cpu_decode(cpu_engine, stream, step.x, step.ids, step.w, ref[:rows])
            stream.synchronize()
            start = time.perf_counter()
            with torch.cuda.stream(stream):
                gpu_part = pooled(pool, stream, step, got, order)
            stream.synchronize()
            ms.append((time.perf_counter() - start) * 1e3)
            diff = rel(got[:rows], ref[:rows])
            if diff > AGREE:
                # doubled: the CPU computed the GPU's experts too (got - ref == the GPU half's part)
                extra = got[:rows] - ref[:rows]
                owned = int((moe_pool.DecodeHalf._buffers["slots"][: rows * 6] >= 0).sum())
                bad.append((i, rows, owned, round(diff, 3), round(rel(extra, gpu_part[:rows]), 4)))
        after = lk_moe.pool_stats()
        print(json.dumps({"order": order, "mismatched_steps": len(bad), "by_rows": {r: sum(1 for b in bad if b[1] == r) for r in range(1, 9)},
                          "first": bad[:12],
                          "median_ms": round(float(np.median(ms)), 3),
                          **{k: float(after[k]) - float(before[k]) for k in ("hits", "misses", "pumps", "publish_lag",
                                                                              "not_ready", "cover_miss", "cover_dup")}}),
              flush=True)


if __name__ == "__main__":
    main()
