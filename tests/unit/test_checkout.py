"""One checkout per command (#24 item 4): build commands read and write beside
the pins file they are given; `plan`, whose overlay modules come from the
checkout it runs from, refuses a --pins of another checkout instead of mixing
the two. Constants that more than one module names are defined once."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds4x import checkout
from ds4x.checkout import HOME, Checkout
from ds4x.cli import main
from tests.conftest import cli_args

Repo = tuple[Path, str]


def test_a_checkout_is_the_folder_of_its_pins_file(tmp_path: Path) -> None:
    there = Checkout(pins=tmp_path / "other.toml")
    assert (there.root, there.layout.patches, there.layout.overlays, there.examples, there.trees, there.dist) == (
        tmp_path, tmp_path / "patches", tmp_path, tmp_path / "examples", tmp_path / "trees",
        tmp_path / "dist")
    assert there.layout.series("demo") == tmp_path / "patches/demo/series"
    assert HOME.pins == Path(__file__).resolve().parents[2] / "pins.toml"
    assert Checkout(pins=HOME.root / "." / "pins.toml").same_as(HOME) and not there.same_as(HOME)


def test_plan_refuses_the_pins_of_another_checkout(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    assert main(["plan", "--pins", str(project / "pins.toml")]) == 2
    assert capsys.readouterr().err == (
        f"error: plan reads the overlay and examples of the checkout it runs from ({HOME.root}); "
        f"--pins {project / 'pins.toml'} is another checkout's, and plan will not mix them\n"
        f"hint: run that checkout's own `{project / 'build.py'} plan`, or leave --pins out\n")


def test_plan_takes_its_own_checkouts_pins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--pins", str(HOME.root / "." / "pins.toml"), "--json"]) == 0
    assert '"usable": ' in capsys.readouterr().out


def test_build_commands_read_and_write_in_the_checkout_of_pins(capsys: pytest.CaptureFixture[str], project: Path,
                                                                tmp_path: Path, git_repo: Repo) -> None:
    """apply takes the overlay beside --pins (not the one beside the package) and makes its tree there."""
    assert main(cli_args(project, tmp_path, git_repo, "apply", "--target", "demo")) == 0
    tree = project / "trees" / "demo"
    assert (tree / "demo_ds4x/extra.py").read_text() == "ANSWER = 42\n"
    assert capsys.readouterr().out == f"{tree}: edit, commit, then `build.py refresh --target demo`\n"


def test_the_provenance_record_has_one_name() -> None:
    """vllm_ds4x ships inside vLLM (no ds4x tool there to import), so it keeps its own: they must agree."""
    from vllm_ds4x import provenance as shipped

    assert shipped.RECORD == checkout.PROVENANCE == "ds4x_provenance.json"
    named = [path.name for path in sorted(Path(checkout.__file__).parent.glob("*.py"))
             if checkout.PROVENANCE in path.read_text()]
    assert named == ["checkout.py"]  # wheel and doctor import it
