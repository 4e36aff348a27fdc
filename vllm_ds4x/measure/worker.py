# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""measure's timing worker: one routed-expert layer through lk_moe, timed for every token count of a job,
or (a job with "prefill") for every prefill chunk size one way.

measure runs this module (``python -m vllm_ds4x.measure.worker --worker JOB``), one process per LK_THREADS
value, and for prefill one process per way at the best LK_THREADS, in the Python that has lk_moe, numpy
and (for a GPU) torch: it imports them only inside its functions, and nothing of the package, so it runs
outside it and the core imports without them. The GPU prefill way is the fork's hook's: measure runs it
through vllm_ds4x.hooks.prefill_timing (above this layer), which hands prefill_worker a GpuWay.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

GROUP = 32  # MXFP4: one e8m0 scale per 32 weights along K
SCALE = 118  # e8m0 exponent of every block: small enough that random weights give finite outputs
BATCHED_TOKENS = 8192  # the engine's max_num_batched_tokens, which sizes lk_moe's prefill groups
ROUNDS = 3  # the worker times every token count in turn this often; the rounds' medians are the repeats
PREFILL_REPEATS = 5  # timed calls a prefill chunk gets at most (2 at least, after one that warms up)
PREFILL_LAYER = "model.layers.0.ffn.experts"  # the layer name the GPU way builds and calls


class GpuWay(Protocol):
    """The fork's GPU prefill, as measure's GPU job runs it (vllm_ds4x.hooks.prefill_timing)."""

    def configure(self, cfg: Any, min_batch: int) -> None:
        """Before lk_moe builds the layer, at LVLLM_GPU_PREFILL_MIN_BATCH_SIZE=`min_batch`."""

    def engine(self) -> str:
        """The engine it runs (LK_GPU_PREFILL_ENGINE's)."""

    def caller(self, moe: Any) -> Callable[[Any, Any, Any], Any]:
        """One layer call: (hidden states, top-k weights, top-k ids) on the GPU -> the routed experts' output."""


def _layer(spec: dict[str, Any], batched: int = BATCHED_TOKENS, gpu_prefill: int = 0,
           way: GpuWay | None = None) -> tuple[Any, tuple[Any, ...]]:
    """lk_moe's engine over one random layer, and the arrays it reads; `batched`: the engine's
    --max-num-batched-tokens (lk_moe's max_batch_size); `gpu_prefill` > 0: built as the fork builds a
    layer with GPU prefill on at that LVLLM_GPU_PREFILL_MIN_BATCH_SIZE (use_gpu_prefill, CPU groups only
    up to it, then `way`'s configure for LK_GPU_PREFILL_ENGINE)."""
    import lk_moe
    import numpy as np

    experts, top_k, hidden, inter = spec["experts"], spec["top_k"], spec["hidden"], spec["inter"]
    cfg = lk_moe.MOEConfigV2()  # the fields Lvllmds4-x's routed_experts.py sets, as it sets them
    cfg.num_processes, cfg.process_id, cfg.gpu_id = 1, 0, 0
    cfg.has_gate_proj = True
    cfg.expert_num, cfg.top_k = experts, top_k
    cfg.hidden_size, cfg.intermediate_size = hidden, inter
    cfg.max_num_seqs = spec["max_tokens"]  # max_num_seqs x (1 + K), as the fork sizes it
    cfg.max_batch_size = batched
    cfg.stride, cfg.group_min_len, cfg.group_max_len = 32, 10, min(4096, batched) + 128
    cfg.activation_type = 0  # silu
    cfg.use_gpu_prefill = gpu_prefill > 0
    if gpu_prefill and way is not None:
        cfg.group_max_len = min(batched, gpu_prefill) + 128  # the fork's get_max_num_group_batch_size, GPU prefill on
        way.configure(cfg, gpu_prefill)
    rng = np.random.default_rng(0)

    def filled(shape: tuple[int, ...], one_expert: np.ndarray) -> np.ndarray:
        """Every expert a copy of one random expert: each page is written (a
        never-written page reads as zeros from no memory at all)."""
        out = np.empty(shape, one_expert.dtype)
        out[:] = one_expert
        return out

    if spec["format"] == "mxfp4":  # packed e2m1 pairs and e8m0 scales, as the fork passes them
        cfg.groupN, cfg.groupK = 1, GROUP
        w13 = filled((experts, 2 * inter, hidden // 2), rng.integers(0, 256, (2 * inter, hidden // 2), np.uint8))
        w2 = filled((experts, hidden, inter // 2), rng.integers(0, 256, (hidden, inter // 2), np.uint8))
        s13 = np.full((experts, 2 * inter, hidden // GROUP), SCALE, np.uint8)
        s2 = np.full((experts, hidden, inter // GROUP), SCALE, np.uint8)
        moe = lk_moe.MOE_MXFP4(cfg, w13.ctypes.data, w2.ctypes.data, s13.ctypes.data, s2.ctypes.data, 0, 0)
        return moe, (w13, w2, s13, s2)

    def bf16(shape: tuple[int, ...], scale: float) -> np.ndarray:
        values = rng.standard_normal(shape, np.float32) * scale
        return (values.view(np.uint32) >> 16).astype(np.uint16)  # bf16 bits

    w13 = filled((experts, 2 * inter, hidden), bf16((2 * inter, hidden), hidden**-0.5))
    w2 = filled((experts, hidden, inter), bf16((hidden, inter), inter**-0.5))
    moe = lk_moe.MOE_BF16(cfg, w13.ctypes.data, w2.ctypes.data, 0, 0, 0, 0)
    return moe, (w13, w2)


def _caller(moe: Any, spec: dict[str, Any], tokens: int) -> tuple[str, Callable[[Any], None], Callable[[Any], Any]]:
    """One layer call for `tokens` tokens routed by ids (int32 [tokens, top_k]):
    cpu_decode on a CUDA stream with inputs on the GPU, as inside the engine's
    graphs, when torch sees a GPU; cpu_prefill on host buffers otherwise."""
    import numpy as np

    hidden, top_k = spec["hidden"], spec["top_k"]
    weights = np.full((tokens, top_k), 1 / top_k, np.float32)
    if not _has_gpu():
        return "cpu_prefill", _on_host(moe, tokens, top_k, hidden, weights), lambda ids: ids
    import torch

    x_gpu = torch.randn(tokens, hidden, device="cuda").bfloat16()
    w_gpu = torch.from_numpy(weights).cuda()
    out_gpu = torch.empty(spec["max_tokens"], hidden, device="cuda")
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call, unused-ignore]

    def decode(ids_gpu: Any) -> None:
        moe.cpu_decode(stream.cuda_stream, tokens, top_k, x_gpu.data_ptr(), ids_gpu.data_ptr(), w_gpu.data_ptr(),
                       out_gpu.data_ptr())
        stream.synchronize()

    return "cpu_decode", decode, lambda ids: torch.from_numpy(ids).cuda()


Timed = dict[int, tuple[list[list[float]], list[int]]]
"""by token count: each round's seconds a call, and the distinct experts of every call's routing"""


def _rounds(moe: Any, spec: dict[str, Any]) -> tuple[str, Timed]:
    """Every token count timed in turn, ROUNDS times, each within its share of the
    budget (at least 2 timed calls after one that warms up); the path timed. One
    count's buffers at a time, as the engine holds them."""
    import numpy as np

    rng = np.random.default_rng(1)
    experts, top_k, path = spec["experts"], spec["top_k"], ""
    share = spec["budget_s"] / len(spec["tokens"]) / ROUNDS
    timed: Timed = {tokens: ([], []) for tokens in spec["tokens"]}
    for _ in range(ROUNDS):
        for tokens in spec["tokens"]:
            path, call, place = _caller(moe, spec, tokens)
            samples: list[float] = []
            end = time.perf_counter() + share
            while len(samples) < 3 or (time.perf_counter() < end and len(samples) < 500 // ROUNDS):
                ids = np.argsort(rng.random((tokens, experts)), axis=1)[:, :top_k].astype(np.int32)
                routed = place(ids)
                start = time.perf_counter()
                call(routed)
                samples.append(time.perf_counter() - start)
                timed[tokens][1].append(len(np.unique(ids)))
            timed[tokens][0].append(samples[1:])  # the first call after another token count warms up
    return path, timed


def _on_host(moe: Any, rows: int, top_k: int, hidden: int, weights: Any) -> Callable[[Any], None]:
    """lk_moe's cpu_prefill of `rows` rows on host buffers (where no GPU holds the activations), routed by ids."""
    import numpy as np

    x = np.zeros((rows, hidden), np.uint16)
    out = np.empty((rows, hidden), np.float32)
    return lambda ids: moe.cpu_prefill(rows, top_k, ids.ctypes.data, weights.ctypes.data, x.ctypes.data,
                                       out.ctypes.data)


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _prefill_call(moe: Any, spec: dict[str, Any], rows: int, gpu: bool,
                  way: GpuWay | None) -> tuple[Callable[[], None], Callable[[], None]]:
    """One prefill chunk of `rows` tokens one way, as the fork runs it: (fresh routing, the call). On the
    CPU, RoutedExperts._cpu_prefill's sequence where a GPU holds the activations (to the host, cpu_prefill,
    the result back in bf16), cpu_prefill on host buffers where there is no GPU; on the GPU, the fork's
    _gpu_prefill through `way` (the hook: lk_moe's own driver, LK_GPU_PREFILL_ENGINE's). Each call ends
    synchronized."""
    import numpy as np

    hidden, top_k, experts = spec["hidden"], spec["top_k"], spec["experts"]
    weights = np.full((rows, top_k), 1 / top_k, np.float32)
    rng = np.random.default_rng(rows)
    ids = np.zeros((rows, top_k), np.int32)

    def route() -> None:  # top_k distinct experts a row, fresh every call
        ids[:] = rng.random((rows, experts)).argpartition(top_k - 1, axis=1)[:, :top_k]

    if not gpu:
        on_host = _on_host(moe, rows, top_k, hidden, weights)
        return route, lambda: on_host(ids)
    import torch

    x_gpu = (torch.randn(rows, hidden, device="cuda") * 0.5).bfloat16()
    w_gpu, ids_gpu = torch.from_numpy(weights).cuda(), torch.from_numpy(ids).cuda()

    def route_gpu() -> None:
        route()
        ids_gpu.copy_(torch.from_numpy(ids))
        torch.cuda.synchronize()

    if way is not None:
        gpu_call = way.caller(moe)

        def on_gpu() -> None:
            gpu_call(x_gpu, w_gpu, ids_gpu)
            torch.cuda.synchronize()

        return route_gpu, on_gpu

    def host_copies() -> None:
        host_prefill(moe, x_gpu, w_gpu, ids_gpu)
        torch.cuda.synchronize()

    return route_gpu, host_copies


def host_prefill(moe: Any, x: Any, weights: Any, ids: Any) -> Any:
    """RoutedExperts._cpu_prefill's sequence for GPU tensors: to the host, lk_moe's cpu_prefill, the result
    back on the GPU in the activations' dtype (ci/fork-gpu/prefill_layer.py compares the GPU way with it)."""
    import torch

    ids_cpu, w_cpu, x_cpu = ids.cpu(), weights.cpu(), x.cpu()
    out = torch.empty(x_cpu.shape, dtype=torch.float32)
    torch.cuda.current_stream().synchronize()
    moe.cpu_prefill(x.size(0), ids.size(1), ids_cpu.data_ptr(), w_cpu.data_ptr(), x_cpu.data_ptr(), out.data_ptr())
    return out.to("cuda", dtype=x.dtype)


def next_chunk_ms(timed: list[dict[str, Any]], rows: int) -> float:
    """A layer call's ms at `rows`, guessed from the chunks timed so far (smallest first): on the line through
    the last two (never falling), or in proportion to the one; what the budget check reads before timing it."""
    last = timed[-1]
    if len(timed) < 2:
        return float(last["ms"]) * rows / float(last["rows"])
    before = timed[-2]
    ms, step = float(last["ms"]), float(last["rows"])
    slope = max(0.0, (ms - float(before["ms"])) / (step - float(before["rows"])))
    return ms + slope * (rows - step)


def prefill_skips(timed: list[dict[str, Any]], rows: int, left_s: float) -> bool:
    """Whether a chunk of `rows` is left untimed: its calls (a warm-up and two timed, at next_chunk_ms) would
    not fit the `left_s` seconds of budget left; never the first chunk."""
    return bool(timed) and 3 * next_chunk_ms(timed, rows) / 1000 > left_s


def prefill_worker(spec: dict[str, Any], way: GpuWay | None = None) -> dict[str, Any]:
    """Median ms of one layer call per prefill chunk size, one way (job["prefill"]["path"]: cpu, or gpu
    through `way`), smallest first, within job["prefill"]["budget_s"]: a chunk whose calls would not fit
    what is left is left untimed (prefill_skips), the smallest always timed."""
    job = spec["prefill"]
    chunks, path, gpu = sorted(job["chunks"]), job["path"], _has_gpu()
    if path == "gpu" and (way is None or not gpu):
        raise SystemExit("a GPU prefill job: run through vllm_ds4x.hooks.prefill_timing, where torch sees a GPU")
    way = way if path == "gpu" else None
    moe, arrays = _layer(spec, max(chunks), chunks[0] if way else 0, way)
    del arrays  # lk_moe holds its own copy
    engine = way.engine() if way else None
    rows_timed: list[dict[str, Any]] = []
    skipped: list[int] = []
    start = time.perf_counter()
    for rows in chunks:
        left = job["budget_s"] - (time.perf_counter() - start)
        if prefill_skips(rows_timed, rows, left):
            skipped.append(rows)
            continue
        route, call = _prefill_call(moe, spec, rows, gpu, way)
        samples: list[float] = []
        end = time.perf_counter() + left / 2
        while len(samples) < 3 or (time.perf_counter() < end and len(samples) < PREFILL_REPEATS + 1):
            route()
            t0 = time.perf_counter()
            call()
            samples.append(time.perf_counter() - t0)
        rows_timed.append({"rows": rows, "ms": 1000 * statistics.median(samples[1:]),  # the first warms up
                           "calls": len(samples) - 1})
    how = {"cpu": "host copies, cpu_prefill, copy back" if gpu else "cpu_prefill",
           "gpu": f"vllm_ds4x.hooks.moe_prefill ({engine})"}[path]
    return {"threads": int(os.environ.get("LK_THREADS", "0")),
            "prefill": {"path": path, "engine": engine, "how": how, "rows": rows_timed, "skipped": skipped}}


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Median ms per layer call for each token count, over ROUNDS in turn (so load
    that comes and goes reaches every count), with each round's median (the repeats
    measure's noise check reads) and mean distinct experts; with `bandwidth`, RAM
    read bandwidth first. A job with "prefill": prefill_worker's answer instead."""
    if spec.get("prefill"):
        return prefill_worker(spec)
    result: dict[str, Any] = {"threads": int(os.environ.get("LK_THREADS", "0"))}
    if spec.get("bandwidth"):
        result["ram_gbs"] = ram_read_gbs(spec["bandwidth"])
    moe, arrays = _layer(spec)
    del arrays  # lk_moe holds its own copy
    path, timed = _rounds(moe, spec)
    cases = [{"tokens": tokens, "ms": 1000 * statistics.median([s for one in rounds for s in one]),
              "calls": sum(map(len, rounds)), "repeats": [1000 * statistics.median(one) for one in rounds],
              "distinct": statistics.fmean(distinct)} for tokens, (rounds, distinct) in timed.items()]
    return {**result, "path": path, "cases": cases}




def ram_read_gbs(nbytes: int = 1 << 30) -> float:
    """RAM read bandwidth for reference: numpy sums over a buffer larger than
    any cache, one slice per core in threads (numpy lets go of the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    data = np.ones(nbytes // 8, np.float64)
    parts = np.array_split(data, os.cpu_count() or 1)
    with ThreadPoolExecutor(len(parts)) as pool:
        list(pool.map(np.sum, parts))  # warm
        start = time.perf_counter()
        list(pool.map(np.sum, parts))
        return nbytes / (time.perf_counter() - start) / 1e9



if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    print(json.dumps(worker(json.loads(sys.argv[2]))), flush=True)
