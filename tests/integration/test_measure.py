"""`build.py plan --measure` end to end on CPU: lk_moe's MXFP4 engine (Python 3.12
venv, the lk_python fixture) over a small layer through cpu_prefill, the thread
sweep at 1 and 2 threads, the curve, the predictions, and a profile the adaptive
policy starts from; refusals before anything is allocated."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.network, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SMALL = {"num_hidden_layers": 4, "hidden_size": 512, "moe_intermediate_size": 256, "n_routed_experts": 16,
         "num_experts_per_tok": 2, "vocab_size": 1000, "num_attention_heads": 4, "head_dim": 64,
         "expert_dtype": "fp4"}


def plan(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, ROOT / "build.py", "plan", "--measure", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


ANY_NOISE = ("--noise-bound", "10000")  # a shared 2-core machine's noise is not what these tests check: test_measure_noise


def config(tmp_path: Path, **changes: object) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**SMALL, **changes}))
    return path


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory, lk_python: Path) -> tuple[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("measure")
    done = plan("--config", config(tmp), "--python", lk_python, "--threads", 1, 2, "--budget", 10, *ANY_NOISE,
                "--profile-out", tmp / "profile.json", "--overlap", "ubatch", cwd=tmp)
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads((tmp / "profile.json").read_text())


def test_curve_grows_with_tokens_and_the_sweep_ran_both_thread_counts(measured: tuple[str, dict[str, Any]]) -> None:
    out, profile = measured
    runs = profile["measured"]["runs"]
    assert [run["threads"] for run in runs] == [1, 2]
    for run in runs:
        assert run["path"] == "cpu_prefill"  # no GPU here
        assert [case["tokens"] for case in run["cases"]] == [1, 2, 3, 4, 6]  # 1..K+1 a request, 1 and 2 requests
        distinct = [case["distinct"] for case in run["cases"]]
        assert distinct[0] == 2 and distinct[0] < distinct[1] < distinct[2] <= 6  # top-2, fresh routing
    best = min(runs, key=lambda run: run["cases"][0]["ms"])
    assert profile["measured"]["lk_threads"] == best["threads"]
    ms = [case["ms"] for case in best["cases"]]
    # cost follows distinct experts: 1..3 tokens (one request) rise; 4 and 6 (two requests) cost more than 1
    assert ms[2] > ms[0] and all(b >= 0.9 * a for a, b in itertools.pairwise(ms[:3])) and min(ms[3:]) > ms[0]
    slow = [run for run in runs if run["cases"][0]["ms"] > 1.5 * best["cases"][0]["ms"]]
    for run in slow:  # every jump is named with its numbers
        assert f"warning: LK_THREADS={run['threads']}:" in out
    assert ("warning:" in out) == bool(slow)
    assert "curve at LK_THREADS" in out and "ms/step" in out
    for policy in ("fixed 0", "fixed 1", "fixed 2", "phase 1/2", "phase 0/2", "adaptive"):
        assert policy in profile["measured"]["predicted_tok_s"] and f"\n{policy} " in out
    # plan's default --max-num-seqs 2: a prediction for the batch of two as well
    assert set(profile["measured"]["predicted_tok_s_by_requests"]) == {"1", "2"}
    assert "predicted, 2 running request(s)" in out


def test_profile_is_what_the_adaptive_policy_starts_from(measured: tuple[str, dict[str, Any]]) -> None:
    out, profile = measured
    from vllm_ds4x.depth import policy as dd

    config = dd.DraftDepthConfig.from_dict(profile["draft_depth"], 2)
    policy = dd.DepthPolicy(config, 2, dd.PhaseTracker([[1]], [[2]]))
    seconds = profile["measured"]["step_seconds"]
    assert policy.costs.relative() == pytest.approx([s / seconds[0] for s in seconds], rel=1e-3)
    assert json.dumps(profile["draft_depth"]) in out  # the --speculative-config it prints


def test_overlap_is_predicted_at_max_num_seqs_against_measures_own_prediction(
        measured: tuple[str, dict[str, Any]]) -> None:
    """--overlap ubatch: the steps per depth, then every policy off / overlap / ratio at 2
    requests; the off column is measure's own prediction for the batch of two."""
    out, profile = measured
    report = out.split("predicted with CPU-GPU overlap (two micro-batches, depth_sim.step_ms), 2 running requests")[1]
    assert "depth 0: CPU experts" in report and "depth 2: CPU experts" in report and "bound: full x" in report
    off = profile["measured"]["predicted_tok_s_by_requests"]["2"]
    rows = {line[:10].strip(): line[10:].split() for line in report.splitlines() if line[:10].strip() in off}
    assert set(rows) == set(off)
    for name, row in rows.items():
        assert (float(row[0]), float(row[3])) == (round(off[name]["reasoning"], 2), round(off[name]["answer"], 2))


def test_bench_simulator_reads_the_profile(measured: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(json.dumps(measured[1]))
    done = subprocess.run([sys.executable, "-m", "bench.depth_sim", "--profile", tmp_path / "p.json",
                           "--seeds", "2", "--reasoning-tokens", "200", "--answer-tokens", "100"],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    assert "measured (p.json) profile" in done.stdout and "fixed 0" in done.stdout
    assert "micro-batches" not in done.stdout  # --overlap off by default
    done = subprocess.run([sys.executable, "-m", "bench.depth_sim", "--profile", tmp_path / "p.json", "--seeds", "2",
                           "--reasoning-tokens", "200", "--answer-tokens", "100", "--overlap", "ubatch"],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    assert "(two micro-batches; depth_sim.step_ms), 2 running requests" in done.stdout


@pytest.mark.parametrize(
    ("args", "changes", "code", "message"),
    [
        (["--acceptance", "1.5", "0.9"], {}, 2, "--acceptance"),
        (["--threads", "0"], {}, 2, "--threads: '0': expected a whole number in 1..4096"),
        (["--threads", "1000000000"], {}, 2, "--threads: '1000000000': expected a whole number in 1..4096"),
        (["-k", "0"], {}, 2, "--num-speculative-tokens/-k: '0': expected a whole number in 1..16"),
        (["--budget", "nan"], {}, 2, "--budget nan: give seconds in (0, 86400]"),
        (["--gpu-ms", "inf"], {}, 2, "--gpu-ms inf: one figure in 0..60000 ms"),
        (["--profile-out", "."], {}, 2, "--profile-out .: a folder; give a file name"),
        (["--plot", "curve.svg"], {}, 2, "expected a .png path"),
        (["--profile-out", "/nonexistent/p.json"], {}, 2, "folder /nonexistent does not exist or is not writable"),
        (["--profile-out", "config.json", "--force"], {}, 2, "--profile-out config.json: the same file as --config"),
        ([], {"expert_dtype": "fp8"}, 2, "expert_dtype 'fp8'"),
        ([], {"hidden_size": 500}, 2, "multiples of 32"),
        ([], {"n_routed_experts": 65536, "hidden_size": 8192, "moe_intermediate_size": 4096}, 1,
         "while lk_moe copies it in"),
    ],
)
def test_refused_before_measuring(tmp_path: Path, lk_python: Path, args: list[str], changes: dict[str, Any], code: int,
                                  message: str) -> None:
    done = plan("--config", config(tmp_path, **changes), "--python", lk_python, *args, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (code, ""), done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_python_without_lk_moe_is_named(tmp_path: Path) -> None:
    done = plan("--config", config(tmp_path), "--python", sys.executable, "--budget", 1, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert f"--python {sys.executable} cannot import lk_moe and numpy" in done.stderr


def test_measure_without_python_uses_the_cached_lk_moe_venv(lk_python: Path, tmp_path: Path) -> None:
    """This Python has no lk_moe: plan --measure takes the venv ds4x keeps for it."""
    done = plan("--config", config(tmp_path), "--threads", 1, "--budget", 2, *ANY_NOISE, "--profile-out", tmp_path / "p.json",
                cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "using (or making) its venv in the ds4x cache" in done.stderr
    assert json.loads((tmp_path / "p.json").read_text())["measured"]["runs"]
