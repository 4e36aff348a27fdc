# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""GPU prefill of the fork's lk_moe layers: its settings, checked once, and the VRAM it holds.

The fork turns it on with ``LVLLM_GPU_PREFILL_MIN_BATCH_SIZE`` > 0 (0, the default: CPU prefill). At
the pin the fork parses ``LVLLM_GPU_PREFETCH_WINDOW`` but never passes it on; with lk_moe 2.7.4 the
hook (vllm_ds4x.hooks.moe_prefill) runs lk_moe's own drivers, chosen by ``LK_GPU_PREFILL_ENGINE``:

- ``triton`` stages the routed experts through a ring of ``min(2, max(1, window))`` blocks of a whole
  layer's experts ("Ring VRAM = window x E x per-expert bytes", lk_moe's README; the clamp is
  ``StagingPrefill``'s), and keeps one fp32 scratch for every layer: ``cap = max(tokens x top_k, 8192)``
  rows of ``2 I + H`` values and ``cap / top_k + 1`` rows of ``H``.
- ``cutlass`` (lk_moe's default) sizes its arena in C++, out of sight of its Python: taken here as one
  layer's experts (it ignores the window) and the same experts dequantized to bf16, plus its fp32
  accumulator and the activation-dtype output (``max(tokens, 2048)`` rows of ``H``): within 2% of the
  15.61 GiB lk_moe's ``get_device_mem_usage()`` reported for one Flash MXFP4 layer at 8192 tokens.

lk_moe's README also names ``LK_GPU_PREFILL_MIN_TOKENS``, ``LK_GPU_PREFETCH_WINDOW``, ``LK_GPU_PREFILL_SUB_M``,
``LK_GPU_PREFILL_WAVE_EXPERTS`` and ``LK_GPU_RESERVE_GB``: names its sglang integration reads. lk_moe takes
policy from its config only and the fork bridges none of them, so in a fork script they do nothing.

Pure Python: the tool imports it to plan the VRAM before any engine exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vllm_ds4x.moe.placement import (
    DEFAULT_PREFETCH_WINDOW,
    GIB,
    PREFETCH_ENV,
    PREFILL_MIN_ENV,
    ModelShape,
    PlacementError,
    parse_positive_int,
)

ENGINE_ENV = "LK_GPU_PREFILL_ENGINE"
ENGINES = ("cutlass", "triton")
MAX_RING = 2  # lk_moe's StagingPrefill keeps min(2, max(1, prefill_window)) blocks
SCRATCH_FLOOR = 8192  # StagingPrefill's smallest scratch, in routed entries
OUT_ROWS_FLOOR = 2048  # CutlassPrefill's smallest output buffer, in tokens
ACT_BYTES = 2  # bf16 activations
SMALL_GPU_TOKENS, LARGE_GPU_TOKENS = 2048, 8192
"""vllm serve's default --max-num-batched-tokens in the fork: 8192 on a GPU of 70 GiB or more (A100 aside), else 2048"""
LARGE_GPU = 70 * GIB
SGLANG_NAMES: dict[str, str | None] = {
    "LK_GPU_PREFILL_MIN_TOKENS": PREFILL_MIN_ENV,
    "LK_GPU_PREFETCH_WINDOW": PREFETCH_ENV,
    "LK_GPU_PREFILL_SUB_M": None,
    "LK_GPU_PREFILL_WAVE_EXPERTS": None,
    "LK_GPU_RESERVE_GB": None,
}
"""lk_moe's names that the fork does not read, and the fork's own variable for the same thing where it has one"""


@dataclass(frozen=True)
class PrefillSettings:
    min_batch: int = 0
    """LVLLM_GPU_PREFILL_MIN_BATCH_SIZE: the fewest tokens a batch prefills on the GPU; 0: never"""
    engine: str = "cutlass"
    window: int = DEFAULT_PREFETCH_WINDOW

    @property
    def on(self) -> bool:
        return self.min_batch > 0

    @property
    def ring(self) -> int:
        """Whole layers of experts staged at once: the triton ring's depth, one for cutlass."""
        return min(MAX_RING, max(1, self.window)) if self.engine == "triton" else 1


def parse_engine(value: str | None) -> str:
    """LK_GPU_PREFILL_ENGINE: cutlass (unset) or triton; anything else is one error naming it."""
    text = (value or "").strip().lower()
    if text and text not in ENGINES:
        raise PlacementError(f"{ENGINE_ENV}={str(value)[:40]!r}: expected cutlass (lk_moe's default) or triton")
    return text or "cutlass"


def prefill_settings(env: Mapping[str, str]) -> PrefillSettings:
    """The fork's GPU-prefill settings in `env`, each checked."""
    return PrefillSettings(
        min_batch=parse_positive_int(env.get(PREFILL_MIN_ENV), PREFILL_MIN_ENV, 0),
        engine=parse_engine(env.get(ENGINE_ENV)),
        window=parse_positive_int(env.get(PREFETCH_ENV), PREFETCH_ENV, DEFAULT_PREFETCH_WINDOW),
    )


_SGLANG_RANGES = {"LK_GPU_PREFILL_WAVE_EXPERTS": -1}  # its -1 means auto; the others are >= 0


def check_sglang_name(name: str, value: str) -> None:
    """One of SGLANG_NAMES, checked as lk_moe documents it (a number in its range)."""
    text = value.strip()
    try:
        number = float(text) if name == "LK_GPU_RESERVE_GB" else int(text)
    except ValueError:
        number = -2
    if not _SGLANG_RANGES.get(name, 0) <= number < 2**31:  # NaN fails too
        kind = "a number of GB >= 0" if name == "LK_GPU_RESERVE_GB" else \
            f"a whole number >= {_SGLANG_RANGES.get(name, 0)}"
        raise PlacementError(f"{name}={value[:40]!r}: expected {kind}")


def default_batched_tokens(gpu_bytes: int) -> int:
    """vllm serve's --max-num-batched-tokens where it is not given (the fork's EngineArgs)."""
    return LARGE_GPU_TOKENS if gpu_bytes >= LARGE_GPU else SMALL_GPU_TOKENS


def staging_bytes(settings: PrefillSettings, shape: ModelShape, tp_size: int) -> int:
    """The routed experts staged on the GPU at once, per GPU; 0 while GPU prefill is off. cutlass also
    holds the layer's experts dequantized to bf16 (lk_moe 2.7.4 reported 15.61 GiB for one Flash MXFP4
    layer, its 3.2 GiB and 12.0 GiB so: bench/results/h100-dsv4-prefill)."""
    if not settings.on:
        return 0
    staged = settings.ring * shape.layer_bytes_per_gpu(tp_size)
    if settings.engine == "cutlass" and shape.expert_bytes != dequantized_expert_bytes(shape):
        staged += shape.n_routed_experts * dequantized_expert_bytes(shape) // tp_size
    return staged


def dequantized_expert_bytes(shape: ModelShape) -> int:
    """One routed expert's three matrices in bf16."""
    return 3 * shape.hidden * shape.moe_intermediate * ACT_BYTES


def scratch_bytes(settings: PrefillSettings, shape: ModelShape, tokens: int, tp_size: int) -> int:
    """The buffers that grow with a step's prefill tokens, per GPU; 0 while GPU prefill is off."""
    if not settings.on:
        return 0
    hidden, inter = shape.hidden, shape.moe_intermediate // tp_size
    if settings.engine == "triton":
        cap = max(tokens * shape.top_k, SCRATCH_FLOOR)
        return 4 * (cap * (2 * inter + hidden) + (cap // shape.top_k + 1) * hidden)
    return tokens * hidden * 4 + max(tokens, OUT_ROWS_FLOOR) * hidden * ACT_BYTES


def prefill_bytes(settings: PrefillSettings, shape: ModelShape, tokens: int, tp_size: int) -> int:
    """What GPU prefill takes from the resident layers' budget, per GPU."""
    return staging_bytes(settings, shape, tp_size) + scratch_bytes(settings, shape, tokens, tp_size)
