"""Scratch folders that never outlive the operation that made them, and the one
way ds4x replaces a file or a folder: built aside, then renamed into place, so
a reader, or the next run, sees the old one whole or the new one whole."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Literal

from ds4x.errors import InputError
from vllm_ds4x import out_paths


@contextmanager
def scratch_dir(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A new folder under `parent` (default: the system's temporary folder),
    removed when the block ends, however it ends. Its name is chosen before it
    is made, so a signal that lands while it is being made (Ctrl-C, SIGTERM)
    still finds it to remove; tempfile's own helpers only learn the name after."""
    path = Path(parent or tempfile.gettempdir()) / f"{prefix}{secrets.token_hex(8)}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():  # 64 random bits: never in practice, and never someone else's folder removed
        raise FileExistsError(path)
    try:
        path.mkdir(mode=0o700)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def atomic_path(dest: Path) -> Iterator[Path]:
    """Where to write `dest`: renamed onto it when the block ends well, removed
    when it fails. The path has `dest`'s own name (WheelFile reads it), in a
    hidden `.<name>.part-<random>/` folder beside `dest`: the same file system,
    so the rename is atomic, and a name of its own for each concurrent writer.
    Whatever the caller checked, a `dest` that is no regular file (a device, a FIFO,
    a folder, a link loop) is never replaced: InputError before anything is written."""
    why = out_paths.not_regular(dest)
    if why:
        raise InputError(f"{dest}: {why}")
    with scratch_dir(f".{dest.name}.part-", dest.parent) as folder:
        yield folder / dest.name
        os.replace(folder / dest.name, dest)


@contextmanager
def atomic_write(dest: Path, mode: Literal["w", "wb"] = "w") -> Iterator[IO[Any]]:
    """`dest` open for writing (UTF-8 text, or bytes with "wb") at atomic_path's
    path, closed and renamed into place when the block ends well."""
    with atomic_path(dest) as part, part.open(mode, encoding=None if mode == "wb" else "utf-8") as out:
        yield out


@contextmanager
def atomic_dir(dest: Path) -> Iterator[Path]:
    """An empty folder, `<dest>.part`, that replaces the folder `dest` whole when
    the block ends well; the old `dest` is removed only once the new one is in
    place. A failed or interrupted block removes the `.part` and leaves `dest`
    untouched."""
    part = dest.with_name(dest.name + ".part")
    _recover(dest)
    shutil.rmtree(part, ignore_errors=True)  # a killed run's
    try:
        part.mkdir(parents=True)
        yield part
        _swap_in(part, dest)
    finally:
        shutil.rmtree(part, ignore_errors=True)


def _old(dest: Path) -> Path:
    return dest.with_name(dest.name + ".old")


def _swap_in(new: Path, dest: Path) -> None:
    """Two renames (a folder cannot be renamed onto a full one): `dest` aside
    to `<dest>.old`, `new` to `dest`; an interrupt between them puts `dest` back."""
    old = _old(dest)
    try:
        if dest.exists():
            os.replace(dest, old)
        os.replace(new, dest)
    except BaseException:
        _recover(dest)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _recover(dest: Path) -> None:
    """After a swap that was killed halfway: the old folder back if no new one
    took its place, else gone."""
    old = _old(dest)
    if old.exists() and not dest.exists():
        os.replace(old, dest)
    shutil.rmtree(old, ignore_errors=True)
