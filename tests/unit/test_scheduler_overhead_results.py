"""The committed runs of bench/scheduler_overhead.py (bench/results/cpu-scheduler-overhead): every
run printed each equal-work line, its README's table gives those figures, and the #24 targets
(phase 2/2 at most 3%, adaptive at most 5%) hold in each run the README says they hold in."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


def table() -> dict[int, list[str]]:
    """The README's rows by run number: its cells after the run number."""
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", (RESULTS / "README.md").read_text(), re.M)
    return {int(run): [cell.strip() for cell in cells.split("|")] for run, cells in rows}


def test_every_run_is_in_the_table_as_printed() -> None:
    runs = sorted(RESULTS.glob("run-*.txt"), key=lambda p: int(p.stem.split("-")[1]))
    rows = table()
    assert len(runs) == 15 and sorted(rows) == list(range(1, 16))
    for run in runs:
        base, ratios = printed(run)
        row = rows[int(run.stem.split("-")[1])]
        assert row == [f"{base:.2f} ms", *(f"{ratios[name]:+.1f}%" for name in COLUMNS)], run.name


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
