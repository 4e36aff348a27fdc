"""Where a ds4x checkout keeps what the tool reads, and the constants more than one module names.

A checkout is the folder holding its pins file: patches/, the overlay packages (vllm_ds4x/), examples/,
and the default trees/ and dist/ are all beside it, so that a command never
reads one checkout's series with another's overlays. Standard library only:
`doctor` and `provenance` import this from a deployment's Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROVENANCE = "ds4x_provenance.json"  # in each wheel's .dist-info; overlay vllm_ds4x/provenance.py reads it too
EXAMPLE_CONFIG = "deepseek-v4-flash/config.json"  # under examples/: plan's default model


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Where a target's series are, and the folder holding its overlay packages."""

    patches: Path
    overlays: Path

    def series(self, target: str) -> Path:
        return self.patches / target / "series"


@dataclass(frozen=True, kw_only=True)
class Checkout:
    """A ds4x checkout, named by its pins file (`--pins`)."""

    pins: Path

    @property
    def root(self) -> Path:
        return self.pins.parent

    @property
    def layout(self) -> Layout:
        return Layout(patches=self.root / "patches", overlays=self.root)

    @property
    def examples(self) -> Path:
        return self.root / "examples"

    @property
    def trees(self) -> Path:
        """Development trees (apply, roll)."""
        return self.root / "trees"

    @property
    def dist(self) -> Path:
        """Wheels and exported patches."""
        return self.root / "dist"

    def same_as(self, other: Checkout) -> bool:
        return self.root.resolve() == other.root.resolve()


# The checkout this package runs from: the default --pins, and where `plan`
# loads the overlay modules it computes with.
HOME = Checkout(pins=Path(__file__).resolve().parent.parent / "pins.toml")
