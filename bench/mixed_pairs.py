"""Each per-request twin's mixed pairs split into what moved them, pair by pair (round, and draw).

    python -m bench.mixed_pairs bench/results/h100-dsv4-e2e

A pair's ratio, the twin's steady tok/s over its batch-uniform twin's in the same round (and draw,
E2E_MIXED_DRAWS), is the ratio of the tokens their windows made over that of their windows' times.
The tokens move with the draws (today's reasoning request verifies its drafts, the twin's does not),
the time with the steps: printed side by side, with each phase's tokens and each side's median step
by the batch's verified depth (the deepest of its requests': a twin's 0 + 2 is under 2), they say
which of the two set a pair, where the report gives only the ratio.
Exit 1, naming why, on a run without mixed per-request twins.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import e2e_mixed
from bench.printed import print_or_fail
from ds4x.core.named_policies import PER_REQUEST


def steps_text(cell: Mapping[str, Any]) -> str:
    """A cell's median step by the batch's verified depth: '2: 80.1'."""
    return ", ".join(f"{d}: {s['median_ms']:.1f}" for d, s in sorted(cell["steps"].items()))


def tokens_text(cell: Mapping[str, Any]) -> str:
    """The tokens each phase's requests made in the window: 'reasoning 22, answer 63'."""
    return ", ".join(f"{p} {e2e_mixed.phase_tokens(cell, p)}" for p in dict.fromkeys(cell["mix"]))


def pair_lines(cells: e2e_mixed.Cells, n: int, twin: str) -> list[str]:
    """One twin's pairs with its batch-uniform twin, and the spread of each half over them."""
    base = twin.removesuffix(PER_REQUEST)
    out = [f"{twin} against {base}, mixed x{n}:"]
    halves: dict[str, list[float]] = {"tokens": [], "time": []}
    for c, b in e2e_mixed.same_round(cells[n, twin], cells[n, base]):
        ratio, tokens = c["tok_s"] / b["tok_s"], c["window_tokens"] / b["window_tokens"]
        halves["tokens"].append(tokens)
        halves["time"].append(tokens / ratio)
        out.append(f"  round {c['round']}{e2e_mixed.draw_label(c)}: {ratio:.3f} = tokens {tokens:.3f} / time "
                   f"{tokens / ratio:.3f}; tokens {tokens_text(c)} against {tokens_text(b)}; "
                   f"steps ms {steps_text(c)} against {steps_text(b)}")
    if len(out) > 2:
        out.append("  spread over the pairs (max / min): " + ", ".join(
            f"{half} {max(v) / min(v):.3f}" for half, v in halves.items()))
    return out


def lines(resdir: Path) -> list[str]:
    run = json.loads((resdir / "e2e-spec.json").read_text())
    cells = e2e_mixed.mixed_cells([run])
    twins = sorted(key for key in cells if key[1].endswith(PER_REQUEST))
    if not twins:
        raise ValueError("no mixed per-request twins: run it with E2E_MIXED=1 and E2E_PER_REQUEST=1")
    out = []
    for n, twin in twins:
        out += pair_lines(cells, n, twin)
    return [f"{resdir.name}: the mixed pairs of {len(twins)} per-request twins", *out]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("resdir", type=Path)
    args = parser.parse_args(argv)
    return print_or_fail(args.resdir, lambda: lines(args.resdir), (ValueError, OSError))


if __name__ == "__main__":
    sys.exit(main())
