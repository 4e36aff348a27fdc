# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The draft-depth strategies, Fixed, Phase and Adaptive, behind the one protocol the hooks call.

Adaptive is vllm_ds4x.depth.adaptive. The scheduler hooks call the protocol
through DepthPolicy and DraftDepthScheduling, and never ask which policy runs."""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from vllm_ds4x.depth.adaptive import Adaptive
from vllm_ds4x.depth.config import AdaptiveDepth, DraftDepthConfig, PhaseDepth
from vllm_ds4x.depth.phase_tracker import ANSWER, REASONING
from vllm_ds4x.depth.request import RequestState, SetDepth

if TYPE_CHECKING:
    from vllm_ds4x.depth.estimates import StepCosts


class DepthStrategy(Protocol):
    step_costs: StepCosts | None
    """the engine-wide step costs it decides on, which the scheduler times live; None: it needs none"""

    def start(self, state: RequestState, running: int) -> None:
        """A new request's first depth (`running`: the requests there before it)."""

    def phase_changed(self, state: RequestState, left: str) -> None:
        """Its phase changed (it left `left`): its depth in the new phase."""

    def learn(self, ids: Sequence[str], spec: Mapping[str, Sequence[int]], sampled: Sequence[int],
              drafted: int | None) -> None:
        """A step's verifications: `ids` in the order of `sampled` (the number of
        tokens each sampled), `spec` the drafts each verified, by id; `drafted`: d
        when every request of the step verified d drafts, else None."""

    def step_ended(self, ran: Container[str] | None) -> None:
        """An engine step ended (`ran`: the ids in its output; None: all)."""

    def decides_next(self, state: RequestState) -> bool:
        """Whether it may choose another depth at the end of the next step to end (before the
        step that verifies what is drafted in the one being scheduled; a phase change aside)."""

    def retire(self, state: RequestState) -> None:
        """A request has left (it is out of its group already)."""


class Phase:
    """A depth per phase (``reasoning_depth``, ``answer_depth``), or the client's own."""

    step_costs: StepCosts | None = None

    def __init__(self, depths: Mapping[str, int], set_depth: SetDepth) -> None:
        self.depths, self.set_depth = dict(depths), set_depth

    def start(self, state: RequestState, running: int) -> None:
        self.set_depth(state, self.depths[state.phase] if state.override is None else state.override)

    def phase_changed(self, state: RequestState, left: str) -> None:
        self.start(state, 0)

    def learn(self, ids: Sequence[str], spec: Mapping[str, Sequence[int]], sampled: Sequence[int],
              drafted: int | None) -> None:
        """Nothing to learn."""

    def step_ended(self, ran: Container[str] | None) -> None:
        """Nothing is due."""

    def decides_next(self, state: RequestState) -> bool:
        return False  # only a phase change moves it

    def retire(self, state: RequestState) -> None:
        """Nothing to keep."""


class Fixed(Phase):
    """K_max for every request, in both phases (vLLM's behaviour), or the client's own."""

    def __init__(self, k_max: int, set_depth: SetDepth) -> None:
        super().__init__({REASONING: k_max, ANSWER: k_max}, set_depth)


def make_strategy(config: DraftDepthConfig, k_max: int, *, batch_depth: Sequence[int], set_depth: SetDepth,
                  requests: Mapping[str, RequestState], costs: StepCosts, lag: int) -> DepthStrategy:
    """The strategy of the config's policy (the one place that asks which it is)."""
    if isinstance(config, AdaptiveDepth):
        return Adaptive(config, k_max, batch_depth=batch_depth, set_depth=set_depth, requests=requests,
                        costs=costs, lag=lag)
    if isinstance(config, PhaseDepth):
        return Phase(config.phase_depths(k_max), set_depth)
    return Fixed(k_max, set_depth)
