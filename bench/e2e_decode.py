#!/usr/bin/env python3
"""Measured, not modelled: the end-to-end decode benchmark's report, and the
simulator held to it (the GPU run: bash ci/fork-gpu/e2e, which calls this).

Reads RESDIR/measure.json (``measure``'s profile of the stand-in's own lk_moe layer,
same run), RESDIR/e2e-nospec.json and RESDIR/e2e-spec.json (ci/fork-gpu/e2e.py) and
prints, per phase and running requests:
- steady decode tok/s of every policy, median and range over the rounds, and its
  ratio to fixed 2 (the user's configuration) in the same round;
- step time by verified depth (the fixed-depth cells), split into the CPU experts
  (the layer's measured cpu_decode time at the step's token count, times the layers)
  and the rest (GPU layers, drafter, scheduler, handoffs);
- depth_sim's prediction from that curve and the measured rest per depth, against
  the measurement, and the targets of the benchmark;
- where the engine ran per-request twins in phase-pure cells of 2+ requests
  (uniform_per_request), each against its batch twin in the same round, held to no
  slower within the run's noise floor (#38);
- the mixed batches (one reasoning and one answering request together, #38), as
  bench/e2e_mixed.py reports them: tok/s over the batch and per phase, the step by
  verified depth, depth_mixed's batch-uniform prediction against them and its
  per-request one.
Fails closed (exit 1): a missing or failed engine or cell (mixed cells and planned twins too), greedy
tokens that differ between any two cells of a phase or mixed batch (or from no
speculation), an eager decode step, _cpu_prefill in decode, or acceptance off the
set figure. Targets missed are reported, not failed: they are the measurement.

    python -m bench.e2e_decode RESDIR [--seeds 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import e2e_mixed, printed
from bench.counters import HarnessCounters
from bench.e2e_mixed import NO_SPEC, spread
from vllm_ds4x import bounded
from vllm_ds4x.depth import sim
from vllm_ds4x.depth.named_policies import PER_REQUEST, any_policy, same_behaviour

K = 2
BASELINE = f"fixed {K}"
ACCEPTANCE_SLACK = 0.07  # measured acceptance at depth K may differ this much from the set figure
PREDICTION_SLACK = 0.10
PHASES = ("reasoning", "answer")
# policies that verify the same depths in a phase: their difference is the run's noise
SAME_BEHAVIOUR = same_behaviour(K)  # (phase, fixed depth, phase policy)


class Results:
    """The three files, checked; every problem found is in .problems."""

    def __init__(self, resdir: Path, baseline: bool = True) -> None:
        """baseline False: a run of the speculative engine alone (E2E_MODES=spec), whose
        report leaves out no speculation and must not need it."""
        self.problems: list[str] = []
        self.baseline = baseline
        self.profile = self._read(resdir / "measure.json")
        self.nospec = self._engine(resdir / "e2e-nospec.json") if baseline else {}
        self.spec = self._engine(resdir / "e2e-spec.json")
        self.policies = [NO_SPEC, *sim.policies(K)] if baseline else list(sim.policies(K))
        self.cells = self._by_cell()

    def _read(self, path: Path) -> dict[str, Any]:
        return read_json(path, self.problems) or {}

    def _engine(self, path: Path) -> dict[str, Any]:
        return read_engine(path, self.problems) or {}

    @property
    def ok(self) -> bool:
        return bool(self.profile and (self.nospec or not self.baseline) and self.spec)

    def _by_cell(self) -> dict[tuple[str, int, str], list[dict[str, Any]]]:
        """(phase, requests, policy) -> the cells of every round."""
        out: dict[tuple[str, int, str], list[dict[str, Any]]] = defaultdict(list)
        for run in (self.nospec, self.spec):
            for cell in run.get("cells", []):
                if cell["phase"] != e2e_mixed.MIXED:  # the mixed batches' cells: bench/e2e_mixed.py
                    out[cell["phase"], cell["requests"], cell["policy"]].append(cell)
        return out

    def twins(self, n: int) -> list[str]:
        """The per-request twins the engine planned in phase-pure cells of `n` requests (runs since
        2026-12-04: uniform_per_request)."""
        planned = self.spec.get("uniform_per_request") or {}
        return list(planned.get("policies", [])) if n in planned.get("requests", []) else []

    def layer_ms(self, tokens: int) -> float:
        """The stand-in layer's cpu_decode ms for this many tokens, at the LK_THREADS the engines ran."""
        return float(sim.measured_curve(self.profile["measured"])[tokens])


def adaptive_start(spec: dict[str, Any]) -> dict[str, Any] | None:
    """What the engine's adaptive started from: the measure profile's step costs and (runs since
    2026-12-04's resting DSpark) acceptance priors, as e2e.py records them; None: nothing."""
    start = {name: spec[key] for name, key in (("step_cost", "adaptive_step_cost"),
                                              ("prior_acceptance", "adaptive_prior_acceptance")) if spec.get(key)}
    return start or None


def read_json(path: Path, problems: list[str]) -> dict[str, Any] | None:
    """A result file; unreadable: a problem, and None."""
    try:
        data = printed.read_json(path)
    except ValueError as e:
        problems.append(str(e))
        return None
    if not isinstance(data, dict):
        problems.append(f"{path.name}: a JSON {type(data).__name__}, not an object")
        return None
    return data


def read_engine(path: Path, problems: list[str]) -> dict[str, Any] | None:
    """An engine's e2e-*.json (ci/fork-gpu/e2e.py); one that did not finish is a problem."""
    run = read_json(path, problems)
    if run is not None and not run.get("ok"):
        problems.append(f"{path.name}: the engine did not finish: {str(run.get('error'))[:300]}")
    return run


def decode_problems(run: dict[str, Any], where: str) -> list[str]:
    """What no engine's decode may show: eager decode steps, lk_moe's prefill path."""
    problems = []
    counters = HarnessCounters.read(run)
    if eager := counters.eager_decode_steps():
        problems.append(f"{where}: eager decode steps {eager}")
    if counters.prefill_in_decode:
        problems.append(f"{where}: _cpu_prefill ran in decode steps")
    return problems


def check(res: Results) -> None:
    """Completeness, losslessness and the engine's counters."""
    if not res.ok:
        return
    rounds = {mode: {c["round"] for c in run.get("cells", [])} for mode, run in (("nospec", res.nospec), ("spec", res.spec))}
    cells = res.cells
    phases, requests = sorted({k[0] for k in cells}), sorted({k[1] for k in cells})
    if not phases or not requests:
        res.problems.append("no cells measured")
    for phase in phases:
        for n in requests:
            policies = res.policies + res.twins(n)
            for policy in policies:
                have = len({c["round"] for c in cells.get((phase, n, policy), [])})
                want = len(rounds["nospec" if policy == NO_SPEC else "spec"])
                if have != want or any(c.get("tok_s") is None for c in cells.get((phase, n, policy), [])):
                    res.problems.append(f"{phase} x{n} {policy}: {have} of {want} rounds measured")
            tokens = {json.dumps(c["tokens"]) for p in policies for c in cells.get((phase, n, p), [])}
            if len(tokens) > 1:
                res.problems.append(f"{phase} x{n}: greedy tokens differ between cells ({len(tokens)} variants)")
    for run, lengths in ((res.nospec, {"1"}), (res.spec, {"1", "2", "3"})):
        if not run:
            continue  # no baseline asked for
        res.problems += decode_problems(run, str(run.get("mode")))
        if missing := lengths - set(HarnessCounters.read(run).graph_steps):
            res.problems.append(f"{run.get('mode')}: no graph replayed at query length(s) {sorted(missing)}")
    check_depths(res, cells)
    res.problems += e2e_mixed.problems([res.nospec, res.spec], K)
    tokens = {c["tokens"] for r in res.profile.get("measured", {}).get("runs", []) for c in r.get("cases", [])}
    if need := {n * (d + 1) for n in requests for d in range(K + 1)} - tokens:
        res.problems.append(f"measure.json: no layer timing for {sorted(need)} tokens")
    counters = HarnessCounters.read(res.spec)
    if counters.drafted_after_depth_0() and not counters.drafter_after.get("1"):
        res.problems.append("the drafter replayed no graph after depth-0 steps where it drafted")
    for phase in phases:
        got = acceptance(cells, phase)
        want = res.spec.get("acceptance_set", {}).get(phase)
        if got is None or want is None or abs(got - want) > ACCEPTANCE_SLACK:
            res.problems.append(f"{phase}: acceptance at depth {K} measured {got}, set {want}")


def verified_depth(policy: str, phase: str) -> str | None:
    """The one depth a policy verifies in a phase of phase-pure batches, from its
    draft_depth config as the scheduler rounds it (None: adaptive chooses)."""
    if policy == NO_SPEC:
        return "0"
    depth = any_policy(policy, K).verified_depth(phase, K)
    return None if depth is None else str(depth)


def check_depths(res: Results, cells: dict[tuple[str, int, str], list[dict[str, Any]]]) -> None:
    """Each cell verified what its policy says: a policy swap that did not take shows here."""
    for (phase, n, policy), runs in sorted(cells.items()):
        want = verified_depth(policy, phase)
        for cell in runs:
            if want is not None and set(cell["steps"]) != {want}:
                res.problems.append(f"{phase} x{n} {policy} round {cell['round']}: steps at depths "
                                    f"{sorted(cell['steps'])}, expected only {want}")


def acceptance(cells: dict[tuple[str, int, str], list[dict[str, Any]]], phase: str) -> float | None:
    """vLLM's accepted / drafted over the phase's fixed-K cells."""
    runs = [c for (p, _, policy), cs in cells.items() if p == phase and policy == BASELINE for c in cs]
    drafted = sum(c["draft_tokens"] for c in runs)
    return sum(c["accepted_tokens"] for c in runs) / drafted if drafted else None


def rate_table(res: Results, phase: str, n: int) -> tuple[list[str], dict[str, float]]:
    """Lines, and the median tok/s of each policy."""
    cells = res.cells
    base = {c["round"]: c["tok_s"] for c in cells[phase, n, BASELINE]}
    lines = [f"{'policy':<15} {'tok/s median [range]':>24} {'vs fixed 2 (same round)':>24}"]
    medians = {}
    for policy in res.policies:
        runs = cells[phase, n, policy]
        rates = [c["tok_s"] for c in runs]
        ratios = [c["tok_s"] / base[c["round"]] for c in runs if c["round"] in base]
        medians[policy] = statistics.median(rates)
        lines.append(f"{policy:<15} {spread(rates):>24} {statistics.median(ratios) if ratios else float('nan'):>24.3f}")
    return lines, medians


def step_ms(res: Results, n: int, policy: str, depth: int, phases: tuple[str, ...] = PHASES) -> float:
    """Median over the rounds (and phases) of the cells' median step at this verified depth."""
    cells = res.cells
    return float(statistics.median(c["steps"][str(depth)]["median_ms"] for phase in phases
                                   for c in cells[phase, n, policy] if str(depth) in c["steps"]))


def step_split(res: Results, n: int) -> tuple[list[str], list[float]]:
    """Lines, and the measured step seconds by verified depth 0..K (fixed-depth cells, both phases)."""
    layers = int(res.spec["layers"])
    lines = [f"{'verified depth':<15} {'step ms':>8} {'reasoning':>10} {'answer':>7} {'CPU experts':>12} {'rest':>6}"
             f"   (x{n} requests, {layers} layers)"]
    seconds = []
    rows = [(NO_SPEC, NO_SPEC, 0)] if res.baseline else []
    for label, policy, depth in rows + [(str(d), f"fixed {d}", d) for d in range(K + 1)]:
        ms = step_ms(res, n, policy, depth)
        by_phase = [step_ms(res, n, policy, depth, (phase,)) for phase in PHASES]
        cpu = layers * res.layer_ms(n * (depth + 1))
        lines.append(f"{label:<15} {ms:8.1f} {by_phase[0]:10.1f} {by_phase[1]:7.1f} {cpu:12.1f} {ms - cpu:6.1f}")
        if policy != NO_SPEC:
            seconds.append(ms / 1000)
    return lines, seconds


def noise_floor(measured: dict[str, dict[str, float]],
                pairs: Sequence[tuple[str, str, str]] = SAME_BEHAVIOUR) -> float:
    """The largest difference between two policies that verify the same depths in
    a phase (fixed 0 and phase 0/2 while reasoning, ...): what this run cannot tell apart.
    `pairs`: those of SAME_BEHAVIOUR to take (a run of fewer policies: measured_pairs)."""
    return max(abs(measured[phase][a] / measured[phase][b] - 1) for phase, a, b in pairs)


def measured_pairs(measured: dict[str, dict[str, float]]) -> list[tuple[str, str, str]]:
    """The SAME_BEHAVIOUR pairs whose two policies both measured in their phase (bench/e2e_pool.py's
    runs hold a few policies; this report's hold them all)."""
    return [(phase, a, b) for phase, a, b in SAME_BEHAVIOUR
            if a in measured.get(phase, {}) and b in measured.get(phase, {})]


def predictions(res: Results, n: int, seconds: list[float], measured: dict[str, dict[str, float]],
                seeds: int) -> tuple[list[str], list[str]]:
    """depth_sim against the measurement for each phase, fed the measured step of
    each depth (= the CPU curve plus the measured rest), both phases pooled as plan
    would take them, and also that phase's own steps; lines and misses (pooled)."""
    cells = res.cells
    tokens = int(res.spec["tokens_per_request"])
    noise = noise_floor(measured)
    lines = [f"{'policy':<12} {'phase':<10} {'measured':>9} {'predicted':>10} {'error':>7}   "
             f"{'on the phase':>12} {'error':>7}"]
    misses = []
    for phase in PHASES:
        rate = acceptance(cells, phase) or 0.0
        own = [step_ms(res, n, f"fixed {d}", d, (phase,)) / 1000 for d in range(K + 1)]
        pooled, by_phase = (sim.compare(costs, {phase: rate}, {phase: tokens}, seeds, requests=n, phases=(phase,),
                                        start=adaptive_start(res.spec))  # as the engine started it
                            for costs in (seconds, own))
        for policy in pooled:
            got, want, alone = measured[phase][policy], pooled[policy][phase], by_phase[policy][phase]
            lines.append(f"{policy:<12} {phase:<10} {got:9.2f} {want:10.2f} {want / got - 1:+7.1%}   "
                         f"{alone:12.2f} {alone / got - 1:+7.1%}")
            if abs(want / got - 1) > PREDICTION_SLACK:
                misses.append(f"x{n} {phase} {policy}: predicted {want:.2f}, measured {got:.2f} ({want / got - 1:+.1%})")
        best_measured = max(pooled, key=lambda p: measured[phase][p])
        best_predicted = max(pooled, key=lambda p: pooled[p][phase])
        shortfall = 1 - measured[phase][best_predicted] / measured[phase][best_measured]
        if shortfall > noise:
            misses.append(f"x{n} {phase}: best policy measured {best_measured}, predicted {best_predicted}, "
                          f"which measured {shortfall:.1%} less (noise floor {noise:.1%})")
    lines.append(f"noise floor of this run (policies that verify the same depths): {noise:.1%}")
    return lines, misses


def targets(n: int, measured: dict[str, dict[str, float]]) -> list[str]:
    """The issue's targets, each MET or MISSED; a miss by less than the run's noise floor
    says so (this run cannot tell it from a meet), and the 1.3x line names the most any
    policy reached here: the best fixed depth's ratio, a bound of the stand-in's curve."""
    r, a = measured["reasoning"], measured["answer"]
    best_fixed = {phase: max(v for p, v in measured[phase].items() if p.startswith("fixed")) for phase in measured}
    noise = noise_floor(measured)
    checks = [
        (f"x{n} reasoning: best of phase 0/2 and adaptive >= 1.3x fixed 2",
         max(r["phase 0/2"], r["adaptive"]) / r[BASELINE], 1.3,
         f"; the best fixed depth reached {best_fixed['reasoning'] / r[BASELINE]:.3f}"),
        (f"x{n} answer: phase 0/2 within 3% of fixed 2", a["phase 0/2"] / a[BASELINE], 0.97, ""),
        (f"x{n} answer: adaptive within 3% of fixed 2", a["adaptive"] / a[BASELINE], 0.97, ""),
        (f"x{n} reasoning: adaptive within 3% of the best fixed depth", r["adaptive"] / best_fixed["reasoning"], 0.97,
         ""),
        (f"x{n} answer: adaptive within 3% of the best fixed depth", a["adaptive"] / best_fixed["answer"], 0.97, ""),
    ]
    return [f"{'MET   ' if ratio >= floor else 'MISSED'} {name}: {ratio:.3f}{within(ratio, floor, noise)}{bound}"
            for name, ratio, floor, bound in checks]


def uniform_twins(res: Results, n: int, noise: float) -> list[str]:
    """Each per-request twin in the phase-pure cells of `n` requests against its batch-uniform twin,
    paired by round, and the issue's target: no slower (within the run's noise floor)."""
    lines = []
    for phase in PHASES:
        for twin in res.twins(n):
            base = twin.removesuffix(PER_REQUEST)
            ratios = [c["tok_s"] / b["tok_s"] for c, b in e2e_mixed.same_round(res.cells[phase, n, twin],
                                                                                res.cells[phase, n, base])]
            ratio = statistics.median(ratios)
            lines.append(f"{'MET   ' if ratio >= 1 - noise else 'MISSED'} x{n} {phase}: {twin} no slower than "
                         f"{base} within the noise floor ({noise:.1%}): {ratio:.3f} [{min(ratios):.3f}-{max(ratios):.3f}]")
    return lines


def within(ratio: float, floor: float, noise: float) -> str:
    """What a miss by less than the noise floor is: one this run cannot tell from a meet."""
    return f" (by less than this run's noise floor, {noise:.1%})" if floor > ratio >= floor * (1 - noise) else ""


def batch_sections(res: Results, n: int, seeds: int) -> list[str]:
    """Print the phase-pure sections of `n` running requests (rates, steps, depth_sim, targets); the misses."""
    measured = {}
    for phase in PHASES:
        lines, measured[phase] = rate_table(res, phase, n)
        print(f"\n{phase}, {n} running request(s): steady decode tok/s\n" + "\n".join(lines))
    lines, seconds = step_split(res, n)
    print(f"\nstep time by verified depth, {n} running request(s)\n" + "\n".join(lines))
    lines, misses = predictions(res, n, seconds, measured, seeds)
    print(f"\ndepth_sim against the engine, x{n}: fed the measured step at each depth (the CPU curve plus "
          f"the rest), both phases pooled, and each phase's own steps; acceptance as measured\n"
          + "\n".join(lines))
    print("\n" + "\n".join(targets(n, measured)))
    if twins := uniform_twins(res, n, noise_floor(measured)):
        print(f"\neach request verifying its own depth in uniform batches, x{n}: tok/s against the batch's depth, "
              "median [range] of the rounds (same round, same engine)\n" + "\n".join(twins))
    return misses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("resdir", type=Path)
    parser.add_argument("--seeds", type=bounded.count(1, printed.MAX_SEEDS), default=20)
    parser.add_argument("--spec-only", action="store_true",
                        help="the run has no no-speculation engine (E2E_MODES=spec): leave it out")
    args = parser.parse_args(argv)
    try:
        return report(args)
    except printed.READ_ERRORS as e:
        return printed.failed(args.resdir, e)


def report(args: argparse.Namespace) -> int:
    """main's report of the run; raises one of printed.READ_ERRORS on a run of another shape."""
    res = Results(args.resdir, baseline=not args.spec_only)
    check(res)
    if res.ok and not res.problems:
        spec = res.spec
        resident = (spec.get("moe_layers") or {}).get("resident")
        print(f"stand-in: {spec['layers']} MoE layers{f' on lk_moe (GPU-resident: {resident})' if resident else ''}, "
              f"lk_moe {res.profile['measured'].get('format', 'unnamed')} experts at LK_THREADS={spec['lk_threads']}, "
              f"{spec['tokens_per_request']} tokens a request, {1 + max(c['round'] for c in spec['cells'])} rounds"
              f"{f' after {w} unrecorded' if (w := spec.get('warm_up_rounds')) else ''}, "
              f"async scheduling {spec['async_scheduling']}; engine start {res.nospec.get('init_s', '-')} / {spec['init_s']} s")
        cells = res.cells
        print("acceptance at depth 2 (vLLM's metrics): " + ", ".join(
            f"{phase} {acceptance(cells, phase):.3f} (set {spec['acceptance_set'][phase]})"
            for phase in PHASES))
        if chain := spec.get("draft_chain"):  # DSpark: later drafts chained by the filter (ci/fork-gpu/drafts.py)
            print(f"the drafter's own later drafts already the cycle's successor: {chain['agreed']} of {chain['checked']}")
        start = adaptive_start(spec)
        print("adaptive started from " + ("the run's measure profile: " + ", ".join(
            f"{name} {value}" for name, value in start.items()) if start else "no step costs (it timed them itself)"))
        misses = [miss for n in sorted({k[1] for k in cells}) for miss in batch_sections(res, n, args.seeds)]
        lines, missed = e2e_mixed.report([res.nospec, res.spec], K, {p: acceptance(cells, p) or 0.0 for p in PHASES},
                                         sim.measured_curve(res.profile["measured"]), int(spec["layers"]),
                                         PREDICTION_SLACK)
        if lines:
            print("\n".join(lines))
        misses += missed
        print("\nsimulator within 10% and the same best policy (within the noise floor): "
              + ("yes" if not misses else "no"))
        for miss in misses:
            print(f"  {miss}")
    for problem in res.problems:
        print(f"FAIL: {problem}")
    return 1 if res.problems or not res.ok else 0


if __name__ == "__main__":
    sys.exit(main())
