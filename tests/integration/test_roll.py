"""`roll` against the real index, in a copy of this project (its pins.toml,
patches and overlays): FlashInfer 0.6.12 -> 0.6.13 applies and is pinned with
refreshed patches that `check` accepts; vLLM back to 0.27.1 (the series is
0.34.0's now), and a FlashInfer patch edited to clash, stop at the first patch
that does not apply, name it and its hunk, leave the tree ready for a three-way
`git am`, and leave pins.toml and the cache as they were."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ds4x.build import pins, roll, sources
from ds4x.cli import main
from ds4x.digest import sha256_file
from tests.integration.conftest import ROOT

pytestmark = [pytest.mark.network, pytest.mark.slow]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name in ("patches", "vllm_ds4x"):
        shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "pins.toml", tmp_path)
    return tmp_path


def roll_to(project: Path, target: str, version: str) -> int:
    return main(["roll", "--pins", str(project / "pins.toml"), "--target", target, "--to", version])


def test_a_release_the_series_applies_to_is_pinned(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    assert roll_to(project, "flashinfer", "0.6.13") == 0
    out = capsys.readouterr().out
    assert re.search(r"flashinfer-match-libcudart-.*\.patch: applies (cleanly|with offsets \(refreshed\))", out)
    wheel = pins.load(project / "pins.toml").get("flashinfer").wheel
    assert wheel is not None and (wheel.version, wheel.filename) == ("0.6.13", "flashinfer_python-0.6.13-py3-none-any.whl")
    assert sha256_file(sources.download(wheel, sources.Settings(cache=sources.default_cache()))) == wheel.sha256
    assert pins.load(project / "pins.toml").get("vllm") == pins.load(ROOT / "pins.toml").get("vllm")  # others as they were
    assert main(["check", "--pins", str(project / "pins.toml"), "--target", "flashinfer"]) == 0
    assert capsys.readouterr().out == "flashinfer: ok\n"


def cache_state() -> dict[str, int]:
    """Every top-level cache entry (downloads/<sha256>, src/..., git/...) and its mtime."""
    cache = sources.default_cache()
    return {str(p.relative_to(cache)): p.stat().st_mtime_ns for p in cache.glob("*/*") if p.parent.name != "venvs"}


def test_a_conflict_leaves_the_tree_and_the_pins(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    assert main(["fetch", "--target", "vllm", "-q"]) == 0  # the pinned base, for the three-way merge
    before = (project / "pins.toml").read_bytes()
    assert roll_to(project, "vllm", "0.27.1") == 1
    err = capsys.readouterr().err
    assert "spec-decode-per-request-draft-depth-in-the-scheduler.patch: does not apply to vllm @ " in err
    assert "hunk at vllm/" in err and "run this roll again" in err
    # the steps name every patch still to carry over, in series order
    assert ("spec-decode-per-request-draft-depth-in-the-scheduler.patch, "
            "spec-decode-full-decode-cuda-graphs-for-every-verify-depth.patch") in err
    assert f"the pinned base is there as {roll.PINNED_REF}" in err
    assert (project / "pins.toml").read_bytes() == before
    tree = project / "trees" / "vllm-0.27.1"
    assert (tree / "vllm" / "v1" / "core" / "sched" / "scheduler.py").exists()
    # the preimage blobs are in the tree: git am merges (markers and all) instead of refusing
    patch = project / "patches" / "vllm" / "spec-decode-per-request-draft-depth-in-the-scheduler.patch"
    who = {"GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@example.invalid"}
    am = subprocess.run(["git", "-C", tree, "am", "--3way", patch], capture_output=True, text=True,
                        env={**os.environ, **who})
    assert "Falling back to patching base and 3-way merge" in am.stdout + am.stderr, am.stderr
    assert roll_to(project, "vllm", "0.27.1") == 2  # the tree it left is not overwritten
    assert "trees/vllm-0.27.1 exists" in capsys.readouterr().err


def test_a_patch_edited_to_clash_is_reported(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    patch = next((project / "patches" / "flashinfer").glob("*.patch"))
    text = patch.read_text()
    hunk = text.index("\n@@ ")
    context = next(line for line in text[hunk:].splitlines()[2:] if line.startswith(" ") and line.strip())
    patch.write_text(text[:hunk] + text[hunk:].replace(context + "\n", context + "  # clash\n", 1))
    target = pins.load(project / "pins.toml").get("flashinfer")
    assert target.wheel is not None
    settings = sources.Settings(cache=sources.default_cache())
    roll.fetch_release(target, "wheel", sources.release(target.wheel, "0.6.13"), settings)  # cached before
    before, cached = (project / "pins.toml").read_bytes(), cache_state()
    assert roll_to(project, "flashinfer", "0.6.13") == 1
    err = capsys.readouterr().err
    assert f"{patch.name}: does not apply to flashinfer @ " in err and "hunk at flashinfer/" in err
    assert (project / "pins.toml").read_bytes() == before
    assert cache_state() == cached  # nothing added, nothing rewritten


FORK_URL = "https://github.com/guqiong96/Lvllmds4-x"
needs_fork_mirror = pytest.mark.skipif(FORK_URL not in sources.parse_mirrors([]),
                                       reason=f"DS4X_MIRRORS does not map {FORK_URL}; GitHub is unreachable here")


@pytest.mark.mirror
@needs_fork_mirror
def test_a_git_pin_rolls_to_a_commit(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    """The fork (git only) to its pin's parent, named by an abbreviation the mirror resolves."""
    pinned = pins.load(project / "pins.toml").get("lvllmds4-x").git
    assert pinned is not None
    mirror = sources.resolve_url(FORK_URL, sources.parse_mirrors([]))
    parent = subprocess.run(["git", "--git-dir", mirror, "rev-parse", f"{pinned.commit}~1"], check=True,
                            capture_output=True, text=True).stdout.strip()
    assert roll_to(project, "lvllmds4-x", parent[:10]) == 0
    assert f"lvllmds4-x now pins commit {parent}" in capsys.readouterr().out
    assert pins.load(project / "pins.toml").get("lvllmds4-x").git == pins.GitPin(url=FORK_URL, commit=parent)
    assert main(["check", "--pins", str(project / "pins.toml"), "--target", "lvllmds4-x"]) == 0


@pytest.mark.mirror
@needs_fork_mirror
def test_a_git_conflict_names_the_upstream_commits(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    """An older fork commit: the conflict names the commits between it and the pin that touched the file."""
    before = (project / "pins.toml").read_bytes()
    assert roll_to(project, "lvllmds4-x", "971c279959793bcf57e38127a7233e4cd78fa602") == 1
    err = capsys.readouterr().err
    found = re.search(r"hunk at (\S+):\d+; (\d+) upstream commits between [0-9a-f]{12} and 971c27995979 touched (\S+): "
                      r"[0-9a-f]{7,}", err)
    assert found and found[1] == found[3] and int(found[2]) > 0, err
    assert (project / "pins.toml").read_bytes() == before
