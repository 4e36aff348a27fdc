"""Findings read at about 100 columns: `plan --check-launch` in a terminal (one finding a line where
its output is piped, for grep), and the comments `--write` adds; no word or JSON token is split."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ds4x.cli import main
from ds4x.deploy import wrap
from ds4x.deploy.script_writer import MARK
from tests.serve_script import SPEC, USERS

LONG = 'fixed 2 verifies drafts while reasoning too: add "draft_depth": ' + json.dumps(
    {"policy": "phase", "reasoning_depth": 0, "answer_depth": 2, "verify": "request"}) + " " + "word " * 60


def unwrapped(lines: list[str], first: str, rest: str) -> str:
    return " ".join([lines[0].removeprefix(first), *(line.removeprefix(rest) for line in lines[1:])])


def test_lines_wrap_at_the_width_and_keep_every_word() -> None:
    lines = wrap.lines(LONG, "warning: ")
    assert len(lines) > 3 and all(len(line) <= wrap.WIDTH for line in lines)
    assert all(line.startswith("  ") for line in lines[1:])
    assert unwrapped(lines, "warning: ", "  ") == " ".join(LONG.split())
    path = "/a/" + "b" * 150
    assert wrap.lines(f"see {path} now", "error: ") == ["error: see", f"  {path}", "  now"]  # never cut
    assert wrap.lines("", "error: ") == ["error:"]


def test_a_comment_is_shell_comment_lines() -> None:
    text = wrap.comment(LONG, MARK)
    lines = text.splitlines()
    assert text.endswith("\n") and lines[0].startswith(f"{MARK} fixed 2") and len(lines) > 3
    assert all(line.startswith(wrap.CONTINUED) and len(line) <= wrap.WIDTH for line in lines[1:])
    assert unwrapped(lines, f"{MARK} ", wrap.CONTINUED) == " ".join(LONG.split())


def script(tmp_path: Path) -> Path:
    path = tmp_path / "serve.sh"
    path.write_text(USERS.format(threads=16, spec=SPEC))  # LK_THREADS=16 of 16, fixed 2: long findings
    return path


def test_check_launch_wraps_in_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    main(["plan", "--check-launch", str(script(tmp_path)), "--cores", "16"])
    piped = capsys.readouterr().out.splitlines()
    findings = [line for line in piped if line.startswith(("warning: ", "error: "))]
    assert max(map(len, findings)) > 300  # one finding a line where piped
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    main(["plan", "--check-launch", str(script(tmp_path)), "--cores", "16"])
    shown = capsys.readouterr().out.splitlines()
    assert all(len(line) <= wrap.WIDTH for line in shown), max(shown, key=len)
    starts = [i for i, line in enumerate(shown) if line.startswith(("warning: ", "error: "))]
    assert len(starts) == len(findings)
    for start, finding in zip(starts, findings):
        end = next(i for i in range(start + 1, len(shown) + 1) if i == len(shown) or not shown[i].startswith("  "))
        kind = finding.split(": ", 1)[0] + ": "
        assert kind + unwrapped(shown[start:end], kind, "  ") == " ".join(finding.split())


def test_write_adds_comments_of_100_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fixed.sh"
    assert main(["plan", "--check-launch", str(script(tmp_path)), "--cores", "16", "--write", str(out)]) == 0
    findings = [line.split(": ", 1)[1] for line in capsys.readouterr().out.splitlines() if line.startswith("warning: ")]
    lines = out.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(MARK)]
    assert starts and all(len(line) <= wrap.WIDTH for line in lines if line.startswith((MARK, wrap.CONTINUED)))
    comments = []
    for start in starts:
        end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(wrap.CONTINUED))
        comments.append(unwrapped(lines[start:end], f"{MARK} ", wrap.CONTINUED))
    advice = next(f for f in findings if "draft_depth" in f)
    assert any(comment.endswith(" ".join(advice.split())) for comment in comments), comments
