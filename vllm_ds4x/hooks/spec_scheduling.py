# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The scheduler's side of per-request draft depth (see vllm_ds4x.depth.policy).

The decision is made here, once, in the scheduler: every tensor- and
pipeline-parallel rank receives it as the per-request draft lists of the
scheduler output. Each decode batch verifies one depth (see cut_to_batch_depth),
so it keeps a full CUDA graph. KV lookahead stays reserved for K_max. With
draft_depth verify "request" (the fork's model runner v2) the batch still
runs that depth's graph, and each request verifies only its own depth
(SchedulerOutput.ds4x_verify_depths; vllm_ds4x.hooks.verify_mask masks the rest).
With DSpark on that runner, the drafter rests for a request that verifies
nothing next (SchedulerOutput.ds4x_resting_drafters; vllm_ds4x.depth.drafter_rest).
"""

import importlib.util
import time
from collections.abc import Callable, Iterable, Mapping
from itertools import chain
from typing import TypeAlias

from vllm.logger import init_logger
from vllm.v1.request import RequestStatus
from vllm.v1.spec_decode.metrics import SpecDecodingStats

from vllm_ds4x.config_views import SpeculativeConfigView, VllmConfigView
from vllm_ds4x.depth import verify_rows
from vllm_ds4x.depth.drafter_rest import DrafterRest, may_rest
from vllm_ds4x.depth.estimates import StepCosts
from vllm_ds4x.depth.policy import (
    DepthPolicy,
    DraftDepthError,
    FixedDepth,
    PhaseTracker,
    RequestState,
    configured_draft_depth,
)
from vllm_ds4x.depth.scheduler_seams import (
    ForkSchedulerOutputView,
    RequestView,
    RunnerOutputView,
    SamplingParamsView,
    SchedulerOutputView,
    resumed_requests,
)
from vllm_ds4x.hooks.spec_metrics import DepthStats

logger = init_logger(__name__)
StepStats: TypeAlias = "SpecDecodingStats | None"
"""a step's spec-decode stats; None when vLLM does not log them or nothing was verified"""


THINKING = {"thinking": True, "enable_thinking": True}  # chat kwargs that turn a parser's markers on


def phase_tracker(vllm_config: VllmConfigView) -> PhaseTracker | None:
    """Markers from the configured reasoning parser, tokenized like the model's
    text: its start/end strings plus any implicit end markers (DeepSeek-V4's
    tool-call marker)."""
    parser_name = vllm_config.structured_outputs_config.reasoning_parser
    if not parser_name:
        return None
    from vllm.reasoning import ReasoningParserManager
    from vllm.tokenizers import cached_tokenizer_from_config

    tokenizer = cached_tokenizer_from_config(model_config=vllm_config.model_config)
    # The markers are the model's whatever a request's chat settings: the fork's
    # deepseek_v4 parser has none unless thinking is on (it delegates to an identity
    # parser), and a request that does not think has the section closed in its prompt.
    parser = ReasoningParserManager.get_reasoning_parser(parser_name)(tokenizer, chat_template_kwargs=THINKING)

    def encode(text: str | None) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False) if text else []

    starts = [encode(getattr(parser, "reasoning_start_str", None))]
    ends = [encode(getattr(parser, "reasoning_end_str", None))]
    delegate = getattr(parser, "_parser", parser)  # the fork's deepseek_v4 parser keeps them there
    ends += [encode(m) for m in getattr(parser, "implicit_end_markers", getattr(delegate, "implicit_end_markers", ()))]
    return PhaseTracker(starts, ends)


class DraftDepthScheduling:
    """vLLM's scheduler calls it when a request arrives, before a step is
    scheduled, before and after its loop over the step's output, and when a
    request is freed; never per request inside that loop. The step's output is
    read in one pass: one set test over all its new tokens finds markers, the
    phase counts are vLLM's own step totals less all groups but the largest,
    the policy's state hangs on the request, and the strategy learns from the
    step and decides at its end for the requests due then, not for each."""

    def __init__(self, policy: DepthPolicy, drafter_rests: bool = False) -> None:
        """drafter_rests: the drafter may rest for requests that verify nothing next (DSpark on
        the fork's model runner v2)."""
        self.policy, self.strategy, self._tally = policy, policy.strategy, StepTally(policy)
        self._markers = policy.tracker.last_tokens if policy.tracker else frozenset()
        # fixed without graph_depths: every batch verifies K_max, nothing to cut
        self._may_cut_drafts = any(d < policy.k_max for d in policy.batch_depth)
        self._k_max_choice = policy.batch_depth.index(policy.k_max)  # the lowest choice that verifies K_max
        self._per_request = policy.config.verify == "request"
        self.verify_depths: dict[str, int] | None = None  # the step's own depths below the batch's (verify "request")
        self.drafter_rests = drafter_rests
        self._rest = DrafterRest(self._per_request) if drafter_rests and self._may_cut_drafts else None
        self._states = policy.requests  # by request id: the step's output is read by id
        self._lengths: list[int] = []  # of the step's sampled token lists, before vLLM trims any
        self._marked = False  # whether a token of the step may end a marker
        self._drafted: int | None = None  # d when every request of the step verified d drafts
        self._leaving: list[RequestState] = []  # finished in this step's output: kept until it ends
        costs = self.strategy.step_costs
        self._time_step = StepTimer(costs, policy.k_max).time if costs is not None else _untimed

    @classmethod
    def create(cls, vllm_config: VllmConfigView) -> "DraftDepthScheduling | None":
        """None when there is nothing to do: no speculation, or the fixed policy
        without a reasoning parser (then vLLM runs exactly as it would)."""
        spec = vllm_config.speculative_config
        k_max = vllm_config.num_speculative_tokens if spec is not None else 0
        if not k_max:
            return None
        config = configured_draft_depth(getattr(spec, "draft_depth", None), k_max)
        if config.verify == "request":
            _check_per_request_verify(vllm_config)
        tracker = phase_tracker(vllm_config)
        if isinstance(config, FixedDepth) and tracker is None:
            return None
        # DSpark stores its context K/V apart from its draft block; not under data parallelism,
        # where a rank that skipped the block would leave the others' graph dispatch
        rests = (spec is not None and spec.method == "dspark" and _fork_runner(vllm_config)
                 and vllm_config.parallel_config.data_parallel_size == 1)
        logger.info("ds4x draft depth: policy %s, K_max %d, phase tracking %s, drafter rests %s",
                    config.policy, k_max, "on" if tracker else "off", "on" if rests else "off")
        lag = 2 if vllm_config.scheduler_config.async_scheduling else 1
        return cls(DepthPolicy(config, k_max, tracker, lag), rests)

    def add(self, request: RequestView) -> None:
        params = request.sampling_params
        request.ds4x_depth_state = self.policy.add(
            request.request_id, request.prompt_token_ids or [], params.extra_args if params is not None else None)

    def forget(self, request: RequestView) -> None:
        """A request that finished in this step's output is kept until the step
        ends (its last step counts, as in vLLM's stats); an aborted one goes now
        (vLLM skips its output)."""
        state = self._states.get(request.request_id)
        if state is None:
            return
        if request.status == RequestStatus.FINISHED_ABORTED:
            self.policy.retire(state)
        else:
            self._leaving.append(state)

    def cut_to_batch_depth(self, running: Iterable[RequestView]) -> None:
        """Before scheduling: every decode request in the batch verifies one
        depth, the smallest graph depth at or above the deepest one chosen
        among them, so the batch has one query length and replays its CUDA
        graph. Drafts are kept whole until here (verifying more than a
        request chose is lossless); a drafter that proposed fewer (n-gram)
        keeps its shorter list. At verify "request", verify_depths gets the
        depth of each request that verifies less than the batch: its own
        choice, rounded up to a graph depth."""
        self.verify_depths = None
        if not self._may_cut_drafts:
            return
        stale: frozenset[str] = frozenset()  # drafted by a resting drafter: verified by no step
        if self._rest is not None:
            running = list(running)
            stale = self._weigh_rests(running)
        chosen, full = -1, self._k_max_choice
        for request in running:
            mine = _verifies(request, stale)
            if mine > chosen and request.spec_token_ids:
                if mine >= full and not self._per_request:  # K_max: nothing to cut, no need to look further
                    return
                chosen = mine
        if chosen < 0:  # no drafts
            return
        batch_depth = self.policy.batch_depth
        depth, own = batch_depth[chosen], {}
        for request in running:
            drafts = request.spec_token_ids
            if len(drafts) > depth:
                request.spec_token_ids = drafts = drafts[:depth]
            if self._per_request and drafts:
                mine = batch_depth[_verifies(request, stale)]
                if mine < len(drafts):
                    own[request.request_id] = mine
        self.verify_depths = own or None

    def _weigh_rests(self, running: list[RequestView]) -> frozenset[str]:
        """Which requests' drafter may rest in the step being scheduled (DrafterRest.consider),
        and the stale drafts of the last one's: a batch of one depth whose drafter rested
        verifies nothing (every draft cut here, the empty set returned); else the requests
        whose drafts are stale, each to verify none."""
        rest, policy = self._rest, self.policy
        assert rest is not None
        rest.consider((r.request_id for r in running if may_rest(policy, r.ds4x_depth_state)),
                      (r.request_id for r in running))
        if rest.stale and not self._per_request:
            for request in running:
                if request.spec_token_ids:
                    request.spec_token_ids = []
            return frozenset()
        return rest.stale

    def annotate(self, scheduler_output: ForkSchedulerOutputView) -> None:
        """The scheduled step's output gets each request's own verify depth where below the
        batch's, and the requests whose drafter rests in it (the fork's SchedulerOutput)."""
        scheduler_output.ds4x_verify_depths = self.verify_depths
        if self._rest is not None:
            scheduler_output.ds4x_resting_drafters = self._rest.settle(scheduler_output.num_scheduled_tokens) or None

    def before_output(self, runner_output: RunnerOutputView) -> None:
        """vLLM trims a stopping request's sampled tokens in place; what it
        verified is counted on their lengths as sampled. One set test over all
        the step's new tokens, while they are at hand, says whether any may end
        a marker (those requests are read after vLLM's loop, in their own tokens)."""
        sampled = runner_output.sampled_token_ids
        self._lengths = list(map(len, sampled))
        self._marked = not self._markers.isdisjoint(chain.from_iterable(sampled))

    def on_step_end(self, scheduler_output: SchedulerOutputView, runner_output: RunnerOutputView,
                    requests: Mapping[str, RequestView], stats: StepStats) -> StepStats:
        """The step's output, after vLLM's own loop over it (`requests`: the
        scheduler's, by id; `stats`: the step's SpecDecodingStats, None when
        not logged or nothing was verified). Returns the step's stats: vLLM's,
        or a new one when the step's only news is requests that verified
        nothing (vllm:spec_decode_num_drafts_by_depth{depth="0"})."""
        self._drafted = None
        own = getattr(scheduler_output, "ds4x_verify_depths", None)  # the fork's SchedulerOutput has it
        # ModelRunnerOutput.req_id_to_index went in vLLM 0.34.0: its scheduler builds it as here
        index = {request_id: i for i, request_id in enumerate(runner_output.req_ids)}
        if runner_output.sampled_token_ids:
            spec = scheduler_output.scheduled_spec_decode_tokens
            if own:
                spec = verify_rows.own_drafts(spec, own, scheduler_output.num_invalid_spec_tokens,
                                              self._counted(index), stats)
            self._read_output(scheduler_output, spec, runner_output, index, requests, stats)
            stats = self._tally.unverified(scheduler_output, spec, runner_output, requests, stats, self._lengths)
        for state in self._leaving:
            self.policy.retire(state)
        self._leaving.clear()
        self._time_step(scheduler_output, self._drafted, own)
        self.strategy.step_ended(index)
        return stats

    def _counted(self, index: dict[str, int]) -> Callable[[str], bool]:
        """Whether vLLM's stats counted a request of the step (`index`: its row, by id): it
        sampled, and was not aborted."""
        lengths, states = self._lengths, self._states
        return lambda request_id: (i := index.get(request_id)) is not None and bool(lengths[i]) and request_id in states

    def _read_output(self, scheduler_output: SchedulerOutputView, spec: dict[str, list[int]],
                     runner_output: RunnerOutputView, index: dict[str, int], requests: Mapping[str, RequestView],
                     stats: SpecDecodingStats | None) -> None:
        """`spec`: the drafts each request verified; `index`: each request's row."""
        ids, sampled = runner_output.req_ids, runner_output.sampled_token_ids
        self._drafted = drafted = uniform_drafts(spec, ids, stats, scheduler_output.num_invalid_spec_tokens)
        if spec:
            self.strategy.learn(ids, spec, self._lengths, drafted)
            if stats is not None:
                self._tally.count(scheduler_output, spec, runner_output, index, stats, self._lengths)
        if not self._marked:
            return
        markers = self._markers
        for request_id, tokens in zip(ids, sampled):
            if not markers.isdisjoint(tokens) and (request := requests.get(request_id)) is not None:  # None: finished
                self.policy.track_phase(request.ds4x_depth_state, tokens, request.all_token_ids)


class StepTally:
    """A step's verifications into its stats by phase and chosen depth: vLLM's own
    totals for the step, less those of every group of requests (same phase and
    chosen depth) but the largest, read one by one (DepthPolicy.groups)."""

    def __init__(self, policy: DepthPolicy) -> None:
        self.codec, self.groups, self.states, self.k_max = policy.codec, policy.groups, policy.requests, policy.k_max

    def unverified(self, scheduler_output: SchedulerOutputView, spec: dict[str, list[int]],
                   runner_output: RunnerOutputView, requests: Mapping[str, RequestView], stats: StepStats,
                   lengths: list[int]) -> StepStats:
        """Decode steps of requests that verified nothing (they chose depth 0, or
        the drafter proposed nothing): one token scheduled and no drafts, or
        drafts none of which it verified (`spec`: those verified); not a new or
        resumed request, output tokens from before this step, not aborted
        while the step ran (vLLM skips those)."""
        ids = runner_output.req_ids
        if len(spec) >= len(ids):  # every request verified drafts
            return stats
        scheduled, new = scheduler_output.num_scheduled_tokens, scheduler_output.scheduled_new_reqs
        drafted = scheduler_output.scheduled_spec_decode_tokens
        resumed = resumed_requests(scheduler_output)  # recomputing, not decoding
        fresh = {r.req_id for r in new} | resumed if new or resumed else ()
        count = 0
        for request_id, length in zip(ids, lengths):
            if (length and (scheduled.get(request_id) == 1 or request_id in drafted) and request_id not in spec
                    and request_id not in fresh and request_id in self.states):
                request = requests.get(request_id)  # None: it finished in this step
                count += request is None or request.num_output_tokens > length
        if not count:
            return stats
        if stats is None:
            stats = SpecDecodingStats.new(self.k_max)
        if stats.ds4x is None:
            stats.ds4x = DepthStats()
        stats.ds4x.observe_unverified(count)
        return stats

    def count(self, scheduler_output: SchedulerOutputView, spec: dict[str, list[int]],
              runner_output: RunnerOutputView, index: dict[str, int], stats: SpecDecodingStats,
              lengths: list[int]) -> None:
        """The step's verifications into its stats by phase and chosen depth:
        vLLM's own totals for the step, less those of every group of requests
        (same phase and chosen depth) but the largest, read one by one. A step
        whose largest group did not verify one depth throughout (n-gram drafted
        fewer), or had drafts the grammar refused, is read request by request."""
        groups = self.groups
        if not groups:  # every request aborted while the step ran
            return
        # drafts, accepted tokens, and drafts that reached each position: vLLM's, less all groups' but the largest
        drafts, accepted, reached = stats.num_drafts, stats.num_accepted_tokens, stats.num_draft_tokens_per_pos
        others: dict[int, int] = {}
        if len(groups) > 1:
            largest = max(groups, key=lambda slot: len(groups[slot]))
            others = self._others(groups, largest, spec, index, lengths)
            reached = list(reached)
            for _, _, drafted, count, accepted_all in self.codec.tallies(others):
                drafts, accepted = drafts - count, accepted - accepted_all
                for position in range(drafted):
                    reached[position] -= count
        else:
            (largest,) = groups
        depth = even_depth(reached, drafts)
        if scheduler_output.num_invalid_spec_tokens or depth is None:
            return self._each(runner_output.req_ids, spec, stats, lengths)  # the largest group drafted unevenly
        if stats.ds4x is None:
            stats.ds4x = DepthStats()
        if others:
            self._observe(stats, others)
        if drafts:
            phase, chosen, _, _ = self.codec.unpack(largest)
            stats.ds4x.observe(phase, chosen, depth, drafts, accepted)

    def _others(self, groups: dict[int, set[RequestState]], largest: int, spec: dict[str, list[int]],
                index: dict[str, int], lengths: list[int]) -> dict[int, int]:
        """The tallies of every group but the largest, read request by request."""
        counts: dict[int, int] = {}
        sampled_base, drafts_of, index_of = self.codec.sampled_base, spec.get, index.get
        for slot, group in groups.items():
            if slot != largest:
                for state in group:
                    mine, i = drafts_of(state.request_id), index_of(state.request_id)
                    if mine and i is not None and lengths[i]:
                        code = slot + sampled_base(len(mine)) + lengths[i]
                        counts[code] = counts.get(code, 0) + 1
        return counts

    def _each(self, ids: list[str], spec: dict[str, list[int]], stats: SpecDecodingStats, lengths: list[int]) -> None:
        """Read request by request: the step's counts by phase and chosen depth."""
        counts = [0] * self.codec.size
        sampled_base = self.codec.sampled_base
        for state, drafts, length in zip(map(self.states.get, ids), map(spec.get, ids), lengths):
            if drafts and length and state is not None:  # None: aborted while it ran
                counts[state.slot + sampled_base(len(drafts)) + length] += 1
        self._observe(stats, counts)

    def _observe(self, stats: SpecDecodingStats, counts: list[int] | dict[int, int]) -> None:
        if stats.ds4x is None:
            stats.ds4x = DepthStats()
        for phase, chosen, drafted, count, accepted in self.codec.tallies(counts):
            stats.ds4x.observe(phase, chosen, drafted, count, accepted)



def uniform_drafts(spec: dict[str, list[int]], ids: list[str], stats: SpecDecodingStats | None,
                   refused: dict[str, int] | None) -> int | None:
    """d when every request of the step verified d >= 1 drafts, else None: from
    vLLM's drafts per position when its stats counted every drafted request (all
    reached position d - 1, none position d) and none was refused by the grammar
    (`refused`: vLLM's num_invalid_spec_tokens; its stats leave those out), else
    from the drafts themselves."""
    if not spec or len(spec) != len(ids):
        return None
    if stats is not None and not refused and stats.num_drafts == len(spec):
        return even_depth(stats.num_draft_tokens_per_pos, stats.num_drafts) or None
    depth = max(map(len, spec.values()))
    return depth if depth == min(map(len, spec.values())) else None


def even_depth(reached: list[int], drafts: int) -> int | None:
    """d when `drafts` drafts that reached each position as counted in `reached`
    all had d (0 when there are none), else None."""
    depth = len(reached) - reached.count(0)
    return depth if drafts >= 0 and reached == [drafts] * depth + [0] * (len(reached) - depth) else None


def _untimed(scheduler_output: SchedulerOutputView, drafted: int | None, own: dict[str, int] | None) -> None:
    """A strategy that decides on no step costs: nothing to time."""


class StepTimer:
    """Live step cost, into the engine-wide StepCosts: wall time since the previous
    step ended, credited to this step when it was a pure decode batch and ran the
    same requests as the one before: as many, none new or resumed (no idle gap,
    no admission). Timed by the tokens each request verified: under verify
    "request", a request with rows masked verified 1 + its own depth."""

    def __init__(self, costs: StepCosts, k_max: int) -> None:
        self.costs, self.k_max = costs, k_max
        self._previous = 0  # requests in the last step
        self._step_end: float | None = None

    def time(self, scheduler_output: SchedulerOutputView, drafted: int | None, own: dict[str, int] | None) -> None:
        """`drafted`: d when every request of the step verified d drafts (then each
        was scheduled 1 + d tokens, unless it was no decode: checked on the total);
        `own`: the depth of each request that verified fewer drafts than it ran."""
        now = time.perf_counter()
        scheduled = scheduler_output.num_scheduled_tokens
        previous, self._previous = self._previous, len(scheduled)
        step_end, self._step_end = self._step_end, now
        if (step_end is None or not scheduled or len(scheduled) != previous
                or scheduler_output.scheduled_new_reqs
                or resumed_requests(scheduler_output)):
            return
        total = scheduler_output.total_num_scheduled_tokens
        # the longest: 1 + d when all drafted d, 1 when the total is one a request (none has fewer)
        tokens = 1 + drafted if drafted is not None else 1 if total == len(scheduled) else max(scheduled.values())
        if tokens > self.k_max + 1 or tokens * len(scheduled) != total:  # a prefill, or drafts of uneven length
            return
        if own:  # one graph length, each request verifying its own part of it
            self.costs.observe_step([1 + own[r] if r in own else tokens for r in scheduled], now - step_end)
        else:
            self.costs.observe(tokens, now - step_end, len(scheduled))


def _verifies(request: RequestView, stale: frozenset[str]) -> int:
    """The depth a request verifies this step, before rounding: its choice, or 0 when its
    drafts are stale (a resting drafter's)."""
    return 0 if request.request_id in stale else request.ds4x_depth_state.depth


def _fork_runner(vllm_config: VllmConfigView) -> bool:
    """The fork's model runner v2, which masks rows per request (vllm_ds4x.hooks.verify_mask)."""
    return importlib.util.find_spec("vllm_ds4x.hooks.verify_mask") is not None and bool(
        getattr(vllm_config, "use_v2_model_runner", False))


def _check_per_request_verify(vllm_config: VllmConfigView) -> None:
    """verify "request" needs a model runner that masks the drafts past a request's
    own depth: the fork's v2 (vllm_ds4x.hooks.verify_mask); elsewhere, one start-up error."""
    if not _fork_runner(vllm_config):
        raise DraftDepthError(
            'speculative_config.draft_depth.verify="request" needs the Lvllmds4-x fork\'s model runner v2 '
            '(VLLM_USE_V2_MODEL_RUNNER=1, or a drafter that forces it: DSpark, EAGLE, MTP, DFlash); '
            'drop "verify" (or set "batch") to verify one depth per batch')


def validate_request(params: SamplingParamsView, speculative_config: SpeculativeConfigView) -> None:
    """The front end's check of a client's own draft_depth: a 400 that names it,
    before any stream starts."""
    from vllm.exceptions import VLLMValidationError

    from vllm_ds4x.depth.policy import DraftDepthError, request_depth

    try:
        request_depth(params.extra_args, speculative_config.num_speculative_tokens)
    except DraftDepthError as e:
        raise VLLMValidationError(str(e)) from e
