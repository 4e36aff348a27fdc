"""pins.toml -> frozen, validated dataclasses. Nothing unpinned gets through."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ds4x.errors import InputError

_SHA1 = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


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
        raise InputError(f"{where}: {value!r} is in upper case", f"write it in lower case: {value.lower()}")
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InputError(
            f"{where}: {value!r} is not a {what}",
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


def _git(where: str, raw: Any) -> GitPin:
    t = _table(where, raw, {"url", "commit"})
    return GitPin(url=t["url"], commit=_check(f"{where}.commit", t["commit"], _SHA1, "full 40-hex commit"))


def _artifact(where: str, raw: Any) -> Artifact:
    t = _table(where, raw, {"project", "version", "filename", "sha256"})
    _check(f"{where}.sha256", t["sha256"], _SHA256, "sha256 digest")
    return Artifact(**t)


_PLAIN = {"description", "default", "package", "overlays", "kernel-sources"}
_NESTED = {"git", "sdist", "wheel", "kernels-wheel"}


def _target(path: Path, name: str, raw: dict[str, Any]) -> Target:
    where = f"{path}: targets.{name}"
    unknown = set(raw) - _PLAIN - _NESTED
    if unknown:
        raise InputError(f"{where}: unknown keys {sorted(unknown)}")
    if "package" not in raw:
        raise InputError(f"{where}: missing 'package'", "name the import package")
    if not {"git", "sdist", "wheel"} & set(raw):
        raise InputError(f"{where}: no source", "give it a git, sdist or wheel pin")

    def artifact(key: str) -> Artifact | None:
        return _artifact(f"{where}.{key}", raw[key]) if key in raw else None

    return Target(
        name=name,
        description=raw.get("description", ""),
        default=bool(raw.get("default", False)),
        package=raw["package"],
        overlays=tuple(raw.get("overlays", ())),
        kernel_sources=tuple(raw.get("kernel-sources", ())),
        git=_git(f"{where}.git", raw["git"]) if "git" in raw else None,
        sdist=artifact("sdist"),
        wheel=artifact("wheel"),
        kernels_wheel=artifact("kernels-wheel"),
    )


def load(path: Path) -> Pins:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # a dependency on 3.10: imported here so that a missing one is reported, not a traceback
        import tomli as tomllib
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: not found", "run from the ds4x checkout or pass --pins") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: {e}", "fix the TOML syntax") from None
    targets = raw.get("targets", {})
    return Pins(path=path, targets={n: _target(path, n, t) for n, t in targets.items()})
