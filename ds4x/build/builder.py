"""`wheel`: base + series + overlay over a compiled wheel -> a stamped ds4x wheel."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from packaging.version import Version

from ds4x import inputs, proc
from ds4x.build import gitops, overlay, releases, series, sources, wheel
from ds4x.build.pins import Artifact, KernelsRelease, Target
from ds4x.build.problems import MissingInput, MissingInputs
from ds4x.build.sources import Base, Settings
from ds4x.build.workspace import Layout, patched_tree
from ds4x.digest import sha256_file
from ds4x.errors import Ds4xError, InputError
from ds4x.log import step
from ds4x.scratch import scratch_dir

DEFAULT_CUDA_ARCHS = "12.0"  # RTX 5090 (sm_120); override with TORCH_CUDA_ARCH_LIST


def check_kernels_choice(target: Target, kernels: str | None) -> None:
    """Refuse before any download what cannot build."""
    if kernels and not (kernels == "source" or kernels.startswith((inputs.KERNELS_WHEEL, inputs.KERNELS_RELEASE))):
        raise InputError(f"--kernels {kernels!r}", "use --kernels source, release:TAG or wheel:PATH_OR_URL")
    if kernels and kernels.startswith(inputs.KERNELS_RELEASE):
        releases.find(target, kernels)
    if kernels == "source" and target.wheel:
        raise InputError(f"target {target.name} is pure Python", "drop --kernels")


def missing_inputs(target: Target, kernels: str | None, settings: Settings) -> list[MissingInput]:
    """Every input the build lacks, its kernels and its source, so that one error
    names them all; those that may yet come from GitHub (certain=False) are named
    only beside one that is certainly missing."""
    found = [m for m in (_missing_kernels(target, kernels, settings), _missing_source(target, settings)) if m]
    return found if any(m.certain for m in found) else []


def _missing_kernels(target: Target, kernels: str | None, settings: Settings) -> MissingInput | None:
    if kernels is None and not (target.wheel or target.kernels_wheel):
        return MissingInput(kind="kernels", lack="none-given", releases=tuple(r.tag for r in target.kernels_releases),
                            kernel_sources=target.kernel_sources)
    if kernels and kernels.startswith(inputs.KERNELS_RELEASE):
        return releases.missing(target, releases.find(target, kernels), settings)
    url = kernels.removeprefix(inputs.KERNELS_WHEEL) if kernels else ""
    if settings.offline and "://" in url:
        bare = sources.split_url_pin(url)[0]
        cached = sources.url_cache_path(bare, settings)
        return None if cached.exists() else MissingInput(kind="kernels", lack="offline", what=bare,
                                                         where=str(cached.parent))
    return None


def _missing_source(target: Target, settings: Settings) -> MissingInput | None:
    kind = sources.source_kind(target, settings)
    dest = sources.base_dir(target, kind, settings)
    if dest.exists():
        return None
    if kind != "git":
        artifact: Artifact = getattr(target, kind)
        if settings.offline:
            return MissingInput(kind="source", lack="offline", what=artifact.filename, where=str(dest))
        return None  # from the package index, as every download
    assert target.git
    what = f"{target.git.url} @ {target.git.commit[:12]}"
    if settings.offline:
        return MissingInput(kind="source", lack="offline", what=what, where=str(dest))
    where = sources.resolve_url(target.git.url, settings.mirrors)
    if "://" not in where and not Path(where).exists():
        return MissingInput(kind="source", lack="mirror-missing", what=what, where=where)
    if where == target.git.url:
        return MissingInput(kind="source", lack="no-mirror", what=what, upstream=target.git.url, certain=False)
    return None


def _wheel_from(target: Target, spec: str, settings: Settings) -> Path:
    if spec.startswith(inputs.KERNELS_RELEASE):
        return releases.fetch(target, releases.find(target, spec), settings)
    where = spec.removeprefix(inputs.KERNELS_WHEEL)
    if "://" in where:
        return sources.fetch_url(where, settings)
    path = Path(where)
    if not path.is_file():
        raise InputError(f"--kernels {spec}: no such file", "give the path or URL of a .whl")
    return path


def _check_same_kernels(target: Target, base: Base, kernels: Path, release: KernelsRelease | None = None) -> None:
    """Compiled modules are reusable only from a build of the same kernel sources:
    the commit in a `+g<sha>` version (or, for a version without one, the pinned
    commit of the release it came from) must have the pin's kernel sources, or a
    release wheel must carry the pinned sdist's version."""
    if not target.kernel_sources:
        return  # pure Python: the per-file check in _python_changes is the whole story
    version = Version(wheel.wheel_version(kernels))
    commit = next((p[1:] for p in (version.local or "").split(".") if p.startswith("g")), None)
    if release and commit and not release.commit.startswith(commit):
        raise Ds4xError(f"{kernels.name} was built from {commit}, not from release {release.tag} ({release.commit[:12]})",
                        f"fix kernels-releases in pins.toml, or use --kernels wheel: with the wheel of {release.tag}")
    commit = commit or (release.commit if release else None)
    if commit and base.origin["kind"] == "git":
        _check_commit_kernels(target, base, kernels, commit)
    elif target.sdist and not commit:
        if version.public != target.sdist.version:
            raise Ds4xError(f"{kernels.name} is not version {target.sdist.version}", "use a kernels wheel of the pinned release")
    else:
        raise Ds4xError(f"{kernels.name}: cannot tell which commit it was built from", "use a wheel whose version ends +g<commit>")


def _check_commit_kernels(target: Target, base: Base, kernels: Path, commit: str) -> None:
    with gitops.open_repo(base.repo) as repo:
        try:
            full = repo.commit(commit).hexsha
        except Exception as e:  # gitdb raises several types for an unknown name
            raise Ds4xError(f"{kernels.name} was built from {commit}, which the cache does not have", "fetch through a full mirror") from e
        if not gitops.same_content(repo, full, base.commit, target.kernel_sources):
            raise Ds4xError(
                f"{kernels.name} was built from {commit}, whose {', '.join(target.kernel_sources)} differ from the pin",
                "use --kernels source, or a release wheel of a commit with the same kernel sources",
            )


def _build_from_source(tree: Path, out: Path) -> Path:
    if not shutil.which("nvcc"):
        raise Ds4xError("--kernels source needs a CUDA toolchain: nvcc is not on PATH", "install CUDA, or use --kernels wheel:")
    env = {**os.environ, "TORCH_CUDA_ARCH_LIST": os.environ.get("TORCH_CUDA_ARCH_LIST", DEFAULT_CUDA_ARCHS)}
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(tree)]
    with step(f"build kernels from source (TORCH_CUDA_ARCH_LIST={env['TORCH_CUDA_ARCH_LIST']})"):
        proc.run(cmd, "install the fork's requirements/build/cuda.txt", env=env)
    return next(out.glob("*.whl"))


def _python_changes(base: Base, tree: Path, kernels: Path, files: list[str],
                    overlays: set[str]) -> dict[str, bytes | None]:
    """Our version of every Python file we change or add (the target's package, and our overlay
    packages beside it), after checking the kernels wheel holds the pinned version of each file
    we change (else it is another source)."""
    changes: dict[str, bytes | None] = {}
    for rel in files:
        if not rel.startswith(base.target.package + "/") and rel not in overlays:
            continue
        pristine = base.repo / rel
        if pristine.exists() and wheel.read_member(kernels, rel) != pristine.read_bytes():
            raise Ds4xError(
                f"{kernels.name}: {rel} differs from {base.target.name} @ {base.commit[:12]}",
                "the kernels wheel is not a build of the pinned source; use one that is",
            )
        changes[rel] = (tree / rel).read_bytes() if (tree / rel).exists() else None
    return changes


def _inputs(target: Target, layout: Layout) -> tuple[dict[str, bytes], list[dict[str, Any]], dict[str, str]]:
    entries = series.parse_series(layout.series(target.name))
    patches = [
        {"name": e.name, "sha256": sha256_file(e.path), **series.read_info(e).fields} for e in entries
    ]
    files = overlay.overlay_files(layout.overlays, target.overlays)
    parts = {f"patch/{e.name}": e.path.read_bytes() for e in entries}
    parts |= {f"overlay/{rel}": p.read_bytes() for rel, p in files.items()}
    parts["pin"] = repr(target).encode()
    return parts, patches, overlay.digest(files)


def build(target: Target, settings: Settings, layout: Layout, kernels: str | None, dist: Path) -> wheel.Built:
    check_kernels_choice(target, kernels)
    missing = missing_inputs(target, kernels, settings)
    if missing:
        raise MissingInputs(target.name, missing)
    parts, patches, overlay_sums = _inputs(target, layout)
    digest = wheel.series_digest(parts)
    base = sources.fetch(target, settings)
    with patched_tree(base, layout) as tree, scratch_dir("ds4x-kernels-") as tmp:
        if kernels == "source":
            kernel_wheel = _build_from_source(tree, Path(tmp))
        elif kernels:
            kernel_wheel = _wheel_from(target, kernels, settings)
            release = releases.find(target, kernels) if kernels.startswith(inputs.KERNELS_RELEASE) else None
            _check_same_kernels(target, base, kernel_wheel, release)
        else:
            pinned: Artifact | None = target.wheel or target.kernels_wheel
            assert pinned
            kernel_wheel = sources.download(pinned, settings)
        with gitops.open_repo(tree) as repo:
            changed = gitops.changed_paths(repo, base.commit)
            epoch = gitops.commit_epoch(repo, base.commit)
        files = sorted({*changed, *overlay_sums})
        # A source build already holds our files; a reused wheel gets them swapped in.
        replace = {} if kernels == "source" else _python_changes(base, tree, kernel_wheel, files, set(overlay_sums))
        version = wheel.local_version(wheel.wheel_version(kernel_wheel), digest)
        provenance = {
            "target": target.name,
            "source": base.origin,
            "kernels": {"wheel": kernel_wheel.name, "sha256": sha256_file(kernel_wheel)},
            "patches": patches,
            "overlay": overlay_sums,
            "digest": digest,
        }
        with step(f"repack {kernel_wheel.name} as {version}"):
            return wheel.repack(
                kernel_wheel, replace=replace, version=version, provenance=provenance, out_dir=dist, epoch=epoch
            )
