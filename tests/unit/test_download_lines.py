"""Progress in a captured log: each download is one line (name, size, time) where stderr is not a
terminal (a terminal gets tqdm's bar instead), and a step's end names the step."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ds4x import log
from ds4x.build import sources


@pytest.fixture(autouse=True)
def logger_kept() -> Iterator[None]:
    """log.setup points the ds4x logger at this test's captured stderr: put it back after."""
    handlers, level = list(log.logger.handlers), log.logger.level
    yield
    log.logger.handlers[:] = handlers
    log.logger.setLevel(level)


def fetched(tmp_path: Path, capsys: pytest.CaptureFixture[str], size: int) -> str:
    log.setup(0)  # its handler writes to the captured stderr
    served = tmp_path / "served" / "demo-1.0-py3-none-any.whl"
    served.parent.mkdir()
    served.write_bytes(b"x" * size)
    sources.fetch_url(served.as_uri(), sources.Settings(cache=tmp_path / "cache"))
    return capsys.readouterr().err


def test_a_download_is_one_line_in_a_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = fetched(tmp_path, capsys, 3 * 2**20 + 2**19)
    assert re.fullmatch(r"  downloaded demo-1\.0-py3-none-any\.whl: 3\.5 MiB in \d+\.\ds\n", err), err


def test_a_terminal_gets_the_bar_not_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert "downloaded" not in fetched(tmp_path, capsys, 1000)


def test_quiet_says_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log.setup(-1)
    served = tmp_path / "f.bin"
    served.write_bytes(b"x")
    sources.fetch_url(served.as_uri(), sources.Settings(cache=tmp_path / "cache"))
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("size", "text"), [(512, "512 B"), (2048, "2.0 KiB"), (5 * 2**20, "5.0 MiB"),
                                            (3 * 2**30 // 2, "1.50 GiB")])
def test_size_text(size: int, text: str) -> None:
    assert log.size_text(size) == text


def test_a_step_ends_with_its_name(capsys: pytest.CaptureFixture[str]) -> None:
    log.setup(0)
    with log.step("fetch vllm @ 6e448d0"):
        pass
    with pytest.raises(KeyError), log.step("apply vllm"):
        raise KeyError
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "* fetch vllm @ 6e448d0" and re.fullmatch(r"  ✓ fetch vllm @ 6e448d0: \d+\.\ds", lines[1])
    assert lines[2] == "* apply vllm" and re.fullmatch(r"  ✗ apply vllm: failed after \d+\.\ds", lines[3])
