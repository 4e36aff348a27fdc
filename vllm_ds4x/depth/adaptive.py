# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The adaptive draft-depth strategy: each request's depth with the most tokens per second.

Per request and phase, from its acceptance estimate and the engine's step
costs, with hysteresis; decisions are due on the DecisionClock. A request
that has not run yet is priced in the batch it joins; under verify
"request" every depth is priced in the batch it runs in, the other
requests' depths held (depth_estimates.best_in_batch).

A request's verifications are counted in its outcome table (when it is read,
for steps where every request drafted alike: depth_outcomes), and go into its
estimate only when it next decides.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Mapping, Sequence

from vllm_ds4x.depth.clock import DecisionClock
from vllm_ds4x.depth.config import AdaptiveDepth
from vllm_ds4x.depth.estimates import Beside, SeedAcceptance, StepCosts, best_depth, best_in_batch, expected_tokens
from vllm_ds4x.depth.outcomes import MAX_SAMPLED, OutcomeLog
from vllm_ds4x.depth.request import RequestState, SetDepth
from vllm_ds4x.depth.tally import RETIRED, TallyCodec


class Adaptive:
    """One per scheduler; the requests' own estimates hang on their RequestState."""

    def __init__(self, config: AdaptiveDepth, k_max: int, *, batch_depth: Sequence[int], set_depth: SetDepth,
                 requests: Mapping[str, RequestState], costs: StepCosts, lag: int) -> None:
        """lag: steps from a decision to the first step it schedules (2 under
        async scheduling: vLLM schedules a step before it reads the last one)."""
        self.hysteresis, self.lag = config.hysteresis, lag
        self.codec = TallyCodec(k_max)
        # it chooses among depths a batch really verifies (each has its graph)
        self.choices = [d for d in range(config.min_depth, k_max + 1) if batch_depth[d] == d]
        self.batch_depth, self.per_request = batch_depth, config.verify == "request"
        # a step_cost profile prices a batch's untimed steps well enough: no exploring each new one
        self.explore_shapes = not config.step_costs()
        self.set_depth, self.requests, self.costs = set_depth, requests, costs
        # the engine-wide acceptance that starts new requests
        self.seeds = SeedAcceptance(config.prior_by_phase(), k_max, config.smoothing)
        self.step_costs: StepCosts | None = costs  # timed live by the scheduler
        self.clock = DecisionClock(config.hold_steps, config.explore_steps, config.probe_interval)
        # the latest batch (its ids in order): a step like the one before (same ids, no
        # arrival or departure since) is logged without a lookup by id
        self._ids: list[str] = []
        self._changes, self._cached = 0, -1
        self.log = OutcomeLog(k_max)
        self._untimed: tuple[list[int] | None, list[int]] = (None, [])  # (StepCosts.unmeasured(), of choices)
        self._arrived: dict[str, RequestState] = {}  # arrived since the last step ended, in order
        self._ran: Container[str] | None = None  # the last step's requests (None: every request held)

    def start(self, state: RequestState, running: int) -> None:
        state.acceptance = self.seeds.for_new_request()
        state.outcomes = [0] * self.codec.outcomes
        self._changes += 1
        self._arrived[state.request_id] = state
        # no exploring while it prefills; arrivals spread their decisions over a hold; priced in
        # the batch it joins, not the last timed one (which a request alone may have left)
        self._settle(state, force=True, explore=False, first=self.clock.arrival(running), joining=True)

    def phase_changed(self, state: RequestState, left: str) -> None:
        self._apply(state, left)  # what it verified belongs to the phase it left
        state.exploring = state.probing = False
        self._settle(state, force=True)

    def retire(self, state: RequestState) -> None:
        """Its estimates move the engine-wide seeds for the next requests."""
        self._changes += 1
        self._apply(state, state.phase)
        self.seeds.absorb(state.acceptance)

    def learn(self, ids: Sequence[str], spec: Mapping[str, Sequence[int]], sampled: Sequence[int],
              drafted: int | None) -> None:
        """Each verification into its request's outcome table. A step where every
        request verified `drafted` drafts is logged whole; each table takes its
        share when read."""
        if drafted and drafted < MAX_SAMPLED and len(sampled) == len(ids):
            self._log_batch(ids)
            self.log.add(self.codec.sampled_base(drafted), sampled)
            return
        sampled_base = self.codec.sampled_base
        for state, drafts, n in zip(map(self.requests.get, ids), map(spec.get, ids), sampled):
            if drafts and n and state is not None:  # None: aborted while it ran
                state.outcomes[sampled_base(len(drafts)) + n] += 1

    def _log_batch(self, ids: Sequence[str]) -> None:
        """A step unlike the one before starts a new batch in the log."""
        if self._cached != self._changes or ids != self._ids:
            spare = [0] * self.codec.outcomes  # an id without a request: counted nowhere
            self._ids = list(ids)
            self.log.batch(ids, [spare if (state := self.requests.get(i)) is None else state.outcomes for i in ids])
            self._cached = self._changes

    def _outcomes(self, state: RequestState) -> list[int]:
        """Its outcome table, with its share of the logged steps."""
        self.log.take(state.request_id, state.outcomes)
        return state.outcomes

    def step_ended(self, ran: Container[str] | None) -> None:
        """The requests due decide: after a hold, the step after an exploring one,
        a probe's step after it was set, and at depth 0 when a probe is due."""
        self._ran = ran
        # priced before the step's later arrivals joined: again, with them (still among the arrivals:
        # under async scheduling they are not yet in the step that ended)
        for other in list(self._arrived.values())[:-1]:
            if other.slot != RETIRED and other.override is None and not (other.exploring or other.probing):
                self.set_depth(other, self._decide(other, force=True, explore=False, joining=True))
        self._arrived = {}
        for state in self.clock.tick():
            self._wake(state, ran is None or state.request_id in ran)

    def decides_next(self, state: RequestState) -> bool:
        """Due at the end of the next step to end: a step scheduled now (`lag` steps after a
        decision) verifies what the one before it drafted, whose depth that decision sets."""
        return state.wake_at == self.clock.steps + 1

    def _wake(self, state: RequestState, ran: bool) -> None:
        tried = state.probing or state.exploring  # a depth it did not choose, for one step
        if not ran:  # waiting or preempted: nothing learned
            if not tried:
                return self.clock.wake_in(state, state.hold or self.clock.hold)
            if state.exploring:
                self.clock.give_back()  # the step it did not take is given back
            state.exploring = state.probing = False
            return self._settle(state, force=True, explore=False)
        state.exploring = state.probing = False
        if state.depth == 0 and not tried and not any(self._outcomes(state)):
            state.probing = True  # at depth 0 nothing is verified: one step verifies one draft
            self.set_depth(state, 1)
            return self.clock.wake_in(state, self.lag)
        self._apply(state, state.phase)
        self._settle(state, force=tried)

    def _settle(self, state: RequestState, force: bool, explore: bool = True, first: int = 0,
                joining: bool = False) -> None:
        """Decide, and when to decide next: after one step at an untimed depth,
        after a probe's wait at depth 0, else after a hold (`first`: a new request's;
        `joining`: it has not run yet, see _decide)."""
        previous = state.depth
        self.set_depth(state, self._decide(state, force, explore, joining))
        if state.override is not None:
            return
        clock = self.clock
        if state.exploring:
            return clock.wake_in(state, 1)
        if state.depth == 0:
            accepted = state.acceptance[state.phase].estimate()[0]
            return clock.wake_in(state, first or clock.probe_wait(self.costs.relative(), accepted))
        hold = clock.held(state, kept=state.depth == previous and not force)
        clock.wake_in(state, first or hold)

    def _decide(self, state: RequestState, force: bool, explore: bool, joining: bool = False) -> int:
        """Its depth: per request, priced in its batch with the others' depths held; else on
        uniform steps of the last timed batch, or (`joining`: before its first step) of the
        batch it joins."""
        if state.override is not None:
            return state.override
        in_batch = self._beside(state) if self.per_request else None  # priced in its batch, the others held
        if explore and self.clock.explore_left > 0 and (untimed := self._untimed_choices(in_batch)):
            self.clock.spend_exploring_step()  # one step at an untimed depth, to time it
            state.exploring = True
            return untimed[0]
        estimate = state.acceptance[state.phase].estimate()
        margin = self.hysteresis
        if in_batch is not None:
            best, rates = best_in_batch(estimate, self.costs, self.choices, in_batch)
            margin /= in_batch.requests + 1  # on the batch's rate: its own gain, shared by all
        else:
            batch = 1 + sum(1 for _ in self._others(state)) if joining else None
            best, rates = best_depth(estimate, self.costs.relative(batch), self.choices)
        if not force and rates[best] <= rates[state.depth] * (1 + margin):
            return state.depth
        return best

    def _others(self, state: RequestState) -> Iterator[RequestState]:
        """The others of its batch: those that ran in the last step, and those that arrived since."""
        ran, arrived = self._ran, self._arrived
        for other in self.requests.values():
            if other is not state and other.slot != RETIRED and (
                    ran is None or other.request_id in ran or other.request_id in arrived):
                yield other

    def _beside(self, state: RequestState) -> Beside | None:
        """The others of its batch, each at its own depth rounded to a graph depth; None: it is alone."""
        requests, expected, verified, longest = 0, 0.0, 0, 0
        for other in self._others(state):
            depth = self.batch_depth[other.depth]
            requests += 1
            expected += expected_tokens(other.acceptance[other.phase].estimate(), depth)
            verified += 1 + depth
            longest = max(longest, 1 + depth)
        return Beside(requests, expected, verified, longest) if requests else None

    def _untimed_choices(self, beside: Beside | None) -> list[int]:
        """Depths it may choose whose step cost is untimed or stale at this batch size (kept
        while StepCosts keeps its answer); `beside` others under verify "request": the depths
        whose step in its batch is untimed, none where a step_cost profile prices those steps."""
        if beside is not None:
            if not self.explore_shapes:
                return []
            return [d for d in self.choices if not self.costs.timed(beside.shape(d), beside.requests + 1)]
        unmeasured = self.costs.unmeasured()
        if self._untimed[0] is not unmeasured:
            self._untimed = (unmeasured, [t - 1 for t in unmeasured if t - 1 in self.choices])
        return self._untimed[1]

    def _apply(self, state: RequestState, phase: str) -> None:
        """Its verifications since the last into its estimate of `phase`."""
        outcomes = self._outcomes(state)
        if any(outcomes):
            state.acceptance[phase].observe_outcomes(outcomes)
