"""The tree's files that no checkout Python imports by name (examples/, ci/fork-gpu/, a torch overlay module), loaded by path for tests."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """The script at `relative` (to the checkout), run afresh as a module of its own."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OVERLAY_PACKAGE = "_ds4x_test_overlay"


def load_overlay_module(relative: str) -> ModuleType:
    """An overlay module that imports torch (so it is not in ds4x.core, which imports without it), from
    its file, in a package spanning its overlay folder and the core, as vllm.ds4x does in a built tree,
    so that its relative imports resolve (ubatch_overlap: the one such module the unit tests check)."""
    path = ROOT / "overlay" / relative
    if OVERLAY_PACKAGE not in sys.modules:
        package = ModuleType(OVERLAY_PACKAGE)
        package.__path__ = [str(path.parent), str(ROOT / "ds4x" / "core")]
        sys.modules[OVERLAY_PACKAGE] = package
    return importlib.import_module(f"{OVERLAY_PACKAGE}.{path.stem}")
