"""bench/adaptive_mixed.py: adaptive simulated on a committed run's mixed batch, the figures
docs/mixed-batches.md quotes, and its refusals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import adaptive_mixed
from tests.doc_figures import assert_quotes, numbers, row

RESULTS = Path(adaptive_mixed.__file__).parent / "results"
DOC = Path(adaptive_mixed.__file__).parents[1] / "docs" / "mixed-batches.md"


LINE = re.compile(r"(\d+) steps: adaptive today ([\d.]+) tok/s \((\S+ \d+%)\), per request ([\d.]+) \((\S+ \d+%)\): "
                  r"([\d.]+x); phase 0/2 per request against today: [\d.]+x")


@pytest.mark.parametrize("run", ["h200-dsv4-e2e-priors-x2", "h200-e2e-mixed-per-request-crn"])
def test_the_docs_quote_the_simulation_of_the_committed_runs(run: str) -> None:
    """The "now" cells of the docs' table, the rows naming the run at 26 and 400 steps, hold the script's
    own figures on the run."""
    lines = adaptive_mixed.lines(RESULTS / run, [26, 400], 20)
    for line in lines[1:]:
        got = LINE.fullmatch(line)
        assert got is not None, line
        steps, *now = got.groups()
        assert_quotes(" ".join(row(DOC, f"`{run}`", steps, column="steps")[-3:]), numbers(" ".join(now)))


@pytest.mark.parametrize(("run", "why"), [
    ("h200-e2e-start", "no mixed cells of two requests"),  # a run from before the mixed cells
    ("h200-dsv4-e2e", "answer: acceptance at depth 2 measured 0.8279"),  # the report refuses it
])
def test_a_run_it_cannot_price_fails_with_why(run: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert adaptive_mixed.main([str(RESULTS / run), "--steps", "26", "--seeds", "2"]) == 1
    assert why in capsys.readouterr().err
