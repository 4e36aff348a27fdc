"""Ctrl-C or SIGTERM to the build's own process (not its group) while it repacks
the real vLLM wheel: exit 130 / 143, one line, no temporary tree left in TMPDIR and
nothing in dist/."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import CPU_ENGINE, ROOT

pytestmark = [pytest.mark.network, pytest.mark.slow]


def interrupted_build(tmp_path: Path, sig: signal.Signals, when: str) -> tuple[int, str]:
    """Start `wheel --target vllm`, send `sig` once its log shows `when`."""
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    # a shell that started this run in the background may have left SIGINT ignored; from a
    # terminal Ctrl-C reaches Python as KeyboardInterrupt, so the build starts with that handler
    start = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    build = subprocess.Popen([sys.executable, "-c", start, ROOT / "build.py", "wheel", "--target", CPU_ENGINE, "--dist",
                              tmp_path / "dist"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=env, cwd=ROOT)
    assert build.stdout
    seen, deadline = "", time.monotonic() + 600
    with selectors.DefaultSelector() as sel:
        sel.register(build.stdout, selectors.EVENT_READ)
        while when not in seen and time.monotonic() < deadline and build.poll() is None:
            if sel.select(timeout=1):
                seen += build.stdout.readline()
    assert when in seen, seen
    build.send_signal(sig)
    rest, _ = build.communicate(timeout=300)
    return build.returncode, seen + rest


@pytest.mark.parametrize(("sig", "code", "line"), [(signal.SIGINT, 130, "interrupted"),
                                                    (signal.SIGTERM, 143, "terminated")])
@pytest.mark.parametrize("when", ["[2/2] apply", "* repack"])
def test_a_signal_cleans_up_and_exits_with_its_code(tmp_path: Path, sig: signal.Signals, code: int, line: str,
                                                     when: str) -> None:
    returncode, out = interrupted_build(tmp_path, sig, when)
    assert (returncode, out.strip().splitlines()[-1]) == (code, line), out
    assert "Traceback" not in out
    assert list((tmp_path / "tmp").iterdir()) == []
    assert not (tmp_path / "dist").exists() or list((tmp_path / "dist").iterdir()) == []
