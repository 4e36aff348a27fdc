"""The reviewed table the draft-depth advice reads (bench/results/advice.toml): each row's run is
committed and its figures are that run's data; the advice takes its numbers from the table alone
(a results folder the table does not name changes nothing, a superseded row no longer counts); a
broken table is one error naming the file and the row."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ds4x.checkout import HOME
from ds4x.deploy import measured_advice
from ds4x.errors import Ds4xError
from vllm_ds4x.depth.named_policies import named_policies

ROWS = measured_advice.load()
FIXED_2 = {"method": "dspark", "num_speculative_tokens": 2, "draft_sample_method": "greedy"}
PHASE_0_2 = named_policies(2)["phase 0/2"].draft_depth or {}


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.number}-{r.run}-{r.policy}-vs-{r.against}")
def test_each_row_is_its_runs_data(row: measured_advice.Row) -> None:
    run = HOME.root / measured_advice.RESULTS / row.run
    cells = json.loads((run / "e2e-spec.json").read_text())["cells"]
    for phase, by_requests in row.figures.items():
        for requests, figure in by_requests.items():
            measured = measured_advice.figure(cells, row.policy, row.against, requests, phase)
            assert measured is not None, f"row {row.number}: {run} has no {row.policy} / {row.against} pair"
            assert figure == pytest.approx(measured, abs=5e-5), (row.number, phase, requests)


def test_every_use_has_counted_rows_and_the_superseded_say_by_what() -> None:
    assert {r.use for r in ROWS if r.superseded_by is None} == set(measured_advice.FIGURES)
    assert all(len(r.superseded_by) > 20 for r in ROWS if r.superseded_by)


def row(run: str, use: str = "policy", policy: str = "phase 0/2", against: str = "fixed 2", **figures: Any) -> str:
    figures = figures or {"reasoning": {1: 1.25, 2: 1.5}, "answer": {1: 0.9, 2: 1.0}}
    given = "\n".join(f"{phase} = {{ {', '.join(f'{n} = {v}' for n, v in by.items())} }}" for phase, by in figures.items())
    return (f'[[row]]\nuse = "{use}"\npolicy = "{policy}"\nagainst = "{against}"\nnum_speculative_tokens = 2\n'
            f'{given}\nrun = "{run}"\ncommit = "0123abc"\ndevice = "a test box"\nwhy = "a test"\n')


def table(root: Path, *rows: str, runs: tuple[str, ...] = ("one", "two", "three")) -> Path:
    results = root / measured_advice.RESULTS
    for run in runs:
        (results / run).mkdir(parents=True, exist_ok=True)
    (root / measured_advice.TABLE).write_text("\n".join(rows))
    return root


def advice(root: Path, spec: dict[str, Any], seqs: int | None = 2) -> measured_advice.Advice | None:
    return measured_advice.advise(spec, 2, None, root, max_num_seqs=seqs)


def test_the_advice_prints_the_tables_numbers(tmp_path: Path) -> None:
    root = table(tmp_path, row("one"), row("two", reasoning={1: 1.1, 2: 1.05}, answer={1: 1.0, 2: 0.95}))
    found = advice(root, FIXED_2, seqs=1)
    assert found is not None and found.draft_depth == PHASE_0_2
    assert "phase 0/2 measured 1.10-1.25x fixed 2 there at one request, 1.05-1.50x at two" in found.message
    assert "2 committed run(s) on a test box: one, two in bench/results/advice.toml" in found.message
    assert "while answering" not in found.message  # answering lost at 1 request in run two, at 2 in run one


def test_a_results_folder_the_table_does_not_name_changes_nothing(tmp_path: Path) -> None:
    root = table(tmp_path, row("one"))
    before = advice(root, FIXED_2)
    (root / measured_advice.RESULTS / "four").mkdir()
    cells = [{"phase": "reasoning", "requests": n, "round": 0, "policy": p, "tok_s": s}
             for n in (1, 2) for p, s in (("phase 0/2", 1.0), ("fixed 2", 9.0))]  # fixed 2 far ahead, unreviewed
    (root / measured_advice.RESULTS / "four" / "e2e-spec.json").write_text(json.dumps({"cells": cells}))
    assert advice(root, FIXED_2) == before and before is not None


def test_a_superseded_row_no_longer_counts(tmp_path: Path) -> None:
    """A twin that lost in one run vetoes "verify": "request"; the same row superseded does not."""
    twin = {"use": "verify", "policy": "phase 0/2 per request", "against": "phase 0/2"}
    phase_0_2 = {**FIXED_2, "draft_depth": PHASE_0_2}
    rows = [row("one", **twin, mixed={2: 1.2}), row("two", **twin, mixed={2: 0.9})]
    assert advice(table(tmp_path, *rows), phase_0_2) is None
    rows[1] += 'superseded_by = "a later fix"\n'
    found = advice(table(tmp_path, *rows), phase_0_2)
    assert found is not None and found.draft_depth == {**PHASE_0_2, "verify": "request"}
    assert "measured 1.20-1.20x phase 0/2 on such pairs (1 committed run(s) on a test box: one in" in found.message


def test_rows_of_another_k_do_not_count(tmp_path: Path) -> None:
    root = table(tmp_path, row("one").replace("num_speculative_tokens = 2", "num_speculative_tokens = 3")
                 .replace("phase 0/2", "phase 0/3"))
    assert advice(root, FIXED_2) is None


@pytest.mark.parametrize(("change", "problem"), [
    (("use = \"policy\"", "use = \"policies\""), "use 'policies': expected one of 'policy', 'deepseek-v4', 'verify'"),
    (("why = \"a test\"\n", ""), "no why"),
    (("why = \"a test\"", "why = \"\""), "why: expected a non-empty string"),
    (("why = \"a test\"", "why = \"a test\"\nnote = 1"), "unknown field(s) note"),
    (("against = \"fixed 2\"", "against = \"fixed 9\""), "against 'fixed 9': not a named policy at K=2"),
    (("commit = \"0123abc\"", "commit = \"HEAD\""), "commit 'HEAD': expected 7 to 40 lower-case hex digits"),
    (("run = \"two\"", "run = \"gone\""), "run 'gone': no such folder beside the table"),
    (("run = \"two\"", "run = \"../two\""), "run '../two': no such folder beside the table"),
    (("2 = 1.5 }", "2 = 0 }"), "reasoning.2 0: expected a ratio, a number above 0"),
    (("2 = 1.5 }", "2 = nan }"), "reasoning.2 nan: expected a ratio, a number above 0"),
    (("2 = 1.5 }", "2 = \"1.5\" }"), "reasoning.2 '1.5': expected a ratio, a number above 0"),
    (("reasoning = { 1 = 1.25, 2 = 1.5 }", "reasoning = { 1 = 1.25 }"), "reasoning: expected { 1 = RATIO, 2 = RATIO }"),
    (("num_speculative_tokens = 2", "num_speculative_tokens = true"), "num_speculative_tokens True: expected a whole"),
    (("run = \"two\"", "run = \"one\""), "the same run and comparison as row 1"),
])
def test_a_broken_row_is_one_error_naming_the_file_and_row(tmp_path: Path, change: tuple[str, str],
                                                           problem: str) -> None:
    root = table(tmp_path, row("one"), row("two").replace(*change))
    with pytest.raises(Ds4xError) as raised:
        measured_advice.load(root)
    assert str(raised.value).startswith(f"{root / measured_advice.TABLE}: row 2 ("), raised.value
    assert problem in str(raised.value) and raised.value.hint and "header" in raised.value.hint


def test_a_verify_row_compares_a_twin_to_its_policy(tmp_path: Path) -> None:
    root = table(tmp_path, row("one", "verify", "phase 1/2 per request", "phase 0/2", mixed={2: 1.1}))
    with pytest.raises(Ds4xError, match="row 1 .*policy 'phase 0/2 per request' for against 'phase 0/2'"):
        measured_advice.load(root)


@pytest.mark.parametrize(("text", "problem"), [("[[row]\n", "Expected ']]'"), ("rows = 1\n", "expected [[row]] tables"),
                                               (None, "No such file")])
def test_a_table_that_is_not_one_is_named(tmp_path: Path, text: str | None, problem: str) -> None:
    (tmp_path / measured_advice.RESULTS).mkdir(parents=True)
    if text is not None:
        (tmp_path / measured_advice.TABLE).write_text(text)
    with pytest.raises(Ds4xError) as raised:
        measured_advice.load(tmp_path)
    assert str(raised.value).startswith(f"{tmp_path / measured_advice.TABLE}: ") and problem in str(raised.value)


def test_figure_is_the_median_of_paired_rounds_and_draws() -> None:
    cells = [{"phase": "mixed", "requests": 2, "round": r, "draw": d, "policy": p, "tok_s": s}
             for r, d, p, s in ((0, 0, "a", 2.0), (0, 0, "b", 1.0), (0, 1, "a", 3.0), (0, 1, "b", 1.0),
                                (1, 0, "a", 1.0), (1, 0, "b", 1.0), (1, 1, "a", 5.0))]  # (1, 1) has no pair
    assert measured_advice.figure(cells, "a", "b", 2, "mixed") == 2.0
    assert measured_advice.figure(cells, "a", "b", 1, "mixed") is None
    assert math.isclose(measured_advice.figure(cells, "b", "a", 2, "mixed") or 0, 0.5)
