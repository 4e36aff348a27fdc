"""Round four of bad inputs (issue 60), one case per kind: each is refused with exit 1 or 2 and one
message naming the input, no traceback, nothing written or replaced."""

from __future__ import annotations

import importlib
import json
import math
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench import depth_sim
from ds4x.checkout import HOME
from ds4x.cli import main
from ds4x.deploy import script_reader
from ds4x.deploy.plan import EXAMPLE
from ds4x.errors import InputError
from ds4x.scratch import atomic_write
from tests.unit.test_input_checks import refused
from tests.unit.test_launch import hand_written, run_script
from vllm_ds4x import out_paths
from vllm_ds4x.measure import cli as measure_cli


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS4X_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DS4X_MIRRORS", raising=False)


def listing(folder: Path) -> dict[str, int]:
    """Each entry's mode (its kind and permissions), links not followed."""
    return {p.name: p.lstat().st_mode for p in sorted(folder.iterdir())}


def odd_outputs(tmp_path: Path) -> dict[str, Path]:
    """Outputs that can hold no regular file: a FIFO, a link loop, a link to a FIFO, a folder."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    (tmp_path / "to-fifo").symlink_to(fifo)
    (tmp_path / "folder").mkdir()
    return {"fifo": fifo, "loop": tmp_path / "loop-a", "to-fifo": tmp_path / "to-fifo", "folder": tmp_path / "folder"}


KINDS = {"fifo": "is a FIFO (named pipe), not a regular file", "to-fifo": "is a FIFO (named pipe), not a regular file",
         "loop": "a symbolic link that loops", "folder": "a folder; give a file name"}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("option", ["--launch", "--plot", "--profile-out", "--write"])
def test_an_output_that_is_no_regular_file_is_refused_even_with_force(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str, option: str) -> None:
    target = odd_outputs(tmp_path)[kind]
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve /m\n")
    before = listing(tmp_path)
    name = str(target)
    if option == "--plot":  # a .png name, linked to the kind
        name += ".png"
        os.symlink(target, name)
        before = listing(tmp_path)
    extra = {"--profile-out": ["--measure", "--python", "/nonexistent/python"], "--write": ["--check-launch", str(script)]}
    message = refused(capsys, "plan", option, name, "--force", *extra.get(option, []))
    assert option in message and name in message and KINDS[kind] in message, message
    assert listing(tmp_path) == before


def test_a_character_device_is_never_replaced(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    message = refused(capsys, "plan", "--launch", "/dev/null", "--force")
    assert "'/dev/null': is a character device, not a regular file" in message
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert "--mbox: '/dev/null': is a character device" in refused(capsys, "export", "-t", "vllm", "--mbox", "/dev/null")
    with pytest.raises(InputError, match="is a character device"), atomic_write(Path("/dev/null")) as out:
        out.write("never")


def test_measure_profile_out_on_proc_is_probed_by_a_write(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """access() says yes to root on /proc; a probe's file cannot be made there, by anyone."""
    config = tmp_path / "c.json"
    config.write_text(EXAMPLE.read_text())
    assert out_paths.probe(Path("/proc")) is not None
    assert measure_cli.main(["--config", str(config), "--profile-out", "/proc/ds4x.json", "--force"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--profile-out /proc/ds4x.json: /proc is not writable" in err, err


def test_a_dist_or_output_folder_that_is_a_fifo(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fifo = odd_outputs(tmp_path)["fifo"]
    before = listing(tmp_path)
    assert f"--dist: '{fifo}': exists and is not a folder (a FIFO" in refused(capsys, "wheel", "--dist", str(fifo))
    assert f"--output: '{tmp_path / 'loop-a'}': a symbolic link that loops" in refused(
        capsys, "export", "-t", "vllm", "--output", str(tmp_path / "loop-a"))
    assert listing(tmp_path) == before


# ---- --check-launch reads a script as bash would, or says what it could not read


def check_launch(capsys: pytest.CaptureFixture[str], script: Path) -> tuple[int, list[str]]:
    """The check's exit code and its error lines (16 cores: LK_THREADS=12 is no error)."""
    code = main(["plan", "--check-launch", str(script), "--cores", "16"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    said: list[str] = []
    for line in captured.out.splitlines():  # a finding may wrap: its lines after the first are indented
        if line.startswith(("error: ", "warning: ")) or not line.startswith("  ") or not said:
            said.append(line)
        else:
            said[-1] += " " + line.strip()
    return code, [line for line in said if line.startswith("error: ")]


def test_the_base_script_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_launch(capsys, hand_written(tmp_path, 12)) == (0, [])


ROUTING = "@routing-file@"  # replaced by a file in tmp_path


@pytest.mark.parametrize(("edit", "message"), [
    (lambda text: text.replace("\n", "\r\n"), "line 1: CR LF line endings (Windows)"),
    (lambda text: text.replace("--max-num-seqs 2 \\\n", "--max-num-seqs 2 \\  \n"),
     "line 5: a backslash with spaces after it ends the line"),
    (lambda text: text.replace("export LK_THREADS=12", "declare -x LK_THREADS=16"), "LK_THREADS=16 on 16 cores: all cores"),
    (lambda text: text.replace("vllm serve", "args=(--port 8000)\nargs+=(--max-num-seqs 0)\nvllm serve")
     .replace("--max-num-seqs 2", '"${args[@]}"'),
     "--max-num-seqs '0': expected a whole number"),
    (lambda text: text.replace("vllm serve /models/DeepSeek-V4-Flash", 'vllm serve /models/DeepSeek-V4-Flash "${extra[@]}"'),
     "`vllm serve` argument '${extra[@]}': an expansion this check does not follow"),
    (lambda text: text.replace("--compilation-config", "--speculative-config.draft_depth.verify sideways --compilation-config"),
     "--speculative-config: 'num_speculative_tokens'"),
    (lambda text: text.replace('"reasoning_depth": 0}', '"reasoning_depth": 0}, "enable_adaptive_verification": true'),
     "draft_depth (ds4x) and enable_adaptive_verification (vLLM) both choose"),
    (lambda text: text.replace("export LK_THREADS=12", "export LK_THREADS=12 LVLLM_GPU_PREFILL_MIN_BATCH_SIZE=9000")
     .replace("--max-num-seqs 2", "--max-num-seqs 2 --max-num-batched-tokens 8192"),
     "LVLLM_GPU_PREFILL_MIN_BATCH_SIZE=9000 exceeds max-num-batched-tokens=8192"),
    (lambda text: text.replace("export LK_THREADS=12", f"export LK_THREADS=12 LVLLM_GPU_RESIDENT_ROUTING_STATS={ROUTING}"),
     "LVLLM_GPU_RESIDENT_ROUTING_STATS="),
    (lambda text: text.replace('"num_speculative_tokens": 2', '"num_speculative_tokens": 1000000000000'),
     "num_speculative_tokens='1000000000000': expected a whole number in 1..64"),
])
def test_check_launch_reads_as_bash_and_the_engine_would(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         edit: Callable[[str], str], message: str) -> None:
    script = hand_written(tmp_path, 12)
    routing = tmp_path / "routing.json"
    routing.write_text('{"3": [' + ", ".join(["1"] * 255 + ["NaN"]) + "]}")
    script.write_text(edit(script.read_text()).replace(ROUTING, str(routing)))
    before = listing(tmp_path)
    code, errors = check_launch(capsys, script)
    assert code == 1 and any(message in line for line in errors), errors
    assert listing(tmp_path) == before


def test_the_routing_file_s_counts_are_the_engine_s_to_refuse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = hand_written(tmp_path, 12)
    routing = tmp_path / "routing.json"
    text = script.read_text().replace("export LK_THREADS=12", f"export LK_THREADS=12 LVLLM_GPU_RESIDENT_ROUTING_STATS={routing}")
    script.write_text(text)
    for counts, message in (([1] * 255 + [-1], "layer 3, expert 255: '-1' is not a count"),
                            ([1] * 256, None)):
        routing.write_text(json.dumps({"3": counts}))
        code, errors = check_launch(capsys, script)
        assert (code, bool(errors)) == ((1, True) if message else (0, False)), errors
        assert message is None or message in errors[0]
    routing.unlink()
    code, errors = check_launch(capsys, script)
    assert code == 1 and "LVLLM_GPU_RESIDENT_ROUTING_STATS=" in errors[0] and "No such file" in errors[0], errors


def test_an_args_array_built_in_steps_reads_as_bash_passes_it(tmp_path: Path) -> None:
    script = tmp_path / "serve.sh"
    script.write_text('#!/bin/bash\nargs=(--port 8000)\nargs+=(--max-num-seqs 4)\ndeclare -rx LK_THREADS=3\n'
                      'PORT_NAME=dsv4\nexec vllm serve /m "${args[@]}" --served-model-name "$PORT_NAME" '
                      '--speculative-config.draft_depth.policy fixed --speculative_config.draft_depth.graph_depths [2]\n')
    read = script_reader.read(script.read_text())
    assert read.argv[:5] == run_script(script, tmp_path)[1:6] and not read.problems
    assert read.env["LK_THREADS"] == "3" and read.options["--max-num-seqs"] == "4"
    assert json.loads(read.options["--speculative-config"]) == {"draft_depth": {"policy": "fixed", "graph_depths": [2]}}


# ---- plan's options that cannot go together, and a model that reads as an option


@pytest.mark.parametrize(("args", "message"), [
    (["--model=--trust-remote-code"], "--model '--trust-remote-code': starts with '-', so `vllm serve` would read it"),
    (["--model=-m"], "--model '-m': starts with '-'"),
    (["--check-launch", "serve.sh"], "--launch s.sh with --check-launch serve.sh: one writes a script"),
])
def test_launch_refuses_what_it_cannot_write(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch, args: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "serve.sh").write_text("vllm serve /m\n")
    before = listing(tmp_path)
    assert message in refused(capsys, "plan", "--launch", "s.sh", *args)
    assert listing(tmp_path) == before


# ---- what the tool drives, it distrusts: the timing worker's answers, a profile


WORKER = """#!{python}
import sys
from pathlib import Path

if sys.argv[1] == "-c":  # measure's check that this Python has lk_moe
    sys.exit(0)
print((Path(__file__).parent / "answer.txt").read_text())
"""
GOOD_CASES = [{"tokens": t, "ms": 1.0 + t / 10, "calls": 9, "distinct": 2.0, "repeats": [1.0 + t / 10] * 3}
              for t in (1, 2, 3, 4, 6)]


@pytest.mark.parametrize(("answer", "message"), [
    ({"threads": 1, "ram_gbs": 10.0, "path": "cpu_prefill", "cases": []}, "answered no cases"),
    ({"threads": 1, "ram_gbs": 10.0, "path": "cpu_prefill", "cases": [{**GOOD_CASES[0], "ms": 0}, *GOOD_CASES[1:]]},
     "answered at 1 tokens {'ms': 0, 'distinct': 2.0}: times and distinct experts must be finite and above 0"),
    ('{"threads": 1, "ram_gbs": NaN, "path": "cpu_prefill", "cases": []}', "answered no JSON (ram_gbs: nan is not a finite"),
    ({"threads": 1, "ram_gbs": 0, "path": "cpu_prefill", "cases": GOOD_CASES}, "answered RAM bandwidth 0: not a finite"),
    ({"threads": 1, "ram_gbs": 9.0, "path": "cpu_prefill", "cases": GOOD_CASES[:2]}, "answered cases for other token counts"),
    ('{"threads": 1, "cases": ' + "[" * 100 + "]" * 100 + "}", "answered no JSON (nested deeper than 32"),
])
def test_a_timing_worker_s_bad_answer_is_one_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   answer: object, message: str) -> None:
    python = tmp_path / "python"
    python.write_text(WORKER.format(python=sys.executable))
    python.chmod(0o755)
    (tmp_path / "answer.txt").write_text(answer if isinstance(answer, str) else json.dumps(answer))
    (tmp_path / "c.json").write_text(EXAMPLE.read_text())
    code = main(["plan", "--measure", "--config", str(tmp_path / "c.json"), "--python", str(python), "--threads", "1",
                 "--budget", "1", "--profile-out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 1 and "Traceback" not in err and len(errors) == 1, err
    assert "the timing worker (vllm_ds4x.measure.worker) with LK_THREADS=1 " + message in errors[0], errors
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize(("measured", "message"), [
    ({"acceptance": {"reasoning": 5.0, "answer": 0.9}}, "measured.acceptance {'reasoning': 5.0, 'answer': 0.9}: expected"),
    ({"acceptance": {"reasoning": 0.0, "answer": 0.9}}, "expected rates in (0, 1) for reasoning and answer"),
    ("fast", "no \"draft_depth\" and \"measured\" objects"),
])
def test_a_profile_out_of_range_gives_no_advice(tmp_path: Path, capsys: pytest.CaptureFixture[str], measured: object,
                                               message: str) -> None:
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"draft_depth": {"policy": "adaptive", "step_cost": [1.0, 1.2, 1.3]},
                                   "measured": measured}))
    script = hand_written(tmp_path, 12)
    message_line = refused(capsys, "plan", "--check-launch", str(script), "--profile", str(profile), "--cores", "16")
    assert f"--profile {profile}: not a plan --measure profile: " in message_line and message in message_line
    assert "infx" not in message_line


# ---- the bench commands are tools too: bad counts, profiles and run folders end in one line


RUN = HOME.root / "bench" / "results" / "h100-dsv4-e2e"  # a committed run every command below reads


def bench_run(capsys: pytest.CaptureFixture[str], command: Callable[[list[str]], int | None],
              *argv: str) -> tuple[int, str]:
    """A bench command's exit code and its one error line (FAIL: or argparse's error:)."""
    try:
        code = int(command(list(argv)) or 0)
    except SystemExit as e:
        code = int(e.code or 0)
    captured = capsys.readouterr()
    said = [line for line in (captured.err + captured.out).splitlines() if line.startswith(("FAIL", "error:"))
            or ": error:" in line]
    assert "Traceback" not in captured.err and len(said) == 1, captured
    return code, said[0]


def a_run(tmp_path: Path, base: Path, edit: Callable[[dict[str, Any]], Any] | None = None,
          text: str | None = None) -> Path:
    """A copy of the committed run `base` whose e2e-spec.json is `edit`ed (or replaced by `text`)."""
    run = tmp_path / "run"
    run.mkdir()
    for path in base.glob("*.json"):
        (run / path.name).write_bytes(path.read_bytes())
    spec = json.loads((base / "e2e-spec.json").read_text())
    (run / "e2e-spec.json").write_text(text if text is not None else json.dumps(edit(spec) if edit else spec))
    return run


DEEP = "[" * 200 + "]" * 200


@pytest.mark.parametrize(("module", "args", "message"), [
    ("depth_sim", ["--seeds", "0"], "argument --seeds: '0': expected a whole number in 1..10000"),
    ("depth_sim", ["--reasoning-tokens", "0"], "argument --reasoning-tokens: '0': expected a whole number"),
    ("depth_sim", ["--gpu-ms", "nan"], "argument --gpu-ms: 'nan': expected a number in [0, 60000]"),
    ("adaptive_cells", ["RUN", "--seeds", "0"], "argument --seeds: '0': expected a whole number in 1..10000"),
    ("adaptive_cells", ["RUN", "--rounds", "0"], "argument --rounds: '0': expected a whole number in 1..1000"),
    ("adaptive_mixed", ["RUN", "--steps", "0"], "argument --steps: '0': expected a whole number in 1..1000000"),
    ("e2e_decode", ["RUN", "--seeds", "0"], "argument --seeds: '0': expected a whole number in 1..10000"),
])
def test_bench_counts_of_zero_are_refused(capsys: pytest.CaptureFixture[str], module: str, args: list[str],
                                          message: str) -> None:
    command = importlib.import_module(f"bench.{module}").main
    code, line = bench_run(capsys, command, *[str(RUN) if a == "RUN" else a for a in args])
    assert code == 2 and message in line, line


@pytest.mark.parametrize(("profile", "message"), [
    ("/dev/zero", "not a regular file (a pipe or a device)"),
    ("fifo", "not a regular file (a pipe or a device)"),
    ("missing.json", "missing.json: not found"),
    ('{"measured": {"step_seconds": [0.1, NaN, 0.2]}}', "measured.step_seconds[1]: nan is not a finite number"),
    ('{"measured": {"step_seconds": [0.1, 0.0, 0.2], "acceptance": {}}}', "measured.step_seconds [0.1, 0.0, 0.2]"),
    ('{"measured": {"step_seconds": [0.1, 0.2], "acceptance": {"reasoning": 2}}}', "measured.acceptance"),
    ('{"measured": ' + DEEP + "}", "nested deeper than 32"),
])
def test_depth_sim_s_profile_is_checked_before_use(tmp_path: Path, capsys: pytest.CaptureFixture[str], profile: str,
                                                   message: str) -> None:
    path = Path(profile) if profile.startswith("/") else tmp_path / profile
    if profile == "fifo":
        os.mkfifo(path)
    elif profile.startswith("{"):
        path = tmp_path / "p.json"
        path.write_text(profile)
    code, line = bench_run(capsys, depth_sim.main, "--profile", str(path), "--seeds", "1")
    assert code == 1 and line.startswith(f"FAIL: {path}: ") and message in line, line


@pytest.mark.parametrize(("edit", "text", "message"), [
    (None, DEEP, "e2e-spec.json: nested deeper than 32"),
    (lambda spec: {**spec, "cells": [{**spec["cells"][0], "tok_s": math.nan}]}, None, "cells[0].tok_s: nan is not a"),
    (lambda spec: [spec], None, ""),
    (lambda spec: {**spec, "cells": 5}, None, ""),
    (lambda spec: {**spec, "cells": [{"policy": "adaptive"}]}, None, ""),
])
@pytest.mark.parametrize("module", ["e2e_decisions", "mixed_pairs", "side_by_side", "e2e_decode", "adaptive_mixed",
                                    "adaptive_cells"])
def test_a_run_folder_of_the_wrong_shape_is_one_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str], module: str,
                                                     edit: Callable[[dict[str, Any]], Any] | None, text: str | None,
                                                     message: str) -> None:
    run = a_run(tmp_path, RUN.with_name("h200-upstream-side-by-side") if module == "side_by_side" else RUN, edit, text)
    before = listing(run)
    extra = {"e2e_decode": ["--spec-only", "--seeds", "1"], "adaptive_mixed": ["--seeds", "1", "--steps", "5"],
             "adaptive_cells": ["--seeds", "1", "--rounds", "1"]}.get(module, [])
    code, line = bench_run(capsys, importlib.import_module(f"bench.{module}").main, str(run), *extra)
    assert code == 1 and (str(run) in line or "e2e-spec.json" in line) and message in line, line
    assert listing(run) == before
