# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""When DSpark's drafter rests: no query block for a request whose drafts no step will verify.

After the target's forward, DSpark stores its context K/V (from the target's
hidden states of the tokens just accepted) and then drafts a block of K
tokens for every request, which the next step verifies. A request that
verifies no draft (it chose depth 0, a graph depth) and cannot choose
another before that step (a phase or fixed policy never decides on its own;
adaptive only when it is due) would throw that block away. Its drafter
rests: its query rows go to no CPU expert, and when every request of the
step rests, the block is not run at all. Its context K/V is stored as
always, so its later drafts are what they would have been.

What a resting drafter proposed is stale: the step that next schedules
that request verifies none of it (its own depth is 0 there; a batch of one
depth verifies nothing). So a request whose phase changes in a resting step
verifies nothing in the step after, one depth-0 step, and drafts again
from there.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_ds4x.depth.policy import DepthPolicy
    from vllm_ds4x.depth.request import RequestState


def may_rest(policy: DepthPolicy, state: RequestState) -> bool:
    """Whether no step will verify what a request drafts in the step being scheduled: it
    verifies none (its depth rounds to graph depth 0) and its policy decides nothing before."""
    return policy.batch_depth[state.depth] == 0 and not policy.strategy.decides_next(state)


class DrafterRest:
    """One per scheduler: the requests whose drafter rests in the step being
    scheduled, and those whose drafts are stale (it rested when they were last
    scheduled)."""

    def __init__(self, per_request: bool) -> None:
        """per_request: each request verifies its own depth (draft_depth verify "request");
        else a batch verifies one depth, and its drafter rests whole or not at all."""
        self.per_request = per_request
        self.stale: frozenset[str] = frozenset()
        """last drafted by a resting drafter: verified by no step"""
        self._may_rest: frozenset[str] = frozenset()

    def consider(self, may_rest: Iterable[str], running: Iterable[str]) -> None:
        """Before a step is scheduled: the requests that verify no draft and decide nothing
        before the step that would verify this step's drafts (`running`: every request
        that may be scheduled; the stale marks of any other are dropped)."""
        self._may_rest = frozenset(may_rest)
        self.stale = self.stale.intersection(running)

    def settle(self, scheduled: Collection[str]) -> frozenset[str]:
        """Once the step is scheduled (`scheduled`: its request ids): the requests whose
        drafter rests in it. They are stale until next scheduled; one scheduled now whose
        drafter works drafts afresh."""
        resting = self._may_rest.intersection(scheduled)
        if not self.per_request and len(resting) < len(scheduled):
            resting = frozenset()
        self.stale, self._may_rest = self.stale.difference(scheduled) | resting, frozenset()
        return resting
