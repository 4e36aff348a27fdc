"""`plan --check-launch SCRIPT --write OUT`: only what the check flags changes,
each change under a comment; every other setting and comment is kept; the
written script runs and passes the check with 0 errors; OUT never clobbers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ds4x.cli import main
from ds4x.deploy import script_reader
from ds4x.deploy.script_writer import MARK
from ds4x.deploy.wrap import CONTINUED
from tests.serve_script import SPEC, USERS
from vllm_ds4x.depth.named_policies import named_policies

from .test_launch import run_script

CORES = 16


def users_script(tmp_path: Path, threads: int = CORES, graphs: bool = False) -> Path:
    text = USERS.format(threads=threads, spec=SPEC)
    if not graphs:
        text = text.replace("  --compilation_config.cudagraph_mode FULL_DECODE_ONLY \\\n", "")
    script = tmp_path / "serve.sh"
    script.write_text(text)
    return script


def test_write_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script, out = users_script(tmp_path), tmp_path / "fixed.sh"
    assert main(["plan", "--check-launch", str(script), "--cores", str(CORES)]) == 1  # LK_THREADS=16 of 16
    assert main(["plan", "--check-launch", str(script), "--cores", str(CORES), "--write", str(out)]) == 0
    capsys.readouterr()
    assert main(["plan", "--check-launch", str(out), "--cores", str(CORES)]) == 0
    report = capsys.readouterr().out
    assert "0 error(s), 0 warning(s)" in report, report
    before, after = script_reader.read(script.read_text()), script_reader.read(out.read_text())
    changed = {"--speculative-config", "--compilation-config"}
    assert {k: v for k, v in before.options.items() if k not in changed} == \
           {k: v for k, v in after.options.items() if k not in changed}  # port, model, parsers, kwargs kept
    assert {**before.env, "LK_THREADS": "12", "OMP_NUM_THREADS": "1"} == after.env
    spec = json.loads(after.options["--speculative-config"])
    assert spec == {**json.loads(SPEC), "draft_depth": {**(named_policies(2)["phase 0/2"].draft_depth or {}),
                                                         "verify": "request"}}  # two requests: each its own depth
    assert json.loads(after.options["--compilation-config"]) == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    text = out.read_text()
    assert text.count(MARK) == 4 and "# what fits on my 5090" in text and "# my DeepSeek-V4 server" in text
    kept = [line for line in text.splitlines() if not line.startswith((MARK, CONTINUED))]  # a comment, wrapped
    assert len(kept) == len(script.read_text().splitlines())  # no line added but the comments
    argv = run_script(out, tmp_path)
    assert argv[:2] == ["serve", "/models/DeepSeek-V4-Flash"] and "--port" in argv


def test_a_dotted_value_is_changed_where_it_is(tmp_path: Path) -> None:
    script, out = users_script(tmp_path, threads=1, graphs=True), tmp_path / "fixed.sh"
    script.write_text(script.read_text().replace("cudagraph_mode FULL_DECODE_ONLY", "cudagraph_mode PIECEWISE"))
    assert main(["plan", "--check-launch", str(script), "--write", str(out)]) == 0
    assert "--compilation_config.cudagraph_mode FULL_DECODE_ONLY \\" in out.read_text()


def test_graph_depths_missing_a_chosen_depth_are_advised_and_written(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    depth = {"policy": "phase", "reasoning_depth": 0, "answer_depth": 2, "graph_depths": [2]}
    script, out = users_script(tmp_path, threads=1, graphs=True), tmp_path / "fixed.sh"
    script.write_text(script.read_text().replace(SPEC, json.dumps({**json.loads(SPEC), "draft_depth": depth})))
    assert main(["plan", "--check-launch", str(script), "--cores", str(CORES), "--write", str(out)]) == 0
    report = capsys.readouterr().out
    assert "warning: draft_depth.graph_depths [2] lacks the depths the policy chooses [0]" in report
    assert "give [0, 2]" in report and "1 change(s)" in report
    spec = json.loads(script_reader.read(out.read_text()).options["--speculative-config"])
    assert spec["draft_depth"] == {**depth, "graph_depths": [0, 2]}  # the user's object, with the graph added
    assert main(["plan", "--check-launch", str(out), "--cores", str(CORES)]) == 0
    assert "0 error(s), 0 warning(s)" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["input", "exists", "unfixable"])
def test_write_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    script, out = users_script(tmp_path), tmp_path / "fixed.sh"
    target = script if case == "input" else out
    if case == "exists":
        out.write_text("mine\n")
    if case == "unfixable":
        script.write_text(script.read_text().replace("--max-num-seqs 2", "--max-num-seqs 2 --gpu-memory-utilization 0.5"))
    assert main(["plan", "--check-launch", str(script), "--cores", str(CORES), "--write", str(target)]) != 0
    err = capsys.readouterr().err
    expected = {"input": "the same file as --check-launch", "exists": "add --force", "unfixable": "not written"}[case]
    assert expected in err, err
    assert out.read_text() == "mine\n" if case == "exists" else not out.exists()
    if case == "exists":
        assert main(["plan", "--check-launch", str(script), "--cores", str(CORES), "--write", str(out), "--force"]) == 0
        assert os.access(out, os.R_OK) and MARK in out.read_text()


@pytest.mark.parametrize("option", [["--write", "out.sh"], ["--cores", "8"]])
def test_check_launch_options_alone_are_refused(option: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *option]) == 2
    assert f"{option[0]} applies to --check-launch only" in capsys.readouterr().err
