"""When DSpark's drafter rests (vllm_ds4x.depth.drafter_rest), driven by the real policies and their
decision clock, as the scheduler hook drives them: each step is scheduled (`lag` steps before the
step that verifies what it drafts is scheduled), then the oldest scheduled step ends."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.depth_by_id import ById
from vllm_ds4x.depth import policy as dd
from vllm_ds4x.depth.drafter_rest import DrafterRest, may_rest

THINK, END_THINK = 1, 2
K = 2


def test_a_batch_of_one_depth_rests_whole_or_not_at_all() -> None:
    rest = DrafterRest(per_request=False)
    rest.consider(["r1"], ["r1", "a"])
    assert rest.settle(["r1", "a"]) == frozenset() == rest.stale  # "a" drafts for the next step: the block runs
    rest.consider(["r1", "r2", "waiting"], ["r1", "r2", "waiting"])
    assert rest.settle(["r1", "r2"]) == {"r1", "r2"} == rest.stale  # one not scheduled is not resting
    rest.consider([], ["r1", "r2"])
    assert rest.settle(["r1", "r2"]) == frozenset() == rest.stale


def test_per_request_each_rests_on_its_own() -> None:
    rest = DrafterRest(per_request=True)
    rest.consider(["r"], ["r", "a"])
    assert rest.settle(["r", "a"]) == {"r"} == rest.stale


def test_drafts_stay_stale_until_the_request_is_next_scheduled() -> None:
    """A request that rested and then sat a step out (the token budget, pipeline parallelism) has
    the same drafts when it is next scheduled: still stale; once scheduled with its drafter
    working, no longer; a request that left is forgotten."""
    rest = DrafterRest(per_request=True)
    rest.consider(["r"], ["r", "a"])
    rest.settle(["r", "a"])
    rest.consider([], ["r", "a"])
    assert rest.settle(["a"]) == frozenset() and rest.stale == {"r"}  # r not scheduled: still stale
    rest.consider([], ["r", "a"])
    assert rest.settle(["r", "a"]) == frozenset() and rest.stale == frozenset()  # r drafted afresh
    rest.consider(["r"], ["r"])
    rest.settle(["r"])
    rest.consider([], ["a"])  # r finished
    assert rest.stale == frozenset()


class Engine:
    """One request through a policy, as the scheduler hook runs it with DrafterRest: returns per
    step (the depth it verified, its choice then, whether its drafter rested)."""

    def __init__(self, config: dict[str, Any], prompt: list[int], lag: int) -> None:
        self.policy = ById(dd.DepthPolicy(dd.DraftDepthConfig.from_dict(config, K), K,
                                          dd.PhaseTracker([[THINK]], [[END_THINK]]), lag=lag))
        self.state = self.policy.add("a", prompt, None)
        self.rest, self.lag = DrafterRest(per_request=True), lag

    def schedule(self) -> tuple[int, int, bool]:
        state = self.state
        self.rest.consider(["a"] if may_rest(self.policy.policy, state) else [], ["a"])
        verified = 0 if "a" in self.rest.stale else state.depth
        return verified, state.depth, "a" in self.rest.settle(["a"])

    def run(self, steps: int, accepted: int = 0, tokens: list[int] | None = None) -> list[tuple[int, int, bool]]:
        """`tokens`: what each step makes (a phase marker among them), else none."""
        scheduled = [self.schedule() for _ in range(self.lag - 1)]  # async: one step ahead
        done = []
        for i in range(steps):
            scheduled.append(self.schedule())
            step = scheduled.pop(0)
            self.policy.verified(self.state, step[0], min(accepted, step[0]))
            if tokens is not None:
                self.policy.on_tokens("a", [tokens[i]])
            self.policy.step()
            done.append(step)
        return done


@pytest.mark.parametrize("lag", [1, 2])
def test_adaptive_rests_at_depth_0_and_still_verifies_every_probe(lag: int) -> None:
    """Adaptive at depth 0 probes one draft now and then: the step before each probe must draft
    (it is due then), so no probe verifies a rested drafter's drafts, and it learns from each."""
    engine = Engine({"policy": "adaptive", "min_depth": 0, "prior_acceptance": 0.1,
                     "step_cost": [1.0, 2.05, 2.83], "explore_steps": 0}, [THINK], lag)
    steps = engine.run(600)
    probes = sum(verified == 1 for verified, _, _ in steps)
    assert probes >= 5
    assert all(verified == chosen for verified, chosen, _ in steps)  # nothing it chose was lost to a rest
    at_zero = [rested for verified, _, rested in steps if verified == 0]
    assert sum(at_zero) >= 0.95 * len(at_zero)  # all but those before a probe and its own (no exploring here)
    assert engine.state.acceptance["reasoning"].counts[0] >= probes - 1  # each probe learned from (the last maybe not yet)


@pytest.mark.parametrize("lag", [1, 2])
def test_a_phase_change_in_a_resting_step_costs_one_step_at_depth_0(lag: int) -> None:
    """Phase 0/2: reasoning rests; the step that ends reasoning rested, so the next verifies
    nothing (its drafts are stale) while drafting again; from then on it verifies 2."""
    engine = Engine({"policy": "phase", "reasoning_depth": 0, "answer_depth": K}, [THINK], lag)
    steps = engine.run(8, accepted=K, tokens=[5, 5, END_THINK, 6, 6, 6, 6, 6])
    verified = [step[0] for step in steps]
    rested = [step[2] for step in steps]
    assert rested[:3] == [True] * 3 and not any(rested[3 + lag - 1:])
    assert verified == [0] * (3 + lag) + [K] * (5 - lag)
    stale = [chosen for v, chosen, _ in steps if v != chosen]
    assert stale == [K]  # one step where it chose 2 and verified nothing


def test_a_request_whose_depth_0_rounds_up_to_a_graph_depth_does_not_rest() -> None:
    """A client's own depth 0 under phase 1/2 (graphs for depths 1 and 2) verifies one draft: its
    drafter must draft for it."""
    policy = dd.DepthPolicy(dd.DraftDepthConfig.from_dict({"policy": "phase", "reasoning_depth": 1}, K), K,
                            dd.PhaseTracker([[THINK]], [[END_THINK]]))
    own_zero = policy.add("o", [THINK], {"draft_depth": 0})
    assert own_zero.depth == 0 and policy.batch_depth[0] == 1 and not may_rest(policy, own_zero)
    zero = dd.DepthPolicy(dd.DraftDepthConfig.from_dict({"policy": "phase", "reasoning_depth": 0}, K), K,
                          dd.PhaseTracker([[THINK]], [[END_THINK]]))
    assert may_rest(zero, zero.add("r", [THINK], None))
