# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Per-request draft depth for speculative decoding: its config, and DepthPolicy.

How many of the K_max drafted tokens each request would verify. A decode
batch verifies one depth, the deepest its requests chose, rounded up to one
with a CUDA graph (``graph_depths``); verifying more than a request chose, or
a shorter prefix than K_max, is lossless (rejection sampling accepts a prefix anyway), and
drafting still produces K_max. Policies:

- ``fixed``: every request chooses K_max (vLLM's behaviour, the default).
- ``phase``: ``reasoning_depth`` while a request is inside its reasoning
  section, ``answer_depth`` after it.
- ``adaptive``: per request and phase, an acceptance estimate per draft
  position, and a table of step cost by tokens verified; picks the depth with
  the most expected tokens per second, with hysteresis.

A request may choose its own depth with ``SamplingParams.extra_args["draft_depth"]``
(OpenAI API: ``"vllm_xargs": {"draft_depth": 1}``); like any choice it rounds
up to a graph depth, so under ``fixed`` it verifies K_max.

Configured inside ``--speculative-config``, e.g.
``{"method": "ngram", "num_speculative_tokens": 2,
"draft_depth": {"policy": "phase", "reasoning_depth": 1}}``.

Pure Python: the policy is stats in, depth out, testable without a GPU. Its
parts, one job each: depth_config (the typed config, parsed once), DepthPolicy
(here: requests and their groups), vllm_ds4x.depth.phase_tracker (the phase from token ids), depth_strategies
(Fixed, Phase, and depth_adaptive's Adaptive, behind the protocol the hooks
call), depth_clock (when adaptive decides), depth_estimates (acceptance, step
costs, the engine-wide seeds), depth_outcomes (adaptive's per-request counts,
counted when read) and depth_tally (the codes a step is counted in).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vllm_ds4x.depth.config import (
    CONFIGS,
    AdaptiveDepth,
    DraftDepthConfig,
    DraftDepthError,
    FixedDepth,
    PhaseDepth,
    configured_draft_depth,
    parse_draft_depth,
)
from vllm_ds4x.depth.estimates import StepCosts
from vllm_ds4x.depth.phase_tracker import ANSWER, REASONING, PhaseTracker
from vllm_ds4x.depth.request import RequestState
from vllm_ds4x.depth.strategies import DepthStrategy, make_strategy
from vllm_ds4x.depth.tally import RETIRED, TallyCodec

__all__ = ["ANSWER", "POLICIES", "REASONING", "AdaptiveDepth", "DepthPolicy", "DraftDepthConfig", "DraftDepthError",
           "FixedDepth", "PhaseDepth", "PhaseTracker", "RequestState", "batch_depth_table", "configured_draft_depth",
           "parse_draft_depth", "request_depth"]

POLICIES = tuple(CONFIGS)
REQUEST_KEY = "draft_depth"


def batch_depth_table(depths: Sequence[int], k_max: int) -> tuple[int, ...]:
    """For each chosen depth 0..K_max, the verify depth of a batch whose deepest
    request chose it: the smallest of `depths` at or above it (lossless: a
    request verifying more drafts than it chose accepts the same prefix)."""
    return tuple(min(d for d in depths if d >= chosen) for chosen in range(k_max + 1))


def request_depth(extra_args: Mapping[str, Any] | None, k_max: int) -> int | None:
    """The client's own depth, if it set one; raises naming the bad value."""
    if not extra_args or REQUEST_KEY not in extra_args:
        return None
    value = extra_args[REQUEST_KEY]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= k_max:
        raise DraftDepthError(f"extra_args.{REQUEST_KEY}={value!r}: expected an integer in 0..{k_max}")
    return value


class DepthPolicy:
    """One per scheduler: requests in, a depth per request out. It keeps the
    requests (by id, to read a step's output) and their groups by phase and
    chosen depth (the scheduler's by-phase counts), and leaves every choice to
    its strategy (vllm_ds4x.depth.strategies); the engine-wide estimates (step
    costs, the acceptance seeds of new requests) are here, for the strategy and
    the scheduler's step timer."""

    def __init__(self, config: DraftDepthConfig, k_max: int, tracker: PhaseTracker | None, lag: int = 1) -> None:
        """lag: steps from a decision to the first step it schedules (2 under
        async scheduling: vLLM schedules a step before it reads the last one)."""
        if config.needs_phase and tracker is None:
            raise DraftDepthError(
                f"speculative_config.draft_depth.policy={config.policy!r} needs to know the reasoning "
                f"phase: start vLLM with --reasoning-parser (e.g. deepseek_r1, deepseek_v4)"
            )
        self.config, self.k_max, self.tracker, self.lag = config, k_max, tracker, lag
        self.codec = TallyCodec(k_max)
        self.batch_depth = batch_depth_table(config.verify_depths(k_max), k_max)
        given = config.step_costs()
        by_batch = {n: list(c) for n, c in given.items() if n > 0}
        self.costs = StepCosts(prior=list(given[min(given)]) if given else [1.0] * (k_max + 1), by_batch=by_batch)
        self.requests: dict[str, RequestState] = {}
        # the requests by slot, until retired: per-step tallies read all but the largest group
        self.groups: dict[int, set[RequestState]] = {}
        self.strategy: DepthStrategy = make_strategy(
            config, k_max, batch_depth=self.batch_depth, set_depth=self.set_depth, requests=self.requests,
            costs=self.costs, lag=lag)

    def add(self, request_id: str, prompt: Sequence[int], extra_args: Mapping[str, Any] | None) -> RequestState:
        state = RequestState(
            request_id=request_id,
            phase=self.tracker.initial(prompt) if self.tracker else ANSWER,
            override=request_depth(extra_args, self.k_max),
            depth=self.k_max,
        )
        self.requests[request_id] = state
        self.strategy.start(state, len(self.requests) - 1)
        return state

    def track_phase(self, state: RequestState, new: Sequence[int], history: Sequence[int]) -> None:
        """A step's new tokens (the last of `history`, all of the request's tokens):
        the phase. The scheduler calls it only when one of them may end a marker."""
        if self.tracker is not None and not self.tracker.last_tokens.isdisjoint(new):
            phase = self.tracker.feed(state.phase, history, len(new))
            if phase != state.phase:
                left, state.phase = state.phase, phase
                self.strategy.phase_changed(state, left)

    def retire(self, state: RequestState) -> None:
        """A request is done: it leaves its group (and, if it still holds it, its
        id); the strategy keeps what it learned (adaptive: the seeds)."""
        if self.requests.get(state.request_id) is state:
            del self.requests[state.request_id]
        if state.slot == RETIRED:
            return
        self._leave_group(state)
        state.slot = RETIRED
        self.strategy.retire(state)

    def set_depth(self, state: RequestState, depth: int) -> None:
        state.depth = depth
        slot = self.codec.slot(state.phase, depth)
        if slot != state.slot:
            self._leave_group(state)
            state.slot = slot
            self.groups.setdefault(slot, set()).add(state)

    def _leave_group(self, state: RequestState) -> None:
        group = self.groups.get(state.slot)
        if group is not None:
            group.discard(state)
            if not group:
                del self.groups[state.slot]
