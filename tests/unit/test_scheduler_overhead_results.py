"""The committed runs of bench/scheduler_overhead.py (bench/results/cpu-scheduler-overhead): every
run printed each equal-work line, its README's table gives those figures, and the #24 targets
(phase 2/2 at most 3%, adaptive at most 5%) hold in each run the README says they hold in."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.doc_figures import assert_quotes, tables

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "cpu-scheduler-overhead"
COLUMNS = ("ds4x off, again", "fixed + phase tracking", "phase 2/2", "adaptive (min_depth 2)")
TARGETS = {"phase 2/2": 3.0, "adaptive (min_depth 2)": 5.0}


def printed(run: Path) -> tuple[float, dict[str, float]]:
    """The ds4x-off step (ms) and each equal-work line's median ratio (%), as the script printed them."""
    text = run.read_text()
    base = re.search(r"^  ds4x off \(vLLM path\)\s+([\d.]+) ms$", text, re.M)
    assert base, f"{run.name}: no ds4x-off line"
    ratios = {}
    for name in COLUMNS:
        line = re.search(rf"^  {re.escape(name)}\s+[\d.]+ ms\s+([+-][\d.]+)% \(IQR", text, re.M)
        assert line, f"{run.name}: no line for {name}"
        ratios[name] = float(line[1])
    return float(base[1]), ratios


def test_every_run_is_in_the_table_as_printed() -> None:
    """The README's table has one row per run, and each row's figures are the run's, within rounding."""
    runs = sorted(RESULTS.glob("run-*.txt"), key=lambda p: int(p.stem.split("-")[1]))
    rows = [r for t in tables(RESULTS / "README.md") if t[0][0] == "run" for r in t[1:]]
    assert len(runs) == 15 and [r[0] for r in rows] == [str(n) for n in range(1, 16)]
    for run in runs:
        base, ratios = printed(run)
        assert_quotes(" ".join(rows[int(run.stem.split("-")[1]) - 1][1:]), [base, *(ratios[name] for name in COLUMNS)])


@pytest.mark.parametrize("triple", [(1, 2, 3), (4, 5, 6), (7, 8, 9), (13, 14, 15)])
def test_the_targets_hold_in_each_run_of_a_triple(triple: tuple[int, int, int]) -> None:
    for run in triple:
        _, ratios = printed(RESULTS / f"run-{run}.txt")
        for name, target in TARGETS.items():
            assert ratios[name] <= target, (run, name, ratios[name])


def test_the_loaded_triple_missed_where_its_readme_says() -> None:
    """Runs 10-12 ran beside other work on the same cores: adaptive over 5% in run 10, phase over 3% in
    run 11, as the README reports them."""
    assert printed(RESULTS / "run-10.txt")[1]["adaptive (min_depth 2)"] > TARGETS["adaptive (min_depth 2)"]
    assert printed(RESULTS / "run-11.txt")[1]["phase 2/2"] > TARGETS["phase 2/2"]
