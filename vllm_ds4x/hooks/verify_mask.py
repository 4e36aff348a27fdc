# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Per-request verify depths inside full decode graphs (draft_depth verify "request"): masked rows for cpu_decode, a cap on tokens kept.

The scheduler still gives a decode batch one depth, the deepest its requests
chose, so the batch replays that depth's graph; it also sends each request's
own depth (SchedulerOutput.ds4x_verify_depths). Before the step, the model
runner marks the rows of the drafts past a request's own depth in one static
buffer that the captured graphs read; the target's lk_moe layers route those
rows to expert -1, which lk_moe skips, so the CPU experts cost what the batch
verifies. After the forward, the rejection sampler keeps at most 1 + own depth
tokens of each request (vllm_ds4x.depth.verify_rows says why that is lossless).

With DSpark, the same step's drafter rests for the requests the scheduler
names (SchedulerOutput.ds4x_resting_drafters; vllm_ds4x.depth.drafter_rest): their
query rows route to expert -1 in DSpark's own lk_moe layers, and when all of
the step's requests rest DSpark stores its context K/V and drafts nothing.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from vllm_ds4x.depth import verify_rows
from vllm_ds4x.depth.policy import configured_draft_depth

_rows: torch.Tensor | None = None  # [max tokens] bool, True: a row no request verifies
_marked = 0  # rows [0, _marked) may hold a previous step's marks
_block = 0  # DSpark's query rows a request (K; 0: another drafter, which never rests)
_draft_rows: torch.Tensor | None = None  # [max tokens] bool, True: a query row of a resting drafter
_draft_marked = 0
_all_rest = False  # every request of the step rests: DSpark drafts nothing


def enable(vllm_config: Any, max_tokens: int, device: torch.device) -> None:
    """At model runner v2's start: the static row mask, when the draft_depth asks
    for per-request verify; graphs captured after this read it at every replay."""
    global _rows, _block, _draft_rows
    spec = vllm_config.speculative_config
    if spec is None or not spec.num_speculative_tokens:
        return
    _block = spec.num_speculative_tokens if spec.method == "dspark" else 0  # its anchor-first block
    if configured_draft_depth(getattr(spec, "draft_depth", None), spec.num_speculative_tokens).verify == "request":
        _rows = torch.zeros(max_tokens, dtype=torch.bool, device=device)
        if _block:
            _draft_rows = torch.zeros(max_tokens, dtype=torch.bool, device=device)


def prepare_drafter(resting: frozenset[str] | None, req_ids: list[str]) -> None:
    """Before a step's forward: whether its drafter rests whole, and else the query rows
    of each resting request (request i's are [i K, (i + 1) K) in DSpark's block)."""
    global _all_rest, _draft_marked
    _all_rest = bool(_block and req_ids) and resting is not None and all(r in resting for r in req_ids)
    if _draft_rows is None or not (_draft_marked or (resting and not _all_rest)):  # nothing to mark or clear
        return
    end = max(_draft_marked, len(req_ids) * _block)
    host = np.zeros(end, dtype=np.bool_)
    if resting and not _all_rest:
        for i, req_id in enumerate(req_ids):
            if req_id in resting:
                host[i * _block:(i + 1) * _block] = True
    _draft_rows[:end].copy_(torch.from_numpy(host), non_blocking=True)
    _draft_marked = len(req_ids) * _block if host.any() else 0


def drafter_rests() -> bool:
    """Every request of the step rests: DSpark stores its context K/V and drafts nothing (its
    drafts stay stale, and the next step verifies none of them)."""
    return _all_rest


def prepare(depths: dict[str, int] | None, req_ids: list[str], drafts: np.ndarray | None,
            query_start_loc: np.ndarray, bonus: int, device: torch.device) -> torch.Tensor | None:
    """Before a step's forward: mark the rows no request verifies and return the most
    tokens each request keeps ([requests] int32 on the device), or None when every
    request verifies all it drafted. Clears the rows a previous step marked."""
    global _marked
    if _rows is None:
        return None
    drafted: list[int] = drafts.tolist() if drafts is not None else []
    own = verify_rows.own_depths(depths, req_ids, drafted) if depths and drafted else None
    if own is None:
        if _marked:
            _rows[:_marked].zero_()
            _marked = 0
        return None
    ends = query_start_loc[1:len(own) + 1].tolist()
    end = max(_marked, ends[-1])  # this step's rows, and any the last step marked past them
    host = np.zeros(end, dtype=np.bool_)
    for first, last in verify_rows.masked_rows(own, drafted, ends):
        host[first:last] = True
    _rows[:end].copy_(torch.from_numpy(host), non_blocking=True)
    _marked = ends[-1]
    kept = np.asarray(verify_rows.kept_tokens(own, bonus), dtype=np.int32)
    return torch.from_numpy(kept).to(device, non_blocking=True)


def masked_ids(experts: Any, topk_ids: torch.Tensor, row_offset: Callable[[], int]) -> torch.Tensor:
    """lk_moe's routing with the masked rows sent to expert -1: the target's rows no
    request verifies; in DSpark's own layers, the query rows of resting drafters.
    `row_offset`: the current micro-batch's first row in the step."""
    if _rows is None:  # per-request verify off: no row is masked (a resting drafter then rests whole)
        return topk_ids
    mask = _draft_rows if _draft_layer(experts) else _rows
    if mask is None:  # a draft layer of a drafter that never rests
        return topk_ids
    first = row_offset()
    rows = mask[first:first + topk_ids.size(0)]
    return topk_ids.masked_fill(rows.unsqueeze(1), -1)


def _draft_layer(experts: Any) -> bool:
    known = getattr(experts, "ds4x_draft_layer", None)
    if known is None:  # once a layer, at its first call (capture): the placement is decided by then
        from vllm_ds4x.hooks import moe_residency

        known = experts.ds4x_draft_layer = moe_residency.is_draft_layer(experts.layer_name)
    return bool(known)
