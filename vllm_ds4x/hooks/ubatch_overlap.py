# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Two micro-batches of a decode step (LVLLM_MOE_OVERLAP=ubatch, issue #20 item 2):
the per-micro-batch inputs as views of the step's own persistent buffers.

In a FULL decode graph every tensor the captured kernels read must keep its
address between capture and replay. vLLM's split_attn_metadata (v1 DBO) makes
new query_start_loc tensors, which a graph would not see refreshed. For a
uniform decode batch split on request boundaries (overlap_plan.split_uniform)
every field is a slice of the batch's buffers instead: request-indexed fields
by the micro-batch's requests, token-indexed ones by its tokens, and
query_start_loc by the prefix [0, n+1) (uniform: [0, q, 2q, ...]), which the
second micro-batch replaces by its own rebased copy in a persistent buffer
(rebase_query_start: right under padding too). The per-micro-batch builders then write their own
persistent buffers from these views at capture and again before each replay.

The engine side (builders, capture, replay, the threads) is ubatch_split.py;
this module imports only torch, so the unit tests check it on the CPU."""

import dataclasses
from typing import Any

import torch

from vllm_ds4x.moe.overlap_plan import MicroBatch, query_start_loc_view

# CommonAttentionMetadata fields (vllm/v1/attention/backend.py), by what indexes them
REQUEST_FIELDS = ("seq_lens", "block_table_tensor", "is_prefilling", "seq_lens_cpu_upper_bound",
                  "dcp_local_seq_lens", "dcp_local_seq_lens_cpu", "_seq_lens_cpu", "_num_computed_tokens_cpu")
TOKEN_FIELDS = ("slot_mapping", "positions")
QUERY_START_FIELDS = ("query_start_loc", "query_start_loc_cpu")
# read per batch or by prefill-only builders; a decode micro-batch must not carry the batch's
UNSPLIT_NONE = ("logits_indices_padded", "num_logits_indices", "encoder_seq_lens", "encoder_seq_lens_cpu",
                "mm_req_doc_ranges", "_num_computed_tokens_cache")


def _sliced(value: Any, start: int, stop: int) -> Any:
    return None if value is None else value[start:stop]


def micro_batch_metadata(common: Any, micro: MicroBatch, query_len: int) -> Any:
    """The micro-batch's CommonAttentionMetadata: views of the batch's tensors
    (same storage, so the same addresses in capture and replay), its own
    counts. max_seq_len stays the batch's, an upper bound either way."""
    first, last = query_start_loc_view(micro, query_len)
    fields: dict[str, Any] = {name: _sliced(getattr(common, name), first, last) for name in QUERY_START_FIELDS}
    for name in REQUEST_FIELDS:
        if hasattr(common, name):
            fields[name] = _sliced(getattr(common, name), micro.req_start, micro.req_stop)
    for name in TOKEN_FIELDS:
        fields[name] = _sliced(getattr(common, name), micro.tok_start, micro.tok_stop)
    for name in UNSPLIT_NONE:
        if getattr(common, name, None) is not None:
            raise ValueError(f"{name} is set: not a pure decode batch, which is never split")
    return dataclasses.replace(common, num_reqs=micro.num_reqs, num_actual_tokens=micro.num_tokens,
                               max_query_len=query_len, **fields)


def rebase_query_start(query_start_loc: torch.Tensor, micro: MicroBatch, out: torch.Tensor) -> torch.Tensor:
    """The second micro-batch's own query_start_loc, written into a persistent
    buffer (out) that a graph captured once and reads at every replay: the
    batch's entries of its requests less the first. Unlike the prefix view it
    stays right when the graph pads requests (a padded request has no tokens:
    v2 writes num_tokens past the real ones), so padding never gives a padded
    request of the second micro-batch a query it does not have."""
    n = micro.num_reqs
    part = query_start_loc[micro.req_start:micro.req_stop + 1]
    if part.numel() != n + 1 or out.numel() < n + 1:
        raise ValueError(f"query_start_loc has {query_start_loc.numel()} entries, buffer {out.numel()}: "
                         f"requests [{micro.req_start}, {micro.req_stop}) do not fit")
    torch.sub(part, part[:1], out=out[:n + 1])
    return out[:n + 1]


def micro_batch_inputs(model_inputs: dict[str, Any], micro: MicroBatch) -> dict[str, Any]:
    """The model's keyword inputs for one micro-batch: token-indexed tensors cut
    to its rows (views), positions of multi-axis RoPE ([axes, tokens]) by
    column, anything else (None, IntermediateTensors of PP>1, never split)
    as it is."""
    out: dict[str, Any] = {}
    for name, value in model_inputs.items():
        if isinstance(value, torch.Tensor):
            cols = name == "positions" and value.dim() == 2
            out[name] = value[:, micro.tok_start:micro.tok_stop] if cols else micro_batch_rows(value, micro)
        else:
            out[name] = value
    return out


def join_outputs(outputs: list[Any]) -> Any:
    """The micro-batches' model outputs as one batch's, in token order: a
    tensor, or (hidden states, [aux hidden states]) as EAGLE-3-style models
    return them."""
    if all(isinstance(x, torch.Tensor) for x in outputs):
        return torch.cat(outputs)
    if all(isinstance(x, tuple) and len(x) == 2 for x in outputs):
        hidden = torch.cat([x[0] for x in outputs])
        aux = [torch.cat(parts) for parts in zip(*(x[1] for x in outputs), strict=True)]
        return hidden, aux
    raise TypeError(f"cannot join micro-batch outputs of types {[type(x).__name__ for x in outputs]}")


def micro_batch_rows(tensor: torch.Tensor, micro: MicroBatch) -> torch.Tensor:
    """A token-indexed tensor's rows for one micro-batch (input ids, positions,
    hidden states, cpu_decode's fp32 output rows): a view, never a copy."""
    return tensor[micro.tok_start:micro.tok_stop]

