"""docs/results.md indexes bench/results/: one row for every folder there, none for a folder that is
not, each marked current, superseded (by a folder that exists) or diagnostic."""

from __future__ import annotations

import re
from pathlib import Path

from tests.doc_figures import tables

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
STATUS = re.compile(r"(current|diagnostic)( \(.+\))?|superseded by `([\w.-]+)`")


def index() -> dict[str, str]:
    """Each indexed folder's status cell."""
    rows = [r for t in tables(ROOT / "docs" / "results.md") if t[0][:1] == ["run"] and t[0][-1] == "status"
            for r in t[1:]]
    folders = [r[0].strip("`") for r in rows]
    assert len(folders) == len(set(folders)), "a folder indexed twice"
    return {folder: r[-1] for folder, r in zip(folders, rows)}


def test_the_index_lists_exactly_the_result_folders() -> None:
    indexed, folders = set(index()), {p.name for p in RESULTS.iterdir() if p.is_dir()}
    assert not folders - indexed, f"bench/results/ folders with no row in docs/results.md: {sorted(folders - indexed)}"
    assert not indexed - folders, f"docs/results.md rows for no folder in bench/results/: {sorted(indexed - folders)}"


def test_each_run_is_current_superseded_by_a_run_or_diagnostic() -> None:
    indexed = index()
    for folder, status in indexed.items():
        got = STATUS.fullmatch(status)
        assert got, f"{folder}: status {status!r}"
        assert got[3] is None or (got[3] in indexed and got[3] != folder), f"{folder}: superseded by {got[3]}?"
