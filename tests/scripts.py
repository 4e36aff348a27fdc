"""The checkout's scripts that no Python imports by name (examples/, ci/fork-gpu/: folders, not packages), loaded by path for tests."""

from __future__ import annotations

import importlib
import importlib.util
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
