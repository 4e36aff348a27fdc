"""`roll`: move a target's sdist or wheel pin to another release. The series is
applied to the release in a development tree, patch by patch. When every patch
applies, the patches are refreshed from the tree and pins.toml gets the new pin.
At the first patch that does not apply, the tree is left for the developer
with the next commands, and pins.toml stays as it was."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ds4x import pins, sources, workspace
from ds4x.errors import Ds4xError, InputError
from ds4x.log import logger
from ds4x.pins import Artifact, Target


@dataclass(frozen=True)
class Rolled:
    kind: str  # "sdist" | "wheel"
    pin: Artifact
    kernels: Artifact | None
    statuses: list[tuple[str, str]]  # (patch, "applies cleanly" | "applies with offsets (refreshed)")


def _kind(target: Target) -> str:
    for kind in ("sdist", "wheel"):
        if getattr(target, kind) is not None:
            return kind
    raise InputError(f"target {target.name} is pinned to a git commit only", "roll moves sdist and wheel pins")


def _kernels(target: Target, version: str) -> Artifact | None:
    """The kernels wheel of the same release, if the index has one."""
    if target.kernels_wheel is None:
        return None
    try:
        return sources.release(target.kernels_wheel, version)
    except Ds4xError:
        logger.warning("no %s %s on the index: the kernels wheel pin is dropped", target.kernels_wheel.project, version)
        return None


def apply(target: Target, version: str, settings: sources.Settings, layout: workspace.Layout, tree: Path) -> Rolled:
    """The series on `version` in `tree`; raises (tree kept) at the first patch that does not apply."""
    kind = _kind(target)
    pinned: Artifact = getattr(target, kind)
    new = sources.release(pinned, version)
    release = replace(target, git=None, sdist=new) if kind == "sdist" else replace(target, git=None, wheel=new)
    base = sources.fetch(release, replace(settings, source=kind))
    if tree.exists():
        raise InputError(f"{tree} exists", "delete it, or pass --dir to another folder")
    entries = workspace.apply_series(base, tree, layout)  # raises naming the patch and its hunk
    texts = workspace.export_texts(tree)
    statuses = [(entry.name, "applies cleanly" if entry.path.read_text(encoding="utf-8") == text
                 else "applies with offsets (refreshed)") for entry, text in zip(entries, texts)]
    return Rolled(kind=kind, pin=new, kernels=_kernels(target, new.version), statuses=statuses)


def _inline(artifact: Artifact) -> str:
    return (f'{{ project = "{artifact.project}", version = "{artifact.version}", '
            f'filename = "{artifact.filename}", sha256 = "{artifact.sha256}" }}')


def write_pin(path: Path, target: Target, rolled: Rolled) -> None:
    """The target's table in pins.toml with the new pin (comments kept); checked
    by loading it before it replaces the file."""
    text = path.read_text(encoding="utf-8")
    start = text.index(f"[targets.{target.name}]")
    end = text.find("\n[", start + 1)
    end = len(text) if end < 0 else end + 1
    old: Artifact = getattr(target, rolled.kind)
    table = text[start:end]
    table = re.sub(rf"(?m)^{rolled.kind} = .*$", f"{rolled.kind} = {_inline(rolled.pin)}", table)
    table = re.sub(r"(?m)^(description = .*)$", lambda m: m[1].replace(old.version, rolled.pin.version), table)
    table = re.sub(r"(?m)^git = .*\n", "", table)  # the old release's commit; the new file's sha256 pins it now
    if rolled.kernels is not None:
        table = re.sub(r"(?m)^kernels-wheel = .*$", f"kernels-wheel = {_inline(rolled.kernels)}", table)
    else:
        table = re.sub(r"(?m)^kernels-wheel = .*\n", "", table)
    part = path.with_name(path.name + ".part")
    part.write_text(text[:start] + table + text[end:], encoding="utf-8")
    try:
        pins.load(part).get(target.name)
    except BaseException:
        part.unlink()
        raise
    os.replace(part, path)


def next_steps(target: str, tree: Path, fix: str | None = None) -> str:
    """What to do with the tree a conflict left (fix: the step that replaces the patch work)."""
    work = fix or "in it, `git am --3way` the patch named above (or apply it by hand), fix and commit"
    return (f"{tree} holds the patches that applied, as commits; {work}; then `build.py refresh --target {target} "
            f"--dir {tree}`, delete {tree}, and run this roll again")
