"""What can be wrong with a patch or a build's inputs, as records: workspace, roll
and builder raise or return them, the CLI words them. Nothing downstream reads
the words (STYLE.md, errors as data)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ds4x.errors import EXIT_BAD_INPUT, EXIT_FAILED, Ds4xError, InputError

Kind = Literal[
    "conflict",  # does not apply to the base: `file`:`line` is the hunk git stopped at (None: `detail` is git's word)
    "corrupt",  # git cannot read it: `line` is where, in the patch file
    "applied-upstream",  # it reverse-applies: upstream has it as it is
    "fixed-upstream",  # upstream's own fix: `file` defines `detail`, the name its Applied-Upstream field names
    "re-export-differs",  # applies, but exporting it again does not give its bytes
    "not-listed",  # a patch file the series does not name
    "lost-commits",  # the series gave fewer or more commits than patches: `detail` says how many of each
]
UPSTREAM: tuple[Kind, ...] = ("applied-upstream", "fixed-upstream")


@dataclass(frozen=True, kw_only=True)
class PatchProblem:
    kind: Kind
    patch: Path  # the patch file (lost-commits: the series file)
    name: str = ""  # as the series names it
    target: str = ""
    commit: str = ""  # the base it was tried on
    series: Path | None = None
    series_line: int = 0  # the patch's line in `series`
    file: str | None = None
    line: int | None = None
    detail: str = ""
    applied_upstream: str | None = None  # the patch's Applied-Upstream field
    since: str = ""  # a roll from this commit to `commit`...
    commits: tuple[str, ...] = ()  # ...crossed these upstream commits ("<short> <subject>") that touched `file`

    @property
    def upstream_has_it(self) -> bool:
        return self.kind in UPSTREAM


class PatchError(Ds4xError):
    """A patch that does not apply; the CLI words `problem`."""

    def __init__(self, problem: PatchProblem) -> None:
        code = EXIT_BAD_INPUT if problem.kind == "corrupt" else EXIT_FAILED
        super().__init__(f"{problem.patch}: {problem.kind}", exit_code=code)
        self.problem = problem


class RollConflict(Ds4xError):
    """A roll stopped at a patch: `tree` holds those before it, as commits; `remaining` are to apply there."""

    def __init__(self, cause: Ds4xError, *, target: str, tree: Path, remaining: list[str],
                 pinned_ref: str | None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.target = target
        self.tree = tree
        self.remaining = remaining
        self.pinned_ref = pinned_ref  # the ref naming the pinned base in the tree, so `git am --3way` merges


Lack = Literal[
    "none-given",  # kernels: no --kernels, and none pinned
    "offline",  # not in the cache, and --offline
    "no-mirror",  # not in the cache, and no mirror for `upstream`: it comes from there if reachable (certain=False)
    "mirror-missing",  # the local mirror `where` does not exist
    "mirror-has-no-file",  # the local mirror `where` holds no such file (a git repository holds no release files)
]


@dataclass(frozen=True, kw_only=True)
class MissingInput:
    """An input a build needs and does not have: its kernels or its source."""

    kind: Literal["kernels", "source"]
    lack: Lack
    what: str = ""  # the input: the release, URL or pinned file; the source's URL and commit
    upstream: str = ""  # the URL a mirror would stand for
    where: str = ""  # the cache entry, or the local mirror
    releases: tuple[str, ...] = ()  # kernels: the tags `--kernels release:` knows
    kernel_sources: tuple[str, ...] = ()  # kernels: what a reused wheel's commit must share with the pin
    certain: bool = True  # False: it may yet come from `upstream`; named only beside a certain one


class MissingInputs(InputError):
    """Every input a target lacks, at once; the CLI words `missing`."""

    def __init__(self, target: str, missing: list[MissingInput]) -> None:
        super().__init__(f"target {target}: missing {', '.join(m.kind for m in missing)}")
        self.target = target
        self.missing = missing
