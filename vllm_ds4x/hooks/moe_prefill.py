# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""GPU prefill of the fork's lk_moe layers (LVLLM_GPU_PREFILL_MIN_BATCH_SIZE > 0) on lk_moe 2.7.

The fork calls lk_moe's C++ `gpu_prefill` itself, into `torch.empty_like(hidden_states)`: right
for lk_moe 2.3, whose CUTLASS epilogue writes the activation dtype. lk_moe 2.7 writes fp32 there
(its own driver, `lk_moe/prefill_cutlass.py`: "C++ gpu_prefill writes fp32 ... the framework casts
once at layer exit"), twice the bytes of the fork's bf16 buffer: rows past the buffer's end and a
result read as the wrong type. From 2.7 on the package ships its drivers, the contract for a
framework that calls the C++ directly ("Frameworks that call the C++ gpu_prefill directly (vLLM)
register here right after construction"), so a layer's GPU prefill goes through them:

- `cutlass` (LK_GPU_PREFILL_ENGINE unset or `cutlass`, lk_moe's default): `CutlassPrefill`, on the
  arena lk_moe allocated when the fork built the layer with `use_gpu_prefill` (the fork's own config,
  nothing more): `gpu_prefill_act` (fp32 sums in lk_moe's arena, rounded once into the activation
  dtype) up to `max_batch_size` tokens, else `gpu_prefill` in fp32 blocks. `max_batch_size` is the
  fork's --max-num-batched-tokens, so every prefill chunk takes the first path (the driver reads it as
  the chunk the arena is booked for; `super_batch_size`, default 4096, is left as lk_moe sets it:
  ci/fork-gpu/prefill_layer.py checks 8192-row chunks against the CPU). Its README: cutlass rounds
  activations to bf16, so its results are not the CPU's bit for bit.
- `triton`: `StagingPrefill` (Triton group GEMMs in fp32, "matches the CPU reference", staging the
  routed experts through a ring of LVLLM_GPU_PREFETCH_WINDOW blocks, at most 2). lk_moe takes its
  switch (`prefill_gpu`, in place of cutlass's `use_gpu_prefill`), its gate (`prefill_min_tokens`, as
  lk_moe's sglang integration bridges LK_GPU_PREFILL_MIN_TOKENS), the layer's identity and the ring
  depth from the config only, so `configure` sets them before the layer is built (the fork's builders
  call it beside moe_pool.configure). Whether lk_moe registers the ring without a pool (pool_slots 0;
  its driver says "slot_count == 0 is a valid config") is for the GPU run to show.

Both drivers return their result in a buffer shared by every layer (or fp32): `gpu_prefill` gives
the layer a copy of its own in the activation dtype. On lk_moe without `prefill_cutlass` (2.3) the
fork's own call runs unchanged. `CALLS` counts the calls by driver (benchmarks read it).

Not here: lk_moe's super-chunk prefill (LK_GPU_PREFILL_SUB_M). It is a framework-side wrapper in
lk_moe's sglang integration that hands the engine GPU chunks larger than the scheduler's token
budget (with an attention backend of its own); vLLM's chunked prefill gives a layer at most
--max-num-batched-tokens rows, so the knob has nothing to act on here.
"""

from __future__ import annotations

import importlib
import os
from collections import Counter
from collections.abc import Mapping
from typing import Any

from vllm_ds4x.moe import placement as mp
from vllm_ds4x.moe import prefill
from vllm_ds4x.moe.pool import SLOTS_ENV, pool_settings

ENGINE_ENV = prefill.ENGINE_ENV
DRIVERS = {"cutlass": ("lk_moe.prefill_cutlass", "CutlassPrefill"),
           "triton": ("lk_moe.prefill_staging", "StagingPrefill")}
CALLS: Counter[str] = Counter()  # GPU prefill calls by driver: cutlass, triton, or fork (lk_moe 2.3)


def engine_name(env: Mapping[str, str] = os.environ) -> str:
    """LK_GPU_PREFILL_ENGINE -> cutlass (unset, lk_moe's default) or triton, as plan reads it (vllm_ds4x.moe.prefill)."""
    return prefill.parse_engine(env.get(ENGINE_ENV))


def configure(cfg: Any, layer_name: str, is_draft: bool, env: Mapping[str, str] = os.environ) -> None:
    """Before lk_moe builds a layer: what the triton engine reads from the config (its switch, the
    layer's id in lk_moe's registry, draft or not, the ring depth). Nothing for cutlass, whose arena
    follows the fork's own `use_gpu_prefill`, nor while GPU prefill is off. GPU prefill beside the
    expert pool is refused: both engines then stage through the pool's VRAM, which needs every prefill
    forward bracketed (prefill_cutlass.frozen_chunk) and the decode lane wired in, not done here."""
    if not getattr(cfg, "use_gpu_prefill", False):
        return
    if pool_settings(env).on:
        raise mp.PlacementError(f"{SLOTS_ENV}={env.get(SLOTS_ENV)} with GPU prefill ({mp.PREFILL_MIN_ENV}="
                                f"{env.get(mp.PREFILL_MIN_ENV)}): lk_moe's GPU prefill borrows the pool's VRAM, "
                                f"which this series does not bracket yet; set one of them to 0")
    settings = prefill.prefill_settings(env)  # plan's reading of the same variables
    if settings.engine != "triton":
        return
    if not hasattr(cfg, "prefill_gpu"):
        raise mp.PlacementError(f"{ENGINE_ENV}=triton: this lk_moe has no Triton prefill tier (it came with "
                                f"lk_moe 2.7); unset {ENGINE_ENV}")
    cfg.use_gpu_prefill = False  # LK_GPU_PREFILL_ENGINE picks one engine: no cutlass arena beside the ring
    cfg.prefill_gpu = True
    cfg.prefill_min_tokens = settings.min_batch
    cfg.layer_id = mp.layer_index(layer_name)
    cfg.role_draft = is_draft
    cfg.prefill_window = settings.ring


def _driver_class(engine: str) -> Any | None:
    """lk_moe's driver class for `engine`, or None where the package has none (lk_moe 2.3)."""
    module, name = DRIVERS[engine]
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as e:
        if e.name != module:  # the driver is there and broken (a dependency missing): never the raw call,
            raise  # which writes lk_moe 2.7's fp32 into the fork's bf16 buffer
        if engine == "triton":
            raise mp.PlacementError(f"{ENGINE_ENV}=triton: lk_moe has no {module}; unset {ENGINE_ENV}") from None
        return None


def driver(experts: Any) -> Any | None:
    """The layer's driver, made at its first GPU prefill and kept (None: the fork's own call). A
    driver lk_moe cannot make fails the call, naming the layer: a GPU prefill asked for never falls
    back to the CPU in silence."""
    if not hasattr(experts, "ds4x_prefill"):
        engine = engine_name()
        cls = _driver_class(engine)
        made = None if cls is None else cls.probe(experts.lk_moe)
        if cls is not None and made is None:  # triton: MXFP4 and NVFP4 layers only (configure sets no other)
            raise RuntimeError(f"{experts.layer_name}: lk_moe's {engine} GPU prefill did not start (its log says "
                               f"why{'; it serves MXFP4 and NVFP4 experts' if engine == 'triton' else ''}); "
                               f"set LVLLM_GPU_PREFILL_MIN_BATCH_SIZE=0 for CPU prefill")
        experts.ds4x_prefill = (engine, made) if made is not None else None
    return experts.ds4x_prefill


def gpu_prefill(experts: Any, hidden_states: Any, topk_weights: Any, topk_ids: Any, stream: Any = None) -> Any:
    """RoutedExperts._gpu_prefill: the layer's routed experts for a prefill batch, on the GPU, in the
    activation dtype, in a tensor of its own (`stream`: the caller's, by default the current one)."""
    import torch

    stream = stream if stream is not None else torch.cuda.current_stream()
    chosen = driver(experts)
    if chosen is None:  # lk_moe 2.3: its gpu_prefill writes the activation dtype
        output = torch.empty_like(hidden_states)
        experts.lk_moe.gpu_prefill(hidden_states.data_ptr(), output.data_ptr(), topk_ids.data_ptr(),
                                   topk_weights.data_ptr(), hidden_states.size(0), topk_ids.size(1),
                                   stream.cuda_stream)
        CALLS["fork"] += 1
        return output
    engine, drv = chosen
    event, out = drv.prefill_gpu(hidden_states, topk_ids, topk_weights)
    stream.wait_event(event)  # triton computes on a side stream
    CALLS[engine] += 1
    return out.to(hidden_states.dtype, copy=True)
