"""Figures a markdown file quotes in its tables, read as numbers.

A test finds a table row by a key cell (a results folder's name, a step count), reads the numbers in
its cells and compares them with what the results data gives, each within the rounding of its
quote. Rewording a doc never fails a test; a figure that no longer matches its data does."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

NUMBER = re.compile(r"(?:(?<![\w.])[-+])?\d+(?:\.\d+)?")  # a sign only where no digit comes before it


def tables(path: Path) -> list[list[list[str]]]:
    """Every table of a markdown file, as rows of stripped cells, its header first; separators left out."""
    found: list[list[list[str]]] = []
    inside = False
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not (len(line) > 1 and line[0] == line[-1] == "|"):
            inside = False
            continue
        if not inside:
            found.append([])
            inside = True
        if not set(line) <= set("|-: "):
            found[-1].append([cell.strip() for cell in line[1:-1].split("|")])
    return found


def row(path: Path, *keys: str, column: str | None = None) -> list[str]:
    """The one row whose leading cells contain `keys` in order (each a substring of its cell), in the
    tables whose header has a cell `column` (any table where None)."""
    found = [r for table in tables(path) if column is None or column in table[0]
             for r in table[1:] if len(r) >= len(keys) and all(k in c for k, c in zip(keys, r))]
    assert len(found) == 1, f"{path.name}: {len(found)} table rows for {keys}, want 1"
    return found[0]


def numbers(text: str) -> list[str]:
    """The numbers in `text` as written, units dropped: `+0.2%` is +0.2; `0+2 64%` is 0, 2, 64; `[1.0-1.1]`
    is 1.0, 1.1."""
    return NUMBER.findall(text)


def agrees(quoted: str, value: float) -> bool:
    """A figure quoted with d decimals is `value` rounded to d decimals (half a unit of its last digit)."""
    decimals = len(quoted.partition(".")[2])
    return abs(float(quoted) - value) <= 0.5 * 10.0 ** -decimals + 1e-9


def assert_quotes(text: str, values: Sequence[float | str]) -> None:
    """Every number in `text` is the matching one of `values` (a float, or a figure a script printed)."""
    quoted = numbers(text)
    assert len(quoted) == len(values), f"{text!r} quotes {len(quoted)} numbers, the data gives {len(values)}"
    for q, v in zip(quoted, values):
        assert agrees(q, float(v)), f"{text!r}: {q} quoted, the data gives {v}"
