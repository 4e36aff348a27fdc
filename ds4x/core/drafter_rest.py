# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""When DSpark's drafter rests: no query block for a request whose drafts no step will verify.

After the target's forward, DSpark stores its context K/V (from the target's
hidden states of the tokens just accepted) and then drafts a block of K
tokens for every request, which the next step verifies. A request that
chose depth 0, and cannot choose another before that step (a phase or fixed
policy never decides on its own; adaptive only when it is due), would throw
that block away. Its drafter rests: its query rows go to no CPU expert, and
when every request of the step rests, the block is not run at all. Its
context K/V is stored as always, so its later drafts are what they would
have been.

What a resting drafter proposed is stale: the next step verifies none of it
(that request's own depth is 0 there; a batch of one depth verifies
nothing). So a request whose phase changes in a resting step verifies
nothing in the step after, one depth-0 step, and drafts again from there.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable


class DrafterRest:
    """One per scheduler: the requests whose drafter rests in the step being
    scheduled, and those whose drafts are stale (it rested in the last one)."""

    def __init__(self, per_request: bool) -> None:
        """per_request: each request verifies its own depth (draft_depth verify "request");
        else a batch verifies one depth, and its drafter rests whole or not at all."""
        self.per_request = per_request
        self.stale: frozenset[str] = frozenset()
        """drafted by a resting drafter (the last step's): verified by no step"""
        self._may_rest: frozenset[str] = frozenset()

    def consider(self, may_rest: Iterable[str]) -> None:
        """Before a step is scheduled: the requests that chose depth 0 and decide nothing
        before the step that would verify this step's drafts."""
        self._may_rest = frozenset(may_rest)

    def settle(self, scheduled: Collection[str]) -> frozenset[str]:
        """Once the step is scheduled (`scheduled`: its request ids): the requests whose
        drafter rests in it, which are the next step's stale ones."""
        resting = self._may_rest.intersection(scheduled)
        if not self.per_request and len(resting) < len(scheduled):
            resting = frozenset()
        self.stale, self._may_rest = resting, frozenset()
        return resting

    def verifies_nothing(self, request_id: str) -> bool:
        """Whether a request's drafts in the step being scheduled are stale. A batch of
        one depth verifies nothing after its drafter rested (it rested whole)."""
        return request_id in self.stale or (not self.per_request and bool(self.stale))
