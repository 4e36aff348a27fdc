# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Per-request verify depths in one uniform decode batch: which token rows a request does not verify, and how many tokens it may keep.

A decode batch runs the CUDA graph of its deepest depth D, so every request
has its drafts in the last D rows of its query (the worker's half, below:
the fork's model runner v2 through vllm_ds4x.hooks.verify_mask; the scheduler's
half: own_drafts, what each request verified, for its counts). A request that chose depth
c < D verifies only the first c of them: the rows after those are masked
(routed to no CPU expert), and of its sampled tokens it keeps at most
1 + c: the target's tokens up to and including the one after its c-th
draft, which is exactly what verifying c drafts gives (greedy or sampled:
the tokens past a stopping point never change those before it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol


class DraftCounts(Protocol):
    """What uncount changes of vLLM's SpecDecodingStats."""

    num_drafts: int
    num_draft_tokens: int
    num_draft_tokens_per_pos: list[int]


def own_depths(depths: Mapping[str, int], req_ids: Sequence[str], drafts: Sequence[int]) -> list[int] | None:
    """The drafts each request of the batch verifies, in batch order: its own depth
    where `depths` caps it below its scheduled `drafts`, else all of them; None when
    no request of the batch is capped."""
    own = [min(depths.get(req_id, drafted), drafted) for req_id, drafted in zip(req_ids, drafts)]
    return None if own == list(drafts) else own


def masked_rows(own: Sequence[int], drafts: Sequence[int], query_ends: Sequence[int]) -> list[tuple[int, int]]:
    """[first, end) token rows of the drafts past each request's own depth: its drafts
    are the last `drafts[i]` rows of its query, which ends at row `query_ends[i]`."""
    return [(end - drafted + mine, end) for mine, drafted, end in zip(own, drafts, query_ends) if mine < drafted]


def kept_tokens(own: Sequence[int], bonus: int = 1) -> list[int]:
    """The most sampled tokens each request keeps: its verified drafts and the bonus token(s)."""
    return [mine + bonus for mine in own]


def own_drafts(spec: Mapping[str, list[int]], own: Mapping[str, int], refused: Mapping[str, int] | None,
               counted: Callable[[str], bool], stats: DraftCounts | None) -> dict[str, list[int]]:
    """The drafts each request verified at its own depth `own` (the first ones; none at depth 0:
    then it is left out), from those scheduled (`spec`); and vLLM's `stats`, which counted every
    draft scheduled (less those the grammar `refused`) for each request `counted` says it counted,
    less those past its depth."""
    verified = dict(spec)
    for request_id, depth in own.items():
        drafts = spec.get(request_id)
        if not drafts or depth >= len(drafts):
            continue
        if depth:
            verified[request_id] = drafts[:depth]
        else:
            del verified[request_id]
        if stats is not None and counted(request_id):
            counted_drafts = len(drafts) - (refused or {}).get(request_id, 0)
            uncount(stats, counted_drafts, min(depth, counted_drafts))
    return verified


def uncount(stats: DraftCounts, counted: int, verified: int) -> None:
    """A request's drafts that vLLM's stats counted (`counted`) less those past what it verified;
    at depth 0 not a verification at all."""
    stats.num_draft_tokens -= counted - verified
    for position in range(verified, counted):
        stats.num_draft_tokens_per_pos[position] -= 1
    if not verified:
        stats.num_drafts -= 1
