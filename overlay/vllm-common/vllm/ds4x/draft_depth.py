# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Per-request draft depth for speculative decoding: its config, and DepthPolicy.

How many of the K_max drafted tokens each request would verify. A decode
batch verifies one depth, the deepest its requests chose, rounded up to one
with a CUDA graph (``graph_depths``); verifying more than a request chose, or
a shorter prefix than K_max, is lossless (rejection sampling accepts a prefix anyway), and
drafting still produces K_max. Policies:

- ``fixed``: every request chooses K_max (vLLM's behaviour, the default).
- ``phase``: ``reasoning_depth`` while a request is inside its reasoning
  section, ``answer_depth`` after it.
- ``adaptive``: per request and phase, an acceptance estimate per draft
  position, and a table of step cost by tokens verified; picks the depth with
  the most expected tokens per second, with hysteresis.

A request may choose its own depth with ``SamplingParams.extra_args["draft_depth"]``
(OpenAI API: ``"vllm_xargs": {"draft_depth": 1}``); like any choice it rounds
up to a graph depth, so under ``fixed`` it verifies K_max.

Configured inside ``--speculative-config``, e.g.
``{"method": "ngram", "num_speculative_tokens": 2,
"draft_depth": {"policy": "phase", "reasoning_depth": 1}}``.

Pure Python: the policy is stats in, depth out, testable without a GPU. Its
parts, one job each: the config and DepthPolicy (here: requests and their
groups), vllm.ds4x.phase_tracker (the phase from token ids), depth_strategies
(Fixed, Phase, and depth_adaptive's Adaptive, behind the protocol the hooks
call), depth_clock (when adaptive decides), depth_estimates (acceptance, step
costs, the engine-wide seeds), depth_outcomes (adaptive's per-request counts,
counted when read) and depth_tally (the codes a step is counted in).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from .depth_estimates import SeedAcceptance, StepCosts
from .depth_request import RequestState
from .depth_strategies import DepthStrategy, make_strategy
from .depth_tally import RETIRED, TallyCodec
from .phase_tracker import ANSWER, REASONING, PhaseTracker

__all__ = ["ANSWER", "POLICIES", "REASONING", "DepthPolicy", "DraftDepthConfig", "DraftDepthError", "PhaseTracker",
           "RequestState", "batch_depth_table", "request_depth"]

POLICIES = ("fixed", "phase", "adaptive")
REQUEST_KEY = "draft_depth"


class DraftDepthError(ValueError):
    """A draft-depth setting that cannot work; the message names it and the fix."""


def _step_cost(raw: Any) -> tuple[float, ...] | dict[int, tuple[float, ...]]:
    """step_cost as given: a list of costs, or such lists keyed by running requests (1 or more)."""
    where = "speculative_config.draft_depth.step_cost"
    if not isinstance(raw, Mapping):
        return tuple(float(v) for v in raw)
    try:
        by_batch = {int(n): tuple(float(v) for v in costs) for n, costs in raw.items()}
    except (TypeError, ValueError) as e:
        raise DraftDepthError(f"{where}: expected a list of costs or {{\"REQUESTS\": [costs]}}: {e}") from None
    if not by_batch or min(by_batch) < 1:
        raise DraftDepthError(f"{where}: keys {sorted(raw)} must be running requests, 1 or more, e.g. "
                              f"{{\"1\": [...], \"2\": [...]}}")
    return by_batch


@dataclass(frozen=True)
class DraftDepthConfig:
    """The ``draft_depth`` object of ``--speculative-config``."""

    policy: str = "fixed"
    """One of fixed, phase, adaptive."""
    reasoning_depth: int | None = None
    """phase: depth chosen while reasoning (default 1)."""
    answer_depth: int | None = None
    """phase: depth chosen in the answer (default K_max)."""
    min_depth: int = 0
    """adaptive: lowest depth it may choose."""
    step_cost: tuple[float, ...] | dict[int, tuple[float, ...]] | None = None
    """adaptive: relative cost of a step verifying 1, 2, ... K_max+1 tokens per
    request, used until live step timings replace it (default: flat); or such
    lists by running requests, {"1": [...], "2": [...]} as measure writes them
    (a batch size not given takes the nearest given one's)."""
    prior_acceptance: float = 0.7
    """adaptive: acceptance assumed per position before any is measured."""
    smoothing: float = 0.03
    """adaptive: weight of the newest observation in the running estimates."""
    hysteresis: float = 0.01
    """adaptive: switch only for more than this fraction of expected gain."""
    hold_steps: int = 16
    """adaptive: steps between two decisions of one request (0 acts as 1); its
    acceptance estimate takes in what it verified meanwhile at once, then.
    While its choice holds the wait doubles, up to 4 times this; a change (or
    a new phase) brings it back."""
    probe_interval: int = 8
    """adaptive: at depth 0 nothing is verified, so every this many steps one
    step verifies one draft, to keep the acceptance estimate current; rarer
    where a probe loses more (its step's cost over a depth-0 step, less the
    draft it expects accepted), so that probes lose at most 1% of the time,
    but at least once every 4 x hold_steps. A request that learned from the
    batch meanwhile (another's probe or deeper choice) decides without one."""
    explore_steps: int = 16
    """adaptive: steps it may spend in a row at depths whose step cost is untimed
    or stale, to time them (live timings come from batches of one verify
    length); the allowance refills by one every 16 engine steps."""
    graph_depths: tuple[int, ...] | None = None
    """Depths a decode batch may verify, each with its own full decode CUDA
    graph (default: those the policy chooses, and K_max: fixed K_max; phase
    its two and K_max; adaptive min_depth..K_max). Must include K_max. A batch
    verifies the smallest of these at or above the deepest depth chosen in it."""

    def step_costs(self) -> dict[int, tuple[float, ...]]:
        """step_cost by running requests; 0 keys a list given for every batch size."""
        if self.step_cost is None:
            return {}
        return dict(self.step_cost) if isinstance(self.step_cost, dict) else {0: self.step_cost}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None, k_max: int) -> DraftDepthConfig:
        """Validate against K_max; every error names the field and the fix."""
        raw = dict(raw or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - names)
        if unknown:
            raise DraftDepthError(f"speculative_config.draft_depth: unknown field(s) {unknown}; known: {sorted(names)}")
        if raw.get("graph_depths") is not None:
            raw["graph_depths"] = tuple(int(v) for v in raw["graph_depths"])
        if raw.get("step_cost") is not None:
            raw["step_cost"] = _step_cost(raw["step_cost"])
        config = cls(**raw)
        config.check(k_max)
        return config

    def check(self, k_max: int) -> None:
        where = "speculative_config.draft_depth"
        if self.policy not in POLICIES:
            raise DraftDepthError(f"{where}.policy={self.policy!r}: expected one of {', '.join(POLICIES)}")
        for name in ("reasoning_depth", "answer_depth", "min_depth"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or not 0 <= value <= k_max):
                raise DraftDepthError(f"{where}.{name}={value!r}: expected 0..{k_max} (num_speculative_tokens)")
        for batch, costs in self.step_costs().items():
            if len(costs) != k_max + 1 or any(c <= 0 for c in costs):
                at = "" if batch == 0 else f"[{batch}]"
                raise DraftDepthError(f"{where}.step_cost{at}: expected {k_max + 1} positive costs "
                                      f"(1..{k_max + 1} tokens verified)")
        if self.graph_depths is not None and (
            k_max not in self.graph_depths or any(not 0 <= d <= k_max for d in self.graph_depths)
        ):
            raise DraftDepthError(
                f"{where}.graph_depths={list(self.graph_depths)}: expected depths in 0..{k_max} that include "
                f"{k_max} (num_speculative_tokens), e.g. [1, {k_max}]"
            )
        if (not 0 < self.prior_acceptance < 1 or not 0 < self.smoothing <= 1 or self.hysteresis < 0
                or self.hold_steps < 0 or self.probe_interval < 1):
            raise DraftDepthError(
                f"{where}: prior_acceptance in (0,1), smoothing in (0,1], hysteresis >= 0, hold_steps >= 0, "
                f"probe_interval >= 1"
            )

    @property
    def needs_phase(self) -> bool:
        return self.policy in ("phase", "adaptive")

    def phase_depths(self, k_max: int) -> dict[str, int]:
        """phase: the depth chosen in each phase (defaults: 1 reasoning, K_max answer)."""
        reasoning = 1 if self.reasoning_depth is None else self.reasoning_depth
        answer = k_max if self.answer_depth is None else self.answer_depth
        return {REASONING: reasoning, ANSWER: answer}

    def verify_depths(self, k_max: int) -> tuple[int, ...]:
        """The depths decode batches verify, ascending; each gets a CUDA graph."""
        if self.graph_depths is not None:
            return tuple(sorted(set(self.graph_depths)))
        if self.policy == "phase":
            return tuple(sorted({*self.phase_depths(k_max).values(), k_max}))
        if self.policy == "adaptive":
            return tuple(range(self.min_depth, k_max + 1))
        return (k_max,)


def batch_depth_table(depths: Sequence[int], k_max: int) -> tuple[int, ...]:
    """For each chosen depth 0..K_max, the verify depth of a batch whose deepest
    request chose it: the smallest of `depths` at or above it (lossless: a
    request verifying more drafts than it chose accepts the same prefix)."""
    return tuple(min(d for d in depths if d >= chosen) for chosen in range(k_max + 1))


def request_depth(extra_args: Mapping[str, Any] | None, k_max: int) -> int | None:
    """The client's own depth, if it set one; raises naming the bad value."""
    if not extra_args or REQUEST_KEY not in extra_args:
        return None
    value = extra_args[REQUEST_KEY]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= k_max:
        raise DraftDepthError(f"extra_args.{REQUEST_KEY}={value!r}: expected an integer in 0..{k_max}")
    return value


class DepthPolicy:
    """One per scheduler: requests in, a depth per request out. It keeps the
    requests (by id, to read a step's output) and their groups by phase and
    chosen depth (the scheduler's by-phase counts), and leaves every choice to
    its strategy (vllm.ds4x.depth_strategies); the engine-wide estimates (step
    costs, the acceptance seeds of new requests) are here, for the strategy and
    the scheduler's step timer."""

    def __init__(self, config: DraftDepthConfig, k_max: int, tracker: PhaseTracker | None, lag: int = 1) -> None:
        """lag: steps from a decision to the first step it schedules (2 under
        async scheduling: vLLM schedules a step before it reads the last one)."""
        if config.needs_phase and tracker is None:
            raise DraftDepthError(
                f"speculative_config.draft_depth.policy={config.policy!r} needs to know the reasoning "
                f"phase: start vLLM with --reasoning-parser (e.g. deepseek_r1, deepseek_v4)"
            )
        self.config, self.k_max, self.tracker, self.lag = config, k_max, tracker, lag
        self.codec = TallyCodec(k_max)
        self.batch_depth = batch_depth_table(config.verify_depths(k_max), k_max)
        given = config.step_costs()
        by_batch = {n: list(c) for n, c in given.items() if n > 0}
        self.costs = StepCosts(prior=list(given[min(given)]) if given else [1.0] * (k_max + 1), by_batch=by_batch)
        self.seeds = SeedAcceptance(config.prior_acceptance, k_max, config.smoothing)
        self.requests: dict[str, RequestState] = {}
        # the requests by slot, until retired: per-step tallies read all but the largest group
        self.groups: dict[int, set[RequestState]] = {}
        self.strategy: DepthStrategy = make_strategy(
            config, k_max, batch_depth=self.batch_depth, set_depth=self.set_depth, requests=self.requests,
            costs=self.costs, seeds=self.seeds, lag=lag)

    def add(self, request_id: str, prompt: Sequence[int], extra_args: Mapping[str, Any] | None) -> RequestState:
        state = RequestState(
            request_id=request_id,
            phase=self.tracker.initial(prompt) if self.tracker else ANSWER,
            override=request_depth(extra_args, self.k_max),
            depth=self.k_max,
        )
        self.strategy.start(state, len(self.requests))
        self.requests[request_id] = state
        return state

    def tokens(self, state: RequestState, new: Sequence[int], history: Sequence[int]) -> None:
        """A step's new tokens (the last of `history`, all of the request's tokens):
        the phase. The scheduler calls it only when one of them may end a marker."""
        if self.tracker is not None and not self.tracker.last_tokens.isdisjoint(new):
            phase = self.tracker.feed(state.phase, history, len(new))
            if phase != state.phase:
                left, state.phase = state.phase, phase
                self.strategy.phase_changed(state, left)

    def retire(self, state: RequestState) -> None:
        """A request is done: it leaves its group (and, if it still holds it, its
        id); the strategy keeps what it learned (adaptive: the seeds)."""
        if self.requests.get(state.request_id) is state:
            del self.requests[state.request_id]
        if state.slot == RETIRED:
            return
        self._leave_group(state)
        state.slot = RETIRED
        self.strategy.retire(state)

    def set_depth(self, state: RequestState, depth: int) -> None:
        state.depth = depth
        slot = self.codec.slot(state.phase, depth)
        if slot != state.slot:
            self._leave_group(state)
            state.slot = slot
            self.groups.setdefault(slot, set()).add(state)

    def _leave_group(self, state: RequestState) -> None:
        group = self.groups.get(state.slot)
        if group is not None:
            group.discard(state)
            if not group:
                del self.groups[state.slot]
