# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The scheduler's side of per-request draft depth (see vllm.ds4x.draft_depth).

The decision is made here, once, in the scheduler: every tensor- and
pipeline-parallel rank receives it as the per-request draft lists of the
scheduler output. Each decode batch verifies one depth (see uniform_depth),
so it keeps a full CUDA graph. KV lookahead stays reserved for K_max.
"""

import time

from vllm.ds4x.draft_depth import DepthPolicy, DraftDepthConfig, PhaseTracker
from vllm.ds4x.spec_metrics import DepthStats
from vllm.logger import init_logger

logger = init_logger(__name__)


def phase_tracker(vllm_config) -> PhaseTracker | None:
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
    def __init__(self, policy: DepthPolicy) -> None:
        self.policy = policy
        self._previous: frozenset[str] = frozenset()
        self._step_end: float | None = None

    @classmethod
    def create(cls, vllm_config) -> "DraftDepthScheduling | None":
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

    def _state(self, request):
        state = self.policy.requests.get(request.request_id)
        if state is None:
            params = request.sampling_params
            state = self.policy.add(request.request_id, request.prompt_token_ids or [],
                                    params.extra_args if params is not None else None)
        return state

    def uniform_depth(self, running) -> None:
        """Before scheduling: every decode request in the batch verifies one
        depth, the smallest graph depth at or above the deepest one chosen
        among them, so the batch has one query length and replays its CUDA
        graph. Drafts are kept whole until here (verifying more than a
        request chose is lossless); a drafter that proposed fewer (n-gram)
        keeps its shorter list."""
        drafting = [request for request in running if request.spec_token_ids]
        if not drafting:
            return
        depth = self.policy.batch_depth[max(self._state(request).depth for request in drafting)]
        for request in drafting:
            if len(request.spec_token_ids) > depth:
                request.spec_token_ids = request.spec_token_ids[:depth]

    def on_verified(self, request, drafted: int, accepted: int, stats) -> None:
        state = self._state(request)
        phase, chosen = state.phase, state.depth  # as scheduled (async: may be a step newer)
        self.policy.verified(state, drafted, accepted)
        if stats is not None:
            if stats.ds4x is None:
                stats.ds4x = DepthStats()
            stats.ds4x.observe(phase, chosen, drafted, accepted)

    def on_tokens(self, request, new_token_ids: list[int]) -> None:
        if new_token_ids:
            self.policy.tokens(self._state(request), new_token_ids)

    def forget(self, request_id: str) -> None:
        self.policy.forget(request_id)

    def on_step_end(self, scheduler_output) -> None:
        """Live step cost: wall time since the previous step ended, credited to
        this step when it was a pure decode batch of one verify length and ran
        the same requests as the one before (no idle gap, no admission)."""
        now = time.perf_counter()
        scheduled = scheduler_output.num_scheduled_tokens
        requests = frozenset(scheduled)
        lengths = set(scheduled.values())
        if (
            len(lengths) == 1
            and requests == self._previous
            and not scheduler_output.scheduled_new_reqs
            and self._step_end is not None
        ):
            tokens = lengths.pop()
            if tokens <= self.policy.k_max + 1:
                self.policy.costs.observe(tokens, now - self._step_end)
        self._previous, self._step_end = requests, now

def validate_request(params, speculative_config) -> None:
    """The front end's check of a client's own draft_depth: a 400 that names it,
    before any stream starts."""
    from vllm.ds4x.draft_depth import DraftDepthError, request_depth
    from vllm.exceptions import VLLMValidationError

    try:
        request_depth(params.extra_args, speculative_config.num_speculative_tokens)
    except DraftDepthError as e:
        raise VLLMValidationError(str(e)) from e
