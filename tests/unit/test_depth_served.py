"""The draft-depth parser admits only what the policy can serve: random objects the parser accepts
(seeded, a few hundred, values drawn at and past every bound) run through the real DepthPolicy and
the simulator without an exception; values past a bound (subnormal, huge, NaN) are refused by name."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from vllm_ds4x.depth import config, sim
from vllm_ds4x.depth.config import DraftDepthError, parse_draft_depth

EXTREMES = (0.0, 1e-320, 5e-324, config.RATE_EDGE, 1 - config.RATE_EDGE, 1.0, config.COSTS[0], config.COSTS[1],
            1e308, math.nan, math.inf, -1.0)


def number(rng: random.Random, low: float, high: float) -> float:
    """Mostly a value in [low, high], sometimes one of the extremes."""
    return rng.choice(EXTREMES) if rng.random() < 0.2 else rng.uniform(low, high)


def whole(rng: random.Random, high: int) -> int:
    return rng.choice((0, 1, high, config.MAX_STEPS, config.MAX_STEPS + 1, 10**30)) if rng.random() < 0.2 else \
        rng.randint(0, high)


def random_object(rng: random.Random, k: int) -> dict[str, Any]:
    policy = rng.choice(("fixed", "phase", "adaptive"))
    raw: dict[str, Any] = {"policy": policy}
    if rng.random() < 0.5:
        raw["graph_depths"] = sorted({k, *rng.sample(range(k + 1), rng.randint(0, k))})
    if rng.random() < 0.3:
        raw["verify"] = rng.choice(("batch", "request"))
    if policy == "phase":
        raw |= {name: rng.randint(0, k) for name in ("reasoning_depth", "answer_depth") if rng.random() < 0.7}
    if policy == "adaptive":
        costs = [[number(rng, 0.5, 4) for _ in range(k + 1)] for _ in range(2)]
        options: dict[str, Any] = {
            "min_depth": rng.randint(0, k),
            "step_cost": rng.choice((costs[0], {"1": costs[0], "2": costs[1]})),
            "prior_acceptance": rng.choice((number(rng, 0, 1), {"reasoning": number(rng, 0, 1),
                                                                 "answer": number(rng, 0, 1)})),
            "smoothing": number(rng, 0, 1), "hysteresis": number(rng, 0, 2),
            "hold_steps": whole(rng, 64), "probe_interval": max(1, whole(rng, 64)), "explore_steps": whole(rng, 64)}
        raw |= {name: value for name, value in options.items() if rng.random() < 0.7}
    return raw


def test_random_accepted_objects_serve_in_the_policy_and_the_simulator() -> None:
    rng = random.Random(20250601)
    accepted = refused = 0
    for _ in range(400):
        k = rng.randint(1, 4)
        raw = random_object(rng, k)
        try:
            parse_draft_depth(raw, k)
        except DraftDepthError:
            refused += 1
            continue
        accepted += 1
        costs = [rng.uniform(0.01, 0.2) for _ in range(k + 1)]  # the simulated steps' seconds
        rates = {"reasoning": rng.uniform(0.01, 0.99), "answer": rng.uniform(0.01, 0.99)}
        result = sim.simulate(raw, costs, rates, {"reasoning": 40, "answer": 40}, random.Random(accepted),
                              requests=rng.randint(1, 3))
        assert all(math.isfinite(v) and v > 0 for v in result.values()), (raw, result)
    assert accepted >= 100 and refused >= 50, (accepted, refused)  # both halves of the draws were exercised


@pytest.mark.parametrize(("raw", "message"), [
    ({"policy": "adaptive", "step_cost": [1e-320, 1e-320, 1e-320]}, "step_cost: expected 3 positive costs"),
    ({"policy": "adaptive", "step_cost": {"1": [1, 2, 1e300]}}, "each cost in [1e-06, 1e+06]"),
    ({"policy": "adaptive", "prior_acceptance": 1e-320}, "prior_acceptance=1e-320: expected a number in (0, 1)"),
    ({"policy": "adaptive", "prior_acceptance": {"answer": 1 - 1e-17}}, "prior_acceptance.answer=1.0"),
    ({"policy": "adaptive", "smoothing": 5e-324}, "smoothing=5e-324: expected a number in (0, 1]"),
    ({"policy": "adaptive", "hysteresis": 1e308}, "hysteresis=1e+308: expected a number >= 0, e.g. 0.01 (at most 100)"),
    ({"policy": "adaptive", "hold_steps": 10**30}, "hold_steps=1000000000000000000000000000000: expected a whole"),
])
def test_values_the_policy_cannot_serve_are_refused_by_name(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(DraftDepthError) as refused:
        parse_draft_depth(raw, 2)
    assert message in str(refused.value)


def test_num_speculative_tokens_is_bounded_before_anything_is_built() -> None:
    with pytest.raises(DraftDepthError, match=r"num_speculative_tokens=1000000000: expected a whole number in 1\.\.64"):
        parse_draft_depth({"policy": "adaptive"}, 10**9)
