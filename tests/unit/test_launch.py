"""`plan --launch` writes a serving script that runs and that `plan --check-launch`
passes; `--check-launch` names what a hand-written script gets wrong: the LK_THREADS
cliff, resident layers over the budget, memory settings that do not fit, a draft
depth that vLLM would refuse; exit 1 on an error."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ds4x.cli import main
from ds4x.deploy import launch

SPEC = '{"method": "dspark", "num_speculative_tokens": 2, "draft_depth": {"policy": "phase", "reasoning_depth": 0}}'


def run_script(script: Path, tmp_path: Path) -> list[str]:
    """The script run with a `vllm` on PATH that records its arguments (the server is not here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vllm"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path / "argv"}\nenv > {tmp_path / "env"}\n')
    fake.chmod(0o755)
    subprocess.run(["bash", str(script)], check=True, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    return (tmp_path / "argv").read_text().splitlines()


def test_the_generated_script_runs_and_passes_its_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "serve.sh"
    assert main(["plan", "--launch", str(script), "--model", "/models/DeepSeek-V4-Flash"]) == 0
    assert os.access(script, os.X_OK)
    argv = run_script(script, tmp_path)
    assert argv[:2] == ["serve", "/models/DeepSeek-V4-Flash"]
    options = dict(zip(argv[2::2], argv[3::2]))
    assert options["--max-model-len"] == "1048576" and options["--max-num-seqs"] == "2"
    spec = json.loads(options["--speculative-config"])
    assert spec["method"] == "dspark" and spec["draft_depth"] == {**(launch.PHASE_02 or {}), "verify": "request"}
    env = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines() if "=" in line)
    assert env["LVLLM_GPU_RESIDENT_MOE_LAYERS"] == "0,1"  # what plan says fits
    assert 0 < int(env["LK_THREADS"]) < (os.cpu_count() or 1) or (os.cpu_count() or 1) == 1
    assert launch.read(script).options == options  # the reader sees what bash passes
    capsys.readouterr()
    assert main(["plan", "--check-launch", str(script)]) == (1 if (os.cpu_count() or 1) == 1 else 0)
    assert "draft_depth" not in capsys.readouterr().out  # nothing to advise: what the check advises was written


def hand_written(tmp_path: Path, threads: int | str, layers: str = "0,1", util: str = "0.92", spec: str = SPEC,
                 compilation: str = '{"cudagraph_mode": "FULL_DECODE_ONLY"}') -> Path:
    path = tmp_path / "mine.sh"
    path.write_text(f"""#!/bin/bash
export LVLLM_MOE_NUMA_ENABLED=1
export LVLLM_GPU_RESIDENT_MOE_LAYERS={layers}   # my layers
export LK_THREADS={threads}
vllm serve /models/DeepSeek-V4-Flash --max-model-len 1048576 --max-num-seqs 2 \\
  --gpu-memory-utilization {util} --kv-cache-dtype fp8_ds_mla \\
  --speculative-config '{spec}' --compilation-config '{compilation}'
""")
    return path


@pytest.mark.parametrize(("changes", "message"), [
    ({"threads": os.cpu_count() or 1}, f"LK_THREADS={os.cpu_count() or 1} on {os.cpu_count() or 1} cores: all cores"),
    ({"layers": "0-5"}, "LVLLM_GPU_RESIDENT_MOE_LAYERS=0-5: 6 resident layers, only 2 fit"),
    ({"layers": "0,x"}, "LVLLM_GPU_RESIDENT_MOE_LAYERS"),
    ({"util": "0.5"}, "the model does not fit"),
    ({"spec": '{"method": "dspark", "num_speculative_tokens": 2, "draft_depth": {"policy": "fast"}}'},
     "--speculative-config: speculative_config.draft_depth.policy='fast'"),
    ({"threads": "\u00b2"}, "LK_THREADS='\u00b2': not a whole number of threads"),
    ({"spec": '{"num_speculative_tokens": 2, "x": ' + "[" * 5000 + "]" * 5000 + "}"},
     "--speculative-config: nested deeper than 32"),
    ({"spec": '{"num_speculative_tokens": 2, "draft_depth": {"policy": "phase", "step_cost": [1, NaN]}}'},
     "--speculative-config: draft_depth.step_cost[1]: nan is not a finite number"),
    ({"compilation": "[1, 2]"}, "--compilation-config '[1, 2]': not a JSON object"),
    ({"util": "1.5"}, "--gpu-memory-utilization '1.5': expected a number in (0, 1]"),
    ({"util": "nan"}, "--gpu-memory-utilization 'nan': expected a number in (0, 1]"),
    ({"util": "0.92 --max-model-len \u00b2"}, "--max-model-len '\u00b2': expected a whole number in 1..16777216"),
    ({"util": "0.9 --tensor-parallel-size 1000000000000"},
     "--tensor-parallel-size '1000000000000': expected a whole number in 1..64"),
    ({"util": "0.92 --max-num-seqs 0"}, "--max-num-seqs '0': expected a whole number in 1..16777216"),
    ({"layers": "50"}, "LVLLM_GPU_RESIDENT_MOE_LAYERS: layer(s) 50 name no MoE layer of this model (MoE layers are 0-42)"),
    ({"layers": "auto:999"}, "LVLLM_GPU_RESIDENT_MOE_LAYERS=auto:999: 999 GiB is more than the"),
    ({"compilation": '{"cudagraph_mode": "FULL_DECODE_ONLY"}\' --kv-cache-dtype \'fp4'},
     "--kv-cache-dtype 'fp4': kv-cache dtype 'fp4' is not modelled"),
    ({"layers": "0,1\nexport LVLLM_GPU_RESIDENT_DRAFT_LAYERS=2"}, "LVLLM_GPU_RESIDENT_DRAFT_LAYERS='2': expected 1 or 0"),
    ({"layers": "0,1\nexport LVLLM_MOE_OVERLAP=both"}, "LVLLM_MOE_OVERLAP='both': expected one of off, shared, ubatch"),
    ({"layers": "0,1\nexport LVLLM_MOE_UBATCH_TOKENS=" + "9" * 5000}, "LVLLM_MOE_UBATCH_TOKENS='9999"),
    ({"layers": "0,1\nexport LVLLM_GPU_PREFETCH_WINDOW=-1"}, "LVLLM_GPU_PREFETCH_WINDOW='-1': expected an integer >= 0"),
    ({"layers": "0,1\nexport LK_POOL_SLOTS=12"}, "LVLLM_GPU_RESIDENT_MOE_LAYERS=0,1: 2 resident layers, only 0 fit"),
    ({"layers": "0,1\nexport LK_POOL_WINDOW=2"}, "LK_POOL_WINDOW='2': expected an integer >= 8"),
])
def test_check_launch_names_each_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, object],
                                       message: str) -> None:
    settings: dict[str, object] = {"threads": 1, **changes}
    script = hand_written(tmp_path, **settings)  # type: ignore[arg-type]
    assert main(["plan", "--check-launch", str(script)]) == 1
    out = capsys.readouterr().out
    assert any(line.startswith("error: ") and message in line for line in out.splitlines()), out


def test_a_plan_that_does_not_fit_writes_no_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "serve.sh"
    assert main(["plan", "--gpu-mem", "8GiB", "--launch", str(script)]) == 1
    assert not script.exists() and not list(tmp_path.iterdir())
    assert "the model does not fit" in capsys.readouterr().err


@pytest.mark.parametrize(("threads", "cores", "errors"), [(12, 16, 0), (16, 16, 1), (12, 8, 1)])
def test_cores_checks_a_script_for_another_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str], threads: int,
                                                   cores: int, errors: int) -> None:
    script = hand_written(tmp_path, threads)
    assert main(["plan", "--check-launch", str(script), "--cores", str(cores)]) == errors
    out = capsys.readouterr().out
    assert f"checked for: {cores} cores (--cores)" in out and f"{errors} error(s)" in out, out


def test_the_check_names_this_machine_by_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["plan", "--check-launch", str(hand_written(tmp_path, 1))])
    assert f"checked for: {os.cpu_count() or 1} cores (this machine)" in capsys.readouterr().out
