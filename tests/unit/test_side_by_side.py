"""bench/side_by_side.py, upstream vLLM's adaptive verification beside our draft_depth policies (#34):
the committed H200 run reprints its report byte for byte and passes; the same run with one thing
broken (tokens that differ, a missing round, an eager decode step, a failed engine, the two options
accepted together) fails, each named."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bench import side_by_side

RESULTS = Path(__file__).resolve().parents[2] / "bench/results"
RUN = RESULTS / "h200-upstream-side-by-side"  # vLLM 0.32.0
RUN_034 = RESULTS / "h200-upstream-0.34.0-side-by-side"  # vLLM 0.34.0, the series' own target


def committed(run: Path = RUN) -> tuple[dict[str, Any], dict[str, Any]]:
    return (json.loads((run / "e2e-spec.json").read_text()), json.loads((run / "e2e-av.json").read_text()))


def write(resdir: Path, spec: dict[str, Any], av: dict[str, Any]) -> Path:
    (resdir / "e2e-spec.json").write_text(json.dumps(spec))
    (resdir / "e2e-av.json").write_text(json.dumps(av))
    return resdir


@pytest.mark.parametrize("run", [RUN, RUN_034], ids=["0.32.0", "0.34.0"])
def test_the_committed_run_reprints_its_report_and_passes(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert side_by_side.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert out == (run / "report.txt").read_text()
    rows = [line for line in out.splitlines() if line.startswith("adaptive verification ")]
    assert "side by side: passes" in out and len(rows) == 5  # one a table


def test_the_committed_run_verified_what_each_side_chose() -> None:
    """Adaptive verification trimmed drafts while reasoning (its budget below the 2 scheduled) and kept
    them while answering; phase 0/2 verified none while reasoning: the tables compare real choices."""
    spec, av = committed()
    cells = side_by_side.cells_of([spec, av])
    mean = {key: sum(map(side_by_side.drafts_per_request_step, runs)) / len(runs) for key, runs in cells.items()}
    assert mean["reasoning", 2, side_by_side.AV] < 1.9 < mean["answer", 2, side_by_side.AV]
    assert mean["reasoning", 1, "phase 0/2"] == 0 and mean["answer", 1, "phase 0/2"] == 2


def test_on_0340_adaptive_verification_kept_every_draft() -> None:
    """0.34.0's estimator, on this drafter (confident on every draft), set each step's budget to the
    drafts scheduled: what its README says sets it apart from 0.32.0's run, which trimmed."""
    _, av = committed(RUN_034)
    budgets = [cell["drafts"] for cell in av["cells"]]
    assert len(budgets) == 25 and all(b["steps"] and b["verified"] == b["scheduled"] for b in budgets)
    _, av_032 = committed()
    assert any(cell["drafts"]["verified"] < cell["drafts"]["scheduled"] for cell in av_032["cells"])


def break_tokens(spec: dict[str, Any], av: dict[str, Any]) -> None:
    av["cells"][0]["tokens"][0][-1] += 1


def drop_round(spec: dict[str, Any], av: dict[str, Any]) -> None:
    spec["cells"] = [c for c in spec["cells"] if not (c["policy"] == "adaptive" and c["round"] == 3)]


def eager_step(spec: dict[str, Any], av: dict[str, Any]) -> None:
    av["decode_steps"]["eager"] = {"3": 1}


def engine_failed(spec: dict[str, Any], av: dict[str, Any]) -> None:
    av.update(ok=False, error="AttributeError('no kernel')")


def both_accepted(spec: dict[str, Any], av: dict[str, Any]) -> None:
    av["composition"] = "accepted"


def another_error(spec: dict[str, Any], av: dict[str, Any]) -> None:
    """An unrelated start-up error whose text echoes both options (as pydantic's does) is no refusal."""
    av["composition"] = "refused: CUDA out of memory; input draft_depth=..., enable_adaptive_verification=True"


def drop_policy(spec: dict[str, Any], av: dict[str, Any]) -> None:
    spec["cells"] = [c for c in spec["cells"] if c["policy"] != "adaptive"]


def drop_mixed(spec: dict[str, Any], av: dict[str, Any]) -> None:
    for run in (spec, av):
        run["cells"] = [c for c in run["cells"] if c["phase"] != "mixed"]


def drop_two_requests(spec: dict[str, Any], av: dict[str, Any]) -> None:
    for run in (spec, av):
        run["cells"] = [c for c in run["cells"] if c["requests"] != 2]


def mixed_draws_planned(spec: dict[str, Any], av: dict[str, Any]) -> None:
    """Both engines planned 2 mixed draws a round (E2E_MIXED_DRAWS) and ran only the first."""
    for run in (spec, av):
        run["mixed_draws"] = 2


def one_av_round(spec: dict[str, Any], av: dict[str, Any]) -> None:
    av["cells"] = [c for c in av["cells"] if c["round"] == 0]


def no_budget_logged(spec: dict[str, Any], av: dict[str, Any]) -> None:
    for cell in av["cells"]:
        cell["drafts"] = {"steps": 0, "verified": 0, "scheduled": 0}


def acceptance_off(spec: dict[str, Any], av: dict[str, Any]) -> None:
    for cell in spec["cells"]:
        cell["accepted_tokens"] = cell["draft_tokens"]


@pytest.mark.parametrize("breaks, message", [
    (break_tokens, "greedy tokens differ between cells"),
    (drop_round, "adaptive: 4 of 5 rounds measured"),
    (eager_step, "adaptive verification engine: eager decode steps"),
    (engine_failed, "e2e-av.json: the engine did not finish"),
    (both_accepted, "draft_depth with enable_adaptive_verification: accepted (expected our refusal"),
    (another_error, "CUDA out of memory"),
    (drop_policy, "reasoning x1 adaptive: 0 of 5 rounds measured"),
    (drop_mixed, "mixed x2 adaptive verification: 0 of 5 rounds measured"),
    (drop_two_requests, "answer x2 fixed 2: 0 of 5 rounds measured"),
    (mixed_draws_planned, "mixed x2 adaptive verification: 5 of 10 rounds x 2 draws measured"),
    (one_av_round, "rounds measured: draft_depth [0, 1, 2, 3, 4], adaptive verification [0]"),
    (no_budget_logged, "a cell with no draft budget logged"),
    (acceptance_off, "reasoning: acceptance at depth 2 measured 1.0, set 0.4"),
])
def test_the_report_fails_closed(breaks: Any, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec, av = copy.deepcopy(committed())
    breaks(spec, av)
    assert side_by_side.main([str(write(tmp_path, spec, av))]) == 1
    out = capsys.readouterr().out
    assert message in out and "side by side: FAILED" in out


def test_a_missing_engine_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec, _ = committed()
    (tmp_path / "e2e-spec.json").write_text(json.dumps(spec))
    assert side_by_side.main([str(tmp_path)]) == 1
    assert "e2e-av.json" in capsys.readouterr().out


def test_mixed_draws_are_paired_with_fixed_2_of_their_own_round_and_draw(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Both engines with a second mixed draw a round (E2E_MIXED_DRAWS=2), every cell of it at half the
    rate: each of our policies' mixed ratios to fixed 2, taken within a round and draw, stay as they were."""
    def mixed_ratios(spec: dict[str, Any], av: dict[str, Any], where: Path) -> dict[str, str]:
        where.mkdir()
        assert side_by_side.main([str(write(where, spec, av))]) == 0
        table = capsys.readouterr().out.split("mixed, 2 running request(s)", 1)[1].splitlines()[2:8]  # ours
        return {" ".join(line.split()[:-5]): line.split()[-3] for line in table}

    spec, av = copy.deepcopy(committed())
    before = mixed_ratios(spec, av, tmp_path / "one")
    for run in (spec, av):
        run["mixed_draws"] = 2
        run["cells"] += [{**c, "draw": 1, "tok_s": c["tok_s"] / 2} for c in run["cells"] if c["phase"] == "mixed"]
    assert mixed_ratios(spec, av, tmp_path / "two") == before
    assert set(before) == {"fixed 0", "fixed 1", "fixed 2", "phase 1/2", "phase 0/2", "adaptive"}
