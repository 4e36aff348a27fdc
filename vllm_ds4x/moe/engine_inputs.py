# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""What the engine's resident-MoE placement reads, parsed as `plan` parses it: its variables, routing statistics and vLLM's settings.

moe_residency (the hook, which knows vLLM and torch) asks this module; the tests ask it by name. vLLM's
config is typed by config_views' Protocols: the few attributes read, as vLLM's VllmConfig has them.
"""

from __future__ import annotations

import os

from vllm_ds4x import bounded
from vllm_ds4x.config_views import VllmConfigView
from vllm_ds4x.moe import placement as mp
from vllm_ds4x.moe.pool import budget_pool_bytes, pool_settings
from vllm_ds4x.moe.prefill import prefill_bytes, prefill_settings


def draft_layers(vllm_config: VllmConfigView) -> int:
    """The draft model's layers (MTP or DSpark), 0 without one."""
    spec = vllm_config.speculative_config
    if spec is None or spec.draft_model_config is None:
        return 0
    draft = spec.draft_model_config.hf_config
    return int(getattr(draft, "n_mtp_layers", None) or getattr(draft, "num_nextn_predict_layers", None) or 0)


def read_env() -> tuple[mp.Selection, bool]:
    """Both variables, parsed whole: a typo fails here, before any GPU work."""
    selection = mp.parse_layers(os.environ.get(mp.LAYERS_ENV))
    return selection, mp.parse_flag(os.environ.get(mp.DRAFT_ENV), mp.DRAFT_ENV, default=True)


def routing_stats(shape: mp.ModelShape, path: str | None = None) -> dict[int, list[float]] | None:
    """Expert counts per layer (JSON {"<layer>": [count per expert]}) to rank
    layers for `auto`, from `path` (--check-launch's) or LVLLM_GPU_RESIDENT_ROUTING_STATS when set, checked
    as `plan --routing-stats` checks them (mp.parse_routing)."""
    path = path or os.environ.get(mp.ROUTING_ENV)
    if not path:
        return None
    if os.path.exists(path) and not os.path.isfile(path):  # a pipe or device would hold start-up on the read
        raise mp.PlacementError(f"{mp.ROUTING_ENV}={path!r}: not a regular file (a pipe or a device); give the JSON file")
    try:
        with open(path, "rb") as f:
            data = f.read(bounded.MAX_JSON_BYTES + 1)
        return mp.parse_routing(bounded.loads(data.decode("utf-8")), shape)
    except (OSError, ValueError) as e:  # BoundError, PlacementError and UnicodeDecodeError are ValueErrors
        raise mp.PlacementError(f"{mp.ROUTING_ENV}={path!r}: {e}") from e


def engine_budget(vllm_config: VllmConfigView, gpu_bytes: int,
                  draft_resident: bool) -> tuple[mp.ModelShape, mp.Budget]:
    """The model's shape and GPU budget from the engine's own settings: the
    inputs `plan` takes as options, into the same function."""
    shape = mp.model_shape(vllm_config.model_config.hf_text_config.to_dict(),
                           num_draft_layers=draft_layers(vllm_config))
    parallel = vllm_config.parallel_config
    prefill = prefill_settings(os.environ)
    tokens = vllm_config.scheduler_config.max_num_batched_tokens if prefill.on else 0
    return shape, mp.budget(
        shape,
        gpu_bytes=gpu_bytes,
        gpu_memory_utilization=vllm_config.cache_config.gpu_memory_utilization,
        max_model_len=vllm_config.model_config.max_model_len,
        kv_dtype=vllm_config.cache_config.cache_dtype,
        tp_size=parallel.tensor_parallel_size,
        pp_size=parallel.pipeline_parallel_size,
        draft_resident=draft_resident,
        pool_bytes=budget_pool_bytes(pool_settings(os.environ), shape, parallel.tensor_parallel_size),
        prefill_bytes=prefill_bytes(prefill, shape, tokens, parallel.tensor_parallel_size),
    )


def prefetch_window() -> int:
    return mp.parse_positive_int(os.environ.get(mp.PREFETCH_ENV), mp.PREFETCH_ENV, mp.DEFAULT_PREFETCH_WINDOW)


def prefill_min_batch() -> int:
    return mp.parse_positive_int(os.environ.get(mp.PREFILL_MIN_ENV), mp.PREFILL_MIN_ENV, 0)
