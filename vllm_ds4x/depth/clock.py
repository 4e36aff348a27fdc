# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""When adaptive draft depth decides: holds, probes, spread arrivals, exploration allowance.

Nothing is done per request per step: a request is filed under the engine
step at whose end it next decides."""

from __future__ import annotations

import math
from collections.abc import Iterator

from vllm_ds4x.depth.request import RequestState
from vllm_ds4x.depth.tally import RETIRED

REFILL_EVERY = 16  # engine steps that earn one exploring step back
MAX_HOLD_TIMES = 4  # a steady choice waits up to this many holds
PROBE_LOSS = 0.01  # the share of the time probes at depth 0 may lose, in expectation


class DecisionClock:
    """Engine steps, and the requests due at the end of each."""

    def __init__(self, hold_steps: int, explore_steps: int, probe_interval: int) -> None:
        self.hold = max(hold_steps, 1)
        """steps between two decisions of one request (0 acts as 1)"""
        self.explore_steps, self.probe_interval = explore_steps, probe_interval
        self.explore_left = explore_steps
        self.steps = 0
        self.wakes: dict[int, list[RequestState]] = {}
        """requests by the step at whose end they decide"""

    def arrival(self, running: int) -> int:
        """Steps to a new request's first decision: arrivals spread over a hold
        (`running`: the requests there before it)."""
        return self.hold - running % self.hold

    def held(self, state: RequestState, kept: bool) -> int:
        """The wait after a decision: doubled while the choice holds (`kept`), up
        to MAX_HOLD_TIMES holds; a change (or a new phase) brings it back, and so does a
        choice made without a wait (a depth set at arrival and set again as others arrived)."""
        state.hold = min(2 * state.hold, MAX_HOLD_TIMES * self.hold) if kept and state.hold else self.hold
        return state.hold

    def probe_wait(self, costs: list[float], accepted: float) -> int:
        """At depth 0, steps to the next decision, where it probes (one step verifying
        one draft) unless it learned something meanwhile (another request's probe or
        deeper choice made the batch verify drafts): every probe_interval steps, or
        rarer so that probes lose at most PROBE_LOSS of the batch's time, but no later
        than a steady choice's longest hold. A probe loses what its step costs over a
        depth-0 step, less the draft it expects accepted (`costs`: step cost by tokens
        verified; `accepted`: the estimate at the first position), so probes come
        sooner as acceptance rises."""
        loss = costs[1] / costs[0] - 1 - accepted
        return min(max(self.probe_interval, math.ceil(round(loss / PROBE_LOSS, 6))), MAX_HOLD_TIMES * self.hold)

    def wake_in(self, state: RequestState, steps: int) -> None:
        state.wake_at = self.steps + steps
        self.wakes.setdefault(state.wake_at, []).append(state)

    def tick(self) -> Iterator[RequestState]:
        """An engine step ended: the requests due now, each checked as it comes
        (not rescheduled since, nor retired). The exploration allowance refills by
        one every REFILL_EVERY steps, whatever the batch size: a batch times one
        length a step."""
        self.steps += 1
        if not self.steps % REFILL_EVERY:
            self.give_back()
        return self._due(self.steps, self.wakes.pop(self.steps, []))

    @staticmethod
    def _due(now: int, filed: list[RequestState]) -> Iterator[RequestState]:
        for state in filed:
            if state.wake_at == now and state.slot != RETIRED:
                yield state

    def spend_exploring_step(self) -> None:
        """One step at an untimed depth (call only while explore_left > 0)."""
        self.explore_left -= 1

    def give_back(self) -> None:
        """One exploring step back (up to explore_steps)."""
        self.explore_left = min(self.explore_steps, self.explore_left + 1)
