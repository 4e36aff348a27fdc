# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The scheduler's side of per-request draft depth (see vllm.ds4x.draft_depth).

The decision is made here, once, in the scheduler: every tensor- and
pipeline-parallel rank receives it as the per-request draft lists of the
scheduler output. Each decode batch verifies one depth (see uniform_depth),
so it keeps a full CUDA graph. KV lookahead stays reserved for K_max.
"""

import time
from itertools import chain
from typing import Any

from vllm.ds4x.draft_depth import DepthPolicy, DraftDepthConfig, PhaseTracker, RequestState
from vllm.ds4x.spec_metrics import DepthStats
from vllm.logger import init_logger
from vllm.v1.request import RequestStatus
from vllm.v1.spec_decode.metrics import SpecDecodingStats

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
    """vLLM's scheduler calls it when a request arrives, before a step is
    scheduled, before and after its loop over the step's output, and when a
    request is freed; never per request inside that loop. The step's output is
    read in one pass: one set test over all its new tokens finds markers, the
    phase counts are vLLM's own step totals less all groups but the largest,
    the policy's state hangs on the request, and adaptive decides at the end
    of a step for the requests due then (DepthPolicy.step), not for each."""

    def __init__(self, policy: DepthPolicy) -> None:
        self.policy = policy
        self._adaptive = policy.config.policy == "adaptive"
        self._markers = policy.tracker.last_tokens if policy.tracker else frozenset()
        # fixed without graph_depths: every batch verifies K_max, nothing to cut
        self._cuts = any(d < policy.k_max for d in policy.batch_depth)
        self._full = policy.batch_depth.index(policy.k_max)  # the lowest choice that verifies K_max
        self._codes = 2 * (policy.k_max + 1) ** 3  # tally codes: RequestState.slot + drafted * (K_max + 1) + accepted
        self._states = policy.requests  # by request id: the step's output is read by id
        self._lengths: list[int] = []  # of the step's sampled token lists, before vLLM trims any
        self._leaving: list[RequestState] = []  # finished in this step's output: kept until it ends
        self._previous = 0  # requests in the last step
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
        lag = 2 if vllm_config.scheduler_config.async_scheduling else 1
        return cls(DepthPolicy(config, k_max, tracker, lag))

    def add(self, request: Any) -> None:
        params = request.sampling_params
        request.ds4x_depth_state = self.policy.add(
            request.request_id, request.prompt_token_ids or [], params.extra_args if params is not None else None)

    def forget(self, request: Any) -> None:
        """A request that finished in this step's output is kept until the step
        ends (its last step counts, as in vLLM's stats); an aborted one goes now
        (vLLM skips its output)."""
        state = self._states.get(request.request_id)
        if state is None:
            return
        if request.status == RequestStatus.FINISHED_ABORTED:
            self.policy.forget(request.request_id)
        else:
            self._leaving.append(state)

    def uniform_depth(self, running: Any) -> None:
        """Before scheduling: every decode request in the batch verifies one
        depth, the smallest graph depth at or above the deepest one chosen
        among them, so the batch has one query length and replays its CUDA
        graph. Drafts are kept whole until here (verifying more than a
        request chose is lossless); a drafter that proposed fewer (n-gram)
        keeps its shorter list."""
        if not self._cuts:
            return
        chosen, full = -1, self._full
        for request in running:
            mine = request.ds4x_depth_state.depth
            if mine > chosen and request.spec_token_ids:
                if mine >= full:  # the batch verifies K_max: nothing to cut, and no need to look further
                    return
                chosen = mine
        if chosen < 0:  # no drafts
            return
        depth = self.policy.batch_depth[chosen]
        for request in running:
            drafts = request.spec_token_ids
            if len(drafts) > depth:
                request.spec_token_ids = drafts[:depth]

    def before_output(self, runner_output: Any) -> None:
        """vLLM trims a stopping request's sampled tokens in place; what it
        verified is counted on their lengths as sampled."""
        self._lengths = list(map(len, runner_output.sampled_token_ids))

    def on_step_end(self, scheduler_output: Any, runner_output: Any, requests: dict[str, Any],
                    stats: SpecDecodingStats | None) -> SpecDecodingStats | None:
        """The step's output, after vLLM's own loop over it (`requests`: the
        scheduler's, by id; `stats`: the step's SpecDecodingStats, None when
        not logged or nothing was verified). Returns the step's stats: vLLM's,
        or a new one when the step's only news is requests that verified
        nothing (vllm:spec_decode_depth{depth="0"})."""
        if runner_output.sampled_token_ids:
            self._read_output(scheduler_output, runner_output, requests, stats)
            stats = self._count_unverified(scheduler_output, runner_output, requests, stats)
        for state in self._leaving:
            if self._states.get(state.request_id) is state:  # not taken by a new request of the same id
                del self._states[state.request_id]
            self.policy.retire(state)
        self._leaving.clear()
        if self._adaptive:
            self._time_step(scheduler_output)
            self.policy.step(runner_output.req_id_to_index)
        return stats

    def _count_unverified(self, scheduler_output: Any, runner_output: Any, requests: dict[str, Any],
                          stats: SpecDecodingStats | None) -> SpecDecodingStats | None:
        """Decode steps of requests that verified nothing (they chose depth 0, or
        the drafter proposed nothing): one token scheduled, no drafts, not a
        new or resumed request, output tokens from before this step, not
        aborted while the step ran (vLLM skips those)."""
        spec, ids = scheduler_output.scheduled_spec_decode_tokens, runner_output.req_ids
        if len(spec) >= len(ids):  # every request verified drafts
            return stats
        scheduled, new = scheduler_output.num_scheduled_tokens, scheduler_output.scheduled_new_reqs
        resumed = scheduler_output.scheduled_cached_reqs.resumed_req_ids  # recomputing, not decoding
        fresh = {r.req_id for r in new} | resumed if new or resumed else ()
        count = 0
        for request_id, length in zip(ids, self._lengths):
            if (length and scheduled.get(request_id) == 1 and request_id not in spec and request_id not in fresh
                    and request_id in self._states):
                request = requests.get(request_id)  # None: it finished in this step
                count += request is None or request.num_output_tokens > length
        if not count:
            return stats
        if stats is None:
            stats = SpecDecodingStats.new(self.policy.k_max)
        if stats.ds4x is None:
            stats.ds4x = DepthStats()
        stats.ds4x.observe_unverified(count)
        return stats

    def _read_output(self, scheduler_output: Any, runner_output: Any, requests: dict[str, Any], stats: Any) -> None:
        ids, sampled = runner_output.req_ids, runner_output.sampled_token_ids
        spec = scheduler_output.scheduled_spec_decode_tokens
        if self._adaptive:  # each request's outcomes too
            self._count_outcomes(ids, spec, stats)
        elif spec and stats is not None:
            self._tally(scheduler_output, runner_output, stats)
        markers = self._markers
        if markers.isdisjoint(chain.from_iterable(sampled)):  # a set test per token, the step's at once
            return
        for request_id, tokens in zip(ids, sampled):
            if not markers.isdisjoint(tokens) and (request := requests.get(request_id)) is not None:  # None: finished
                self.policy.tokens(request.ds4x_depth_state, tokens, request.all_token_ids)

    def _tally(self, scheduler_output: Any, runner_output: Any, stats: Any) -> None:
        """The step's verifications into its stats by phase and chosen depth:
        vLLM's own totals for the step, less those of every group of requests
        (same phase and chosen depth) but the largest, read one by one. A step
        whose largest group did not verify one depth throughout (n-gram drafted
        fewer), or had drafts the grammar refused, is read request by request."""
        spec, index, lengths = scheduler_output.scheduled_spec_decode_tokens, runner_output.req_id_to_index, self._lengths
        groups, counts = self.policy.groups, [0] * self._codes
        if not groups:  # every request aborted while the step ran
            return
        largest = max(groups, key=lambda slot: len(groups[slot]))
        k1, drafts_of, index_of = self.policy.k_max + 1, spec.get, index.get
        for slot, group in groups.items():
            if slot != largest:
                for state in group:
                    mine, i = drafts_of(state.request_id), index_of(state.request_id)
                    if mine and i is not None and lengths[i]:
                        counts[slot + len(mine) * k1 + lengths[i] - 1] += 1
        drafts, tokens, accepted = stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens
        for code, count in enumerate(counts):  # what is left is the largest group's
            if count:
                _, _, drafted, accepted_each = self.policy.unpack_tally(code)
                drafts, tokens, accepted = drafts - count, tokens - drafted * count, accepted - accepted_each * count
        depth = max(map(len, spec.values()))
        if scheduler_output.num_invalid_spec_tokens or drafts < 0 or tokens != drafts * depth:
            return self._tally_each(runner_output.req_ids, spec, stats)
        self._observe(stats, counts)
        if drafts:
            phase, chosen, _, _ = self.policy.unpack_tally(largest)
            stats.ds4x.observe(phase, chosen, depth, drafts, accepted)

    def _count_outcomes(self, ids: list[str], spec: dict[str, list[int]], stats: Any) -> None:
        """adaptive: _tally_each, without looking up each request's drafts when
        every request of the step has drafts, all of one length."""
        if spec and len(spec) == len(ids) and (depth := max(map(len, spec.values()))) == min(map(len, spec.values())):
            counts, base = [0] * self._codes, depth * (self.policy.k_max + 1) - 1  # code = base + sampled
            for state, length in zip(map(self._states.get, ids), self._lengths):
                if length and state is not None:  # None: aborted while it ran
                    code = base + length
                    counts[state.slot + code] += 1
                    state.outcomes[code] += 1
            return self._observe(stats, counts)
        self._tally_each(ids, spec, stats)

    def _tally_each(self, ids: list[str], spec: dict[str, list[int]], stats: Any) -> None:
        """Read request by request: the step's counts by phase and chosen depth,
        and under adaptive each verification into its request's outcomes (as
        DepthPolicy.verified counts them)."""
        counts = [0] * self._codes
        k1, adaptive = self.policy.k_max + 1, self._adaptive
        for state, drafts, length in zip(map(self._states.get, ids), map(spec.get, ids), self._lengths):
            if drafts and length and state is not None:  # None: aborted while it ran
                code = len(drafts) * k1 + length - 1
                counts[state.slot + code] += 1
                if adaptive:
                    state.outcomes[code] += 1
        self._observe(stats, counts)

    def _observe(self, stats: Any, counts: list[int]) -> None:
        if stats is None:
            return
        if stats.ds4x is None:
            stats.ds4x = DepthStats()
        for code, count in enumerate(counts):
            if count:
                phase, chosen, drafted, accepted = self.policy.unpack_tally(code)
                stats.ds4x.observe(phase, chosen, drafted, count, accepted * count)

    def _time_step(self, scheduler_output: Any) -> None:
        """Live step cost: wall time since the previous step ended, credited to
        this step when it was a pure decode batch of one verify length and ran
        the same requests as the one before: as many, none new or resumed
        (no idle gap, no admission)."""
        now = time.perf_counter()
        scheduled = scheduler_output.num_scheduled_tokens
        previous, self._previous = self._previous, len(scheduled)
        step_end, self._step_end = self._step_end, now
        if (step_end is None or not scheduled or len(scheduled) != previous or scheduler_output.scheduled_new_reqs
                or scheduler_output.scheduled_cached_reqs.resumed_req_ids):
            return
        tokens = max(scheduled.values())
        if tokens <= self.policy.k_max + 1 and tokens * len(scheduled) == scheduler_output.total_num_scheduled_tokens:
            self.policy.costs.observe(tokens, now - step_end, len(scheduled))  # one length: the total is the longest times the count


def validate_request(params: Any, speculative_config: Any) -> None:
    """The front end's check of a client's own draft_depth: a 400 that names it,
    before any stream starts."""
    from vllm.ds4x.draft_depth import DraftDepthError, request_depth
    from vllm.exceptions import VLLMValidationError

    try:
        request_depth(params.extra_args, speculative_config.num_speculative_tokens)
    except DraftDepthError as e:
        raise VLLMValidationError(str(e)) from e
