"""Adaptive per request on the end-to-end benchmark's own sequence of cells, simulated: one policy
object kept across cells as the engine keeps it, each step costing what a committed run measured.

    python -m bench.adaptive_cells bench/results/h200-e2e-mixed-in-batch [--rounds N] [--seeds 8]
        [--policy "adaptive per request"] [--steps] [--drift]

bench/adaptive_mixed.py prices one mixed batch from a fresh policy in steady state. The benchmark is
unlike that: each round runs a reasoning pair, an answering pair and a mixed pair (e2e.py's
cell_plan, the two-request cells) through one policy, so a cell starts from the acceptance seeds and
live step costs the cells before it left; each request decides first on arrival, then after holds of
16 steps or more in cells of 25-80 steps; and under async scheduling a depth is verified two steps
after it is set (the first decode step verifies the depths set on arrival). Here too: the real
DepthPolicy with lag 2, requests arriving together, each stopping at the run's tokens a request.
Not modelled: the benchmark's window ends when the first request is done, and so does a cell here,
both requests retired; on the engine the other runs on alone and still teaches the policy (its
acceptance, and step costs of a batch of one, which the committed two-request runs never timed).
A policy without verify "request" (today's) verifies the deepest depth its requests chose, for
both: the baseline of the per-request twins. Step costs as adaptive_mixed.step_costs gives them (a
shape no cell ran, such as 0 + 1, between the uniform ones), acceptance as the run's phase-pure
cells measured it, rounds and tokens as it ran.
--drift: each cell's steps cost what they did at that cell's time on the engine (host_drift: fixed
K's step in the same round, phase and draw over its median in that phase), so live step costs
carry a slow spell into later cells as the engine's did.
Prints, per kind of cell, the mean steady tok/s over rounds and seeds, and the depths run most
(--steps: each cell's depths, step by step). Exit 1, naming why, on a run adaptive_mixed cannot
price or an unknown policy.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import adaptive_mixed, e2e_decode
from bench.printed import MAX_ROUNDS, MAX_SEEDS, print_or_fail
from vllm_ds4x import bounded
from vllm_ds4x.depth import mixed as depth_mixed
from vllm_ds4x.depth.named_policies import any_policy
from vllm_ds4x.depth.phase_tracker import ANSWER, REASONING
from vllm_ds4x.depth.sim import conditional, depth_policy, prompt

K = e2e_decode.K
LAG = 2  # async scheduling: a depth set at a step's end is verified two steps later
CELLS = {"reasoning": (REASONING, REASONING), "answer": (ANSWER, ANSWER), "mixed": depth_mixed.mix(2)}
"""a round's cells of two requests, in e2e.py's order"""


@dataclass
class Cell:
    """One cell's steady window: tokens, seconds, and the depths each step verified, in order."""

    tokens: int = 0
    seconds: float = 0.0
    steps: list[tuple[int, ...]] = field(default_factory=list)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds


class Replay:
    """One policy, as one engine runs it cell after cell."""

    def __init__(self, name: str, run: tuple[e2e_decode.Results, depth_mixed.Cost, dict[str, float]],
                 rng: random.Random) -> None:
        """run: adaptive_mixed.priced's."""
        res, self.cost, acceptance = run
        try:
            named = any_policy(name, K, e2e_decode.adaptive_start(res.spec))
        except KeyError:
            raise ValueError(f"no policy {name!r}: try 'adaptive per request' or 'phase 0/{K} per request'") from None
        self.policy = depth_policy(named.draft_depth, K, LAG)
        self.rates = {p: conditional(a, K) for p, a in acceptance.items()}
        self.rng, self.ids = rng, 0
        self.tokens: int = res.spec["tokens_per_request"]
        self.rounds = len({cell["round"] for cell in res.spec["cells"]})
        self.draws: int = res.spec.get("mixed_draws", 1)  # mixed cells a round (e2e.py's E2E_MIXED_DRAWS)

    def cell(self, phases: Sequence[str], slowdown: float = 1.0) -> Cell:
        """slowdown: the host's then, a factor on every step's cost."""
        policy, strategy = self.policy, self.policy.strategy
        cost = self.cost if slowdown == 1.0 else (lambda depths: self.cost(depths) * slowdown)
        names = [f"r{self.ids + i}" for i in range(len(phases))]
        self.ids += len(phases)
        states = [policy.add(name, prompt(phase), None) for name, phase in zip(names, phases)]
        made, out, ran = [1] * len(phases), Cell(), set(names)  # the prefill's tokens
        chosen = [[s.depth for s in states]]  # the depths set on arrival, then at the end of each step
        strategy.step_ended(ran)
        chosen.append([s.depth for s in states])
        while max(made) < self.tokens:  # to the first request done, as the benchmark's window ends
            depths = depth_mixed.verified_depths(policy, chosen[-LAG])
            sampled, seconds = depth_mixed.verify_step(policy, names, [self.rates[p] for p in phases], depths,
                                                       cost, self.rng, [self.tokens - m for m in made])
            made = [m + n for m, n in zip(made, sampled)]
            out.tokens, out.seconds = out.tokens + sum(sampled), out.seconds + seconds
            out.steps.append(depths)
            strategy.step_ended(ran)
            chosen.append([s.depth for s in states])
        for state in states:
            policy.retire(state)
        return out


def host_drift(spec: Mapping[str, Any]) -> dict[tuple[int, str, int], float]:
    """(round, phase, draw) -> the host's slowdown in that two-request cell: fixed K's step there over
    its median in the run's cells of that phase."""
    step = {(c["round"], c["phase"], c.get("draw", 0)): c["steps"][str(K)]["median_ms"]
            for c in spec["cells"] if c["policy"] == f"fixed {K}" and c["requests"] == 2}
    typical = {phase: statistics.median(ms for (_, p, _), ms in step.items() if p == phase) for phase in CELLS}
    return {key: ms / typical[key[1]] for key, ms in step.items()}


def cells(name: str, resdir: Path, rounds: int | None, seeds: int, drift: bool = False) -> dict[str, list[Cell]]:
    """Each kind of cell of every round (None: as many as the run ran), every seed (e2e.py warms up
    on other policies' objects: the policy's first cell is recorded); `drift`: each at its host's slowdown."""
    out: dict[str, list[Cell]] = {kind: [] for kind in CELLS}
    run = adaptive_mixed.priced(resdir)
    slowdowns = host_drift(run[0].spec) if drift else {}
    for seed in range(seeds):
        replay = Replay(name, run, random.Random(seed))
        for round_ in range(rounds or replay.rounds):
            for kind, phases in CELLS.items():
                out[kind] += [replay.cell(phases, slowdowns.get((round_ % replay.rounds, kind, draw), 1.0))
                              for draw in range(replay.draws if kind == "mixed" else 1)]
    return out


def lines(resdir: Path, name: str, rounds: int | None, seeds: int, steps: bool = False,
          drift: bool = False) -> list[str]:
    replayed = cells(name, resdir, rounds, seeds, drift)
    out = [f"{resdir.name}: {name}, {len(replayed['reasoning']) // seeds} rounds, {seeds} seeds"
           + (", each cell at the host's speed then" if drift else "")]
    for kind, runs in replayed.items():
        counts = Counter("+".join(map(str, sorted(d))) for cell in runs for d in cell.steps)
        most = ", ".join(f"{d} {n / counts.total():.0%}" for d, n in counts.most_common(3))
        out.append(f"{kind:9} {statistics.mean(c.tok_s for c in runs):7.2f} tok/s  ({most})")
        if steps:
            out += [f"  {' '.join(''.join(map(str, d)) for d in cell.steps)}" for cell in runs]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("resdir", type=Path)
    parser.add_argument("--policy", default="adaptive per request")
    parser.add_argument("--rounds", type=bounded.count(1, MAX_ROUNDS), help="rounds (default: as many as the run ran)")
    parser.add_argument("--seeds", type=bounded.count(1, MAX_SEEDS), default=8)
    parser.add_argument("--steps", action="store_true", help="each cell's depths, step by step")
    parser.add_argument("--drift", action="store_true", help="each cell's steps at the host's speed then")
    args = parser.parse_args(argv)
    return print_or_fail(args.resdir, lambda: lines(args.resdir, args.policy, args.rounds, args.seeds, args.steps,
                                                    args.drift))


if __name__ == "__main__":
    sys.exit(main())
