"""`--kernels release:TAG`: a release wheel of a target's git repository, for a tag
pins.toml lists (`kernels-releases`: tag; file name and sha256 when known), from
`<git url>/releases/download/<tag>/<file>` or through the mirror of that URL.

The mirrors are the same URL=REPLACEMENT pairs as for git (longest prefix
wins): a URL mirror of the repository serves `<mirror>/releases/download/<tag>/<file>`;
a mirror of `<repository>/releases` alone serves `<mirror>/download/<tag>/<file>`,
beside a local git mirror of the repository, which holds no release files.

A release whose file name pins.toml does not give is listed: a local (or file://)
mirror's `download/<tag>/` folder, else GitHub's API
(`https://api.github.com/repos/<owner>/<repo>/releases/tags/<tag>`, itself mapped
through the mirrors, and cached once its wheel is had), whose digest then checks
the download. Of the files listed, the one Linux x86_64 wheel is taken (the
repository's or the package's own project, and one built from the pin, preferred
among several); none, or several left, is one error naming them.
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from ds4x import inputs
from ds4x.build import sources
from ds4x.build.pins import KernelsRelease, Target
from ds4x.build.problems import MissingInput, MissingInputs
from ds4x.errors import Ds4xError, InputError
from ds4x.log import logger, step
from ds4x.scratch import atomic_write

GITHUB = "https://github.com/"
GITHUB_API = "https://api.github.com/repos/"
MAX_LISTING_BYTES = 16 * 2**20
_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")  # a listed name taken as it is: one URL path segment
_LINUX_X86_64 = re.compile(r"(?:linux|manylinux\w*)_x86_64")
_DIGEST = re.compile(r"sha256:([0-9a-fA-F]{64})")
_NAMED = "or name the release's wheel in kernels-releases in pins.toml (filename, and sha256 when known)"


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
        "(its tag, once its wheel's kernel sources are known to be the pin's; its file name and sha256 when known)",
    )


def repository(target: Target) -> str:
    assert target.git  # pins.load refuses kernels-releases without a git pin
    return target.git.url.rstrip("/").removesuffix(".git")


def upstream_url(target: Target, release: KernelsRelease) -> str:
    """Where GitHub serves the release's wheel (tag and name are URL-safe: pins.load checks them)."""
    assert release.filename  # a listed release's is chosen first (resolve)
    return f"{repository(target)}/releases/download/{release.tag}/{release.filename}"


def api_url(target: Target, tag: str) -> str | None:
    """GitHub's API for the release, None for a repository not on GitHub."""
    path = repository(target).removeprefix(GITHUB)
    if path == repository(target) or path.count("/") != 1:
        return None
    return f"{GITHUB_API}{path}/releases/tags/{tag}"


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


@dataclass(frozen=True, kw_only=True)
class Listing:
    """Where a release's files are listed."""

    where: str  # the local folder, or GitHub's API URL (after the mirrors)
    folder: Path | None  # a local folder holding the files; None: `where` is the API
    download: str  # where the files download from: <repository, or its mirror>/releases/download/<tag>


def _local(where: str) -> Path | None:
    """The folder a mirror's path or file:// URL names; None for another URL."""
    if "://" not in where:
        return Path(where)
    parsed = urllib.parse.urlparse(where)
    return Path(urllib.request.url2pathname(parsed.path)) if parsed.scheme == "file" else None


def listing(target: Target, tag: str, settings: sources.Settings) -> Listing | MissingInput:
    """Where the files of release `tag` are listed: a local mirror's folder, else
    GitHub's API (through its mirror, if one is set); or why a local mirror has none."""
    download = sources.resolve_url(f"{repository(target)}/releases/download/{tag}", settings.mirrors)
    folder = _local(download)
    if folder is not None:
        if folder.is_dir():
            return Listing(where=str(folder), folder=folder, download=download)
        return MissingInput(kind="kernels", lack="mirror-has-no-file", what=f"release {tag}",
                            upstream=f"{repository(target)}/releases", where=str(folder))
    api = api_url(target, tag)
    if api is None:
        raise InputError(
            f"--kernels release:{tag}: pins.toml names no file for release {tag}, and {repository(target)} "
            "is not on GitHub, whose API would list the release's files",
            f"mirror {repository(target)}/releases to a folder holding download/{tag}/ (--mirror / "
            f"{sources.MIRRORS_ENV}), {_NAMED}",
        )
    return Listing(where=sources.resolve_url(api, settings.mirrors), folder=None, download=download)


def _narrowed(names: list[str], keep: Callable[[str], bool]) -> list[str]:
    """Those `keep` prefers, if any; else all."""
    return [n for n in names if keep(n)] or names


def _built_from(name: str, commit: str) -> bool:
    """The wheel's version says it was built from `commit` (`+g<sha>`, 7 hex or more)."""
    local = parse_wheel_filename(name)[1].local or ""
    return any(re.fullmatch(r"g[0-9a-f]{7,40}", p) and commit.startswith(p[1:]) for p in local.split("."))


def choose(target: Target, tag: str, names: list[str], found: Listing) -> str:
    """The one Linux x86_64 wheel among a release's files that can be its kernels
    (the repository's or the package's project, and one built from the pin, preferred);
    none, or several left, is an error naming them."""
    wheels = sorted({n for n in names if _FILE.fullmatch(n) and inputs.is_wheel_name(n)})
    linux = [n for n in wheels if any(_LINUX_X86_64.fullmatch(t.platform) for t in parse_wheel_filename(n)[3])]
    own = {canonicalize_name(repository(target).rsplit("/", 1)[-1]), canonicalize_name(target.package)}
    chosen = _narrowed(linux, lambda n: canonicalize_name(parse_wheel_filename(n)[0]) in own)
    commit = target.git.commit if target.git else ""
    chosen = _narrowed(chosen, lambda n: _built_from(n, commit))
    if len(chosen) == 1:
        return chosen[0]
    if not chosen:
        raise InputError(
            f"--kernels release:{tag}: release {tag} has no Linux x86_64 wheel; {found.where} lists: "
            f"{', '.join(sorted(names)) or 'no files'}",
            f"give the kernels wheel with --kernels wheel:PATH_OR_URL, {_NAMED}",
        )
    raise InputError(
        f"--kernels release:{tag}: release {tag} has {len(chosen)} Linux x86_64 wheels that could be its kernels "
        f"({found.where}): {', '.join(chosen)}",
        f"pass the one to use as --kernels wheel:{found.download}/<one of them>, {_NAMED}",
    )


def _from_folder(target: Target, release: KernelsRelease, found: Listing) -> KernelsRelease:
    assert found.folder
    names = [p.name for p in found.folder.iterdir() if p.is_file()]
    return replace(release, filename=choose(target, release.tag, names, found))


def _from_api(target: Target, release: KernelsRelease, body: bytes, found: Listing) -> KernelsRelease:
    """The wheel chosen from GitHub's JSON for the release, with the sha256 its digest gives."""
    tag = release.tag
    fix = f"check the mirror set for {found.where.removesuffix(f'/releases/tags/{tag}')} (--mirror / {sources.MIRRORS_ENV})"
    try:
        data = json.loads(body)
        digests = {str(a["name"]): a.get("digest") for a in data["assets"]}
        named = data.get("tag_name", tag)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise Ds4xError(f"{found.where} is not a GitHub release (JSON with assets[].name): {e!r}", fix) from None
    if named != tag:
        raise Ds4xError(f"{found.where} is the release {inputs.shown(named)}, not {tag}", fix)
    filename = choose(target, tag, list(digests), found)
    digest = digests[filename]
    matched = _DIGEST.fullmatch(digest) if isinstance(digest, str) else None
    return replace(release, filename=filename, sha256=matched[1].lower() if matched else None)


def _read_api(tag: str, where: str) -> bytes:
    url = where if "://" in where else Path(where).absolute().as_uri()
    fix = (f"check the network, or map {where.removesuffix(f'/releases/tags/{tag}')} to a mirror "
           f"(--mirror / {sources.MIRRORS_ENV}), {_NAMED}")
    try:
        return sources.read_url(url, f"list release {tag}", MAX_LISTING_BYTES, {"Accept": "application/vnd.github+json"})
    except urllib.error.HTTPError as e:
        e.close()  # its response, unread
        if e.code == 404:
            raise InputError(f"--kernels release:{tag}: {where} has no release {tag} (HTTP 404)",
                             f"check that the repository has the tag, {fix}") from None
        raise Ds4xError(f"cannot list the files of release {tag}: {where}: {e}", fix) from e
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        raise Ds4xError(f"cannot list the files of release {tag}: {where}: {e}", fix) from e


def _known(target: Target, release: KernelsRelease, settings: sources.Settings) -> KernelsRelease | MissingInput | None:
    """The release with its file chosen, where that needs no network (a folder, or a
    cached listing); else why it cannot be had, or None where the network may tell."""
    found = listing(target, release.tag, settings)
    if isinstance(found, MissingInput):
        return found
    if found.folder:
        return _from_folder(target, release, found)
    cached = sources.url_cache_path(found.where, settings)
    if cached.exists():
        return _from_api(target, release, cached.read_bytes(), found)
    if settings.offline:
        return MissingInput(kind="kernels", lack="offline", what=f"release {release.tag}'s file list ({found.where})",
                            where=str(cached.parent))
    unmapped = f"{repository(target)}/releases/download/{release.tag}"
    if found.where == api_url(target, release.tag) and found.download == unmapped:
        return MissingInput(kind="kernels", lack="no-mirror", what=f"release {release.tag}",
                            upstream=f"{repository(target)}/releases", certain=False)
    return None


def missing(target: Target, release: KernelsRelease, settings: sources.Settings) -> MissingInput | None:
    """Why the release's wheel cannot be had on this run (certain=False: only if
    GitHub, which no mirror stands for, is unreachable), else None."""
    if release.filename is None:
        known = _known(target, release, settings)
        if not isinstance(known, KernelsRelease):
            return known
        release = known
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


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """A release with its wheel's file name, and sha256 when known."""

    release: KernelsRelease
    pin: sources.UrlPin  # who wants that sha256, in fetch_url's errors
    listing: bytes | None = None  # GitHub's JSON just read, to cache once its wheel is had
    cache: Path | None = None  # where the listing is cached


def resolve(target: Target, release: KernelsRelease, settings: sources.Settings) -> Resolved:
    """The release's wheel, as pins.toml names it or chosen from its listed files."""
    pinned = sources.UrlPin(wanted_by=f"pins.toml (kernels-releases, {release.tag})",
                            fix=f"fix the sha256 of {release.tag} in pins.toml if it is wrong")
    if release.filename:
        return Resolved(release=release, pin=pinned)
    found = listing(target, release.tag, settings)
    if isinstance(found, MissingInput):
        raise MissingInputs(target.name, [found])
    if found.folder:
        chosen = _from_folder(target, release, found)
        logger.info("release %s: %s, in %s", release.tag, chosen.filename, found.where)
        return Resolved(release=chosen, pin=pinned)
    cached = sources.url_cache_path(found.where, settings)
    body = None
    if cached.exists():
        chosen = _from_api(target, release, cached.read_bytes(), found)
    elif settings.offline:
        raise MissingInputs(target.name, [MissingInput(kind="kernels", lack="offline", where=str(cached.parent),
                                                       what=f"release {release.tag}'s file list ({found.where})")])
    else:
        with step(f"list the files of release {release.tag} ({found.where})"):
            body = _read_api(release.tag, found.where)
            chosen = _from_api(target, release, body, found)
    logger.info("release %s: %s (sha256 %s)", release.tag, chosen.filename, chosen.sha256 or "not listed")
    listed = sources.UrlPin(wanted_by=f"the release's listing ({found.where})",
                            fix=f"the file served is not the one the release lists: check the mirror set for {found.download}")
    return Resolved(release=chosen, pin=listed, listing=body, cache=cached)


def fetch(target: Target, release: KernelsRelease, settings: sources.Settings) -> Path:
    """The release's wheel from the cache or its URL, checked against its sha256 when
    pins.toml or the release's listing has one."""
    chosen = resolve(target, release, settings)
    url = located(target, chosen.release, settings)
    if isinstance(url, MissingInput):
        raise MissingInputs(target.name, [url])
    sha256 = chosen.release.sha256
    path = sources.fetch_url(f"{url}#sha256={sha256}" if sha256 else url, settings, chosen.pin)
    if chosen.listing is not None and chosen.cache:  # a listing is kept once its wheel is had: --offline reads it
        with atomic_write(chosen.cache, "wb") as out:
            out.write(chosen.listing)
    return path
