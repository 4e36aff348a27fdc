"""The scripts that read a committed run and print lines: their lines, or one FAIL naming the run and why."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def print_or_fail(resdir: Path, make: Callable[[], list[str]],
                  errors: tuple[type[Exception], ...] = (ValueError,)) -> int:
    """Print what `make` returns (exit status 0), or, on one of `errors`, FAIL: the run and why (1)."""
    try:
        print("\n".join(make()))
    except errors as e:
        print(f"FAIL: {resdir}: {e}", file=sys.stderr)
        return 1
    return 0
