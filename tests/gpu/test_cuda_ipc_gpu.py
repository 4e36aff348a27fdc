"""On a real GPU: with torch's CUDA runtime loaded and a stub mapped first, the
pinned FlashInfer dies at import as the user saw; ours opens a real IPC handle."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
PROBE = Path(__file__).with_name("ipc_probe.py")
STUB_C = """int cudaSetDevice(int d) { return 0; }
int cudaDeviceSynchronize(void) { return 0; }
__attribute__((used)) static char reserve[64 << 20];
"""
# ci/gpu puts the pinned and the built flashinfer wheels here.
WHEELS = Path(os.environ.get("DS4X_GPU_WHEELS", ".whl"))


def cuda_ipc_from(pattern: str, dest: Path) -> Path:
    matches = sorted(WHEELS.glob(pattern))
    if not matches:
        pytest.fail(f"no {pattern} under {WHEELS}: run ci/gpu, which brings the wheels")
    with zipfile.ZipFile(matches[0]) as zf:
        dest.write_bytes(zf.read("flashinfer/comm/cuda_ipc.py"))
    return dest


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    (tmp_path / "tilelang/lib").mkdir(parents=True)
    (tmp_path / "stub.c").write_text(STUB_C)
    out = tmp_path / "tilelang/lib/libcudart_stub.so"
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler for the stub library"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", out, tmp_path / "stub.c"], check=True)
    return out


def probe(cuda_ipc: Path, stub: Path) -> dict[str, object]:
    done = subprocess.run([sys.executable, PROBE, "export", cuda_ipc, stub], capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    maps = result["maps"]
    assert isinstance(maps, list) and maps[0] == str(stub), maps  # the stub is listed first
    return result


def test_pinned_flashinfer_dies_at_import(stub: Path, tmp_path: Path) -> None:
    result = probe(cuda_ipc_from("flashinfer_python-0.6.12-py3-none-any.whl", tmp_path / "pinned.py"), stub)
    print(result)
    assert result["error"] == f"AttributeError: {stub}: undefined symbol: cudaDeviceReset"


def test_patched_flashinfer_opens_a_real_ipc_handle(stub: Path, tmp_path: Path) -> None:
    result = probe(cuda_ipc_from("flashinfer_python-0.6.12+ds4x.*-py3-none-any.whl", tmp_path / "patched.py"), stub)
    print(result)
    assert "libcudart.so" in str(result["resolved"]) and "stub" not in str(result["resolved"])
    assert result["handle_nonzero"] is True
    assert result["child"] == {"first_bytes": "5a" * 16}
