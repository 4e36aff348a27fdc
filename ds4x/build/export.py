"""`export`: the series as upstream takes it, standing alone. The patch files
keep the overlay out (it is copied in at build time); an exported series
carries it as new files, so that it applies to the pinned base with `git am`
and every module its code imports is there. Each overlay file goes into the
first patch that needs it: its added Python imports it, directly or through
other overlay modules. Files no patch imports (entry points, tools) go into
the last patch, so the applied export is the tree the wheel ships."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from git import Repo

from ds4x.build import gitops, overlay, series, workspace
from ds4x.build.sources import Base
from ds4x.errors import InputError
from ds4x.inputs import CONTROL, not_utf8
from ds4x.scratch import scratch_dir

NUMBERED = "[0-9][0-9][0-9][0-9]-*.patch"  # the files an export --output writes: 0001-subject.patch, ...

_IMPORT = re.compile(r"^\s*(?:from\s+(\.*[\w.]*)\s+import\s+\(?([\w\s,]*)|import\s+([\w.]+(?:\s*,\s*[\w.]+)*))")
_OPEN = re.compile(r"^\s*from\s+\S+\s+import\s+\(")
_AUTHOR = re.compile(r"[^<>\n]*[^<>\s] <[^<>\s]+>")


def imported_modules(lines: Iterable[str], package: str | None = None) -> set[str]:
    """Dotted names the import statements in `lines` may load: `from M import a`
    gives M and M.a (a may be a submodule). A relative M resolves against
    `package`, and is skipped without one (patch lines: the overlay is never
    beside an upstream file)."""
    found: set[str] = set()
    for line in _statements(lines):
        match = _IMPORT.match(line)
        if match is None:
            continue
        if match[3]:
            found.update(name.strip() for name in match[3].split(","))
            continue
        module = _absolute(match[1], package)
        if module is None:
            continue
        found.add(module)
        found.update(f"{module}.{name}" for name in re.findall(r"\w+", match[2]) if name != "as")
    return found


def _statements(lines: Iterable[str]) -> Iterable[str]:
    """Lines, with a parenthesised `from M import (` joined up to its `)`."""
    pending: str | None = None
    for line in lines:
        if pending is not None:
            pending += " " + line.strip()
            if ")" in line:
                yield pending
                pending = None
        elif _OPEN.match(line) and ")" not in line:
            pending = line.rstrip()
        else:
            yield line
    if pending is not None:
        yield pending


def _absolute(module: str, package: str | None) -> str | None:
    level = len(module) - len(module.lstrip("."))
    if level == 0:
        return module
    if package is None:
        return None
    parts = package.split(".")[: len(package.split(".")) - level + 1]
    return ".".join([*parts, module[level:]] if module[level:] else parts)


def _files_of(module: str, files: dict[str, Path]) -> list[str]:
    """The overlay files importing `module` loads itself: its packages' __init__.py and its own file."""
    parts = module.split(".")
    candidates = [f"{'/'.join(parts[:i])}/__init__.py" for i in range(1, len(parts) + 1)]
    return [rel for rel in [*candidates, f"{'/'.join(parts)}.py"] if rel in files]


def overlay_needs(modules: set[str], files: dict[str, Path]) -> set[str]:
    """The overlay files importing `modules` loads, through the overlay's own imports."""
    needed: set[str] = set()
    todo = list(modules)
    while todo:
        for rel in _files_of(todo.pop(), files):
            if rel not in needed:
                needed.add(rel)
                package = PurePosixPath(rel).parent.as_posix().replace("/", ".")
                todo += imported_modules(files[rel].read_text(encoding="utf-8").splitlines(), package)
    return needed


def added_python_lines(patch: str) -> list[str]:
    """The lines a patch adds to Python files."""
    lines: list[str] = []
    python = False
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            python = line.endswith(".py")
        elif python and line.startswith("+") and not line.startswith("+++"):
            lines.append(line[1:])
    return lines


def placement(patches: list[tuple[str, str]], files: dict[str, Path]) -> dict[str, list[str]]:
    """Patch name -> the overlay files it adds: each in the first (name, text) that needs it, and
    what the overlay's entry points (`python -m PKG`) need beyond them in the last. A module
    neither needs (the fork's hooks, exported for upstream) stays out: upstream gets only code it runs."""
    placed: dict[str, list[str]] = {}
    done: set[str] = set()
    for name, text in patches:
        needed = overlay_needs(imported_modules(added_python_lines(text)), files) - done
        placed[name] = sorted(needed)
        done |= needed
    if patches:
        entries = {rel.removesuffix(".py").replace("/", ".") for rel in files if rel.endswith("/__main__.py")}
        placed[patches[-1][0]] += sorted(overlay_needs(entries, files) - done)
    return placed


def author_of(given: str | None) -> str:
    """`--author`, else the caller's own git identity: it authors and signs off every patch."""
    if given is not None:
        return _header_name(given.strip(), "--author", "give it as --author 'Your Name <you@example.org>'")
    found = gitops.caller_identity()
    if found is None:
        raise InputError("export signs each patch off, and git names no author",
                         "set git config user.name and user.email, or pass --author 'Name <email>'")
    return _header_name(found, "git's author (user.name, user.email or GIT_AUTHOR_*)",
                        "fix it in git config, or pass --author 'Name <email>'")


def _header_name(text: str, where: str, fix: str) -> str:
    """'Name <email>' that a patch's From: and Signed-off-by: can hold: UTF-8, no control characters."""
    if (shown := not_utf8(text)) is not None:
        raise InputError(f"{where} '{shown}' is not valid UTF-8, which the patches' headers must be", fix)
    if CONTROL.search(text):
        raise InputError(f"{where} {text!r} holds a control character, which would break the patches' headers", fix)
    if not _AUTHOR.fullmatch(text):
        raise InputError(f"{where} {text!r} is not 'Name <email>'", fix)
    return text


def upstream_texts(base: Base, layout: workspace.Layout, author: str) -> list[str]:
    """The series with the overlay placed in it, as numbered format-patch texts with diffstat."""
    files = overlay.overlay_files(layout.overlays, base.target.overlays)
    entries = series.parse_series(layout.series(base.target.name))
    placed = placement([(e.name, e.path.read_text(encoding="utf-8")) for e in entries], files)
    with scratch_dir(f"ds4x-{base.target.name}-") as tmp:
        tree = tmp / "tree"

        def complete(repo: Repo, entry: series.PatchEntry) -> None:
            overlay.copy_into({rel: files[rel] for rel in placed[entry.name]}, tree)
            gitops.sign_and_amend(repo, author, placed[entry.name])

        workspace.apply_series(base, tree, layout, after_each=complete)
        return workspace.export_texts(tree, stable=False)
