"""The one way ds4x runs another program (pip; git goes through GitPython, see
gitops.run): logged at -v, its output streamed when verbose, a failure raised as
a Ds4xError with the command and the tail of its output."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from ds4x.errors import Ds4xError
from ds4x.log import logger


def run(cmd: list[str], hint: str, env: dict[str, str] | None = None, check: bool = True,
        capture: bool = False) -> subprocess.CompletedProcess[str]:
    """Run `cmd`; with -v its output goes to the terminal as it comes, else it is
    kept for the error message (capture: always kept, for a caller that reads it).
    check=False: return whatever it did."""
    logger.debug("  $ %s", " ".join(cmd))
    verbose = logger.isEnabledFor(logging.DEBUG) and not capture
    done = subprocess.run(cmd, env=env or os.environ.copy(), text=True,
                          stdout=sys.stderr if verbose else subprocess.PIPE,
                          stderr=sys.stderr if verbose else subprocess.PIPE)
    if check and done.returncode:
        tail = "\n".join(((done.stdout or "") + (done.stderr or "")).strip().splitlines()[-20:])
        raise Ds4xError(f"{' '.join(cmd[:4])} ... failed (exit {done.returncode})" + (f":\n{tail}" if tail else ""), hint)
    return done
