# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The draft_depth object of --speculative-config, parsed once into one typed, frozen object per policy.

``parse_draft_depth(raw, k_max)`` (also ``DraftDepthConfig.from_dict``) is the
one parse: vLLM's config validation, the scheduler and graph hooks, ``plan
--launch``/``--check-launch`` and the simulator all call it. Every field has
its type (a bool is not a depth, 1.0 is not a count), its range and finite
values; a field the policy does not have is refused with the ones it has;
each error names the field, the value and a valid example.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, ClassVar

from vllm_ds4x.depth.phase_tracker import ANSWER, PHASES, REASONING

WHERE = "speculative_config.draft_depth"
MAX_K = 64  # num_speculative_tokens a draft-depth policy serves: far above any drafter's K, and its tables stay small
COSTS = (1e-6, 1e6)
"""a relative step cost's range: measure writes 1 to a few; within it a ratio of two costs, their sums and
their products over a request's life stay far from float's ends (1e-320 passed `> 0` and overflowed the clock)"""
RATE_EDGE = 1e-6  # rates (prior_acceptance, smoothing) keep this far from 0 (and 1 where 1 is open)
MAX_STEPS = 2**20  # hold_steps, probe_interval, explore_steps: a million steps, where a float still counts them exactly
MAX_HYSTERESIS = 100.0  # a switch for more than 100x the expected gain is never; larger is a typo
EXAMPLE = '{"policy": "phase", "reasoning_depth": 1}'

StepCost = tuple[float, ...] | dict[int, tuple[float, ...]]
"""step_cost as parsed: one list of relative costs, or such lists by running requests"""


class DraftDepthError(ValueError):
    """A draft-depth setting that cannot work; the message names it and the fix."""


@dataclass(frozen=True, kw_only=True)
class DraftDepthConfig:
    """What every policy has; ``from_dict`` gives the policy's own subclass."""

    policy: ClassVar[str]
    needs_phase: ClassVar[bool] = True
    """whether the policy needs a reasoning parser's phase"""
    graph_depths: tuple[int, ...] | None = None
    """Depths a decode batch may verify, each with its own full decode CUDA
    graph (default: those the policy chooses, and K_max: fixed K_max; phase
    its two and K_max; adaptive min_depth..K_max). Must include K_max. A batch
    verifies the smallest of these at or above the deepest depth chosen in it."""
    verify: str = "batch"
    """"batch": every request of a decode batch verifies the batch's depth (the
    deepest choice in it, rounded up to a graph depth). "request": each
    request verifies its own rounded choice; the batch still runs the deepest
    depth's graph, with the drafts past a request's own depth masked (routed to
    no CPU expert, their tokens discarded). The fork's model runner v2 only."""

    @classmethod
    def from_dict(cls, raw: Any, k_max: int) -> DraftDepthConfig:
        """The one parse (see parse_draft_depth), shared with the hooks (configured_draft_depth)."""
        return configured_draft_depth(raw, k_max)

    def own_depths(self, k_max: int) -> frozenset[int]:
        """The depths the policy itself chooses (a client's own may differ)."""
        return frozenset({k_max})

    def phase_depth(self, phase: str, k_max: int) -> int | None:
        """The one depth it chooses for every request in `phase`; None: each request's own (adaptive)."""
        return k_max

    def verify_depths(self, k_max: int) -> tuple[int, ...]:
        """The depths decode batches verify, ascending; each gets a CUDA graph."""
        if self.graph_depths is not None:
            return tuple(sorted(set(self.graph_depths)))
        return tuple(sorted(self.own_depths(k_max) | {k_max}))

    def step_costs(self) -> dict[int, tuple[float, ...]]:
        """step_cost by running requests; 0 keys a list given for every batch size (none here)."""
        return {}


@dataclass(frozen=True, kw_only=True)
class FixedDepth(DraftDepthConfig):
    """``fixed``: every request chooses K_max (vLLM's behaviour, the default)."""

    policy: ClassVar[str] = "fixed"
    needs_phase: ClassVar[bool] = False


@dataclass(frozen=True, kw_only=True)
class PhaseDepth(DraftDepthConfig):
    """``phase``: one depth while a request reasons, another in its answer."""

    policy: ClassVar[str] = "phase"
    reasoning_depth: int | None = None
    """depth chosen while reasoning (default 1)."""
    answer_depth: int | None = None
    """depth chosen in the answer (default K_max)."""

    def phase_depths(self, k_max: int) -> dict[str, int]:
        """The depth chosen in each phase (defaults: 1 reasoning, K_max answer)."""
        reasoning = 1 if self.reasoning_depth is None else self.reasoning_depth
        answer = k_max if self.answer_depth is None else self.answer_depth
        return {REASONING: reasoning, ANSWER: answer}

    def own_depths(self, k_max: int) -> frozenset[int]:
        return frozenset(self.phase_depths(k_max).values())

    def phase_depth(self, phase: str, k_max: int) -> int | None:
        return self.phase_depths(k_max)[phase]


@dataclass(frozen=True, kw_only=True)
class AdaptiveDepth(DraftDepthConfig):
    """``adaptive``: per request and phase, the depth with the most expected tokens per second."""

    policy: ClassVar[str] = "adaptive"
    min_depth: int = 0
    """lowest depth it may choose."""
    step_cost: StepCost | None = None
    """relative cost of a step verifying 1, 2, ... K_max+1 tokens per request,
    used until live step timings replace it (default: flat); or such lists by
    running requests, {"1": [...], "2": [...]} as measure writes them (a batch
    size not given takes the nearest given one's)."""
    prior_acceptance: float | dict[str, float] = 0.7
    """acceptance assumed per position before any is measured; or per phase,
    {"reasoning": 0.5, "answer": 0.93} (a phase not given: 0.7), as measure
    writes it from the acceptance it was given."""
    smoothing: float = 0.03
    """weight of the newest observation in the running estimates."""
    hysteresis: float = 0.01
    """switch only for more than this fraction of expected gain."""
    hold_steps: int = 16
    """steps between two decisions of one request (0 acts as 1); its
    acceptance estimate takes in what it verified meanwhile at once, then.
    While its choice holds the wait doubles, up to 4 times this; a change (or
    a new phase) brings it back."""
    probe_interval: int = 8
    """at depth 0 nothing is verified, so every this many steps one step
    verifies one draft, to keep the acceptance estimate current; rarer where a
    probe loses more (its step's cost over a depth-0 step, less the draft it
    expects accepted), so that probes lose at most 1% of the time, but at least
    once every 4 x hold_steps. A request that learned from the batch meanwhile
    (another's probe or deeper choice) decides without one."""
    explore_steps: int = 16
    """steps it may spend in a row at depths whose step cost is untimed or
    stale, to time them (live timings come from batches of one verify length);
    the allowance refills by one every 16 engine steps."""

    def own_depths(self, k_max: int) -> frozenset[int]:
        return frozenset(range(self.min_depth, k_max + 1))

    def phase_depth(self, phase: str, k_max: int) -> int | None:
        return None

    def prior_by_phase(self) -> dict[str, float]:
        """prior_acceptance in each phase."""
        prior = self.prior_acceptance
        return {phase: prior.get(phase, PRIOR) for phase in PHASES} if isinstance(prior, dict) else \
            dict.fromkeys(PHASES, prior)

    def step_costs(self) -> dict[int, tuple[float, ...]]:
        if self.step_cost is None:
            return {}
        return dict(self.step_cost) if isinstance(self.step_cost, dict) else {0: self.step_cost}


CONFIGS: dict[str, type[DraftDepthConfig]] = {c.policy: c for c in (FixedDepth, PhaseDepth, AdaptiveDepth)}


def shown(value: Any, limit: int = 60) -> str:
    """A value as an error message shows it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}..."


def _fail(name: str, value: Any, expected: str, example: str) -> DraftDepthError:
    return DraftDepthError(f"{WHERE}.{name}={shown(value)}: expected {expected}, e.g. {example}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(name: str, value: Any, low: int, high: int | None, example: int) -> int:
    """A whole number (not a bool, not 1.0) in low..high (None: no top)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        depth = high is not None and name.endswith("depth")
        span = f"{low}..{high} (num_speculative_tokens), a whole number" if depth else f"a whole number >= {low}"
        raise _fail(name, value, span, str(example) if depth or high is None else f"{example} (at most {high})")
    return value


def _fraction(name: str, value: Any, ok: Callable[[float], bool], span: str, example: str) -> float:
    """A finite number (not a bool) that `ok` accepts."""
    if not _is_number(value) or not ok(float(value)):
        raise _fail(name, value, f"a number {span}", example)
    return float(value)


def _costs(value: Any, k_max: int, at: str) -> tuple[float, ...]:
    """One list of k_max + 1 finite costs in COSTS."""
    low, high = COSTS
    if not isinstance(value, (list, tuple)) or len(value) != k_max + 1 or not all(
            _is_number(c) and low <= c <= high for c in value):
        example = [round(1 + 0.6 * d, 1) for d in range(k_max + 1)]
        raise DraftDepthError(f"{WHERE}.step_cost{at}: expected {k_max + 1} positive costs "
                              f"(1..{k_max + 1} tokens verified), e.g. {example}; got {shown(value)} (each cost "
                              f"in [{low:g}, {high:g}])")
    return tuple(float(c) for c in value)


def _requests_key(key: Any) -> int:
    """A step_cost key: running requests, as JSON writes it ("2") or as an int."""
    if isinstance(key, str) and key.isascii() and key.isdigit():
        return int(key)
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    raise DraftDepthError(f"{WHERE}.step_cost: expected a list of costs or {{\"REQUESTS\": [costs]}}: "
                          f"key {shown(key)} is not a number of running requests, e.g. {{\"1\": [...], \"2\": [...]}}")


def _step_cost(value: Any, k_max: int) -> StepCost | None:
    """step_cost as given: a list of costs, or such lists keyed by running requests (1 or more)."""
    if value is None or not isinstance(value, Mapping):
        return None if value is None else _costs(value, k_max, "")
    by_batch = {_requests_key(n): costs for n, costs in value.items()}
    if not by_batch or min(by_batch) < 1:
        raise DraftDepthError(f"{WHERE}.step_cost: keys {shown(sorted(map(str, value)))} must be running requests, "
                              f"1 or more, e.g. {{\"1\": [...], \"2\": [...]}}")
    return {n: _costs(costs, k_max, f"[{n}]") for n, costs in by_batch.items()}


PRIOR = 0.7  # AdaptiveDepth.prior_acceptance's default


def _prior_acceptance(value: Any) -> float | dict[str, float]:
    """One rate in (0, 1), or such rates by phase."""
    def rate(name: str, v: Any) -> float:
        return _fraction(name, v, lambda x: RATE_EDGE <= x <= 1 - RATE_EDGE, "in (0, 1)",
                         f"{PRIOR}, or {{\"reasoning\": 0.5, \"answer\": 0.93}} (at least {RATE_EDGE:g} from 0 and 1)")

    if not isinstance(value, Mapping):
        return rate("prior_acceptance", value)
    if not value or not set(value) <= set(PHASES):
        raise _fail("prior_acceptance", value, f"a rate, or rates by phase ({', '.join(PHASES)})",
                    '{"reasoning": 0.5, "answer": 0.93}')
    return {phase: rate(f"prior_acceptance.{phase}", v) for phase, v in value.items()}


VERIFY_MODES = ("batch", "request")


def _verify(value: Any) -> str:
    if value not in VERIFY_MODES:
        raise _fail("verify", value, f"one of {', '.join(map(repr, VERIFY_MODES))}", '"request"')
    return str(value)


def _graph_depths(value: Any, k_max: int) -> tuple[int, ...] | None:
    if value is None:
        return None
    if (not isinstance(value, (list, tuple)) or k_max not in value
            or any(isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= k_max for d in value)):
        given = list(value) if isinstance(value, (list, tuple)) else value
        raise DraftDepthError(f"{WHERE}.graph_depths={shown(given)}: expected depths in 0..{k_max} that include "
                              f"{k_max} (num_speculative_tokens), e.g. [1, {k_max}]")
    return tuple(value)


def _optional_depth(name: str, k_max: int) -> Callable[[Any], int | None]:
    return lambda v: None if v is None else _whole(name, v, 0, k_max, min(1, k_max))


def _field_parsers(k_max: int) -> dict[str, Callable[[Any], Any]]:
    """Field name -> its parse; each raises naming the field, the value and an example."""
    return {
        "graph_depths": lambda v: _graph_depths(v, k_max),
        "verify": _verify,
        "reasoning_depth": _optional_depth("reasoning_depth", k_max),
        "answer_depth": _optional_depth("answer_depth", k_max),
        "min_depth": lambda v: _whole("min_depth", v, 0, k_max, 0),
        "step_cost": lambda v: _step_cost(v, k_max),
        "prior_acceptance": _prior_acceptance,
        "smoothing": lambda v: _fraction("smoothing", v, lambda x: RATE_EDGE <= x <= 1, "in (0, 1]",
                                         f"0.03 (at least {RATE_EDGE:g})"),
        "hysteresis": lambda v: _fraction("hysteresis", v, lambda x: 0 <= x <= MAX_HYSTERESIS, ">= 0",
                                          f"0.01 (at most {MAX_HYSTERESIS:g})"),
        "hold_steps": lambda v: _whole("hold_steps", v, 0, MAX_STEPS, 16),
        "probe_interval": lambda v: _whole("probe_interval", v, 1, MAX_STEPS, 8),
        "explore_steps": lambda v: _whole("explore_steps", v, 0, MAX_STEPS, 16),
    }


def _policy_class(raw: Mapping[str, Any]) -> type[DraftDepthConfig]:
    policy = raw.get("policy", "fixed")
    if not isinstance(policy, str) or policy not in CONFIGS:
        raise DraftDepthError(f"{WHERE}.policy={shown(policy)}: expected one of {', '.join(CONFIGS)}, e.g. \"phase\"")
    return CONFIGS[policy]


def parse_draft_depth(raw: Any, k_max: int) -> DraftDepthConfig:
    """The typed config of `raw` (None: fixed) against K_max; raises DraftDepthError."""
    if isinstance(k_max, bool) or not isinstance(k_max, int) or not 1 <= k_max <= MAX_K:
        raise DraftDepthError(f"speculative_config.num_speculative_tokens={shown(k_max)}: expected a whole number "
                              f"in 1..{MAX_K} with draft_depth, e.g. 2")
    if raw is None:
        return FixedDepth()
    if not isinstance(raw, Mapping):
        raise DraftDepthError(f"{WHERE}={shown(raw)}: expected an object, e.g. {EXAMPLE}")
    cls = _policy_class(raw)
    known = [f.name for f in fields(cls)]
    unknown = sorted(str(name)[:40] for name in set(raw) - {*known, "policy"})
    if unknown:
        raise DraftDepthError(f"{WHERE}: unknown field(s) {unknown} for policy {cls.policy!r}; "
                              f"known: {sorted(['policy', *known])}, e.g. {EXAMPLE}")
    parsers = _field_parsers(k_max)
    return cls(**{name: parsers[name](value) for name, value in raw.items() if name != "policy"})


@lru_cache(maxsize=64)
def _parse_json(text: str, k_max: int) -> DraftDepthConfig:
    return parse_draft_depth(json.loads(text), k_max)


def configured_draft_depth(raw: Any, k_max: int) -> DraftDepthConfig:
    """parse_draft_depth, once per distinct config: the hooks that read one
    engine's draft_depth (validation, scheduler, the model runner's three graph
    sites) share one typed object."""
    try:
        text = json.dumps(raw, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return parse_draft_depth(raw, k_max)  # not JSON's own values: parsed (and refused) as it is
    return _parse_json(text, k_max)
