"""dist/constraints.txt's first line is the install command that checks the hashes (`-r`, as `wheel`
prints it), and a dist/ that an earlier build headed with its own first line is still ours."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from ds4x.build import wheel


def test_the_header_installs_with_r_and_hash_checking() -> None:
    words = shlex.split(wheel.CONSTRAINTS_HEADER.removeprefix("# ds4x wheels, pinned by hash: "))
    assert words[:2] == ["pip", "install"] and words[-2:] == ["-r", "dist/constraints.txt"]
    assert {"--no-deps", "--require-hashes", "--no-index"} <= set(words) and "-c" not in words
    assert words[words.index("--find-links") + 1] == "dist"


@pytest.mark.parametrize(("first", "ours"), [(wheel.CONSTRAINTS_HEADER, True), (wheel.EARLIER_HEADERS[0], True),
                                             ("# my pins\n", False), ("", False)])
def test_a_dist_headed_by_any_of_our_headers_is_ours(tmp_path: Path, first: str, ours: bool) -> None:
    (tmp_path / "constraints.txt").write_text(first + "demo==1.0 --hash=sha256:" + "0" * 64 + "\n")
    assert wheel.made_by_ds4x(tmp_path) is ours
    assert wheel.made_by_ds4x(tmp_path / "none") is False


def test_a_rewrite_heads_the_file_with_todays_header(tmp_path: Path) -> None:
    (tmp_path / "constraints.txt").write_text(wheel.EARLIER_HEADERS[0] + "demo==1.0 --hash=sha256:" + "0" * 64 + "\n")
    path = wheel.write_constraints(tmp_path, [])
    assert path.read_text().splitlines() == [wheel.CONSTRAINTS_HEADER.rstrip("\n"), "demo==1.0 --hash=sha256:" + "0" * 64]
