# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Per-request draft depth for speculative decoding: how many of the K_max
drafted tokens each request would verify. A decode batch verifies one depth,
the deepest its requests chose, rounded up to one with a CUDA graph
(``graph_depths``); verifying more than a request chose, or a shorter prefix
than K_max, is lossless (rejection sampling accepts a prefix anyway), and
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

Pure Python: the policy is stats in, depth out, testable without a GPU.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

POLICIES = ("fixed", "phase", "adaptive")
REASONING, ANSWER = "reasoning", "answer"
REQUEST_KEY = "draft_depth"


class DraftDepthError(ValueError):
    """A draft-depth setting that cannot work; the message names it and the fix."""


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
    step_cost: tuple[float, ...] | None = None
    """adaptive: relative cost of a step verifying 1, 2, ... K_max+1 tokens per
    request, used until live step timings replace it (default: flat)."""
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
    """adaptive: at depth 0 nothing is verified, so every this many steps (times
    the cost of verifying 2 tokens over 1: dear probes come rarer) one step
    verifies one draft, to keep the acceptance estimate current."""
    explore_steps: int = 16
    """adaptive: steps it may spend in a row at depths whose step cost is untimed
    or stale, to time them (live timings come from batches of one verify
    length); the allowance refills by one every 16 engine steps."""
    graph_depths: tuple[int, ...] | None = None
    """Depths a decode batch may verify, each with its own full decode CUDA
    graph (default: those the policy chooses, and K_max: fixed K_max; phase
    its two and K_max; adaptive min_depth..K_max). Must include K_max. A batch
    verifies the smallest of these at or above the deepest depth chosen in it."""

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None, k_max: int) -> DraftDepthConfig:
        """Validate against K_max; every error names the field and the fix."""
        raw = dict(raw or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - names)
        if unknown:
            raise DraftDepthError(f"speculative_config.draft_depth: unknown field(s) {unknown}; known: {sorted(names)}")
        for name, kind in (("step_cost", float), ("graph_depths", int)):
            if raw.get(name) is not None:
                raw[name] = tuple(kind(v) for v in raw[name])
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
        if self.step_cost is not None and (
            len(self.step_cost) != k_max + 1 or any(c <= 0 for c in self.step_cost)
        ):
            raise DraftDepthError(f"{where}.step_cost: expected {k_max + 1} positive costs (1..{k_max + 1} tokens verified)")
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


class PhaseTracker:
    """Reasoning or answer, from token ids: markers may span several tokens.

    The prompt decides the start (a chat template that disables thinking has
    already closed the section); then each end marker (``</think>``, and the
    DeepSeek-V4 tool-call marker) ends reasoning and a start marker re-enters it.
    Nothing is kept per request: a marker is looked for in the request's own
    token history, and only when a marker's last token has just arrived.
    """

    def __init__(self, start_markers: Iterable[Sequence[int]], end_markers: Iterable[Sequence[int]]) -> None:
        self.start = [tuple(m) for m in start_markers if m]
        self.end = [tuple(m) for m in end_markers if m]
        self.last_tokens = frozenset(m[-1] for m in [*self.start, *self.end])

    @staticmethod
    def _last(ids: Sequence[int], markers: list[tuple[int, ...]]) -> int:
        """End position of the last occurrence of any marker, -1 if none."""
        best = -1
        for marker in markers:
            n = len(marker)
            for i in range(len(ids) - n, best - n, -1):
                if tuple(ids[i : i + n]) == marker:
                    best = max(best, i + n)
                    break
        return best

    def initial(self, prompt: Sequence[int]) -> str:
        """Reasoning unless the prompt's last marker closed it."""
        return ANSWER if self._last(prompt, self.end) > self._last(prompt, self.start) else REASONING

    def feed(self, phase: str, history: Sequence[int], new: int) -> str:
        """The phase after the last `new` tokens of `history` (all of the
        request's tokens so far) arrived."""
        for end in range(max(len(history) - new, 0) + 1, len(history) + 1):
            if history[end - 1] not in self.last_tokens:  # the common case: no marker ends here
                continue
            if any(len(m) <= end and tuple(history[end - len(m) : end]) == m for m in self.end):
                phase = ANSWER
            elif any(len(m) <= end and tuple(history[end - len(m) : end]) == m for m in self.start):
                phase = REASONING
        return phase


def expected_tokens_by_depth(acceptance: Sequence[float], depth: int) -> list[float]:
    """For each depth 0..`depth`: 1 (the bonus token) + the expected accepted
    prefix of that many drafts, with conditional acceptance per position."""
    totals, total, survive = [1.0], 1.0, 1.0
    for p in acceptance[:depth]:
        survive *= p
        total += survive
        totals.append(total)
    return totals


def expected_tokens(acceptance: Sequence[float], depth: int) -> float:
    return expected_tokens_by_depth(acceptance, depth)[-1]


PRIOR_SAMPLES = 4  # what a starting acceptance estimate weighs, in observations


@functools.cache
def _reach(k_max: int) -> tuple[tuple[int, int, int], ...]:
    """For each outcome code with drafts, drafted * (K_max + 1) + accepted: the
    code, how many positions it saw (up to the first rejection), and accepted."""
    return tuple((drafted * (k_max + 1) + accepted, accepted + 1 if accepted < drafted else drafted, accepted)
                 for drafted in range(1, k_max + 1) for accepted in range(drafted + 1))


@dataclass(slots=True)
class Acceptance:
    """Conditional acceptance per draft position, smoothed. A position that is
    not being verified (the request runs shallower) fades toward the one
    before it, so deeper depths are judged on current evidence."""

    rates: list[float]
    smoothing: float
    weights: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    """observations per position: until 1/smoothing, a running mean (the starting
    rate counting as PRIOR_SAMPLES), so that a new estimate learns at once"""

    def observe_outcomes(self, outcomes: list[int]) -> None:
        """A batch of verifications, ``outcomes[drafted * (K_max + 1) + accepted]``
        counting each (then reset to 0), in one pass: each verification moves the
        rate of every position it observed (up to the first rejection) by
        ``smoothing`` toward accepted or not, and fades the weight of the
        positions it did not reach; the order within the batch is not kept."""
        k = len(self.rates)
        # verifications that saw exactly r positions (up to the first rejection) / accepted exactly a
        saw, took = [0] * (k + 1), [0] * (k + 1)
        for code, reached, accepted in _reach(k):
            n = outcomes[code]
            if n:
                saw[reached] += n
                took[accepted] += n
                outcomes[code] = 0
        if not self.weights:
            self.weights, self.counts = [1.0] * k, [0] * k
        keep = 1.0 - self.smoothing
        rates, weights, counts = self.rates, self.weights, self.counts
        total, seen, hits = sum(saw), 0, 0
        for position in range(k - 1, -1, -1):  # from the deepest: seen/hits count those that got past it
            seen += saw[position + 1]
            hits += took[position + 1]
            if seen:
                decay = keep**seen
                prior = PRIOR_SAMPLES + counts[position]
                if prior * self.smoothing < 1:  # warming up: a mean over what it has seen
                    rates[position] = (rates[position] * prior + hits) / (prior + seen)
                else:
                    rates[position] += (1.0 - decay) * (hits / seen - rates[position])
                counts[position] += seen
                weights[position] = 1.0 - (1.0 - weights[position]) * decay
            if total > seen:
                weights[position] *= keep ** (total - seen)

    def estimate(self) -> list[float]:
        rates, weights = self.rates, self.weights
        if not weights:
            return list(rates)
        out = [rates[0]]
        for position in range(1, len(rates)):
            out.append(weights[position] * rates[position] + (1 - weights[position]) * out[-1])
        return out


@dataclass
class StepCosts:
    """Seconds per step by tokens verified per request (1..K_max+1), for the batch
    size running now: the prior from the config until live timings arrive, then
    the median of the latest timings (robust to a stray slow step). Timings are
    kept per batch size, because a step's cost is the batch's tokens, not one
    request's: on the H200 benchmark, depth 0 timed with two requests made depth 1
    look cheaper with one. A batch size with no timings of its own borrows the
    nearest timed one's; a length not timed lately is stale."""

    prior: list[float]
    window: int = 15
    min_samples: int = 3
    stale_after: int = 512
    samples: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    """(requests, tokens per request): the latest timings"""
    last_seen: dict[tuple[int, int], int] = field(default_factory=dict)
    clock: int = 0
    batch: int = 1
    """the requests of the latest timed step: the batch the answers are for"""
    _relative: list[float] | None = None
    _unmeasured: list[int] | None = None

    def observe(self, tokens: int, seconds: float, requests: int = 1) -> None:
        key = (requests, tokens)
        kept = self.samples.setdefault(key, [])
        kept.append(seconds)
        del kept[: -self.window]
        self.clock += 1
        self.last_seen[key] = self.clock
        self.batch = requests
        self._relative = self._unmeasured = None

    def seen(self, requests: int) -> dict[int, float]:
        return {t: sorted(v)[len(v) // 2] for (n, t), v in self.samples.items()
                if n == requests and len(v) >= self.min_samples}

    def relative(self) -> list[float]:
        """Cost of 1..K_max+1 tokens at the current batch (or the nearest timed
        one); untimed entries scaled from the prior."""
        if self._relative is None:
            timed = {n for (n, _), v in self.samples.items() if len(v) >= self.min_samples}
            seen = self.seen(min(timed, key=lambda n: (abs(n - self.batch), n))) if timed else {}
            scale = sum(seen[t] / self.prior[t - 1] for t in seen) / len(seen) if seen else 1.0
            self._relative = [seen.get(t, self.prior[t - 1] * scale) for t in range(1, len(self.prior) + 1)]
        return self._relative

    def unmeasured(self) -> list[int]:
        """Lengths with too few timings at the current batch, or none lately."""
        if self._unmeasured is None:
            self._unmeasured = [
                t for t in range(1, len(self.prior) + 1)
                if len(self.samples.get((self.batch, t), ())) < self.min_samples
                or self.clock - self.last_seen[(self.batch, t)] > self.stale_after
            ]
        return self._unmeasured


def best_depth(acceptance: Sequence[float], costs: Sequence[float],
               candidates: Sequence[int]) -> tuple[int, list[float]]:
    """The depth with most expected tokens per unit of step cost (the shallower
    on a tie; candidates ascending), and the rate of every depth."""
    rates = expected_tokens_by_depth(acceptance, len(costs) - 1)
    for depth, cost in enumerate(costs):  # in place, and no max(key=): decisions are frequent
        rates[depth] /= cost
    best = candidates[0]
    for depth in candidates:
        if rates[depth] > rates[best]:
            best = depth
    return best, rates


@dataclass(eq=False, slots=True)
class RequestState:
    request_id: str
    phase: str
    override: int | None
    depth: int
    acceptance: dict[str, Acceptance]
    outcomes: list[int]
    """adaptive: verifications not yet in the estimate, by drafted * (K_max + 1) + accepted"""
    wake_at: int = 0
    """adaptive: the engine step at whose end it next decides (DepthPolicy.step)"""
    hold: int = 0
    """adaptive: steps from its last decision to its next"""
    slot: int = -1
    """phase and depth as one index, ((phase is answer) * (K_max + 1) + depth) * (K_max + 1) ** 2,
    a base for per-step tallies by drafted * (K_max + 1) + accepted (set_depth keeps it and
    DepthPolicy.groups; -1: retired)"""
    probing: bool = False
    exploring: bool = False


class DepthPolicy:
    """One per scheduler: request state in, a depth per request out."""

    def __init__(self, config: DraftDepthConfig, k_max: int, tracker: PhaseTracker | None, lag: int = 1) -> None:
        """lag: steps from a decision to the first step it schedules (2 under
        async scheduling: vLLM schedules a step before it reads the last one)."""
        if config.needs_phase and tracker is None:
            raise DraftDepthError(
                f"speculative_config.draft_depth.policy={config.policy!r} needs to know the reasoning "
                f"phase: start vLLM with --reasoning-parser (e.g. deepseek_r1, deepseek_v4)"
            )
        self.config, self.k_max, self.tracker, self.lag = config, k_max, tracker, lag
        self.phase_depths = config.phase_depths(k_max)
        self.batch_depth = batch_depth_table(config.verify_depths(k_max), k_max)
        # adaptive chooses among depths a batch really verifies (each has its graph)
        self.choices = [d for d in range(config.min_depth, k_max + 1) if self.batch_depth[d] == d]
        prior = list(config.step_cost) if config.step_cost else [1.0] * (k_max + 1)
        self.costs = StepCosts(prior=prior)
        # engine-wide acceptance per phase, moved by each finished request, seeds new ones
        self.seed = {p: Acceptance([config.prior_acceptance] * k_max, config.smoothing) for p in (REASONING, ANSWER)}
        self.requests: dict[str, RequestState] = {}
        # the requests by slot, until retired: per-step tallies read all but the largest group
        self.groups: dict[int, set[RequestState]] = {}
        self.explore_left = config.explore_steps
        self.steps = 0
        # adaptive: requests by the step at whose end they decide; nothing is done per request per step
        self.wakes: dict[int, list[RequestState]] = {}
        self._adaptive, self._k1 = config.policy == "adaptive", k_max + 1
        self._hold = max(config.hold_steps, 1)

    def phase_depth(self, phase: str) -> int:
        if self.config.policy == "phase":
            return self.phase_depths[phase]
        return self.k_max

    def add(self, request_id: str, prompt: Sequence[int], extra_args: Mapping[str, Any] | None) -> RequestState:
        state = RequestState(
            request_id=request_id,
            phase=self.tracker.initial(prompt) if self.tracker else ANSWER,
            override=request_depth(extra_args, self.k_max),
            depth=self.k_max,
            # adaptive's estimates only: fewer objects for the garbage collector to walk
            acceptance={p: Acceptance(list(a.estimate()), self.config.smoothing) for p, a in self.seed.items()}
            if self._adaptive else {},
            outcomes=[0] * self._k1**2 if self._adaptive else [],
        )
        # no exploring while it prefills; arrivals spread their decisions over a hold
        self._settle(state, force=True, explore=False, first=self._hold - len(self.requests) % self._hold)
        self.requests[request_id] = state
        return state

    def forget(self, request_id: str) -> None:
        """Done with a request (retire: its estimates seed the next ones)."""
        state = self.requests.pop(request_id, None)
        if state is not None:
            self.retire(state)

    def retire(self, state: RequestState) -> None:
        """A finished request leaves its group; its estimates move the
        engine-wide seed for the next ones."""
        self._leave_group(state)
        state.slot = -1
        if not self._adaptive:
            return
        self._apply(state)
        full = 1 / self.config.smoothing  # observations that make an estimate count in full
        for phase, seed in self.seed.items():
            mine = state.acceptance[phase]
            seen = mine.counts or [0] * len(mine.rates)
            seed.rates = [s + 0.25 * min(1.0, n / full) * (m - s) for s, m, n in zip(seed.rates, mine.rates, seen)]

    def on_tokens(self, request_id: str, new: Sequence[int], history: Sequence[int] | None = None) -> None:
        """history: all of the request's tokens, ending with `new` (default: just
        `new`, enough for single-token markers)."""
        state = self.requests.get(request_id)
        if state is not None and new:
            self.tokens(state, new, new if history is None else history)

    def tokens(self, state: RequestState, new: Sequence[int], history: Sequence[int]) -> None:
        """A step's new tokens (the last of `history`): the phase. The
        scheduler calls it only when one of them may end a marker."""
        if self.tracker is not None and not self.tracker.last_tokens.isdisjoint(new):
            phase = self.tracker.feed(state.phase, history, len(new))
            if phase != state.phase:
                self._apply(state)  # what it verified belongs to the phase it leaves
                state.phase = phase
                state.exploring = state.probing = False
                self._settle(state, force=True)

    def on_verified(self, request_id: str, drafted: int, accepted: int) -> None:
        state = self.requests.get(request_id)
        if state is not None:
            self.verified(state, drafted, accepted)

    def verified(self, state: RequestState, drafted: int, accepted: int) -> None:
        """Counted in the request's outcomes, which go into its estimate when it
        next decides (step). The scheduler counts a whole step in one loop."""
        if drafted > 0 and self._adaptive:
            state.outcomes[drafted * self._k1 + accepted] += 1

    def step(self, ran: Container[str] | None = None) -> None:
        """An engine step ended (adaptive; `ran`: the ids of the requests in its
        output, default all). The exploration allowance refills by one every
        16, whatever the batch size: a batch times one length a step. The
        requests due decide: after a hold, the step after an exploring one, a
        probe's step after it was set, and at depth 0 when a probe is due."""
        self.steps += 1
        if not self.steps % 16:
            self._explore_more()
        for state in self.wakes.pop(self.steps, ()):
            if state.wake_at == self.steps and state.slot >= 0:  # not rescheduled since, nor retired
                self._wake(state, ran is None or state.request_id in ran)

    def _wake(self, state: RequestState, ran: bool) -> None:
        tried = state.probing or state.exploring  # a depth it did not choose, for one step
        if not ran:  # waiting or preempted: nothing learned
            if not tried:
                return self._wake_in(state, state.hold or self._hold)
            if state.exploring:
                self._explore_more()  # the step it did not take is given back
            state.exploring = state.probing = False
            return self._settle(state, force=True, explore=False)
        state.exploring = state.probing = False
        verified = any(state.outcomes)
        if state.depth == 0 and not verified and not tried:
            state.probing = True  # at depth 0 nothing is verified: one step verifies one draft
            self.set_depth(state, 1)
            return self._wake_in(state, self.lag)
        self._apply(state)
        self._settle(state, force=tried)

    def _explore_more(self) -> None:
        self.explore_left = min(self.config.explore_steps, self.explore_left + 1)

    def _settle(self, state: RequestState, force: bool, explore: bool = True, first: int = 0) -> None:
        """Decide, and when to decide next: after one step at an untimed depth,
        after a probe's wait at depth 0 (dear probes come rarer), else after a
        hold, doubled while the choice holds (`first`: a new request's)."""
        previous = state.depth
        self.set_depth(state, self._decide(state, force, explore))
        if not self._adaptive or state.override is not None:
            return
        if state.exploring:
            return self._wake_in(state, 1)
        if state.depth == 0:
            costs = self.costs.relative()
            return self._wake_in(state, first or math.ceil(self.config.probe_interval * costs[1] / costs[0]))
        state.hold = min(2 * state.hold, 4 * self._hold) if state.depth == previous and not force else self._hold
        self._wake_in(state, first or state.hold)

    def _wake_in(self, state: RequestState, steps: int) -> None:
        state.wake_at = self.steps + steps
        self.wakes.setdefault(state.wake_at, []).append(state)

    def set_depth(self, state: RequestState, depth: int) -> None:
        state.depth = depth
        slot = ((state.phase == ANSWER) * self._k1 + depth) * self._k1 * self._k1
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

    def unpack_tally(self, code: int) -> tuple[str, int, int, int]:
        """(phase, chosen depth, drafted, accepted) of a tally code,
        RequestState.slot + drafted * (K_max + 1) + accepted."""
        rest, accepted = divmod(code, self._k1)
        slot, drafted = divmod(rest, self._k1)
        answer, chosen = divmod(slot, self._k1)
        return ANSWER if answer else REASONING, chosen, drafted, accepted

    def _apply(self, state: RequestState) -> None:
        """Its verifications since the last into the estimate of its phase."""
        if any(state.outcomes):
            state.acceptance[state.phase].observe_outcomes(state.outcomes)

    def depth(self, request_id: str) -> int:
        state = self.requests.get(request_id)
        return self.k_max if state is None else state.depth

    def phase(self, request_id: str) -> str | None:
        state = self.requests.get(request_id)
        return None if state is None else state.phase

    def _decide(self, state: RequestState, force: bool = False, explore: bool = True) -> int:
        if state.override is not None:
            return state.override
        if not self._adaptive:
            return self.phase_depth(state.phase)
        if explore and self.explore_left > 0 and (untimed := [t - 1 for t in self.costs.unmeasured() if t - 1 in self.choices]):
            self.explore_left -= 1  # one step at an untimed depth, to time it
            state.exploring = True
            return untimed[0]
        best, rates = best_depth(state.acceptance[state.phase].estimate(), self.costs.relative(), self.choices)
        current = state.depth
        if not force and rates[best] <= rates[current] * (1 + self.config.hysteresis):
            return current
        return best
