# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Two micro-batches in model runner v2's FULL decode graphs (LVLLM_MOE_OVERLAP=ubatch,
issue #20 item 2): the engine side. The hooks in the fork call:

- add_builders (gpu/attn_utils.init_attn_backend): two more attention-metadata
  builders per attention group, one per micro-batch, with a decode-sized token
  budget, so neither micro-batch's persistent buffers clobber the other's;
- micro_batch_common / builder_index (gpu/attn_utils.build_attn_metadata): a
  micro-batch's CommonAttentionMetadata as views of the step's buffers
  (ubatch_overlap) and the builder that owns it;
- capture_split + forward (gpu/cudagraph_utils.create_forward_fn): the warm-up
  and the captured pass run the model as two micro-batches, one thread each,
  through vLLM's own UBatchContext (v1/worker/ubatching.py) -- one graph holds
  both, and replay needs no threads;
- refresh (gpu/model_runner.execute_model): before a split graph replays, the
  micro-batch builders write this step's values into their buffers;
- token_offset (DeepSeek-V4's _mtp_hidden_buffer, RoutedExperts' output rows).

Only for what overlap_plan.plan_split splits: model runner v2, DP=PP=1, a FULL
graph of a uniform decode batch of two or more requests. Everything else runs as
before. lk_moe's side (cpu_decode on the side stream, the yield) is moe_overlap."""

import copy
import dataclasses
import threading
from typing import Any, Protocol

import torch
from vllm import forward_context
from vllm.logger import init_logger

from vllm_ds4x.config_views import VllmConfigView
from vllm_ds4x.hooks import moe_overlap, ubatch_overlap
from vllm_ds4x.moe import overlap_plan

logger = init_logger(__name__)

TOKEN_OFFSET = moe_overlap.TOKEN_OFFSET
token_offset = moe_overlap.token_offset  # the patched DeepSeek-V4 model reads it here
_query_start: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # device type -> (device, cpu) buffers


class GraphDescriptorView(Protocol):
    """vLLM's BatchExecutionDescriptor: the graph a step replays, as the split reads it."""

    @property
    def cg_mode(self) -> object: ...
    @property
    def uniform_token_count(self) -> int | None: ...
    @property
    def num_reqs(self) -> int | None: ...
    @property
    def num_tokens(self) -> int: ...


@dataclasses.dataclass(frozen=True)
class Part:
    """One micro-batch of a split graph; its metadata builder is index + 1 (0 is the batch's)."""

    index: int
    micro: overlap_plan.MicroBatch
    query_len: int


@dataclasses.dataclass
class SplitStep:
    """What a split capture needs: the parts, each one's attention metadata and slot mappings."""

    parts: tuple[Part, ...]
    attn_metadata: list[dict[str, Any]]
    slot_mappings: list[dict[str, torch.Tensor]]


def wanted(vllm_config: VllmConfigView) -> bool:
    """Whether this engine may split any graph: the level, v2, DP=PP=1, FULL graphs, two requests."""
    if moe_overlap.level() != "ubatch":
        return False
    p = vllm_config.parallel_config
    return (bool(getattr(vllm_config, "use_v2_model_runner", False)) and p.data_parallel_size == 1
            and p.pipeline_parallel_size == 1 and vllm_config.scheduler_config.max_num_seqs >= 2
            and getattr(p, "decode_context_parallel_size", 1) == 1
            and vllm_config.compilation_config.cudagraph_mode.has_full_cudagraphs())


def parts_for(vllm_config: VllmConfigView, desc: GraphDescriptorView) -> tuple[Part, ...] | None:
    """The micro-batches of a graph descriptor (BatchExecutionDescriptor), or None."""
    from vllm.config.compilation import CUDAGraphMode

    if not wanted(vllm_config):
        return None
    q, r = desc.uniform_token_count, desc.num_reqs
    full = desc.cg_mode == CUDAGraphMode.FULL and q is not None and r is not None and desc.num_tokens == q * r
    p = vllm_config.parallel_config
    shape = overlap_plan.StepShape(v2_runner=True, data_parallel=p.data_parallel_size,
                                   pipeline_parallel=p.pipeline_parallel_size, full_decode_graph=full,
                                   num_reqs=r or 0, query_len=q or 1)
    split = overlap_plan.plan_split(moe_overlap.level(), shape, moe_overlap.ubatch_tokens())
    if split is None or q is None:  # a split is of a full graph, whose q is set
        return None
    return tuple(Part(i, m, q) for i, m in enumerate(split))


def micro_batch_config(vllm_config: VllmConfigView) -> VllmConfigView:
    """A shallow copy of the engine's config whose scheduler budget is a decode
    graph's tokens (overlap_plan.micro_batch_token_budget): what the extra
    builders size their buffers by. Shared sub-configs stay shared."""
    sched = copy.copy(vllm_config.scheduler_config)
    spec = vllm_config.speculative_config
    k = spec.num_speculative_tokens if spec is not None and spec.num_speculative_tokens else 0
    budget = overlap_plan.micro_batch_token_budget(sched.max_num_seqs, k, sched.max_num_batched_tokens)
    object.__setattr__(sched, "max_num_batched_tokens", budget)
    config = copy.copy(vllm_config)
    object.__setattr__(config, "scheduler_config", sched)
    return config


def add_builders(group: Any, vllm_config: VllmConfigView, device: torch.device, kernel_block_size: int | None) -> None:
    """Builders 1 and 2 of an attention group (the micro-batches'), after the
    fork made builder 0; they share builder 0's workspace (both micro-batches'
    attention runs on one stream, one after the other)."""
    if not wanted(vllm_config):
        return
    whole = list(group.metadata_builders)
    group.create_metadata_builders(vllm_config=micro_batch_config(vllm_config), device=device,
                                   kernel_block_size=kernel_block_size, num_metadata_builders=2)
    extra = list(group.metadata_builders)
    group.metadata_builders = whole + extra
    if hasattr(whole[0], "_get_workspace_buffer"):
        for builder in extra:
            if hasattr(builder, "set_workspace_buffer"):
                builder.set_workspace_buffer(whole[0]._get_workspace_buffer())
    n = vllm_config.scheduler_config.max_num_seqs + 1
    _query_start.setdefault(torch.device(device).type, (torch.zeros(n, dtype=torch.int32, device=device),
                                                        torch.zeros(n, dtype=torch.int32)))


def builder_index(part: Part | None) -> int:
    return 0 if part is None else part.index + 1


def micro_batch_common(common: Any, part: Part | None) -> Any:
    """The CommonAttentionMetadata a micro-batch's builder gets: views of the
    batch's, and for the second micro-batch its own rebased query_start_loc
    in a persistent buffer (ubatch_overlap.rebase_query_start)."""
    if part is None:
        return common
    meta = ubatch_overlap.micro_batch_metadata(common, part.micro, part.query_len)
    if part.index == 0:
        return meta
    gpu, cpu = _query_start[common.query_start_loc.device.type]  # one device per worker
    return dataclasses.replace(
        meta, query_start_loc=ubatch_overlap.rebase_query_start(common.query_start_loc, part.micro, gpu),
        query_start_loc_cpu=ubatch_overlap.rebase_query_start(common.query_start_loc_cpu, part.micro, cpu))


def _prepare_parts(parts: tuple[Part, ...], model_state: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    return [model_state.prepare_attn(*args, micro_batch=part, **kwargs) for part in parts]


def capture_split(vllm_config: VllmConfigView, desc: GraphDescriptorView, model_state: Any, input_buffers: Any, block_tables: Any,
                  attn_groups: Any, kv_cache_config: Any) -> SplitStep | None:
    """Per-micro-batch metadata for a capture (a fresh set for the warm-up and
    for the captured pass, as the graph manager requires), made from the same
    dummy batch as prepare_inputs_to_capture's."""
    parts = parts_for(vllm_config, desc)
    if parts is None:
        return None
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
    from vllm.v1.worker.gpu.input_batch import InputBatch

    num_reqs, num_tokens = desc.num_reqs, desc.num_tokens
    batch = InputBatch.make_dummy(num_reqs, num_tokens, input_buffers)
    slots = block_tables.get_dummy_slot_mappings(num_tokens)
    attn = _prepare_parts(parts, model_state, batch, CUDAGraphMode.NONE, block_tables.get_dummy_block_tables(num_reqs),
                          slots, attn_groups, kv_cache_config, for_capture=True)
    by_layer = build_slot_mappings_by_layer(slots, kv_cache_config)
    per_part = [{k: ubatch_overlap.micro_batch_rows(v, p.micro) for k, v in by_layer.items()} for p in parts]
    return SplitStep(parts=parts, attn_metadata=attn, slot_mappings=per_part)


def refresh(vllm_config: VllmConfigView, desc: GraphDescriptorView, model_state: Any, *args: Any) -> None:
    """Before a split graph replays: the micro-batch builders rebuild from this
    step's batch (prepare_attn's arguments), writing their persistent buffers."""
    parts = parts_for(vllm_config, desc)
    if parts is not None:
        _prepare_parts(parts, model_state, *args)


def forward(model: Any, model_inputs: dict[str, Any], split: SplitStep | None) -> Any:
    """The model on the whole batch, or on its micro-batches (run_split)."""
    if split is None:
        return model(**model_inputs)
    return run_split(model, model_inputs, split)


def _contexts(split: SplitStep) -> list[Any]:
    whole = forward_context.get_forward_context()
    return [dataclasses.replace(whole, attn_metadata=attn, slot_mapping=slots, moe_layer_index=0,
                                additional_kwargs={**whole.additional_kwargs, TOKEN_OFFSET: part.micro.tok_start})
            for part, attn, slots in zip(split.parts, split.attn_metadata, split.slot_mappings, strict=True)]


def _micro_batch_thread(ctx: Any, model: Any, inputs: dict[str, Any], results: list[Any], device: int) -> None:
    """One micro-batch, as v1's UBatchWrapper runs one: the thread's cuBLAS
    handle on the compute stream first (which also sets vLLM's per-thread
    current stream, so UBatchContext makes no stream of its own), then the
    model inside the UBatchContext, which hands the baton over at every
    dbo_yield. No GEMM runs on the side stream (lk_moe and events only), so
    no handle is made for it: a workspace allocated there during capture
    would be outside the graph."""
    try:
        torch.cuda.set_device(device)
        with torch.inference_mode():
            with torch.cuda.stream(ctx.compute_stream):
                torch.cuda.current_blas_handle()
            with ctx:
                results[ctx.id] = model(**inputs)
    except BaseException as e:  # re-raised by run_split in the caller's thread
        results[ctx.id] = e
        ctx.ready_barrier.abort()


def _join(threads: list[threading.Thread], ctxs: list[Any], results: list[Any]) -> None:
    """Wait for both threads; once one has failed, keep waking the other at its
    yields so that it runs to its end instead of waiting for a dead peer."""
    for thread in threads:
        while thread.is_alive():
            if any(isinstance(r, BaseException) for r in results):
                for ctx in ctxs:
                    ctx.cpu_wait_event.set()
            thread.join(timeout=0.05)


def run_split(model: Any, model_inputs: dict[str, Any], split: SplitStep) -> Any:
    """The model as two micro-batches on the caller's stream (the capture
    stream inside torch.cuda.graph), lk_moe's cpu_decode on moe_overlap's side
    stream; the outputs joined in token order."""
    from vllm.v1.worker.ubatching import make_ubatch_contexts

    contexts = _contexts(split)
    barrier = threading.Barrier(len(split.parts) + 1)
    ctxs = make_ubatch_contexts(len(split.parts), compute_stream=torch.cuda.current_stream(),
                                comm_stream=moe_overlap.cpu_stream(), forward_contexts=contexts,
                                ready_barrier=barrier)
    results: list[Any] = [None] * len(split.parts)
    device = torch.cuda.current_device()
    threads = [threading.Thread(target=_micro_batch_thread, daemon=True, name=f"ds4x-ubatch-{p.index}",
                                args=(ctx, model, ubatch_overlap.micro_batch_inputs(model_inputs, p.micro),
                                      results, device)) for ctx, p in zip(ctxs, split.parts, strict=True)]
    with forward_context.override_forward_context(None), moe_overlap.split_step():
        for thread in threads:
            thread.start()
        try:
            barrier.wait()
            ctxs[0].cpu_wait_event.set()
        except threading.BrokenBarrierError:
            pass  # a thread failed before its context: its error is in results
        _join(threads, ctxs, results)
    for r in results:
        if isinstance(r, BaseException):
            raise RuntimeError("a micro-batch of a split decode step failed") from r
    return ubatch_overlap.join_outputs(results)
