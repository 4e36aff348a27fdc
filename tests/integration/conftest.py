"""Integration fixtures: the real pinned upstreams, fetched once into the ds4x cache."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from ds4x import pins, sources
from ds4x.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def settings() -> sources.Settings:
    """The user's cache (DS4X_CACHE_DIR / XDG): large downloads survive between runs."""
    return sources.Settings(cache=sources.default_cache())


@pytest.fixture(scope="session")
def repo_pins() -> pins.Pins:
    return pins.load(ROOT / "pins.toml")


@pytest.fixture(scope="session")
def flashinfer_wheels(tmp_path_factory: pytest.TempPathFactory, settings: sources.Settings,
                      repo_pins: pins.Pins) -> tuple[Path, Path]:
    """(the pinned upstream wheel, our built wheel)."""
    dist = tmp_path_factory.mktemp("dist")
    assert main(["wheel", "--target", "flashinfer", "--dist", str(dist), "-q"]) == 0
    upstream = repo_pins.get("flashinfer").wheel
    assert upstream
    (built,) = dist.glob("flashinfer_python-*.whl")
    return sources.download(upstream, settings), built


def extract(wheel: Path, member: str, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        dest.write_bytes(zf.read(member))
    return dest


# The real CUDA runtime from PyPI (a test input, pinned like everything else).
CUDA_RUNTIME = pins.Artifact(
    project="nvidia-cuda-runtime",
    version="13.5.37",
    filename="nvidia_cuda_runtime-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    sha256="df2b79a8852f10d1fef8c848489c49eebb5754051bf870202a862831412b179d",
)


@pytest.fixture(scope="session")
def real_libcudart(settings: sources.Settings, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """libcudart.so.13 from the nvidia-cuda-runtime wheel: loads without a GPU."""
    wheel = sources.download(CUDA_RUNTIME, settings)
    return extract(wheel, "nvidia/cu13/lib/libcudart.so.13", tmp_path_factory.mktemp("cu13") / "libcudart.so.13")
