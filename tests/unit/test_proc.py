"""ds4x.proc.run: the command's failure as one error with its output's tail."""

from __future__ import annotations

import sys

import pytest

from ds4x import proc
from ds4x.errors import Ds4xError


def test_failure_names_the_command_and_keeps_the_tail() -> None:
    with pytest.raises(Ds4xError) as caught:
        proc.run([sys.executable, "-c", "import sys; print('line 1'); sys.exit('the reason')"], "do this instead")
    assert str(caught.value).startswith(f"{sys.executable} -c") and "failed (exit 1)" in str(caught.value)
    assert str(caught.value).endswith("line 1\nthe reason") and caught.value.hint == "do this instead"


def test_unchecked_returns_what_it_did() -> None:
    done = proc.run([sys.executable, "-c", "print('out')"], "", check=False)
    assert (done.returncode, done.stdout) == (0, "out\n")
