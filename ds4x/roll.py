"""`roll`: move a target's sdist or wheel pin to another release. The series is
applied to the release in a development tree, patch by patch. When every patch
applies, the patches are refreshed from the tree and pins.toml gets the new pin.
At the first patch that does not apply, the tree is left for the developer
with the next commands, and pins.toml stays as it was."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ds4x import gitops, pins, series, sources, workspace
from ds4x.errors import Ds4xError, InputError
from ds4x.log import logger
from ds4x.pins import Artifact, Target


@dataclass(frozen=True)
class Rolled:
    kind: str  # "sdist" | "wheel"
    pin: Artifact
    kernels: Artifact | None
    statuses: list[tuple[str, str]]  # (patch, "applies cleanly" | "applies with offsets (refreshed)")


class Conflict(Ds4xError):
    """A patch that does not apply to the release; the tree holds those before it."""

    def __init__(self, error: Ds4xError, target: str, tree: Path, remaining: list[str], upstream: bool) -> None:
        if upstream:
            work = f"{error.hint} (that patch is upstream now)"
        else:
            work = (f"in {tree}, `git am --3way` these patches in series order, fixing each where it stops: "
                    f"{', '.join(remaining)}; then `build.py refresh --target {target} --dir {tree}`")
        super().__init__(f"{error}", f"{tree} holds the patches that applied, as commits; {work}; then delete "
                                     f"{tree} and run this roll again")


def released_kind(target: Target) -> str | None:
    """The pin a release on the index can replace: sdist or wheel (None: git only)."""
    return next((kind for kind in ("sdist", "wheel") if getattr(target, kind) is not None), None)


def fetch_release(target: Target, kind: str, artifact: Artifact, settings: sources.Settings) -> sources.Base:
    """The release's own tree: its file instead of the pinned one, no pinned commit to match."""
    release = replace(target, git=None, sdist=artifact) if kind == "sdist" else replace(target, git=None, wheel=artifact)
    return sources.fetch(release, replace(settings, source=kind))


def _kernels(target: Target, version: str) -> Artifact | None:
    """The kernels wheel of the same release, if the index has one."""
    if target.kernels_wheel is None:
        return None
    try:
        return sources.release(target.kernels_wheel, version)
    except InputError:
        logger.warning("no %s %s on the index: the kernels wheel pin is dropped", target.kernels_wheel.project, version)
        return None


def apply(target: Target, version: str, settings: sources.Settings, layout: workspace.Layout, tree: Path) -> Rolled:
    """The series on `version` in `tree`; a Conflict (tree kept) at the first patch that does not apply."""
    kind = released_kind(target)
    if kind is None:
        raise InputError(f"target {target.name} is pinned to a git commit only", "roll moves sdist and wheel pins")
    new = sources.release(getattr(target, kind), version)
    base = fetch_release(target, kind, new, settings)
    try:
        entries = workspace.apply_series(base, tree, layout)
    except Ds4xError as e:
        if not (tree / ".git").is_dir():  # it failed before any patch: nothing to leave behind
            raise
        listed = [entry.name for entry in series.parse_series(layout.series(target.name))]
        with gitops.open_repo(tree) as repo:
            applied = int(gitops.run(repo, "rev-list", "--count", f"{workspace.BASE_REF}..HEAD"))
        raise Conflict(e, target.name, tree, listed[applied:], "applied upstream" in str(e)) from None
    texts = workspace.export_texts(tree)
    statuses = [(entry.name, "applies cleanly" if entry.path.read_text(encoding="utf-8") == text
                 else "applies with offsets (refreshed)") for entry, text in zip(entries, texts)]
    return Rolled(kind=kind, pin=new, kernels=_kernels(target, new.version), statuses=statuses)


def _inline(artifact: Artifact) -> str:
    return (f'{{ project = "{artifact.project}", version = "{artifact.version}", '
            f'filename = "{artifact.filename}", sha256 = "{artifact.sha256}" }}')


def stage_pin(path: Path, target: Target, rolled: Rolled) -> Path:
    """pins.toml with the target's new pin (comments kept) at `<path>.part`,
    checked by loading it: the caller renames it into place."""
    text = path.read_text(encoding="utf-8")
    header = re.search(rf"(?m)^\[targets\.{re.escape(target.name)}\][ \t]*$", text)
    if header is None:
        raise Ds4xError(f"{path}: no [targets.{target.name}] table to edit", "edit the pin by hand")
    following = re.search(r"(?m)^\[", text[header.end():])
    end = header.end() + following.start() if following else len(text)
    table = text[header.end():end]

    def setting(key: str, value: str | None, table: str) -> str:
        """`key = value` in the table (None: the line removed)."""
        line = re.compile(rf"(?m)^{re.escape(key)}[ \t]*=.*(?:\n|\Z)")
        if value is None:
            return line.sub("", table)
        if not line.search(table):
            raise Ds4xError(f"{path}: no `{key} = ...` line in [targets.{target.name}]", "edit the pin by hand")
        return line.sub(lambda m: f"{key} = {value}" + ("\n" if m[0].endswith("\n") else ""), table, count=1)

    old: Artifact = getattr(target, rolled.kind)
    table = setting(rolled.kind, _inline(rolled.pin), table)
    table = setting("git", None, table)  # the old release's commit; the new file's sha256 pins it now
    table = setting("kernels-wheel", _inline(rolled.kernels) if rolled.kernels else None, table)
    if target.description:
        version = rf"(?<![\d.]){re.escape(old.version)}(?![\d.])"  # 0.27.1 in "v0.27.1", not in "0.27.10"
        table = setting("description", json.dumps(re.sub(version, rolled.pin.version, target.description)), table)
    part = path.with_name(path.name + ".part")
    part.write_text(text[:header.end()] + table + text[end:], encoding="utf-8")
    try:
        written = pins.load(part).get(target.name)
        if getattr(written, rolled.kind) != rolled.pin or written.kernels_wheel != rolled.kernels:
            raise Ds4xError(f"{path}: the new pin did not land in [targets.{target.name}]", "edit the pin by hand")
    except BaseException:
        part.unlink()
        raise
    return part
