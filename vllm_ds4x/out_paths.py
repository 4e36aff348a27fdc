"""Where a command writes, checked before its work, by one rule for every output: a regular file or
nothing at the path (a device, a FIFO, a socket or a folder is refused, --force or not), links
followed without loops, the folder probed by a write of its own; never onto one of its inputs, never
over a file without --force."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def resolved(path: Path) -> Path | None:
    """`path` with its links followed; None when they loop or cannot be followed
    (Python 3.10-3.12 raise RuntimeError on a loop, 3.13 OSError)."""
    try:
        real = path.resolve()
        os.stat(real)
    except RuntimeError:
        return None
    except OSError as e:
        return None if e.errno == errno.ELOOP else path.absolute()
    return real


def _kind(path: Path) -> str | None:
    """What is at `path` (links followed) when it is not a regular file: "a folder", "a FIFO", ...; None for a
    regular file or nothing."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return next((name for test, name in _KINDS if test(mode)), None if stat.S_ISREG(mode) else "not a regular file")


def probe(folder: Path) -> str | None:
    """Why no file can be made in `folder` (None: one can), found by making one: a temporary file made
    and removed (access() says yes to root on /proc, where no file can be made)."""
    try:
        handle, name = tempfile.mkstemp(prefix=".ds4x-probe-", dir=folder)
    except OSError as e:
        return f"{folder} is not writable ({e.strerror or e})"
    os.close(handle)
    os.unlink(name)
    return None


def not_regular(path: Path) -> str | None:
    """Why `path` can hold no regular file, --force or not (None: nothing is there, or a regular file):
    links that loop, or a folder, a device, a FIFO or a socket there."""
    real = resolved(path)
    if real is None:
        return "a symbolic link that loops or cannot be followed; give the path of a regular file"
    kind = _kind(real)
    if kind == "a folder":
        return "is a folder; give a file name"
    if kind:
        return f"is {kind}, not a regular file; give the path of a regular file (--force never replaces one)"
    return None


def unfit_file(path: Path) -> str | None:
    """Why no regular file can be written at `path`, --force or not (None: one can): not_regular's
    reasons, or a folder above it that is missing, not a folder, or refuses the probe's file."""
    why = not_regular(path)
    if why:
        return why
    if not path.absolute().parent.is_dir():
        return f"folder {path.parent} does not exist or is not writable; create it or give another path"
    why = probe(path.absolute().parent)
    return f"{why}; give another path" if why else None


def unfit_folder(path: Path) -> str | None:
    """Why files cannot be written into the folder `path`, made if missing (None: they can): something
    there that is not a folder, links that loop, or no file can be made in its nearest existing folder."""
    real = resolved(path)
    if real is None:
        return "a symbolic link that loops or cannot be followed; give a folder"
    if real.exists() and not real.is_dir():
        return f"exists and is not a folder ({_kind(real) or 'a file'}); give a folder"
    folder = real
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file, not a folder; give a folder you can write"
    why = probe(folder)
    return f"{why}; give a folder you can write" if why else None


def _same(a: Path, b: Path) -> bool:
    """One file, through links (symbolic: resolved; hard: the same inode)."""
    real_a, real_b = resolved(a), resolved(b)
    if real_a is not None and real_a == real_b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def refusal(outputs: Mapping[str, Path | None], inputs: Mapping[str, Path | None], force: bool) -> str | None:
    """Why the outputs (option -> path; None: not given) cannot be written, or None.
    Each is refused when it is one of the inputs or another output, when no regular
    file can be written there (unfit_file), or when it is an existing file and not `force`."""
    given = {name: path for name, path in inputs.items() if path is not None}
    done: dict[str, Path] = {}
    for name, path in outputs.items():
        if path is None:
            continue
        same = [other for other, used in [*given.items(), *done.items()] if _same(path, used)]
        if same:
            return f"{name} {path}: the same file as {same[0]} {given.get(same[0]) or done[same[0]]}; give a new file"
        why = "a folder; give a file name" if path.is_dir() else unfit_file(path)
        if why:
            return f"{name} {path}: {why}"
        if (path.exists() or path.is_symlink()) and not force:
            return f"{name} {path}: exists; give a new file, or add --force to write over it"
        done[name] = path
    return None


def _within(path: Path, folder: Path) -> bool:
    real, top = resolved(path), resolved(folder)
    return real is not None and top is not None and (real == top or top in real.parents)


def folder_refusal(name: str, path: Path, inputs: Mapping[str, Path], force: bool, patterns: Sequence[str]) -> str | None:
    """Why a command cannot write its files into the folder `path` (None: it can):
    no files can be written there (unfit_folder); it is, or lies in, one of the
    `inputs` folders; or it holds files of the `patterns` it writes or removes, and
    not `force` (the caller's own earlier output there counts as force). Other files
    there it leaves alone."""
    why = unfit_folder(path)
    if why:
        return f"{name} {path}: {why}"
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
