"""`check --newest` against the real index: the newest release of each target
with an sdist or wheel pin, whether the series applies to it, and pins.toml untouched."""

from __future__ import annotations

import re

import pytest

from ds4x.build import pins
from ds4x.cli import main
from tests.integration.conftest import CPU_ENGINE, ROOT

pytestmark = [pytest.mark.network, pytest.mark.slow]


def test_newest_releases_are_checked_and_pins_stay(capsys: pytest.CaptureFixture[str]) -> None:
    before = (ROOT / "pins.toml").read_bytes()
    code = main(["check", "--newest", "--target", "vllm", "--target", CPU_ENGINE, "--target", "flashinfer",
                 "--target", "lvllmds4-x"])
    out = capsys.readouterr().out
    assert code == (1 if "does not apply: " in out else 0), out  # drift fails the check
    assert (ROOT / "pins.toml").read_bytes() == before
    # without a local mirror of the fork there is no history to compare with; with one, its newest commit
    fork = next(line for line in out.splitlines() if line.startswith("lvllmds4-x: "))
    assert re.fullmatch(r"lvllmds4-x: (pinned to a git commit; a local mirror \(--mirror\) shows its newest commit"
                        r"|[0-9a-f]{12} is the newest commit|pinned [0-9a-f]{12}, newest [0-9a-f]{12}: .+)", fork), fork
    repo_pins = pins.load(ROOT / "pins.toml")
    vllm, engine = repo_pins.get("vllm").sdist, repo_pins.get(CPU_ENGINE)
    flashinfer = repo_pins.get("flashinfer").wheel
    assert vllm and engine.sdist and engine.kernels_wheel and flashinfer
    for target, pinned in (("vllm", vllm.version), (CPU_ENGINE, engine.sdist.version),
                           ("flashinfer", flashinfer.version)):
        line = next(line for line in out.splitlines() if line.startswith(f"{target}: "))
        # a target on a kernels wheel is checked at the newest release that wheel's project has too
        kernels = f" with a {engine.kernels_wheel.project} wheel" if target == CPU_ENGINE else ""
        found = re.fullmatch(rf"{target}: pinned {re.escape(pinned)}, newest (\S+): "
                             r"(applies.*|does not apply: .+|\S+\.patch: fixed upstream .+)", line)
        assert found or line == f"{target}: {pinned} is the newest release{kernels}", line
        if "does not apply" in line:
            assert ".patch: " in line  # names the patch (and the hunk, or that it is already upstream)
    # FlashInfer 0.7.2 fixed the lookup its own way (the patch's Applied-Upstream field): no conflict
    flashinfer_line = next(line for line in out.splitlines() if line.startswith("flashinfer: "))
    assert ("flashinfer-match-libcudart-by-exact-file-name-in-find-loaded.patch: fixed upstream (differently): "
            "flashinfer/comm/cuda_ipc.py defines _is_library_filename") in flashinfer_line, flashinfer_line
