"""The long inner runs of vLLM's own tests report how far they have got, a line a minute, on the
terminal past pytest's capture (tests/integration/progress.py); what the runs assert is unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ds4x.checkout import HOME
from tests.integration import progress

LOG = """============================= test session starts ==============================
..........s.....F........................................................ [ 12%]
sssss.........E.......................................................... [ 25%]
"""


def test_a_log_reads_as_its_share_and_counts(tmp_path: Path) -> None:
    log = tmp_path / "log"
    assert progress.read(log) == "starting"
    log.write_text("============================= test session starts ===\ncollecting ...\n")
    assert progress.read(log) == "starting"
    log.write_text(LOG)
    assert progress.read(log) == "25% (146 tests: 2 failed, 6 skipped)"


class Finishing:
    """A process still running for `polls` waits (each takes its whole timeout on the clock), then exits 1."""

    def __init__(self, polls: int) -> None:
        self.polls, self.timeouts, self.now = polls, list[float](), 0.0

    def clock(self) -> float:
        return self.now

    def wait(self, timeout: float) -> int:
        self.timeouts.append(timeout)
        if len(self.timeouts) <= self.polls:
            self.now += timeout
            raise subprocess.TimeoutExpired("pytest", timeout)
        return 1


def test_waiting_says_a_line_a_minute_for_each_run(tmp_path: Path) -> None:
    (tmp_path / "log").write_text(LOG)
    said: list[str] = []
    process = Finishing(polls=2)
    logs = {"unpatched": tmp_path / "log", "patched": tmp_path / "none"}
    code = progress.wait(process, 1800, "vLLM's tests", logs, said.append, process.clock)  # type: ignore[arg-type]
    assert code == 1
    assert said == ["  vLLM's tests (unpatched): 25% (146 tests: 2 failed, 6 skipped), 1 min",
                    "  vLLM's tests (patched): starting, 1 min",
                    "  vLLM's tests (unpatched): 25% (146 tests: 2 failed, 6 skipped), 2 min",
                    "  vLLM's tests (patched): starting, 2 min"]
    assert process.timeouts == [progress.EVERY_S] * 3


def test_past_its_time_the_wait_raises() -> None:
    process = Finishing(polls=100)
    with pytest.raises(subprocess.TimeoutExpired):
        progress.wait(process, 150, "x", {}, progress.silent, process.clock)  # type: ignore[arg-type]
    assert process.timeouts == [60.0, 60.0, 30.0]  # the last poll only as long as the time left


def test_the_line_shows_while_pytest_captures(tmp_path: Path) -> None:
    test = tmp_path / "test_said.py"
    test.write_text("import pytest\nfrom tests.integration import progress\n\n\n"
                    "def test_says(pytestconfig: pytest.Config) -> None:\n"
                    "    print('captured, not shown')\n"
                    "    progress.reporter(pytestconfig)('  vLLM tests (patched): 12%')\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", tmp_path,
                           "-c", "/dev/null", test], capture_output=True, text=True, cwd=HOME.root,
                          env={"PYTHONPATH": str(HOME.root), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "  vLLM tests (patched): 12%" in done.stdout and "captured, not shown" not in done.stdout
