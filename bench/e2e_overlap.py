#!/usr/bin/env python3
"""CPU-GPU overlap off against on (#20): the report of ci/fork-gpu/e2e_overlap (E2E_MODES=overlap
of ci/fork-gpu/e2e), on the end-to-end stand-in.

Reads RESDIR/e2e-ENGINE-LEVEL.json (ci/fork-gpu/e2e.py with E2E_TAG=LEVEL, one engine per
LVLLM_MOE_OVERLAP level, ENGINE nospec or spec) and prints, per engine, policy and running
requests (both phases pooled) and verified depth: the median step ms at level off and at each
other level, and what the other level saves; then steady tok/s the same way.
Fails closed (exit 1): no off run, a missing or failed engine, a cell of the off run missing at
another level, greedy tokens that differ from the off run's in any cell, an eager decode step,
a query length replayed at one level and not at another, _cpu_prefill in decode.

Then the model (#20 item 4): depth_sim.step_ms at each level, fed RESDIR/measure.json's curve
(the stand-in layer, measured in the same run) and the rest of the step measured at off (the
step less its CPU experts), against the measured step; reported, not failed (the measurement is
the figure), and said when measure.json is missing (runs from before ci/fork-gpu/e2e_overlap
measured first).

    python -m bench.e2e_overlap RESDIR
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.counters import HarnessCounters
from bench.e2e_decode import PREDICTION_SLACK, decode_problems, read_engine, read_json
from vllm_ds4x.depth import sim

BASE = "off"
NAME = re.compile(r"e2e-(nospec|spec)-([a-z]+)\.json")
Run = dict[str, Any]
Key = tuple[str, int, str, int]  # phase, requests, policy, round


def load(resdir: Path, problems: list[str]) -> dict[str, dict[str, Run]]:
    """engine -> level -> run, from the files; unreadable or unfinished ones are problems."""
    runs: dict[str, dict[str, Run]] = defaultdict(dict)
    for path in sorted(resdir.glob("e2e-*.json")):
        if not (match := NAME.fullmatch(path.name)):
            continue
        if (run := read_engine(path, problems)) is not None:
            runs[match[1]][match[2]] = run
    if not runs:
        problems.append(f"no e2e-ENGINE-LEVEL.json in {resdir}")
    for engine, levels in runs.items():
        if BASE not in levels:
            problems.append(f"{engine}: no run at level {BASE} to compare with")
        elif len(levels) < 2:
            problems.append(f"{engine}: only level {BASE} ran")
    return runs


def cells(run: Run) -> dict[Key, dict[str, Any]]:
    return {(c["phase"], c["requests"], c["policy"], c["round"]): c for c in run.get("cells", [])}


def check(engine: str, levels: dict[str, Run], problems: list[str]) -> None:
    """Every other level against off: the same cells, the same tokens, graphs only."""
    base = cells(levels.get(BASE, {}))
    replayed = {level: set(HarnessCounters.read(run).graph_steps) for level, run in levels.items()}
    for level, run in levels.items():
        where = f"{engine} {level}"
        if run.get("overlap") != level:
            problems.append(f"{where}: the engine ran LVLLM_MOE_OVERLAP={run.get('overlap')}")
        if run.get("mixed_draws", 1) != 1:  # cells() pairs by round
            problems.append(f"{where}: E2E_MIXED_DRAWS={run['mixed_draws']}; this comparison pairs cells by round")
        problems += decode_problems(run, where)
        if replayed[level] != replayed.get(BASE, replayed[level]):
            problems.append(f"{where}: graphs replayed at query lengths {sorted(replayed[level])}, "
                            f"off at {sorted(replayed[BASE])}")
        if level == BASE:
            continue
        these = cells(run)
        for key, cell in base.items():
            other = these.get(key)
            if other is None or other.get("tok_s") is None:
                problems.append(f"{where}: cell {key} not measured")
            elif other["tokens"] != cell["tokens"]:
                problems.append(f"{where}: cell {key}: greedy tokens differ from off")


def medians(run: Run) -> dict[tuple[str, int, str], float]:
    """(policy, requests, depth) -> median over the cells (both phases, every round) of their
    median step ms at that depth."""
    pooled: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    for cell in run.get("cells", []):
        for depth, step in cell.get("steps", {}).items():
            pooled[cell["policy"], cell["requests"], depth].append(step["median_ms"])
    return {k: statistics.median(v) for k, v in pooled.items()}


def rates(run: Run) -> dict[tuple[str, int, str], float]:
    """(policy, requests, phase) -> median steady tok/s over the rounds."""
    pooled: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    for cell in run.get("cells", []):
        if cell.get("tok_s") is not None:
            pooled[cell["policy"], cell["requests"], cell["phase"]].append(cell["tok_s"])
    return {k: statistics.median(v) for k, v in pooled.items()}


def table(engine: str, levels: dict[str, Run]) -> list[str]:
    others = [level for level in levels if level != BASE]
    steps = {level: medians(run) for level, run in levels.items()}
    lines = [f"{engine}: step ms by verified depth (median of the cells' medians), {BASE} against "
             + ", ".join(others),
             f"{'policy':16} {'requests':>8} {'depth':>5} {BASE:>9} " + " ".join(
                 f"{level:>9} {'saved ms':>9} {'saved %':>8}" for level in others)]
    for key in sorted(steps[BASE]):
        off = steps[BASE][key]
        row = f"{key[0]:16} {key[1]:8d} {key[2]:>5} {off:9.2f} "
        for level in others:
            on = steps[level].get(key)
            row += (f"{on:9.2f} {off - on:9.2f} {100 * (off - on) / off:7.1f}%" if on is not None
                    else f"{'-':>9} {'-':>9} {'-':>8}")
        lines.append(row)
    tok = {level: rates(run) for level, run in levels.items()}
    lines.append(f"{engine}: steady tok/s (median over rounds)")
    for key in sorted(tok[BASE]):
        lines.append(f"{key[0]:16} x{key[1]} {key[2]:10} {BASE} {tok[BASE][key]:7.2f}" + "".join(
            f"  {level} {tok[level].get(key, float('nan')):7.2f}" for level in others))
    return lines


def model(levels: dict[str, Run], measured: dict[str, Any]) -> list[str]:
    """Predicted against measured step ms per level, policy, requests and depth."""
    curve, layers = sim.profile_curve(measured)
    steps = {level: medians(run) for level, run in levels.items()}
    lines = [f"model: depth_sim.step_ms on measure's curve ({layers} layers) and the rest measured at {BASE}",
             f"{'level':8} {'policy':10} {'requests':>8} {'depth':>5} {'measured':>9} {'predicted':>10} {'error':>7}"]
    errors = []
    for level, run in levels.items():
        if level == BASE:
            continue  # its rest is derived from it: predicted = measured by construction
        tokens = int(run.get("ubatch_tokens", 1))  # runs from before it was recorded ran the default
        overlap = sim.Overlap(mode="ubatch" if level == "ubatch" else "off", max_tokens=tokens)
        for (policy, n, depth), off in sorted(steps[BASE].items()):
            got = steps[level].get((policy, n, depth))
            if got is None:
                continue
            query = int(depth) + 1
            if n * query not in curve:
                lines.append(f"{level:8} {policy:10} {n:8d} {depth:>5} {got:9.2f}  not modelled: measure did not "
                             f"time {n * query} tokens")
                continue
            rest = off - curve[n * query] * layers
            want = sim.step_ms(curve, layers, rest, n, query, overlap)
            errors.append(abs(want / got - 1))
            lines.append(f"{level:8} {policy:10} {n:8d} {depth:>5} {got:9.2f} {want:10.2f} {want / got - 1:+7.1%}")
    lines.append(f"model within {PREDICTION_SLACK:.0%}: {sum(e <= PREDICTION_SLACK for e in errors)} of {len(errors)}"
                 + (f" (largest error {max(errors):.1%})" if errors else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__)
        return 2
    problems: list[str] = []
    runs = load(Path(args[0]), problems)
    profile = Path(args[0]) / "measure.json"
    measured = read_json(profile, problems) if profile.is_file() else None
    for engine, levels in sorted(runs.items()):
        check(engine, levels, problems)
        if BASE in levels:
            print("\n".join(table(engine, levels)) + "\n")
            if measured is None:
                print(f"model: not checked, no readable {profile.name} in {args[0]}\n")
            elif problems:
                print("model: not checked (the problems below)\n")
            else:
                print("\n".join(model(levels, measured["measured"])) + "\n")
    for engine, levels in sorted(runs.items()):
        for level, run in levels.items():
            print(f"{engine} {level}: LVLLM_MOE_OVERLAP={run.get('overlap')}, start {run.get('init_s')} s, "
                  f"decode steps {run.get('decode_steps')}, graphs replayed {run.get('replays')}")
    print("tokens equal to off in every cell, graphs only: " + ("yes" if not problems else "no"))
    for problem in problems:
        print(f"FAIL: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
