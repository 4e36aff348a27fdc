"""The tests' by-id adapter over a DepthPolicy: requests named by id, one verification at a time.

The scheduler keeps each request's state on its vLLM Request and hands the
policy a whole step at once (DepthPolicy.tokens, strategy.learn and
strategy.step_ended); tests drive one request at a time, by name, through
the same calls.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import Any


class ById:
    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def add(self, request_id: str, prompt: Sequence[int], extra_args: Mapping[str, Any] | None = None) -> Any:
        return self.policy.add(request_id, prompt, extra_args)

    def depth(self, request_id: str) -> int:
        """Its chosen depth; K_max for a request never seen (vLLM's behaviour)."""
        state = self.policy.requests.get(request_id)
        return int(self.policy.k_max if state is None else state.depth)

    def on_tokens(self, request_id: str, new: Sequence[int], history: Sequence[int] | None = None) -> None:
        """history: all of the request's tokens, ending with `new` (default: just
        `new`, enough for single-token markers)."""
        state = self.policy.requests.get(request_id)
        if state is not None and new:
            self.policy.track_phase(state, new, new if history is None else history)

    def on_verified(self, request_id: str, drafted: int, accepted: int) -> None:
        state = self.policy.requests.get(request_id)
        if state is not None:
            self.verified(state, drafted, accepted)

    def verified(self, state: Any, drafted: int, accepted: int) -> None:
        """One verification, as the scheduler hands the strategy a step: the drafts
        it verified and the tokens it sampled (the accepted ones and one more)."""
        rid = state.request_id
        self.policy.strategy.learn([rid], {rid: [0] * drafted} if drafted else {}, [accepted + 1], drafted or None)

    def forget(self, request_id: str) -> None:
        state = self.policy.requests.get(request_id)
        if state is not None:
            self.policy.retire(state)

    def step(self, ran: Container[str] | None = None) -> None:
        """An engine step ended (`ran`: the ids in its output; None: all)."""
        self.policy.strategy.step_ended(ran)
