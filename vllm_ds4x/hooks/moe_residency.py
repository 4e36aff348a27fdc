# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Engine side of resident-MoE placement: one Placement per process, decided before the first expert weight is created.

It is logged once. What it reads (variables, routing statistics, vLLM's settings) is parsed by
vllm_ds4x.moe.engine_inputs, the arithmetic is vllm_ds4x.moe.placement's; this hook adds the GPU's
memory, the process's state and the log.
"""

from vllm.logger import init_logger

from vllm_ds4x.config_views import VllmConfigView
from vllm_ds4x.moe import placement as mp
from vllm_ds4x.moe.engine_inputs import engine_budget, prefetch_window, prefill_min_batch, read_env, routing_stats

logger = init_logger(__name__)

_placement: mp.Placement | None = None
_planned: tuple[int, str] | None = None  # (bytes of weights planned on this GPU, summary)


def decide(vllm_config: VllmConfigView, selection: mp.Selection, draft_resident: bool) -> mp.Placement:
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


__all__ = ["current", "decide", "engine_budget", "is_draft_layer", "is_resident_layer", "log_placement",
           "prefetch_window", "prefill_min_batch"]  # what the patches ask of this module
