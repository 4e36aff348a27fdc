"""A usage error is said as every other error is: one `error:` line and a `hint:` naming --help,
exit 2, no usage block."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ds4x.checkout import HOME
from ds4x.cli import main


@pytest.mark.parametrize(("argv", "error", "hint"), [
    ([], "error: the following arguments are required: command", "build.py COMMAND --help"),
    (["nope"], "error: argument command: invalid choice: 'nope'", "build.py --help"),
    (["wheel", "--bogus"], "error: unrecognized arguments: --bogus", "build.py COMMAND --help"),
    (["plan", "--gpu-mem", "32X"], "error: argument --gpu-mem: '32X': unknown unit 'X'", "build.py plan --help"),
    (["plan", "--tp"], "error: argument --tp: expected one argument", "build.py plan --help"),
    (["roll", "-t", "vllm"], "error: the following arguments are required: --to", "build.py roll --help"),
])
def test_one_line_and_a_hint(capsys: pytest.CaptureFixture[str], argv: list[str], error: str, hint: str) -> None:
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0].startswith(error) and lines[1].startswith("hint: "), lines
    assert hint in lines[1] and "--help" in lines[1]


def test_build_py_says_it_in_two_lines() -> None:
    done = subprocess.run([sys.executable, HOME.root / "build.py", "plan", "--max-num-seqs", "x"],
                          capture_output=True, text=True, cwd=HOME.root)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == ["error: argument --max-num-seqs: 'x': expected a whole number in 1..1024",
                                        "hint: build.py plan --help lists the options"]


def test_help_is_still_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["wheel", "--help"])
    assert exit.value.code == 0 and capsys.readouterr().out.startswith("usage: build.py wheel")
