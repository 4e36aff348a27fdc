"""The scripts that read a committed run and print lines: their lines, or one FAIL naming the run and why."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm_ds4x import bounded

MAX_SEEDS = 10_000  # simulated runs a command averages (--seeds): 0 would divide by none, more never ends
MAX_COUNT = 10**6  # steps or tokens a command simulates: far above any run
MAX_ROUNDS = 1000  # rounds a command replays, and requests it runs together
READ_ERRORS = (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, ZeroDivisionError)
"""what a run folder raises where a command reads it and it is not of the shape the run writes (ValueError:
bounded's BoundError among them: NaN, nested too deep, not JSON)"""


def read_json(path: Path) -> Any:
    """A run's JSON file, bounded (vllm_ds4x.bounded.read_json); ValueError names the file."""
    try:
        return bounded.read_json(path)
    except bounded.BoundError as e:
        raise ValueError(f"{path.name}: {e}") from None


def failed(resdir: Path, e: Exception) -> int:
    """One FAIL line naming the run and why (a missing field by name); exit status 1."""
    why = f"no field {e} where this command reads one: not the shape a run writes" if isinstance(e, KeyError) else \
        f"{type(e).__name__}: {e}" if isinstance(e, (TypeError, IndexError, AttributeError, ZeroDivisionError)) else str(e)
    print(f"FAIL: {resdir}: {why[:300]}", file=sys.stderr)
    return 1


def print_or_fail(resdir: Path, make: Callable[[], list[str]],
                  errors: tuple[type[Exception], ...] = READ_ERRORS) -> int:
    """Print what `make` returns (exit status 0), or, on one of `errors`, FAIL: the run and why (1)."""
    try:
        print("\n".join(make()))
    except errors as e:
        return failed(resdir, e)
    return 0
