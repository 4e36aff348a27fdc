"""`--kernels release:TAG`: a release wheel of a target's git repository that
pins.toml names (`kernels-releases`: tag, file name, sha256 when known), from
`<git url>/releases/download/<tag>/<file>` or through the mirror of that URL.

The mirrors are the same URL=REPLACEMENT pairs as for git (longest prefix
wins): a URL mirror of the repository serves `<mirror>/releases/download/<tag>/<file>`;
a mirror of `<repository>/releases` alone serves `<mirror>/download/<tag>/<file>`,
beside a local git mirror of the repository, which holds no release files.
"""

from __future__ import annotations

from pathlib import Path

from ds4x import inputs, sources
from ds4x.errors import InputError
from ds4x.pins import KernelsRelease, Target
from ds4x.problems import MissingInput, MissingInputs


def find(target: Target, spec: str) -> KernelsRelease:
    """The release `release:TAG` names; a tag pins.toml does not list is refused, naming those it does."""
    tag = spec.removeprefix(inputs.KERNELS_RELEASE)
    for release in target.kernels_releases:
        if release.tag == tag:
            return release
    known = ", ".join(r.tag for r in target.kernels_releases) or "none"
    raise InputError(
        f"--kernels {spec}: target {target.name} has no release {tag} in pins.toml; known tags: {known}",
        f"use a known tag, or add the release to kernels-releases in [targets.{target.name}] "
        "(its tag and wheel file name; its sha256 when known)",
    )


def repository(target: Target) -> str:
    assert target.git  # pins.load refuses kernels-releases without a git pin
    return target.git.url.rstrip("/").removesuffix(".git")


def upstream_url(target: Target, release: KernelsRelease) -> str:
    """Where GitHub serves the release's wheel (tag and name are URL-safe: pins.load checks them)."""
    return f"{repository(target)}/releases/download/{release.tag}/{release.filename}"


def located(target: Target, release: KernelsRelease, settings: sources.Settings) -> str | MissingInput:
    """The URL to download the wheel from (a local mirror's file as a file:// URL),
    or why the mirror set for it cannot serve it."""
    upstream = upstream_url(target, release)
    where = sources.resolve_url(upstream, settings.mirrors)
    if "://" in where:
        return where
    path = Path(where)
    if path.is_file():
        return path.absolute().as_uri()
    return MissingInput(kind="kernels", lack="mirror-has-no-file", what=f"release {release.tag}",
                        upstream=f"{repository(target)}/releases", where=where)


def missing(target: Target, release: KernelsRelease, settings: sources.Settings) -> MissingInput | None:
    """Why the release's wheel cannot be had on this run (certain=False: only if
    GitHub, which no mirror stands for, is unreachable), else None."""
    url = located(target, release, settings)
    if isinstance(url, MissingInput):
        return url
    cached = sources.url_cache_path(url, settings)
    what = f"release {release.tag} ({url})"
    if cached.exists():
        return None
    if settings.offline:
        return MissingInput(kind="kernels", lack="offline", what=what, where=str(cached.parent))
    if url == upstream_url(target, release):
        return MissingInput(kind="kernels", lack="no-mirror", what=f"release {release.tag}",
                            upstream=f"{repository(target)}/releases", certain=False)
    return None


def fetch(target: Target, release: KernelsRelease, settings: sources.Settings) -> Path:
    """The release's wheel from the cache or its URL, checked against its sha256 when pins.toml has one."""
    url = located(target, release, settings)
    if isinstance(url, MissingInput):
        raise MissingInputs(target.name, [url])
    pin = sources.UrlPin(wanted_by=f"pins.toml (kernels-releases, {release.tag})",
                         fix=f"fix the sha256 of {release.tag} in pins.toml if it is wrong")
    return sources.fetch_url(f"{url}#sha256={release.sha256}" if release.sha256 else url, settings, pin)
