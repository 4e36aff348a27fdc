"""Each per-request twin's mixed pairs split into what moved them, pair by pair (round, and draw).

    python -m bench.mixed_pairs bench/results/h100-dsv4-e2e

A pair's ratio, the twin's steady tok/s over its batch-uniform twin's in the same round (and draw,
E2E_MIXED_DRAWS), is the ratio of the tokens their windows made over that of their windows' times.
The tokens move with the draws (today's reasoning request verifies its drafts, the twin's does not),
the time with the steps: printed side by side, with each phase's tokens and each side's median step
by the batch's verified depth (the deepest of its requests': a twin's 0 + 2 is under 2), they say
which of the two set a pair, where the report gives only the ratio. Where the cells counted each
request's verified depth (steps_by_request_depths), each pair also at the acceptance the run set:
the tokens a step those depths make at it (depth_mixed.tokens_by_depth), over the pair's own time a
step, what the pair gives without its draws' luck, and their median over the pairs.
Exit 1, naming why, on a run without mixed per-request twins, or with a twin's cell that has no
batch-uniform cell of its round (and draw) to pair with or did not measure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import e2e_mixed
from bench.e2e_decode import K
from bench.printed import print_or_fail, read_json
from vllm_ds4x.depth import mixed as depth_mixed
from vllm_ds4x.depth.named_policies import PER_REQUEST


def steps_text(cell: Mapping[str, Any]) -> str:
    """A cell's median step by the batch's verified depth: '2: 80.1'."""
    return ", ".join(f"{d}: {s['median_ms']:.1f}" for d, s in sorted(cell["steps"].items()))


def tokens_text(cell: Mapping[str, Any]) -> str:
    """The tokens each phase's requests made in the window: 'reasoning 22, answer 63'."""
    return ", ".join(f"{p} {e2e_mixed.phase_tokens(cell, p)}" for p in dict.fromkeys(cell["mix"]))


def set_tokens(cell: Mapping[str, Any], acceptance: Mapping[str, float]) -> float | None:
    """The tokens a step of the cell makes on average at `acceptance`, over the depths its requests
    verified (steps_by_request_depths); None where the cell did not count them. e2e.py counts a step's
    depths sorted, not by request: the shallower go to the requests of lower acceptance, as the phase
    policies choose them and adaptive does but for a probe."""
    shapes = cell.get("steps_by_request_depths")
    if not shapes:
        return None
    made = {p: depth_mixed.tokens_by_depth(a, K) for p, a in acceptance.items()}
    phases = sorted(cell["mix"], key=acceptance.__getitem__)
    return float(sum(count * sum(made[p][int(d)] for p, d in zip(phases, sorted(map(int, shape.split("+")))))
                     for shape, count in shapes.items()) / sum(shapes.values()))


def at_set(c: Mapping[str, Any], b: Mapping[str, Any], acceptance: Mapping[str, float]) -> float | None:
    """A pair at the set acceptance: its tokens a step there over its own time a step (window over the
    steps counted in it), twin over batch twin; None where either cell did not count depths."""
    made = [set_tokens(cell, acceptance) for cell in (c, b)]
    if made[0] is None or made[1] is None:
        return None
    step = [cell["window_s"] / sum(cell["steps_by_request_depths"].values()) for cell in (c, b)]
    return float(made[0] / made[1] * step[1] / step[0])


def pair_lines(cells: e2e_mixed.Cells, n: int, twin: str, acceptance: Mapping[str, float]) -> list[str]:
    """One twin's pairs with its batch-uniform twin, the spread of each half over them, and the pairs
    at the set acceptance."""
    base = twin.removesuffix(PER_REQUEST)
    out = [f"{twin} against {base}, mixed x{n}:"]
    halves: dict[str, list[float]] = {"tokens": [], "time": []}
    at_sets = []
    pairs = e2e_mixed.same_round(cells[n, twin], cells[n, base])
    if unpaired := [c for c in cells[n, twin] if not any(c is p for p, _ in pairs)]:
        raise ValueError(f"{twin}, mixed x{n}, round {unpaired[0]['round']}{e2e_mixed.draw_label(unpaired[0])}: "
                         f"no {base} cell of the same round to pair with")
    if broken := [cell for pair in pairs for cell in pair if not e2e_mixed.measured(cell)]:
        raise ValueError(f"{broken[0]['policy']}, mixed x{n}, round {broken[0]['round']}"
                         f"{e2e_mixed.draw_label(broken[0])}: the cell did not measure")
    for c, b in pairs:
        ratio, tokens = c["tok_s"] / b["tok_s"], c["window_tokens"] / b["window_tokens"]
        halves["tokens"].append(tokens)
        halves["time"].append(tokens / ratio)
        at = at_set(c, b, acceptance)
        at_sets += [at] if at is not None else []
        out.append(f"  round {c['round']}{e2e_mixed.draw_label(c)}: {ratio:.3f} = tokens {tokens:.3f} / time "
                   f"{tokens / ratio:.3f}; tokens {tokens_text(c)} against {tokens_text(b)}; "
                   f"steps ms {steps_text(c)} against {steps_text(b)}"
                   + (f"; at the set acceptance {at:.3f}" if at is not None else ""))
    if len(out) > 2:
        out.append("  spread over the pairs (max / min): " + ", ".join(
            f"{half} {max(v) / min(v):.3f}" for half, v in halves.items()))
    if at_sets:
        out.append(f"  at the set acceptance ({', '.join(f'{p} {a}' for p, a in acceptance.items())}), "
                   f"median [range]: {statistics.median(at_sets):.3f} [{min(at_sets):.3f}-{max(at_sets):.3f}]")
    return out


def lines(resdir: Path) -> list[str]:
    run = read_json(resdir / "e2e-spec.json")
    cells = e2e_mixed.mixed_cells([run])
    twins = sorted(key for key in cells if key[1].endswith(PER_REQUEST))
    if not twins:
        raise ValueError("no mixed per-request twins: run it with E2E_MIXED=1 and E2E_PER_REQUEST=1")
    out = []
    for n, twin in twins:
        out += pair_lines(cells, n, twin, run["acceptance_set"])
    return [f"{resdir.name}: the mixed pairs of {len(twins)} per-request twins", *out]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("resdir", type=Path)
    args = parser.parse_args(argv)
    return print_or_fail(args.resdir, lambda: lines(args.resdir))


if __name__ == "__main__":
    sys.exit(main())
