"""Progress of a long inner run (vLLM's own tests, minutes a tree) on the terminal, while pytest
captures the test's own output: a line a minute per run still going, read from its log."""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

Say = Callable[[str], None]
EVERY_S = 60.0
_PERCENT = re.compile(r"^([.FEsxX]+)\s+\[\s*(\d+)%\]$", re.M)


def silent(line: str) -> None:
    """A reporter that says nothing (a caller with no terminal)."""


def reporter(config: pytest.Config) -> Say:
    """Lines written to pytest's terminal past its capture, as -s would show them."""
    capture = config.pluginmanager.getplugin("capturemanager")
    terminal = config.pluginmanager.getplugin("terminalreporter")

    def say(line: str) -> None:
        if terminal is None:
            return
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            terminal.write_line(line)

    return say


def read(log: Path) -> str:
    """`37% (412 tests: 3 failed, 120 skipped)` from a `pytest -q` log, or `starting` before its first line
    of results."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "starting"
    lines = _PERCENT.findall(text)
    if not lines:
        return "starting"
    marks = "".join(marks for marks, _ in lines)
    failed, skipped = sum(map(marks.count, "FE")), marks.count("s")
    return f"{lines[-1][1]}% ({len(marks)} tests: {failed} failed, {skipped} skipped)"


def wait(process: subprocess.Popen[bytes], timeout: float, what: str, logs: dict[str, Path], say: Say,
         clock: Callable[[], float] = time.monotonic) -> int:
    """`process`'s exit code, within `timeout` s (subprocess.TimeoutExpired past it); every EVERY_S
    meanwhile, a line per log of how far each run has got."""
    start = clock()
    while True:
        left = start + timeout - clock()
        try:
            return process.wait(timeout=max(0.0, min(EVERY_S, left)))
        except subprocess.TimeoutExpired:
            if left <= EVERY_S:
                raise
            minutes = (clock() - start) / 60
            for tree, log in logs.items():
                say(f"  {what} ({tree}): {read(log)}, {minutes:.0f} min")
