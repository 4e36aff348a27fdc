"""One DeepSeek-V4-Flash routed-expert layer (bench.pool_decode's: 256 random MXFP4 experts, top-6, hidden
4096, intermediate 2048) on lk_moe, built as the fork builds a GPU-prefill layer (use_gpu_prefill, its
group length at a GPU-prefill minimum of PREFILL_MIN_BATCH), each chunk size both ways: the fork's CPU
prefill (copies to the host, cpu_prefill, the copy back) and its GPU prefill through
vllm_ds4x.hooks.moe_prefill (lk_moe's cutlass driver, or LK_GPU_PREFILL_ENGINE's). Per chunk size: ms
of each (best of PREFILL_LAYER_REPEATS), and the GPU result's largest difference from the CPU's over the
CPU's largest value. Also what lk_moe 2.7's raw gpu_prefill writes (one 1024-row call into a NaN-filled
fp32 buffer of twice the rows: fp32 rows fill exactly the first half) and the device bytes lk_moe holds
(get_device_mem_usage).

Usage (the harness's Python, on the GPU): prefill_layer.py OUT.json
"""

import json
import os
import sys
import time
from types import SimpleNamespace

import lk_moe
import torch

from bench import pool_decode
from bench.pool_decode import EXPERTS, HIDDEN, TOP_K, weights
from vllm_ds4x.hooks import moe_prefill
from vllm_ds4x.measure.worker import host_prefill

SIZES = [int(n) for n in os.environ.get("PREFILL_LAYER_SIZES", "128 256 512 1024 2048 4096 8192").split()]
REPEATS = int(os.environ.get("PREFILL_LAYER_REPEATS", "3"))
MAX_BATCH = 8192  # the user's --max-num-batched-tokens: the fork's cfg.max_batch_size
MIN_BATCH = int(os.environ.get("PREFILL_MIN_BATCH", "1024"))


def batch(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, HIDDEN, generator=gen) * 0.5).bfloat16().cuda()
    ids = torch.rand(rows, EXPERTS, generator=gen).topk(TOP_K, dim=1).indices.int().cuda()
    w = torch.rand(rows, TOP_K, generator=gen).softmax(1).cuda()
    return x, w, ids


def timed(fn, *args) -> tuple[float, torch.Tensor]:
    best, out = float("inf"), None
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn(*args)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) * 1e3)
    return round(best, 3), out


def raw_writer(moe, rows: int = 1024) -> str:
    """What lk_moe's gpu_prefill writes into its output pointer: fp32 (rows x hidden floats), or not."""
    x, w, ids = batch(rows, 99)
    buf = torch.full((2 * rows, HIDDEN), float("nan"), device="cuda")
    moe.gpu_prefill(x.data_ptr(), buf.data_ptr(), ids.data_ptr(), w.data_ptr(), rows, TOP_K,
                    torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    head, tail = buf[:rows].isfinite().all().item(), buf[rows:].isnan().all().item()
    return "fp32" if head and tail else f"not fp32 (first {rows} rows finite: {head}, the next {rows} untouched: {tail})"


def main() -> dict:
    cfg = pool_decode.config()
    cfg.max_batch_size, cfg.use_gpu_prefill = MAX_BATCH, True
    cfg.group_max_len = min(MAX_BATCH, MIN_BATCH) + 128  # the fork's get_max_num_group_batch_size with GPU prefill on
    moe_prefill.configure(cfg, "model.layers.2.ffn.experts", False)
    arrays = weights(5)
    t0 = time.time()
    moe = lk_moe.MOE_MXFP4(cfg, *[a.ctypes.data for a in arrays], 0, 0)
    result: dict = {"lk_moe": getattr(lk_moe, "__version__", None), "engine": moe_prefill.engine_name(),
                    "lk_threads": os.environ.get("LK_THREADS"), "build_s": round(time.time() - t0, 1),
                    "device_bytes": lk_moe.get_device_mem_usage() if hasattr(lk_moe, "get_device_mem_usage") else None,
                    "max_batch_size": MAX_BATCH, "sizes": {}}
    experts = SimpleNamespace(layer_name="model.layers.2.ffn.experts", lk_moe=moe)
    for rows in SIZES:
        x, w, ids = batch(rows, rows)
        gpu_ms, gpu = timed(moe_prefill.gpu_prefill, experts, x, w, ids)
        cpu_ms, cpu = timed(host_prefill, moe, x, w, ids)
        scale = float(cpu.float().abs().max())
        diff = float((gpu.float() - cpu.float()).abs().max()) / (scale or 1.0)
        result["sizes"][str(rows)] = {"cpu_ms": cpu_ms, "gpu_ms": gpu_ms, "rel_diff": diff,
                                      "finite": bool(gpu.isfinite().all().item())}
        print(f"{rows:6d} rows: cpu {cpu_ms:9.2f} ms  gpu {gpu_ms:9.2f} ms  rel diff {diff:.2e}", flush=True)
    result["calls"] = dict(moe_prefill.CALLS)
    result["device_bytes_after"] = lk_moe.get_device_mem_usage() if hasattr(lk_moe, "get_device_mem_usage") else None
    # triton builds no cutlass arena for the raw call to write through
    result["raw_gpu_prefill_writes"] = raw_writer(moe) if result["engine"] == "cutlass" else "not asked (triton)"
    print("raw gpu_prefill writes:", result["raw_gpu_prefill_writes"], flush=True)
    return result


if __name__ == "__main__":
    try:
        out = {"ok": True, **main()}
    except BaseException as e:  # reported: the report fails a probe that did not finish
        import traceback

        traceback.print_exc()
        out = {"ok": False, "error": repr(e)[:2000]}
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
    print("RESULT layer", "ok" if out["ok"] else out["error"][:300], flush=True)
    os._exit(0)
