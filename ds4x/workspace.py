"""A target's patched tree: base + series (+ overlay). Apply, check, export, refresh."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ds4x import gitops, overlay, series
from ds4x.errors import Ds4xError, InputError
from ds4x.log import logger
from ds4x.scratch import build_aside, scratch_dir
from ds4x.sources import Base

BASE_REF = "refs/ds4x/base"


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Where a checkout of ds4x keeps its series and overlays."""

    patches: Path
    overlays: Path

    def series(self, target: str) -> Path:
        return self.patches / target / "series"


def _where_it_fails(stderr: str) -> str:
    found = re.search(r"patch failed: (\S+):(\d+)", stderr)
    return f"hunk at {found[1]}:{found[2]}" if found else stderr.splitlines()[-1]


def apply_series(base: Base, tree: Path, layout: Layout) -> list[series.PatchEntry]:
    """Clone the base into `tree` and `git am` every patch, naming the one that fails."""
    entries = series.parse_series(layout.series(base.target.name))
    gitops.clone_local(base.repo, tree, base.commit, shared=True)
    with gitops.open_repo(tree) as repo:
        gitops.run(repo, "update-ref", BASE_REF, base.commit)
        for number, entry in enumerate(entries, 1):
            info = series.read_info(entry)
            logger.info("  [%d/%d] apply %s", number, len(entries), entry.name)
            problem = gitops.apply_check(repo, entry.path.resolve())
            if problem is None:
                gitops.am(repo, entry.path.resolve())
                continue
            if gitops.apply_check(repo, entry.path.resolve(), reverse=True) is None:
                upstream = info.applied_upstream or "the pinned source"
                raise Ds4xError(
                    f"{entry.path}: already applied upstream ({upstream}) at {base.target.name} @ {base.commit[:12]}",
                    f"delete line {entry.line} of {layout.series(base.target.name)}",
                )
            corrupt = re.search(r"corrupt patch at line \d+", problem)
            if corrupt:
                raise InputError(f"{entry.path}: {corrupt[0]}",
                                 "restore it from git, or recreate it with `build.py refresh` from its tree")
            raise Ds4xError(
                f"{entry.path}: does not apply to {base.target.name} @ {base.commit[:12]}: {_where_it_fails(problem)}",
                f"rebase it: `build.py apply --target {base.target.name}`, fix, commit, `build.py refresh`",
            )
    return entries


def add_overlay(base: Base, tree: Path, layout: Layout) -> dict[str, Path]:
    files = overlay.overlay_files(layout.overlays, base.target.overlays)
    overlay.copy_into(files, tree)
    # Overlay files are ours, not the patches': keep them out of `refresh`.
    exclude = tree / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a", encoding="utf-8") as f:
        f.writelines(f"/{rel}\n" for rel in files)
    return files


@contextmanager
def patched_tree(base: Base, layout: Layout, with_overlay: bool = True) -> Iterator[Path]:
    """A throwaway patched tree; removed whatever happens."""
    with scratch_dir(f"ds4x-{base.target.name}-") as tmp:
        tree = tmp / "tree"
        apply_series(base, tree, layout)
        if with_overlay:
            add_overlay(base, tree, layout)
        yield tree


def export_texts(tree: Path, stable: bool = True) -> list[str]:
    with gitops.open_repo(tree) as repo:
        return gitops.format_patches(repo, BASE_REF, stable)


def check(base: Base, layout: Layout) -> list[str]:
    """Problems with a target's series: applies exactly, round-trips byte for byte, nothing unused."""
    problems: list[str] = []
    folder = layout.series(base.target.name).parent
    with patched_tree(base, layout, with_overlay=False) as tree:
        entries = series.parse_series(layout.series(base.target.name))
        texts = export_texts(tree)
        if len(texts) != len(entries):
            problems.append(f"{len(entries)} patches in the series gave {len(texts)} commits (an empty patch?)")
        for entry, text in zip(entries, texts):
            if entry.path.read_text(encoding="utf-8") != text:
                problems.append(f"{entry.path}: re-export differs (run refresh and commit the result)")
        listed = {e.name for e in entries}
        unused = sorted(p.name for p in folder.glob("*.patch") if p.name not in listed)
        problems += [f"{folder / name}: not listed in series" for name in unused]
    return problems


def refresh(tree: Path, layout: Layout, target: str) -> list[str]:
    """Write the work tree's commits back as patch files and the series."""
    if not (tree / ".git").is_dir():
        raise Ds4xError(f"{tree} is not a development tree", f"run `build.py apply --target {target}` first")
    folder = layout.series(target).parent
    folder.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    texts = export_texts(tree)
    for text in texts:
        name = series.file_name(series.subject_of(text))
        if name in names:
            raise Ds4xError(f"two commits are named {name}", "give them different subjects")
        names.append(name)
    for stale in folder.glob("*.patch"):
        stale.unlink()
    for name, text in zip(names, texts):
        (folder / name).write_text(text, encoding="utf-8")
    series.write_series(layout.series(target), names)
    return names


def materialize(base: Base, dest: Path, layout: Layout) -> None:
    """`apply`: a development tree at dest, built aside and renamed into place."""
    if dest.exists():
        raise Ds4xError(f"{dest} exists", "delete it, or pass --dir to another folder")

    def fill(part: Path) -> None:
        apply_series(base, part, layout)
        add_overlay(base, part, layout)

    build_aside(dest, fill)
