# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The scheduler's side of per-request draft depth (see vllm.ds4x.draft_depth).

The decision is made here, once, in the scheduler: every tensor- and
pipeline-parallel rank receives it as the per-request draft lists of the
scheduler output. Each decode batch verifies one depth (see uniform_depth),
so it keeps a full CUDA graph. KV lookahead stays reserved for K_max.
"""

import time
from collections import defaultdict
from typing import Any

from vllm.ds4x.draft_depth import DepthPolicy, DraftDepthConfig, PhaseTracker, RequestState
from vllm.ds4x.spec_metrics import DepthStats
from vllm.logger import init_logger

logger = init_logger(__name__)


def phase_tracker(vllm_config: Any) -> PhaseTracker | None:
    """Markers from the configured reasoning parser, tokenized like the model's
    text: its start/end strings plus any implicit end markers (DeepSeek-V4's
    tool-call marker)."""
    parser_name = vllm_config.structured_outputs_config.reasoning_parser
    if not parser_name:
        return None
    from vllm.reasoning import ReasoningParserManager
    from vllm.tokenizers import cached_tokenizer_from_config

    tokenizer = cached_tokenizer_from_config(model_config=vllm_config.model_config)
    parser = ReasoningParserManager.get_reasoning_parser(parser_name)(tokenizer)

    def encode(text: str | None) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False) if text else []

    starts = [encode(getattr(parser, "reasoning_start_str", None))]
    ends = [encode(getattr(parser, "reasoning_end_str", None))]
    ends += [encode(m) for m in getattr(parser, "implicit_end_markers", ())]
    return PhaseTracker(starts, ends)


class DraftDepthScheduling:
    """The hooks run for every request on every step, so each takes its fast
    path in a few operations: the policy's state hangs on the request itself,
    a token that ends no marker is one set test, a policy whose batches always
    verify K_max (fixed) never cuts drafts, and metrics are tallied once per
    step."""

    def __init__(self, policy: DepthPolicy) -> None:
        self.policy = policy
        self._adaptive = policy.config.policy == "adaptive"
        self._no_marker = (policy.tracker.last_tokens if policy.tracker else frozenset()).isdisjoint
        # fixed without graph_depths: every batch verifies K_max, nothing to cut
        self._cuts = any(d < policy.k_max for d in policy.batch_depth)
        self._full = policy.batch_depth.index(policy.k_max)  # the lowest choice that verifies K_max
        # this step's verifications by RequestState.slot (phase, chosen) + drafted * (K_max + 1) + accepted
        self._verified: defaultdict[int, int] = defaultdict(int)
        self._k1 = policy.k_max + 1
        self._stats: Any = None
        self._previous: dict[str, int] = {}  # the last step's tokens by request
        self._step_end: float | None = None

    @classmethod
    def create(cls, vllm_config: Any) -> "DraftDepthScheduling | None":
        """None when there is nothing to do: no speculation, or the fixed policy
        without a reasoning parser (then vLLM runs exactly as it would)."""
        spec = vllm_config.speculative_config
        k_max = vllm_config.num_speculative_tokens if spec is not None else 0
        if not k_max:
            return None
        config = DraftDepthConfig.from_dict(getattr(spec, "draft_depth", None), k_max)
        tracker = phase_tracker(vllm_config)
        if config.policy == "fixed" and tracker is None:
            return None
        logger.info("ds4x draft depth: policy %s, K_max %d, phase tracking %s",
                    config.policy, k_max, "on" if tracker else "off")
        return cls(DepthPolicy(config, k_max, tracker))

    def _state(self, request: Any) -> RequestState:
        try:
            state: RequestState = request.ds4x_depth_state
            return state
        except AttributeError:
            params = request.sampling_params
            state = self.policy.add(request.request_id, request.prompt_token_ids or [],
                                    params.extra_args if params is not None else None)
            request.ds4x_depth_state = state
            return state

    def uniform_depth(self, running: Any) -> None:
        """Before scheduling: every decode request in the batch verifies one
        depth, the smallest graph depth at or above the deepest one chosen
        among them, so the batch has one query length and replays its CUDA
        graph. Drafts are kept whole until here (verifying more than a
        request chose is lossless); a drafter that proposed fewer (n-gram)
        keeps its shorter list."""
        if not self._cuts:
            return
        drafting = [request for request in running if request.spec_token_ids]
        if not drafting:
            return
        try:  # list comprehensions: the per-request part runs at C speed
            chosen = max([request.ds4x_depth_state.depth for request in drafting])
        except AttributeError:  # a request's first step
            chosen = max([self._state(request).depth for request in drafting])
        if chosen >= self._full:  # the batch verifies K_max: nothing to cut
            return
        depth = self.policy.batch_depth[chosen]
        for request in drafting:
            drafts = request.spec_token_ids
            if len(drafts) > depth:
                request.spec_token_ids = drafts[:depth]

    def on_output(self, request: Any, new_token_ids: list[int], drafted: int, accepted: int, stats: Any) -> None:
        """A request's step: the drafts it verified (none: 0) and its new tokens.
        The common case, fixed or phase with no marker among the tokens, is a
        set test and a counter increment."""
        adaptive = self._adaptive
        marker = not self._no_marker(new_token_ids)
        if not (marker or adaptive or (drafted and stats is not None)):
            return
        try:
            state = request.ds4x_depth_state
        except AttributeError:
            state = self._state(request)
        if drafted:
            if stats is not None:  # as scheduled (async: the depth may be a step newer)
                if stats is not self._stats:  # a step that ended without on_step_end: its own stats
                    self._tally()
                    self._stats = stats
                self._verified[state.slot + drafted * self._k1 + accepted] += 1
            if adaptive:
                self.policy.verified(state, drafted, accepted)
        # adaptive counts unverified steps at depth 0 (its probe) and ends an exploring step
        if marker or (adaptive and new_token_ids and (not state.depth or state.exploring)):
            self.policy.tokens(state, new_token_ids, request.all_token_ids)

    def forget(self, request_id: str) -> None:
        self.policy.forget(request_id)

    def on_step_end(self, scheduler_output: Any) -> None:
        self._tally()
        self._time_step(scheduler_output)

    def _tally(self) -> None:
        """The step's verifications into its spec-decode stats, once."""
        stats, verified = self._stats, self._verified
        self._stats = None
        if stats is not None and verified:
            if stats.ds4x is None:
                stats.ds4x = DepthStats()
            for code, count in verified.items():
                stats.ds4x.observe(*self.policy.unpack_tally(code), count)
        verified.clear()

    def _time_step(self, scheduler_output: Any) -> None:
        """Live step cost: wall time since the previous step ended, credited to
        this step when it was a pure decode batch of one verify length and ran
        the same requests as the one before (no idle gap, no admission)."""
        if not self._adaptive:
            return
        now = time.perf_counter()
        scheduled = scheduler_output.num_scheduled_tokens
        previous, self._previous = self._previous, scheduled
        step_end, self._step_end = self._step_end, now
        if step_end is None or not scheduled or scheduler_output.scheduled_new_reqs:
            return
        tokens = max(scheduled.values())
        # one length (the total is the longest times the count) and the same requests, no allocation
        if (tokens <= self.policy.k_max + 1 and tokens * len(scheduled) == scheduler_output.total_num_scheduled_tokens
                and scheduled.keys() == previous.keys()):
            self.policy.costs.observe(tokens, now - step_end)


def validate_request(params: Any, speculative_config: Any) -> None:
    """The front end's check of a client's own draft_depth: a 400 that names it,
    before any stream starts."""
    from vllm.ds4x.draft_depth import DraftDepthError, request_depth
    from vllm.exceptions import VLLMValidationError

    try:
        request_depth(params.extra_args, speculative_config.num_speculative_tokens)
    except DraftDepthError as e:
        raise VLLMValidationError(str(e)) from e
