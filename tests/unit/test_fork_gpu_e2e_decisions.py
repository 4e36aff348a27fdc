"""ci/fork-gpu/e2e.py's decision log (E2E_DECISIONS=1): every depth adaptive sets, as it sets it, with
the estimate and the step costs it chose on, on the real DepthPolicy; and bench/e2e_decisions.py,
which reads it back cell by cell. Also e2e.py's plan of a round's cells and their draws."""

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench import e2e_decisions
from tests.scripts import load_script
from vllm_ds4x.depth import policy as dd
from vllm_ds4x.depth.sim import END_THINK, THINK

RESULTS = Path(e2e_decisions.__file__).parent / "results"


def e2e_script(monkeypatch: pytest.MonkeyPatch) -> Any:
    """ci/fork-gpu/e2e.py as a module, its arguments those of a speculative run (nothing read)."""
    pytest.importorskip("torch", reason="ci/fork-gpu/e2e.py imports drafts.py, which needs torch")
    monkeypatch.setattr(sys, "argv", ["e2e.py", "spec", "/nonexistent/out", "/nonexistent/models"])
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "ci" / "fork-gpu"))
    return load_script("ci/fork-gpu/e2e.py")


def test_mixed_draws_run_the_mixed_cells_again_each_on_draws_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """E2E_MIXED_DRAWS=3: each round's mixed pair three times after the phase-pure cells, the first on
    the round's salt (as runs before), every other on a salt no round or draw shares; 0 and more than 100
    (a salt past what drafts.py's hash takes) are refused."""
    monkeypatch.setenv("E2E_REQUESTS", "2")
    monkeypatch.setenv("E2E_MIXED_DRAWS", "3")
    e2e = e2e_script(monkeypatch)
    plan = e2e.cell_plan({"reasoning": [[1], [2]], "answer": [[3], [4]]})
    assert [(phase, n, draw) for phase, n, _, draw in plan] == [
        ("reasoning", 2, 0), ("answer", 2, 0), ("mixed", 2, 0), ("mixed", 2, 1), ("mixed", 2, 2)]
    assert plan[-1][2] == [[1], [3]]  # one reasoning request and one answering, as the phase-pure cells take them
    salts = [e2e.salt(round_, draw) for round_ in range(100) for draw in range(3)]
    assert len(set(salts)) == 300 and e2e.salt(0, 0) == 1
    for refused in ("0", "101"):
        monkeypatch.setenv("E2E_MIXED_DRAWS", refused)
        with pytest.raises(SystemExit, match=f"E2E_MIXED_DRAWS={refused}: 1 to 100"):
            e2e_script(monkeypatch)


def traced_cell(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[Any]]:
    """A reasoning and an answering request under adaptive per request, one step timed at 0 + 2 and
    ended, through e2e.trace_depths: the policy and what it logged."""
    e2e = e2e_script(monkeypatch)
    config = dd.parse_draft_depth({"policy": "adaptive", "verify": "request",
                                   "prior_acceptance": {"reasoning": 0.3, "answer": 0.9}}, 2)
    policy = dd.DepthPolicy(config, 2, dd.PhaseTracker([[THINK]], [[END_THINK]]), 2)
    made = e2e.trace_depths(policy)
    policy.add("r", [THINK], None)
    policy.add("a", [THINK, 5, END_THINK], None)
    for _ in range(3):
        policy.costs.observe_step([1, 3], 0.040)
    policy.strategy.step_ended({"r", "a"})
    return policy, made


def test_every_depth_adaptive_sets_is_logged_with_what_it_chose_on(monkeypatch: pytest.MonkeyPatch) -> None:
    policy, made = traced_cell(monkeypatch)
    assert [entry[1] for entry in made] == ["r", "a", "r"]  # r again: priced beside a once the step ended
    _, request, phase, depth, probing, exploring, estimate, medians = made[-1]
    assert (request, phase, depth) == ("r", "reasoning", policy.requests["r"].depth)
    assert not (probing or exploring) and estimate == [0.3, 0.3]
    assert medians == {"2": {"3,4": 40.0}}  # by batch size, then shape


def test_the_decisions_are_read_back_by_cell(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Each cell gets the depths set for its own requests (not another cell's), by slot and phase."""
    _, made = traced_cell(monkeypatch)
    other = [time.perf_counter(), "x", "answer", 1, False, False, [0.9, 0.9], {}]  # another cell's request
    cell = {"round": 0, "phase": "mixed", "requests": 2, "policy": "adaptive per request", "tok_s": 80.0,
            "steps_by_request_depths": {"0+2": 25}, "window_clock": [made[0][0], made[-1][0] + 1],
            "request_ids": ["r", "a"]}
    (tmp_path / "e2e-spec.json").write_text(json.dumps(
        {"cells": [cell], "decisions": {"adaptive per request": [*made, other]}}))
    assert e2e_decisions.main([str(tmp_path), "--phase", "mixed"]) == 0
    heading, *rows = capsys.readouterr().out.splitlines()
    assert heading == "round 0 mixed x2 adaptive per request: 80.00 tok/s, steps {'0+2': 25}"
    assert [row.split()[2:5] for row in rows] == [["#0", "reasoning", "->"], ["#1", "answer", "->"],
                                                   ["#0", "reasoning", "->"]]
    assert "costs {'3,4': 40.0}" in rows[-1]


def test_a_run_without_decisions_fails_naming_the_switch(capsys: pytest.CaptureFixture[str]) -> None:
    assert e2e_decisions.main([str(RESULTS / "h200-e2e-mixed-in-batch")]) == 1
    assert "E2E_DECISIONS=1" in capsys.readouterr().err


def test_a_cell_that_cannot_be_placed_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Decisions beside a cell without its window or request ids (an older harness) fail, naming the cell."""
    cell = {"round": 1, "phase": "answer", "requests": 2, "policy": "adaptive", "tok_s": 80.0,
            "steps_by_request_depths": {"2+2": 25}}
    (tmp_path / "e2e-spec.json").write_text(json.dumps({"cells": [cell], "decisions": {"adaptive": []}}))
    assert e2e_decisions.main([str(tmp_path)]) == 1
    assert "cell 1 answer adaptive has no window_clock" in capsys.readouterr().err


def assert_lossless(run: dict[str, Any]) -> None:
    """Two rounds of three kinds of cell, the same greedy tokens under all four policies of each, and
    no decode step eager."""
    by_cell: dict[tuple[int, str], list[Any]] = {}
    for cell in run["cells"]:
        by_cell.setdefault((cell["round"], cell["phase"]), []).append(cell["tokens"])
    assert len(by_cell) == 6 and all(len(t) == 4 and t.count(t[0]) == 4 for t in by_cell.values())
    assert not run["decode_steps"]["eager"]


def test_the_committed_decision_log_holds_what_its_readme_says() -> None:
    """bench/results/h200-e2e-decisions: lossless (the same greedy tokens under every policy in each
    round and phase, no eager decode step), the mixed pair at 0 + 2 in 38 of 51 steps, its arrival
    choices 0 and 2 in both rounds, and the probe that took a young reasoning estimate to 0.617."""
    run = json.loads((RESULTS / "h200-e2e-decisions" / "e2e-spec.json").read_text())
    assert_lossless(run)
    mixed = [c for c in run["cells"] if c["phase"] == "mixed" and c["policy"] == "adaptive per request"]
    steps = [c["steps_by_request_depths"] for c in mixed]
    assert sum(s.get("0+2", 0) for s in steps) == 38 and sum(sum(s.values()) for s in steps) == 51
    lines = e2e_decisions.lines(RESULTS / "h200-e2e-decisions", "adaptive per request", "mixed")
    arrivals = [line.split("->")[1].split()[0] for line in lines if " -2" in line.split("ms")[0]]
    assert arrivals == ["0", "2", "0", "2"]
    assert any("reasoning -> 1 " in line and "estimate [0.617" in line for line in lines)
    assert "FAIL" in (RESULTS / "h200-e2e-decisions" / "report.txt").read_text()  # no fixed cells: fails closed


def test_the_deepseek_v4_decision_log_holds_what_its_readme_says() -> None:
    """bench/results/h100-dsv4-e2e-decisions: lossless, no eager decode step, the four mixed cells'
    arrivals 0 (reasoning) and 2 (answer), and round 1's adaptive per request at 1 + 2 throughout
    after the reasoning request re-decided to 1 when the prefill ended."""
    name = "h100-dsv4-e2e-decisions"
    run = json.loads((RESULTS / name / "e2e-spec.json").read_text())
    assert_lossless(run)
    assert run["moe_layers"]["resident"] == [0, 1]
    mixed = {c["round"]: c["steps_by_request_depths"] for c in run["cells"]
             if c["phase"] == "mixed" and c["policy"] == "adaptive per request"}
    assert mixed == {0: {"0+2": 14, "1+2": 1}, 1: {"1+2": 15}}
    lines = [line for policy in ("adaptive", "adaptive per request")
             for line in e2e_decisions.lines(RESULTS / name, policy, "mixed")]
    arrivals = [line.split("->")[1].split()[0] for line in lines if line.split("ms")[0].strip().startswith("-3")]
    assert arrivals == ["0", "2"] * 4
    assert any("-10.0 ms  #0 reasoning -> 1 " in line for line in lines)
    assert "FAIL" in (RESULTS / name / "report.txt").read_text()  # no fixed cells: fails closed


def test_each_twin_runs_next_to_its_policy_first_on_odd_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    """cell_order: every policy once a turn, each per-request twin beside the policy it pairs with
    (second on even turns, first on odd), the pairs rotated by the turn; a policy without a twin
    stands alone."""
    e2e = e2e_script(monkeypatch)
    names_run = ("fixed 2", "phase 0/2", "adaptive", "phase 0/2 per request", "adaptive per request")
    ran: list[tuple[str, dict[str, Any]]] = [(name, {}) for name in names_run]
    names = [[name for name, _ in e2e.cell_order(ran, turn)] for turn in range(4)]
    assert names[0] == ["fixed 2", "phase 0/2", "phase 0/2 per request", "adaptive", "adaptive per request"]
    assert names[1] == ["phase 0/2 per request", "phase 0/2", "adaptive per request", "adaptive", "fixed 2"]
    assert names[2] == ["adaptive", "adaptive per request", "fixed 2", "phase 0/2", "phase 0/2 per request"]
    assert names[3] == ["fixed 2", "phase 0/2 per request", "phase 0/2", "adaptive per request", "adaptive"]
    plain = ran[:3]  # the phase-pure cells of one request: no twins
    assert [name for name, _ in e2e.cell_order(plain, 1)] == ["phase 0/2", "adaptive", "fixed 2"]
