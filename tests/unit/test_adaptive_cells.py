"""bench/adaptive_cells.py: the benchmark's sequence of cells replayed through one policy, on committed runs."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest

from bench import adaptive_cells
from ds4x.core.depth_adaptive import Adaptive
from ds4x.core.phase_tracker import ANSWER

RESULTS = Path(adaptive_cells.__file__).parent / "results"
QWEN = RESULTS / "h200-e2e-mixed-in-batch"


def test_a_phase_policy_verifies_its_phase_depths_in_every_cell() -> None:
    """phase 0/2 per request: reasoning pairs 0 + 0, answering pairs 2 + 2, the mixed pair 0 + 2, from the
    first step (its depths are set on arrival, so the lag of two steps changes nothing)."""
    got = adaptive_cells.cells("phase 0/2 per request", QWEN, rounds=1, seeds=1)
    assert {kind: {tuple(sorted(d)) for c in runs for d in c.steps} for kind, runs in got.items()} == {
        "reasoning": {(0, 0)}, "answer": {(2, 2)}, "mixed": {(0, 2)}}


def test_adaptive_carries_what_earlier_cells_taught_it() -> None:
    """One policy across cells: its acceptance seeds move as requests retire, and its step costs keep
    the shapes every earlier cell timed (none are timed before the first)."""
    replay = adaptive_cells.Replay("adaptive per request", QWEN, random.Random(0))
    strategy = replay.policy.strategy
    assert isinstance(strategy, Adaptive) and not replay.policy.costs.medians
    seeds = strategy.seeds.by_phase[ANSWER].rates[:]
    replay.cell(adaptive_cells.CELLS["answer"])
    assert strategy.seeds.by_phase[ANSWER].rates != seeds
    timed = set(replay.policy.costs.medians[2])
    replay.cell(adaptive_cells.CELLS["mixed"])
    assert timed <= set(replay.policy.costs.medians[2])
    assert not replay.policy.requests  # each cell's requests retired


def test_adaptive_runs_the_mixed_pair_at_0_plus_2_on_the_runs_costs() -> None:
    """On one cost per shape, as the run measured it, adaptive per request verifies 0 + 2 in most mixed
    steps, within 3% of phase 0/2 per request; the H200 ran it at 0 + 1 (docs/mixed-batches.md)."""
    lines = adaptive_cells.lines(QWEN, "adaptive per request", rounds=3, seeds=4)
    mixed = next(line for line in lines if line.startswith("mixed"))
    assert "(0+2 " in mixed
    share = int(mixed.split("(0+2 ")[1].split("%")[0])
    assert share >= 80, mixed
    own = adaptive_cells.cells("adaptive per request", QWEN, 3, 4)["mixed"]
    phase = adaptive_cells.cells("phase 0/2 per request", QWEN, 3, 4)["mixed"]
    mean = statistics.mean
    assert mean(c.tok_s for c in own) >= 0.97 * mean(c.tok_s for c in phase)


def test_a_run_without_mixed_cells_fails_with_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert adaptive_cells.main([str(RESULTS / "h200-e2e-start"), "--seeds", "1"]) == 1
    assert "no mixed cells of two requests" in capsys.readouterr().err


def test_an_unknown_policy_fails_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert adaptive_cells.main([str(QWEN), "--policy", "greedy", "--seeds", "1"]) == 1
    assert "greedy" in capsys.readouterr().err


@pytest.mark.parametrize(("run", "name"), [("h200-e2e-mixed-in-batch", "Qwen2-MoE + EAGLE"),
                                           ("h200-dsv4-e2e-mixed-in-batch", "DeepSeek-V4 + DSpark")])
def test_the_docs_quote_the_replay_of_the_committed_runs(run: str, name: str) -> None:
    """docs/mixed-batches.md's replay table: adaptive per request's tok/s and two most run depths, then
    phase 0/2 per request's tok/s, per kind of cell, as the script prints them (3 rounds, 8 seeds)."""
    own, phase = (adaptive_cells.lines(RESULTS / run, policy, 3, 8)[1:]
                  for policy in ("adaptive per request", "phase 0/2 per request"))
    cells = []
    for mine, theirs in zip(own, phase):
        tok_s, depths = mine.split()[1], mine.split("(")[1].rstrip(")").split(", ")
        cells.append(f"{tok_s} ({', '.join(d for d in depths[:2] if not d.endswith(' 0%'))}) / {theirs.split()[1]}")
    row = f"| {name} | " + " | ".join(cells) + " |"
    assert row in (Path(adaptive_cells.__file__).parents[1] / "docs" / "mixed-batches.md").read_text(), row
