"""Scratch folders that never outlive the operation that made them."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


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


def build_aside(dest: Path, fill: Callable[[Path], None]) -> None:
    """Make `dest` by filling `dest.part`, then renaming it into place: an
    interrupted or failed build leaves nothing the next run would trust."""
    part = dest.with_name(dest.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    try:
        fill(part)
    except BaseException:
        shutil.rmtree(part, ignore_errors=True)
        raise
    os.replace(part, dest)


def write_text_aside(dest: Path, text: str, mode: int | None = None) -> None:
    """Write `dest` as build_aside makes a folder: into `.<name>.part` beside it,
    then renamed into place (`mode`: its permission bits), so a reader never sees
    half a file and a failed write leaves none."""
    part = dest.with_name(f".{dest.name}.part")
    try:
        part.write_text(text, encoding="utf-8")
        if mode is not None:
            part.chmod(mode)
        os.replace(part, dest)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
