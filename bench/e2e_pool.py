#!/usr/bin/env python3
"""lk_moe's GPU expert pool against whole resident layers at equal VRAM, end to end (#57): the report
of an E2E_MODES=pool run (ci/fork-gpu/e2e_pool), which fails closed.

Reads RUNDIR/measure.json (``measure``'s profile of the stand-in's lk_moe layer) and one engine run
per VRAM arrangement, RUNDIR/e2e-spec-<tag>.json (ci/fork-gpu/e2e.py with E2E_TAG=<tag>):
  layers  whole target layers on the GPU, no pool      pool  the same VRAM as pool slots
  user    12 slots a layer (the user's ratio)           none  no routed expert on the GPU
each with its "arrangement" (resident layers, pool_slots, lk_layers, gpu_expert_bytes), lk_moe's
pool counters over the run ("pool"; {} without a pool) and the routing its cells had ("routing").
Prints, per phase, running requests and policy: each arrangement's steady decode tok/s (median
[range] over the rounds), its ratio to "layers" (the same VRAM spent on whole layers) and to "none",
each the median of the ratios paired by round, a tie where inside the run's noise floor; the pool's
hit rate; the step by verified depth split into the CPU experts (measure's curve read by distinct
experts at the cells' hit rate, depth_sim.call_ms, times the arrangement's lk_moe layers) and the
rest; and depth_sim's prediction against the measured tok/s: the rest of a step at each depth as
"none" measured it (the pool's GPU half taken as free, a resident layer's GPU kernels as nothing),
the CPU experts of the arrangement's own lk_moe layers at its measured hit rate, acceptance as the
arrangement's fixed 2 cells measured it. The noise floor is bench/e2e_decode.py's (policies that
verify the same depths in a phase: fixed 2 and phase 0/2 while answering), the largest of any
arrangement's.

Fails closed (exit 1), naming what: a missing or unfinished arrangement, file, key or cell (every
arrangement holds every cell any of them holds, fixed 2 and phase 0/2 in both phases among them,
each in at least 2 rounds); a cell whose greedy tokens differ from the same cell's (phase, policy,
round) in "none" (else "layers"), or a cell without its tokens; an eager decode step, _cpu_prefill
in decode or no graph replayed at a verified depth's query length; a pool that counted a cover miss
or duplicate, looked up no expert, or lacks a counter; counters where pool_slots is 0; an
arrangement that is not what its tag says; pool and layers more than 5% apart in routed-expert VRAM;
routing that differs between arrangements, or a locality table the engine's MoE rows did not follow
(routing.gate_agrees: under ROUTED_AS_ASKED in a layer); a prediction more than 10% off. The issue's targets are
reported MET, NOT MET or TIE (inside the floor), not failed: they are the measurement. Exit 2: no
such run folder, or bad options.

    python -m bench.e2e_pool RUNDIR [--seeds 20] [--arrangements "layers pool user none"]

--arrangements: those the run asked for (E2E_POOL_ARRANGEMENTS; layers and pool at least); each one
missing fails. Without "none", its ratios are not printed and the rest of a step comes from
"layers"' steps (their resident layers' GPU kernels then counted in every arrangement's rest).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import e2e_decode, printed
from bench.counters import HarnessCounters
from bench.e2e_mixed import spread
from vllm_ds4x import bounded
from vllm_ds4x.depth import sim

TAGS = ("layers", "pool", "user", "none")
EQUAL, BARE = "layers", "none"
"""the ratios' bases: the same VRAM spent on whole layers, and no routed expert on the GPU"""
K = e2e_decode.K
PHASES = e2e_decode.PHASES
REQUIRED_POLICIES = (e2e_decode.BASELINE, f"phase 0/{K}")
MIN_ROUNDS = 2
VRAM_SLACK = 0.05
PREDICTION_SLACK = e2e_decode.PREDICTION_SLACK
POOL_KEYS = ("hits", "misses", "pumps", "hit_rate", "cover_miss", "cover_dup", "device_bytes")
CELL_KEYS = ("round", "phase", "requests", "policy", "tok_s", "tokens", "steps")
ARRANGEMENT_KEYS = ("tag", "resident", "pool_slots", "lk_layers", "gpu_expert_bytes")
MEASURED_ROUTING = ("reuse", "distinct_1", "distinct_2", "distinct_3")
ROUTED_AS_ASKED = 0.95  # the share of eager MoE rows, in every routed layer, routed as the locality table says
TARGET_GAIN, TARGET_REUSE = 1.10, 0.38
"""#57: at reuse 0.38, phase 0/2's reasoning with the pool at least 1.10x whole layers"""
Key = tuple[str, int, str]
"""(phase, running requests, policy)"""


def number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class Arrangement:
    """One engine run: its record, and its phase-pure cells by (phase, requests, policy)."""

    tag: str
    run: dict[str, Any]
    cells: dict[Key, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def placed(self) -> dict[str, Any]:
        return dict(self.run["arrangement"])

    @property
    def pooled(self) -> bool:
        return int(self.placed["pool_slots"]) > 0

    @property
    def layers(self) -> int:
        """The target's MoE layers on lk_moe, whose CPU experts the model counts."""
        return int(self.placed["lk_layers"])

    def hit_rate(self, cells: Sequence[Mapping[str, Any]] = ()) -> float:
        """The pool's hit rate over `cells` from their own counters where every one has them
        (e2e.py records them per cell), else over the run; 0 without a pool."""
        if not self.pooled:
            return 0.0
        counts = [c.get("pool") for c in cells]
        if counts and all(isinstance(p, Mapping) and number(p.get("hits")) and number(p.get("misses")) for p in counts):
            hits = sum(float(p["hits"]) for p in counts if p)
            looked = hits + sum(float(p["misses"]) for p in counts if p)
            if looked:
                return hits / looked
        return float(self.run["pool"]["hit_rate"])

    def medians(self, n: int) -> dict[str, dict[str, float]]:
        """phase -> policy -> median tok/s over the rounds, at `n` running requests."""
        out: dict[str, dict[str, float]] = defaultdict(dict)
        for (phase, requests, policy), cells in self.cells.items():
            if requests == n:
                out[phase][policy] = statistics.median(c["tok_s"] for c in cells)
        return dict(out)

    def step_ms(self, n: int, depth: int) -> float | None:
        """Median over its cells of their median step at this verified depth (both phases, every
        policy); None where no cell verified it."""
        steps = [c["steps"][str(depth)]["median_ms"] for (_, requests, _), cells in self.cells.items()
                 if requests == n for c in cells if str(depth) in c["steps"]]
        return float(statistics.median(steps)) if steps else None


@dataclass
class Run:
    """The run folder, read and checked; every problem found is in .problems."""

    resdir: Path
    asked: Sequence[str] = TAGS
    problems: list[str] = field(default_factory=list)
    profile: dict[str, Any] = field(default_factory=dict)
    arrangements: dict[str, Arrangement] = field(default_factory=dict)

    @property
    def reference(self) -> str:
        """Whose steps give the rest of a step and whose tokens every cell must equal: none, else layers."""
        return BARE if BARE in self.asked else EQUAL

    @property
    def bases(self) -> list[str]:
        """The arrangements the ratios are taken against."""
        return [tag for tag in (EQUAL, BARE) if tag in self.asked]

    def read(self) -> Run:
        self.profile = e2e_decode.read_json(self.resdir / "measure.json", self.problems) or {}
        measured = self.profile.get("measured")
        if self.profile and not isinstance(measured, dict):
            self.problems.append("measure.json: no \"measured\" object")
        for tag in self.asked:
            path = self.resdir / f"e2e-spec-{tag}.json"
            if not path.is_file():
                self.problems.append(f"arrangement {tag}: no {path.name}")
                continue
            run = e2e_decode.read_engine(path, self.problems)
            if run is not None and run.get("ok") and self._shape(tag, path.name, run):
                self.arrangements[tag] = Arrangement(tag, run, by_cell(run))
        return self

    def _shape(self, tag: str, name: str, run: dict[str, Any]) -> bool:
        """The keys this report reads, each there and of its type (a problem each one missing)."""
        before = len(self.problems)
        placed = run.get("arrangement")
        if not isinstance(placed, dict):
            self.problems.append(f"{name}: no \"arrangement\" object")
        else:
            for key in ARRANGEMENT_KEYS:
                if key not in placed:
                    self.problems.append(f"{name}: no arrangement.{key}")
            if any(k in placed for k in ARRANGEMENT_KEYS) and not (
                    placed.get("tag") == tag and isinstance(placed.get("resident"), list)
                    and all(isinstance(x, int) for x in placed.get("resident", []))
                    and all(isinstance(placed.get(k), int) and placed[k] >= 0
                            for k in ("pool_slots", "lk_layers", "gpu_expert_bytes"))):
                self.problems.append(f"{name}: arrangement {json.dumps(placed)[:200]}: expected tag {tag!r}, "
                                     "resident layer ints, pool_slots, lk_layers and gpu_expert_bytes counts")
        if not isinstance(run.get("pool"), dict):
            self.problems.append(f"{name}: no \"pool\" object")
        routing = run.get("routing")
        if not isinstance(routing, dict):
            self.problems.append(f"{name}: no \"routing\" object")
        elif routing.get("router") != "random":
            measured = routing.get("measured")
            for key in ("reuse", "skew"):
                if not number(routing.get(key)):
                    self.problems.append(f"{name}: no routing.{key}")
            for key in MEASURED_ROUTING:
                if not (isinstance(measured, dict) and number(measured.get(key))):
                    self.problems.append(f"{name}: no routing.measured.{key}")
            if (agreed := routed_as_asked(routing)) is None:
                self.problems.append(f"{name}: no routing.gate_agrees (the engine's route check)")
            elif agreed < ROUTED_AS_ASKED:
                self.problems.append(f"{name}: the engine routed {agreed:.0%} of its MoE rows as the locality table says "
                                     f"(the route check's worst layer; at least {ROUTED_AS_ASKED:.0%}): the routing "
                                     "measured is not the one asked for")
        if not number(run.get("tokens_per_request")):
            self.problems.append(f"{name}: no tokens_per_request")
        cells = run.get("cells")
        if not isinstance(cells, list):
            self.problems.append(f"{name}: no cells")
        else:
            for i, cell in enumerate(cells):
                missing = [k for k in CELL_KEYS if not isinstance(cell, dict) or k not in cell]
                if missing:
                    self.problems.append(f"{name}: cell {i} has no {', '.join(missing)}")
                elif not isinstance(cell["steps"], dict) or not all(
                        isinstance(s, dict) and number(s.get("median_ms")) for s in cell["steps"].values()):
                    self.problems.append(f"{name}: cell {i}: steps without a median_ms")
        return len(self.problems) == before


def by_cell(run: Mapping[str, Any]) -> dict[Key, list[dict[str, Any]]]:
    """The phase-pure cells by (phase, requests, policy) (mixed batches are no part of this run)."""
    out: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    for cell in run["cells"]:
        if cell["phase"] in PHASES:
            out[cell["phase"], int(cell["requests"]), str(cell["policy"])].append(cell)
    return dict(out)


def check(run: Run) -> None:
    """Every check of the module's doc but the predictions'; each problem found goes to run.problems."""
    arrangements = run.arrangements
    if len(arrangements) < len(run.asked):
        return  # each missing one is named already
    keys = {key for a in arrangements.values() for key in a.cells}
    keys |= {(phase, 1, policy) for phase in PHASES for policy in REQUIRED_POLICIES}
    for key in sorted(keys):
        phase, n, policy = key
        for a in arrangements.values():
            cells = a.cells.get(key, [])
            rounds = {c["round"] for c in cells if number(c["tok_s"]) and c["tok_s"] > 0}
            if len(rounds) < MIN_ROUNDS or len(rounds) != len(cells):
                run.problems.append(f"{a.tag}: {phase} x{n} {policy}: {len(rounds)} rounds measured "
                                    f"({len(cells)} cells), at least {MIN_ROUNDS} wanted, one a round")
    for a in arrangements.values():  # each cell verified what its policy says: a swap that did not take shows
        for (phase, n, policy), cells in sorted(a.cells.items()):
            want = e2e_decode.verified_depth(policy, phase)
            for cell in cells:
                if (want is not None and set(cell["steps"]) != {want}) or not cell["steps"]:
                    run.problems.append(f"{a.tag}: {phase} x{n} {policy} round {cell['round']}: steps at depths "
                                        f"{sorted(cell['steps'])}, expected {want if want is not None else 'some'}")
    run.problems += token_problems(run)
    for a in arrangements.values():
        run.problems += arrangement_problems(a)
    vram = vram_gap(arrangements)
    if vram is None:
        run.problems.append(f"{EQUAL}: gpu_expert_bytes 0: no VRAM to compare the pool's with")
    elif abs(vram) > VRAM_SLACK:
        run.problems.append(f"equal VRAM: pool's routed-expert bytes {vram:+.1%} off those of {EQUAL} (at most "
                            f"{VRAM_SLACK:.0%})")
    knobs = {tag: json.dumps({k: a.run["routing"].get(k) for k in ("router", "reuse", "skew")})
             for tag, a in arrangements.items()}
    if len(set(knobs.values())) > 1:
        run.problems.append(f"routing differs between arrangements: {knobs}")
    if isinstance(run.profile.get("measured"), dict):
        curve = sim.measured_curve(run.profile["measured"])
        need = {n * (d + 1) for (_, n, _) in keys for d in depths(arrangements.values(), n)}
        if missing := need - set(curve):
            run.problems.append(f"measure.json: no layer timing for {sorted(missing)} tokens")


def token_problems(run: Run) -> list[str]:
    """Each cell's greedy tokens against the same cell (phase, requests, policy, round) of the reference
    arrangement: cells differ from one another (E2E_WALK goes on along the cycle cell after cell), the
    same cell must not differ between arrangements."""
    reference = {(*key, c["round"]): c["tokens"] for key, cells in run.arrangements[run.reference].cells.items()
                 for c in cells}
    differ: dict[str, list[str]] = defaultdict(list)
    for tag, a in run.arrangements.items():
        for (phase, n, policy), cells in sorted(a.cells.items()):
            for c in cells:
                if reference.get((phase, n, policy, c["round"])) != c["tokens"]:
                    differ[tag].append(f"{phase} x{n} {policy} round {c['round']}")
    return [f"{tag}: greedy tokens differ from {run.reference}'s in {len(cells)} cell(s): {', '.join(cells[:4])}"
            for tag, cells in sorted(differ.items())]


def arrangement_problems(a: Arrangement) -> list[str]:
    """What one arrangement's engine must show: what its tag says, graphs and no eager step, a pool
    that looked up experts and computed each exactly once, and no counters without one."""
    where = f"{a.tag}"
    placed = a.placed
    problems = e2e_decode.decode_problems(a.run, where)
    lengths = {str(int(d) + 1) for cells in a.cells.values() for c in cells for d in c["steps"]
               if int(c["requests"]) == 1}
    if missing := lengths - HarnessCounters.read(a.run).replayed():
        problems.append(f"{where}: no graph replayed at query length(s) {sorted(missing)}")
    resident, slots = placed["resident"], int(placed["pool_slots"])
    wanted = {"layers": bool(resident) and not slots, "pool": slots > 0 and not resident,
              "user": slots > 0 and not resident, "none": not resident and not slots}[a.tag]
    if not wanted or (a.tag == BARE and placed["gpu_expert_bytes"]):
        problems.append(f"{where}: resident {resident}, {slots} slots, {placed['gpu_expert_bytes']} bytes of GPU "
                        f"experts: not the {a.tag} arrangement")
    pool = a.run["pool"]
    cell_pools = [c["pool"] for cells in a.cells.values() for c in cells if "pool" in c]
    if not a.pooled:
        if pool or any(cell_pools):
            problems.append(f"{where}: pool counters {json.dumps(pool)[:120]} with pool_slots 0")
        return problems
    if absent := [k for k in POOL_KEYS if not number(pool.get(k))]:
        return [*problems, f"{where}: no pool counter(s) {', '.join(absent)}"]
    for counter in ("cover_miss", "cover_dup"):
        in_cells = sum(float(p.get(counter, 0)) for p in cell_pools if isinstance(p, Mapping))
        if pool[counter] or in_cells:
            problems.append(f"{where}: lk_moe counted {counter} {pool[counter]:g} over the run and {in_cells:g} in its "
                            f"cells, 0 wanted: an expert computed {'by neither half' if counter == 'cover_miss' else 'twice'}")
    if not float(pool["hits"]) + float(pool["misses"]):
        problems.append(f"{where}: the pool looked up no expert (hits and misses 0)")
    if not 0 <= float(pool["hit_rate"]) <= 1:
        problems.append(f"{where}: pool hit_rate {pool['hit_rate']}: expected in [0, 1]")
    return problems


def vram_gap(arrangements: Mapping[str, Arrangement]) -> float | None:
    """(pool's routed-expert bytes - layers') / layers'; None where layers spends none."""
    layers = int(arrangements[EQUAL].placed["gpu_expert_bytes"])
    return int(arrangements["pool"].placed["gpu_expert_bytes"]) / layers - 1 if layers else None


def depths(arrangements: Iterable[Arrangement], n: int) -> list[int]:
    """The verified depths any cell of `n` requests stepped at."""
    return sorted({int(d) for a in arrangements for (_, requests, _), cells in a.cells.items() if requests == n
                   for c in cells for d in c["steps"]})


def paired(cells: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]]) -> list[float]:
    """tok/s over the base's in the same round."""
    by_round = {b["round"]: b["tok_s"] for b in base}
    return [c["tok_s"] / by_round[c["round"]] for c in cells if c["round"] in by_round]


def noise_floors(run: Run, n: int) -> dict[str, float]:
    """Each arrangement's noise floor at `n` requests, bench/e2e_decode.py's (policies that verify the
    same depths in a phase); an arrangement that ran no such pair is a problem."""
    floors = {}
    for tag, a in run.arrangements.items():
        measured = a.medians(n)
        pairs = e2e_decode.measured_pairs(measured)
        if not pairs:
            run.problems.append(f"{tag} x{n}: no two policies that verify the same depths: no noise floor")
            continue
        floors[tag] = e2e_decode.noise_floor(measured, pairs)
    return floors


def verdict(ratio: float, floor: float, target: float = 1.0) -> str:
    """Against "no slower" (target 1): MET faster by more than the floor, TIE inside it, NOT MET slower
    by more. Against a gain (target above 1): MET at or over it, TIE short of it by less than the
    floor, NOT MET short by more."""
    if ratio > target * (1 + floor) or (target > 1 and ratio >= target):
        return "MET    "
    return "TIE    " if ratio >= target * (1 - floor) else "NOT MET"


def tie(ratio: float, floor: float) -> str:
    return "tie" if abs(ratio - 1) <= floor else ""


def rate_lines(run: Run, phase: str, n: int, policy: str, floor: float) -> list[str]:
    """Each arrangement's tok/s, its ratio to layers and to none paired by round, and its hit rate."""
    lines = [f"{phase} x{n} {policy}: steady decode tok/s, median [range] over the rounds; against "
             f"{' and '.join(run.bases)} paired by round (tie: inside the noise floor, {floor:.1%})",
             f"  {'arrangement':<12} {'tok/s':>22} " + " ".join(f"{'vs ' + b:>13}" for b in run.bases)
             + f" {'hit rate':>9}"]
    key = (phase, n, policy)
    for tag, a in run.arrangements.items():
        cells = a.cells[key]
        ratios = [statistics.median(paired(cells, run.arrangements[base].cells[key])) for base in run.bases]
        hit = f"{a.hit_rate(cells):9.3f}" if a.pooled else f"{'-':>9}"
        lines.append(f"  {tag:<12} {spread([c['tok_s'] for c in cells]):>22} "
                     + " ".join(f"{r:8.3f} {'' if tag == base else tie(r, floor):>4}"
                                for r, base in zip(ratios, run.bases)) + f" {hit}")
    return lines


def step_lines(run: Run, n: int, curve: Mapping[int, float], distinct: Mapping[int, float]) -> list[str]:
    """The step by verified depth, split into the CPU experts (the curve at the hit rate of the cells
    that verified only that depth, or the run's) and the rest."""
    lines = [f"step by verified depth, x{n}: ms, median of the cells; CPU experts: measure's curve read by "
             "distinct experts at the hit rate (depth_sim.call_ms) x the lk_moe layers; rest: the step less those",
             f"  {'arrangement':<12} {'depth':>5} {'step':>7} {'CPU experts':>12} {'rest':>7} {'hit rate':>9}"]
    for tag, a in run.arrangements.items():
        for d in depths([a], n):
            step = a.step_ms(n, d)
            if step is None:
                continue
            only = [c for (_, r, _), cells in a.cells.items() if r == n for c in cells if set(c["steps"]) == {str(d)}]
            pool = sim.Pool(hit_rate=a.hit_rate(only), distinct=distinct)
            cpu = a.layers * sim.call_ms(curve, n * (d + 1), pool)
            hit = f"{pool.hit_rate:9.3f}" if a.pooled and n * (d + 1) <= sim.POOL_ROWS else f"{'-':>9}"
            lines.append(f"  {tag:<12} {d:>5} {step:7.1f} {cpu:12.1f} {step - cpu:7.1f} {hit}")
    return lines


def predicted(run: Run, a: Arrangement, phase: str, n: int, policy: str, curve: Mapping[int, float],
              distinct: Mapping[int, float], seeds: int) -> float | str:
    """depth_sim's tok/s for this cell: the rest of a step at each depth as "none" measured it, the
    arrangement's CPU experts at the cells' hit rate, acceptance as its fixed 2 cells measured it;
    a string saying why where it cannot predict."""
    bare = run.arrangements[run.reference]
    cells = a.cells[(phase, n, policy)]
    pool = sim.Pool(hit_rate=a.hit_rate(cells), distinct=distinct)
    need = e2e_decode.verified_depth(policy, phase)
    costs = []
    for d in range(K + 1):
        step = bare.step_ms(n, d)
        if step is None:
            if need is None or int(need) == d:
                return f"{run.reference} verified no step at depth {d}"
            costs.append(math.nan)  # never stepped at by this policy in this phase
            continue
        rest = step - bare.layers * sim.call_ms(curve, n * (d + 1))
        costs.append((rest + a.layers * sim.call_ms(curve, n * (d + 1), pool)) / 1000)
    rate = e2e_decode.acceptance(a.cells, phase)
    if rate is None:
        return f"no drafts in {phase}'s {e2e_decode.BASELINE} cells: no acceptance"
    config = sim.policies(K, e2e_decode.adaptive_start(a.run))[policy]
    tokens = {phase: int(a.run["tokens_per_request"])}
    runs = [sim.simulate(config, costs, {phase: rate}, tokens, random.Random(seed), n, (phase,))[phase]
            for seed in range(seeds)]
    return sum(runs) / seeds


def prediction_lines(run: Run, keys: Sequence[Key], curve: Mapping[int, float], distinct: Mapping[int, float],
                     seeds: int) -> list[str]:
    """depth_sim against every arrangement's cells; a miss beyond PREDICTION_SLACK is a problem."""
    lines = [f"depth_sim against the engine: the rest of a step from {run.reference}'s steps, the CPU experts from "
             "measure's curve at the measured hit rate (depth_sim.call_ms), acceptance as measured",
             f"  {'arrangement':<12} {'phase':<10} {'x':>2} {'policy':<12} {'measured':>9} {'predicted':>10} "
             f"{'error':>7}"]
    for phase, n, policy in keys:
        for tag, a in run.arrangements.items():
            got = statistics.median(c["tok_s"] for c in a.cells[(phase, n, policy)])
            want = predicted(run, a, phase, n, policy, curve, distinct, seeds)
            if isinstance(want, str) or not math.isfinite(want):
                run.problems.append(f"{tag} {phase} x{n} {policy}: no prediction: {want}")
                continue
            error = want / got - 1
            lines.append(f"  {tag:<12} {phase:<10} {n:>2} {policy:<12} {got:9.2f} {want:10.2f} {error:+7.1%}")
            if abs(error) > PREDICTION_SLACK:
                run.problems.append(f"{tag} {phase} x{n} {policy}: predicted {want:.2f} tok/s, measured {got:.2f} "
                                    f"({error:+.1%}, more than {PREDICTION_SLACK:.0%})")
    return lines


def reuse(run: Run) -> float:
    """The routing's reuse knob (0 for the random router)."""
    routing = run.arrangements[run.reference].run["routing"]
    return 0.0 if routing.get("router") == "random" else float(routing["reuse"])


def targets(run: Run, keys: Sequence[Key], floor: float) -> list[str]:
    """#57's targets at this run's reuse, pool against layers paired by round: MET, NOT MET or TIE."""
    def ratio(phase: str, policy: str) -> float:
        key = (phase, 1, policy)
        return float(statistics.median(paired(run.arrangements["pool"].cells[key],
                                              run.arrangements[EQUAL].cells[key])))

    lines = []
    r = reuse(run)
    if r == 0:
        for phase, n, policy in keys:
            if n == 1:
                got = ratio(phase, policy)
                lines.append(f"{verdict(got, floor)} reuse 0, {phase} {policy}: pool no slower than {EQUAL} within the "
                             f"floor: {got:.3f}")
    if abs(r - TARGET_REUSE) < 0.005:
        got = ratio("reasoning", f"phase 0/{K}")
        lines.append(f"{verdict(got, floor, TARGET_GAIN)} reuse {TARGET_REUSE}, reasoning phase 0/{K}: pool >= "
                     f"{TARGET_GAIN:.2f}x {EQUAL}: {got:.3f}")
    got = ratio("answer", e2e_decode.BASELINE)
    lines.append(f"{verdict(got, floor)} answer {e2e_decode.BASELINE}: pool no slower than {EQUAL} within the floor: "
                 f"{got:.3f}")
    if r not in (0.0, TARGET_REUSE):
        lines.append(f"(reuse {r:g}: the issue sets targets at reuse 0 and {TARGET_REUSE} only)")
    return [f"{line}  (noise floor {floor:.1%}: a ratio inside it is a TIE)" for line in lines]


def routed_as_asked(routing: dict[str, Any]) -> float | None:
    """The route check's worst routed layer: the share of its eager MoE rows whose top-k the locality table
    gives (None: no check recorded)."""
    agrees = routing.get("gate_agrees")
    rows = [layer.get("rows") for layer in agrees.values()] if isinstance(agrees, dict) and agrees else []
    return min(rows) if rows and all(number(r) for r in rows) else None


def header(run: Run) -> list[str]:
    """The arrangements, the routing, the VRAM each spends and the pool's counters."""
    routing = run.arrangements[run.reference].run["routing"]
    measured = routing.get("measured") or {}
    lines = [f"routing: {routing.get('router', 'locality')}"
             + (f", reuse {routing['reuse']:g}, skew {routing['skew']:g}; the cells' tokens had reuse "
                f"{measured['reuse']:.3f}, distinct experts {measured['distinct_1']:.2f} / {measured['distinct_2']:.2f} "
                f"/ {measured['distinct_3']:.2f} at 1 / 2 / 3 rows; the engine routed "
                f"{routed_as_asked(routing) or 0:.0%} of its MoE rows so (worst layer)" if routing.get("router") != "random" else
                " (reuse 0, skew 0)"),
             f"  {'arrangement':<12} {'resident':<12} {'slots':>5} {'lk_moe layers':>13} {'expert GiB':>10} "
             f"{'hit rate':>9} {'hits':>9} {'misses':>9} {'pumps':>7}"]
    for tag, a in run.arrangements.items():
        placed, pool = a.placed, a.run["pool"]
        counts = (f"{pool['hit_rate']:9.3f} {pool['hits']:9.0f} {pool['misses']:9.0f} {pool['pumps']:7.0f}"
                  if a.pooled else f"{'-':>9} {'-':>9} {'-':>9} {'-':>7}")
        lines.append(f"  {tag:<12} {placed['resident']!s:<12} {placed['pool_slots']:>5} {a.layers:>13} "
                     f"{placed['gpu_expert_bytes'] / 2**30:10.2f} {counts}")
    gap = vram_gap(run.arrangements)
    if gap is not None:
        lines.append(f"equal VRAM: pool's routed-expert bytes {gap:+.1%} off those of {EQUAL} (at most {VRAM_SLACK:.0%})")
    return lines


def report(args: argparse.Namespace) -> int:
    """Print the report; 1 on any problem (each a FAIL line), else 0."""
    run = Run(args.rundir, args.arrangements).read()
    check(run)
    if not run.problems:
        curve = sim.measured_curve(run.profile["measured"])
        distinct = sim.measured_distinct(run.profile["measured"])
        keys = sorted({key for a in run.arrangements.values() for key in a.cells},
                      key=lambda k: (k[1], PHASES.index(k[0]), k[2]))
        print(f"lk_moe's expert pool against whole layers at equal VRAM (#57): {len(run.arrangements)} arrangements, "
              f"{len({c['round'] for cs in run.arrangements[run.reference].cells.values() for c in cs})} rounds, "
              f"{run.arrangements[run.reference].run['tokens_per_request']} tokens a request")
        print("\n".join(header(run)))
        for n in sorted({key[1] for key in keys}):
            floors = noise_floors(run, n)
            if len(floors) < len(run.arrangements):
                break
            floor = max(floors.values())
            print(f"\nnoise floor x{n} (bench/e2e_decode.py's: policies that verify the same depths in a phase), "
                  + ", ".join(f"{tag} {f:.1%}" for tag, f in floors.items()) + f": the run's {floor:.1%}")
            for phase, _, policy in (k for k in keys if k[1] == n):
                print("\n" + "\n".join(rate_lines(run, phase, n, policy, floor)))
            print("\n" + "\n".join(step_lines(run, n, curve, distinct)))
            if n == 1:
                print("\n" + "\n".join(targets(run, [k for k in keys if k[1] == 1], floor)))
        lines = prediction_lines(run, keys, curve, distinct, args.seeds)
        print("\n" + "\n".join(lines))
        print(f"\nsimulator within {PREDICTION_SLACK:.0%} of every arrangement's cells: "
              + ("yes" if not any("predict" in p for p in run.problems) else "no"))
    for problem in run.problems:
        print(f"FAIL: {problem}")
    return 1 if run.problems else 0


def arrangements(text: str) -> tuple[str, ...]:
    asked = tuple(dict.fromkeys(text.split()))
    if unknown := [t for t in asked if t not in TAGS]:
        raise argparse.ArgumentTypeError(f"unknown {unknown}; known: {' '.join(TAGS)}")
    if not {EQUAL, "pool"} <= set(asked):
        raise argparse.ArgumentTypeError(f"{EQUAL} and pool at least: the report compares them")
    return asked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rundir", type=Path)
    parser.add_argument("--seeds", type=bounded.count(1, printed.MAX_SEEDS), default=20)
    parser.add_argument("--arrangements", type=arrangements, default=TAGS,
                        help="those the run asked for, space-separated (default: all four; layers and pool at least)")
    args = parser.parse_args(argv)
    if not args.rundir.is_dir():
        print(f"error: {args.rundir}: no such run folder", file=sys.stderr)
        return 2
    try:
        return report(args)
    except printed.READ_ERRORS as e:
        return printed.failed(args.rundir, e)


if __name__ == "__main__":
    sys.exit(main())
