"""The user's crash in a real process, on CPU: a stub named like TileLang's is
mapped before the real libcudart.so.13; the pinned FlashInfer dies importing
cuda_ipc with `undefined symbol: cudaDeviceReset`, ours resolves the real one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import extract

pytestmark = pytest.mark.network
PROBE = Path(__file__).with_name("cudart_probe.py")
# Exports two of the runtime's names, not cudaDeviceReset: enough to be picked, not to
# work. The reserved span makes the loader place it below libcudart (mappings go
# top-down and a small library would fit a gap above), so it is listed first.
STUB_C = """int cudaSetDevice(int d) { return 0; }
int cudaDeviceSynchronize(void) { return 0; }
__attribute__((used)) static char reserve[64 << 20];
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.fail("no C compiler (cc/gcc) to build the stub library; install gcc")
    folder = tmp_path_factory.mktemp("site") / "tilelang" / "lib"
    folder.mkdir(parents=True)
    (folder / "stub.c").write_text(STUB_C)
    out = folder / "libcudart_stub.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(out), str(folder / "stub.c")], check=True)
    return out


def probe(wheel: Path, tmp_path: Path, real: Path, stub: Path) -> dict[str, object]:
    cuda_ipc = extract(wheel, "flashinfer/comm/cuda_ipc.py", tmp_path / "cuda_ipc.py")
    done = subprocess.run([sys.executable, str(PROBE), str(cuda_ipc), str(real), str(stub), "real", "stub"],
                          capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    # the stub is mapped at a lower address: first in /proc/self/maps, as in the report
    assert result["maps_order"] == [str(stub), str(real)]
    return result


def test_pinned_flashinfer_crashes_on_the_stub(flashinfer_wheels: tuple[Path, Path], real_libcudart: Path,
                                              stub: Path, tmp_path: Path) -> None:
    result = probe(flashinfer_wheels[0], tmp_path, real_libcudart, stub)
    assert result["error"] == f"AttributeError: {stub}: undefined symbol: cudaDeviceReset"


def test_patched_flashinfer_resolves_the_real_runtime(flashinfer_wheels: tuple[Path, Path], real_libcudart: Path,
                                                     stub: Path, tmp_path: Path) -> None:
    result = probe(flashinfer_wheels[1], tmp_path, real_libcudart, stub)
    assert result == {"maps_order": [str(stub), str(real_libcudart)], "resolved": str(real_libcudart),
                      "has cudaDeviceReset": True}
