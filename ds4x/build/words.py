"""The words for what workspace, roll, newest and builder raise or return as records:
the CLI prints these, and nothing reads them back (STYLE.md, errors as data)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ds4x.build.problems import MissingInput, MissingInputs, PatchError, PatchProblem, RollConflict
from ds4x.errors import Ds4xError

if TYPE_CHECKING:
    from ds4x.build import newest, roll


def applies(clean: bool) -> str:
    """How a patch applied to the release a roll moves to."""
    return "applies cleanly" if clean else "applies with offsets (refreshed)"


def pinned(rolled: roll.Rolled) -> str:
    """What a roll put in pins.toml."""
    if rolled.pin is None:
        assert rolled.git is not None
        return f"commit {rolled.git.commit}"
    text = f"{rolled.pin.filename} (sha256 {rolled.pin.sha256[:12]})"
    text += f", kernels {rolled.kernels.filename}" if rolled.kernels else ""
    return text + (f", commit {rolled.git.commit}" if rolled.git else "")


def worded(error: Ds4xError) -> tuple[str, str | None]:
    """An error's message and hint, as the user reads them."""
    if isinstance(error, RollConflict):
        return worded(error.cause)[0], _roll_hint(error)
    if isinstance(error, PatchError):
        return said(error.problem), _patch_hint(error.problem)
    if isinstance(error, MissingInputs):
        return _missing(error)
    return str(error), error.hint


def _missing(error: MissingInputs) -> tuple[str, str]:
    """One line per missing input, and one hint line per input on how to get it."""
    kinds = " and ".join(f"its {m.kind}" for m in error.missing)
    worded = [(m.kind, *_lack_and_fix(m)) for m in error.missing]
    lines = [f"target {error.target} lacks {kinds}:", *(f"  - {lack}" for _, lack, _ in worded)]
    hints = [f"{kind}: {fix}" for kind, _, fix in worded]
    return "\n".join(lines), "\n      ".join(hints)  # under the CLI's "hint: "


def _lack_and_fix(m: MissingInput) -> tuple[str, str]:
    """What is missing and why, and how to get it: one branch per kind of lack."""
    what = f"{m.kind} {m.what}" if m.what else m.kind
    if m.lack == "none-given":
        known = ", ".join(m.releases) if m.releases else "none yet"
        shared = ", ".join(m.kernel_sources) or "kernel sources"
        return (f"{m.kind}: none given (--kernels), and pins.toml pins none",
                f"--kernels release:TAG (pins.toml knows: {known}), "
                f"--kernels wheel:PATH_OR_URL (a release wheel whose commit has the pin's {shared}), "
                "or --kernels source (CUDA toolchain and the fork's build requirements; "
                "TORCH_CUDA_ARCH_LIST, default 12.0)")
    if m.lack == "offline":
        return f"{what}: not in the cache ({m.where}), and --offline", "run once without --offline"
    if m.lack == "mirror-missing":
        return f"{what}: its mirror {m.where} does not exist", "fix --mirror / DS4X_MIRRORS"
    serves = "PATH_OR_URL" if m.kind == "source" else "URL (http(s) or file://; URL/download/<tag>/<file>)"
    mirror = f"--mirror {m.upstream}={serves} (or DS4X_MIRRORS)"
    if m.lack == "no-mirror":
        return (f"{what}: not in the cache, and no mirror is set for {m.upstream}",
                f"the next run fetches it from {m.upstream} if that is reachable; where it is blocked, {mirror}")
    return (f"{what}: the mirror of {m.upstream} is the local {m.where}, which has no such file",  # mirror-has-no-file
            f"{mirror}: a git repository holds no release files")


def said(problem: PatchProblem) -> str:
    """One line: the patch, what is wrong, where."""
    p, where = problem, f"{problem.target} @ {problem.commit[:12]}"
    if p.kind == "conflict":
        hunk = f"hunk at {p.file}:{p.line}" if p.file else p.detail
        return f"{p.patch}: does not apply to {where}: {hunk}{_touched(p)}"
    if p.kind == "corrupt":
        return f"{p.patch}: corrupt patch at line {p.line}"
    if p.kind == "applied-upstream":
        return f"{p.patch}: already applied upstream ({p.applied_upstream or 'the pinned source'}) at {where}"
    if p.kind == "fixed-upstream":
        return (f"{p.patch}: fixed upstream (differently) at {where}: {p.file} defines {p.detail} "
                f"(Applied-Upstream: {p.applied_upstream})")
    if p.kind == "re-export-differs":
        return f"{p.patch}: re-export differs (run refresh and commit the result)"
    if p.kind == "not-listed":
        return f"{p.patch}: not listed in series"
    return f"{p.detail} (an empty patch?)"  # lost-commits


def _touched(problem: PatchProblem) -> str:
    """The upstream commits a roll crossed that touched the conflicting file."""
    commits = problem.commits
    if not commits:
        return ""
    shown = "; ".join(commits[:5]) + (f"; and {len(commits) - 5} more" if len(commits) > 5 else "")
    return (f"; {len(commits)} upstream commits between {problem.since[:12]} and {problem.commit[:12]} "
            f"touched {problem.file}: {shown}")


def _patch_hint(problem: PatchProblem) -> str | None:
    if problem.upstream_has_it:
        return f"delete line {problem.series_line} of {problem.series}"
    if problem.kind == "corrupt":
        return "restore it from git, or recreate it with `build.py refresh` from its tree"
    if problem.kind == "conflict":
        return f"rebase it: `build.py apply --target {problem.target}`, fix, commit, `build.py refresh`"
    return None


def _roll_hint(conflict: RollConflict) -> str:
    tree, cause = conflict.tree, conflict.cause
    if isinstance(cause, PatchError) and cause.problem.upstream_has_it:
        work = f"{_patch_hint(cause.problem)} (that patch is upstream now)"
    else:
        merge = (f" (the pinned base is there as {conflict.pinned_ref}, so each merges, with conflict markers "
                 "where it clashes)" if conflict.pinned_ref else "")
        work = (f"in {tree}, `git am --3way` these patches in series order{merge}, fixing each where it stops: "
                f"{', '.join(conflict.remaining)}; then `build.py refresh --target {conflict.target} --dir {tree}`")
    return f"{tree} holds the patches that applied, as commits; {work}; then delete {tree} and run this roll again"


def drift_line(drift: newest.Drift) -> str:
    if drift.newest is None:
        return f"{drift.target}: pinned to a git commit; a local mirror (--mirror) shows its newest commit"
    if drift.newest == drift.pinned:
        with_kernels = f" with a {drift.kernels} wheel" if drift.kernels else ""
        return f"{drift.target}: {drift.pinned} is the newest {'release' if drift.released else 'commit'}{with_kernels}"
    return f"{drift.target}: pinned {drift.pinned}, newest {drift.newest}: {_drift_status(drift)}"


def _drift_status(drift: newest.Drift) -> str:
    """Each patch upstream has, then whether the rest applies."""
    named = "".join(f"{p.name}: {_upstream_how(p)} (drop it from the series at the roll); " for p in drift.upstream)
    rest = "the rest " if drift.upstream else ""
    if drift.upstream and len(drift.upstream) == drift.listed:
        return named + "no other patch"
    if isinstance(drift.failure, Ds4xError):
        return named + f"{rest}does not apply: {worded(drift.failure)[0]}"
    if drift.failure is not None:
        return named + f"{rest}does not apply: {said(drift.failure)}"
    return named + rest + ("applies with offsets (the patches would be refreshed)" if drift.offsets else "applies")


def _upstream_how(problem: PatchProblem) -> str:
    if problem.kind == "fixed-upstream":
        return f"fixed upstream (differently): {problem.file} defines {problem.detail}"
    return "applied upstream (as it is)"
