"""bench/adaptive_cells.py: the benchmark's sequence of cells replayed through one policy, on committed runs."""

from __future__ import annotations

import json
import random
import shutil
import statistics
from pathlib import Path

import pytest

from bench import adaptive_cells
from bench.adaptive_mixed import priced
from tests.doc_figures import assert_quotes, numbers, row
from vllm_ds4x.depth.adaptive import Adaptive
from vllm_ds4x.depth.phase_tracker import ANSWER

RESULTS = Path(adaptive_cells.__file__).parent / "results"
DOCS = Path(adaptive_cells.__file__).parents[1] / "docs"
QWEN = RESULTS / "h200-e2e-mixed-in-batch"
DSV4 = RESULTS / "h200-dsv4-e2e-mixed-in-batch"


def test_a_phase_policy_verifies_its_phase_depths_in_every_cell() -> None:
    """phase 0/2 per request: reasoning pairs 0 + 0, answering pairs 2 + 2, the mixed pair 0 + 2."""
    got = adaptive_cells.cells("phase 0/2 per request", QWEN, rounds=1, seeds=1)
    assert {kind: {tuple(sorted(d)) for c in runs for d in c.steps} for kind, runs in got.items()} == {
        "reasoning": {(0, 0)}, "answer": {(2, 2)}, "mixed": {(0, 2)}}


@pytest.mark.parametrize("policy", ["phase 0/2", "adaptive"])
def test_todays_policies_verify_the_deepest_choice_for_the_whole_batch(policy: str) -> None:
    """Without verify "request" the mixed pair verifies 2 + 2 (the answer's depth) in every step, as
    today's fork does: the replay is the baseline the per-request twins are paired with."""
    mixed = adaptive_cells.cells(policy, DSV4, rounds=1, seeds=2)["mixed"]
    assert {d for cell in mixed for d in cell.steps} == {(2, 2)}


def test_the_first_decode_step_verifies_the_depths_set_on_arrival() -> None:
    """Lag 2: the first answering request, priced alone on arrival, chose 0; the prefill's end moved it
    to 2 beside the second, but the step scheduled before that end verifies 0 + 2, the next 2 + 2."""
    replay = adaptive_cells.Replay("adaptive per request", priced(QWEN), random.Random(0))
    steps = replay.cell(adaptive_cells.CELLS["answer"]).steps
    assert steps[:2] == [(0, 2), (2, 2)]


def test_a_cell_ends_when_its_first_request_has_the_runs_tokens() -> None:
    """Each request stops at the run's tokens (max_tokens): a cell of one request's worth at depth 0."""
    replay = adaptive_cells.Replay("phase 0/2 per request", priced(QWEN), random.Random(0))
    cell = replay.cell(adaptive_cells.CELLS["reasoning"])  # depth 0: one token a step each
    assert replay.tokens == 80 and len(cell.steps) == 79 and cell.tokens == 2 * 79  # after the prefill's token
    assert replay.rounds == 3 and adaptive_cells.Replay("adaptive per request", priced(DSV4), random.Random(0)).rounds == 2


def test_adaptive_carries_what_earlier_cells_taught_it() -> None:
    """One policy across cells: its acceptance seeds move as requests retire, and the step costs the
    first cell timed price the next one's decisions."""
    replay = adaptive_cells.Replay("adaptive per request", priced(QWEN), random.Random(0))
    strategy = replay.policy.strategy
    assert isinstance(strategy, Adaptive) and not replay.policy.costs.medians
    seeds = strategy.seeds.by_phase[ANSWER].rates[:]
    replay.cell(adaptive_cells.CELLS["answer"])
    assert strategy.seeds.by_phase[ANSWER].rates != seeds
    assert (3, 6) in replay.policy.costs.medians[2]  # 2 + 2, timed in the answering pair
    assert not replay.policy.requests  # each cell's requests retired


def test_adaptive_runs_the_mixed_pair_at_0_plus_2_on_the_runs_costs() -> None:
    """On the run's costs adaptive per request verifies 0 + 2 in most mixed steps, within 3% of phase 0/2
    per request; the c3ed7e4 run on the H200 ran it at 0 + 1 (docs/mixed-batches.md)."""
    own = adaptive_cells.cells("adaptive per request", QWEN, None, 4)["mixed"]
    phase = adaptive_cells.cells("phase 0/2 per request", QWEN, None, 4)["mixed"]
    steps = [tuple(sorted(d)) for cell in own for d in cell.steps]
    assert steps.count((0, 2)) >= 0.8 * len(steps)
    assert statistics.mean(c.tok_s for c in own) >= 0.97 * statistics.mean(c.tok_s for c in phase)


def test_a_run_without_mixed_cells_fails_with_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert adaptive_cells.main([str(RESULTS / "h200-e2e-start"), "--seeds", "1"]) == 1
    assert "no mixed cells of two requests" in capsys.readouterr().err


def test_an_unknown_policy_fails_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert adaptive_cells.main([str(QWEN), "--policy", "greedy", "--seeds", "1"]) == 1
    assert "no policy 'greedy'" in capsys.readouterr().err


@pytest.mark.parametrize("run", ["h200-e2e-mixed-in-batch", "h200-dsv4-e2e-mixed-in-batch"])
def test_the_docs_quote_the_replay_of_the_committed_runs(run: str) -> None:
    """docs/mixed-batches.md's replay table, the row naming the run, holds the script's figures (the run's
    rounds, 8 seeds): per kind of cell adaptive per request's tok/s and its two depths run most, then
    phase 0/2 per request's tok/s."""
    own, phase = (adaptive_cells.lines(RESULTS / run, policy, None, 8)[1:]
                  for policy in ("adaptive per request", "phase 0/2 per request"))
    cells = row(DOCS / "mixed-batches.md", f"`{run}`", column="mixed pair")[1:]
    assert len(cells) == len(own) == 3
    for cell, mine, theirs in zip(cells, own, phase):
        depths = mine.split("(")[1].rstrip(")").split(", ")[:2]
        assert_quotes(cell, [*numbers(mine.split()[1]), *numbers(" ".join(depths)), *numbers(theirs.split()[1])])


def test_a_run_with_mixed_draws_replays_the_mixed_pair_once_a_draw(tmp_path: Path) -> None:
    """E2E_MIXED_DRAWS=2 (the run's mixed_draws): each round the engine ran the mixed pair twice after the
    phase-pure pairs, and so does the replay; the round count stays the run's."""
    run = json.loads((DSV4 / "e2e-spec.json").read_text())
    run["mixed_draws"] = 2
    run["cells"] += [{**c, "draw": 1} for c in run["cells"] if c["phase"] == "mixed"]
    (tmp_path / "e2e-spec.json").write_text(json.dumps(run))
    shutil.copy(DSV4 / "measure.json", tmp_path)
    got = adaptive_cells.cells("phase 0/2 per request", tmp_path, rounds=1, seeds=1)
    assert {kind: len(cells) for kind, cells in got.items()} == {"reasoning": 1, "answer": 1, "mixed": 2}
    assert adaptive_cells.lines(tmp_path, "phase 0/2 per request", None, 1)[0].endswith(", 2 rounds, 1 seeds")


def test_drift_replays_each_cell_at_the_host_s_slowdown_then() -> None:
    """--drift on bench/results/h200-dsv4-e2e-draws: round 0's third mixed draw, the slow spell in which
    the engine's adaptive per request last timed 0 + 2, costs 1.145x; so replayed, adaptive per request
    comes within 1% of phase 0/2 per request on the mixed pair and no cell runs 1 + 2 throughout, as the
    engine's round 1 did: the replay does not reproduce that trap (docs/mixed-batches.md)."""
    run = RESULTS / "h200-dsv4-e2e-draws"
    slowdowns = adaptive_cells.host_drift(json.loads((run / "e2e-spec.json").read_text()))
    assert len(slowdowns) == 10 and round(slowdowns[0, "mixed", 2], 3) == 1.145
    assert round(slowdowns[1, "mixed", 2], 3) == 0.98  # 88.2 ms against the mixed cells' 90.0
    lines = {policy: adaptive_cells.lines(run, policy, None, 8, drift=True)
             for policy in ("adaptive per request", "phase 0/2 per request")}
    assert lines["adaptive per request"][0].endswith("8 seeds, each cell at the host's speed then")
    mixed = {policy: float(out[3].split()[1]) for policy, out in lines.items()}
    assert mixed == {"adaptive per request": 53.39, "phase 0/2 per request": 53.89}
    cells = adaptive_cells.cells("adaptive per request", run, None, 8, drift=True)["mixed"]
    assert not any(all(sorted(step) == [1, 2] for step in cell.steps) for cell in cells)
