"""Where a command writes, checked before its work: never onto one of its inputs, never over a file without --force."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path


def _same(a: Path, b: Path) -> bool:
    """One file, through links (symbolic: resolved; hard: the same inode)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def refusal(outputs: Mapping[str, Path | None], inputs: Mapping[str, Path | None], force: bool) -> str | None:
    """Why the outputs (option -> path; None: not given) cannot be written, or None.
    Each is refused when it is one of the inputs or another output, a folder, an
    existing file without `force`, or in a folder that is missing or not writable."""
    given = {name: path for name, path in inputs.items() if path is not None}
    done: dict[str, Path] = {}
    for name, path in outputs.items():
        if path is None:
            continue
        same = [other for other, used in [*given.items(), *done.items()] if _same(path, used)]
        if same:
            return f"{name} {path}: the same file as {same[0]} {given.get(same[0]) or done[same[0]]}; give a new file"
        if path.is_dir():
            return f"{name} {path}: a folder; give a file name"
        if (path.exists() or path.is_symlink()) and not force:
            return f"{name} {path}: exists; give a new file, or add --force to write over it"
        folder = path.absolute().parent
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            return f"{name} {path}: folder {folder} does not exist or is not writable; give another path"
        done[name] = path
    return None


def _within(path: Path, folder: Path) -> bool:
    return path.resolve() == folder.resolve() or folder.resolve() in path.resolve().parents


def folder_refusal(name: str, path: Path, inputs: Mapping[str, Path], force: bool, patterns: Sequence[str]) -> str | None:
    """Why a command cannot write its files into the folder `path` (None: it can):
    it is, or lies in, one of the `inputs` folders; or it holds files of the
    `patterns` it writes or removes, and not `force` (the caller's own earlier
    output there counts as force). Other files there it leaves alone."""
    for what, folder in inputs.items():
        if _within(path, folder):
            return f"{name} {path}: inside {what} {folder}, which this command reads; give a folder outside it"
    if force or not path.is_dir():
        return None
    held = sorted({p.name for pattern in patterns for p in path.glob(pattern)})
    if held:
        return (f"{name} {path}: holds {len(held)} file(s) ({held[0]}, ...) this command could write over or remove; "
                f"give a new or empty folder, or add --force")
    return None
