"""ds4x.build.series: the quilt series file and each patch's DEP-3 header, read and refused by file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds4x.build import series
from ds4x.errors import InputError

PATCH = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: A <a@b>
Date: Thu, 1 Jan 2026 00:00:00 +0000
Subject: demo: fix the lookup

Why it exists.

Origin: vendor
Forwarded: no
Applied-Upstream: 2.0

diff --git a/x b/x
"""


def write(folder: Path, lines: str, names: tuple[str, ...] = ("a.patch", "b.patch")) -> Path:
    for name in names:
        (folder / name).write_text(PATCH)
    (folder / "series").write_text(lines)
    return folder / "series"


def test_quilt_comments_and_blank_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "# why these\n\na.patch  # inline\n   \nb.patch\n")
    entries = series.parse_series(path)
    assert [(e.name, e.line) for e in entries] == [("a.patch", 3), ("b.patch", 5)]


def test_missing_series_is_empty(tmp_path: Path) -> None:
    assert series.parse_series(tmp_path / "series") == []


@pytest.mark.parametrize(
    ("line", "message", "hint"),
    [
        ("/etc/passwd", "series:2: '/etc/passwd' leaves the patch folder", "name a file"),
        ("../x.patch", "series:2: '../x.patch' leaves the patch folder", "name a file"),
        ("c.patch", "series:2: 'c.patch' not found", "run refresh, or delete the line"),
        ("a.patch", "series:2: 'a.patch' is listed twice", "delete one"),
        ("b.patch -p0", "series:2: 'b.patch -p0' has options", "-p1"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path: Path, line: str, message: str, hint: str) -> None:
    path = write(tmp_path, f"a.patch\n{line}\n")
    with pytest.raises(InputError) as caught:
        series.parse_series(path)
    assert str(caught.value) == f"{path.parent}/{message}"
    assert caught.value.hint and hint in caught.value.hint
    assert caught.value.exit_code == 2


def test_dep3_fields_are_read(tmp_path: Path) -> None:
    (entry,) = series.parse_series(write(tmp_path, "a.patch\n", ("a.patch",)))
    info = series.read_info(entry)
    assert info.subject == "demo: fix the lookup"
    assert info.fields == {"Origin": "vendor", "Forwarded": "no", "Applied-Upstream": "2.0"}
    assert info.applied_upstream == "2.0"


def test_missing_dep3_field_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.patch").write_text(PATCH.replace("Forwarded: no\n", ""))
    (tmp_path / "series").write_text("a.patch\n")
    (entry,) = series.parse_series(tmp_path / "series")
    with pytest.raises(InputError, match=r"a.patch: missing DEP-3 field\(s\) Forwarded"):
        series.read_info(entry)


def test_not_a_patch_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.patch").write_text("just text\n")
    (tmp_path / "series").write_text("a.patch\n")
    (entry,) = series.parse_series(tmp_path / "series")
    with pytest.raises(InputError, match="not a git format-patch file"):
        series.read_info(entry)


@pytest.mark.parametrize(
    ("subject", "name"),
    [
        ("flashinfer: match libcudart by exact name", "flashinfer-match-libcudart-by-exact-name.patch"),
        ("  Spec  decode: per-request K (v2)!", "spec-decode-per-request-k-v2.patch"),
    ],
)
def test_file_name_from_subject(subject: str, name: str) -> None:
    assert series.file_name(subject) == name


def test_write_series_keeps_header_comments(tmp_path: Path) -> None:
    path = tmp_path / "series"
    path.write_text("# keep me\n# and me\nold.patch\n")
    series.write_series(path, ["a.patch", "b.patch"])
    assert path.read_text() == "# keep me\n# and me\na.patch\nb.patch\n"
