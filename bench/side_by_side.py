#!/usr/bin/env python3
"""Upstream vLLM's own adaptive verification beside our draft_depth policies (#34), measured on
upstream's Python: the report of ci/fork-gpu/side_by_side, which runs the end-to-end benchmark's
dense stand-in (a GPU-only model, greedy, acceptance set per phase) twice: one engine running every
draft_depth policy side by side (RESDIR/e2e-spec.json) and one under enable_adaptive_verification
(RESDIR/e2e-av.json, its "policy" named adaptive verification).

Prints per phase (reasoning, answer, and the mixed batch of one of each) and running requests:
- steady decode tok/s, median [range] over the rounds, and the ratio to fixed 2: ours in the same
  round of the same engine, adaptive verification's median over fixed 2's (the engines ran one after
  the other, so that ratio carries the two engines' difference too);
- the drafts each request verified a step: ours from the steps' verified depths, adaptive
  verification's from the budget it chose each step;
- vLLM's own accepted / drafted (adaptive verification counts the drafts it trimmed as drafted and
  rejected, so its figure reads low);
- the run's noise floor (policies that verify the same depths, same engine);
- what the engine did with draft_depth and enable_adaptive_verification both set.
Fails closed (exit 1): a missing or failed engine; any policy, phase, request count or mixed batch
missing in some round of either engine, or an adaptive-verification cell with no budget logged;
greedy tokens that differ between two cells of a phase and request count (across both engines); an
eager decode step; graphs not replayed at every depth, or the drafter not after depth 0; acceptance
off its set figure; and any composition other than our refusal at start-up.

    python -m bench.side_by_side RESDIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import printed
from bench.counters import HarnessCounters
from bench.e2e_decode import ACCEPTANCE_SLACK, BASELINE, K, acceptance, decode_problems, noise_floor, read_engine
from bench.e2e_decode import PHASES as PURE
from bench.e2e_mixed import MIXED, occasion, occasions, shortfall, spread
from vllm_ds4x.depth import sim

AV = "adaptive verification"
PHASES = (*PURE, MIXED)
REQUESTS = (1, 2)  # ci/fork-gpu/side_by_side: E2E_REQUESTS' default
# the one error of vllm_ds4x.depth.composition, not any error that names both options
REFUSAL = "both choose how many drafts each request verifies, and do not run together"
Cells = dict[tuple[str, int, str], list[dict[str, Any]]]


def cells_of(runs: Sequence[Mapping[str, Any]]) -> Cells:
    """(phase, requests, policy) -> that cell of every round, from both engines."""
    out: Cells = defaultdict(list)
    for run in runs:
        for cell in run.get("cells", []):
            out[cell["phase"], cell["requests"], cell["policy"]].append(cell)
    return out


def expected(spec: Mapping[str, Any]) -> list[tuple[str, int, str]]:
    """Every cell a round must hold: each phase at 1 and 2 requests and the mixed batches the draft_depth
    engine planned, for each of our policies and adaptive verification."""
    grid = [(phase, n) for phase in PURE for n in REQUESTS] + [(MIXED, n) for n in spec.get("mixed", [])]
    return [(phase, n, policy) for phase, n in grid for policy in [*sim.policies(K), AV]]


def completeness(spec: Mapping[str, Any], av: Mapping[str, Any], cells: Cells) -> list[str]:
    """Both engines ran the same rounds, and every expected cell in each (adaptive verification's with a
    draft budget logged)."""
    rounds = [sorted({c["round"] for c in run.get("cells", [])}) for run in (spec, av)]
    found = [] if rounds[0] == rounds[1] and rounds[0] else [f"rounds measured: draft_depth {rounds[0]}, "
                                                            f"adaptive verification {rounds[1]}"]
    for phase, n, policy in expected(spec):
        draws = spec.get("mixed_draws", 1) if phase == MIXED else 1
        got = {occasion(c) for c in cells.get((phase, n, policy), []) if c.get("tok_s") is not None}
        if got != occasions(rounds[0], draws):
            found.append(f"{phase} x{n} {policy}: {shortfall(len(got), len(rounds[0]), draws)}")
        if policy == AV and any(not c.get("drafts", {}).get("steps") for c in cells.get((phase, n, policy), [])):
            found.append(f"{phase} x{n} {AV}: a cell with no draft budget logged (BudgetLog saw no step)")
    return found


def problems(spec: Mapping[str, Any], av: Mapping[str, Any], cells: Cells) -> list[str]:
    """What fails the run: missing cells, tokens that differ, eager steps, graphs or the drafter not
    replayed, acceptance off its set figure, and any composition other than our refusal."""
    found = [*decode_problems(dict(spec), "draft_depth engine"), *decode_problems(dict(av), "adaptive verification engine")]
    found += completeness(spec, av, cells)
    for phase, n in sorted({(ph, n) for ph, n, _ in cells}):
        tokens = {json.dumps(c["tokens"]) for (ph, m, _), runs in cells.items() if (ph, m) == (phase, n) for c in runs}
        if len(tokens) > 1:
            found.append(f"{phase} x{n}: greedy tokens differ between cells ({len(tokens)} variants)")
    ours, theirs = HarnessCounters.read(spec), HarnessCounters.read(av)
    if missing := {"1", "2", "3"} - ours.replayed():
        found.append(f"draft_depth engine: no graph replayed at query length(s) {sorted(missing)}")
    if not theirs.replayed():
        found.append("adaptive verification engine: no decode step replayed a graph")
    if ours.drafted_after_depth_0() and not ours.drafter_after.get("1"):
        found.append("draft_depth engine: the drafter replayed no graph after depth-0 steps")
    for phase in PURE:
        got, want = acceptance(cells, phase), spec.get("acceptance_set", {}).get(phase)
        if got is None or want is None or abs(got - want) > ACCEPTANCE_SLACK:
            found.append(f"{phase}: acceptance at depth {K} measured {got}, set {want}")
    said = str(av.get("composition", "not tried"))
    if not (said.startswith("refused:") and REFUSAL in said):
        found.append(f"draft_depth with enable_adaptive_verification: {said[:300]} (expected our refusal: {REFUSAL!r})")
    return found


def drafts_per_request_step(cell: Mapping[str, Any]) -> float:
    """The drafts each request verified a step: adaptive verification's budget, else the step depths."""
    if "drafts" in cell:
        d = cell["drafts"]
        return float(d["verified"]) / (d["steps"] * cell["requests"]) if d["steps"] else 0.0
    steps = {int(depth): s["n"] for depth, s in cell["steps"].items()}
    return float(sum(depth * n for depth, n in steps.items()) / max(1, sum(steps.values())))


def table(cells: Cells, phase: str, n: int, policies: Sequence[str]) -> tuple[list[str], dict[str, float]]:
    """The lines of one phase and request count, and each policy's median tok/s."""
    base = {occasion(c): c["tok_s"] for c in cells[phase, n, BASELINE]}
    lines = [f"{'policy':<22} {'tok/s median [range]':>24} {'vs fixed 2':>11} {'drafts/req/step':>16} "
             f"{'accepted/drafted':>17}"]
    medians: dict[str, float] = {}
    for policy in policies:
        runs = cells[phase, n, policy]
        rates = [c["tok_s"] for c in runs]
        medians[policy] = statistics.median(rates)
        if policy == AV:  # another engine, run after ours: no same-round pairs
            ratio = f"{medians[policy] / statistics.median(base.values()):.3f}*"
        else:
            ratio = f"{statistics.median(c['tok_s'] / base[occasion(c)] for c in runs):.3f} "
        depth = statistics.mean(drafts_per_request_step(c) for c in runs)
        drafted = sum(c["draft_tokens"] for c in runs)
        accepted = sum(c["accepted_tokens"] for c in runs) / drafted if drafted else float("nan")
        lines.append(f"{policy:<22} {spread(rates):>24} {ratio:>11} {depth:>16.2f} {accepted:>17.3f}")
    return lines, medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("resdir", type=Path)
    args = parser.parse_args(argv)
    try:
        return report(args.resdir)
    except printed.READ_ERRORS as e:
        return printed.failed(args.resdir, e)


def report(resdir: Path) -> int:
    """main's report of the run; raises one of printed.READ_ERRORS on a run of another shape."""
    read: list[str] = []
    spec = read_engine(resdir / "e2e-spec.json", read) or {}
    av = read_engine(resdir / "e2e-av.json", read) or {}
    cells = cells_of([spec, av])
    found = read + (problems(spec, av, cells) if spec and av else [])
    if spec and av and not found:
        policies = [*dict.fromkeys(c["policy"] for c in spec["cells"]), AV]
        for n in sorted({n for _, n, _ in cells}):
            medians = {}
            for phase in PHASES:
                if (phase, n, BASELINE) in cells:
                    lines, medians[phase] = table(cells, phase, n, policies)
                    print(f"\n{phase}, {n} running request(s): steady decode tok/s\n" + "\n".join(lines))
            print(f"noise floor of x{n} (our policies that verify the same depths, one engine): {noise_floor(medians):.1%}")
        print("\n* adaptive verification's median over fixed 2's (two engines, one after the other: the noise floor "
              "does not bound it). accepted/drafted is vLLM's own: it counts the drafts adaptive verification "
              "trimmed as drafted and rejected.")
        print(f"\ndraft_depth with enable_adaptive_verification: {av['composition']}")
    for problem in found:
        print("FAIL:", problem)
    print("\nside by side:", "FAILED" if found or not (spec and av) else "passes")
    return 1 if found or not (spec and av) else 0


if __name__ == "__main__":
    sys.exit(main())
