"""`roll`: move a target's pin to another release (sdist or wheel pins) or
commit (git-only pins). The series is applied there in a development tree,
patch by patch. When every patch applies, the patches are refreshed from the
tree and pins.toml gets the new pin (`run`, the whole transaction). At the
first patch that does not apply, the tree is left for the developer
(RollConflict), and pins.toml stays as it was."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from ds4x.build import gitops, pins, series, sources, workspace
from ds4x.build.pins import Artifact, GitPin, Target
from ds4x.build.problems import PatchError, PatchProblem, RollConflict
from ds4x.checkout import Checkout, Layout
from ds4x.errors import Ds4xError, InputError
from ds4x.log import logger, step
from ds4x.scratch import atomic_path

# The pinned base's commit in a conflicted tree: `git am --3way` finds each
# patch's preimage blobs there and merges, instead of stopping at the hunk.
PINNED_REF = "refs/ds4x/pinned"
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


@dataclass(frozen=True)
class Rolled:
    kind: str  # "sdist" | "wheel" | "git"
    pin: Artifact | None  # the new file (None: a git-only target)
    kernels: Artifact | None
    git: GitPin | None  # the new commit, when it can be pinned in full
    statuses: list[tuple[str, bool]]  # (patch, applies cleanly; False: with offsets, so it is refreshed)
    tree: Path  # the development tree it was applied in


def released_kind(target: Target) -> str | None:
    """The pin a release on the index can replace: sdist or wheel (None: git only)."""
    return next((kind for kind in ("sdist", "wheel") if getattr(target, kind) is not None), None)


def fetch_release(target: Target, kind: str, pin: Artifact | GitPin, settings: sources.Settings) -> sources.Base:
    """Another release's or commit's own tree: its file instead of the pinned one
    (no pinned commit to match), or its commit instead of the pinned one."""
    if isinstance(pin, GitPin):
        return sources.fetch(replace(target, git=pin), replace(settings, source="git"))
    release = replace(target, git=None, sdist=pin) if kind == "sdist" else replace(target, git=None, wheel=pin)
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


def _local(where: str) -> bool:
    """A mirror on this machine (a path), where git history can be read."""
    return sources.local_mirror(where) is not None


def _git_pin(target: Target, base: sources.Base, settings: sources.Settings) -> GitPin | None:
    """The commit the release's sdist was cut from, in full. The sdist names an
    abbreviation; a local mirror of the target's repository resolves it. None
    (with a warning): the git pin cannot follow, and is dropped."""
    if target.git is None:
        return None
    short = sources.sdist_commit(base.repo, target.package)
    where = sources.resolve_url(target.git.url, settings.mirrors)
    full = gitops.resolve_commit(Path(where), short) if short and _local(where) else None
    if full:
        return replace(target.git, commit=full)
    named = f"names commit {short}" if short else f"names no commit (no {target.package}/_version.py)"
    mirror = f"the mirror {where} does not have it" if _local(where) else f"no local mirror of {target.git.url} is set"
    logger.warning("%s %s and %s: the git pin is dropped; a local mirror with that commit (--mirror) keeps it",
                   base.origin["filename"], named, mirror)
    return None


def _add_pinned_base(target: Target, kind: str, settings: sources.Settings, tree: Path) -> bool:
    """The pinned base's commit in the conflicted tree, when the cache has it:
    its objects as an alternate (no copy, no network), the commit as PINNED_REF."""
    try:
        pinned = sources.fetch(target, replace(settings, source=kind, offline=True))
        with (tree / ".git" / "objects" / "info" / "alternates").open("a", encoding="utf-8") as alternates:
            alternates.write(f"{pinned.repo / '.git' / 'objects'}\n")
        with gitops.open_repo(tree) as repo:
            gitops.run(repo, "update-ref", PINNED_REF, pinned.commit)
    except (Ds4xError, OSError) as e:
        logger.warning("the pinned base is not in the tree (%s): `git am --3way` cannot merge", e)
        return False
    return True


def newest_commit(target: Target, settings: sources.Settings) -> GitPin | None:
    """A git-only target's newest upstream commit: the HEAD of its local mirror
    (None: no local mirror, so no history to read)."""
    if target.git is None:
        return None
    where = sources.resolve_url(target.git.url, settings.mirrors)
    head = gitops.resolve_commit(Path(where), "HEAD") if _local(where) else None
    return replace(target.git, commit=head) if head else None


def _commit(git: GitPin, to: str, settings: sources.Settings) -> GitPin:
    """`--to` as a full commit: 40 hex digits, or fewer that a local mirror resolves."""
    to = to.lower()
    if not _COMMIT.fullmatch(to):
        raise InputError(f"--to {to}: {git.url} is pinned to a git commit", "give a commit id (hex)")
    where = sources.resolve_url(git.url, settings.mirrors)
    if _local(where):
        full = gitops.resolve_commit(Path(where), to)
        if full is None:
            raise InputError(f"--to {to}: no such commit in {where}", "give a commit of that repository")
        to = full
    if len(to) < 40:
        raise InputError(f"--to {to}: an abbreviated commit", "give all 40 hex digits, or set a local mirror")
    return replace(git, commit=to)


def _history(tree: Path, old: str, problem: PatchProblem) -> PatchProblem:
    """The conflict with the upstream commits between the pin and the new base
    that touched its hunk's file (none when the tree has no such history: a shallow fetch)."""
    if problem.kind != "conflict" or problem.file is None:
        return problem
    with gitops.open_repo(tree) as repo:
        try:
            # old...new: the commits on either side (a roll may go back, or to another branch)
            log = gitops.run(repo, "log", "--format=%h %s", f"{old}...{problem.commit}", "--", problem.file)
        except Ds4xError:
            return problem
    return replace(problem, since=old, commits=tuple(log.splitlines()))


def run(target: Target, to: str, settings: sources.Settings, checkout: Checkout, tree: Path | None = None) -> Rolled:
    """The roll: the series on `to` in a new development tree, then the patches
    refreshed from it and the new pin in pins.toml, both or neither."""
    tree = tree or checkout.trees / f"{target.name}-{to[:12] if len(to) == 40 else to}"  # a commit id, shortened
    if tree.exists():
        raise InputError(f"{tree} exists", "delete it, or pass --dir to another folder")
    with step(f"roll {target.name} to {to} in {tree}"):
        rolled = apply(target, to, settings, checkout.layout, tree)
    with staged_pin(checkout.pins, target, rolled):  # checked before the patches change, in place after
        workspace.refresh(tree, checkout.layout, target.name)
    return rolled


def apply(target: Target, to: str, settings: sources.Settings, layout: Layout, tree: Path) -> Rolled:
    """The series on release or commit `to` in `tree`; a RollConflict (tree kept) at the first patch that does not apply."""
    kind = released_kind(target) or "git"
    new: Artifact | None = None
    git: GitPin | None = None
    if kind == "git":
        assert target.git is not None
        git = _commit(target.git, to, settings)
        base = fetch_release(target, kind, git, settings)
    else:
        new = sources.release(getattr(target, kind), to)
        base = fetch_release(target, kind, new, settings)
    try:
        entries = workspace.apply_series(base, tree, layout).entries
    except Ds4xError as e:
        raise _conflict(e, target, kind, settings, layout, tree) from None
    texts = workspace.export_texts(tree)
    statuses = [(entry.name, entry.path.read_text(encoding="utf-8") == text) for entry, text in zip(entries, texts)]
    if new is None:
        return Rolled(kind=kind, pin=None, kernels=target.kernels_wheel, git=git, statuses=statuses, tree=tree)
    # a wheel names no commit: a git line beside a wheel pin would keep the old one, so it goes
    return Rolled(kind=kind, pin=new, kernels=_kernels(target, new.version), statuses=statuses, tree=tree,
                  git=_git_pin(target, base, settings) if kind == "sdist" else None)


def _conflict(error: Ds4xError, target: Target, kind: str, settings: sources.Settings, layout: Layout,
              tree: Path) -> Ds4xError:
    """What a failed apply leaves: a RollConflict naming the tree and the patches
    still to apply there, or the error itself when no patch was tried."""
    if not (tree / ".git").is_dir():  # it failed before any patch: nothing to leave behind
        return error
    listed = [entry.name for entry in series.parse_series(layout.series(target.name))]
    try:
        with gitops.open_repo(tree) as repo:
            applied = int(gitops.run(repo, "rev-list", "--count", f"{workspace.BASE_REF}..HEAD"))
    except Ds4xError:  # the tree was not set up: the failure is the clone's own
        return error
    if isinstance(error, PatchError) and kind == "git" and target.git:
        error = PatchError(_history(tree, target.git.commit, error.problem))
    pinned_ref = PINNED_REF if _add_pinned_base(target, kind, settings, tree) else None
    return RollConflict(error, target=target.name, tree=tree, remaining=listed[applied:], pinned_ref=pinned_ref)


def _inline(artifact: Artifact) -> str:
    return (f'{{ project = "{artifact.project}", version = "{artifact.version}", '
            f'filename = "{artifact.filename}", sha256 = "{artifact.sha256}" }}')


@contextmanager
def staged_pin(path: Path, target: Target, rolled: Rolled) -> Iterator[Path]:
    """pins.toml with the target's new pin (comments kept), written aside and
    checked by loading it before the block runs (so before any patch file
    changes); it replaces `path` when the block ends well, and is gone if it fails."""
    text = _pinned_text(path, target, rolled)
    with atomic_path(path) as part:
        part.write_text(text, encoding="utf-8")
        written = pins.load(part).get(target.name)
        if ((rolled.pin is not None and getattr(written, rolled.kind) != rolled.pin)
                or written.kernels_wheel != rolled.kernels or written.git != rolled.git):
            raise Ds4xError(f"{path}: the new pin did not land in [targets.{target.name}]", "edit the pin by hand")
        yield part


def _pinned_text(path: Path, target: Target, rolled: Rolled) -> str:
    """pins.toml's text with the target's table holding the new pin."""
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

    git = f'{{ url = "{rolled.git.url}", commit = "{rolled.git.commit}" }}' if rolled.git else None
    table = setting("git", git, table)  # None: dropped, the new file's sha256 pins the release on its own
    if rolled.pin is not None:
        old: Artifact = getattr(target, rolled.kind)
        table = setting(rolled.kind, _inline(rolled.pin), table)
        table = setting("kernels-wheel", _inline(rolled.kernels) if rolled.kernels else None, table)
        if target.description:
            version = rf"(?<![\d.]){re.escape(old.version)}(?![\d.])"  # 0.27.1 in "v0.27.1", not in "0.27.10"
            table = setting("description", json.dumps(re.sub(version, rolled.pin.version, target.description)),
                            table)
    return text[:header.end()] + table + text[end:]
