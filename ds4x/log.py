"""One `ds4x` logger, timed steps and progress bars that respect -q and TTYs; where output is
not a terminal (a captured log), each download is one line instead of a bar."""

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
    """`* title` ... `  ✓ title: 1.2s` (or `✗ title: failed after`), like cibuildwheel; the end
    names its step, so that a log with other lines between still reads."""
    logger.info("* %s", title)
    start = time.monotonic()
    try:
        yield
    except BaseException:
        logger.info(_colour("  ✗ %s: failed after %.1fs", "31"), title, time.monotonic() - start)
        raise
    logger.info(_colour("  ✓ %s: %.1fs", "32"), title, time.monotonic() - start)


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


def size_text(size: int) -> str:
    """`12.3 MiB`, `1.20 GiB`, `512 B`."""
    if size >= 2**30:
        return f"{size / 2**30:.2f} GiB"
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size} B" if size < 2**10 else f"{size / 2**10:.1f} KiB"


def downloaded(name: str, size: int, seconds: float) -> None:
    """One line a finished download where no progress bar showed it (stderr not a terminal)."""
    if not sys.stderr.isatty():
        logger.info("  downloaded %s: %s in %.1fs", name, size_text(size), seconds)
