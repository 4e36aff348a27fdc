"""A target's patched tree: base + series (+ overlay). Apply, check, export, refresh."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from git import Repo

from ds4x.build import gitops, overlay, series
from ds4x.build.problems import PatchError, PatchProblem
from ds4x.build.sources import Base
from ds4x.checkout import Layout as Layout  # re-exported: bench/rebuild.py builds one
from ds4x.errors import Ds4xError
from ds4x.log import logger
from ds4x.scratch import atomic_dir, scratch_dir

BASE_REF = "refs/ds4x/base"


def _where_it_fails(stderr: str) -> tuple[str | None, int | None, str]:
    """The hunk git stopped at (file, line), else its last word."""
    found = re.search(r"patch failed: (\S+):(\d+)", stderr)
    return (found[1], int(found[2]), "") if found else (None, None, stderr.splitlines()[-1])


def fixed_differently(info: series.PatchInfo, tree: Path) -> tuple[str, str] | None:
    """Upstream's own fix, shown in `tree`: the file that the patch's
    Applied-Upstream field names defines the name it names, as (file, name) (None: not shown)."""
    marker = info.upstream_marker
    if marker is None:
        return None
    path, name = marker
    try:
        text = (tree / path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    defined = re.search(rf"(?m)^\s*(?:(?:async\s+)?def|class)\s+{name}\b|^{name}\s*[:=]", text)
    return marker if defined else None


def _refusal(repo: Repo, tree: Path, entry: series.PatchEntry, info: series.PatchInfo, base: Base, layout: Layout,
             stderr: str) -> PatchError:
    """Why a patch does not apply: upstream has it (as it is, or its own way), it is corrupt, or it conflicts."""
    found = PatchProblem(kind="conflict", patch=entry.path, name=entry.name, target=base.target.name,
                         commit=base.commit, series=layout.series(base.target.name), series_line=entry.line,
                         applied_upstream=info.applied_upstream)
    if gitops.apply_check(repo, entry.path.resolve(), reverse=True) is None:
        return PatchError(replace(found, kind="applied-upstream"))
    shown = fixed_differently(info, tree)
    if shown:
        return PatchError(replace(found, kind="fixed-upstream", file=shown[0], detail=shown[1]))
    corrupt = re.search(r"corrupt patch at line (\d+)", stderr)
    if corrupt:
        return PatchError(replace(found, kind="corrupt", line=int(corrupt[1])))
    file, line, said = _where_it_fails(stderr)
    return PatchError(replace(found, file=file, line=line, detail=said))


@dataclass(frozen=True)
class Applied:
    entries: list[series.PatchEntry]  # applied as commits, in series order
    upstream: list[PatchProblem]  # left out (skip_upstream): upstream has them


def apply_series(base: Base, tree: Path, layout: Layout, *, skip_upstream: bool = False,
                 after_each: Callable[[Repo, series.PatchEntry], None] | None = None) -> Applied:
    """Clone the base into `tree` and `git am` every patch, naming the one that
    fails; with skip_upstream, a patch upstream has (PatchProblem.upstream_has_it) is left out
    instead. `after_each` runs after each patch's commit."""
    entries = series.parse_series(layout.series(base.target.name))
    gitops.clone_local(base.repo, tree, base.commit, shared=True)
    applied = Applied(entries=[], upstream=[])
    with gitops.open_repo(tree) as repo:
        gitops.run(repo, "update-ref", BASE_REF, base.commit)
        for number, entry in enumerate(entries, 1):
            info = series.read_info(entry)  # a patch without DEP-3 fields is refused before it applies
            logger.info("  [%d/%d] apply %s", number, len(entries), entry.name)
            problem = gitops.apply_check(repo, entry.path.resolve())
            if problem is None:
                gitops.am(repo, entry.path.resolve())
                if after_each:
                    after_each(repo, entry)
                applied.entries.append(entry)
                continue
            error = _refusal(repo, tree, entry, info, base, layout, problem)
            if not (skip_upstream and error.problem.upstream_has_it):
                raise error
            logger.info("  %s: upstream has it, left out", entry.name)
            applied.upstream.append(error.problem)
    return applied


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


@dataclass(frozen=True)
class Checked:
    problems: list[PatchProblem]
    upstream: list[PatchProblem]  # patches left out (skip_upstream): upstream has them
    listed: int  # patches in the series


def check(base: Base, layout: Layout, skip_upstream: bool = False) -> Checked:
    """Problems with a target's series: applies exactly, round-trips byte for byte, nothing unused.
    With skip_upstream (another release), a patch upstream has is left out and named instead."""
    problems: list[PatchProblem] = []
    where = layout.series(base.target.name)
    listed = series.parse_series(where)
    with scratch_dir(f"ds4x-{base.target.name}-") as tmp:
        applied = apply_series(base, tmp / "tree", layout, skip_upstream=skip_upstream)
        texts = export_texts(tmp / "tree")
    if len(texts) != len(applied.entries):
        problems.append(PatchProblem(kind="lost-commits", patch=where, target=base.target.name, commit=base.commit,
                                     detail=f"{len(applied.entries)} patches in the series gave {len(texts)} commits"))
    problems += [PatchProblem(kind="re-export-differs", patch=entry.path, name=entry.name, target=base.target.name,
                              commit=base.commit, series=where, series_line=entry.line)
                 for entry, text in zip(applied.entries, texts) if entry.path.read_text(encoding="utf-8") != text]
    unused = sorted(p.name for p in where.parent.glob("*.patch") if p.name not in {e.name for e in listed})
    problems += [PatchProblem(kind="not-listed", patch=where.parent / name, name=name, target=base.target.name,
                              commit=base.commit, series=where) for name in unused]
    return Checked(problems=problems, upstream=applied.upstream, listed=len(listed))


def refresh(tree: Path, layout: Layout, target: str) -> list[str]:
    """Write the work tree's commits back as patch files and the series. The new
    series is made in `patches/<target>.part/` and swapped in whole: an interrupt
    or a failed write leaves the old one as it was."""
    if not (tree / ".git").is_dir():
        raise Ds4xError(f"{tree} is not a development tree", f"run `build.py apply --target {target}` first")
    texts = export_texts(tree)
    names: list[str] = []
    for text in texts:
        name = series.file_name(series.subject_of(text))
        if name in names:
            raise Ds4xError(f"two commits are named {name}", "give them different subjects")
        names.append(name)
    folder = layout.series(target).parent
    with atomic_dir(folder) as part:
        _keep_others(folder, part)
        for name, text in zip(names, texts):
            _write_patch(part / name, text)
        series.write_series(part / "series", names, header_from=folder / "series")
    return names


def _keep_others(folder: Path, part: Path) -> None:
    """What the series folder holds besides patches and the series (notes) goes along."""
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if path.name == "series" or path.suffix == ".patch":
            continue
        if path.is_dir():
            shutil.copytree(path, part / path.name, symlinks=True)
        else:
            shutil.copy2(path, part / path.name, follow_symlinks=False)


def _write_patch(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def materialize(base: Base, dest: Path, layout: Layout) -> None:
    """`apply`: a development tree at dest, built aside and renamed into place."""
    if dest.exists():
        raise Ds4xError(f"{dest} exists", "delete it, or pass --dir to another folder")
    with atomic_dir(dest) as part:
        apply_series(base, part, layout)
        add_overlay(base, part, layout)
