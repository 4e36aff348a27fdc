"""pins.toml -> frozen, validated dataclasses. Nothing unpinned gets through."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ds4x.errors import InputError
from ds4x.inputs import RELEASE_TAG, is_wheel_name, read_text, shown

_SHA1 = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TEXT = re.compile(r"[^\x00-\x08\x0b-\x1f\x7f]{0,500}")  # one line or a few, of printable text
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")  # a target, file, folder, project or version
_RELATIVE = re.compile(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._+/-]{0,199}")  # a path inside the tree
_URL = re.compile(r"[^\s\x00-\x1f\x7f]{1,500}")
MAX_PINS_BYTES = 2**20
SOURCE_KINDS = ("git", "sdist", "wheel")  # what a target can pin a base tree to (and --source chooses)


@dataclass(frozen=True, kw_only=True)
class GitPin:
    url: str
    commit: str


@dataclass(frozen=True, kw_only=True)
class Artifact:
    """A file on the package index, pinned by name and sha256."""

    project: str
    version: str
    filename: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class KernelsRelease:
    """A release of the target's git repository, known to match the pin, whose wheel
    `--kernels release:TAG` downloads (`<git url>/releases/download/<tag>/<filename>`,
    or its mirror); with no filename, the release's files are listed (releases.py)."""

    tag: str
    commit: str  # the tag's full commit: the kernel check's commit when the wheel's version names none
    filename: str | None = None  # None: chosen from the release's files
    sha256: str | None = None  # None: the download is checked only as `--kernels wheel:` is (or by a listed digest)


@dataclass(frozen=True, kw_only=True)
class Target:
    name: str
    description: str = ""
    default: bool = False
    package: str
    overlays: tuple[str, ...] = ()
    kernel_sources: tuple[str, ...] = ()
    git: GitPin | None = None
    sdist: Artifact | None = None
    wheel: Artifact | None = None
    kernels_wheel: Artifact | None = None
    # Not in the repr, which the series digest hashes: the table names where kernels
    # may come from; the wheel chosen is what the provenance records.
    kernels_releases: tuple[KernelsRelease, ...] = field(default=(), repr=False)

    @property
    def sources(self) -> tuple[str, ...]:
        """Where a base tree can come from, in order of preference."""
        kinds = ("wheel", "sdist", "git")
        return tuple(k for k in kinds if getattr(self, k) is not None)


@dataclass(frozen=True, kw_only=True)
class Pins:
    path: Path
    targets: dict[str, Target] = field(default_factory=dict)

    def get(self, name: str) -> Target:
        if name not in self.targets:
            known = ", ".join(sorted(self.targets))
            raise InputError(f"unknown target '{name}'", f"choose one of: {known}")
        return self.targets[name]

    @property
    def defaults(self) -> list[Target]:
        return [t for t in self.targets.values() if t.default]


def _check(where: str, value: Any, pattern: re.Pattern[str], what: str) -> str:
    if isinstance(value, str) and value != value.lower() and pattern.fullmatch(value.lower()):
        raise InputError(f"{where}: {shown(value)} is in upper case", f"write it in lower case: {value.lower()}")
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InputError(
            f"{where}: {shown(value)} is not a {what}",
            "pin exact values: a full 40-hex commit, a 64-hex sha256",
        )
    return value


def _table(where: str, raw: Any, keys: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise InputError(f"{where}: expected a table")
    unknown = set(raw) - keys
    missing = keys - set(raw)
    if unknown or missing:
        raise InputError(
            f"{where}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}",
            f"a {where.rsplit('.', 1)[-1]} table has exactly: {', '.join(sorted(keys))}",
        )
    return raw


def _text(where: str, value: Any, pattern: re.Pattern[str] = _TEXT, what: str = "a string") -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InputError(f"{where}: {shown(value)} is not {what}", f"write {where.rsplit('.', 1)[-1]} = \"...\"")
    return value


def _names(where: str, value: Any, pattern: re.Pattern[str] = _NAME) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise InputError(f"{where}: {shown(value)} is not a list", f'write {where.rsplit(".", 1)[-1]} = ["name", ...]')
    return tuple(_text(f"{where}[{i}]", v, pattern, "a plain name or path inside the tree") for i, v in enumerate(value))


def _git(where: str, raw: Any) -> GitPin:
    t = _table(where, raw, {"url", "commit"})
    url = _text(f"{where}.url", t["url"], _URL, "a URL or path without spaces or control characters")
    return GitPin(url=url, commit=_check(f"{where}.commit", t["commit"], _SHA1, "full 40-hex commit"))


def _artifact(where: str, raw: Any) -> Artifact:
    t = _table(where, raw, {"project", "version", "filename", "sha256"})
    _check(f"{where}.sha256", t["sha256"], _SHA256, "sha256 digest")
    return Artifact(project=_text(f"{where}.project", t["project"], _NAME, "a project name"),
                    version=_text(f"{where}.version", t["version"], _NAME, "a version"),
                    filename=_text(f"{where}.filename", t["filename"], _NAME, "a file name (no folder)"),
                    sha256=t["sha256"])


def _releases(where: str, raw: Any) -> tuple[KernelsRelease, ...]:
    if not isinstance(raw, list):
        raise InputError(f"{where}: {shown(raw)} is not a list",
                         'write kernels-releases = [{ tag = "...", commit = "<40 hex>" }, ...]')
    found: dict[str, KernelsRelease] = {}
    for number, item in enumerate(raw):
        at = f"{where}[{number}]"
        if not isinstance(item, dict) or not {"tag", "commit"} <= set(item) <= {"tag", "commit", "filename", "sha256"}:
            raise InputError(f"{at}: {shown(item)} is not a release",
                             'write { tag = "...", commit = "<its full 40-hex commit>" }, with filename = "....whl" '
                             'and sha256 = "..." when they are known')
        t: dict[str, Any] = item
        tag = _text(f"{at}.tag", t["tag"], RELEASE_TAG, "a release tag (letters, digits, '.', '_', '+', '-')")
        filename = None
        if "filename" in t:
            filename = _text(f"{at}.filename", t["filename"], _NAME, "a file name (no folder)")
            if not is_wheel_name(filename):
                raise InputError(f"{at}.filename: {shown(filename)} is not a wheel's file name",
                                 "give the release's .whl, named name-version-tags.whl")
        elif "sha256" in t:
            raise InputError(f"{at}: a sha256 without the file name it is of",
                             "give filename with it, or drop sha256 (a listed file is checked against its digest)")
        if tag in found:
            raise InputError(f"{at}: tag {tag} is listed twice", "keep one entry per release")
        sha256 = _check(f"{at}.sha256", t["sha256"], _SHA256, "sha256 digest") if "sha256" in t else None
        commit = _check(f"{at}.commit", t["commit"], _SHA1, "full 40-hex commit")
        found[tag] = KernelsRelease(tag=tag, commit=commit, filename=filename, sha256=sha256)
    return tuple(found.values())


_PLAIN = {"description", "default", "package", "overlays", "kernel-sources", "kernels-releases"}
_NESTED = {*SOURCE_KINDS, "kernels-wheel"}


def _target(path: Path, name: str, raw: dict[str, Any]) -> Target:
    where = f"{path}: targets.{name}"
    if not _NAME.fullmatch(name):
        raise InputError(f"{where}: the name is not plain", "name a target with letters, digits, '.', '_' or '-'")
    if not isinstance(raw, dict):
        raise InputError(f"{where}: {shown(raw)} is not a table", f"write [targets.{name}] with its keys")
    unknown = set(raw) - _PLAIN - _NESTED
    if unknown:
        raise InputError(f"{where}: unknown keys {sorted(unknown)}")
    if "package" not in raw:
        raise InputError(f"{where}: missing 'package'", "name the import package")
    if not set(SOURCE_KINDS) & set(raw):
        raise InputError(f"{where}: no source", "give it a git, sdist or wheel pin")

    def artifact(key: str) -> Artifact | None:
        return _artifact(f"{where}.{key}", raw[key]) if key in raw else None

    if raw.get("kernels-releases") and "git" not in raw:
        raise InputError(f"{where}.kernels-releases: the releases are of the git repository, and there is no git pin",
                         "pin the target's git url and commit, or drop kernels-releases")
    default = raw.get("default", False)
    if not isinstance(default, bool):
        raise InputError(f"{where}.default: {shown(default)} is not true or false", "write default = true or false")
    return Target(
        name=name,
        description=_text(f"{where}.description", raw.get("description", "")),
        default=default,
        package=_text(f"{where}.package", raw["package"], _NAME, "an import package name"),
        overlays=_names(f"{where}.overlays", raw.get("overlays", [])),
        kernel_sources=_names(f"{where}.kernel-sources", raw.get("kernel-sources", []), _RELATIVE),
        git=_git(f"{where}.git", raw["git"]) if "git" in raw else None,
        sdist=artifact("sdist"),
        wheel=artifact("wheel"),
        kernels_wheel=artifact("kernels-wheel"),
        kernels_releases=_releases(f"{where}.kernels-releases", raw.get("kernels-releases", [])),
    )


def load(path: Path) -> Pins:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # a dependency on 3.10: imported here so that a missing one is reported, not a traceback
        import tomli as tomllib
    text = read_text(path, "--pins ", MAX_PINS_BYTES)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: {e}", "fix the TOML syntax") from None
    targets = raw.get("targets")
    if set(raw) != {"targets"} or not isinstance(targets, dict) or not targets:
        raise InputError(f"{path}: expected one [targets] table with at least one [targets.<name>], and nothing else",
                         "see the pins.toml of the ds4x checkout")
    return Pins(path=path, targets={n: _target(path, n, t) for n, t in targets.items()})
