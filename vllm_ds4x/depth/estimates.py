# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The estimates adaptive draft depth decides on, per request and engine-wide.

Acceptance per draft position (per request, and the engine-wide seeds that
start new requests), step cost by tokens verified (engine-wide, per batch
size), and the expected tokens per second of each depth."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vllm_ds4x.depth.phase_tracker import PHASES
from vllm_ds4x.depth.tally import positions_seen

PRIOR_SAMPLES = 4  # what a starting acceptance estimate weighs, in observations
SEED_PULL = 0.25  # how far a finished request moves the engine-wide seed toward its own estimate

Shape = tuple[int, int]
"""a decode step's (longest, total): the tokens its longest request verifies, and all of them"""


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


def best_depth(acceptance: Sequence[float], costs: Sequence[float],
               candidates: Sequence[int]) -> tuple[int, list[float]]:
    """The depth with most expected tokens per unit of step cost (the shallower
    on a tie; candidates ascending), and the rate of every depth."""
    rates = [tokens / cost for tokens, cost in zip(expected_tokens_by_depth(acceptance, len(costs) - 1), costs)]
    return _best(rates, candidates), rates


@dataclass(frozen=True, slots=True)
class Beside:
    """The other requests of a batch whose requests each verify their own depth: how many,
    their expected tokens a step, the tokens they verify, and the most one of them verifies."""

    requests: int
    expected: float
    verified: int
    longest: int

    def shape(self, depth: int) -> Shape:
        """The batch's step with the request beside them verifying `depth`."""
        return max(self.longest, 1 + depth), self.verified + 1 + depth


def best_in_batch(acceptance: Sequence[float], costs: StepCosts, candidates: Sequence[int],
                  beside: Beside) -> tuple[int, list[float]]:
    """Verify "request": the depth that gives the whole batch the most expected tokens a second,
    the others' depths held, each priced at the step it makes (StepCosts.step_cost: a step
    costs the tokens it verifies, which a uniform step's cost overprices by every other
    request's rows); and the batch's rate at each of its depths."""
    mine = expected_tokens_by_depth(acceptance, len(costs.prior) - 1)
    requests = beside.requests + 1
    rates = [(beside.expected + tokens) / costs.step_cost(beside.shape(depth), requests)
             for depth, tokens in enumerate(mine)]
    return _best(rates, candidates), rates


def _best(rates: Sequence[float], candidates: Sequence[int]) -> int:
    """The candidate with the highest rate; the shallower on a tie (candidates ascending)."""
    best = candidates[0]  # no max(key=): decisions are frequent
    for depth in candidates:
        if rates[depth] > rates[best]:
            best = depth
    return best


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
        """A batch of verifications, counted in `outcomes` by outcome code
        (TallyCodec.outcome; each then reset to 0), in one pass: each verification
        moves the rate of every position it observed (up to the first rejection) by
        ``smoothing`` toward accepted or not, and fades the weight of the
        positions it did not reach; the order within the batch is not kept."""
        k = len(self.rates)
        # verifications that saw exactly r positions (up to the first rejection) / accepted exactly a
        saw, took = [0] * (k + 1), [0] * (k + 1)
        for code, reached, accepted in positions_seen(k):
            n = outcomes[code]
            if n:
                saw[reached] += n
                took[accepted] += n
                outcomes[code] = 0
        if not self.weights:
            self.weights, self.counts = [1.0] * k, [0] * k
        smoothing = self.smoothing
        keep = 1.0 - smoothing
        rates, weights, counts = self.rates, self.weights, self.counts
        total, seen, hits = sum(saw), 0, 0
        for position in range(k - 1, -1, -1):  # from the deepest: seen/hits count those that got past it
            seen += saw[position + 1]
            hits += took[position + 1]
            if seen:
                decay = keep**seen
                prior = PRIOR_SAMPLES + counts[position]
                if prior * smoothing < 1:  # warming up: a mean over what it has seen
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
        last = rates[0]
        out = [last]
        for position in range(1, len(rates)):
            weight = weights[position]
            last = weight * rates[position] + (1 - weight) * last
            out.append(last)
        return out


class SeedAcceptance:
    """Engine-wide acceptance per phase: each finished request moves it, and it
    starts the estimates of the next ones."""

    def __init__(self, prior: Mapping[str, float], k_max: int, smoothing: float) -> None:
        """prior: the acceptance per position assumed in each phase before any is measured."""
        self.smoothing = smoothing
        self.by_phase = {phase: Acceptance([prior[phase]] * k_max, smoothing) for phase in PHASES}

    def for_new_request(self) -> dict[str, Acceptance]:
        return {phase: Acceptance(seed.estimate(), self.smoothing) for phase, seed in self.by_phase.items()}

    def absorb(self, acceptance: dict[str, Acceptance]) -> None:
        """A finished request's estimates, each weighed by how much it observed."""
        full = 1 / self.smoothing  # observations that make an estimate count in full
        for phase, seed in self.by_phase.items():
            mine = acceptance[phase]
            seen = mine.counts or [0] * len(mine.rates)
            seed.rates = [s + SEED_PULL * min(1.0, n / full) * (m - s) for s, m, n in zip(seed.rates, mine.rates, seen)]


@dataclass
class StepCosts:
    """Seconds per step by tokens verified per request (1..K_max+1), for the batch
    size running now: the prior from the config until live timings arrive, then
    the median of the latest timings (robust to a stray slow step). Timings are
    kept per batch size, because a step's cost is the batch's tokens, not one
    request's: on the H200 benchmark, depth 0 timed with two requests made depth 1
    look cheaper with one. A batch size with no timings of its own borrows the
    nearest timed one's, unless the config gives priors by batch size (measure
    does, per running requests: the step-cost curve's shape changes with the
    batch, 2.83x from depth 0 to 2 with one request and 2.16x with two on the
    H200 stand-in): then the nearest batch size's prior, scaled by this batch
    size's own timings only; a length not timed lately is stale, and its timings
    are forgotten. The scheduler times
    every step: a timing recomputes only its own median, and the answers (kept
    per batch size asked) only when a median or a staleness changed.

    Under verify "request" a step's requests verify different lengths: such a
    step is timed by its shape (Shape), and `step_cost` prices a shape by its own
    timings, or else between the uniform lengths around its tokens a request, never
    above a timed shape that holds it."""

    prior: list[float]
    by_batch: dict[int, list[float]] = field(default_factory=dict)
    """requests -> the prior for that batch size, where the config gives one"""
    window: int = 15
    min_samples: int = 3
    stale_after: int = 512
    samples: dict[tuple[int, Shape], list[float]] = field(default_factory=dict)
    """(requests, shape): the latest timings"""
    last_seen: dict[tuple[int, Shape], int] = field(default_factory=dict)
    clock: int = 0
    batch: int = 1
    """the requests of the latest timed step: the batch the answers are for"""
    medians: dict[int, dict[Shape, float]] = field(default_factory=dict)
    """requests -> shape -> the median of its latest timings, once it has min_samples"""
    _relative: dict[int, list[float]] | None = None
    """requests -> relative's answer"""
    _unmeasured: list[int] | None = None
    _fresh_until: int = 0
    """the clock up to which no timing goes stale"""

    def observe(self, tokens: int, seconds: float, requests: int = 1) -> None:
        """A step whose `requests` requests each verified `tokens`."""
        self._record(requests, (tokens, tokens * requests), seconds)

    def observe_step(self, tokens: Sequence[int], seconds: float) -> None:
        """A decode step whose requests verified `tokens` each (1 + its depth)."""
        self._record(len(tokens), (max(tokens), sum(tokens)), seconds)

    def _record(self, requests: int, shape: Shape, seconds: float) -> None:
        self.clock += 1
        if self.clock > self._fresh_until:
            self._forget_stale()  # before this timing: a stale length starts afresh
        key = (requests, shape)
        kept = self.samples.setdefault(key, [])
        kept.append(seconds)
        del kept[: -self.window]
        self.last_seen[key] = self.clock
        if len(kept) >= self.min_samples:
            median, timed = sorted(kept)[len(kept) // 2], self.medians.setdefault(requests, {})
            if timed.get(shape) != median:
                timed[shape] = median
                self._relative = None
        if requests != self.batch:
            self.batch = requests
            self._unmeasured = None
        elif self._unmeasured is not None and shape[0] in self._unmeasured and shape[1] == shape[0] * requests:
            self._unmeasured = None

    def _forget_stale(self) -> None:
        """Every shape not timed for stale_after timed steps, at any batch size, is
        forgotten: no stale median prices a step (the prior does, scaled by fresh
        timings, until it is timed again), so one dear spell cannot keep a depth
        from being chosen and re-timed."""
        for key in [key for key, seen in self.last_seen.items() if self.clock - seen > self.stale_after]:
            requests, shape = key
            del self.samples[key], self.last_seen[key]
            timed = self.medians.get(requests, {})
            if timed.pop(shape, None) is not None and not timed:
                del self.medians[requests]
            self._relative = self._unmeasured = None
        self._fresh_until = min(self.last_seen.values(), default=self.clock) + self.stale_after

    def relative(self, requests: int | None = None) -> list[float]:
        """Cost of 1..K_max+1 tokens at the current batch, or at `requests` (else the
        nearest timed one, without priors by batch size); untimed entries scaled from
        the prior by every timed shape, each against the prior's price of it (so a
        masked step's saving moves the untimed lengths too), and none above a longer one's.
        Seconds where the batch has timings, else the prior's own units: compare answers of
        one batch size only."""
        asked = self.batch if requests is None else requests
        if self._relative is None:
            self._relative = {}
        if (answer := self._relative.get(asked)) is None:
            timed, prior, n = self.medians, self.prior, asked
            if self.by_batch:  # the nearest batch size's shape beats another batch size's timings
                prior = self.by_batch[min(self.by_batch, key=lambda b: (abs(b - asked), b))]
            elif timed:
                n = min(timed, key=lambda b: (abs(b - asked), b))
            seen = timed.get(n, {})
            scale = sum(m / between(prior, shape, n) for shape, m in seen.items()) / len(seen) if seen else 1.0
            uniform = _uniform(seen, n)
            answer = self._relative[asked] = [uniform.get(t, prior[t - 1] * scale) for t in range(1, len(prior) + 1)]
            for t in range(len(answer) - 2, -1, -1):  # fewer tokens a request cost no more (step_cost)
                answer[t] = min(answer[t], answer[t + 1])
        return answer

    def timed(self, shape: Shape, requests: int) -> bool:
        """Whether a step of this shape has its own timings (min_samples, not stale)."""
        return shape in self.medians.get(requests, {})

    def step_cost(self, shape: Shape, requests: int) -> float:
        """A step of `requests` requests of this shape: its own timings' median, or else
        between the uniform lengths around its tokens a request (relative, at that batch); never
        more than a timed shape that holds it (a graph as long, as many tokens or more). A step
        that verifies fewer of a graph's rows costs no more, but a shape timed in a dear spell and
        not since says so: on the H200 DeepSeek-V4 run 0 + 2, last timed at 81.4 ms, priced above
        1 + 2 at 74.3, and each request, deciding with the other held, moved the other way (the
        answering request to 1, then the reasoning one to 2)."""
        timed = self.medians.get(requests, {})
        cost = timed.get(shape)
        if cost is None:
            cost = between(self.relative(requests), shape, requests)
        longest, total = shape
        for (other_longest, other_total), median in timed.items():
            if median < cost and other_longest >= longest and other_total >= total:
                cost = median
        return cost

    def unmeasured(self) -> list[int]:
        """Lengths with too few timings at the current batch, or none lately."""
        if self._unmeasured is None:
            timed = _uniform(self.medians.get(self.batch, {}), self.batch)
            self._unmeasured = [t for t in range(1, len(self.prior) + 1) if t not in timed]
        return self._unmeasured


def _uniform(seen: Mapping[Shape, float], requests: int) -> dict[int, float]:
    """The timings of uniform shapes (every request verified the longest), by length."""
    return {longest: m for (longest, total), m in seen.items() if total == longest * requests}


def between(costs: Sequence[float], shape: Shape, requests: int) -> float:
    """A shape's cost on uniform costs by length (costs[t - 1]: t tokens a request), linear
    between the lengths around its tokens a request; a uniform shape, its own length's."""
    each = min(max(shape[1] / requests, 1.0), float(len(costs)))
    low = int(each)
    if low == each:
        return costs[low - 1]
    return costs[low - 1] + (each - low) * (costs[low] - costs[low - 1])
