"""atomic_write, atomic_path and atomic_dir: the new content lands whole when the block
ends well; a failed or interrupted block leaves the old content and no temporary file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ds4x.scratch import atomic_dir, atomic_path, atomic_write


def listing(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def test_atomic_write_replaces_the_file_whole(tmp_path: Path) -> None:
    dest = tmp_path / "constraints.txt"
    dest.write_text("old\n")
    with atomic_write(dest) as out:
        out.write("new ")
        assert dest.read_text() == "old\n"  # nothing shows before the block ends
        out.write("text\n")
    assert dest.read_text() == "new text\n" and listing(tmp_path) == ["constraints.txt"]
    with atomic_write(tmp_path / "sub" / "data.bin", "wb") as out:
        out.write(b"\0\1")
    assert (tmp_path / "sub" / "data.bin").read_bytes() == b"\0\1"


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, error: BaseException) -> None:
    dest = tmp_path / "pins.toml"
    dest.write_text("old\n")
    with pytest.raises(type(error)), atomic_write(dest) as out:
        out.write("half")
        raise error
    assert dest.read_text() == "old\n" and listing(tmp_path) == ["pins.toml"]
    with pytest.raises(type(error)), atomic_write(tmp_path / "new.txt") as out:
        raise error
    assert listing(tmp_path) == ["pins.toml"]


def test_atomic_path_has_the_file_s_own_name(tmp_path: Path) -> None:
    """WheelFile reads the wheel's name from the path it writes."""
    dest = tmp_path / "demo-1.0-py3-none-any.whl"
    with atomic_path(dest) as part:
        assert part.name == dest.name and part.parent.parent == tmp_path and part.parent.name.startswith(".")
        part.write_text("x")
        part.chmod(0o755)
    assert dest.read_text() == "x" and (dest.stat().st_mode & 0o777) == 0o755 and listing(tmp_path) == [dest.name]


def test_atomic_dir_replaces_the_folder_whole(tmp_path: Path) -> None:
    dest = tmp_path / "patches" / "vllm"
    dest.mkdir(parents=True)
    (dest / "old.patch").write_text("old")
    with atomic_dir(dest) as part:
        assert part == tmp_path / "patches" / "vllm.part" and listing(part) == []
        (part / "new.patch").write_text("new")
        assert listing(dest) == ["old.patch"]
    assert listing(tmp_path / "patches") == ["vllm", "vllm/new.patch"]
    with atomic_dir(tmp_path / "made" / "here") as part:  # no folder before: made, parents too
        (part / "a").write_text("a")
    assert listing(tmp_path / "made") == ["here", "here/a"]


@pytest.mark.parametrize("error", [RuntimeError("refused"), KeyboardInterrupt()])
def test_a_failed_block_leaves_the_old_folder_and_no_part(tmp_path: Path, error: BaseException) -> None:
    dest = tmp_path / "vllm"
    dest.mkdir()
    (dest / "old.patch").write_text("old")
    with pytest.raises(type(error)), atomic_dir(dest) as part:
        (part / "new.patch").write_text("new")
        raise error
    assert listing(tmp_path) == ["vllm", "vllm/old.patch"] and (dest / "old.patch").read_text() == "old"


def test_a_swap_that_fails_halfway_puts_the_old_folder_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "vllm"
    dest.mkdir()
    (dest / "old.patch").write_text("old")
    real = os.replace

    def first_rename_only(src: Path, dst: Path) -> None:
        if Path(src).name.endswith(".part"):
            raise KeyboardInterrupt  # between the two renames
        real(src, dst)

    monkeypatch.setattr(os, "replace", first_rename_only)
    with pytest.raises(KeyboardInterrupt), atomic_dir(dest) as part:
        (part / "new.patch").write_text("new")
    assert listing(tmp_path) == ["vllm", "vllm/old.patch"]


def test_what_a_killed_run_left_is_cleared_first(tmp_path: Path) -> None:
    """A stale .part is removed; a .old with no folder in its place (killed between the two
    renames) is the folder, put back before anything else."""
    dest = tmp_path / "vllm"
    (tmp_path / "vllm.part").mkdir()
    (tmp_path / "vllm.part" / "stale.patch").write_text("stale")
    (tmp_path / "vllm.old").mkdir()
    (tmp_path / "vllm.old" / "old.patch").write_text("old")
    with atomic_dir(dest) as part:
        assert listing(part) == [] and listing(tmp_path) == ["vllm", "vllm.part", "vllm/old.patch"]
        (part / "new.patch").write_text("new")
    assert listing(tmp_path) == ["vllm", "vllm/new.patch"]
