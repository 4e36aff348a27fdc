"""Findings as lines of about WIDTH columns: `plan --check-launch`'s in a terminal, and the comments
`--write` adds to a script. Words are never split, so a JSON object or a path wraps between tokens
and stays what it was when copied."""

from __future__ import annotations

import textwrap

WIDTH = 100
CONTINUED = "#   "
"""how the comment lines after the first start"""


def lines(text: str, first: str, rest: str = "  ", width: int = WIDTH) -> list[str]:
    """`first` + `text` (its runs of whitespace as one space), wrapped at `width`; the lines after
    the first start with `rest`. A word longer than a line gets a line of its own."""
    return textwrap.wrap(" ".join(text.split()), width, initial_indent=first, subsequent_indent=rest,
                         break_long_words=False, break_on_hyphens=False) or [first.rstrip()]


def comment(text: str, first: str = "#") -> str:
    """`text` as shell comment lines, the first starting with `first` (a comment itself), each
    line after it with CONTINUED; every line ends with a newline."""
    return "".join(f"{line}\n" for line in lines(text, f"{first} ", CONTINUED))
