"""Adaptive on a run's mixed batch, simulated: the policy itself (depth_mixed.simulate), today and
per request, beside phase 0/K per request, each step costing what the run measured.

    python -m bench.adaptive_mixed bench/results/h200-e2e-mixed-per-request-crn [--steps 26 400] [--seeds 20]
        [--phases answer answer]

(--phases: the two requests' phases, one reasoning and one answering by default.)

A step's cost: a uniform one, the run's mixed cells' step at that depth (fixed 0..K); 0 + K and
1 + K, the step of the per-request twin that verified it (phase 0/K and 1/K per request); any other,
between the uniform ones by its tokens (depth_estimates.between). Acceptance as the run measured it
in its phase-pure cells; adaptive starts from the run's profile. Exit 1, naming why, on a run the
report refuses or one without the mixed cells this needs. docs/mixed-batches.md quotes its output.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import e2e_decode, e2e_mixed
from bench.printed import MAX_COUNT, MAX_SEEDS, print_or_fail
from vllm_ds4x import bounded
from vllm_ds4x.depth import mixed as depth_mixed
from vllm_ds4x.depth.estimates import between
from vllm_ds4x.depth.named_policies import any_policy

K = e2e_decode.K
N = 2  # the mixed cells' two requests


def step_costs(cells: e2e_mixed.Cells) -> depth_mixed.Cost:
    """Seconds of a step by the depths its requests verify, from the run's mixed cells."""
    uniform = [e2e_mixed.step_ms(cells, N, f"fixed {d}", str(d)) for d in range(K + 1)]
    mixed = {(r, K): e2e_mixed.step_ms(cells, N, f"phase {r}/{K} per request", str(K)) for r in (0, 1)}

    def cost(depths: Sequence[int]) -> float:
        if len(set(depths)) == 1:
            return uniform[depths[0]] / 1000
        if (ms := mixed.get((min(depths), max(depths)))) is not None:
            return ms / 1000
        tokens = [1 + d for d in depths]
        return between(uniform, (max(tokens), sum(tokens)), len(tokens)) / 1000
    return cost


def simulated(name: str, start: Mapping[str, Any] | None, phases: Sequence[str], acceptance: Mapping[str, float],
              cost: depth_mixed.Cost, steps: int, seeds: int) -> tuple[float, str]:
    """A named policy's mean tok/s over `seeds` runs, and the depths it ran most."""
    tok_s, counts = depth_mixed.simulate_seeds(any_policy(name, K, start).draft_depth, phases, acceptance, K, cost,
                                               steps, seeds)
    (most, n), = counts.most_common(1)
    return tok_s, f"{depth_mixed.depths_text(most)} {n / counts.total():.0%}"


def priced(resdir: Path) -> tuple[e2e_decode.Results, depth_mixed.Cost, dict[str, float]]:
    """A run the report passes: its results, its step costs (step_costs) and its acceptance by phase
    as its phase-pure cells measured it; a ValueError naming why not."""
    res = e2e_decode.Results(resdir, baseline=False)
    e2e_decode.check(res)
    if not res.ok or res.problems:
        raise ValueError("; ".join(res.problems) or "results missing")
    try:
        cost = step_costs(e2e_mixed.mixed_cells([res.spec]))
    except ValueError as e:  # statistics.median of no cell
        raise ValueError(f"no mixed cells of two requests, with their per-request twins, to price steps from ({e})") from e
    return res, cost, {p: e2e_decode.acceptance(res.cells, p) or 0.0 for p in e2e_decode.PHASES}


def lines(resdir: Path, step_counts: Sequence[int], seeds: int,
          phases: Sequence[str] = depth_mixed.mix(N)) -> list[str]:
    res, cost, acceptance = priced(resdir)
    start = e2e_decode.adaptive_start(res.spec)
    out = [f"{resdir.name}: {' + '.join(phases)}, {seeds} seeds; acceptance "
           + ", ".join(f"{p} {a:.3f}" for p, a in acceptance.items())]
    for steps in step_counts:
        rate = {name: simulated(name, start, phases, acceptance, cost, steps, seeds)
                for name in ("adaptive", "adaptive per request", f"phase 0/{K}", f"phase 0/{K} per request")}
        (today, today_most), (own, own_most) = rate["adaptive"], rate["adaptive per request"]
        phase = rate[f"phase 0/{K} per request"][0] / rate[f"phase 0/{K}"][0]
        out.append(f"{steps} steps: adaptive today {today:.2f} tok/s ({today_most}), per request {own:.2f} "
                   f"({own_most}): {own / today:.3f}x; phase 0/{K} per request against today: {phase:.3f}x")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("resdir", type=Path)
    parser.add_argument("--steps", type=bounded.count(1, MAX_COUNT), nargs="+", default=[26, 400])
    parser.add_argument("--seeds", type=bounded.count(1, MAX_SEEDS), default=20)
    parser.add_argument("--phases", nargs=N, choices=e2e_decode.PHASES, default=list(depth_mixed.mix(N)))
    args = parser.parse_args(argv)
    return print_or_fail(args.resdir, lambda: lines(args.resdir, args.steps, args.seeds, args.phases))


if __name__ == "__main__":
    sys.exit(main())
