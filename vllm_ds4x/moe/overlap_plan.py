# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""CPU-GPU overlap around lk_moe's cpu_decode (issue #20), the pure part: the
switch and how a uniform decode batch splits into two micro-batches.

``LVLLM_MOE_OVERLAP`` (read once, when the first MoE layer runs, so it holds
for every graph the process captures)::

    off      (default) today's order: the shared expert starts beside the
             router, and cpu_decode's wait is the GPU's idle time
    shared   the shared expert (all the layer's GPU work that does not need the
             routed experts) is queued on its side stream after the router,
             beside cpu_decode, so it runs while the CPU works (measured on the
             H200: no gain, 4-10% slower at one request)
    ubatch   a FULL decode graph of two or more requests whose micro-batches hold
             at most LVLLM_MOE_UBATCH_TOKENS tokens each runs as two micro-batches:
             one's CPU experts beside the other's GPU work (model runner v2,
             DP=PP=1; docs/overlap-design.md); every other step runs as at off

``LVLLM_MOE_UBATCH_TOKENS`` (default 1): the most tokens a micro-batch may hold.
Splitting a step splits each layer's cpu_decode call in two, which pays only
where two calls of n tokens cost lk_moe less than one of 2n plus the GPU work
the split hides. 1 pays on both curves measured on the H200 (DeepSeek-V4-Flash
MXFP4: 2 x 1.69 < 3.66 ms; its 4- and 6-token calls were not measured), and
only 1 on the end-to-end stand-in (2 x 2.60 > 4.53 ms at 2, 2 x 3.52 > 6.30 at
3; its two-request depth-2 step went from 85.9 to 98.5 ms split). `measure`
advises the value from the box's own curve.

Pure Python on purpose: the unit tests load this file without torch or vLLM."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ENV = "LVLLM_MOE_OVERLAP"
TOKENS_ENV = "LVLLM_MOE_UBATCH_TOKENS"
DEFAULT_TOKENS = 1
Level = Literal["off", "shared", "ubatch"]
LEVELS: tuple[Level, ...] = ("off", "shared", "ubatch")


class OverlapError(ValueError):
    """A bad LVLLM_MOE_OVERLAP value; the message names the variable and the choices."""


def parse_level(value: str | None) -> Level:
    """The level, strictly: a typo fails at start-up instead of silently running off."""
    text = (value or "").strip().lower()
    if not text:
        return "off"
    for level in LEVELS:
        if text == level:
            return level
    raise OverlapError(f"{ENV}={(value or '')[:40]!r}: expected one of {', '.join(LEVELS)}")


def parse_tokens(value: str | None) -> int:
    """LVLLM_MOE_UBATCH_TOKENS, strictly: a whole number of tokens, 1 or more."""
    text = (value or "").strip()
    if not text:
        return DEFAULT_TOKENS
    if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) < 1:  # int() of 5000 digits raises
        raise OverlapError(f"{TOKENS_ENV}={(value or '')[:40]!r}: expected the most tokens a micro-batch may hold, 1 or more")
    return int(text)


@dataclass(frozen=True, kw_only=True)
class MicroBatch:
    """One micro-batch of a uniform decode batch: requests [req_start, req_stop) and
    their tokens [tok_start, tok_stop) of the batch's flat token order."""

    req_start: int
    req_stop: int
    tok_start: int
    tok_stop: int

    @property
    def num_reqs(self) -> int:
        return self.req_stop - self.req_start

    @property
    def num_tokens(self) -> int:
        return self.tok_stop - self.tok_start


def split_uniform(num_reqs: int, query_len: int) -> tuple[MicroBatch, MicroBatch] | None:
    """Two micro-batches of a uniform decode batch (every request verifies
    query_len tokens), the first taking the larger half of the requests; None
    when it holds fewer than two requests. Slices fall on request boundaries,
    so each micro-batch is uniform too (its query_start_loc: query_start_loc_view
    for the first, ubatch_overlap.rebase_query_start for the second)."""
    if query_len < 1:
        raise ValueError(f"query_len={query_len}: a decode step verifies at least one token")
    if num_reqs < 2:
        return None
    first = (num_reqs + 1) // 2
    cut = first * query_len
    return (MicroBatch(req_start=0, req_stop=first, tok_start=0, tok_stop=cut),
            MicroBatch(req_start=first, req_stop=num_reqs, tok_start=cut, tok_stop=num_reqs * query_len))


@dataclass(frozen=True, kw_only=True)
class StepShape:
    """What decides whether a step may run as two micro-batches: the engine's
    setup and the graph's batch descriptor."""

    v2_runner: bool
    data_parallel: int
    pipeline_parallel: int
    full_decode_graph: bool  # a FULL graph of a uniform decode batch is replayed or captured
    num_reqs: int
    query_len: int


def plan_split(level: Level, shape: StepShape, max_tokens: int = DEFAULT_TOKENS
               ) -> tuple[MicroBatch, MicroBatch] | None:
    """Two micro-batches, or None where the step runs whole: any level but
    ubatch, model runner v1 (its own DBO needs DP>1 and DeepEP), DP or PP
    above 1 (DBO's own territory), eager or mixed steps (no graph to keep the
    micro-batches' views fixed), one request, or a micro-batch of more than
    max_tokens tokens (lk_moe's curve makes that split cost more than it hides)."""
    if level != "ubatch" or not shape.v2_runner or shape.data_parallel > 1 or shape.pipeline_parallel > 1:
        return None
    if not shape.full_decode_graph:
        return None
    split = split_uniform(shape.num_reqs, shape.query_len)
    if split is None or split[0].num_tokens > max_tokens:
        return None
    return split


def query_start_loc_view(micro: MicroBatch, query_len: int) -> tuple[int, int]:
    """The slice [0, n+1) of the batch's query_start_loc that serves as the first
    micro-batch's own, a view that keeps its address in a graph. Uniform batches
    start every request at a multiple of query_len, so the prefix holds the second
    micro-batch's values too, but not once a graph pads requests (a padded request
    has no tokens): the second gets ubatch_overlap.rebase_query_start instead."""
    return 0, micro.num_reqs + 1


def micro_batch_token_budget(max_num_seqs: int, num_speculative_tokens: int, max_num_batched_tokens: int) -> int:
    """max_num_batched_tokens of the micro-batches' attention-metadata builders:
    the most tokens a decode graph holds, max_num_seqs x (1+K), never more
    than the engine's own budget. Buffers sized by the engine's budget (C128A
    top-k tables of DeepSeek-V4: tokens x max_model_len/128) would otherwise
    cost a 32 GB GPU hundreds of MB for each extra builder."""
    if max_num_seqs < 1 or num_speculative_tokens < 0:
        raise ValueError(f"max_num_seqs={max_num_seqs}, K={num_speculative_tokens}: out of range")
    return min(max_num_batched_tokens, max_num_seqs * (1 + num_speculative_tokens))
