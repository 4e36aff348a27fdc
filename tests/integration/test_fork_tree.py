"""The patched Lvllmds4-x source itself (needs a mirror of the fork: DS4X_MIRRORS)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ds4x.build import sources
from ds4x.cli import main
from tests.integration.conftest import engine_json, harness_cpu_check
from tests.integration.test_scheduler_depth import check_drafter_rest, check_per_request

FORK_URL = "https://github.com/guqiong96/Lvllmds4-x"
pytestmark = [
    pytest.mark.mirror,
    pytest.mark.skipif(FORK_URL not in sources.parse_mirrors([]),
                       reason=f"DS4X_MIRRORS does not map {FORK_URL}; GitHub is unreachable here"),
]


@pytest.fixture(scope="module")
def patched_fork(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("fork") / "lvllmds4-x"
    assert main(["apply", "--target", "lvllmds4-x", "--dir", str(tree), "-q"]) == 0
    return tree


def test_fork_series_checks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--target", "lvllmds4-x"]) == 0
    assert capsys.readouterr().out == "lvllmds4-x: ok\n"


def test_patched_envs_hooks(patched_fork: Path) -> None:
    probe = Path(__file__).with_name("fork_probe.py")
    done = subprocess.run([sys.executable, probe], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(patched_fork)})
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["0,x"].startswith("LVLLM_GPU_RESIDENT_MOE_LAYERS='0,x': 'x' is not N or A-B")
    assert out["3-1"].startswith("LVLLM_GPU_RESIDENT_MOE_LAYERS='3-1': '3-1' runs backwards")
    assert out["-1"].startswith("LVLLM_GPU_RESIDENT_MOE_LAYERS='-1': '-1' is not N or A-B")
    assert out["prefetch ''"] == 3 and out["prefetch '5'"] == 5
    assert out["prefetch 'x'"] == "LVLLM_GPU_PREFETCH_WINDOW='x': expected an integer >= 0 (at most 9 digits)"
    # [resident, cpu, draft] for layer 0, layer 2 and DSpark layer 43
    assert out["drafts_on_gpu=True"] == {
        "model.layers.0.ffn.experts": [True, False, False],
        "model.layers.2.ffn.experts": [False, True, False],
        "model.layers.43.ffn.experts": [True, False, True],
    }
    assert out["drafts_on_gpu=False"]["model.layers.43.ffn.experts"] == [False, True, True]


@pytest.mark.slow
@pytest.mark.network
def test_python_m_vllm_ds4x_measure_in_the_fork(patched_fork: Path, engine_python: Path, lk_python: Path,
                                                tmp_path: Path) -> None:
    """The fork's own `python -m vllm_ds4x measure`, lk_moe timed in a Python 3.12 worker."""
    from tests.integration.test_measure import ANY_NOISE, config

    env = {**os.environ, "PYTHONPATH": str(patched_fork)}
    done = subprocess.run([engine_python, "-m", "vllm_ds4x", "measure", "--config", config(tmp_path), "--python",
                           lk_python, "--threads", "1", "--budget", "2", *ANY_NOISE], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "curve at LK_THREADS=1 (cpu_prefill)" in done.stdout
    assert json.loads((tmp_path / "ds4x-step-cost.json").read_text())["draft_depth"]["policy"] == "adaptive"


@pytest.fixture(scope="module")
def fork_checks(patched_fork: Path, engine_python: Path, tiny_model: Path) -> dict[str, Any]:
    """engine.checks on the patched fork's own scheduler and graph
    manager (its Python tree first on the path, CPU platform named)."""
    env = {**os.environ, "PYTHONPATH": str(patched_fork)}
    out = engine_json(engine_python, "checks", tiny_model, "--cpu-platform", env=env)
    assert out["vllm"].startswith(str(patched_fork))
    return out


@pytest.mark.slow
@pytest.mark.network
def test_fork_scheduler_sends_each_request_s_own_depth(fork_checks: dict[str, Any]) -> None:
    """verify "request" on the fork: its own scheduler hook puts the depths in the scheduler
    output, and the counts are upstream's run's (test_scheduler_depth)."""
    out = fork_checks["scheduler"]["per_request"]
    assert out["hook"] == "fork"
    check_per_request(out)


@pytest.mark.slow
@pytest.mark.network
def test_fork_scheduler_rests_dspark_s_drafter(fork_checks: dict[str, Any]) -> None:
    """The fork's own scheduler hook names the resting drafters; the steps are upstream's run's."""
    out = fork_checks["scheduler"]["drafter_rest"]
    assert {run["hook"] for run in out.values()} == {"fork"}
    check_drafter_rest(out)


@pytest.mark.slow
@pytest.mark.network
def test_fork_scheduler_verifies_one_depth_per_batch(fork_checks: dict[str, Any]) -> None:
    """The same scheduler-level run as for upstream vLLM."""
    out = fork_checks["scheduler"]["phase 0/2"]
    assert out["sync"]["scheduled_drafts"] == {"r": 2, "a": 2, "o": 2}
    assert out["sync"]["kv_blocks"] == {"r": 2, "a": 2, "o": 2}
    assert out["sync"]["computed_after"] == {"r": 14, "a": 15, "o": 14}
    assert out["sync_reasoning"]["scheduled_drafts"] == {"r1": 0, "r2": 0}
    assert out["sync_reasoning"]["after_end_think"] == {"r1": 2, "r2": 2}
    assert out["async"]["placeholders"] == {"r": [-1, -1], "a": [-1, -1]}
    assert out["async_reasoning"]["scheduled_drafts"] == {"r1": 0, "r2": 0}
    assert out["async_reasoning"]["output_placeholders_after"] == {"r1": 0, "r2": 0}


@pytest.mark.slow
@pytest.mark.network
def test_fork_graph_manager_has_a_graph_for_every_depth(fork_checks: dict[str, Any]) -> None:
    """The fork's model runner v2 graph manager, built on CPU for each policy."""
    out = fork_checks["graphs"]["v2"]
    assert out["fixed"]["graphs"] == ["t12:r4:q3", "t3:r1:q3", "t6:r2:q3", "t9:r3:q3"]  # vLLM's own sizes
    # every depth at the fork's exact request counts (it keeps 1..32 unpadded)
    assert out["phase 0/2"]["graphs"] == sorted(f"t{q * r}:r{r}:q{q}" for q in (1, 3) for r in (1, 2, 3, 4))
    assert out["adaptive"]["graphs"] == sorted(f"t{q * r}:r{r}:q{q}" for q in (1, 2, 3) for r in (1, 2, 3, 4))
    for policy, lengths in (("phase 1/2", (2, 3)), ("phase 0/2", (1, 3)), ("adaptive", (1, 2, 3))):
        for q in lengths:  # every uniform batch replays its own graph
            for reqs in (1, 2, 3, 4):
                assert out[policy]["dispatch"][f"q{q}r{reqs}"] == f"FULL:t{q * reqs}:r{reqs}:q{q}", policy
        assert out[policy]["mixed"] == "NONE"  # non-uniform: eager, as in vLLM


@pytest.mark.slow
@pytest.mark.network
def test_fork_v1_dispatcher_has_a_graph_for_every_depth(fork_checks: dict[str, Any]) -> None:
    """The fork's model runner v1 dispatcher (n-gram's runner), keys built on CPU
    for each policy: the request counts of vLLM's own 1+K sizes at every depth."""
    out = fork_checks["graphs"]["v1"]
    assert out["fixed"]["graphs"] == ["t12:r4:q3", "t3:r1:q3", "t6:r2:q3", "t9:r3:q3"]
    assert out["adaptive"]["graphs"] == sorted(f"t{q * r}:r{r}:q{q}" for q in (1, 2, 3) for r in (1, 2, 3, 4))
    for policy, lengths in (("phase 1/2", (2, 3)), ("phase 0/2", (1, 3)), ("adaptive", (1, 2, 3))):
        for q in lengths:
            for reqs in (1, 2, 3, 4):
                assert out[policy]["dispatch"][f"q{q}r{reqs}"] == f"FULL:t{q * reqs}:r{reqs}:q{q}", policy
        assert out[policy]["mixed"] == "NONE"
    # a length without graphs is a mixed batch, never padded into another length's graph
    assert out["phase 1/2"]["dispatch"]["q1r2"].startswith("NONE")


def test_the_launch_scripts_variables_are_read_by_the_fork(patched_fork: Path, tmp_path: Path) -> None:
    """Every LVLLM_ variable `plan --launch` exports is read by the patched fork's Python."""
    script = tmp_path / "serve.sh"
    assert main(["plan", "--launch", str(script), "-q"]) == 0
    from ds4x.deploy import launch

    names = [name for name in launch.read(script).env if name.startswith("LVLLM_")]
    assert names
    source = "\n".join(p.read_text(errors="replace") for p in (patched_fork / "vllm").rglob("*.py"))
    assert [name for name in names if name not in source] == []


@pytest.mark.slow
@pytest.mark.network
def test_deepseek_v4_dspark_cases_configure_with_the_forks_reasoning_markers(
        patched_fork: Path, engine_python: Path, tmp_path: Path) -> None:
    """The GPU harness's DeepSeek-V4 + DSpark cases, taken through the fork's own LLM(...)
    on the CUDA platform forced on the CPU: the config is accepted (fp8_ds_mla KV, DSpark,
    FULL_DECODE_ONLY) and the phase tracker finds the fork's deepseek_v4 markers, which its
    parser gives only with thinking on (without it the policy never saw an answer)."""
    tree = tmp_path / "fork"
    shutil.copytree(patched_fork / "vllm", tree / "vllm")  # prepare_fork edits the tree it is given
    out = harness_cpu_check(engine_python, tree, tmp_path, ("dsv4_model.py", "dsv4"), ["dsv4-eager", "dsv4-phase02"])
    assert "ok   dsv4-phase02 v2 FULL_DECODE_ONLY" in out
    # engine/tiny_model.py's <think> = 1 and </think> = 2, then the tool-call marker's tokens
    assert "phase markers: start [(1,)] end [(2,), (" in out


def test_the_marlin_moe_build_binds_the_forks_ops_and_generates_only_the_mxfp4_kernels(
        patched_fork: Path, tmp_path: Path) -> None:
    """ci/fork-gpu/build_ops.py --marlin, up to the compiler: the fork's binding statements of the ops a
    resident MXFP4 DeepSeek-V4 layer calls, found once each; its Marlin MoE generator, asked for bf16 x
    MXFP4 x e8m0 only, writes 15 instantiations (one file each) and a selector naming only those; the
    fork's Python calls each bound op."""
    from tests.scripts import load_script

    build_ops = load_script("ci/fork-gpu/build_ops.py")
    stable = tmp_path / "libtorch_stable"
    shutil.copytree(patched_fork / "csrc" / "libtorch_stable", stable)
    text = build_ops.binding({op.bindings: (stable / op.bindings).read_text() for op in build_ops.MARLIN.ops},
                             build_ops.MARLIN)
    assert text.count("ops.def(") == 4 and text.count("ops.impl(") == 2
    files = build_ops.generate_marlin(stable, "9.0")
    assert len(files) == 15
    selector = (stable / build_ops.MARLIN_DIR / "kernel_selector.h").read_text()
    assert selector.count("kernel = Marlin<vllm::kBFloat16.id(), vllm::kFE2M1f.id(), vllm::kBFloat16.id(), "
                          "vllm::kFE8M0fnu.id()") == 15 == selector.count("kernel = ")
    custom_ops = (patched_fork / "vllm" / "_custom_ops.py").read_text()
    for op in build_ops.MARLIN.ops:
        assert f"torch.ops.{op.namespace}.{op.name}(" in custom_ops
