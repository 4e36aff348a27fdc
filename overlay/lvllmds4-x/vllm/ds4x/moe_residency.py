# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Engine side of resident-MoE placement: environment + vLLM config -> one
Placement per process, decided before the first expert weight is created and
logged once. The arithmetic lives in vllm.ds4x.moe_placement."""

import os
from typing import Any

from vllm.ds4x import bounded
from vllm.ds4x import moe_placement as mp
from vllm.logger import init_logger

logger = init_logger(__name__)

_placement: mp.Placement | None = None
_planned: tuple[int, str] | None = None  # (bytes of weights planned on this GPU, summary)


def _draft_layers(vllm_config: Any) -> int:
    spec = vllm_config.speculative_config
    if spec is None or spec.draft_model_config is None:
        return 0
    draft = spec.draft_model_config.hf_config
    return int(getattr(draft, "n_mtp_layers", None) or getattr(draft, "num_nextn_predict_layers", None) or 0)


def read_env() -> tuple[mp.Selection, bool]:
    """Both variables, parsed whole: a typo fails here, before any GPU work."""
    selection = mp.parse_layers(os.environ.get(mp.LAYERS_ENV))
    return selection, mp.parse_flag(os.environ.get(mp.DRAFT_ENV), mp.DRAFT_ENV, default=True)


def routing_stats(shape: mp.ModelShape) -> dict[int, list[float]] | None:
    """Expert counts per layer (JSON {"<layer>": [count per expert]}) to rank
    layers for `auto`, from LVLLM_GPU_RESIDENT_ROUTING_STATS when set, checked
    as `plan --routing-stats` checks them (mp.parse_routing)."""
    path = os.environ.get(mp.ROUTING_ENV)
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


def engine_budget(vllm_config: Any, gpu_bytes: int, draft_resident: bool) -> tuple[mp.ModelShape, mp.Budget]:
    """The model's shape and GPU budget from the engine's own settings: the
    inputs `plan` takes as options, into the same function."""
    shape = mp.model_shape(vllm_config.model_config.hf_text_config.to_dict(),
                           num_draft_layers=_draft_layers(vllm_config))
    parallel = vllm_config.parallel_config
    return shape, mp.budget(
        shape,
        gpu_bytes=gpu_bytes,
        gpu_memory_utilization=vllm_config.cache_config.gpu_memory_utilization,
        max_model_len=vllm_config.model_config.max_model_len,
        kv_dtype=vllm_config.cache_config.cache_dtype,
        tp_size=parallel.tensor_parallel_size,
        pp_size=parallel.pipeline_parallel_size,
        draft_resident=draft_resident,
    )


def decide(vllm_config: Any, selection: mp.Selection, draft_resident: bool) -> mp.Placement:
    """Size the budget from this GPU, place, explain."""
    import torch

    _, total = torch.cuda.mem_get_info()
    shape, plan = engine_budget(vllm_config, total, draft_resident)
    parallel = vllm_config.parallel_config
    spec = vllm_config.speculative_config
    placement = mp.place(
        selection,
        shape,
        plan,
        draft_resident=draft_resident,
        tp_size=parallel.tensor_parallel_size,
        verify_tokens=1 + (spec.num_speculative_tokens if spec else 0),
        routing=routing_stats(shape),
    )
    global _planned
    text = mp.summary(shape, placement, plan, parallel.tensor_parallel_size)
    per_layer = shape.layer_bytes_per_gpu(parallel.tensor_parallel_size)
    _planned = (plan.non_expert + plan.draft_layers + len(placement.resident) * per_layer, text)
    logger.info("ds4x MoE placement plan: %s", text)
    return placement


def current() -> mp.Placement:
    global _placement
    if _placement is None:
        selection, draft_resident = read_env()
        from vllm.config import get_current_vllm_config

        _placement = decide(get_current_vllm_config(), selection, draft_resident)
    return _placement


def log_placement(model_memory_bytes: int) -> None:
    """After loading: the placement again, beside what the weights really took."""
    if _planned is None:
        return
    planned, text = _planned
    logger.info("ds4x MoE placement after loading: weights take %.2f GiB on this GPU (planned %.2f GiB); %s",
                model_memory_bytes / mp.GIB, planned / mp.GIB, text)


def is_resident_layer(layer_name: str) -> bool:
    return current().is_resident(layer_name)


def is_draft_layer(layer_name: str) -> bool:
    return mp.is_draft_layer(layer_name, current().num_hidden_layers)


def prefetch_window() -> int:
    return mp.parse_positive_int(os.environ.get(mp.PREFETCH_ENV), mp.PREFETCH_ENV, mp.DEFAULT_PREFETCH_WINDOW)


def prefill_min_batch() -> int:
    return mp.parse_positive_int(os.environ.get(mp.PREFILL_MIN_ENV), mp.PREFILL_MIN_ENV, 0)
