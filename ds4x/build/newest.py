"""`check --newest`: does the series apply to the newest release on the index,
or to the newest commit of a git-only target's local mirror? Upstream drift at
a glance; pins.toml is not touched. A target that reuses a kernels wheel is
checked at the newest release that wheel's project has too. A patch upstream has taken (as it is or its
own way) is no conflict: it is named, and the rest of the series is checked without it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from ds4x.build import roll, sources, workspace
from ds4x.build.pins import Artifact, GitPin, Target
from ds4x.build.problems import PatchProblem
from ds4x.checkout import Layout
from ds4x.errors import Ds4xError


@dataclass(frozen=True, kw_only=True)
class Drift:
    """One target against upstream's newest release (or commit)."""

    target: str
    released: bool  # a release on the index; False: a commit of the local mirror
    pinned: str  # the pinned version, or commit (12 digits)
    newest: str | None  # None: a git pin with no local mirror to read its newest commit from
    kernels: str | None = None  # the kernels wheel's project, which bounds the newest release
    upstream: tuple[PatchProblem, ...] = ()  # patches upstream has there, left out
    listed: int = 0  # patches in the series
    failure: PatchProblem | Ds4xError | None = None  # why the series (the rest of it) does not apply there
    offsets: bool = False  # it applies, with offsets: the patches would be refreshed


def drifts(targets: Iterable[Target], settings: sources.Settings, layout: Layout) -> Iterator[Drift]:
    """One Drift per target, each as soon as it is known."""
    for target in targets:
        yield drift(target, settings, layout)


def newest_release(target: Target, kind: str) -> Artifact:
    """The newest release on the index; for a target whose wheel reuses a kernels
    wheel, the newest release that the kernels wheel's project also has (the
    target is built and tested on both)."""
    pinned: Artifact = getattr(target, kind)
    if target.kernels_wheel is None:
        return sources.release(pinned)
    return sources.release(pinned, sources.release(target.kernels_wheel).version)


def drift(target: Target, settings: sources.Settings, layout: Layout) -> Drift:
    kind = roll.released_kind(target)
    pin: Artifact | GitPin | None
    if kind is None:
        pin = roll.newest_commit(target, settings)
        pinned, latest = target.git.commit[:12] if target.git else "", pin.commit[:12] if pin else None
    else:
        pin = newest_release(target, kind)
        pinned, latest = getattr(target, kind).version, pin.version
    found = Drift(target=target.name, released=kind is not None, pinned=pinned, newest=latest,
                  kernels=target.kernels_wheel.project if kind and target.kernels_wheel else None)
    if pin is None or latest == pinned:
        return found
    try:
        checked = workspace.check(roll.fetch_release(target, kind or "git", pin, settings), layout, skip_upstream=True)
    except Ds4xError as e:
        return replace(found, failure=e)
    problems = [p for p in checked.problems if p.kind != "not-listed"]
    offsets = bool(problems) and all(p.kind == "re-export-differs" for p in problems)
    return replace(found, upstream=tuple(checked.upstream), listed=checked.listed, offsets=offsets,
                   failure=None if offsets or not problems else problems[0])
