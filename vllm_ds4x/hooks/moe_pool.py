# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""lk_moe's GPU expert pool in the fork's MoE layers: configured from LK_POOL_* (vllm_ds4x.moe.pool),
the GPU half of each decode step on lk_moe's own Triton kernels, CUDA-graph captures with the
pool's DMA worker parked, and its counters.

A decode step of a pooled layer: lk_moe's cpu_decode on the caller's stream computes the experts
whose snapshot word gives them no landed slot; then the GPU half (lk_moe's slot-table fill, gate-up,
down and reduce kernels) runs on the pool stream for the others, reading the same word; the
caller's stream waits for the pool stream and adds. Rows routed to expert -1 (verify_mask's
unverified rows) are computed by neither half. Once a layer reports its GPU half live
(pool_gpu_report(True)) lk_moe's CPU half skips the pooled experts, so every cpu_decode of that
layer must go through `cpu_decode` here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, ClassVar

import torch

from vllm_ds4x.hooks import pool_metrics
from vllm_ds4x.moe import placement as mp
from vllm_ds4x.moe.pool import POOL_ROWS, PoolSettings, check_layer, pool_settings

_settings: PoolSettings | None = None
_stream: torch.cuda.Stream | None = None


def settings() -> PoolSettings:
    """LK_POOL_*, parsed once per process (a bad value fails the first layer's start-up)."""
    global _settings
    if _settings is None:
        _settings = pool_settings(os.environ)
    return _settings


def configure(cfg: Any, layer_name: str, is_draft: bool) -> None:
    """Before lk_moe builds the layer: its pool identity and settings. lk_moe keys its pool registry
    by layer_id (a repeated id turns the later layer's pool off) and never pools a draft layer."""
    s = settings()
    if not s.on:
        return  # lk_moe's own defaults: no pool, and a config older lk_moe versions also take
    check_layer(s, int(cfg.expert_num), int(cfg.top_k))
    cfg.layer_id = mp.layer_index(layer_name)
    cfg.role_draft = is_draft
    if not is_draft:
        cfg.pool_slots, cfg.pool_window, cfg.pool_inflight = s.slots, s.window, s.inflight
        cfg.pool_log, cfg.route_probe, cfg.pool_decode = s.log_every, s.route_probe, True


def attach(experts: Any, is_draft: bool) -> None:
    """After lk_moe built the layer: its GPU half, compiled before any capture, then reported live.
    A pool that was asked for and did not start fails start-up here, naming the setting."""
    experts.ds4x_pool = None
    s = settings()
    if not s.on or is_draft or experts.lk_moe is None:
        if s.on and experts.lk_moe is None:
            raise RuntimeError(f"LK_POOL_SLOTS={s.slots}: lk_moe did not start for {experts.layer_name} "
                               "(the log above says why); unset LK_POOL_SLOTS to run without the pool")
        return
    if not getattr(experts.lk_moe_config, "pool_slots", 0):  # configure() runs for MXFP4 and NVFP4 layers only
        raise RuntimeError(f"LK_POOL_SLOTS={s.slots}: the pool's GPU half runs MXFP4 and NVFP4 experts, and "
                           f"{experts.layer_name}'s are neither; set LK_POOL_SLOTS=0 for this model")
    info = experts.lk_moe.pool_layer_info()
    if not info or not info.get("gpu_view_ok") or not info.get("snapshot_addr"):
        raise RuntimeError(f"LK_POOL_SLOTS={s.slots}: lk_moe registered no pool for {experts.layer_name} "
                           f"({'no device view' if info else 'no pool'}: too little free VRAM, or a layer id "
                           "repeated); lower LK_POOL_SLOTS, or set it to 0")
    half = DecodeHalf(info, experts.lk_moe_config)
    half.warm()
    experts.ds4x_pool = half
    experts.lk_moe.pool_gpu_report(True)
    pool_metrics.add_layer(int(experts.lk_moe_config.layer_id), info)  # /metrics reads lk_moe's counts where a layer pools


def cpu_decode(experts: Any, stream: torch.cuda.Stream, hidden: torch.Tensor, ids: torch.Tensor,
               weights: torch.Tensor, output: torch.Tensor) -> None:
    """lk_moe's cpu_decode of `hidden`'s rows into `output` (fp32), then the pool's GPU half: queued
    after the CPU half, it reads the split the CPU half used (queued before it, the pump may publish
    a slot between the two reads, and an expert is lost)."""
    experts.lk_moe.cpu_decode(stream.cuda_stream, hidden.size(0), ids.size(1), hidden.data_ptr(), ids.data_ptr(),
                              weights.data_ptr(), output.data_ptr())
    half: DecodeHalf | None = getattr(experts, "ds4x_pool", None)
    if half is None or hidden.size(0) > POOL_ROWS:
        return
    gpu = half.launch(stream, hidden, ids, weights)
    experts.lk_moe.pool_record_aux(pool_stream().cuda_stream)  # the worker's copies wait for these reads
    stream.wait_stream(pool_stream())
    output.add_(gpu)


def pool_stream() -> torch.cuda.Stream:
    """The one stream every pooled layer's GPU half runs on (its buffers are shared, in stream order)."""
    global _stream
    if _stream is None:
        _stream = torch.cuda.Stream()
    return _stream


@contextlib.contextmanager
def capture() -> Iterator[None]:
    """Around a CUDA-graph capture: lk_moe's DMA worker parked (a CUDA call of its thread during a
    capture invalidates the capture), resumed after, also on failure."""
    if not settings().on:
        yield
        return
    import lk_moe

    lk_moe.pool_capture_pause()
    try:
        yield
    finally:
        lk_moe.pool_capture_resume()


def stats() -> dict[str, float]:
    """lk_moe's pool counters (hits, misses, pumps, hit_rate, cover_miss, cover_dup, ...) and the VRAM
    lk_moe holds; empty without a pool."""
    if not settings().on:
        return {}
    import lk_moe

    return {**{str(k): float(v) for k, v in lk_moe.pool_stats().items()},
            "device_bytes": float(lk_moe.get_device_mem_usage())}


class DecodeHalf:
    """One layer's GPU half: its slots' addresses and geometry from lk_moe's pool_layer_info, the
    kernels as lk_moe's prefill driver (prefill_resident.py) launches their group-GEMM twins."""

    _buffers: ClassVar[dict[str, torch.Tensor]] = {}  # grown on demand, shared by every layer in pool-stream order
    SPLIT_K = 8  # gate-up's K chunks: enough programs to fill the SMs at one token

    def __init__(self, info: dict[str, Any], cfg: Any) -> None:
        caps = info.get("kernel_caps") or {}
        if caps.get("format") not in ("mxfp4", "nvfp4"):
            raise RuntimeError(f"LK_POOL_SLOTS: lk_moe's pool reports {caps.get('format')!r} experts; the GPU half "
                               "runs MXFP4 and NVFP4; set LK_POOL_SLOTS=0 for this model")
        self.hidden, self.inter = int(cfg.hidden_size), int(cfg.intermediate_size)
        self.max_rows = min(POOL_ROWS, int(cfg.max_num_seqs))  # the most rows a step gives the GPU half
        self.top_k, self.has_gate = int(cfg.top_k), bool(cfg.has_gate_proj)
        self.act, self.alpha = int(cfg.activation_type), float(cfg.swiglu_alpha)
        self.limit = float(cfg.swiglu_limit or 0.0)
        self.format, self.group = str(caps["format"]), int(caps.get("scale_group") or 32)
        self.snapshot = int(info["snapshot_addr"])
        w, s = info["weight_addr"], info["scale_addr"]
        down = 2 if self.has_gate else 1
        self.gate, self.up = (int(w[0]), int(s[0])), (int(w[1 if self.has_gate else 0]), int(s[1 if self.has_gate else 0]))
        self.down = (int(w[down]), int(s[down]))
        self.blocks_gate = int(info["slot_weight_bytes"][0]) // ((self.hidden // 2) * 32)
        self.blocks_down = int(info["slot_weight_bytes"][down]) // ((self.inter // 2) * 32)
        assert self.blocks_gate * (self.hidden // 2) * 32 == int(info["slot_weight_bytes"][0])
        assert self.blocks_gate * (self.hidden // self.group) * 32 == int(info["slot_scale_bytes"][0])
        assert self.blocks_down * (self.inter // 2) * 32 == int(info["slot_weight_bytes"][down])
        assert self.blocks_down * (self.inter // self.group) * 32 == int(info["slot_scale_bytes"][down])
        assert (self.hidden // 2) % self.SPLIT_K == 0, self.hidden

    def _buffer(self, name: str, rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
        held = DecodeHalf._buffers.get(name)
        if held is None or held.size(0) < rows or held.size(1) != cols:
            held = DecodeHalf._buffers[name] = torch.empty(max(rows, 64), cols, dtype=dtype, device="cuda")
        return held[:rows]

    def _views(self, rows: int) -> tuple[torch.Tensor, ...]:
        """The buffers of a step of `rows` rows: slot table, gate-up partials, gate-up, down partials, out."""
        n = rows * self.top_k
        return (self._buffer("slots", n, 1, torch.int32),
                self._buffer("hpart", self.SPLIT_K * n, 2 * self.inter, torch.float32),
                self._buffer("hbuf", n, 2 * self.inter, torch.float32),
                self._buffer("part", n, self.hidden, torch.float32),
                self._buffer("out", rows, self.hidden, torch.float32))

    def launch(self, stream: torch.cuda.Stream, hidden: torch.Tensor, ids: torch.Tensor,
               weights: torch.Tensor) -> torch.Tensor:
        """The pooled experts' share of each row, fp32 [rows, hidden], queued on the pool stream after `stream`."""
        import triton
        from lk_moe import _hybrid_gemv_kernel as k

        rows = hidden.size(0)
        assert rows <= self.max_rows, (rows, self.max_rows)
        n = rows * self.top_k
        side = pool_stream()
        side.wait_stream(stream)
        with torch.cuda.stream(side):
            slots, hpart, hbuf, part, out = self._views(rows)
            k.slot_table_fill[(triton.cdiv(n, 1024),)](ids, self.snapshot, slots, n, BLOCK=1024)
            per_k = (self.hidden // 2) // self.SPLIT_K
            iters = 32 if per_k % 32 == 0 else per_k
            k.moe_gateup[(n, self.blocks_gate, self.SPLIT_K)](
                ids, slots, self.gate[0], self.gate[1], self.up[0], self.up[1], 0, hpart, hidden, n, self.top_k, 1,
                GDS_COLS=2 if self.has_gate else 1, NCOL=self.inter, K_PER_BLOCK=self.hidden // 2,
                SCALE_GROUPS_BLK=self.hidden // self.group, SLOT_BYTES=self.blocks_gate * (self.hidden // 2) * 32,
                SLOT_SCALE_BYTES=self.blocks_gate * (self.hidden // self.group) * 32, HIDDEN=self.hidden,
                ITERS=iters, SCALE_GROUP=self.group, FORMAT=self.format, FORMAT_PACKED_K=2,
                HAS_GATE=self.has_gate, ACTIVATION=self.act, ALPHA=self.alpha, LIMIT=self.limit,
                KS=per_k // iters, NGK=self.SPLIT_K)
            total = n * 2 * self.inter
            k.reduce_gate[(triton.cdiv(total, 1024),)](hpart, hbuf, total, NGK=self.SPLIT_K, BLOCK=1024)
            k.moe_down[(n, self.blocks_down)](
                ids, slots, weights, self.down[0], self.down[1], 0, hbuf, part, n,
                NCOL=self.hidden, N_PARTIAL=self.inter, K_PER_BLOCK=self.inter // 2,
                SCALE_GROUPS_BLK=self.inter // self.group, SLOT_BYTES=self.blocks_down * (self.inter // 2) * 32,
                SLOT_SCALE_BYTES=self.blocks_down * (self.inter // self.group) * 32, ITERS=32,
                SCALE_GROUP=self.group, FORMAT=self.format, FORMAT_PACKED_K=2, HAS_GATE=self.has_gate,
                ACTIVATION=self.act, ALPHA=self.alpha, LIMIT=self.limit)
            k.reduce_down[(triton.cdiv(self.hidden, 1024), triton.cdiv(rows, 64))](
                part, out, slots, HIDDEN=self.hidden, SLOTS_PER_TOKEN=self.top_k, BATCH=64, BLOCK=1024,
                RESIDENT_ONLY=1, TOKS=64, NTOK=rows)
        return out

    def warm(self) -> None:
        """Compile the kernels and size the buffers for the most rows now (rows routed nowhere:
        nothing computed), never inside a capture."""
        stream = torch.cuda.current_stream()
        self._views(self.max_rows)
        ids = torch.full((1, self.top_k), -1, dtype=torch.int32, device="cuda")
        weights = torch.zeros(1, self.top_k, dtype=torch.float32, device="cuda")
        hidden = torch.zeros(1, self.hidden, dtype=torch.bfloat16, device="cuda")
        self.launch(stream, hidden, ids, weights)
        stream.wait_stream(pool_stream())
        torch.cuda.synchronize()
