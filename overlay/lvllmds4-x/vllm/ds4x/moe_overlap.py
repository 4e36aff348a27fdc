# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The shared expert beside lk_moe's cpu_decode (LVLLM_MOE_OVERLAP=shared).

Why it did not overlap before: MoERunner._forward_impl makes the shared
experts' aux stream wait on the main stream *before the router*, so inside a
graph the shared expert depends only on the layer's input and runs beside the
router and top-k kernels (~0.03 ms a layer). cpu_decode starts after top-k, by
which time the shared expert is nearly done: on the H200 stand-in only 0.04-0.06
of its 0.40 ms a step fell in the main stream's wait for the CPU experts, and
the router's kernels shared the GPU with it. Here the aux stream waits on an
event recorded *after* the router, so the shared expert starts with cpu_decode
and runs while the CPU works; the main stream joins it after cpu_decode's
output is converted. The arithmetic is the same; only the start moves."""

import os
from typing import Any

import torch
from vllm.ds4x import overlap_plan
from vllm.logger import init_logger

logger = init_logger(__name__)

_level: overlap_plan.Level | None = None


def level() -> overlap_plan.Level:
    """LVLLM_MOE_OVERLAP, read once per process: graphs captured under one
    level must not be replayed next to code running another."""
    global _level
    if _level is None:
        _level = overlap_plan.parse_level(os.environ.get(overlap_plan.ENV))
        logger.info("%s=%s", overlap_plan.ENV, _level)
    return _level


def _start_shared(shared: Any, shared_input: torch.Tensor | None) -> bool:
    """Queue the shared expert on its aux stream after the router; False when
    the fork would not run it on the aux stream (no stream, too many tokens,
    EPLB...), which leaves the fork's own path to run it."""
    if shared is None or shared_input is None or not overlap_plan.shares_beside_cpu_decode(level()):
        return False
    from vllm.model_executor.layers.fused_moe.runner.shared_experts import SharedExpertsOrder

    order = SharedExpertsOrder.MULTI_STREAM_OVERLAPPED
    if shared._determine_shared_experts_order(shared_input) != order:
        return False
    stream = shared._stream
    # the event: after top-k on the main stream, i.e. where cpu_decode starts
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        output = shared._layer(shared_input)
    assert shared._output[shared._output_idx] is None
    shared._output[shared._output_idx] = output
    return True


def cpu_decode(runner: Any, hidden_states: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
               shared_input: torch.Tensor | None) -> torch.Tensor:
    """RoutedExperts._cpu_decode, with the shared expert queued beside it when
    the level asks; the main stream waits for the shared expert only after
    cpu_decode's output is converted, where the fork's own join was."""
    shared = runner.shared_experts
    started = _start_shared(shared, shared_input)
    out = runner.routed_experts._cpu_decode(hidden_states, topk_weights, topk_ids)
    if started:
        torch.cuda.current_stream().wait_stream(shared._stream)
    return out


def shared_done(runner: Any) -> bool:
    """True when cpu_decode above already ran this layer's shared expert, so the
    fork's MULTI_STREAM_OVERLAPPED call must be skipped (it asserts an empty
    output slot). Any other order (NO_OVERLAP ran it up front) leaves that call
    a no-op either way."""
    shared = runner.shared_experts
    return shared is not None and shared._output[shared._output_idx] is not None
