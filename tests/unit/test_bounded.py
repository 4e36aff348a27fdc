"""The one parse of counts, rates and JSON (vllm_ds4x/bounded.py): its bounds, and refusals that take no time."""

from __future__ import annotations

import time

import pytest

from ds4x.cli import main
from vllm_ds4x import bounded


@pytest.mark.parametrize("text", ["0", "-1", "17", "1e3", "1.0", "\u00b2", "\u0661", "1_0", "", " ", "9" * 19, "9" * 5000])
def test_whole_refuses_with_its_range(text: str) -> None:
    with pytest.raises(bounded.BoundError, match=r"expected a whole number in 1\.\.16$"):
        bounded.whole(text, 1, 16)


@pytest.mark.parametrize(("text", "value"), [("1", 1), ("16", 16), (" 7 ", 7), ("+3", 3), ("007", 7)])
def test_whole_takes_ascii_digits(text: str, value: int) -> None:
    assert bounded.whole(text, 1, 16) == value


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "1e999", "-0.1", "1.01", "\u00bd", "x"])
def test_rate_refuses_what_is_not_finite_and_in_range(text: str) -> None:
    with pytest.raises(bounded.BoundError, match=r"expected a number in \[0, 1\]$"):
        bounded.rate(text, 0, 1)


@pytest.mark.parametrize(("text", "message"), [
    ("[" * 33 + "]" * 33, "nested deeper than 32"),
    ("[" * 10**6 + "]" * 10**6, "nested deeper than 32"),
    ('{"a": [{"b": NaN}]}', "a[0].b: nan is not a finite number"),
    ('{"a": -Infinity}', "a: -inf is not a finite number"),
    ("1e400", "the value: inf is not a finite number"),
    ("1" * 5000, "Exceeds the limit"),
    ("{", "Expecting property name"),
])
def test_loads_names_the_field(text: str, message: str) -> None:
    with pytest.raises(bounded.BoundError, match=message.replace("[", r"\[").replace(".", r"\.")):
        bounded.loads(text)


def test_loads_takes_32_levels() -> None:
    nested: list[object] = []
    for _ in range(31):
        nested = [nested]
    assert bounded.loads("[" * 32 + "]" * 32) == nested


def test_loads_caps_the_size() -> None:
    with pytest.raises(bounded.BoundError, match="larger than 16 MiB"):
        bounded.loads(" " * (bounded.MAX_JSON_BYTES + 1))


@pytest.mark.parametrize("option", ["-k", "--verify-tokens", "--max-num-seqs", "--max-model-len", "--tp", "--threads"])
def test_huge_counts_are_refused_at_once(capsys: pytest.CaptureFixture[str], option: str) -> None:
    for huge in ("1000000000", "1" + "0" * 100):
        start = time.monotonic()
        with pytest.raises(SystemExit) as exit:
            main(["plan", option, huge])
        assert exit.value.code == 2 and time.monotonic() - start < 2
        assert "expected a whole number in 1.." in capsys.readouterr().err
