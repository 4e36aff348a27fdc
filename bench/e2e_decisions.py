"""What adaptive decided in an end-to-end run, cell by cell: every depth it set for the cell's requests
(E2E_DECISIONS=1 bash ci/fork-gpu/e2e), with the acceptance estimate and the step costs it chose on.

    python -m bench.e2e_decisions RUN [--policy "adaptive per request"] [--phase mixed]

A cell's lines: milliseconds from the start of its steady window (negative: at arrival or prefill),
the request's slot and phase, the depth set (probe / explore: for one step), its estimate by draft
position, and the step costs' medians (ms by shape "longest,total") at the cell's batch size. Exit 1,
naming why, on a run that recorded no decisions or whose cells cannot be placed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench import e2e_mixed
from bench.printed import print_or_fail, read_json

Entry = Sequence[Any]
"""[time, request id, phase, depth, probing, exploring, estimate, {batch size: {shape: ms}}] (e2e.trace_depths)"""


def cell_lines(cell: dict[str, Any], entries: Sequence[Entry]) -> Iterator[str]:
    """The cell's heading, then each depth set for one of its requests, in order."""
    start, _ = cell["window_clock"]
    slots = {request_id: i for i, request_id in enumerate(cell["request_ids"])}
    yield (f"round {cell['round']}{e2e_mixed.draw_label(cell)} {cell['phase']} x{cell['requests']} {cell['policy']}: "
           f"{cell['tok_s'] or 0:.2f} tok/s, steps {cell['steps_by_request_depths']}")
    for at, request_id, phase, depth, probing, exploring, estimate, medians in entries:
        if (slot := slots.get(request_id)) is None:
            continue
        tried = " probe" if probing else " explore" if exploring else ""
        costs = medians.get(str(len(slots)), {})
        yield (f"  {1000 * (at - start):+9.1f} ms  #{slot} {phase:9} -> {depth}{tried:8} "
               f"estimate {estimate}  costs {costs}")


def lines(resdir: Path, policy: str | None, phase: str | None) -> list[str]:
    run = read_json(resdir / "e2e-spec.json")
    decisions: dict[str, list[Entry]] = run.get("decisions") or {}
    if not decisions:
        raise ValueError("no decisions recorded: run it with E2E_DECISIONS=1 bash ci/fork-gpu/e2e")
    if policy is not None and policy not in decisions:
        raise ValueError(f"no decisions of {policy!r}; recorded: {sorted(decisions)}")
    out: list[str] = []
    for cell in run["cells"]:
        if cell["policy"] not in decisions or policy not in (None, cell["policy"]) or phase not in (None, cell["phase"]):
            continue
        if "window_clock" not in cell or "request_ids" not in cell:
            raise ValueError(f"cell {cell['round']} {cell['phase']} {cell['policy']} has no window_clock or "
                             "request_ids to place its decisions (a run of ci/fork-gpu/e2e.py before they came)")
        out += cell_lines(cell, decisions[cell["policy"]])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("resdir", type=Path)
    parser.add_argument("--policy", help="one policy's cells (default: every policy with decisions)")
    parser.add_argument("--phase", choices=["reasoning", "answer", "mixed"], help="one phase's cells")
    args = parser.parse_args(argv)
    return print_or_fail(args.resdir, lambda: lines(args.resdir, args.policy, args.phase))


if __name__ == "__main__":
    sys.exit(main())
