"""Sizes take the units users type: --gpu-mem 32G, 32GiB, 32gib and 32 g are 32, GB is 10^9 bytes;
a unit plan does not know is one error naming the option and the unit."""

from __future__ import annotations

import pytest

from ds4x.cli import main
from ds4x.deploy import plan

GIB = 2**30


@pytest.mark.parametrize(("text", "value"), [
    ("32", 32 * GIB), ("32G", 32 * GIB), ("32GiB", 32 * GIB), ("32 g", 32 * GIB), ("32gi", 32 * GIB),
    ("32 GIB", 32 * GIB), (" 31.5G ", int(31.5 * GIB)), ("32GB", 32 * 10**9), ("31.5 gb", 31_500_000_000),
    ("512M", 512 * 2**20), ("512MiB", 512 * 2**20), ("512MB", 512 * 10**6), ("1T", 2**40), ("1TB", 10**12),
    ("0", 0),
])
def test_units(text: str, value: int) -> None:
    assert plan.size(text) == value


def test_32g_plans_as_32(capsys: pytest.CaptureFixture[str]) -> None:
    outs = []
    for text in ("32", "32G", "32 g", "32GiB"):
        assert main(["plan", "--gpu-mem", text, "--json"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[1:] == outs[:1] * 3
    assert main(["plan", "--gpu-mem", "32GB", "--json"]) == 0
    assert capsys.readouterr().out != outs[0]  # 32 x 10^9 bytes: less than 32 GiB


@pytest.mark.parametrize(("text", "unit"), [("32X", "'X'"), ("32 GBs", "'GBs'"), ("32k", "'k'"), ("32 bytes", "'bytes'")])
def test_an_unknown_unit_is_one_error(capsys: pytest.CaptureFixture[str], text: str, unit: str) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["plan", "--gpu-mem", text])
    err = capsys.readouterr().err
    assert exit.value.code == 2
    [line] = [line for line in err.splitlines() if "error:" in line]
    assert f"--gpu-mem: {text!r}: unknown unit {unit} (none, G, Gi or GiB: 2^30 bytes;" in line, err


def test_the_units_are_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert plan.SIZE_UNITS in " ".join(capsys.readouterr().out.split())
