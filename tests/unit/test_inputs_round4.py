"""Round four of bad inputs (issue 60), one case per kind: each is refused with exit 1 or 2 and one
message naming the input, no traceback, nothing written or replaced."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ds4x.deploy.plan import EXAMPLE
from ds4x.errors import InputError
from ds4x.scratch import atomic_write
from tests.unit.test_input_checks import refused
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
