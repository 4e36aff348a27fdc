"""Overlays: our own packages, copied whole into a target tree under their own name.

An overlay is a Python package at the checkout root (pins.toml names it in a target's
`overlays`); the wheel ships it beside the target's own package, and the patches import it by
the same name the tool, bench/, engine/ and the tests use.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ds4x.digest import sha256_file
from ds4x.errors import InputError


def overlay_files(root: Path, names: tuple[str, ...]) -> dict[str, Path]:
    """Tree-relative path -> our file, for every overlay package a target names (`root`: the checkout)."""
    files: dict[str, Path] = {}
    for name in names:
        folder = root / name
        if not (folder / "__init__.py").is_file():
            raise InputError(f"overlay package {name!r} not found under {root}", "create it or drop it from pins.toml")
        for path in sorted(folder.rglob("*.py")):
            if "__pycache__" not in path.parts:
                files[path.relative_to(root).as_posix()] = path
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
