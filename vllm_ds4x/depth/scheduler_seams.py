# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""What the scheduler hooks read of vLLM's objects, as Protocols: the few attributes, typed, so mypy checks the seam.

vLLM's Request, SchedulerOutput and ModelRunnerOutput have these (and much
more); the hooks in vllm_ds4x.hooks.spec_scheduling name nothing else of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from vllm_ds4x.depth.request import RequestState


class SamplingParamsView(Protocol):
    @property
    def extra_args(self) -> dict[str, Any] | None: ...


class RequestView(Protocol):
    """vllm.v1.request.Request, with the draft-depth state the hooks hang on it."""

    spec_token_ids: list[int]
    ds4x_depth_state: RequestState

    @property
    def request_id(self) -> str: ...
    @property
    def prompt_token_ids(self) -> list[int] | None: ...
    @property
    def sampling_params(self) -> SamplingParamsView | None: ...
    @property
    def status(self) -> object: ...
    @property
    def num_output_tokens(self) -> int: ...
    @property
    def all_token_ids(self) -> Sequence[int]: ...


class NewRequestView(Protocol):
    @property
    def req_id(self) -> str: ...


class CachedRequestsView(Protocol):
    """vllm.v1.core.sched.output.CachedRequestData; 0.32.0's (and the fork's) has resumed_req_ids: set[str], 0.34.0's none."""


class SchedulerOutputView(Protocol):
    """vllm.v1.core.sched.output.SchedulerOutput."""

    @property
    def scheduled_spec_decode_tokens(self) -> dict[str, list[int]]: ...
    @property
    def num_scheduled_tokens(self) -> dict[str, int]: ...
    @property
    def total_num_scheduled_tokens(self) -> int: ...
    @property
    def scheduled_new_reqs(self) -> Sequence[NewRequestView]: ...
    @property
    def scheduled_cached_reqs(self) -> CachedRequestsView: ...
    @property
    def num_invalid_spec_tokens(self) -> dict[str, int] | None: ...


class ForkSchedulerOutputView(Protocol):
    """The fork's SchedulerOutput: what the draft-depth hook writes into it for the model runner."""

    ds4x_verify_depths: dict[str, int] | None
    ds4x_resting_drafters: frozenset[str] | None

    @property
    def num_scheduled_tokens(self) -> dict[str, int]: ...


class RunnerOutputView(Protocol):
    """vllm.v1.outputs.ModelRunnerOutput."""

    @property
    def req_ids(self) -> list[str]: ...
    @property
    def sampled_token_ids(self) -> list[list[int]]: ...


def resumed_requests(scheduler_output: SchedulerOutputView) -> set[str]:
    """The step's requests resumed after preemption, not among its new ones: vLLM 0.34.0 re-sends a
    resumed request in full with the new ones, and its CachedRequestData has no resumed_req_ids."""
    resumed: set[str] = getattr(scheduler_output.scheduled_cached_reqs, "resumed_req_ids", set())
    return resumed
