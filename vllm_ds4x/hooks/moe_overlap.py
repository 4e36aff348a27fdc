# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The shared expert beside lk_moe's cpu_decode (LVLLM_MOE_OVERLAP=shared), and
cpu_decode on its own side stream between two micro-batches (ubatch).

Why it did not overlap before: MoERunner._forward_impl makes the shared
experts' aux stream wait on the main stream *before the router*, so inside a
graph the shared expert depends only on the layer's input and runs beside the
router and top-k kernels (~0.03 ms a layer). cpu_decode starts after top-k, by
which time the shared expert is nearly done: on the H200 stand-in only 0.04-0.06
of its 0.40 ms a step fell in the main stream's wait for the CPU experts, and
the router's kernels shared the GPU with it. Here the aux stream waits on an
event recorded *after* the router, so the shared expert starts with cpu_decode
and runs while the CPU works; the main stream joins it after cpu_decode's
output is converted. The arithmetic is the same; only the start moves.

At ubatch, inside ubatch_split's micro-batch threads, every cpu_decode goes on
ONE side stream (so lk_moe's calls run one after another, as its single thread
pool needs) into the micro-batch's own rows of the shared fp32 output, and the
thread yields to the other micro-batch before waiting for it: the other's GPU
part of the layer runs while the CPU computes this one's experts."""

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch
from vllm.logger import init_logger

from vllm_ds4x.hooks import verify_mask
from vllm_ds4x.moe import overlap_plan

logger = init_logger(__name__)

_level: overlap_plan.Level | None = None
_tokens: int | None = None
_side: torch.cuda.Stream | None = None
_splitting = False  # ubatch_split's threads are running a micro-batched step


def level() -> overlap_plan.Level:
    """LVLLM_MOE_OVERLAP, read once per process: graphs captured under one
    level must not be replayed next to code running another."""
    global _level
    if _level is None:
        _level = overlap_plan.parse_level(os.environ.get(overlap_plan.ENV))
        logger.info("%s=%s", overlap_plan.ENV, _level)
    return _level


def ubatch_tokens() -> int:
    """LVLLM_MOE_UBATCH_TOKENS, read once per process, as the level is."""
    global _tokens
    if _tokens is None:
        _tokens = overlap_plan.parse_tokens(os.environ.get(overlap_plan.TOKENS_ENV))
        if level() == "ubatch":
            logger.info("%s=%d", overlap_plan.TOKENS_ENV, _tokens)
    return _tokens


def _start_shared(shared: Any, shared_input: torch.Tensor | None) -> torch.cuda.Event | None:
    """Queue the shared expert on its aux stream after the router and return the
    event that marks its end; None when the fork would not run it on the aux
    stream (no stream, too many tokens, EPLB...), which leaves the fork's own
    path to run it. The event, not the aux stream's tail: at ubatch the other
    micro-batch queues its own shared expert there before this one joins."""
    if shared is None or shared_input is None:
        return None
    from vllm.model_executor.layers.fused_moe.runner.shared_experts import SharedExpertsOrder

    order = SharedExpertsOrder.MULTI_STREAM_OVERLAPPED
    if shared._determine_shared_experts_order(shared_input) != order:
        return None
    stream = shared._stream
    # the event: after top-k on the main stream, i.e. where cpu_decode starts
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        output = shared._layer(shared_input)
        done = torch.cuda.Event()
        done.record(stream)
    assert shared._output[shared._output_idx] is None
    shared._output[shared._output_idx] = output
    return done


def cpu_decode(runner: Any, hidden_states: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
               shared_input: torch.Tensor | None) -> torch.Tensor:
    """RoutedExperts._cpu_decode, with the shared expert queued beside it when
    the level asks; the main stream waits for the shared expert only after
    cpu_decode's output is converted, where the fork's own join was. Inside
    a micro-batched step: _cpu_decode_split. Rows that no request verifies
    (per-request verify depths) go to no expert."""
    topk_ids = verify_mask.masked_ids(runner.routed_experts, topk_ids, token_offset)
    if splitting():
        return _cpu_decode_split(runner, hidden_states, topk_weights, topk_ids, shared_input)
    shared = runner.shared_experts
    # ubatch's whole steps keep the fork's order: `shared` measured slower at one request
    started = _start_shared(shared, shared_input) if level() == "shared" else None
    out = runner.routed_experts._cpu_decode(hidden_states, topk_weights, topk_ids)
    if started is not None:
        torch.cuda.current_stream().wait_event(started)
    return out


TOKEN_OFFSET = "ds4x_token_offset"  # a micro-batch's first token row, in its ForwardContext (set by ubatch_split)


def token_offset() -> int:
    """The current micro-batch's first token row in the step (0 outside a split)."""
    from vllm import forward_context

    ctx = forward_context._forward_context
    return 0 if ctx is None else int(ctx.additional_kwargs.get(TOKEN_OFFSET, 0))


def _cpu_decode_split(runner: Any, hidden_states: torch.Tensor, topk_weights: torch.Tensor,
                      topk_ids: torch.Tensor, shared_input: torch.Tensor | None) -> torch.Tensor:
    """One micro-batch's cpu_decode: queued on the side stream after this
    micro-batch's router, into its own output rows (its token offset in the
    step); then the thread yields, so the other micro-batch queues its GPU
    work on the main stream before this one waits for the CPU's result and
    converts it there."""
    from vllm.v1.worker.ubatching import dbo_yield

    shared = runner.shared_experts
    if shared is not None:
        shared.enable_dbo = True  # an output slot per micro-batch (ubatch id 0 or 1)
    started = _start_shared(shared, shared_input)
    main, side = torch.cuda.current_stream(), cpu_stream()
    side.wait_stream(main)
    with torch.cuda.stream(side):
        rows = runner.routed_experts._cpu_decode(hidden_states, topk_weights, topk_ids,
                                                 row_offset=token_offset(), convert=False)
        done = torch.cuda.Event()
        done.record(side)
    # no record_stream: this frame holds cpu_decode's inputs until the main
    # stream has waited for `done`, so no later allocation can reuse them early
    dbo_yield()
    main.wait_event(done)
    out = rows.to(hidden_states.dtype)
    if started is not None:
        main.wait_event(started)
    return out


def cpu_stream() -> torch.cuda.Stream:
    """The one side stream every micro-batched cpu_decode of the process runs on."""
    global _side
    if _side is None:
        _side = torch.cuda.Stream()
    return _side


def splitting() -> bool:
    """True in ubatch_split's threads while they run a micro-batched step (and
    only there: model runner v1's own DBO threads never set the flag)."""
    if not _splitting:  # the default path: no import, no lookup
        return False
    from vllm.v1.worker.ubatching import dbo_enabled

    return bool(dbo_enabled())


@contextlib.contextmanager
def split_step() -> Iterator[None]:
    """Marks a micro-batched step while ubatch_split's threads run it."""
    global _splitting
    _splitting = True
    try:
        yield
    finally:
        _splitting = False


def shared_done(runner: Any) -> bool:
    """True when cpu_decode above already ran this layer's shared expert, so the
    fork's MULTI_STREAM_OVERLAPPED call must be skipped (it asserts an empty
    output slot). Any other order (NO_OVERLAP ran it up front) leaves that call
    a no-op either way."""
    shared = runner.shared_experts
    return shared is not None and shared._output[shared._output_idx] is not None
