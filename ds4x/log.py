"""One `ds4x` logger, timed steps and progress bars that respect -q and TTYs."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tqdm import tqdm

logger = logging.getLogger("ds4x")


def setup(verbosity: int) -> None:
    """-q gives warnings only, default info, -v debug (git commands too)."""
    level = {-1: logging.WARNING, 0: logging.INFO}.get(verbosity, logging.DEBUG)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False


def _colour(text: str, code: str) -> str:
    if sys.stderr.isatty() and "NO_COLOR" not in os.environ:
        return f"\033[{code}m{text}\033[0m"
    return text


@contextlib.contextmanager
def step(title: str) -> Iterator[None]:
    """`* title` ... `  done in 1.2s` (or `failed after`), like cibuildwheel."""
    logger.info("* %s", title)
    start = time.monotonic()
    try:
        yield
    except BaseException:
        logger.info(_colour("  ✗ failed after %.1fs", "31"), time.monotonic() - start)
        raise
    logger.info(_colour("  ✓ %.1fs", "32"), time.monotonic() - start)


def progress(total: int | None, desc: str, unit: str = "B") -> tqdm[Any]:
    """A byte progress bar on stderr, hidden under -q or when not a TTY."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=f"  {desc}",
        unit=unit,
        unit_scale=True,
        leave=False,
        file=sys.stderr,
        disable=not sys.stderr.isatty() or logger.level > logging.INFO,
    )
