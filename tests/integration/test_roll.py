"""`roll` against the real index, in a copy of this project (its pins.toml,
patches and overlays): FlashInfer 0.6.12 -> 0.6.13 applies and is pinned with
refreshed patches that `check` accepts; vLLM 0.27.1 -> 0.32.0, and a FlashInfer
patch edited to clash, stop at the first patch that does not apply, name it and
its hunk, leave the tree, and leave pins.toml as it was."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from ds4x import pins, sources
from ds4x.cli import main
from ds4x.digest import sha256_file
from tests.integration.conftest import ROOT

pytestmark = [pytest.mark.network, pytest.mark.slow]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name in ("patches", "overlay"):
        shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "pins.toml", tmp_path)
    return tmp_path


def roll(project: Path, target: str, version: str) -> int:
    return main(["roll", "--pins", str(project / "pins.toml"), "--target", target, "--to", version])


def test_a_release_the_series_applies_to_is_pinned(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    assert roll(project, "flashinfer", "0.6.13") == 0
    out = capsys.readouterr().out
    assert re.search(r"flashinfer-match-libcudart-.*\.patch: applies (cleanly|with offsets \(refreshed\))", out)
    wheel = pins.load(project / "pins.toml").get("flashinfer").wheel
    assert wheel is not None and (wheel.version, wheel.filename) == ("0.6.13", "flashinfer_python-0.6.13-py3-none-any.whl")
    assert sha256_file(sources.download(wheel, sources.Settings(cache=sources.default_cache()))) == wheel.sha256
    assert pins.load(project / "pins.toml").get("vllm") == pins.load(ROOT / "pins.toml").get("vllm")  # others as they were
    assert main(["check", "--pins", str(project / "pins.toml"), "--target", "flashinfer"]) == 0
    assert capsys.readouterr().out == "flashinfer: ok\n"


def test_a_conflict_leaves_the_tree_and_the_pins(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    before = (project / "pins.toml").read_bytes()
    assert roll(project, "vllm", "0.32.0") == 1
    err = capsys.readouterr().err
    assert "spec-decode-per-request-draft-depth-in-the-scheduler.patch: does not apply to vllm @ " in err
    assert "hunk at vllm/v1/core/sched/scheduler.py:" in err and "run this roll again" in err
    # the steps name every patch still to carry over, in series order
    assert ("spec-decode-per-request-draft-depth-in-the-scheduler.patch, "
            "spec-decode-full-decode-cuda-graphs-for-every-verify-depth.patch") in err
    assert (project / "pins.toml").read_bytes() == before
    assert (project / "trees" / "vllm-0.32.0" / "vllm" / "v1" / "core" / "sched" / "scheduler.py").exists()
    assert roll(project, "vllm", "0.32.0") == 2  # the tree it left is not overwritten
    assert "trees/vllm-0.32.0 exists" in capsys.readouterr().err


def test_a_patch_edited_to_clash_is_reported(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    patch = next((project / "patches" / "flashinfer").glob("*.patch"))
    text = patch.read_text()
    hunk = text.index("\n@@ ")
    context = next(line for line in text[hunk:].splitlines()[2:] if line.startswith(" ") and line.strip())
    patch.write_text(text[:hunk] + text[hunk:].replace(context + "\n", context + "  # clash\n", 1))
    before = (project / "pins.toml").read_bytes()
    assert roll(project, "flashinfer", "0.6.13") == 1
    err = capsys.readouterr().err
    assert f"{patch.name}: does not apply to flashinfer @ " in err and "hunk at flashinfer/" in err
    assert (project / "pins.toml").read_bytes() == before
