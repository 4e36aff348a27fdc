"""Overlay folders: our own new files, copied into a target tree as they are (the core's with vllm-common)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

from ds4x.digest import sha256_file
from ds4x.errors import InputError

CORE_INTO = "vllm/ds4x"
"""where the core's modules (ds4x/core beside the overlay folder) go in a target tree; its
__init__.py stays behind: the overlay has vllm.ds4x's"""
FORK_ONLY = frozenset({"measure.py", "measure_analysis.py", "measure_worker.py", "moe_engine_inputs.py",
                       "moe_placement.py", "overlap_plan.py", "typed_options.py"})
"""the core's modules that only the fork's runtime uses: the lvllmds4-x overlay carries them, the
vllm-common overlay every other"""


def core_files(root: Path, overlay: str) -> dict[str, Path]:
    """Tree-relative path -> module, for the core's modules that `overlay` carries (`root`: the overlay folder)."""
    carries = {"vllm-common": lambda name: name not in FORK_ONLY, "lvllmds4-x": lambda name: name in FORK_ONLY}
    wanted = carries.get(overlay)
    core = root.parent / "ds4x" / "core"
    return {f"{CORE_INTO}/{path.name}": path for path in sorted(core.glob("*.py"))
            if path.name != "__init__.py" and wanted is not None and wanted(path.name)}


def overlay_files(root: Path, names: tuple[str, ...]) -> dict[str, Path]:
    """Tree-relative path -> our file, for every overlay a target names."""
    files: dict[str, Path] = {}
    for name in names:
        folder = root / name
        if not folder.is_dir():
            raise InputError(f"overlay {name!r} not found under {root}", "create it or drop it from pins.toml")
        found = {path.relative_to(folder).as_posix(): path for path in sorted(folder.rglob("*"))
                 if path.is_file() and "__pycache__" not in path.parts}
        for rel, path in [*found.items(), *core_files(root, name).items()]:
            if rel in files:
                raise InputError(f"overlay file {rel} is in two overlays", "keep it in one")
            files[rel] = path
    return files


def copy_into(files: dict[str, Path], tree: Path) -> None:
    """New files only: changing an upstream file is what a patch is for."""
    for rel, source in files.items():
        dest = tree / rel
        if dest.exists():
            raise InputError(f"overlay file {rel} would overwrite an upstream file", "change it with a patch instead")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, dest)


def digest(files: dict[str, Path]) -> dict[str, str]:
    return {rel: sha256_file(path) for rel, path in sorted(files.items())}


def load_file(name: str, path: Path) -> ModuleType:
    """Import one Python file as module `name`, outside any package."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module
