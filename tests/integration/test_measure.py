"""`build.py plan --measure` end to end: the thread sweep at 1 and 2 threads, the curve, the
predictions, a profile the adaptive policy starts from, refusals before anything is allocated.

What measure does with a curve is checked on a deterministic stand-in worker
(tests/measure_stand_in.py, given as --python), so that no test asserts a wall-clock timing: a busy
machine's clock is the benchmarks' business. lk_moe's own MXFP4 engine (the Python 3.12 venv that
plan --measure keeps) runs once, and is held only to the shape of what it writes."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.measure_stand_in import SPEED, ms, stand_in

ROOT = Path(__file__).resolve().parents[2]
EXPERTS, TOP_K = 16, 2
SMALL = {"num_hidden_layers": 4, "hidden_size": 512, "moe_intermediate_size": 256, "n_routed_experts": EXPERTS,
         "num_experts_per_tok": TOP_K, "vocab_size": 1000, "num_attention_heads": 4, "head_dim": 64,
         "expert_dtype": "fp4"}


def plan(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, ROOT / "build.py", "plan", "--measure", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


ANY_NOISE = ("--noise-bound", "10000")  # lk_moe's real run: a busy machine's noise is test_measure_noise's business


def config(tmp_path: Path, **changes: object) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**SMALL, **changes}))
    return path


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("measure")
    done = plan("--config", config(tmp), "--python", stand_in(tmp), "--threads", 1, 2, "--budget", 10,
                "--profile-out", tmp / "profile.json", "--overlap", "ubatch", cwd=tmp)
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads((tmp / "profile.json").read_text())


def test_the_sweep_ran_both_thread_counts_and_kept_the_faster(measured: tuple[str, dict[str, Any]]) -> None:
    out, profile = measured
    runs = profile["measured"]["runs"]
    assert [run["threads"] for run in runs] == [1, 2]
    for run in runs:
        assert run["path"] == "cpu_prefill"
        assert [case["tokens"] for case in run["cases"]] == [1, 2, 3, 4, 6]  # 1..K+1 a request, 1 and 2 requests
        assert [case["ms"] for case in run["cases"]] == [ms(EXPERTS, TOP_K, t, run["threads"]) for t in (1, 2, 3, 4, 6)]
    assert profile["measured"]["lk_threads"] == min(SPEED, key=SPEED.__getitem__) == 2
    assert "warning:" not in out  # no thread count 1.5x the best
    assert "curve at LK_THREADS=2" in out and "ms/step" in out
    for policy in ("fixed 0", "fixed 1", "fixed 2", "phase 1/2", "phase 0/2", "adaptive"):
        assert policy in profile["measured"]["predicted_tok_s"] and f"\n{policy} " in out
    # plan's default --max-num-seqs 2: a prediction for the batch of two as well
    assert set(profile["measured"]["predicted_tok_s_by_requests"]) == {"1", "2"}
    assert "predicted, 2 running request(s)" in out
    seconds = profile["measured"]["step_seconds"]
    assert seconds == sorted(seconds) and all(a < b for a, b in itertools.pairwise(seconds))  # verifying more costs more


def test_a_slow_thread_count_is_named_with_its_numbers(tmp_path: Path) -> None:
    done = plan("--config", config(tmp_path), "--python", stand_in(tmp_path, {2: 0.5}), "--threads", 1, 2, "--budget", 2,
                "--profile-out", tmp_path / "p.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "warning: LK_THREADS=1:" in done.stdout  # twice the best's ms at 1 token
    assert json.loads((tmp_path / "p.json").read_text())["measured"]["lk_threads"] == 2


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
    heading = "predicted with CPU-GPU overlap (two micro-batches, depth_sim.step_ms), 2 running requests"
    assert heading in out, out[-3000:]
    report = out.partition(heading)[2]
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
def test_refused_before_measuring(tmp_path: Path, args: list[str], changes: dict[str, Any], code: int,
                                  message: str) -> None:
    done = plan("--config", config(tmp_path, **changes), "--python", stand_in(tmp_path), *args, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (code, ""), done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_python_without_lk_moe_is_named(tmp_path: Path) -> None:
    done = plan("--config", config(tmp_path), "--python", sys.executable, "--budget", 1, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert f"--python {sys.executable} cannot import lk_moe and numpy" in done.stderr


@pytest.mark.network
@pytest.mark.slow
def test_measure_without_python_runs_lk_moe_in_its_cached_venv(lk_python: Path, tmp_path: Path) -> None:
    """This Python has no lk_moe: plan --measure takes the venv ds4x keeps for it, and lk_moe's own
    engine times the layer. Held to what it writes, never to how fast: every case of every token
    count timed, each a finite time above 0, and a profile the adaptive policy reads; and the prefill
    chunk through the fork's CPU path (cpu_prefill here: no GPU), the smallest chunk always timed, the
    GPU way not (no GPU: that way runs only on a GPU machine, not here)."""
    done = plan("--config", config(tmp_path), "--threads", 1, "--budget", 2, *ANY_NOISE, "--profile-out",
                tmp_path / "p.json", "--prefill-budget", 4, "--max-num-batched-tokens", 1024, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "using (or making) its venv in the ds4x cache" in done.stderr
    measured = json.loads((tmp_path / "p.json").read_text())["measured"]
    [run] = measured["runs"]
    assert run["threads"] == measured["lk_threads"] == 1 and run["path"] == "cpu_prefill"  # no GPU here
    assert [case["tokens"] for case in run["cases"]] == [1, 2, 3, 4, 6]
    for case in run["cases"]:
        assert all(math.isfinite(v) and v > 0 for v in (case["ms"], *case["repeats"])), case
        assert 1 <= case["distinct"] <= EXPERTS
    assert all(math.isfinite(s) and s > 0 for s in measured["step_seconds"])
    assert math.isfinite(run["ram_gbs"]) and run["ram_gbs"] > 0
    section = json.loads((tmp_path / "p.json").read_text())["prefill"]
    assert section["engine"] is None and section["cpu_path"] == "cpu_prefill" and section["lk_threads"] == 1
    timed = [row["rows"] for row in section["rows"]]
    assert timed[0] == 512 and sorted([*timed, *section["not_timed_in_budget"]["cpu"]]) == [512, 1024]
    assert all(math.isfinite(row["cpu_ms"]) and row["cpu_ms"] > 0 and row["gpu_ms"] is None
               for row in section["rows"])
    assert "GPU prefill not timed: no GPU here" in done.stdout
