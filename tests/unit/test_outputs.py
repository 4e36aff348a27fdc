"""No command writes over a file without --force, nor onto one of its own inputs
(through links too), and each output is checked before the work that fills it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ds4x.cli import main
from ds4x.deploy.plan import EXAMPLE
from vllm_ds4x.measure import cli as measure_cli


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and not p.is_symlink()}


def setup(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text(EXAMPLE.read_text())
    (tmp_path / "old.sh").write_text("mine\n")
    (tmp_path / "p.json").write_text("{}\n")
    (tmp_path / "link.sh").symlink_to(tmp_path / "c.json")
    os.link(tmp_path / "c.json", tmp_path / "hard.json")


CASES = [
    (["--launch", "old.sh"], "--launch old.sh: exists; give a new file, or add --force"),
    (["--launch", "c.json", "--force"], "--launch c.json: the same file as --config c.json"),
    (["--launch", "link.sh", "--force"], "--launch link.sh: the same file as --config c.json"),
    (["--launch", "hard.json", "--force"], "--launch hard.json: the same file as --config c.json"),
    (["--launch", "new.sh", "--routing-stats", "new.sh"], "--launch new.sh: the same file as --routing-stats new.sh"),
    (["--measure", "--profile-out", "p.json"], "--profile-out p.json: exists; give a new file, or add --force"),
    (["--measure", "--profile-out", "c.json", "--force"], "--profile-out c.json: the same file as --config c.json"),
    (["--measure", "--launch", "x.json", "--profile-out", "x.json"], "--profile-out x.json: the same file as --launch"),
    (["--launch", "nope/x.sh"], "--launch: 'nope/x.sh': folder nope does not exist"),
    (["--check-launch", "old.sh", "--write", "p.json", "--profile", "p.json", "--force"],
     "--write p.json: the same file as --profile p.json"),
]


@pytest.mark.parametrize(("args", "message"), CASES)
def test_outputs_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch, args: list[str], message: str) -> None:
    setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = files(tmp_path)
    try:
        code = main(["plan", "--config", "c.json", "--python", "/nonexistent/python", *args])
    except SystemExit as e:
        code = int(e.code or 0)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and "Traceback" not in err and len(lines) == 1 and message in lines[0], err
    assert files(tmp_path) == before


def test_force_writes_over_a_file_that_is_no_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "--config", "c.json", "--launch", "old.sh", "--force"]) == 0
    assert "vllm serve" in (tmp_path / "old.sh").read_text()
    assert not [p for p in tmp_path.iterdir() if ".part-" in p.name]


def test_measure_alone_refuses_its_config_as_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.json"
    config.write_text(json.dumps(json.loads(EXAMPLE.read_text())))
    before = config.read_bytes()
    assert measure_cli.main(["--config", str(config), "--profile-out", str(config), "--force"]) == 2
    err = capsys.readouterr().err
    assert f"--profile-out {config}: the same file as --config {config}" in err and len(err.splitlines()) == 1
    assert config.read_bytes() == before
